"""Progress reporting for long actions (downloads, builds, unpacking).

Executors report through a :class:`Progress` object and never print. People get a rich
progress bar (:class:`RichProgress`); tests and ``--json`` runs get :class:`NullProgress`.

Usage inside an executor::

    task = progress.task("download model.gguf", total=size_in_bytes)
    for chunk in chunks:
        task.advance(len(chunk))
    task.done()
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Protocol

from .units import size_text

if TYPE_CHECKING:
    from rich.console import Console


#: a task whose total is at least this large counts bytes, not items
_BYTES_THRESHOLD = 1 << 16


class TaskHandle(Protocol):
    """One running task: a line of progress."""

    def advance(self, n: int = 1) -> None:
        """Count ``n`` more units (bytes, files, steps) as done."""

    def update(self, *, completed: int | None = None, total: int | None = None,
               description: str | None = None) -> None:
        """Set the absolute amount done, the total, or the description."""

    def done(self) -> None:
        """Mark the task finished."""


class Progress(Protocol):
    """What executors report progress to."""

    def task(self, description: str, total: int | None = None) -> TaskHandle:
        """Start a task; ``total`` None means the amount of work is unknown."""


class _NullTask:
    def advance(self, n: int = 1) -> None:
        pass

    def update(self, *, completed: int | None = None, total: int | None = None,
               description: str | None = None) -> None:
        pass

    def done(self) -> None:
        pass


class NullProgress:
    """Reports nothing (tests, ``--json`` output, non-interactive runs)."""

    def task(self, description: str, total: int | None = None) -> TaskHandle:
        return _NullTask()


class _RichTask:
    def __init__(self, owner: RichProgress, task_id: Any) -> None:
        self._owner = owner
        self._id = task_id
        self._finished = False

    def advance(self, n: int = 1) -> None:
        self._owner._bar.advance(self._id, n)

    def update(self, *, completed: int | None = None, total: int | None = None,
               description: str | None = None) -> None:
        fields: dict[str, Any] = {}
        if completed is not None:
            fields["completed"] = completed
        if total is not None:
            fields["total"] = total
        if description is not None:
            fields["description"] = description
        self._owner._bar.update(self._id, **fields)

    def done(self) -> None:
        if self._finished:
            return
        self._finished = True
        bar = self._owner._bar
        for task in bar.tasks:
            if task.id == self._id:
                if sys.exc_info()[0] is None:  # finished: the bar shows it whole
                    finished = task.total if task.total is not None else max(task.completed, 1)
                    bar.update(self._id, total=finished, completed=finished)
                # else called while an error or Ctrl-C unwinds: the bar stays where the work
                # stopped
                bar.stop_task(self._id)
        self._owner._task_done()


class RichProgress:
    """Progress bars on a rich console.

    The live display starts with the first task and stops when every task is done; use it as
    a context manager (or call :meth:`close`) to stop it also when a task is left unfinished.
    """

    def __init__(self, console: Console | None = None, *, transient: bool = False) -> None:
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            MofNCompleteColumn,
            ProgressColumn,
            SpinnerColumn,
            Task,
            TextColumn,
            TimeRemainingColumn,
        )
        from rich.progress import (
            Progress as _RichBar,
        )
        from rich.text import Text

        class _AmountColumn(ProgressColumn):
            """Byte sizes for large totals (downloads), "3/7" for counts."""

            def __init__(self) -> None:
                super().__init__()
                self._bytes = DownloadColumn(binary_units=True)
                self._count = MofNCompleteColumn()

            def render(self, task: Task) -> Text:
                if task.total is not None and task.total >= _BYTES_THRESHOLD:
                    return self._bytes.render(task)
                return self._count.render(task)

        class _RateColumn(ProgressColumn):
            """Bytes a second for large totals, in the amount's binary units (rich's own speed
            column is decimal); nothing for counts."""

            def render(self, task: Task) -> Text:
                speed = task.finished_speed or task.speed
                if task.total is None or task.total < _BYTES_THRESHOLD or not speed:
                    return Text("")
                return Text(f"{size_text(int(speed))}/s", style="progress.data.speed")

        self._bar = _RichBar(
            SpinnerColumn(),
            TextColumn("[progress.description]{task.description}"),
            BarColumn(),
            _AmountColumn(),
            _RateColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=transient,
        )
        self._started = False
        self._open = 0

    def task(self, description: str, total: int | None = None) -> TaskHandle:
        if not self._started:
            self._bar.start()
            self._started = True
        self._open += 1
        return _RichTask(self, self._bar.add_task(description, total=total))

    @property
    def active(self) -> bool:
        """Whether the live display is showing."""
        return self._started

    def _task_done(self) -> None:
        self._open -= 1
        if self._open == 0:
            self.close()

    def close(self) -> None:
        """Stop the live display."""
        if self._started:
            self._bar.stop()
            for task in list(self._bar.tasks):
                self._bar.remove_task(task.id)
            self._started = False
        self._open = 0

    def __enter__(self) -> RichProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
