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

from ojai_setup.core.asking import NETWORK_TIMEOUT, asking
from ojai_setup.core.errors import RemoteError
from ojai_setup.core.paths import USER_AGENT

DEFAULT_ENDPOINT = "https://huggingface.co"
TIMEOUT = NETWORK_TIMEOUT


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
        with asking(where, url), \
                opener.open(urllib.request.Request(url, headers=headers, method="HEAD"),
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


# -- a model's files and its GGUF header, before anything is downloaded -------------------------

#: bytes asked for first when reading a GGUF header; then as many as the header says it needs
#: (doubling while it cannot tell), up to :data:`HEADER_LIMIT`
HEADER_FIRST = 2 << 20
HEADER_LIMIT = 256 << 20
HEADER_TIMEOUT = NETWORK_TIMEOUT


def _endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def _offline(where: str) -> None:
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        raise RemoteError(f"{where}: the Hub must be asked about it, but HF_HUB_OFFLINE is set")


def _hub_refusal(where: str, what: str, exc: Exception) -> RemoteError:
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    if status in (401, 403):
        return RemoteError(f"{_endpoint()} refuses {what} of {where} (HTTP {status}): "
                           f"{refusal(status, _authorization() is not None)}")
    if status == 404:
        return RemoteError(f"{_endpoint()} has no {where} (HTTP 404): check the repository's "
                           "name and revision")
    return RemoteError(f"{_endpoint()} answered {what} of {where} with "
                       f"{' '.join(str(exc).split()) or type(exc).__name__}")


def hub_listing(repo_id: str, revision: str | None = None):
    """``(commit, files)``: the commit ``revision`` (default ``main``) resolves to, and every file
    of ``repo_id`` there with its size and LFS sha256
    (:class:`~ojai_setup.domain.own_model.HubFile`), from one ``GET /api/models/{repo}
    /revision/{revision}?blobs=true`` (huggingface_hub's ``model_info(files_metadata=True)``)."""
    from huggingface_hub import HfApi
    from huggingface_hub.utils import HfHubHTTPError

    from ojai_setup.domain.own_model import HubFile

    where = f"{repo_id}@{revision or 'main'}"
    _offline(where)
    try:
        with asking(f"the files of {where}", _endpoint()):
            info = HfApi(endpoint=_endpoint()).model_info(repo_id, revision=revision,
                                                          files_metadata=True, timeout=TIMEOUT)
    except HfHubHTTPError as exc:
        raise _hub_refusal(where, "the file listing", exc) from None
    except Exception as exc:  # httpx's transport errors: unreachable, refused, timed out
        raise RemoteError(f"cannot reach {_endpoint()} for {where} "
                          f"({' '.join(str(exc).split()) or type(exc).__name__})") from None
    if not info.sha:
        raise RemoteError(f"{_endpoint()} gave no commit for {where}")
    files = [HubFile(path=s.rfilename, size=int(s.size or (s.lfs.size if s.lfs else 0)),
                     sha256=s.lfs.sha256 if s.lfs else None) for s in info.siblings or ()]
    return info.sha, files


def read_gguf_header(repo_id: str, filename: str, commit: str, size: int):
    """The GGUF metadata (:class:`~ojai_setup.formats.gguf.ModelInfo`) of ``filename`` in
    ``repo_id`` at ``commit`` (``size`` bytes), read with HTTP range requests of its first bytes
    only: the hub's ``resolve`` URL (its ``HEAD`` through huggingface_hub, with the token)
    names the file's location, usually a CDN of another origin, which is asked for ``Range:
    bytes=0-N`` without the token, and for the following bytes while the header goes on.
    Raises :class:`~ojai_setup.formats.gguf.GGUFError` for a file that is not GGUF and
    :class:`RemoteError` when the hub or its CDN will not answer."""
    from huggingface_hub import get_hf_file_metadata, hf_hub_url
    from huggingface_hub.utils import HfHubHTTPError, build_hf_headers

    from ojai_setup.facts.gguf import parse_header
    from ojai_setup.formats.gguf import GGUFError, HeaderIncomplete

    where = f"{repo_id}@{commit[:12]}:{filename}"
    _offline(where)
    url = hf_hub_url(repo_id, filename, revision=commit, endpoint=_endpoint())
    try:
        with asking(f"where {where} is stored", url):
            meta = get_hf_file_metadata(url, timeout=TIMEOUT, endpoint=_endpoint())
    except HfHubHTTPError as exc:
        raise _hub_refusal(where, "the file", exc) from None
    except Exception as exc:
        raise RemoteError(f"cannot reach {_endpoint()} for {where} "
                          f"({' '.join(str(exc).split()) or type(exc).__name__})") from None
    location = meta.location or url
    headers = {k: v for k, v in build_hf_headers().items() if k.lower() != "accept-encoding"}
    headers["Accept-Encoding"] = "identity"
    if urllib.parse.urlsplit(location)[:2] != urllib.parse.urlsplit(url)[:2]:
        headers.pop("authorization", None)  # a signed CDN URL: the token stays on the hub
    data = bytearray()
    want = min(HEADER_FIRST, size)
    while True:
        data += _range(location, headers, len(data), want - 1, size, where)
        try:
            return parse_header(bytes(data), size, f"{repo_id}:{filename}")
        except HeaderIncomplete as more:
            if len(data) >= size:
                raise GGUFError(f"{repo_id}:{filename}: not a readable GGUF file (its header "
                                "runs past the end of the file)") from None
            if len(data) >= HEADER_LIMIT:
                raise GGUFError(f"{repo_id}:{filename}: its GGUF header runs past "
                                f"{HEADER_LIMIT >> 20} MiB, more than any model's; not read "
                                "further") from None
            want = min(size, HEADER_LIMIT, max(more.need, 2 * len(data)))


def _range(location: str, headers: dict[str, str], start: int, end: int, size: int,
           where: str) -> bytes:
    """Bytes ``start``..``end`` (inclusive) of the file at ``location``, by a range request."""
    request = urllib.request.Request(location, headers={**headers, "Range": f"bytes={start}-{end}"})
    host = urllib.parse.urlsplit(location).netloc
    try:
        with asking(f"the GGUF header of {where}", location), \
                urllib.request.urlopen(request, timeout=HEADER_TIMEOUT) as response:
            if response.status != 206:
                raise RemoteError(f"{host} ignored the range request for {where} (HTTP "
                                  f"{response.status} instead of 206): its header cannot be read "
                                  "without downloading the whole file")
            body = response.read(end - start + 1)
    except urllib.error.HTTPError as exc:
        raise RemoteError(f"{host} answered HTTP {exc.code} to a range request for {where}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise RemoteError(f"cannot reach {host} for {where} "
                          f"({getattr(exc, 'reason', exc)})") from None
    if len(body) != min(end, size - 1) - start + 1:
        raise RemoteError(f"{host} sent {len(body)} bytes for bytes {start}-{end} of {where}")
    return body
