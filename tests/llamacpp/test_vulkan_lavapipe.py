"""llama.cpp's Vulkan backend for real, with no GPU: Debian sid's ``libggml0-backend-vulkan``
(ggml 0.27.0-1, loaded by ``llama.cpp-tools`` build 11669) on Mesa's lavapipe, in a layer of its
own over the sid llama.cpp overlay (tests/support/sid_vulkan.py). A route ojai renders for a
Vulkan build (its arguments in the 11669 dialect, every layer on the GPU, and the launch script
of a Vulkan build: no HSA override, no library path) serves the real Gemma 3 270M on the
lavapipe device and answers a completion of a few tokens.

ggml's Vulkan backend leaves CPU-type devices (lavapipe) out of its device list unless they are
named in ``GGML_VK_VISIBLE_DEVICES`` (``llama-server --list-devices`` shows "(none)" without
it): the test names device 0, as an owner of a machine without a GPU would have to.
"""

from __future__ import annotations

import json
import os
import time
import urllib.request
from pathlib import Path

import pytest
from support import sid_vulkan
from support.distro_box import SID
from support.gemma import gemma_model  # noqa: F401 - a fixture
from support.server import free_port, serve

from ojai_setup.domain.launch import render_llama_script
from ojai_setup.domain.render import Route, render_args
from ojai_setup.formats.llama_help import parse_help, parse_version

pytestmark = pytest.mark.slow

MODEL = "/models/gemma-3-270m-q4_k_m.gguf"
LAVAPIPE = {"GGML_VK_VISIBLE_DEVICES": "0"}
#: the route runs with ``--device Vulkan0`` (from the environment, as ``-dev``'s help says): a
#: server without that device refuses to start, so serving proves the weights are on it; Mesa's
#: shader cache is kept in the layer's cache folder between runs (lavapipe compiles every
#: pipeline ggml's Vulkan backend makes at start)
ROUTE_ENV = {**LAVAPIPE, "LLAMA_ARG_DEVICE": "Vulkan0", "MESA_SHADER_CACHE_DIR": "/mesa-cache"}


@pytest.fixture(scope="module")
def layer() -> Path:
    if os.geteuid() != 0:
        pytest.fail("the sid overlay needs root (unshare, mount): run the tests as root")
    return sid_vulkan.ensure_sid_vulkan()


def test_the_layer_is_debians_vulkan_backend_of_the_same_ggml(layer):
    versions = json.loads((layer / "ready.json").read_text())["versions"]
    assert versions["libggml0-backend-vulkan"] == versions["libggml0"] == "0.27.0-1"
    assert versions["llama.cpp-tools"] == "1:0.7.0+dfsg-2"  # build 11669
    listed = sid_vulkan.run_in_overlay(["llama-server", "--list-devices"], timeout=120)
    assert "(none)" in listed.stdout  # lavapipe is a CPU device: left out unless named
    named = sid_vulkan.run_in_overlay(["llama-server", "--list-devices"], env=LAVAPIPE,
                                      timeout=120)
    assert "Vulkan0: llvmpipe" in named.stdout, named.stdout


def test_a_vulkan_route_serves_gemma_on_lavapipe(layer, tmp_path, gemma_model):
    model = gemma_model
    dialect = parse_help((SID / "llama-server-help.txt").read_text(),
                         version=parse_version((SID / "llama-server-version.txt").read_text()))
    port = free_port()
    route = Route(name="gemma-vulkan", model=MODEL, ctx_size=512, parallel=1, port=port,
                  n_gpu_layers="all")
    args = render_args(route, dialect)
    script = tmp_path / "routes/gemma-vulkan.sh"
    script.parent.mkdir()
    script.write_text(render_llama_script("/usr/bin/llama-server", args, {}, route.name))
    text = script.read_text()
    assert "HSA_OVERRIDE" not in text and "LD_LIBRARY_PATH" not in text
    shaders = layer / "mesa-cache"
    shaders.mkdir(exist_ok=True)
    argv = sid_vulkan.overlay_argv(tmp_path / "scratch", ["bash", "/routes/gemma-vulkan.sh"],
                                   env=ROUTE_ENV, binds=[(script.parent, "/routes"),
                                                         (model.parent, "/models"),
                                                         (shaders, "/mesa-cache")])
    log = tmp_path / "server.log"
    started = time.monotonic()
    with serve(argv, port, log, ready_timeout=600):
        loaded = time.monotonic() - started
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/completion", method="POST",
            data=json.dumps({"prompt": "The capital of France is", "n_predict": 4,
                             "temperature": 0, "cache_prompt": False}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=600) as response:
            answer = json.loads(response.read())
        answered = time.monotonic() - started - loaded
    served = log.read_text(errors="replace")
    print(f"lavapipe: loaded in {loaded:.1f} s, 4 tokens in {answered:.1f} s")
    assert "model loaded" in served, served[-3000:]
    assert answer["tokens_predicted"] == 4 and answer["content"].strip(), answer
