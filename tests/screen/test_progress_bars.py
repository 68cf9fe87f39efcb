"""The progress bars a person watches: a bar stops where the work stopped (not at its total when
an error or Ctrl-C ends it), and a download's amount and rate are in binary units."""
from __future__ import annotations

import io

import pytest
from rich.console import Console

from ojai_setup.core.progress import RichProgress

MIB = 2**20


def _screen(run) -> str:
    out = io.StringIO()
    console = Console(file=out, width=80, force_terminal=True, color_system=None)
    with RichProgress(console) as progress:
        run(progress)
    return out.getvalue()


def _last_frame(screen: str, description: str) -> str:
    lines = [line for line in screen.replace("\r", "\n").splitlines() if description in line]
    assert lines, screen
    return lines[-1]


def test_a_download_stopped_by_ctrl_c_keeps_its_bar_where_the_bytes_stopped():
    def run(progress):
        task = progress.task("download model.gguf", total=10 * MIB)
        with pytest.raises(KeyboardInterrupt):
            try:
                task.advance(3 * MIB)
                raise KeyboardInterrupt
            finally:
                task.done()

    frame = _last_frame(_screen(run), "download model.gguf")
    assert "3.0/10.0 MiB" in frame, frame
    assert "10.0/10.0" not in frame, frame


def test_a_finished_download_shows_its_whole_size_and_a_binary_rate():
    def run(progress):
        task = progress.task("download model.gguf", total=10 * MIB)
        try:
            for _ in range(10):
                task.advance(MIB)
        finally:
            task.done()

    frame = _last_frame(_screen(run), "download model.gguf")
    assert "10.0/10.0 MiB" in frame, frame
    assert "MB" not in frame.replace("MiB", ""), frame
    assert "/s" in frame and ("MiB/s" in frame or "GiB/s" in frame or "bytes/s" in frame), frame


def test_counted_steps_stopped_by_an_error_keep_their_count():
    def run(progress):
        task = progress.task("apply plan", total=6)
        with pytest.raises(RuntimeError):
            try:
                task.advance(2)
                raise RuntimeError("the third step failed")
            finally:
                task.done()

    frame = _last_frame(_screen(run), "apply plan")
    assert "2/6" in frame and "6/6" not in frame, frame
