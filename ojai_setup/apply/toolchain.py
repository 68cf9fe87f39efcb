"""The HIP toolchain check, where the build executor asks it (it lives in
:mod:`ojai_setup.facts.toolchain`, since planning asks it too: a build that cannot succeed is
blocked in the dry run, before anything changes)."""

from ojai_setup.facts.toolchain import (  # noqa: F401 - re-exported
    PIECES,
    HipToolchain,
    ToolchainError,
    check_hip_toolchain,
    install_hint,
    origin,
    parse_supported_cpus,
    split_targets,
    vulkan_toolchain_error,
)
