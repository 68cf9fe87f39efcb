"""pydantic's plugin search, skipped when the environment says there are no plugins.

On the first model it builds, pydantic asks ``pydantic.plugin._loader.get_plugins()``, whose
module imports :mod:`importlib.metadata` (and with it ``email``, ``zipfile``, ``csv``: about
20 ms, the largest single cost of ``ojai doctor --json`` after the stack's own imports) even
when ``PYDANTIC_DISABLE_PLUGINS`` makes it return ``()`` before looking at any entry point.
When that variable says so, a stand-in module whose ``get_plugins`` returns the same ``()`` is
registered first. Nothing changes when the variable names only some plugins, when pydantic
already loaded its own, or when a pydantic release no longer has that module (tests/
test_pydantic_plugins.py compares the stand-in with the real loader of the installed release).
"""

from __future__ import annotations

import os
import sys
import types

LOADER = "pydantic.plugin._loader"
#: the values of PYDANTIC_DISABLE_PLUGINS for which pydantic's loader returns no plugins
ALL_DISABLED = ("__all__", "1", "true")


def _no_plugins() -> tuple[()]:
    return ()


def skip_plugin_search() -> bool:
    """Register the stand-in loader when it answers as pydantic's would; whether it did."""
    if os.environ.get("PYDANTIC_DISABLE_PLUGINS") not in ALL_DISABLED or LOADER in sys.modules:
        return False
    import importlib.util

    try:
        if importlib.util.find_spec(LOADER) is None:
            return False
    except ModuleNotFoundError:
        return False
    stand_in = types.ModuleType(LOADER, __doc__)
    stand_in.get_plugins = _no_plugins  # type: ignore[attr-defined]
    sys.modules[LOADER] = stand_in
    return True
