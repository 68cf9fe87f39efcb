#!/usr/bin/python
# Copyright: ojai developers
# MIT License (see LICENSE in the collection or https://opensource.org/license/mit)
# SPDX-License-Identifier: MIT
"""Plan and apply ojai's setup of a host: check mode is ojai's dry run, normal mode applies
exactly the plan check mode showed."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: setup
short_description: Plan (check mode) and apply (normal mode) ojai's setup of an AMD Ryzen AI box
description:
  - Runs the C(ojai) command line of the managed host and reads its C(--json) output; it never
    imports ojai, so any installed ojai whose JSON it knows will do.
  - In check mode it runs ojai's dry run (C(ojai setup --json), with C(--out) when O(plan) is
    set) and returns C(changed) and Ansible's native C(diff), the before and after of every file
    ojai would change, so C(ansible-playbook --check --diff) is the review of a whole fleet.
  - In normal mode with O(plan) it applies exactly that saved plan (C(ojai setup --apply --plan)),
    refused when the machine changed since it was made. Without O(plan) it makes a plan and
    applies exactly that plan in the same run.
  - A blocked step, a stale plan, a usage error or any other failure of ojai fails the task with
    ojai's own message.
  - The setting options have the names of the C(ojai setup) options (C(--gpu-memory) is
    O(gpu_memory)) and are validated by ojai itself, so they accept exactly what the command
    line accepts.
version_added: "0.1.0"
options:
  executable:
    description:
      - Path of the C(ojai) executable on the host.
      - Default, C(ojai) on C(PATH), else C(/opt/ojai/venv/bin/ojai) (where the
        M(ojai.ojai.server) role installs it).
    type: path
  root:
    description:
      - The machine to set up. C(/) is the host itself; a directory holding a captured or
        test machine is set up instead, and no host command runs then.
    type: path
    default: /
  plan:
    description:
      - A plan file on the host. Check mode saves the plan there (C(ojai setup --out)); normal
        mode applies exactly that plan (C(ojai setup --apply --plan)) and fails when there is
        none or when it is stale, and when the setting options of the task differ from the ones
        the plan was made with.
      - Like a saved Terraform plan, a plan is applied once; to apply again, plan again.
    type: path
  profile:
    description: Force a hardware profile (C(ojai), C(strix-halo), C(generic)) instead of detecting it.
    type: str
  gpu_memory:
    description: GPU memory budget in GiB (default, the profile's). Must leave the OS 4 GiB.
    type: int
  ttm_via:
    description:
      - How the GPU memory limit reaches the kernel. V(cmdline), the boot path's kernel command
        line; V(modprobe), C(options ttm pages_limit=) in C(/etc/modprobe.d) as amd-ttm does
        (not when ttm is built into the kernel); V(auto), the command line unless modprobe.d
        already holds the limit.
    type: str
    choices: [auto, cmdline, modprobe]
    default: auto
  llamacpp:
    description: How llama-server is put in place.
    type: str
    choices: [nightly, source, distro, none]
    default: nightly
  llamacpp_tag:
    description: Pin a nightly tag (for example C(b1311)); default, the latest release.
    type: str
  llamacpp_src:
    description: Source for O(llamacpp=source), a git URL, a directory or a C(.tar.gz).
    type: str
  llamacpp_ref:
    description: Git ref to build with O(llamacpp=source).
    type: str
  backend:
    description: The llama.cpp backend (default, C(hip) when ROCm is installed); C(vulkan) with the nightly installs upstream llama.cpp's Vulkan release.
    type: str
    choices: [hip, cpu, vulkan]
  model:
    description:
      - The catalog route to download and serve (C(ojai models) lists them), or a Hugging Face
        file (C(hf:ORG/REPO:FILE.gguf)) or a GGUF file on the machine.
      - Several are served together behind O(port), one llama-server in router mode (and
        Lemonade) selecting each by its name.
    type: list
    elements: str
  models_max:
    description: With several O(model), how many are loaded at once (default, as many as fit).
    type: int
  models_dir:
    description: Where models are stored (default C(/var/lib/ojai/models)).
    type: str
  catalog:
    description: User catalog of routes (TOML).
    type: str
  host:
    description: Address the servers ojai writes listen on.
    type: str
    default: 127.0.0.1
  port:
    description: Port of the llama-server route (the plain route listens on O(port) + 1).
    type: int
    default: 8080
  flash_attn:
    description: Flash attention of the routes; default, the catalog route's, else C(on) where the binary has the option.
    type: str
    choices: ["on", "off", auto]
  load_mode:
    description: How the routes load weights (C(none) reads them into memory); default, the catalog route's, else C(none) on GPU routes.
    type: str
    choices: [auto, none, mmap, mlock, mmap+mlock, dio]
  systemd:
    description: Also write systemd units for the routes.
    type: bool
    default: false
  npu:
    description: Set up the FastFlowLM route on the NPU when it is ready.
    type: bool
    default: true
  gpu_target:
    description: GPU target(s) of a HIP source build (for example C(gfx1150,gfx1151)); default, the GPU's own.
    type: str
  cmake_define:
    description:
      - With O(llamacpp=source), extra CMake definitions C(KEY=VALUE) passed to the configure (for example C(GGML_HIP_ROCWMMA_FATTN=ON)).
      - Another set of definitions is another build, in a folder of its own; ojai refuses the options it sets itself.
    type: list
    elements: str
  accept_slower:
    description:
      - An upgrade of llama.cpp proves the new build first (correctness gate, paired speed
        check against the current build); with this, a build that passes the gate is adopted
        even when it is slower.
    type: bool
    default: false
  lemonade:
    description:
      - Install Lemonade when it is missing.
      - C(distro), the distribution's package; C(release), the lemonade-server .deb of a GitHub release, its sha256 checked before installing.
    type: str
    choices: [none, distro, release]
    default: none
  lemonade_tag:
    description: With O(lemonade=release), the release to install (for example C(v11.7.0)); default, the latest.
    type: str
  lemonade_downloads:
    description: Lemonade downloads the route's model into its own cache instead of loading ojai's files.
    type: bool
    default: false
  api_key_file:
    description: With O(systemd), a file holding the API key llama-server asks clients for.
    type: path
  power:
    description:
      - C(performance), set the ACPI platform profile to performance, persistently, the way the host manages it (tuned, power-profiles-daemon, or a small unit).
      - C(none), leave it.
    type: str
    choices: [none, performance]
    default: none
  force_handlers:
    description:
      - When the apply fails, still run the follow-up commands (C(update-grub), C(systemctl daemon-reload))
        of the edits that finished, so that the host is consistent.
      - V(false) leaves them owed; the next apply runs them.
    type: bool
    default: true
  gate:
    description:
      - After the apply, start each llama-server route it wrote once and compare its output with its build's CPU backend
        before calling it ready; a route that does not compute what the CPU computes fails the task (RV(gates) has the figures).
      - V(false) leaves that to C(ojai verify).
    type: bool
    default: true
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Check mode is ojai's dry run; with O(plan) the plan is saved on the host for the apply.
  diff_mode:
    support: full
    details: The before and after of every file; a download or a build is one line.
  platform:
    platforms: posix
author:
  - ojai developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Review the plan of every host (run the play with --check --diff)
  ojai.ojai.setup:
    plan: /var/lib/ojai/ansible-plan.json
    gpu_memory: 48
    model: gemma4-26b-a4b
  check_mode: true

- name: Apply exactly the reviewed plan
  ojai.ojai.setup:
    plan: /var/lib/ojai/ansible-plan.json
    gpu_memory: 48
    model: gemma4-26b-a4b
  register: ojai_apply

- name: Reboot where the new GPU memory limit needs it
  ansible.builtin.reboot:
  when: ojai_apply.reboot_required
"""

RETURN = r"""
gates:
  description:
    - The correctness gate of each route the apply wrote (C(route), C(passed), the figures under C(gate), or C(not_run) and why).
    - Also when a route failed it.
  type: list
  elements: dict
  returned: normal mode, unless O(gate=false)
changed:
  description: Check mode, the plan has changes; normal mode, the apply changed something.
  type: bool
  returned: always
steps:
  description: Each step of the plan with its status (satisfied, change, blocked) and sentence.
  type: list
  elements: dict
  returned: success
blocked:
  description: The blocked steps (C(step), C(sentence)) when the plan is blocked.
  type: list
  elements: dict
  returned: failed on a blocked plan
files:
  description: Machine paths the plan writes.
  type: list
  elements: str
  returned: success
files_changed:
  description: Machine paths the apply changed.
  type: list
  elements: str
  returned: normal mode
commands_ran:
  description:
    - The follow-up commands that ran (C(update-grub), an initramfs rebuild), owed ones of an earlier failed apply included.
    - Also when the apply failed.
  type: list
  elements: str
  returned: normal mode
commands_owed:
  description: When the apply failed, the follow-up commands still owed (the next apply runs them), each as its command.
  type: list
  elements: str
  returned: failure of the apply
commands_failed:
  description: When the apply failed, the follow-up commands that ran and failed.
  type: list
  elements: str
  returned: failure of the apply
finish_command:
  description: When the apply failed, the whole C(ojai setup ... --apply) command that finishes it on the host.
  type: str
  returned: failure of the apply
undo_command:
  description: When the apply failed, the C(ojai rollback) command that undoes what it changed.
  type: str
  returned: failure of the apply
handlers:
  description: Check mode, the follow-up commands that would run if something changes.
  type: list
  elements: str
  returned: check mode
reboot_required:
  description: A reboot is needed to make what was applied (check mode, what would be applied) active.
  type: bool
  returned: success
preconditions:
  description: The failing preconditions of C(ojai doctor) the plan lists (also shown as warnings).
  type: list
  elements: dict
  returned: success
reboot_reasons:
  description: Why the reboot is needed.
  type: list
  elements: str
  returned: success
plan:
  description: The plan file saved (check mode) or applied (normal mode).
  type: str
  returned: when O(plan) is set
journal:
  description: The machine path of ojai's journal of this apply.
  type: str
  returned: normal mode, when something was applied
msg:
  description: ojai's summary, or its error message.
  type: str
  returned: always
"""

import json
import os
import shlex

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ojai.ojai.plugins.module_utils.ojai_cli import (
    COMMON_ARGS, EXIT_CHANGES, EXIT_OK, OjaiFailure, clean_message, fail, parse_json, run_ojai)

#: module option -> (ojai setup flag, name in the plan's settings)
SETTINGS = {
    "profile": ("--profile", "profile"),
    "gpu_memory": ("--gpu-memory", "gpu_memory_gib"),
    "ttm_via": ("--ttm-via", "ttm_via"),
    "llamacpp": ("--llamacpp", "llamacpp"),
    "llamacpp_tag": ("--llamacpp-tag", "llamacpp_tag"),
    "llamacpp_src": ("--llamacpp-src", "llamacpp_src"),
    "llamacpp_ref": ("--llamacpp-ref", "llamacpp_ref"),
    "backend": ("--backend", "llamacpp_backend"),
    "model": ("--model", "model"),
    "models_max": ("--models-max", "models_max"),
    "models_dir": ("--models-dir", "models_dir"),
    "catalog": ("--catalog", "user_catalog"),
    "host": ("--host", "host"),
    "port": ("--port", "port"),
    "flash_attn": ("--flash-attn", "flash_attn"),
    "load_mode": ("--load-mode", "load_mode"),
    "systemd": ("--systemd", "systemd"),
    "npu": ("--npu", "npu"),
    "gpu_target": ("--gpu-target", "gpu_target"),
    "cmake_define": ("--cmake-define", "cmake_defines"),
    "accept_slower": ("--accept-slower", "accept_slower"),
    "lemonade": ("--lemonade", "lemonade"),
    "lemonade_tag": ("--lemonade-tag", "lemonade_tag"),
    "lemonade_downloads": ("--lemonade-downloads", "lemonade_downloads"),
    "api_key_file": ("--api-key-file", "api_key_file"),
    "power": ("--power", "power"),
}

ARGS = dict(
    COMMON_ARGS,
    plan=dict(type="path"),
    gpu_memory=dict(type="int"),
    ttm_via=dict(type="str", choices=["auto", "cmdline", "modprobe"], default="auto"),
    llamacpp=dict(type="str", choices=["nightly", "source", "distro", "none"], default="nightly"),
    llamacpp_tag=dict(type="str"),
    llamacpp_src=dict(type="str"),
    llamacpp_ref=dict(type="str"),
    backend=dict(type="str", choices=["hip", "cpu", "vulkan"]),
    model=dict(type="list", elements="str"),
    models_max=dict(type="int"),
    models_dir=dict(type="str"),
    catalog=dict(type="str"),
    host=dict(type="str", default="127.0.0.1"),
    port=dict(type="int", default=8080),
    flash_attn=dict(type="str", choices=["on", "off", "auto"]),
    load_mode=dict(type="str", choices=["auto", "none", "mmap", "mlock", "mmap+mlock", "dio"]),
    systemd=dict(type="bool", default=False),
    npu=dict(type="bool", default=True),
    gpu_target=dict(type="str"),
    cmake_define=dict(type="list", elements="str"),
    accept_slower=dict(type="bool", default=False),
    lemonade=dict(type="str", choices=["none", "distro", "release"], default="none"),
    lemonade_tag=dict(type="str"),
    lemonade_downloads=dict(type="bool", default=False),
    api_key_file=dict(type="path"),
    power=dict(type="str", choices=["none", "performance"], default="none"),
    force_handlers=dict(type="bool", default=True),
    gate=dict(type="bool", default=True),
)


def setting_flags(params):
    """The ``ojai setup`` options for the task's settings."""
    flags = []
    for name, (flag, _key) in SETTINGS.items():
        value = params.get(name)
        if name == "npu":
            flags.append("--npu" if value else "--no-npu")
        elif name in ("systemd", "lemonade_downloads", "accept_slower"):
            if value:
                flags.append(flag)
        elif isinstance(value, list):  # a repeatable option
            for item in value:
                flags.extend([flag, str(item)])
        elif value is not None:
            flags.extend([flag, str(value)])
    return flags


def describe(action):
    """One line for an action that is not a text file (ojai's own wording)."""
    kind = action.get("kind")
    if kind == "install_archive":
        return (f"download {action['url']} (sha256 {action['sha256'][:12]}...) "
                f"into {action['dest']}")
    if kind == "install_package":
        return (f"download {action['url']} (sha256 {action['sha256'][:12]}...) to "
                f"{action['path']}, then apt-get install -y {action['path']}")
    if kind == "hub_download":
        return f"download {action['repo_id']}:{action['filename']} to {action['dest']}"
    if kind == "prove_build":
        return (f"prove {action['candidate']} on routes {', '.join(action['routes'])}, "
                f"then link {action['link']} -> {action['candidate']}")
    if kind == "build_from_source":
        extra = "".join(" " + a for a in action.get("cmake_args") or [])
        return (f"build llama-server ({action.get('backend')}) from {action['source']}"
                f"{' with' + extra if extra else ''} into {action['dest']}")
    if kind == "run_command":
        return "run " + shlex.join(action.get("argv", []))
    return f"{kind} {action}"


def targets(action):
    kind = action.get("kind")
    if kind in ("write_file", "symlink", "hub_download", "install_package"):
        return [action.get("path") or action.get("dest")]
    if kind in ("install_archive", "build_from_source"):
        return [action["dest"]] + ([action["link"]] if action.get("link") else [])
    return []


def plan_actions(plan):
    return [(step["step"], a) for step in plan.get("steps", []) for a in step.get("actions", [])]


def plan_diff(plan, only=None):
    """Ansible diffs of a plan: before/after of every file, a line for everything else.
    ``only``: the machine paths to keep (the files an apply changed)."""
    diffs = []
    for step, a in plan_actions(plan):
        if only is not None and not set(targets(a)) & set(only) and a.get("kind") != "run_command":
            continue
        kind = a.get("kind")
        if kind == "write_file":
            diffs.append(dict(before_header="/dev/null" if a.get("before") is None else a["path"],
                              after_header=a["path"], before=a.get("before") or "",
                              after=a["after"]))
        elif kind == "symlink":
            diffs.append(dict(before_header=a["path"], after_header=a["path"],
                              before=f"{a['path']} -> {a['before']}\n" if a.get("before") else "",
                              after=f"{a['path']} -> {a['target']}\n"))
        else:
            diffs.append(dict(prepared=f"{step}: {describe(a)}\n"))
    return diffs


def summary(plan):
    steps = [dict(step=s["step"], status=s["status"], sentence=s["sentence"])
             for s in plan.get("steps", [])]
    files = []
    for _step, a in plan_actions(plan):
        files.extend(t for t in targets(a) if t not in files)
    reasons = plan.get("reboot_reasons", [])
    return dict(steps=steps, files=files, reboot_required=bool(reasons), reboot_reasons=reasons,
                preconditions=plan.get("preconditions", []),
                handlers=[shlex.join(h["argv"]) for h in plan.get("handlers", {}).values()])


def blocked_steps(plan):
    return [dict(step=s["step"], sentence=s["sentence"]) for s in plan.get("steps", [])
            if s.get("status") == "blocked"]


def blocked_message(plan):
    return "ojai setup is blocked (nothing was applied): " + "; ".join(
        f"{s['step']}: {s['sentence']}" for s in blocked_steps(plan))


def make_plan(module, out):
    """``ojai setup --json --out OUT``: the plan as data (exit 0 or 2), or OjaiFailure."""
    p = module.params
    args = ["setup", "--root", p["root"], "--json", "--out", out] + setting_flags(p)
    rc, stdout, stderr = run_ojai(module, args)
    plan = parse_json(stdout)
    if plan is None or plan.get("format") != "ojai-plan":
        raise OjaiFailure(clean_message(stderr, stdout), rc=rc)
    if rc not in (EXIT_OK, EXIT_CHANGES):
        raise OjaiFailure(blocked_message(plan) if blocked_steps(plan)
                          else clean_message(stderr, stdout), rc=rc, blocked=blocked_steps(plan))
    return rc, plan


def load_saved_plan(module, path):
    if not os.path.exists(path):
        raise OjaiFailure(f"no saved plan at {path}: run this task in check mode first "
                          f"(ansible-playbook --check --diff) to make and review it")
    try:
        with open(path, encoding="utf-8") as f:
            plan = json.load(f)
    except (OSError, ValueError) as exc:
        raise OjaiFailure(f"{path}: cannot read the saved plan ({exc}); make it again in "
                          f"check mode") from None
    if not isinstance(plan, dict) or plan.get("format") != "ojai-plan":
        raise OjaiFailure(f"{path}: not an ojai plan; make it again in check mode")
    settings = plan.get("settings") or {}
    differ = []
    for name, (_flag, key) in SETTINGS.items():
        value = module.params.get(name)
        if name == "model" and value is not None:  # the first, and the others in order
            value = value[0] if len(value) == 1 else value
            if isinstance(value, list) and key in settings:
                settings = {**settings, key: [settings[key], *settings.get("extra_models", [])]}
        elif isinstance(value, list):  # the plan has the definitions sorted by name
            value = sorted(value, key=lambda d: d.partition("=")[0])
        if value is not None and key in settings and settings[key] != value:
            differ.append(f"{name}={value!r} (the plan has {settings[key]!r})")
    if differ:
        raise OjaiFailure(f"the saved plan {path} was made with other settings than this task "
                          f"asks for: {', '.join(differ)}; run the task in check mode again")
    return plan


def apply_plan(module, path):
    """``ojai setup --apply --plan PATH --json``: the apply report, or OjaiFailure."""
    args = ["setup", "--root", module.params["root"], "--apply", "--plan", path, "--json"]
    if not module.params["force_handlers"]:
        args.append("--no-force-handlers")
    if not module.params["gate"]:
        args.append("--no-gate")
    rc, stdout, stderr = run_ojai(module, args)
    report = parse_json(stdout)
    if report is not None and report.get("schema") != "ojai.apply/1":
        report = None
    if rc != EXIT_OK or report is None:
        extra = {}
        if report is not None:  # what the failed apply did, owes, and the commands to go on
            extra = dict(changed=report.get("changed", False),
                         files_changed=report.get("files_changed", []),
                         commands_ran=commands(report.get("handlers", [])),
                         commands_owed=commands(report.get("owed", [])),
                         commands_failed=[f.get("command") for f in
                                          report.get("follow_ups_failed", [])],
                         finish_command=report.get("finish_command"),
                         undo_command=report.get("undo_command"),
                         journal=report.get("journal"), gates=report.get("gates"))
        raise OjaiFailure(clean_message(stderr, stdout), rc=rc, **extra)
    return report


def commands(handlers):
    """The commands of the report's ``handlers`` or ``owed`` (by command, else by name)."""
    return [h.get("command") or h.get("name") for h in handlers]


def warn_preconditions(module, plan):
    """doctor's failing preconditions, which the plan lists first, as Ansible warnings."""
    for found in plan.get("preconditions", []):
        if found.get("severity") == "fail":
            module.warn(f"{found.get('id')}: {found.get('evidence')}. Fix: {found.get('fix')}")


def main():
    module = AnsibleModule(argument_spec=ARGS, supports_check_mode=True)
    result = dict(changed=False)
    try:
        p = module.params
        if module.check_mode:
            out = p["plan"] or os.path.join(module.tmpdir, "plan.json")
            rc, plan = make_plan(module, out)
            warn_preconditions(module, plan)
            result.update(summary(plan), changed=rc == EXIT_CHANGES,
                          msg="changes pending" if rc == EXIT_CHANGES else "nothing to do",
                          ojai_version=plan.get("ojai_version"))
            if p["plan"]:
                result["plan"] = p["plan"]
            if module._diff:
                result["diff"] = plan_diff(plan)
            module.exit_json(**result)

        if p["plan"]:
            path = p["plan"]
            plan = load_saved_plan(module, path)
            result["plan"] = path
        else:
            path = os.path.join(module.tmpdir, "plan.json")
            _rc, plan = make_plan(module, path)
        if blocked_steps(plan):
            raise OjaiFailure(blocked_message(plan), blocked=blocked_steps(plan))
        result.update(summary(plan))
        report = apply_plan(module, path)
        files_changed = report.get("files_changed", [])
        result.update(
            changed=bool(report.get("changed")),
            msg=report.get("message", ""),
            files_changed=files_changed,
            commands_ran=commands(report.get("handlers", [])),
            reboot_required=bool(report.get("reboot_required")),
            reboot_reasons=report.get("reboot_reasons", []),
            journal=report.get("journal"),
            actions=report.get("actions", []),
            ojai_version=report.get("ojai_version"),
            gates=report.get("gates"),
        )
        result.pop("handlers", None)
        if module._diff:
            result["diff"] = plan_diff(plan, only=files_changed) if result["changed"] else []
        module.exit_json(**result)
    except OjaiFailure as exc:
        if "commands_ran" in exc.extra:  # an apply ran: what it ran, not what the plan listed
            result.pop("handlers", None)
        fail(module, exc, **result)
    except Exception as exc:  # no traceback in the play output: one sentence
        module.fail_json(msg=f"ojai.ojai.setup stopped on an internal error: "
                             f"{type(exc).__name__}: {exc}", **result)


if __name__ == "__main__":
    main()
