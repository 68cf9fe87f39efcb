"""The GPU memory limit: ``ttm.pages_limit`` (or ``amdttm.pages_limit``) where the next boot
takes it from.

The iGPU allocates from system memory through TTM, which the kernel caps at about half of RAM.
This step first asks the boot path fact (``boot.loader``, :mod:`ojai_setup.domain.boot_path`)
what decides the next boot's kernel command line, and edits that, by key, with the follow-ups
that make the edit reach the boot (:data:`ROUTES`: one planner per boot path, each built on its
format module). A boot path that is unknown, or whose markers disagree, blocks the step with
what was seen: a file that decides nothing is never edited, and "satisfied" is said only about
the file that decides.

``--ttm-via modprobe`` takes the route AMD's ``amd-ttm --set`` takes (amd-debug-tools):
``options ttm pages_limit=N`` in ``/etc/modprobe.d``, and the initramfs rebuilt when it carries
the module. It works on any boot path while ttm is a module. Any ``options ttm pages_limit=``
already in /etc/modprobe.d is brought to the same value on the command line route too.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import PurePosixPath
from typing import NamedTuple

from ojai_setup.core.paths import GIB, GRUB_DEFAULT, OJAI_GRUB_DROPIN, PAGE, TTM_MODULES
from ojai_setup.domain.boot_path import KERNEL_CMDLINE, KERNELSTUB_CONFIG, PATHS
from ojai_setup.domain.grub_dropins import expected_others, plan_cmdline_edit
from ojai_setup.formats.boot_files import edit_entry_options, entry_options
from ojai_setup.formats.grub import (
    GrubEditError,
    bls_enabled,
    choose_cmdline_var,
    get_kernel_param,
    regenerate_commands,
)
from ojai_setup.formats.kernel_cmdline import (
    CmdlineFormatError,
    edit_params,
    expected_after,
    tokens_of,
    without_per_boot,
)
from ojai_setup.formats.kernel_params import cmdline_param, param_key, same_key
from ojai_setup.formats.kernelstub import edit_kernel_options, kernel_options
from ojai_setup.formats.limine import DEFAULT_FILE as LIMINE_DEFAULT
from ojai_setup.formats.limine import DROPIN_DIR as LIMINE_DROPINS
from ojai_setup.formats.limine import ENTRY_TOOL_CONF, OJAI_DROPIN, assignments, default_cmdline
from ojai_setup.formats.modprobe import (
    ModprobeEditError,
    module_option_settings,
    remove_module_option,
    set_module_option,
)
from ojai_setup.model.actions import CmdlineCheck, RunCommand, WriteFile
from ojai_setup.model.facts import BootLoader
from ojai_setup.planning.context import Context
from ojai_setup.planning.result import StepResult

PAGES_PER_GIB = GIB // PAGE  # 262144
MIN_OS_GIB = 4
DEPRECATED = ("amdgpu.gttsize", "amdgpu.gtt_size")
REBOOT = "the kernel reads the TTM limit only at boot"
STEP = "gpu-memory"
#: ojai's own modprobe.d file (kmod reads the files in name order; a later value wins)
OJAI_MODPROBE = "/etc/modprobe.d/99-ojai-ttm.conf"
#: the distribution's command line, which kernel-install reads when /etc/kernel/cmdline is missing
USR_KERNEL_CMDLINE = "/usr/lib/kernel/cmdline"
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
OJAI_LIMINE_TEXT = """\
# Written by ojai: the GPU memory limit (TTM pages) on the kernel command line of the default
# entries; limine-update writes it into limine.conf. `ojai rollback` removes it.
KERNEL_CMDLINE[default]+=" {param}"
"""
#: kmod reads /proc/cmdline after the modprobe.d files (libkmod-config.c, kmod_config_new),
#: and a module takes the last value it is given
CMDLINE_WINS = ("the kernel command line wins: kmod applies /proc/cmdline's module options "
                "after /etc/modprobe.d's")


def pages_for(gib: int) -> int:
    return gib * PAGES_PER_GIB


class Want(NamedTuple):
    """The limit asked for, in the key of the live module."""

    gib: int
    pages: int
    module: str  # ttm, amdttm or amd_ttm (TTM_MODULES)

    @property
    def key(self) -> str:
        return f"{self.module}.pages_limit"

    @property
    def others(self) -> tuple[str, ...]:
        """The keys of the TTM modules that are not the live one."""
        return tuple(f"{m}.pages_limit" for m in TTM_MODULES if m != self.module)

    @property
    def drop(self) -> tuple[str, ...]:
        return (*self.others, *DEPRECATED)

    @property
    def param(self) -> str:
        return f"{self.key}={self.pages}"


class Planned(NamedTuple):
    """A command line route's plan: no actions means the deciding file already holds it."""

    actions: list
    handlers: dict[str, RunCommand]
    where: str  # the file that decides
    detail: str = ""  # for the change sentence: " in FILE (why)"
    said: list[str] = []
    current: str | None = None  # the configured value now


def _read(ctx: Context, path: str) -> str | None:
    try:
        return ctx.root.read_text(path)
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        return None


def _check(want: Want, tokens: list[str]) -> CmdlineCheck:
    return CmdlineCheck(param=want.param, others=tuple(expected_others(tokens, want.key,
                                                                       want.drop)))


def _changes(before: list[str], after: list[str], path: str, want: Want | None = None) -> list[str]:
    """The phrases naming what an edit rewrote or removed (for the step's sentence)."""
    gone = [t for t in before if t not in after]
    if want is None:
        return [f"removes {t} from {path}" for t in gone]
    out = []
    rewritten = [t for t in gone if same_key(param_key(t), want.key)]
    if rewritten:
        out.append(f"rewrites {rewritten[-1]} to {want.param} in {path}")
    out += [f"removes {t} from {path}" for t in gone if t not in rewritten[-1:]]
    return out


# -- the boot paths --------------------------------------------------------------------------
def _plan_grub(ctx: Context, want: Want, loader: BootLoader, reads: list[str]) -> Planned | StepResult:
    """Debian/Ubuntu/Arch GRUB and Fedora's GRUB with BLS entries: /etc/default/grub and its
    drop-ins, as grub-mkconfig computes them (:mod:`ojai_setup.domain.grub_dropins`)."""
    facts, key, pages = ctx.facts, want.key, want.pages
    grub = facts.grub
    before = _read(ctx, GRUB_DEFAULT)
    if before is None and (grub is None or not grub.files):
        return StepResult.blocked(
            STEP, f"GRUB boots this machine ({'; '.join(loader.evidence)}), but {GRUB_DEFAULT} "
            f"does not exist; add {want.param} to its kernel command line yourself (or use "
            "--ttm-via modprobe), then reboot", reads=tuple(reads))
    if grub is not None and grub.error:
        return StepResult.blocked(STEP, f"{grub.error} (no file was changed)", reads=tuple(reads))
    chain = [s.path for s in grub.files] if grub is not None else [GRUB_DEFAULT]
    reads += [p for p in chain if p not in reads]
    files = [(p, _read(ctx, p) or "") for p in chain]
    effective = list(grub.tokens) if grub is not None else []
    satisfied = (grub is not None
                 and [t for t in effective if same_key(param_key(t), key)] == [want.param]
                 and expected_others(effective, key, want.drop) == [
                     t for t in effective if not same_key(param_key(t), key)])
    try:
        edit = None if satisfied else plan_cmdline_edit(
            files, key, str(pages), want.drop, main=GRUB_DEFAULT, own_dropin=OJAI_GRUB_DROPIN)
        current = cmdline_param(effective, key) if grub is not None else (
            get_kernel_param(before or "", key, var=choose_cmdline_var(before or "")))
    except GrubEditError as exc:
        return StepResult.blocked(STEP, f"{exc} (no file was changed)", reads=tuple(reads))
    where = (facts.ttm.grub_file if facts.ttm and facts.ttm.grub_file else GRUB_DEFAULT)
    if edit is None:
        return Planned([], {}, where, current=current)
    if not edit.edits:
        winner = (grub.winners.get(edit.target_var) if grub else None) or GRUB_DEFAULT
        return StepResult.blocked(
            STEP, f"bash reads {effective} as the kernel command line, but ojai finds "
            f"no file to edit for exactly one {want.param}; edit {winner} yourself "
            "(no file was changed)", reads=tuple(reads))
    check = _check(want, effective)
    actions = []
    for n, fe in enumerate(edit.edits):
        last = n == len(edit.edits) - 1
        what = (f"set {want.param} ({want.gib} GiB for the GPU) in {edit.target_var}"
                if fe.path == edit.target else "remove what overrides the limit")
        actions.append(WriteFile(
            path=fe.path, before=fe.before, after=fe.after, validate_with="grub",
            cmdline=check if last and grub is not None else None,
            reason=what, needs_root=True, needs_reboot=REBOOT, notify=("update-grub",)))
    distro = facts.distro
    try:
        cmds = regenerate_commands(distro.id if distro else "", distro.like if distro else [],
                                   lambda p: ctx.which(p) is not None,
                                   bls=bls_enabled(before or ""), args=[want.param],
                                   remove_args=_removed_keys(effective, want))
    except GrubEditError as exc:
        return StepResult.blocked(STEP, str(exc), reads=tuple(reads))
    handler = RunCommand(argv=tuple(cmds[0]), needs_root=True,
                         reason=f"regenerate the boot configuration from {GRUB_DEFAULT}")
    return Planned(actions, {"update-grub": handler}, where,
                   detail=f" in {edit.target} ({edit.why})", said=edit.said(), current=current)


def _removed_keys(tokens: list[str], want: Want) -> list[str]:
    """The keys an edit removes (grubby's --remove-args takes keys)."""
    return list(dict.fromkeys(param_key(t) for t in tokens
                              if any(same_key(param_key(t), k) for k in want.drop)))


def _installed_kernels(ctx: Context) -> list[tuple[str, ...]]:
    """``kernel-install add`` arguments for every installed kernel: the release and its image,
    /usr/lib/modules/R/vmlinuz (Fedora, Arch, where kernel-install takes it from) or
    /boot/vmlinuz-R with /boot/initrd.img-R (Debian and Ubuntu, as their zz-systemd-boot
    kernel hook passes them)."""
    found: dict[str, tuple[str, ...]] = {}
    for image in ctx.root.glob("/usr/lib/modules/*/vmlinuz"):
        found[PurePosixPath(image).parent.name] = (PurePosixPath(image).parent.name, image)
    for image in ctx.root.glob("/boot/vmlinuz-*"):
        release = PurePosixPath(image).name.removeprefix("vmlinuz-")
        initrd = f"/boot/initrd.img-{release}"
        found.setdefault(release, (release, image) + ((initrd,) if ctx.root.exists(initrd) else ()))
    if not found and ctx.facts.kernel:
        release = ctx.facts.kernel.release
        found[release] = (release, f"/usr/lib/modules/{release}/vmlinuz")
    return [found[r] for r in sorted(found)]


def _kernel_install_handlers(ctx: Context, why: str) -> dict[str, RunCommand] | str:
    """What makes /etc/kernel/cmdline reach the entries or UKIs: the distribution's wrapper
    (EndeavourOS ``reinstall-kernels``, openSUSE ``sdbootutil update-all-entries``), else
    ``kernel-install add KVER /usr/lib/modules/KVER/vmlinuz`` for every installed kernel.
    A string says why there is none."""
    if ctx.which("reinstall-kernels"):
        return {"reinstall-kernels": RunCommand(argv=("reinstall-kernels",), needs_root=True,
                                                reason=why)}
    if ctx.which("sdbootutil"):
        return {"sdbootutil": RunCommand(argv=("sdbootutil", "update-all-entries"),
                                         needs_root=True, reason=why)}
    if not ctx.which("kernel-install"):
        return (f"kernel-install is not installed, so nothing would write {KERNEL_CMDLINE} into "
                "the boot entries; install systemd's kernel-install (Debian: systemd) and run "
                "ojai again")
    out: dict[str, RunCommand] = {}
    for args in _installed_kernels(ctx):
        out[f"kernel-install {args[0]}"] = RunCommand(
            argv=("kernel-install", "add", *args), needs_root=True,
            reason=f"{why} (kernel {args[0]})")
    return out or "no installed kernel found under /usr/lib/modules or /boot to run kernel-install for"


def _plan_kernel_install(ctx: Context, want: Want, loader: BootLoader,
                         reads: list[str]) -> Planned | StepResult:
    """systemd-boot with kernel-install (type 1 entries or UKIs): ``/etc/kernel/cmdline``."""
    reads.append(KERNEL_CMDLINE)
    text = _read(ctx, KERNEL_CMDLINE)
    shipped = _read(ctx, USR_KERNEL_CMDLINE) if text is None else None
    if text is None and shipped is not None:
        # kernel-install's next source after /etc/kernel/cmdline (kernel-install(8))
        reads.append(USR_KERNEL_CMDLINE)
        base = shipped
    elif text is None:
        if ctx.facts.cmdline is None:
            return StepResult.blocked(
                STEP, f"{KERNEL_CMDLINE} does not exist and /proc/cmdline could not be read "
                f"to make it from; write the running command line into {KERNEL_CMDLINE} with "
                f"{want.param} added, then run ojai again", reads=tuple(reads))
        base = " ".join(without_per_boot(ctx.facts.cmdline)) + "\n"
    else:
        base = text
    try:
        before = tokens_of(base)
        after = edit_params(base, want.key, str(want.pages), want.drop, source=KERNEL_CMDLINE)
    except CmdlineFormatError as exc:
        return StepResult.blocked(STEP, f"{exc} (no file was changed)", reads=tuple(reads))
    current = cmdline_param(before, want.key) if text is not None else None
    if text is not None and after == text:
        return Planned([], {}, KERNEL_CMDLINE, current=current)
    image = "unified kernel images" if loader.kind == "uki" else "loader entries"
    handlers = _kernel_install_handlers(ctx, f"rebuild the {image} from {KERNEL_CMDLINE}")
    if isinstance(handlers, str):
        return StepResult.blocked(STEP, handlers, reads=tuple(reads))
    # made from the running command line: removing it on rollback would make kernel-install
    # take /proc/cmdline again, which carries the limit once the machine rebooted, so
    # rollback writes it back as it read before the limit instead
    from_running = text is None and shipped is None
    action = WriteFile(path=KERNEL_CMDLINE, before=text, after=after,
                       validate_with="kernel-cmdline", cmdline=_check(want, before),
                       reason=f"set {want.param} ({want.gib} GiB for the GPU)", needs_root=True,
                       needs_reboot=REBOOT, notify=tuple(handlers),
                       rollback_to=base if from_running else None)
    why = ("kernel-install writes it into every entry it adds" if loader.kind != "uki" else
           "kernel-install embeds it in the unified kernel image it builds")
    if text is None and shipped is not None:
        why += f"; created from {USR_KERNEL_CMDLINE}, which kernel-install reads without it"
    elif text is None:
        why += ("; created from the running command line, less BOOT_IMAGE= and initrd= "
                "(rollback writes it back without the limit)")
    return Planned([action], handlers, KERNEL_CMDLINE, detail=f" in {KERNEL_CMDLINE} ({why})",
                   said=_changes(before, tokens_of(after), KERNEL_CMDLINE, want), current=current)


def _plan_entry(ctx: Context, want: Want, loader: BootLoader,
                reads: list[str]) -> Planned | StepResult:
    """Hand-written systemd-boot entries: the ``options`` of the default entry, only that one."""
    path = loader.config
    text = _read(ctx, path) if path else None
    if path is None or text is None:
        return StepResult.blocked(
            STEP, "systemd-boot boots this machine from hand-written entries, but ojai cannot "
            "tell which entry is the default (loader.conf's `default` matches none); add "
            f"{want.param} to the options line of the entry you boot, then reboot",
            reads=tuple(reads))
    reads.append(path)
    try:
        before = entry_options(text)
        after = edit_entry_options(text, want.key, str(want.pages), want.drop, source=path)
    except CmdlineFormatError as exc:
        return StepResult.blocked(STEP, f"{exc} (no file was changed)", reads=tuple(reads))
    current = cmdline_param(before, want.key)
    if after == text:
        return Planned([], {}, path, current=current)
    action = WriteFile(path=path, before=text, after=after, validate_with="loader-entry",
                       cmdline=_check(want, before), needs_root=True, needs_reboot=REBOOT,
                       reason=f"set {want.param} ({want.gib} GiB for the GPU) on its options line")
    return Planned([action], {}, path,
                   detail=f" in {path} (the entry loader.conf makes the default; other entries "
                   "are left alone)", said=_changes(before, entry_options(after), path, want),
                   current=current)


def _plan_limine(ctx: Context, want: Want, loader: BootLoader,
                 reads: list[str]) -> Planned | StepResult:
    """Limine with limine-entry-tool: ``KERNEL_CMDLINE[default]`` by key where it is written,
    else ojai's drop-in, then ``limine-update``."""
    chain = ([ENTRY_TOOL_CONF] if ctx.root.exists(ENTRY_TOOL_CONF) else []) + [
        p for p in ctx.root.glob(f"{LIMINE_DROPINS}/*.conf")]
    chain += [LIMINE_DEFAULT] if ctx.root.exists(LIMINE_DEFAULT) else []
    reads += chain
    texts = {p: _read(ctx, p) or "" for p in chain}
    try:
        tokens, seen = default_cmdline(list(texts.items()))
    except CmdlineFormatError as exc:
        return StepResult.blocked(STEP, f"{exc} (no file was changed)", reads=tuple(reads))
    if not seen:
        return StepResult.blocked(
            STEP, f"Limine boots this machine, but no file sets KERNEL_CMDLINE[default] "
            f"({LIMINE_DEFAULT} and {LIMINE_DROPINS}/ are silent), so limine-entry-tool takes "
            "/etc/kernel/cmdline or /proc/cmdline, and a drop-in that appends would replace "
            f"them; put your command line with {want.param} into {LIMINE_DEFAULT} as "
            "KERNEL_CMDLINE[default]+=\"...\", then run `sudo limine-update`", reads=tuple(reads))
    names = [t.text for t in tokens]
    current = cmdline_param(names, want.key)
    hits = [t for t in tokens if same_key(param_key(t.text), want.key)]
    stale = [t for t in tokens if any(same_key(param_key(t.text), k) for k in want.drop)]
    if [t.text for t in hits] == [want.param] and not stale:
        return Planned([], {}, hits[0].path, current=current)
    edits: dict[str, list[tuple[int, int, str]]] = {}
    if hits:
        keep = hits[-1]
        edits.setdefault(keep.path, []).append((keep.start, keep.end, want.param))
        target, why = keep.path, f"it sets the {want.key} limine-entry-tool uses now"
    for t in [*hits[:-1], *stale]:
        text = texts[t.path]
        start = t.start
        while start > 0 and text[start - 1] in " \t":
            start -= 1
        edits.setdefault(t.path, []).append((start, t.end, ""))
    new_texts: dict[str, str] = {}
    for path, changes in edits.items():
        text = texts[path]
        for start, end, new in sorted(changes, reverse=True):
            text = text[:start] + new + text[end:]
        new_texts[path] = text
    if not hits:
        replacing = [a for p in chain for a in assignments(new_texts.get(p, texts[p]), p)
                     if a.key == "default" and not a.append]
        if replacing and replacing[-1].path == LIMINE_DEFAULT:
            # /etc/default/limine replaces what the drop-ins say: the limit goes there
            a = replacing[-1]
            text = new_texts.get(LIMINE_DEFAULT, texts[LIMINE_DEFAULT])
            new_texts[LIMINE_DEFAULT] = text[:a.end] + f" {want.param}" + text[a.end:]
            target, why = LIMINE_DEFAULT, ("it replaces the command line the drop-ins give "
                                           "(KERNEL_CMDLINE[default]=)")
        else:
            before_own = texts.get(OJAI_DROPIN)
            new_texts[OJAI_DROPIN] = (before_own or "") + OJAI_LIMINE_TEXT.format(param=want.param)
            texts.setdefault(OJAI_DROPIN, before_own)  # type: ignore[arg-type]
            target, why = OJAI_DROPIN, (f"ojai's own drop-in: limine-entry-tool joins its "
                                        f"KERNEL_CMDLINE[default]+= with those of {LIMINE_DEFAULT} "
                                        "and the other drop-ins")
    order = sorted(set(chain) | set(new_texts), key=lambda p: (p == LIMINE_DEFAULT,
                                                               p != ENTRY_TOOL_CONF, p))
    after_tokens, _ = default_cmdline([(p, new_texts.get(p, texts.get(p) or "")) for p in order])
    after = [t.text for t in after_tokens]
    kept = [t for t in expected_after(names, want.key, str(want.pages), want.drop)
            if not same_key(param_key(t), want.key)]
    if ([t for t in after if same_key(param_key(t), want.key)] != [want.param]
            or [t for t in after if not same_key(param_key(t), want.key)] != kept):
        return StepResult.blocked(
            STEP, f"ojai could not plan an edit of the Limine settings that leaves exactly one "
            f"{want.param} and every other parameter as it is; edit {target} yourself "
            "(no file was changed)", reads=tuple(reads))
    if not ctx.which("limine-update"):
        return StepResult.blocked(
            STEP, "limine-update (limine-entry-tool) is not installed, so nothing would write "
            "the new command line into limine.conf; install limine-entry-tool (CachyOS: "
            "limine-mkinitcpio-hook) and run ojai again", reads=tuple(reads))
    handler = RunCommand(argv=("limine-update",), needs_root=True,
                         reason="write the new command line into limine.conf's entries")
    actions = [WriteFile(path=p, before=texts.get(p), after=new_texts[p], needs_root=True,
                         needs_reboot=REBOOT, notify=("limine-update",),
                         reason=(f"set {want.param} ({want.gib} GiB for the GPU)" if p == target
                                 else "remove what contradicts the limit"))
               for p in sorted(new_texts, key=lambda p: p == target)]
    return Planned(actions, {"limine-update": handler}, target, detail=f" in {target} ({why})",
                   said=_changes(names, after, "the Limine settings", want), current=current)


def _plan_kernelstub(ctx: Context, want: Want, loader: BootLoader,
                     reads: list[str]) -> Planned | StepResult:
    """Pop!_OS: kernelstub's ``user.kernel_options`` (what ``kernelstub -a``/``-d`` change),
    then a kernelstub run writes the ESP entry from it."""
    reads.append(KERNELSTUB_CONFIG)
    text = _read(ctx, KERNELSTUB_CONFIG) or ""
    try:
        before = kernel_options(text)
        after = edit_kernel_options(text, want.key, str(want.pages), want.drop)
    except CmdlineFormatError as exc:
        return StepResult.blocked(STEP, f"{exc} (no file was changed)", reads=tuple(reads))
    current = cmdline_param(before, want.key)
    if after == text:
        return Planned([], {}, KERNELSTUB_CONFIG, current=current)
    if not ctx.which("kernelstub"):
        return StepResult.blocked(STEP, f"{KERNELSTUB_CONFIG} exists but kernelstub is not "
                                  "installed; run `sudo kernelstub -a " + want.param +
                                  "` where it is", reads=tuple(reads))
    removed = [o for o in before if o not in kernel_options(after)]
    same_as = " ".join([f"kernelstub -a {want.param}"] + [f"-d {o}" for o in removed])
    action = WriteFile(path=KERNELSTUB_CONFIG, before=text, after=after,
                       validate_with="kernelstub", cmdline=_check(want, before), needs_root=True,
                       needs_reboot=REBOOT, notify=("kernelstub",),
                       reason=f"set {want.param} in user.kernel_options (what `{same_as}` does)")
    handler = RunCommand(argv=("kernelstub", "--verbose", "--preserve-live-mode"),
                         needs_root=True, reason="write the ESP's loader entry from "
                         f"{KERNELSTUB_CONFIG}, as the kernel hooks run it")
    return Planned([action], {"kernelstub": handler}, KERNELSTUB_CONFIG,
                   detail=f" in {KERNELSTUB_CONFIG}'s user.kernel_options (what `sudo {same_as}` "
                   "does; kernelstub then writes the ESP entry)",
                   said=_changes(before, kernel_options(after), KERNELSTUB_CONFIG, want),
                   current=current)


#: where a NixOS configuration usually sets its kernel parameters (flakes keep theirs elsewhere)
NIXOS_CONFIG_DIR = "/etc/nixos"


def _nixos_configured(ctx: Context, want: Want, reads: list[str]) -> str | None:
    """The file of /etc/nixos whose literal ``kernelParams`` hold exactly ``want``, or None."""
    from ojai_setup.formats.nix import kernel_params

    for path in sorted(ctx.root.glob(f"{NIXOS_CONFIG_DIR}/**/*.nix")):
        reads.append(path)
        params = kernel_params(_read(ctx, path) or "")
        if [p for p in params if same_key(param_key(p), want.key)][-1:] == [want.param]:
            return path
    return None


def _blocked_nixos(ctx: Context, want: Want, loader: BootLoader,
                   reads: list[str]) -> StepResult:
    """NixOS: ojai never edits the configuration, but the limit set there (or active now) is
    the limit, so the step is satisfied by it."""
    ttm = ctx.facts.ttm
    active = (ttm is not None and ttm.cmdline_key is not None
              and same_key(ttm.cmdline_key, want.key) and ttm.cmdline_pages == want.pages)
    configured = _nixos_configured(ctx, want, reads)
    if active or configured:
        where = ("active on /proc/cmdline" if active else "") + (
            (" and " if active else "") + f"configured in {configured}" if configured else "")
        pending = "" if active else (
            "; it becomes active after `sudo nixos-rebuild boot` and a reboot, if not done yet")
        return StepResult.satisfied(
            STEP, f"{want.param} ({want.gib} GiB for the GPU) is {where} (NixOS builds the "
            f"command line from boot.kernelParams; ojai does not edit it){pending}",
            reads=tuple(dict.fromkeys(reads)))
    return StepResult.blocked(
        STEP, "NixOS builds the kernel command line from its configuration; ojai does not "
        "edit it.", reads=tuple(reads),
        ways=(f"add `boot.kernelParams = [ \"{want.param}\" ];` to "
              "/etc/nixos/configuration.nix (or your flake's host module), then run "
              "`sudo nixos-rebuild boot` and reboot",))


def _blocked_unknown(ctx: Context, want: Want, loader: BootLoader,
                     reads: list[str]) -> StepResult:
    seen = "; ".join([*loader.evidence, *loader.conflicts]) or "no marker"
    return StepResult.blocked(
        STEP, f"ojai cannot tell which boot loader decides the next boot, so it edits no "
        f"kernel command line. It saw: {seen}.", reads=tuple(reads),
        ways=(f"add {want.param} to the command line of the loader you boot yourself",
              "--ttm-via modprobe (options ttm pages_limit= in /etc/modprobe.d, which works on "
              "any boot path while ttm is a module)"))


Planner = Callable[[Context, Want, BootLoader, list], "Planned | StepResult"]
#: boot path (``boot.loader.kind``) -> its command line planner; what each path edits and runs
#: is said in ``PATHS`` (ojai_setup.domain.boot_path) for doctor and the README
ROUTES: dict[str, Planner] = {
    "grub": _plan_grub,
    "grub-bls": _plan_grub,
    "systemd-boot-kernel-install": _plan_kernel_install,
    "uki": _plan_kernel_install,
    "systemd-boot-entries": _plan_entry,
    "limine": _plan_limine,
    "kernelstub": _plan_kernelstub,
    "nixos": _blocked_nixos,
    "unknown": _blocked_unknown,
}

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
    if loader.kind in ("uki", "systemd-boot-kernel-install"):
        return _kernel_install_initramfs(ctx, loader, None if every else release)
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


def _kernel_install_initramfs(ctx: Context, loader: BootLoader, release: str | None
                              ) -> dict[str, RunCommand] | str:
    """On a kernel-install machine the initramfs that boots is the copy kernel-install put
    beside the entry on the ESP (``initrd.img-R`` under ``<entry-token>/R/``), or the one
    inside the UKI it built: a rebuild in place of the distribution's tool does not reach it
    (``dracut --regenerate-all`` writes ``<entry-token>/R/initrd`` there, a file the entry
    does not load). So the image kernel-install is handed is rebuilt first (Debian's
    ``/boot/initrd.img-R``: ``update-initramfs -u -k R``, or ``dracut --force`` with that
    file, as Debian's dracut kernel hook does), then ``kernel-install add`` copies it to the
    ESP or builds the UKI from it; a kernel kernel-install is given without an initramfs
    (``/usr/lib/modules/R/vmlinuz``) gets it from kernel-install's own plugins (dracut's
    50-dracut.install, mkinitcpio's). The distribution's wrapper (``reinstall-kernels``,
    ``sdbootutil``) does all of it. ``release``: only that kernel."""
    image = "unified kernel images" if loader.kind == "uki" else "loader entries"
    why = f"put the initramfs (it carries /etc/modprobe.d) into the {image}"
    if ctx.which("reinstall-kernels") or ctx.which("sdbootutil"):
        return _kernel_install_handlers(ctx, why)
    if not ctx.which("kernel-install"):
        return (f"kernel-install is not installed, so nothing would put a rebuilt initramfs "
                f"into the {image}; install systemd's kernel-install (Debian: systemd) and "
                "run ojai again")
    kernels = _installed_kernels(ctx)
    if release is not None and any(k[0] == release for k in kernels):
        kernels = [k for k in kernels if k[0] == release]
    out: dict[str, RunCommand] = {}
    for args in kernels:
        kver = args[0]
        if len(args) > 2:  # kernel-install is given this initramfs: rebuild it first
            initrd = args[2]
            if ctx.which("update-initramfs"):
                argv: tuple[str, ...] = ("update-initramfs", "-u", "-k", kver)
            elif ctx.which("dracut"):
                argv = ("dracut", "--force", initrd, kver)
            else:
                return (f"kernel-install is handed {initrd}, but neither update-initramfs nor "
                        "dracut is installed to rebuild it with /etc/modprobe.d; rebuild it "
                        f"with your distribution's tool, then run kernel-install add {kver}")
            out[f"initramfs {kver}"] = RunCommand(
                argv=argv, needs_root=True,
                reason=f"rebuild {initrd} (it carries /etc/modprobe.d)")
        out[f"kernel-install {kver}"] = RunCommand(
            argv=("kernel-install", "add", *args), needs_root=True,
            reason=f"{why} (kernel {kver})")
    return out or "no installed kernel found under /usr/lib/modules or /boot to run kernel-install for"


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
        if loader.kind in ("grub", "grub-bls"):
            if not (facts.grub is not None
                    and cmdline_param(facts.grub.tokens, want.key) == str(want.pages)):
                return None
            distro = facts.distro
            try:
                cmds = regenerate_commands(distro.id if distro else "",
                                           distro.like if distro else [],
                                           lambda p: ctx.which(p) is not None,
                                           bls=loader.kind == "grub-bls", args=[want.param])
            except GrubEditError:
                return None
            return ([RunCommand(argv=tuple(cmds[0]), needs_root=True, needs_reboot=REBOOT,
                                reason=f"regenerate {gen.config} from the configured command "
                                "line")], said)
        if loader.kind in ("systemd-boot-kernel-install", "uki"):
            handlers = _kernel_install_handlers(ctx, f"rebuild {gen.config} from {KERNEL_CMDLINE}")
            if isinstance(handlers, str):
                return None
            return ([h.model_copy(update={"needs_reboot": REBOOT}) for h in handlers.values()],
                    said)
        if loader.kind == "limine" and ctx.which("limine-update"):
            return ([RunCommand(argv=("limine-update",), needs_root=True, needs_reboot=REBOOT,
                                reason="write the configured command line into limine.conf")],
                    said)
        if loader.kind == "kernelstub" and ctx.which("kernelstub"):
            return ([RunCommand(argv=("kernelstub", "--verbose", "--preserve-live-mode"),
                                needs_root=True, needs_reboot=REBOOT,
                                reason=f"write the ESP entry from {KERNELSTUB_CONFIG}")], said)
        return None
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
        # the files looked at go into the plan's fingerprint: GRUB's only where GRUB boots
        reads: list[str] = [GRUB_DEFAULT] if loader.kind in ("grub", "grub-bls") else []
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
        planned = ROUTES[loader.kind](ctx, want, loader, reads)
        if isinstance(planned, StepResult):
            return planned
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
                + (f" ({PATHS[loader.kind].title})" if loader.kind not in ("grub", "grub-bls") else "")
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
