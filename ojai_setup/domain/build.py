"""Build ``llama-server`` from llama.cpp source and install it (the ``build_from_source`` action).

Planning is pure: :func:`cmake_configure_args` turns a backend and GPU target into CMake
options, keeping only options the source's own CMake files declare. The executor function
:func:`ojai_setup.apply.build.execute_build_from_source` does the work:

1. get the source: a directory, a tarball (an sdist nests llama.cpp under ``llama.cpp/``;
   entries that would land outside the target are refused) or a git URL cloned with
   ``--depth 1`` at ``action.ref``;
2. ``cmake -S <src> -B <build> ...`` then ``cmake --build <build> --target llama-server``,
   streaming the output into ``<dest>.build.log`` and ``[ NN%]`` lines into progress;
3. stage ``llama-server`` and the shared libraries beside it (RPATH ``$ORIGIN``), check with
   ``ldd`` that nothing resolves into the build tree, run ``--version``, write
   :data:`INSTALL_RECORD`;
4. rename the staged folder into ``action.dest`` and switch ``action.link`` atomically.

A failure at any point leaves a previous install and link untouched and raises
:class:`BuildError` with the last lines of the build log. Every path written is a machine path
resolved through the :class:`~ojai_setup.core.root.Root`; the tool-chain (git, cmake, the
compilers, ldd) is the host's."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Literal

from pydantic import BaseModel, ConfigDict

from ojai_setup.core.errors import ApplyError

SERVER = "llama-server"


INSTALL_RECORD = "ojai-install.json"


Backend = Literal["hip", "cpu", "vulkan"]


_OPTION = re.compile(r"^\s*option\s*\(\s*([A-Za-z0-9_]+)", re.MULTILINE)


_GPU_TARGETS = re.compile(r"^gfx[0-9a-z]+(?:[;,]gfx[0-9a-z]+)*$")


_BUILD_TAG = re.compile(r"^b(\d+)$")




_SHA = re.compile(r"^[0-9a-f]{7,40}$")


class BuildError(ApplyError):
    """Building or installing llama-server failed; nothing already installed was changed."""


class InstallRecord(BaseModel):
    """What was built, written as JSON into the install folder once it is complete."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str
    source_kind: Literal["directory", "tarball", "git"]
    source_sha256: str | None = None
    git_commit: str | None = None
    ref: str | None = None
    backend: Backend
    gpu_target: str | None = None
    #: every configure option, and the ones the action asked for on top
    cmake_args: tuple[str, ...]
    extra_cmake_args: tuple[str, ...] = ()
    version: str
    build_number: int | None = None
    files: tuple[str, ...]
    built_at: str
    #: what the build took: wall time from unpacking to the staged install; the processor
    #: time of configure and compile (user + system, every compiler counted: it does not
    #: depend on what else the machine was doing); the space its work folder (source and
    #: build tree) held at the end, when it is largest; the parallel jobs it ran
    build_seconds: float | None = None
    cpu_seconds: float | None = None
    build_bytes: int | None = None
    cores: int | None = None


# -- pure planning ---------------------------------------------------------------------------
def parse_cmake_options(text: str) -> set[str]:
    """The names declared with ``option(NAME ...)`` in a CMakeLists.txt."""
    return set(_OPTION.findall(text))


def build_number_from_ref(ref: str | None) -> int | None:
    """llama.cpp tags its releases ``b<build number>`` (``b11434``)."""
    m = _BUILD_TAG.match(ref or "")
    return int(m.group(1)) if m else None


def cmake_configure_args(backend: Backend, gpu_target: str | None, *,
                         source_options: set[str] | None = None,
                         build_number: int | None = None,
                         extra: Iterable[str] = ()) -> list[str]:
    """CMake options for a Release build of ``llama-server``.

    ``source_options`` are the options the source declares (see :func:`parse_cmake_options`);
    optional switches are added only when the source knows them (None: assume it does).
    ``extra`` comes last, so it can override anything.
    """

    def known(name: str) -> bool:
        return source_options is None or name in source_options

    args = [
        "-DCMAKE_BUILD_TYPE=Release",
        # the installed binary finds its libraries beside itself, never in the build tree
        "-DCMAKE_BUILD_WITH_INSTALL_RPATH=ON",
        "-DCMAKE_INSTALL_RPATH=$ORIGIN",
        "-DCMAKE_INSTALL_RPATH_USE_LINK_PATH=ON",
    ]
    for name, value in (
        ("BUILD_SHARED_LIBS", "ON"),
        ("LLAMA_BUILD_TESTS", "OFF"),
        ("LLAMA_BUILD_EXAMPLES", "OFF"),
        ("LLAMA_BUILD_SERVER", "ON"),
        # the prebuilt web UI is fetched at build time without a pinned checksum
        ("LLAMA_USE_PREBUILT_UI", "OFF"),
    ):
        if known(name):
            args.append(f"-D{name}={value}")
    if backend == "hip":
        if not gpu_target or not _GPU_TARGETS.match(gpu_target):
            raise ValueError(f"a HIP build needs a GPU target such as gfx1150, got {gpu_target!r}")
        if not known("GGML_HIP"):
            raise BuildError("this llama.cpp source has no GGML_HIP option; it is too old for "
                             "a HIP build")
        args += ["-DGGML_HIP=ON", f"-DGPU_TARGETS={gpu_target.replace(',', ';')}"]
    elif backend == "cpu":
        if gpu_target:
            raise ValueError(f"a CPU build takes no GPU target (got {gpu_target!r})")
    elif backend == "vulkan":
        if gpu_target:
            raise ValueError(f"a Vulkan build takes no GPU target (got {gpu_target!r})")
        if not known("GGML_VULKAN"):
            raise BuildError("this llama.cpp source has no GGML_VULKAN option; it is too old "
                             "for a Vulkan build")
        args.append("-DGGML_VULKAN=ON")
    else:
        raise ValueError(f"unknown backend {backend!r}")
    if build_number is not None:
        args.append(f"-DLLAMA_BUILD_NUMBER={build_number}")
    args += list(extra)
    return args

