"""A gated or private Hugging Face repository, on copies of ojai-fresh: the hub answers 401 to
a request without a token or with one it does not know, and 403 to a token that has no access
to the repository.

Planning asks the hub whether it serves each model file (one ``HEAD``, with the token
huggingface_hub would send: HF_TOKEN, else the one ``hf auth login`` stored): a refusal blocks
the model step in the dry run with a sentence that gives the status, says why and names
``HF_TOKEN``, before anything is downloaded or any file of the machine is touched. With the
right token the model is planned, downloaded and checked against the hub's sha256. A token that
stops working after planning (revoked, or its access withdrawn) fails the download with the
status and ``HF_TOKEN`` named, before the boot configuration is touched, and with the command
that tries again; a saved plan applied after that is refused before anything changes.

The hub is the local stand-in of tests/support/fake_hub.py (``token``: 401 without it;
``token_without_access``: 403 with that one)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.fake_hub import FakeHub, fake_hub  # noqa: F401 - fake_hub is a fixture
from support.gguf_files import gemma4_assistant, gemma4_main
from support.stand_ins import route_toml
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.model.settings import Settings

REPO = "ojai-test/gated-gemma4-GGUF"
ROUTE = "gated-gemma"
MAIN = "gemma-4-tiny-it-Q4_K_M.gguf"
DRAFT = "mtp-gemma-4-tiny-it.gguf"
MODELS = "var/lib/ojai/models"
#: the machine's lock, which ``--apply`` takes before it plans (an empty file)
LOCK = "var/lib/ojai/lock"
GRUB = "etc/default/grub"
LIMIT = "ttm.pages_limit=12582912"
NO_LLAMA = ["--llamacpp", "none", "--no-npu"]
OJAI = Path(sys.executable).parent / "ojai"
#: the token of an account that accepted the repository's terms
TOKEN = "hf_gated_access_granted"
#: a token the hub knows, of an account that has not
NO_ACCESS = "hf_gated_access_missing"


def ojai(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


def said(result) -> str:
    return " ".join(result.stderr.split())


@pytest.fixture
def gated(tmp_path: Path, fake_hub: FakeHub) -> FakeHub:
    """The hub with the route's two files in a repository that needs :data:`TOKEN`."""
    folder = tmp_path / "published"
    fake_hub.add_path(REPO, MAIN, gemma4_main(folder / MAIN, payload_bytes=64 * 1024))
    fake_hub.add_path(REPO, DRAFT, gemma4_assistant(folder / DRAFT, payload_bytes=64 * 1024))
    fake_hub.token = TOKEN
    fake_hub.token_without_access = NO_ACCESS
    return fake_hub


@pytest.fixture
def catalog(tmp_path: Path, gated: FakeHub) -> Path:
    folder = tmp_path / "published"
    path = tmp_path / "catalog.toml"
    path.write_text(route_toml(ROUTE, REPO, folder / MAIN, folder / DRAFT))
    return path


def model_args(root: Path, catalog: Path) -> list[object]:
    return ["--root", root, *NO_LLAMA, "--catalog", catalog, "--model", ROUTE]


def every_file(root: Path, *, but: tuple[str, ...] = ()) -> dict[str, bytes]:
    """Every file of the machine (but those named), to show that nothing was written."""
    return {name: p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.is_symlink()
            and (name := str(p.relative_to(root))) not in but}


def model_step(args: list[object]) -> dict:
    data = json.loads(ojai("setup", *args, "--json").stdout)
    return next(s for s in data["steps"] if s["step"] == "model")


def last_sentence(result) -> str:
    text = " ".join(result.stdout.split())
    return text[text.rindex("Plan: "):]


# -- refused at planning ------------------------------------------------------------------
#: how the hub refuses at planning: HF_TOKEN, the hub's answer, what the sentence says
REFUSALS = {
    "no token": (None, 401, "a gated or private repository needs a token: set HF_TOKEN"),
    "a token the hub does not know": ("hf_mistyped", 401, "the Hub does not accept HF_TOKEN"),
    "a token without access": (NO_ACCESS, 403, "a gated or private repository, and the "
                                               "account of HF_TOKEN has no access to it"),
}


@pytest.mark.parametrize("how", REFUSALS)
def test_a_gated_repository_the_hub_refuses_is_blocked_in_the_dry_run(box, catalog, gated,
                                                                      monkeypatch, how):
    """Without a token or with one the hub does not know (401), or with one that has no
    access (403), the dry run blocks the model step with the status, why and HF_TOKEN; exit 1;
    the apply refuses; no byte is downloaded and no file of the machine changes."""
    token, status, why = REFUSALS[how]
    if token:
        monkeypatch.setenv("HF_TOKEN", token)
    before = every_file(box)
    args = model_args(box, catalog)
    plan = ojai("setup", *args)
    assert plan.exit_code == 1, plan.output
    assert every_file(box) == before
    assert "1 step blocked" in last_sentence(plan)
    step = model_step(args)
    line = step["sentence"]
    assert step["status"] == "blocked", step
    assert line.startswith(f"{ROUTE}: {gated.url} refuses {REPO}:"), line
    assert f"(HTTP {status}): {why}" in line, line
    heads = gated.requests_to("hub", "HEAD")
    assert heads and all(r.headers.get("authorization") == (f"Bearer {token}" if token else None)
                         for r in heads)

    applied = ojai("setup", *args, "--apply", "--yes")
    # the model (and the routes that wait for it) left out; the GRUB edit made
    assert applied.exit_code == 3, applied.output
    assert " ".join(applied.stdout.split()).endswith(
        "not applied: model is blocked; routes waits for model.")
    assert gated.requests_to("cdn") == [] and not (box / MODELS).exists()
    after = every_file(box, but=(LOCK,))
    assert {p for p in set(before) | set(after) if before.get(p) != after.get(p)
            and "var/lib/ojai/" not in str(p)} == {"etc/default/grub"}


def test_with_the_right_token_the_model_is_planned_downloaded_and_checked(box, catalog, gated,
                                                                         monkeypatch):
    """HF_TOKEN of an account with access: the model step is a change, the apply downloads
    both files (the token sent to the hub, never to the CDN) and each has the hub's sha256."""
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    args = model_args(box, catalog)
    plan = ojai("setup", *args)
    assert plan.exit_code == 2, plan.output
    assert model_step(args)["status"] == "change"
    done = ojai("setup", *args, "--apply", "--yes")
    assert done.exit_code == 0, done.output
    for name in (MAIN, DRAFT):
        data = (box / MODELS / REPO / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == gated.files[(REPO, name)].sha256
    assert all(r.headers.get("authorization") == f"Bearer {TOKEN}"
               for r in gated.requests_to("hub"))
    assert gated.requests_to("cdn", "GET")
    assert all("authorization" not in r.headers for r in gated.requests_to("cdn"))
    assert LIMIT in (box / GRUB).read_text()
    assert ojai("setup", *args).exit_code == 0  # nothing left to do


# -- refused after the review -------------------------------------------------------------
#: how a token that worked at planning stops working: the hub's answer then
WITHDRAWN = {
    "revoked": 401,  # the token was deleted: the hub no longer knows it
    "access withdrawn": 403,  # the account lost its access to the repository
}
#: what ojai says of each answer to the token it sent
SAYS = {401: "the Hub does not accept HF_TOKEN (revoked, expired or mistyped)",
        403: "a gated or private repository, and the account of HF_TOKEN has no access to it"}


def withdraw(hub: FakeHub, status: int) -> None:
    """From now on the hub refuses :data:`TOKEN` with ``status``."""
    if status == 401:
        hub.token = "hf_the_token_made_after_the_revocation"
    else:
        hub.token_without_access = TOKEN


@pytest.mark.parametrize("how", WITHDRAWN)
def test_a_token_withdrawn_during_the_apply_fails_the_download_before_the_boot(
        box, catalog, gated, monkeypatch, how):
    """The hub refuses HF_TOKEN from the moment the apply starts its first action (planned
    while the token worked, under the same lock): the download fails with the HTTP status and
    HF_TOKEN named, nothing is downloaded, /etc/default/grub is as it was and the output says
    so, with the command that tries again; once the token works, that command finishes."""
    from ojai_setup.apply import faults

    monkeypatch.setenv("HF_TOKEN", TOKEN)
    args = model_args(box, catalog)
    grub = (box / GRUB).read_bytes()
    status = WITHDRAWN[how]

    def revoke(stage: str) -> None:
        if stage == "action-start":
            withdraw(gated, status)

    faults.set_fault_hook(revoke)
    try:
        failed = ojai("setup", *args, "--apply", "--yes")
    finally:
        faults.set_fault_hook(None)
    assert failed.exit_code == 1, failed.output
    text = said(failed)
    assert "Traceback" not in failed.output
    assert f"apply failed: {REPO}:{MAIN}: the hub refused the file (HTTP {status}): " \
        f"{SAYS[status]}" in text, text
    assert "mozilla.org" not in text  # ojai's words, not the HTTP library's
    assert (box / GRUB).read_bytes() == grub
    assert "the boot configuration was not touched: the machine boots as before" in text, text
    assert gated.requests_to("cdn") == [] and not list((box / MODELS).rglob("*.gguf"))
    settings = Settings(llamacpp="none", npu=False, user_catalog=str(catalog), model=ROUTE)
    assert f"to try again: {settings.command('--apply', root=str(box))}" in text, text

    gated.token, gated.token_without_access = TOKEN, NO_ACCESS
    done = ojai("setup", *args, "--apply", "--yes")
    assert done.exit_code == 0, done.output
    assert LIMIT in (box / GRUB).read_text()


def saved_then_withdrawn(box: Path, catalog: Path, hub: FakeHub, saved: Path, status: int):
    """Save the plan while HF_TOKEN works, then make the hub refuse it with ``status``, and
    apply the saved plan; the result, and /etc/default/grub as it was before."""
    plan = ojai("setup", *model_args(box, catalog), "--out", saved)
    assert plan.exit_code == 2, plan.output
    grub = (box / GRUB).read_bytes()
    withdraw(hub, status)
    return ojai("setup", "--root", box, "--apply", "--plan", saved, "--yes"), grub


@pytest.mark.parametrize("how", WITHDRAWN)
def test_a_token_withdrawn_after_the_review_refuses_the_saved_plan_before_anything(
        box, catalog, gated, monkeypatch, tmp_path, how):
    """The plan is saved while HF_TOKEN works; then the hub refuses it. Applying the saved
    plan plans again under the lock, finds the model step blocked now and refuses the plan:
    exit 1, nothing downloaded, /etc/default/grub as it was, the command that makes a new
    plan; the dry run then says why, with the HTTP status and HF_TOKEN."""
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    status = WITHDRAWN[how]
    failed, grub = saved_then_withdrawn(box, catalog, gated, tmp_path / "plan.json", status)
    assert failed.exit_code == 1, failed.output
    text = said(failed)
    assert "Traceback" not in failed.output
    assert "Nothing was applied" in text, text
    assert (box / GRUB).read_bytes() == grub
    assert gated.requests_to("cdn") == [] and not (box / MODELS).exists()
    assert f"make and review a new plan: `ojai setup --root {box} " in text, text
    line = model_step(model_args(box, catalog))["sentence"]
    assert f"(HTTP {status}): {SAYS[status]}" in line, line

    gated.token, gated.token_without_access = TOKEN, NO_ACCESS
    again = ojai("setup", *model_args(box, catalog), "--out", tmp_path / "plan.json")
    assert again.exit_code == 2, again.output
    done = ojai("setup", "--root", box, "--apply", "--plan", tmp_path / "plan.json", "--yes")
    assert done.exit_code == 0, done.output
    assert LIMIT in (box / GRUB).read_text()


def test_the_refusal_of_a_saved_plan_names_the_hubs_answer_and_hf_token(box, catalog, gated,
                                                                       monkeypatch, tmp_path):
    """What the person who applies the saved plan needs to read: that the model step is
    blocked now, the hub refusing the token (HTTP 401), and that HF_TOKEN is what to change;
    before the actions that are gone because of it."""
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    failed, _ = saved_then_withdrawn(box, catalog, gated, tmp_path / "plan.json", 401)
    assert failed.exit_code == 1, failed.output
    text = said(failed)
    assert "step model is blocked now:" in text and "HTTP 401" in text and "HF_TOKEN" in text, text
    assert text.index("step model is blocked now") < text.index("does not plan now"), text


def test_the_token_hf_auth_login_stored_is_sent_at_planning_as_at_the_download(
        box, catalog, gated, tmp_path):
    """No HF_TOKEN, but the token file ``hf auth login`` writes ($HF_HOME/token), which
    huggingface_hub sends with the download: planning sends it too, so the gated model is
    planned rather than blocked, and the apply downloads it. In processes of their own, since
    huggingface_hub reads HF_HOME when it is first imported."""
    home = tmp_path / "hf-home"
    home.mkdir()
    (home / "token").write_text(TOKEN + "\n")
    env = {k: v for k, v in os.environ.items() if k not in (
        "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HUB_DISABLE_IMPLICIT_TOKEN")}
    env.update(HF_HOME=str(home), HF_ENDPOINT=gated.url, COLUMNS="200")
    argv = [str(OJAI), "setup", *map(str, model_args(box, catalog))]
    plan = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert plan.returncode == 2, plan.stdout[-2000:] + plan.stderr[-2000:]
    heads = gated.requests_to("hub", "HEAD")
    assert heads and all(r.headers.get("authorization") == f"Bearer {TOKEN}" for r in heads)
    done = subprocess.run([*argv, "--apply", "--yes"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for name in (MAIN, DRAFT):
        data = (box / MODELS / REPO / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == gated.files[(REPO, name)].sha256
