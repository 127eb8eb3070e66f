"""The sampling a request gets for the fields it leaves unset.

A request's own fields win. For the others, in order:

1. ``--default-temperature``, ``--default-top-p``, ``--default-top-k``,
   ``--default-min-p``, ``--default-repetition-penalty`` (flags, when given);
2. the model's ``generation_config.json`` beside its weights (an HF directory,
   or beside a ``.gguf`` file), as vLLM reads it: ``temperature``, ``top_p``,
   ``top_k``, ``min_p``, ``repetition_penalty``;
3. a ``.gguf`` file without one: :data:`GGUF_DEFAULTS`, SmolLM2's recommended
   sampling (temperature 0.2, top_p 0.9, its model card's example), because
   OpenAI's temperature 1.0 makes a 135M model ramble;
4. otherwise OpenAI's defaults (temperature 1.0, top_p 1.0, nothing else).

The gateway prints what it applies, and where it comes from, at start-up.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FIELDS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")


@dataclass(frozen=True, slots=True)
class SamplingDefaults:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: off
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    source: str = "OpenAI's defaults"

    def describe(self) -> str:
        values = ", ".join(f"{name} {getattr(self, name)}" for name in FIELDS)
        return f"sampling defaults: {values} ({self.source})"


OPENAI_DEFAULTS = SamplingDefaults()
GGUF_DEFAULTS = SamplingDefaults(temperature=0.2, top_p=0.9, source="server defaults for a GGUF model")


def _generation_config(directory: Path) -> dict[str, Any]:
    try:
        config = json.loads((directory / "generation_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {k: config[k] for k in FIELDS if isinstance(config.get(k), (int, float))}


def sampling_defaults(model_path: Path, overrides: dict[str, float | None]) -> SamplingDefaults:
    """The defaults for the model at ``model_path``; ``overrides``: the flags given (None: not given)."""
    directory = model_path if model_path.is_dir() else model_path.parent
    config = _generation_config(directory)
    if config:
        base = dataclasses.replace(OPENAI_DEFAULTS, **config, source=f"{directory / 'generation_config.json'}")
    elif model_path.suffix == ".gguf":
        base = GGUF_DEFAULTS
    else:
        base = OPENAI_DEFAULTS
    given = {k: v for k, v in overrides.items() if v is not None}
    if not given:
        return base
    if "top_k" in given:
        given["top_k"] = int(given["top_k"])
    return dataclasses.replace(base, **given, source=f"{base.source}; flags: {', '.join(sorted(given))}")
