"""Each setup step as data: a context in, the step's result out (pyinfra's operation tests).

A case is ``tests/steps/cases/<step>/<case>.json``::

    {"machine": "ojai-fresh",                 # a test machine under tests/machines/
     "settings": {"llamacpp": "none"},        # ojai setup's settings
     "files": {"/etc/default/grub.d/x.cfg": "..."},   # written into the copy first
     "give": ["llama-server", "lemonade", "hip-toolchain"],  # parts added first (support/stand_ins.py)
     "release": {"tag": "b1311", ...},        # the nightly GitHub would name (else: offline)
     "gguf": {"/var/lib/ojai/models/o/r/m.gguf": "gemma4_main"},  # tiny real GGUF files
     "lemonade_release": {"tag": "v11.7.0", ...},  # Lemonade's .deb GitHub would name (else: offline)
     "expect": {"status": "change", "sentence": "...", "actions": [["write_file", "/etc/..."]],
                "handlers": ["update-grub"]},
     "expect_text": {"/etc/systemd/system/x.service": ["Conflicts=..."]}}  # in what it writes

``gguf`` names a writer of ``support/tiny_models.py`` (``write_<name>``) for each file: real
models llama-server loads, whose metadata the memory fit reads. ``expect_text`` lists lines
each written file must hold (a line starting with ``!`` must not be there).

The context is gathered as ``ojai setup`` gathers it; then the step plans under a guard that
fails on any network, process or host-environment access. ``OJAI_WRITE_CASES=1`` fills in
``expect`` from what the step does now (review the diff before committing it).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from support.context import OFFLINE
from support.purity import pure
from support.stand_ins import give_hip_toolchain, give_lemonade, give_llama_server

from ojai_setup.core.root import Root
from ojai_setup.domain.lemonade_release import LemonadeDeb
from ojai_setup.domain.nightly import NightlyAsset
from ojai_setup.model.settings import Settings
from ojai_setup.planning.gather import Remote, gather
from ojai_setup.steps import STEP_NAMES, build_steps
from ojai_setup.steps.stacks import STACKS

CASES = Path(__file__).parent / "cases"
MACHINES = Path(__file__).resolve().parents[1] / "machines"
ALL = sorted(CASES.glob("*/*.json"))


def _outcome(result) -> dict:
    got = {"status": result.status, "sentence": result.sentence,
           "actions": [[a.kind, *a.targets()] for a in result.actions],
           "handlers": sorted(result.handlers)}
    if result.ways:  # a blocked step's ways forward
        got["ways"] = list(result.ways)
    return got


@pytest.mark.parametrize("case", ALL, ids=[f"{c.parent.name}/{c.stem}" for c in ALL])
def test_step_case(case: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    spec = json.loads(case.read_text())
    root_dir = tmp_path / "machine"
    shutil.copytree(MACHINES / spec["machine"], root_dir, symlinks=True)
    for what in spec.get("give", []):
        if what == "llama-server":
            give_llama_server(root_dir)
        elif what == "lemonade":
            give_lemonade(root_dir, ())
        elif what == "hip-toolchain":
            give_hip_toolchain(root_dir)
        else:
            raise ValueError(f"{case}: unknown stand-in {what!r}")
    for path, writer in spec.get("gguf", {}).items():
        import support.tiny_models as tiny_models

        (root_dir / path.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
        getattr(tiny_models, f"write_{writer}")(root_dir / path.lstrip("/"))
    for path, text in spec.get("files", {}).items():
        target = root_dir / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    remote = OFFLINE
    if spec.get("release"):
        asset = NightlyAsset(**spec["release"])
        remote = Remote(release=lambda tag, family: asset)
    if spec.get("lemonade_release"):
        deb = LemonadeDeb(**spec["lemonade_release"])
        remote = Remote(release=remote.release, lemonade_release=lambda tag: deb)
    ctx = gather(Root(root_dir), Settings(**spec.get("settings", {})), remote=remote)
    step = {s.name: s for s in build_steps(ctx)}[case.parent.name]
    with pure(monkeypatch):
        result = step.plan(ctx)
        got = _outcome(result)
    got["sentence"] = got["sentence"].replace(str(root_dir), "<root>")
    if os.environ.get("OJAI_WRITE_CASES"):
        spec["expect"] = got
        case.write_text(json.dumps(spec, indent=2) + "\n")
    assert got == spec["expect"]
    written = {a.path: a.after for a in result.actions if a.kind == "write_file"}
    for path, lines in spec.get("expect_text", {}).items():
        text = written[path].splitlines()
        for line in lines:
            if line.startswith("!"):
                assert line[1:] not in text, (path, line)
            else:
                assert line in text, (path, line, written[path])


def test_every_step_has_a_change_a_satisfied_and_a_blocked_case():
    seen: dict[str, set[str]] = {}
    for case in ALL:
        seen.setdefault(case.parent.name, set()).add(json.loads(case.read_text())["expect"]["status"])
    # the NPU path is optional: when it cannot be set up the step says why and is satisfied
    wanted = {name: {"change", "satisfied", "blocked"} - ({"blocked"} if name == "npu" else set())
              for name in STEP_NAMES}
    assert {n: seen.get(n, set()) >= w for n, w in wanted.items()} == {n: True for n in wanted}


def test_the_steps_are_named_in_plan_order_and_each_stack_leaves_out_only_known_steps(tmp_path):
    ctx = gather(Root(MACHINES / "ojai-fresh"), Settings(llamacpp="none"), remote=OFFLINE)
    assert tuple(s.name for s in build_steps(ctx)) == STEP_NAMES
    assert [s.name for s in STACKS] == ["sglang", "llama.cpp"]
    for stack in STACKS:
        assert stack.leaves_out and set(stack.leaves_out) <= set(STEP_NAMES), stack.name
    # each step stands down in one stack at most: none is left out everywhere
    assert not set.intersection(*(set(s.leaves_out) for s in STACKS))


def test_the_guard_catches_an_impure_step(tmp_path, monkeypatch):
    """A step that asks the host's environment or runs a process fails under the guard."""
    import subprocess

    from support.purity import Impure

    with pure(monkeypatch), pytest.raises(Impure, match="environment"):
        os.environ.get("SUDO_USER")
    with pure(monkeypatch), pytest.raises(Impure, match="process"):
        subprocess.run(["true"])
