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

#: packages ojai downloads and checks before handing them to apt (Lemonade's .deb)
DEB_CACHE = "/var/cache/ojai/debs"

#: measured route settings written by ``ojai tune``, laid over the catalog by ``ojai setup``
TUNED_FILE = "/etc/ojai/tuned.toml"

GRUB_DEFAULT = "/etc/default/grub"
#: drop-ins grub-mkconfig sources after GRUB_DEFAULT, in glob order (a later one wins)
GRUB_DROPIN_DIR = "/etc/default/grub.d"
#: ojai's own drop-in, used when another drop-in decides the kernel command line
OJAI_GRUB_DROPIN = f"{GRUB_DROPIN_DIR}/99-ojai.cfg"
BOOT_ID = "/proc/sys/kernel/random/boot_id"
#: where a capture keeps the environment of the machine it was taken on
ENVIRON_CAPTURE = "/.ojai/environ"

#: llama-server's own default, the MTP route's port (the plain route takes the next one)
LLAMA_PORT = 8080
#: FastFlowLM's ``flm serve`` default
FLM_PORT = 52625
DEFAULT_HOST = "127.0.0.1"

#: the unprivileged system user the services ojai writes run as (created by the plan)
SERVICE_USER = "ojai"
#: where FastFlowLM keeps its models when run as :data:`SERVICE_USER` (``FLM_MODEL_PATH``)
FLM_STATE_DIR = "/var/lib/ojai-flm"
#: root-only environment files of the units
SECRETS_DIR = "/etc/ojai"
#: llama-server reads its ``--api-key`` from this variable (``llama-server --help``, b11434)
API_KEY_VARIABLE = "LLAMA_API_KEY"

# -- modes of what ojai creates, whatever the umask -----------------------------------------------
#: folders ojai creates (root-owned when applied as root)
DIR_MODE = 0o755
#: programs and launch scripts
EXEC_MODE = 0o755
#: other files: install records, models, units
FILE_MODE = 0o644
#: the journal and backups folders, and the files in them; saved plans; captures
PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600

# -- limits ----------------------------------------------------------------------------------------
#: an unpacked nightly zip may hold at most this many times the zip's size (from the release API)
ARCHIVE_EXPANSION = 20
#: and never more than this, whatever its size
ARCHIVE_MAX_BYTES = 16 * GIB

#: what ojai calls itself in HTTP requests
USER_AGENT = "ojai-setup"


#: the modules that can own the GPU memory limit (``<module>.pages_limit``), in the order their
#: sysfs names are probed when several are loaded: ``amdttm`` (amdgpu-dkms), ``amd_ttm``
#: (``amd-ttm`` in modprobe.d: the newer variant ROCm/rocm-systems#5290 taught amd-smi),
#: then the in-tree ``ttm``
TTM_MODULES = ("amdttm", "amd_ttm", "ttm")
