"""llama.cpp from Lemonade's nightly ROCm builds (github.com/lemonade-sdk/llamacpp-rocm), and
upstream llama.cpp's own Vulkan builds (github.com/ggml-org/llama.cpp), the build Lemonade's
``llamacpp:vulkan`` runs.

Each release is tagged ``b`` + a build number (``b1311``) and carries one flat zip per GPU
family, ``llama-<tag>-ubuntu-rocm-<family>-x64.zip``: ``llama-server``, its shared libraries
and the bundled ROCm runtime side by side, linked with RPATH ``$ORIGIN``. There are no
checksum files; GitHub's release API gives each asset a ``sha256:`` digest, and an asset
without one is refused, because nothing is unpacked unverified.

Upstream's Vulkan build is the "family" ``vulkan``: one asset a release,
``llama-<tag>-bin-ubuntu-vulkan-x64.tar.gz`` (its release workflow packs ``build/bin`` with
``tar --transform "s,^\\.,llama-<tag>,"``: one top folder ``llama-<tag>/`` holding
``llama-server``, the ``libggml*``/``libllama`` libraries and ``libggml-vulkan.so``, RPATH
``$ORIGIN``), a ``.zip`` of ``build/bin/`` in older builds. Its install is unpacked from the
folder that holds ``llama-server``, so it lands in the same flat layout.

Layout on the machine (both can be installed; ``current`` names the one the routes run)::

    /opt/ojai/llama.cpp/b1311-gfx1150/llama-server      (+ libraries, + ojai-install.json)
    /opt/ojai/llama.cpp/b7000-vulkan/llama-server
    /opt/ojai/llama.cpp/current -> b1311-gfx1150

Reading the release is :func:`resolve_release`; :func:`install_action` turns its answer into an
:class:`~ojai_setup.model.actions.InstallArchive`, and :func:`execute_install_archive` carries that
out: download, verify, check every zip entry, unpack next to the destination, record, rename
into place, switch the link. A failure at any point leaves the previous install and link as
they were and removes what it had started."""

import re

from pydantic import BaseModel, ConfigDict

from ojai_setup.core.errors import ApplyError, RemoteError
from ojai_setup.core.paths import LLAMACPP_CURRENT, LLAMACPP_DIR
from ojai_setup.model.actions import InstallArchive

REPO = "lemonade-sdk/llamacpp-rocm"


RELEASES_PAGE = f"https://github.com/{REPO}/releases"


#: upstream llama.cpp, whose releases carry the Vulkan build
VULKAN_REPO = "ggml-org/llama.cpp"


VULKAN_RELEASES_PAGE = f"https://github.com/{VULKAN_REPO}/releases"


#: the family name of upstream's Vulkan build (one build for every GPU)
VULKAN = "vulkan"


#: GPU families Lemonade builds for, in the order its release lists them.
FAMILIES = ("gfx1150", "gfx1151", "gfx110X", "gfx120X", "gfx103X", "gfx90a", "gfx908")


INSTALL_BASE = LLAMACPP_DIR


CURRENT_LINK = LLAMACPP_CURRENT


RECORD_NAME = "ojai-install.json"


SERVER_NAME = "llama-server"


TAG_RE = r"^b\d{4,}$"


ASSET_RE = r"^llama-(?P<tag>b\d{4,})-ubuntu-rocm-(?P<family>gfx[0-9a-zA-Z]+)-x64\.zip$"


VULKAN_ASSET_RE = (r"^llama-(?P<tag>b\d{4,})-bin-ubuntu-(?P<family>vulkan)-x64"
                   r"\.(?P<ext>tar\.gz|zip)$")


def match_asset(name: str) -> re.Match[str] | None:
    """The tag and family of a nightly asset name (either source), or None."""
    return re.match(ASSET_RE, name) or re.match(VULKAN_ASSET_RE, name)


def repo_for(family: str) -> tuple[str, str]:
    """The GitHub repository and its releases page that build ``family``."""
    return (VULKAN_REPO, VULKAN_RELEASES_PAGE) if family == VULKAN else (REPO, RELEASES_PAGE)


class NightlyError(ApplyError, RemoteError):
    """A nightly release could not be resolved or installed; the message says why and what to do."""


class ReleaseNotFound(NightlyError):
    """GitHub answered that a pinned release tag does not exist (404): it was withdrawn or never
    published. GitHub was reached, so this is no network trouble."""


# Built (defer_build) on first use: only runs that install or look at a nightly build need them.
class NightlyAsset(BaseModel):
    """One zip of one nightly release, as GitHub's release API describes it."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    tag: str
    name: str
    url: str
    size: int
    sha256: str
    #: the bytes its files take once unpacked, read at planning from the zip's own directory
    #: at its end (None: not known, then estimated from ``size``)
    unpacked_size: int | None = None

    @property
    def family(self) -> str:
        match = match_asset(self.name)
        if match is None:  # resolve_release only builds assets with matching names
            raise NightlyError(f"not a nightly asset name: {self.name!r}")
        return match["family"]


class InstallRecord(BaseModel):
    """What ``ojai-install.json`` inside an install folder says about it."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    tag: str | None
    family: str | None
    asset: str
    url: str
    sha256: str
    files_digest: str


# -- naming -----------------------------------------------------------------------------------
def family_for_target(gfx: str) -> str:
    """The nightly build family that carries kernels for GPU target ``gfx`` (``gfx1103`` -> ``gfx110X``)."""
    target = gfx.strip().lower()
    if target in ("gfx1150", "gfx1151", "gfx90a", "gfx908"):
        return target
    if re.fullmatch(r"gfx110[0-3]", target):
        return "gfx110X"
    if target in ("gfx1200", "gfx1201"):
        return "gfx120X"
    if re.fullmatch(r"gfx103[0-6]", target):
        return "gfx103X"
    raise NightlyError(
        f"no nightly llama.cpp build covers GPU target {gfx!r}; Lemonade builds for "
        f"{', '.join(FAMILIES)}. Build llama.cpp from source for this GPU instead.")


def asset_name(tag: str, family: str) -> str:
    """The archive name of ``family``'s build in release ``tag`` (upstream's Vulkan build: the
    tarball of current releases; :func:`asset_names` gives the older zip too)."""
    if family == VULKAN:
        return f"llama-{tag}-bin-ubuntu-vulkan-x64.tar.gz"
    return f"llama-{tag}-ubuntu-rocm-{family}-x64.zip"


def asset_names(tag: str, family: str) -> tuple[str, ...]:
    """The names ``family``'s build may have in release ``tag``, preferred first."""
    if family == VULKAN:
        return (asset_name(tag, family), f"llama-{tag}-bin-ubuntu-vulkan-x64.zip")
    return (asset_name(tag, family),)


def install_dir_name(tag: str, family: str) -> str:
    """The versioned folder name under :data:`INSTALL_BASE`, e.g. ``b1311-gfx1150``."""
    _check_tag(tag)
    _check_family(family)
    return f"{tag}-{family}"


def install_action(asset: NightlyAsset) -> InstallArchive:
    """The action that installs ``asset`` under :data:`INSTALL_BASE` and points ``current`` at it."""
    dest = f"{INSTALL_BASE}/{install_dir_name(asset.tag, asset.family)}"
    return InstallArchive(
        url=asset.url, sha256=asset.sha256, size=asset.size, dest=dest, link=CURRENT_LINK,
        needs_root=True,
        reason=f"llama.cpp nightly {asset.tag} for {asset.family} from {repo_for(asset.family)[1]}")


def _check_tag(tag: str) -> None:
    if not re.match(TAG_RE, tag):
        raise NightlyError(f"not a nightly tag: {tag!r} (expected 'b' and a build number, e.g. b1311)")


def _check_family(family: str) -> None:
    if family not in FAMILIES and family != VULKAN:
        raise NightlyError(f"unknown GPU family {family!r}; one of {', '.join(FAMILIES)} "
                           f"(or {VULKAN})")

