"""A model of the owner's own choosing: ``--model`` as a Hugging Face file or repository, made
into a route from its GGUF header.

The forms ``--model`` takes beside a catalog name:

- ``hf:ORG/REPO:FILE.gguf``: that file of the repository (a split model: its first shard,
  ``...-00001-of-0000N.gguf``, or any shard; the others come with it);
- ``ORG/REPO:QUANT`` (or ``hf:ORG/REPO:QUANT``): the file of that quantization, found as
  llama.cpp's ``-hf ORG/REPO:QUANT`` finds it (build 11434, ``common/download.cpp``
  ``find_best_model``: the first model file whose path contains ``QUANT`` followed by ``.`` or
  ``-``, case ignored, ``mmproj``/``imatrix``/``mtp-``/``eagle3-``/``dflash-``/``dspark-``
  files left out, a split model by its first shard), which is also the file Lemonade's
  checkpoint ``ORG/REPO:QUANT`` names (``identify_gguf_models``: a file ending in
  ``QUANT.gguf``, or the shards in the folder ``QUANT/``); where several models match, ojai
  asks for the file rather than take the first;
- ``ORG/REPO`` alone: llama.cpp's default, ``Q4_K_M``, else ``Q8_0``;
- ``@REVISION`` after the repository (``ORG/REPO@v1:Q4_K_M``) asks for a branch, tag or commit;
- a GGUF file on the machine (an absolute path, or a relative one on the machine ojai runs on;
  a split model's first shard or any shard): used where it is, nothing downloaded.

The route is made from what the Hub reports (the commit the revision resolves to, each file's
size and LFS sha256, all pinned in the plan as for catalog files) and from the file's GGUF
header, read before anything is downloaded: the architecture, layers and KV cache layout (as
:func:`~ojai_setup.domain.deployment.kv_layout` reads them), MTP heads inside the file
(``nextn_predict_layers``: the route drafts with them, as the catalog's in-file routes do) or
none (a plain route, offered n-gram drafting).
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import NamedTuple

from ojai_setup.core.errors import InputError
from ojai_setup.domain.catalog import Route
from ojai_setup.formats.gguf import ASSISTANT_ARCH, ModelInfo

#: llama.cpp's quantizations tried, in order, when the repository is given alone
DEFAULT_QUANTS = ("Q4_K_M", "Q8_0")
#: file names llama.cpp does not take for a model (``gguf_filename_is_model``)
_NOT_MODELS = ("mmproj", "imatrix", "mtp-", "eagle3-", "dflash-", "dspark-")
_REPO = r"[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*"
_REF_RE = re.compile(rf"^(?P<repo>{_REPO})(?:@(?P<revision>[^:@\s]+))?(?::(?P<variant>[^\s]+))?$")
_SPLIT_RE = re.compile(r"^(?P<prefix>.+)-(?P<index>[0-9]{5})-of-(?P<count>[0-9]{5})\.gguf$", re.I)
#: the context a route is planned at when the model allows more
DEFAULT_CONTEXT = 32768


class OwnModelError(InputError):
    """``--model`` names a Hub file or repository ojai cannot make a route of; the text says why."""


class ModelRef(NamedTuple):
    """What ``--model`` names: a repository's file or quantization."""

    text: str
    repo: str
    revision: str | None
    #: a file name (ends in ``.gguf``), a quantization, or None (llama.cpp's default)
    variant: str | None


class HubFile(NamedTuple):
    """One file of a repository as the Hub lists it."""

    path: str
    size: int
    #: the LFS sha256; None for a file not stored with LFS
    sha256: str | None


def local_model_path(text: str, relative_to: PurePosixPath | None = None) -> str | None:
    """The machine path ``text`` names when it is a GGUF file rather than a catalog name or a
    Hub reference: absolute, or (``relative_to`` given: ojai runs on the machine itself)
    ``./``, ``../``, ``~/`` or a relative name ending in ``.gguf``; None otherwise."""
    if text.startswith("hf:") or ":" in text:
        return None
    if text.startswith("/"):
        return str(PurePosixPath(text))
    if not (text.startswith(("./", "../", "~/")) or text.lower().endswith(".gguf")):
        return None
    if relative_to is None:
        raise OwnModelError(f"--model {text}: give the GGUF file's absolute path on the machine "
                            "(a relative one is ambiguous under --root)")
    import os.path

    if text.startswith("~/"):
        return os.path.abspath(os.path.expanduser(text))
    return os.path.abspath(os.path.join(str(relative_to), text))


def local_files(name: str, folder_listing: list[tuple[str, int]]) -> tuple[HubFile, ...]:
    """The files of the local model ``name`` (a file name in its folder, whose files and sizes
    are ``folder_listing``): a split model's shards in order, or the file itself."""
    files = [HubFile(n, size, None) for n, size in folder_listing]
    found = next((f for f in files if f.path == name), None)
    if found is None:
        raise OwnModelError(f"{name}: no such file")
    return _shards(files, found)


def parse_model_ref(text: str) -> ModelRef | None:
    """The Hub reference ``text`` is, or None when it is not one (a catalog name)."""
    body = text[3:] if text.startswith("hf:") else text
    match = _REF_RE.match(body)
    if match is None:
        if text.startswith("hf:"):
            raise OwnModelError(f"--model {text}: not a Hub file; write hf:ORG/REPO:FILE.gguf or "
                                "ORG/REPO:QUANT (e.g. unsloth/gpt-oss-20b-GGUF:Q4_K_M)")
        return None
    return ModelRef(text=text, repo=match["repo"], revision=match["revision"],
                    variant=match["variant"] or None)


def split_of(path: str) -> tuple[str, int, int] | None:
    """``(prefix, index, count)`` of a split GGUF's shard (``X-00001-of-00003.gguf``)."""
    m = _SPLIT_RE.match(path)
    return (m["prefix"], int(m["index"]), int(m["count"])) if m else None


def _is_model(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    return name.endswith(".gguf") and not any(part in name for part in _NOT_MODELS)


def _shards(files: list[HubFile], first: HubFile) -> tuple[HubFile, ...]:
    """The files of the model ``first`` is part of: all its shards in order, or itself."""
    split = split_of(first.path)
    if split is None:
        return (first,)
    prefix, _, count = split
    shards = {s[1]: f for f in files if (s := split_of(f.path)) and s[0] == prefix and s[2] == count}
    missing = [i for i in range(1, count + 1) if i not in shards]
    if missing:
        raise OwnModelError(f"{first.path}: a model split in {count} files, but the repository "
                            f"has no shard {missing[0]:05d}")
    return tuple(shards[i] for i in range(1, count + 1))


def pick_files(ref: ModelRef, files: list[HubFile]) -> tuple[HubFile, ...]:
    """The files of the model ``ref`` names among the repository's ``files`` (a split model's
    shards in order), or :class:`OwnModelError` saying what the repository has."""
    files = sorted(files, key=lambda f: f.path)
    models = [f for f in files if _is_model(f.path)]
    listed = ", ".join(f.path for f in models[:8]) + (" ..." if len(models) > 8 else "")
    offer = f"; its model files: {listed}" if models else "; it has no GGUF model files"
    where = f"{ref.repo}@{ref.revision}" if ref.revision else ref.repo
    if ref.variant and ref.variant.lower().endswith(".gguf"):
        found = next((f for f in files if f.path == ref.variant), None)
        if found is None:
            raise OwnModelError(f"--model {ref.text}: {where} has no file {ref.variant}{offer}")
        return _shards(files, found)
    for quant in ((ref.variant,) if ref.variant else DEFAULT_QUANTS):
        pattern = re.compile(re.escape(quant) + r"[.-]", re.I)
        firsts = [f for f in models if pattern.search(f.path)
                  and ((s := split_of(f.path)) is None or s[1] == 1)]
        if len(firsts) > 1:
            raise OwnModelError(f"--model {ref.text}: {len(firsts)} models of {where} match "
                                f"{quant} ({', '.join(f.path for f in firsts)}); name one with "
                                f"hf:{ref.repo}:FILE.gguf")
        if firsts:
            return _shards(files, firsts[0])
    if ref.variant:
        raise OwnModelError(f"--model {ref.text}: no model file of {where} matches {ref.variant}"
                            + offer)
    firsts = [f for f in models if (s := split_of(f.path)) is None or s[1] == 1]
    if len(firsts) == 1:
        return _shards(files, firsts[0])
    raise OwnModelError(f"--model {ref.text}: {where} has no Q4_K_M or Q8_0 model"
                        + (f" and {len(firsts)} others: name one with {ref.repo}:QUANT or "
                           f"hf:{ref.repo}:FILE.gguf" if firsts else "") + offer)


def route_name(files: tuple[HubFile, ...]) -> str:
    """The route's name, from its (first) file: lower case, the split suffix and ``.gguf``
    dropped (``gpt-oss-20b-Q4_K_M.gguf`` -> ``gpt-oss-20b-q4_k_m``)."""
    name = files[0].path.rsplit("/", 1)[-1]
    split = split_of(name)
    stem = split[0] if split else name[: -len(".gguf")]
    slug = re.sub(r"[^a-z0-9._-]+", "-", stem.lower()).strip("-._")
    return slug or "model"


def own_route(ref: ModelRef, commit: str, files: tuple[HubFile, ...], info: ModelInfo,
              arch_known: bool | None, build: str, *,
              overhead_bytes: int | None = None, local_dir: str | None = None) -> Route:
    """The route of the Hub model ``files`` (at ``commit``) whose first file's header is
    ``info``: refused in plain words when the llama.cpp build that will serve it (``build``, in
    words) does not load the header's architecture (``arch_known`` False; None: not known),
    when it is an MTP head rather than a model, or when it does not say enough to size the KV
    cache."""
    from ojai_setup.domain.deployment import kv_layout

    first = files[0].path
    arch = info.architecture
    if arch in (ASSISTANT_ARCH, ASSISTANT_ARCH.replace("-", "_")):
        raise OwnModelError(f"--model {ref.text}: {first} is an MTP draft head ({arch}), not a "
                            "model that serves on its own; name the main model's file")
    if arch_known is False:
        raise OwnModelError(f"--model {ref.text}: {first} is a {arch!r} model, an architecture "
                            f"{build} does not know, so it could not load it; use a "
                            "newer llama.cpp build (--llamacpp-tag, or --llamacpp source) or "
                            "another model")
    kv = kv_layout(info)
    if kv is None:
        raise OwnModelError(f"--model {ref.text}: the header of {first} ({arch}) does not say "
                            "enough to size its KV cache (layers, KV heads, head sizes)")
    unpinned = [f.path for f in files if f.sha256 is None]
    if unpinned and local_dir is None:
        raise OwnModelError(f"--model {ref.text}: {unpinned[0]} is not stored with LFS, so the "
                            "Hub gives no sha256 to check the download against")
    max_context = info.context_length or DEFAULT_CONTEXT
    mtp = "in_file" if info.nextn_predict_layers > 0 else None
    variant = ref.variant if ref.variant and not ref.variant.lower().endswith(".gguf") else first
    where = (f"{local_dir}/{first} ({arch}, a local file)" if local_dir
             else f"{ref.repo}:{first} ({arch}, from the Hub)")
    data = dict(
        name=route_name(files), title=where, repo=ref.repo, revision=commit,
        main=tuple({"file": f.path, "size": f.size, "sha256": f.sha256} for f in files),
        mtp=mtp, kv=kv, local_dir=local_dir,
        # Lemonade takes an existing file's path as its checkpoint
        lemonade_checkpoint=f"{local_dir}/{first}" if local_dir else f"{ref.repo}:{variant}",
        context_size=min(DEFAULT_CONTEXT, max_context), max_context=max_context,
        note=(f"{info.block_count} blocks"
              + (f" ({info.nextn_predict_layers} MTP)" if info.nextn_predict_layers else "")
              + ("; read from its GGUF header" if local_dir
                 else f"; read from the GGUF header at {commit[:12]}")))
    if overhead_bytes is not None:
        data["overhead_bytes"] = overhead_bytes
    return Route.model_validate(data)
