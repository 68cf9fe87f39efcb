"""Planning a route's model files: which downloads are still needed, and whether the files on
disk are a matched pair (MTP heads, or a separate draft model)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ojai_setup.core.paths import DEFAULT_MODELS_DIR
from ojai_setup.core.root import Root
from ojai_setup.core.units import size_text
from ojai_setup.domain.catalog import Route, model_path
from ojai_setup.facts.gguf import kept_model_info
from ojai_setup.formats.gguf import GGUFError, PairVerdict, check_pair
from ojai_setup.model.actions import HubDownload


def _digest_record(path: Path) -> Path:
    return path.with_name(f".{path.name}.sha256")


def verified_digest(path: Path) -> str | None:
    """The sha256 recorded when ``path`` was verified, if its size and mtime are unchanged."""
    try:
        stat = path.stat()
        record = json.loads(_digest_record(path).read_text(encoding="utf-8"))
        if record["size"] == stat.st_size and record["mtime_ns"] == stat.st_mtime_ns:
            return str(record["sha256"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def plan_model_downloads(root: Root, route: Route, models_dir: str = DEFAULT_MODELS_DIR) -> list[HubDownload]:
    """Downloads for the files of ``route`` that are missing or not verified; [] when all are
    (and for the owner's own files, used where they are)."""
    if route.local_dir is not None:
        return []
    actions = []
    for f in route.files():
        dest = model_path(models_dir, route.file_repo(f), f.file)
        real = root.resolve(dest)
        if not real.is_file():
            reason = "missing"
        else:
            recorded = verified_digest(real)
            if recorded is not None and (f.sha256 is None or recorded == f.sha256):
                continue
            reason = ("present, but its sha256 differs from the catalog's pinned value" if recorded
                      else "present, but not yet checked against the hub's sha256")
        exact = f.sha256 is not None or not route.sizes_estimated
        actions.append(HubDownload(
            repo_id=route.file_repo(f), filename=f.file, revision=route.revision, dest=dest,
            sha256=f.sha256, size=f.size if exact else None, needs_root=_needs_root(real),
            estimated_size=None if exact else f.size,
            reason=f"{route.name}: {f.file} {reason}" + ("" if exact else f" (about {size_text(f.size)})"),
        ))
    return actions


def verify_local_pair(root: Root, route: Route, models_dir: str = DEFAULT_MODELS_DIR) -> tuple[PairVerdict, str | None]:
    """Whether the downloaded files of ``route`` form a matched MTP pair, and what kept their
    metadata from being kept (:func:`ojai_setup.facts.gguf.kept_model_info`), if anything."""
    main = route.main_path(models_dir)
    draft = route.draft_path(models_dir)
    missing = [p for p in (main, draft) if p is not None and not root.resolve(p).is_file()]
    if missing:
        return PairVerdict(ok=False, reasons=tuple(f"{p}: missing; `ojai setup --apply` downloads it"
                                                   for p in missing)), None
    try:
        main_info, note = kept_model_info(root, root.resolve(main))
        draft_info, draft_note = kept_model_info(root, root.resolve(draft)) if draft else (None, None)
    except GGUFError as exc:
        return PairVerdict(ok=False, reasons=(str(exc),)), None
    notes = [n for n in (note, draft_note) if n]
    return check_pair(main_info, draft_info, route.pair_kind), "; ".join(notes) or None


def _needs_root(real: Path) -> bool:
    existing = real.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    return not os.access(existing, os.W_OK)
