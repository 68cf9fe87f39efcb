"""Gathering a :class:`~ojai_setup.planning.context.Context`: all the I/O planning needs, once.

Facts of the machine (through its root), the invoking user and their home (from the machine's
environment and ``/etc/passwd``, never this host's when a root is given), the catalog, the
release to install (GitHub), the installed llama-server's dialect (the binary's ``--help``),
Lemonade's config, ojai's state and the free space for models. Steps then only decide.

Remote lookups go through :class:`Remote`, so a caller (a test, an offline run) can give the
answers instead of the network.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Callable, NamedTuple

from ojai_setup.core.errors import OjaiError, RemoteError, UsageError
from ojai_setup.core.paths import API_KEY_VARIABLE, LLAMACPP_CURRENT, LLAMACPP_DIR
from ojai_setup.core.root import Root
from ojai_setup.domain.checks import Profile, chosen_profile
from ojai_setup.domain.drafting import is_ngram_type
from ojai_setup.domain.lemonade_release import LemonadeDeb, offline_advice
from ojai_setup.domain.nightly import (
    VULKAN,
    NightlyAsset,
    ReleaseNotFound,
    family_for_target,
    install_dir_name,
)
from ojai_setup.facts.llama_install import is_installed, read_record
from ojai_setup.facts.collect import collect, environment
from ojai_setup.facts.disk import free_bytes
from ojai_setup.facts.probe import ProbeError, probe
from ojai_setup.facts.state import read_state
from ojai_setup.model.facts import Facts
from ojai_setup.model.settings import Settings
from ojai_setup.model.state import State
from ojai_setup.planning.context import (
    KNOWN_PROGRAMS,
    Context,
    KeptLimit,
    LemonadeView,
    LlamaBinary,
    RouteTarget,
    SglangTarget,
)

if TYPE_CHECKING:  # the catalog is read only for a model route or a --catalog file
    from ojai_setup.domain.catalog import Catalog, Footprint, Route

USER_CATALOG = ".config/ojai/catalog.toml"
REFERENCE_HELP = Path(__file__).resolve().parent.parent / "formats" / "reference-help-b11434.txt"
REFERENCE_VERSION = "version: 0.6.0-dev (build 11434, commit unknown)"


def _no_lemonade_lookup(tag: str | None) -> LemonadeDeb:
    raise RemoteError("no lookup of Lemonade's releases was given")


class Remote(NamedTuple):
    """Where remote facts come from: ``release(tag, family)`` finds a nightly release,
    ``lemonade_release(tag)`` the lemonade-server .deb of a Lemonade release (without one, the
    lookup fails as if GitHub could not be reached), ``hub(repo, file, revision)`` raises
    :class:`RemoteError` when the Hugging Face Hub will not serve a model file to download
    (None: not asked)."""

    release: Callable[[str | None, str], NightlyAsset]
    lemonade_release: Callable[[str | None], LemonadeDeb] = _no_lemonade_lookup
    hub: Callable[[str, str, str | None], None] | None = None

    @staticmethod
    def github() -> Remote:
        from ojai_setup.facts.github import resolve_lemonade_release, resolve_release
        from ojai_setup.facts.hub import hub_serves

        return Remote(release=lambda tag, family: resolve_release(None, tag, family),
                      lemonade_release=lambda tag: resolve_lemonade_release(None, tag),
                      hub=hub_serves)


def resolve_profile(facts: Facts, settings: Settings) -> Profile:
    """``--profile`` (forced) or the detected one (raises :class:`ProfileError` for an unknown
    name)."""
    return chosen_profile(facts, settings.profile)


def kept_limit(facts: Facts, settings: Settings, profile: Profile) -> KeptLimit | None:
    """Without ``--gpu-memory``: the limit the owner configured (the kernel command line's,
    else /etc/modprobe.d's), else the one active on /proc/cmdline, when it is higher than
    ojai's default budget (a cap at or above the RAM is the owner's choice too: the models
    are still sized within what the OS leaves, :func:`budget_gib`); None otherwise."""
    ttm = facts.ttm
    if settings.gpu_memory_gib is not None or ttm is None or facts.memory is None:
        return None
    default = profile.gpu_budget_gib(facts.memory.total_gib)
    configured = ttm.configured_cmdline()
    if configured is not None:
        pages, where = configured[1], configured[2]
    elif ttm.modprobe:
        pages, where = ttm.modprobe[-1].pages, ttm.modprobe[-1].path
    elif ttm.cmdline_pages is not None:
        pages, where = ttm.cmdline_pages, "/proc/cmdline"
    else:
        return None
    kept = KeptLimit(pages, where, default)
    return kept if kept.gib > default else None


def budget_gib(facts: Facts, settings: Settings, profile: Profile) -> int:
    """The GPU memory budget: ``--gpu-memory``, a higher limit the owner already set
    (:func:`kept_limit`), or the profile's default for this machine's RAM."""
    if settings.gpu_memory_gib is not None:
        return settings.gpu_memory_gib
    kept = kept_limit(facts, settings, profile)
    if kept is not None:  # models are sized within what the OS leaves, whatever the cap
        total = facts.memory.total_gib if facts.memory else 0
        return max(kept.default_gib, min(kept.gib, int(total - profile.os_min_gib)))
    return profile.gpu_budget_gib(facts.memory.total_gib if facts.memory else 0)


def gpu_target(facts: Facts, profile: Profile) -> str | None:
    """The GPU's own gfx target: rocminfo's (unless overridden), else the profile's."""
    gpu = facts.gpu
    if gpu and gpu.targets and not gpu.hsa_override:
        return gpu.targets[0]
    return profile.gpu_target


def installed_release(root: Root, tag: str | None, family: str,
                      link_path: str = LLAMACPP_CURRENT) -> NightlyAsset | None:
    """The nightly ``tag`` for ``family`` as the install ojai verified records it, when it is in
    place and its link (``current``, or a second backend's own) points at it (then no lookup is
    needed); else None."""
    if tag is None:
        return None
    name = install_dir_name(tag, family)
    dest = f"{LLAMACPP_DIR}/{name}"
    record = read_record(root, dest)
    link = root.resolve(link_path)
    if record is None or record.tag != tag or record.family != family or \
            not link.is_symlink() or str(link.readlink()) not in (name, dest) or \
            not is_installed(root, dest, record.sha256):
        return None
    return NightlyAsset(tag=tag, name=record.asset, url=record.url, size=0, sha256=record.sha256)


def _current_nightly_tag(root: Root) -> str | None:
    link = root.resolve(LLAMACPP_CURRENT)
    if not link.is_symlink():
        return None
    record = read_record(root, f"{LLAMACPP_DIR}/{Path(str(link.readlink())).name}")
    return record.tag if record is not None else None


def withdrawn_advice(tag: str, family: str = "") -> str:
    """What to say when GitHub answers 404 for the pinned nightly ``tag``: it was withdrawn
    (with the reason, where the known-bad table names the tag), not that GitHub is out of
    reach. The table's tags are Lemonade's; upstream's Vulkan releases are not looked up."""
    from ojai_setup.domain.known_bad import TABLE, withdrawn
    from ojai_setup.domain.nightly import repo_for
    from ojai_setup.domain.profiles import checks_dir

    REPO, RELEASES_PAGE = repo_for(family)
    row = None if family == VULKAN else withdrawn(tag, checks_dir() / "tables" / TABLE)
    why = f" ({row.title[0].lower()}{row.title[1:]}: {row.source})" if row else \
        " or never published"
    return (f"no release {tag} in {REPO}: GitHub answers 404 for it, so it was withdrawn{why}. Ways "
            f"forward: pin another tag (--llamacpp-tag, see {RELEASES_PAGE}), or leave out "
            "--llamacpp-tag to take the latest")


def _offline_advice(root: Root, error: str) -> str:
    tag = _current_nightly_tag(root)
    return (f"{error}. Ways forward: --llamacpp-tag {tag or 'TAG'} "
            + ("(the installed build, checked without GitHub)" if tag else "(a release you know)")
            + "; --llamacpp none (leave llama.cpp as it is); or --llamacpp source "
            "--llamacpp-src DIR (build from a local checkout). GITHUB_TOKEN raises GitHub's rate "
            "limit; OJAI_GITHUB_API points at another API address")


def invoking_user(root: Root) -> tuple[str, str]:
    """The user ojai runs for and their home, from the machine's own environment and passwd."""
    user = environment(root).get("SUDO_USER") or "root"
    home = "/root" if user == "root" else f"/home/{user}"
    try:
        for line in root.read_text("/etc/passwd").splitlines():
            fields = line.split(":")
            if len(fields) >= 7 and fields[0] == user and fields[5].startswith("/"):
                home = fields[5]
                break
    except (OSError, UnicodeDecodeError):
        pass
    return user, home


def user_catalog(root: Root, settings: Settings, home: str) -> Catalog:
    """The built-in catalog plus ``--catalog FILE`` (which must exist) or the user's own."""
    from ojai_setup.domain.catalog import load_catalog

    if settings.user_catalog:
        path = Path(settings.user_catalog).expanduser()
        if not path.is_file():
            raise UsageError(f"--catalog {settings.user_catalog}: no such file")
        return load_catalog(path)
    own = root.resolve(f"{home.rstrip('/')}/{USER_CATALOG}")
    return load_catalog(own if own.is_file() else None)


def resolve_model(root: Root, settings: Settings) -> Settings:
    """``settings`` with ``--model`` as the catalog (or SGLang) route it names: a name matched
    with case and separators ignored, or one of the two routes setup writes for a model
    (``gemma-4-26b-a4b-mtp``). A name that matches none is a :class:`UsageError` naming the
    closest, before anything is planned. A catalog that cannot be read is left for planning
    to report."""
    if not settings.model:
        return settings
    if settings.extra_models:  # each route by its own name, in the order given
        names = [_resolve_name(root, settings, m) for m in settings.models]
        return settings.model_copy(update={"model": names[0], "extra_models": tuple(names[1:])})
    return settings.model_copy(update={"model": _resolve_name(root, settings, settings.model)})


def _resolve_name(root: Root, settings: Settings, model: str) -> str:
    """The route one ``--model`` value names (:func:`resolve_model`)."""
    from ojai_setup.core.commandline import closest, folded, ojai_command
    from ojai_setup.domain.catalog import CatalogError
    from ojai_setup.domain.own_model import OwnModelError, local_model_path, parse_model_ref

    try:
        if parse_model_ref(model) is not None or local_model_path(model):
            return model  # a Hub file or repository, or a GGUF file: resolved while planning
    except OwnModelError:
        return model  # said by planning, in the model step
    from ojai_setup.domain.sglang import sglang_routes

    names = {n: n for n in sglang_routes()}
    try:
        names.update(user_catalog(root, settings, invoking_user(root)[1]).served_names())
    except CatalogError:
        return model
    if model in names:
        found = [names[model]]
    else:
        found = sorted({served for name, served in names.items()
                        if folded(name) == folded(model)})
    if len(found) == 1:
        return found[0]
    # the closest names, each said as the model's own name
    near = found or list(dict.fromkeys(names[n] for n in closest(model, list(names))))
    maybe = f"; did you mean {' or '.join(near)}?" if near else ""
    raise UsageError(f"--model {model}: no such route{maybe} "
                     f"(`{ojai_command(root.path, 'models')}` lists them)")


def llama_binary(root: Root, settings: Settings, programs: dict[str, str | None],
                 facts: Facts | None = None, target: str | None = None,
                 link: str = LLAMACPP_CURRENT) -> LlamaBinary:
    """The llama-server the routes run (behind ``link`` where ojai installs it), probed when
    it is installed; a distribution's is said to be one, with what it runs on here."""
    found = _llama_binary(root, settings, programs, facts, f"{link}/llama-server")
    distro = facts.distro_llama if facts is not None else None
    if distro is not None and found.path == distro.path and settings.llamacpp != "distro":
        # (with --llamacpp distro the llama.cpp step says it, once)
        from ojai_setup.domain.distro_llama import coverage

        cov = coverage(distro, target)
        if not (cov.runs_on == "hip" and cov.hip_covers):
            return found._replace(warning=f"the routes run the distribution's llama-server: "
                                  f"{cov.sentence}")
    return found


def _llama_binary(root: Root, settings: Settings, programs: dict[str, str | None],
                  facts: Facts | None, server: str) -> LlamaBinary:
    if settings.llamacpp == "distro":
        path = facts.distro_llama.path if facts is not None and facts.distro_llama else None
        if path is None:
            return LlamaBinary(path=None, installed=False)
        found = probe(root, path)
        if isinstance(found, ProbeError):
            return LlamaBinary(path=path, installed=True,
                               error=f"cannot read what {path} supports: {found.describe()}")
        return LlamaBinary(path=path, installed=True, dialect=found)
    if root.exists(server):
        path, installed = server, True
    elif settings.llamacpp != "none":
        path, installed = server, False
    else:
        path = programs.get("llama-server")
        distro = facts.distro_llama if facts is not None else None
        if distro is not None and path is not None and not path.startswith("/"):
            path = distro.path  # known by its package's file list, not only by a capture
        installed = path is not None
    if path is None:
        return LlamaBinary(path=None, installed=False)
    if not installed:
        from ojai_setup.formats.llama_help import parse_help, parse_version

        dialect = parse_help(REFERENCE_HELP.read_text(encoding="utf-8"),
                             parse_version(REFERENCE_VERSION))
        return LlamaBinary(path=path, installed=False, dialect=dialect,
                           note=" (flags of upstream llama.cpp build 11434; checked against the "
                           "installed binary after apply)")
    if not path.startswith("/"):
        return LlamaBinary(path=path, installed=True)
    found = probe(root, path)
    if isinstance(found, ProbeError):
        return LlamaBinary(path=path, installed=True,
                           error=f"cannot read what {path} supports: {found.describe()}")
    return LlamaBinary(path=path, installed=True, dialect=found)


def lemonade_view(root: Root, facts: Facts, home: str) -> LemonadeView | None:
    if "lemonade" not in facts.tools and "lemond" not in facts.tools:
        return None
    from ojai_setup.domain.lemonade import detect_layout  # only where Lemonade is installed

    layout = detect_layout(root, home)
    config: dict = {}
    path = f"{layout.config_dir}/config.json"
    if root.exists(path):
        try:
            loaded = json.loads(root.read_text(path))
            config = loaded if isinstance(loaded, dict) else {}
        except ValueError:
            config = {}
    return LemonadeView(layout=layout, config=config)


def initramfs_for_modprobe(root: Root, facts: Facts) -> Facts:
    """With ``--ttm-via modprobe``: what the initramfs of the kernel that will boot carries,
    also where no modprobe.d setting exists yet (doctor lists it only where one does, since
    listing takes seconds): the step rebuilds it only when it loads the TTM module."""
    boot = facts.boot
    image = boot.generated.initrd if boot and boot.generated else None
    if boot is None or boot.initramfs is not None or not image:
        return facts
    from ojai_setup.facts.boot import read_initramfs

    initramfs = read_initramfs(root, image, [])
    return facts.model_copy(update={"boot": boot.model_copy(update={"initramfs": initramfs})})


def gather(root: Root, settings: Settings, *, facts: Facts | None = None,  # noqa: C901
           remote: Remote | None = None) -> Context:
    """Everything planning needs, read once. Raises :class:`UsageError` for bad settings
    (an unknown profile, a missing ``--catalog`` file)."""
    facts = facts if facts is not None else collect(root)
    if settings.ttm_via == "modprobe":
        facts = initramfs_for_modprobe(root, facts)
    profile = resolve_profile(facts, settings)
    target = gpu_target(facts, profile)
    user, home = invoking_user(root)
    programs = {name: root.which(name) for name in KNOWN_PROGRAMS}

    catalog = catalog_error = route = route_error = None
    sglang = None
    if settings.model:
        from ojai_setup.domain.sglang import sglang_routes

        wanted = sglang_routes().get(settings.model)
        if wanted is not None:
            from ojai_setup.facts.sglang import read_sglang

            sglang = SglangTarget(route=wanted, install=read_sglang(root))
    if sglang is None and (settings.model or settings.user_catalog):
        from ojai_setup.domain.catalog import CatalogError

        try:
            catalog = user_catalog(root, settings, home)
        except CatalogError as exc:
            catalog_error = str(exc)
    from ojai_setup.facts.llama_install import install_link

    link = install_link(root, settings.install_backend(bool(facts.rocm_version)))
    llama = llama_binary(root, settings, programs, facts, target, link)
    own_footprint = None
    if settings.model and sglang is None:
        try:
            if catalog is None:
                route_error = catalog_error
            else:
                route, own_footprint = catalog_or_own_route(root, settings.model, catalog, llama)
        except OjaiError as exc:
            route_error = str(exc)
    draft_source = None
    if route is not None:
        from ojai_setup.facts.tuning import load_tuning  # only a model route reads it

        try:
            tuned = load_tuning(root).routes.get(route.name)
        except OjaiError as exc:
            route, route_error = None, str(exc)
        else:
            if tuned is not None:
                route, draft_source = tuned_route(route, tuned)
                llama = tuned_binary(root, llama, tuned)
            else:
                draft_source = "catalog default"

    release = release_error = None
    if settings.llamacpp == "nightly" and sglang is None:  # the SGLang route runs no llama.cpp
        if settings.llamacpp_backend == "vulkan":  # one build for every GPU: no target needed
            try:
                release = installed_release(root, settings.llamacpp_tag, VULKAN, link) or \
                    (remote or Remote.github()).release(settings.llamacpp_tag, VULKAN)
            except ReleaseNotFound:
                release_error = withdrawn_advice(settings.llamacpp_tag or "", VULKAN)
            except RemoteError as exc:
                release_error = _offline_advice(root, str(exc).rstrip("."))
            except OjaiError as exc:
                release_error = str(exc)
        elif target is None:
            release_error = ("no GPU target detected, so no nightly build can be chosen; build "
                             "from source instead: --llamacpp source --backend cpu (or --profile NAME)")
        else:
            try:
                family = family_for_target(target)
                release = installed_release(root, settings.llamacpp_tag, family, link) or \
                    (remote or Remote.github()).release(settings.llamacpp_tag, family)
            except ReleaseNotFound:
                release_error = withdrawn_advice(settings.llamacpp_tag or "")
            except RemoteError as exc:
                release_error = _offline_advice(root, str(exc).rstrip("."))
            except OjaiError as exc:
                release_error = str(exc)

    toolchain_error = None if sglang else hip_toolchain_error(root, facts, settings, target)

    lemonade = lemonade_view(root, facts, home)
    lemonade_deb = lemonade_deb_error = None
    if settings.lemonade == "release" and lemonade is None and sglang is None:
        try:
            lemonade_deb = (remote or Remote.github()).lemonade_release(settings.lemonade_tag)
        except RemoteError as exc:
            lemonade_deb_error = offline_advice(str(exc), settings.lemonade_tag)

    try:
        state, state_error = read_state(root), None
    except OjaiError as exc:
        state, state_error = State(), str(exc)

    hub_error = None
    if route is not None and not settings.lemonade_downloads:
        hub_error = hub_error_for(root, route, settings.models_dir, remote or Remote.github())

    free = free_error = None
    if settings.model and sglang is None:
        try:
            free = free_bytes(root.resolve(settings.models_dir))
        except (OjaiError, OSError) as exc:
            free_error = str(exc)

    api_key_sha256 = api_key_error = None
    if settings.api_key_file is not None:
        api_key_sha256, api_key_error = api_key_digest(settings.api_key_file)
        if api_key_error is not None:
            raise UsageError(api_key_error)

    more: list[RouteTarget] = []
    for asked in settings.extra_models:
        if sglang is not None or sglang_routes_has(asked):
            raise UsageError(f"--model {asked}: an SGLang route is served alone, not beside "
                             "other routes; give it as the only --model")
        more.append(route_target(root, settings, asked, catalog, catalog_error, llama, remote))

    return Context(
        root=root, facts=facts, settings=settings, profile=profile,
        budget_gib=budget_gib(facts, settings, profile),
        kept_limit=kept_limit(facts, settings, profile), gpu_target=target, user=user,
        home=home, catalog=catalog, catalog_error=catalog_error, route=route,
        route_error=route_error, release=release, release_error=release_error,
        llama=llama, llama_link=link, lemonade=lemonade,
        lemonade_deb=lemonade_deb, lemonade_deb_error=lemonade_deb_error,
        state=state, state_error=state_error, models_free_bytes=free,
        models_free_error=free_error, programs=programs, api_key_sha256=api_key_sha256,
        api_key_error=api_key_error, groups=machine_groups(root),
        draft_length_source=draft_source, toolchain_error=toolchain_error,
        hub_error=hub_error,
        footprint=(route_footprint(root, route, settings.models_dir) if route else None)
        or own_footprint,
        sglang=sglang, more_routes=tuple(more))


def sglang_routes_has(name: str) -> bool:
    from ojai_setup.domain.sglang import sglang_routes

    return name in sglang_routes()


def route_target(root: Root, settings: Settings, asked: str, catalog: Catalog | None,
                 catalog_error: str | None, llama: LlamaBinary,
                 remote: Remote | None) -> RouteTarget:
    """One more route of a deployment of several, read as the first one is: the catalog's
    route or the owner's own model, ``ojai tune``'s choice laid over it, whether the Hub
    serves its files still to download, and its sizes from its files once downloaded."""
    if catalog is None:
        return RouteTarget(asked=asked, route=None, error=catalog_error or "no catalog")
    try:
        route, own_footprint = catalog_or_own_route(root, asked, catalog, llama)
    except OjaiError as exc:
        return RouteTarget(asked=asked, route=None, error=str(exc))
    from ojai_setup.facts.tuning import load_tuning

    try:
        tuned = load_tuning(root).routes.get(route.name)
    except OjaiError as exc:
        return RouteTarget(asked=asked, route=None, error=str(exc))
    source = "catalog default"
    if tuned is not None:
        route, source = tuned_route(route, tuned)
    hub_error = None
    if not settings.lemonade_downloads:
        hub_error = hub_error_for(root, route, settings.models_dir, remote or Remote.github())
    return RouteTarget(asked=asked, route=route, footprint=route_footprint(
        root, route, settings.models_dir) or own_footprint, hub_error=hub_error,
        draft_length_source=source)


def catalog_or_own_route(root: Root, model: str, catalog: Catalog,
                         llama: LlamaBinary) -> tuple[Route, Footprint | None]:
    """The route ``--model`` names: a Hugging Face file or repository
    (:func:`~ojai_setup.planning.own_model.resolve_own_model`, with its footprint from the Hub),
    else the catalog's route of that name (its footprint: None, the catalog's)."""
    from ojai_setup.domain.own_model import local_model_path, parse_model_ref

    local = local_model_path(model, relative_to=None if root.path != Path("/") else Path.cwd())
    if local is not None:
        from ojai_setup.planning.own_model import resolve_local_model

        return resolve_local_model(root, model, local, llama)
    ref = parse_model_ref(model)
    if ref is None:
        return catalog.get(model), None
    from ojai_setup.planning.own_model import resolve_own_model

    return resolve_own_model(root, ref, llama)


def hub_error_for(root: Root, route: Route, models_dir: str, remote: Remote) -> str | None:
    """Why the hub will not serve the route's files still to download (the first that fails),
    or None: they are all on disk, the hub serves them, or ``remote`` does not ask."""
    if remote.hub is None:
        return None
    from ojai_setup.facts.models import plan_model_downloads

    for download in plan_model_downloads(root, route, models_dir):
        if root.resolve(download.dest).is_file():
            continue  # on disk, only its digest is still to check (the hub is asked then)
        try:
            remote.hub(download.repo_id, download.filename, download.revision)
        except RemoteError as exc:
            return str(exc)
    return None


def hip_toolchain_error(root: Root, facts: Facts, settings: Settings,
                        target: str | None) -> str | None:
    """For a HIP or Vulkan source build (``--llamacpp source``): why the machine's toolchain
    cannot build (for the target), read now so that the dry run blocks the step
    before anything changes; None when it can or no HIP build is asked for."""
    if settings.llamacpp != "source":
        return None
    backend = settings.llamacpp_backend or ("hip" if facts.rocm_version else "cpu")
    if backend == "vulkan":
        from ojai_setup.facts.toolchain import vulkan_toolchain_error

        return vulkan_toolchain_error(root)
    wanted = settings.gpu_target or target
    if backend != "hip" or not wanted:
        return None
    from ojai_setup.facts.toolchain import ToolchainError, check_hip_toolchain

    try:
        check_hip_toolchain(root, wanted)
    except ToolchainError as exc:
        # for the plan: why, what is missing by name, and the ways forward as a list
        import re

        from ojai_setup.planning.result import WAYS_FORWARD

        text = str(exc).replace("; nothing was written for this build", "")
        head, _, rest = text.partition(". Missing: ")
        pieces, _, hint = rest.partition("; install ")
        if not hint:
            return text
        names = ", ".join(re.findall(r"\(([^()]*)\)", pieces)) or pieces
        return (f"{head}. Missing: {names}{WAYS_FORWARD}install {hint}; or build for the CPU "
                "with --backend cpu")
    return None


def route_footprint(root: Root, route: Route, models_dir: str) -> Footprint | None:
    """The route's sizes from its files once they are downloaded (every main file on disk):
    their sizes and the main file's KV layout. None (the catalog's numbers) before that, or
    when the main file cannot be read as GGUF (the model step then says why)."""
    from ojai_setup.domain.deployment import footprint_from_files
    from ojai_setup.facts.gguf import kept_model_info, read_model_info
    from ojai_setup.formats.gguf import GGUFError

    mains = [root.resolve(route.file_path(models_dir, f)) for f in route.main]
    if not all(p.is_file() for p in mains):
        return None
    draft_path = route.draft_path(models_dir)
    draft = root.resolve(draft_path) if draft_path else None
    try:  # the owner's own file is read each time; the model step says why a kept copy failed
        info = (read_model_info(mains[0]) if route.local_dir is not None
                else kept_model_info(root, mains[0])[0])
    except GGUFError:
        return None
    return footprint_from_files(route, sum(p.stat().st_size for p in mains), info,
                                draft.stat().st_size if draft is not None and draft.is_file()
                                else None)


def machine_groups(root: Root) -> frozenset[str] | None:
    """The group names in the machine's ``/etc/group``; None when it has none, or one without
    ``root`` (no system's group database: a test machine's, holding only what ojai added)."""
    try:
        text = root.read_text("/etc/group")
    except OSError:
        return None
    names = frozenset(line.split(":", 1)[0] for line in text.splitlines() if ":" in line)
    return names if "root" in names else None


def api_key_digest(path: str) -> tuple[str | None, str | None]:
    """The digest of the environment file holding the key in ``path``, or why it is unusable."""
    from ojai_setup.domain.launch import LaunchError, read_secret, secret_env
    from ojai_setup.planning.plan import text_digest

    try:
        return text_digest(secret_env(API_KEY_VARIABLE, read_secret(path))), None
    except LaunchError as exc:
        return None, str(exc)


def tuned_binary(root: Root, llama: LlamaBinary, tuned) -> LlamaBinary:
    """The llama-server ``ojai tune`` chose for the route (its backend's own build, e.g. the
    Vulkan build installed beside the ROCm one), probed, when it is on the machine; else the
    one the plan would run, with a warning that says why the choice is not followed."""
    if not tuned.binary or tuned.binary == llama.path:
        return llama
    if not tuned.binary.startswith("/") or not root.exists(tuned.binary):
        return llama._replace(warning=(llama.warning + "; " if llama.warning else "") + (
            f"ojai tune chose {tuned.binary} for this route ({tuned.source()}), which is not on "
            f"this machine: the routes run {llama.path}; run `ojai tune` again"))
    found = probe(root, tuned.binary)
    if isinstance(found, ProbeError):
        return LlamaBinary(path=tuned.binary, installed=True,
                           error=f"cannot read what {tuned.binary} supports: {found.describe()}")
    return LlamaBinary(path=tuned.binary, installed=True, dialect=found,
                       note=f" (the build ojai tune chose for this route, {tuned.source()})")


def tuned_route(route, tuned):
    """The catalog route with ``ojai tune``'s choice laid over it (its kind, length and n-gram
    knobs), and the sentence that says where the drafting settings came from. A choice the
    catalog route cannot carry (no drafting: the plain route is the one to serve; n-gram alone
    on a route with MTP heads) leaves the route as it is, and the sentence says so."""
    from pydantic import ValidationError

    if not tuned.drafting:
        return route, (f"catalog default; {tuned.source()}: serve the plain route {route.name} "
                       f"instead ({tuned.reason})")
    update: dict = {}
    if tuned.draft_n_max is not None:
        update["draft_n_max"] = tuned.draft_n_max
    if tuned.spec_type is not None and tuned.spec_type != route.spec_type_value:
        update["spec_type"] = tuned.spec_type
        types = [t.strip() for t in tuned.spec_type.split(",") if t.strip()]
        if all(is_ngram_type(t) for t in types) and route.mtp is None:
            # n-gram drafting alone reads no draft model
            update.update(draft=None, draft_repo=None, lemonade_draft_checkpoint=None,
                          draft_gpu_layers=None, draft_ctx_size=None, draft_cache_type=None,
                          draft_kv=None)
    if tuned.knobs or "spec_type" in update:
        knobs: dict = {}
        for flag, value in tuned.knobs.items():
            for t in (tuned.spec_type or route.spec_type_value).split(","):
                prefix = f"--spec-{t.strip()}-"
                if flag.startswith(prefix):
                    knobs[flag[len(prefix):].replace("-", "_")] = value
        update["ngram"] = knobs or None
    try:
        data = {**route.model_dump(), **update}
        new = type(route).model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0].get("msg", "") if exc.errors() else ""
        return route, (f"catalog default; ojai tune chose --spec-type {tuned.spec_type} "
                       f"({tuned.source()}), which this catalog route cannot carry: {first}")
    return new, tuned.source()

