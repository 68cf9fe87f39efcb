"""A machine's distribution family (its package manager and how it packages the NPU runtime) and
the NPU driver's requirement, from ``checks/tables/distributions.toml``: the one place doctor's
checks and setup's NPU step take them from."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from ojai_setup.formats.machine import version_tuple

TABLE = "distributions.toml"


class Family(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    manager: str
    ids: tuple[str, ...]
    install: str
    npu_packages: tuple[str, ...] = ()
    npu_before: str | None = None
    npu_runtime: str | None = None
    dkms: bool = False
    source: str | None = None

    def install_command(self, packages: list[str] | tuple[str, ...]) -> str:
        return self.install.replace("{packages}", " ".join(packages))


class NpuDriver(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    in_tree_kernel: str
    flm_kernel_min: str
    dkms_package: str
    source: str


class Distributions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    npu_driver: NpuDriver
    family: tuple[Family, ...]


@cache
def load(path: Path | None = None) -> Distributions:
    from ojai_setup.core.resources import read_toml
    from ojai_setup.domain.profiles import checks_dir

    path = path or checks_dir() / "tables" / TABLE
    return Distributions.model_validate(read_toml(path))


def family_of(distro_id: str, like: list[str] | tuple[str, ...] = ()) -> Family | None:
    """The family of os-release's ``ID`` (else of the first ``ID_LIKE`` entry that has one)."""
    families = load().family
    for name in (distro_id, *like):
        for fam in families:
            if name and name in fam.ids:
                return fam
    return None


def kernel_carries_npu_driver(kernel: tuple[int, ...] | None) -> bool | None:
    """Whether a kernel's in-tree amdxdna is the driver FastFlowLM needs (7.0 and newer); None
    when the kernel is not known."""
    if not kernel:
        return None
    return tuple(kernel[:2]) >= version_tuple(load().npu_driver.in_tree_kernel)


def npu_driver_steps(kernel: tuple[int, ...] | None, release: str | None,
                     fam: Family | None, *, driver_installed: bool = False,
                     installed: frozenset[str] = frozenset()) -> list[str]:
    """What to do for the NPU's driver and runtime on this kernel and family, in order: nothing
    for the driver where the running kernel carries it; amdxdna-dkms where the family packages it
    and the kernel is older; else a newer kernel. Then the family's runtime packages."""
    drv = load().npu_driver
    carries = kernel_carries_npu_driver(kernel)
    running = release or "this kernel"
    steps: list[str] = []
    packages = list(fam.npu_packages) if fam else []
    if carries:
        steps.append(f"The running kernel {running} carries the amdxdna driver (in-tree from "
                     f"Linux {drv.in_tree_kernel}): no driver to install.")
    elif fam is not None and fam.dkms:
        if not driver_installed:
            packages.append(drv.dkms_package)
    else:
        now = f"running {release}" if release else "the running one could not be read"
        steps.append(f"Boot a Linux {drv.in_tree_kernel} or newer kernel: its in-tree amdxdna "
                     f"driver loads NPU firmware 1.1 ({now}; FastFlowLM's Linux guide, "
                     f"{drv.source}).")
    packages = [p for p in packages if p not in installed]
    if fam is not None and packages:
        command = fam.install_command(packages)
        if fam.npu_before:
            command = f"{fam.npu_before} && {command}"
        what = "driver and runtime" if drv.dkms_package in packages else "runtime"
        steps.append(f"Install the NPU {what}: `{command}`.")
    elif fam is not None and fam.npu_runtime:
        steps.append(f"The NPU runtime (XRT and its amdxdna plugin): {fam.npu_runtime}.")
    elif fam is None:
        steps.append("Install XRT and its amdxdna plugin (https://github.com/amd/xdna-driver) as "
                     "your distribution packages them.")
    return steps
