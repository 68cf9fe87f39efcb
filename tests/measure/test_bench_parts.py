"""ojai bench's pure parts: launch scripts read back and changed, prompt files."""

from __future__ import annotations


import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ojai_setup.measure.prompts import PromptFileError, load_prompts
from ojai_setup.measure.servers import BenchError, LaunchScript, set_flag
from ojai_setup.domain.launch import render_llama_script

args = st.lists(st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), min_size=1,
                        max_size=12), max_size=8)


@settings(deadline=None)
@given(args, st.dictionaries(st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True),
                             st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), max_size=8),
                             max_size=2))
def test_a_rendered_launch_script_reads_back_exactly(argv, env):
    text = render_llama_script("/opt/llama/llama-server", ["--port", "8080", *argv], env, "r-mtp", bundled_libs=True)
    script = LaunchScript.parse(text)
    assert script.argv == ("/opt/llama/llama-server", "--port", "8080", *argv)
    assert "LD_LIBRARY_PATH" in script.preamble
    assert LaunchScript.parse(script.render()) == script


def test_flags_are_set_replaced_and_removed():
    argv = ("srv", "-m", "a.gguf", "--port", "1", "--spec-draft-n-max", "2")
    assert set_flag(argv, ("--port",), "9") == ("srv", "-m", "a.gguf", "--port", "9", "--spec-draft-n-max", "2")
    assert set_flag(argv, ("--spec-synth-rates",), "0.5") == (*argv, "--spec-synth-rates", "0.5")
    assert set_flag(argv, ("--spec-draft-n-max",), None) == ("srv", "-m", "a.gguf", "--port", "1")
    assert LaunchScript("", argv).value("-m", "--model") == "a.gguf"


def test_a_script_without_exec_is_refused():
    with pytest.raises(BenchError, match="no 'exec' line"):
        LaunchScript.parse("#!/bin/sh\nllama-server -m x\n", "x.sh")


def test_prompt_files(tmp_path):
    jl = tmp_path / "p.jsonl"
    jl.write_text('{"id": "a", "prompt": "one"}\n\n{"prompt": "two"}\n')
    assert [(p.id, p.text) for p in load_prompts(jl)] == [("a", "one"), ("p2", "two")]
    txt = tmp_path / "p.txt"
    txt.write_text("first\nprompt\n\n\nsecond\n")
    assert [p.text for p in load_prompts(txt)] == ["first\nprompt", "second"]
    jl.write_text('{"id": "a", "prompt": "one"}\nnot json\n')
    with pytest.raises(PromptFileError, match=r"p.jsonl:2: not JSON"):
        load_prompts(jl)
    jl.write_text('{"id": "a", "prompt": "x"}\n{"id": "a", "prompt": "y"}\n')
    with pytest.raises(PromptFileError, match="repeated: a"):
        load_prompts(jl)
    (tmp_path / "e.txt").write_text("\n\n")
    with pytest.raises(PromptFileError, match="no prompts"):
        load_prompts(tmp_path / "e.txt")
