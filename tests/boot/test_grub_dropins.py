"""Drop-ins in /etc/default/grub.d: the edit lands where it takes effect.

Each case starts from the ojai-fresh machine and adds drop-ins seen on real systems: the Ubuntu
cloud image's ``50-cloudimg-settings.cfg`` (which replaces GRUB_CMDLINE_LINUX_DEFAULT; the AWS
value is quoted in public setup scripts that sed it) and the "append pattern"
``GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT ..."`` that vendor guides recommend for
cloud images. After applying, real bash sources /etc/default/grub and grub.d/*.cfg as
grub-mkconfig does, and the kernel command line must hold exactly one ttm.pages_limit with every
other parameter unchanged.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.boot.grub_dropins import plan_cmdline_edit
from ojai_setup.facts.grub_env import configured_cmdline, source_grub_files
from ojai_setup.formats.grub import GrubEditError
from tests.support.text import flat

NO_EXTRAS = ["--llamacpp", "none", "--no-npu"]
LIMIT = "ttm.pages_limit=12582912"
CLOUD = ('# Set the default commandline\n'
         'GRUB_CMDLINE_LINUX_DEFAULT="console=tty1 console=ttyS0 nvme_core.io_timeout=4294967295"\n')
APPEND = 'GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT intel_iommu=on iommu=pt"\n'


def ojai(*args: str):
    return CliRunner().invoke(app, list(args))


def kernel_line(root: Path) -> list[str]:
    return configured_cmdline(source_grub_files(root / "etc"))


def with_dropins(machine, main: str | None = None, **dropins: str) -> Path:
    root = machine("ojai-fresh")
    if main is not None:
        (root / "etc/default/grub").write_text(main)
    d = root / "etc/default/grub.d"
    d.mkdir(parents=True, exist_ok=True)
    for name, text in dropins.items():
        (d / name.replace("_", "-")).write_text(text)
    return root


def apply_and_check_idempotent(root: Path) -> str:
    plan = ojai("setup", "--root", str(root), *NO_EXTRAS)
    assert plan.exit_code == 2, plan.output
    applied = ojai("setup", "--root", str(root), "--apply", "--yes", *NO_EXTRAS)
    assert applied.exit_code == 0, applied.output
    again = ojai("setup", "--root", str(root), *NO_EXTRAS)
    assert again.exit_code == 0, again.output
    return plan.stdout


def test_a_replacing_drop_in_gets_ojais_own_drop_in_after_it(machine):
    root = with_dropins(machine, **{"50_cloudimg_settings.cfg": CLOUD})
    main_before = (root / "etc/default/grub").read_bytes()
    assert kernel_line(root) == ["console=tty1", "console=ttyS0", "nvme_core.io_timeout=4294967295"]
    plan = apply_and_check_idempotent(root)
    flat = " ".join(plan.split())
    assert "in /etc/default/grub.d/99-ojai.cfg" in flat
    assert "/etc/default/grub.d/50-cloudimg-settings.cfg decides GRUB_CMDLINE_LINUX_DEFAULT" in flat
    assert kernel_line(root) == ["console=tty1", "console=ttyS0",
                                 "nvme_core.io_timeout=4294967295", LIMIT]
    assert (root / "etc/default/grub").read_bytes() == main_before
    assert (root / "etc/default/grub.d/50-cloudimg-settings.cfg").read_text() == CLOUD


def test_a_stale_limit_shadowed_by_a_drop_in_is_left_alone_and_the_effective_one_set(machine):
    main = 'GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT="quiet ttm.pages_limit=100"\nGRUB_CMDLINE_LINUX=""\n'
    root = with_dropins(machine, main=main, **{"50_cloudimg_settings.cfg": CLOUD})
    apply_and_check_idempotent(root)
    assert (root / "etc/default/grub").read_text() == main  # its value never reaches grub.cfg
    assert kernel_line(root).count(LIMIT) == 1
    assert [t for t in kernel_line(root) if t.startswith("ttm.")] == [LIMIT]


def test_an_appending_drop_in_keeps_the_main_files_limit_rewritten_in_place(machine):
    main = ('GRUB_DEFAULT=0\nGRUB_CMDLINE_LINUX_DEFAULT="quiet splash ttm.pages_limit=100"\n'
            'GRUB_CMDLINE_LINUX=""\n')
    root = with_dropins(machine, main=main, **{"vflag.cfg": APPEND})
    assert kernel_line(root) == ["quiet", "splash", "ttm.pages_limit=100", "intel_iommu=on", "iommu=pt"]
    plan = apply_and_check_idempotent(root)
    assert "rewrites ttm.pages_limit=100 to ttm.pages_limit=12582912 in /etc/default/grub" in " ".join(plan.split())
    assert kernel_line(root) == ["quiet", "splash", LIMIT, "intel_iommu=on", "iommu=pt"]
    assert (root / "etc/default/grub.d/vflag.cfg").read_text() == APPEND


def test_an_appending_drop_in_sorted_after_ojais_name_is_edited_by_key(machine):
    root = with_dropins(machine, **{"vflag.cfg": APPEND})
    plan = apply_and_check_idempotent(root)
    assert "in /etc/default/grub.d/vflag.cfg" in " ".join(plan.split())
    assert not (root / "etc/default/grub.d/99-ojai.cfg").exists()
    assert kernel_line(root) == ["quiet", "splash", "intel_iommu=on", "iommu=pt", LIMIT]
    assert '$GRUB_CMDLINE_LINUX_DEFAULT' in (root / "etc/default/grub.d/vflag.cfg").read_text()


def test_every_removed_token_is_named_in_the_sentence(machine):
    cloud = CLOUD.replace('4294967295"', '4294967295 amdgpu.gttsize=512 amdttm.pages_limit=5"')
    root = with_dropins(machine, **{"50_cloudimg_settings.cfg": cloud})
    plan = " ".join(apply_and_check_idempotent(root).split())
    for token in ("amdgpu.gttsize=512", "amdttm.pages_limit=5"):
        assert f"removes {token} from /etc/default/grub.d/50-cloudimg-settings.cfg" in plan
    assert kernel_line(root) == ["console=tty1", "console=ttyS0",
                                 "nvme_core.io_timeout=4294967295", LIMIT]


def test_a_limit_in_grub_cmdline_linux_is_not_duplicated_in_the_default_variable(machine):
    main = ('GRUB_CMDLINE_LINUX_DEFAULT="quiet"\nGRUB_CMDLINE_LINUX="ttm.pages_limit=7 ro"\n')
    root = with_dropins(machine, main=main)
    apply_and_check_idempotent(root)
    assert kernel_line(root) == [LIMIT, "ro", "quiet"]


def test_doctor_names_the_file_that_sets_the_configured_limit(machine):
    root = with_dropins(machine, **{"50_cloudimg_settings.cfg": CLOUD})
    apply_and_check_idempotent(root)
    import json

    report = json.loads(ojai("doctor", "--json", "--root", str(root)).stdout)
    assert report["facts"]["ttm"]["config_file"] == "/etc/default/grub.d/99-ojai.cfg"
    assert report["facts"]["grub"]["winners"]["GRUB_CMDLINE_LINUX_DEFAULT"] == \
        "/etc/default/grub.d/99-ojai.cfg"


def test_a_drop_in_bash_cannot_source_blocks_naming_it(machine):
    root = with_dropins(machine, **{"50_bad.cfg": "false\n"})
    result = ojai("setup", "--root", str(root), *NO_EXTRAS)
    assert result.exit_code == 1
    assert "bash stops" in flat(result.stdout)
    assert "in /etc/default/grub.d/50-bad.cfg" in flat(result.stdout)


@pytest.mark.parametrize("files", [
    [("/etc/default/grub", 'GRUB_CMDLINE_LINUX_DEFAULT="$X ttm.pages_limit=1"\n')],
])
def test_the_planner_refuses_what_it_cannot_follow(files):
    # the only ttm token is fine; a reference holding the key cannot be edited
    files2 = [("/etc/default/grub", 'GRUB_CMDLINE_LINUX_DEFAULT="ttm.pages_limit=$X"\n')]
    with pytest.raises(GrubEditError, match="shell reference"):
        plan_cmdline_edit(files2, "ttm.pages_limit", "5", (), main="/etc/default/grub",
                          own_dropin="/etc/default/grub.d/99-ojai.cfg")
    edit = plan_cmdline_edit(files, "ttm.pages_limit", "5", (), main="/etc/default/grub",
                             own_dropin="/etc/default/grub.d/99-ojai.cfg")
    assert [e.path for e in edit.edits] == ["/etc/default/grub"]


def test_the_chain_validator_refuses_a_candidate_bash_reads_otherwise(machine, tmp_path):
    from ojai_setup.apply.validate import validate_chain
    from ojai_setup.core.root import Root
    from ojai_setup.model.actions import CmdlineCheck, WriteFile

    root = with_dropins(machine, **{"50_cloudimg_settings.cfg": CLOUD})
    candidate = tmp_path / "candidate"
    candidate.write_text('GRUB_CMDLINE_LINUX_DEFAULT="quiet ttm.pages_limit=12582912"\n')
    action = WriteFile(path="/etc/default/grub", before="", after=candidate.read_text(),
                       cmdline=CmdlineCheck(param=LIMIT, others=("quiet",)))
    with pytest.raises(GrubEditError, match="no ttm.pages_limit|expected exactly one"):
        validate_chain(candidate, action, Root(root))  # the cloud drop-in still replaces it
    dropin = tmp_path / "dropin"
    dropin.write_text('GRUB_CMDLINE_LINUX_DEFAULT="$GRUB_CMDLINE_LINUX_DEFAULT ttm.pages_limit=12582912"\n')
    ok = action.model_copy(update={"path": "/etc/default/grub.d/99-ojai.cfg", "cmdline": CmdlineCheck(
        param=LIMIT, others=("console=tty1", "console=ttyS0", "nvme_core.io_timeout=4294967295"))})
    validate_chain(dropin, ok, Root(root))
    assert not (root / "etc/default/grub.d/99-ojai.cfg").exists()


# -- the appending drop-in of ROCm/ROCm#5671 -----------------------------------------------------
# A real drop-in (tests/machines/strix-halo-debian13-grub-dropin/etc/default/grub.d/amdgpu.cfg,
# as posted) that appends with ``${GRUB_CMDLINE_LINUX:+$GRUB_CMDLINE_LINUX }``: the main file's
# value and a blank when it has one, so no leading blank when it is empty. It sets both TTM keys.

DEBIAN_DROPIN = "strix-halo-debian13-grub-dropin"
POSTED = "/etc/default/grub.d/amdgpu.cfg"
APPEND_IF_SET = "${GRUB_CMDLINE_LINUX:+$GRUB_CMDLINE_LINUX }"
TTM_KEYS = ("ttm.pages_limit", "amdttm.pages_limit")


def _in_tree(root: Path) -> None:
    """The same box after amdgpu-dkms is removed: the in-tree amdgpu and its ``ttm`` are live."""
    import shutil

    for gone in ("sys/module/amdttm", "var/lib/dkms", "lib/modules", "sys/module/amdgpu/version"):
        p = root / gone
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    (root / "sys/module/amdgpu/initstate").write_text("live\n")
    (root / "sys/module/ttm/parameters").mkdir(parents=True)
    (root / "sys/module/ttm/parameters/pages_limit").write_text("32768000\n")


@pytest.mark.parametrize("driver, main_linux, key", [
    ("dkms", "", "amdttm.pages_limit"),  # as captured: the DKMS amdgpu reads amdttm's limit
    ("dkms", "console=tty0 console=ttyS0,115200n8", "amdttm.pages_limit"),
    ("in-tree", "", "ttm.pages_limit"),
])
def test_the_posted_appending_drop_in_is_edited_where_it_sets_the_limit(machine, driver, main_linux, key):
    root = machine(DEBIAN_DROPIN)
    if driver == "in-tree":
        _in_tree(root)
    main = root / "etc/default/grub"
    main.write_text(main.read_text().replace('GRUB_CMDLINE_LINUX=""', f'GRUB_CMDLINE_LINUX="{main_linux}"'))
    main_before = main.read_bytes()
    posted = (root / POSTED.lstrip("/")).read_text()
    before = kernel_line(root)
    assert before == [*main_linux.split(), "ttm.pages_limit=32768000", "ttm.page_pool_size=32768000",
                      "amdttm.pages_limit=32768000", "amdttm.page_pool_size=32768000",
                      "amdgpu.cwsr_enable=0", "quiet"]
    args = ("--gpu-memory", "96", *NO_EXTRAS)
    plan = ojai("setup", "--root", str(root), *args)
    assert plan.exit_code == 2, plan.output
    other = next(k for k in TTM_KEYS if k != key)
    flat = " ".join(plan.stdout.split())
    assert f"({key}=25165824) in {POSTED}" in flat
    assert f"removes {other}=32768000 from {POSTED}" in flat
    applied = ojai("setup", "--root", str(root), "--apply", "--yes", *args)
    assert applied.exit_code == 0, applied.output
    assert ojai("setup", "--root", str(root), *args).exit_code == 0  # nothing left to do

    after = kernel_line(root)  # bash sources the main file, then grub.d/*.cfg, as grub-mkconfig
    assert [t for t in after if t.split("=")[0] == key] == [f"{key}=25165824"]
    assert not [t for t in after if t.split("=")[0] == other]
    assert [t for t in after if t.split("=")[0] not in TTM_KEYS] == \
        [t for t in before if t.split("=")[0] not in TTM_KEYS]
    assert main.read_bytes() == main_before
    assert not (root / "etc/default/grub.d/99-ojai.cfg").exists()
    # the drop-in keeps its form: only the one value changed and the other key taken out
    import re

    want = re.sub(rf"(?<![\w.]){re.escape(key)}=32768000", f"{key}=25165824", posted)
    want = re.sub(rf"(?<![\w.]){re.escape(other)}=32768000 ", "", want)
    assert (root / POSTED.lstrip("/")).read_text() == want
    assert f'GRUB_CMDLINE_LINUX="{APPEND_IF_SET}ttm.' in want


def test_the_append_if_set_form_reads_as_the_previous_value_and_a_blank():
    text = f'GRUB_CMDLINE_LINUX="{APPEND_IF_SET}ttm.pages_limit=5 quiet"\n'
    from ojai_setup.boot.grub_dropins import effective, simulate
    from ojai_setup.formats.grub import parse_grub_default, remove_kernel_param, set_kernel_param

    cv = parse_grub_default(text, POSTED).cmdline("GRUB_CMDLINE_LINUX")
    assert cv.tokens == [APPEND_IF_SET, "ttm.pages_limit=5", "quiet"] and cv.self_reference
    edited = set_kernel_param(text, "ttm.pages_limit", "7", var="GRUB_CMDLINE_LINUX", source=POSTED)
    assert edited == text.replace("=5", "=7")
    main = ("/etc/default/grub", 'GRUB_CMDLINE_LINUX="ro"\nGRUB_CMDLINE_LINUX_DEFAULT=""\n')
    assert [t.text for t in effective(simulate([main, (POSTED, text)]))] == ["ro", "ttm.pages_limit=5", "quiet"]
    # the bytes around it are kept: a blank after it stays, and none is added or left behind
    spaced = f'GRUB_CMDLINE_LINUX="{APPEND_IF_SET} a=1  ttm.pages_limit=5 b"\n'
    assert set_kernel_param(spaced, "ttm.pages_limit", "7", var="GRUB_CMDLINE_LINUX") == \
        spaced.replace("=5", "=7")
    assert remove_kernel_param(text, "ttm.pages_limit", var="GRUB_CMDLINE_LINUX") == \
        f'GRUB_CMDLINE_LINUX="{APPEND_IF_SET}quiet"\n'
    alone = f'GRUB_CMDLINE_LINUX="{APPEND_IF_SET}ttm.pages_limit=5"\n'
    assert remove_kernel_param(alone, "ttm.pages_limit", var="GRUB_CMDLINE_LINUX") == \
        f'GRUB_CMDLINE_LINUX="{APPEND_IF_SET}"\n'
    assert set_kernel_param(f'GRUB_CMDLINE_LINUX="{APPEND_IF_SET}"\n', "ttm.pages_limit", "7",
                            var="GRUB_CMDLINE_LINUX") == alone.replace("=5", "=7")
    # another variable's value, or one glued to the next word, stays one opaque parameter
    other = parse_grub_default('GRUB_CMDLINE_LINUX="${X:+$X }a=1"\n').cmdline("GRUB_CMDLINE_LINUX")
    glued = parse_grub_default('GRUB_CMDLINE_LINUX="${GRUB_CMDLINE_LINUX:+$GRUB_CMDLINE_LINUX}a=1"\n')
    assert other.tokens == ["${X:+$X }", "a=1"] and not other.self_reference
    assert glued.cmdline("GRUB_CMDLINE_LINUX").tokens == ["${GRUB_CMDLINE_LINUX:+$GRUB_CMDLINE_LINUX}a=1"]
    with pytest.raises(GrubEditError, match="operator"):  # any other operator is still refused
        parse_grub_default('GRUB_CMDLINE_LINUX="${GRUB_CMDLINE_LINUX:-x} a=1"\n').cmdline("GRUB_CMDLINE_LINUX")


_WORDS = ["quiet", "ro", "console=ttyS0,115200n8", "ttm.pages_limit=100", "amdttm.pages_limit=100",
          "amdgpu.cwsr_enable=0", "ttm.page_pool_size=100"]
_APPEND_FORMS = ["${GRUB_CMDLINE_LINUX:+$GRUB_CMDLINE_LINUX }", "${GRUB_CMDLINE_LINUX+$GRUB_CMDLINE_LINUX }",
                 "${GRUB_CMDLINE_LINUX:+${GRUB_CMDLINE_LINUX} }", "${GRUB_CMDLINE_LINUX:+$GRUB_CMDLINE_LINUX  }"]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(main=st.lists(st.sampled_from(_WORDS), max_size=3), dropin=st.lists(st.sampled_from(_WORDS), max_size=4),
       form=st.sampled_from(_APPEND_FORMS), gaps=st.lists(st.sampled_from([" ", "  ", "\t"]), min_size=4, max_size=4),
       value=st.integers(1, 2**26).map(str))
def test_property_any_append_if_set_drop_in_ends_with_one_limit(tmp_path, main, dropin, form, gaps, value):
    """Whatever the main file and the appending drop-in hold, the planned edit, sourced by bash
    as grub-mkconfig does, gives one ttm.pages_limit and every other parameter as before."""
    import shutil

    etc = tmp_path / "etc"
    shutil.rmtree(etc, ignore_errors=True)
    (etc / "default/grub.d").mkdir(parents=True)
    files = [("/etc/default/grub", f'GRUB_CMDLINE_LINUX_DEFAULT=""\nGRUB_CMDLINE_LINUX="{" ".join(main)}"\n'),
             (POSTED, f'GRUB_CMDLINE_LINUX="{form}' + "".join(w + g for w, g in zip(dropin, gaps, strict=False))[:-1]
              + '"\n' if dropin else f'GRUB_CMDLINE_LINUX="{form}"\n')]
    for path, text in files:
        (tmp_path / path.lstrip("/")).write_text(text)
    before = kernel_line(tmp_path)
    assert before == main + dropin  # the form adds the main value and one blank, or nothing
    edit = plan_cmdline_edit(files, "ttm.pages_limit", value, ("amdttm.pages_limit",),
                             main="/etc/default/grub", own_dropin="/etc/default/grub.d/99-ojai.cfg")
    for e in edit.edits:
        (tmp_path / e.path.lstrip("/")).write_text(e.after)
    after = kernel_line(tmp_path)
    limit_keys = ("ttm.pages_limit", "amdttm.pages_limit")
    assert [t for t in after if t.split("=")[0] in limit_keys] == [f"ttm.pages_limit={value}"]
    assert [t for t in after if t.split("=")[0] not in limit_keys] == \
        [t for t in before if t.split("=")[0] not in limit_keys]
    if edit.target == POSTED:  # the drop-in keeps its way of appending
        assert (tmp_path / POSTED.lstrip("/")).read_text().startswith(f'GRUB_CMDLINE_LINUX="{form}')
