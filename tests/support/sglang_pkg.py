"""SGLang's own argument declarations, from the real PyPI package, for the SGLang route's tests.

The ``sglang`` wheel needs torch and CUDA packages (gigabytes) to import its server-argument
parser; its declarations are plain Python source. So the wheel alone is fetched once with
``pip download --no-deps`` (39 MB), its sha256 is checked against the one pinned here, and only
the files SGLang declares its server arguments in (and the few that
``sglang_parser.py`` needs to build SGLang's parser of them) are unpacked::

    ${OJAI_TEST_CACHE:-~/.cache/ojai-tests}/sglang/<version>-<wheel sha256[:16]>-<hash of the kept paths>/
        sglang/srt/arg_groups/...  sglang/srt/server_args.py  sglang/srt/speculative/spec_*.py

A file lock keeps two processes from unpacking at once. Run this file as a script to fetch it
ahead of pytest.
"""

from __future__ import annotations

import hashlib
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make support importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from support import pinned_wheels  # noqa: E402

PACKAGE = "sglang"
VERSION = "0.5.23"
WHEEL = f"sglang-{VERSION}-cp311-cp311-manylinux_2_34_x86_64.whl"
WHEEL_SHA256 = "00b3cd5b265ac76c64185fbb6b95424f324ddd9f428d0306b77bc9db9d859937"
#: the package files the argument table is read from (paths inside the wheel)
KEEP = ("sglang/srt/arg_groups/", "sglang/srt/server_args.py",
        "sglang/srt/speculative/spec_info.py", "sglang/srt/speculative/spec_registry.py",
        "sglang/version.py", "sglang/_version.py", "sglang/srt/utils/common.py",
        "sglang/srt/utils/aio_rwlock.py", "sglang/srt/lora/lora_registry.py",
        "sglang/srt/model_executor/cuda_graph_config.py", "sglang/srt/runtime_context.py",
        "sglang/srt/environ.py",
        f"sglang-{VERSION}.dist-info/entry_points.txt")


def cache_dir() -> Path:
    kept = hashlib.sha256("\n".join(KEEP).encode()).hexdigest()[:8]  # a new KEEP, a new folder
    return pinned_wheels.cache_base() / "sglang" / f"{VERSION}-{WHEEL_SHA256[:16]}-{kept}"


def _kept(name: str) -> bool:
    return any(name == k or (k.endswith("/") and name.startswith(k) and name.endswith(".py"))
               for k in KEEP)


def _fetch_and_unpack(staging: Path) -> None:
    with tempfile.TemporaryDirectory(dir=staging.parent) as tmp:
        # the wheel is for CPython 3.11 on manylinux; it is only read, so ask for it whatever
        # interpreter runs the tests
        pinned_wheels.download([f"{PACKAGE}=={VERSION}"], {WHEEL: WHEEL_SHA256}, Path(tmp),
                               "--python-version", "3.11", "--platform", "manylinux_2_34_x86_64")
        pinned_wheels.unpack(Path(tmp) / WHEEL, staging, _kept)
    if not (staging / "sglang/srt/arg_groups/fields/spec.py").is_file() or \
            not (staging / f"sglang-{VERSION}.dist-info/entry_points.txt").is_file():
        raise RuntimeError(f"{WHEEL} holds no sglang/srt/arg_groups/fields/spec.py")


def ensure_sglang_sources() -> Path:
    """The folder holding the ``sglang/`` package files the argument table is read from."""
    return pinned_wheels.once(cache_dir(), _fetch_and_unpack)


def package_files() -> dict[str, str]:
    """Path inside the ``sglang`` package -> text, for :func:`read_table`."""
    base = ensure_sglang_sources() / "sglang"
    return {p.relative_to(base).as_posix(): p.read_text(encoding="utf-8")
            for p in base.rglob("*.py")}


def console_scripts() -> list[str]:
    """The programs the wheel installs (its ``entry_points.txt``)."""
    text = (ensure_sglang_sources() / f"sglang-{VERSION}.dist-info/entry_points.txt").read_text()
    section, names = None, []
    for line in text.splitlines():
        if line.startswith("["):
            section = line.strip("[] ")
        elif section == "console_scripts" and "=" in line:
            names.append(line.split("=", 1)[0].strip())
    return names


if __name__ == "__main__":
    print(ensure_sglang_sources())
