"""FastFlowLM models that fit next to the GPU budget, and what is missing for the NPU stack."""

from pydantic import ConfigDict

from ojai_setup.core.errors import InputError
from ojai_setup.formats.flm import MIN_COLUMNS, FlmStatus, _Model


# -- models ------------------------------------------------------------------------------------
class FlmModel(_Model):
    tag: str
    footprint_gb: float  # memory while serving, "footprint" in FastFlowLM's model_list.json
    context: int  # default context length
    labels: tuple[str, ...] = ()


#: Chat models FastFlowLM serves, best first. Footprints and default context lengths are the
#: ``footprint`` and ``default_context_length`` fields of ROCm/FastFlowLM ``src/model_list.json``.
FLM_MODELS: tuple[FlmModel, ...] = (
    FlmModel(tag="gpt-oss:20b", footprint_gb=14.0, context=8192, labels=("reasoning",)),
    FlmModel(tag="gemma4-it:e4b", footprint_gb=9.1, context=32768,
             labels=("vision", "audio", "reasoning", "tool-calling")),
    FlmModel(tag="qwen3:8b", footprint_gb=5.6, context=16384, labels=("reasoning", "tool-calling")),
    FlmModel(tag="llama3.1:8b", footprint_gb=5.4, context=16384),
    FlmModel(tag="gemma3:4b", footprint_gb=4.5, context=65536, labels=("vision",)),
    FlmModel(tag="qwen3:4b", footprint_gb=3.1, context=32768, labels=("reasoning", "tool-calling")),
    FlmModel(tag="phi4-mini-it:4b", footprint_gb=3.4, context=32768),
    FlmModel(tag="llama3.2:3b", footprint_gb=2.7, context=65536),
    FlmModel(tag="qwen3:1.7b", footprint_gb=1.6, context=32768, labels=("reasoning",)),
    FlmModel(tag="llama3.2:1b", footprint_gb=1.3, context=131072),
)


class NoModelFits(InputError):
    """No FastFlowLM chat model is both available and within the memory budget."""


def choose_model(tags_available: list[str], memory_budget_bytes: int) -> str:
    """The best FastFlowLM chat model in ``tags_available`` whose footprint fits the budget.

    Footprints are taken as GiB, which leaves a little headroom.
    """
    available = set(tags_available)
    for model in FLM_MODELS:
        if model.tag in available and model.footprint_gb * 2**30 <= memory_budget_bytes:
            return model.tag
    known = [m.tag for m in FLM_MODELS if m.tag in available]
    if not known:
        raise NoModelFits(
            "none of the offered FastFlowLM tags is a chat model ojai knows: "
            + (", ".join(sorted(available)) or "(none)"))
    smallest = min((m for m in FLM_MODELS if m.tag in available), key=lambda m: m.footprint_gb)
    raise NoModelFits(
        f"no FastFlowLM model fits in {memory_budget_bytes / 2**30:.1f} GiB; the smallest "
        f"available, {smallest.tag}, needs about {smallest.footprint_gb} GiB")


# -- what to install ---------------------------------------------------------------------------
class NpuStackFacts(_Model):
    """What :func:`missing_npu_stack` needs to know besides ``flm validate``."""

    # built when the NPU stack is first looked at: a plan whose NPU route is in place never does
    model_config = ConfigDict(defer_build=True)

    cmdline: str = ""  # /proc/cmdline
    distro_id: str = ""  # os-release ID, "ubuntu"
    distro_like: tuple[str, ...] = ()  # os-release ID_LIKE
    packages: frozenset[str] = frozenset()  # installed package names
    lemonade_installed: bool = False
    kernel: tuple[int, ...] | None = None  # the running kernel's version
    kernel_release: str | None = None


def missing_npu_stack(status: FlmStatus | None, facts: NpuStackFacts) -> list[str]:
    """What to do, in order, to get FastFlowLM serving on the NPU (empty: nothing).

    ``status`` is ``None`` when ``flm`` is not installed. The driver and runtime come from
    ``checks/tables/distributions.toml`` (FastFlowLM's Linux guide, ROCm/FastFlowLM
    ``docs/docs/install_lin.md``: kernel 7.0 or newer with its in-tree amdxdna, or
    amdxdna-dkms; the runtime as the distribution packages it), the same data doctor's checks
    use.
    """
    from ojai_setup.domain.distributions import (
        family_of,
        kernel_carries_npu_driver,
        load,
        npu_driver_steps,
    )

    steps: list[str] = []
    if "amd_iommu=off" in facts.cmdline.split():
        steps.append("Remove amd_iommu=off from the kernel command line: it hides the NPU. "
                     "Then reboot.")
    fam = family_of(facts.distro_id, facts.distro_like)
    apt = fam is not None and fam.manager == "apt"
    driver = load().npu_driver
    carries = kernel_carries_npu_driver(facts.kernel)
    dkms = fam is not None and fam.dkms and not carries
    wanted = [*(fam.npu_packages if fam else ()), *([driver.dkms_package] if dkms else [])]
    driver_broken = status is None or any(
        req.ok is False for req in (status.accel_device, status.amdxdna))

    if status is not None and status.kernel.ok is False:
        steps.append(f"Boot a kernel {driver.flm_kernel_min} or newer (running "
                     f"{status.kernel.observed or 'an older one'}); FastFlowLM refuses older "
                     f"kernels, and {driver.in_tree_kernel} or newer carries the amdxdna driver "
                     "it needs.")
    elif driver_broken:
        if status is not None and dkms and all(p in facts.packages for p in wanted):
            steps.append("The NPU driver packages are installed but no usable NPU was found: "
                         "reboot so that amdxdna-dkms builds and loads for the running kernel.")
        else:
            todo = npu_driver_steps(facts.kernel, facts.kernel_release, fam,
                                    driver_installed=driver.dkms_package in facts.packages,
                                    installed=facts.packages)
            steps.extend(todo)
            if not carries or any(s.startswith("Install") for s in todo):
                steps.append("Reboot so that the amdxdna driver loads.")
    if status is not None:
        if status.firmware.ok is False:
            steps.append(f"Update the NPU firmware to 1.1 or newer (seen {status.firmware.observed}): "
                         "a newer linux-firmware package"
                         + (f" ({fam.install_command(['linux-firmware'])})"
                            if fam and fam.manager != "nix" else "")
                         + (", or the firmware shipped with amdxdna-dkms" if dkms else "") + ".")
        if status.columns.ok is False:
            steps.append(f"This NPU has {status.columns.observed} columns; FastFlowLM needs "
                         f"{MIN_COLUMNS} (an XDNA 2 NPU). No software change fixes this.")
        if status.memlock.ok is False:
            steps.append("Raise the memlock limit to unlimited: ojai's flm service sets "
                         "LimitMEMLOCK=infinity; for a shell, add '* soft memlock unlimited' and "
                         "'* hard memlock unlimited' to /etc/security/limits.conf and log in again.")
    else:
        if facts.lemonade_installed:
            steps.append("Install FastFlowLM through Lemonade: lemonade backends install flm:npu")
        elif apt:
            steps.append("Install FastFlowLM: download the fastflowlm .deb from "
                         "https://github.com/FastFlowLM/FastFlowLM/releases and run "
                         "sudo apt install ./fastflowlm*.deb")
        else:
            steps.append("Install FastFlowLM for your distribution "
                         "(https://github.com/FastFlowLM/FastFlowLM/releases).")
    return steps
