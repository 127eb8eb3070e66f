"""Agents that really call tools (``--format tools``): the model writes the
calls, the agents run them and send the results back. Units here, and one
live run against the real default model with speculation on."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from agentgate.agents.events import ToolCall
from agentgate.loadtests.tool_agents import ToolConversation, run_tool
from agentgate.loadtests.workload import WorkloadConfig
from tests.support.servers import REPO, start_server


def test_tools_answer_from_their_arguments():
    call = ToolCall("c1", "get_weather", json.dumps({"city": "Oslo", "unit": "C"}))
    first = run_tool(call)
    assert first == run_tool(call) and first["city"] == "Oslo" and 0 <= first["temperature"] < 35
    assert run_tool(ToolCall("c2", "send_email", '{"to": "bob", "body": "hi"}')) == {"sent": True, "to": "bob"}
    assert "error" in run_tool(ToolCall("c3", "get_weather", "[1, 2]"))
    assert "error" in run_tool(ToolCall("c4", "launch_rocket", "{}"))


def test_a_conversation_calls_tools_then_asks_for_a_summary():
    conv = ToolConversation(WorkloadConfig(turns=3, reply_tokens=16, format="tools"), seed=1, agent=2, number=0)
    assert conv.request_options()["tool_choice"] == "required" and conv.min_tokens == 1
    call = ToolCall("c1", "get_weather", '{"city": "Lima"}')
    conv.add_reply({"role": "assistant", "content": None, "tool_calls": [call.to_json()]}, [call])
    assert conv.messages[-1] == {"role": "tool", "tool_call_id": "c1", "content": json.dumps(run_tool(call))}
    assert not conv.done
    conv.add_reply({"role": "assistant", "content": None, "tool_calls": [call.to_json()]}, [call])
    options = conv.request_options()
    assert options["tool_choice"] == "none" and options["max_tokens"] == 16 and conv.min_tokens == 16
    conv.add_reply({"role": "assistant", "content": "done"}, [])
    assert conv.done
    # A reply without a call ends a conversation early.
    early = ToolConversation(WorkloadConfig(turns=3, format="tools"), seed=1, agent=2, number=1)
    early.add_reply({"role": "assistant", "content": "no"}, [])
    assert early.done


@pytest.mark.slow
def test_live_agents_call_tools_with_speculation_on(tmp_path):
    server = start_server(tmp_path, "--runner", "sync", "--speculative", "suffix", "--max-model-len", "2048")
    try:
        # Formatted by hand: each flag beside its value, as on a command line.
        command = [sys.executable, "-m", "agentgate.loadtests", "--url", server.url, "--out", str(tmp_path / "out"),
                   "--no-progress", "--no-plots", "--metrics-interval", "0.5", "--format", "tools", "--agents", "2",
                   "--turns", "3", "--duration", "1", "--complete-conversations", "--reply-tokens", "8",
                   "--tool-latency", "0,0.01"]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=240)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        report = json.loads((tmp_path / "out" / "report.json").read_text())
    finally:
        server.stop()
    requests = report["summary"]["requests"]
    assert requests["errors"] == 0 and requests["tool_calls"] >= 2
    prompts = report["summary"]["tokens"]["prompt_mean_by_turn"]
    assert prompts["0"] < prompts["1"]  # the calls and their results went back
    view = report["server_view"]
    assert view["spec_draft_tokens"] > 0 and view["spec_acceptance_rate"] > 0
    assert view["tokens_per_step"] > 1.0
