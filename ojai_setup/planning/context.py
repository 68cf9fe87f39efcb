"""Everything a setup step may look at, gathered once before planning (:mod:`.gather`).

A step's ``plan(ctx)`` reads this and, through ``ctx.root``, the files it is going to edit;
it never runs a process, opens a connection or reads the host's environment. What needs any of
that (the release to install, the installed binary's dialect, the invoking user, free disk
space, which tools exist) is a field here, so a step is a function of its context and its
cases can be written as data.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, NamedTuple

from ojai_setup.core.paths import LLAMACPP_CURRENT, SERVICE_USER
from ojai_setup.core.root import Root
from ojai_setup.domain.check_engine import Profile
from ojai_setup.domain.lemonade_release import LemonadeDeb
from ojai_setup.domain.nightly import NightlyAsset
from ojai_setup.model.actions import WriteFile
from ojai_setup.model.facts import Facts
from ojai_setup.model.settings import Settings
from ojai_setup.model.state import State

if TYPE_CHECKING:  # imported only where they are used: a llama-server's flags (see
    # gather.llama_binary), Lemonade's layout where Lemonade is installed, the catalog for a
    # model route
    from ojai_setup.domain.catalog import Catalog, Footprint, Route
    from ojai_setup.domain.lemonade import LemonadeLayout
    from ojai_setup.domain.sglang import SglangRoute
    from ojai_setup.facts.sglang import SglangInstall
    from ojai_setup.formats.llama_help import Dialect

#: the programs a step may ask about (``ctx.which``); gathered once, on the machine's PATH
KNOWN_PROGRAMS = ("update-grub", "grub-mkconfig", "grub2-mkconfig", "grubby",
                  "update-initramfs", "dracut", "mkinitcpio", "booster", "kernel-install",
                  "reinstall-kernels", "sdbootutil", "limine-update", "kernelstub", "flm",
                  "llama-server", "lemonade", "lemond")


class LlamaBinary(NamedTuple):
    """The llama-server the routes will run, and what it supports."""

    #: machine path (or a bare name known only from a capture); None: there is none
    path: str | None
    #: installed already (False: the same plan installs it)
    installed: bool
    #: its flags: probed from the installed binary, or upstream's reference when not installed
    dialect: Dialect | None = None
    #: why the dialect could not be read
    error: str | None = None
    #: said in the routes step when the flags are upstream's reference, not the binary's own
    note: str = ""
    #: said as a warning in the routes step: a distribution's llama-server whose HIP backend
    #: has no code for this GPU, or that has none (it runs on the CPU or Vulkan)
    warning: str = ""


class RouteTarget(NamedTuple):
    """One more route of a deployment of several (``--model A --model B``): what the
    context's ``route``, ``route_error``, ``footprint``, ``hub_error`` and
    ``draft_length_source`` are for the first."""

    #: the route as asked (``--model``)
    asked: str
    route: Route | None
    error: str | None = None
    footprint: Footprint | None = None
    hub_error: str | None = None
    draft_length_source: str | None = None


class SglangTarget(NamedTuple):
    """An SGLang route asked for (``--model`` names one of ``domain/sglang-routes.toml``) and the
    SGLang that will serve it."""

    route: SglangRoute
    install: SglangInstall


class LemonadeView(NamedTuple):
    """Lemonade on this machine: where its config lives and what ``config.json`` says."""

    layout: LemonadeLayout
    config: Mapping[str, Any]

    def config_value(self, key: str) -> Any:
        """A ``config.json`` value by its dotted name (``llamacpp.rocm_bin``), or None."""
        if key in self.config:
            return self.config[key]
        node: Any = self.config
        for part in key.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return None
            node = node[part]
        return node


class KeptLimit(NamedTuple):
    """A GPU memory limit the owner set higher than ojai's default budget, which ojai keeps
    (:func:`kept_limit`)."""

    pages: int
    #: where it is set (``/etc/modprobe.d/ttm.conf``, ``/proc/cmdline``)
    where: str
    #: ojai's own default budget for this machine, in GiB
    default_gib: int

    @property
    def gib(self) -> int:
        """The budget it gives, in whole GiB (rounded down)."""
        return self.pages // (2**30 // 4096)

    def sentence(self, note: str = "") -> str:
        """Which limit was kept and why (``note``: what else to know about it)."""
        return (f"kept the limit you set ({self.pages * 4096 / 2**30:.1f} GiB in {self.where}) "
                f"rather than ojai's default of {self.default_gib} GiB for this machine"
                f"{note}; --gpu-memory GiB sets another")


class Context(NamedTuple):
    """What every step sees. Built by :func:`ojai_setup.planning.gather.gather`."""

    root: Root
    facts: Facts
    settings: Settings
    profile: Profile
    #: the GPU memory budget in GiB (``--gpu-memory`` or the profile's default for this RAM)
    budget_gib: int
    #: the GPU's own gfx target (rocminfo's unless overridden, else the profile's)
    gpu_target: str | None
    #: the user ojai was invoked for (``SUDO_USER`` in the machine's environment, else root)
    user: str
    #: that user's home on the machine
    home: str
    #: the built-in catalog plus the user's, read for a model route (``--model``) or a
    #: ``--catalog`` file; None without them, or with ``catalog_error`` when it cannot be read
    catalog: Catalog | None
    catalog_error: str | None
    #: the route ``--model`` names (None: no route asked for, or ``route_error``)
    route: Route | None
    route_error: str | None
    #: the nightly release to install (``--llamacpp nightly``), or why it is unknown
    release: NightlyAsset | None
    release_error: str | None
    llama: LlamaBinary
    #: Lemonade, when installed
    lemonade: LemonadeView | None
    #: ojai's own records (``state.json``); empty when unreadable (``state_error`` says why)
    state: State
    state_error: str | None
    #: free bytes where models go, or why unknown
    models_free_bytes: int | None
    models_free_error: str | None
    #: :data:`KNOWN_PROGRAMS` found on the machine, with their paths
    programs: Mapping[str, str | None]
    #: the link the llama-server this plan installs goes behind, and its routes run
    #: (:func:`ojai_setup.facts.llama_install.install_link`): ``current``, or a second
    #: backend's own link beside it
    llama_link: str = LLAMACPP_CURRENT
    #: the unprivileged system user the services run as (never the invoking user)
    service_user: str = SERVICE_USER
    #: the digest of the API-key environment file ``--api-key-file`` makes (the key itself is
    #: read again only when applying), or why the key file cannot be used
    api_key_sha256: str | None = None
    api_key_error: str | None = None
    #: the group names of the machine's ``/etc/group`` (None: it has none to read)
    groups: frozenset[str] | None = None
    #: where ``route.draft_n_max`` comes from: "catalog default", or "tuned <date>, measured
    #: +N%" when ``ojai tune`` laid a measured value over the catalog (``/etc/ojai/tuned.toml``)
    draft_length_source: str | None = None
    #: the route's sizes read from its downloaded files (None: not downloaded, the catalog's)
    footprint: Footprint | None = None
    #: with ``--lemonade release`` and no Lemonade installed: the release's lemonade-server
    #: .deb to install (with the sha256 GitHub states), or why it cannot be had
    lemonade_deb: LemonadeDeb | None = None
    lemonade_deb_error: str | None = None
    #: why the Hugging Face Hub will not serve a model file the route still has to download
    #: (None: it will, nothing is to download, or it was not asked)
    hub_error: str | None = None
    #: with ``--llamacpp source`` and the HIP backend: why the machine's HIP toolchain cannot
    #: build for the target (None: it can, or no HIP build is asked for)
    toolchain_error: str | None = None
    #: ``--model`` names an SGLang route (Instinct GPUs): every llama.cpp, Lemonade and NPU step
    #: stands down, and the SGLang step writes its launch script and unit
    sglang: SglangTarget | None = None
    #: the routes served beside ``route`` (``--model A --model B``), each with its own sizes
    more_routes: tuple[RouteTarget, ...] = ()
    #: a limit the owner set higher than ojai's default budget, kept (``budget_gib`` is its
    #: whole GiB, and the TTM step keeps its exact pages); None: none, or ``--gpu-memory``
    kept_limit: KeptLimit | None = None

    def which(self, program: str) -> str | None:
        """Where ``program`` is on the machine (None: not there); only :data:`KNOWN_PROGRAMS`."""
        if program not in self.programs:
            raise KeyError(f"{program!r} was not gathered; add it to KNOWN_PROGRAMS")
        return self.programs[program]

    def each_route(self) -> list["Context"]:
        """One context per route asked for (``--model A --model B``), each as if it were the
        only one: the first is this one; the others carry their own route, sizes and Hub
        answer. Steps that act per model (the downloads, Lemonade's entries) plan each."""
        alone = {"extra_models": (), "models_max": None}
        out = [self._replace(settings=self.settings.model_copy(update=alone), more_routes=())]
        for t in self.more_routes:
            out.append(self._replace(
                settings=self.settings.model_copy(update={**alone, "model": t.asked}),
                route=t.route, route_error=t.error, footprint=t.footprint,
                hub_error=t.hub_error, draft_length_source=t.draft_length_source,
                more_routes=()))
        return out

    def file_action(self, path: str, text: str, mode: int, reason: str,
                    notify: tuple[str, ...] = ()) -> WriteFile | None:
        """A root-owned file ojai writes whole (a script, a unit), or None when it is already so."""
        before = self.root.read_text(path) if self.root.exists(path) else None
        real = self.root.resolve(path)
        if before == text and real.exists() and (real.stat().st_mode & 0o777) == mode:
            return None
        return WriteFile(path=path, before=before, after=text, mode=mode, needs_root=True,
                         reason=reason, notify=notify)
