"""The end of an apply says what comes next, in order: the reboot when one is due, ``ojai
doctor`` (with the same ``--root``) to confirm the limit, then how to start each route and the
``ojai verify`` that checks it."""

from __future__ import annotations

from typer.testing import CliRunner

from ojai_setup.cli import app


def test_an_apply_that_needs_a_reboot_ends_with_the_reboot_doctor_then_the_routes(machine):
    root = machine("ojai-fresh")
    result = CliRunner().invoke(app, ["setup", "--root", str(root), "--llamacpp", "none",
                                      "--apply", "--yes"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    tail = result.stdout[result.stdout.index("Next, in order:"):].splitlines()
    assert tail[:5] == [
        "Next, in order:",
        "  1. reboot (the kernel reads the TTM limit only at boot):",
        "       sudo reboot",
        "  2. after the reboot, confirm that the GPU memory limit is active:",
        f"       ojai doctor --root {root}",
    ]
    rest = " ".join(" ".join(tail[5:]).split())
    assert rest.startswith("3. start each route and check it"), rest
    assert rest.endswith(f"- start flm gemma4-it:e4b: /opt/ojai/routes/flm-gemma4-it-e4b.sh; "
                         f"then check it: ojai verify --root {root} --route 'flm gemma4-it:e4b'")



def test_an_apply_that_needs_no_reboot_says_so_and_starts_with_the_routes(machine):
    """On a box whose limit is already active (ojai-rebooted) nothing the apply changes waits
    for a boot: no reboot and no doctor-after-reboot step, a sentence saying no reboot is
    needed, then the routes to start, each with its verify carrying the same --root."""
    root = machine("ojai-rebooted")
    result = CliRunner().invoke(app, ["setup", "--root", str(root), "--llamacpp", "none",
                                      "--apply", "--yes"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    assert "sudo reboot" not in result.stdout and ". reboot" not in result.stdout, result.stdout
    before, _, after = result.stdout.partition("Next, in order:")
    assert before.rstrip().endswith(
        "no reboot is needed: nothing this apply changed is read only at boot"), before[-300:]
    tail = after.splitlines()[1:]
    assert tail[0].startswith("  1. start each route and check it"), tail
    rest = " ".join(" ".join(tail).split())
    assert "ojai doctor" not in rest, rest
    assert rest.endswith(f"then check it: ojai verify --root {root} --route "
                         f"'flm gemma4-it:e4b'"), rest
