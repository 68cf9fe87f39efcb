"""The ``ojai`` command line. Commands parse options, call the library, and hand results to
the :class:`~ojai_setup.terminal.Terminal`; heavy modules are imported inside commands."""

from __future__ import annotations

from enum import IntEnum
from pathlib import Path
from typing import Annotated, Optional

import typer

from . import __version__

app = typer.Typer(
    name="ojai",
    help="Turn an AMD Ryzen AI mini-PC into a fast local LLM server, safely and repeatably.\n\n"
    "Start with `ojai doctor`, review `ojai setup`, then `ojai setup --apply`.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


class ExitStatus(IntEnum):
    OK = 0
    ERROR = 1  # doctor: a check failed; setup: an error or a blocked step
    CHANGES = 2  # setup dry run: changes pending
    USAGE = 64


RootOpt = Annotated[Path, typer.Option(
    "--root", help="Machine root: / for this machine, or a directory holding a captured or "
    "test machine (no host command runs then).", show_default=True)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON (schema in README).")]
ProfileOpt = Annotated[Optional[str], typer.Option(
    "--profile", help="Force a hardware profile (ojai, strix-halo, generic) instead of detecting it.")]


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"ojai {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: Annotated[bool, typer.Option(
        "--version", callback=_version_callback, is_eager=True, help="Show the version and exit.")] = False) -> None:
    pass


def _fail(term, message: str, code: int = ExitStatus.ERROR):
    term.error(message)
    raise typer.Exit(int(code))


@app.command()
def doctor(
    root: RootOpt = Path("/"),
    json_out: JsonOpt = False,
    profile: ProfileOpt = None,
    capture: Annotated[Optional[Path], typer.Option(
        "--capture", help="Also record everything doctor read into FILE.tar.gz (serials and user "
        "names removed); `ojai doctor --root <unpacked dir>` replays it.")] = None,
    example: Annotated[Optional[str], typer.Option(
        "--example", help="Run on a bundled example machine instead (e.g. ojai-fresh: an OJAI "
        "box before setup).")] = None,
) -> None:
    """Detect the hardware and check every precondition, with a fix for each failure.

    Exit code 0 when nothing fails, 1 when a check fails. Needs no root privileges.
    """
    from .doctor import run_doctor
    from .terminal import Terminal

    term = Terminal(json_mode=json_out)
    if example is not None:
        from .resources import example_root

        try:
            root = example_root(example)
        except FileNotFoundError as exc:
            _fail(term, str(exc), ExitStatus.USAGE)
    if not root.is_dir():
        _fail(term, f"--root {root}: not a directory", ExitStatus.USAGE)
    try:
        code = run_doctor(term, root, profile_name=profile, capture=capture)
    except (ValueError, OSError) as exc:
        _fail(term, str(exc))
    raise typer.Exit(int(code))


def main() -> None:
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
