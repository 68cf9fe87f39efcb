"""Asking a running FastFlowLM server which models it serves (``/api/tags``)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from ojai_setup.formats.flm import _Model


# -- readiness ---------------------------------------------------------------------------------
class TagsProbe(_Model):
    ready: bool
    tags: list[str] = []
    detail: str = ""


def probe_tags(host: str = "127.0.0.1", port: int = 52625, timeout: float = 2.0) -> TagsProbe:
    """``GET http://HOST:PORT/api/tags``: FastFlowLM answers once ``flm serve`` is up."""
    url = f"http://{host}:{port}/api/tags"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 - loopback
            body = response.read()
    except urllib.error.HTTPError as exc:
        return TagsProbe(ready=False, detail=f"{url} answered HTTP {exc.code}")
    except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return TagsProbe(ready=False, detail=f"{url} is not answering: {reason}")
    try:
        data = json.loads(body)
        tags = [str(m["name"]) for m in data["models"]]
    except (ValueError, KeyError, TypeError):
        return TagsProbe(ready=False, detail=f"{url} answered, but not with a model list")
    return TagsProbe(ready=True, tags=tags, detail=f"{url} lists {len(tags)} models")
