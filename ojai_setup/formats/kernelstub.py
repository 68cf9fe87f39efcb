"""kernelstub's ``/etc/kernelstub/configuration`` (Pop!_OS), read and edited by key (pure).

kernelstub (``kernelstub/config.py``) keeps its configuration as JSON: ``{"default": {...},
"user": {"kernel_options": ["quiet", "splash", ...], "esp_path": "/boot/efi", ...}}``, and
writes it back with ``json.dump(config, f, indent=2)``. The ``user`` section is what it boots:
``kernelstub -a OPT`` / ``-d OPT`` add and remove items of ``user.kernel_options``, and every
run (the kernel and initramfs hooks run ``kernelstub --verbose --preserve-live-mode``) writes
the loader entry ``loader/entries/Pop_OS-current.conf`` on the ESP from it, after
``root=UUID=... ro``. A configuration without ``user`` uses ``default``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ojai_setup.formats.kernel_params import param_key, same_key
from ojai_setup.formats.kernel_cmdline import CmdlineFormatError, check_edit


def _load(text: str, source: str) -> dict[str, Any]:
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CmdlineFormatError(f"{source}: not valid JSON ({exc.msg} at line {exc.lineno}); "
                                 "kernelstub cannot read it either; fix it and run ojai again"
                                 ) from None
    if not isinstance(config, dict) or not isinstance(config.get("user", config.get("default")),
                                                      dict):
        raise CmdlineFormatError(f"{source}: has no \"user\" or \"default\" section; run "
                                 "`sudo kernelstub --print-config` to see what kernelstub reads")
    return config


def kernel_options(text: str, source: str = "/etc/kernelstub/configuration") -> list[str]:
    """The kernel options kernelstub boots with (``user``, else ``default``)."""
    config = _load(text, source)
    options = config.get("user", config.get("default", {})).get("kernel_options", [])
    if isinstance(options, str):
        options = options.split()
    if not isinstance(options, list) or not all(isinstance(o, str) for o in options):
        raise CmdlineFormatError(f"{source}: kernel_options is not a list of strings")
    return [o for o in options if o]


def edit_kernel_options(text: str, key: str, value: str, drop_keys: Sequence[str] = (), *,
                        source: str = "/etc/kernelstub/configuration") -> str:
    """The configuration with exactly one ``key=value`` in ``user.kernel_options`` (the last
    existing ``key`` rewritten in place, else appended) and none of ``drop_keys``, written
    the way kernelstub writes it (JSON, indent 2)."""
    config = _load(text, source)
    options = kernel_options(text, source)
    wanted = f"{key}={value}"
    hits = [i for i, o in enumerate(options) if same_key(param_key(o), key)]
    new: list[str] = []
    for i, o in enumerate(options):
        if hits and i == hits[-1]:
            new.append(wanted)
        elif same_key(param_key(o), key) or any(same_key(param_key(o), k) for k in drop_keys):
            continue
        else:
            new.append(o)
    if not hits:
        new.append(wanted)
    check_edit(new, key, value, drop_keys, source=source)
    if new == options:
        return text
    user = dict(config.get("user", config.get("default", {})))
    user["kernel_options"] = new
    config["user"] = user
    return json.dumps(config, indent=2) + ("\n" if text.endswith("\n") else "")
