"""``ansible-test sanity`` on the collection under ansible/, offline after one preparation.

ansible-test wants the collection at ``.../ansible_collections/<namespace>/<name>/`` and runs
each sanity test that needs third-party code (pylint, pycodestyle, yamllint, voluptuous, ...)
in a virtualenv of its own, made from the versions it pins, under ``~/.ansible/test/venv``.
It creates those virtualenvs without pip and bootstraps pip with a ``get-pip.py`` it downloads
from a host this machine (and CI) cannot reach; its message says to put a bootstrap script at
``~/.ansible/test/cache/get_pip_<version>.py`` instead. So this module:

- runs ansible-test with ``HOME`` set to a cache outside the checkout, keyed by the
  ansible-core version, the requirement files it pins and the bootstrap below::

      ${OJAI_TEST_CACHE:-~/.cache/ojai-tests}/ansible-test/<key>/home/.ansible/test/venv/...

- writes that bootstrap there: it installs pip into the new virtualenv from Python's own
  ``ensurepip`` (no download) and then the pip version ansible-test pins from PyPI, the
  index pip is configured for;
- prepares every virtualenv once (``ansible-test sanity --prime-venvs``, under a file lock),
  so a test run installs nothing. Run this file as a script to prepare them ahead of pytest
  (CI does).

:func:`run_sanity` copies the collection into a temporary ``ansible_collections`` tree (a
symlink would be resolved by ansible-test and lose the layout) and runs the named tests.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COLLECTION = REPO / "ansible"
NAMESPACE, NAME = "ojai", "ojai"
BIN = Path(sys.executable).parent
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"

#: The sanity tests of ansible-core 2.19 that check this collection, without containers or
#: network once prepared; multi-version ones (compile, import) on this Python only: the
#: other versions modules support are not installed on CI's machine. ``ansible-test sanity
#: --list-tests`` has these and the ones in :data:`NOT_RUN`, named so that a test a later
#: ansible-core adds is a decision, not a silent skip.
TESTS = (
    "action-plugin-docs",  # every action plugin has a module of the same name that documents it
    "ansible-doc",  # ansible-doc renders every plugin's documentation
    "compile",  # every Python file compiles
    "ignores",  # tests/sanity/ignore-*.txt is well formed (and each entry is still needed)
    "import",  # modules and module_utils import with nothing but what ansible-core provides
    "line-endings",  # no CRLF
    "no-assert",  # no assert statement in plugins (they vanish under python -O)
    "no-get-exception",  # no get_exception() (Python 2 idiom)
    "no-illegal-filenames",  # file names valid on every OS
    "no-smart-quotes",  # no typographic quotes in plugin code
    "pep8",  # pycodestyle with ansible-core's settings
    "pylint",  # pylint with ansible-core's settings for collections
    "replace-urlopen",  # open_url rather than urlopen
    "runtime-metadata",  # meta/runtime.yml against its schema
    "shebang",  # modules start with #!/usr/bin/python, other files have none or a valid one
    "symlinks",  # no symlink that points outside the collection or to a directory
    "use-argspec-type-path",  # type='path' rather than expanduser() on options
    "use-compat-six",  # no bare six
    "validate-modules",  # DOCUMENTATION, EXAMPLES and RETURN agree with argument_spec
    "yamllint",  # YAML files and the YAML inside modules' documentation
)
#: Listed by ``--list-tests`` and not run, each because it has nothing to check here (run,
#: it would only say "No tests applicable."):
NOT_RUN = {
    # __init__.py files of plugins/modules and module_utils; the collection has none
    "empty-init": "the collection has no __init__.py file",
    # PowerShell modules (and it needs pwsh, which no registry this machine reaches has)
    "pslint": "the collection has no PowerShell file",
    # shell scripts (.sh) and the shellcheck binary
    "shellcheck": "the collection has no shell script",
    # changelogs/config.yaml of antsibull-changelog; release notes live in the repository
    "changelog": "the collection keeps no changelogs/ directory",
}

BOOTSTRAP = '''\
"""pip for an ansible-test sanity virtualenv: Python's own ensurepip, then the pinned pip."""
import subprocess
import sys

GET_PIP_ONLY = ("--no-setuptools", "--no-wheel", "--no-pip")
args = [a for a in sys.argv[1:] if a not in GET_PIP_ONLY]
subprocess.run([sys.executable, "-m", "ensurepip", "--default-pip"], check=True,
               stdout=subprocess.DEVNULL)
subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *args], check=True)
if "--no-setuptools" in sys.argv:
    subprocess.run([sys.executable, "-m", "pip", "uninstall", "--quiet", "--yes",
                    "setuptools"], check=False, stdout=subprocess.DEVNULL)
'''


def _ansible_test_dir() -> Path:
    import ansible_test

    return Path(ansible_test.__file__).parent


def _pip_version() -> str:
    text = (_ansible_test_dir() / "_internal/python_requirements.py").read_text()
    found = re.search(r"pip='([0-9.]+)'", text)
    if not found:
        raise RuntimeError("cannot find the pip version ansible-test pins")
    return found.group(1)


def cache_key() -> str:
    """ansible-core's version, the requirement files of its sanity tests, the bootstrap and
    the Python: what the virtualenvs are made from."""
    from ansible.release import __version__

    h = hashlib.sha256()
    h.update(f"{__version__}\n{PYTHON}\n{BOOTSTRAP}\n".encode())
    for path in sorted((_ansible_test_dir() / "_data/requirements").glob("sanity.*")):
        h.update(path.name.encode() + b"\n" + path.read_bytes())
    return h.hexdigest()[:16]


def cache_home() -> Path:
    base = os.environ.get("OJAI_TEST_CACHE") or str(Path.home() / ".cache" / "ojai-tests")
    return Path(base).expanduser() / "ansible-test" / cache_key() / "home"


def environment(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(HOME=str(home), PATH=f"{BIN}:{env.get('PATH', '/usr/bin:/bin')}",
               LC_ALL="C.UTF-8", PIP_DISABLE_PIP_VERSION_CHECK="1", NO_COLOR="1")
    return env


def lay_out(dest: Path) -> Path:
    """A copy of the collection at ``dest/ansible_collections/ojai/ojai`` (no caches)."""
    target = dest / "ansible_collections" / NAMESPACE / NAME
    shutil.copytree(COLLECTION, target, symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.tar.gz"))
    return target


def _ansible_test(collection: Path, home: Path, *args: str,
                  tests: tuple[str, ...] = TESTS) -> subprocess.CompletedProcess:
    cmd = [str(BIN / "ansible-test"), "sanity", "--local", "--python", PYTHON, "--color", "no",
           "-v", *(a for t in tests for a in ("--test", t)), *args]
    return subprocess.run(cmd, cwd=collection, env=environment(home), capture_output=True,
                          text=True)


def prepare() -> Path:
    """The HOME whose ``.ansible/test`` holds every sanity virtualenv, made once."""
    home = cache_home()
    if (home / ".complete").is_file():
        return home
    home.parent.mkdir(parents=True, exist_ok=True)
    with (home.parent / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (home / ".complete").is_file():
            return home
        if home.exists():
            shutil.rmtree(home)
        script = home / ".ansible/test/cache" / f"get_pip_{_pip_version().replace('.', '_')}.py"
        script.parent.mkdir(parents=True)
        script.write_text(BOOTSTRAP)
        start = time.monotonic()
        with tempfile.TemporaryDirectory() as tmp:
            proc = _ansible_test(lay_out(Path(tmp)), home, "--prime-venvs")
        if proc.returncode != 0:
            raise RuntimeError(f"ansible-test sanity --prime-venvs failed "
                               f"(rc {proc.returncode}):\n{proc.stdout[-3000:]}\n"
                               f"{proc.stderr[-3000:]}")
        size = sum(f.stat().st_size for f in home.rglob("*") if f.is_file() and not f.is_symlink())
        (home.parent / "ready.json").write_text(json.dumps({
            "seconds": round(time.monotonic() - start, 1),
            "built_at": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
            "load_average_1min": round(os.getloadavg()[0], 2), "bytes": size}, indent=2) + "\n")
        (home / ".complete").write_text(cache_key() + "\n")
    return home


def recorded() -> dict | None:
    """What :func:`prepare` recorded when it made the virtualenvs (cold time, size)."""
    path = cache_home().parent / "ready.json"
    return json.loads(path.read_text()) if path.is_file() else None


@dataclass
class Sanity:
    rc: int
    output: str
    #: test name -> what ansible-test said after "Running sanity test ..."
    said: dict[str, str] = field(default_factory=dict)

    @property
    def findings(self) -> list[str]:
        return [ln for ln in self.output.splitlines() if ln.startswith("ERROR: ")]

    @property
    def not_applicable(self) -> list[str]:
        return [t for t, text in self.said.items() if "No tests applicable." in text
                or "Skipping sanity test" in text]


def _split(output: str) -> dict[str, str]:
    said: dict[str, str] = {}
    current = None
    for line in output.splitlines():
        found = re.match(r'Running sanity test "([^"]+)"', line)
        if found:
            current = found.group(1)
            said[current] = ""
        elif current is not None and not line.startswith("Run command: "):
            said[current] += line + "\n"
    return said


def run_sanity(work: Path, tests: tuple[str, ...] = TESTS, collection: Path | None = None) -> Sanity:
    """``ansible-test sanity`` (``tests``) on a copy of the collection laid out under
    ``work``, or on ``collection``, a copy already laid out (by :func:`lay_out`)."""
    home = prepare()
    proc = _ansible_test(collection or lay_out(work), home, tests=tests)
    output = proc.stdout + proc.stderr
    return Sanity(rc=proc.returncode, output=output, said=_split(output))


def list_tests() -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.run([str(BIN / "ansible-test"), "sanity", "--list-tests"],
                              cwd=lay_out(Path(tmp)), env=environment(Path(tmp) / "home"),
                              capture_output=True, text=True, check=True)
    return proc.stdout.split()


if __name__ == "__main__":
    print(prepare())
