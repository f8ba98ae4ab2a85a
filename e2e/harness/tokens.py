"""Every bearer token the e2e suite was issued in this process, so that no log may hold one.

Tokens come from TokenRequests (``Cluster.create_token``, ``Api.request_token``); each is
recorded here as it is issued. ``e2e/test_rbac.py`` greps every log the suite produced for them
at the end of the session.
"""

from __future__ import annotations

_ISSUED: list[str] = []


def remember(token: str) -> str:
    """Record ``token`` as issued and return it unchanged."""
    if token and token not in _ISSUED:
        _ISSUED.append(token)
    return token


def issued() -> tuple[str, ...]:
    """The tokens issued so far, oldest first."""
    return tuple(_ISSUED)


def needles(token: str) -> list[str]:
    """What would give ``token`` away in a log: the whole token and, for a JWT, its payload
    (unique to the token) and its signature (the secret part), each of which alone must not
    appear either. The header is left out: every token signed by one key shares it."""
    parts = token.split(".")
    if len(parts) != 3:
        return [token]
    return [token, parts[1], parts[2]]
