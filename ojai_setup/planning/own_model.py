"""``--model`` as a Hugging Face file or repository (:mod:`ojai_setup.domain.own_model`): its
files and commit asked of the Hub, its GGUF header read with range requests, its architecture
checked against the build that will serve it, all while planning and before any download."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from ojai_setup.core.root import Root

if TYPE_CHECKING:
    from ojai_setup.domain.catalog import Footprint, Route
    from ojai_setup.domain.own_model import HubFile, ModelRef
    from ojai_setup.formats.gguf import ModelInfo
    from ojai_setup.planning.context import LlamaBinary

#: ``(repo, revision) -> (commit, files)`` and ``(repo, file, commit, size) -> header``
Listing = Callable[[str, "str | None"], "tuple[str, list[HubFile]]"]
Header = Callable[[str, str, str, int], "ModelInfo"]


def hub_listing(repo: str, revision: str | None):
    from ojai_setup.facts.hub import hub_listing as listing

    return listing(repo, revision)


def gguf_header(repo: str, filename: str, commit: str, size: int):
    from ojai_setup.facts.hub import read_gguf_header

    return read_gguf_header(repo, filename, commit, size)


def resolve_own_model(root: Root, ref: ModelRef, llama: LlamaBinary, *,
                      listing: Listing = hub_listing,
                      header: Header = gguf_header) -> tuple[Route, Footprint]:
    """The route ``ref`` names, and its footprint from the Hub's sizes and the header's KV
    layout. Raises :class:`~ojai_setup.core.errors.OjaiError` (the Hub unreachable or refusing,
    no such file, not GGUF, an architecture the build does not load) in plain words."""
    from ojai_setup.domain.deployment import footprint_from_files
    from ojai_setup.domain.own_model import own_route, pick_files
    from ojai_setup.facts.probe import architecture_known

    commit, files = listing(ref.repo, ref.revision)
    chosen = pick_files(ref, files)
    info = header(ref.repo, chosen[0].path, commit, chosen[0].size)
    version = llama.dialect.version if llama.dialect is not None else None
    build = version.build if version is not None and llama.installed else None
    known, source = architecture_known(root, llama.path if llama.installed else None, build,
                                       info.architecture)
    label = (f"the llama-server at {llama.path} ({version.label() if version else 'unknown build'}"
             f"{', by ' + source if source else ''})" if llama.installed
             else f"llama.cpp build 11434, the build ojai plans against ({source})")
    route = own_route(ref, commit, chosen, info, known, label)
    footprint = footprint_from_files(route, sum(f.size for f in chosen), info, None)
    return route, footprint.model_copy(update={"source": "the Hub's sizes and GGUF header"})


def _build_label(root: Root, llama: LlamaBinary, arch: str) -> tuple[bool | None, str]:
    from ojai_setup.facts.probe import architecture_known

    version = llama.dialect.version if llama.dialect is not None else None
    build = version.build if version is not None and llama.installed else None
    known, source = architecture_known(root, llama.path if llama.installed else None, build, arch)
    label = (f"the llama-server at {llama.path} ({version.label() if version else 'unknown build'}"
             f"{', by ' + source if source else ''})" if llama.installed
             else f"llama.cpp build 11434, the build ojai plans against ({source})")
    return known, label


def resolve_local_model(root: Root, text: str, path: str,
                        llama: LlamaBinary) -> tuple[Route, Footprint]:
    """The route of the GGUF file at the machine ``path`` (``--model`` ``text``), used where it
    is: its header read from the file (nothing cached beside it), a split model's shards found
    in its folder. Refused in plain words as Hub files are."""
    from pathlib import PurePosixPath

    from ojai_setup.domain.deployment import footprint_from_files
    from ojai_setup.domain.own_model import ModelRef, OwnModelError, local_files, own_route, route_name
    from ojai_setup.facts.gguf import read_model_info

    machine = PurePosixPath(path)
    real = root.resolve(str(machine))
    if not real.is_file():
        raise OwnModelError(f"--model {text}: no file {machine} on the machine")
    listing = [(p.name, p.stat().st_size) for p in real.parent.iterdir() if p.is_file()]
    try:
        chosen = local_files(machine.name, listing)
    except OwnModelError as exc:
        raise OwnModelError(f"--model {text}: {exc}") from None
    info = read_model_info(real.parent / chosen[0].path)
    known, label = _build_label(root, llama, info.architecture)
    ref = ModelRef(text=text, repo=f"local/{route_name(chosen)}", revision=None, variant=None)
    route = own_route(ref, "local", chosen, info, known, label, local_dir=str(machine.parent))
    footprint = footprint_from_files(route, sum(f.size for f in chosen), info, None)
    return route, footprint.model_copy(update={"source": "the file's size and GGUF header"})
