"""The ``ojai`` command line. Commands parse options, call the library, and hand results to
the :class:`~ojai_setup.commands.terminal.Terminal`; heavy modules are imported inside commands."""

import copy
import os
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Callable, NoReturn, Optional

import typer
from typer.core import TyperGroup

from ojai_setup import __version__
from ojai_setup.core.errors import OjaiError, UsageError
from ojai_setup.core.status import ExitStatus

#: the option parser's usage error class (typer may ship its own copy of click)
_CLICK_USAGE_ERROR = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")


class _Group(TyperGroup):
    """The option parser's own errors (``--bogus``, a bad value) exit with
    :attr:`ExitStatus.USAGE` like every other usage error, not click's 2 ("changes pending")."""

    def make_context(self, *args, **kwargs):
        try:
            return super().make_context(*args, **kwargs)
        except _CLICK_USAGE_ERROR as exc:
            exc.exit_code = ExitStatus.USAGE
            raise

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except _CLICK_USAGE_ERROR as exc:
            exc.exit_code = ExitStatus.USAGE
            raise


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
    none = "none"


class Backend(str, Enum):
    hip = "hip"
    cpu = "cpu"


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


def _fail(term, message: str, code: int = ExitStatus.FAILED) -> NoReturn:
    term.error(message)
    raise typer.Exit(int(code))


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
    example: Annotated[Optional[str], typer.Option(
        "--example", help="Run on a bundled example machine instead (e.g. ojai-fresh: an OJAI "
        "box before setup).")] = None,
) -> None:
    """Detect the hardware and check every precondition, with a fix for each failure.

    Exit code 0 when nothing fails, 1 when a check fails. Needs no root privileges.
    """
    from ojai_setup.commands.doctor import run_doctor
    from ojai_setup.commands.terminal import Terminal

    term = Terminal(json_mode=json_out)
    if example is not None:
        from ojai_setup.core.resources import example_root

        try:
            root = example_root(example)
        except FileNotFoundError as exc:
            _fail(term, str(exc), ExitStatus.USAGE)
    _run(term, root, lambda: run_doctor(term, root, profile_name=_value(profile), capture=capture))


@app.command()
def setup(
    root: RootOpt = Path("/"),
    apply: Annotated[bool, typer.Option("--apply", help="Carry out the plan (asks first unless --yes).")] = False,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Apply without asking.")] = False,
    plan: Annotated[Optional[Path], typer.Option(
        "--plan", help="With --apply: apply exactly this saved plan; refused when the machine changed since.")] = None,
    out: Annotated[Optional[Path], typer.Option("--out", help="Save the plan (with its fingerprint) to FILE.")] = None,
    json_out: JsonOpt = False,
    profile: ProfileOpt = None,
    gpu_memory: Annotated[Optional[int], typer.Option(
        "--gpu-memory", min=1, help="GPU memory budget in GiB (default: the profile's, 48 on the OJAI box).")] = None,
    llamacpp: Annotated[Llamacpp, typer.Option(
        "--llamacpp", help="How to get llama-server: nightly (Lemonade's ROCm builds), source, or none.")] = Llamacpp.nightly,
    llamacpp_tag: Annotated[Optional[str], typer.Option("--llamacpp-tag", help="Pin a nightly tag (e.g. b1311); default: the latest release.")] = None,
    llamacpp_src: Annotated[Optional[str], typer.Option("--llamacpp-src", help="Source for --llamacpp source: a git URL, a directory or a .tar.gz.")] = None,
    llamacpp_ref: Annotated[Optional[str], typer.Option("--llamacpp-ref", help="Git ref to build with --llamacpp source.")] = None,
    backend: Annotated[Optional[Backend], typer.Option("--backend", help="Source build backend (default: hip when ROCm is installed).")] = None,
    gpu_target: Annotated[Optional[str], typer.Option("--gpu-target", help="GPU target(s) of a HIP source build, e.g. gfx1150 or gfx1150,gfx1151 (default: the GPU's own).")] = None,
    model: Annotated[Optional[str], typer.Option("--model", help="Add the download, pairing check and launch files for this catalog route (see `ojai models`).")] = None,
    models_dir: Annotated[Optional[str], typer.Option("--models-dir", help="Where models are stored (default /var/lib/ojai/models).")] = None,
    host: Annotated[str, typer.Option("--host", help="Address the servers ojai writes listen on (an IP address or host name; anything but loopback is shown as a warning in the plan).")] = "127.0.0.1",
    api_key_file: Annotated[Optional[Path], typer.Option("--api-key-file", help="With --systemd: file holding the API key llama-server asks clients for (put in a root-only environment file, never in a script or plan).")] = None,
    port: Annotated[int, typer.Option("--port", help="Port of the llama-server route.")] = 8080,
    systemd: Annotated[bool, typer.Option("--systemd", help="Also write systemd units for the routes.")] = False,
    npu: Annotated[bool, typer.Option("--npu/--no-npu", help="Set up the FastFlowLM route on the NPU when it is ready.")] = True,
    catalog: Annotated[Optional[str], typer.Option("--catalog", help="User catalog of routes (TOML; default ~/.config/ojai/catalog.toml).")] = None,
    lemonade: Annotated[str, typer.Option(
        "--lemonade", help="Install Lemonade when it is missing: distro (Debian unstable's package, or Lemonade's PPA on Ubuntu), release (the lemonade-server .deb of a GitHub release, sha256 checked before installing), or none.")] = "none",
    lemonade_tag: Annotated[Optional[str], typer.Option(
        "--lemonade-tag", help="With --lemonade release: the release to install (e.g. v11.7.0); default: the latest.")] = None,
    lemonade_downloads: Annotated[bool, typer.Option(
        "--lemonade-downloads", help="Let Lemonade download the route's model into its own cache instead of loading ojai's files.")] = False,
    force_handlers: Annotated[bool, typer.Option(
        "--force-handlers/--no-force-handlers", help="With --apply: when an apply fails, still run the follow-up commands (update-grub, systemctl daemon-reload) of the edits that finished, so the machine is consistent; --no-force-handlers leaves them owed.")] = True,
) -> None:
    """Plan the setup of this machine as a dry run, or apply it with --apply.

    Shows one line per step (satisfied / will change / blocked), a diff of every file it would
    change, and what needs a reboot. Exit code: 0 nothing to do, 2 changes pending, 1 error or
    blocked. Planning needs no root; applying stops before the first change and prints the
    exact sudo command when it needs root.
    """
    from pydantic import ValidationError

    from ojai_setup.commands.setup import run_setup
    from ojai_setup.commands.terminal import Terminal
    from ojai_setup.model.settings import Settings

    term = Terminal(json_mode=json_out)
    if not root.is_dir():
        _fail(term, f"--root {root}: not a directory", ExitStatus.USAGE)
    try:
        fields = dict(profile=_value(profile), gpu_memory_gib=gpu_memory, llamacpp=_value(llamacpp),
                      llamacpp_tag=llamacpp_tag, llamacpp_ref=llamacpp_ref,
                      llamacpp_backend=_value(backend), gpu_target=gpu_target, model=model,
                      host=host, port=port, systemd=systemd,
                      npu=npu, user_catalog=catalog, lemonade_downloads=lemonade_downloads,
                      lemonade=lemonade, lemonade_tag=lemonade_tag,
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
        err = exc.errors()[0]
        message = str(err["msg"]).removeprefix("Value error, ")
        if err["loc"]:
            message = f"--{str(err['loc'][0]).replace('_', '-')}: {message}"
        _fail(term, message, ExitStatus.USAGE)
    _run(term, root, lambda: run_setup(term, root, settings, apply=apply, yes=yes, plan_file=plan,
                                       out=out, force_handlers=force_handlers))


@app.command()
def models(
    root: RootOpt = Path("/"),
    json_out: JsonOpt = False,
    profile: ProfileOpt = None,
    gpu_memory: Annotated[Optional[int], typer.Option("--gpu-memory", min=1, help="GPU memory budget in GiB to fit against (default: the profile's).")] = None,
    models_dir: Annotated[Optional[str], typer.Option("--models-dir", help="Where models are stored (default /var/lib/ojai/models).")] = None,
    catalog: Annotated[Optional[str], typer.Option("--catalog", help="User catalog of routes (TOML; default ~/.config/ojai/catalog.toml).")] = None,
) -> None:
    """List the routes ojai knows: whether each fits this machine's GPU budget and is downloaded."""
    from ojai_setup.commands.models import run_models
    from ojai_setup.commands.terminal import Terminal
    from ojai_setup.model.settings import Settings

    term = Terminal(json_mode=json_out)
    fields = dict(profile=_value(profile), gpu_memory_gib=gpu_memory, user_catalog=catalog)
    if models_dir:
        fields["models_dir"] = models_dir
    _run(term, root, lambda: run_models(term, root, Settings(**fields)))


@app.command()
def verify(
    root: RootOpt = Path("/"),
    json_out: JsonOpt = False,
    route: Annotated[Optional[str], typer.Option("--route", help="Check only this route.")] = None,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds to wait for each route's health.")] = 10.0,
    n_predict: Annotated[int, typer.Option("--tokens", min=1, help="Tokens to generate in the test completion.")] = 64,
) -> None:
    """Check each route ojai wrote: health, one short completion, and from its timings the
    draft acceptance, tokens/s and the speedup the standard model predicts (a prediction, not a
    measurement). Exit code 1 when a route does not answer."""
    from ojai_setup.commands.terminal import Terminal
    from ojai_setup.commands.verify import run_verify

    term = Terminal(json_mode=json_out)
    _run(term, root, lambda: run_verify(term, root, only=route, timeout=timeout,
                                        n_predict=n_predict))


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
    from ojai_setup.commands.setup import run_rollback
    from ojai_setup.commands.terminal import Terminal

    term = Terminal(json_mode=json_out)
    _run(term, root, lambda: run_rollback(term, root, force=force, yes=yes,
                                          remove_downloads=remove_downloads))


from ojai_setup.commands.bench.cli import bench_app, tune  # noqa: E402

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

    skip_plugin_search()
    _only(sys.argv[1] if len(sys.argv) > 1 else None)()


if __name__ == "__main__":  # pragma: no cover
    main()
