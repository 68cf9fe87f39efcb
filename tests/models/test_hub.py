"""Verified model downloads against a local hub stand-in (tests/support/fake_hub.py)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from huggingface_hub import HfApi, hf_hub_download
from support.fake_hub import COMMIT, FakeHub, fake_hub  # noqa: F401
from support.gguf_files import gemma4_assistant, gemma4_main
from support.hub_download import MAIN, MODELS, REPO, action, dest, leftovers, root  # noqa: F401

from ojai_setup.apply.executor import executor_for, verify_action
from ojai_setup.apply.hub import HubError, execute_hub_download, remote_file_info
from ojai_setup.core.progress import NullProgress
from ojai_setup.domain.catalog import Route
from ojai_setup.facts.models import (
    plan_model_downloads,
    verified_digest,
    verify_local_pair,
)

DRAFT = "mtp-gemma-4-tiny-it.gguf"


@pytest.fixture
def published(tmp_path: Path, fake_hub: FakeHub) -> FakeHub:
    """The hub serves a matched pair; the main file is large enough to cut part way."""
    src = tmp_path / "published"
    fake_hub.add_path(REPO, MAIN, gemma4_main(src / MAIN, payload_bytes=200_000))
    fake_hub.add_path(REPO, DRAFT, gemma4_assistant(src / DRAFT))
    return fake_hub


def route(**changes: object) -> Route:
    return Route.model_validate({
        "name": "gemma-4-tiny", "title": "tiny", "repo": REPO, "mtp": "sidecar",
        "main": [{"file": MAIN, "size": 200_000}], "draft": {"file": DRAFT, "size": 4_000},
        "lemonade_checkpoint": f"{REPO}:Q4_K_M", "lemonade_draft_checkpoint": f"{REPO}:{DRAFT}",
        "kv": {"full_layers": 1, "full_kv_heads": 1, "full_head_dim": 64},
        "context_size": 4096, "max_context": 8192, "sizes_estimated": True, **changes,
    })


def test_stand_in_answers_huggingface_hub_itself(published, tmp_path):
    info = HfApi(endpoint=published.url).model_info(REPO, files_metadata=True)
    siblings = {s.rfilename: s for s in info.siblings}
    assert info.sha == COMMIT
    assert siblings[MAIN].lfs.sha256 == published.files[(REPO, MAIN)].sha256
    got = hf_hub_download(REPO, DRAFT, local_dir=tmp_path / "plain", endpoint=published.url)
    assert Path(got).read_bytes() == published.files[(REPO, DRAFT)].data


def test_remote_file_info_gives_lfs_sha256_and_size(published):
    entry = published.files[(REPO, MAIN)]
    assert remote_file_info(REPO, MAIN) == (entry.sha256, len(entry.data))
    assert published.requests_to("hub", "POST")[0].path == f"/api/models/{REPO}/paths-info/main"
    with pytest.raises(HubError, match="no such file in the repository"):
        remote_file_info(REPO, "absent.gguf")


def test_plan_download_verify_and_replan(published, root):
    r = route()
    actions = plan_model_downloads(root, r, MODELS)
    assert [(a.filename, a.reason, a.size) for a in actions] == [
        (MAIN, f"gemma-4-tiny: {MAIN} missing (about 200000 bytes)", None),
        (DRAFT, f"gemma-4-tiny: {DRAFT} missing (about 4000 bytes)", None)]
    assert actions[0].dest == f"{MODELS}/{REPO}/{MAIN}" and not actions[0].needs_root
    assert verify_local_pair(root, r, MODELS)[0].reasons == tuple(
        f"{MODELS}/{REPO}/{n}: missing; `ojai setup --apply` downloads it" for n in (MAIN, DRAFT))

    assert all(execute_hub_download(root, a, NullProgress()) for a in actions)

    for name in (MAIN, DRAFT):
        data = published.files[(REPO, name)].data
        assert dest(root, name).read_bytes() == data
        assert verified_digest(dest(root, name)) == hashlib.sha256(data).hexdigest()
    assert leftovers(root.path) == []
    assert plan_model_downloads(root, r, MODELS) == []
    verdict, note = verify_local_pair(root, r, MODELS)
    assert verdict.ok and note is None


def test_second_call_is_a_noop_without_any_request(published, root):
    assert execute_hub_download(root, action(), NullProgress()) is True
    published.requests.clear()
    assert execute_hub_download(root, action(), NullProgress()) is False
    assert published.requests == []


def test_present_unverified_file_is_hashed_not_downloaded(published, root):
    dest(root).parent.mkdir(parents=True)
    dest(root).write_bytes(published.files[(REPO, MAIN)].data)
    [planned, _] = plan_model_downloads(root, route(), MODELS)
    assert planned.reason == f"gemma-4-tiny: {MAIN} present, but not yet checked against the hub's sha256 (about 200000 bytes)"
    assert execute_hub_download(root, planned, NullProgress()) is False
    assert published.requests_to("cdn") == []
    assert verified_digest(dest(root)) == published.files[(REPO, MAIN)].sha256


def test_present_wrong_file_is_replaced(published, root):
    dest(root).parent.mkdir(parents=True)
    dest(root).write_bytes(b"an older upload")
    assert execute_hub_download(root, action(), NullProgress()) is True
    assert dest(root).read_bytes() == published.files[(REPO, MAIN)].data


def test_corrupted_download_is_deleted_with_the_reason(published, root):
    published.corrupt(REPO, MAIN)
    entry = published.files[(REPO, MAIN)]
    with pytest.raises(HubError) as err:
        execute_hub_download(root, action(), NullProgress())
    bad = hashlib.sha256(entry.body).hexdigest()
    assert str(err.value) == (f"{REPO}:{MAIN}: sha256 mismatch: expected {entry.sha256}, the download has "
                              f"{bad}; the download was deleted")
    assert not dest(root).exists()
    assert leftovers(root.path) == []


def test_pinned_sha256_is_checked_too(published, root):
    with pytest.raises(HubError, match="sha256 mismatch: expected 0{64}"):
        execute_hub_download(root, action(sha256="0" * 64), NullProgress())
    assert not dest(root).exists()


def test_exact_sizes_are_planned_and_checked_before_downloading(published, root):
    size = len(published.files[(REPO, MAIN)].data)
    exact = route(sizes_estimated=False, main=[{"file": MAIN, "size": size}])
    [planned, _] = plan_model_downloads(root, exact, MODELS)
    assert planned.size == size and planned.reason == f"gemma-4-tiny: {MAIN} missing"
    with pytest.raises(HubError, match=f"the hub serves {size} bytes, the plan expected {size + 1}"):
        execute_hub_download(root, action(size=size + 1), NullProgress())
    assert published.requests_to("cdn") == []
    assert execute_hub_download(root, planned, NullProgress()) is True
    assert verify_action(root, planned) is None


def test_the_executor_finds_this_executor():
    assert executor_for("hub_download") is execute_hub_download


def test_interrupted_download_resumes_on_the_next_call(published, root, tmp_path):
    # huggingface_hub writes in 10 MiB chunks, so the file is cut after more than one chunk
    big = "gemma-4-big-it-Q4_K_M.gguf"
    entry = published.add_path(REPO, big, gemma4_main(tmp_path / big, payload_bytes=12 << 20))
    published.cut_next_download(after=11 << 20)
    with pytest.raises(HubError, match=r"download stopped after \d+ of \d+ bytes .*run again to resume it"):
        execute_hub_download(root, action(big), NullProgress())
    [partial] = root.path.rglob("*.partial")
    kept = partial.stat().st_size
    assert partial.name == f".{big}.{entry.sha256[:16]}.partial"
    assert 0 < kept < len(entry.data)
    assert entry.data.startswith(partial.read_bytes())
    assert not dest(root, big).exists()

    published.restore()
    published.requests.clear()
    assert execute_hub_download(root, action(big), NullProgress()) is True
    [get] = published.requests_to("cdn", "GET")
    assert get.headers.get("range") == f"bytes={kept}-"
    assert dest(root, big).read_bytes() == entry.data
    assert leftovers(root.path) == []


def test_a_full_disk_says_how_much_of_the_download_it_kept(published, root, tmp_path,
                                                           monkeypatch):
    """The disk fills up after 1 MiB of an 8 MiB download, in the middle of a 4 MiB block (the
    kernel writes what fits, then says ENOSPC, as os.write below does): the message counts the
    MiB the partial file keeps, not 0, says how much more to free, and the next run resumes
    from it to the right file."""
    import errno
    import os

    big = "gemma-4-big-it-Q4_K_M.gguf"
    entry = published.add_path(REPO, big, gemma4_main(tmp_path / big, payload_bytes=8 << 20))
    size, room = len(entry.data), [1 << 20]
    real_write = os.write

    def write(fd: int, data) -> int:  # a disk with 1 MiB free, for the download's file only
        if not os.readlink(f"/proc/self/fd/{fd}").endswith(".partial"):
            return real_write(fd, data)
        if not room[0]:
            raise OSError(errno.ENOSPC, "No space left on device")
        n = real_write(fd, bytes(data[:room[0]]))
        room[0] -= n
        return n

    monkeypatch.setattr(os, "write", write)
    with pytest.raises(HubError) as stopped:
        execute_hub_download(root, action(big), NullProgress())
    said = str(stopped.value)
    assert f"download stopped after {1 << 20} of {size} bytes (" in said, said
    assert "No space left on device" in said and f"free {size - (1 << 20)} bytes or more" in said
    [partial] = root.path.rglob("*.partial")
    assert partial.read_bytes() == entry.data[:1 << 20]
    room[0] = 1 << 40  # room again: the next run resumes from the MiB kept
    published.requests.clear()
    assert execute_hub_download(root, action(big), NullProgress()) is True
    [get] = published.requests_to("cdn", "GET")
    assert get.headers.get("range") == f"bytes={1 << 20}-"
    assert dest(root, big).read_bytes() == entry.data


def test_a_download_is_hashed_as_it_is_written_not_read_again(published, root, tmp_path,
                                                               monkeypatch):
    """The sha256 is taken from the bytes on their way to the file: no second read of a
    finished download, and after an interruption only the part kept is read, once."""
    import ojai_setup.apply.hub as hub

    reads: list[int] = []
    real = hub._hash_file
    monkeypatch.setattr(hub, "_hash_file", lambda path, *a: reads.append(path.stat().st_size)
                        or real(path, *a))
    big = "gemma-4-big-it-Q4_K_M.gguf"
    entry = published.add_path(REPO, big, gemma4_main(tmp_path / big, payload_bytes=3 << 20))
    published.cut_next_download(after=1 << 20)
    with pytest.raises(HubError, match="the connection closed before the end"):
        execute_hub_download(root, action(big), NullProgress())
    published.restore()
    assert execute_hub_download(root, action(big), NullProgress()) is True
    assert execute_hub_download(root, action(MAIN), NullProgress()) is True
    assert reads == []  # neither file was read back to be hashed
    assert dest(root, big).read_bytes() == entry.data
    assert json.loads(dest(root, big).with_name(f".{big}.sha256").read_text())["sha256"] == \
        entry.sha256


def test_small_disk_refused_before_download(published, root, monkeypatch):
    size = len(published.files[(REPO, MAIN)].data)
    monkeypatch.setenv("OJAI_DISK_BUDGET_BYTES", str(size - 1))
    with pytest.raises(HubError, match=f"not enough disk space in {MODELS}/{REPO}: the download needs "
                                       f"{size} bytes, {size - 1} bytes is free"):
        execute_hub_download(root, action(), NullProgress())
    assert published.requests_to("cdn") == []
    with pytest.raises(HubError, match="not enough disk space"):
        execute_hub_download(root, action(), NullProgress(), disk_budget=10)
    monkeypatch.setenv("OJAI_DISK_BUDGET_BYTES", str(size))
    assert execute_hub_download(root, action(), NullProgress()) is True


def test_token_goes_to_the_hub_not_the_cdn(published, root, monkeypatch):
    published.token = "hf_testtoken"
    monkeypatch.setenv("HF_TOKEN", "hf_testtoken")
    assert execute_hub_download(root, action(DRAFT), NullProgress()) is True
    assert all(r.headers.get("authorization") == "Bearer hf_testtoken" for r in published.requests_to("hub"))
    assert all("authorization" not in r.headers for r in published.requests_to("cdn"))


def test_offline_mode(published, root, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(HubError, match="HF_HUB_OFFLINE is set"):
        execute_hub_download(root, action(), NullProgress())
    assert published.requests == []
    monkeypatch.delenv("HF_HUB_OFFLINE")
    execute_hub_download(root, action(), NullProgress())
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert execute_hub_download(root, action(), NullProgress()) is False


def test_verify_local_pair_reports_a_mismatched_draft(published, root, tmp_path):
    for a in plan_model_downloads(root, route(), MODELS):
        execute_hub_download(root, a, NullProgress())
    gemma4_assistant(dest(root, DRAFT), target_hidden=128)
    verdict, _ = verify_local_pair(root, route(), MODELS)
    assert not verdict.ok and "drafts for hidden size 128" in verdict.reasons[0]
    # the rewritten draft no longer matches its verified-digest record, so it is planned again
    assert [a.filename for a in plan_model_downloads(root, route(), MODELS)] == [DRAFT]
