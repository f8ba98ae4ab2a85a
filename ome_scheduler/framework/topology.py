"""Topology level names: a gang domain under a preferred level (``R>P`` = ``r,p``), read from a
node's labels and written for users (``docs/design/gang-scheduling.md`` §3.9).

A domain of a preferred level ``P`` inside the required key ``R`` is named by the *level key*
``R>P`` and the *level value* ``r,p`` for the nodes labelled ``R=r`` and ``P=p``. Neither
``>`` nor ``,`` may appear in a label key or value, so these names never collide with a plain
key and value, and a ``P`` value seen under two ``R`` values names two domains. What keys state
by a (key, value) pair works on them unchanged; what reads a node's domain from its labels
calls :func:`domain_value`. Lives in the framework because the PodGroup status controller
writes these names too. Pure; upstream has no counterpart (kube-scheduler has no gangs).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

_SEP_KEY: Final = ">"
_SEP_VALUE: Final = ","


def level_key(required: str, preferred: str) -> str:
    """The level key of ``preferred`` inside ``required`` (``R>P``)."""
    return f"{required}{_SEP_KEY}{preferred}"


def is_composite(key: str) -> bool:
    """Whether ``key`` is a preferred level's key (``R>P``), not a plain label key."""
    return _SEP_KEY in key


def domain_value(labels: Mapping[str, str], key: str) -> str:
    """The node's domain under ``key``: its label value, or ``r,p`` for a level key ``R>P``;
    ``""`` when the node lacks a label it needs (it belongs to no domain of that level)."""
    if _SEP_KEY not in key:
        return labels.get(key, "")
    required, _, preferred = key.partition(_SEP_KEY)
    r = labels.get(required, "")
    p = labels.get(preferred, "")
    return f"{r}{_SEP_VALUE}{p}" if r and p else ""


def required_value(key: str, value: str) -> str:
    """The required level's value of a domain (``r`` of ``r,p``; a plain value unchanged)."""
    return value.partition(_SEP_VALUE)[0] if _SEP_KEY in key else value


def describe(key: str, value: str) -> str:
    """A domain as users read it: ``R=r`` or ``R=r,P=p`` (the form of ``ome.io/placement-domain``)."""
    if _SEP_KEY not in key:
        return f"{key}={value}"
    required, _, preferred = key.partition(_SEP_KEY)
    r, _, p = value.partition(_SEP_VALUE)
    return f"{required}={r},{preferred}={p}"


def required_key(key: str) -> str:
    """The required key of a level key (``R`` of ``R>P``; a plain key unchanged)."""
    return key.partition(_SEP_KEY)[0]


def label_of(key: str) -> str:
    """The label key a level is named after (``P`` of ``R>P``)."""
    return key.rpartition(_SEP_KEY)[2]


def parse_described(key: str, text: str) -> str:
    """The level value a :func:`describe` text names under ``key`` (``r,p`` of ``R=r,P=p``); a
    plain key's text is its value already. ``""`` when ``text`` does not name a domain of ``key``."""
    if _SEP_KEY not in key:
        return text
    required, _, preferred = key.partition(_SEP_KEY)
    head, sep, tail = text.partition(f"{_SEP_VALUE}{preferred}=")
    if not sep or not head.startswith(f"{required}="):
        return ""
    r = head[len(required) + 1 :]
    return f"{r}{_SEP_VALUE}{tail}" if r and tail else ""
