"""Debian sid's llama-server with its Vulkan backend on Mesa's lavapipe, as one executable a
launch script can name (the "Vulkan build" beside the CPU build in tests of the backend
choice): each run enters the sid Vulkan layer (:mod:`support.sid_vulkan`) in a scratch layer
of its own (servers run side by side), with the model folders bound at their own paths and
lavapipe named as the Vulkan device (``GGML_VK_VISIBLE_DEVICES``, ``LLAMA_ARG_DEVICE``; a
``--device`` on the command line, such as the gate's ``--device none``, wins over it). An
``ojai-install.json`` beside it says ``backend: vulkan``, as ojai's own installs do."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from pathlib import Path

ENV = {"GGML_VK_VISIBLE_DEVICES": "0", "LLAMA_ARG_DEVICE": "Vulkan0",
       "MESA_SHADER_CACHE_DIR": "/mesa-cache"}


def write_lavapipe_backend(folder: Path, models: Iterable[Path]) -> Path:
    from support import sid_vulkan

    layer = sid_vulkan.ensure_sid_vulkan()
    (layer / "mesa-cache").mkdir(exist_ok=True)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "scratch").mkdir(exist_ok=True)
    binds = [(str(layer / "mesa-cache"), "/mesa-cache")]
    binds += [(str(Path(m).resolve()), str(Path(m).resolve())) for m in models]
    path = folder / "llama-server"
    tests = Path(__file__).resolve().parents[1]
    path.write_text(
        f"#!{sys.executable}\n"
        "import os, sys, tempfile\n"
        f"sys.path.insert(0, {str(tests)!r})\n"
        "from pathlib import Path\n"
        "from support import sid_vulkan\n"
        f"scratch = Path(tempfile.mkdtemp(dir={str(folder / 'scratch')!r}))\n"
        f"argv = sid_vulkan.overlay_argv(scratch, ['llama-server', *sys.argv[1:]], env={ENV!r}, "
        f"binds={binds!r})\n"
        "os.execvp(argv[0], argv)\n")
    path.chmod(0o755)
    (folder / "ojai-install.json").write_text(json.dumps({"backend": "vulkan", "tag": "b11669",
                                                          "source": "Debian sid libggml0-backend-vulkan"}))
    return path
