"""The two pure parts of the review's shape: a step's sentence cut into its head and details
(:func:`clauses`), and text wrapped with a hanging indent (:func:`wrap`, :meth:`Terminal.entry`):
nothing is lost or reordered, no line is wider than it may be, no line leaves the indent."""

from __future__ import annotations

import io
import re

from hypothesis import given, settings, strategies as st
from rich.text import Text

from ojai_setup.commands.setup_views import clauses
from ojai_setup.commands.terminal import Terminal, wrap

WORDS = st.lists(st.text(alphabet="abcdefghij()/;.`:-=", min_size=1, max_size=30), min_size=1,
                 max_size=40)


@given(WORDS, st.integers(10, 80), st.integers(10, 80))
@settings(max_examples=200, deadline=None)
def test_wrap_keeps_every_word_in_order_and_within_the_width(words, first, rest):
    text = " ".join(words)
    lines = [line.plain for line in wrap(Text(text), first, rest)]
    assert "".join("".join(lines).split()) == "".join(text.split())  # nothing lost or moved
    # a line is within its width, or it is one word (or one `command`) too long for any line
    tokens = re.findall(r"`[^`\n]*`\S*|\S+", text)
    assert all(len(line) <= (first if i == 0 else rest) or line in tokens
               for i, line in enumerate(lines)), lines
    assert all(line == line.strip() and line for line in lines)
    # and no word is cut: each line is whole words of the text
    assert sum(len(re.findall(r"`[^`\n]*`\S*|\S+", line)) for line in lines) <= len(tokens)


def test_a_word_longer_than_a_line_is_never_cut_and_a_command_stays_whole():
    url = "https://rocm.docs.amd.com/projects/radeon-ryzen/en/latest/docs/install/x.html"
    text = f"see {url} then run `ojai setup --root /tmp/a-machine --apply` and reboot"
    lines = [line.plain for line in wrap(Text(text), 30, 30)]
    assert url in lines  # its own line, whole, past the edge
    assert any("`ojai setup --root /tmp/a-machine --apply`" in line for line in lines), lines


def test_clauses_cut_at_semicolons_and_sentences_outside_brackets_and_quotes():
    sentence = ("set the limit to 48 GiB (ttm.pages_limit=1; in grub) in /etc/default/grub; "
                "active now: 31.6 GiB. Run `a; b` first")
    assert clauses(sentence) == ["set the limit to 48 GiB (ttm.pages_limit=1; in grub) in "
                                 "/etc/default/grub;", "active now: 31.6 GiB.",
                                 "Run `a; b` first"]
    assert " ".join(clauses(sentence)) == sentence
    assert clauses("version 1.2.3 is installed. v2.0 next") == ["version 1.2.3 is installed. v2.0 next"]


def test_entry_hangs_every_line_after_the_first_at_its_indent(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    monkeypatch.setenv("NO_COLOR", "1")
    out = io.StringIO()
    term = Terminal(stdout=out)
    term.entry("  change  ", "gpu-memory: set the GPU memory limit to 48 GiB "
               "(ttm.pages_limit=12582912) in /etc/default/grub and "
               "https://example.org/a/very/long/address/that/is/longer/than/a/line",
               hang=10)
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("  change  gpu-memory:")
    assert len(lines) > 3
    url = "https://example.org/a/very/long/address/that/is/longer/than/a/line"
    assert " " * 10 + url in lines  # too long for a line: its own, whole, to be copied
    assert all(line.startswith(" " * 10) and (len(line) <= 40 or line.strip() == url)
               for line in lines[1:]), lines
