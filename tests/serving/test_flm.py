"""FastFlowLM: `flm validate` parsing (real capture and source-shaped JSON), model choice,
install advice, and the /api/tags readiness probe against a local HTTP server."""
from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from support.http_stand_in import StandInHandler, start
from support.machine_state import store_capture

from ojai_setup.commands.verify_flm import probe_tags
from ojai_setup.core.root import CommandResult, Root
from ojai_setup.domain.flm import (
    FLM_MODELS,
    NoModelFits,
    NpuStackFacts,
    choose_model,
    missing_npu_stack,
)
from ojai_setup.facts.npu import read_validate
from ojai_setup.formats.flm import parse_validate

DATA = Path(__file__).parents[1] / "data" / "flm"
GiB = 2**30


def _read(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


# -- the real capture --------------------------------------------------------------------------
def test_corpus_text_output_each_field_matches_the_file():
    """ROCm/FastFlowLM#379: Gorgon Point HX 470, Ubuntu 24.04, FLM v0.9.35."""
    text = _read("gorgon-point-hx470-issue-379.txt")
    lines = text.splitlines()
    assert lines[1] == "[Linux]  Kernel: 6.17.0-14-generic"
    status = parse_validate(text, 0)
    assert status.source == "text"
    assert status.kernel.observed == lines[1].split("Kernel: ")[1] == "6.17.0-14-generic"
    assert status.kernel.ok is True
    assert lines[2] == "[Linux]  NPU: /dev/accel/accel0 with 8 columns"
    assert status.accel_device.observed == "/dev/accel/accel0" and status.accel_device.ok is True
    assert status.columns.observed == "8" and status.columns.ok is True
    assert lines[3] == "[Linux]  NPU FW Version: 1.1.2.64"
    assert status.firmware.observed == "1.1.2.64" and status.firmware.ok is True
    assert lines[4] == "[Linux]  amdxdna version: 0.6"
    assert status.amdxdna.observed == "0.6" and status.amdxdna.ok is True
    assert lines[5] == "[Linux]  Memlock Limit: infinity"
    assert status.memlock.observed == "infinity" and status.memlock.ok is True
    assert [d.model_dump() for d in status.devices] == [
        {"device": "/dev/accel/accel0", "firmware": "1.1.2.64", "columns": 8, "busy": None}]
    assert status.errors == [] and status.failed() == []
    assert status.ready is True
    assert missing_npu_stack(status, NpuStackFacts(distro_id="ubuntu")) == []


def test_text_output_with_a_failing_exit_code_is_not_ready():
    status = parse_validate(_read("gorgon-point-hx470-issue-379.txt"), 1)
    assert status.ready is False
    assert status.failed() == []


def test_old_docs_format_without_columns_leaves_columns_unchecked():
    """The Linux guide's sample output (ROCm/FastFlowLM docs/docs/install_lin.md)."""
    status = parse_validate("[Linux]  Kernel: 7.0.0-rc1-00052-g27936bfca73d\n"
                            "[Linux]  NPU: /dev/accel/accel0\n"
                            "[Linux]  NPU FW Version: 1.1.2.64\n"
                            "[Linux]  Memlock Limit: infinity\n", 0)
    assert status.kernel.ok is True
    assert status.accel_device.ok is True
    assert status.columns.ok is None and status.columns.observed is None
    assert status.amdxdna.ok is None
    assert status.ready is False


# -- JSON ---------------------------------------------------------------------------------------
def test_json_ready():
    raw = json.loads(_read("validate-ready.json"))
    status = parse_validate(_read("validate-ready.json"), 0)
    assert status.source == "json"
    assert status.kernel.observed == raw["kernel"] and status.kernel.ok is True
    assert status.amdxdna.observed == raw["drm_version"] and status.amdxdna.ok is True
    assert status.firmware.observed == "1.1.2.64" and status.firmware.ok is True
    assert status.columns.observed == "8" and status.columns.ok is True
    assert status.memlock.observed == "infinity" and status.memlock.ok is True
    assert status.accel_device.observed == "/dev/accel/accel0"
    assert status.ready is True and status.failed() == []


def test_json_old_kernel_marks_the_skipped_checks_unchecked():
    status = parse_validate(_read("validate-old-kernel.json"), 1)
    assert status.kernel.ok is False and status.kernel.observed == "6.14.0-1014-oem"
    for name in ("accel_device", "amdxdna", "firmware", "columns", "memlock"):
        assert status.requirements()[name].ok is None, name
    assert status.failed() == ["kernel"]
    assert status.ready is False
    steps = missing_npu_stack(status, NpuStackFacts(distro_id="ubuntu",
                                                    packages=frozenset({"libxrt-npu2", "amdxdna-dkms"})))
    assert any("6.17" in s and "6.14.0-1014-oem" in s for s in steps)


def test_json_old_firmware():
    status = parse_validate(_read("validate-old-firmware.json"), 1)
    assert status.firmware.observed == "1.0.0.63"
    assert status.firmware.ok is False
    assert status.failed() == ["firmware"]
    steps = missing_npu_stack(status, NpuStackFacts(distro_id="ubuntu"))
    assert len(steps) == 1 and "firmware" in steps[0] and "1.0.0.63" in steps[0]


def test_json_no_device_and_low_memlock():
    status = parse_validate(_read("validate-no-device.json"), 1)
    assert status.accel_device.ok is False and status.accel_device.observed is None
    assert status.firmware.ok is None and status.columns.ok is None
    assert status.memlock.observed == "8388608" and status.memlock.ok is False
    steps = missing_npu_stack(status, NpuStackFacts(distro_id="arch"))
    assert any("xrt-plugin-amdxdna" in s for s in steps)
    assert any("memlock" in s for s in steps)


# -- text failures -------------------------------------------------------------------------------
def test_text_old_firmware_with_colour_codes():
    status = parse_validate(_read("validate-old-firmware.txt"), 1)
    assert status.firmware.observed == "1.0.0.63" and status.firmware.ok is False
    assert status.kernel.ok is True and status.columns.ok is True and status.amdxdna.ok is True
    assert status.errors == ["NPU firmware version on /dev/accel/accel0 is incompatible. "
                             "Please update NPU firmware!"]
    assert status.failed() == ["firmware"]


def test_text_low_memlock_few_columns_old_driver():
    status = parse_validate(_read("validate-low-memlock-few-columns.txt"), 1)
    assert status.columns.observed == "4" and status.columns.ok is False
    assert status.amdxdna.observed == "0.5" and status.amdxdna.ok is False
    assert status.memlock.observed == str(8 * 1024 * 1024) and status.memlock.ok is False
    assert status.firmware.ok is True
    assert sorted(status.failed()) == ["amdxdna", "columns", "memlock"]


def test_text_old_kernel_and_no_device():
    status = parse_validate("[ERROR]  Kernel version incompatible with this version of FLM. "
                            "Please update your kernel!\n", 1)
    assert status.kernel.ok is False and status.accel_device.ok is None
    status = parse_validate("[Linux]  Kernel: 6.17.0-14-generic\n[ERROR]  No NPU device found.\n"
                            "[Linux]  Memlock Limit: 64 MB\n", 1)
    assert status.accel_device.ok is False
    assert status.memlock.observed == str(64 * 1024 * 1024) and status.memlock.ok is False


def test_read_validate_replays_captures(tmp_path):
    root = Root(tmp_path)
    assert read_validate(root) is None  # flm not installed
    store_capture(tmp_path, CommandResult(("flm", "validate", "--json"), 0, _read("validate-ready.json")))
    status = read_validate(root)
    assert status is not None and status.source == "json" and status.ready


def test_read_validate_falls_back_to_text(tmp_path):
    store_capture(tmp_path, CommandResult(("flm", "validate", "--json"), 1, "",
                                          "unrecognised option '--json'"))
    store_capture(tmp_path, CommandResult(("flm", "validate"), 0,
                                          _read("gorgon-point-hx470-issue-379.txt")))
    status = read_validate(Root(tmp_path))
    assert status is not None and status.source == "text" and status.ready


# -- install advice -----------------------------------------------------------------------------
def test_nothing_installed_on_ubuntu():
    steps = missing_npu_stack(None, NpuStackFacts(distro_id="ubuntu", cmdline="quiet splash"))
    assert "ppa:lemonade-team/stable" in steps[0]
    assert "libxrt-npu2 amdxdna-dkms" in steps[0]
    assert steps[1].startswith("Reboot")
    assert "fastflowlm" in steps[2] and ".deb" in steps[2]


def test_lemonade_installs_flm():
    steps = missing_npu_stack(None, NpuStackFacts(
        distro_id="ubuntu", packages=frozenset({"libxrt-npu2"}), lemonade_installed=True))
    assert "sudo apt install amdxdna-dkms" in steps[0]
    assert steps[-1].endswith("lemonade backends install flm:npu")


def test_amd_iommu_off_hides_the_npu():
    status = parse_validate(_read("validate-no-device.json"), 1)
    steps = missing_npu_stack(status, NpuStackFacts(
        distro_id="ubuntu", cmdline="BOOT_IMAGE=/vmlinuz amd_iommu=off quiet",
        packages=frozenset({"libxrt-npu2", "amdxdna-dkms"})))
    assert "amd_iommu=off" in steps[0]
    assert any("reboot" in s.lower() and "amdxdna-dkms" in s for s in steps[1:])
    other = missing_npu_stack(status, NpuStackFacts(distro_id="ubuntu", cmdline="amd_iommu=on"))
    assert not any("amd_iommu=off" in s for s in other)


# -- model choice ------------------------------------------------------------------------------
ALL_TAGS = [m.tag for m in FLM_MODELS] + ["whisper-v3:turbo", "embed-gemma:300m"]


@pytest.mark.parametrize("budget_gib, expected", [
    (64, "gpt-oss:20b"),
    (14, "gpt-oss:20b"),
    (13.9, "gemma4-it:e4b"),
    (6, "qwen3:8b"),
    (4, "qwen3:4b"),
    (3, "llama3.2:3b"),
    (1.5, "llama3.2:1b"),
])
def test_choose_model_by_budget(budget_gib, expected):
    assert choose_model(ALL_TAGS, int(budget_gib * GiB)) == expected


def test_choose_model_only_from_available_tags():
    assert choose_model(["llama3.2:3b", "qwen3:4b"], 64 * GiB) == "qwen3:4b"


def test_choose_model_errors_say_why():
    with pytest.raises(NoModelFits, match="llama3.2:1b.*1.3 GiB"):
        choose_model(ALL_TAGS, GiB)
    with pytest.raises(NoModelFits, match="whisper-v3:turbo"):
        choose_model(["whisper-v3:turbo"], 64 * GiB)


def test_catalog_sizes_are_sane():
    tags = [m.tag for m in FLM_MODELS]
    assert len(tags) == len(set(tags))
    for tag in ("llama3.2:3b", "qwen3:4b", "gemma3:4b", "gemma4-it:e4b", "gpt-oss:20b"):
        assert tag in tags
    assert all(0.5 < m.footprint_gb < 32 for m in FLM_MODELS)


# -- readiness ---------------------------------------------------------------------------------
class _Tags(StandInHandler):
    body_sent = b""
    status = 200

    def do_GET(self):  # noqa: N802 - http.server API
        if self.path != "/api/tags":
            self.reply(404, b"not found")
            return
        self.reply(self.status, self.body_sent, content_type="application/json")


@pytest.fixture
def tags_server():
    servers = []

    def start_one(body: bytes, status: int = 200) -> int:
        handler = type("Handler", (_Tags,), {"body_sent": body, "status": status})
        servers.append(start(handler))
        return servers[-1].port

    yield start_one
    for served in servers:
        served.stop()


def test_probe_tags_ready(tags_server):
    body = json.dumps({"models": [
        {"name": "llama3.2:3b", "model": "llama3.2:3b",
         "details": {"family": "llama3", "parameter_size": "3B", "quantization_level": "Q4_1"}},
        {"name": "qwen3:4b", "model": "qwen3:4b", "details": {}}]}).encode()
    probe = probe_tags(port=tags_server(body))
    assert probe.ready is True
    assert probe.tags == ["llama3.2:3b", "qwen3:4b"]


def test_probe_tags_not_a_model_list(tags_server):
    probe = probe_tags(port=tags_server(b"<html>hello</html>"))
    assert probe.ready is False and "not with a model list" in probe.detail


def test_probe_tags_http_error(tags_server):
    probe = probe_tags(port=tags_server(b"{}", status=503))
    assert probe.ready is False and "503" in probe.detail


def test_probe_tags_nothing_listening(tags_server):
    port = tags_server(b"{}")
    with socket.socket() as s:  # a port that was free a moment ago
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    assert free != port
    probe = probe_tags(port=free, timeout=0.5)
    assert probe.ready is False and "not answering" in probe.detail


def test_one_truth_for_the_npu_driver_in_setup_and_doctor():
    """Setup's NPU step reads the same table as doctor (checks/tables/distributions.toml): a
    7.0 or newer kernel carries the driver, so nothing installs amdxdna-dkms there; each
    distribution installs the runtime with its own manager."""
    status = parse_validate(_read("validate-no-device.json"), 1)
    arch = missing_npu_stack(status, NpuStackFacts(distro_id="arch", kernel=(7, 1, 0),
                                                   kernel_release="7.1.0-arch1-1"))
    assert any("7.1.0-arch1-1 carries the amdxdna driver" in s for s in arch), arch
    assert any("`sudo pacman -S xrt xrt-plugin-amdxdna`" in s for s in arch)
    assert not any("dkms" in s or "ppa:" in s for s in arch)
    ubuntu = missing_npu_stack(status, NpuStackFacts(distro_id="ubuntu", kernel=(7, 0, 0)))
    assert any("sudo apt install libxrt-npu2`" in s for s in ubuntu), ubuntu
    assert not any("amdxdna-dkms" in s for s in ubuntu)
    older = missing_npu_stack(status, NpuStackFacts(distro_id="cachyos", distro_like=("arch",),
                                                    kernel=(6, 19, 8)))
    assert any(s.startswith("Boot a Linux 7.0 or newer kernel") for s in older)
    assert not any("ppa:" in s for s in older)
