"""Kernel parameters as the kernel reads them: the rules every boot path's format shares (pure).

- ``/proc/cmdline`` (and any command line) is split at whitespace outside ``"`` quotes, the
  quotes kept in the parameters (:func:`parse_cmdline`);
- a parameter's name is what comes before its first ``=``, a leading ``"`` skipped
  (``"foo=a b"``), and two names are the same when they differ only in ``-`` and ``_``
  (``ttm.pages-limit`` is ``ttm.pages_limit``) (:func:`param_key`, :func:`same_key`);
- its value is what follows, quotes removed; a bare flag has none (:func:`param_value`);
- when a name is given more than once, the last one wins, as for module parameters
  (:func:`cmdline_param`).

What ojai itself writes is kept to parameters that never need quoting (:data:`SAFE_KEY`,
:data:`SAFE_VALUE`). The formats that hold a command line (``formats/grub.py``,
``formats/kernel_cmdline.py``, ``formats/kernelstub.py``, ``formats/limine.py``,
``formats/modprobe.py``) read and edit their files with these rules.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

#: characters allowed in a key or value that ojai writes (no quoting ever needed)
SAFE_KEY = r"[A-Za-z0-9_.-]+"


SAFE_VALUE = r"[A-Za-z0-9_.,:/+@%-]*"


def _norm(key: str) -> str:
    return key.replace("-", "_")


def param_key(token: str) -> str:
    """The parameter name of one kernel command line token (``"a=b"`` -> ``a``)."""
    body = token[1:] if token.startswith('"') else token
    return body.split("=", 1)[0]


def param_value(token: str) -> str | None:
    """The value the kernel sees for one token: quotes stripped, None for a bare flag."""
    quoted = token.startswith('"')
    body = token[1:] if quoted else token
    if "=" not in body:
        return None
    value = body.split("=", 1)[1]
    if value.startswith('"'):
        value = value[1:]
        if value.endswith('"'):
            value = value[:-1]
    elif quoted and value.endswith('"'):
        value = value[:-1]
    return value


def same_key(a: str, b: str) -> bool:
    """Whether two parameter names are the same to the kernel (``-`` equals ``_``)."""
    return _norm(a) == _norm(b)


def has_key(token: str, keys: Sequence[str]) -> bool:
    """Whether ``token`` sets one of ``keys`` (compared as the kernel compares names)."""
    return any(same_key(param_key(token), k) for k in keys)


def parse_cmdline(text: str) -> list[str]:
    """Split ``/proc/cmdline`` into tokens as the kernel does (quotes kept in the tokens)."""
    tokens: list[str] = []
    current: list[str] = []
    in_quote = False
    for c in text:
        if c.isspace() and not in_quote:
            if current:
                tokens.append("".join(current))
                current = []
            continue
        if c == '"':
            in_quote = not in_quote
        current.append(c)
    if current:
        tokens.append("".join(current))
    return tokens


def cmdline_param(tokens: Sequence[str], key: str) -> str | None:
    """The value of ``key`` in a token list: the last one wins, as for module parameters.

    A bare ``key`` gives ``""``; an absent key gives None.
    """
    result: str | None = None
    for token in tokens:
        if same_key(param_key(token), key):
            value = param_value(token)
            result = "" if value is None else value
    return result


def check_writable(key: str, value: str | None) -> None:
    """Raise ValueError unless ``key`` (and ``value``) are what ojai writes unquoted."""
    if not re.fullmatch(SAFE_KEY, key):
        raise ValueError(f"not a kernel parameter name ojai writes: {key!r}")
    if value is not None and not re.fullmatch(SAFE_VALUE, value):
        raise ValueError(f"not a kernel parameter value ojai writes: {value!r}")


def expected_others(tokens: Sequence[str], key: str, drop_keys: Sequence[str]) -> list[str]:
    """The parameters that must stay as they are: all but ``key`` and ``drop_keys``."""
    return [t for t in tokens if not has_key(t, (key, *drop_keys))]
