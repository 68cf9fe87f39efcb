"""Extra CMake definitions of a source build (``ojai setup --cmake-define KEY=VALUE``).

A definition is ``KEY=VALUE``: KEY a CMake variable name, VALUE words free of quotes and shell
metacharacters, one space between words, as a list of compiler flags takes them
(``CMAKE_HIP_FLAGS_RELEASE=-O3 -DNDEBUG``). It goes to cmake as one argument, never through a
shell, is shown in the plan quoted as a command line and recorded in the install record.
The variables ojai itself sets from its own options or its install layout are refused: a
definition must not quietly turn a HIP build into another backend, change its GPU targets or
break the layout ojai installs and checks."""

from __future__ import annotations

import re
import shlex

#: a CMake variable name as a -D on the command line takes it
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: the characters of a value's words: no quotes or shell metacharacters ($ ` ; | & < > ( ) * ? ...)
_WORD_CHARS = "A-Za-z0-9_.,:/+=@%-"
_CHAR = re.compile(f"^[ {_WORD_CHARS}]$")
#: words of those characters, one space between them (or nothing at all)
_VALUE = re.compile(f"^(?:[{_WORD_CHARS}]+(?: [{_WORD_CHARS}]+)*)?$")

#: what ojai sets itself, and the option or reason that owns it
OWNED: dict[str, str] = {
    "CMAKE_BUILD_TYPE": "ojai builds Release",
    "CMAKE_BUILD_WITH_INSTALL_RPATH": "the install finds its libraries beside the binary",
    "CMAKE_INSTALL_RPATH": "the install finds its libraries beside the binary",
    "CMAKE_INSTALL_RPATH_USE_LINK_PATH": "the install finds its libraries beside the binary",
    "BUILD_SHARED_LIBS": "the install is the binary and its shared libraries beside it",
    "LLAMA_BUILD_SERVER": "ojai builds llama-server",
    "LLAMA_BUILD_NUMBER": "the build number comes from --llamacpp-ref",
    "LLAMA_USE_PREBUILT_UI": "the prebuilt web UI is fetched without a pinned checksum",
    "GPU_TARGETS": "the targets come from --gpu-target",
    "AMDGPU_TARGETS": "the targets come from --gpu-target",
    "CMAKE_HIP_ARCHITECTURES": "the targets come from --gpu-target",
    "CMAKE_HIP_COMPILER": "the HIP compiler is the one ojai's toolchain check found",
    "GGML_HIP": "the backend comes from --backend",
    "GGML_VULKAN": "the backend comes from --backend",
    "GGML_CUDA": "the backend comes from --backend",
    "GGML_METAL": "the backend comes from --backend",
    "GGML_SYCL": "the backend comes from --backend",
    "GGML_MUSA": "the backend comes from --backend",
    "GGML_OPENCL": "the backend comes from --backend",
    "GGML_CANN": "the backend comes from --backend",
    "GGML_WEBGPU": "the backend comes from --backend",
}


def check_define(text: str) -> str:
    """``text`` when it is a definition ojai passes on, else ValueError saying why."""
    key, eq, value = text.partition("=")
    if not eq:
        raise ValueError(f"{text!r} is not KEY=VALUE (for example GGML_HIP_ROCWMMA_FATTN=ON)")
    if not _KEY.match(key):
        raise ValueError(f"{key!r} is not a CMake variable name (letters, digits and _, not "
                         "starting with a digit)")
    if key in OWNED:
        raise ValueError(f"{key} is set by ojai itself ({OWNED[key]}); leave it out")
    bad = "".join(sorted({c for c in value if not _CHAR.match(c)}))
    if bad:
        raise ValueError(f"the value of {key} holds {bad!r}: a value may hold letters, digits "
                         "and _ . , : / + = @ % -, words separated by one space, no quotes or "
                         "shell metacharacters")
    if not _VALUE.match(value):
        raise ValueError(f"the value of {key} starts or ends with a space or has two together: "
                         "separate its words by one space")
    return text


def check_defines(defines: tuple[str, ...]) -> tuple[str, ...]:
    """The definitions sorted by key (their order does not matter to CMake, so the same set is
    the same build); a key given twice is refused."""
    seen: dict[str, str] = {}
    for d in defines:
        key = d.partition("=")[0]
        if key in seen:
            raise ValueError(f"{key} is given twice ({seen[key]}, {d}); give it once")
        seen[key] = d
    return tuple(sorted(defines, key=lambda d: d.partition("=")[0]))


def cmake_args(defines: tuple[str, ...]) -> tuple[str, ...]:
    """The ``-D`` arguments of ``defines`` for cmake's configure."""
    return tuple(f"-D{d}" for d in defines)


def args_text(args: tuple[str, ...]) -> str:
    """The ``-D`` arguments as one shell-quoted line: how the plan shows them and how
    build-costs.toml names the build measured with them."""
    return shlex.join(args)
