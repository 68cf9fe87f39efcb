"""The names and places of the routes ojai writes for a catalog model."""

from __future__ import annotations

from ojai_setup.core.paths import ROUTES_DIR


def route_names(model: str, suffix: str = "mtp") -> tuple[str, str]:
    """The drafted route and the plain route of a catalog model: ``<model>-<suffix>`` and
    ``<model>``. ``suffix`` names the drafting kind (the catalog route's ``drafted_suffix``):
    ``mtp`` for MTP heads (chained with n-gram types or not), ``draft`` for a separate draft
    model, ``ngram`` for n-gram drafting."""
    return f"{model}-{suffix}", model


def script_path(route: str) -> str:
    """Where the launch script of ``route`` lives on the machine."""
    return f"{ROUTES_DIR}/{route}.sh"
