"""``ansible-test sanity`` on the collection under ansible/: no finding, nothing skipped.

The tests it runs are named in tests/support/ansible_sanity.py (``TESTS``), each with what it
checks; those it leaves out (``NOT_RUN``) say why. The virtualenvs ansible-test runs them in
are made once, into the cache outside the checkout (``.ci/run`` prepares them).
"""

from __future__ import annotations

import re

import pytest

from support.ansible_sanity import NOT_RUN, TESTS, lay_out, list_tests, run_sanity


@pytest.mark.slow
def test_collection_passes_ansible_test_sanity(tmp_path):
    result = run_sanity(tmp_path)
    assert result.rc == 0 and not result.findings, "\n".join(result.findings) or result.output
    assert list(result.said) == list(TESTS), result.output  # each ran, in order, none missing
    assert result.not_applicable == [], result.output  # each had something to check


def test_the_tests_run_and_left_out_are_all_ansible_test_has():
    """A sanity test a newer ansible-core adds fails here until it is run or left out with
    a reason."""
    assert sorted(list_tests()) == sorted([*TESTS, *NOT_RUN])
    assert not set(TESTS) & set(NOT_RUN)


def test_the_left_out_tests_have_nothing_to_check(tmp_path):
    """What NOT_RUN says of the collection is true: none of the files those tests check."""
    root = lay_out(tmp_path)
    files = [p.relative_to(root) for p in root.rglob("*") if p.is_file()]
    assert not [f for f in files if f.name == "__init__.py"]  # empty-init
    assert not [f for f in files if f.suffix in (".ps1", ".psm1", ".cs")]  # pslint
    assert not [f for f in files if f.suffix == ".sh"]  # shellcheck
    assert not (root / "changelogs").exists()  # changelog


@pytest.mark.slow
def test_sanity_reports_a_module_option_its_documentation_lacks(tmp_path):
    """The run above can fail: an option dropped from setup's DOCUMENTATION (argument_spec
    unchanged) and a license ignore no longer needed are each a finding."""
    root = lay_out(tmp_path)
    module = root / "plugins/modules/setup.py"
    text = module.read_text()
    doc = re.search(r"  api_key_file:\n(    .*\n)+", text)
    assert doc is not None
    module.write_text(text.replace(doc.group(0), "", 1))
    doctor = root / "plugins/modules/doctor.py"
    doctor.write_text(doctor.read_text().replace(
        "# SPDX-License-Identifier: MIT\n",
        "# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)\n", 1))

    result = run_sanity(tmp_path, tests=("validate-modules",), collection=root)
    assert result.rc != 0
    assert any("plugins/modules/setup.py" in f and "undocumented-parameter" in f
               and "api_key_file" in f for f in result.findings), result.output
    assert any("ignore-2.19.txt" in f and "doctor.py" in f and "missing-gplv3-license" in f
               for f in result.findings), result.output
