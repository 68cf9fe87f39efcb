"""What the boot scenarios on the Debian 12 test machine share: a booted guest per test, and
readers of the three states of the TTM limit in it (configured, generated, active)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from support.vm import Machine, from_snapshot, vm_booted  # noqa: F401  (fixture)

GIB_PAGES = 262144
PAGES = GIB_PAGES  # --gpu-memory 1
SETUP = "ojai setup --llamacpp none --no-npu --gpu-memory 1"
DOCTOR = "ojai doctor --json --profile strix-halo"
LIVE = "/sys/module/ttm/parameters/pages_limit"
#: what Ubuntu's cloud images ship (/etc/default/grub.d/50-cloudimg-settings.cfg)
CLOUD_DROP_IN = """\
# Cloud Image specific Grub settings for Generic Cloud Images
# CLOUD_IMG: This file was created/modified by the Cloud Image build process

# Set the recordfail timeout
GRUB_RECORDFAIL_TIMEOUT=0

# Do not wait on grub prompt
GRUB_TIMEOUT=0

# Set the default commandline
GRUB_CMDLINE_LINUX_DEFAULT="console=tty1 console=ttyS0"
"""


@pytest.fixture
def vm(vm_booted, tmp_path, request):
    """A booted guest on its own disk, started from the session's snapshot of a booted guest
    (no boot awaited); killed (its qemu only) after the test."""
    machine = from_snapshot(vm_booted, tmp_path / "vm", request.node.name[:40])
    yield machine
    machine.kill()


def live_pages(vm: Machine) -> int:
    return int(vm.succeed(f"cat {LIVE}").strip())


def assert_kernel_default(live: int, before: int) -> None:
    """``live`` is the kernel's own limit again: half the RAM the kernel counted at boot, which
    moves by a page or so from one boot to the next, and not the planned one."""
    assert live != PAGES, "the planned limit is still live"
    assert abs(live - before) <= before // 1000, f"{live} pages is not the kernel default {before}"


def cmdline_tokens(vm: Machine, key: str) -> list[str]:
    return [t for t in vm.succeed("cat /proc/cmdline").split() if t.startswith(key + "=")]


def generated_tokens(vm: Machine, key: str) -> list[list[str]]:
    """The ``key=`` tokens of each kernel line in /boot/grub/grub.cfg."""
    lines = [line.split() for line in vm.succeed("cat /boot/grub/grub.cfg").splitlines()
             if re.match(r"\s*linux\s", line)]
    assert lines, "grub.cfg has no kernel line"
    return [[t for t in line if t.startswith(key + "=")] for line in lines]


def doctor(vm: Machine) -> dict:
    result = vm.execute(DOCTOR)
    try:
        return json.loads(result.stdout)
    except ValueError:
        raise AssertionError(f"doctor did not print JSON:\n{result}") from None


def ttm_finding(vm: Machine) -> dict:
    return next(f for f in doctor(vm)["findings"] if f["id"] == "ttm.active")


def kill_apply_after_grub_write(vm: Machine) -> str:
    """Start an apply, kill -9 its whole process group as soon as /etc/default/grub holds the
    new limit (before the follow-up commands can finish), and return its output."""
    out = vm.succeed(f"""
        setsid {SETUP} --apply --yes >/root/apply.log 2>&1 </dev/null &
        pid=$!
        for i in $(seq 1 30000); do
            grep -q 'ttm.pages_limit={PAGES}' /etc/default/grub && break
            sleep 0.01
        done
        kill -9 -- -$pid
        wait $pid
        echo "exit=$?"
    """, timeout=900)
    assert "exit=137" in out, f"the apply was not killed in the middle:\n{out}"
    return vm.succeed("cat /root/apply.log")




# -- a model route in the guest: the hub stand-in runs inside it (the guest has no network) --
HUB_DIR = "/root/hub"
HUB_PORTS = (18080, 18081)  # the hub and its CDN, on the guest's 127.0.0.1
HUB_RUNNER = f"""\
import importlib.util, signal, sys
from pathlib import Path
sys.path.insert(0, {HUB_DIR!r})  # support/http_stand_in.py, which fake_hub.py is built on
spec = importlib.util.spec_from_file_location("fake_hub", {HUB_DIR!r} + "/fake_hub.py")
fake_hub = sys.modules["fake_hub"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(fake_hub)
repo, cut = sys.argv[1], int(sys.argv[2])
hub = fake_hub.FakeHub()
for f in sorted(Path({HUB_DIR!r}, "published").iterdir()):
    hub.add_path(repo, f.name, f)
if cut:
    hub.cut_next_download(cut)
hub.start(*{HUB_PORTS!r})
Path({HUB_DIR!r}, "url").write_text(hub.url)
signal.pause()
"""


def put_model_route(vm: Machine, repo: str, route: str, files: list[Path]) -> str:
    """Publish ``files`` (a route's GGUF files, made on the host) on a hub stand-in inside the
    guest (tests/support/fake_hub.py, run by the guest's Python), write the user catalog of
    ``route`` and a llama-server stand-in in ojai's install layout; returns the environment
    and options that point ``ojai setup`` at them. Start the hub with :func:`start_guest_hub`."""
    from support.stand_ins import HELP, route_toml

    for f in files:
        vm.write_bytes(f"{HUB_DIR}/published/{f.name}", f.read_bytes())
    vm.write_file(f"{HUB_DIR}/fake_hub.py", (Path(__file__).parent / "fake_hub.py").read_text())
    vm.write_file(f"{HUB_DIR}/support/http_stand_in.py",
                  (Path(__file__).parent / "http_stand_in.py").read_text())
    vm.write_file(f"{HUB_DIR}/run.py", HUB_RUNNER)
    vm.write_file("/root/catalog.toml", route_toml(route, repo, files[0],
                                                   files[1] if len(files) > 1 else None))
    server = "/opt/ojai/llama.cpp/b1311-stand-in/llama-server"
    vm.write_file(f"{server}.help", HELP.read_text())
    vm.write_file(server, "#!/bin/sh\ncase \"$1\" in\n"
                  "  --version) echo 'version: 0.6.0-dev (build 11434, commit abc1234)' >&2 ;;\n"
                  f"  --help) cat {server}.help ;;\n  *) exit 1 ;;\nesac\n", mode=0o755)
    vm.succeed("ln -sfn b1311-stand-in /opt/ojai/llama.cpp/current")
    return (f"HF_ENDPOINT=http://127.0.0.1:{HUB_PORTS[0]} HF_HUB_DISABLE_TELEMETRY=1 "
            f"{SETUP} --catalog /root/catalog.toml --model {route}")


def start_guest_hub(vm: Machine, repo: str, *, cut_after: int = 0) -> None:
    """Start the guest's hub stand-in; ``cut_after``: its first file download stops after so
    many bytes, and everything answers 503 from then on (a connection lost mid-download)."""
    vm.succeed(f"rm -f {HUB_DIR}/url; setsid /opt/ojai/bin/python {HUB_DIR}/run.py {repo} "
               f"{cut_after} "
               f">{HUB_DIR}/log 2>&1 </dev/null & echo $! > {HUB_DIR}/pid; "
               f"for i in $(seq 1 600); do [ -s {HUB_DIR}/url ] && exit 0; sleep 0.1; done; "
               f"cat {HUB_DIR}/log; ls -la {HUB_DIR}; exit 1")


def stop_guest_hub(vm: Machine) -> None:
    vm.succeed(f"kill $(cat {HUB_DIR}/pid) && while kill -0 $(cat {HUB_DIR}/pid) 2>/dev/null; "
               f"do sleep 0.1; done")
