"""Plans: step results, exit codes, diffs, fingerprints, saving and staleness."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pydantic import BaseModel
from pydantic import ValidationError as ModelError
from support.context import ToyContext as PlanContext

import ojai_setup.planning.plan as plan_module
from ojai_setup.core.root import Root
from ojai_setup.core.status import ExitStatus
from ojai_setup.model.actions import InstallArchive, RunCommand, WriteFile
from ojai_setup.planning.plan import (
    Plan,
    PlanFileError,
    check_fresh,
    make_plan,
    path_digest,
    unified_diff,
)
from ojai_setup.planning.result import StepResult

GRUB = "/etc/default/grub"


class Gpu(BaseModel):
    gfx: str = "gfx1150"
    gtt_total: int = 16 * 2**30


class Facts(BaseModel):
    kernel: str = "6.17.0-19-generic"
    gpu: Gpu = Gpu()


class Settings(BaseModel):
    pages: int = 12582912


class Fixed:
    """A step that returns a result given up front."""

    def __init__(self, result: StepResult) -> None:
        self.name = result.step
        self.result = result

    def plan(self, ctx: PlanContext) -> StepResult:
        return self.result


class ReadsGrub:
    name = "grub"

    def plan(self, ctx: PlanContext) -> StepResult:
        text = ctx.root.read_text(GRUB)
        return StepResult.satisfied(self.name, f"{GRUB} has {len(text.splitlines())} lines")


def _root(tmp_path: Path) -> Root:
    base = tmp_path / "machine"
    (base / "etc/default").mkdir(parents=True)
    (base / "etc/default/grub").write_text('GRUB_CMDLINE_LINUX_DEFAULT="quiet"\n')
    capture = base / ".ojai/commands/update-grub"  # the follow-up the plans here name
    capture.mkdir(parents=True)
    (capture / "stdout").write_text("")
    return Root(base)


def _ctx(root: Root, facts: Facts | None = None) -> PlanContext:
    return PlanContext(root, facts or Facts(), Settings())


def _write(path: str, before: str | None, after: str, **kw: object) -> WriteFile:
    return WriteFile(path=path, before=before, after=after, **kw)


def test_exit_codes_follow_terraform():
    ok = StepResult.satisfied("a", "nothing to do")
    change = StepResult.change("b", "write", [_write("/etc/x", None, "x\n")])
    blocked = StepResult.blocked("c", "kernel too old; install the HWE kernel")
    root = Root("/nonexistent-ojai-root")

    def code(*results: StepResult) -> ExitStatus:
        return make_plan(_ctx(root), [Fixed(r) for r in results]).exit_code

    assert code() == ExitStatus.OK == 0
    assert code(ok) == 0
    assert code(ok, change) == ExitStatus.CHANGES == 2
    assert code(ok, change, blocked) == ExitStatus.FAILED == 1


def test_step_results_must_be_consistent():
    with pytest.raises(ModelError, match="status 'change' needs at least one action"):
        StepResult(step="a", status="change", sentence="do it")
    with pytest.raises(ModelError, match="status 'satisfied' carries no actions"):
        StepResult(step="a", status="satisfied", sentence="fine",
                   actions=(_write("/etc/x", None, "x"),))
    with pytest.raises(ModelError, match="a result needs a sentence"):
        StepResult.satisfied("a", " ")
    with pytest.raises(ModelError, match="reads are machine paths"):
        StepResult.satisfied("a", "fine", reads=("etc/x",))


def test_a_step_must_answer_under_its_own_name(tmp_path):
    with pytest.raises(ValueError, match="step 'x' returned a result named 'y'"):
        step = Fixed(StepResult.satisfied("y", "fine"))
        step.name = "x"
        make_plan(_ctx(_root(tmp_path)), [step])


def test_unified_diffs_are_labelled_with_machine_paths():
    assert unified_diff("a\nb\n", "a\nc\n", GRUB) == (
        f"--- {GRUB}\n+++ {GRUB}\n@@ -1,2 +1,2 @@\n a\n-b\n+c\n")
    assert unified_diff(None, "x = 1\n", "/etc/ojai/new.conf") == (
        "--- /dev/null\n+++ /etc/ojai/new.conf\n@@ -0,0 +1 @@\n+x = 1\n")
    assert unified_diff("a", "a\n", "/f") == (
        "--- /f\n+++ /f\n@@ -1 +1 @@\n-a\n\\ No newline at end of file\n+a\n")


def test_plan_diffs_and_reboot_reasons(tmp_path):
    root = _root(tmp_path)
    update = RunCommand(argv=("update-grub",))
    steps = [
        Fixed(StepResult.change("grub", "edit grub", [
            _write(GRUB, "a\n", "b\n", needs_reboot="the kernel command line changed",
                   notify=("update-grub",))], handlers={"update-grub": update})),
        Fixed(StepResult.change("modprobe", "add modprobe option", [
            _write("/etc/modprobe.d/ttm.conf", None, "options ttm pages_limit=1\n",
                   needs_reboot="the kernel command line changed")],
            reboot=("the initramfs must be rebuilt for the next boot",))),
        Fixed(StepResult.satisfied("ok", "fine")),
    ]
    plan = make_plan(_ctx(root), steps)
    diffs = plan.unified_diffs()
    assert len(diffs) == 2
    assert diffs[0].startswith(f"--- {GRUB}\n+++ {GRUB}\n")
    assert diffs[1].startswith("--- /dev/null\n+++ /etc/modprobe.d/ttm.conf\n")
    assert plan.reboot_reasons() == ["the kernel command line changed",
                                     "the initramfs must be rebuilt for the next boot"]
    assert plan.handlers == {"update-grub": update}


def test_handlers_must_exist_and_agree(tmp_path):
    root = _root(tmp_path)
    with pytest.raises(ModelError, match="notifies unknown handler 'update-grub'"):
        make_plan(_ctx(root), [Fixed(StepResult.change("g", "edit", [
            _write(GRUB, None, "x", notify=("update-grub",))]))])
    a = Fixed(StepResult.change("a", "edit", [_write("/a", None, "x")],
                                handlers={"regen": RunCommand(argv=("update-grub",))}))
    b = Fixed(StepResult.change("b", "edit", [_write("/b", None, "x")],
                                handlers={"regen": RunCommand(argv=("dracut", "-f"))}))
    with pytest.raises(ValueError, match="handler 'regen' is declared twice"):
        make_plan(_ctx(root), [a, b])


def test_fingerprint_covers_reads_targets_facts_and_version(tmp_path):
    root = _root(tmp_path)
    (root.resolve("/opt/ojai")).mkdir(parents=True)
    os.symlink("/opt/ojai/b1", root.resolve("/opt/ojai/current"))
    steps = [
        ReadsGrub(),
        Fixed(StepResult.change("llama", "install", [InstallArchive(
            url="https://example.invalid/x.zip", sha256="0" * 64, dest="/opt/ojai/b2",
            link="/opt/ojai/current")], reads=("/proc/cmdline",))),
    ]
    plan = make_plan(_ctx(root), steps)
    files = plan.fingerprint.files
    assert files[GRUB] == "sha256:" + __import__("hashlib").sha256(
        b'GRUB_CMDLINE_LINUX_DEFAULT="quiet"\n').hexdigest()  # read through ctx.root
    assert files["/proc/cmdline"] is None  # absent, recorded as null
    assert files["/opt/ojai/b2"] is None
    assert files["/opt/ojai/current"] == "symlink:/opt/ojai/b1"
    assert plan.fingerprint.ojai_version == plan.ojai_version
    assert len(plan.fingerprint.facts_sha256) == 64
    root.resolve("/opt/ojai/b2").mkdir()
    assert path_digest(root, "/opt/ojai/b2") == "directory"


def test_large_files_are_fingerprinted_by_size_and_time(tmp_path, monkeypatch):
    root = _root(tmp_path)
    monkeypatch.setattr(plan_module, "LARGE_FILE", 10)
    digest = path_digest(root, GRUB)
    size = root.resolve(GRUB).stat().st_size
    assert digest == f"large:{size}:{root.resolve(GRUB).stat().st_mtime_ns}"


def test_a_fresh_plan_is_not_stale(tmp_path):
    root = _root(tmp_path)
    plan = make_plan(_ctx(root), [ReadsGrub()])
    assert check_fresh(plan, root, Facts()) is None


def test_a_changed_file_makes_the_plan_stale_with_a_sentence_naming_it(tmp_path):
    root = _root(tmp_path)
    plan = make_plan(_ctx(root), [ReadsGrub()])
    old = plan.fingerprint.files[GRUB][7:15]
    root.resolve(GRUB).write_text('GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"\n')
    new = path_digest(root, GRUB)[7:15]
    stale = check_fresh(plan, root, Facts())
    assert stale is not None
    assert stale.message == (f"{GRUB} changed since the plan was made (sha256 {old}.. -> "
                             f"sha256 {new}..); run `ojai setup --root {root.path} --out "
                             f"plan.json` again and review it")
    root.resolve(GRUB).unlink()
    assert check_fresh(plan, root, Facts(), plan_path="my plan.json").message == (
        f"{GRUB} changed since the plan was made (sha256 {old}.. -> absent); run "
        f"`ojai setup --root {root.path} --out 'my plan.json'` again and review it")


def test_a_file_that_appeared_makes_the_plan_stale(tmp_path):
    root = _root(tmp_path)
    plan = make_plan(_ctx(root), [Fixed(StepResult.change("m", "add", [
        _write("/etc/modprobe.d/ttm.conf", None, "options ttm pages_limit=1\n")]))])
    root.resolve("/etc/modprobe.d").mkdir(parents=True)
    root.resolve("/etc/modprobe.d/ttm.conf").write_text("options ttm pages_limit=2\n")
    stale = check_fresh(plan, root, Facts())
    assert stale is not None
    assert stale.changes[0].startswith("/etc/modprobe.d/ttm.conf changed since the plan was "
                                       "made (absent -> sha256 ")


def test_changed_facts_are_named_by_their_dotted_path(tmp_path):
    root = _root(tmp_path)
    plan = make_plan(_ctx(root), [ReadsGrub()])
    later = Facts(kernel="6.18.4-generic", gpu=Gpu(gtt_total=48 * 2**30))
    stale = check_fresh(plan, root, later)
    assert stale is not None
    assert stale.changes == ("the machine's facts changed since the plan was made "
                             "(gpu.gtt_total, kernel)",)


def test_a_plan_from_another_ojai_version_is_stale(tmp_path, monkeypatch):
    root = _root(tmp_path)
    plan = make_plan(_ctx(root), [ReadsGrub()])
    monkeypatch.setattr(plan_module, "ojai_version", lambda: "9.9.9")
    stale = check_fresh(plan, root, Facts())
    assert stale is not None
    assert stale.changes == (f"the plan was made by ojai {plan.ojai_version}, this is ojai 9.9.9",)


def test_save_and_load_round_trip(tmp_path):
    root = _root(tmp_path)
    plan = make_plan(_ctx(root), [ReadsGrub(), Fixed(StepResult.change("m", "add", [
        _write("/etc/x.conf", None, "x\n", needs_root=True, mode=0o600)],
        records={"ttm": {"expected_pages": 1}}))])
    path = tmp_path / "plan.json"
    plan.save(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["machine", "plan.json"]
    loaded = Plan.load(path)
    assert loaded == plan
    assert loaded.fingerprint.digest == plan.fingerprint.digest
    assert loaded.settings == {"pages": 12582912}
    assert loaded.facts["gpu"]["gfx"] == "gfx1150"
    data = json.loads(path.read_text())
    assert data["format"] == "ojai-plan" and data["format_version"] == 1


@pytest.mark.parametrize("content, message", [
    ('{"format": "ojai-plan", "steps": [', r"not a valid plan file: it is not valid JSON at line 1, "
     r"column 35 \(cut short, or edited by hand\); make the plan again with `ojai setup --out"),
    ('{"terraform_version": "1.9"}', r"not an ojai plan \(no \"format\": \"ojai-plan\" field\)"),
    ('[1, 2]', r"not an ojai plan"),
    ('{"format": "ojai-plan", "format_version": 7}', r"plan format version 7 is not supported"),
    ('{"format": "ojai-plan", "format_version": 1, "root": "/"}',
     r"the plan file is damaged: ojai_version is missing \(it is required\); created is missing"),
])
def test_loading_a_bad_file_says_what_is_wrong(tmp_path, content, message):
    path = tmp_path / "plan.json"
    path.write_text(content)
    with pytest.raises(PlanFileError, match=message):
        Plan.load(path)


def test_loading_a_missing_file(tmp_path):
    with pytest.raises(PlanFileError, match=r"no such plan file; make one with `ojai setup --out"):
        Plan.load(tmp_path / "plan.json")


def test_a_tampered_action_is_refused_on_load(tmp_path):
    root = _root(tmp_path)
    plan = make_plan(_ctx(root), [Fixed(StepResult.change("m", "add", [
        _write("/etc/x.conf", None, "x\n")]))])
    path = tmp_path / "plan.json"
    plan.save(path)
    data = json.loads(path.read_text())
    data["steps"][0]["actions"][0]["kind"] = "format_disk"
    path.write_text(json.dumps(data))
    with pytest.raises(PlanFileError, match=r"the plan file is damaged: steps.0.actions.0"):
        Plan.load(path)
