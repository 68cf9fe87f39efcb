"""A planning Context for tests, gathered offline from a machine folder."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from ojai_setup.core.errors import RemoteError
from ojai_setup.core.root import Root
from ojai_setup.domain.lemonade_release import LemonadeDeb
from ojai_setup.domain.nightly import NightlyAsset
from ojai_setup.model.facts import Facts
from ojai_setup.model.settings import Settings
from ojai_setup.planning.context import Context
from ojai_setup.planning.gather import Remote, gather


def offline(tag: str | None, family: str) -> NightlyAsset:
    raise RemoteError("GitHub is not reachable from this test")


def offline_lemonade(tag: str | None) -> LemonadeDeb:
    raise RemoteError("GitHub is not reachable from this test")


OFFLINE = Remote(release=offline, lemonade_release=offline_lemonade)


def context(root: Root, facts: Facts | None = None, *, remote: Remote = OFFLINE,
            **settings) -> Context:
    """``gather`` on ``root`` with ``settings``; ``facts`` replaces the collected ones."""
    return gather(root, Settings(**settings), facts=facts, remote=remote)


@dataclass(frozen=True)
class ToyContext:
    """The three things :func:`~ojai_setup.planning.plan.make_plan` reads of a context, for
    tests of the plan and executor machinery with toy steps, facts and settings."""

    root: Root
    facts: BaseModel
    settings: BaseModel
