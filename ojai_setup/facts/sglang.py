"""The SGLang an SGLang route runs: its Python, and the argument table of the installed package.

SGLang is found where the route's launch script runs it (``/opt/ojai/sglang``: a virtualenv or
prefix with SGLang installed, per SGLang's AMD guide). Its argument table is read from the
installed package's own declarations (:mod:`ojai_setup.formats.sglang_args`), without importing
it; its version from ``sglang/version.py``. Without an installed SGLang the table of the
release ojai was made against is used, and the plan says so.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from ojai_setup.core.root import Root
from ojai_setup.domain.sglang import REFERENCE_VERSION, SGLANG_PYTHON, reference_dialect
from ojai_setup.formats.sglang_args import (
    CHOICES_FILE,
    FIELDS_DIR,
    SERVER_ARGS_FILE,
    SPEC_INFO_FILE,
    SPEC_REGISTRY_FILE,
    SglangArgsError,
    SglangDialect,
    read_table,
)

SGLANG_PREFIX = SGLANG_PYTHON.rsplit("/bin/", 1)[0]


class SglangInstall(NamedTuple):
    python: str
    #: the package folder found (None: SGLang is not installed there)
    package: str | None
    dialect: SglangDialect | None
    #: said in the plan: whose table the arguments were checked against
    note: str
    error: str | None = None


def _version(root: Root, package: str) -> str:
    """The installed version: setuptools-scm's ``sglang/_version.py`` (what ``version.py``
    imports), else the ``Version:`` of the package's dist-info ``METADATA``."""
    try:
        m = re.search(r"^(?:__version__|version)\s*=\s*(?:version\s*=\s*)?['\"]([^'\"]+)['\"]",
                      root.read_text(f"{package}/_version.py"), re.M)
        if m:
            return m.group(1)
    except (OSError, UnicodeDecodeError):
        pass
    for meta in root.glob(f"{package}-*.dist-info/METADATA"):
        try:
            m = re.search(r"^Version:\s*(\S+)", root.read_text(meta), re.M)
        except (OSError, UnicodeDecodeError):
            continue
        if m:
            return m.group(1)
    return "unknown"


def read_sglang(root: Root) -> SglangInstall:
    packages = sorted(root.glob(f"{SGLANG_PREFIX}/lib/python3*/site-packages/sglang"))
    if not packages:
        return SglangInstall(python=SGLANG_PYTHON, package=None, dialect=reference_dialect(),
                             note=f"SGLang {REFERENCE_VERSION}'s arguments (not installed in "
                             f"{SGLANG_PREFIX} yet; the plan made after installing it checks them "
                             "against the installed package)")
    package = packages[-1]
    version = _version(root, package)
    files: dict[str, str] = {}
    try:
        for path in root.glob(f"{package}/{FIELDS_DIR}*.py"):
            files[path[len(package) + 1:]] = root.read_text(path)
        for rel in (CHOICES_FILE, SERVER_ARGS_FILE, SPEC_INFO_FILE, SPEC_REGISTRY_FILE):
            if root.exists(f"{package}/{rel}"):
                files[rel] = root.read_text(f"{package}/{rel}")
        dialect = read_table(version, files)
    except (OSError, UnicodeDecodeError, SglangArgsError) as exc:
        return SglangInstall(python=SGLANG_PYTHON, package=package, dialect=None, note="",
                             error=f"cannot read the server arguments of the SGLang in {package}: {exc}")
    return SglangInstall(python=SGLANG_PYTHON, package=package, dialect=dialect,
                         note=f"the installed SGLang {version}'s arguments ({package})")
