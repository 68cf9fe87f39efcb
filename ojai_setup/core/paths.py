"""The one home of ojai's fixed places, ports and units.

Every machine path here is absolute on the machine; :class:`~ojai_setup.core.root.Root`
resolves it under the root a command was given.
"""

from __future__ import annotations

GIB = 1 << 30
#: the kernel's page size on x86-64, the unit of ``ttm.pages_limit``
PAGE = 4096

#: ojai's state: ``state.json``, the journal, backups, benchmark results
STATE_DIR = "/var/lib/ojai"
STATE_FILE = f"{STATE_DIR}/state.json"
DEFAULT_MODELS_DIR = f"{STATE_DIR}/models"

OPT_DIR = "/opt/ojai"
LLAMACPP_DIR = f"{OPT_DIR}/llama.cpp"
LLAMACPP_CURRENT = f"{LLAMACPP_DIR}/current"
LLAMA_SERVER = f"{LLAMACPP_CURRENT}/llama-server"
ROUTES_DIR = f"{OPT_DIR}/routes"
UNITS_DIR = "/etc/systemd/system"

#: measured route settings written by ``ojai tune``, laid over the catalog by ``ojai setup``
TUNED_FILE = "/etc/ojai/tuned.toml"

GRUB_DEFAULT = "/etc/default/grub"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
#: where a capture keeps the environment of the machine it was taken on
ENVIRON_CAPTURE = "/.ojai/environ"

#: llama-server's own default, the MTP route's port (the plain route takes the next one)
LLAMA_PORT = 8080
#: FastFlowLM's ``flm serve`` default
FLM_PORT = 52625
DEFAULT_HOST = "127.0.0.1"

#: what ojai calls itself in HTTP requests
USER_AGENT = "ojai-setup"
