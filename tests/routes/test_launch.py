"""Launch scripts and units: syntax, exact argv through a real bash, and refused values."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ojai_setup.core.resources import data_dir
from ojai_setup.core.root import Root
from ojai_setup.domain.launch import (
    FLM_DEFAULT_PORT,
    LaunchError,
    has_bundled_libs,
    render_flm_script,
    render_flm_unit,
    render_llama_script,
    render_llama_unit,
    template_environment,
)

REPO = Path(__file__).resolve().parents[2]

# Arguments a shell would mangle if they were not quoted exactly.
AWKWARD_ARGS = [
    "-m", "/models/with space/gemma 4.gguf",
    "--alias", "it's \"quoted\"",
    "--chat-template-kwargs", '{"enable_thinking": false}',
    "--api-key", "$HOME `id` $(id) ${PATH}",
    "--grammar", "root ::= \"a\" | \"b\"\nsecond line",
    "--glob", "*.gguf ?x [ab]",
    "--backslash", "a\\b\\\\c\\n",
    "--semicolon", "x; rm -rf /; echo &&",
    "--tab", "a\tb",
    "--unicode", "café ☕",
    "--empty", "",
    "--dash", "-",
    "-fa", "on",
]


# Prints each argument followed by a NUL byte (printf alone would print one empty field for none).
PRINT_ARGV = 'for arg in "$@"; do printf \'%s\\0\' "$arg"; done'


def _fake_binary(path: Path, body: str) -> Path:
    path.write_text("#!/usr/bin/env bash\n" + body + "\n")
    path.chmod(0o755)
    return path


def _argv_printer(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return _fake_binary(folder / "llama-server", PRINT_ARGV)


def _run_script(tmp_path: Path, text: str, env: dict[str, str] | None = None) -> list[str]:
    script = tmp_path / "launch.sh"
    script.write_text(text)
    script.chmod(0o755)
    run_env = {"PATH": os.environ["PATH"], **(env or {})}
    proc = subprocess.run([str(script)], capture_output=True, env=run_env, check=True)
    out = proc.stdout.decode("utf-8")
    assert out.endswith("\0") or out == ""
    return out.split("\0")[:-1] if out else []


def _bash_n(tmp_path: Path, text: str) -> None:
    script = tmp_path / "check.sh"
    script.write_text(text)
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_data_dir_finds_the_repository_folders():
    assert data_dir("templates") == REPO / "templates"
    assert data_dir("checks") == REPO / "checks"
    with pytest.raises(FileNotFoundError):
        data_dir("no-such-folder")


def test_environment_is_strict_and_quotes():
    env = template_environment()
    with pytest.raises(Exception, match="undefined"):
        env.from_string("{{ missing }}").render()
    assert env.from_string("{{ x | shquote }}").render(x="a b'c") == "'a b'\"'\"'c'"
    assert env.autoescape is False


def test_llama_script_keeps_every_argument_exactly(tmp_path):
    binary = _argv_printer(tmp_path / "bin")
    text = render_llama_script(str(binary), AWKWARD_ARGS, {}, "gemma4-26b")
    _bash_n(tmp_path, text)
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail\n" in text
    assert _run_script(tmp_path, text) == AWKWARD_ARGS


def test_llama_script_with_no_arguments(tmp_path):
    binary = _argv_printer(tmp_path / "bin")
    text = render_llama_script(str(binary), [], {}, "plain")
    _bash_n(tmp_path, text)
    assert _run_script(tmp_path, text) == []


def test_binary_path_with_spaces_is_quoted(tmp_path):
    binary = _argv_printer(tmp_path / "my llama $dir")
    text = render_llama_script(str(binary), ["-c", "4096"], {}, "r")
    assert _run_script(tmp_path, text) == ["-c", "4096"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",),
                                                      blacklist_characters="\0"), max_size=12),
                     max_size=6))
def test_llama_script_round_trips_any_arguments(tmp_path, args):
    binary = _argv_printer(tmp_path / "bin")
    assert _run_script(tmp_path, render_llama_script(str(binary), args, {}, "r")) == args


def test_environment_is_exported_exactly(tmp_path):
    folder = tmp_path / "bin"
    folder.mkdir()
    binary = _fake_binary(folder / "llama-server",
                          "printf '%s\\0' \"$HSA_OVERRIDE_GFX_VERSION\" \"$ODD\" \"${LD_LIBRARY_PATH-unset}\"")
    env = {"HSA_OVERRIDE_GFX_VERSION": "11.5.0", "ODD": "it's $HOME \"x\""}
    text = render_llama_script(str(binary), [], env, "r")
    _bash_n(tmp_path, text)
    assert _run_script(tmp_path, text) == ["11.5.0", "it's $HOME \"x\"", "unset"]


def test_bundled_libs_go_first_on_the_library_path(tmp_path):
    folder = tmp_path / "llama b1311"
    folder.mkdir()
    binary = _fake_binary(folder / "llama-server", "printf '%s\\0' \"$LD_LIBRARY_PATH\"")
    text = render_llama_script(str(binary), [], {}, "r", bundled_libs=True)
    _bash_n(tmp_path, text)
    assert _run_script(tmp_path, text) == [str(folder)]
    assert _run_script(tmp_path, text, {"LD_LIBRARY_PATH": "/opt/rocm/lib"}) == [
        f"{folder}:/opt/rocm/lib"]


def test_has_bundled_libs_looks_next_to_the_binary(tmp_path):
    root = Root(tmp_path)
    nightly = tmp_path / "opt/ojai/llama/b1311"
    nightly.mkdir(parents=True)
    (nightly / "llama-server").write_text("")
    assert not has_bundled_libs(root, "/opt/ojai/llama/b1311/llama-server")
    (nightly / "libggml-hip.so").write_text("")
    assert has_bundled_libs(root, "/opt/ojai/llama/b1311/llama-server")


@pytest.mark.parametrize("kwargs, message", [
    ({"binary": "llama-server"}, "absolute"),
    ({"route_name": "bad name"}, "route name"),
    ({"route_name": "../etc"}, "route name"),
    ({"route_name": "a\nb"}, "route name"),
    ({"env": {"BAD-NAME": "x"}}, "environment variable"),
    ({"env": {"A": "x\0y"}}, "NUL"),
    ({"args": ["a\0b"]}, "NUL"),
])
def test_llama_script_refuses_unsafe_values(kwargs, message):
    call = {"binary": "/opt/ojai/llama-server", "args": [], "env": {}, "route_name": "r"} | kwargs
    with pytest.raises(LaunchError, match=message):
        render_llama_script(**call)


class _Section(dict):
    """A unit section: key -> its last value (``all(key)``: every value, systemd allows repeats)."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, list[str]] = {}

    def all(self, key: str) -> list[str]:
        return self.values.get(key, [])


def _unit_sections(text: str) -> dict[str, _Section]:
    """A systemd unit read as systemd does: sections, ``Key=value`` lines, repeatable keys."""
    sections: dict[str, _Section] = {}
    current = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], _Section())
            continue
        assert current is not None and "=" in line, line
        key, value = line.split("=", 1)
        current[key] = value
        current.values.setdefault(key, []).append(value)
    return sections


def test_llama_unit_runs_the_script():
    text = render_llama_unit("/var/lib/ojai/routes/gemma/llama-server.sh", "gemma", "ojai")
    unit = _unit_sections(text)
    assert unit["Service"]["ExecStart"] == "/var/lib/ojai/routes/gemma/llama-server.sh"
    assert unit["Service"]["User"] == "ojai"
    assert unit["Service"]["Restart"] == "on-failure"
    assert "render" in unit["Service"]["SupplementaryGroups"].split()
    assert unit["Service"]["ProtectHome"] == "yes"  # models are not under /home
    assert unit["Service"]["ProtectSystem"] == "strict"
    assert unit["Service"]["NoNewPrivileges"] == "yes"
    assert unit["Service"]["PrivateTmp"] == "yes"
    assert "WorkingDirectory" not in unit["Service"]
    assert unit["Install"]["WantedBy"] == "multi-user.target"
    with_dir = _unit_sections(render_llama_unit("/a/run.sh", "g", "ojai", "/var/lib/ojai"))
    assert with_dir["Service"]["WorkingDirectory"] == "/var/lib/ojai"


@pytest.mark.parametrize("script", ["relative.sh", "/has space/run.sh", "/pct%n/run.sh",
                                    "/dollar$x/run.sh", "/q'uote/run.sh", "/a/../run.sh"])
def test_units_refuse_paths_systemd_would_reinterpret(script):
    with pytest.raises(LaunchError, match="systemd unit"):
        render_llama_unit(script, "r", "ojai")
    with pytest.raises(LaunchError, match="systemd unit"):
        render_flm_unit(script, "qwen3:4b", "ojai")


def test_units_refuse_bad_user_names():
    with pytest.raises(LaunchError, match="user name"):
        render_llama_unit("/a/run.sh", "r", "root\nExecStartPre=/bin/evil")


def test_flm_script_argv(tmp_path):
    flm = _fake_binary(tmp_path / "flm", PRINT_ARGV)
    text = render_flm_script("gemma4-it:e4b", ctx_len=32768, flm=str(flm))
    _bash_n(tmp_path, text)
    assert _run_script(tmp_path, text) == [
        "serve", "gemma4-it:e4b", "--ctx-len", "32768", "--port", str(FLM_DEFAULT_PORT),
        "--host", "127.0.0.1"]


def test_flm_script_defaults_listen_on_loopback():
    text = render_flm_script("qwen3:4b", ctx_len=8192)
    assert "exec /usr/bin/flm serve qwen3:4b" in text
    assert "--host 127.0.0.1" in text
    assert "--port 52625" in text


def test_flm_script_custom_port_and_host(tmp_path):
    flm = _fake_binary(tmp_path / "flm", PRINT_ARGV)
    text = render_flm_script("llama3.2:3b", ctx_len=4096, port=8001, host="::1", flm=str(flm))
    assert _run_script(tmp_path, text)[-4:] == ["--port", "8001", "--host", "::1"]


@pytest.mark.parametrize("kwargs, message", [
    ({"tag": "qwen3"}, "model tag"),
    ({"tag": "qwen3:4b; reboot"}, "model tag"),
    ({"port": 0}, "port"),
    ({"port": 70000}, "port"),
    ({"ctx_len": 0}, "context length"),
    ({"host": "0.0.0.0 --evil"}, "host"),
    ({"flm": "flm"}, "absolute"),
])
def test_flm_script_refuses_bad_values(kwargs, message):
    call = {"tag": "qwen3:4b", "ctx_len": 8192} | kwargs
    with pytest.raises(LaunchError, match=message):
        render_flm_script(**call)


def test_flm_unit_lifts_memlock():
    unit = _unit_sections(render_flm_unit("/var/lib/ojai/routes/npu/flm-serve.sh", "qwen3:4b", "ojai"))
    assert unit["Service"]["LimitMEMLOCK"] == "infinity"
    assert unit["Service"]["ExecStart"] == "/var/lib/ojai/routes/npu/flm-serve.sh"
    assert unit["Service"]["SupplementaryGroups"] == "render"
    assert "qwen3:4b" in unit["Unit"]["Description"]


def test_units_pass_systemd_analyze_verify(tmp_path):
    script = _fake_binary(tmp_path / "run.sh", "exit 0")
    units = {
        "ojai-llama-gemma.service": render_llama_unit(str(script), "gemma", "ojai", str(tmp_path)),
        "ojai-flm.service": render_flm_unit(str(script), "qwen3:4b", "ojai"),
    }
    for name, text in units.items():
        path = tmp_path / name
        path.write_text(text)
        proc = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True,
                              text=True)
        complaints = [line for line in proc.stderr.splitlines()
                      if name in line and "user" not in line.lower()]
        assert proc.returncode == 0 and complaints == [], proc.stderr


def test_option_groups_put_each_flag_with_its_values_and_lose_nothing():
    from ojai_setup.domain.launch import option_groups

    args = ["--model", "/m a.gguf", "-ngl", "-1", "--jinja", "--spec-type", "draft-mtp", "x"]
    assert option_groups(args) == [["--model", "/m a.gguf"], ["-ngl", "-1"], ["--jinja"],
                                   ["--spec-type", "draft-mtp", "x"]]
    assert sum(option_groups(args), []) == args
    assert option_groups(["value-first", "--f"]) == [["value-first"], ["--f"]]
