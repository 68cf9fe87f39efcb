"""The real Lemonade (Debian unstable's ``lemond`` 2026.39.1-2) lists both of ojai's routes.

The OJAI box's NPU is ready (its ``flm validate`` capture: 8 columns, firmware 1.1.2.64,
amdxdna 0.6) and Lemonade is its system service. ``ojai setup --apply`` writes Lemonade's
registry files for the MTP route (the tiny real Gemma 4 pair from the stand-in hub, ojai's real
CPU llama-server) and plans the NPU step's Lemonade commands. Those commands are then run, in
the plan's order, against the real ``lemond`` with the real ``lemonade`` CLI, ``systemctl
restart lemond`` being a restart of that lemond; after them ``GET /api/v1/models`` lists the
MTP route and the NPU model.

What is stood in for is the NPU and FastFlowLM only (tests/support/npu_stand_in.py: the sysfs
entries and device node Lemonade probes, and an ``flm`` answering the commands Lemonade runs,
in the formats its source parses). Everything else is Lemonade's own code deciding.
"""

from __future__ import annotations

import json
from contextlib import ExitStack
from pathlib import Path

import pytest
from support import stand_ins
from support.fake_hub import fake_hub  # noqa: F401 - a fixture
from support.tiny_route import ROUTE, catalog  # noqa: F401 - catalog is a fixture
from support.lemond import Lemond, lemond, lemond_version, service_ids
from support.llama import llama_server_bin  # noqa: F401 - a fixture
from support.npu_stand_in import NAMESPACE_DEV, NpuStandIn, make_npu_stand_in
from support.sid import ensure_sid_chroot, run_in_chroot
from typer.testing import CliRunner

from ojai_setup.cli import app

pytestmark = pytest.mark.slow

NPU_MODEL = "gemma4-it-e4b-FLM"
NPU_TAG = "gemma4-it:e4b"
#: the commands the plan runs on the box (answered by captures when ojai applies)
COMMANDS = ("lemonade config set flm.prefer_system=true", f"lemonade pull {NPU_MODEL}",
            "systemctl restart lemond")


def ojai(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def versions() -> dict[str, str]:
    root = ensure_sid_chroot()
    return {"lemond --version": lemond_version(),
            "lemonade --version": run_in_chroot(root, ["lemonade", "--version"]).stdout}


@pytest.fixture(scope="module")
def flm_version() -> str:
    """The FastFlowLM version the installed Lemonade pins (``flm.npu`` in its
    ``backend_versions.json``), which the stand-in reports: Lemonade accepts that or newer."""
    text = run_in_chroot(ensure_sid_chroot(), [
        "cat", "/usr/share/lemonade-server/resources/backend_versions.json"]).stdout
    return json.loads(text)["flm"]["npu"].lstrip("v")


@pytest.fixture
def box(machine, versions, llama_server_bin: Path) -> Path:
    """The OJAI box (NPU ready) with the packaged Lemonade as its service."""
    root = machine("ojai-fresh")
    stand_ins.give_lemonade(root, COMMANDS, versions=versions)
    stand_ins.give_built_llama_server(root, llama_server_bin)
    return root


@pytest.fixture
def npu(tmp_path: Path, flm_version: str) -> NpuStandIn:
    return make_npu_stand_in(tmp_path / "npu", flm_version=flm_version, owner=service_ids())


def setup_args(root: Path, catalog: Path) -> list[object]:
    return ["setup", "--root", root, "--llamacpp", "none", "--catalog", catalog, "--model",
            ROUTE]


def planned_commands(root: Path, catalog: Path) -> list[list[str]]:
    """The commands ``ojai setup`` will run, in order, from its JSON plan."""
    plan = ojai(*setup_args(root, catalog), "--json")
    steps = json.loads(plan.stdout)["steps"]
    return [a["argv"] for s in steps for a in s["actions"] if a["kind"] == "run_command"]


def model_ids(server: Lemond, *, show_all: bool = False) -> dict[str, dict]:
    status, listed = server.request("GET", "/api/v1/models" + ("?show_all=true" if show_all
                                                                else ""))
    assert status == 200, listed
    return {m["id"]: m for m in listed["data"]}


def test_lemond_lists_the_mtp_route_and_the_npu_model_after_ojais_commands(
        box, catalog, npu, tmp_path):
    commands = planned_commands(box, catalog)
    # the NPU step: Lemonade takes the system flm, is restarted, then pulls the model
    assert commands == [["lemonade", "config", "set", "flm.prefer_system=true"],
                        ["systemctl", "restart", "lemond"],
                        ["lemonade", "pull", NPU_MODEL]], commands
    applied = ojai(*setup_args(box, catalog), "--apply", "--yes")
    assert applied.exit_code == 0, applied.output

    def start(stack: ExitStack, n: int) -> Lemond:
        return stack.enter_context(lemond(box, tmp_path / f"lemond-{n}", env=npu.env(),
                                          binds=npu.binds(), prelude=NAMESPACE_DEV))

    root = ensure_sid_chroot()
    stack = ExitStack()
    with stack:
        server = start(stack, 0)
        # before ojai's commands: the MTP route is listed; FastFlowLM is not used (Lemonade
        # takes a system flm only with flm.prefer_system), so no NPU model is offered
        before = model_ids(server, show_all=True)
        assert ROUTE in before and NPU_MODEL not in before, sorted(before)
        for n, argv in enumerate(commands, start=1):
            if argv == ["systemctl", "restart", "lemond"]:
                stack.close()
                stack = ExitStack()
                server = start(stack, n)
                # FastFlowLM's models are offered now, none downloaded yet
                offered = model_ids(server, show_all=True)
                assert NPU_MODEL in offered and NPU_MODEL not in model_ids(server)
                continue
            assert argv[0] == "lemonade", argv
            res = run_in_chroot(root, ["lemonade", "--port", str(server.port), *argv[1:]],
                                check=False, timeout=300)
            assert res.returncode == 0, f"{argv}: {res.stdout}{res.stderr}\n{server.log()[-3000:]}"
        listed = model_ids(server)
        # both of ojai's routes, as Lemonade lists them
        assert ROUTE in listed, sorted(listed)
        assert NPU_MODEL in listed, sorted(listed)
        flm = listed[NPU_MODEL]
        assert flm["recipe"] == "flm" and flm["checkpoint"] == NPU_TAG, flm
        assert flm["downloaded"] is True
        assert listed[ROUTE]["recipe"] == "llamacpp"
    # lemond asked FastFlowLM (the system flm, as ojai told it to) to pull the model
    calls = npu.calls()
    assert any(c.startswith(f"pull {NPU_TAG}") for c in calls), calls
    assert "list --json" in calls and "version --json" in calls
    assert npu.installed() == ["gemma4-it-e4b"]
    config = json.loads((box / "var/lib/lemonade/config.json").read_text())
    assert config["flm"]["prefer_system"] is True


def test_without_a_restart_the_running_lemond_cannot_pull_the_npu_model(box, catalog, npu,
                                                                        tmp_path):
    """What ojai's plan did before: ``config set flm.prefer_system=true`` and straight away
    ``lemonade pull``. The running lemond applies the setting (FastFlowLM's backend becomes
    installed) but its model list is the one it built at start, without FastFlowLM's models."""
    applied = ojai(*setup_args(box, catalog), "--apply", "--yes")
    assert applied.exit_code == 0, applied.output
    root = ensure_sid_chroot()
    with lemond(box, tmp_path / "lemond", env=npu.env(), binds=npu.binds(),
                prelude=NAMESPACE_DEV) as server:
        def cli(*args: str):
            return run_in_chroot(root, ["lemonade", "--port", str(server.port), *args],
                                 check=False, timeout=300)

        assert cli("config", "set", "flm.prefer_system=true").returncode == 0
        status, info = server.request("GET", "/api/v1/system-info")
        flm = info["recipes"]["flm"]
        assert flm["backends"]["npu"]["state"] == "installed", flm
        pulled = cli("pull", NPU_MODEL)
        assert pulled.returncode != 0
        said = pulled.stdout + pulled.stderr
        assert f"No built-in model with the name '{NPU_MODEL}' is registered" in said, said
        assert NPU_MODEL not in model_ids(server, show_all=True)
    assert not any(c.startswith("pull") for c in npu.calls())
