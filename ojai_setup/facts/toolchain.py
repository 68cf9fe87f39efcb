"""The HIP toolchain a source build needs, read from the machine: planning checks it (a build
that cannot succeed is blocked in the dry run) and the build checks it again before it writes.

A HIP build of llama.cpp needs (llama.cpp ``docs/build.md`` and
``ggml/src/ggml-hip/CMakeLists.txt``):

- ``hipconfig``: ``-l`` names the folder of the HIP clang (``HIPCXX=<it>/clang``), ``-R`` the
  ROCm prefix (``HIP_PATH``);
- that clang able to compile for every requested target: ``clang --target=amdgcn-amd-amdhsa -nogpulib
  --print-supported-cpus`` lists the ``gfx`` names it knows (gfx1150 and gfx1151 arrived with
  LLVM 17; Debian 12's ``hipcc`` 5.2 runs on clang 15 and has neither);
- the CMake packages ``hip``, ``hipblas`` and ``rocblas`` (``find_package(... REQUIRED)``).

:func:`check_hip_toolchain` reads all of that through the :class:`~ojai_setup.core.root.Root` (so a
machine directory answers from its captures) and raises one :class:`ToolchainError` naming
every missing piece and the packages that provide it on this machine's distribution: Debian's
and Ubuntu's own packages, or AMD's ROCm repository when ROCm comes from there (``/opt/rocm``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from ojai_setup.domain.build import BuildError
from ojai_setup.core.root import Root

Origin = Literal["debian", "amd", "other"]

#: piece -> (what it is, Debian/Ubuntu package, AMD ROCm repository package)
PIECES: dict[str, tuple[str, str, str]] = {
    "hipconfig": ("the HIP compiler driver (hipconfig, hipcc)", "hipcc", "hipcc"),
    "clang": ("a HIP clang that can compile for {targets}", "hipcc", "rocm-llvm"),
    "hip": ("the HIP runtime's development files (hip-config.cmake)", "libamdhip64-dev",
            "hip-dev"),
    "hipblas": ("hipBLAS's development files (hipblas-config.cmake)", "libhipblas-dev",
                "hipblas-dev"),
    "rocblas": ("rocBLAS's development files (rocblas-config.cmake)", "librocblas-dev",
                "rocblas-dev"),
}
AMD_PREFIX = "/opt/rocm"
#: where a distribution or AMD's packages put CMake package files, under the prefix
_CMAKE_DIRS = ("lib/cmake", "lib/*/cmake", "lib64/cmake", "share/cmake")
_GFX = re.compile(r"^\s*(gfx[0-9a-z]+)\s*$", re.MULTILINE)


class ToolchainError(BuildError):
    """The HIP toolchain is missing or too old; nothing was written."""

    def __init__(self, message: str, missing: tuple[str, ...], packages: tuple[str, ...]) -> None:
        super().__init__(message)
        self.missing = missing
        self.packages = packages


@dataclass(frozen=True)
class HipToolchain:
    llvm_bin: str
    rocm_path: str
    targets: tuple[str, ...]  # the gfx targets its clang knows

    def env(self) -> dict[str, str]:
        """``HIPCXX`` and ``HIP_PATH`` as llama.cpp's docs/build.md sets them."""
        return {"HIPCXX": f"{self.llvm_bin}/clang", "HIP_PATH": self.rocm_path}


def parse_supported_cpus(text: str) -> tuple[str, ...]:
    """The ``gfx`` names in the output of ``clang --print-supported-cpus``."""
    return tuple(dict.fromkeys(re.findall(_GFX, text)))


def split_targets(gpu_target: str) -> list[str]:
    return [t for t in re.split(r"[;,]", gpu_target) if t]


def distribution(root: Root) -> tuple[str, list[str]]:
    """os-release's ``ID`` and ``ID_LIKE`` of the machine ("", [] when unknown)."""
    from ojai_setup.facts.collect import read_distro

    try:
        d = read_distro(root)
    except (OSError, FileNotFoundError):
        return "", []
    return d.id, d.like


def origin(root: Root, rocm_path: str | None) -> Origin:
    """Where this machine's ROCm comes from, or would come from."""
    if rocm_path is not None:
        if rocm_path.startswith(AMD_PREFIX):
            return "amd"
        if rocm_path in ("/usr", "/usr/local"):
            return "debian" if _debian_like(root) else "other"
    if root.exists(AMD_PREFIX):
        return "amd"
    ident, like = distribution(root)
    if ident == "ubuntu":
        # Ubuntu's own ROCm trails what gfx1150 needs; AMD's repository is the way there
        return "amd"
    return "debian" if _debian_like(root) else "other"


def _debian_like(root: Root) -> bool:
    ident, like = distribution(root)
    return ident in ("debian", "ubuntu") or "debian" in like or "ubuntu" in like


def install_hint(origin_: Origin, missing: list[str], *, too_old: bool = False
                 ) -> tuple[tuple[str, ...], str]:
    """The packages for ``missing`` pieces and the sentence telling how to install them.

    ``too_old``: the compiler is there but lacks the target, so installing it is not enough.
    """
    if origin_ == "other":
        names = tuple(dict.fromkeys(PIECES[m][1] for m in missing))
        return names, ("install them with your distribution's ROCm packages (Debian's names: "
                       + ", ".join(names) + ")")
    column = 1 if origin_ == "debian" else 2
    names = tuple(dict.fromkeys(PIECES[m][column] for m in missing))
    where = ("from Debian's packages (tested: Debian unstable, ROCm 6.4)" if origin_ == "debian"
             else "from AMD's ROCm repository (repo.radeon.com, as its Ubuntu install guide adds "
                  "it)")
    hint = f"install {where}: sudo apt install {' '.join(names)}"
    if too_old:
        hint += (" (a release whose clang lists the target: LLVM 17 or later for gfx1150 and "
                 "gfx1151; Debian unstable's hipcc 7.0.2 is on clang 21)")
    return names, hint


def _fail(root: Root, rocm_path: str | None, missing: list[str], details: list[str],
          targets: list[str], *, too_old: bool = False) -> ToolchainError:
    packages, hint = install_hint(origin(root, rocm_path), missing, too_old=too_old)
    what = "; ".join(details)
    pieces = ", ".join(PIECES[m][0].format(targets=", ".join(targets)) for m in missing)
    return ToolchainError(f"the HIP toolchain cannot build llama.cpp for {', '.join(targets)}: "
                          f"{what}. Missing: {pieces}; {hint}; nothing was written for this build",
                          tuple(missing), packages)


def _cmake_package(root: Root, prefixes: list[str], name: str) -> str | None:
    for prefix in dict.fromkeys(prefixes):
        for sub in _CMAKE_DIRS:
            for fname in (f"{name}-config.cmake", f"{name}Config.cmake"):
                found = root.glob(f"{prefix.rstrip('/')}/{sub}/{name}/{fname}")
                if found:
                    return found[0]
    return None


def check_hip_toolchain(root: Root, gpu_target: str) -> HipToolchain:
    """The machine's HIP toolchain, or a :class:`ToolchainError` saying what to install."""
    targets = split_targets(gpu_target)
    llvm = root.run(["hipconfig", "-l"])
    rocm = root.run(["hipconfig", "-R"])
    if not llvm.found:
        libs = [n for n in ("hip", "hipblas", "rocblas")
                if _cmake_package(root, ["/usr", AMD_PREFIX], n) is None]
        raise _fail(root, None, ["hipconfig", *libs], ["no hipconfig on this machine"], targets)
    for result in (llvm, rocm):
        if not result.ok or not result.stdout.strip():
            raise _fail(root, None, ["hipconfig"],
                        [f"`{' '.join(result.argv)}` failed (exit {result.exit_code}): "
                         f"{(result.stderr or result.stdout).strip()[-200:] or 'no output'}"],
                        targets)
    llvm_bin = llvm.stdout.strip().splitlines()[-1].strip()
    rocm_path = rocm.stdout.strip().splitlines()[-1].strip()
    missing: list[str] = []
    details: list[str] = []
    clang = f"{llvm_bin}/clang"
    cpus = root.run([clang, "--target=amdgcn-amd-amdhsa", "-nogpulib", "--print-supported-cpus"])
    known = parse_supported_cpus(cpus.stdout + "\n" + cpus.stderr)
    if not cpus.found:
        missing.append("clang")
        details.append(f"hipconfig -l names {llvm_bin}, but {clang} does not exist")
    elif not known:
        missing.append("clang")
        details.append(f"{clang} lists no AMD GPU targets (exit {cpus.exit_code})")
    else:
        lacking = [t for t in targets if t not in known]
        if lacking:
            missing.append("clang")
            newest = sorted(known, key=lambda t: (len(t), t))[-1]
            details.append(f"{clang} cannot compile for {', '.join(lacking)} (the newest target "
                           f"it knows is {newest}): the toolchain is too old")
    for name in ("hip", "hipblas", "rocblas"):
        if _cmake_package(root, [rocm_path, "/usr", AMD_PREFIX], name) is None:
            missing.append(name)
            details.append(f"no {name}-config.cmake under {rocm_path}")
    if missing:
        raise _fail(root, rocm_path, missing, details, targets,
                    too_old=any("too old" in d for d in details))
    return HipToolchain(llvm_bin, rocm_path, known)


# -- the Vulkan build --------------------------------------------------------------------------
#: distribution family -> (the shader compiler's package, the headers' and loader's packages):
#: what ``find_package(Vulkan COMPONENTS glslc REQUIRED)`` of ggml's Vulkan backend needs
#: (Debian and Ubuntu as upstream llama.cpp's release workflow installs them; Fedora's shaderc
#: split ships ``glslc`` on its own; Arch and openSUSE ship glslc in ``shaderc``)
VULKAN_PACKAGES: dict[str, tuple[str, ...]] = {
    "debian": ("glslc", "libvulkan-dev"),
    "fedora": ("glslc", "vulkan-headers", "vulkan-loader-devel"),
    "arch": ("shaderc", "vulkan-headers", "vulkan-icd-loader"),
    "suse": ("shaderc", "vulkan-headers", "vulkan-devel"),
}
_VULKAN_INSTALL = {"debian": "sudo apt install", "fedora": "sudo dnf install",
                   "arch": "sudo pacman -S", "suse": "sudo zypper install"}
#: where the loader's development link ``libvulkan.so`` lives on these distributions
_VULKAN_LIBS = ("/usr/lib/x86_64-linux-gnu/libvulkan.so", "/usr/lib/aarch64-linux-gnu/libvulkan.so",
                "/usr/lib64/libvulkan.so", "/usr/lib/libvulkan.so", "/usr/local/lib/libvulkan.so")


def vulkan_family(distro_id: str, like: list[str]) -> str | None:
    """The package family of a distribution for :data:`VULKAN_PACKAGES`, or None."""
    words = {distro_id, *like}
    for family, names in (("debian", {"debian", "ubuntu"}), ("fedora", {"fedora", "rhel", "centos"}),
                          ("arch", {"arch"}), ("suse", {"suse", "opensuse", "sles"})):
        if words & names or any(w.startswith("opensuse") for w in words) and family == "suse":
            return family
    return None


def vulkan_toolchain_error(root: Root) -> str | None:
    """Why a Vulkan build of llama.cpp cannot be configured here (the shader compiler
    ``glslc``, the Vulkan headers or the loader's ``libvulkan.so`` missing, with the packages
    that bring them on this distribution), or None when all three are there."""
    missing = []
    if root.which("glslc") is None and \
            not any(root.exists(f"{d}/glslc") for d in ("/usr/bin", "/usr/local/bin")):
        missing.append("the shader compiler glslc")
    if not root.exists("/usr/include/vulkan/vulkan.h") and \
            not root.exists("/usr/local/include/vulkan/vulkan.h"):
        missing.append("the Vulkan headers (vulkan/vulkan.h)")
    if not any(root.exists(p) for p in _VULKAN_LIBS):
        missing.append("the Vulkan loader's development link (libvulkan.so)")
    if not missing:
        return None
    family = vulkan_family(*distribution(root))
    if family is None:
        hint = ("install your distribution's glslc (shaderc), Vulkan headers and Vulkan loader "
                "development packages")
    else:
        hint = f"install them with `{_VULKAN_INSTALL[family]} {' '.join(VULKAN_PACKAGES[family])}`"
    return f"a Vulkan build of llama.cpp needs {', '.join(missing)}; {hint}"
