"""Carrying out a :class:`~ojai_setup.model.actions.WriteSecret`: the key is read from its source
file only now, written into a root-only environment file (0600, in a 0700 folder), and never
shown, planned or logged; the plan holds only the digest of the file's content."""

from __future__ import annotations

import os
import stat

from ojai_setup.apply.executor import ActionOutcome, PlanConflict, fault_point
from ojai_setup.core.atomic import ensure_dir, write_text
from ojai_setup.core.paths import PRIVATE_DIR_MODE, PRIVATE_FILE_MODE
from ojai_setup.core.progress import Progress
from ojai_setup.core.root import Root
from ojai_setup.domain.launch import read_secret, secret_env
from ojai_setup.model.actions import WriteSecret
from ojai_setup.planning.plan import path_digest, text_digest


def execute_write_secret(root: Root, action: WriteSecret, progress: Progress) -> ActionOutcome:
    text = secret_env(action.variable, read_secret(action.source))
    if text_digest(text) != action.sha256:
        raise PlanConflict(f"{action.source} changed since the plan was made; nothing more was "
                           "changed; run `ojai setup` again and review it")
    real = root.resolve(action.path)
    if path_digest(root, action.path) == action.sha256:
        if stat.S_IMODE(os.lstat(real).st_mode) == PRIVATE_FILE_MODE:
            return ActionOutcome(False, f"{action.path} already holds the key")
        os.chmod(real, PRIVATE_FILE_MODE)
        return ActionOutcome(True, f"{action.path}: mode set to 600")
    ensure_dir(real.parent, PRIVATE_DIR_MODE)
    fault_point("before-rename")
    write_text(real, text, mode=PRIVATE_FILE_MODE)
    return ActionOutcome(True, f"wrote {action.variable} into {action.path}")
