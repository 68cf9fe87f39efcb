"""The distribution's own llama.cpp (Debian's ``llama.cpp-tools``): what it can run on this GPU.

Debian builds ggml's backends as packages (``libggml0`` with the CPU backend,
``libggml0-backend-hip``, ``-vulkan``, ...) that its ``llama-server`` loads at start; the HIP
package says which gfx targets it has code objects for in ``X-Rocm-Gpu-Architecture``
(0.27.0: gfx803 to gfx1102, no gfx1150 or gfx1151). A HIP backend without the GPU's target
does not run on it, and llama-server falls back to what else is there (Vulkan, the CPU).
"""

from __future__ import annotations

from typing import NamedTuple

from ojai_setup.model.facts import DistroLlama


class Coverage(NamedTuple):
    #: the backend the routes would really run on here: hip, vulkan or cpu
    runs_on: str
    #: True: the HIP backend has code for this GPU; False: it has not; None: it does not say
    hip_covers: bool | None
    sentence: str


def coverage(d: DistroLlama, target: str | None) -> Coverage:
    what = (f"{d.path} from {d.package} {d.package_version or ''} ({d.manager})".replace("  ", " ")
            + (f", {d.version}" if d.version else ""))
    backends = ", ".join(d.backends) or "none installed as packages"
    if "hip" in d.backends:
        targets = d.hip_targets
        if targets is None:
            return Coverage("hip", None, f"{what}; ggml backends: {backends}; its HIP backend "
                            f"({d.hip_package_version}) does not say which GPUs it has code for")
        listed = f"{targets[0]} to {targets[-1]}" if len(targets) > 2 else ", ".join(targets)
        if target and target in targets:
            return Coverage("hip", True, f"{what}; ggml backends: {backends}; its HIP backend "
                            f"({d.hip_package_version}) has code for {target}")
        fallback = "vulkan" if "vulkan" in d.backends else "cpu"
        return Coverage(fallback, False, f"{what}; ggml backends: {backends}; its HIP backend "
                        f"({d.hip_package_version}) has code for {listed} only, not "
                        f"{target or 'this GPU'}: it would run on the {fallback.upper()}"
                        + (" backend" if fallback == "vulkan" else ""))
    runs = "vulkan" if "vulkan" in d.backends else "cpu"
    return Coverage(runs, None, f"{what}; ggml backends: {backends}: no HIP backend, so it runs "
                    f"on the {'Vulkan backend' if runs == 'vulkan' else 'CPU'}")


def install_hint(distro_id: str, like: list[str]) -> str:
    family = " ".join([distro_id, *like])
    if distro_id == "ubuntu" or "ubuntu" in like:
        return ("`sudo apt install llama.cpp-tools` on a release that packages it (Debian "
                "unstable does; Ubuntu 24.04, older than the package, does not)")
    if "debian" in family:
        return "`sudo apt install llama.cpp-tools` (Debian unstable packages it)"
    if "fedora" in family:
        return "`sudo dnf install llama-cpp`"
    return "your distribution's llama.cpp package"


def vulkan_hint(d: DistroLlama) -> str:
    """How to add the Vulkan backend to the distribution's llama.cpp: Debian's ggml ships each
    backend as a package of its own (``libggml0-backend-vulkan``, loaded by ``llama-server`` at
    start); elsewhere the package manager's ggml Vulkan package."""
    if d.manager == "dpkg":
        return "`sudo apt install libggml0-backend-vulkan`"
    return "your distribution's ggml Vulkan backend package"
