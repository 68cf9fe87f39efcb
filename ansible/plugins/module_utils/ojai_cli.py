# Copyright: ojai developers
# MIT License (see LICENSE in the collection or https://opensource.org/license/mit)
# SPDX-License-Identifier: MIT
"""Running the ``ojai`` command line of the managed host and reading its ``--json`` output.

The modules of this collection never import ojai: they call the ``ojai`` executable the host
has (the virtualenv the ``ojai.ojai.server`` role makes, or any other install) and read its
documented JSON, so the collection works with any ojai whose JSON schemas it knows. Every
failure of ojai becomes a failed task whose message is ojai's own sentence; a Python traceback
never reaches the play output.
"""

from __future__ import annotations

import json
import os

#: where the ojai.ojai.server role installs ojai; searched after PATH
DEFAULT_VENV_BIN = "/opt/ojai/venv/bin"

#: ojai's exit codes (README: 0 nothing to do, 2 changes pending, 1 error or blocked, 64 usage)
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_CHANGES = 2
EXIT_USAGE = 64

COMMON_ARGS = dict(
    executable=dict(type="path"),
    root=dict(type="path", default="/"),
    profile=dict(type="str"),
)


class OjaiFailure(Exception):
    """ojai failed; ``message`` is what ojai said (or why it could not be run)."""

    def __init__(self, message, rc=None, **extra):
        super().__init__(message)
        self.message = message
        self.rc = rc
        self.extra = extra


def find_executable(module):
    """The ``ojai`` to run: the ``executable`` option, else PATH, else the role's venv."""
    given = module.params.get("executable")
    if given:
        if not (os.path.isfile(given) and os.access(given, os.X_OK)):
            raise OjaiFailure(f"executable {given}: no such executable file on this host; "
                              f"install ojai there (the ojai.ojai.server role does) or "
                              f"correct the path")
        return given
    found = module.get_bin_path("ojai", opt_dirs=[DEFAULT_VENV_BIN])
    if not found:
        raise OjaiFailure(f"ojai is not installed on this host (not on PATH, not in "
                          f"{DEFAULT_VENV_BIN}); install it with the ojai.ojai.server role or "
                          f"set the executable option")
    return found


def clean_message(stderr, stdout=""):
    """ojai's error sentence from its stderr: the ``error:`` lines without the prefix; for a
    crash, the exception's last line, never the traceback."""
    text = (stderr or "").strip()
    lines = [ln.rstrip() for ln in text.splitlines()]
    if any(ln.startswith("Traceback (most recent call last)") for ln in lines):
        last = next((ln for ln in reversed(lines) if ln and not ln.startswith(" ")), "")
        return f"ojai stopped on an internal error: {last or 'no message'}"
    for i, ln in enumerate(lines):
        if ln.startswith("error: "):
            rest = [ln[len("error: "):]] + [x.strip() for x in lines[i + 1:] if x.strip()]
            return " ".join(rest)
    # typer/click usage errors are drawn in a box: keep the words, drop the frame
    words = [ln.strip(" │╭╮╰╯─").strip() for ln in lines]
    words = [w for w in words if w and not w.startswith("Usage:") and not w.startswith("Try '")
             and w != "Error"]
    words = [w[len("Error: "):] if w.startswith("Error: ") else w for w in words]
    return " ".join(words) or (stdout or "").strip()[-400:] or "no message"


def run_ojai(module, args, *, check_rc=True):
    """Run ``ojai ARGS``; return ``(rc, stdout, stderr)``. Raise :class:`OjaiFailure` with
    ojai's message when it cannot be run."""
    exe = find_executable(module)
    env = dict(NO_COLOR="1", TERM="dumb", COLUMNS="200", PYTHONUNBUFFERED="1")
    try:
        rc, out, err = module.run_command([exe, *args], environ_update=env, check_rc=False)
    except Exception as exc:  # run_command reports OSError itself; anything else stays short
        raise OjaiFailure(f"could not run {exe}: {exc}") from None
    return rc, out, err


def parse_json(text, *, schema_key=None):
    """The JSON document ojai printed, or None when stdout holds none."""
    text = (text or "").strip()
    if not text.startswith("{"):
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def fail(module, exc, **result):
    """``fail_json`` with ojai's message and the results gathered so far."""
    extra = dict(exc.extra)
    if exc.rc is not None:
        extra["rc"] = exc.rc
    module.fail_json(msg=exc.message, **{**result, **extra})
