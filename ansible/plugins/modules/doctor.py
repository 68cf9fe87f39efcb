#!/usr/bin/python
# Copyright: ojai developers
# MIT License (see LICENSE in the collection or https://opensource.org/license/mit)
# SPDX-License-Identifier: MIT
"""``ojai doctor --json`` as Ansible facts."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: doctor
short_description: Gather ojai's doctor report (hardware facts and precondition checks) as facts
description:
  - Runs C(ojai doctor --json) on the host and returns its report as the fact C(ojai_doctor)
    (schema C(ojai.doctor/2), documented in ojai's README), so a play can assert preconditions
    before touching anything and report a fleet's state in one table.
  - A failing check does not fail the task (that is for C(ansible.builtin.assert) to decide);
    the task fails only when ojai cannot run or cannot read the machine, with ojai's message.
  - Changes nothing; runs in check mode too.
version_added: "0.1.0"
options:
  executable:
    description:
      - Path of the C(ojai) executable on the host.
      - Default, C(ojai) on C(PATH), else C(/opt/ojai/venv/bin/ojai).
    type: path
  root:
    description: The machine to read, C(/) or a directory holding a captured or test machine.
    type: path
    default: /
  profile:
    description: Force a hardware profile (C(ojai), C(strix-halo), C(generic)) instead of detecting it.
    type: str
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.facts
attributes:
  check_mode:
    support: full
    details: It changes nothing, so check mode runs it as it is.
  diff_mode:
    support: none
  facts:
    support: full
  platform:
    platforms: posix
author:
  - ojai developers (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Read every host
  ojai.ojai.doctor:

- name: Stop before touching a host whose BIOS is too old
  ansible.builtin.assert:
    that: "'bios.min' in ojai_doctor.passed"
    fail_msg: "{{ ojai_doctor.by_id['bios.min'].evidence }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to the host.
  returned: always
  type: dict
  contains:
    ojai_doctor:
      description:
        - The report of C(ojai doctor --json) (C(schema), C(profile), C(result), C(findings),
          C(facts)), plus C(by_id) (each finding by its id), C(passed) and C(failed) (ids of
          the findings that pass and fail) and C(reboot_pending).
        - C(reboot_pending) is true when ojai applied a GPU memory limit during this boot that
          is not active yet.
      type: dict
      returned: always
result:
  description: The highest severity of the findings (pass, info, warn, fail).
  type: str
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ojai.ojai.plugins.module_utils.ojai_cli import (
    COMMON_ARGS, EXIT_ERROR, EXIT_OK, OjaiFailure, clean_message, fail, parse_json, run_ojai)


def reboot_pending(report):
    """ojai recorded a TTM limit during this boot that the kernel does not have yet."""
    ttm = (report.get("facts") or {}).get("ttm") or {}
    record = ttm.get("record") or {}
    return bool(record) and record.get("boot_id") == ttm.get("boot_id") and \
        record.get("expected_pages") != ttm.get("active_pages")


def main():
    module = AnsibleModule(argument_spec=dict(COMMON_ARGS), supports_check_mode=True)
    try:
        p = module.params
        args = ["doctor", "--root", p["root"], "--json"]
        if p["profile"]:
            args += ["--profile", p["profile"]]
        rc, stdout, stderr = run_ojai(module, args)
        report = parse_json(stdout)
        if rc not in (EXIT_OK, EXIT_ERROR) or report is None or \
                not str(report.get("schema", "")).startswith("ojai.doctor/"):
            raise OjaiFailure(clean_message(stderr, stdout), rc=rc)
        findings = report.get("findings", [])
        report["by_id"] = {f["id"]: f for f in findings}
        report["passed"] = [f["id"] for f in findings if f.get("severity") == "pass"]
        report["failed"] = [f["id"] for f in findings if f.get("severity") == "fail"]
        report["reboot_pending"] = reboot_pending(report)
        module.exit_json(changed=False, result=report.get("result"),
                         ansible_facts=dict(ojai_doctor=report))
    except OjaiFailure as exc:
        fail(module, exc)
    except Exception as exc:  # no traceback in the play output: one sentence
        module.fail_json(msg=f"ojai.ojai.doctor stopped on an internal error: "
                             f"{type(exc).__name__}: {exc}")


if __name__ == "__main__":
    main()
