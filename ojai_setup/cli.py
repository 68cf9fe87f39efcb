"""The ``ojai`` command line. Commands parse options, call the library, and hand results to
the :class:`~ojai_setup.commands.terminal.Terminal`; heavy modules are imported inside commands."""

import copy
import os
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Callable, NoReturn, Optional

import typer
from typer.core import TyperCommand, TyperGroup

from ojai_setup import __version__
from ojai_setup.core.errors import OjaiError, UsageError
from ojai_setup.core.status import ExitStatus

#: the option parser's usage error class (typer may ship its own copy of click)
_CLICK_USAGE_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


def _given(argv: list[str], opts: list[str]) -> str | None:
    """The value given to the option named ``opts`` in ``argv`` (``--port 99`` or ``--port=99``)."""
    for i, word in enumerate(argv):
        for opt in opts:
            if word == opt and i + 1 < len(argv):
                return argv[i + 1]
            if word.startswith(opt + "="):
                return word[len(opt) + 1:]
    return None


def parser_error(exc, argv: list[str]) -> str | None:
    """The option parser's error in the one style of every option error (``--port eighty: must
    be a whole number``, ``--bogus: ojai setup has no such option``), or None for the errors
    that are no option's (``ojai`` alone shows its help)."""
    import re

    kind = type(exc).__name__
    words = [w for w in argv[:1] if not w.startswith("-")]
    cmd = exc.ctx.command_path if getattr(exc, "ctx", None) else " ".join(["ojai", *words])
    if kind == "NoSuchOption":
        maybe = (f"; did you mean {' or '.join(sorted(exc.possibilities))}?"
                 if exc.possibilities else "")
        return f"{exc.option_name}: {cmd} has no such option{maybe} (`{cmd} --help` lists them)"
    if kind in ("BadOptionUsage", "MissingParameter") and getattr(exc, "option_name", None):
        return f"{exc.option_name}: needs a value (`{cmd} --help` says which)"
    if kind == "MissingParameter" and getattr(exc, "param", None) is not None:
        name = (exc.param.opts or [exc.param.name])[0]
        return f"{name.upper() if not name.startswith('-') else name}: missing (`{cmd} --help` " \
            "says what to give)"
    if kind == "BadParameter" and getattr(exc, "param", None) is None:
        # raised by a command itself, in ojai's words already: "--lengths: a range like 1-8"
        text = str(exc.message)
        opt = re.match(r"(--[a-z0-9-]+): ", text)
        value = _given(argv, [opt.group(1)]) if opt else None
        if opt and value is not None:
            import shlex

            return f"{opt.group(1)} {shlex.quote(value)}: {text[opt.end():]}"
        return text
    if kind == "BadParameter" and getattr(exc, "param", None) is not None:
        opts = [o for o in getattr(exc.param, "opts", []) if o.startswith("--")] or ["--?"]
        text = str(exc.message).removeprefix("Value error, ").rstrip(".")
        choices = re.search(r"is not one of (.*)$", text)
        bound = re.search(r"(greater|less) than or equal to (\S+)", text)
        if choices:
            what = "must be one of " + ", ".join(c.strip(" '") for c in re.split(
                r",|\bor\b", choices.group(1)) if c.strip(" '"))
        elif bound:
            what = f"must be {'at least' if bound.group(1) == 'greater' else 'at most'} {bound.group(2)}"
        elif "valid integer" in text:
            what = "must be a whole number"
        elif "valid number" in text:
            what = "must be a number"
        else:
            what = text.replace("Input should be", "must be")
        import shlex

        value = _given(argv, opts)
        return f"{opts[0]}{'' if value is None else ' ' + shlex.quote(value)}: {what}"
    found = re.match(r"No such command '(.*)'", str(getattr(exc, "message", "")))
    if found:
        return f"{found.group(1)}: {cmd} has no such command (`{cmd} --help` lists them)"
    return None


class _Group(TyperGroup):
    """The option parser's own errors (``--bogus``, a bad value) exit with
    :attr:`ExitStatus.USAGE` like every other usage error, not click's 2 ("changes pending"),
    and say it in the style of every option error (:func:`parser_error`)."""

    def make_context(self, info_name, args, *rest, **kwargs):
        argv = list(args)
        try:
            ctx = super().make_context(info_name, args, *rest, **kwargs)
        except _CLICK_USAGE_ERROR as exc:
            self._usage(exc, argv)
        ctx.meta["ojai.argv"] = argv
        return ctx

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except _CLICK_USAGE_ERROR as exc:
            self._usage(exc, ctx.meta.get("ojai.argv", []))

    @staticmethod
    def _usage(exc, argv: list[str]) -> NoReturn:
        message = parser_error(exc, argv)
        if message is None:
            exc.exit_code = ExitStatus.USAGE
            raise exc
        from ojai_setup.commands.terminal import Terminal

        Terminal().error(message)
        raise typer.Exit(int(ExitStatus.USAGE))


app = typer.Typer(
    cls=_Group,
    name="ojai",
    help="Turn an AMD Ryzen AI mini-PC into a fast local LLM server, safely and repeatably.\n\n"
    "Start with `ojai doctor`, review `ojai setup`, then `ojai setup --apply`.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


RootOpt = Annotated[Path, typer.Option(
    "--root", help="Machine root: / for this machine, or a directory holding a captured or "
    "test machine (no host command runs then).", show_default=True)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON (schema in README).")]


def _profiles() -> list[str]:
    from ojai_setup.domain.profiles import profile_names

    try:
        return [*profile_names(), "generic"]
    except OSError:  # an installation without its checks/ folder: doctor says so clearly
        return ["generic"]


#: choices shown by --help and checked by the parser
Profile = Enum("Profile", {name: name for name in _profiles()}, type=str)


class Llamacpp(str, Enum):
    nightly = "nightly"
    source = "source"
    distro = "distro"
    none = "none"


class Backend(str, Enum):
    hip = "hip"
    cpu = "cpu"
    vulkan = "vulkan"


def _value(choice: Enum | None) -> str | None:
    return choice.value if choice is not None else None


ProfileOpt = Annotated[Optional[Profile], typer.Option(
    "--profile", help="Force a hardware profile instead of detecting it.")]


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"ojai {__version__}")
        raise typer.Exit()


@app.callback()
def _main(version: Annotated[bool, typer.Option(
        "--version", callback=_version_callback, is_eager=True, help="Show the version and exit.")] = False) -> None:
    pass


def option_error(err: dict) -> str:
    """A setting's validation error as the option that gave it: ``--port 99999: must be
    1-65535`` (the one style of every option error)."""
    from ojai_setup.core.problems import problem
    from ojai_setup.model.settings import OPTIONS, Settings

    if not err.get("loc"):  # a check across options says which ones itself
        return problem(err)
    field = str(err["loc"][0])
    flag = dict(OPTIONS).get(field, "--" + field.replace("_", "-"))
    meta = getattr(Settings.model_fields.get(field), "metadata", [])
    low = next((m.ge for m in meta if hasattr(m, "ge")), None)
    high = next((m.le for m in meta if hasattr(m, "le")), None)
    what = problem(err)
    if err.get("type") in ("greater_than_equal", "less_than_equal") and None not in (low, high):
        what = f"must be {low}-{high}"
    value = err.get("input")
    if not isinstance(value, (str, int, float)) or isinstance(value, bool):
        return f"{flag}: {what}"
    import shlex

    # a validator that names the value already: once is enough
    what = what.removeprefix(f"{value!r} ")
    return f"{flag} {shlex.quote(str(value))}: {what}"


def _fail(term, message: str, code: int = ExitStatus.FAILED) -> NoReturn:
    term.error(message)
    raise typer.Exit(int(code))


ExampleOpt = Annotated[Optional[str], typer.Option(
    "--example", metavar="NAME", help="Run on a bundled example machine instead of --root (ojai-fresh: an "
    "OJAI box before setup; ojai-applied, ojai-rebooted, strix-halo-dkms).")]


def _example(term, name: str | None, root: Path) -> Path:
    """The root of the bundled example machine ``name`` (``--example``), else ``root``."""
    if name is None:
        return root
    from ojai_setup.core.resources import example_root

    try:
        return example_root(name)
    except FileNotFoundError as exc:
        _fail(term, f"--example {name}: {exc}", ExitStatus.USAGE)


def _run(term, root: Path, command: Callable[[], int]) -> NoReturn:
    """Run a command on ``root``: an expected failure (:class:`OjaiError`) is its message and
    an exit status, never a traceback."""
    if not root.is_dir():
        _fail(term, f"--root {root}: not a directory", ExitStatus.USAGE)
    try:
        code = command()
    except OjaiError as exc:
        _fail(term, str(exc), ExitStatus.USAGE if isinstance(exc, UsageError) else ExitStatus.FAILED)
    raise typer.Exit(int(code))


@app.command()
def doctor(
    root: RootOpt = Path("/"),
    json_out: JsonOpt = False,
    profile: ProfileOpt = None,
    capture: Annotated[Optional[Path], typer.Option(
        "--capture", help="Also record everything doctor read into FILE.tar.gz (serials and user "
        "names removed); `ojai doctor --root <unpacked dir>` replays it.")] = None,
    example: ExampleOpt = None,
) -> None:
    """Detect the hardware and check every precondition, with a fix for each failure.

    Exit code 0 when nothing fails, 1 when a check fails. Needs no root privileges.
    """
    from ojai_setup.commands.doctor import run_doctor
    from ojai_setup.commands.terminal import Terminal

    term = Terminal(json_mode=json_out)
    root = _example(term, example, root)
    _run(term, root, lambda: run_doctor(term, root, profile_name=_value(profile), capture=capture))


class TtmVia(str, Enum):
    auto = "auto"
    cmdline = "cmdline"
    modprobe = "modprobe"


class LemonadeHow(str, Enum):
    none = "none"
    distro = "distro"
    release = "release"


class Power(str, Enum):
    none = "none"
    performance = "performance"


class _PanelHelp(TyperCommand):
    """A command whose ``--help`` is grouped into rich panels (``rich_help_panel``); the rest
    of the command line stays plain."""

    def format_help(self, ctx, formatter) -> None:
        from typer import rich_utils

        for param in self.get_params(ctx):
            if getattr(param, "is_flag", False):  # a flag takes no value: no <bool>
                param.metavar = ""
            elif param.metavar is None:  # choices as a person types them: ojai|generic
                param.metavar = param.display_type(ctx).strip("<>")
        rich_utils.rich_format_help(obj=self, ctx=ctx, markup_mode="rich")


WHAT, GPU, LLAMA, ROUTES, LEMONADE, SAFETY = (
    "What to set up", "The GPU memory", "llama.cpp", "Models and routes", "Lemonade and NPU",
    "Safety: review, apply, save")


SETUP_HELP = (
    "Plan the setup of this machine as a dry run, or apply it with --apply.\n\n"
    "Shows each step (ok / change / BLOCKED), the whole diff of every file it edits, the files "
    "it creates, what needs a reboot, and one line counting it all. Exit code: 0 nothing to "
    "do, 2 changes pending, 1 error or blocked, 64 usage error. Planning needs no root; "
    "applying stops before the first change and prints the sudo command when it needs root.")


@app.command(cls=_PanelHelp, help=SETUP_HELP)
def setup(
    root: Annotated[Path, typer.Option(
        "--root", metavar="DIR", rich_help_panel=WHAT, help="/ for this machine, or a folder "
        "holding a captured or test machine.")] = Path("/"),
    example: Annotated[Optional[str], typer.Option(
        "--example", metavar="NAME", rich_help_panel=WHAT, help="A bundled example machine: "
        "ojai-fresh, ojai-applied, ojai-rebooted, strix-halo-dkms.")] = None,
    profile: Annotated[Optional[Profile], typer.Option(
        "--profile", case_sensitive=False, metavar="NAME", rich_help_panel=WHAT,
        help=f"Force a hardware profile ({', '.join(p.value for p in Profile)}) instead of "
        "detecting it.")] = None,
    power: Annotated[Power, typer.Option(
        "--power", case_sensitive=False, rich_help_panel=WHAT, help="Set the platform profile "
        "to performance, persistently, as this machine manages it.")] = Power.none,
    gpu_memory: Annotated[Optional[int], typer.Option(
        "--gpu-memory", min=1, metavar="GiB", rich_help_panel=GPU, help="The GPU's budget (default: "
        "the profile's, 48 on the OJAI box).")] = None,
    ttm_via: Annotated[TtmVia, typer.Option(
        "--ttm-via", case_sensitive=False, rich_help_panel=GPU, help="How the limit reaches the "
        "kernel: the boot loader's command line, or /etc/modprobe.d (not when ttm is built "
        "in); auto: by the boot path.")] = TtmVia.auto,
    llamacpp: Annotated[Llamacpp, typer.Option(
        "--llamacpp", case_sensitive=False, rich_help_panel=LLAMA, help="How to get "
        "llama-server: Lemonade's ROCm nightly, a source build, the distribution's package.")] = Llamacpp.nightly,
    llamacpp_tag: Annotated[Optional[str], typer.Option(
        "--llamacpp-tag", metavar="TAG", rich_help_panel=LLAMA,
        help="Pin a nightly tag (b1311); default: the latest.")] = None,
    llamacpp_src: Annotated[Optional[str], typer.Option(
        "--llamacpp-src", metavar="URL|DIR|FILE", rich_help_panel=LLAMA,
        help="What --llamacpp source builds (a .tar.gz or a git URL).")] = None,
    llamacpp_ref: Annotated[Optional[str], typer.Option(
        "--llamacpp-ref", metavar="REF", rich_help_panel=LLAMA,
        help="The git ref it builds.")] = None,
    backend: Annotated[Optional[Backend], typer.Option(
        "--backend", case_sensitive=False, rich_help_panel=LLAMA,
        help="Its backend (default: hip where ROCm is); vulkan with the nightly: upstream "
        "llama.cpp's Vulkan release instead of Lemonade's ROCm build.")] = None,
    gpu_target: Annotated[Optional[str], typer.Option(
        "--gpu-target", metavar="GFX[,GFX]", rich_help_panel=LLAMA, help="Its GPU targets (default: "
        "the GPU's own).")] = None,
    cmake_define: Annotated[Optional[list[str]], typer.Option(
        "--cmake-define", metavar="KEY=VALUE", rich_help_panel=LLAMA, help="Pass -DKEY=VALUE "
        "to its CMake configure (repeatable; ojai's own options refused).")] = None,
    accept_slower: Annotated[bool, typer.Option(
        "--accept-slower", rich_help_panel=LLAMA, help="An upgrade adopts a new build that "
        "passes the correctness gate even when it is slower than the current one.")] = False,
    model: Annotated[Optional[list[str]], typer.Option(
        "--model", metavar="NAME", rich_help_panel=ROUTES, help="Set up this route: its "
        "download and launch files (`ojai models` lists them); repeat it to serve several "
        "behind one port.")] = None,
    models_max: Annotated[Optional[int], typer.Option(
        "--models-max", metavar="N", rich_help_panel=ROUTES, help="With several --model: "
        "how many are loaded at once (default: as many as fit).")] = None,
    models_dir: Annotated[Optional[str], typer.Option(
        "--models-dir", metavar="DIR", rich_help_panel=ROUTES,
        help="Where models are kept (default /var/lib/ojai/models).")] = None,
    catalog: Annotated[Optional[str], typer.Option(
        "--catalog", metavar="FILE", rich_help_panel=ROUTES,
        help="Your own routes (TOML; default ~/.config/ojai/catalog.toml).")] = None,
    host: Annotated[str, typer.Option(
        "--host", metavar="ADDRESS", rich_help_panel=ROUTES, help="Where the servers listen "
        "(anything but loopback is a warning in the plan).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(
        "--port", metavar="PORT", rich_help_panel=ROUTES,
        help="The llama-server route's port.")] = 8080,
    flash_attn: Annotated[Optional[str], typer.Option(
        "--flash-attn", metavar="on|off|auto", rich_help_panel=ROUTES,
        help="The routes' flash attention (default: the catalog route's, else on where the "
        "binary has the option).")] = None,
    load_mode: Annotated[Optional[str], typer.Option(
        "--load-mode", metavar="MODE", rich_help_panel=ROUTES,
        help="How the routes load weights: none (read into memory), mmap, mlock, mmap+mlock, "
        "auto or dio, spelt as the binary's help has it (--load-mode, or --no-mmap/--mlock); "
        "default: the catalog route's, else none on GPU routes.")] = None,
    systemd: Annotated[bool, typer.Option(
        "--systemd", rich_help_panel=ROUTES, help="Also write systemd units.")] = False,
    api_key_file: Annotated[Optional[Path], typer.Option(
        "--api-key-file", metavar="FILE", rich_help_panel=ROUTES, help="With --systemd: the API key "
        "clients must give (kept in a root-only file).")] = None,
    lemonade: Annotated[LemonadeHow, typer.Option(
        "--lemonade", case_sensitive=False, rich_help_panel=LEMONADE, help="Install Lemonade: the "
        "distribution's package (or its PPA), or a release's .deb (sha256 checked).")] = LemonadeHow.none,
    lemonade_tag: Annotated[Optional[str], typer.Option(
        "--lemonade-tag", metavar="TAG", rich_help_panel=LEMONADE, help="The release (v11.7.0); "
        "default: the latest.")] = None,
    lemonade_downloads: Annotated[bool, typer.Option(
        "--lemonade-downloads", rich_help_panel=LEMONADE, help="Lemonade downloads the "
        "model itself.")] = False,
    npu: Annotated[bool, typer.Option(
        "--npu/--no-npu", rich_help_panel=LEMONADE,
        help="The FastFlowLM route on the NPU.")] = True,
    apply: Annotated[bool, typer.Option(
        "--apply", rich_help_panel=SAFETY, help="Carry out the plan (asks first).")] = False,
    yes: Annotated[bool, typer.Option(
        "--yes", "-y", rich_help_panel=SAFETY, help="Apply without asking.")] = False,
    plan: Annotated[Optional[Path], typer.Option(
        "--plan", metavar="FILE", rich_help_panel=SAFETY, help="Apply exactly this saved "
        "plan (refused when the machine changed).")] = None,
    out: Annotated[Optional[Path], typer.Option(
        "--out", metavar="FILE", rich_help_panel=SAFETY,
        help="Save the plan to FILE.")] = None,
    show_new: Annotated[bool, typer.Option(
        "--show-new", rich_help_panel=SAFETY,
        help="Show new files whole.")] = False,
    show: Annotated[Optional[str], typer.Option(
        "--show", metavar="PATH", rich_help_panel=SAFETY, help="Show only PATH's new text "
        "or diff.")] = None,
    force_handlers: Annotated[bool, typer.Option(
        "--force-handlers/--no-force-handlers", rich_help_panel=SAFETY, help="When an apply stops, still "
        "run the follow-ups (update-grub) of the edits made.")] = True,
    gate: Annotated[bool, typer.Option(
        "--gate/--no-gate", rich_help_panel=SAFETY, help="After an apply, start each route it "
        "wrote once and compare its output with its build's CPU backend before calling it "
        "ready (--no-gate: leave that to `ojai verify`).")] = True,
    json_out: Annotated[bool, typer.Option(
        "--json", rich_help_panel=SAFETY, help="Print JSON (schema in README).")] = False,
) -> None:
    from pydantic import ValidationError

    from ojai_setup.commands.setup import run_setup
    from ojai_setup.commands.terminal import Terminal
    from ojai_setup.model.settings import Settings

    term = Terminal(json_mode=json_out)
    if example is not None and apply:
        import shlex

        bundled = _example(term, example, root)
        copy = bundled.name
        _fail(term, f"--example {example}: an example machine is there to look at, not to "
              f"change (everyone using this installation shares it); copy it and apply to the "
              f"copy: `cp -r {shlex.quote(str(bundled))} {copy}`, then "
              f"`ojai setup --root {copy} --apply`", ExitStatus.USAGE)
    root = _example(term, example, root)
    if not root.is_dir():
        _fail(term, f"--root {root}: not a directory", ExitStatus.USAGE)
    try:
        fields = dict(profile=_value(profile), gpu_memory_gib=gpu_memory, ttm_via=_value(ttm_via),
                      llamacpp=_value(llamacpp),
                      llamacpp_tag=llamacpp_tag, llamacpp_ref=llamacpp_ref,
                      llamacpp_backend=_value(backend), gpu_target=gpu_target,
                      cmake_defines=tuple(cmake_define or ()), accept_slower=accept_slower,
                      model=model[0] if model else None, extra_models=tuple(model or ())[1:],
                      models_max=models_max,
                      host=host, port=port, systemd=systemd,
                      npu=npu, user_catalog=catalog, lemonade_downloads=lemonade_downloads,
                      lemonade=_value(lemonade), lemonade_tag=lemonade_tag, power=_value(power),
                      flash_attn=flash_attn, load_mode=load_mode,
                      api_key_file=str(api_key_file.absolute()) if api_key_file else None)
        if llamacpp_src:
            fields["llamacpp_src"] = llamacpp_src
        if models_dir:
            fields["models_dir"] = models_dir
        settings = Settings(**fields)
        if settings.api_key_file is not None and not settings.systemd:
            _fail(term, "--api-key-file needs --systemd: the key reaches llama-server through "
                  "the unit's root-only environment file, never through a script", ExitStatus.USAGE)
    except ValidationError as exc:
        _fail(term, option_error(exc.errors()[0]), ExitStatus.USAGE)
    _run(term, root, lambda: run_setup(term, root, settings, apply=apply, yes=yes, plan_file=plan,
                                       out=out, show_new=show_new, show=show,
                                       force_handlers=force_handlers, gate=gate))


@app.command()
def models(
    root: RootOpt = Path("/"),
    json_out: JsonOpt = False,
    profile: ProfileOpt = None,
    gpu_memory: Annotated[Optional[int], typer.Option("--gpu-memory", min=1, help="GPU memory budget in GiB to fit against (default: the profile's).")] = None,
    models_dir: Annotated[Optional[str], typer.Option("--models-dir", help="Where models are kept (default /var/lib/ojai/models).")] = None,
    catalog: Annotated[Optional[str], typer.Option("--catalog", help="Your own routes (TOML; default ~/.config/ojai/catalog.toml).")] = None,
    example: ExampleOpt = None,
    wide: Annotated[bool, typer.Option("--wide", help="Also each route's title, the largest context that fits and its download size.")] = False,
    all_routes: Annotated[bool, typer.Option("--all", help="Also the routes that exist for ojai's own tests (Gemma 3 270M).")] = False,
) -> None:
    """List the routes ojai knows, one a line: how each drafts, the memory it needs at its
    context, whether it fits this machine's GPU budget and whether it is downloaded."""
    from pydantic import ValidationError

    from ojai_setup.commands.models import run_models
    from ojai_setup.commands.terminal import Terminal
    from ojai_setup.model.settings import Settings

    term = Terminal(json_mode=json_out)
    root = _example(term, example, root)
    fields = dict(profile=_value(profile), gpu_memory_gib=gpu_memory, user_catalog=catalog)
    if models_dir:
        fields["models_dir"] = models_dir
    try:
        settings = Settings(**fields)
    except ValidationError as exc:
        _fail(term, option_error(exc.errors()[0]), ExitStatus.USAGE)
    _run(term, root, lambda: run_models(term, root, settings, wide=wide, all_routes=all_routes))


@app.command()
def verify(
    root: RootOpt = Path("/"),
    json_out: JsonOpt = False,
    route: Annotated[Optional[str], typer.Option("--route", help="Check only this route.")] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for each route's health.")] = 10.0,
    n_predict: Annotated[int, typer.Option("--tokens", min=1, help="Tokens to generate in the test completion.")] = 64,
    gate: Annotated[bool, typer.Option("--gate/--no-gate", help="Compare each llama-server route's next-token distributions with its own build's CPU backend on the same file (started on a free port of 127.0.0.1 and stopped after).")] = True,
    gate_stride: Annotated[int, typer.Option("--gate-stride", min=1, help="Read every Nth position of the gate's text (1: every one; larger: faster, fewer positions).")] = 4,
) -> None:
    """Check each route ojai wrote: health, one short completion, and from its timings the
    draft acceptance, tokens/s and the speedup the standard model predicts (a prediction, not a
    measurement); then the correctness gate: top-1 agreement and mean KL divergence of the
    route's next-token distributions against its own build's CPU backend on the same GGUF.
    Exit code 1 when a route does not answer or does not compute what the CPU computes."""
    from ojai_setup.commands.terminal import Terminal
    from ojai_setup.commands.verify import run_verify

    term = Terminal(json_mode=json_out)
    _run(term, root, lambda: run_verify(term, root, only=route, timeout=timeout,
                                        n_predict=n_predict, gate=gate, gate_stride=gate_stride))


@app.command()
def rollback(
    root: RootOpt = Path("/"),
    json_out: JsonOpt = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Roll back without asking.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Restore even files changed since the apply.")] = False,
    remove_downloads: Annotated[bool, typer.Option(
        "--remove-downloads", help="Also remove the model files and llama.cpp builds the apply "
        "downloaded or installed (kept by default).")] = False,
) -> None:
    """Undo the last `ojai setup --apply`: shows what it will restore (with diffs) and asks
    unless --yes, restores the files from their backups, runs the follow-up commands
    (update-grub, the initramfs) and says when a reboot is needed. Downloaded models and
    installed builds stay unless --remove-downloads. With --json (and --yes), one JSON
    document says what was restored."""
    from ojai_setup.commands.rollback import run_rollback
    from ojai_setup.commands.terminal import Terminal

    term = Terminal(json_mode=json_out)
    _run(term, root, lambda: run_rollback(term, root, force=force, yes=yes,
                                          remove_downloads=remove_downloads))


from ojai_setup.commands.bench import bench_app, tune  # noqa: E402

app.add_typer(bench_app, name="bench")
app.command("tune")(tune)


def _only(name: str | None) -> typer.Typer:
    """``app`` holding only the command (or group) called ``name``, or all of them when
    ``name`` is none of them. typer converts the parameters of every command it holds before it
    runs one; the one being run is all a process needs."""
    commands = [c for c in app.registered_commands
                if (c.name or typer.main.get_command_name(c.callback.__name__)) == name]
    groups = [g for g in app.registered_groups if g.name == name]
    if not commands and not groups:
        return app
    lean = copy.copy(app)
    lean.registered_commands, lean.registered_groups = commands, groups
    return lean


def main() -> None:
    # the first model pydantic builds makes it search every installed distribution's entry
    # points for pydantic plugins (tens of ms); ojai uses none. Set only when the user did not.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    from ojai_setup.core.pydantic_plugins import skip_plugin_search
    from ojai_setup.core.resources import use_cache, user_cache

    skip_plugin_search()
    # ojai's own tables (checks/*.toml) are parsed once, then read from the user's cache
    use_cache(user_cache(os.environ))
    _only(sys.argv[1] if len(sys.argv) > 1 else None)()


if __name__ == "__main__":  # pragma: no cover
    main()
