"""A silent progress display for tests that remembers what each bar was told."""

from __future__ import annotations


class RecordingProgress:
    class Bar:
        def __init__(self, description: str, total: int | None) -> None:
            self.description, self.total = description, total
            self.values: list[int] = []  # every amount done it was told, in order
            self.finished = False

        @property
        def completed(self) -> int:
            return self.values[-1] if self.values else 0

        def advance(self, n: int = 1) -> None:
            self.values.append(self.completed + n)

        def update(self, *, completed: int | None = None, total: int | None = None,
                   description: str | None = None) -> None:
            if completed is not None:
                self.values.append(completed)
            self.total = self.total if total is None else total
            self.description = description or self.description

        def done(self) -> None:
            self.finished = True

    def __init__(self) -> None:
        self.bars: list[RecordingProgress.Bar] = []

    def task(self, description: str, total: int | None = None) -> RecordingProgress.Bar:
        bar = RecordingProgress.Bar(description, total)
        self.bars.append(bar)
        return bar
