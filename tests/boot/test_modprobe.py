"""Reading and editing modprobe.d ``options`` lines by key.

The expected readings of the tricky files below (continuation lines, ``#`` in the middle of a
line, escaped characters, a continued comment) are what kmod 30's ``modprobe -C DIR -c``
prints for them.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ojai_setup.formats.modprobe import (
    ModprobeEditError,
    kmod_order,
    module_option_settings,
    parse_modprobe_conf,
    remove_module_option,
    set_module_option,
)

GIB48 = str(48 * 262144)

# What AMD's amd-ttm (amd-debug-tools, src/amd_debug/ttm.py) writes to /etc/modprobe.d/ttm.conf
AMD_TTM = "options ttm pages_limit=31457280\n"
# A guide's /etc/modprobe.d/amdgpu_llm_optimized.conf
GUIDE = (
    "options amdgpu gttsize=131072\n"
    "options ttm pages_limit=33554432\n"
    "options ttm page_pool_size=33554432\n"
)
# A guide's /etc/modprobe.d/99-strix-halo-llm.conf: the "# ..." parts are NOT comments to kmod
INLINE_HASH = (
    "# /etc/modprobe.d/99-strix-halo-llm.conf\n"
    "options amdgpu gttsize=117760                          # ~115 GiB in MiB\n"
    "options ttm pages_limit=30146560 page_pool_size=30146560   # same, in 4 KiB pages\n"
)


def settings_of(
    text: str, module: str = "ttm", key: str = "pages_limit"
) -> list[tuple[int, str | None]]:
    return [(s.line, s.value) for s in module_option_settings([("f.conf", text)], module, key)]


def test_amd_ttm_file():
    assert settings_of(AMD_TTM) == [(1, "31457280")]
    after = set_module_option(AMD_TTM, "ttm", "pages_limit", GIB48)
    assert after == f"options ttm pages_limit={GIB48}\n"
    assert set_module_option(after, "ttm", "pages_limit", GIB48) == after
    assert remove_module_option(after, "ttm", "pages_limit") == ""
    assert settings_of(AMD_TTM, "amdttm") == []


def test_guide_file_changes_one_line():
    after = set_module_option(GUIDE, "ttm", "pages_limit", GIB48)
    assert after == GUIDE.replace("pages_limit=33554432", f"pages_limit={GIB48}")
    removed = remove_module_option(after, "amdgpu", "gttsize")
    assert removed == after.replace("options amdgpu gttsize=131072\n", "")
    assert settings_of(removed, "ttm", "page_pool_size") == [(2, "33554432")]


def test_a_hash_in_the_middle_of_a_line_is_an_option_to_kmod():
    (amdgpu, ttm) = parse_modprobe_conf(INLINE_HASH)
    assert [o.text for o in ttm.options] == [
        "pages_limit=30146560",
        "page_pool_size=30146560",
        "#",
        "same,",
        "in",
        "4",
        "KiB",
        "pages",
    ]
    assert ttm.line == 3 and amdgpu.module == "amdgpu"
    after = set_module_option(INLINE_HASH, "ttm", "pages_limit", GIB48)
    assert after == INLINE_HASH.replace("pages_limit=30146560", f"pages_limit={GIB48}")


def test_continuations_duplicates_and_other_modules():
    text = (
        "options ttm a=1 pages_limit=2 \\\n"
        "   pages-limit=3 b=4\n"
        "options amdttm pages_limit=9\n"
        "options ttm pages_limit=7\n"
    )
    # kmod: "options ttm a=1 pages_limit=2    pages-limit=3 b=4", "options amdttm ...", ...
    assert settings_of(text) == [(1, "2"), (1, "3"), (4, "7")]
    assert settings_of(text, "amdttm") == [(3, "9")]
    after = set_module_option(text, "ttm", "pages_limit", "5")
    assert after == "options ttm a=1 pages_limit=5 b=4\noptions amdttm pages_limit=9\n"
    assert settings_of(after) == [(1, "5")]
    assert remove_module_option(text, "ttm", "pages_limit") == (
        "options ttm a=1 b=4\noptions amdttm pages_limit=9\n"
    )
    assert remove_module_option(text, "amdttm", "pages_limit") == (
        "options ttm a=1 pages_limit=2 \\\n   pages-limit=3 b=4\noptions ttm pages_limit=7\n"
    )


def test_joined_lines_read_as_kmod_reads_them():
    text = (
        "# comment \\\n"
        "options ttm hidden=1\n"
        'options ttm e\\=1 q="a b" \n'
        "  # indented\n"
        "  options ttm indented=1\n"
        "options ttm\n"
        "options amd-ttm x=1\n"
        "blacklist ttm\n"
        "options ttm pages_lim\\\n"
        "it=3\n"
    )
    found = [(e.line, e.module, [o.text for o in e.options]) for e in parse_modprobe_conf(text)]
    assert found == [
        (3, "ttm", ["e=1", 'q="a b"']),
        (5, "ttm", ["indented=1"]),
        (6, "ttm", []),
        (7, "amd_ttm", ["x=1"]),
        (9, "ttm", ["pages_limit=3"]),
    ]
    assert settings_of(text, "ttm", "q") == [(3, "a b")]
    after = set_module_option(text, "ttm", "pages_limit", "5")
    assert after == text.replace("pages_lim\\\nit=3", "pages_limit=5")


def test_adding_a_key():
    assert set_module_option("", "ttm", "pages_limit", "5") == "options ttm pages_limit=5\n"
    assert set_module_option("blacklist foo", "ttm", "pages_limit", "5") == (
        "blacklist foo\noptions ttm pages_limit=5\n"
    )
    text = "options ttm page_pool_size=8  \n# keep\n"
    assert set_module_option(text, "ttm", "pages_limit", "5") == (
        "options ttm page_pool_size=8 pages_limit=5  \n# keep\n"
    )
    assert set_module_option("options ttm\n", "ttm", "pages_limit", "5") == (
        "options ttm\noptions ttm pages_limit=5\n"
    )


def test_removing_from_the_middle_and_the_front():
    text = "options ttm pages_limit=1 pages_limit=2 a=1 pages_limit=3\n"
    assert remove_module_option(text, "ttm", "pages_limit") == "options ttm a=1\n"
    assert set_module_option(text, "ttm", "pages_limit", "4") == "options ttm pages_limit=4 a=1\n"
    assert remove_module_option(text, "ttm", "other") == text


def test_kmod_order():
    paths = [
        "/lib/modprobe.d/aliases.conf",
        "/usr/lib/modprobe.d/50-ttm.conf",
        "/etc/modprobe.d/50-ttm.conf",
        "/etc/modprobe.d/ttm.conf",
        "/etc/modprobe.d/notes.txt",
        "/etc/modprobe.d/.hidden.conf",
        "/run/modprobe.d/00-early.conf",
        "/etc/other/x.conf",
    ]
    assert kmod_order(paths) == [
        "/run/modprobe.d/00-early.conf",
        "/etc/modprobe.d/50-ttm.conf",
        "/lib/modprobe.d/aliases.conf",
        "/etc/modprobe.d/ttm.conf",
    ]


def test_last_setting_across_files_wins():
    files = [("/etc/modprobe.d/50-a.conf", GUIDE), ("/etc/modprobe.d/ttm.conf", AMD_TTM)]
    found = module_option_settings(files, "ttm", "pages_limit")
    assert [(s.path, s.line, s.value) for s in found] == [
        ("/etc/modprobe.d/50-a.conf", 2, "33554432"),
        ("/etc/modprobe.d/ttm.conf", 1, "31457280"),
    ]


def test_crlf_is_refused_and_nothing_changes():
    text = "options ttm pages_limit=1\r\n"
    for edit in (
        lambda t: set_module_option(
            t, "ttm", "pages_limit", "5", source="/etc/modprobe.d/ttm.conf"
        ),
        lambda t: remove_module_option(t, "ttm", "pages_limit", source="/etc/modprobe.d/ttm.conf"),
    ):
        with pytest.raises(
            ModprobeEditError, match=r"/etc/modprobe.d/ttm.conf: line 1 ends in CRLF"
        ):
            edit(text)
    assert text == "options ttm pages_limit=1\r\n"


def test_unsafe_names_are_refused():
    for module, key, value in (("t tm", "a", "1"), ("ttm", "a=b", "1"), ("ttm", "a", "1 2")):
        with pytest.raises(ValueError, match="ojai writes"):
            set_module_option("", module, key, value)


# -- properties --------------------------------------------------------------------------------

_WORD = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_", min_size=1, max_size=8)
_OPTION = st.builds(
    lambda k, v: f"{k}={v}", _WORD.filter(lambda w: w not in ("pages_limit",)), _WORD
)
_KEY_OPTION = st.builds(
    lambda k, v: f"{k}={v}", st.sampled_from(["pages_limit", "pages-limit"]), st.integers(0, 2**26)
)
_GAP = st.sampled_from([" ", "  ", "\t", " \\\n  "])


@st.composite
def conf_files(draw):
    """A modprobe.d file: comments, other modules, ttm lines with and without the key."""
    lines: list[str] = []
    others: list[str] = []
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["comment", "blacklist", "other", "ttm"]))
        if kind == "comment":
            lines.append("# " + draw(_WORD) + " pages_limit=1")
        elif kind == "blacklist":
            lines.append("blacklist " + draw(_WORD))
        else:
            module = "ttm" if kind == "ttm" else draw(st.sampled_from(["amdttm", "amdgpu"]))
            opts = draw(st.lists(_OPTION, max_size=3))
            if module == "ttm":
                others.extend(opts)
                for k in draw(st.lists(_KEY_OPTION, max_size=2)):
                    opts.insert(draw(st.integers(0, len(opts))), k)
                if not opts:
                    opts = [draw(_KEY_OPTION)]
            lines.append(f"options {module}" + "".join(draw(_GAP) + o for o in opts))
    end = draw(st.sampled_from(["\n", ""])) if lines else ""
    return "\n".join(lines) + end, others


def _ttm_options(text: str) -> list[str]:
    return [o.text for e in parse_modprobe_conf(text) if e.module == "ttm" for o in e.options]


@settings(max_examples=300, deadline=None)
@given(case=conf_files(), value=st.integers(1, 2**26).map(str))
def test_property_set_module_option(case, value):
    text, others = case
    after = set_module_option(text, "ttm", "pages_limit", value)
    options = _ttm_options(after)
    assert [o for o in options if o.replace("-", "_").startswith("pages_limit=")] == [
        f"pages_limit={value}"
    ]
    assert [o for o in options if not o.replace("-", "_").startswith("pages_limit=")] == others
    assert set_module_option(after, "ttm", "pages_limit", value) == after
    for module in ("amdttm", "amdgpu"):
        assert [
            o.text for e in parse_modprobe_conf(after) if e.module == module for o in e.options
        ] == [o.text for e in parse_modprobe_conf(text) if e.module == module for o in e.options]
    kept = [ln for ln in text.splitlines() if not ln.startswith(("options ttm", " ", "\t"))]
    assert [ln for ln in after.splitlines() if ln in kept] == kept


@settings(max_examples=300, deadline=None)
@given(case=conf_files())
def test_property_remove_module_option(case):
    text, others = case
    after = remove_module_option(text, "ttm", "pages_limit")
    assert _ttm_options(after) == others
    assert remove_module_option(after, "ttm", "pages_limit") == after
