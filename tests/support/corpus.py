"""The corpus of real command outputs that the test machines and parser tests are built from:
``shared/corpus`` beside the repository's folder (the project's layout), or ``OJAI_CORPUS``."""

from __future__ import annotations

import os
from pathlib import Path

CORPUS = Path(os.environ.get("OJAI_CORPUS")
              or Path(__file__).resolve().parents[3] / "shared" / "corpus")


def corpus_path(relative: str) -> Path:
    """The corpus file ``relative``; a clear error when the corpus itself is not there (a
    clone made elsewhere than beside ``shared/``)."""
    if not CORPUS.is_dir():
        raise FileNotFoundError(
            f"the corpus of real command outputs is not at {CORPUS}: the tests read it from "
            "shared/corpus beside the repository's folder; clone the repository beside "
            "shared/, or point OJAI_CORPUS at the corpus")
    return CORPUS / relative


def corpus_text(relative: str) -> str:
    return corpus_path(relative).read_text(encoding="utf-8")
