"""A tiny MTP route published on the stand-in Hugging Face hub, with the catalog file naming it:
what the tests that run the real Lemonade set up with ``ojai setup --catalog``."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.fake_hub import FakeHub
from support.stand_ins import route_toml
from support.tiny_models import write_mtp_pair

REPO = "ojai-test/tiny-gemma4-GGUF"
ROUTE = "tiny-gemma"


@pytest.fixture
def catalog(tmp_path: Path, fake_hub: FakeHub) -> Path:
    """A catalog file with :data:`ROUTE`: a tiny real MTP pair served by ``fake_hub``."""
    pair = write_mtp_pair(tmp_path / "published")
    assert pair.draft is not None
    fake_hub.add_path(REPO, pair.main.name, pair.main)
    fake_hub.add_path(REPO, pair.draft.name, pair.draft)
    path = tmp_path / "catalog.toml"
    path.write_text(route_toml(ROUTE, REPO, pair.main, pair.draft, context_size=2048,
                               draft_n_max=3))
    return path
