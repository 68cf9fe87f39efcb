"""Asking an installed ``llama-server`` what it supports (``--version``, ``--help``): the one place a
binary is run to learn a fact; the parsing is :mod:`ojai_setup.formats.llama_help`."""

from pathlib import Path
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


# -- the model architectures a build loads ---------------------------------------------------
#: build 11434's architecture names (``src/llama-arch.cpp``), for the build ojai plans against
REFERENCE_ARCHS = Path(__file__).resolve().parent.parent / "formats" / "reference-archs-b11434.txt"
REFERENCE_BUILD = 11434


def reference_architectures() -> frozenset[str]:
    text = REFERENCE_ARCHS.read_text(encoding="utf-8")
    return frozenset(line.strip() for line in text.splitlines()
                     if line.strip() and not line.startswith("#"))


def architecture_known(root: Root, binary: str | None, build: int | None,
                       arch: str) -> tuple[bool | None, str]:
    """Whether the llama-server ``binary`` (of ``build``; None: the one ojai installs, build
    11434) loads models of architecture ``arch``, and which build said so.

    A build's architecture names are strings of its ``libllama.so``: an installed binary with
    that library beside it (ojai's nightly and source installs) is asked there, the name as a
    string of its own (``\\0name\\0``), or, for a name build 11434 knows, as the tail of a longer
    one (the linker stores ``bert`` inside ``nomic-bert``). Otherwise build 11434's list
    answers for build 11434; for another build nothing is known (None)."""
    if binary is not None and binary.startswith("/"):
        folder = root.resolve(binary).parent
        libs = [p for p in sorted(folder.glob("libllama.so*")) if p.is_file() and not p.is_symlink()]
        if libs:
            name = arch.encode()
            reference = reference_architectures()
            for lib in libs:
                try:
                    data = lib.read_bytes()
                except OSError:
                    continue
                if b"\0" + name + b"\0" in data or (arch in reference and name + b"\0" in data):
                    return True, f"its {lib.name}"
            return False, f"its {libs[0].name}"
    if build is None or build == REFERENCE_BUILD:
        return arch in reference_architectures(), f"build {REFERENCE_BUILD}'s list"
    return None, ""
