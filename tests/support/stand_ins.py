"""Parts added to a test machine copy: a llama-server stand-in, Lemonade as a system service,
Debian unstable's HIP toolchain (captured, tests/data/hip/README.md) and user catalog routes
for tiny models.

The stand-in and the Lemonade parts are composed, not captured: the stand-in answers
``--version`` and ``--help`` as upstream llama.cpp build 11434 does (the version line of
REFERENCE.md and the help text shipped with ojai), and Lemonade's unit is the one its
lemond.service describes (user lemonade, ProtectHome=yes, StateDirectory=lemonade), enabled
the way ``systemctl enable`` links it, with ``lemonade --version`` printing a v11.7.0 line and
the listed CLI calls succeeding without output (ojai does not read their output).
"""

from __future__ import annotations

import json
from pathlib import Path

from ojai_setup.core.root import COMMANDS_DIR, command_key

HELP = Path(__file__).resolve().parents[2] / "ojai_setup" / "formats" / "reference-help-b11434.txt"
SID_TOOLCHAIN = Path(__file__).resolve().parents[1] / "data" / "hip" / "debian-sid-rocm6.4"
LEMONADE_CONFIG = "var/lib/lemonade"


def give_llama_server(root: Path, family: str | None = None) -> Path:
    """A llama-server stand-in in ojai's install layout (``current`` -> ``b1311-<family>``);
    with ``family``, the install record of a nightly build for that GPU family."""
    folder = root / f"opt/ojai/llama.cpp/b1311-{family or 'stand-in'}"
    folder.mkdir(parents=True)
    server = folder / "llama-server"
    server.write_text("#!/bin/sh\n"
                      'case "$1" in\n'
                      "  --version) echo 'version: 0.6.0-dev (build 11434, commit abc1234)' >&2 ;;\n"
                      f"  --help) cat '{HELP}' ;;\n"
                      "  *) exit 1 ;;\n"
                      "esac\n")
    server.chmod(0o755)
    if family:
        (folder / "ojai-install.json").write_text(json.dumps({"tag": "b1311", "family": family}))
    (root / "opt/ojai/llama.cpp/current").symlink_to(folder.name)
    return server


#: what Lemonade 11.7.0 prints for ``--version`` (the default stand-in)
LEMONADE_11_7 = {"lemonade --version": "lemonade version 11.7.0\n"}


def give_hip_toolchain(root: Path) -> Path:
    """Debian unstable's HIP toolchain (hipcc 7.0.2 on clang 21, ROCm 6.4's hip, hipBLAS and
    rocBLAS CMake packages) as captured from a real install: what ojai's toolchain check
    reads, so that a HIP source build of gfx1150 or gfx1151 can be planned on ``root``."""
    import shutil

    shutil.copytree(SID_TOOLCHAIN, root, symlinks=True, dirs_exist_ok=True)
    return root


def give_built_llama_server(root: Path, built: Path) -> Path:
    """ojai's install layout (``current`` -> ``b11434-cpu``) holding the real CPU llama-server
    the tests build (``built``, with its libraries and its install record: a source build,
    backend cpu). Returns the executable's path in ``root``."""
    import shutil

    folder = root / "opt/ojai/llama.cpp/b11434-cpu"
    shutil.copytree(built.parent, folder, symlinks=True)
    (root / "opt/ojai/llama.cpp/current").symlink_to(folder.name)
    return folder / "llama-server"


def give_lemonade(root: Path, commands: tuple[str, ...], *, user_models: str | None = None,
                  recipe_options: str | None = None,
                  versions: dict[str, str] | None = None) -> Path:
    """Lemonade as the enabled system service, its ``commands`` answering, and the user's own
    registry files when given. ``versions``: the output of each version command (default:
    11.7.0's ``lemonade --version``). Returns its config folder."""
    unit = root / "usr/lib/systemd/system/lemond.service"
    unit.parent.mkdir(parents=True, exist_ok=True)
    unit.write_text("[Unit]\nDescription=Lemonade Server\n\n[Service]\nUser=lemonade\n"
                    "StateDirectory=lemonade\nProtectHome=yes\nExecStart=/usr/bin/lemond\n\n"
                    "[Install]\nWantedBy=multi-user.target\n")
    wants = root / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    (wants / "lemond.service").symlink_to("/usr/lib/systemd/system/lemond.service")
    for argv, stdout in (*(versions or LEMONADE_11_7).items(), *((c, "") for c in commands)):
        folder = root / COMMANDS_DIR / command_key(argv.split())
        folder.mkdir(parents=True)
        (folder / "stdout").write_text(stdout)
        (folder / "exit_code").write_text("0\n")
    config = root / LEMONADE_CONFIG
    config.mkdir(parents=True)
    if user_models is not None:
        (config / "user_models.json").write_text(user_models)
    if recipe_options is not None:
        (config / "recipe_options.json").write_text(recipe_options)
    return config


def route_toml(name: str, repo: str, main: Path, draft: Path | None, *,
               context_size: int = 2048, full_layers: int = 1, draft_n_max: int = 2) -> str:
    """A user catalog route for ``main`` (and its MTP ``draft``) with the files' exact sizes."""
    lines = [f"[routes.{name}]", f'title = "{name} (test route)"', f'repo = "{repo}"',
             f'main = [{{ file = "{main.name}", size = {main.stat().st_size} }}]',
             f'lemonade_checkpoint = "{repo}:{main.name}"']
    if draft is None:
        lines.append('mtp = "in_file"')
    else:
        lines += [f'draft = {{ file = "{draft.name}", size = {draft.stat().st_size} }}',
                  'mtp = "sidecar"', f'lemonade_draft_checkpoint = "{repo}:{draft.name}"']
    lines += [f"context_size = {context_size}", "max_context = 1048576", "overhead_bytes = 0",
              f"draft_n_max = {draft_n_max}", "sizes_estimated = false", f"[routes.{name}.kv]",
              f"full_layers = {full_layers}", "full_kv_heads = 8", "full_head_dim = 128"]
    return "\n".join(lines) + "\n"
