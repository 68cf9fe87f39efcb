"""Put a working ``llama-server`` for this GPU in place: Lemonade's nightly build or a source build.

Both land in a versioned folder under ``/opt/ojai/llama.cpp`` with a ``current`` link switched
atomically, so a failed install leaves the previous one working.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from ..actions import BuildFromSource
from ..facts.models import Facts
from .base import PlanContext, StepResult

INSTALL_BASE = "/opt/ojai/llama.cpp"
CURRENT = f"{INSTALL_BASE}/current"
SERVER = f"{CURRENT}/llama-server"


def gpu_target(facts: Facts, settings) -> str | None:
    """The GPU's own gfx target: rocminfo's (unless overridden), else the profile's."""
    gpu = facts.gpu
    if gpu and gpu.targets and not gpu.hsa_override:
        return gpu.targets[0]
    from ..checks import detect_profile, load_profile

    profile = load_profile(settings.profile) if settings.profile else detect_profile(facts)
    return profile.gpu_target


def _label(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-.")[:40] or "src"


def source_action(facts: Facts, settings) -> BuildFromSource:
    backend = settings.llamacpp_backend or ("hip" if facts.rocm_version else "cpu")
    target = gpu_target(facts, settings) if backend == "hip" else None
    if backend == "hip" and target is None:
        raise ValueError("a HIP build needs the GPU's target and none was detected; "
                         "use --profile or --backend cpu")
    src = settings.llamacpp_src
    name = settings.llamacpp_ref or PurePosixPath(src.rstrip("/")).name.removesuffix(".git")
    for suffix in (".tar.gz", ".tgz"):
        name = name.removesuffix(suffix)
    dest = f"{INSTALL_BASE}/src-{_label(name)}-{backend}" + (f"-{target}" if target else "")
    return BuildFromSource(
        source=src, ref=settings.llamacpp_ref, backend=backend, gpu_target=target, dest=dest,
        link=CURRENT, needs_root=True,
        reason=f"build llama-server ({backend}{', ' + target if target else ''}) from {src}")


class LlamacppStep:
    name = "llama.cpp"

    def plan(self, ctx: PlanContext) -> StepResult:
        facts: Facts = ctx.facts  # type: ignore[assignment]
        settings = ctx.settings
        if settings.llamacpp == "none":
            return StepResult.satisfied(self.name, "llama.cpp is not managed by ojai here "
                                        "(--llamacpp none)")
        if settings.llamacpp == "source":
            return self._source(ctx, facts, settings)
        return self._nightly(ctx, facts, settings)

    def _current_target(self, ctx: PlanContext) -> str | None:
        link = ctx.root.resolve(CURRENT)
        return str(link.readlink()) if link.is_symlink() else None

    def _nightly(self, ctx: PlanContext, facts: Facts, settings) -> StepResult:
        from ..llamacpp import nightly

        target = gpu_target(facts, settings)
        if target is None:
            return StepResult.blocked(self.name, "no GPU target detected, so no nightly build "
                                      "can be chosen; build from source instead: "
                                      "--llamacpp source --backend cpu (or --profile NAME)")
        try:
            family = nightly.family_for_target(target)
            asset = nightly.resolve_release(None, settings.llamacpp_tag, family)
        except nightly.NightlyError as exc:
            return StepResult.blocked(self.name, str(exc))
        action = nightly.install_action(asset)
        folder = PurePosixPath(action.dest).name
        if nightly.is_installed(ctx.root, action.dest, asset.sha256) and \
                self._current_target(ctx) in (folder, action.dest):
            return StepResult.satisfied(
                self.name, f"llama.cpp nightly {asset.tag} for {family} is installed and verified "
                f"in {action.dest}", reads=(action.dest, CURRENT))
        return StepResult.change(self.name, f"install llama.cpp nightly {asset.tag} for {family} "
                                 f"({asset.size / 2**20:.0f} MiB, sha256 checked before unpacking)",
                                 [action])

    def _source(self, ctx: PlanContext, facts: Facts, settings) -> StepResult:
        from ..llamacpp.build import is_built

        try:
            action = source_action(facts, settings)
        except ValueError as exc:
            return StepResult.blocked(self.name, str(exc))
        folder = PurePosixPath(action.dest).name
        if is_built(ctx.root, action) and self._current_target(ctx) in (folder, action.dest):
            return StepResult.satisfied(self.name, f"llama-server built from {action.source} is "
                                        f"installed in {action.dest}", reads=(action.dest, CURRENT))
        return StepResult.change(self.name, action.reason + " (takes minutes; progress is shown)",
                                 [action])
