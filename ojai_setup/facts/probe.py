"""Asking an installed ``llama-server`` what it supports (``--version``, ``--help``): the one place a
binary is run to learn a fact; the parsing is :mod:`ojai_setup.formats.llama_help`."""

from typing import TYPE_CHECKING, NamedTuple

from ojai_setup.core.root import Root

if TYPE_CHECKING:
    from ojai_setup.formats.llama_help import Dialect


class ProbeError(NamedTuple):
    """Why a binary's dialect could not be read."""

    binary: str
    command: str
    exit_code: int
    message: str

    def describe(self) -> str:
        return f"{self.binary}: `{self.command}` failed (exit {self.exit_code}): {self.message}"


# -- reading ---------------------------------------------------------------------------------
def probe(root: Root, binary: str, *, timeout: float = 60.0) -> "Dialect | ProbeError":
    """Run ``binary --version`` and ``binary --help`` on the machine and parse both.

    ``binary`` is a machine path (or a program name on the machine's PATH).
    """
    ver = root.run([binary, "--version"], timeout=timeout)
    if not ver.ok:
        return ProbeError(binary=binary, command=f"{binary} --version", exit_code=ver.exit_code,
                          message=_last_line(ver.stderr or ver.stdout) or "no output")
    # parsed only when there is a binary to parse (doctor on a machine without one never is)
    from ojai_setup.formats.llama_help import DialectParseError, parse_help, parse_version

    try:
        version = parse_version(ver.stderr + "\n" + ver.stdout)
    except DialectParseError as exc:
        return ProbeError(binary=binary, command=f"{binary} --version", exit_code=ver.exit_code,
                          message=str(exc))
    helped = root.run([binary, "--help"], timeout=timeout)
    if not helped.ok:
        return ProbeError(binary=binary, command=f"{binary} --help", exit_code=helped.exit_code,
                          message=_last_line(helped.stderr or helped.stdout) or "no output")
    try:
        return parse_help(helped.stdout, version=version)
    except DialectParseError as exc:
        return ProbeError(binary=binary, command=f"{binary} --help", exit_code=helped.exit_code,
                          message=str(exc))


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""
