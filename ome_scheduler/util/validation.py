"""Kubernetes name validators with upstream's exact error strings.

Mirrors ``k8s.io/apimachinery/pkg/api/validate/content/kube.go`` (``IsQualifiedName``, an
alias of ``IsLabelKey``) and ``dns.go`` (``IsDNS1123Subdomain``, ``IsDNS1123Label``), so a
configuration error names the same problem kube-scheduler would.
"""

from __future__ import annotations

import re

_LABEL_KEY_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_KEY_ERR = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
)
_LABEL_KEY_RE = re.compile(f"^{_LABEL_KEY_FMT}$")
_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1123_SUBDOMAIN_ERR = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_RE = re.compile(f"^{_DNS1123_SUBDOMAIN_FMT}$")
_DNS1123_LABEL_ERR = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)
_DNS1123_LABEL_RE = re.compile(f"^{_DNS1123_LABEL_FMT}$")


def regex_error(msg: str, fmt: str, *examples: str) -> str:
    """``RegexError``: the message, examples and the regex used."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    return msg + " (e.g. " + " or ".join(f"'{e}', " for e in examples) + f"regex used for validation is '{fmt}')"


def is_dns1123_subdomain(value: str) -> list[str]:
    """Errors for a DNS-1123 subdomain (at most 253 bytes); empty when valid."""
    errs: list[str] = []
    if len(value.encode()) > 253:  # Go's len() counts bytes, not characters
        errs.append("must be no more than 253 bytes")
    if not _DNS1123_SUBDOMAIN_RE.match(value):
        errs.append(regex_error(_DNS1123_SUBDOMAIN_ERR, _DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


def is_dns1123_label(value: str) -> list[str]:
    """Errors for a DNS-1123 label (at most 63 bytes); empty when valid."""
    errs: list[str] = []
    if len(value.encode()) > 63:
        errs.append("must be no more than 63 bytes")
    if not _DNS1123_LABEL_RE.match(value):
        errs.append(regex_error(_DNS1123_LABEL_ERR, _DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return errs


def is_qualified_name(value: str) -> list[str]:
    """Errors for a qualified name (a label key or annotation key); empty when valid."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + m for m in is_dns1123_subdomain(prefix))
    else:
        return [
            "a valid label key "
            + regex_error(_LABEL_KEY_ERR, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name.encode()) > 63:
        errs.append("name part must be no more than 63 bytes")
    if not _LABEL_KEY_RE.match(name):
        errs.append("name part " + regex_error(_LABEL_KEY_ERR, _LABEL_KEY_FMT, "MyName", "my.name", "123-abc"))
    return errs
