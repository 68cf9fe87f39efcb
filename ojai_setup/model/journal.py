"""The records of the journal (``journal/<apply-id>.json``): what each apply or rollback planned,
changed and still owes.

They are built (``defer_build``) only when an apply, a rollback or a look at an interrupted
apply first uses them; doctor and a dry run import this module only then."""

from datetime import datetime
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict

from ojai_setup.model.state import HandlerRecord

JOURNAL_FORMAT: Final = "ojai-journal"


class FileRecord(BaseModel):
    """One path an apply (or rollback) changed."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    path: str
    existed_before: bool
    before: str | None  # path_digest before the change
    after: str | None = None  # path_digest after it
    backup: str | None = None  # relative to the state dir; None for links, dirs, large files
    mode: int | None = None  # permission bits of the original
    uid: int | None = None
    gid: int | None = None
    #: a download or install (a model file, a llama.cpp folder): rollback leaves it in place
    #: unless asked to remove downloads
    download: bool = False
    #: for a download: the folders that did not exist before it (made for it), outermost first
    made_dirs: list[str] = []
    #: for a path that did not exist: the content rollback writes instead of removing it
    #: (``WriteFile.rollback_to``)
    rollback_to: str | None = None


class ActionRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    step: str
    kind: str
    description: str
    changed: bool
    message: str = ""


class PlannedRecord(BaseModel):
    """One action of an apply, written before the first change and updated as it runs."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    step: str
    kind: str
    description: str
    targets: list[str] = []
    #: the follow-up commands this action owes once it changed something
    notify: list[HandlerRecord] = []
    status: Literal["pending", "running", "done", "failed"] = "pending"
    changed: bool | None = None


class JournalEntry(BaseModel):
    """``journal/<apply-id>.json``."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    format: Literal["ojai-journal"] = JOURNAL_FORMAT
    format_version: Literal[1] = 1
    apply_id: str
    kind: Literal["apply", "rollback"]
    ojai_version: str
    started: datetime
    finished: datetime | None = None
    #: ``interrupted``: the process died (kill -9, power loss); see apply.journal.recover
    status: Literal["running", "complete", "failed", "interrupted"] = "running"
    error: str | None = None
    boot_id: str | None = None
    plan_fingerprint: str | None = None
    previous_apply: str | None = None  # the last apply when this one started
    rolls_back: str | None = None  # for a rollback: the apply it undid
    #: for an apply: the whole ``ojai setup ... --apply`` command that finishes it (doctor's fix)
    command: str | None = None
    #: every action of the plan, on disk before the first change
    planned: list[PlannedRecord] = []
    #: follow-up commands owed by what changed so far and not yet run
    owed: list[HandlerRecord] = []
    actions: list[ActionRecord] = []
    files: list[FileRecord] = []
    #: downloads that changed nothing but left something beside their path (a partial file,
    #: unpack staging, the folders made for them): not a change; ``--remove-downloads`` clears it
    traces: list[FileRecord] = []
    handlers: list[HandlerRecord] = []
    reboot: list[str] = []
    #: state records this entry set, with their previous values (None: was unset)
    records_before: dict[str, Any] = {}

    @property
    def changed(self) -> bool:
        return bool(self.files or self.records_before)
