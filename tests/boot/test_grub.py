"""Editing /etc/default/grub by key, checked against real bash."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ojai_setup.apply.validate import bash_read_var, validate_grub
from ojai_setup.formats.grub import (
    DEFAULT_VAR,
    LINUX_VAR,
    GrubEditError,
    bls_enabled,
    choose_cmdline_var,
    get_kernel_param,
    parse_grub_default,
    regenerate_commands,
    remove_kernel_param,
    set_kernel_param,
)
from ojai_setup.formats.kernel_params import cmdline_param, param_key, parse_cmdline, same_key
from ojai_setup.model.actions import WriteFile

DATA = Path(__file__).parents[1] / "data" / "grub"
KEY = "ttm.pages_limit"
GIB48 = str(48 * 262144)  # 12582912


def sample(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def write(tmp_path: Path, text: str, name: str = "grub") -> Path:
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8"))
    return path


def validate_planned(tmp_path: Path, before: str | None, after: str) -> None:
    """The executor's check of a planned write of /etc/default/grub, on a candidate file."""
    action = WriteFile(path="/etc/default/grub", before=before, after=after, validate_with="grub")
    validate_grub(write(tmp_path, after, "candidate"), action)


def changed_lines(before: str, after: str) -> list[tuple[str, str]]:
    a, b = before.split("\n"), after.split("\n")
    assert len(a) == len(b), "an edit must not add or remove lines"
    return [(x, y) for x, y in zip(a, b, strict=True) if x != y]


def bash_tokens(tmp_path: Path, text: str, var: str = DEFAULT_VAR) -> list[str]:
    return parse_cmdline(bash_read_var(write(tmp_path, text), var))


# -- real files ------------------------------------------------------------------------------


def test_ubuntu_2404_is_read_as_the_shell_reads_it(tmp_path):
    text = sample("ubuntu-24.04.default")
    grub = parse_grub_default(text)
    assert [a.name for a in grub.assignments] == [
        "GRUB_DEFAULT",
        "GRUB_TIMEOUT_STYLE",
        "GRUB_TIMEOUT",
        "GRUB_DISTRIBUTOR",
        DEFAULT_VAR,
        LINUX_VAR,
    ]
    assert grub.cmdline(DEFAULT_VAR).tokens == ["quiet", "splash"]
    assert grub.cmdline(DEFAULT_VAR).line == 10
    assert grub.cmdline(LINUX_VAR).tokens == []
    assert bash_tokens(tmp_path, text) == ["quiet", "splash"]
    assert choose_cmdline_var(text) == DEFAULT_VAR
    assert not bls_enabled(text)


@pytest.mark.parametrize(
    "name, before",
    [
        ("ubuntu-24.04.default", 'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash"'),
        ("debian-12.default", 'GRUB_CMDLINE_LINUX_DEFAULT="quiet"'),
    ],
)
def test_setting_the_limit_changes_one_line_and_bash_agrees(tmp_path, name, before):
    text = sample(name)
    after = set_kernel_param(text, KEY, GIB48)
    assert changed_lines(text, after) == [(before, before[:-1] + f' {KEY}={GIB48}"')]
    assert set_kernel_param(after, KEY, GIB48) == after
    tokens = bash_tokens(tmp_path, after)
    assert tokens[-1] == f"{KEY}={GIB48}"
    assert cmdline_param(tokens, KEY) == GIB48
    validate_planned(tmp_path, text, after)


def test_strix_halo_guide_file_is_corrected_in_place(tmp_path):
    text = sample("ubuntu-24.04-strix-halo-guide.default")
    assert get_kernel_param(text, KEY) == "32505856"
    after = set_kernel_param(text, KEY, GIB48)
    after = remove_kernel_param(after, "amdgpu.gttsize")
    assert changed_lines(text, after) == [
        (
            'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash amd_iommu=off amdgpu.gttsize=126976 '
            'ttm.pages_limit=32505856"',
            f'GRUB_CMDLINE_LINUX_DEFAULT="quiet splash amd_iommu=off ttm.pages_limit={GIB48}"',
        )
    ]
    assert bash_tokens(tmp_path, after) == ["quiet", "splash", "amd_iommu=off", f"{KEY}={GIB48}"]
    assert get_kernel_param(after, "amdgpu.gttsize") is None
    assert remove_kernel_param(after, "amdgpu.gttsize") == after


def test_fedora_layout_uses_grub_cmdline_linux(tmp_path):
    text = sample("fedora-40.default")
    with pytest.raises(GrubEditError, match="sets GRUB_CMDLINE_LINUX .*edit that variable"):
        set_kernel_param(text, KEY, GIB48)
    assert choose_cmdline_var(text) == LINUX_VAR
    assert bls_enabled(text)
    after = set_kernel_param(text, KEY, GIB48, LINUX_VAR)
    assert changed_lines(text, after) == [
        ('GRUB_CMDLINE_LINUX="rhgb quiet"', f'GRUB_CMDLINE_LINUX="rhgb quiet {KEY}={GIB48}"'),
    ]
    # The file's own $(sed ... /etc/system-release) needs a Fedora host; everything else is
    # sourced by bash as written, so that one assignment's value is replaced here.
    grub = parse_grub_default(after)
    (distributor,) = grub.assigned("GRUB_DISTRIBUTOR")
    portable = after[: distributor.value_start] + '"Fedora Linux"' + after[distributor.value_end :]
    assert bash_tokens(tmp_path, portable, LINUX_VAR) == ["rhgb", "quiet", f"{KEY}={GIB48}"]


def test_a_command_failing_under_set_e_fails_validation(tmp_path):
    text = 'GRUB_DISTRIBUTOR="$(false)"\nGRUB_CMDLINE_LINUX_DEFAULT="quiet"\n'
    with pytest.raises(GrubEditError, match="bash cannot source it .*grub-mkconfig would stop"):
        bash_read_var(write(tmp_path, text), DEFAULT_VAR)


def test_bash_read_var_reports_an_unset_variable(tmp_path):
    with pytest.raises(GrubEditError, match="reads no GRUB_CMDLINE_LINUX_DEFAULT"):
        bash_read_var(write(tmp_path, "GRUB_TIMEOUT=5\n"), DEFAULT_VAR)
    assert bash_read_var(write(tmp_path, "GRUB_CMDLINE_LINUX_DEFAULT=\n"), DEFAULT_VAR) == ""


# -- refusing what cannot be edited safely ---------------------------------------------------

BAD = {
    "missing": ("GRUB_TIMEOUT=5\n", r"no GRUB_CMDLINE_LINUX_DEFAULT= line"),
    "twice": (
        'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT="quiet"\n#\n\nGRUB_CMDLINE_LINUX_DEFAULT="splash"\n',
        r"assigned 2 times \(lines 2, 5\).*Merge them",
    ),
    "self-reference-appended": (
        'GRUB_CMDLINE_LINUX_DEFAULT="quiet"\n'
        'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT amd_iommu=off"\n',
        r"assigned 2 times \(lines 1, 2\)",
    ),
    "plus-equals": (
        'GRUB_CMDLINE_LINUX_DEFAULT="quiet"\nGRUB_CMDLINE_LINUX_DEFAULT+=" splash"\n',
        r"assigned 2 times \(lines 1, 2\)",
    ),
    "only-plus-equals": ('GRUB_CMDLINE_LINUX_DEFAULT+=" splash"\n', r"extends .* with \+="),
    "inside-if-and-outside": (
        'if [ -e /x ]; then\n  GRUB_CMDLINE_LINUX_DEFAULT="a"\nfi\nGRUB_CMDLINE_LINUX_DEFAULT="b"\n',
        r"lines 2, 4",
    ),
    "unbalanced-double": (
        'GRUB_TIMEOUT=5\nGRUB_CMDLINE_LINUX_DEFAULT="quiet splash\nGRUB_CMDLINE_LINUX=""\n',
        r"unbalanced quotes: the double quote \(\"\) opened on line 3 is never closed",
    ),
    "unbalanced-single": (
        "GRUB_CMDLINE_LINUX_DEFAULT='quiet\n",
        r"single quote \('\) opened on line 1",
    ),
    "unclosed-command-substitution": (
        'GRUB_DISTRIBUTOR=$(lsb_release -i\nGRUB_CMDLINE_LINUX_DEFAULT="quiet"\n',
        r"the \$\( opened on line 1 is never closed",
    ),
    "crlf": (
        'GRUB_DEFAULT=0\r\nGRUB_CMDLINE_LINUX_DEFAULT="quiet"\r\n',
        r"line 1 ends in CRLF.*LF line ends",
    ),
    "command-substitution": (
        'GRUB_CMDLINE_LINUX_DEFAULT="quiet $(cat /etc/extra)"\n',
        r"command substitution",
    ),
    "backquotes": ('GRUB_CMDLINE_LINUX_DEFAULT="quiet `cat /x`"\n', r"command substitution"),
    "unquoted-command-substitution": (
        "GRUB_CMDLINE_LINUX_DEFAULT=$(cat /x)\n",
        r"command substitution",
    ),
    "arithmetic": ('GRUB_CMDLINE_LINUX_DEFAULT="mem=$((1+2))"\n', r"command substitution or arith"),
    "parameter-operator": (
        'GRUB_CMDLINE_LINUX_DEFAULT="${EXTRA:-quiet}"\n',
        r"\$\{\.\.\.\} expansion with an operator",
    ),
    "positional": ('GRUB_CMDLINE_LINUX_DEFAULT="quiet $1"\n', r"special parameter \$1"),
    "mixed-quoting": ("GRUB_CMDLINE_LINUX_DEFAULT=\"quiet \"'splash'\n", r"not one quoted string"),
    "multi-line-value": ('GRUB_CMDLINE_LINUX_DEFAULT="quiet\nsplash"\n', r"spans several lines"),
    "continuation": ('GRUB_CMDLINE_LINUX_DEFAULT="quiet \\\nsplash"\n', r"backslash line break"),
    "unbalanced-kernel-quote": (
        'GRUB_CMDLINE_LINUX_DEFAULT="quiet foo=\\"a b"\n',
        r'opens a " quote it never closes',
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_unsafe_files_are_refused_and_left_alone(tmp_path, case):
    text, message = BAD[case]
    path = write(tmp_path, text)
    original = path.read_bytes()
    for edit in (
        lambda t: set_kernel_param(t, KEY, GIB48),
        lambda t: remove_kernel_param(t, "amdgpu.gttsize"),
        lambda t: get_kernel_param(t, KEY),
    ):
        read = path.read_bytes().decode("utf-8")
        with pytest.raises(GrubEditError, match=message) as info:
            edit(read)
        assert "/etc/default/grub" in str(info.value)
        assert read == text
        assert path.read_bytes() == original


def test_error_names_the_file_it_was_given():
    with pytest.raises(
        GrubEditError, match=r"^/mnt/etc/default/grub: no GRUB_CMDLINE_LINUX_DEFAULT"
    ):
        set_kernel_param("X=1\n", KEY, "1", source="/mnt/etc/default/grub")


def test_missing_variable_without_fedora_hint():
    with pytest.raises(GrubEditError) as info:
        set_kernel_param("GRUB_TIMEOUT=5\n", KEY, "1")
    assert "Fedora" not in str(info.value)
    assert 'GRUB_CMDLINE_LINUX_DEFAULT=""' in str(info.value)
    with pytest.raises(GrubEditError, match="sets neither"):
        choose_cmdline_var("GRUB_TIMEOUT=5\n")


def test_keys_and_values_that_would_need_quoting_are_refused():
    text = 'GRUB_CMDLINE_LINUX_DEFAULT="quiet"\n'
    for key, value in (("ttm pages", "1"), (KEY, "1 2"), (KEY, '"1"'), (KEY, "$X"), ("", "1")):
        with pytest.raises(ValueError, match="ojai writes"):
            set_kernel_param(text, key, value)


# -- shell syntax around the variable --------------------------------------------------------


def test_lookalikes_are_not_assignments(tmp_path):
    text = (
        '# GRUB_CMDLINE_LINUX_DEFAULT="commented out"\n'
        "echo GRUB_CMDLINE_LINUX_DEFAULT=not-an-assignment >/dev/null\n"
        'GRUB_BACKGROUND="/usr/share/a.png\n'
        'GRUB_CMDLINE_LINUX_DEFAULT=inside-a-multi-line-string"\n'
        "GRUB_DISTRIBUTOR=$(printf '%s' \"x\" # )\n)\n"
        'export GRUB_CMDLINE_LINUX_DEFAULT="quiet"  # the real one\n'
    )
    grub = parse_grub_default(text)
    assert [(a.name, a.line) for a in grub.assignments] == [
        ("GRUB_BACKGROUND", 3),
        ("GRUB_DISTRIBUTOR", 5),
        (DEFAULT_VAR, 7),
    ]
    after = set_kernel_param(text, KEY, GIB48)
    assert changed_lines(text, after) == [
        (
            'export GRUB_CMDLINE_LINUX_DEFAULT="quiet"  # the real one',
            f'export GRUB_CMDLINE_LINUX_DEFAULT="quiet {KEY}={GIB48}"  # the real one',
        )
    ]
    assert bash_tokens(tmp_path, after) == ["quiet", f"{KEY}={GIB48}"]


def test_assignment_after_semicolon_and_in_if_block(tmp_path):
    text = 'if true; then GRUB_CMDLINE_LINUX_DEFAULT="quiet"; fi\n'
    after = set_kernel_param(text, KEY, "7")
    assert after == f'if true; then GRUB_CMDLINE_LINUX_DEFAULT="quiet {KEY}=7"; fi\n'
    assert bash_tokens(tmp_path, after) == ["quiet", f"{KEY}=7"]


@pytest.mark.parametrize(
    "before, after",
    [
        (
            "GRUB_CMDLINE_LINUX_DEFAULT='quiet splash'\n",
            f"GRUB_CMDLINE_LINUX_DEFAULT='quiet splash {KEY}=7'\n",
        ),
        ("GRUB_CMDLINE_LINUX_DEFAULT=quiet\n", f'GRUB_CMDLINE_LINUX_DEFAULT="quiet {KEY}=7"\n'),
        ("GRUB_CMDLINE_LINUX_DEFAULT=\n", f"GRUB_CMDLINE_LINUX_DEFAULT={KEY}=7\n"),
        (f"GRUB_CMDLINE_LINUX_DEFAULT={KEY}=1\n", f"GRUB_CMDLINE_LINUX_DEFAULT={KEY}=7\n"),
        ('GRUB_CMDLINE_LINUX_DEFAULT=""\n', f'GRUB_CMDLINE_LINUX_DEFAULT="{KEY}=7"\n'),
        ('GRUB_CMDLINE_LINUX_DEFAULT=" "\n', f'GRUB_CMDLINE_LINUX_DEFAULT=" {KEY}=7"\n'),
        (
            'GRUB_CMDLINE_LINUX_DEFAULT="\tquiet  splash "\n',
            f'GRUB_CMDLINE_LINUX_DEFAULT="\tquiet  splash {KEY}=7 "\n',
        ),
        # duplicates collapse into the first one; "-" and "_" are the same to the kernel
        (
            f'GRUB_CMDLINE_LINUX_DEFAULT="ttm.pages-limit=1 quiet {KEY}=2 splash {KEY}=3"\n',
            f'GRUB_CMDLINE_LINUX_DEFAULT="{KEY}=7 quiet splash"\n',
        ),
        (
            f'GRUB_CMDLINE_LINUX_DEFAULT="quiet {KEY}=1 {KEY}=1"\n',
            f'GRUB_CMDLINE_LINUX_DEFAULT="quiet {KEY}=7"\n',
        ),
        # a different module's key stays
        (
            'GRUB_CMDLINE_LINUX_DEFAULT="amdttm.pages_limit=5"\n',
            f'GRUB_CMDLINE_LINUX_DEFAULT="amdttm.pages_limit=5 {KEY}=7"\n',
        ),
    ],
)
def test_quoting_styles_and_duplicates(tmp_path, before, after):
    assert set_kernel_param(before, KEY, "7") == after
    assert set_kernel_param(after, KEY, "7") == after
    tokens = bash_tokens(tmp_path, after)
    assert [t for t in tokens if same_key(param_key(t), KEY)] == [f"{KEY}=7"]


def test_references_stay_where_they_are(tmp_path):
    text = (
        'EXTRA="amd_iommu=off"\nMORE=nomodeset_is_not_here\n'
        'GRUB_CMDLINE_LINUX_DEFAULT="$EXTRA quiet ${MORE} ttm.pages_limit=$LIMIT"\n'
    )
    cv = parse_grub_default(text).cmdline()
    assert cv.tokens == ["$EXTRA", "quiet", "${MORE}", "ttm.pages_limit=$LIMIT"]
    assert [p.has_ref for p in cv.params] == [True, False, True, True]
    after = set_kernel_param(text, KEY, GIB48)
    assert after.endswith(f'GRUB_CMDLINE_LINUX_DEFAULT="$EXTRA quiet ${{MORE}} {KEY}={GIB48}"\n')
    assert bash_tokens(tmp_path, after) == [
        "amd_iommu=off",
        "quiet",
        "nomodeset_is_not_here",
        f"{KEY}={GIB48}",
    ]
    validate_planned(tmp_path, text, after)


def test_a_lone_self_reference_is_kept_and_expands_to_nothing(tmp_path):
    text = 'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT quiet"\n'
    after = set_kernel_param(text, KEY, "5")
    assert after == f'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT quiet {KEY}=5"\n'
    assert bash_tokens(tmp_path, after) == ["quiet", f"{KEY}=5"]


def test_kernel_quoted_parameters_are_one_token(tmp_path):
    text = 'GRUB_CMDLINE_LINUX_DEFAULT="quiet dyndbg=\\"file drm.c +p\\" splash"\n'
    cv = parse_grub_default(text).cmdline()
    assert cv.tokens == ["quiet", 'dyndbg="file drm.c +p"', "splash"]
    after = set_kernel_param(text, KEY, "9")
    assert bash_tokens(tmp_path, after) == ["quiet", 'dyndbg="file drm.c +p"', "splash", f"{KEY}=9"]
    assert get_kernel_param(after, "dyndbg") == "file drm.c +p"


def test_get_kernel_param():
    text = f'GRUB_CMDLINE_LINUX_DEFAULT="quiet {KEY}=1 ttm.pages-limit=2"\nGRUB_CMDLINE_LINUX="{KEY}=3"\n'
    assert get_kernel_param(text, KEY) == "2"
    assert get_kernel_param(text, KEY, LINUX_VAR) == "3"
    assert get_kernel_param(text, "quiet") == ""
    assert get_kernel_param(text, "splash") is None


def test_remove_keeps_the_rest():
    text = f'A=1\nGRUB_CMDLINE_LINUX_DEFAULT="{KEY}=1 quiet  amdgpu.gttsize=2 {KEY}=3"\nB=2\n'
    assert (
        remove_kernel_param(text, KEY)
        == 'A=1\nGRUB_CMDLINE_LINUX_DEFAULT="quiet  amdgpu.gttsize=2"\nB=2\n'
    )
    only = f'GRUB_CMDLINE_LINUX_DEFAULT="{KEY}=1"\n'
    assert remove_kernel_param(only, KEY) == 'GRUB_CMDLINE_LINUX_DEFAULT=""\n'


# -- /proc/cmdline -----------------------------------------------------------------------------


def test_parse_cmdline_of_a_real_strix_halo():
    # corpus/strix-halo-395-rog-flow-z13-nix-amd-ai-issue-42/cmdline-and-sysfs-mem-info.txt
    # (the poster elided parts of the line with "…")
    line = "… iommu.passthrough=0 … ttm.pages_limit=25165824 ttm.page_pool_size=25165824\n"
    tokens = parse_cmdline(line)
    assert tokens == [
        "…",
        "iommu.passthrough=0",
        "…",
        "ttm.pages_limit=25165824",
        "ttm.page_pool_size=25165824",
    ]
    limit = cmdline_param(tokens, KEY)
    assert limit is not None and int(limit) * 4096 == 103079215104  # mem_info_gtt_total
    assert cmdline_param(tokens, "amdgpu.gttsize") is None


def test_parse_cmdline_quotes_as_the_kernel_does():
    text = 'BOOT_IMAGE=/vmlinuz root=UUID=1 ro "acpi_osi=Windows 2020" dyndbg="a b" quiet\n'
    tokens = parse_cmdline(text)
    assert tokens == [
        "BOOT_IMAGE=/vmlinuz",
        "root=UUID=1",
        "ro",
        '"acpi_osi=Windows 2020"',
        'dyndbg="a b"',
        "quiet",
    ]
    assert cmdline_param(tokens, "acpi_osi") == "Windows 2020"
    assert cmdline_param(tokens, "dyndbg") == "a b"
    assert cmdline_param(tokens, "ro") == ""


# -- validation --------------------------------------------------------------------------------


def test_validation_catches_what_the_parser_cannot_see(tmp_path):
    before = 'GRUB_CMDLINE_LINUX_DEFAULT="quiet"\n'
    hidden = f'EXTRA="{KEY}=1"\nGRUB_CMDLINE_LINUX_DEFAULT="quiet $EXTRA {KEY}=5"\n'
    with pytest.raises(GrubEditError, match=r"bash reads \['ttm.pages_limit=1', 'ttm.pages_limit=5'\]"):
        validate_planned(tmp_path, before, hidden)
    overridden = f'GRUB_CMDLINE_LINUX_DEFAULT="quiet {KEY}=5"\neval \'GRUB_CMDLINE_LINUX_DEFAULT="splash {KEY}=5"\'\n'
    with pytest.raises(GrubEditError, match=r"bash reads GRUB_CMDLINE_LINUX_DEFAULT as \['splash'"):
        validate_planned(tmp_path, before, overridden)
    removed = f'GRUB_CMDLINE_LINUX_DEFAULT="quiet"\neval \'GRUB_CMDLINE_LINUX_DEFAULT="quiet {KEY}=5"\'\n'
    with pytest.raises(GrubEditError, match=r"bash reads \['ttm.pages_limit=5'\] .* the plan has \[\]"):
        validate_planned(tmp_path, f'GRUB_CMDLINE_LINUX_DEFAULT="quiet {KEY}=5"\n', removed)


def test_validate_grub_for_a_planned_write(tmp_path):
    before = sample("ubuntu-24.04-strix-halo-guide.default")
    after = remove_kernel_param(set_kernel_param(before, KEY, GIB48), "amdgpu.gttsize")
    action = WriteFile(path="/etc/default/grub", before=before, after=after, validate_with="grub")
    validate_grub(write(tmp_path, after, "grub.tmp"), action)
    with pytest.raises(GrubEditError, match="differs from the planned text"):
        validate_grub(write(tmp_path, before, "grub.tmp"), action)
    sneaky = (
        after
        + f'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT"\neval "GRUB_CMDLINE_LINUX_DEFAULT=\\"\\$GRUB_CMDLINE_LINUX_DEFAULT {KEY}=1\\""\n'
    )
    with pytest.raises(GrubEditError):
        validate_grub(
            write(tmp_path, sneaky, "grub.tmp"), action.model_copy(update={"after": sneaky})
        )
    evaled = after + f"eval 'GRUB_CMDLINE_LINUX=\"{KEY}=1\"'\n"
    with pytest.raises(GrubEditError, match="bash reads GRUB_CMDLINE_LINUX as"):
        validate_grub(
            write(tmp_path, evaled, "grub.tmp"), action.model_copy(update={"after": evaled})
        )


def test_validate_grub_for_a_new_file_and_for_fedora_layout(tmp_path):
    fresh = f'GRUB_CMDLINE_LINUX_DEFAULT="{KEY}=5"\n'
    validate_grub(
        write(tmp_path, fresh), WriteFile(path="/etc/default/grub", before=None, after=fresh)
    )
    fedora = 'GRUB_CMDLINE_LINUX="rhgb quiet"\nGRUB_ENABLE_BLSCFG=true\n'
    edited = set_kernel_param(fedora, KEY, "5", LINUX_VAR)
    validate_grub(
        write(tmp_path, edited), WriteFile(path="/etc/default/grub", before=fedora, after=edited)
    )


# -- regenerating grub.cfg ---------------------------------------------------------------------


def have(*programs: str):
    return lambda name: name in programs


@pytest.mark.parametrize(
    "distro, like, tools, kwargs, expected",
    [
        ("ubuntu", ["debian"], ("update-grub", "grub-mkconfig"), {}, [["update-grub"]]),
        ("debian", [], ("grub-mkconfig",), {}, [["grub-mkconfig", "-o", "/boot/grub/grub.cfg"]]),
        ("linuxmint", ["ubuntu", "debian"], ("update-grub",), {}, [["update-grub"]]),
        ("arch", [], ("grub-mkconfig",), {}, [["grub-mkconfig", "-o", "/boot/grub/grub.cfg"]]),
        (
            "endeavouros",
            ["arch"],
            ("grub-mkconfig",),
            {},
            [["grub-mkconfig", "-o", "/boot/grub/grub.cfg"]],
        ),
        (
            "fedora",
            [],
            ("grub2-mkconfig", "grubby"),
            {},
            [["grub2-mkconfig", "-o", "/boot/grub2/grub.cfg"]],
        ),
        (
            "fedora",
            [],
            ("grub2-mkconfig", "grubby"),
            {"bls": True, "args": [f"{KEY}=5"], "remove_args": ["amdgpu.gttsize"]},
            [["grubby", "--update-kernel=ALL", f"--args={KEY}=5", "--remove-args=amdgpu.gttsize"]],
        ),
        (
            "fedora",
            [],
            ("grub2-mkconfig",),
            {"bls": True, "args": [f"{KEY}=5"]},
            [["grub2-mkconfig", "-o", "/boot/grub2/grub.cfg", "--update-bls-cmdline"]],
        ),
        (
            "rocky",
            ["rhel", "centos", "fedora"],
            ("grubby",),
            {"args": [f"{KEY}=5", "quiet"]},
            [["grubby", "--update-kernel=ALL", f"--args={KEY}=5 quiet"]],
        ),
    ],
)
def test_regenerate_commands(distro, like, tools, kwargs, expected):
    assert regenerate_commands(distro, like, have(*tools), **kwargs) == expected


@pytest.mark.parametrize(
    "distro, like, tools, message",
    [
        ("gentoo", [], ("grub-mkconfig",), "does not know how 'gentoo'"),
        ("ubuntu", ["debian"], (), "looked for update-grub, grub-mkconfig"),
        ("fedora", [], ("grubby",), "looked for grub2-mkconfig, grubby"),  # grubby needs arguments
    ],
)
def test_regenerate_commands_errors(distro, like, tools, message):
    with pytest.raises(GrubEditError, match=message):
        regenerate_commands(distro, like, have(*tools))


# -- properties --------------------------------------------------------------------------------

_TOKEN = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._,:/=-", min_size=1, max_size=12)
_SAFE_TOKEN = _TOKEN.filter(lambda t: not same_key(param_key(t), KEY) and not t.startswith("="))
_KEY_TOKEN = st.builds(
    lambda k, v: f"{k}={v}", st.sampled_from([KEY, "ttm.pages-limit"]), st.integers(0, 2**26)
)
_GAP = st.text(alphabet=" \t", min_size=1, max_size=3)


@st.composite
def grub_files(draw):
    """A grub file whose GRUB_CMDLINE_LINUX_DEFAULT has random tokens, quoting and spacing."""
    others = draw(st.lists(_SAFE_TOKEN, max_size=6))
    keys = draw(st.lists(_KEY_TOKEN, max_size=3))
    tokens = list(others)
    for k in keys:
        tokens.insert(draw(st.integers(0, len(tokens))), k)
    style = draw(
        st.sampled_from(["double", "single", "none"] if len(tokens) <= 1 else ["double", "single"])
    )
    if style == "none":
        inner = "".join(tokens)
    else:
        gaps = [draw(_GAP) for _ in tokens]
        lead = draw(st.sampled_from(["", " ", "\t"]))
        trail = draw(st.sampled_from(["", " ", "  "]))
        inner = (
            lead
            + "".join(g + t if i else t for i, (g, t) in enumerate(zip(gaps, tokens, strict=True)))
            + trail
        )
    quote = {"double": '"', "single": "'", "none": ""}[style]
    prefix = draw(
        st.sampled_from(
            [
                "",
                "GRUB_DEFAULT=0\n",
                "# comment with a ' quote\nGRUB_TIMEOUT=5\n",
                "GRUB_DISTRIBUTOR=`echo Ubuntu`\n",
                "GRUB_X='a\nb'\n",
            ]
        )
    )
    suffix = draw(
        st.sampled_from(["", 'GRUB_CMDLINE_LINUX=""\n', "# trailing\n", "GRUB_Y=1  # c\n"])
    )
    text = f"{prefix}GRUB_CMDLINE_LINUX_DEFAULT={quote}{inner}{quote}\n{suffix}"
    return text, others, prefix, suffix


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=grub_files(), value=st.integers(1, 2**26).map(str))
def test_property_set_then_bash_reads_one_key(tmp_path, case, value):
    text, others, prefix, suffix = case
    parsed = parse_grub_default(text).cmdline().tokens
    assert [t for t in parsed if not same_key(param_key(t), KEY)] == others
    after = set_kernel_param(text, KEY, value)
    assert after.startswith(prefix) and after.endswith(suffix)
    tokens = parse_grub_default(after).cmdline().tokens
    assert [t for t in tokens if same_key(param_key(t), KEY)] == [f"{KEY}={value}"]
    assert [t for t in tokens if not same_key(param_key(t), KEY)] == others
    assert set_kernel_param(after, KEY, value) == after
    assert bash_tokens(tmp_path, after) == tokens
    validate_planned(tmp_path, text, after)


@settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(case=grub_files())
def test_property_remove_then_bash_reads_no_key(tmp_path, case):
    text, others, prefix, suffix = case
    after = remove_kernel_param(text, KEY)
    assert after.startswith(prefix) and after.endswith(suffix)
    assert parse_grub_default(after).cmdline().tokens == others
    assert remove_kernel_param(after, KEY) == after
    assert bash_tokens(tmp_path, after) == others
    validate_planned(tmp_path, text, after)
