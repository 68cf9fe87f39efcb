"""The Ansible collection under ansible/, run by real ansible-core.

The collection is built with ``ansible-galaxy collection build`` and installed with
``ansible-galaxy collection install`` once per session; every test runs real playbooks with
``ansible-playbook`` against an inventory of several hosts, each a copy of a test machine
(the modules' ``root`` option, a local connection), and reads Ansible's JSON stdout callback
(``ansible.posix.json``, see tests/support/ansible_json.py): changed, diff and failed per host.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from support.ansible_run import Run, collections, play  # noqa: F401  (collections: fixture)
from support.vm import ensure_wheelhouse

# each runs ansible-playbook (a second or more of processor time): the fast loop leaves them to CI
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PLUGINS = Path(__file__).parents[1] / "support" / "ansible_plugins"
BOOT = Path(__file__).parents[1] / "support" / "boot_machine.py"

#: inventory host -> test machine (tests/machines/<name>)
FLEET = {
    "fresh": "ojai-fresh",  # the OJAI box before setup
    "strix": "strix-halo-dkms",  # Strix Halo with amdgpu-dkms (amdttm, modprobe.d)
    "provisioned": "ojai-rebooted",  # set up and rebooted; made fully provisioned below
    "blocked": "no-amd-gpu",  # no grub tool: the gpu-memory step is blocked
}
SETTINGS = ["--llamacpp", "none"]


class Fleet:
    """Copies of the test machines, one inventory host each, and a way to run playbooks."""

    def __init__(self, base: Path, collections: str, hosts: dict[str, str]) -> None:
        self.base = base
        self.collections = collections
        self.roots: dict[str, Path] = {}
        for host, name in hosts.items():
            dest = base / "machines" / host
            shutil.copytree(REPO / "tests/machines" / name, dest, symlinks=True)
            self.roots[host] = dest
        self.runs = 0

    def plan_path(self, host: str) -> Path:
        return self.base / "plans" / f"{host}.json"

    def inventory(self, connection: str = "local", **host_vars) -> Path:
        (self.base / "plans").mkdir(exist_ok=True)
        hosts = {h: {"ojai_root": str(r), "ojai_plan_path": str(self.plan_path(h))}
                 for h, r in self.roots.items()}
        inv = {"all": {"vars": {"ansible_connection": connection,
                                "ansible_python_interpreter": sys.executable,
                                "ojai_executable": str(BIN / "ojai"), **host_vars},
                       "hosts": hosts}}
        path = self.base / "inventory.json"
        path.write_text(json.dumps(inv, indent=2))
        return path

    def play(self, playbook: str, *args: str, inventory: Path | None = None) -> "Run":
        """Run ``playbook`` (YAML) with ansible-playbook; Ansible's JSON output parsed."""
        self.runs += 1
        book = self.base / f"play{self.runs}.yml"
        book.write_text(textwrap.dedent(playbook))
        env = {"ANSIBLE_REMOTE_TEMP": str(self.base / "ansible-remote-tmp"),
               "ANSIBLE_CONNECTION_PLUGINS": str(PLUGINS / "connection")}
        return play(book, inventory or self.inventory(), self.collections, self.base, *args,
                    env=env)

    def snapshot(self) -> dict[str, bytes]:
        """Every file of every machine, to check that check mode changed none."""
        return {str(p): p.read_bytes() for r in self.roots.values() for p in sorted(r.rglob("*"))
                if p.is_file() and not p.is_symlink()}


@pytest.fixture
def fleet(tmp_path, collections):
    f = Fleet(tmp_path, collections, FLEET)
    # the provisioned box: set up once with the ojai command line (then nothing is left to do)
    done = subprocess.run([str(BIN / "ojai"), "setup", "--root", str(f.roots["provisioned"]),
                           "--apply", "--yes", *SETTINGS], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return f


SETUP_PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - name: ojai setup
      ojai.ojai.setup:
        executable: "{{ ojai_executable }}"
        root: "{{ ojai_root }}"
        plan: "{{ ojai_plan_path }}"
        llamacpp: none
"""


def diff_of(result: dict, header: str) -> dict:
    found = [d for d in result["diff"] if d.get("after_header") == header]
    assert len(found) == 1, [d.get("after_header") for d in result["diff"]]
    return found[0]


def test_check_diff_is_the_fleet_review(fleet):
    before = fleet.snapshot()
    run = fleet.play(SETUP_PLAY, "--check", "--diff")
    res = run.results("ojai setup")

    fresh = res["fresh"]
    assert fresh["changed"] is True and not fresh.get("failed")
    grub = diff_of(fresh, "/etc/default/grub")
    assert 'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"\n' in grub["before"]
    assert 'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash ttm.pages_limit=12582912"\n' in grub["after"]
    flm = diff_of(fresh, "/opt/ojai/routes/flm-gemma4-it-e4b.sh")
    assert flm["before_header"] == "/dev/null" and flm["before"] == ""
    assert "exec /usr/bin/flm serve gemma4-it:e4b" in flm["after"]
    assert fresh["reboot_required"] is True and fresh["handlers"] == ["update-grub"]
    assert [p["id"] for p in fresh["preconditions"]] == ["bios.min"]  # BIOS 1.00
    assert any(w.startswith("bios.min: ") for w in fresh["warnings"])

    strix = res["strix"]
    assert strix["changed"] is True
    assert [d["after_header"] for d in strix["diff"]] == ["/etc/default/grub",
                                                         "/etc/modprobe.d/ttm.conf"]
    modprobe = diff_of(strix, "/etc/modprobe.d/ttm.conf")
    # the owner's 120 GiB (31457280 pages) is kept, under the key of the live module (amdttm)
    assert modprobe["before"] == "options ttm pages_limit=31457280\n"
    assert modprobe["after"] == "options amdttm pages_limit=31457280\n"
    assert "amdttm.pages_limit=31457280" in diff_of(strix, "/etc/default/grub")["after"]

    provisioned = res["provisioned"]
    assert provisioned["changed"] is False and provisioned["diff"] == []
    assert all(s["status"] == "satisfied" for s in provisioned["steps"])

    blocked = res["blocked"]
    assert blocked["failed"] is True and blocked["changed"] is False
    assert blocked["msg"].startswith("ojai setup is blocked (nothing was applied): gpu-memory: "
                                     "none of the tools that regenerate grub.cfg")
    assert [b["step"] for b in blocked["blocked"]] == ["gpu-memory"] and "steps" not in blocked
    assert run.rc == 2  # a host failed
    assert {h: s["failures"] for h, s in run.stats.items()} == {
        "fresh": 0, "strix": 0, "provisioned": 0, "blocked": 1}
    assert fleet.snapshot() == before  # check mode changed no machine
    for host in ("fresh", "strix", "provisioned"):
        assert json.loads(fleet.plan_path(host).read_text())["format"] == "ojai-plan"


def test_apply_is_exactly_the_reviewed_plan(fleet):
    review = fleet.play(SETUP_PLAY, "--check", "--diff")
    reviewed = review.results("ojai setup")
    run = fleet.play(SETUP_PLAY, "--diff")
    res = run.results("ojai setup")

    fresh = res["fresh"]
    assert fresh["changed"] is True
    # in the order the apply changed them: the boot configuration last
    assert fresh["files_changed"] == ["/opt/ojai/routes/flm-gemma4-it-e4b.sh", "/etc/default/grub"]
    assert fresh["commands_ran"] == ["update-grub"]
    assert fresh["reboot_required"] is True
    assert fresh["reboot_reasons"] == ["the kernel reads the TTM limit only at boot"]
    assert fresh["diff"] == reviewed["fresh"]["diff"]  # what was shown is what was done
    grub = (fleet.roots["fresh"] / "etc/default/grub").read_text()
    assert grub == diff_of(reviewed["fresh"], "/etc/default/grub")["after"]

    strix = res["strix"]
    assert strix["changed"] is True
    assert strix["files_changed"] == ["/etc/default/grub", "/etc/modprobe.d/ttm.conf"]
    assert strix["commands_ran"] == ["update-grub", "update-initramfs -u -k 6.14.0-1014-oem"]
    assert strix["reboot_required"] is True

    assert res["provisioned"]["changed"] is False
    assert res["provisioned"]["files_changed"] == [] and res["provisioned"]["commands_ran"] == []
    assert res["blocked"]["failed"] is True and "gpu-memory" in res["blocked"]["msg"]
    assert {h: (s["changed"], s["failures"]) for h, s in run.stats.items()} == {
        "fresh": (1, 0), "strix": (1, 0), "provisioned": (0, 0), "blocked": (0, 1)}

    # a plan is applied once, as a saved Terraform plan is: the next review shows no change
    again = fleet.play(SETUP_PLAY, "--check", "--diff").results("ojai setup")
    assert {h: r["changed"] for h, r in again.items() if h != "blocked"} == {
        "fresh": False, "strix": False, "provisioned": False}
    assert fleet.play(SETUP_PLAY).results("ojai setup")["fresh"]["changed"] is False


def test_stale_plan_is_refused_on_that_host_only(fleet):
    fleet.play(SETUP_PLAY, "--check")
    grub = fleet.roots["fresh"] / "etc/default/grub"
    edited = grub.read_text().replace("GRUB_TIMEOUT=0", "GRUB_TIMEOUT=5")
    grub.write_text(edited)  # someone edits the file after the review
    run = fleet.play(SETUP_PLAY)
    res = run.results("ojai setup")
    assert res["fresh"]["failed"] is True and res["fresh"]["changed"] is False
    assert res["fresh"]["msg"].startswith("saved plan is stale: /etc/default/grub changed "
                                          "since the plan was made")
    assert grub.read_text() == edited
    assert res["strix"]["changed"] is True and not res["strix"].get("failed")


def test_plan_made_with_other_settings_is_refused(fleet):
    fleet.play(SETUP_PLAY, "--check", "--limit", "fresh")
    run = fleet.play(SETUP_PLAY.replace("llamacpp: none", "llamacpp: none\n        gpu_memory: 40"),
                     "--limit", "fresh")
    res = run.results("ojai setup")["fresh"]
    assert res["failed"] is True
    assert "gpu_memory=40 (the plan has None)" in res["msg"]
    assert "ttm.pages_limit" not in (fleet.roots["fresh"] / "etc/default/grub").read_text()


def test_cmake_defines_are_planned_compared_with_the_plan_and_checked_by_ojai(fleet):
    source = ("llamacpp: none", "llamacpp: source\n        backend: cpu\n        cmake_define:"
              "\n          - GGML_NATIVE=OFF\n          - GGML_CUDA_FA=OFF")
    check = fleet.play(SETUP_PLAY.replace(*source), "--check", "--diff", "--limit", "fresh")
    res = check.results("ojai setup")["fresh"]
    assert res["changed"] is True, res
    built = [d["prepared"] for d in res["diff"] if "build llama-server" in d.get("prepared", "")]
    assert len(built) == 1 and (" with -DGGML_CUDA_FA=OFF -DGGML_NATIVE=OFF into "
                                "/opt/ojai/llama.cpp/src-llama.cpp-cpu-d") in built[0], built
    other = fleet.play(SETUP_PLAY.replace(source[0], source[1].replace("NATIVE=OFF", "NATIVE=ON")),
                       "--limit", "fresh").results("ojai setup")["fresh"]
    assert other["failed"] is True
    assert ("cmake_define=['GGML_CUDA_FA=OFF', 'GGML_NATIVE=ON'] (the plan has "
            "['GGML_CUDA_FA=OFF', 'GGML_NATIVE=OFF'])") in other["msg"]
    assert not (fleet.roots["fresh"] / "opt/ojai/llama.cpp").exists()
    owned = fleet.play(SETUP_PLAY.replace(source[0], source[1].replace("NATIVE=OFF", "HIP=ON")),
                       "--check", "--limit", "fresh").results("ojai setup")["fresh"]
    assert owned["failed"] is True
    assert "GGML_HIP is set by ojai itself (the backend comes from --backend)" in owned["msg"]


def test_no_saved_plan_in_normal_mode_fails_with_what_to_do(fleet):
    run = fleet.play(SETUP_PLAY, "--limit", "fresh")
    res = run.results("ojai setup")["fresh"]
    assert res["failed"] is True
    assert res["msg"].startswith("no saved plan at ") and "check mode first" in res["msg"]


def test_without_a_plan_file_normal_mode_plans_and_applies_in_one_run(fleet):
    play = SETUP_PLAY.replace('        plan: "{{ ojai_plan_path }}"\n', "")
    res = fleet.play(play, "--diff", "--limit", "fresh,strix").results("ojai setup")
    assert res["fresh"]["changed"] is True and res["fresh"]["commands_ran"] == ["update-grub"]
    assert diff_of(res["strix"], "/etc/modprobe.d/ttm.conf")["after"] == \
        "options amdttm pages_limit=31457280\n"
    second = fleet.play(play, "--limit", "fresh,strix").results("ojai setup")
    assert [r["changed"] for r in second.values()] == [False, False]


ERRORS_PLAY = """
- hosts: fresh
  gather_facts: false
  tasks:
    - name: budget below the command line's minimum
      ojai.ojai.setup: {executable: "{{ ojai_executable }}", root: "{{ ojai_root }}", llamacpp: none, gpu_memory: 0}
      check_mode: true
      ignore_errors: true
    - name: port out of range
      ojai.ojai.setup: {executable: "{{ ojai_executable }}", root: "{{ ojai_root }}", llamacpp: none, port: 70000}
      check_mode: true
      ignore_errors: true
    - name: not a machine
      ojai.ojai.setup: {executable: "{{ ojai_executable }}", root: "{{ ojai_root }}/nowhere", llamacpp: none}
      check_mode: true
      ignore_errors: true
    - name: unknown llamacpp
      ojai.ojai.setup: {executable: "{{ ojai_executable }}", root: "{{ ojai_root }}", llamacpp: daily}
      check_mode: true
      ignore_errors: true
    - name: no ojai there
      ojai.ojai.setup: {executable: "{{ ojai_root }}/bin/ojai", root: "{{ ojai_root }}", llamacpp: none}
      check_mode: true
      ignore_errors: true
    - name: ojai crashes
      ojai.ojai.setup: {executable: "{{ crashing_ojai }}", root: "{{ ojai_root }}", llamacpp: none}
      check_mode: true
      ignore_errors: true
    - name: damaged plan
      ojai.ojai.setup: {executable: "{{ ojai_executable }}", root: "{{ ojai_root }}", llamacpp: none, plan: "{{ damaged_plan }}"}
      ignore_errors: true
    - name: doctor on no machine
      ojai.ojai.doctor: {executable: "{{ ojai_executable }}", root: "{{ ojai_root }}/nowhere"}
      ignore_errors: true
"""


def test_ojai_failures_are_failed_tasks_with_ojai_message_and_no_traceback(fleet, tmp_path):
    crashing = tmp_path / "crashing-ojai"
    # an ojai that dies of an unexpected exception (as a bug would make it)
    crashing.write_text(f"#!{sys.executable}\nraise RuntimeError('state.json is not a dict')\n")
    crashing.chmod(0o755)
    damaged = tmp_path / "damaged-plan.json"
    damaged.write_text('{"format": "ojai-plan", "format_version": 1, "steps": [')
    inv = fleet.inventory(crashing_ojai=str(crashing), damaged_plan=str(damaged))
    run = fleet.play(ERRORS_PLAY, inventory=inv)
    msg = {name: run.results(name)["fresh"] for name in (
        "budget below the command line's minimum", "port out of range", "not a machine",
        "unknown llamacpp", "no ojai there", "ojai crashes", "damaged plan",
        "doctor on no machine")}
    assert all(r["failed"] is True for r in msg.values())
    assert msg["budget below the command line's minimum"]["msg"] == "--gpu-memory 0: must be at least 1"
    assert msg["budget below the command line's minimum"]["rc"] == 64
    assert msg["port out of range"]["msg"] == "--port 70000: must be 1-65535"
    assert msg["port out of range"]["rc"] == 64
    assert msg["not a machine"]["msg"].endswith("/nowhere: not a directory")
    assert msg["unknown llamacpp"]["msg"].startswith("value of llamacpp must be one of: nightly, "
                                                     "source, distro, none, got: daily")
    assert msg["no ojai there"]["msg"].endswith("no such executable file on this host; install "
                                                "ojai there (the ojai.ojai.server role does) or "
                                                "correct the path")
    assert msg["ojai crashes"]["msg"] == ("ojai stopped on an internal error: RuntimeError: "
                                          "state.json is not a dict")
    assert msg["damaged plan"]["msg"].startswith(f"{damaged}: cannot read the saved plan")
    assert msg["doctor on no machine"]["msg"].endswith("/nowhere: not a directory")
    assert "Traceback" not in run.stdout + run.stderr
    assert "module_stderr" not in run.stdout


DOCTOR_PLAY = """
- hosts: all
  gather_facts: false
  tasks:
    - name: ojai doctor
      ojai.ojai.doctor:
        executable: "{{ ojai_executable }}"
        root: "{{ ojai_root }}"
    - name: an AMD box with a known profile
      ansible.builtin.assert:
        that: ojai_doctor.profile.id in ['ojai', 'strix-halo']
        fail_msg: "{{ ojai_doctor.profile.name }}"
"""


def test_doctor_facts_for_the_fleet_and_a_precondition(fleet):
    run = fleet.play(DOCTOR_PLAY, "--check")
    res = run.results("ojai doctor")
    golden = {h: json.loads((REPO / "tests/machines" / f"{FLEET[h]}.doctor.json").read_text())
              for h in ("fresh", "strix", "blocked")}
    for host, report in golden.items():
        facts = res[host]["ansible_facts"]["ojai_doctor"]
        assert res[host]["changed"] is False and not res[host].get("failed")
        assert facts["schema"] == "ojai.doctor/2"
        assert facts["profile"] == report["profile"] and facts["result"] == report["result"]
        assert [f["id"] for f in facts["findings"]] == [f["id"] for f in report["findings"]]
        assert res[host]["result"] == report["result"]
    assert "bios.min" in res["fresh"]["ansible_facts"]["ojai_doctor"]["failed"]
    assert res["provisioned"]["ansible_facts"]["ojai_doctor"]["by_id"]["ttm.active"]["severity"] \
        == "pass"
    asserted = run.results("an AMD box with a known profile")
    assert asserted["blocked"]["failed"] is True
    assert {h: bool(r.get("failed")) for h, r in asserted.items()} == {
        "fresh": False, "strix": False, "provisioned": False, "blocked": True}


ROLE_PLAY = """
- hosts: all
  gather_facts: false
  serial: 1
  roles:
    - role: ojai.ojai.server
      vars:
        ojai_llamacpp: none
"""


def test_role_installs_applies_and_reboots_one_host_at_a_time(tmp_path, collections):
    """The role over three hosts, serial 1: ojai installed from a wheel the controller
    provides into each host's own virtualenv, planned, applied, rebooted only where the apply
    needs it (the boot of the machine directory), and the limit checked active after.

    pip takes ojai's dependencies from the cached wheelhouse the test guest is made from
    (``ojai_pip_extra_args``, as for a host without an index) and skips byte-compiling them:
    three installs from PyPI with compiling took 90 of this test's 170 s, 30 now."""
    fleet = Fleet(tmp_path, collections, {h: FLEET[h] for h in ("fresh", "strix", "provisioned")})
    subprocess.run([str(BIN / "ojai"), "setup", "--root", str(fleet.roots["provisioned"]),
                    "--apply", "--yes", *SETTINGS], check=True, capture_output=True)
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w",
                    str(wheels), str(REPO)], check=True, capture_output=True)
    wheel = next(wheels.glob("ojai-*.whl"))
    inv = json.loads(fleet.inventory("machine").read_text())
    for host, hv in inv["all"]["hosts"].items():
        root = hv["ojai_root"]
        hv.update(ojai_venv=f"{tmp_path}/venvs/{host}", ojai_wheel_dir=f"{tmp_path}/wheels-on/{host}",
                  ojai_executable=f"{tmp_path}/venvs/{host}/bin/ojai",
                  ojai_reboot_command=f"{sys.executable} {BOOT} {root}",
                  ojai_boot_time_command=f"cat {root}/proc/sys/kernel/random/boot_id",
                  ojai_reboot_test_command="true")
    inv["all"]["vars"].update(ojai_wheel=str(wheel), ojai_python=sys.executable,
                              ojai_pip_extra_args=f"--no-index --find-links {ensure_wheelhouse()} "
                                                  "--no-compile")
    inv_path = tmp_path / "role-inventory.json"
    inv_path.write_text(json.dumps(inv))

    run = fleet.play(ROLE_PLAY, inventory=inv_path)
    assert run.rc == 0, run.stdout[-4000:]
    batches = [list(p["tasks"][0]["hosts"]) for p in run.data["plays"]]
    assert batches == [["fresh"], ["strix"], ["provisioned"]]  # serial: one host at a time
    installed = run.results("Install ojai into its virtualenv")
    assert all(r["changed"] for r in installed.values())
    for host in fleet.roots:
        assert (tmp_path / "venvs" / host / "bin/ojai").is_file()

    applied = run.results("Apply exactly the saved plan")
    assert applied["fresh"]["commands_ran"] == ["update-grub"]
    assert applied["strix"]["files_changed"] == ["/etc/default/grub", "/etc/modprobe.d/ttm.conf"]
    assert applied["provisioned"]["changed"] is False

    rebooted = run.results("Reboot where the apply needs it")
    assert rebooted["fresh"]["rebooted"] is True and rebooted["strix"]["rebooted"] is True
    assert rebooted["provisioned"].get("skipped") is True
    assert "ttm.pages_limit=12582912" in (fleet.roots["fresh"] / "proc/cmdline").read_text()

    checked = run.results("Check that the GPU memory limit is active")
    assert all(not r.get("failed") and not r.get("skipped") for r in checked.values())
    assert "active 12582912 pages" in checked["fresh"]["msg"]
    assert "active 31457280 pages" in checked["strix"]["msg"]

    again = fleet.play(ROLE_PLAY, inventory=inv_path)
    assert again.rc == 0
    assert {h: s["changed"] for h, s in again.stats.items()} == {
        "fresh": 0, "strix": 0, "provisioned": 0}


def ansible_doc(collections: str, module: str) -> dict:
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": collections}
    out = subprocess.run([str(BIN / "ansible-doc"), "-j", module], capture_output=True,
                         text=True, env=env, check=True).stdout
    return json.loads(out)[module]["doc"]["options"]


def test_setup_module_options_are_the_command_line_options(collections):
    """Every `ojai setup` option is a module option of the same name, default and choices."""
    import typer.main
    from typing import get_args

    from ojai_setup.cli import app
    from ojai_setup.model.settings import Settings

    command = typer.main.get_command(app).commands["setup"]
    # what a person reads (--show-new, --show PATH) and the bundled examples are no module's
    person = ("show_new", "show", "example")
    cli = {p.name: p for p in command.params
           if p.name not in ("apply", "yes", "out", "json_out", *person)}
    options = ansible_doc(collections, "ojai.ojai.setup")
    assert set(options) == set(cli) | {"executable"}
    for name, param in cli.items():
        if name in ("root", "plan"):
            continue
        assert options[name].get("default") == param.default, name
    assert options["llamacpp"]["choices"] == list(get_args(Settings.model_fields["llamacpp"].annotation))
    assert options["backend"]["choices"] == list(get_args(
        get_args(Settings.model_fields["llamacpp_backend"].annotation)[0]))
    assert set(ansible_doc(collections, "ojai.ojai.doctor")) == {"executable", "root", "profile"}
