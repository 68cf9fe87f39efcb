"""Run ojai's command line as an unprivileged user: ``python as_nobody.py ARGS...`` prints its
stdout, then its stderr after a line ``--stderr--``, and exits with its exit code.

Run by root (the test suite's usual user), it imports everything ojai and its libraries may
load, then drops its effective user and group to ``nobody`` (65534) before parsing ``ARGS``:
the files of the machine root are then read with nobody's rights, as a user's ``ojai setup``
reads them, while this interpreter (which may live under a root-only folder) is already loaded.
Run by any other user, it runs ``ARGS`` as that user. With ``AS_NOBODY_TERMINAL=1`` the
command runs in the terminal it was started in (a question is asked there), its output not
captured."""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys

NOBODY = 65534


def _load_everything() -> None:
    import ojai_setup

    for module in pkgutil.walk_packages(ojai_setup.__path__, "ojai_setup."):
        try:
            importlib.import_module(module.name)
        except Exception:  # noqa: BLE001 - a module for another command (bench's plots)
            pass
    for name in ("rich.console", "rich.table", "rich.text", "rich.markup", "rich.prompt",
                 "rich.progress", "rich.padding", "rich._wrap", "rich.cells", "json", "tomllib",
                 "shlex", "difflib", "tempfile", "hashlib", "fcntl", "pwd", "getpass",
                 "typer.testing", "encodings.idna"):
        importlib.import_module(name)


def main(args: list[str]) -> int:
    _load_everything()
    from typer.testing import CliRunner

    from ojai_setup.cli import app

    if os.geteuid() == 0:
        os.setegid(NOBODY)
        os.seteuid(NOBODY)
    if os.environ.get("AS_NOBODY_TERMINAL") == "1":  # in the terminal it was started in
        try:
            app(args, prog_name="ojai")
        except SystemExit as exc:
            return int(exc.code or 0)
        return 0
    result = CliRunner().invoke(app, args, env={"COLUMNS": "80", "NO_COLOR": "1"})
    sys.stdout.write(result.stdout + "--stderr--\n" + result.stderr)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        import traceback

        traceback.print_exception(*result.exc_info, file=sys.stdout)
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
