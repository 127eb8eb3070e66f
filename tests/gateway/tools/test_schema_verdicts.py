"""The verdicts of tool schemas checked against their metaschema are kept by the schema's JSON, a
client's text: least recently used first out past a bound in bytes."""

import pytest

from agentgate.engine.byte_lru import ByteLRU
from agentgate.engine.errors import InvalidRequestError
from agentgate.gateway.tools import schema


def test_schema_verdicts_stay_within_their_bound_and_still_judge(monkeypatch):
    bound = 20_000
    monkeypatch.setattr(schema, "_verdicts", ByteLRU(bound))
    for i in range(500):  # more distinct schemas than the bound holds
        properties = {f"field_{i}_{j}": {"type": "string", "description": "d" * (i % 50)} for j in range(3)}
        schema.check_json_schema({"type": "object", "properties": properties}, "tools[0]", param="tools")
    assert schema._verdicts.nbytes <= bound and 0 < len(schema._verdicts) < 500
    with pytest.raises(InvalidRequestError, match="not a valid JSON Schema"):
        schema.check_json_schema({"type": 12}, "tools[0]", param="tools")
    with pytest.raises(InvalidRequestError, match="not a valid JSON Schema"):  # from the kept verdict
        schema.check_json_schema({"type": 12}, "tools[0]", param="tools")
