"""The one root of every error ojai expects, and its few kinds.

The command line catches :class:`OjaiError` and prints its message (no traceback); anything
else is a bug. Module errors subclass one of these kinds, so a caller can catch the kind it
can handle.
"""

from __future__ import annotations


class OjaiError(Exception):
    """An expected failure; the message says what happened and what to do."""


class UsageError(OjaiError, ValueError):
    """The user asked for something ojai cannot do as asked (a bad option value, a bad file)."""


class InputError(OjaiError, ValueError):
    """A file or output ojai reads or edits cannot be understood safely."""


class RemoteError(OjaiError):
    """A remote service (GitHub, the Hugging Face Hub) could not answer what ojai needs."""


class StateError(OjaiError, RuntimeError):
    """ojai's own state (journal, state file, lock) cannot be read or written."""


class ApplyError(OjaiError, RuntimeError):
    """An apply stopped; the message says where and what to do."""
