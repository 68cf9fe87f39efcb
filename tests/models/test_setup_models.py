"""The model step through ``ojai setup`` on copies of the test machines: a user catalog route
whose tiny GGUF files a local stand-in for the Hugging Face Hub serves; verified, resumable
downloads; pairing proof from the files on disk; disk and GPU memory budgets; ``ojai models``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from ojai_setup.core.status import ExitStatus
from support.fake_hub import FakeHub, fake_hub  # noqa: F401 - fake_hub is a fixture
from support.gguf_files import OTHER_TOKENS, gemma4_assistant, gemma4_main, qwen35
from support.stand_ins import route_toml
from typer.testing import CliRunner

from ojai_setup.cli import app

REPO = "ojai-test/tiny-gemma4-GGUF"
ROUTE = "tiny-gemma"
MAIN = "gemma-4-tiny-it-Q4_K_M.gguf"
DRAFT = "mtp-gemma-4-tiny-it.gguf"
QWEN_REPO = "ojai-test/tiny-qwen35-MTP-GGUF"
QWEN = "Qwen3.6-tiny-UD-Q4_K_XL.gguf"
MODELS = "var/lib/ojai/models"
#: bytes of payload in each tiny model, so that a download can be cut part way
PAYLOAD = 64 * 1024


def ojai(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture
def published(tmp_path: Path, fake_hub: FakeHub) -> dict[str, Path]:
    """The good Gemma 4 pair and a Qwen3.6 model with in-file heads on the hub."""
    folder = tmp_path / "published"
    files = {
        "main": gemma4_main(folder / MAIN, payload_bytes=PAYLOAD),
        "draft": gemma4_assistant(folder / DRAFT, payload_bytes=PAYLOAD),
        "qwen": qwen35(folder / QWEN, payload_bytes=PAYLOAD),
    }
    fake_hub.add_path(REPO, MAIN, files["main"])
    fake_hub.add_path(REPO, DRAFT, files["draft"])
    fake_hub.add_path(QWEN_REPO, QWEN, files["qwen"])
    return files


@pytest.fixture
def catalog(tmp_path: Path, published: dict[str, Path]) -> Path:
    path = tmp_path / "catalog.toml"
    path.write_text(route_toml(ROUTE, REPO, published["main"], published["draft"])
                    + route_toml("tiny-qwen", QWEN_REPO, published["qwen"], None)
                    # 40 layers x 8 heads x 128 dims x 2 (K, V) x 2 bytes = 160 KiB per token
                    + route_toml("tiny-long", REPO, published["main"], published["draft"],
                                 context_size=65536, full_layers=40))
    return path


def setup_args(root: Path, catalog: Path, model: str = ROUTE) -> list[object]:
    return ["setup", "--root", root, "--llamacpp", "none", "--no-npu", "--catalog", catalog,
            "--model", model]


def plan_json(root: Path, catalog: Path, *extra: object, model: str = ROUTE) -> dict:
    result = ojai(*setup_args(root, catalog, model), "--json", *extra)
    data = json.loads(result.stdout)
    assert data["exit_code"] == result.exit_code
    return data


def model_step(plan: dict) -> dict:
    return next(s for s in plan["steps"] if s["step"] == "model")


def apply(root: Path, catalog: Path, *extra: object, model: str = ROUTE):
    return ojai(*setup_args(root, catalog, model), "--apply", "--yes", *extra)


def model_files(root: Path, repo: str = REPO) -> list[str]:
    """Every name in the repo's models folder (hidden partial downloads and records too)."""
    folder = root / MODELS / repo
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def place(root: Path, name: str, source: Path, repo: str = REPO) -> Path:
    dest = root / MODELS / repo / name
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.write_bytes(source.read_bytes())
    return dest


# -- plan and apply ---------------------------------------------------------------------------
def test_plan_lists_the_downloads_with_exact_sizes(box, catalog, published, fake_hub):
    plan = plan_json(box, catalog)
    assert plan["exit_code"] == 2
    s = model_step(plan)
    assert s["status"] == "change"
    assert f"download {ROUTE} (test route) (2 files" in s["sentence"]
    assert "into /var/lib/ojai/models" in s["sentence"] and "fits." in s["sentence"]
    downloads = [(a["kind"], a["repo_id"], a["filename"], a["dest"], a["size"]) for a in s["actions"]]
    assert downloads == [
        ("hub_download", REPO, MAIN, f"/{MODELS}/{REPO}/{MAIN}", published["main"].stat().st_size),
        ("hub_download", REPO, DRAFT, f"/{MODELS}/{REPO}/{DRAFT}", published["draft"].stat().st_size),
    ]
    # planning asks the hub only whether it serves each file: one HEAD each, no download
    assert [(r.server, r.method, r.path.rsplit("/", 1)[-1]) for r in fake_hub.requests] == [
        ("hub", "HEAD", MAIN), ("hub", "HEAD", DRAFT)]
    assert model_files(box) == []


def test_apply_downloads_and_verifies_then_second_apply_asks_the_hub_nothing(
        box, catalog, published, fake_hub):
    first = apply(box, catalog)
    assert first.exit_code == 0, first.output
    for key, name in (("main", MAIN), ("draft", DRAFT)):
        assert (box / MODELS / REPO / name).read_bytes() == published[key].read_bytes()
    assert f".{MAIN}.sha256" in model_files(box)
    assert not [n for n in model_files(box) if n.endswith(".partial")]
    assert len(fake_hub.requests_to("cdn", "GET")) == 2
    seen = len(fake_hub.requests)

    second = apply(box, catalog)
    assert second.exit_code == 0, second.output
    assert "nothing to do" in second.stdout
    assert f"{ROUTE}: main and MTP draft present, verified and paired" in second.stdout
    assert len(fake_hub.requests) == seen


def test_in_file_head_model_downloads_and_is_satisfied(box, catalog, published, fake_hub):
    first = apply(box, catalog, model="tiny-qwen")
    assert first.exit_code == 0, first.output
    assert (box / MODELS / QWEN_REPO / QWEN).read_bytes() == published["qwen"].read_bytes()
    s = model_step(plan_json(box, catalog, model="tiny-qwen"))
    assert s["status"] == "satisfied"
    assert "main file with in-file MTP heads present, verified and paired" in s["sentence"]


def test_in_file_route_whose_file_has_no_heads_is_blocked(box, catalog, tmp_path):
    place(box, QWEN, qwen35(tmp_path / "plain" / QWEN, nextn_predict_layers=None,
                            payload_bytes=PAYLOAD), repo=QWEN_REPO)
    plan = plan_json(box, catalog, model="tiny-qwen")
    s = model_step(plan)
    assert plan["exit_code"] == 1 and s["status"] == "blocked"
    assert "no MTP heads inside the file" in s["sentence"]


# -- pairing proof on files already on disk ---------------------------------------------------
def test_different_tokenizers_on_disk_block_the_plan(box, catalog, published, tmp_path):
    place(box, MAIN, published["main"])
    other = place(box, DRAFT, gemma4_assistant(tmp_path / "other" / DRAFT, tokens=OTHER_TOKENS))
    before = other.read_bytes()
    plan = plan_json(box, catalog)
    s = model_step(plan)
    assert plan["exit_code"] == 1 and s["status"] == "blocked"
    assert f"{ROUTE}: the files on disk are not a matched MTP pair" in s["sentence"]
    assert "tokenizers differ" in s["sentence"]
    assert "Delete them to download the right files" in s["sentence"]
    result = apply(box, catalog)
    # the model and the routes that wait for it are left out, the rest applied
    assert result.exit_code == ExitStatus.INCOMPLETE, result.output
    assert " ".join(result.stdout.split()).endswith(
        "not applied: model is blocked; routes waits for model.")
    assert other.read_bytes() == before


def test_underscore_arch_drafter_on_disk_blocks_the_plan(box, catalog, published, tmp_path):
    place(box, MAIN, published["main"])
    place(box, DRAFT, gemma4_assistant(tmp_path / "old" / DRAFT, arch="gemma4_assistant"))
    s = model_step(plan_json(box, catalog))
    assert s["status"] == "blocked"
    assert "architecture 'gemma4_assistant' (underscore) does not load" in s["sentence"]


def test_matched_pair_on_disk_is_checked_not_downloaded(box, catalog, published, fake_hub):
    place(box, MAIN, published["main"])
    place(box, DRAFT, published["draft"])
    s = model_step(plan_json(box, catalog))
    assert s["status"] == "change"  # present, but not yet checked against the hub's sha256
    assert all("not yet checked against the hub's sha256" in a["reason"] for a in s["actions"])
    result = apply(box, catalog)
    assert result.exit_code == 0, result.output
    assert fake_hub.requests_to("cdn", "GET") == []


# -- faults -----------------------------------------------------------------------------------
def test_corrupted_download_fails_with_the_reason_and_leaves_no_file(box, catalog, fake_hub):
    fake_hub.corrupt(REPO, DRAFT)
    result = apply(box, catalog)
    assert result.exit_code == 1, result.output
    assert f"{REPO}:{DRAFT}: sha256 mismatch" in result.stderr
    assert "the download was deleted" in result.stderr
    assert DRAFT not in model_files(box)
    assert not [n for n in model_files(box) if n.endswith(".partial")]


def test_interrupted_download_resumes_on_the_next_apply(box, published, fake_hub, tmp_path):
    # huggingface_hub writes in 10 MiB chunks: a main model of 12 MiB is cut after the first
    big = gemma4_main(tmp_path / "big" / MAIN, payload_bytes=12 << 20)
    fake_hub.add_path(REPO, MAIN, big)
    catalog = tmp_path / "big.toml"
    catalog.write_text(route_toml(ROUTE, REPO, big, published["draft"]))
    fake_hub.cut_next_download(11 << 20)
    failed = apply(box, catalog)
    assert failed.exit_code == 1, failed.output
    assert f"{REPO}:{MAIN}: download stopped after" in failed.stderr
    assert "run again to resume it" in failed.stderr
    assert MAIN not in model_files(box)
    [partial] = [n for n in model_files(box) if n.endswith(".partial")]
    kept = (box / MODELS / REPO / partial).stat().st_size
    assert 0 < kept < big.stat().st_size

    fake_hub.restore()
    resumed = apply(box, catalog)
    assert resumed.exit_code == 0, resumed.output
    assert (box / MODELS / REPO / MAIN).read_bytes() == big.read_bytes()
    ranges = [r.headers.get("range") for r in fake_hub.requests_to("cdn", "GET")]
    assert f"bytes={kept}-" in ranges
    assert not [n for n in model_files(box) if n.endswith(".partial")]


def test_small_disk_budget_refuses_before_downloading(box, catalog, fake_hub, monkeypatch):
    monkeypatch.setenv("OJAI_DISK_BUDGET_BYTES", "1000")
    grub = (box / "etc/default/grub").read_bytes()
    plan = plan_json(box, catalog)
    s = model_step(plan)
    assert plan["exit_code"] == 1 and s["status"] == "blocked"
    assert "not enough disk space in /var/lib/ojai/models" in s["sentence"]
    assert "1000 bytes" in s["sentence"]
    result = apply(box, catalog)
    assert result.exit_code == ExitStatus.INCOMPLETE, result.output
    assert fake_hub.requests_to("cdn") == []
    assert model_files(box) == []
    # the GRUB edit does not need the model: applied (once, all or nothing: left as it was)
    assert (box / "etc/default/grub").read_bytes() != grub


def test_route_too_big_for_the_gpu_budget_is_blocked_with_the_shortfall(box, catalog):
    plan = plan_json(box, catalog, "--gpu-memory", "8", model="tiny-long")
    s = model_step(plan)
    assert plan["exit_code"] == 1 and s["status"] == "blocked"
    # 65536 tokens x 160 KiB = 10 GiB of KV cache against 8 GiB
    assert "does not fit the GPU memory budget: tiny-long-mtp at ctx 65536 needs 10.0 GiB" in s["sentence"]
    assert "of 8.0 GiB: 2.0 GiB short; ctx 52224 fits" in s["sentence"]
    assert f"routes that fit: tiny-qwen, {ROUTE}" in s["sentence"] \
        or f"routes that fit: {ROUTE}, tiny-qwen" in s["sentence"]
    fits = model_step(plan_json(box, catalog, "--gpu-memory", "12", model="tiny-long"))
    assert fits["status"] == "change"


# -- catalogs ---------------------------------------------------------------------------------
def test_bad_user_catalog_entry_names_file_and_field(box, catalog, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(catalog.read_text().replace("context_size = 2048", 'context_size = "big"', 1))
    plan = plan_json(box, bad)
    s = model_step(plan)
    assert plan["exit_code"] == 1 and s["status"] == "blocked"
    assert f"{bad}: routes.{ROUTE}.context_size must be a whole number" in s["sentence"]
    listed = ojai("models", "--root", box, "--catalog", bad)
    assert listed.exit_code == 1
    assert f"{bad}: routes.{ROUTE}.context_size must be a whole number" in " ".join(listed.stderr.split())


def test_an_unknown_route_is_a_usage_error_naming_the_closest_of_the_users_catalog(box, catalog):
    result = ojai(*setup_args(box, catalog, "tiny_gema"), "--json")
    assert result.exit_code == 64 and result.stdout == ""
    assert result.stderr.startswith(f"error: --model tiny_gema: no such route; did you mean {ROUTE}")
    # a route of the user's catalog typed in capitals is that route
    assert plan_json(box, catalog, model=ROUTE.upper())["settings"]["model"] == ROUTE


def test_ojai_models_lists_fit_and_downloaded(box, catalog, published, fake_hub):
    rows = {r["name"]: r for r in json.loads(ojai(
        "models", "--root", box, "--catalog", catalog, "--json", "--gpu-memory", "8").stdout)["routes"]}
    assert {ROUTE, "tiny-qwen", "tiny-long", "gemma-4-26b-a4b", "gemma-4-31b"} <= set(rows)
    assert rows[ROUTE]["fits"] is True and rows[ROUTE]["downloaded"] == "no"
    assert rows["tiny-long"]["fits"] is False and rows["tiny-long"]["max_ctx"] == 52224
    assert rows["gemma-4-31b"]["fits"] is False and rows["gemma-4-31b"]["sizes_estimated"] is True

    assert apply(box, catalog).exit_code == 0
    rows = {r["name"]: r for r in json.loads(ojai(
        "models", "--root", box, "--catalog", catalog, "--json").stdout)["routes"]}
    assert rows[ROUTE]["downloaded"] == "downloaded"
    assert rows["tiny-long"]["downloaded"] == "downloaded"  # the same two files
    assert rows["tiny-qwen"]["downloaded"] == "no"

    table = ojai("models", "--root", box, "--catalog", catalog, "--gpu-memory", "8")
    assert table.exit_code == 0, table.output
    for column in ("route", "drafting", "context", "memory", "fits", "downloaded"):
        assert column in table.stdout
    line = next(ln for ln in table.stdout.splitlines() if ln.startswith("tiny-long "))
    assert re.search(r" no +downloaded$", line.rstrip()) and "MTP" in line, line
    wide = ojai("models", "--root", box, "--catalog", catalog, "--gpu-memory", "8", "--wide")
    line = next(ln for ln in wide.stdout.splitlines() if ln.startswith("tiny-long "))
    assert re.search(r" no +52224 ", line), line  # the largest context that fits


def test_downloaded_mismatched_pair_is_reported_after_apply(box, catalog, fake_hub, tmp_path):
    other = gemma4_assistant(tmp_path / "other" / DRAFT, tokens=OTHER_TOKENS, payload_bytes=PAYLOAD)
    fake_hub.add_path(REPO, DRAFT, other)  # the same size as the catalog says, another tokenizer
    result = apply(box, catalog)
    assert result.exit_code == 1, result.output
    assert "after applying, a new plan is not empty" in result.stderr
    assert "tokenizers differ" in result.stderr
    assert model_step(plan_json(box, catalog))["status"] == "blocked"
