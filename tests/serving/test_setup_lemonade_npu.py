"""The Lemonade and NPU steps through ``ojai setup`` on copies of the test machines: Lemonade's
registry files merged with the user's own entries kept, its CLI calls, malformed files left
alone; the FastFlowLM launch script where the NPU is ready, advice where it is not."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from ojai_setup.core.status import ExitStatus
from support import stand_ins
from support.fake_hub import FakeHub, fake_hub  # noqa: F401 - fake_hub is a fixture
from support.gguf_files import gemma4_assistant, gemma4_main
from support.stand_ins import LEMONADE_CONFIG as CONFIG
from support.stand_ins import give_llama_server, route_toml
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.core.root import COMMANDS_DIR, command_key
from tests.support.text import flat

REPO = "ojai-test/tiny-gemma4-GGUF"
ROUTE = "tiny-gemma"
MAIN = "gemma-4-tiny-it-Q4_K_M.gguf"
DRAFT = "mtp-gemma-4-tiny-it.gguf"
FLM_SCRIPT = "opt/ojai/routes/flm-gemma4-it-e4b.sh"

USER_MODELS = """\
{
  "my-coder": {
    "checkpoint": "someone/coder-GGUF:Q4_K_M",
    "recipe": "llamacpp",
    "size": 9.1,
    "labels": [
      "custom"
    ]
  }
}
"""
RECIPE_OPTIONS = """\
{
  "user.my-coder": {
    "ctx_size": 8192,
    "llamacpp_backend": "vulkan",
    "llamacpp_args": "-fa on"
  }
}
"""
#: the lemonade and systemctl calls the plan makes on the OJAI box with Lemonade as a service
COMMANDS = ("lemonade config set rocm_channel=nightly", "lemonade backends install llamacpp:rocm",
            "lemonade config set flm.prefer_system=true", "lemonade pull gemma4-it-e4b-FLM",
            "systemctl restart lemond")


def ojai(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


def give_lemonade(root: Path, *, user_models: str | None = USER_MODELS,
                  recipe_options: str | None = RECIPE_OPTIONS) -> None:
    """Lemonade installed from its PPA as the enabled system service, with the user's own
    model registered (see support/stand_ins.py)."""
    stand_ins.give_lemonade(root, COMMANDS, user_models=user_models, recipe_options=recipe_options)


@pytest.fixture
def catalog(tmp_path: Path, fake_hub: FakeHub) -> Path:
    """A user catalog with one tiny Gemma 4 route whose pair the stand-in hub serves."""
    main = gemma4_main(tmp_path / "published" / MAIN)
    draft = gemma4_assistant(tmp_path / "published" / DRAFT)
    fake_hub.add_path(REPO, MAIN, main)
    fake_hub.add_path(REPO, DRAFT, draft)
    path = tmp_path / "catalog.toml"
    path.write_text(route_toml(ROUTE, REPO, main, draft, context_size=4096))
    return path


def setup(root: Path, catalog: Path, *extra: object):
    return ojai("setup", "--root", root, "--llamacpp", "none", "--catalog", catalog,
                "--model", ROUTE, *extra)


def plan_json(root: Path, catalog: Path, *extra: object) -> dict:
    result = setup(root, catalog, "--json", *extra)
    data = json.loads(result.stdout)
    assert data["exit_code"] == result.exit_code
    return data


def step(plan: dict, name: str) -> dict:
    return next(s for s in plan["steps"] if s["step"] == name)


@pytest.fixture
def box(machine) -> Path:
    root = machine("ojai-fresh")
    give_llama_server(root)
    give_lemonade(root)
    return root


# -- Lemonade ---------------------------------------------------------------------------------
def test_plan_shows_diffs_that_keep_the_user_entries(box, catalog):
    plan = plan_json(box, catalog)
    assert plan["exit_code"] == 2
    s = step(plan, "lemonade")
    assert s["status"] == "change"
    assert f"register user.{ROUTE} (label mtp) with Lemonade in /var/lib/lemonade" in s["sentence"]
    assert "the system service lemond is enabled" in s["sentence"]
    writes = {a["path"]: a for a in s["actions"] if a["kind"] == "write_file"}
    assert set(writes) == {"/var/lib/lemonade/user_models.json", "/var/lib/lemonade/recipe_options.json"}
    assert all(a["needs_root"] and a["notify"] == ["lemond-restart"] for a in writes.values())
    runs = [a["argv"] for a in s["actions"] if a["kind"] == "run_command"]
    assert runs == [["lemonade", "config", "set", "rocm_channel=nightly"]]
    assert plan["handlers"]["lemonade-backends"]["argv"] == ["lemonade", "backends", "install", "llamacpp:rocm"]
    assert plan["handlers"]["lemond-restart"]["argv"] == ["systemctl", "restart", "lemond"]

    models_diff = next(d for d in plan["diffs"] if "user_models.json" in d)
    removed = [ln for ln in models_diff.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    assert removed == []  # the user's entry stays line for line; the route is added
    assert f'+  "{ROUTE}": {{' in models_diff
    assert f'+      "draft": "/var/lib/ojai/models/{REPO}/{DRAFT}"' in models_diff
    assert '+    "source": "local_path",' in models_diff
    assert "Lemonade loads ojai's files in /var/lib/ojai/models (local_path)" in s["sentence"]
    recipe_diff = next(d for d in plan["diffs"] if "recipe_options.json" in d)
    assert '"llamacpp_backend": "vulkan"' in recipe_diff and not any(
        line.startswith("-") and "vulkan" in line for line in recipe_diff.splitlines())
    assert f'+  "user.{ROUTE}": {{' in recipe_diff
    # the plan changed nothing
    assert (box / CONFIG / "user_models.json").read_text() == USER_MODELS


def test_apply_writes_the_entries_and_second_apply_changes_nothing(box, catalog):
    first = setup(box, catalog, "--apply", "--yes")
    assert first.exit_code == 0, first.output
    said = " ".join(first.stdout.split())  # the follow-ups are named by their commands
    assert "lemonade backends install llamacpp:rocm" in said and "systemctl restart lemond" in said
    models = json.loads((box / CONFIG / "user_models.json").read_text())
    assert models["my-coder"] == json.loads(USER_MODELS)["my-coder"]
    assert list(models) == ["my-coder", ROUTE]
    assert models[ROUTE]["checkpoints"] == {"main": f"/var/lib/ojai/models/{REPO}/{MAIN}",
                                            "draft": f"/var/lib/ojai/models/{REPO}/{DRAFT}"}
    assert models[ROUTE]["source"] == "local_path"
    for path in models[ROUTE]["checkpoints"].values():  # the files Lemonade is told about exist
        assert (box / path.lstrip("/")).is_file()
    assert models[ROUTE]["recipe"] == "llamacpp" and "mtp" in models[ROUTE]["labels"]
    assert models[ROUTE]["size"] > 0
    options = json.loads((box / CONFIG / "recipe_options.json").read_text())
    assert options["user.my-coder"] == json.loads(RECIPE_OPTIONS)["user.my-coder"]
    assert options[f"user.{ROUTE}"] == {"ctx_size": 4096, "llamacpp_args": "--spec-draft-n-max 2",
                                        "llamacpp_backend": "rocm"}
    written = {p: (box / CONFIG / p).read_bytes() for p in ("user_models.json", "recipe_options.json")}

    second = setup(box, catalog, "--apply", "--yes")
    assert second.exit_code == 0, second.output
    assert "nothing to do" in second.stdout
    assert f"already serves user.{ROUTE}" in flat(second.stdout)
    assert {p: (box / CONFIG / p).read_bytes() for p in written} == written


def test_one_copy_of_each_model(box, catalog, fake_hub):
    """Before, the entry named hub checkpoints (org/repo:FILE): Lemonade then downloaded its own
    copy of the pair on first load, next to ojai's. Now it names ojai's files; only when asked
    (--lemonade-downloads) does Lemonade download, and then ojai does not."""
    local = step(plan_json(box, catalog), "lemonade")
    models = json.loads(next(a for a in local["actions"] if a["path"].endswith("user_models.json"))["after"])
    assert all(c.startswith("/var/lib/ojai/models/") for c in models[ROUTE]["checkpoints"].values())

    plan = plan_json(box, catalog, "--lemonade-downloads")
    s = step(plan, "lemonade")
    assert "Lemonade downloads the pair itself into its Hugging Face cache" in s["sentence"]
    models = json.loads(next(a for a in s["actions"] if a["path"].endswith("user_models.json"))["after"])
    assert models[ROUTE]["checkpoints"] == {"main": f"{REPO}:{MAIN}", "draft": f"{REPO}:{DRAFT}"}
    assert "source" not in models[ROUTE]
    m = step(plan, "model")
    assert m["status"] == "satisfied" and m["actions"] == []
    assert "--lemonade-downloads" in m["sentence"] and "Lemonade downloads" in m["sentence"]


def test_models_under_home_are_refused_for_the_system_service(box, catalog):
    s = step(plan_json(box, catalog, "--models-dir", "/home/ada/models"), "lemonade")
    assert s["status"] == "blocked"
    assert "ProtectHome=yes" in s["sentence"] and "/home/ada/models" in s["sentence"]


def test_models_the_service_user_cannot_read_are_refused(box, catalog):
    assert setup(box, catalog, "--apply", "--yes").exit_code == 0
    draft = box / "var/lib/ojai/models" / REPO / DRAFT
    draft.chmod(0o600)
    s = step(plan_json(box, catalog), "lemonade")
    assert s["status"] == "blocked" and "chmod o+r" in s["sentence"]


def test_apply_creates_the_files_when_lemonade_has_none_yet(machine, catalog):
    root = machine("ojai-fresh")
    give_llama_server(root)
    give_lemonade(root, user_models=None, recipe_options=None)
    result = setup(root, catalog, "--apply", "--yes")
    assert result.exit_code == 0, result.output
    assert list(json.loads((root / CONFIG / "user_models.json").read_text())) == [ROUTE]
    assert "nothing to do" in setup(root, catalog, "--apply", "--yes").stdout


@pytest.mark.parametrize("name, text, line", [
    ("user_models.json", USER_MODELS.replace('"size": 9.1,', '"size": 9.1,,'), 5),
    ("recipe_options.json", RECIPE_OPTIONS.replace('"-fa on"', '"-fa on",'), 6),
])
def test_malformed_json_blocks_the_plan_and_stays_untouched(machine, catalog, name, text, line):
    root = machine("ojai-fresh")
    give_llama_server(root)
    give_lemonade(root)
    (root / CONFIG / name).write_text(text)
    plan = plan_json(root, catalog)
    s = step(plan, "lemonade")
    assert plan["exit_code"] == 1 and s["status"] == "blocked"
    assert f"/var/lib/lemonade/{name}:{line}:" in s["sentence"]
    assert "not valid JSON" in s["sentence"] and "nothing was overwritten" in s["sentence"]
    result = setup(root, catalog, "--apply", "--yes")
    # the lemonade step is left out, and the NPU's, which waits for it; the rest is applied
    assert result.exit_code == ExitStatus.INCOMPLETE, result.output
    assert " ".join(result.stdout.split()).endswith(
        "not applied: lemonade is blocked; npu waits for lemonade.")
    assert (root / CONFIG / name).read_text() == text


def test_without_lemonade_the_step_says_how_to_add_it(machine, catalog):
    root = machine("ojai-fresh")
    give_llama_server(root)
    s = step(plan_json(root, catalog), "lemonade")
    assert s["status"] == "satisfied"
    assert "Lemonade is not installed" in s["sentence"]
    assert "ppa:lemonade-team/stable" in s["sentence"]


# -- NPU --------------------------------------------------------------------------------------
def test_ready_npu_gets_an_flm_launch_script_on_port_52625(machine):
    root = machine("ojai-fresh")
    result = ojai("setup", "--root", root, "--llamacpp", "none", "--json")
    s = step(json.loads(result.stdout), "npu")
    assert s["status"] == "change" and "port 52625" in s["sentence"]
    [write] = s["actions"]
    assert write["path"] == "/" + FLM_SCRIPT and write["mode"] == 0o755

    applied = ojai("setup", "--root", root, "--llamacpp", "none", "--apply", "--yes")
    assert applied.exit_code == 0, applied.output
    script = root / FLM_SCRIPT
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    assert "/usr/bin/flm serve gemma4-it:e4b" in " ".join(text.split())
    assert "--port 52625" in text and "--host 127.0.0.1" in text
    again = ojai("setup", "--root", root, "--llamacpp", "none", "--json")
    assert step(json.loads(again.stdout), "npu")["status"] == "satisfied"


def test_ready_npu_with_lemonade_prefers_the_system_flm(box, catalog):
    s = step(plan_json(box, catalog), "npu")
    runs = [a["argv"] for a in s["actions"] if a["kind"] == "run_command"]
    # then, lemond restarted so that it lists FastFlowLM's models, the NPU model is
    # registered with Lemonade, so /api/v1/models lists it (tests/serving/test_lemonade_real_npu.py)
    assert runs == [["lemonade", "config", "set", "flm.prefer_system=true"],
                    ["systemctl", "restart", "lemond"],
                    ["lemonade", "pull", "gemma4-it-e4b-FLM"]]
    assert "register it with Lemonade as gemma4-it-e4b-FLM" in s["sentence"]
    assert setup(box, catalog, "--apply", "--yes").exit_code == 0
    assert step(plan_json(box, catalog), "npu")["status"] == "satisfied"


def test_no_npu_option_skips_the_step(machine):
    root = machine("ojai-fresh")
    s = step(json.loads(ojai("setup", "--root", root, "--llamacpp", "none", "--no-npu",
                             "--json").stdout), "npu")
    assert s["status"] == "satisfied" and "--no-npu" in s["sentence"]


def test_machine_without_fastflowlm_is_told_what_is_missing_without_blocking(machine):
    root = machine("strix-halo-dkms")
    result = ojai("setup", "--root", root, "--llamacpp", "none", "--json")
    plan = json.loads(result.stdout)
    s = step(plan, "npu")
    assert s["status"] == "satisfied" and s["actions"] == []
    assert s["sentence"].startswith("NPU path not set up: FastFlowLM is not installed. To get it: ")
    assert "fastflowlm" in s["sentence"].lower()
    assert plan["exit_code"] == 2  # the other steps still plan their changes
    assert not (root / "opt/ojai/routes").exists()


def test_systemd_option_adds_a_unit_for_the_flm_route(machine):
    root = machine("ojai-fresh")
    reload = root / COMMANDS_DIR / command_key(["systemctl", "daemon-reload"])
    reload.mkdir(parents=True)  # composed: daemon-reload prints nothing and succeeds
    (reload / "exit_code").write_text("0\n")
    args = ("setup", "--root", root, "--llamacpp", "none", "--systemd")
    s = step(json.loads(ojai(*args, "--json").stdout), "npu")
    unit = "/etc/systemd/system/ojai-flm-gemma4-it-e4b.service"
    assert [a["path"] for a in s["actions"]] == ["/" + FLM_SCRIPT, unit]
    applied = ojai(*args, "--apply", "--yes")
    assert applied.exit_code == 0, applied.output
    # the units' daemon-reload before the boot configuration's regeneration, each by its command
    assert "ran systemctl daemon-reload, update-grub" in applied.stdout
    text = (root / unit.lstrip("/")).read_text()
    assert f"ExecStart=/{FLM_SCRIPT}" in text.replace('"', "")
    assert "LimitMEMLOCK=infinity" in text
    assert "nothing to do" in ojai(*args, "--apply", "--yes").stdout


def test_systemd_with_ready_npu_and_lemonade_keeps_every_handler(box, catalog):
    """The NPU step once replaced its handlers with Lemonade's, so the plan named a handler
    ("systemd") that no step declared."""
    reload = box / COMMANDS_DIR / command_key(["systemctl", "daemon-reload"])
    reload.mkdir(parents=True)
    (reload / "exit_code").write_text("0\n")
    plan = plan_json(box, catalog, "--systemd")
    assert plan["exit_code"] == 2
    s = step(plan, "npu")
    assert set(s["handlers"]) == {"systemd"}
    assert any(a.get("notify") == ["systemd"] for a in s["actions"])
    applied = setup(box, catalog, "--systemd", "--apply", "--yes")
    assert applied.exit_code == 0, applied.output
    assert "unknown handler" not in applied.output
    # after the apply, how to start each route and check it
    assert ("start flm gemma4-it:e4b: sudo systemctl enable --now ojai-flm-gemma4-it-e4b.service; "
            f"then check it: ojai verify --root {box} --route 'flm gemma4-it:e4b'") \
        in flat(applied.stdout)
    assert (box / "etc/systemd/system/ojai-flm-gemma4-it-e4b.service").is_file()


def test_units_run_as_the_service_user_and_catalog_is_the_machines(box, catalog, monkeypatch,
                                                                tmp_path):
    """Units run as the service user whoever invoked ojai; under --root the user catalog comes
    from the machine, not this host."""
    monkeypatch.setenv("SUDO_USER", "intruder")
    home = tmp_path / "host-home"
    (home / ".config/ojai").mkdir(parents=True)
    (home / ".config/ojai/catalog.toml").write_text(catalog.read_text().replace(ROUTE, "host-only"))
    monkeypatch.setenv("HOME", str(home))
    plan = plan_json(box, catalog, "--systemd")
    units = [a for s in plan["steps"] for a in s["actions"]
             if a["kind"] == "write_file" and a["path"].endswith(".service")]
    assert units, "no unit planned"
    for unit in units:  # the services run as ojai's own system user, never an invoking one
        assert "intruder" not in unit["after"]
        assert "User=ojai\n" in unit["after"]
    # the host's own catalog is not the machine's
    other = ojai("setup", "--root", box, "--llamacpp", "none", "--model", "host-only", "--json")
    assert other.exit_code == 64 and "--model host-only: no such route" in other.stderr


def test_a_folder_set_by_hand_is_repaired_and_doctor_says_so(box, catalog):
    """Lemonade's docs say "a directory" for llamacpp.*_bin; its code runs the value."""
    (box / CONFIG / "config.json").write_text(
        '{\n  "llamacpp": {\n    "rocm_bin": "/opt/ojai/llama.cpp/current"\n  }\n}\n')
    doctor = json.loads(ojai("doctor", "--root", box, "--json").stdout)
    finding = next(f for f in doctor["findings"] if f["id"] == "lemonade.bins")
    assert finding["severity"] == "fail" and "is a folder" in finding["evidence"]
    s = step(plan_json(box, catalog), "lemonade")
    assert "named a folder" in s["sentence"]
    config = json.loads(next(a for a in s["actions"] if a["path"].endswith("config.json"))["after"])
    assert config["llamacpp"]["rocm_bin"] == "/opt/ojai/llama.cpp/current/llama-server"
    assert setup(box, catalog, "--apply", "--yes").exit_code == 0
    doctor = json.loads(ojai("doctor", "--root", box, "--json").stdout)
    finding = next(f for f in doctor["findings"] if f["id"] == "lemonade.bins")
    assert finding["severity"] == "pass", finding


def test_lemonade_runs_an_installed_vulkan_nightly_as_its_vulkan_backend(box, catalog):
    """ojai's install behind ``current`` is upstream's Vulkan release: Lemonade gets it as
    ``llamacpp.vulkan_bin`` (the executable), the route's recipe ``llamacpp_backend: vulkan``,
    and no ROCm channel."""
    folder = box / "opt/ojai/llama.cpp/b1311-stand-in"
    (folder / "ojai-install.json").write_text(json.dumps({
        "tag": "b7000", "family": "vulkan", "asset": "llama-b7000-bin-ubuntu-vulkan-x64.tar.gz",
        "url": "https://github.com/ggml-org/llama.cpp/releases/download/b7000/"
               "llama-b7000-bin-ubuntu-vulkan-x64.tar.gz", "sha256": "0" * 64,
        "files_digest": "0" * 64}))
    s = step(plan_json(box, catalog), "lemonade")
    config = json.loads(next(a for a in s["actions"] if a["path"].endswith("config.json"))["after"])
    assert config["llamacpp"]["vulkan_bin"] == "/opt/ojai/llama.cpp/current/llama-server"
    assert "rocm_bin" not in config["llamacpp"] and "rocm_channel" not in config
    options = json.loads(next(a for a in s["actions"]
                              if a["path"].endswith("recipe_options.json"))["after"])
    assert options[f"user.{ROUTE}"]["llamacpp_backend"] == "vulkan"
    assert options["user.my-coder"]["llamacpp_backend"] == "vulkan"  # the user's own, kept
