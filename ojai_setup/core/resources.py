"""Where the data shipped with ojai lives: ``templates/`` and ``checks/``, how its TOML tables
are read, and where its templates are kept compiled.

From a wheel they are inside the package (``ojai_setup/_data/<name>``); from a source checkout
they are the top-level folders of the repository.

:func:`read_toml` parses a table of ojai's own (``checks/``, the TOML files of the package) once
per installation rather than once per command: the parsed table is kept, as :mod:`marshal`
data, in the user's cache folder that the command line names (:func:`use_cache`), keyed by the
file's path, modification time, size and inode, and by the Python version. A kept table that
cannot be read, is damaged or is for another version of the file is parsed again; a folder that
cannot be written leaves every table parsed as before. Other files (a table named on the
command line, a test's copy) are always parsed. :func:`template_cache` keeps the templates
compiled by Jinja2 in the same folder, on the same terms.
"""

from __future__ import annotations

import marshal
import os
import stat
import sys
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Any

_PKG = Path(__file__).resolve().parent.parent


@cache
def data_dir(name: str) -> Path:
    for candidate in (_PKG / "_data" / name, _PKG.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"ojai's {name}/ folder is missing from this installation")


#: bundled example machines (test machines shipped in the wheel for newcomers)
EXAMPLES = ("ojai-fresh", "ojai-applied", "ojai-rebooted", "strix-halo-dkms")


def example_root(name: str) -> Path:
    """The root directory of a bundled example machine."""
    from ojai_setup.core.names import closest, folded

    name = next((e for e in EXAMPLES if folded(e) == folded(name)), name)
    if name not in EXAMPLES:

        near = closest(name, list(EXAMPLES))
        maybe = f"did you mean {' or '.join(near)}? " if near else ""
        raise FileNotFoundError(f"no example machine {name!r}; {maybe}(known: {', '.join(EXAMPLES)})")
    for candidate in (_PKG / "_data" / "examples" / name, _PKG.parent / "tests" / "machines" / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"example machine {name!r} is missing from this installation")


@cache
def _example_folders() -> dict[Path, str]:
    """Each bundled example machine's folder, resolved, and its name (looked up once: the fix
    of every doctor finding names the machine)."""
    found: dict[Path, str] = {}
    for name in EXAMPLES:
        try:
            found[example_root(name).resolve()] = name
        except (FileNotFoundError, OSError):
            continue
    return found


def example_name(root: Path) -> str | None:
    """The name of the bundled example machine whose folder ``root`` is, or None."""
    try:
        here = root.resolve()
    except OSError:
        return None
    return _example_folders().get(here)


# -- ojai's TOML tables ------------------------------------------------------------------------

class TomlError(ValueError):
    """A TOML file that does not parse; the message is tomllib's (what, at which line and
    column)."""


#: the folder :func:`read_toml` keeps parsed tables in (None: nowhere), set by :func:`use_cache`
_cache_dir: Path | None = None
#: the folder :func:`template_cache` keeps compiled templates in (None: nowhere)
_templates_dir: Path | None = None
#: the tables parsed (or loaded) by this process, by path and the file's stamp
_parsed: dict[tuple[str, tuple[int, int, int]], dict[str, Any]] = {}


def user_cache(environ: Mapping[str, str]) -> Path | None:
    """ojai's folder in the user's cache: ``$XDG_CACHE_HOME/ojai``, else ``$HOME/.cache/ojai``;
    None when the environment names neither (a home folder is never guessed)."""
    base = environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        home = environ.get("HOME", "")
        if not os.path.isabs(home):
            return None
        base = os.path.join(home, ".cache")
    return Path(base) / "ojai"


def use_cache(folder: Path | None) -> None:
    """Keep the tables :func:`read_toml` parses in a folder of ``folder`` (ojai's folder in the
    user's cache, :func:`user_cache`); None keeps none. Only the command line sets it: a
    library caller (a test) parses every table as it reads it."""
    global _cache_dir, _templates_dir
    tag = sys.implementation.cache_tag
    _cache_dir = folder / f"toml-{tag}" if folder is not None and tag else None
    _templates_dir = folder / f"templates-{tag}" if folder is not None and tag else None


def _own_data(path: Path) -> bool:
    """Whether ``path`` is a file of ojai's own data (the package, ``checks/``)."""
    return str(path).startswith(_own_folders())


@cache
def _own_folders() -> tuple[str, ...]:
    homes = [_PKG, Path(__file__).parent.parent]
    try:
        homes.append(data_dir("checks"))
    except FileNotFoundError:
        pass
    return tuple(str(home) + os.sep for home in homes)


def _load_kept(kept: Path, key: tuple[str, tuple[int, int, int]]) -> dict[str, Any] | None:
    """The table kept in ``kept`` for ``key``; None when there is none, it cannot be read, it is
    damaged or it was kept for another version of the file."""
    record = _read_kept(kept)
    if (isinstance(record, tuple) and len(record) == 3 and (record[0], record[1]) == key
            and isinstance(record[2], dict)):
        return record[2]
    return None


def _keep(kept: Path, key: tuple[str, tuple[int, int, int]], data: dict[str, Any]) -> None:
    """Write ``data`` to ``kept`` (:func:`_write_kept`); a table marshal cannot hold (a TOML
    date) leaves nothing."""
    try:
        record = marshal.dumps((key[0], key[1], data))
    except ValueError:
        return
    _write_kept(kept, record)


def _own(st: os.stat_result) -> bool:
    """Whether a file or folder is the running user's alone: owned by the effective user and
    writable by no one else. A record is trusted only then: ``sudo -E`` keeps the user's
    ``$HOME``, and root must not load what another user could have written there."""
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022


def _read_kept(kept: Path) -> Any:
    """The marshal data in ``kept``; None when it is missing, unreadable, damaged, a link, or
    not the running user's alone (:func:`_own`)."""
    try:
        fd = os.open(kept, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as f:
            if not _own(os.fstat(f.fileno())):
                return None
            return marshal.loads(f.read())
    except (OSError, ValueError, EOFError, TypeError):
        return None


def _write_kept(kept: Path, record: bytes) -> None:
    """Write ``record`` to ``kept`` (a new temporary file, never through a link, renamed over
    it, so that a reader sees the old record or the new); a folder that cannot be written, or
    that is not the running user's alone (:func:`_own`), leaves nothing."""
    tmp = kept.with_name(f".{kept.name}.{os.getpid()}.tmp")
    try:
        kept.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        folder = os.lstat(kept.parent)  # the folder itself, not what a link points to
        if not stat.S_ISDIR(folder.st_mode) or not _own(folder):
            return
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(record)
        os.replace(tmp, kept)
    except OSError:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def read_toml(path: Path) -> dict[str, Any]:
    """The table of the TOML file ``path``. Raises what reading the file raises (``OSError``,
    ``UnicodeDecodeError``) and :class:`TomlError` when it does not parse. A table of ojai's own
    data is parsed once per process, and once per installation where :func:`use_cache` named a
    folder; it is shared: callers read it and do not change it."""
    key = None
    if _own_data(path):
        try:
            st = os.stat(path)
        except OSError:
            pass  # reading it below says why, as it would without the cache
        else:
            key = (str(path), (st.st_mtime_ns, st.st_size, st.st_ino))
            if key in _parsed:
                return _parsed[key]
    kept = None
    if key is not None and _cache_dir is not None:
        kept = _cache_dir / (key[0].strip(os.sep).replace(os.sep, "%") + ".marshal")
        data = _load_kept(kept, key)
        if data is not None:
            _parsed[key] = data
            return data
    text = path.read_text(encoding="utf-8")
    import tomllib

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TomlError(str(exc)) from exc
    if key is not None:
        _parsed[key] = data
        if kept is not None:
            _keep(kept, key, data)
    return data


# -- ojai's templates, compiled ----------------------------------------------------------------

def template_cache() -> Any:
    """A Jinja2 bytecode cache that keeps ojai's compiled templates in the folder
    :func:`use_cache` named, or None when it named none. A template is compiled again when its
    text, Jinja2's version or the environment's settings changed, or its record cannot be read;
    a folder that cannot be written changes nothing."""
    if _templates_dir is None:
        return None
    return _template_cache_class()(_templates_dir)


@cache
def _template_cache_class() -> Any:
    import jinja2
    from jinja2.bccache import Bucket, BytecodeCache

    def signature(env: Any) -> str:
        """What the compiled code depends on besides the template's text."""
        return repr((jinja2.__version__, env.block_start_string, env.block_end_string,
                     env.variable_start_string, env.variable_end_string,
                     env.comment_start_string, env.comment_end_string,
                     env.line_statement_prefix, env.line_comment_prefix, env.trim_blocks,
                     env.lstrip_blocks, env.newline_sequence, env.keep_trailing_newline,
                     env.optimized, env.autoescape, env.finalize, env.is_async,
                     sorted(env.extensions), sorted(env.filters), sorted(env.tests)))

    class KeptTemplates(BytecodeCache):
        def __init__(self, folder: Path) -> None:
            self.folder = folder

        def _file(self, bucket: Bucket) -> Path:
            return self.folder / f"{bucket.key}.marshal"

        def load_bytecode(self, bucket: Bucket) -> None:
            record = _read_kept(self._file(bucket))
            if (isinstance(record, tuple) and len(record) == 3
                    and record[:2] == (signature(bucket.environment), bucket.checksum)
                    and type(record[2]) is type(signature.__code__)):
                bucket.code = record[2]

        def dump_bytecode(self, bucket: Bucket) -> None:
            record = marshal.dumps((signature(bucket.environment), bucket.checksum, bucket.code))
            _write_kept(self._file(bucket), record)

    return KeptTemplates
