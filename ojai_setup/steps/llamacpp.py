"""Put a working ``llama-server`` for this GPU in place: Lemonade's nightly build or a source build.

Both land in a versioned folder under ``/opt/ojai/llama.cpp`` with a link switched atomically, so
a failed install leaves the previous one working: ``current``, or, for a second backend beside the
current build's (Vulkan beside ROCm), a link named after that backend
(:func:`~ojai_setup.facts.llama_install.install_link`), so each route names its own binary.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path, PurePosixPath

from ojai_setup.core.paths import LLAMACPP_DIR
from ojai_setup.core.root import Root
from ojai_setup.core.units import size_text
from ojai_setup.domain import nightly
from ojai_setup.facts.llama_install import is_installed
from ojai_setup.model.actions import BuildFromSource, InstallArchive, ProveBuild
from ojai_setup.model.cmake import args_text, cmake_args
from ojai_setup.planning.context import Context
from ojai_setup.planning.result import SpaceNeed, StepResult

INSTALL_BASE = LLAMACPP_DIR


#: the room a nightly needs, in zip sizes, when its zip's directory cannot be read at planning:
#: the zip, and its unpacked files taken as twice the zip (a lower bound, so that the dry run
#: blocks only what cannot fit; unpacking itself still stops past ARCHIVE_EXPANSION times the zip)
UNPACKED_FACTOR = 3


def _nightly_space(asset: nightly.NightlyAsset) -> SpaceNeed:
    """The room a nightly takes while it is installed: its zip and its unpacked files, as the
    zip's directory gives them, else estimated (:data:`UNPACKED_FACTOR`)."""
    if asset.unpacked_size is not None:
        files = asset.unpacked_size
        said = (f"its zip is {size_text(asset.size)} and its files take "
                f"{size_text(files)} unpacked (read from the zip's directory)")
    else:
        files = asset.size * (UNPACKED_FACTOR - 1)
        said = (f"its zip is {size_text(asset.size)}, and its unpacked files are taken as "
                f"{UNPACKED_FACTOR - 1} times the zip (its directory could not be read)")
    return SpaceNeed(folder=INSTALL_BASE, bytes=asset.size + files,
                     what=f"llama.cpp nightly {asset.tag}",
                     detail=f"{said}: {size_text(asset.size + files)} in all",
                     fix="or keep the installed build with --llamacpp none")


def _label(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")[:40] or "src"


def source_action(ctx: Context) -> BuildFromSource:
    settings = ctx.settings
    backend = settings.install_backend(bool(ctx.facts.rocm_version)) or "cpu"
    if backend == "cpu" and settings.gpu_target:
        raise ValueError(f"--gpu-target {settings.gpu_target} is for a HIP build, not "
                         "--backend cpu")
    if backend == "vulkan" and settings.gpu_target:
        raise ValueError(f"--gpu-target {settings.gpu_target} is for a HIP build; a Vulkan build "
                         "runs on any GPU with a Vulkan driver")
    target = (settings.gpu_target or ctx.gpu_target) if backend == "hip" else None
    if backend == "hip" and target is None:
        raise ValueError("a HIP build needs the GPU's target and none was detected; "
                         "use --gpu-target, --profile or --backend cpu")
    src = settings.llamacpp_src
    name = settings.llamacpp_ref or PurePosixPath(src.rstrip("/")).name.removesuffix(".git")
    for suffix in (".tar.gz", ".tgz"):
        name = name.removesuffix(suffix)
    # several targets (gfx1150,gfx1151) name the folder with dashes
    dest = f"{INSTALL_BASE}/src-{_label(name)}-{backend}" + (
        f"-{target.replace(',', '-')}" if target else "")
    extra = cmake_args(settings.cmake_defines)
    if extra:  # another set of definitions is another build: a folder of its own
        dest += "-d" + hashlib.sha256("\n".join(extra).encode()).hexdigest()[:8]
    return BuildFromSource(
        source=src, ref=settings.llamacpp_ref, backend=backend, gpu_target=target,
        cmake_args=extra, dest=dest, link=ctx.llama_link, needs_root=True,
        reason=f"build llama-server ({backend}{', ' + target if target else ''}) from {src}"
        + (f" with {args_text(extra)}" if extra else ""))


class LlamacppStep:
    name = "llama.cpp"

    def plan(self, ctx: Context) -> StepResult:
        settings = ctx.settings
        if settings.llamacpp == "none":
            return StepResult.satisfied(self.name, "llama.cpp is not managed by ojai here "
                                        "(--llamacpp none)")
        if settings.llamacpp == "source":
            return self._source(ctx)
        if settings.llamacpp == "distro":
            return self._distro(ctx)
        return self._nightly(ctx)

    def _distro(self, ctx: Context) -> StepResult:
        """The distribution's own llama-server: ojai installs nothing, and says what it runs on."""
        from ojai_setup.domain.distro_llama import coverage, install_hint

        d = ctx.facts.distro_llama
        if d is None:
            distro = ctx.facts.distro
            hint = install_hint(distro.id, list(distro.like)) if distro else "its package"
            return StepResult.blocked(self.name, "--llamacpp distro: no llama-server from a "
                                      f"distribution package on PATH; install it with {hint}, "
                                      "or let ojai put one in place (--llamacpp nightly or source)")
        cov = coverage(d, ctx.gpu_target)
        if ctx.settings.llamacpp_backend == "vulkan":
            if "vulkan" not in d.backends:
                from ojai_setup.domain.distro_llama import vulkan_hint

                return StepResult.blocked(self.name, f"--llamacpp distro --backend vulkan: {d.path} "
                                          f"has no Vulkan backend installed ({cov.sentence}); "
                                          f"install it with {vulkan_hint(d)}, or take upstream's "
                                          "Vulkan build with --llamacpp nightly --backend vulkan")
            return StepResult.satisfied(self.name, f"the routes use the distribution's "
                                        f"llama-server on its Vulkan backend: {cov.sentence}")
        if cov.runs_on == "hip" and cov.hip_covers:
            return StepResult.satisfied(self.name, f"the routes use the distribution's "
                                        f"llama-server: {cov.sentence}")
        return StepResult.satisfied(self.name, f"the routes use the distribution's llama-server "
                                    f"(--llamacpp distro): {cov.sentence}",
                                    warnings=(f"{d.path} runs on the {cov.runs_on.upper()} here, "
                                              "not on the GPU through ROCm: for ROCm use "
                                              "--llamacpp nightly or source",))

    def _current_target(self, ctx: Context) -> str | None:
        """What the plan's link (``current``, or a second backend's own) names now."""
        link = ctx.root.resolve(ctx.llama_link)
        return str(link.readlink()) if link.is_symlink() else None

    def _nightly(self, ctx: Context) -> StepResult:
        asset = ctx.release
        if asset is None:
            return StepResult.blocked(self.name, ctx.release_error or "no nightly release known")
        family = asset.family
        action = nightly.install_action(asset).model_copy(update={"link": ctx.llama_link})
        folder = PurePosixPath(action.dest).name
        if is_installed(ctx.root, action.dest, asset.sha256) and \
                self._current_target(ctx) in (folder, action.dest):
            return StepResult.satisfied(
                self.name, f"llama.cpp nightly {asset.tag} for {family} is installed and verified "
                f"in {action.dest}", reads=(action.dest, ctx.llama_link))
        actions, proof = self._proven(ctx, action)
        return StepResult.change(self.name, f"install llama.cpp nightly {asset.tag} for {family} "
                                 f"({asset.size / 2**20:.0f} MiB, sha256 checked before unpacking)"
                                 + proof, actions,
                                 space=(_nightly_space(asset),) if asset.size else (),
                                 reads=self._proof_reads(actions))

    def _proven(self, ctx: Context, action: InstallArchive | BuildFromSource
                ) -> tuple[list, str]:
        """The actions of an install, and what the sentence adds: an upgrade (a build is
        current, another folder is asked for, routes run) installs beside the current build
        and leaves the link to a :class:`ProveBuild` that switches it only once the new build
        passed the gate and the speed check (:mod:`ojai_setup.domain.upgrade`)."""
        from ojai_setup.domain.upgrade import MAX_LOSS, plan_sentence, routes_to_compare

        current = self._current_target(ctx)
        folder = PurePosixPath(action.dest).name
        if current is None or current in (folder, action.dest) or \
                not ctx.root.resolve(f"{ctx.llama_link}/llama-server").is_file():
            return [action], ""
        routes = routes_to_compare(ctx.state.records.get("routes") or {})
        if not routes:
            return [action], (f"; no route runs on the current build ({current}), so current "
                              "switches without a comparison")
        prove = ProveBuild(
            candidate=action.dest, link=ctx.llama_link, before=current, routes=routes,
            max_loss=MAX_LOSS, accept_slower=ctx.settings.accept_slower, needs_root=True,
            reason=f"prove the new build against {current} before current switches")
        return [action.model_copy(update={"link": None}), prove], (
            f", beside the current build {current}; "
            + plan_sentence(list(routes), max_loss=MAX_LOSS,
                            accept_slower=ctx.settings.accept_slower))

    @staticmethod
    def _proof_reads(actions: list) -> tuple[str, ...]:
        """The launch scripts a proof reads (their digests go into the plan's fingerprint)."""
        return tuple(p for a in actions if isinstance(a, ProveBuild) for p in a.routes.values())

    def _source(self, ctx: Context) -> StepResult:
        try:
            action = source_action(ctx)
        except ValueError as exc:
            return StepResult.blocked(self.name, str(exc))
        folder = PurePosixPath(action.dest).name
        built = built_sentence(ctx.root, action)
        if built is not None and self._current_target(ctx) in (folder, action.dest):
            return StepResult.satisfied(self.name, built, reads=(action.dest, ctx.llama_link))
        if action.backend == "hip" and ctx.toolchain_error:
            # the toolchain's error ends in its ways forward, the CPU build among them
            return StepResult.blocked(self.name, ctx.toolchain_error)
        if action.backend == "vulkan" and ctx.toolchain_error:
            return StepResult.blocked(self.name, f"{ctx.toolchain_error}; or build for the "
                                      "CPU with --backend cpu")
        from ..domain.costs import disk_need, estimate

        need = disk_need(action.backend, action.gpu_target, action.cmake_args)
        cost = estimate(action.backend, action.gpu_target, action.cmake_args)
        actions, proof = self._proven(ctx, action)
        return StepResult.change(
            self.name, f"{action.reason} ({cost}; progress is shown){proof}", actions,
            reads=self._proof_reads(actions),
            space=(SpaceNeed(
                folder=INSTALL_BASE, bytes=need, what="building llama-server",
                detail=f"the build needs about {size_text(need)} ({cost})"),) if need else ())


def _newest_mtime_ns(folder: Path) -> int:
    """The latest modification time of any file or folder under ``folder`` (``.git`` aside)."""
    newest = folder.lstat().st_mtime_ns
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in dirnames + filenames:
            newest = max(newest, os.lstat(os.path.join(dirpath, name)).st_mtime_ns)
    return newest


def built_sentence(root: Root, action: BuildFromSource) -> str | None:
    """Why ``action.dest`` already holds the build ``action`` asks for, or None to build it.

    A tarball or a git tag/commit is the same build when its digest or ref is
    (:func:`~ojai_setup.facts.llama_install.is_built`). A directory is rebuilt only when a file in it
    changed after the install; a git branch is not followed once built (pin a tag or commit
    with ``--llamacpp-ref`` to move on), since an apply must leave nothing to do behind it.
    """
    from ojai_setup.domain.build import INSTALL_RECORD
    from ojai_setup.domain.build import SERVER as BINARY
    from ojai_setup.facts.llama_install import is_built, read_install_record

    done = f"llama-server built from {action.source} is installed in {action.dest}"
    if is_built(root, action):
        return done
    record = read_install_record(root, action.dest)
    dest = root.resolve(action.dest)
    if record is None or not (dest / BINARY).is_file() or (
            record.source, record.ref, record.backend, record.gpu_target, record.extra_cmake_args
    ) != (action.source, action.ref, action.backend, action.gpu_target, action.cmake_args):
        return None
    if record.source_kind == "directory":
        source = root.resolve(action.source)
        if not source.is_dir() or \
                _newest_mtime_ns(source) > (dest / INSTALL_RECORD).stat().st_mtime_ns:
            return None
        return done + " (no source file changed since)"
    if record.source_kind == "git":
        at = f"{action.ref} at commit {record.git_commit}" if action.ref else \
            f"commit {record.git_commit} of the default branch"
        return (f"{done} ({at}; to update, pin a newer tag or commit with --llamacpp-ref)")
    return None
