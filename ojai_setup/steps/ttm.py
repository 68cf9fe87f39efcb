"""The GPU memory limit: ``ttm.pages_limit`` (or ``amdttm.pages_limit``) in GRUB.

The iGPU allocates from system memory through TTM, which the kernel caps at about half of RAM.
This step writes the wanted limit into ``GRUB_CMDLINE_LINUX_DEFAULT`` by key, brings any
``options ttm pages_limit=`` in /etc/modprobe.d to the same value, and notifies the handlers
that make the edit reach the next boot (grub.cfg, the initramfs).
"""

from __future__ import annotations

from ojai_setup.core.paths import GIB, GRUB_DEFAULT, OJAI_GRUB_DROPIN, PAGE
from ojai_setup.domain.cmdline_edit import expected_others, plan_cmdline_edit
from ojai_setup.formats.grub import (
    GrubEditError,
    bls_enabled,
    choose_cmdline_var,
    cmdline_param,
    get_kernel_param,
    param_key,
    regenerate_commands,
    same_key,
)
from ojai_setup.formats.modprobe import (
    ModprobeEditError,
    module_option_settings,
    remove_module_option,
    set_module_option,
)
from ojai_setup.model.actions import CmdlineCheck, RunCommand, WriteFile
from ojai_setup.model.facts import Facts
from ojai_setup.planning.context import Context
from ojai_setup.planning.result import StepResult

PAGES_PER_GIB = GIB // PAGE  # 262144
MIN_OS_GIB = 4
DEPRECATED = ("amdgpu.gttsize", "amdgpu.gtt_size")
REBOOT = "the kernel reads the TTM limit only at boot"


def pages_for(gib: int) -> int:
    return gib * PAGES_PER_GIB


def _read(ctx: Context, path: str) -> str | None:
    try:
        return ctx.root.read_text(path)
    except FileNotFoundError:
        return None


def _initramfs_command(ctx: Context, facts: Facts) -> list[str]:
    release = facts.kernel.release if facts.kernel else "all"
    if ctx.which("update-initramfs"):
        return ["update-initramfs", "-u", "-k", release]
    if ctx.which("dracut"):
        return ["dracut", "--force", "--kver", release]
    return ["mkinitcpio", "-P"]


def _generated_is_stale(facts: Facts, key: str, pages: int, *, modprobe_edited: bool,
                        available, initramfs: tuple[str, ...]) -> tuple[RunCommand, str] | None:
    """A regeneration owed although the files are right: grub.cfg's default entry, or the
    initramfs of the kernel that will boot, does not carry the configured limit."""
    boot = facts.boot
    gen = boot.generated if boot else None
    grub_ok = facts.grub is not None and cmdline_param(facts.grub.tokens, key) == str(pages)
    if gen is not None and grub_ok and cmdline_param(gen.tokens, key) != str(pages):
        distro = facts.distro
        try:
            cmds = regenerate_commands(distro.id if distro else "", distro.like if distro else [],
                                       available, args=[f"{key}={pages}"])
        except GrubEditError:
            return None
        return (RunCommand(argv=tuple(cmds[0]), needs_root=True, needs_reboot=REBOOT,
                           reason=f"regenerate {gen.config} from the configured command line"),
                f"{gen.config} (default entry '{gen.title}') still boots without it")
    ir = boot.initramfs if boot else None
    if (not modprobe_edited and facts.ttm and facts.ttm.modprobe and ir is not None
            and ir.carries_ttm and (ir.missing or ir.older_than)):
        argv = initramfs
        if gen is not None and gen.release and argv[:1] == ("update-initramfs",):
            argv = ("update-initramfs", "-u", "-k", gen.release)
        return (RunCommand(argv=argv, needs_root=True, needs_reboot=REBOOT,
                           reason="rebuild the initramfs of the kernel that will boot"),
                f"the initramfs {ir.image} was built before {', '.join(ir.missing + ir.older_than)} "
                "changed")
    return None


class TtmStep:
    name = "gpu-memory"

    def plan(self, ctx: Context) -> StepResult:
        facts = ctx.facts
        if facts.memory is None:
            return StepResult.blocked(self.name, "cannot size the GPU memory limit: "
                                      + facts.unknown.get("memory", "memory size unknown"))
        total = facts.memory.total_gib
        gib = ctx.budget_gib
        if total - gib < MIN_OS_GIB:
            return StepResult.blocked(
                self.name, f"a GPU budget of {gib} GiB leaves the OS {total - gib:.1f} GiB of "
                f"{total:.1f} GiB; keep at least {MIN_OS_GIB} GiB (use --gpu-memory "
                f"{max(1, int(total) - MIN_OS_GIB)} or less)")
        pages = pages_for(gib)
        module = facts.ttm.live_module if facts.ttm and facts.ttm.live_module else "ttm"
        key, other = f"{module}.pages_limit", ("ttm.pages_limit" if module == "amdttm" else "amdttm.pages_limit")
        grub = facts.grub
        before = _read(ctx, GRUB_DEFAULT)
        reads = [GRUB_DEFAULT]
        if before is None and (grub is None or not grub.files):
            return StepResult.blocked(
                self.name, f"{GRUB_DEFAULT} does not exist: this machine does not boot through "
                f"GRUB's defaults file. Add {key}={pages} to the kernel command line by hand "
                "(systemd-boot: /etc/kernel/cmdline), then reboot.", reads=tuple(reads))
        if grub is not None and grub.error:
            return StepResult.blocked(self.name, f"{grub.error} (no file was changed)",
                                      reads=tuple(reads))
        chain = [s.path for s in grub.files] if grub is not None else [GRUB_DEFAULT]
        reads += [p for p in chain if p not in reads]
        drop = (other, *DEPRECATED)
        files = [(p, _read(ctx, p) or "") for p in chain]
        effective = list(grub.tokens) if grub is not None else []
        satisfied = (grub is not None
                     and [t for t in effective if same_key(param_key(t), key)] == [f"{key}={pages}"]
                     and expected_others(effective, key, drop) == [
                         t for t in effective if not same_key(param_key(t), key)])
        try:
            edit = None if satisfied else plan_cmdline_edit(
                files, key, str(pages), drop, main=GRUB_DEFAULT, own_dropin=OJAI_GRUB_DROPIN)
            current = cmdline_param(effective, key) if grub is not None else (
                get_kernel_param(before or "", key, var=choose_cmdline_var(before or "")))
        except GrubEditError as exc:
            return StepResult.blocked(self.name, f"{exc} (no file was changed)", reads=tuple(reads))
        winner = (grub.winners.get(edit.target_var) if edit and grub else None) or GRUB_DEFAULT
        actions: list = []
        handlers: dict[str, RunCommand] = {}
        said: list[str] = []
        if edit is not None and edit.edits:
            said = edit.said()
            check = CmdlineCheck(param=f"{key}={pages}",
                                 others=tuple(expected_others(effective, key, drop)))
            for n, fe in enumerate(edit.edits):
                last = n == len(edit.edits) - 1
                what = (f"set {key}={pages} ({gib} GiB for the GPU) in {edit.target_var}"
                        if fe.path == edit.target else "remove what overrides the limit")
                actions.append(WriteFile(
                    path=fe.path, before=fe.before, after=fe.after, validate_with="grub",
                    cmdline=check if last and grub is not None else None,
                    reason=what, needs_root=True, needs_reboot=REBOOT, notify=("update-grub",)))
            distro = facts.distro
            try:
                cmds = regenerate_commands(distro.id if distro else "", distro.like if distro else [],
                                           lambda p: ctx.which(p) is not None,
                                           bls=bls_enabled(before or ""), args=[f"{key}={pages}"])
            except GrubEditError as exc:
                return StepResult.blocked(self.name, str(exc), reads=tuple(reads))
            handlers["update-grub"] = RunCommand(argv=tuple(cmds[0]), needs_root=True,
                                                 reason=f"regenerate the boot configuration from {GRUB_DEFAULT}")
        elif edit is not None and grub is not None:
            return StepResult.blocked(
                self.name, f"bash reads {effective} as the kernel command line, but ojai finds "
                f"no file to edit for exactly one {key}={pages}; edit {winner} yourself "
                "(no file was changed)", reads=tuple(reads))
        for path in ctx.root.glob("/etc/modprobe.d/*.conf"):
            text = _read(ctx, path) or ""
            reads.append(path)
            new = text
            other_mod = "ttm" if module == "amdttm" else "amdttm"
            try:
                found = [f for mod in ("ttm", "amdttm")
                         for f in module_option_settings([(path, text)], mod, "pages_limit")]
                if any(f.module == other_mod or f.value != str(pages) for f in found):
                    # one setting, for the module that is live, with the wanted value
                    new = remove_module_option(new, other_mod, "pages_limit", source=path)
                    new = set_module_option(new, module, "pages_limit", str(pages), source=path)
            except ModprobeEditError as exc:
                return StepResult.blocked(self.name, f"{exc} (the file was not changed)",
                                          reads=tuple(reads))
            if new != text:
                actions.append(WriteFile(
                    path=path, before=text, after=new, needs_root=True, needs_reboot=REBOOT,
                    reason=f"bring {path} to the same limit as GRUB ({pages} pages)",
                    notify=("initramfs",)))
                handlers["initramfs"] = RunCommand(
                    argv=tuple(_initramfs_command(ctx, facts)), needs_root=True,
                    reason="rebuild the initramfs for the kernel that will boot (it carries modprobe.d)")
        stale = _generated_is_stale(facts, key, pages, modprobe_edited=bool(handlers.get("initramfs")),
                                    available=lambda p: ctx.which(p) is not None,
                                    initramfs=tuple(_initramfs_command(ctx, facts)))
        if not actions and stale:
            command, why = stale
            return StepResult.change(
                self.name, f"{key}={pages} ({gib} GiB for the GPU) is configured, but {why}; "
                f"run {' '.join(command.argv)} so that the next boot uses it",
                [command], reads=tuple(reads),
                records={"ttm": {"expected_pages": pages, "module": module}})
        if not actions:
            how = f"{key}={current}" if current else key
            where = (facts.ttm.grub_file if facts.ttm and facts.ttm.grub_file else GRUB_DEFAULT)
            return StepResult.satisfied(
                self.name, f"{how} ({gib} GiB for the GPU) is already set in {where}"
                + ("" if not facts.ttm or not facts.ttm.modprobe else " and /etc/modprobe.d agrees"),
                reads=tuple(reads))
        sentence = f"set the GPU memory limit to {gib} GiB ({key}={pages})"
        if edit is not None and edit.edits:
            sentence += f" in {edit.target} ({edit.why})"
        if said:
            sentence += "; also " + "; ".join(said)
        if facts.ttm and facts.ttm.active_pages:
            sentence += f"; active now: {facts.ttm.active_pages * PAGE / GIB:.1f} GiB"
        return StepResult.change(
            self.name, sentence, actions, reads=tuple(reads), handlers=handlers,
            records={"ttm": {"expected_pages": pages, "module": module}})
