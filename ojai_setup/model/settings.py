"""What the user asked ``ojai setup`` for: options of the command line, as one model."""

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from ojai_setup.core.address import check_host
from ojai_setup.core.paths import DEFAULT_MODELS_DIR, FLM_PORT
from ojai_setup.model.cmake import check_define, check_defines


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    profile: str | None = None
    gpu_memory_gib: int | None = Field(default=None, ge=1)
    #: how the TTM limit reaches the kernel: ``cmdline`` (the boot path's kernel command
    #: line), ``modprobe`` (``options ttm pages_limit=`` in /etc/modprobe.d, as AMD's amd-ttm
    #: writes it), or ``auto``: the command line where the boot path is known, modprobe.d
    #: where a setting there already holds the limit
    ttm_via: Literal["auto", "cmdline", "modprobe"] = "auto"
    llamacpp: Literal["nightly", "source", "distro", "none"] = "nightly"
    llamacpp_tag: str | None = None
    llamacpp_src: str = "https://github.com/ggml-org/llama.cpp"
    llamacpp_ref: str | None = None
    #: the ggml backend: of a source build (None: hip where ROCm is, else cpu), and of a nightly
    #: (vulkan: upstream llama.cpp's Vulkan release; else Lemonade's ROCm build)
    llamacpp_backend: Literal["hip", "cpu", "vulkan"] | None = None
    #: GPU target(s) of a HIP source build (gfx1150, or gfx1150,gfx1151); None: the GPU's own
    gpu_target: str | None = None
    #: extra CMake definitions (KEY=VALUE) of a source build, sorted by key
    #: (:mod:`ojai_setup.model.cmake`); part of the build's identity
    cmake_defines: tuple[Annotated[str, AfterValidator(check_define)], ...] = ()
    #: an upgrade of llama.cpp adopts a new build that passed the gate even when it is slower
    #: than the current one (:mod:`ojai_setup.domain.upgrade`)
    accept_slower: bool = False
    model: str | None = None
    #: the routes served beside ``model`` (``--model A --model B``): one deployment behind one
    #: port, llama-server's router mode and Lemonade each selecting a route by its name
    extra_models: tuple[str, ...] = ()
    #: with several routes: how many are loaded at once (``--models-max``); None: what fits
    models_max: int | None = Field(default=None, ge=1)
    models_dir: str = DEFAULT_MODELS_DIR
    user_catalog: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    systemd: bool = False
    npu: bool = True
    #: Lemonade downloads the route's model into its own Hugging Face cache (hub checkpoints)
    #: instead of loading the files ojai downloaded (local_path)
    lemonade_downloads: bool = False
    #: install Lemonade itself when it is missing: ``distro`` = the distribution's package,
    #: ``release`` = the lemonade-server .deb of a GitHub release (sha256 checked first)
    lemonade: Literal["none", "distro", "release"] = "none"
    #: the ACPI platform profile: performance (set persistently), or none (left as it is)
    power: Literal["none", "performance"] = "none"
    #: with ``lemonade="release"``: the release tag (``v11.7.0``); None = the latest
    lemonade_tag: str | None = None
    #: a file holding the API key llama-server asks for (read at apply, never put in a plan)
    api_key_file: str | None = None
    #: the routes' flash attention and weight loading; None: the catalog route's, else ojai's
    #: defaults (flash attention on; GPU routes: no memory-mapped weights)
    flash_attn: Literal["on", "off", "auto"] | None = None
    load_mode: Literal["auto", "none", "mmap", "mlock", "mmap+mlock", "dio"] | None = None

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        return check_host(value)

    @field_validator("models_dir")
    @classmethod
    def _absolute_models_dir(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("must be an absolute path, a folder of the machine (such as "
                             f"{DEFAULT_MODELS_DIR}); with --root it is found under that root")
        return value

    @field_validator("port")
    @classmethod
    def _plain_route_port(cls, port: int) -> int:
        if port + 1 > 65535:
            raise ValueError(f"{port} leaves no port for the plain route, which listens on the "
                             "next one; use 65534 or lower")
        return port

    @model_validator(mode="after")
    def _no_clash_with_the_npu_route(self) -> "Settings":
        if self.npu and FLM_PORT in (self.port, self.port + 1):
            raise ValueError(f"--port {self.port}: the routes would listen on {self.port} and "
                             f"{self.port + 1}, and {FLM_PORT} is FastFlowLM's port on the NPU "
                             "route; choose another --port (or --no-npu)")
        return self

    @model_validator(mode="after")
    def _tag_needs_a_release_install(self) -> "Settings":
        if self.lemonade_tag is not None and self.lemonade != "release":
            raise ValueError(f"--lemonade-tag {self.lemonade_tag} pins the GitHub release "
                             "--lemonade release installs; add --lemonade release")
        return self

    @model_validator(mode="after")
    def _several_models(self) -> "Settings":
        if self.extra_models and not self.model:
            raise ValueError("--model: the first route is missing")
        names = [self.model, *self.extra_models] if self.model else []
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"--model {twice[0]} is given twice; name each route once")
        if self.models_max is not None and not self.extra_models:
            raise ValueError(f"--models-max {self.models_max} is for several routes served "
                             "together; give --model more than once")
        if self.models_max is not None and self.models_max > len(names):
            raise ValueError(f"--models-max {self.models_max}: only {len(names)} routes are "
                             "asked for")
        return self

    def install_backend(self, rocm: bool) -> str | None:
        """The ggml backend of the llama-server this plan installs (``rocm``: ROCm is on the
        machine), or None when it installs none (``--llamacpp distro`` or ``none``)."""
        if self.llamacpp == "nightly":
            return "vulkan" if self.llamacpp_backend == "vulkan" else "hip"
        if self.llamacpp == "source":
            return self.llamacpp_backend or ("hip" if rocm else "cpu")
        return None

    @property
    def models(self) -> tuple[str, ...]:
        """Every route asked for, in the order given."""
        return (self.model, *self.extra_models) if self.model else ()

    @field_validator("cmake_defines")
    @classmethod
    def _cmake_defines(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        return check_defines(value)

    @model_validator(mode="after")
    def _defines_need_a_source_build(self) -> "Settings":
        if self.cmake_defines and self.llamacpp != "source":
            raise ValueError(f"--cmake-define {self.cmake_defines[0]}: CMake definitions are "
                             "for a source build; add --llamacpp source")
        return self

    @field_validator("gpu_target")
    @classmethod
    def _gpu_targets(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"gfx[0-9a-f]+(,gfx[0-9a-f]+)*", value):
            raise ValueError(f"{value!r} is not a GPU target: give one such as gfx1150, or "
                             "several separated by commas (gfx1150,gfx1151)")
        return value

    # -- back to a command line ------------------------------------------------------------------
    def options(self) -> list[str]:
        """The ``ojai setup`` options that give these settings (defaults left out), in the
        order ``ojai setup --help`` lists them. Parsing them gives back an equal Settings."""
        default = Settings()
        opts: list[str] = []
        for field, flag in OPTIONS:
            value = getattr(self, field)
            if value == getattr(default, field):
                continue
            if isinstance(value, tuple):  # a repeatable option: once for each value
                opts.extend(word for v in value for word in (flag, str(v)))
            else:
                opts.extend([flag] if isinstance(value, bool) else [flag, str(value)])
        return opts

    def command(self, *extra: str, root: str = "/", program: str = "ojai") -> str:
        """The whole ``ojai setup`` command for these settings on ``root``, shell-quoted, with
        ``extra`` options (``--out plan.json``) at the end."""
        import shlex

        words = [program, "setup"] + (["--root", root] if root != "/" else [])
        return shlex.join(words + self.options() + list(extra))


#: each field's ``ojai setup`` option, in the order ``ojai setup --help`` lists them; a boolean
#: field's option stands alone and is given when the value differs from the default
#: (``--systemd`` when true, ``--no-npu`` when false)
OPTIONS: tuple[tuple[str, str], ...] = (
    ("profile", "--profile"),
    ("gpu_memory_gib", "--gpu-memory"),
    ("ttm_via", "--ttm-via"),
    ("llamacpp", "--llamacpp"),
    ("llamacpp_tag", "--llamacpp-tag"),
    ("llamacpp_src", "--llamacpp-src"),
    ("llamacpp_ref", "--llamacpp-ref"),
    ("llamacpp_backend", "--backend"),
    ("gpu_target", "--gpu-target"),
    ("cmake_defines", "--cmake-define"),
    ("accept_slower", "--accept-slower"),
    ("model", "--model"),
    ("extra_models", "--model"),
    ("models_max", "--models-max"),
    ("models_dir", "--models-dir"),
    ("host", "--host"),
    ("api_key_file", "--api-key-file"),
    ("port", "--port"),
    ("flash_attn", "--flash-attn"),
    ("load_mode", "--load-mode"),
    ("systemd", "--systemd"),
    ("npu", "--no-npu"),
    ("user_catalog", "--catalog"),
    ("lemonade", "--lemonade"),
    ("lemonade_tag", "--lemonade-tag"),
    ("lemonade_downloads", "--lemonade-downloads"),
    ("power", "--power"),
)
