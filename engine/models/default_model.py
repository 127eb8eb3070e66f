"""Where the default model lives.

The lookup itself is in `engine.model_path`, which stays torch-free so front
ends can find the tokenizer without importing the model code; this module
keeps it reachable beside the loaders.
"""

from agentgate.engine.model_path import DEFAULT_MODEL_FILE, INSTALL_COMMAND, default_model_path

__all__ = ["DEFAULT_MODEL_FILE", "INSTALL_COMMAND", "default_model_path"]
