"""Whether the Hugging Face Hub serves a file, asked while planning (one ``HEAD`` of its
``resolve`` URL, no redirect followed, nothing downloaded), so that a model download that
cannot start is blocked in the dry run instead of failing half way through an apply.
``HF_ENDPOINT``, ``HF_TOKEN`` (or the token ``hf auth login`` stored) and ``HF_HUB_OFFLINE``
are read as huggingface_hub reads them."""

from __future__ import annotations

import os
import urllib.error
import urllib.parse
import urllib.request

from ojai_setup.core.errors import RemoteError
from ojai_setup.core.paths import USER_AGENT

DEFAULT_ENDPOINT = "https://huggingface.co"
TIMEOUT = 10.0


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):  # the redirect itself is the answer
        return None


def hub_serves(repo_id: str, filename: str, revision: str | None = None) -> None:
    """Raise :class:`RemoteError` saying why the hub will not serve ``filename`` of
    ``repo_id`` (offline, unreachable, no such file, a gated repository); return when it will."""
    endpoint = (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")
    where = f"{repo_id}:{filename}"
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        raise RemoteError(f"{where} must be downloaded, but HF_HUB_OFFLINE is set")
    url = (f"{endpoint}/{urllib.parse.quote(repo_id)}/resolve/"
           f"{urllib.parse.quote(revision or 'main', safe='')}/{urllib.parse.quote(filename)}")
    headers = {"User-Agent": USER_AGENT}
    token = _authorization()
    if token:
        headers["Authorization"] = token
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(urllib.request.Request(url, headers=headers, method="HEAD"),
                         timeout=TIMEOUT):
            return
    except urllib.error.HTTPError as exc:
        if 300 <= exc.code < 400:
            return  # a redirect to the file's storage: it is there
        if exc.code == 404:
            raise RemoteError(f"{endpoint} has no {where} (HTTP 404): check the route's repo "
                              "and file name") from None
        if exc.code in (401, 403):
            raise RemoteError(f"{endpoint} refuses {where} (HTTP {exc.code}): "
                              f"{refusal(exc.code, bool(token))}") from None
        raise RemoteError(f"{endpoint} answered HTTP {exc.code} for {where}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise RemoteError(f"cannot reach {endpoint} for {where} ({reason})") from None


def _authorization() -> str | None:
    """The ``Authorization`` header huggingface_hub sends with its requests, and so ojai's
    download: ``Bearer`` and ``HF_TOKEN``, else the token ``hf auth login`` stored; none when
    ``HF_HUB_DISABLE_IMPLICIT_TOKEN`` is set. (huggingface_hub is imported here only when the hub
    is asked.)"""
    from huggingface_hub.utils import build_hf_headers

    return build_hf_headers().get("authorization")


def refusal(status: int, token_sent: bool) -> str:
    """Why the hub answers 401 or 403 for a file, and what to do, by whether a token
    (``HF_TOKEN``) was sent: none (a gated or private repository needs one), one the hub does
    not accept (401: revoked or mistyped), or one whose account has no access (403)."""
    if not token_sent:
        return ("a gated or private repository needs a token: set HF_TOKEN to a token of an "
                "account that has accepted its terms (or been given access) on the Hub")
    if status == 401:
        return ("the Hub does not accept HF_TOKEN (revoked, expired or mistyped): set HF_TOKEN "
                "to a valid token of an account with access to the repository")
    return ("a gated or private repository, and the account of HF_TOKEN has no access to it: "
            "accept its terms (or ask for access) on the Hub with that account, or set "
            "HF_TOKEN to a token of one that has")
