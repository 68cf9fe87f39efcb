"""Where a ROCm install keeps its version, in every layout a real one has, read by doctor from a
machine folder: ROCm up to 7.x writes ``/opt/rocm/.info/version`` (``/opt/rocm`` often a link to
``/opt/rocm-X.Y.Z``); ROCm 7.14 and 10.0 (TheRock's packages) install into
``/opt/rocm/core-<major.minor>/``, with the version-less ``/opt/rocm/{bin,lib}`` links only when the
``amdrocm-core`` meta-package is installed (ROCm/legacy-rocm-build#6632; the links and the
``core``/``core-<major>`` aliases: ROCm/TheRock#2728 and #4160; the library path
``/opt/rocm/core-7.14/lib``: JuliaGPU/AMDGPU.jl#986). A ROCm that is there but says no version is
unknown, and doctor never tells its owner to install ROCm 7.2."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ojai_setup.commands.doctor import diagnose
from ojai_setup.core.root import Root


def rocm_finding(root: Path) -> dict:
    report = diagnose(Root(root))
    return next(f.model_dump() for f in report.findings if f.id == "rocm.min")


def therock_layout(root: Path, version: str, *, links: bool, info: str | None = None) -> None:
    """``/opt/rocm/core-<version>/`` with its libraries; ``links``: the version-less links the
    meta-package adds (``bin``, ``lib``, ``core``) as TheRock#4160 lists them."""
    rocm = root / "opt/rocm"
    core = rocm / f"core-{version}"
    (core / "lib").mkdir(parents=True)
    (core / "bin").mkdir()
    (core / "lib/libamdhip64.so.7").write_bytes(b"")
    if info is not None:
        (core / ".info").mkdir()
        (core / ".info/version").write_text(info + "\n")
    if links:
        for name in ("bin", "lib"):
            (rocm / name).symlink_to(f"core-{version}/{name}")
        (rocm / "core").symlink_to(f"core-{version}")
        (rocm / f"core-{version.split('.')[0]}").symlink_to(f"core-{version}")


@pytest.fixture
def no_rocm(machine) -> Path:
    """The Strix Halo box (gfx1151), its ROCm 7.0.2 taken out."""
    root = machine("strix-halo-dkms")
    shutil.rmtree(root / "opt/rocm")
    return root


@pytest.mark.parametrize("links", [True, False], ids=["with the version-less links", "minimal"])
def test_rocm_10_in_its_core_directory(no_rocm: Path, links: bool):
    therock_layout(no_rocm, "10.0", links=links)
    found = rocm_finding(no_rocm)
    assert found["severity"] == "pass" and found["evidence"].startswith("ROCm 10.0;")
    report = diagnose(Root(no_rocm))
    assert report.facts.rocm_version == "10.0"
    # nor does the gfx1151 row for ROCm older than 7.2 take 10.0 for 1.0
    assert "known-bad.gfx1151-rocm-vgpr" not in [f.id for f in report.findings]


def test_rocm_7_14_with_its_own_version_file_and_the_newest_of_two(no_rocm: Path):
    therock_layout(no_rocm, "7.14", links=False, info="7.14.0-29052710811")
    assert rocm_finding(no_rocm)["evidence"].startswith("ROCm 7.14.0-29052710811;")
    therock_layout(no_rocm, "10.0", links=True)
    assert rocm_finding(no_rocm)["evidence"].startswith("ROCm 10.0;")


def test_a_versioned_directory_beside_opt_rocm(no_rocm: Path):
    info = no_rocm / "opt/rocm-7.2.0/.info"
    info.mkdir(parents=True)
    (info / "version").write_text("7.2.0-43\n")
    assert rocm_finding(no_rocm)["evidence"].startswith("ROCm 7.2.0-43;")


def test_rocm_there_without_a_version_is_unknown_and_not_told_to_install_7_2(no_rocm: Path):
    lib = no_rocm / "opt/rocm/lib"
    lib.mkdir(parents=True)
    (lib / "libamdhip64.so.7").write_bytes(b"")
    found = rocm_finding(no_rocm)
    assert found["severity"] == "info"
    assert "ROCm is installed in /opt/rocm, but its version is in none" in found["evidence"]
    assert "Install ROCm" not in (found["fix"] or "")
    assert "Check the version of the ROCm you have" in found["fix"]


def test_no_rocm_at_all_still_says_how_to_get_it(no_rocm: Path):
    found = rocm_finding(no_rocm)
    assert found["severity"] == "info" and "ROCm not installed in /opt/rocm" in found["evidence"]
    assert found["fix"].startswith("Install ROCm 7.2")
