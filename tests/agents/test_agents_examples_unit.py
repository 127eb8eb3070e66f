"""The example agents' tools, without a model."""

from __future__ import annotations

import json

import anyio
import pytest

from agentgate.agents import ToolCall
from agentgate.agents.examples import calculator, file_search


def test_calculator_tools():
    assert calculator.evaluate("12 * 7 + 3") == 87 and calculator.evaluate("-(2 ** 3) / 4") == -2.0
    assert calculator.add(2, 3) == 5 and calculator.multiply(4, 2.5) == 10.0
    for bad in ("__import__('os')", "2 ** 1000", "a + 1"):
        with pytest.raises(ValueError):
            calculator.evaluate(bad)
    result = anyio.run(calculator.evaluate.invoke, ToolCall("c", "evaluate", '{"expression": "open(1)"}'))
    assert not result.ok and "not arithmetic" in result.error
    names = [t.schema["function"]["name"] for t in calculator.TOOLS]
    assert names == ["add", "multiply", "evaluate"]


def test_file_search_tools_stay_inside_their_root(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "agent.py").write_text("class Agent:\n    pass\n")
    (tmp_path / "notes.txt").write_text("the Agent loop\n")
    (tmp_path / "blob.bin").write_bytes(b"\xff\xfe\x00Agent")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "secret.py").write_text("class Agent: ...\n")
    tools = file_search.FileTools(tmp_path)
    assert tools.list_files("*.py") == ["pkg/agent.py"]
    assert tools.search_text("class agent") == ["pkg/agent.py:1: class Agent:"]
    assert tools.search_text("agent", "*.txt") == ["notes.txt:1: the Agent loop"]
    assert tools.read_file("pkg/agent.py", 2, 1) == "2:     pass"
    with pytest.raises(ValueError, match="outside"):
        tools.read_file("../../etc/passwd")
    read = anyio.run(tools.tools()[2].invoke, ToolCall("r", "read_file", json.dumps({"path": "/etc/passwd"})))
    assert not read.ok and "outside" in read.error
