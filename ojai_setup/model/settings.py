"""What the user asked ``ojai setup`` for: options of the command line, as one model."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ojai_setup.core.paths import DEFAULT_MODELS_DIR


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    profile: str | None = None
    gpu_memory_gib: int | None = Field(default=None, ge=1)
    llamacpp: Literal["nightly", "source", "none"] = "nightly"
    llamacpp_tag: str | None = None
    llamacpp_src: str = "https://github.com/ggml-org/llama.cpp"
    llamacpp_ref: str | None = None
    llamacpp_backend: Literal["hip", "cpu"] | None = None  # None: hip where ROCm is, else cpu
    model: str | None = None
    models_dir: str = DEFAULT_MODELS_DIR
    user_catalog: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    systemd: bool = False
    npu: bool = True
