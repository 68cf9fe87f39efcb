"""A guard that makes a step's ``plan`` fail the moment it leaves pure planning.

Inside :func:`pure`, opening a network connection, starting a process or reading the host's
environment raises :class:`Impure`; reading files (through the machine root) stays allowed.
"""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager

import pytest


class Impure(AssertionError):
    """A step did I/O that belongs to gathering, not planning."""


#: variables libraries read for themselves while a step runs (pydantic looks for plugins the
#: first time a model class validates); a step's own code never asks for these
LIBRARY_KEYS = frozenset({"PYDANTIC_DISABLE_PLUGINS"})


class _GuardedEnviron(MutableMapping):
    def __init__(self, real: MutableMapping) -> None:
        self._library = {k: real[k] for k in LIBRARY_KEYS if k in real}

    def _refuse(self, key=None, *args, **kwargs):
        raise Impure(f"a step read the host's environment (os.environ, {key!r})")

    def get(self, key, default=None):
        if key in LIBRARY_KEYS:
            return self._library.get(key, default)
        self._refuse(key)

    def __getitem__(self, key):
        if key in LIBRARY_KEYS and key in self._library:
            return self._library[key]
        self._refuse(key)

    __setitem__ = __delitem__ = __iter__ = __len__ = _refuse
    keys = items = values = copy = __contains__ = _refuse


@contextmanager
def pure(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    def no_connect(*args, **kwargs):
        raise Impure("a step opened a network connection")

    def no_process(*args, **kwargs):
        raise Impure("a step started a process")

    with monkeypatch.context() as m:
        m.setattr(socket.socket, "connect", no_connect)
        m.setattr(socket, "create_connection", no_connect)
        m.setattr(subprocess.Popen, "__init__", no_process)
        m.setattr(os, "system", no_process)
        m.setattr(os, "environ", _GuardedEnviron(os.environ))
        yield
