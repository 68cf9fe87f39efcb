"""The datacentre path: an AMD Instinct node, an SGLang route with NextN/MTP drafting, its
arguments checked against the real SGLang package's own declarations, and bench against a
stand-in that answers in SGLang's response shape.

The SGLang argument table is read from the sglang 0.5.23 wheel on PyPI (sha256-pinned, only its
declaration files unpacked: ``tests/support/sglang_pkg.py``); nothing of it is imported or run,
and no Instinct GPU runs here.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from support.machine_state import store_capture
from support.sglang_parser import parse
from support.sglang_pkg import VERSION, console_scripts, ensure_sglang_sources, package_files
from support.sglang_stand_in import sglang_stand_in
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.measure.campaign import BenchConfig, Runner, arm_run
from ojai_setup.measure.client import Endpoint
from ojai_setup.measure.command import new_result
from ojai_setup.measure.prompts import BUILTIN
from ojai_setup.core.paths import GIB
from ojai_setup.core.root import CommandResult
from ojai_setup.domain.sglang import (
    REFERENCE_VERSION,
    choose_tp,
    reference_dialect,
    render_args,
    sglang_routes,
)
from ojai_setup.formats.sglang_args import UnsupportedSglangArgs, check_args, read_table

MACHINES = Path(__file__).parents[1] / "machines"
NODE = "mi300x-8gpu-sglang"
ROUTE = "deepseek-v3-nextn"
SCRIPT = f"/opt/ojai/routes/{ROUTE}.sh"
UNIT = f"/etc/systemd/system/ojai-{ROUTE}.service"


def ojai(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def real_table():
    """SGLang 0.5.23's argument table, read from the real package's declarations."""
    return read_table(VERSION, package_files())


def launch_args(script: str) -> list[str]:
    """The arguments the launch script gives ``python -m sglang.launch_server``."""
    words = shlex.split(script.split("exec ", 1)[1].replace("\\\n", " "))
    assert words[1:3] == ["-m", "sglang.launch_server"], words[:3]
    return words[3:]


def test_the_shipped_table_is_the_real_packages(real_table):
    assert REFERENCE_VERSION == VERSION
    assert reference_dialect() == real_table
    # what the route uses is declared there, under the names SGLang declares
    for flag in ("--model-path", "--tp-size", "--speculative-algorithm", "--speculative-num-steps",
                 "--speculative-eagle-topk", "--speculative-num-draft-tokens", "--host",
                 "--port", "--api-key", "--served-model-name", "--enable-metrics"):
        assert real_table.option(flag) is not None, flag
    assert {"EAGLE", "NEXTN"} <= set(real_table.speculative_algorithms)


def test_doctor_names_the_instinct_node_and_its_preconditions():
    result = ojai("doctor", "--root", MACHINES / NODE, "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["profile"]["id"] == "instinct" and not report["profile"]["forced"]
    found = {f["id"]: f for f in report["findings"]}
    assert found["gpu.count"]["severity"] == "pass"
    assert "8 GPUs in sysfs: Instinct MI300X (gfx942), 192.0 GiB of HBM each" in found["gpu.count"]["evidence"]
    assert found["rocm.min"]["severity"] == "pass" and "needs >= 6.0" in found["rocm.min"]["evidence"]
    assert found["driver.amdgpu"]["severity"] == "pass"
    # what the captures did not show is unknown, never guessed
    for unknown in ("gpu.large-bar", "kernel.iommu", "kernel.pci-realloc", "kernel.numa-balancing"):
        assert found[unknown]["severity"] == "info" and "unknown" in found[unknown]["evidence"]
        assert found[unknown]["link"]
    assert not any(i.startswith(("ttm.", "npu.", "gpu.carve-out")) for i in found)
    human = ojai("doctor", "--root", MACHINES / NODE)
    assert "Instinct MI300X (gfx942), HBM" in human.stdout and "TTM limit" not in human.stdout


def test_instinct_preconditions_fail_with_their_fix(machine):
    root = machine(NODE)
    (root / "sys/module/amdgpu/version").unlink()
    (root / "sys/module/amdgpu").rmdir()
    (root / "opt/rocm/.info/version").write_text("5.7.1\n")
    (root / "proc").mkdir()
    (root / "proc/cmdline").write_text("BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro iommu=pt\n")
    (root / "proc/sys/kernel").mkdir(parents=True)
    (root / "proc/sys/kernel/numa_balancing").write_text("1\n")
    for card in ("card1", "card2"):  # two GPUs whose BAR shows the CPU 256 MiB
        (root / f"sys/class/drm/{card}/device/mem_info_vis_vram_total").write_text("268435456\n")
    report = json.loads(ojai("doctor", "--root", root, "--json").stdout)
    found = {f["id"]: f for f in report["findings"]}
    assert found["driver.amdgpu"]["severity"] == "fail" and "modprobe amdgpu" in found["driver.amdgpu"]["fix"]
    assert found["rocm.min"]["severity"] == "fail" and "ROCm 5.7.1; needs >= 6.0" in found["rocm.min"]["evidence"]
    assert found["gpu.large-bar"]["severity"] == "warn" and "2 of 2 GPUs" in found["gpu.large-bar"]["evidence"]
    assert found["kernel.iommu"]["severity"] == "pass"
    assert found["kernel.pci-realloc"]["severity"] == "warn"
    assert found["kernel.numa-balancing"]["severity"] == "warn"
    assert found["kernel.numa-balancing"]["evidence"] == "kernel.numa_balancing = 1; want 0"
    assert "sysctl -w kernel.numa_balancing=0" in found["kernel.numa-balancing"]["fix"]
    assert report["result"] == "fail"


def test_setup_plans_the_route_whose_arguments_the_real_table_accepts(machine, real_table):
    root = machine(NODE)
    store_capture(root, CommandResult(("systemctl", "daemon-reload"), 0, ""))
    result = ojai("setup", "--root", root, "--model", ROUTE, "--systemd", "--json")
    assert result.exit_code == 2, result.output
    plan = json.loads(result.stdout)
    steps = {s["step"]: s for s in plan["steps"]}
    assert steps["sglang"]["status"] == "change"
    assert steps["gpu-memory"]["status"] == "satisfied"
    assert "own HBM" in steps["gpu-memory"]["sentence"]  # no TTM step, and why
    for other in ("llama.cpp", "model", "routes", "lemonade", "npu"):
        assert steps[other]["status"] == "satisfied" and not steps[other]["actions"], other
    assert "Lemonade is not in this path" in steps["lemonade"]["sentence"]
    recorded = steps["sglang"]["records"]["sglang"]
    assert recorded["version"] == VERSION and "530 server options" in recorded["dialect"]
    script = ojai("setup", "--root", root, "--model", ROUTE, "--systemd", "--show", SCRIPT).stdout
    args = launch_args(script)
    check_args(ROUTE, args, real_table)  # raises on anything SGLang would not take
    flags = dict(zip(args, args[1:], strict=False))
    assert flags["--tp-size"] == "8" and flags["--speculative-algorithm"] == "EAGLE"
    assert flags["--speculative-num-steps"] == "3" and flags["--speculative-num-draft-tokens"] == "4"
    assert flags["--host"] == "127.0.0.1" and "--trust-remote-code" in args
    assert "\nexport SGLANG_USE_AITER=1\n" in script  # as SGLang's AMD instructions start it
    unit = ojai("setup", "--root", root, "--model", ROUTE, "--systemd", "--show", UNIT).stdout
    assert "User=ojai\n" in unit and "DeviceAllow=/dev/kfd rw\n" in unit
    assert "StateDirectory=ojai-sglang\n" in unit


def test_the_unit_passes_systemd_analyze(machine, tmp_path):
    root = machine(NODE)
    (root / "etc").mkdir()  # where systemd-sysusers adds the service user
    store_capture(root, CommandResult(("systemctl", "daemon-reload"), 0, ""))
    assert ojai("setup", "--root", root, "--model", ROUTE, "--systemd", "--apply", "--yes").exit_code == 0
    unit = root / UNIT.lstrip("/")
    proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                           'mount --bind "$1/opt" /opt && shift && exec "$@"', "sh", str(root),
                           "systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    assert proc.returncode == 0 and unit.name not in proc.stderr, proc.stderr
    assert (root / SCRIPT.lstrip("/")).stat().st_mode & 0o777 == 0o755
    # applied: planning again has nothing to do
    again = ojai("setup", "--root", root, "--model", ROUTE, "--systemd", "--json")
    assert again.exit_code == 0, again.output
    step = next(s for s in json.loads(again.stdout)["steps"] if s["step"] == "sglang")
    assert step["status"] == "satisfied" and "its launch script is in place" in step["sentence"]


@pytest.mark.parametrize("name", sorted(sglang_routes()))
def test_every_route_renders_what_the_real_table_takes(name, real_table):
    route = sglang_routes()[name]
    for tp in (1, 2, 4, 8):
        for api_key in (False, True):
            check_args(name, render_args(route, tp=tp, host="0.0.0.0", port=30000,
                                         api_key=api_key), real_table)


@pytest.mark.parametrize(("extra", "says"), [
    # the seed document's commands
    (["--speculative-algo", "EAGLE"], "--speculative-algo: SGLang 0.5.23 has no such flag "
     "(argparse would take it as an abbreviation of --speculative-algorithm; ojai writes flags whole)"),
    (["--max-seq-len", "32768"], "--max-seq-len: SGLang 0.5.23 has no such flag"),
    (["--speculative-decoding", "{}"], "--speculative-decoding: SGLang 0.5.23 has no such flag"),
    # the docs' short form, and flags SGLang keeps only to refuse
    (["--tp", "8"], "abbreviation of --tp-size"),
    (["--disable-cuda-graph"], "--disable-cuda-graph: SGLang 0.5.23 deprecated it: use "
     "--cuda-graph-backend-{decode,prefill}=disabled"),
    (["--enable-dp-attention"], "deprecated it: use --attn-dp-size"),
    # values and shapes
    (["--speculative-algorithm", "MTP"], "knows no speculative algorithm 'MTP'"),
    (["--kv-cache-dtype", "q4_0"], "does not take 'q4_0'"),
    (["--trust-remote-code=yes"], "takes it as a bare flag"),
    (["--port"], "needs a value after it"),
])
def test_flags_sglang_does_not_take_are_refused(extra, says, real_table):
    args = render_args(sglang_routes()[ROUTE], tp=8, host="127.0.0.1", port=8080) + extra
    with pytest.raises(UnsupportedSglangArgs) as caught:
        check_args(ROUTE, args, real_table)
    assert str(caught.value).startswith(f"route '{ROUTE}': ")
    assert says in str(caught.value)


def test_no_sgl_serve_program_and_the_route_starts_the_module():
    assert "sgl-serve" not in console_scripts() and "sglang" in console_scripts()
    script = render_args(sglang_routes()[ROUTE], tp=8, host="127.0.0.1", port=8080)
    assert "--model-path" in script and all("sgl-serve" not in a for a in script)


def test_required_flag_left_out_is_refused(real_table):
    with pytest.raises(UnsupportedSglangArgs, match="--model-path: SGLang 0.5.23 requires it"):
        check_args(ROUTE, ["--tp-size", "8"], real_table)


def _install_sglang(root: Path, edit=None) -> Path:
    """The real package's declaration files where the route runs SGLang, ``edit`` applied."""
    site = root / "opt/ojai/sglang/lib/python3.11/site-packages"
    shutil.copytree(ensure_sglang_sources() / "sglang", site / "sglang")
    if edit:
        spec = site / "sglang/srt/arg_groups/fields/spec.py"
        spec.write_text(edit(spec.read_text()))
    return site


def test_an_installed_sglang_is_read_and_a_flag_it_lacks_blocks_the_plan(machine):
    root = machine(NODE)
    _install_sglang(root)
    plan = json.loads(ojai("setup", "--root", root, "--model", ROUTE, "--json").stdout)
    step = next(s for s in plan["steps"] if s["step"] == "sglang")
    assert step["status"] == "change" and "the installed SGLang 0.5.23's arguments" in step["sentence"]
    assert not step["warnings"]
    # a release that renamed the draft top-k: the plan is blocked naming the flag, nothing written
    shutil.rmtree(root / "opt/ojai/sglang")
    _install_sglang(root, lambda t: t.replace("speculative_eagle_topk:", "speculative_topk:"))
    result = ojai("setup", "--root", root, "--model", ROUTE, "--json")
    assert result.exit_code == 1
    step = next(s for s in json.loads(result.stdout)["steps"] if s["step"] == "sglang")
    assert step["status"] == "blocked" and not step["actions"]
    assert step["sentence"] == (f"route '{ROUTE}': --speculative-eagle-topk: SGLang 0.5.23 has "
                                "no such flag")


def test_tensor_parallel_follows_the_gpus_and_their_memory():
    routes = sglang_routes()
    mi300x, mi250x_gcd = 192 * GIB, 64 * GIB
    assert choose_tp(routes["deepseek-v3-nextn"], 8, mi300x).tp == 8
    assert choose_tp(routes["qwen3-next-80b-a3b-nextn"], 8, mi300x).tp == 1  # 152 of 192 GiB
    assert choose_tp(routes["qwen3-next-80b-a3b-nextn"], 8, mi250x_gcd).tp == 4
    assert choose_tp(routes["glm-4.5-air-mtp"], 8, mi300x).tp == 2
    blocked = choose_tp(routes["deepseek-v3-nextn"], 8, mi250x_gcd)
    assert blocked.tp is None and "641 GiB" in blocked.sentence and "8 GPUs of 64 GiB" in blocked.sentence
    assert choose_tp(routes["deepseek-v3-nextn"], 4, mi300x).tp is None  # half a node
    assert choose_tp(routes["qwen3-next-80b-a3b-nextn"], 0, None).tp is None


def test_bench_reads_sglangs_accepted_length():
    seen: list = []
    with sglang_stand_in(accepted=(3, 1, 2, 0), draft_tokens=4, seen=seen) as url:
        endpoint = Endpoint(url)
        gen = endpoint.complete("Hello", n_predict=40, seed=1, temperature=0.0, ignore_eos=True)
    assert endpoint.kind == "sglang"
    request = seen[-1]
    assert request["return_spec_tokens_details"] and request["stream_options"]["include_usage"]
    assert request["max_tokens"] == 40 and request["model"] == "deepseek-v3-nextn"
    # steps accept 3, 1, 2, 0 drafts (+ the target's token): 4+2+3+1 = 10 tokens every 4 steps
    assert gen.n == 40 and len(gen.tokens) == 40 and len(gen.token_times) == 40
    assert gen.timings["spec_verify_ct"] == 16
    assert gen.timings["draft_n"] == 16 * 3 and gen.timings["draft_n_accepted"] == 24
    run = arm_run("mtp", gen)
    assert run.steps == 16 and run.mean_accepted_length == pytest.approx(2.5)
    assert run.accepted_fraction == pytest.approx(0.5)


def test_bench_runs_unchanged_against_sglang_servers():
    config = BenchConfig(prompts=BUILTIN[:1], seeds=(1,), n_predict=24, parts=("pairs", "long"),
                         long_tokens=120, long_window=40)
    with sglang_stand_in(accepted=(2,)) as mtp_url, sglang_stand_in(accepted=None) as plain_url:
        result = Runner(Endpoint(mtp_url), Endpoint(plain_url), config).run(new_result(ROUTE, config))
    pair = result.pairs[0]
    assert pair.mtp.draft_n == 8 * 3 and pair.mtp.mean_accepted_length == pytest.approx(3.0)
    assert pair.plain.draft_n is None and pair.plain.tokens == 24
    assert result.long.mtp.tokens == 120 and result.long.plain.tokens == 120
    assert re.search(r"\S", pair.mtp.text)


# -- SGLang's own parser ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sglang_parser():
    """SGLang's ``add_cli_args_from_dataclass`` over SGLang's own field declarations, run in a
    child process on the real package's files (``support/sglang_parser.py``), with the rendered
    arguments of every route at every tensor-parallel size and the seed's folklore to parse."""
    routes = sglang_routes()
    argvs = [render_args(routes[n], tp=tp, host="127.0.0.1", port=8080, api_key=True)
             for n in sorted(routes) for tp in (1, 2, 4, 8)]
    base = render_args(routes[ROUTE], tp=8, host="127.0.0.1", port=8080)
    argvs += [base + ["--max-seq-len", "32768"], base + ["--speculative-algo", "NEXTN"],
              base + ["--speculative-decoding", "{}"]]
    return parse(ensure_sglang_sources(), argvs), argvs


def test_ojais_table_is_what_sglangs_own_parser_makes(sglang_parser, real_table):
    got, _ = sglang_parser
    declared = {n: o for n, o in real_table.options.items() if o.namespace != "server_args"}
    assert set(declared) == set(got["options"]) - {"-h", "--help"}
    for flag, option in declared.items():
        if option.takes != "custom":
            assert option.takes == got["takes"][flag], flag
        if option.choices is not None:
            assert list(option.choices) == got["choices"][flag], flag
    assert sorted(n for n, o in declared.items() if o.required) == got["required"]


def test_every_rendered_route_parses_with_sglangs_own_parser(sglang_parser):
    got, argvs = sglang_parser
    routes = sglang_routes()
    for argv, result in list(zip(argvs, got["results"], strict=True))[:4 * len(routes)]:
        assert result["ok"], (argv, result)
        flags = dict(zip(argv, argv[1:], strict=False))
        values = result["values"]
        assert values["model_path"] == flags["--model-path"]
        assert values["tp_size"] == int(flags["--tp-size"])
        assert values["speculative_algorithm"] == flags["--speculative-algorithm"]
        assert values["speculative_num_steps"] == int(flags["--speculative-num-steps"])
        assert values["speculative_eagle_topk"] == int(flags["--speculative-eagle-topk"])
        assert values["speculative_num_draft_tokens"] == int(flags["--speculative-num-draft-tokens"])
        assert values["host"] == "127.0.0.1" and values["port"] == 8080
        assert values["enable_metrics"] is True


def test_the_seeds_flags_under_sglangs_own_parser(sglang_parser, real_table):
    got, argvs = sglang_parser
    max_seq_len, algo, block = got["results"][-3:]
    assert not max_seq_len["ok"] and max_seq_len["unknown"] == ["--max-seq-len", "32768"]
    assert not block["ok"] and block["unknown"] == ["--speculative-decoding", "{}"]
    # argparse takes an unambiguous prefix: SGLang reads --speculative-algo as
    # --speculative-algorithm; ojai refuses it, since the next release's flags can make it ambiguous
    assert algo["ok"] and algo["values"]["speculative_algorithm"] == "NEXTN"
    with pytest.raises(UnsupportedSglangArgs, match="abbreviation of --speculative-algorithm"):
        check_args(ROUTE, argvs[-2], real_table)


def test_verify_asks_an_sglang_route_through_its_own_api(machine):
    from support.machine_state import record_state

    from ojai_setup.core.root import Root

    root = machine(NODE)
    key = "k" * 20
    (root / "etc/ojai").mkdir(parents=True)
    (root / "etc/ojai/llama-server.env").write_text(f"LLAMA_API_KEY={key}\n")
    seen: list = []
    with sglang_stand_in(accepted=(3, 1, 2, 0), seen=seen) as url:
        port = int(url.rsplit(":", 1)[1])
        record_state(Root(root), "routes", {ROUTE: {
            "script": SCRIPT, "host": "127.0.0.1", "port": port, "server": "sglang",
            "model": ROUTE, "spec_type": "EAGLE", "draft_n_max": 3,
            "api_key_env": "/etc/ojai/llama-server.env"}})
        result = ojai("verify", "--root", root, "--json", "--tokens", "40")
    assert result.exit_code == 0, result.output
    check = json.loads(result.stdout)["routes"][0]
    assert check["healthy"] and check["error"] is None
    assert check["predicted_n"] == 40 and check["draft_n"] == 48 and check["draft_n_accepted"] == 24
    assert check["tokens_per_step"] == pytest.approx(2.5)  # SGLang's own spec_accept_length
    assert seen[-1]["max_tokens"] == 40 and seen[-1]["ignore_eos"] is True
    assert seen[-1]["_authorization"] == f"Bearer {key}"  # the route's key, from its env file


def test_a_gfx90a_node_from_rocminfo_alone_and_a_route_too_big_for_it():
    report = json.loads(ojai("doctor", "--root", MACHINES / "mi250x-rocminfo-excerpt", "--json").stdout)
    assert report["profile"]["id"] == "instinct"
    count = next(f for f in report["findings"] if f["id"] == "gpu.count")
    assert count["severity"] == "pass"
    assert count["evidence"].startswith("1 GPU in rocminfo: Instinct MI250X / MI250 (one GCD) (gfx90a), 64.0 GiB")
    assert "agents 1, 2, 3" in count["evidence"]  # the excerpt left the others out, and it says so
    rocm = next(f for f in report["findings"] if f["id"] == "rocm.min")
    assert rocm["severity"] == "info" and "need ROCm 5.0 or newer" in rocm["evidence"]
    result = ojai("setup", "--root", MACHINES / "mi250x-rocminfo-excerpt", "--model", ROUTE, "--json")
    assert result.exit_code == 1
    step = next(s for s in json.loads(result.stdout)["steps"] if s["step"] == "sglang")
    assert step["status"] == "blocked" and step["sentence"] == (
        "deepseek-v3-nextn needs about 641 GiB for its weights; 1 GPU of 64 GiB holds 51 GiB of "
        "weights (leaving room for the KV cache): choose a smaller route or a node with more GPUs")


def test_models_lists_the_sglang_routes_on_an_instinct_node():
    result = ojai("models", "--root", MACHINES / NODE, "--json")
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.stdout)["routes"]}
    assert set(rows) == set(sglang_routes())
    assert rows[ROUTE]["fits"] and rows[ROUTE]["tp"] == 8 and rows[ROUTE]["server"] == "sglang"
    small = json.loads(ojai("models", "--root", MACHINES / "mi250x-rocminfo-excerpt", "--json").stdout)
    assert not any(r["fits"] for r in small["routes"])  # one 64 GiB GCD holds none of them


def test_bench_from_the_records_of_an_sglang_route_says_to_give_the_servers(machine):
    from support.machine_state import record_state

    from ojai_setup.measure.command import BenchError, find_routes
    from ojai_setup.core.root import Root

    root = Root(machine(NODE))
    record_state(root, "routes", {ROUTE: {"script": SCRIPT, "host": "127.0.0.1", "port": 8080,
                                          "server": "sglang", "model": ROUTE, "spec_type": "EAGLE"}})
    with pytest.raises(BenchError, match="--mtp-url URL --plain-url URL"):
        find_routes(root, None)
