"""Gateway settings: one frozen dataclass, filled from CLI flags or ``AGENTGATE_*`` variables.

Every field is a flag of ``agentgate serve`` (``--field-name``, or the name in
its ``flag`` metadata) and an environment variable (``AGENTGATE_FIELD_NAME``,
the flag's name in upper case). Tuple fields are repeatable flags; in the
environment they are comma-separated. A flag given on the command line wins
over the environment.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.config import EngineConfig

ENV_PREFIX = "AGENTGATE_"
RUNNERS = ("overlap", "sync", "null")


def _opt(help: str, *, flag: str | None = None, secret: bool = False, engine: bool = False, **kw: Any) -> Any:
    """A field with its CLI help; ``flag`` overrides the derived flag name."""
    metadata = {"help": help, "flag": flag, "engine": engine}
    return field(metadata=metadata, repr=not secret, **kw)


@dataclass(frozen=True)
class Settings:
    # -- the model and the engine -------------------------------------------------
    model: str | None = _opt(
        "model: a .gguf file or an HF directory (default: the default model)", default=None, engine=True
    )
    served_model_name: tuple[str, ...] = _opt(
        "name(s) the model is served under (default: derived from --model); the first is reported", default=()
    )
    runner: str = _opt(
        "engine runner: overlap, sync or null (no model, for benchmarks)", default="overlap", engine=True
    )
    max_num_seqs: int = _opt("most sequences the engine runs at once", default=64, engine=True)
    max_model_len: int | None = _opt("context length (default: the model's, capped on CPU)", default=None, engine=True)
    max_num_batched_tokens: int | None = _opt(
        "tokens per engine step (default: the engine's)", default=None, engine=True
    )
    num_kv_blocks: int | None = _opt("exact number of KV cache blocks (default: measured)", default=None, engine=True)
    device: str = _opt("engine device: auto, cpu, cuda, cuda:N", default="auto", engine=True)
    dtype: str = _opt("engine dtype: auto, float32, float16, bfloat16", default="auto", engine=True)
    null_step_seconds: float = _opt("null runner only: seconds each step takes", default=0.0, engine=True)
    # -- HTTP -----------------------------------------------------------------------
    host: str = _opt("address to listen on", default="127.0.0.1")
    port: int = _opt("port to listen on", default=8000)
    max_waiting: int = _opt(
        "most requests waiting for their first token; more get 429 with Retry-After (0: unbounded)", default=1024
    )
    max_body_bytes: int = _opt("largest request body accepted; larger ones get 413", default=8 * 1024 * 1024)
    # -- auth and CORS ----------------------------------------------------------
    api_keys: tuple[str, ...] = _opt(
        "API key for /v1/*, /tokenize, /detokenize (repeatable; none: open)", flag="api-key", secret=True, default=()
    )
    admin_key: str | None = _opt(
        "key for /pause, /resume, /is_paused, /abort_requests, DELETE /v1/requests/{id}; "
        "required for them whenever any key is set",
        secret=True,
        default=None,
    )
    allowed_origins: tuple[str, ...] = _opt("CORS origins allowed (repeatable; none: no CORS headers)", default=())
    allowed_methods: tuple[str, ...] = _opt("CORS methods allowed (repeatable)", default=("*",))
    allowed_headers: tuple[str, ...] = _opt("CORS request headers allowed (repeatable)", default=("*",))
    allow_credentials: bool = _opt("CORS: allow credentials", default=False)
    # -- operations -----------------------------------------------------------------
    drain_seconds: float = _opt(
        "on SIGTERM/SIGINT, seconds requests in flight get to finish before they are aborted", default=5.0
    )
    log_level: str = _opt("log level: debug, info, warning, error", default="info")
    access_log: bool = _opt("log every request (uvicorn's access log)", default=False)
    startup_timeout: float = _opt("seconds to wait for the engine to load its model", default=600.0)

    def __post_init__(self) -> None:
        if self.runner not in RUNNERS:
            raise ValueError(f"runner must be one of {RUNNERS}, got {self.runner!r}")
        for name in ("max_num_seqs", "max_body_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive")
        if self.max_waiting < 0:
            raise ValueError("max_waiting must be 0 (unbounded) or positive")
        if not 0 <= self.port < 65536:
            raise ValueError(f"port must be in [0, 65535], got {self.port}")

    @property
    def any_key(self) -> bool:
        return bool(self.api_keys) or self.admin_key is not None

    def engine_config(self) -> EngineConfig:
        """The EngineConfig these settings describe (the engine's own defaults where unset)."""
        from engine.config import EngineConfig

        options = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.metadata.get("engine") and getattr(self, f.name) is not None
        }
        return EngineConfig(**options)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Settings from ``AGENTGATE_*`` variables, then ``overrides``."""
        environ = os.environ if environ is None else environ
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            raw = environ.get(env_name(f))
            if raw is not None:
                values[f.name] = parse_value(f, raw)
        values.update(overrides)
        return cls(**values)


def flag_name(f: dataclasses.Field) -> str:
    return f.metadata.get("flag") or f.name.replace("_", "-")


def env_name(f: dataclasses.Field) -> str:
    return ENV_PREFIX + flag_name(f).replace("-", "_").upper()


def field_kind(f: dataclasses.Field) -> str:
    """'tuple', 'bool', 'int', 'float' or 'str' (the annotation, read as a string)."""
    annotation = str(f.type)
    for kind in ("tuple", "bool", "int", "float"):
        if annotation.startswith(kind):
            return kind
    return "str"


def optional(f: dataclasses.Field) -> bool:
    return "None" in str(f.type)


def parse_value(f: dataclasses.Field, raw: str) -> Any:
    """One setting from its text (an environment variable or a flag)."""
    kind = field_kind(f)
    if kind == "tuple":
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    if optional(f) and raw.strip().lower() in ("", "none"):
        return None
    if kind == "bool":
        value = raw.strip().lower()
        if value in ("1", "true", "yes", "on"):
            return True
        if value in ("0", "false", "no", "off", ""):
            return False
        raise ValueError(f"{env_name(f)}: expected a boolean, got {raw!r}")
    try:
        return {"int": int, "float": float, "str": str}[kind](raw)
    except ValueError:
        raise ValueError(f"{flag_name(f)}: expected {kind}, got {raw!r}") from None
