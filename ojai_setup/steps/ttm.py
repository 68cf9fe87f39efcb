"""The GPU memory limit: ``ttm.pages_limit`` (or ``amdttm.pages_limit``) where the next boot
takes it from.

The iGPU allocates from system memory through TTM, which the kernel caps at about half of RAM.
This step first asks the boot path fact (``boot.loader``, :mod:`ojai_setup.boot.detect`)
what decides the next boot's kernel command line, and edits that, by key, with the follow-ups
that make the edit reach the boot: the boot path's own module plans it
(:meth:`ojai_setup.boot.base.BootPath.plan`, one module per path in
:mod:`ojai_setup.boot.table`). A boot path that is unknown, or whose markers disagree, blocks
the step with what was seen: a file that decides nothing is never edited, and "satisfied" is
said only about the file that decides.

``--ttm-via modprobe`` takes the route AMD's ``amd-ttm --set`` takes (amd-debug-tools):
``options ttm pages_limit=N`` in ``/etc/modprobe.d``, and the initramfs rebuilt when it carries
the module. It works on any boot path while ttm is a module. Any ``options ttm pages_limit=``
already in /etc/modprobe.d is brought to the same value on the command line route too.
"""

from __future__ import annotations

from ojai_setup.boot.base import REBOOT, Blocked, Satisfied, Want
from ojai_setup.boot.table import path_of
from ojai_setup.core.paths import GIB, GRUB_DEFAULT, PAGE, TTM_MODULES
from ojai_setup.formats.kernel_params import cmdline_param
from ojai_setup.formats.modprobe import (
    ModprobeEditError,
    module_option_settings,
    remove_module_option,
    set_module_option,
)
from ojai_setup.model.actions import RunCommand, WriteFile
from ojai_setup.model.facts import BootLoader
from ojai_setup.planning.context import Context
from ojai_setup.planning.result import StepResult

PAGES_PER_GIB = GIB // PAGE  # 262144
MIN_OS_GIB = 4
STEP = "gpu-memory"
#: ojai's own modprobe.d file (kmod reads the files in name order; a later value wins)
OJAI_MODPROBE = "/etc/modprobe.d/99-ojai-ttm.conf"
OJAI_MODPROBE_TEXT = """\
# Written by ojai: the GPU memory limit (TTM pages), read when the {module} module loads.
# `ojai rollback` removes it.
options {module} pages_limit={pages}
"""
#: dracut copies /etc/modprobe.d into its image only in host-only mode (90kernel-modules'
#: module-setup.sh; Debian's dracut builds without it): ojai's drop-in names the files
OJAI_DRACUT = "/etc/dracut.conf.d/99-ojai-ttm.conf"
OJAI_DRACUT_TEXT = """\
# Written by ojai: the modprobe.d files that hold the GPU memory limit go
# into the initramfs in every mode (dracut copies /etc/modprobe.d only in
# host-only mode). `ojai rollback` removes it.
install_items+=" {paths} "
"""
#: kmod reads /proc/cmdline after the modprobe.d files (libkmod-config.c, kmod_config_new),
#: and a module takes the last value it is given
CMDLINE_WINS = ("the kernel command line wins: kmod applies /proc/cmdline's module options "
                "after /etc/modprobe.d's")


def pages_for(gib: int) -> int:
    return gib * PAGES_PER_GIB


def _read(ctx: Context, path: str) -> str | None:
    try:
        return ctx.root.read_text(path)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None


# -- modprobe.d ------------------------------------------------------------------------------
def _modprobe_files(ctx: Context) -> list[tuple[str, str]]:
    return [(p, _read(ctx, p) or "") for p in ctx.root.glob("/etc/modprobe.d/*.conf")]


def _align_modprobe(ctx: Context, want: Want, reads: list[str],
                    files: list[tuple[str, str]]) -> list[WriteFile] | StepResult:
    """Every ``options ttm|amdttm pages_limit=`` brought to one setting for the live module."""
    out: list[WriteFile] = []
    other_mods = [m for m in TTM_MODULES if m != want.module]
    for path, text in files:
        reads.append(path)
        new = text
        try:
            found = [f for mod in TTM_MODULES
                     for f in module_option_settings([(path, text)], mod, "pages_limit")]
            if any(f.module != want.module or f.value != str(want.pages) for f in found):
                for other in other_mods:
                    new = remove_module_option(new, other, "pages_limit", source=path)
                new = set_module_option(new, want.module, "pages_limit", str(want.pages),
                                        source=path)
        except ModprobeEditError as exc:
            return StepResult.blocked(STEP, f"{exc} (the file was not changed)",
                                      reads=tuple(reads))
        if new != text:
            out.append(WriteFile(path=path, before=text, after=new, needs_root=True,
                                 needs_reboot=REBOOT, notify=("initramfs",),
                                 reason=f"bring {path} to the limit ({want.pages} pages)"))
    return out


def _initramfs_handler(ctx: Context, loader: BootLoader, *, every: bool
                       ) -> dict[str, RunCommand] | str:
    """The rebuild that puts /etc/modprobe.d into the initramfs, with the tool the machine
    uses (``every``: for every installed kernel, as amd-ttm does; else the one that boots).
    A string says why there is none."""
    facts = ctx.facts
    gen = facts.boot.generated if facts.boot else None
    release = (gen.release if gen and gen.release else
               facts.kernel.release if facts.kernel else None)
    own = path_of(loader.kind).initramfs(ctx, loader, None if every else release)
    if own is not None:  # the boot path puts the initramfs where it boots from itself
        return own
    why = "rebuild the initramfs (it carries /etc/modprobe.d)"
    if ctx.which("update-initramfs"):
        argv = ("update-initramfs", "-u", "-k", "all" if every or not release else release)
    elif ctx.which("dracut"):
        argv = (("dracut", "--force", "--regenerate-all") if every or not release
                else ("dracut", "--force", "--kver", release))
    elif ctx.which("mkinitcpio"):
        argv = ("mkinitcpio", "-P")
    elif ctx.which("booster"):
        argv = ("/usr/lib/booster/regenerate_images",)
    else:
        return ("none of update-initramfs, dracut, mkinitcpio or booster is installed, so "
                "nothing would rebuild the initramfs that may load the TTM module; rebuild it "
                "with your distribution's tool after the change")
    return {"initramfs": RunCommand(argv=argv, needs_root=True, reason=why)}


def _plan_modprobe(ctx: Context, want: Want, loader: BootLoader, reads: list[str],
                   why: str) -> StepResult:
    """The modprobe.d route (``--ttm-via modprobe``), as amd-ttm takes it."""
    facts = ctx.facts
    ttm = facts.ttm
    if ttm is not None and ttm.builtin:
        return StepResult.blocked(
            STEP, f"{want.module} is built into this kernel ({ttm.builtin}), so modprobe.d "
            "never reaches it: only the kernel command line sets its limit; use --ttm-via "
            "cmdline", reads=tuple(reads))
    files = _modprobe_files(ctx)
    contradicts = []
    configured = ttm.configured_cmdline() if ttm else None
    if configured is not None and configured[1] != want.pages:
        contradicts.append(f"{configured[0]}={configured[1]} in {configured[2]}")
    if facts.ttm and facts.ttm.cmdline_pages is not None and facts.ttm.cmdline_pages != want.pages:
        contradicts.append(f"{facts.ttm.cmdline_key}={facts.ttm.cmdline_pages} on /proc/cmdline")
    if contradicts:
        return StepResult.blocked(
            STEP, f"the kernel command line sets another limit ({'; '.join(contradicts)}), "
            f"and {CMDLINE_WINS}.", reads=tuple(reads),
            ways=("remove it there, then run ojai again", "--ttm-via cmdline"))
    has_setting = [p for p, t in files if any(module_option_settings([(p, t)], mod, "pages_limit")
                                              for mod in TTM_MODULES)]
    aligned = _align_modprobe(ctx, want, reads, [(p, t) for p, t in files if p in has_setting])
    if isinstance(aligned, StepResult):
        return aligned
    actions: list = list(aligned)
    if not has_setting:
        text = _read(ctx, OJAI_MODPROBE)
        actions.append(WriteFile(path=OJAI_MODPROBE, before=text, needs_root=True,
                                 after=OJAI_MODPROBE_TEXT.format(module=want.module,
                                                                 pages=want.pages),
                                 needs_reboot=REBOOT, notify=("initramfs",),
                                 reason=f"options {want.module} pages_limit={want.pages} "
                                 f"({want.gib} GiB for the GPU)"))
    ir = facts.boot.initramfs if facts.boot else None
    if not actions:
        where = ", ".join(dict.fromkeys(has_setting))
        stale = ir is not None and ir.carries_ttm and (ir.missing or ir.older_than or (
            ir.pages is not None and ir.pages != want.pages))
        if stale:
            handlers = _initramfs_handler(ctx, loader, every=False)
            if isinstance(handlers, str):
                return StepResult.blocked(STEP, handlers, reads=tuple(reads))
            dropin = _dracut_dropin(ctx, list(dict.fromkeys(has_setting)), handlers, reads)
            sentence = (f"options {want.module} pages_limit={want.pages} is set in {where}, but "
                        f"the initramfs {ir.image} (which loads {want.module}) was built without "
                        "it; " + (f"write {OJAI_DRACUT} so that dracut takes it in, then "
                                  if dropin else "")
                        + f"run {'; '.join(' '.join(h.argv) for h in handlers.values())}")
            records = {"ttm": {"expected_pages": want.pages, "module": want.module}}
            if dropin is not None:  # the rebuild follows the drop-in it needs
                return StepResult.change(STEP, sentence, [dropin], reads=tuple(reads),
                                         handlers=handlers, records=records)
            return StepResult.change(STEP, sentence, list(handlers.values()), reads=tuple(reads),
                                     records=records)
        return StepResult.satisfied(
            STEP, f"options {want.module} pages_limit={want.pages} ({want.gib} GiB for the "
            f"GPU) is already set in {where} ({why})" + _amd_ttm_note(ctx, reads),
            reads=tuple(reads))
    if ir is not None and ir.error is None and ir.carries_ttm is False:
        handlers: dict[str, RunCommand] | str = {}
        note = (f"; the initramfs {ir.image} does not carry {want.module}, so it loads from the "
                "root file system and reads /etc/modprobe.d there: no rebuild")
    else:
        handlers = _initramfs_handler(ctx, loader, every=True)
        if isinstance(handlers, str):
            return StepResult.blocked(STEP, handlers, reads=tuple(reads))
        dropin = _dracut_dropin(ctx, list(dict.fromkeys(has_setting)) or [OJAI_MODPROBE],
                                handlers, reads)
        if dropin is not None:
            actions.append(dropin)
        note = ("; then " + "; ".join(" ".join(h.argv) for h in handlers.values())
                + (" (the initramfs loads ttm)" if ir is not None and ir.carries_ttm else
                   " (ojai could not list the initramfs, so it is rebuilt in case it loads ttm)"))
    if not handlers:
        actions = [a.model_copy(update={"notify": ()}) for a in actions]
    else:
        actions = [a.model_copy(update={"notify": tuple(handlers)}) for a in actions]
    sentence = (f"set the GPU memory limit to {want.gib} GiB (options {want.module} "
                f"pages_limit={want.pages}) in {', '.join(a.path for a in actions)} ({why})"
                + note + _amd_ttm_note(ctx, reads))
    return StepResult.change(STEP, sentence, actions, reads=tuple(reads), handlers=handlers,
                             records={"ttm": {"expected_pages": want.pages,
                                              "module": want.module}})


def _amd_ttm_note(ctx: Context, reads: list[str]) -> str:
    """Where AMD's amd-ttm is installed too: what it rebuilds after ``amd-ttm --set``, by its
    version (``checks/tables/amd-ttm.toml``, :mod:`ojai_setup.domain.amd_ttm`)."""
    from ojai_setup.domain.amd_ttm import DIST_INFO, note, version_of

    found = [p for pattern in DIST_INFO for p in ctx.root.glob(pattern)]
    if not found:
        return ""
    reads.extend(found)
    return "; " + note(version_of(found[-1]))


def _dracut_dropin(ctx: Context, paths: list[str], handlers: dict[str, RunCommand],
                   reads: list[str]) -> WriteFile | None:
    """When dracut rebuilds the initramfs: ojai's dracut.conf.d drop-in that puts ``paths`` into
    it (dracut copies /etc/modprobe.d only in host-only mode), unless it already says so."""
    if not any(h.argv[0] == "dracut" for h in handlers.values()):
        return None
    reads.append(OJAI_DRACUT)
    before = _read(ctx, OJAI_DRACUT)
    after = OJAI_DRACUT_TEXT.format(paths=" ".join(paths))
    if before == after:
        return None
    return WriteFile(path=OJAI_DRACUT, before=before, after=after, needs_root=True,
                     needs_reboot=REBOOT, notify=tuple(handlers),
                     reason="have dracut put " + ", ".join(paths) + " into the initramfs (it "
                     "copies /etc/modprobe.d only in host-only mode)")


# -- staleness of what the boot reads ---------------------------------------------------------
def _generated_is_stale(ctx: Context, want: Want, loader: BootLoader, *, modprobe_edited: bool,
                        initramfs: dict[str, RunCommand] | str) -> tuple[list[RunCommand], str] | None:
    """A regeneration owed although the files are right: the default entry (grub.cfg, the BLS
    or loader entry, the UKI, limine.conf) or the initramfs of the kernel that will boot does
    not carry the configured limit."""
    facts = ctx.facts
    boot = facts.boot
    gen = boot.generated if boot else None
    if gen is not None and cmdline_param(gen.tokens, want.key) != str(want.pages):
        said = f"{gen.config} (default entry '{gen.title}') still boots without it"
        commands = path_of(loader.kind).regenerate(ctx, want, loader, gen)
        return None if commands is None else (commands, said)
    ir = boot.initramfs if boot else None
    if (not modprobe_edited and facts.ttm and facts.ttm.modprobe and ir is not None
            and ir.carries_ttm and (ir.missing or ir.older_than) and not isinstance(initramfs, str)):
        return ([h.model_copy(update={"needs_reboot": REBOOT}) for h in initramfs.values()],
                f"the initramfs {ir.image} was built before "
                f"{', '.join(ir.missing + ir.older_than)} changed")
    return None


class TtmStep:
    name = STEP

    def plan(self, ctx: Context) -> StepResult:
        if ctx.profile.no_ttm:
            return StepResult.satisfied(self.name, f"no GPU memory limit (TTM) to set on "
                                        f"this {ctx.profile.id} node: {ctx.profile.no_ttm}")
        facts = ctx.facts
        if facts.memory is None:
            return StepResult.blocked(self.name, "cannot size the GPU memory limit: "
                                      + facts.unknown.get("memory", "memory size unknown"))
        total = facts.memory.total_gib
        kept = ctx.kept_limit
        gib = kept.gib if kept else ctx.budget_gib
        if total - gib < MIN_OS_GIB and kept is None:
            return StepResult.blocked(
                self.name, f"a GPU budget of {gib} GiB leaves the OS {total - gib:.1f} GiB of "
                f"{total:.1f} GiB; keep at least {MIN_OS_GIB} GiB (use --gpu-memory "
                f"{max(1, int(total) - MIN_OS_GIB)} or less)")
        module = facts.ttm.live_module if facts.ttm and facts.ttm.live_module else "ttm"
        want = Want(gib=gib, pages=kept.pages if kept else pages_for(gib), module=module)
        result = self._plan(ctx, want)
        if kept is None or result.status == "blocked":  # a block says only why
            return result
        # which limit it kept and why, first: the owner's own setting is not lowered
        note = ""
        if total - kept.pages * PAGE / GIB < MIN_OS_GIB:
            note = (f" (it lets the GPU take all but {max(0.0, total - kept.pages * PAGE / GIB):.1f}"
                    f" GiB of the {total:.1f} GiB; the models are sized within "
                    f"{ctx.budget_gib} GiB)")
        return result.model_copy(update={"sentence": f"{kept.sentence(note)}; {result.sentence}"})

    def _plan(self, ctx: Context, want: Want) -> StepResult:
        facts, gib, module = ctx.facts, want.gib, want.module
        loader = (facts.boot.loader if facts.boot and facts.boot.loader else
                  BootLoader(kind="unknown", conflicts=[facts.unknown.get(
                      "boot.loader", "the boot path was not read")]))
        path = path_of(loader.kind)
        # the files looked at go into the plan's fingerprint: GRUB's only where GRUB boots
        reads: list[str] = [GRUB_DEFAULT] if path.grub else []
        via = ctx.settings.ttm_via
        if via == "modprobe":
            return _plan_modprobe(ctx, want, loader, reads, "--ttm-via modprobe")
        ttm = facts.ttm
        good_modprobe = bool(ttm and ttm.modprobe) and all(
            s.module == want.module and s.pages == want.pages for s in ttm.modprobe)
        if (via == "auto" and good_modprobe and ttm is not None and ttm.cmdline_pages is None
                and ttm.configured_cmdline() is None):
            return _plan_modprobe(ctx, want, loader, reads, "the route already taken here; "
                                  "--ttm-via cmdline puts it on the kernel command line too")
        planned = path.plan(ctx, want, loader, reads)
        if isinstance(planned, Blocked):
            return StepResult.blocked(self.name, planned.sentence, reads=tuple(reads),
                                      ways=planned.ways)
        if isinstance(planned, Satisfied):
            return StepResult.satisfied(self.name, planned.sentence,
                                        reads=tuple(dict.fromkeys(reads)))
        actions: list = list(planned.actions)
        handlers = dict(planned.handlers)
        aligned = _align_modprobe(ctx, want, reads, _modprobe_files(ctx))
        if isinstance(aligned, StepResult):
            return aligned
        initramfs = _initramfs_handler(ctx, loader, every=False)
        if aligned:
            if isinstance(initramfs, str):
                return StepResult.blocked(self.name, initramfs, reads=tuple(reads))
            if set(initramfs) & set(handlers):
                # the same kernel-install copies the rebuilt initramfs: the rebuild runs
                # before it, whichever change notifies first
                handlers = {**initramfs, **{k: v for k, v in handlers.items()
                                            if k not in initramfs}}
                actions = [a.model_copy(update={"notify": tuple(handlers)}) for a in actions]
            else:
                handlers.update(initramfs)
            actions += [a.model_copy(update={"notify": tuple(initramfs)}) for a in aligned]
        if not actions:
            stale = _generated_is_stale(ctx, want, loader, modprobe_edited=False,
                                        initramfs=initramfs)
            if stale:
                commands, why = stale
                return StepResult.change(
                    self.name, f"{want.param} ({gib} GiB for the GPU) is configured in "
                    f"{planned.where}, but {why}; run "
                    f"{'; '.join(' '.join(c.argv) for c in commands)} so that the next boot uses it",
                    commands, reads=tuple(reads),
                    records={"ttm": {"expected_pages": want.pages, "module": module}})
            how = f"{want.key}={planned.current}" if planned.current else want.key
            return StepResult.satisfied(
                self.name, f"{how} ({gib} GiB for the GPU) is already set in {planned.where}"
                + (f" ({path.title})" if not path.grub else "")
                + ("" if not ttm or not ttm.modprobe else " and /etc/modprobe.d agrees"),
                reads=tuple(reads))
        sentence = f"set the GPU memory limit to {gib} GiB ({want.param})" + planned.detail
        if planned.said:
            sentence += "; also " + "; ".join(planned.said)
        if ttm and ttm.active_pages:
            sentence += f"; active now: {ttm.active_pages * PAGE / GIB:.1f} GiB"
        return StepResult.change(
            self.name, sentence, actions, reads=tuple(dict.fromkeys(reads)), handlers=handlers,
            records={"ttm": {"expected_pages": want.pages, "module": module}})
