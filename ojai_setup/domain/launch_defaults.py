"""The launch settings owners of these APUs rely on, decided per route from the binary's dialect.

- **Flash attention on** (``-fa on``; a bare ``-fa`` in builds whose flag takes no value)
  wherever the binary has the option: b11434's default is ``auto``, which turns it off for any
  layer a backend does not support; ``on`` asks for it outright. The CPU, HIP and Vulkan
  backends of current llama.cpp all have flash-attention kernels.
- **No memory-mapped weights on GPU routes** (``--load-mode none`` in b11434, ``--no-mmap`` in
  older builds): ROCm loads of large models through mmap crawl (llama.cpp#15018), and
  kyuz0/amd-strix-halo-toolboxes warns that without it and flash attention these boxes "will
  crawl/crash". A CPU route keeps the build's default (mmap shares the page cache).
- **Every layer on the GPU** (``-ngl all``) on a GPU route.

Each is set by the catalog route (``flash_attn``, ``load_mode``) or by ``ojai setup
--flash-attn`` / ``--load-mode``, which win; the plan says which and why (:func:`decide`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from ojai_setup.formats.llama_help import Dialect

FlashAttn = Literal["on", "off", "auto"]


class LaunchDefaults(BaseModel):
    model_config = ConfigDict(frozen=True)

    flash_attn: FlashAttn | None = None  # None: the option is left out
    load_mode: str | None = None  # None: the build's default
    gpu_layers: Literal["all"] | None = None
    #: one phrase per setting: what it is and why
    reasons: tuple[str, ...] = ()

    def sentence(self) -> str:
        return "; ".join(self.reasons)


def decide(dialect: Dialect, *, gpu: bool, catalog_flash_attn: FlashAttn | None = None,
           catalog_load_mode: str | None = None, flash_attn: FlashAttn | None = None,
           load_mode: str | None = None) -> LaunchDefaults:
    """The settings for one route: the command line's (``flash_attn``, ``load_mode``) over the
    catalog's over ojai's defaults."""
    reasons: list[str] = []
    fa: FlashAttn | None
    if flash_attn is not None:
        fa, why = flash_attn, "as --flash-attn asks"
    elif catalog_flash_attn is not None:
        fa, why = catalog_flash_attn, "as the catalog route sets"
    else:
        fa, why = "on", "ojai's default where the binary has the option"
    if dialect.flash_attn is None:
        if fa != "off":
            reasons.append("flash attention: the binary has no option for it (left to the build)")
        fa = None
    elif dialect.flash_attn == "flag" and fa != "on":
        reasons.append(f"flash attention {fa} {why}: this build's -fa takes no value, so it is "
                       "left off the command line")
        fa = None
    else:
        reasons.append(f"flash attention {fa} ({why})")
    lm: str | None
    if load_mode is not None:
        lm, why = load_mode, "as --load-mode asks"
    elif catalog_load_mode is not None:
        lm, why = catalog_load_mode, "as the catalog route sets"
    elif gpu:
        lm, why = "none", ("weights read into memory, not memory-mapped: ROCm loads of large models "
                           "through mmap crawl, llama.cpp#15018")
    else:
        lm, why = None, "a CPU route keeps the build's memory-mapped weights"
    if lm is not None:
        spelt = "--load-mode " + lm if dialect.load_modes is not None else {
            "none": "--no-mmap", "mmap": "the default", "mlock": "--no-mmap --mlock",
            "mmap+mlock": "--mlock"}.get(lm, f"--load-mode {lm}")
        reasons.append(f"load mode {lm} ({spelt}; {why})")
    else:
        reasons.append(why)
    if gpu:
        reasons.append("every layer on the GPU (-ngl all)")
    return LaunchDefaults(flash_attn=fa, load_mode=lm, gpu_layers="all" if gpu else None,
                          reasons=tuple(reasons))
