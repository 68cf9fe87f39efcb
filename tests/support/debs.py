"""Real Debian packages for the tests of ``--lemonade release``, and a machine whose commands run
in the sid chroot.

* :func:`tiny_deb`: a small but real .deb named ``lemonade-server``, built with ``dpkg-deb``
  (it installs one script, ``/usr/bin/lemond``, printing a version line).
* :func:`debian_lemonade_deb`: Debian unstable's own ``lemonade-server`` package, the version
  installed in the sid chroot (:mod:`support.sid`), fetched once with ``apt-get download``
  inside the chroot (from Debian's mirror, about 4 MB) and cached outside the checkout::

      ${OJAI_TEST_CACHE:-~/.cache/ojai-tests}/lemonade-deb/<version>/
          lemonade-server_<version>_amd64.deb

* :class:`ChrootMachine`: a machine root (a test machine folder) whose files are read and
  written as usual but whose commands run in the sid chroot, with the machine's
  ``/var/cache/ojai`` bound in at the same path. ojai's executor, applying a plan to it, then
  hands the .deb it downloaded and verified to the chroot's real ``apt-get``; every command is
  recorded in ``Root.commands``.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

from support.sid import ensure_sid_chroot, run_in_chroot

from ojai_setup.core.root import CommandResult, Root

APT_OPTIONS = ("-o", "Acquire::Check-Valid-Until=false")


def tiny_deb(folder: Path, version: str = "11.7.0", package: str = "lemonade-server") -> Path:
    """Build a real ``.deb`` of ``package`` at ``version`` in ``folder`` and return it."""
    tree = folder / f"{package}-{version}"
    (tree / "DEBIAN").mkdir(parents=True)
    (tree / "DEBIAN/control").write_text(
        f"Package: {package}\nVersion: {version}\nArchitecture: amd64\n"
        "Maintainer: ojai tests <dev@ojai.invalid>\n"
        "Description: stand-in of Lemonade's server package for ojai's tests\n")
    lemond = tree / "usr/bin/lemond"
    lemond.parent.mkdir(parents=True)
    lemond.write_text(f"#!/bin/sh\necho 'lemond version {version}'\n")
    lemond.chmod(0o755)
    out = folder / f"{package}_{version}_amd64.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(tree), str(out)],
                   check=True, capture_output=True)
    return out


def deb_field(deb: Path, field: str) -> str:
    """A control field of a .deb, as ``dpkg-deb -f`` reads it."""
    return subprocess.run(["dpkg-deb", "-f", str(deb), field], check=True, capture_output=True,
                          text=True).stdout.strip()


def cache_root() -> Path:
    return Path(os.environ.get("OJAI_TEST_CACHE", "~/.cache/ojai-tests")).expanduser()


def installed_version(chroot: Path) -> str:
    return run_in_chroot(chroot, ["dpkg-query", "-W", "-f=${Version}", "lemonade-server"]
                         ).stdout.strip()


def debian_lemonade_deb() -> Path:
    """Debian's ``lemonade-server`` .deb of the version the sid chroot has installed."""
    chroot = ensure_sid_chroot()
    version = installed_version(chroot)
    folder = cache_root() / "lemonade-deb" / version
    name = f"lemonade-server_{version.split(':')[-1]}_amd64.deb"
    deb = folder / name
    if deb.is_file():
        return deb
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not deb.is_file():
            part = folder / "partial"
            part.mkdir(exist_ok=True)
            run_in_chroot(chroot, ["apt-get", *APT_OPTIONS, "download",
                                   f"lemonade-server={version}"],
                          binds=[(part, "/download")], cwd="/download", timeout=600)
            os.replace(part / name, deb)
    return deb


class ChrootMachine(Root):
    """A machine folder whose commands run in the sid chroot (see the module doc)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.chroot = ensure_sid_chroot()

    def _run(self, argv: list[str], *, env: dict[str, str] | None,
             timeout: float | None) -> CommandResult:
        cache = self.resolve("/var/cache/ojai")
        cache.mkdir(parents=True, exist_ok=True)
        done = run_in_chroot(self.chroot, argv, env=env, binds=[(cache, "/var/cache/ojai")],
                             check=False, timeout=timeout or 600)
        return CommandResult(tuple(argv), done.returncode, done.stdout, done.stderr, "chroot")
