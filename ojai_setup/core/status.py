"""Exit statuses of every ojai command (the README's table)."""

from __future__ import annotations

from enum import IntEnum


class ExitStatus(IntEnum):
    """What a command's exit code means, for every command."""

    #: done, or nothing to do
    OK = 0
    #: a check failed, a step is blocked, or an error stopped the command
    FAILED = 1
    #: ``ojai setup`` dry run only: changes are pending
    CHANGES = 2
    #: ``ojai setup --apply`` only: every step that could be applied was, but steps are left
    #: out, blocked or waiting for a blocked one (the last line names them)
    INCOMPLETE = 3
    #: the command line itself is wrong (sysexits' EX_USAGE)
    USAGE = 64
    #: ``ojai setup --apply`` stopped by Ctrl-C (SIGINT) or SIGTERM, as shells count 128 + 2
    INTERRUPTED = 130
