"""What the hub download tests share: the repository and file names, the download action of a
file into a machine, where it lands and the partial files left behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from ojai_setup.core.paths import DEFAULT_MODELS_DIR
from ojai_setup.core.root import Root
from ojai_setup.model.actions import HubDownload

REPO = "test-org/gemma-4-tiny-it-GGUF"
MAIN = "gemma-4-tiny-it-Q4_K_M.gguf"
MODELS = DEFAULT_MODELS_DIR


@pytest.fixture
def root(tmp_path: Path) -> Root:
    (tmp_path / "machine").mkdir()
    return Root(tmp_path / "machine")


def action(name: str = MAIN, **changes: object) -> HubDownload:
    return HubDownload(repo_id=REPO, filename=name, dest=f"{MODELS}/{REPO}/{name}", **changes)


def dest(root: Root, name: str = MAIN) -> Path:
    return root.resolve(f"{MODELS}/{REPO}/{name}")


def leftovers(root: Path) -> list[str]:
    return sorted(p.name for p in root.rglob("*.partial"))
