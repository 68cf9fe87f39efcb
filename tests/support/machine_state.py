"""Writing what a test machine holds as if it had run things: captured command outputs (the
layout :class:`ojai_setup.core.root.Root` replays) and the records of ojai's ``state.json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ojai_setup.core.root import COMMANDS_DIR, CommandResult, Root, command_key
from ojai_setup.facts.state import state_dir


def store_capture(dest_root: Path, result: CommandResult) -> Path:
    """Write ``result`` into ``dest_root`` in the capture layout replayed by :class:`Root`."""
    d = Path(dest_root) / COMMANDS_DIR / command_key(result.argv)
    d.mkdir(parents=True, exist_ok=True)
    (d / "stdout").write_text(result.stdout, encoding="utf-8")
    if result.stderr:
        (d / "stderr").write_text(result.stderr, encoding="utf-8")
    (d / "exit_code").write_text(f"{result.exit_code}\n", encoding="utf-8")
    return d


def record_state(root: Root, key: str, value: Any) -> None:
    """Set ``records[key]`` in the machine's ``state.json`` (``value`` None removes it), as an
    apply that recorded it would have left it."""
    path = state_dir(root) / "state.json"
    data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    records = data.setdefault("records", {})
    if value is None:
        records.pop(key, None)
    else:
        records[key] = value
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
