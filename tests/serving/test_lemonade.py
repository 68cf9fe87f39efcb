"""Lemonade: config directory, user_models.json / recipe_options.json merges, CLI calls."""
from __future__ import annotations

import json
from pathlib import Path, PurePosixPath

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ojai_setup.core.root import Root
from ojai_setup.domain.lemonade import (
    LemonadeRoute,
    LemonadeSettings,
    OwnLlamaServer,
    bin_problem,
    catalog_match,
    lemonade_config,
    detect_layout,
    lemonade_commands,
    lemonade_layout,
    recipe_options_action,
    user_models_action,
)
from ojai_setup.formats.lemonade import (
    RESERVED_LLAMACPP_FLAGS,
    ConfigError,
    config_value,
    join_llamacpp_args,
    merge_config,
    merge_recipe_options,
    merge_user_models,
    parse_lemonade_version,
)


# (how Lemonade reads ``llamacpp_args``, src/cpp/include/lemon/utils/custom_args.h: the oracle
# join_llamacpp_args is checked against)
def split_llamacpp_args(text: str) -> list[str]:
    """How Lemonade reads ``llamacpp_args``: split on spaces; ``'`` or ``"`` group until the
    same quote closes; the quotes themselves are dropped; there are no escapes; empty pieces
    vanish."""
    args: list[str] = []
    current: list[str] = []
    quote: str | None = None
    for char in text:
        if quote is None and char in "'\"":
            quote = char
        elif quote is not None and char == quote:
            quote = None
        elif quote is None and char == " ":
            if current:
                args.append("".join(current))
                current = []
        else:
            current.append(char)
    if current:
        args.append("".join(current))
    return args


DATA = Path(__file__).parents[1] / "data" / "lemonade"
MAIN = "unsloth/gemma-4-26B-A4B-it-GGUF:UD-Q4_K_M"
DRAFT = "unsloth/gemma-4-26B-A4B-it-GGUF:mtp-gemma-4-26B-A4B-it.gguf"


def _read(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


# -- config directory --------------------------------------------------------------------------
@pytest.mark.parametrize("facts, mode, config_dir", [
    ({"system_unit": True, "system_enabled": True, "user_enabled": False},
     "system-service", "/var/lib/lemonade"),
    ({"system_unit": True, "system_enabled": False, "user_enabled": False},
     "system-service", "/var/lib/lemonade"),
    ({"system_unit": True, "system_enabled": True, "user_enabled": True},
     "system-service", "/var/lib/lemonade"),
    ({"system_unit": True, "system_enabled": False, "user_enabled": True},
     "user-service", "/home/ada/.config/lemonade"),
    ({"system_unit": False, "system_enabled": False, "user_enabled": False},
     "standalone", "/home/ada/.config/lemonade"),
])
def test_layout_rules(facts, mode, config_dir):
    layout = lemonade_layout(home="/home/ada", **facts)
    assert (layout.mode, layout.config_dir) == (mode, config_dir)
    assert layout.reason
    assert layout.protects_home is (mode == "system-service")


def test_layout_honours_xdg_config_home():
    layout = lemonade_layout(system_unit=False, system_enabled=False, user_enabled=False,
                             home="/home/ada", xdg_config_home="/home/ada/cfg")
    assert layout.config_dir == "/home/ada/cfg/lemonade"


def _touch(root: Path, machine_path: str) -> None:
    path = root / machine_path.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("")


def test_detect_layout_from_a_machine_folder(tmp_path):
    root = Root(tmp_path)
    assert detect_layout(root, "/home/ada").mode == "standalone"
    _touch(tmp_path, "/usr/lib/systemd/user/lemond.service")  # the package ships it disabled
    assert detect_layout(root, "/home/ada").mode == "standalone"
    _touch(tmp_path, "/home/ada/.config/systemd/user/default.target.wants/lemond.service")
    assert detect_layout(root, "/home/ada").mode == "user-service"
    _touch(tmp_path, "/usr/lib/systemd/system/lemond.service")
    _touch(tmp_path, "/etc/systemd/system/multi-user.target.wants/lemond.service")
    layout = detect_layout(root, "/home/ada")
    assert layout.mode == "system-service" and layout.config_dir == "/var/lib/lemonade"


# -- user_models.json --------------------------------------------------------------------------
def test_new_file():
    text = merge_user_models(None, "Gemma-4-26B-ojai", MAIN, DRAFT, 18.5, ["chat", "vision"])
    assert text.endswith("}\n") and text.startswith('{\n  "Gemma-4-26B-ojai": {\n    "')
    data = json.loads(text)
    assert data == {"Gemma-4-26B-ojai": {
        "checkpoints": {"draft": DRAFT, "main": MAIN},
        "labels": ["chat", "custom", "mtp", "vision"],
        "recipe": "llamacpp",
        "size": 18.5,
        "suggested": True}}
    assert merge_user_models("", "Gemma-4-26B-ojai", MAIN, DRAFT, 18.5, ["chat", "vision"]) == text


def test_a_route_without_mtp_heads_loses_the_mtp_label():
    """The label mtp makes Lemonade add --spec-type draft-mtp: an n-gram or draft-model route
    must not carry it, even when an earlier registration gave it."""
    once = merge_user_models(None, "gemma-3-270m", MAIN, None, 0.25, [])
    assert json.loads(once)["gemma-3-270m"]["labels"] == ["custom", "mtp"]
    again = json.loads(merge_user_models(once, "gemma-3-270m", MAIN, None, 0.25, [], mtp=False))
    assert again["gemma-3-270m"]["labels"] == ["custom"]


def test_hand_edited_file_keeps_every_entry_and_field():
    before = _read("user_models.hand-edited.json")
    text = merge_user_models(before, "user.Gemma-4-26B-ojai", MAIN, DRAFT, 18.5, [])
    old, new = json.loads(before), json.loads(text)
    assert list(new)[:-1] == list(old)  # order kept, new entry last
    for key in old:
        assert new[key] == old[key]
    assert new["Gemma-4-26B-ojai"]["checkpoints"] == {"draft": DRAFT, "main": MAIN}
    assert "mtp" in new["Gemma-4-26B-ojai"]["labels"]
    assert "\n  \"MyKit\": {\n" in text  # two-space indentation, as lemond writes


def test_update_keeps_user_fields_and_labels():
    before = _read("user_models.lemond-written.json")
    qwen_main = "unsloth/gemma-4-26B-A4B-it-GGUF:UD-Q5_K_M"
    text = merge_user_models(before, "Gemma-4-26B-A4B-it-MTP", qwen_main, DRAFT, 21.0, ["chat"])
    entry = json.loads(text)["Gemma-4-26B-A4B-it-MTP"]
    assert entry["checkpoints"] == {
        "draft": DRAFT, "main": qwen_main,
        "mmproj": "unsloth/gemma-4-26B-A4B-it-GGUF:mmproj-F16.gguf"}
    assert entry["labels"] == ["chat", "custom", "mtp", "tool-calling", "vision"]
    assert entry["source"] == "huggingface" and entry["size"] == 21.0
    assert json.loads(text)["Phi-4-mini"] == json.loads(before)["Phi-4-mini"]


def test_heads_inside_the_main_file_drop_a_stale_draft_and_single_checkpoint():
    before = _read("user_models.lemond-written.json")
    main = "unsloth/Qwen3.6-27B-MTP-GGUF:Qwen3.6-27B-UD-Q4_K_XL.gguf"
    entry = json.loads(merge_user_models(before, "Gemma-4-26B-A4B-it-MTP", main, None, 17.0,
                                         []))["Gemma-4-26B-A4B-it-MTP"]
    assert "draft" not in entry["checkpoints"]
    entry = json.loads(merge_user_models(before, "Phi-4-mini", main, None, 17.0,
                                         []))["Phi-4-mini"]
    assert "checkpoint" not in entry
    assert entry["checkpoints"] == {"main": main}
    assert "mtp" in entry["labels"]


@pytest.mark.parametrize("name", ["user_models.hand-edited.json", "user_models.lemond-written.json"])
def test_applying_twice_is_byte_identical(name):
    once = merge_user_models(_read(name), "Gemma-ojai", MAIN, DRAFT, 18.5, ["chat"])
    assert once != _read(name)
    assert merge_user_models(once, "Gemma-ojai", MAIN, DRAFT, 18.5, ["chat"]) == once


def test_an_entry_already_as_wanted_leaves_the_file_untouched():
    before = _read("user_models.lemond-written.json")  # no final newline, as lemond writes it
    same = merge_user_models(before, "Gemma-4-26B-A4B-it-MTP", MAIN, DRAFT, 18.5,
                             ["chat", "tool-calling"])
    assert same == before


def test_malformed_user_models_names_file_line_and_column():
    with pytest.raises(ConfigError) as err:
        merge_user_models(_read("user_models.malformed.json"), "X", MAIN, DRAFT, 1.0, [],
                          path="/var/lib/lemonade/user_models.json")
    assert err.value.path == "/var/lib/lemonade/user_models.json"
    assert err.value.line == 6 and err.value.column == 3  # the "}" after the trailing comma
    assert str(err.value).startswith("/var/lib/lemonade/user_models.json:6:3: ")
    assert "untouched" in str(err.value)


@pytest.mark.parametrize("text, message", [
    ("[]", "JSON object"),
    ('{"X": 3}', "not an object"),
    ('{"X": {"checkpoints": "a"}}', "checkpoints"),
    ('{"X": {"labels": "mtp"}}', "labels"),
    ('{"X": {}, "X": {}}', "twice"),
])
def test_shapes_ojai_will_not_rewrite(text, message):
    with pytest.raises(ConfigError, match=message):
        merge_user_models(text, "X", MAIN, None, 1.0, [])


@pytest.mark.parametrize("name, main, draft", [
    ("builtin.Gemma", MAIN, None),
    ("extra.Gemma", MAIN, None),
    ("has space", MAIN, None),
    ("Gemma", "not-a-checkpoint", None),
    ("Gemma", MAIN, "org/repo"),
])
def test_bad_names_and_checkpoints(name, main, draft):
    with pytest.raises(ConfigError):
        merge_user_models(None, name, main, draft, 1.0, [])


# -- recipe_options.json -----------------------------------------------------------------------
def test_recipe_options_new_entry_next_to_docs_template():
    before = _read("recipe_options.docs-template.json")
    text = merge_recipe_options(before, "user.Gemma-ojai", 16384, "rocm",
                                ["--spec-draft-n-max", "2", "-fa", "on"])
    data = json.loads(text)
    assert data["user.Gemma-ojai"] == {"ctx_size": 16384, "llamacpp_args": "--spec-draft-n-max 2 -fa on",
                                       "llamacpp_backend": "rocm"}
    old = json.loads(before)
    assert {k: data[k] for k in old} == old
    assert list(data) == [*old, "user.Gemma-ojai"]


def test_recipe_options_update_keeps_other_keys():
    before = _read("recipe_options.lemond-written.json")
    text = merge_recipe_options(before, "user.Phi-4-mini", 8192, "rocm", ["-fa", "on"])
    entry = json.loads(text)["user.Phi-4-mini"]
    assert entry == {"ctx_size": 8192, "llamacpp_args": "-fa on", "llamacpp_backend": "rocm",
                     "pinned": True}
    assert merge_recipe_options(text, "user.Phi-4-mini", 8192, "rocm", ["-fa", "on"]) == text


def test_recipe_options_args_with_spaces_survive_lemonades_split():
    args = ["--chat-template-kwargs", '{"enable_thinking": false}', "--alias", "it's mine",
            "--both", "a'b \"c\""]
    text = merge_recipe_options(None, "user.X", 4096, "rocm", args)
    assert split_llamacpp_args(json.loads(text)["user.X"]["llamacpp_args"]) == args


@pytest.mark.parametrize("args", [
    ["-m", "/models/x.gguf"],
    ["--model=/models/x.gguf"],
    ["-c", "8192"],
    ["--ctx-size", "8192"],
    ["--port", "8081"],
    ["--jinja"],
    ["--metrics"],
    ["-md", "mtp.gguf"],
    ["--model-draft", "mtp.gguf"],
    ["--spec-draft-model", "mtp.gguf"],
    ["-fa", "on", "--device", "ROCm0"],
])
def test_reserved_flags_are_refused(args):
    before = _read("recipe_options.docs-template.json")
    with pytest.raises(ConfigError, match="Lemonade sets itself") as err:
        merge_recipe_options(before, "user.X", 4096, "rocm", args)
    flag = next(a for a in args if a.split("=")[0] in RESERVED_LLAMACPP_FLAGS).split("=")[0]
    assert flag in str(err.value)


def test_values_that_look_like_reserved_flags_are_fine():
    text = merge_recipe_options(None, "user.X", 4096, "rocm",
                                ["--spec-type", "draft-mtp", "--spec-draft-n-max", "2",
                                 "--temp", "-1", "-ngl", "99"])
    assert json.loads(text)["user.X"]["llamacpp_args"].startswith("--spec-type draft-mtp")


def test_recipe_options_refuses_bad_keys_and_sizes():
    with pytest.raises(ConfigError, match="canonical id"):
        merge_recipe_options(None, "X", 4096, "rocm", [])
    with pytest.raises(ConfigError, match="ctx_size"):
        merge_recipe_options(None, "user.X", 0, "rocm", [])
    with pytest.raises(ConfigError, match="empty argument"):
        merge_recipe_options(None, "user.X", 4096, "rocm", ["--alias", ""])
    assert json.loads(merge_recipe_options(None, "user.X", -1, "rocm", []))["user.X"]["ctx_size"] == -1


def test_malformed_recipe_options_names_the_line():
    broken = '{\n  "user.X": {\n    "ctx_size": 4096\n    "llamacpp_backend": "rocm"\n  }\n}\n'
    with pytest.raises(ConfigError) as err:
        merge_recipe_options(broken, "user.X", 4096, "rocm", [], path="/home/ada/.config/lemonade/recipe_options.json")
    assert err.value.line == 4
    assert "/home/ada/.config/lemonade/recipe_options.json:4:" in str(err.value)


@given(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1,
                        max_size=10), max_size=6))
def test_join_and_split_round_trip(args):
    assert split_llamacpp_args(join_llamacpp_args(args)) == args


def test_split_matches_lemonades_rules():
    assert split_llamacpp_args("  -fa on  --alias \"a b\" x'y z'w ") == ["-fa", "on", "--alias", "a b", "xy zw"]
    assert split_llamacpp_args("\"\" a") == ["a"]


# -- lemonade CLI calls ------------------------------------------------------------------------
SYSTEM = lemonade_layout(system_unit=True, system_enabled=True, user_enabled=False, home="/home/ada")
STANDALONE = lemonade_layout(system_unit=False, system_enabled=False, user_enabled=False,
                             home="/home/ada")


def test_commands_nightly_llamacpp():
    route = LemonadeRoute(name="gemma", engine="llamacpp")
    assert lemonade_commands(route, LemonadeSettings(layout=SYSTEM)) == [
        ["lemonade", "config", "set", "rocm_channel=nightly"],
        ["lemonade", "backends", "install", "llamacpp:rocm"]]


NIGHTLY = OwnLlamaServer(executable="/opt/ojai/llama.cpp/current/llama-server", install="nightly")
SOURCE_HIP = OwnLlamaServer(executable="/opt/ojai/llama.cpp/current/llama-server", install="source")
SOURCE_CPU = OwnLlamaServer(executable="/opt/ojai/llama.cpp/current/llama-server", install="source",
                            backend="cpu")


def test_ojai_llama_server_is_set_as_the_executable_not_its_folder():
    route = LemonadeRoute(name="gemma", engine="llamacpp")
    settings = LemonadeSettings(layout=SYSTEM, llama_server=NIGHTLY)
    assert lemonade_commands(route, settings) == []  # nothing to download for a path value
    assert lemonade_config(settings) == {
        "llamacpp.rocm_bin": "/opt/ojai/llama.cpp/current/llama-server",
        "rocm_channel": "nightly"}
    assert lemonade_config(LemonadeSettings(layout=SYSTEM, llama_server=SOURCE_CPU)) == {
        "llamacpp.cpu_bin": "/opt/ojai/llama.cpp/current/llama-server"}


def test_the_old_folder_value_is_what_doctor_flags():
    """ojai used to write the folder (``llamacpp.rocm_bin=/opt/ojai/llama.cpp/current``)."""
    old = "/opt/ojai/llama.cpp/current"
    problem = bin_problem("llamacpp.rocm_bin", old, "folder")
    assert problem is not None and "Failed to execute: /opt/ojai/llama.cpp/current" in problem
    assert "llamacpp.rocm_bin=/opt/ojai/llama.cpp/current/llama-server" in problem
    new = lemonade_config(LemonadeSettings(layout=SYSTEM, llama_server=NIGHTLY))["llamacpp.rocm_bin"]
    assert bin_problem("llamacpp.rocm_bin", new, "executable") is None
    assert "chmod" in bin_problem("llamacpp.cpu_bin", new, "file")
    assert "does not exist" in bin_problem("llamacpp.cpu_bin", new, "missing")


def test_commands_refuse_a_home_binary_for_the_system_service():
    home_binary = "/home/ada/llama.cpp/build/bin/llama-server"
    own = OwnLlamaServer(executable=home_binary, install="source")
    with pytest.raises(ConfigError, match="ProtectHome"):
        lemonade_config(LemonadeSettings(layout=SYSTEM, llama_server=own))
    assert lemonade_config(LemonadeSettings(layout=STANDALONE, llama_server=own))[
        "llamacpp.rocm_bin"] == home_binary
    with pytest.raises(ConfigError, match="absolute"):
        lemonade_config(LemonadeSettings(layout=STANDALONE, llama_server=OwnLlamaServer(
            executable="bin/llama-server", install="source")))


# -- the library path Lemonade gives the llama-server it starts -----------------------------------
# (a model of Lemonade's own code, to check ojai's config.json against; ojai never computes it)
def llama_server_library_path(config: dict, *, backend: str, therock_dirs: list[str],
                              inherited: str | None = None) -> str | None:
    """The ``LD_LIBRARY_PATH`` Lemonade gives the ``llama-server`` it starts for a model of
    llama.cpp ``backend``, from its merged ``config.json`` (None: Lemonade sets none).

    As ``LlamaCppServer::load`` in ``src/cpp/server/backends/llamacpp/llamacpp_server.cpp``
    (lemonade-sdk/lemonade v11.7.0, unchanged at commit e385039) builds it on Linux:

    * the backend ``rocm`` resolves to ``rocm-<rocm_channel>`` (``resolve_llamacpp_backend``;
      ``rocm_channel`` is ``stable`` by default, ``resources/defaults.json``);
    * the executable is ``llamacpp.rocm_bin`` for both channels (``build_bin_config_key``
      collapses ``rocm-stable``/``rocm-nightly`` to ``rocm_bin``), taken as-is when it is a path;
    * for ``rocm-stable`` and ``rocm-nightly`` the library path starts with the executable's
      folder (``fs::path(executable).parent_path()``); on ``rocm-stable`` only, the TheRock
      runtime folders for the GPU (``BackendUtils::get_therock_lib_paths``, e.g.
      ``<bin dir>/therock/gfx1150-<version>/lib`` and its ``lib/llvm/lib``) go in front of it;
    * an ``LD_LIBRARY_PATH`` lemond itself has is appended;
    * the ``cpu`` and ``vulkan`` backends get no ``LD_LIBRARY_PATH`` (their builds are static
      or find their libraries by RPATH).

    ``therock_dirs``: the runtime folders Lemonade would find (empty when none is installed).
    """
    if backend not in ("rocm", "cuda"):
        return None
    key = "rocm_bin" if backend == "rocm" else "cuda_bin"
    executable = config_value(config, f"llamacpp.{key}")
    if not isinstance(executable, str) or not executable.startswith("/"):
        return None  # Lemonade's own download; its folder is Lemonade's business
    path = str(PurePosixPath(executable).parent)
    if backend == "rocm" and (config_value(config, "rocm_channel") or "stable") == "stable" \
            and therock_dirs:
        path = ":".join(therock_dirs) + ":" + path
    if inherited:
        path += ":" + inherited
    return path


THEROCK = ["/var/lib/lemonade/.cache/lemonade/bin/therock/gfx1150-7.12/lib",
           "/var/lib/lemonade/.cache/lemonade/bin/therock/gfx1150-7.12/lib/llvm/lib"]


def _merged_config(settings: LemonadeSettings, existing: str | None = None) -> dict:
    """config.json as ojai writes it, deep-merged over Lemonade's defaults as lemond does."""
    written = json.loads(merge_config(existing, lemonade_config(settings)))
    defaults = {"rocm_channel": "stable", "llamacpp": {"rocm_bin": "builtin", "cpu_bin": "builtin"}}
    return {**defaults, **written, "llamacpp": {**defaults["llamacpp"], **written.get("llamacpp", {})}}


@pytest.mark.parametrize("own", [NIGHTLY, SOURCE_HIP], ids=["nightly", "source"])
def test_ojai_config_makes_lemonade_load_the_libraries_of_ojais_build(own):
    """The nightly zip bundles its ROCm runtime next to llama-server (RPATH $ORIGIN); a HIP
    source build uses its own libllama/libggml next to it and the system ROCm it was built
    against. Either way nothing of Lemonade's TheRock runtime may come first."""
    config = _merged_config(LemonadeSettings(layout=SYSTEM, llama_server=own))
    path = llama_server_library_path(config, backend="rocm", therock_dirs=THEROCK)
    assert path == "/opt/ojai/llama.cpp/current"
    assert llama_server_library_path(config, backend="rocm", therock_dirs=THEROCK,
                                     inherited="/usr/lib/extra") == \
        "/opt/ojai/llama.cpp/current:/usr/lib/extra"


def test_old_config_put_therock_ahead_of_the_build():
    """What ojai wrote before: the folder as rocm_bin and the channel left on stable."""
    old = {"rocm_channel": "stable", "llamacpp": {"rocm_bin": "/opt/ojai/llama.cpp/current"}}
    path = llama_server_library_path(old, backend="rocm", therock_dirs=THEROCK)
    assert path.split(":")[:2] == THEROCK  # TheRock first: the bundled runtime is overridden
    assert path.split(":")[2] == "/opt/ojai/llama.cpp"  # and the folder's parent, not the build
    # the user's own stable setting is overridden by ojai's config
    fixed = _merged_config(LemonadeSettings(layout=SYSTEM, llama_server=NIGHTLY),
                           json.dumps(old))
    assert fixed["rocm_channel"] == "nightly"
    assert llama_server_library_path(fixed, backend="rocm", therock_dirs=THEROCK) == \
        "/opt/ojai/llama.cpp/current"


def test_cpu_backend_gets_no_library_path():
    config = _merged_config(LemonadeSettings(layout=SYSTEM, llama_server=SOURCE_CPU))
    assert llama_server_library_path(config, backend="cpu", therock_dirs=THEROCK) is None


# -- config.json -------------------------------------------------------------------------------
def test_config_merge_nests_keys_and_keeps_the_users():
    before = '{\n  "port": 13306,\n  "llamacpp": {\n    "args": "-fa on"\n  }\n}\n'
    text = merge_config(before, {"llamacpp.rocm_bin": "/opt/x/llama-server", "rocm_channel": "nightly"})
    assert json.loads(text) == {"port": 13306, "rocm_channel": "nightly",
                                "llamacpp": {"args": "-fa on", "rocm_bin": "/opt/x/llama-server"}}
    assert merge_config(text, {"llamacpp.rocm_bin": "/opt/x/llama-server"}) == text
    with pytest.raises(ConfigError, match="not an object"):
        merge_config('{"llamacpp": 3}', {"llamacpp.rocm_bin": "/x"})


@pytest.mark.parametrize("text, numbers, calendar", [
    ("lemond version 2026.39.1-2\n", (2026, 39, 1), True),
    ("lemonade version 2026.39.1-2", (2026, 39, 1), True),
    ("lemonade version 11.7.0\n", (11, 7, 0), False),
    ("Lemonade Server v11.8.1", (11, 8, 1), False),
])
def test_version_forms(text, numbers, calendar):
    version = parse_lemonade_version(text)
    assert version is not None
    assert (version.numbers, version.calendar) == (numbers, calendar)
    assert parse_lemonade_version("no version here") is None


def test_builtin_catalog_match():
    catalog = {"Gemma-4-26B-A4B-it-MTP-GGUF": {"checkpoints": {"main": MAIN, "draft": DRAFT,
                                                              "mmproj": "x/y:mm.gguf"}},
               "Qwen3.6-27B-MTP-GGUF": {"checkpoint": "unsloth/Qwen3.6-27B-MTP-GGUF:Q.gguf"}}
    assert catalog_match(catalog, MAIN, DRAFT) == "Gemma-4-26B-A4B-it-MTP-GGUF"
    assert catalog_match(catalog, MAIN, "other/x:mtp.gguf") is None
    assert catalog_match(catalog, "unsloth/Qwen3.6-27B-MTP-GGUF:Q.gguf", None) == "Qwen3.6-27B-MTP-GGUF"


def test_local_path_entry():
    main, draft = "/var/lib/ojai/models/org/r/m.gguf", "/var/lib/ojai/models/org/r/mtp.gguf"
    entry = json.loads(merge_user_models(None, "g", main, draft, 1.0, [], source="local_path"))["g"]
    assert entry["source"] == "local_path" and entry["checkpoints"] == {"main": main, "draft": draft}
    with pytest.raises(ConfigError, match="absolute"):
        merge_user_models(None, "g", "org/r:m.gguf", None, 1.0, [], source="local_path")
    # back to hub checkpoints: the local source goes
    hub = json.loads(merge_user_models(json.dumps({"g": entry}), "g", MAIN, DRAFT, 1.0, []))["g"]
    assert "source" not in hub


def test_commands_flm():
    route = LemonadeRoute(name="npu", engine="flm")
    assert lemonade_commands(route, LemonadeSettings(layout=SYSTEM, system_flm=True)) == [
        ["lemonade", "config", "set", "flm.prefer_system=true"]]
    assert lemonade_commands(route, LemonadeSettings(layout=SYSTEM)) == [
        ["lemonade", "backends", "install", "flm:npu"]]


# -- actions on a machine folder ---------------------------------------------------------------
def test_actions_on_a_system_service_machine(tmp_path):
    root = Root(tmp_path)
    (tmp_path / "var/lib/lemonade").mkdir(parents=True)
    existing = _read("user_models.lemond-written.json")
    (tmp_path / "var/lib/lemonade/user_models.json").write_text(existing)
    action = user_models_action(root, SYSTEM, "Gemma-ojai", MAIN, DRAFT, 18.5, ["chat"])
    assert action is not None
    assert action.path == "/var/lib/lemonade/user_models.json"
    assert action.before == existing and action.needs_root
    assert "Gemma-ojai" in json.loads(action.after)
    options = recipe_options_action(root, SYSTEM, "user.Gemma-ojai", 16384, "rocm", ["-fa", "on"])
    assert options is not None and options.before is None
    assert options.path == "/var/lib/lemonade/recipe_options.json"
    # once written, nothing left to do
    (tmp_path / "var/lib/lemonade/user_models.json").write_text(action.after)
    assert user_models_action(root, SYSTEM, "Gemma-ojai", MAIN, DRAFT, 18.5, ["chat"]) is None


def test_malformed_file_on_a_machine_is_left_untouched(tmp_path):
    root = Root(tmp_path)
    target = tmp_path / "home/ada/.config/lemonade/user_models.json"
    target.parent.mkdir(parents=True)
    broken = _read("user_models.malformed.json")
    target.write_text(broken)
    with pytest.raises(ConfigError, match=r"/home/ada/.config/lemonade/user_models.json:6:3"):
        user_models_action(root, STANDALONE, "Gemma-ojai", MAIN, DRAFT, 18.5, [])
    assert target.read_text() == broken
    assert sorted(p.name for p in target.parent.iterdir()) == ["user_models.json"]
