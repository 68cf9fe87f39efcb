"""What a setup step is, and what planning it gives.

A step is pure: ``plan(ctx)`` looks at the facts (and, through ``ctx.root``, at the files it
is going to edit) and returns a :class:`StepResult`. It never writes or runs anything; the
actions it returns are carried out by :mod:`ojai_setup.apply.executor`.

Three outcomes:

- ``satisfied``: nothing to do; ``sentence`` says why (``"ttm.pages_limit=12582912 is already
  set in /etc/default/grub"``).
- ``change``: ``actions`` says what to do; ``sentence`` summarises it.
- ``blocked``: the step cannot be planned; ``sentence`` says why in at most three short
  sentences, and ``ways`` lists the ways forward, one thing a person can do each.
  A step that needs another (:attr:`Step.needs`) waits while that one is blocked: it is
  blocked too, with ``waits_for`` naming the steps it waits for, and the rest of the plan is
  applied without it (:func:`ojai_setup.planning.plan.wait_for_blocked`)."""

from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, model_validator

from ojai_setup.model.actions import Action, RunCommand

if TYPE_CHECKING:
    from ojai_setup.planning.context import Context

StepStatus = Literal["satisfied", "change", "blocked"]


#: where a blocked step's advice lists its ways forward
WAYS_FORWARD = ". Ways forward: "


def ways_forward(text: str) -> tuple[str, tuple[str, ...]]:
    """``text`` cut at :data:`WAYS_FORWARD` into the sentence before it and its ways: the
    items of the list after it (``a; b; or c``, outside brackets and backticks), and each
    sentence that follows the list (``GITHUB_TOKEN raises GitHub's rate limit``)."""
    head, marker, tail = text.partition(WAYS_FORWARD)
    if not marker:
        return text, ()
    ways, depth, quoted, start = [], 0, False, 0
    for i, c in enumerate(tail):
        if c == "`":
            quoted = not quoted
        elif c in "([{" and not quoted:
            depth += 1
        elif c in ")]}" and not quoted:
            depth = max(0, depth - 1)
        elif not depth and not quoted and tail[i:i + 2] in ("; ", ". ") and (
                c == ";" or tail[i + 2:i + 3].isupper()):
            ways.append(tail[start:i])
            start = i + 2
    ways.append(tail[start:])
    items = [w.strip().removeprefix("or ").rstrip(".").strip() for w in ways]
    return head + ".", tuple(w for w in items if w)


class SpaceNeed(BaseModel):
    """Disk space a step's actions take in one folder while they run and after: the plan adds
    up the needs of every step on one filesystem, with a margin, and blocks a step that would
    not fit (:class:`ojai_setup.planning.space.DiskLedger`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    #: the machine folder the bytes go into (its nearest existing parent tells the filesystem)
    folder: str
    bytes: int
    #: what is stored, for the message (``"llama.cpp nightly b1311"``)
    what: str
    #: how the figure was reached (``"its zip is 42 MiB, and with its unpacked files ..."``)
    detail: str = ""
    #: what a person can do about it besides freeing space
    fix: str = ""


class StepResult(BaseModel):
    """The outcome of planning one step."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    step: str
    status: StepStatus
    sentence: str
    actions: tuple[Action, ...] = ()
    #: machine paths the step looked at; their digests go into the plan's fingerprint
    reads: tuple[str, ...] = ()
    #: why a reboot is needed once this step is applied (besides the actions' own reasons)
    reboot: tuple[str, ...] = ()
    #: follow-up commands by name, run once at the end of an apply if an action notifying them
    #: changed something (``{"update-grub": RunCommand(argv=("update-grub",), ...)}``)
    handlers: dict[str, RunCommand] = {}
    #: records saved in ``/var/lib/ojai/state.json`` under their key when applying the step's
    #: actions changed something; dict values get the apply's ``boot_id`` and ``apply_id`` added
    records: dict[str, Any] = {}
    #: what a person should know before applying (a server open to the network), whatever
    #: the status; shown with the plan
    warnings: tuple[str, ...] = ()
    #: disk space the actions take (a change only), checked for the whole plan at once
    space: tuple[SpaceNeed, ...] = ()
    #: a blocked step's ways forward, each one thing a person can do, shown as a list
    ways: tuple[str, ...] = ()
    #: blocked only because it needs these steps, which are blocked (or wait) in this plan
    waits_for: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _consistent(self) -> "StepResult":
        if not self.sentence.strip():
            raise ValueError(f"step {self.step!r}: a result needs a sentence")
        if self.status == "change" and not self.actions:
            raise ValueError(f"step {self.step!r}: status 'change' needs at least one action")
        if self.status != "change" and self.actions:
            raise ValueError(f"step {self.step!r}: status {self.status!r} carries no actions")
        if self.waits_for and self.status != "blocked":
            raise ValueError(f"step {self.step!r}: only a blocked step waits for others")
        for path in self.reads:
            if not path.startswith("/"):
                raise ValueError(f"step {self.step!r}: reads are machine paths, got {path!r}")
        return self

    @classmethod
    def satisfied(cls, step: str, sentence: str, *, reads: tuple[str, ...] = (),
                  warnings: tuple[str, ...] = ()) -> "StepResult":
        """Nothing to do, and why."""
        return cls(step=step, status="satisfied", sentence=sentence, reads=reads,
                   warnings=warnings)

    @classmethod
    def blocked(cls, step: str, sentence: str, *, reads: tuple[str, ...] = (),
                ways: tuple[str, ...] | list[str] = ()) -> "StepResult":
        """Cannot proceed: why, and what the user can do (``ways``). A ``sentence`` that ends
        in ``Ways forward: a; b; or c`` (the form of the advice the planning helpers write,
        :func:`ways_forward`) has that tail made into the list."""
        if not ways:
            sentence, ways = ways_forward(sentence)
        return cls(step=step, status="blocked", sentence=sentence, reads=reads,
                   ways=tuple(ways))

    @classmethod
    def change(cls, step: str, sentence: str, actions: list[Any] | tuple[Any, ...],
               **fields: Any) -> "StepResult":
        """Actions to carry out (``reads``, ``reboot``, ``handlers``, ``records`` as keywords)."""
        return cls(step=step, status="change", sentence=sentence, actions=tuple(actions),
                   **fields)


@runtime_checkable
class Step(Protocol):
    """A unit of setup. ``name`` is stable (it appears in plans and journals)."""

    name: str
    #: the steps whose result this one builds on (routes launch the llama-server and the model
    #: files those steps put in place): it waits while one of them is blocked; a class
    #: attribute, ``()`` when absent
    # needs: tuple[str, ...]

    def plan(self, ctx: "Context") -> StepResult:
        """Decide what (if anything) to change; never write or run anything."""
        ...


def merged(step: str, results: list[StepResult]) -> StepResult:
    """One step's results for several routes (``--model A --model B``) as one: blocked when
    any is (saying which), a change with every route's actions when any changes."""
    blocked = [r for r in results if r.status == "blocked"]
    if blocked:
        return StepResult.blocked(step, "; ".join(r.sentence for r in blocked),
                                  ways=tuple(w for r in blocked for w in r.ways))
    sentence = "; ".join(r.sentence for r in results)
    actions = [a for r in results for a in r.actions]
    reads = tuple(dict.fromkeys(p for r in results for p in r.reads))
    warnings = tuple(w for r in results for w in r.warnings)
    if not actions:
        return StepResult.satisfied(step, sentence, reads=reads, warnings=warnings)
    return StepResult.change(step, sentence, actions, reads=reads, warnings=warnings,
                             space=tuple(n for r in results for n in r.space))
