"""Carrying out an :class:`~ojai_setup.model.actions.InstallPackage`: download the .deb, check
its size and sha256, and only then run ``apt-get install -y <file>``.

:func:`~ojai_setup.apply.download.download` streams into a temp file beside the target and
renames it into place only once the digest matched, so a package that is not the one GitHub
describes never reaches the path apt is given, and apt never runs for it. The verified file
stays in :data:`~ojai_setup.core.paths.DEB_CACHE`: a later apply that finds it with the same
digest does not download it again.
"""

from __future__ import annotations

import shlex

from ojai_setup.apply.download import download
from ojai_setup.apply.executor import COMMAND_TIMEOUT, ActionOutcome, CommandFailed
from ojai_setup.core.digest import sha256_file
from ojai_setup.core.progress import Progress
from ojai_setup.core.root import Root
from ojai_setup.model.actions import InstallPackage


def execute_install_package(root: Root, action: InstallPackage,
                            progress: Progress) -> ActionOutcome:
    """Download and verify ``action.path``, then install it with apt; raises
    :class:`~ojai_setup.apply.download.DownloadError` (nothing installed, nothing left behind)
    or :class:`~ojai_setup.apply.executor.CommandFailed`."""
    target = root.resolve(action.path)
    kept = target.is_file() and sha256_file(target) == action.sha256.lower()
    if not kept:
        download(action.url, target, sha256=action.sha256, size=action.size, progress=progress,
                 description=f"download {target.name}")
    argv = ["apt-get", "install", "-y", action.path]
    task = progress.task(f"run {shlex.join(argv)}", total=None)
    try:
        # noninteractive: a configuration question would wait for input nobody gives
        result = root.run(argv, env={"DEBIAN_FRONTEND": "noninteractive"},
                          timeout=COMMAND_TIMEOUT)
    finally:
        task.done()
    if not result.ok:
        detail = (result.stderr.strip() or result.stdout.strip())[-800:]
        raise CommandFailed(f"`{shlex.join(argv)}` failed with exit code {result.exit_code}"
                            + (f": {detail}" if detail else "")
                            + f"; the verified package stays in {action.path}")
    return ActionOutcome(True, f"{'found verified' if kept else 'downloaded and verified'} "
                               f"{action.path} (sha256 {action.sha256[:12]}...) and installed "
                               f"{action.package} {action.version}")
