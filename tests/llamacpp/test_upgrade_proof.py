"""An upgrade of llama.cpp proves the new build before ``current`` switches to it.

A copy of the OJAI box gets upstream's Vulkan nightly b7000, made from the real llama-server
CPU build, through ``ojai setup --apply`` (served by the GitHub stand-in on 127.0.0.1), and a
route serving the real Gemma 3 270M on it. Then newer nightlies are published and applied with
``--llamacpp-tag``:

- b7001, a WRONG build: its ``llama-server`` is a wrapper that runs the real server on a
  corrupted copy of the weights (one layer's ``ffn_down`` blocks reversed, as the gate's own
  tests make it): refused by the gate, ``current`` unchanged, the new folder kept;
- b7002, a right build (the real server): it passes the gate, the paired speed check runs and
  says its figures, and ``current`` switches; ``ojai rollback`` puts it back on b7000. Speed is
  not asserted in tests (it is the same binary, but on a shared host the run's own noise was
  7 % in one run and 45 % in another): this apply takes --accept-slower, and the speed verdict
  is tested on given figures (test_the_decision_of_an_upgrade).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support.corrupt_gguf import corrupt_copy
from support.fake_github import (  # noqa: F401 - fake_github is a fixture
    UPSTREAM_REPO,
    Entry,
    FakeGitHub,
    fake_github,
    make_upstream_tarball,
    nightly_entries_from_build,
)
from support.gemma import gemma_model  # noqa: F401 - a fixture
from support.gemma_machine import write_gemma_machine
from support.llama import llama_server_bin  # noqa: F401 - a fixture
from support.machine_state import record_state
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.core.root import Root
from ojai_setup.domain.gate import GateFigures
from ojai_setup.domain.upgrade import Proof, RouteProof, routes_to_compare, speed_figures

BASE = "opt/ojai/llama.cpp"
OPTIONS = ("--no-npu", "--llamacpp", "nightly", "--backend", "vulkan")

WRAPPER = """#!/bin/bash
# a wrong build: the real llama-server beside it, reading a corrupted copy of the weights
args=()
prev=""
for a in "$@"; do
    orig="$a"
    if [ "$prev" = "-m" ] || [ "$prev" = "--model" ]; then a="{corrupt}"; fi
    args+=("$a")
    prev="$orig"
done
exec "$(dirname "$0")/llama-server.real" "${{args[@]}}"
"""


def ojai(*args: str):
    return CliRunner().invoke(app, list(args), env={"NO_COLOR": "1", "COLUMNS": "200"})


def publish(fake: FakeGitHub, tmp_path: Path, tag: str, entries: list[Entry]) -> None:
    body = make_upstream_tarball(tmp_path / f"{tag}.tar.gz", tag, entries)
    fake.add_release(tag, {f"llama-{tag}-bin-ubuntu-vulkan-x64.tar.gz": body}, repo=UPSTREAM_REPO)


def wrong_build(bin_dir: Path, server: Path, corrupt: Path) -> list[Entry]:
    entries = nightly_entries_from_build(bin_dir, server)
    real = next(e for e in entries if e.name == "llama-server")
    return [Entry("llama-server.real", real.data, 0o100755),
            Entry("llama-server", WRAPPER.format(corrupt=corrupt).encode(), 0o100755),
            *[e for e in entries if e.name != "llama-server"]]


def current(root: Path) -> str:
    return os.readlink(root / BASE / "current")


def step_of(result, name: str = "llama.cpp") -> dict:
    return next(s for s in json.loads(result.stdout)["steps"] if s["step"] == name)


STUB = b"#!/bin/sh\necho 'version: 7000 (abc1234)' >&2\n"


def stub_build() -> list[Entry]:
    return [Entry("llama-server", STUB, 0o100755), Entry("libllama.so", b"lib", 0o100755)]


def test_the_plan_of_an_upgrade_says_what_it_compares(machine, fake_github, tmp_path):
    root = machine("ojai-fresh")
    publish(fake_github, tmp_path, "b7000", stub_build())
    first = ojai("setup", "--root", str(root), "--apply", "--yes", *OPTIONS, "--llamacpp-tag", "b7000")
    assert current(root) == "b7000-vulkan", first.output
    publish(fake_github, tmp_path, "b7001", stub_build())
    # no route runs yet: the new build is switched to as before, and the plan says so
    bare = step_of(ojai("setup", "--root", str(root), "--json", *OPTIONS, "--llamacpp-tag", "b7001"))
    assert [a["kind"] for a in bare["actions"]] == ["install_archive"], bare
    assert "no route runs on the current build (b7000-vulkan)" in bare["sentence"]

    record_state(Root(root), "routes", {
        "coder": {"script": "/opt/ojai/routes/coder.sh", "model": "coder", "spec_type": "draft-mtp"},
        "coder-plain": {"script": "/opt/ojai/routes/coder-plain.sh", "model": "coder",
                        "spec_type": "none"},
        "embed": {"script": "/opt/ojai/routes/embed.sh", "model": "embed", "embedding": True}})
    plan = ojai("setup", "--root", str(root), "--json", *OPTIONS, "--llamacpp-tag", "b7001")
    step = step_of(plan)
    assert [a["kind"] for a in step["actions"]] == ["install_archive", "prove_build"], step
    install, prove = step["actions"]
    assert install["link"] is None and install["dest"] == "/opt/ojai/llama.cpp/b7001-vulkan"
    assert prove["routes"] == {"coder-plain": "/opt/ojai/routes/coder-plain.sh"}
    assert prove["before"] == "b7000-vulkan" and prove["link"] == "/opt/ojai/llama.cpp/current"
    assert prove["candidate"] == "/opt/ojai/llama.cpp/b7001-vulkan" and not prove["accept_slower"]
    assert "beside the current build b7000-vulkan" in step["sentence"]
    assert "routes coder-plain run on the new build: the correctness gate against the current " \
        "build's CPU backend, then a paired speed check" in step["sentence"]
    assert "refused if it is more than 5 % slower" in step["sentence"]
    human = " ".join(ojai("setup", "--root", str(root), *OPTIONS, "--llamacpp-tag", "b7001",
                          "--accept-slower").output.split())
    assert "a loss of speed is accepted (--accept-slower)" in human
    assert "prove /opt/ojai/llama.cpp/b7001-vulkan on routes coder-plain" in human


def test_the_decision_of_an_upgrade() -> None:
    assert routes_to_compare({
        "a": {"script": "/a.sh", "model": "m", "spec_type": "draft-mtp"},
        "a-plain": {"script": "/p.sh", "model": "m", "spec_type": "none"},
        "n": {"script": "/n.sh", "model": "n", "spec_type": "ngram-mod"},
        "s": {"script": "/s.sh", "model": "s", "server": "sglang"}}) == {"a-plain": "/p.sh", "n": "/n.sh"}
    good = GateFigures(positions=77, agreement=1.0, mean_kl=0.0, max_kl=0.0)
    bad = GateFigures(positions=77, agreement=0.43, mean_kl=0.82, max_kl=3.0)
    # 10 % slower, noise 2 %, the interval below 1: refused, unless the loss is accepted
    slow = speed_figures([0.9] * 4, [1.02, 0.98, 1.01, 0.99], ci=(0.88, 0.92))
    assert slow.slower and slow.bar == pytest.approx(0.95)
    proof = Proof(candidate="/new", current="/old", build="b2", backend="vulkan",
                  routes=[RouteProof(route="r", gate=good, speed=slow)])
    assert not proof.adopted and "the new build is slower: speed 0.900x" in proof.finding()
    assert "backend vulkan" in proof.finding() and "current still points to /old" in proof.finding()
    assert proof.model_copy(update={"accept_slower": True}).adopted
    # the same loss inside the run's own noise (12 %) is no loss; nor one whose interval reaches 1
    assert not speed_figures([0.9] * 4, [1.12, 0.88, 1.12, 0.88], ci=(0.88, 0.92)).slower
    assert not speed_figures([0.9] * 4, [1.0] * 4, ci=(0.8, 1.05)).slower
    # a wrong build is refused whatever its speed, even with --accept-slower
    wrong = Proof(candidate="/new", current="/old", accept_slower=True,
                  routes=[RouteProof(route="r", gate=bad)])
    assert not wrong.adopted and "does not compute what the current build's CPU" in wrong.finding()
    assert "top-1 agreement 43.0 %" in wrong.finding()
    # a route on another binary is not compared; nothing compared switches as before
    other = Proof(candidate="/new", current="/old", routes=[RouteProof(route="r", skipped="x")])
    assert other.adopted and "nothing was compared" in other.summary()


@pytest.fixture
def upgraded_machine(machine, fake_github, tmp_path, llama_server_bin, gemma_model):
    """ojai-fresh with b7000 current (applied by ojai) and a Gemma route running on it."""
    root = machine("ojai-fresh")
    publish(fake_github, tmp_path, "b7000",
            nightly_entries_from_build(llama_server_bin.parent, llama_server_bin))
    first = ojai("setup", "--root", str(root), "--apply", "--yes", *OPTIONS, "--llamacpp-tag", "b7000")
    assert current(root) == "b7000-vulkan", first.output
    write_gemma_machine(root, root / BASE / "current" / "llama-server", gemma_model, routes=())
    return root


@pytest.mark.slow
def test_a_wrong_build_is_refused_and_a_right_one_adopted_then_rolled_back(
        upgraded_machine, fake_github, tmp_path, llama_server_bin, gemma_model):
    root = upgraded_machine
    corrupt = tmp_path / "corrupt.gguf"
    corrupt_copy(gemma_model, corrupt, r"^blk\.5\.ffn_down\.weight$")
    publish(fake_github, tmp_path, "b7001", wrong_build(llama_server_bin.parent, llama_server_bin,
                                                        corrupt))

    plan = step_of(ojai("setup", "--root", str(root), "--json", *OPTIONS, "--llamacpp-tag", "b7001"))
    assert plan["actions"][1]["routes"] == {"gemma": "/opt/ojai/routes/gemma.sh"}, plan

    # refused by the gate, even with a loss of speed accepted
    refused = ojai("setup", "--root", str(root), "--apply", "--yes", *OPTIONS, "--llamacpp-tag", "b7001",
                   "--accept-slower")
    assert refused.exit_code == 1, refused.output
    assert current(root) == "b7000-vulkan"
    assert (root / BASE / "b7001-vulkan" / "llama-server.real").is_file()  # kept for inspection
    flat = " ".join(refused.output.split())
    assert "build in /opt/ojai/llama.cpp/b7001-vulkan (build 0.6.0-dev build 11434, backend vulkan)" \
        in flat, flat
    assert "was not adopted" in flat and "does not compute what the current build's CPU" in flat
    assert "top-1 agreement" in flat and "current still points to /opt/ojai/llama.cpp/b7000-vulkan" in flat

    # a right build: adopted, the figures said
    publish(fake_github, tmp_path, "b7002",
            nightly_entries_from_build(llama_server_bin.parent, llama_server_bin))
    adopted = ojai("setup", "--root", str(root), "--apply", "--yes", *OPTIONS, "--llamacpp-tag", "b7002",
                   "--accept-slower")
    assert current(root) == "b7002-vulkan", adopted.output
    flat = " ".join(adopted.output.split())
    assert "passed the gate and the speed check" in flat, flat
    assert "gate top-1 agreement 100.0 %" in flat and "paired requests" in flat and "noise" in flat
    again = ojai("setup", "--root", str(root), "--json", *OPTIONS, "--llamacpp-tag", "b7002")
    assert step_of(again)["status"] == "satisfied"

    # the old build stays for rollback
    back = ojai("rollback", "--root", str(root), "--yes")
    assert back.exit_code == 0, back.output
    assert current(root) == "b7000-vulkan"
    assert (root / BASE / "b7002-vulkan" / "llama-server").is_file()
