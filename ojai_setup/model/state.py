"""The records of ``state.json``: the last apply, what is still owed, and what runs now (the
journal's records are in :mod:`ojai_setup.model.journal`)."""

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict


# -- models ----------------------------------------------------------------------------------
class HandlerRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    argv: tuple[str, ...]
    env: dict[str, str] = {}
    exit_code: int | None = None


class State(BaseModel):
    """``state.json``."""

    model_config = ConfigDict(extra="forbid")

    last_apply: str | None = None
    records: dict[str, Any] = {}
    #: handlers that were due when an apply failed; the next apply runs them
    pending_handlers: list[HandlerRecord] = []
    #: the apply or rollback under way (set before its first change, cleared when it ends);
    #: still set while nobody holds the lock means it was interrupted
    running: str | None = None


class ApplyStatus(BaseModel):
    """What doctor and setup say about ojai's own applies on a machine."""

    model_config = ConfigDict(extra="forbid")

    last_apply: str | None = None
    #: an apply or rollback is running now (another process holds the lock)
    running: bool = False
    #: the id of an apply or rollback whose process died before the end
    interrupted: str | None = None
    kind: Literal["apply", "rollback"] | None = None
    done: int = 0
    total: int = 0
    #: follow-up commands owed (update-grub, update-initramfs) and not yet run
    owed: list[str] = []
    #: what an interrupted install left in ojai's llama.cpp folder (unpack staging, a zip, a
    #: retired install, a build's temp folder), as machine paths
    leftovers: list[str] = []
    #: the whole ``ojai setup ... --apply`` command of the apply that was interrupted or left
    #: follow-ups owed, as its journal recorded it
    command: str | None = None
