"""Forced tool calls under budgets that cannot hold them (issue 35): whole, or said to be cut.

Starts ``agentgate serve`` with its defaults (the default model, int4 with row choice) and, for
each of five tools with long string arguments, asks each API (chat completions with
``tool_choice: required``, Messages with ``tool_choice: any``, Responses with ``required``) for
the call greedily with room to spare (``--roomy`` tokens): its arguments are the reference, and
its length ``n``. Then the same request, streamed and not, with budgets of n/3, n/2 and 2n/3
(the budget cuts them) and n + 40 (it does not), one request at a time so no batch changes the
numbers. Each reply is counted as one of:

- ``whole``: reported as a finished call (``tool_calls`` / ``tool_use`` / ``completed``) with the
  reference's arguments;
- ``cut``: reported as cut (``length`` / ``max_tokens`` / ``incomplete``), its arguments JSON
  that parses;
- ``400``: refused (a budget below the shortest call);
- ``ALTERED``: reported as a finished call whose arguments differ from the reference: a
  shortened value passed off as whole. The goal is 0;
- ``other``: anything else (printed).

    python -m agentgate.loadtests.forced_budget_sweep
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import httpx

from agentgate.loadtests.server import start_server


def _tool(name: str, description: str, **strings: str) -> dict:
    properties = {key: {"type": "string", "description": text} for key, text in strings.items()}
    parameters = {"type": "object", "properties": properties, "required": list(strings)}
    return {"name": name, "description": description, "parameters": parameters}


TOOLS = [
    (
        _tool("write_file", "Write a text file", path="where to write it", content="the whole text of the file"),
        "Save the line 'the sea is calm tonight' to poems/sea.txt.",
    ),
    (
        _tool("send_email", "Send an email", to="the address", subject="the subject line", body="the message"),
        "Email bob@example.com that the meeting moved to Friday.",
    ),
    (
        _tool("create_issue", "Open an issue in the tracker", title="a one-line title", body="the full description"),
        "Open an issue: the login page crashes when the password is empty.",
    ),
    (
        _tool("post_message", "Post to a chat channel", channel="the channel name", text="the message"),
        "Post a message to #general welcoming the new engineers.",
    ),
    (
        _tool("save_note", "Save a note", title="the note's title", text="the note"),
        "Save a note saying why the sky is blue, in one sentence.",
    ),
]


class Reply(NamedTuple):
    status: int
    finish: str | None  # as the API said it
    arguments: dict | None  # the first call's
    tokens: int = 0  # output tokens (non-streamed replies)


def _sse(response: httpx.Response) -> list[dict]:
    events = []
    for line in response.iter_lines():
        if line.startswith("data: ") and line != "data: [DONE]":
            events.append(json.loads(line[len("data: ") :]))
    return events


def _send(
    client: httpx.Client,
    path: str,
    body: dict,
    whole: Callable[[dict], Reply],
    streamed: Callable[[list[dict]], Reply],
) -> Reply:
    """POST ``body``: a non-streamed reply read by ``whole``, a stream's events by ``streamed``."""
    if not body["stream"]:
        r = client.post(path, json=body)
        return whole(r.json()) if r.status_code == 200 else Reply(r.status_code, None, None)
    with client.stream("POST", path, json=body) as r:
        return streamed(_sse(r)) if r.status_code == 200 else Reply(r.status_code, None, None)


def chat(client: httpx.Client, tool: dict, ask: str, budget: int, stream: bool) -> Reply:
    body = {
        "messages": [{"role": "user", "content": ask}],
        "tools": [{"type": "function", "function": tool}],
        "tool_choice": "required",
        "max_tokens": budget,
        "temperature": 0,
        "stream": stream,
    }

    def whole(reply: dict) -> Reply:
        choice = reply["choices"][0]
        calls = choice["message"].get("tool_calls") or []
        arguments = json.loads(calls[0]["function"]["arguments"]) if calls else None
        return Reply(200, choice["finish_reason"], arguments, reply["usage"]["completion_tokens"])

    def streamed(chunks: list[dict]) -> Reply:
        finish, arguments, called = None, "", False
        for chunk in chunks:
            for choice in chunk.get("choices", []):
                for call in choice["delta"].get("tool_calls") or []:
                    if call["index"] == 0:
                        called = True
                        arguments += call["function"].get("arguments") or ""
                finish = choice.get("finish_reason") or finish
        return Reply(200, finish, json.loads(arguments) if called else None)

    return _send(client, "/v1/chat/completions", body, whole, streamed)


def messages(client: httpx.Client, tool: dict, ask: str, budget: int, stream: bool) -> Reply:
    body = {
        "model": client.get("/v1/models").json()["data"][0]["id"],  # Messages names it
        "messages": [{"role": "user", "content": ask}],
        "tools": [{"name": tool["name"], "description": tool["description"], "input_schema": tool["parameters"]}],
        "tool_choice": {"type": "any"},
        "max_tokens": budget,
        "temperature": 0,
        "stream": stream,
    }

    def whole(reply: dict) -> Reply:
        uses = [block["input"] for block in reply["content"] if block["type"] == "tool_use"]
        return Reply(200, reply["stop_reason"], uses[0] if uses else None, reply["usage"]["output_tokens"])

    def streamed(events: list[dict]) -> Reply:
        stop, partial, first = None, "", None
        for event in events:
            if event["type"] == "content_block_start" and event["content_block"]["type"] == "tool_use":
                first = event["index"] if first is None else first
            elif event["type"] == "content_block_delta" and event["index"] == first:
                partial += event["delta"].get("partial_json", "")
            elif event["type"] == "message_delta":
                stop = event["delta"].get("stop_reason")
        return Reply(200, stop, json.loads(partial) if first is not None else None)

    return _send(client, "/v1/messages", body, whole, streamed)


def responses(client: httpx.Client, tool: dict, ask: str, budget: int, stream: bool) -> Reply:
    body = {
        "input": ask,
        "tools": [{"type": "function", **tool}],
        "tool_choice": "required",
        "max_output_tokens": budget,
        "temperature": 0,
        "store": False,
        "stream": stream,
    }

    def whole(reply: dict) -> Reply:
        calls = [item["arguments"] for item in reply["output"] if item["type"] == "function_call"]
        arguments = json.loads(calls[0]) if calls else None
        return Reply(200, _responses_status(reply), arguments, reply["usage"]["output_tokens"])

    def streamed(events: list[dict]) -> Reply:
        status, arguments = None, None
        for event in events:
            if event["type"] == "response.function_call_arguments.done" and arguments is None:
                arguments = event["arguments"]
            elif event["type"] in ("response.completed", "response.incomplete", "response.failed"):
                status = _responses_status(event["response"])
        return Reply(200, status, json.loads(arguments) if arguments is not None else None)

    return _send(client, "/v1/responses", body, whole, streamed)


def _responses_status(reply: dict) -> str:
    details = reply.get("incomplete_details") or {}
    return f"{reply['status']}:{details['reason']}" if details else reply["status"]


APIS = {"chat": chat, "messages": messages, "responses": responses}
WHOLE = {"tool_calls", "tool_use", "completed"}
CUT = {"length", "max_tokens", "incomplete:max_output_tokens"}


def classify(reply: Reply, reference: dict) -> str:
    if reply.status == 400:
        return "400"
    if reply.status != 200 or reply.arguments is None:
        return "other"
    if reply.finish in CUT:
        return "cut"
    if reply.finish in WHOLE:
        return "whole" if reply.arguments == reference else "ALTERED"
    return "other"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--roomy", type=int, default=400, help="tokens of the unbudgeted reference call")
    parser.add_argument("--url", default=None, help="a running server instead of starting one")
    args = parser.parse_args(argv)
    server = None
    if args.url is None:
        server = start_server([], Path(tempfile.mkdtemp(prefix="budget-sweep-")))
    url = args.url or server.url
    counts: dict[str, Counter[str]] = {}
    try:
        with httpx.Client(base_url=url, timeout=600) as client:
            for tool, ask in TOOLS:
                for api, call in APIS.items():
                    free = call(client, tool, ask, args.roomy, False)
                    reference, usage = free.arguments, free.tokens
                    if free.status != 200 or reference is None or free.finish not in WHOLE:
                        print(f"{tool['name']} {api}: no whole reference ({free}); skipped", flush=True)
                        continue
                    budgets = {"n/3": usage // 3, "n/2": usage // 2, "2n/3": 2 * usage // 3, "n+40": usage + 40}
                    for label, budget in budgets.items():
                        for stream in (False, True):
                            kind = classify(call(client, tool, ask, budget, stream), reference)
                            counts.setdefault(label, Counter())[kind] += 1
                            mode = "stream" if stream else "plain"
                            print(
                                f"{tool['name']:12} {api:9} n={usage:3} {label:5} {budget:3} {mode:6} {kind}",
                                flush=True,
                            )
    finally:
        if server is not None:
            server.stop()
    kinds = ("whole", "cut", "400", "ALTERED", "other")
    print("\nbudget  " + "  ".join(f"{k:>7}" for k in kinds))
    for label in ("n/3", "n/2", "2n/3", "n+40"):
        print(f"{label:6}  " + "  ".join(f"{counts.get(label, Counter())[k]:7}" for k in kinds))
    total = sum(counts.values(), Counter())
    print("all     " + "  ".join(f"{total[k]:7}" for k in kinds))


if __name__ == "__main__":
    main()
