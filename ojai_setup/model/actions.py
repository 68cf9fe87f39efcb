"""Typed actions: the only changes ojai makes, as data.

Steps return these; :mod:`ojai_setup.apply.executor` is the one place that carries them out. Each
action says what it touches, whether it needs root, whether it needs a reboot to take effect,
and which follow-up handlers (``update-grub``, ``initramfs``) it notifies when it changes
something.
"""

import re
from typing import Annotated, Literal, NamedTuple, Union

from pydantic import BaseModel, ConfigDict, Field

from ojai_setup.core.units import size_text
from ojai_setup.model.cmake import args_text


class _Action(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    reason: str = ""
    needs_root: bool = False
    needs_reboot: str | None = None  # why a reboot is needed, or None
    notify: tuple[str, ...] = ()  # handler names, run once at the end if this action changed something

    def targets(self) -> list[str]:
        """Machine paths this action writes (their digests go into the plan fingerprint)."""
        return []

    def host_programs(self) -> tuple[tuple[str, ...], ...]:
        """Programs carrying this action out runs on this computer (against the machine root,
        by design), each as its alternatives, any one of which will do; planning blocks the
        step when one has none installed."""
        return ()

    def describe(self) -> str:  # pragma: no cover - overridden
        raise NotImplementedError


class CmdlineCheck(BaseModel):
    """The kernel command line bash must compute (``GRUB_CMDLINE_LINUX`` then
    ``GRUB_CMDLINE_LINUX_DEFAULT``, sourcing /etc/default/grub and grub.d/*.cfg as
    grub-mkconfig does) once a file is written: ``param`` exactly once, and ``others`` (every
    other parameter) unchanged, in order."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    param: str
    others: tuple[str, ...]


class WriteFile(_Action):
    """Replace a text file's content. ``before`` is the content the plan saw (None: absent)."""

    kind: Literal["write_file"] = "write_file"
    path: str
    before: str | None
    after: str
    mode: int | None = None
    validate_with: str | None = None  # name of a validator registered in executor.VALIDATORS
    #: with ``validate_with="grub"``: the whole command line bash must read afterwards
    cmdline: CmdlineCheck | None = None
    #: for a file the write creates (``before`` None): what rollback writes instead of
    #: removing it, when the tools that read the path take, without it, something that no
    #: longer is what they took before the apply (kernel-install falls back to /proc/cmdline,
    #: which carries the change once the machine rebooted)
    rollback_to: str | None = None

    def targets(self) -> list[str]:
        return [self.path]

    def describe(self) -> str:
        return f"{'create' if self.before is None else 'update'} {self.path}"


class Symlink(_Action):
    kind: Literal["symlink"] = "symlink"
    path: str
    target: str
    before: str | None = None  # the link's old target, None when absent

    def targets(self) -> list[str]:
        return [self.path]

    def describe(self) -> str:
        return f"link {self.path} -> {self.target}"


class RunCommand(_Action):
    kind: Literal["run_command"] = "run_command"
    argv: tuple[str, ...]
    env: dict[str, str] = {}

    def describe(self) -> str:
        import shlex

        return "run " + shlex.join(self.argv)


class InstallArchive(_Action):
    """Download a zip, check its sha256, unpack it into ``dest`` (a fresh versioned folder)."""

    kind: Literal["install_archive"] = "install_archive"
    url: str
    sha256: str
    size: int | None = None
    dest: str  # machine path of the versioned folder
    link: str | None = None  # machine path of a "current" link switched atomically after unpack

    def targets(self) -> list[str]:
        return [self.dest] + ([self.link] if self.link else [])

    def describe(self) -> str:
        return f"download {self.url} (sha256 {self.sha256[:12]}...) into {self.dest}"


class InstallPackage(_Action):
    """Download a .deb to ``path``, check its sha256 (and size) and only then install it with
    ``apt-get install -y <path>`` (apt brings its dependencies). The file stays in place: a
    verified package to install again by hand."""

    kind: Literal["install_package"] = "install_package"
    url: str
    sha256: str
    size: int | None = None
    path: str  # machine path the .deb is downloaded to
    package: str
    version: str

    def targets(self) -> list[str]:
        return [self.path]

    def describe(self) -> str:
        return (f"download {self.url} (sha256 {self.sha256[:12]}...) to {self.path}, "
                f"then apt-get install -y {self.path}")


_GIT_URL = re.compile(r"^(?:https?|git|ssh|file)://|^[\w.-]+@[\w.-]+:")


def is_git_url(source: str) -> bool:
    """Whether a source build's ``source`` is cloned with git (else a local folder or tarball)."""
    return bool(_GIT_URL.match(source)) or source.endswith(".git")


class BuildFromSource(_Action):
    """Fetch llama.cpp source, configure with CMake, build ``llama-server``, install into ``dest``."""

    kind: Literal["build_from_source"] = "build_from_source"
    source: str  # URL or path (directory, tarball)
    ref: str | None = None
    backend: Literal["hip", "cpu", "vulkan"] = "hip"
    gpu_target: str | None = None
    cmake_args: tuple[str, ...] = ()
    env: dict[str, str] = {}
    dest: str
    link: str | None = None

    def targets(self) -> list[str]:
        return [self.dest] + ([self.link] if self.link else [])

    def host_programs(self) -> tuple[tuple[str, ...], ...]:
        # CMake's default generator runs make; ninja when CMAKE_GENERATOR asks for it
        git = (("git",),) if is_git_url(self.source) else ()
        return (("cmake",), ("cc", "gcc", "clang"), ("c++", "g++", "clang++"),
                ("make", "ninja")) + git

    def describe(self) -> str:
        extra = f" with {args_text(self.cmake_args)}" if self.cmake_args else ""
        return (f"build llama-server ({self.backend}"
                f"{', ' + self.gpu_target if self.gpu_target else ''}) from {self.source}"
                f"{extra} into {self.dest}")


class ProveBuild(_Action):
    """Switch ``link`` to the new llama.cpp build in ``candidate`` only once it proved itself on
    the owner's routes against the build ``link`` names now (``before``): the correctness gate
    (the route on the new build against the current build's CPU backend) and a paired speed
    check (new against current, and current against itself for the noise), as
    :mod:`ojai_setup.domain.upgrade` decides. A refused build is left in its folder and the
    link where it was; the apply then stops with the finding."""

    kind: Literal["prove_build"] = "prove_build"
    candidate: str  # machine path of the new build's folder (holds llama-server)
    link: str  # machine path of the "current" link
    before: str  # the link's target when planned (the build the routes run now)
    #: route name -> its launch script (machine path): one route of each model
    routes: dict[str, str]
    max_loss: float = 0.05
    accept_slower: bool = False
    #: the gate reads every ``gate_stride``-th position of the fixed text (1: all of them)
    gate_stride: int = 4

    def targets(self) -> list[str]:
        return [self.link]

    def describe(self) -> str:
        speed = ("a loss of speed accepted" if self.accept_slower else
                 f"at most {self.max_loss * 100:.0f} % slower")
        return (f"prove {self.candidate} on routes {', '.join(self.routes)} (correctness gate "
                f"against the current build's CPU backend; paired speed check against "
                f"{self.before}, {speed}), then link {self.link} -> {self.candidate}")


class HubDownload(_Action):
    """Download one file from a Hugging Face repo into ``dest`` and check its sha256."""

    kind: Literal["hub_download"] = "hub_download"
    repo_id: str
    filename: str
    revision: str | None = None
    dest: str  # machine path of the final file
    sha256: str | None = None
    size: int | None = None
    #: the catalog's estimate of the size when the exact one is not known: shown in the plan's
    #: summary, never checked
    estimated_size: int | None = None

    def targets(self) -> list[str]:
        return [self.dest]

    def describe(self) -> str:
        size = f", {size_text(self.size)}" if self.size else ""
        return f"download {self.repo_id}:{self.filename} to {self.dest}{size}"


class CreateSystemUser(_Action):
    """Create an unprivileged system user (and its group) with no home and no login shell,
    with ``systemd-sysusers`` (``useradd --system`` where that is missing). The user is left in
    place by a rollback."""

    kind: Literal["create_system_user"] = "create_system_user"
    name: str
    description: str = ""

    def host_programs(self) -> tuple[tuple[str, ...], ...]:
        return (("systemd-sysusers", "useradd"),)

    def describe(self) -> str:
        return f"create the system user {self.name} (no home, no login shell)"


class WriteSecret(_Action):
    """Write ``VARIABLE=<secret>`` into a root-only (0600) environment file, the secret read
    from ``source`` when applying, so that it is never part of a plan. ``sha256`` is the digest
    of the file's planned content: a source that changed since the plan is refused."""

    kind: Literal["write_secret"] = "write_secret"
    path: str
    variable: str
    source: str
    sha256: str

    def targets(self) -> list[str]:
        return [self.path]

    def describe(self) -> str:
        return f"write {self.variable} from {self.source} into {self.path} (0600, root only)"


Action = Annotated[
    Union[WriteFile, Symlink, RunCommand, InstallArchive, InstallPackage, BuildFromSource,
          ProveBuild, HubDownload, CreateSystemUser, WriteSecret],
    Field(discriminator="kind"),
]


class ActionKind(NamedTuple):
    """What holds for every action of one kind, wherever ojai handles actions (one row of
    :data:`ACTION_KINDS`)."""

    model: type[_Action]
    #: it downloads, unpacks, builds or proves: long and fallible, so an apply runs it before
    #: any edit (:func:`ojai_setup.planning.plan.apply_phase`)
    fetch: bool
    #: the apply's (module, function) that carries it out, imported on first use; None where
    #: the command that plans such actions registers it (``prove_build``: ``ojai setup``)
    executor: tuple[str, str] | None
    #: the apply's (module, function) that says why its targets are not as planned after it
    #: ran (None when nothing is to be checked: a command's effect is its own)
    verifier: tuple[str, str] | None


_EXECUTOR = "ojai_setup.apply.executor"

#: every kind of action: the one table planning, the apply and its verification read
ACTION_KINDS: dict[str, ActionKind] = {
    "write_file": ActionKind(WriteFile, False, (_EXECUTOR, "execute_write_file"),
                             (_EXECUTOR, "verify_write_file")),
    "symlink": ActionKind(Symlink, False, (_EXECUTOR, "execute_symlink"),
                          (_EXECUTOR, "verify_symlink")),
    "run_command": ActionKind(RunCommand, False, (_EXECUTOR, "execute_run_command"), None),
    "install_archive": ActionKind(InstallArchive, True, ("ojai_setup.apply.archive",
                                                         "execute_install_archive"),
                                  (_EXECUTOR, "verify_installed_folder")),
    "install_package": ActionKind(InstallPackage, True, ("ojai_setup.apply.package",
                                                         "execute_install_package"),
                                  (_EXECUTOR, "verify_install_package")),
    "build_from_source": ActionKind(BuildFromSource, True, ("ojai_setup.apply.build",
                                                            "execute_build_from_source"),
                                    (_EXECUTOR, "verify_installed_folder")),
    "prove_build": ActionKind(ProveBuild, True, None, (_EXECUTOR, "verify_installed_folder")),
    "hub_download": ActionKind(HubDownload, True, ("ojai_setup.apply.hub",
                                                   "execute_hub_download"),
                               (_EXECUTOR, "verify_hub_download")),
    "create_system_user": ActionKind(CreateSystemUser, False, ("ojai_setup.apply.accounts",
                                                               "execute_create_system_user"),
                                     (_EXECUTOR, "verify_create_system_user")),
    "write_secret": ActionKind(WriteSecret, False, ("ojai_setup.apply.secrets",
                                                    "execute_write_secret"),
                               (_EXECUTOR, "verify_write_secret")),
}
