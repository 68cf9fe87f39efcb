"""What the machine is: pydantic models of detected state.

Every section that could not be read is ``None`` and its reason is kept in
:attr:`Facts.unknown` under the section's name, so a report can say *why* it does not know.
The JSON form of :class:`Facts` is part of ``ojai doctor --json`` (schema version
:data:`FACTS_SCHEMA`).
"""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from ojai_setup.core.paths import GIB
from ojai_setup.model.state import ApplyStatus

FACTS_SCHEMA = 2


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Cpu(_Model):
    model_name: str | None = None
    vendor_id: str | None = None
    family: int | None = None
    model: int | None = None
    logical_cpus: int = 0
    engineering_sample: bool = False


class RocmAgent(_Model):
    name: str  # gfx target for GPUs ("gfx1150"), product name for CPUs, "aie2p" for the NPU
    marketing_name: str | None = None
    vendor_name: str | None = None
    device_type: str  # CPU, GPU, DSP (the XDNA NPU shows as DSP)
    compute_units: int | None = None
    isas: list[str] = []
    number: int | None = None  # the N of "Agent N"; None when the text had no agent headers
    chip_id: str | None = None  # "0x150e": the PCI device id of the silicon, whatever Name says
    #: the gfx target that Chip ID natively is (ojai's table of Ryzen AI iGPUs); differs from
    #: ``name`` when HSA_OVERRIDE_GFX_VERSION was set where rocminfo ran
    native_target: str | None = None


class DrmCard(_Model):
    card: str  # "card1"
    pci_vendor: str | None = None  # "0x1002"
    pci_device: str | None = None
    vram_total: int | None = None  # bytes (mem_info_vram_total, the BIOS carve-out on an APU)
    gtt_total: int | None = None  # bytes (mem_info_gtt_total)
    #: bytes of VRAM the CPU can map (mem_info_vis_vram_total): all of it with a large BAR
    vis_vram_total: int | None = None
    native_target: str | None = None  # the gfx target of this PCI device id, when ojai knows it


class Gpu(_Model):
    agents: list[RocmAgent] = []  # GPU agents from rocminfo
    npu_agents: list[RocmAgent] = []
    rocminfo_error: str | None = None
    rocminfo_notes: list[str] = []  # what an excerpt lacked or hid
    cards: list[DrmCard] = []  # AMD cards from sysfs
    hsa_override: str | None = None  # HSA_OVERRIDE_GFX_VERSION seen in the environment
    #: why the environment is not known (a capture without .ojai/environ); None when it was read
    environment_unknown: str | None = None
    amdgpu_loaded: bool = False

    @property
    def targets(self) -> list[str]:
        """The GPUs' own gfx targets: rocminfo's names, except where an agent's Chip ID says the
        silicon is something else (an override renamed it)."""
        return [a.native_target or a.name for a in self.agents]


class Npu(_Model):
    accel_devices: list[str] = []
    amdxdna_version: str | None = None
    firmware_version: str | None = None
    firmware_source: str | None = None  # which command told the firmware version
    flm: dict[str, Any] | None = None  # parsed ``flm validate`` (see ojai_setup.formats.flm.FlmStatus)


class Memory(_Model):
    # only what does not change while the machine runs: a saved plan compares facts
    total_bytes: int

    @property
    def total_gib(self) -> float:
        return self.total_bytes / GIB


class Kernel(_Model):
    release: str  # 6.17.0-1012-oem
    version: tuple[int, ...]  # (6, 17, 0, 1012)
    flavour: str | None = None  # oem, generic, arch1, ...


class Bios(_Model):
    sys_vendor: str | None = None
    product_name: str | None = None
    board_vendor: str | None = None
    board_name: str | None = None
    bios_vendor: str | None = None
    bios_version: str | None = None
    bios_date: str | None = None


class Distro(_Model):
    id: str
    version: str = ""
    name: str = ""
    like: list[str] = []


class ModprobeSetting(_Model):
    path: str
    line: int
    module: str
    pages: int


class TtmRecord(_Model):
    """What ``ojai setup --apply`` recorded about the TTM limit it configured."""

    model_config = ConfigDict(extra="ignore")

    boot_id: str
    expected_pages: int
    module: str = "ttm"


class Ttm(_Model):
    live_module: Literal["ttm", "amdttm", "amd_ttm"] | None = None
    active_pages: int | None = None  # /sys/module/<live>/parameters/pages_limit
    cmdline_pages: int | None = None  # from /proc/cmdline (ttm. or amdttm.)
    cmdline_key: str | None = None
    modprobe: list[ModprobeSetting] = []
    deprecated_gttsize: list[str] = []  # amdgpu.gttsize / gtt_size tokens
    record: TtmRecord | None = None
    boot_id: str | None = None
    #: the limit the boot path's deciding file configures for the next boot's command line
    #: (GRUB's /etc/default/grub or the drop-in that sets it, /etc/kernel/cmdline, the default
    #: loader entry, Limine's settings, kernelstub's configuration): its key, pages and file
    config_pages: int | None = None
    config_key: str | None = None
    config_file: str | None = None
    #: why the configured command line or modprobe.d could not be read, or None
    read_error: str | None = None
    #: why the TTM module cannot take modprobe.d options (built into the kernel), or None
    builtin: str | None = None

    def configured_cmdline(self) -> tuple[str, int, str] | None:
        """(key, pages, file) of the limit the configured kernel command line sets, if any."""
        if self.config_pages is not None and self.config_key:
            return self.config_key, self.config_pages, self.config_file or "/etc/default/grub"
        return None

    @property
    def configured_pages(self) -> int | None:
        if self.config_pages is not None:
            return self.config_pages
        if self.modprobe:
            return self.modprobe[-1].pages
        return self.cmdline_pages  # set some other way (NixOS, by hand)


class GrubSource(_Model):
    """One file grub-mkconfig sources, and the command line variables after sourcing it."""

    path: str
    assigns: list[str] = []  # the cmdline variables it assigns
    linux: str | None = None  # GRUB_CMDLINE_LINUX after this file (None: unset)
    default: str | None = None  # GRUB_CMDLINE_LINUX_DEFAULT after this file


class GrubConfig(_Model):
    """The *configured* kernel command line: what grub-mkconfig computes from
    /etc/default/grub and /etc/default/grub.d/*.cfg (sourced by bash, in order)."""

    files: list[GrubSource] = []
    linux: str | None = None
    default: str | None = None
    #: GRUB_CMDLINE_LINUX + GRUB_CMDLINE_LINUX_DEFAULT as kernel parameters
    tokens: list[str] = []
    #: variable -> the file that decides it (the last one assigning it)
    winners: dict[str, str] = {}
    error: str | None = None  # bash could not source the files


class BootEntry(_Model):
    """The *generated* state: the entry GRUB boots by default."""

    config: str  # /boot/grub/grub.cfg, or the BLS entry file
    title: str = ""
    kernel: str | None = None
    release: str | None = None  # the kernel release it boots (from the kernel's file name)
    initrd: str | None = None
    tokens: list[str] = []  # the parameters on its kernel line


class Initramfs(_Model):
    """The initramfs of the kernel that will boot, as lsinitramfs / lsinitrd list it."""

    image: str
    tool: str | None = None
    carries_ttm: bool | None = None  # the TTM module loads from the initramfs
    modprobe_files: list[str] = []  # modprobe.d files inside it
    pages: int | None = None  # the pages_limit inside it (lsinitrd -f only)
    missing: list[str] = []  # modprobe.d settings not inside it
    older_than: list[str] = []  # changed after the image was built
    error: str | None = None


LoaderKind = Literal["grub", "grub-bls", "systemd-boot-kernel-install", "systemd-boot-entries",
                     "uki", "limine", "kernelstub", "nixos", "unknown"]


class BootLoader(_Model):
    """What decides the next boot's kernel command line, and the markers that said so."""

    kind: LoaderKind
    #: the markers that decided, as sentences ("/proc/cmdline carries BOOT_IMAGE=: GRUB booted")
    evidence: list[str] = []
    #: markers that point to another boot path (why ``unknown``, or what was outweighed)
    conflicts: list[str] = []
    #: the file the command line is configured in (/etc/default/grub, /etc/kernel/cmdline,
    #: the default loader entry, /etc/kernelstub/configuration, ...)
    config: str | None = None
    #: the ESP (or XBOOTLDR) folder holding ``loader/`` or the UKIs: /boot, /efi, /boot/efi
    esp: str | None = None
    #: openSUSE's /etc/sysconfig/bootloader LOADER_TYPE, when set
    loader_type: str | None = None


class Boot(_Model):
    #: the boot path (``boot.loader``): read before anything else about the boot
    loader: BootLoader | None = None
    generated: BootEntry | None = None
    generated_error: str | None = None
    initramfs: Initramfs | None = None


class Tool(_Model):
    name: str
    path: str | None = None
    version: str | None = None
    detail: dict[str, Any] | None = None  # e.g. the llama-server dialect summary


class Package(_Model):
    """An installed package of the distribution's package database."""

    name: str
    version: str
    manager: str  # dpkg, pacman, rpm
    fields: dict[str, str] = {}  # dpkg: Source, Provides, Depends, X-* fields


class DistroLlama(_Model):
    """A ``llama-server`` on PATH that a distribution package owns (Debian's llama.cpp-tools)."""

    path: str
    manager: str
    package: str
    package_version: str | None = None
    version: str | None = None  # its --version line
    build: int | None = None
    #: ggml backends installed as packages (cpu, hip, vulkan, ...)
    backends: list[str] = []
    #: the backend libraries in ggml's backends folder
    backend_files: list[str] = []
    hip_package_version: str | None = None
    #: the gfx targets the HIP backend package says it has code for (None: it does not say)
    hip_targets: list[str] | None = None


class VulkanDevice(_Model):
    """A physical device ``vulkaninfo --summary`` lists."""

    name: str
    #: integrated, discrete, virtual, cpu or other (``deviceType`` without its prefix)
    type: str
    #: ``driverID`` without its prefix: MESA_RADV, AMD_OPEN_SOURCE (AMDVLK), AMD_PROPRIETARY,
    #: MESA_LLVMPIPE (lavapipe), ...
    driver_id: str | None = None
    driver_name: str | None = None
    driver_info: str | None = None
    api_version: str | None = None
    vendor_id: str | None = None


class RenderNode(_Model):
    """A DRM render node (``/dev/dri/renderD128``) with its mode and group."""

    path: str
    mode: str
    group: str


class Vulkan(_Model):
    """The Vulkan stack: the loader, the ICD manifests, what ``vulkaninfo --summary`` reports
    and the render nodes the drivers open."""

    #: the loader library's path (``libvulkan.so.1``), None when not installed
    loader: str | None = None
    #: ICD manifest files (``/usr/share/vulkan/icd.d/radeon_icd.x86_64.json``)
    icds: list[str] = []
    #: the devices ``vulkaninfo --summary`` lists; None when it could not be run
    devices: list[VulkanDevice] | None = None
    instance_version: str | None = None
    #: why the device list is unknown (vulkaninfo missing or failing)
    devices_unknown: str | None = None
    #: the render nodes (None: ``ls -l /dev/dri`` could not be read)
    render_nodes: list[RenderNode] | None = None


class Power(_Model):
    """The ACPI platform profile and what manages it."""

    profile: str | None = None  # /sys/firmware/acpi/platform_profile
    choices: list[str] = []
    manager: str | None = None  # tuned, power-profiles-daemon
    manager_profile: str | None = None


class ModelPair(_Model):
    """A model route ojai set up, and whether its files are a matched pair (MTP heads or a
    draft model; n-gram drafting has none to prove)."""

    route: str
    main: str
    draft: str | None = None
    #: what the pairing proof checked: in_file, sidecar, draft_model or ngram
    kind: str | None = None
    ok: bool | None = None
    reasons: list[str] = []
    #: why the files' metadata could not be kept in ojai's state folder (read again each time)
    note: str | None = None


class Facts(_Model):
    schema_version: int = FACTS_SCHEMA
    root: str
    cpu: Cpu | None = None
    gpu: Gpu | None = None
    npu: Npu | None = None
    memory: Memory | None = None
    kernel: Kernel | None = None
    cmdline: list[str] | None = None
    rocm_version: str | None = None
    bios: Bios | None = None
    distro: Distro | None = None
    ttm: Ttm | None = None
    grub: GrubConfig | None = None
    #: the generated boot configuration and initramfs the next boot uses
    boot: Boot | None = None
    #: ojai's own applies on this machine: running, interrupted, follow-ups owed
    apply: ApplyStatus | None = None
    tools: dict[str, Tool] = {}
    amdgpu_dkms: bool | None = None
    #: versions of amdgpu in the DKMS tree (/var/lib/dkms/amdgpu/<version>)
    dkms_amdgpu: list[str] = []
    models: list[ModelPair] = []
    #: kernel settings doctor checks, by sysctl name (``kernel.numa_balancing``), as /proc/sys
    #: shows them; a setting that could not be read is absent
    sysctl: dict[str, str] = {}
    #: the distribution's packages ojai asks about, by name
    packages: dict[str, Package] | None = None
    distro_llama: DistroLlama | None = None
    #: amdgpu, amdxdna and KFD lines of the kernel log (dmesg)
    kernel_log: list[str] | None = None
    power: Power | None = None
    #: the Vulkan stack (None: neither a loader, an ICD nor vulkaninfo on this machine)
    vulkan: Vulkan | None = None
    unknown: dict[str, str] = {}
