"""The Vulkan stack of a machine: the loader library, the ICD manifests, what
``vulkaninfo --summary`` reports (parsed by :mod:`ojai_setup.formats.vulkan`) and the render
nodes' modes (``ls -l /dev/dri``)."""

from __future__ import annotations

from ojai_setup.core.root import NOT_FOUND, Root
from ojai_setup.formats.vulkan import parse_dri_listing, parse_summary
from ojai_setup.model.facts import RenderNode, Vulkan, VulkanDevice

#: where distributions put the loader (Debian/Ubuntu multiarch, Fedora/openSUSE, Arch)
LOADER_PATHS = ("/usr/lib/x86_64-linux-gnu/libvulkan.so.1", "/usr/lib64/libvulkan.so.1",
                "/usr/lib/libvulkan.so.1")
#: where the loader looks for ICD manifests (the Vulkan loader's LoaderInterfaceArchitecture)
ICD_DIRS = ("/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d", "/usr/local/share/vulkan/icd.d")


def read_vulkan(root: Root) -> Vulkan | None:
    """The Vulkan stack, or None when the machine shows none of it (no loader, no ICD, no
    vulkaninfo)."""
    loader = next((p for p in LOADER_PATHS if root.exists(p)), None)
    icds = [p for d in ICD_DIRS for p in root.glob(f"{d}/*.json")]
    result = root.run(["vulkaninfo", "--summary"], timeout=30)
    devices = instance = unknown = None
    if result.exit_code == NOT_FOUND:
        unknown = "vulkaninfo is not installed (Debian/Ubuntu: vulkan-tools)"
    elif result.exit_code != 0 and "Devices:" not in result.stdout:
        last = (result.stderr or result.stdout).strip().splitlines()
        unknown = f"vulkaninfo --summary failed (exit {result.exit_code})" + (
            f": {last[-1].strip()}" if last else "")
    else:
        summary = parse_summary(result.stdout)
        instance = summary.instance_version
        devices = [VulkanDevice(
            name=f.get("deviceName", "?"),
            type=f.get("deviceType", "").removeprefix("PHYSICAL_DEVICE_TYPE_").removesuffix("_GPU")
            .lower() or "other",
            driver_id=(f.get("driverID") or "").removeprefix("DRIVER_ID_") or None,
            driver_name=f.get("driverName"), driver_info=f.get("driverInfo"),
            api_version=f.get("apiVersion"), vendor_id=f.get("vendorID"))
            for _, f in summary.devices]
    if loader is None and not icds and devices is None:
        return None
    listing = root.run(["ls", "-l", "/dev/dri"], timeout=10)
    nodes = None
    if listing.exit_code != 0 and "No such file" in (listing.stderr or ""):
        nodes = []  # no /dev/dri at all
    elif listing.exit_code == 0:
        nodes = [RenderNode(path=f"/dev/dri/{n.name}", mode=n.mode, group=n.group)
                 for n in parse_dri_listing(listing.stdout) if n.name.startswith("renderD")]
    return Vulkan(loader=loader, icds=icds, devices=devices, instance_version=instance,
                  devices_unknown=unknown, render_nodes=nodes)
