"""ojai's own TOML tables are parsed once and then read from the user's cache
(ojai_setup.core.resources.read_toml), and its templates compiled once
(ojai_setup.core.resources.template_cache): a kept table or template that is damaged, stale or
unreadable is made again, a folder that cannot be written changes nothing, and a file that does
not parse is reported as before."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from ojai_setup.core import resources
from ojai_setup.core.resources import TomlError, read_toml, use_cache, user_cache
from ojai_setup.domain.check_engine import ProfileError, load_profile

MACHINES = Path(__file__).parents[1] / "machines"
COMMON = resources.data_dir("checks") / "common.toml"


@pytest.fixture
def fresh(monkeypatch):
    """No table parsed yet in this process, and no cache folder unless a test names one."""
    monkeypatch.setattr(resources, "_parsed", {})
    monkeypatch.setattr(resources, "_cache_dir", None)
    monkeypatch.setattr(resources, "_templates_dir", None)


@pytest.fixture
def parses(monkeypatch):
    """How many times tomllib parsed a text."""
    count = []
    real = tomllib.loads

    def counting(text, **kwargs):
        count.append(1)
        return real(text, **kwargs)

    monkeypatch.setattr(tomllib, "loads", counting)
    return count


def kept_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("toml-*/*.marshal"))


def test_a_table_of_ojais_own_is_kept_and_read_back(fresh, parses, tmp_path):
    use_cache(tmp_path / "ojai")
    first = read_toml(COMMON)
    assert first == tomllib.loads(COMMON.read_text(encoding="utf-8"))
    assert len(parses) == 2 and len(kept_files(tmp_path / "ojai")) == 1
    resources._parsed.clear()  # as a new process would: read from the folder, not parsed
    assert read_toml(COMMON) == first
    assert len(parses) == 2
    assert read_toml(COMMON) is read_toml(COMMON)  # once per process


@pytest.mark.parametrize("damage", [b"", b"\x00garbage", b"\xe3" * 40])
def test_a_damaged_record_is_parsed_again_and_replaced(fresh, parses, tmp_path, damage):
    use_cache(tmp_path / "ojai")
    expected = read_toml(COMMON)
    [kept] = kept_files(tmp_path / "ojai")
    kept.write_bytes(damage)
    resources._parsed.clear()
    assert read_toml(COMMON) == expected and len(parses) == 2
    resources._parsed.clear()
    assert read_toml(COMMON) == expected and len(parses) == 2  # the record was written again


def test_a_record_of_another_version_of_the_file_is_not_used(fresh, monkeypatch, tmp_path):
    own = tmp_path / "own.toml"
    own.write_text('a = 1\n')
    monkeypatch.setattr(resources, "_own_data", lambda path: path == own)
    use_cache(tmp_path / "ojai")
    assert read_toml(own) == {"a": 1}
    own.write_text('a = 2\n')  # another version under the same name, of the same size
    os.utime(own, ns=(2, 2))
    resources._parsed.clear()
    assert read_toml(own) == {"a": 2}


def test_a_folder_that_cannot_be_written_changes_nothing(fresh, parses, tmp_path):
    blocked = tmp_path / "ojai"
    blocked.write_text("a file where the folder would be")
    use_cache(blocked)
    assert read_toml(COMMON) == tomllib.loads(COMMON.read_text(encoding="utf-8"))
    assert blocked.read_text() == "a file where the folder would be"


@pytest.mark.parametrize("loosen", ["others may write it", "another user owns it", "a link"])
def test_a_record_that_is_not_the_users_alone_is_not_used(fresh, parses, tmp_path, loosen):
    """Root run with ``sudo -E`` keeps the user's $HOME: what it loads from there must be a file
    only root could have written. Any other record is parsed again and replaced by its own."""
    use_cache(tmp_path / "ojai")
    expected = read_toml(COMMON)
    [kept] = kept_files(tmp_path / "ojai")
    if loosen == "others may write it":
        kept.chmod(0o666)
    elif loosen == "another user owns it":
        os.chown(kept, 65534, 65534)
    else:
        elsewhere = tmp_path / "elsewhere.marshal"
        kept.rename(elsewhere)
        kept.symlink_to(elsewhere)
    resources._parsed.clear()
    assert read_toml(COMMON) == expected and len(parses) == 2  # parsed again, not loaded
    st = os.lstat(kept)
    assert (st.st_uid, st.st_mode & 0o777) == (os.geteuid(), 0o600)  # the record is its own now
    resources._parsed.clear()
    assert read_toml(COMMON) == expected and len(parses) == 2


def test_nothing_is_written_into_a_folder_others_may_write(fresh, parses, tmp_path):
    use_cache(tmp_path / "ojai")
    [folder] = [tmp_path / "ojai" / f"toml-{sys.implementation.cache_tag}"]
    folder.mkdir(parents=True)
    folder.chmod(0o777)
    assert read_toml(COMMON) == tomllib.loads(COMMON.read_text(encoding="utf-8"))
    assert list(folder.iterdir()) == []


def test_a_file_that_does_not_parse_is_reported_as_before(fresh, monkeypatch, tmp_path):
    bad = tmp_path / "checks" / "bad.toml"
    bad.parent.mkdir()
    bad.write_text('name = "x"\nchecks = [\n')
    with pytest.raises(tomllib.TOMLDecodeError) as parsed:
        tomllib.loads(bad.read_text())
    # as a table of ojai's own, with a cache folder: the same message, and nothing kept
    monkeypatch.setattr(resources, "_own_data", lambda path: True)
    use_cache(tmp_path / "ojai")
    with pytest.raises(TomlError) as raised:
        read_toml(bad)
    assert str(raised.value) == str(parsed.value)
    with pytest.raises(ProfileError) as profile:
        load_profile("bad", bad.parent)
    assert str(profile.value) == f"{bad}: {parsed.value}"
    assert kept_files(tmp_path / "ojai") == []
    # a missing file: what reading it raises
    with pytest.raises(FileNotFoundError):
        read_toml(tmp_path / "checks" / "missing.toml")


def test_other_files_are_parsed_each_time(fresh, parses, tmp_path):
    use_cache(tmp_path / "ojai")
    other = tmp_path / "table.toml"
    other.write_text("a = 1\n")
    assert read_toml(other) == read_toml(other) == {"a": 1}
    assert len(parses) == 2 and kept_files(tmp_path / "ojai") == []


def test_the_folder_is_the_users_cache_and_never_guessed():
    assert user_cache({"XDG_CACHE_HOME": "/x/cache", "HOME": "/home/u"}) == Path("/x/cache/ojai")
    assert user_cache({"HOME": "/home/u"}) == Path("/home/u/.cache/ojai")
    assert user_cache({"XDG_CACHE_HOME": "relative", "HOME": "/home/u"}) == Path("/home/u/.cache/ojai")
    assert user_cache({}) is None and user_cache({"HOME": ""}) is None


def doctor(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ojai_setup.cli", "doctor", "--json", "--root",
                           str(MACHINES / "ojai-fresh")], capture_output=True, text=True, env=env)


def test_the_command_line_keeps_the_tables_in_the_users_cache(tmp_path):
    base = {k: v for k, v in os.environ.items() if k not in ("XDG_CACHE_HOME", "HOME")}
    without = doctor(base)
    cached = {**base, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    filled, warm = doctor(cached), doctor(cached)
    assert without.stdout and without.stdout == filled.stdout == warm.stdout
    assert without.returncode == filled.returncode == warm.returncode
    assert kept_files(tmp_path / "cache" / "ojai")


def test_with_its_tables_kept_doctor_parses_no_toml(tmp_path):
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    argv = [sys.executable, "-X", "importtime", "-m", "ojai_setup.cli", "doctor", "--json",
            "--root", str(MACHINES / "ojai-fresh")]
    runs = [subprocess.run(argv, capture_output=True, text=True, env=env) for _ in range(2)]
    names = [{line.split("|")[2].strip() for line in run.stderr.splitlines()
              if line.startswith("import time:")} for run in runs]
    assert "ojai_setup.domain.checks" in names[1]  # it ran
    assert "tomllib" in names[0] and "tomllib" not in names[1]


# -- templates ---------------------------------------------------------------------------------

@pytest.fixture
def templates(fresh, monkeypatch):
    """A new template environment (with the folder named at that time) and how many templates
    it compiled; the environment of the other tests is made again after this one."""
    import jinja2

    from ojai_setup.domain import launch

    compiled = []
    real = jinja2.Environment.compile

    def counting(self, *args, **kwargs):
        compiled.append(args[1] if len(args) > 1 else kwargs.get("name"))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(jinja2.Environment, "compile", counting)
    launch.template_environment.cache_clear()
    yield compiled
    launch.template_environment.cache_clear()


def flm_script() -> str:
    from ojai_setup.domain import launch

    launch.template_environment.cache_clear()  # as a new process would
    return launch.render_flm_script("qwen3:4b", ctx_len=8192)


def test_a_template_is_compiled_once_then_read_back(templates, tmp_path):
    made = flm_script()  # without a folder: compiled each time, as before
    use_cache(tmp_path / "ojai")
    assert flm_script() == made and len(templates) == 2
    [kept] = (tmp_path / "ojai").glob("templates-*/*.marshal")
    assert flm_script() == made and len(templates) == 2  # read back, not compiled
    kept.write_bytes(b"\x00damaged")
    assert flm_script() == made and len(templates) == 3  # compiled again, and kept again
    assert flm_script() == made and len(templates) == 3


def test_a_template_kept_for_other_settings_is_compiled_again(templates, tmp_path):
    from ojai_setup.domain import launch

    use_cache(tmp_path / "ojai")
    made = flm_script()
    env = launch.template_environment()
    env.trim_blocks = not env.trim_blocks  # what another version of ojai could have set
    env.cache.clear()
    other = env.get_template("flm-serve.sh.j2")
    assert len(templates) == 2 and other.render(tag="x", ctx_len=1, port=1, host="h", flm="f")
    assert flm_script() == made and len(templates) == 3


def test_templates_with_a_folder_that_cannot_be_written(templates, tmp_path):
    made = flm_script()
    blocked = tmp_path / "ojai"
    blocked.write_text("a file where the folder would be")
    use_cache(blocked)
    assert flm_script() == made == flm_script() and len(templates) == 3


def test_a_template_record_others_may_write_is_compiled_again(templates, tmp_path):
    use_cache(tmp_path / "ojai")
    made = flm_script()
    [kept] = (tmp_path / "ojai").glob("templates-*/*.marshal")
    kept.chmod(0o666)
    assert flm_script() == made and len(templates) == 2  # compiled again, not loaded
    assert kept.stat().st_mode & 0o777 == 0o600  # and kept as its own
    assert flm_script() == made and len(templates) == 2
