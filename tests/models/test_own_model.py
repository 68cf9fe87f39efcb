"""``--model`` as a Hugging Face file or repository: the files and commit asked of the Hub, the
GGUF header read with range requests before anything is downloaded (the stand-in Hub on
127.0.0.1 and its CDN answering ranges as the real one does), a split GGUF planned and
downloaded as one model, and the refusals of a file that is not GGUF or whose architecture the
build does not load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.fake_hub import COMMIT, FakeHub, fake_hub  # noqa: F401 - fake_hub is a fixture
from support.gguf_files import attention_model
from support.llama import llama_server_bin  # noqa: F401 - a fixture
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.core.errors import RemoteError
from ojai_setup.core.root import Root
from ojai_setup.domain.own_model import (
    HubFile,
    ModelRef,
    OwnModelError,
    parse_model_ref,
    pick_files,
    route_name,
)
from ojai_setup.facts import hub as hub_facts
from ojai_setup.facts.probe import architecture_known
from ojai_setup.facts.gguf import read_model_info
from ojai_setup.formats.gguf import GGUFError

REPO = "ojai-test/tiny-llama-GGUF"
MODELS = "var/lib/ojai/models"
PAYLOAD = 1 << 20


def ojai(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


def plan(root: Path, model: str, *extra: object) -> dict:
    result = ojai("setup", "--root", root, "--llamacpp", "none", "--no-npu", "--json",
                  "--model", model, *extra)
    data = json.loads(result.stdout)
    assert data["exit_code"] == result.exit_code
    return data


def step(data: dict, name: str) -> dict:
    return next(s for s in data["steps"] if s["step"] == name)


def cdn_gets(hub: FakeHub) -> list[str]:
    """The Range header of every GET the CDN received ("" for none)."""
    return [r.headers.get("range", "") for r in hub.requests_to("cdn", "GET")]


def publish(hub: FakeHub, paths: list[Path], repo: str = REPO, prefix: str = "") -> None:
    for p in paths:
        hub.add_path(repo, prefix + p.name, p)


# -- reading a header with range requests -------------------------------------------------------
def test_the_header_is_read_with_ranges_and_matches_the_whole_file(tmp_path, fake_hub,
                                                                   monkeypatch):
    [path] = attention_model(tmp_path / "m-Q4_K_M.gguf", payload_bytes=PAYLOAD)
    publish(fake_hub, [path])
    monkeypatch.setattr(hub_facts, "HEADER_FIRST", 256)  # so the header takes several ranges
    info = hub_facts.read_gguf_header(REPO, path.name, COMMIT, path.stat().st_size)
    local = read_model_info(path)
    assert info.model_dump(exclude={"path"}) == local.model_dump(exclude={"path"})
    assert (info.architecture, info.block_count, info.context_length) == ("llama", 4, 65536)
    ranges = cdn_gets(fake_hub)
    assert len(ranges) >= 2 and all(r.startswith("bytes=") and not r.endswith("-") for r in ranges)
    fetched = sum(int(r.split("-")[1]) - int(r[6:].split("-")[0]) + 1 for r in ranges)
    assert fetched < path.stat().st_size // 8  # the header, not the weights
    # the token goes to the hub, never to its CDN
    fake_hub.token = "hf_secret"
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    fake_hub.requests.clear()
    hub_facts.read_gguf_header(REPO, path.name, COMMIT, path.stat().st_size)
    assert all("authorization" not in r.headers for r in fake_hub.requests_to("cdn"))
    assert all(r.headers.get("authorization") == "Bearer hf_secret"
               for r in fake_hub.requests_to("hub"))


def test_the_stand_in_cdn_answers_ranges_as_the_hubs_does(tmp_path, fake_hub):
    import urllib.error
    import urllib.request

    fake_hub.add_file(REPO, "f.bin", bytes(range(100)))
    sha = fake_hub.files[(REPO, "f.bin")].sha256

    def get(rng: str):
        req = urllib.request.Request(f"{fake_hub.cdn_url}/cdn/{sha}", headers={"Range": rng})
        with urllib.request.urlopen(req) as r:
            return r.status, r.headers["Content-Range"], r.read()

    assert get("bytes=10-19") == (206, "bytes 10-19/100", bytes(range(10, 20)))
    assert get("bytes=90-200") == (206, "bytes 90-99/100", bytes(range(90, 100)))
    assert get("bytes=95-") == (206, "bytes 95-99/100", bytes(range(95, 100)))
    with pytest.raises(urllib.error.HTTPError) as err:
        get("bytes=100-150")
    assert err.value.code == 416 and err.value.headers["Content-Range"] == "bytes */100"


def test_a_file_that_is_not_gguf_is_refused_after_one_small_range(fake_hub):
    fake_hub.add_file(REPO, "m-Q4_K_M.gguf", b"<!DOCTYPE html><html>" + b"x" * 5000)
    with pytest.raises(GGUFError, match=r"not a GGUF file \(it starts with 3c21444f"):
        hub_facts.read_gguf_header(REPO, "m-Q4_K_M.gguf", COMMIT, 5021)
    assert len(cdn_gets(fake_hub)) == 1


def test_listing_pins_the_commit_sizes_and_sha256(tmp_path, fake_hub):
    [path] = attention_model(tmp_path / "m-Q4_K_M.gguf")
    entry = fake_hub.add_path(REPO, path.name, path)
    commit, files = hub_facts.hub_listing(REPO, None)
    assert commit == COMMIT
    assert files == [HubFile(path.name, path.stat().st_size, entry.sha256)]
    with pytest.raises(RemoteError, match="HTTP 404"):
        hub_facts.hub_listing(REPO, "no-such-branch")


# -- planning ------------------------------------------------------------------------------------
def test_a_hub_file_is_planned_with_its_fit_pinned_and_not_downloaded(box, tmp_path, fake_hub):
    [path] = attention_model(tmp_path / "Tiny-Llama-Q4_K_M.gguf", payload_bytes=PAYLOAD)
    entry = fake_hub.add_path(REPO, path.name, path)
    data = plan(box, f"hf:{REPO}:{path.name}")
    model = step(data, "model")
    assert model["status"] == "change", model
    assert "tiny-llama-q4_k_m-ngram at ctx 32768 needs" in model["sentence"]
    assert "fits." in model["sentence"]
    [download] = model["actions"]
    assert (download["repo_id"], download["filename"], download["revision"], download["sha256"],
            download["size"]) == (REPO, path.name, COMMIT, entry.sha256, path.stat().st_size)
    routes = step(data, "routes")
    assert "write launch scripts for tiny-llama-q4_k_m-ngram (n-gram (ngram-mod)" in routes["sentence"]
    assert "sizes from the Hub's sizes and GGUF header" in routes["sentence"]
    script = next(a["after"] for a in routes["actions"]
                  if a["path"].endswith("tiny-llama-q4_k_m-ngram.sh"))
    assert f"/var/lib/ojai/models/{REPO}/{path.name}" in script
    # nothing but ranges of the header was fetched
    ranges = cdn_gets(fake_hub)
    assert ranges and all(r.startswith("bytes=") and not r.endswith("-") for r in ranges)
    assert not (box / MODELS).exists()


def test_kv_per_token_and_the_fit_come_from_the_header(box, tmp_path, fake_hub):
    # 40 layers x 2 KV heads x 128 (1024 / 8) x 2 (K and V) x 2 bytes = 40 KiB a token
    [path] = attention_model(tmp_path / "big-Q8_0.gguf", block_count=40, embedding_length=1024,
                             context_length=131072)
    publish(fake_hub, [path])
    data = plan(box, f"{REPO}:Q8_0", "--gpu-memory", "2")
    model = step(data, "model")
    assert model["status"] == "blocked", model
    # ctx 32768 x 40 KiB = 1.25 GiB of KV, 1 GiB overhead: more than 2 GiB; the 1 GiB left
    # (less a few KiB of weights) holds 25.6 K tokens, so 25 steps of 1024
    assert "KV 1.2 GiB" in model["sentence"] and "ctx 25600 fits" in model["sentence"]


def test_mtp_heads_in_the_file_draft_as_the_catalogs_in_file_routes(box, tmp_path, fake_hub):
    [path] = attention_model(tmp_path / "Heads-UD-Q4_K_XL.gguf", arch="qwen3moe",
                             block_count=5, nextn_predict_layers=1)
    publish(fake_hub, [path])
    data = plan(box, f"hf:{REPO}:{path.name}")
    routes = step(data, "routes")
    assert "write launch scripts for heads-ud-q4_k_xl-mtp (MTP in-file" in routes["sentence"]
    script = next(a["after"] for a in routes["actions"]
                  if a["path"].endswith("heads-ud-q4_k_xl-mtp.sh"))
    args = " ".join(script.replace("\\\n", " ").split())
    assert "--spec-type draft-mtp" in args and "--spec-draft-model" not in args


def test_a_split_gguf_is_one_model_planned_and_downloaded(box, tmp_path, fake_hub):
    shards = attention_model(tmp_path / "Split-Q4_K_M.gguf", payload_bytes=PAYLOAD,
                             split_max_tensors=1)
    assert len(shards) == 3
    publish(fake_hub, shards, prefix="Q4_K_M/")
    data = plan(box, f"{REPO}:Q4_K_M")
    model = step(data, "model")
    assert model["status"] == "change", model
    assert [a["filename"] for a in model["actions"]] == [f"Q4_K_M/{p.name}" for p in shards]
    total = sum(p.stat().st_size for p in shards)
    assert f"weights {total / (1 << 30):.1f} GiB" in model["sentence"]
    # only the first shard's header was read, a range of it
    first = fake_hub.files[(REPO, f"Q4_K_M/{shards[0].name}")].sha256
    assert {r.path.split("?")[0] for r in fake_hub.requests_to("cdn")} == {f"/cdn/{first}"}

    applied = ojai("setup", "--root", box, "--llamacpp", "none", "--no-npu", "--model",
                   f"{REPO}:Q4_K_M", "--apply", "--yes")
    assert applied.exit_code == 0, applied.output
    for p in shards:
        assert (box / MODELS / REPO / "Q4_K_M" / p.name).read_bytes() == p.read_bytes()
    script = (box / "opt/ojai/routes/split-q4_k_m-ngram.sh").read_text()
    assert f"/var/lib/ojai/models/{REPO}/Q4_K_M/{shards[0].name}" in script
    again = plan(box, f"{REPO}:Q4_K_M")
    assert step(again, "model")["status"] == "satisfied"


def test_a_file_that_is_not_gguf_is_refused_at_planning(box, fake_hub):
    fake_hub.add_file(REPO, "m-Q4_K_M.gguf", b"Entry not found" * 100)
    data = plan(box, f"{REPO}:Q4_K_M")
    model = step(data, "model")
    assert model["status"] == "blocked"
    assert "m-Q4_K_M.gguf: not a GGUF file" in model["sentence"]
    assert data["exit_code"] == 1


def test_an_architecture_the_build_does_not_know_is_refused_at_planning(box, tmp_path, fake_hub):
    [path] = attention_model(tmp_path / "odd-Q4_K_M.gguf", arch="notanarch")
    publish(fake_hub, [path])
    data = plan(box, f"hf:{REPO}:{path.name}")
    model = step(data, "model")
    assert model["status"] == "blocked"
    assert "is a 'notanarch' model, an architecture the llama-server at " in model["sentence"]
    assert "(0.6.0-dev build 11434 commit abc1234, by build 11434's list) does not know" in model["sentence"]
    ranges = cdn_gets(fake_hub)
    assert ranges and all(r.startswith("bytes=") and not r.endswith("-") for r in ranges)


def test_a_missing_file_names_the_repositorys_models(box, tmp_path, fake_hub):
    [path] = attention_model(tmp_path / "m-Q4_K_M.gguf")
    publish(fake_hub, [path])
    model = step(plan(box, f"hf:{REPO}:m-Q8_0.gguf"), "model")
    assert model["status"] == "blocked"
    assert f"{REPO} has no file m-Q8_0.gguf; its model files: m-Q4_K_M.gguf" in model["sentence"]


def test_the_real_build_knows_architectures_by_its_libllama(llama_server_bin):
    root = Root(llama_server_bin.parents[3])
    binary = "/" + str(llama_server_bin.relative_to(root.path))
    assert architecture_known(root, binary, 11434, "gpt-oss") == (True, "its libllama.so.0.6.0")
    assert architecture_known(root, binary, 11434, "bert")[0] is True  # a tail of nomic-bert
    assert architecture_known(root, binary, 11434, "qwen35moe")[0] is True
    assert architecture_known(root, binary, 11434, "notanarch")[0] is False
    assert architecture_known(root, binary, 11434, "ert")[0] is False


# -- resolving ORG/REPO:QUANT --------------------------------------------------------------------
GPT_OSS = [HubFile(p, 1, "0" * 64) for p in (
    "gpt-oss-20b-F16.gguf", "gpt-oss-20b-Q4_K_M.gguf", "gpt-oss-20b-Q8_0.gguf",
    "gpt-oss-20b-UD-Q4_K_XL.gguf", "mmproj-F16.gguf", "README.md",
    "Q4_K_S/gpt-oss-20b-Q4_K_S-00001-of-00002.gguf",
    "Q4_K_S/gpt-oss-20b-Q4_K_S-00002-of-00002.gguf")]


@pytest.mark.parametrize(("text", "files"), [
    ("unsloth/gpt-oss-20b-GGUF:Q4_K_M", ["gpt-oss-20b-Q4_K_M.gguf"]),
    ("unsloth/gpt-oss-20b-GGUF:q8_0", ["gpt-oss-20b-Q8_0.gguf"]),
    ("unsloth/gpt-oss-20b-GGUF:UD-Q4_K_XL", ["gpt-oss-20b-UD-Q4_K_XL.gguf"]),
    ("unsloth/gpt-oss-20b-GGUF", ["gpt-oss-20b-Q4_K_M.gguf"]),
    ("hf:unsloth/gpt-oss-20b-GGUF:gpt-oss-20b-F16.gguf", ["gpt-oss-20b-F16.gguf"]),
    ("unsloth/gpt-oss-20b-GGUF:Q4_K_S", ["Q4_K_S/gpt-oss-20b-Q4_K_S-00001-of-00002.gguf",
                                          "Q4_K_S/gpt-oss-20b-Q4_K_S-00002-of-00002.gguf"]),
    ("hf:unsloth/gpt-oss-20b-GGUF@v2:Q4_K_S/gpt-oss-20b-Q4_K_S-00002-of-00002.gguf",
     ["Q4_K_S/gpt-oss-20b-Q4_K_S-00001-of-00002.gguf",
      "Q4_K_S/gpt-oss-20b-Q4_K_S-00002-of-00002.gguf"]),
])
def test_files_are_found_as_llama_cpp_finds_them(text, files):
    ref = parse_model_ref(text)
    assert ref is not None and ref.repo == "unsloth/gpt-oss-20b-GGUF"
    assert [f.path for f in pick_files(ref, list(reversed(GPT_OSS)))] == files


def test_references_that_are_not_hub_models_and_the_refusals():
    assert parse_model_ref("gemma-4-26b-a4b") is None
    assert parse_model_ref("o/r@abc:Q4_K_M") == ModelRef("o/r@abc:Q4_K_M", "o/r", "abc", "Q4_K_M")
    with pytest.raises(OwnModelError, match="write hf:ORG/REPO:FILE.gguf"):
        parse_model_ref("hf:not a repo")
    ref = parse_model_ref("o/r:Q4")
    with pytest.raises(OwnModelError, match="3 models of o/r match Q4"):
        pick_files(ref, [HubFile(p, 1, None) for p in ("a-Q4.gguf", "b-Q4.gguf", "c.Q4-x.gguf")])
    with pytest.raises(OwnModelError, match="no shard 00002"):
        pick_files(parse_model_ref("o/r:Q2_K"), [HubFile("m-Q2_K-00001-of-00003.gguf", 1, None),
                                                 HubFile("m-Q2_K-00003-of-00003.gguf", 1, None)])
    with pytest.raises(OwnModelError, match="no model file of o/r matches IQ1_S; its model files: a-Q4"):
        pick_files(parse_model_ref("o/r:IQ1_S"), [HubFile("a-Q4.gguf", 1, None)])
    assert route_name((HubFile("Q4_K_M/Qwen3 Coder-Q4_K_M-00001-of-00002.gguf", 1, None),)) == \
        "qwen3-coder-q4_k_m"


# -- a GGUF file on the machine ------------------------------------------------------------------
def test_a_local_gguf_is_planned_where_it_is_with_nothing_downloaded(box, fake_hub):
    folder = box / "srv/models"
    [path] = attention_model(folder / "Mine-Q5_K_M.gguf", arch="qwen3", block_count=8,
                             payload_bytes=PAYLOAD)
    before = sorted(p.name for p in folder.iterdir())
    data = plan(box, "/srv/models/Mine-Q5_K_M.gguf")
    model = step(data, "model")
    assert model["status"] == "satisfied", model
    assert "mine-q5_k_m: uses /srv/models/Mine-Q5_K_M.gguf where it is" in model["sentence"]
    assert "mine-q5_k_m-ngram at ctx 32768 needs" in model["sentence"]
    routes = step(data, "routes")
    script = next(a["after"] for a in routes["actions"] if a["path"].endswith("mine-q5_k_m.sh"))
    assert "/srv/models/Mine-Q5_K_M.gguf" in script
    assert "sizes from the GGUF files" in routes["sentence"]
    assert not fake_hub.requests  # the Hub is not asked
    assert sorted(p.name for p in folder.iterdir()) == before  # nothing written beside it
    assert not (box / MODELS).exists()


def test_a_local_split_gguf_is_one_model(box):
    shards = attention_model(box / "srv/models/Parts-Q4_K_M.gguf", payload_bytes=PAYLOAD,
                             split_max_tensors=1)
    data = plan(box, f"/srv/models/{shards[1].name}")  # any shard names the model
    model = step(data, "model")
    assert "and its 2 other shard(s) where it is" in model["sentence"], model
    total = sum(p.stat().st_size for p in shards)
    assert f"weights {total / (1 << 30):.1f} GiB" in model["sentence"]
    script = next(a["after"] for a in step(data, "routes")["actions"]
                  if a["path"].endswith("parts-q4_k_m.sh"))
    assert f"/srv/models/{shards[0].name}" in script


def test_local_files_are_refused_in_plain_words(box):
    (box / "srv").mkdir()
    (box / "srv/notes.gguf").write_text("not a model")
    attention_model(box / "srv/odd.gguf", arch="notanarch")
    for model, words in (
            ("/srv/missing.gguf", "no file /srv/missing.gguf on the machine"),
            ("/srv/notes.gguf", "notes.gguf: not a GGUF file (it starts with 6e6f7420"),
            ("/srv/odd.gguf", "is a 'notanarch' model, an architecture"),
            ("models/x.gguf", "give the GGUF file's absolute path on the machine")):
        found = step(plan(box, model), "model")
        assert found["status"] == "blocked" and words in found["sentence"], (model, found)
