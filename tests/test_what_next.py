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

