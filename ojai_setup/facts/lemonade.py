"""What Lemonade is on this machine: its version, the config directory its server reads, the
settings in its ``config.json`` that ojai cares about, what is at each ``llamacpp.*_bin`` path,
and (on the host) whether it answers ``/api/v1/health``."""

from __future__ import annotations

import os
import urllib.error
import urllib.request

from ojai_setup.core.root import Root
from ojai_setup.domain.lemonade import LLAMACPP_BIN_KEYS, detect_layout, looks_like_path
from ojai_setup.formats.lemonade import ConfigError, config_value, load_config, parse_lemonade_version

#: Lemonade's default port (``resources/defaults.json``)
LEMONADE_PORT = 13305
#: Debian's package ships its distribution defaults here; lemond merges them under config.json
DISTRO_DEFAULTS = "/usr/share/lemonade/defaults.json"


def service_home(root: Root) -> str:
    """The home of the user a standalone Lemonade runs for: the sudo caller's (from the
    machine's environment and ``/etc/passwd``), else root's."""
    from ojai_setup.facts.environ import environment

    user = environment(root).get("SUDO_USER") or "root"
    home = "/root" if user == "root" else f"/home/{user}"
    try:
        for line in root.read_text("/etc/passwd").splitlines():
            fields = line.split(":")
            if len(fields) >= 7 and fields[0] == user and fields[5].startswith("/"):
                return fields[5]
    except (OSError, UnicodeDecodeError):
        pass
    return home


def _kind(root: Root, path: str) -> str:
    real = root.resolve(path)
    if real.is_dir():
        return "folder"
    if not real.exists():
        return "missing"
    return "executable" if real.is_file() and os.access(real, os.X_OK) else "file"


def merged_config(root: Root, config_dir: str) -> tuple[dict, str | None]:
    """Lemonade's settings as lemond sees them: its distribution defaults (if any) with
    ``config.json`` over them; and an error when ``config.json`` cannot be read."""
    merged: dict = {}
    error = None
    for path in (DISTRO_DEFAULTS, f"{config_dir}/config.json"):
        if not root.exists(path):
            continue
        try:
            data = load_config(root.read_text(path), path)
        except ConfigError as exc:
            error = str(exc)
            continue
        for key, value in data.items():
            if isinstance(value, dict) and isinstance(merged.get(key), dict):
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
    return merged, error


def health(port: int, timeout: float = 2.0) -> str:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/health", timeout=timeout) as r:
            return "ok" if r.status == 200 else f"answered {r.status}"
    except urllib.error.HTTPError as exc:
        return f"answered {exc.code}"
    except OSError as exc:
        return f"no answer ({getattr(exc, 'reason', exc)})"


def lemonade_detail(root: Root, version_text: str | None) -> dict:
    """The ``detail`` of the lemonade tool in the facts (see the module doc)."""
    layout = detect_layout(root, service_home(root))
    config, error = merged_config(root, layout.config_dir)
    port = config_value(config, "port")
    port = port if isinstance(port, int) else LEMONADE_PORT
    bins = {}
    for key in LLAMACPP_BIN_KEYS:
        value = config_value(config, key)
        if isinstance(value, str) and looks_like_path(value):
            bins[key] = {"value": value, "kind": _kind(root, value)}
    version = parse_lemonade_version(version_text or "")
    detail: dict = {
        "mode": layout.mode, "config_dir": layout.config_dir, "port": port,
        "rocm_channel": config_value(config, "rocm_channel") or "stable",
        "bins": bins,
        "version": version.model_dump(mode="json") if version else None,
        "health": health(port) if root.is_host else "not checked (--root)",
    }
    mtp = mtp_backends(root, layout.config_dir)
    if mtp:
        detail["mtp_backends"] = mtp
    if error:
        detail["config_error"] = error
    return detail


def mtp_backends(root: Root, config_dir: str) -> dict[str, str]:
    """The llama.cpp backend Lemonade runs each of its MTP models on (a user model with the
    label ``mtp``: ``llamacpp_backend`` in ``recipe_options.json``, else "default")."""
    import json

    def load(name: str) -> dict:
        try:
            data = json.loads(root.read_text(f"{config_dir}/{name}"))
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    options = load("recipe_options.json")
    found = {}
    for name, model in load("user_models.json").items():
        if isinstance(model, dict) and "mtp" in (model.get("labels") or []):
            opts = options.get(f"user.{name}") or options.get(name) or {}
            backend = opts.get("llamacpp_backend") if isinstance(opts, dict) else None
            found[name] = str(backend or "default")
    return found

