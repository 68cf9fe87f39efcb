"""Xet downloads: the real hf_xet client against the hub stand-in's CAS on 127.0.0.1.

For a file the hub serves through Xet, ojai hands the transfer to huggingface_hub's
``xet_get`` (hf_xet: reconstruction terms from the CAS, xorb ranges from its storage,
reassembled into the ``.partial``) and then checks the sha256 itself, as for a plain download.
The stand-in (tests/support/fake_hub.py) speaks the protocol hf_xet 1.8 speaks; no part of
hf_xet is mocked.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from support.fake_hub import COMMIT, XET_ACCESS_TOKEN, FakeHub, fake_hub  # noqa: F401
from support.hub_download import MAIN, REPO, action, dest, leftovers, root  # noqa: F401
from support.progress import RecordingProgress

from ojai_setup.apply.hub import HubError, execute_hub_download
from ojai_setup.core.progress import NullProgress
from ojai_setup.facts.models import verified_digest

#: about nine 64 KiB chunks, so three xorbs
SIZE = 600_000


def content(size: int = SIZE, seed: bytes = b"xet") -> bytes:
    """Bytes that differ from chunk to chunk (so a chunk put in the wrong place shows)."""
    out = bytearray()
    block = seed
    while len(out) < size:
        block = hashlib.sha256(block).digest()
        out += block
    return bytes(out[:size])


@pytest.fixture
def xet_client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """hf_xet as a fresh client for this test, its files under ``tmp_path/xet``.

    hf_xet reads its settings (``HF_XET_*``) when a session is made, so each test gets a
    session of its own: ``HF_XET_CACHE`` for its staging folder (and its log, which it opens
    when first imported: hence the import here, after the variable is set), and one retry
    10 ms later instead of five over minutes, so that a failing CAS fails at once.
    huggingface_hub's cache of Xet tokens is emptied too.
    """
    import huggingface_hub.constants
    import huggingface_hub.utils._xet as hub_xet

    cache = tmp_path / "xet"
    monkeypatch.setenv("HF_XET_CACHE", str(cache))
    monkeypatch.setenv("HF_XET_CLIENT_RETRY_MAX_ATTEMPTS", "1")
    monkeypatch.setenv("HF_XET_CLIENT_RETRY_BASE_DELAY", "10ms")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_XET", False)
    monkeypatch.setattr(hub_xet, "_GLOBAL_XET_HOLDER", hub_xet.XetSessionHolder())
    monkeypatch.setattr(hub_xet, "XET_CONNECTION_INFO_CACHE", {})
    import hf_xet  # noqa: F401
    return cache


@pytest.fixture
def published(fake_hub: FakeHub, xet_client: Path) -> FakeHub:
    fake_hub.add_file(REPO, MAIN, content(), xet=True)
    return fake_hub


def paths(hub: FakeHub, server: str, prefix: str = "/") -> list[str]:
    return [r.path for r in hub.requests_to(server) if r.path.startswith(prefix)]


def test_a_xet_file_comes_through_hf_xet_and_is_verified(published, root, capfd):
    entry = published.files[(REPO, MAIN)]
    progress = RecordingProgress()

    assert execute_hub_download(root, action(), progress) is True

    assert dest(root).read_bytes() == entry.data
    assert verified_digest(dest(root)) == entry.sha256
    assert json.loads(dest(root).with_name(f".{MAIN}.sha256").read_text())["sha256"] == entry.sha256
    assert leftovers(root.path) == []
    # the Xet route: a token from the hub, the terms from the CAS, the bytes from its storage
    assert paths(published, "hub", "/api/models/") == [
        f"/api/models/{REPO}/paths-info/{COMMIT}",
        f"/api/models/{REPO}/xet-read-token/{COMMIT}"]
    [query] = published.requests_to("cas", "GET")[:1]
    assert query.path == f"/v2/reconstructions/{entry.xet_hash}"
    assert query.headers["authorization"] == f"Bearer {XET_ACCESS_TOKEN}"
    assert query.headers["range"] == f"bytes=0-{SIZE - 1}"
    xorbs = {r.path: r.headers.get("range") for r in published.requests_to("cas")
             if r.path.startswith("/xorbs/")}
    layout = published.layout(entry)
    assert len(layout.xorbs) == 3
    assert xorbs == {f"/xorbs/default/{x.hash}": f"bytes=0-{len(x.blob) - 1}" for x in layout.xorbs}
    assert published.requests_to("cdn") == []  # the body never came from the CDN
    assert paths(published, "cas", "/v1/telemetry") == []  # no usage report from hf_xet either
    # the progress: the bytes written, up to the size, then the sha256 read
    download, verify = progress.bars
    assert download.description == f"download {MAIN} (Xet)" and download.total == SIZE
    assert download.completed == SIZE and download.values == sorted(download.values)
    assert download.finished
    assert (verify.description, verify.completed, verify.finished) == (f"verify {MAIN}", SIZE, True)
    # huggingface_hub's progress reporter got a bar it could use: no error in its callbacks
    assert "Traceback" not in capfd.readouterr().err


def test_b_second_run_changes_nothing_and_asks_nobody(published, root):
    assert execute_hub_download(root, action(), NullProgress()) is True
    mtime = dest(root).stat().st_mtime_ns
    published.requests.clear()

    assert execute_hub_download(root, action(), NullProgress()) is False

    assert published.requests == []
    assert dest(root).stat().st_mtime_ns == mtime


def test_c_cas_serving_wrong_bytes_is_a_sha256_mismatch(published, root):
    published.corrupt(REPO, MAIN)
    entry = published.files[(REPO, MAIN)]

    with pytest.raises(HubError) as err:
        execute_hub_download(root, action(), NullProgress())

    bad = hashlib.sha256(entry.body).hexdigest()
    assert str(err.value) == (f"{REPO}:{MAIN}: sha256 mismatch: expected {entry.sha256}, the download has "
                              f"{bad}; the download was deleted")
    assert paths(published, "cas", "/xorbs/") and published.requests_to("cdn") == []
    assert not dest(root).exists()
    assert leftovers(root.path) == []


def test_d_cas_failing_stops_the_download_and_a_rerun_completes(published, root):
    entry = published.files[(REPO, MAIN)]
    published.fail_xorbs(500)

    with pytest.raises(HubError, match=rf"^{REPO}:{MAIN}: the Xet download stopped after \d+ of {SIZE} "
                                       r"bytes \(.*500 Internal Server Error.*\); run again to download it$"):
        execute_hub_download(root, action(), NullProgress())

    assert paths(published, "cas", "/xorbs/")
    assert not dest(root).exists()
    assert verified_digest(dest(root)) is None
    for partial in root.path.rglob("*.partial"):  # what hf_xet wrote is the file's start
        assert entry.data.startswith(partial.read_bytes())

    published.restore()
    published.requests.clear()
    assert execute_hub_download(root, action(), NullProgress()) is True
    assert paths(published, "cas", "/v2/reconstructions/")
    assert dest(root).read_bytes() == entry.data
    assert verified_digest(dest(root)) == entry.sha256
    assert leftovers(root.path) == []


def test_e_without_hf_xet_the_same_file_comes_from_the_cdn(published, root, monkeypatch):
    import ojai_setup.apply.hub as hub

    monkeypatch.setattr(hub, "_xet_available", lambda: False)
    entry = published.files[(REPO, MAIN)]

    assert execute_hub_download(root, action(), NullProgress()) is True

    [get] = published.requests_to("cdn", "GET")
    assert get.path.startswith(f"/cdn/{entry.sha256}")
    assert published.requests_to("cas") == []
    assert paths(published, "hub", f"/api/models/{REPO}/xet-read-token/") == []
    assert dest(root).read_bytes() == entry.data
    assert verified_digest(dest(root)) == entry.sha256


def test_e_without_hf_xet_a_corrupted_cdn_body_is_still_caught(published, root, monkeypatch):
    import ojai_setup.apply.hub as hub

    monkeypatch.setattr(hub, "_xet_available", lambda: False)
    published.corrupt(REPO, MAIN)
    with pytest.raises(HubError, match="sha256 mismatch"):
        execute_hub_download(root, action(), NullProgress())
    assert published.requests_to("cas") == []
    assert not dest(root).exists() and leftovers(root.path) == []


def test_the_token_of_a_private_repo_goes_to_the_token_route_not_to_the_cas(published, root,
                                                                             monkeypatch):
    """A private or gated repo's Xet token is only given for the user's token; the CAS and its
    storage see the CAS token (or none), never the user's."""
    published.token = "hf_testtoken"
    monkeypatch.setenv("HF_TOKEN", "hf_testtoken")

    assert execute_hub_download(root, action(), NullProgress()) is True

    [token_request] = [r for r in published.requests_to("hub") if "/xet-read-token/" in r.path]
    assert token_request.headers.get("authorization") == "Bearer hf_testtoken"
    assert published.requests_to("cas")
    assert all(r.headers.get("authorization") in (None, f"Bearer {XET_ACCESS_TOKEN}")
               for r in published.requests_to("cas"))
    assert dest(root).read_bytes() == published.files[(REPO, MAIN)].data


def test_a_cas_without_the_v2_route_is_read_through_v1(published, root):
    published.xet_v2 = False
    entry = published.files[(REPO, MAIN)]

    assert execute_hub_download(root, action(), NullProgress()) is True

    assert paths(published, "cas", "/v")[:2] == [f"/v2/reconstructions/{entry.xet_hash}",
                                                  f"/v1/reconstructions/{entry.xet_hash}"]
    assert dest(root).read_bytes() == entry.data


def test_the_file_is_asked_for_in_byte_ranges_across_chunk_and_xorb_edges(published, root,
                                                                           monkeypatch):
    """hf_xet asks for the terms of a large file a block of bytes at a time; blocks of 100 000
    bytes start and end inside chunks and xorbs, so the offset into the first chunk, the
    trimmed last term and partial xorb ranges all have to be right for the sha256 to match."""
    monkeypatch.setenv("HF_XET_RECONSTRUCTION_MIN_RECONSTRUCTION_FETCH_SIZE", "100000")
    monkeypatch.setenv("HF_XET_RECONSTRUCTION_MAX_RECONSTRUCTION_FETCH_SIZE", "100000")
    entry = published.files[(REPO, MAIN)]

    assert execute_hub_download(root, action(), NullProgress()) is True

    asked = sorted(r.headers["range"] for r in published.requests_to("cas")
                   if r.path.startswith("/v2/reconstructions/"))
    assert asked == sorted(f"bytes={s}-{min(s + 100_000, SIZE) - 1}" for s in range(0, SIZE, 100_000))
    assert any(not r.headers["range"].startswith("bytes=0-") for r in published.requests_to("cas")
               if r.path.startswith("/xorbs/"))
    assert dest(root).read_bytes() == entry.data


def test_a_short_lived_cas_token_is_refreshed_by_hf_xet(published, root):
    """With under 30 s left, hf_xet asks the token route again itself and reads its JSON."""
    published.xet_token_lifetime = 20

    assert execute_hub_download(root, action(), NullProgress()) is True

    assert len(paths(published, "hub", f"/api/models/{REPO}/xet-read-token/")) == 2
    assert dest(root).read_bytes() == published.files[(REPO, MAIN)].data


def test_a_partial_left_by_a_plain_download_is_rewritten_not_appended_to(published, root):
    entry = published.files[(REPO, MAIN)]
    partial = dest(root).with_name(f".{MAIN}.{entry.sha256[:16]}.partial")
    partial.parent.mkdir(parents=True)
    partial.write_bytes(b"\xff" * 250_000)  # not the file's start: Xet does not resume from it

    assert execute_hub_download(root, action(), NullProgress()) is True

    assert dest(root).read_bytes() == entry.data
    assert leftovers(root.path) == []
