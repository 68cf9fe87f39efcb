"""What doctor says about the Vulkan stack: which driver drives the GPU, and whether ojai's
service can open the render nodes. Pure: it reads :class:`~ojai_setup.model.facts.Vulkan`.

- RADV (Mesa, ``DRIVER_ID_MESA_RADV``): the driver the Vulkan routes are measured on.
- AMDVLK (``DRIVER_ID_AMD_OPEN_SOURCE``) and AMD's proprietary driver cap one allocation at
  2 GiB (``maxMemoryAllocationSize`` 0x80000000, against 4 GiB on RADV): llama.cpp's Vulkan
  backend then fails to load models whose compute buffer passes it, where RADV loads them
  (GPUOpen-Drivers/AMDVLK#413, llama.cpp#15054); AMDVLK is also slower at prompt processing on
  gfx1151 (AMDVLK#420).
- Only llvmpipe/lavapipe (``PHYSICAL_DEVICE_TYPE_CPU``): Vulkan runs on the processor; no GPU.
"""

from __future__ import annotations

from ojai_setup.core.paths import SERVICE_USER
from ojai_setup.model.facts import Vulkan, VulkanDevice

#: the groups ojai's units give the service (``SupplementaryGroups=render video``)
SERVICE_GROUPS = ("render", "video")
AMD_VENDOR = "0x1002"
#: driverID -> how doctor names it
DRIVERS = {"MESA_RADV": "RADV (Mesa)", "AMD_OPEN_SOURCE": "AMDVLK",
           "AMD_PROPRIETARY": "AMD's proprietary Vulkan driver", "MESA_LLVMPIPE": "lavapipe (llvmpipe)"}
TWO_GIB_DRIVERS = ("AMD_OPEN_SOURCE", "AMD_PROPRIETARY")
AMDVLK_LIMIT = "https://github.com/GPUOpen-Drivers/AMDVLK/issues/413"


def gpu_devices(v: Vulkan) -> list[VulkanDevice]:
    """The devices that are GPUs (not a CPU implementation)."""
    return [d for d in v.devices or [] if d.type != "cpu"]


def _named(d: VulkanDevice) -> str:
    driver = DRIVERS.get(d.driver_id or "", d.driver_name or d.driver_id or "an unnamed driver")
    info = f", {d.driver_info}" if d.driver_info else ""
    return f"{driver}{info} drives {d.name}"


def _stack(v: Vulkan) -> str:
    icds = ", ".join(p.rsplit("/", 1)[-1] for p in v.icds) or "none"
    return f"loader {v.loader or 'not found'}; ICD manifests: {icds}"


def driver_outcome(v: Vulkan) -> tuple[bool | None, str, str | None]:
    """(ok, evidence, fix) of the driver finding."""
    if v.devices is None:
        return (None, f"{_stack(v)}; {v.devices_unknown or 'no device list'}",
                "Install vulkaninfo (Debian/Ubuntu: `sudo apt install vulkan-tools`) to see which "
                "driver drives the GPU.")
    gpus = gpu_devices(v)
    amd = [d for d in gpus if d.vendor_id in (None, AMD_VENDOR)] or gpus
    if not amd:
        cpu = ", ".join(d.name for d in v.devices) or "no device at all"
        return (False, f"{_stack(v)}; vulkaninfo lists {cpu}: no GPU, so a Vulkan route would run "
                "on the processor", "Install Mesa's RADV (Debian/Ubuntu: `sudo apt install "
                "mesa-vulkan-drivers`; Fedora: mesa-vulkan-drivers; Arch: vulkan-radeon) and check "
                "that amdgpu drives the GPU and /dev/dri/renderD* exists.")
    first = amd[0]
    evidence = f"{_stack(v)}; {_named(first)}" + (
        f" (and {len(amd) - 1} more)" if len(amd) > 1 else "")
    if first.driver_id in TWO_GIB_DRIVERS:
        radv = next((d for d in amd if d.driver_id == "MESA_RADV"), None)
        return (False, evidence + ": it caps one allocation at 2 GiB, and llama.cpp's Vulkan "
                f"backend fails to load models whose buffers pass it ({AMDVLK_LIMIT})"
                + ("; RADV is installed too" if radv else ""),
                "Use RADV: " + ("set `AMD_VULKAN_ICD=RADV` for the routes, or remove AMDVLK "
                                "(the amdvlk package)." if radv else
                                "install Mesa's RADV (mesa-vulkan-drivers; Arch: vulkan-radeon) "
                                "and remove AMDVLK (the amdvlk package)."))
    return (True, evidence, None)


def render_outcome(v: Vulkan) -> tuple[bool | None, str, str | None]:
    """(ok, evidence, fix) of the render-node finding: the service runs with the groups
    :data:`SERVICE_GROUPS`, so it can open a node whose group is one of them (read and write
    for the group) or that everyone may read and write."""
    if v.render_nodes is None:
        return (None, "the render nodes could not be listed (ls -l /dev/dri)", None)
    if not v.render_nodes:
        return (False, "no render node in /dev/dri: the GPU has no DRM driver bound, or this is "
                "a container without /dev/dri", "Check that amdgpu is loaded "
                "(`lsmod | grep amdgpu`) and, in a container, pass /dev/dri through.")
    bad = []
    for n in v.render_nodes:
        group_rw = n.mode[4:6] == "rw" and n.group in SERVICE_GROUPS
        other_rw = n.mode[7:9] == "rw"
        if not (group_rw or other_rw):
            bad.append(f"{n.path} ({n.mode} group {n.group})")
    nodes = ", ".join(f"{n.path} {n.mode} group {n.group}" for n in v.render_nodes)
    if bad:
        return (False, f"{nodes}: the {SERVICE_USER} service (groups "
                f"{' and '.join(SERVICE_GROUPS)}) cannot open {', '.join(bad)}",
                "Give the render node to the render group (udev: "
                "`SUBSYSTEM==\"drm\", KERNEL==\"renderD*\", GROUP=\"render\", MODE=\"0660\"`).")
    return (True, f"{nodes}: the {SERVICE_USER} service (groups {' and '.join(SERVICE_GROUPS)}) "
            "can open them", None)
