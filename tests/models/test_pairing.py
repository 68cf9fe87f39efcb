"""Pairing proof: a draft head must belong to its main model (GGUF metadata read for real)."""

from __future__ import annotations

import os

import gguf
import pytest
from support.gguf_files import (
    MAIN_HIDDEN,
    OTHER_TOKENS,
    TOKENS,
    gemma4_assistant,
    gemma4_main,
    good_pair,
    qwen35,
)

from ojai_setup.core.root import Root
from ojai_setup.facts.gguf import kept_model_info, kept_path, read_model_info
from ojai_setup.formats.gguf import GGUFError, check_pair


def test_key_names_are_the_converters():
    # llama.cpp's converter writes these keys (gguf-py/gguf/constants.py, conversion/gemma.py)
    assert gguf.Keys.LLM.EMBEDDING_LENGTH_OUT.format(arch="gemma4-assistant") == "gemma4-assistant.embedding_length_out"
    assert gguf.Keys.LLM.NEXTN_PREDICT_LAYERS.format(arch="qwen35") == "qwen35.nextn_predict_layers"


def test_read_model_info(tmp_path):
    main, draft = good_pair(tmp_path)
    m, d = read_model_info(main), read_model_info(draft)
    assert (m.architecture, m.embedding_length, m.block_count) == ("gemma4", MAIN_HIDDEN, 6)
    assert m.head_count_kv == (4, 4, 4, 4, 4, 1)
    assert m.token_count == len(TOKENS) and m.file_size == main.stat().st_size
    assert (d.architecture, d.embedding_length_out, d.nextn_predict_layers) == ("gemma4-assistant", MAIN_HIDDEN, 2)
    assert m.tokens_sha256 == d.tokens_sha256


def test_good_pair_ok(tmp_path):
    main, draft = good_pair(tmp_path)
    verdict = check_pair(read_model_info(main), read_model_info(draft), "sidecar")
    assert verdict.ok and verdict.reasons == ()


def test_different_tokenizers_rejected(tmp_path):
    main = read_model_info(gemma4_main(tmp_path / "main.gguf"))
    draft = read_model_info(gemma4_assistant(tmp_path / "mtp.gguf", tokens=OTHER_TOKENS))
    verdict = check_pair(main, draft, "sidecar")
    assert not verdict.ok
    assert len(verdict.reasons) == 1 and verdict.reasons[0].startswith("tokenizers differ")


def test_underscore_architecture_rejected_with_upstream_reason(tmp_path):
    main = read_model_info(gemma4_main(tmp_path / "main.gguf"))
    draft = read_model_info(gemma4_assistant(tmp_path / "mtp.gguf", arch="gemma4_assistant"))
    verdict = check_pair(main, draft, "sidecar")
    assert not verdict.ok
    assert "'gemma4_assistant' (underscore) does not load in upstream llama.cpp" in verdict.reasons[0]
    assert "'gemma4-assistant' (hyphen)" in verdict.reasons[0]


def test_hidden_size_mismatch_rejected(tmp_path):
    main = read_model_info(gemma4_main(tmp_path / "main.gguf"))
    draft = read_model_info(gemma4_assistant(tmp_path / "mtp.gguf", target_hidden=MAIN_HIDDEN * 2))
    verdict = check_pair(main, draft, "sidecar")
    assert verdict.reasons == (f"mtp.gguf: drafts for hidden size {MAIN_HIDDEN * 2}, but main.gguf has hidden "
                               f"size {MAIN_HIDDEN}: it was trained for another main model",)


def test_sidecar_route_without_draft_rejected(tmp_path):
    main = read_model_info(gemma4_main(tmp_path / "main.gguf"))
    verdict = check_pair(main, None, "sidecar")
    assert not verdict.ok and "needs an MTP sidecar" in verdict.reasons[0]


def test_draft_given_as_main_rejected(tmp_path):
    draft = read_model_info(gemma4_assistant(tmp_path / "mtp.gguf"))
    verdict = check_pair(draft, draft, "sidecar")
    assert "is itself a gemma4-assistant draft head" in verdict.reasons[0]


def test_in_file_heads_ok(tmp_path):
    verdict = check_pair(read_model_info(qwen35(tmp_path / "q.gguf", nextn_predict_layers=1)), None, "in_file")
    assert verdict.ok


def test_in_file_model_without_nextn_rejected(tmp_path):
    info = read_model_info(qwen35(tmp_path / "q.gguf", nextn_predict_layers=None))
    assert info.nextn_predict_layers == 0
    verdict = check_pair(info, None, "in_file")
    assert verdict.reasons == ("q.gguf: no MTP heads inside the file (qwen35.nextn_predict_layers is 0 or "
                               "missing); use the repository's MTP build of this model",)


def test_in_file_route_refuses_a_draft_file(tmp_path):
    main = read_model_info(qwen35(tmp_path / "q.gguf"))
    draft = read_model_info(gemma4_assistant(tmp_path / "mtp.gguf"))
    verdict = check_pair(main, draft, "in_file")
    assert not verdict.ok and "takes no draft file" in verdict.reasons[0]


def test_not_a_gguf_names_the_file(tmp_path):
    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"<html>rate limited</html>")
    with pytest.raises(GGUFError, match=str(bogus)):
        read_model_info(bogus)
    with pytest.raises(GGUFError, match="cannot read"):
        read_model_info(tmp_path / "absent.gguf")


def test_kept_info_lives_in_the_state_folder_and_follows_a_rewritten_file(tmp_path):
    root = Root(tmp_path / "machine")
    models = root.resolve("/var/lib/ojai/models")
    models.mkdir(parents=True)
    path = gemma4_assistant(models / "mtp.gguf")
    first, note = kept_model_info(root, path)
    assert note is None and first == read_model_info(path)
    kept = kept_path(root, path)
    assert kept.parent == root.resolve("/var/lib/ojai/gguf") and kept.is_file()
    assert sorted(p.name for p in models.iterdir()) == ["mtp.gguf"]  # nothing beside the model
    # the kept copy is what is read while the file is unchanged
    kept.write_text(kept.read_text().replace(first.tokens_sha256, "0" * 64))
    assert kept_model_info(root, path)[0].tokens_sha256 == "0" * 64
    gemma4_assistant(path, tokens=OTHER_TOKENS)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    again, note = kept_model_info(root, path)
    assert note is None and again.tokens_sha256 not in (first.tokens_sha256, "0" * 64)


def test_a_kept_copy_that_cannot_be_used_or_written_is_said(tmp_path):
    root = Root(tmp_path / "machine")
    path = gemma4_assistant(tmp_path / "mtp.gguf")
    kept = kept_path(root, path)
    kept.parent.mkdir(parents=True)
    kept.write_text("{not json")
    info, note = kept_model_info(root, path)
    assert info == read_model_info(path)
    assert note == f"the model's kept metadata {kept} is damaged; read the model again"
    assert kept_model_info(root, path) == (info, None)  # written anew
    kept.unlink()
    kept.parent.rmdir()
    kept.parent.write_text("")  # the state folder's gguf/ is a file: nothing can be kept
    info, note = kept_model_info(root, path)
    assert info == read_model_info(path)
    assert note.startswith(f"cannot keep the model's metadata in {kept} (")
    assert note.endswith("): it is read again each time")


# -- a separate draft model, and n-gram drafting ---------------------------------------------
def test_a_draft_model_of_the_same_vocabulary_pairs(tmp_path):
    from support.tiny_models import write_draft_pair

    pair = write_draft_pair(tmp_path)
    assert pair.draft is not None
    main, draft = read_model_info(pair.main), read_model_info(pair.draft)
    assert main.architecture == draft.architecture == "llama" and main.file_size != draft.file_size
    verdict = check_pair(main, draft, "draft_model")
    assert verdict.ok and verdict.applicable and verdict.reasons == ()
    # the model drafting for itself
    assert check_pair(main, main, "draft_model").ok


def test_a_draft_model_of_another_vocabulary_is_refused(tmp_path):
    main = read_model_info(gemma4_main(tmp_path / "main.gguf"))
    other = read_model_info(gemma4_main(tmp_path / "other.gguf", tokens=OTHER_TOKENS))
    verdict = check_pair(main, other, "draft_model")
    assert not verdict.ok
    assert len(verdict.reasons) == 1 and verdict.reasons[0].startswith("vocabularies differ")
    assert "other.gguf" in verdict.reasons[0]


def test_an_mtp_head_is_not_a_draft_model(tmp_path):
    main, sidecar = good_pair(tmp_path)
    verdict = check_pair(read_model_info(main), read_model_info(sidecar), "draft_model")
    assert not verdict.ok
    assert any("is an MTP draft head (gemma4-assistant)" in r for r in verdict.reasons)
    missing = check_pair(read_model_info(main), None, "draft_model")
    assert not missing.ok and "none was given" in missing.reasons[0]


def test_ngram_drafting_has_no_pair_to_prove(tmp_path):
    main = read_model_info(qwen35(tmp_path / "q.gguf", nextn_predict_layers=None))
    verdict = check_pair(main, None, "ngram")
    assert verdict.ok and not verdict.applicable
    assert verdict.reasons[0].startswith("not applicable: n-gram drafting")
    draft = read_model_info(gemma4_main(tmp_path / "d.gguf"))
    assert not check_pair(main, draft, "ngram").ok


def test_bench_checks_the_pair_a_route_record_names(tmp_path):
    """bench runs on routes of every kind: it proves a draft model's pair and says that n-gram
    drafting has none."""
    from ojai_setup.measure.command import BenchError, check_route_pair
    from ojai_setup.core.root import Root

    gemma4_main(tmp_path / "models/main.gguf")
    other = gemma4_main(tmp_path / "models/other.gguf", tokens=OTHER_TOKENS)
    root = Root(tmp_path)
    assert check_route_pair(root, {"main": "/models/main.gguf", "pairing": "ngram"}) == (
        "not applicable: n-gram drafting drafts from the text itself (no draft model, nothing to pair)")
    assert check_route_pair(root, {"main": "/models/main.gguf", "pairing": "ngram",
                                   "spec_type": "ngram-mod"}).startswith("not applicable: ngram-mod")
    assert "main.gguf drafts for itself (tokenizer and token list checked)" in check_route_pair(
        root, {"main": "/models/main.gguf", "draft": "/models/main.gguf", "pairing": "draft_model"})
    with pytest.raises(BenchError, match="vocabularies differ"):
        check_route_pair(root, {"main": "/models/main.gguf", "draft": f"/models/{other.name}",
                                "pairing": "draft_model"})
