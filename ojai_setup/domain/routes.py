"""The names and places of the routes ojai writes for a catalog model."""

from __future__ import annotations

from ojai_setup.core.paths import ROUTES_DIR


def route_names(model: str) -> tuple[str, str]:
    """The MTP route and the plain route of a catalog model."""
    return f"{model}-mtp", model


def script_path(route: str) -> str:
    """Where the launch script of ``route`` lives on the machine."""
    return f"{ROUTES_DIR}/{route}.sh"
