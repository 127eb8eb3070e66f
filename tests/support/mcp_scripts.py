"""The scripted model of the hosted-MCP tests (``tests/gateway/test_responses_mcp.py``,
``tests/gateway/test_anthropic_mcp.py``): each round of a reply is an engine request
``<request id>`` then ``<request id>-r1``, ``-r2``... (filed under the API key, as every engine
request id is: ``<key>.<request id>``, ``gateway.context.filed_id``), and the script replies by
the client's part of those names (the request id's first word picks the script: a call of
``add`` first, then the answer), so every test knows what the model said; :func:`mcp_gateway`
is the scripted gateway that allows the MCP server of ``tests.support.mcp_servers``.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from typing import Any

from agentgate.engine.model_files.model_path import default_model_path
from agentgate.engine.sampling_params import SamplingParams
from agentgate.engine.text.tokenizer import load_tokenizer
from agentgate.gateway.config.settings import Settings
from agentgate.gateway.context import client_id
from tests.support.mcp_servers import McpServers
from tests.support.scripted_engine import Script, ScriptedGateway, scripted_gateway

EOS = 2


def _call(name: str, **arguments: Any) -> str:
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


# request id prefix -> the model's reply in each round (the last one repeats)
SCRIPTS = {
    "add": [_call("add", a=2, b=3), "The sum is 5."],
    "two": [_call("add", a=2, b=3), _call("multiply", a=5, b=4), "It is 20."],
    "fail": [_call("explode", reason="test"), "It failed."],
    "slow": [_call("sleep", seconds=10), "Too slow."],  # past the 4 s call timeout
    "loop": [_call("add", a=1, b=1)],
    "client": [_call("get_weather", city="Paris")],
    "both": ["Checking.\n" + _call("get_weather", city="Paris")],
    "text": ["Hello."],
    "huge": [_call("big", size=6000), "Never said."],
}


# What a script's model writes when its request's grammar lets no call open (tool_choice none, as
# the round after --max-tool-rounds asks): a model that would call answers instead.
FORBIDDEN_CALL_ANSWER = "I will answer without calling."


def _calls_forbidden(params: SamplingParams) -> bool:
    tag = params.structured.structural_tag if params.structured is not None else None
    return tag is not None and json.loads(tag)["format"].get("type") == "any_text"


def script(tokenizer) -> Script:
    encoded = {k: [tokenizer.encode(t, add_special_tokens=False) + [EOS] for t in v] for k, v in SCRIPTS.items()}
    answer = tokenizer.encode(FORBIDDEN_CALL_ANSWER, add_special_tokens=False) + [EOS]

    def reply(engine_id: str, params: SamplingParams) -> list[int]:
        request_id = client_id(engine_id)  # the engine's id is the key's: <key digest>.<X-Request-Id>
        rounds = encoded.get(request_id.split("-")[0], encoded["add"])  # a WebSocket turn's id is a uuid
        later = re.search(r"-r(\d+)$", request_id)
        n = int(later.group(1)) if later else 0
        said = rounds[min(n, len(rounds) - 1)]
        return answer if _calls_forbidden(params) and "<tool_call>" in tokenizer.decode(said) else said

    return reply


@contextlib.contextmanager
def mcp_gateway(servers: McpServers) -> Iterator[ScriptedGateway]:
    """The scripted gateway allowing ``calc`` (streamable HTTP) and the SSE server's origin, with
    a 4 s call timeout (a failing call answered after more than 1 s under a loaded suite's two workers
    read as a timeout) and 3 tool rounds, serving the model as ``m``."""
    sse_origin = servers.sse_url.rsplit("/", 1)[0]
    settings = Settings(
        mcp_servers=(f"calc={servers.http_url}",),
        mcp_allow_urls=(f"{sse_origin}/*",),
        mcp_call_timeout=4.0,
        max_tool_rounds=3,
        served_model_name=("m",),
    )
    with scripted_gateway(settings, script(load_tokenizer(default_model_path()))) as gw:
        yield gw
