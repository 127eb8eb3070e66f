"""Fixtures for the tool tests: the default model's tokenizer (its ChatML template has no tool support)."""

import pytest

from agentgate.engine.errors import ModelLoadError
from agentgate.engine.model_path import default_model_path
from agentgate.engine.tokenizer import Tokenizer, load_tokenizer


@pytest.fixture(scope="session")
def smollm_tokenizer() -> Tokenizer:
    try:
        return load_tokenizer(default_model_path())
    except ModelLoadError as e:
        pytest.skip(str(e))
