"""FastFlowLM's view of the NPU: ``flm validate`` as captured or run through the root."""

from __future__ import annotations

from ojai_setup.core.root import Root
from ojai_setup.formats.flm import FlmStatus, parse_validate


def read_validate(root: Root) -> FlmStatus | None:
    """Run ``flm validate --json``, or plain ``flm validate`` when that prints no JSON (older
    FastFlowLM, or a capture of the plain command). ``None`` when ``flm`` is not installed."""
    result = root.run(["flm", "validate", "--json"])
    if result.found and result.stdout.lstrip().startswith("{"):
        return parse_validate(result.stdout, result.exit_code)
    plain = root.run(["flm", "validate"])
    if not plain.found:
        return None
    return parse_validate(plain.stdout + "\n" + plain.stderr, plain.exit_code)
