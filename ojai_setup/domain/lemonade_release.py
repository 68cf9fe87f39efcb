"""Lemonade's own ``lemonade-server`` .deb from its GitHub releases
(github.com/lemonade-sdk/lemonade).

What the releases hold, learnt from lemonade-sdk/lemonade (v11.7.0, commit e385039):

* Releases are tagged ``v`` + the version (``v11.7.0``): the release job of
  ``.github/workflows/cpp_server_build_test_release.yml`` runs on ``refs/tags/v*``.
* For Linux with apt they carry ``lemonade-server_<version>-debian13_amd64.deb`` (and an
  ``_arm64`` twin), built for Debian 13; the same job uploads the Windows ``.msi``, Fedora
  ``.rpm``, macOS ``.pkg`` and "embeddable" tarballs, none of which ojai wants. Ubuntu gets no
  .deb there: its release notes (``.github/actions/generate-release-notes/action.yml``) send
  Ubuntu to the Launchpad PPA ``ppa:lemonade-team/stable``.
* Lemonade's Debian guide (``docs/guide/install/debian.md``) installs that file with
  ``apt install ./lemonade-server_*-debian13_amd64.deb`` (its dependency ``libcpp-httplib0.41``
  comes from ``trixie-backports`` on Debian 13), then ``systemctl enable --now lemond``.
* There are no checksum files; GitHub's release API states a ``sha256:`` digest for every
  asset (the same field the llama.cpp nightly zips are checked with, see
  :mod:`ojai_setup.domain.nightly`), and an asset without one is refused.

The .deb is downloaded into :data:`~ojai_setup.core.paths.DEB_CACHE`, checked against that
digest, and only then handed to ``apt-get``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from ojai_setup.core.errors import RemoteError
from ojai_setup.core.paths import DEB_CACHE

if TYPE_CHECKING:  # made only when planning; doctor reads the advice below
    from ojai_setup.model.actions import InstallPackage, RunCommand

REPO = "lemonade-sdk/lemonade"
RELEASES_PAGE = f"https://github.com/{REPO}/releases"
PACKAGE = "lemonade-server"

#: ``v11.7.0``; Lemonade moved to calendar versions after 11.8 (Debian packages 2026.39.1), so
#: any dotted number is taken, with or without its ``v``
TAG_RE = r"^v?\d+(\.\d+){1,3}$"
#: the Debian 13 amd64 package of a release (arm64 is the other architecture built)
DEB_RE = r"^lemonade-server_(?P<version>[0-9][0-9A-Za-z.+~]*)-debian13_amd64\.deb$"

ENABLE = ("systemctl", "enable", "--now", "lemond")


class LemonadeReleaseError(RemoteError):
    """The release or its .deb could not be found or verified; the message says what to do."""


# Built (defer_build) on first use: only `--lemonade release` needs it.
class LemonadeDeb(BaseModel):
    """The ``lemonade-server`` .deb of one release, as GitHub's release API describes it."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    tag: str
    name: str
    version: str
    url: str
    size: int
    sha256: str

    @property
    def path(self) -> str:
        """Where the plan puts the downloaded file on the machine."""
        return f"{DEB_CACHE}/{self.name}"


def check_tag(tag: str) -> str:
    if not re.match(TAG_RE, tag):
        raise LemonadeReleaseError(
            f"not a Lemonade release tag: {tag!r} (expected a version such as v11.7.0; see "
            f"{RELEASES_PAGE})")
    return tag


def pick_deb(release: object) -> LemonadeDeb:
    """The Debian 13 amd64 ``lemonade-server`` .deb of ``release`` (the release API's JSON).

    Raises :class:`LemonadeReleaseError` when the release has none, or states no sha256 digest,
    usable URL or size for it."""
    from ojai_setup.formats.github_release import release_file  # only a looked-up release

    if not isinstance(release, dict):
        raise LemonadeReleaseError(f"unexpected answer from the GitHub API for {REPO}")
    tag = release.get("tag_name")
    if not isinstance(tag, str) or not re.match(TAG_RE, tag):
        raise LemonadeReleaseError(f"release of {REPO} has an unexpected tag {tag!r}")
    assets = [a for a in release.get("assets") or [] if isinstance(a, dict)]
    debs = [(a, m) for a in assets if (m := re.match(DEB_RE, str(a.get("name", ""))))]
    exact = [(a, m) for a, m in debs if m["version"] == tag.removeprefix("v")]
    chosen = exact or debs
    if len(chosen) != 1:
        offered = ", ".join(sorted(str(a.get("name")) for a in assets)) or "no files"
        raise LemonadeReleaseError(
            f"release {tag} of {REPO} has {'no' if not chosen else 'more than one'} "
            f"lemonade-server_<version>-debian13_amd64.deb (it offers {offered}; see "
            f"{RELEASES_PAGE}/tag/{tag}); pick another tag with --lemonade-tag, or "
            "--lemonade distro")
    asset, match = chosen[0]
    name = match.group(0)
    checked = release_file(asset, name, tag, kind="a package", error=LemonadeReleaseError)
    return LemonadeDeb(tag=tag, name=name, version=match["version"], url=checked.url,
                       size=checked.size, sha256=checked.sha256)


def release_refusal(distro_id: str, like: list[str]) -> str | None:
    """Why the release's Debian 13 .deb is not for this distribution (None: it is)."""
    family = [distro_id, *like]
    if "ubuntu" in family:
        return ("Lemonade's GitHub releases carry no .deb for Ubuntu (its release notes send "
                "Ubuntu to the PPA): use --lemonade distro, which installs lemonade-server from "
                "ppa:lemonade-team/stable")
    if "debian" not in family:
        return (f"Lemonade's .deb is built for Debian 13 and {distro_id or 'this distribution'} "
                f"is not Debian; see {RELEASES_PAGE} or https://lemonade-server.ai/docs/ for "
                "its packages")
    return None


def install_actions(deb: LemonadeDeb) -> list[InstallPackage | RunCommand]:
    """Download and verify the .deb, install it with apt (which brings its dependencies), then
    enable and start ``lemond``."""
    from ojai_setup.model.actions import InstallPackage, RunCommand

    return [
        InstallPackage(url=deb.url, sha256=deb.sha256, size=deb.size, path=deb.path,
                       package=PACKAGE, version=deb.version, needs_root=True,
                       reason=f"Lemonade {deb.tag} from {RELEASES_PAGE}/tag/{deb.tag}"),
        RunCommand(argv=ENABLE, needs_root=True, reason="enable and start Lemonade's server"),
    ]


def install_commands(deb: LemonadeDeb) -> list[list[str]]:
    """The commands the actions of :func:`install_actions` come down to, as a person types them."""
    return [["apt-get", "install", "-y", deb.path], list(ENABLE)]


def offline_advice(error: str, tag: str | None) -> str:
    """The blocked step's sentence when the release cannot be looked up."""
    version = tag.removeprefix("v") if tag else "<version>"
    return (f"{error.rstrip('.')}. Ways forward: --lemonade distro (Debian unstable's "
            "lemonade-server, or Lemonade's PPA on Ubuntu); or fetch "
            f"lemonade-server_{version}-debian13_amd64.deb from {RELEASES_PAGE}"
            + (f"/tag/{tag}" if tag else "")
            + ", check it, install it (sudo apt install ./lemonade-server_"
            f"{version}-debian13_amd64.deb) and run ojai setup again, which then configures the "
            "installed Lemonade. GITHUB_TOKEN raises GitHub's rate limit; OJAI_GITHUB_API points "
            "at another API address")


def distro_install_commands(distro_id: str, like: list[str], version: str
                            ) -> tuple[list[list[str]] | None, str]:
    """The commands that install the distribution's ``lemonade-server`` package and start its
    service, with a sentence saying where the package comes from; None (and why, with what to do
    instead) where the distribution has none.

    * Ubuntu (and derivatives): Lemonade's PPA, ``ppa:lemonade-team/stable``.
    * Debian: the ``lemonade-server`` package of Debian unstable (2026.39.1-2); a numbered
      stable release (12, 13) has none.
    """
    family = [distro_id, *like]
    enable = list(ENABLE)
    if "ubuntu" in family:
        return ([["add-apt-repository", "-y", "ppa:lemonade-team/stable"],
                 ["apt-get", "update"], ["apt-get", "install", "-y", "lemonade-server"], enable],
                "from Lemonade's PPA (ppa:lemonade-team/stable)")
    if distro_id == "debian":
        if version and version.split(".")[0].isdigit():
            return None, (f"Debian {version} has no lemonade-server package (Debian unstable "
                          f"has it); install Lemonade's .deb for Debian 13 from {RELEASES_PAGE} "
                          "(sudo apt install ./lemonade-server_<version>-debian13_amd64.deb)")
        return ([["apt-get", "install", "-y", "lemonade-server"], enable],
                "from Debian's own lemonade-server package (unstable)")
    return None, (f"ojai knows no lemonade-server package for {distro_id or 'this distribution'}; "
                  f"see {RELEASES_PAGE} or https://lemonade-server.ai/docs/ to install it")


def install_choices(distro_id: str, like: list[str], version: str) -> list[str]:
    """The ``--lemonade`` values that can install Lemonade on this distribution (the ones the
    lemonade step would not refuse)."""
    choices = [] if release_refusal(distro_id, like) is not None else ["release"]
    if distro_install_commands(distro_id, like, version)[0] is not None:
        choices.append("distro")
    return choices


def install_advice(distro_id: str, like: list[str], version: str) -> str:
    """What ``ojai doctor`` tells a machine without Lemonade: the ``ojai setup --lemonade``
    choices of :func:`install_choices`, or where to look when there is none."""
    choices = install_choices(distro_id, like, version)
    where = distro_install_commands(distro_id, like, version)[1]
    if not choices:
        return f"Lemonade is not installed and {where}."
    what = {"release": "Lemonade's .deb from its GitHub releases (its sha256 checked before apt "
                       "installs it)", "distro": where}
    note = ""
    if "ubuntu" in [distro_id, *like]:
        note = " (--lemonade release is not offered: Lemonade's GitHub releases carry no .deb for Ubuntu)"
    return ("Install it with " + ", or with ".join(f"`ojai setup --lemonade {c}`, {what[c]}"
                                                  for c in choices)
            + note + ". It enables lemond, and ojai registers its routes with it in the same "
            "apply; add --apply to run it.")
