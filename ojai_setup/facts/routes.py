"""The routes ojai wrote, as its records (``state.json``) hold them: each llama-server route by
name, the NPU route (``flm TAG``) and, where Lemonade is installed, each of its models
(``lemonade MODEL``), read through the root."""

from __future__ import annotations

from ojai_setup.core.paths import FLM_PORT
from ojai_setup.core.root import Root


def routes_of(root: Root) -> dict[str, dict]:
    """Route name -> its record (a llama-server route's has its ``port`` and ``script``; the
    NPU route's its ``flm_tag``; a Lemonade model's its ``lemonade`` settings)."""
    from ojai_setup.facts.state import read_state

    records = read_state(root).records
    routes = {k: v for k, v in records.get("routes", {}).items()
              if isinstance(v, dict) and "port" in v}
    npu = records.get("npu")
    if isinstance(npu, dict) and npu.get("tag"):
        routes[f"flm {npu['tag']}"] = {"port": npu.get("port", FLM_PORT), "flm_tag": npu["tag"],
                                         "script": npu.get("script")}
    lemonade = records.get("lemonade")
    if isinstance(lemonade, dict) and lemonade.get("model") and lemonade_installed(root):
        lengths = lemonade.get("draft_n_max_by_model") or {}
        for model in lemonade.get("models") or [lemonade["model"]]:  # several: each by name
            routes[f"lemonade {model}"] = {"lemonade": {
                **lemonade, "model": model,
                "draft_n_max": lengths.get(model, lemonade.get("draft_n_max"))}}
    return routes


def lemonade_installed(root: Root) -> bool:
    """Whether Lemonade's server or its command is on the machine's PATH."""
    return any(root.which(tool) for tool in ("lemond", "lemonade"))
