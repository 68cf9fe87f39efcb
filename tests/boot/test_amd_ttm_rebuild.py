"""The plan says what AMD's amd-ttm, installed beside ojai, does to the initramfs after
``amd-ttm --set``, by its version (checks/tables/amd-ttm.toml, each row with its source), on the
modprobe route that takes amd-ttm's way. Planned on a copy of the OJAI box with the package's
metadata folder as a distribution or pip installs it."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.domain.amd_ttm import rows

OPTIONS = ("--ttm-via", "modprobe", "--llamacpp", "none", "--no-npu", "--json")


def sentence(root) -> str:
    result = CliRunner().invoke(app, ["setup", "--root", str(root), *OPTIONS])
    return next(s["sentence"] for s in json.loads(result.stdout)["steps"] if s["step"] == "gpu-memory")


@pytest.mark.parametrize("version, says", [
    ("0.2.22", "when any image under /boot (initrd.img-*, initramfs-*.img, initramfs-*) carries "
               "gpu/drm/ttm/ttm.ko (superm1/amd-debug-tools src/amd_debug/ttm.py"),
    ("0.2.19", "when the newest image (by name) of one of the /boot patterns"),
    ("0.2.11", "does not rebuild the initramfs: an initramfs that loads ttm keeps the old limit"),
    ("0.2.21", "is not known for this version"),
])
def test_the_plan_says_what_amd_ttm_rebuilds_by_its_version(machine, version, says):
    root = machine("ojai-fresh")
    assert "amd-ttm" not in sentence(root)  # not installed: nothing said
    (root / f"usr/lib/python3/dist-packages/amd_debug_tools-{version}.dist-info").mkdir(parents=True)
    said = sentence(root)
    assert f"; amd-ttm {version} is installed here; " in said and says in said, said
    assert "update-initramfs -u -k all" in said  # ojai's own rebuild is unchanged


def test_every_row_has_its_source_and_the_rows_do_not_overlap():
    from ojai_setup.formats.machine import version_tuple

    table = rows()
    assert [r.id for r in table] == ["no-rebuild", "newest-image", "any-image"]
    assert all(r.source and (r.min or r.max) for r in table)
    for a, b in zip(table, table[1:], strict=False):
        assert version_tuple(a.max) < version_tuple(b.min)
