"""The hardened route for real: a fresh OJAI box set up with `--systemd --api-key-file` under
umask 000, then the route's launch script run as an unprivileged user with the environment
its unit gives it (the root-only environment file), serving with the real llama-server, which
refuses requests without the key. The key appears in no script, unit, plan or journal.

Where systemd can run (the Debian VM of the boot-path tests), the unit itself starts it; here
the unit's two effects that matter to llama-server are reproduced: the environment file, and
a user who owns nothing (`setpriv` to nobody, in a private mount namespace where /opt and
/var/lib are the test machine's own).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from support.fake_github import (  # noqa: F401
    FakeGitHub,
    fake_github,
    make_zip,
    nightly_entries_from_build,
)
from support.fake_hub import FakeHub, fake_hub  # noqa: F401
from support.llama import llama_server_bin  # noqa: F401
from support.machine_state import store_capture
from support.server import free_port, serve
from support.stand_ins import route_toml
from support.tiny_models import write_mtp_pair
from typer.testing import CliRunner

from ojai_setup.cli import app
from ojai_setup.core.root import CommandResult
from ojai_setup.domain.nightly import asset_name

pytestmark = pytest.mark.slow

REPO = "ojai-test/tiny-gemma4-GGUF"
ROUTE = "tiny-gemma"
KEY = "ojai-test-key-7f3a9c1e5b2d4f60"


def ojai(*args: object):
    return CliRunner().invoke(app, [str(a) for a in args])


def as_nobody(root: Path, script: str) -> list[str]:
    """The launch script as an unprivileged user, /opt and /var/lib being the machine's."""
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            'mount --bind "$1/opt" /opt && mount --bind "$1/var/lib" /var/lib && '
            'exec setpriv --reuid=65534 --regid=65534 --clear-groups bash "$2"',
            "sh", str(root), script]


def post(url: str, key: str | None) -> int:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(url, data=json.dumps({"content": "hello"}).encode(),
                                 headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_hardened_route_serves_as_nobody_with_its_key(machine, tmp_path, fake_github: FakeGitHub,
                                                     fake_hub: FakeHub, llama_server_bin: Path):
    root = machine("ojai-fresh")
    store_capture(root, CommandResult(("systemctl", "daemon-reload"), 0, ""))
    nightly = make_zip(tmp_path / "nightly.zip",
                       nightly_entries_from_build(llama_server_bin.parent, llama_server_bin))
    fake_github.add_release("b1311", {asset_name("b1311", "gfx1150"): nightly})
    pair = write_mtp_pair(tmp_path / "published")
    fake_hub.add_path(REPO, pair.main.name, pair.main)
    fake_hub.add_path(REPO, pair.draft.name, pair.draft)
    catalog = tmp_path / "catalog.toml"
    catalog.write_text(route_toml(ROUTE, REPO, pair.main, pair.draft, draft_n_max=3))
    key_file = tmp_path / "api-key"
    key_file.write_text(KEY + "\n")
    port = free_port()
    setup = ["setup", "--root", root, "--model", ROUTE, "--catalog", catalog, "--port", port,
             "--systemd", "--api-key-file", key_file, "--no-npu"]
    plan_file = tmp_path / "plan.json"

    old = os.umask(0)
    try:
        planned = ojai(*setup, "--out", plan_file)
        assert planned.exit_code == 2, planned.output
        assert "write LLAMA_API_KEY from" in planned.stdout
        applied = ojai("setup", "--root", root, "--apply", "--plan", plan_file)
        assert applied.exit_code == 0, applied.output
    finally:
        os.umask(old)

    env_file = root / "etc/ojai/llama-server.env"
    assert env_file.read_text() == f"LLAMA_API_KEY={KEY}\n"
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    assert stat.S_IMODE((root / "etc/ojai").stat().st_mode) == 0o700
    unit = (root / f"etc/systemd/system/ojai-{ROUTE}-mtp.service").read_text()
    assert "EnvironmentFile=/etc/ojai/llama-server.env" in unit and "User=ojai" in unit
    assert "ojai:x:" in (root / "etc/passwd").read_text()
    for p in [plan_file, *root.rglob("*")]:
        if p.is_file() and p != env_file and not p.name.endswith(".gguf"):
            assert KEY not in p.read_text(errors="replace"), p
    again = ojai(*setup, "--apply", "--yes")
    assert again.exit_code == 0 and "nothing to do: every step is satisfied" in again.stdout

    models = root / "var/lib/ojai/models"
    for p in [models, *models.rglob("*")]:
        assert stat.S_IMODE(p.stat().st_mode) == (0o755 if p.is_dir() else 0o644), p

    script = f"/opt/ojai/routes/{ROUTE}-mtp.sh"
    env = {**os.environ, "LLAMA_API_KEY": KEY}  # what EnvironmentFile= gives the service
    with serve(as_nobody(root, script), port, tmp_path / "mtp.log", env=env) as server:
        assert post(f"{server.url}/tokenize", None) == 401
        assert post(f"{server.url}/tokenize", "wrong-key-0123456789") == 401
        assert post(f"{server.url}/tokenize", KEY) == 200
        owner = subprocess.run(["ps", "-o", "user=", "-p", str(server.process.pid)],
                               capture_output=True, text=True).stdout.split()
        verify = ojai("verify", "--root", root, "--json", "--route", f"{ROUTE}-mtp")
    assert verify.exit_code == 0, verify.output
    assert json.loads(verify.stdout)["routes"][0]["healthy"]
    assert owner == ["nobody"]  # the exec chain ends in llama-server, run by nobody
