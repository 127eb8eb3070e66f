"""Reasoning parsers: a reasoning model's thinking block told apart from its answer, in text (the
engine enforces the block on tokens: ``engine.structured.thinking``)."""
