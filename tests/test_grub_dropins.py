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
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.domain.cmdline_edit import plan_cmdline_edit
from ojai_setup.facts.grub_env import configured_cmdline, source_grub_files
from ojai_setup.formats.grub import GrubEditError

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
    assert report["facts"]["ttm"]["grub_file"] == "/etc/default/grub.d/99-ojai.cfg"
    assert report["facts"]["grub"]["winners"]["GRUB_CMDLINE_LINUX_DEFAULT"] == \
        "/etc/default/grub.d/99-ojai.cfg"


def test_a_drop_in_bash_cannot_source_blocks_naming_it(machine):
    root = with_dropins(machine, **{"50_bad.cfg": "false\n"})
    result = ojai("setup", "--root", str(root), *NO_EXTRAS)
    assert result.exit_code == 1
    assert "bash stops" in result.stdout and "in /etc/default/grub.d/50-bad.cfg" in result.stdout


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
