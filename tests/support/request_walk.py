"""The request ``docs/request-walk.md`` follows, traced, and the tables the doc embeds.

The request: a streaming chat completion with a forced tool call (``tool_choice``
required), the second turn of a session's agent program, returning after the first
turn's call with the tool's result; a gateway in this process over a scripted engine
(``tests.support.scripted_engine``). :func:`traced` runs it once per test process;
``tests/gateway/test_request_walk.py`` judges its walk (``tests.support.walk``) and
``tests/test_docs.py`` compares the doc's tables with :func:`tables`.

``python -m tests.support.request_walk`` prints the walk and its judgement;
``AGENTGATE_WRITE_WALK=1`` with the tests (or ``--write`` here) writes the tables into
the doc.
"""

from __future__ import annotations

import functools
import re
import sys
from typing import Any

from tests.support.walk import CALLBACK, RETURN, ROOT, Hop, Judgement, Verdict, is_edge, judge

DOC = ROOT / "docs" / "request-walk.md"
BEGIN = "<!-- walk: begin (written from the trace: tests/support/request_walk.py) -->"
END = "<!-- walk: end -->"

# The one call the walk makes into a module it had left, and why it is the design: the route
# returns the SSE response with the generation dispatch made, and the server, calling that
# response, reads the generation (its choices' events, its usage, its close). The stream back
# goes through this one object, as the route owns it; everything else it reads is beneath it.
DOCUMENTED = (RETURN, "gateway/http/sse.py", "gateway/generation.py")

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


def walk_returning_turn(client: Any, transport: Any) -> list[Hop]:
    """The hops of the returning turn (see the module docstring); its first turn runs
    unrecorded (it warms the server and leaves the program's last turn to start from).

    ``client``: an ``httpx.Client`` whose ``transport`` (an ``httpx.ASGITransport`` with an
    ``app``) serves a gateway over a scripted engine that replies with :data:`CALL`."""
    from tests.support.walk import Walk

    headers = {"X-Session-Id": "walk"}
    messages = [{"role": "user", "content": "What is the weather in Paris?"}]
    # Room past the budget's last tokens, where it narrows the grammar and a call finished there
    # is said to be cut (issue 35): at 60 this ~25-token call ended there, with finish_reason length.
    body = {"messages": messages, "tools": TOOLS, "tool_choice": "required", "max_tokens": 120}
    first = client.post("/v1/chat/completions", json=body, headers={**headers, "X-Request-Id": "tool-turn-1"})
    assert first.status_code == 200, first.text
    message = first.json()["choices"][0]["message"]
    result = {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": "21 °C and sunny"}
    body = {**body, "messages": [*messages, message, result], "stream": True, "stream_options": {"include_usage": True}}
    walk = Walk(transport.app)
    transport.app = walk
    try:
        second = client.post("/v1/chat/completions", json=body, headers={**headers, "X-Request-Id": "tool-turn-2"})
    finally:
        transport.app = walk.app
    assert second.status_code == 200 and b'"finish_reason":"tool_calls"' in second.content, second.text
    return walk.hops


@functools.cache
def traced() -> tuple[tuple[Hop, ...], Judgement]:
    """The hops of the returning turn and their judgement (run once per process)."""
    from agentgate.engine.model_files.model_path import default_model_path
    from agentgate.engine.text.tokenizer import load_tokenizer
    from agentgate.gateway.config.settings import Settings
    from tests.support.scripted_engine import scripted_gateway

    call = load_tokenizer(default_model_path()).encode(CALL, add_special_tokens=False) + [2]
    with scripted_gateway(Settings(), lambda request_id, _params: call) as gateway:
        hops = walk_returning_turn(gateway.client, gateway.asgi)
    return tuple(hops), judge(hops, is_edge)


def tables(hops: tuple[Hop, ...], judgement: Judgement) -> str:
    """The walk as the doc embeds it: the HTTP edge, the spine in the order the request first
    calls into it (numbered), the side files; each with what first called it and the
    functions the request called in it."""
    functions: dict[str, list[str]] = {}
    for hop in hops:
        names = functions.setdefault(hop.callee, [])
        if hop.function not in names:
            names.append(hop.function)
    spine = [m for m in judgement.walk if not is_edge(m) and m not in judgement.side]
    number = {module: i for i, module in enumerate(spine, 1)}

    def where(module: str) -> str:
        caller = judgement.first_caller[module]
        if caller is None:
            return "the server"
        return f"{number[caller]}" if caller in number else f"`{caller}`"

    def calls(module: str) -> str:
        # By name: the order of first calls inside one module depends on how the stream's tasks
        # interleave (a suite run and a lone run differed), the set of functions does not.
        names = sorted(functions[module], key=_short)
        shown = ", ".join(f"`{_short(n)}`" for n in names[:4])
        return shown + (f" and {len(names) - 4} more" if len(names) > 4 else "")

    lines = ["The HTTP edge (`gateway/http/`), which the server calls and which calls the spine:", ""]
    lines += ["| edge | reached from | calls into it |", "|---|---|---|"]
    lines += [f"| `{m}` | {where(m)} | {calls(m)} |" for m in judgement.walk if is_edge(m)]
    lines += ["", "The spine, in the order the request first calls into it:", ""]
    lines += ["| # | file | reached from | calls into it |", "|---|---|---|---|"]
    lines += [f"| {number[m]} | `{m}` | {where(m)} | {calls(m)} |" for m in spine]
    lines += ["", "Side files (they call nothing else of the repository on this walk):", ""]
    lines += ["| side file | reached from | calls into it |", "|---|---|---|"]
    lines += [f"| `{m}` | {where(m)} | {calls(m)} |" for m in judgement.walk if m in judgement.side]
    return "\n".join(lines)


def _short(function: str) -> str:
    return function.replace(".<locals>.", ".")


_BLOCK = re.compile(re.escape(BEGIN) + r"\n(.*?)\n?" + re.escape(END), re.S)


def embedded(text: str) -> str | None:
    """The tables between the doc's markers (None: no markers)."""
    found = _BLOCK.search(text)
    return found.group(1) if found else None


def write(text: str) -> None:
    """Write ``text`` (the tables) between the doc's markers."""
    doc = DOC.read_text()
    assert _BLOCK.search(doc), f"{DOC.name} has no walk markers"
    DOC.write_text(_BLOCK.sub(lambda _: f"{BEGIN}\n{text}\n{END}", doc, count=1))


def figures(judgement: Judgement) -> str:
    gateway = [m for m in judgement.walk if m.startswith("gateway/")]
    edge = [m for m in judgement.walk if is_edge(m)]
    spine = [m for m in judgement.walk if not is_edge(m) and m not in judgement.side]
    return (
        f"{len(judgement.walk)} modules walked ({len(gateway)} of the gateway, "
        f"{len(judgement.walk) - len(gateway)} of the engine's client side): {len(edge)} on the HTTP edge, "
        f"{len(spine)} on the spine, {len(judgement.side)} side files; "
        f"returns into modules left: {judgement.count(RETURN)}; callbacks up: {judgement.count(CALLBACK)}"
    )


def main() -> None:
    """Print the walk and its judgement (``--write``: write the tables into the doc)."""
    hops, judgement = traced()
    for i, module in enumerate(judgement.walk, 1):
        marks = " (edge)" * is_edge(module) + " (side)" * (module in judgement.side)
        print(f"{i:3} {module:45} from {judgement.first_caller[module]}{marks}")
    for verdict in judgement.verdicts:
        note = " (documented)" if (verdict.kind, verdict.caller, verdict.callee) == DOCUMENTED else ""
        print(f"{verdict.kind}: {verdict.caller} -> {verdict.callee} ({verdict.function}){note}")
    print(figures(judgement))
    if "--write" in sys.argv:
        write(tables(hops, judgement))


def undocumented(judgement: Judgement) -> list[Verdict]:
    return [v for v in judgement.verdicts if (v.kind, v.caller, v.callee) != DOCUMENTED]


if __name__ == "__main__":
    main()
