"""Program identity as the gateway gives it to the engine: session, Responses chain,
prompt_cache_key, user, in that order; per API key; after tool calls or not."""

from agentgate.gateway.context import RequestContext
from agentgate.gateway.programs import tags as programs

SEARCH = {"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}
CALL = {"role": "assistant", "content": None, "tool_calls": [SEARCH]}


def test_program_id_follows_session_chain_cache_key_user_in_that_order():
    full = RequestContext(key="k", session_id="s", program="resp_1")
    ids = [
        programs.program_id(full, "ck", "u"),
        programs.program_id(RequestContext(key="k", program="resp_1"), "ck", "u"),
        programs.program_id(RequestContext(key="k"), "ck", "u"),
        programs.program_id(RequestContext(key="k"), None, "u"),
    ]
    assert [i.split(":")[0] for i in ids] == ["session", "chain", "cache", "user"]
    assert len(set(ids)) == 4
    assert programs.program_id(RequestContext(key="k"), None, None) is None
    assert programs.program_id(RequestContext(key="other"), None, "u") != ids[3], "keys share no program"
    assert "u" not in ids[3].split(":")[1]


def test_a_turn_after_tool_calls_carries_their_names():
    """The previous turn's end is dispatch's to fill in, from Redis (tests/gateway/test_program_store.py)."""
    user = {"role": "user", "content": "find it"}
    result = {"role": "tool", "tool_call_id": "c1", "content": "found"}
    context = RequestContext(key="k", session_id="tags")
    first = programs.program_tag(context, [user], tools_offered=True)
    assert first.tools_offered and not first.after_tool_calls and first.previous_turn_end == 0.0
    assert programs.reply_tools(CALL) == ["search"]
    back = programs.program_tag(context, [user, CALL, result], tools_offered=True)
    assert back.after_tool_calls and back.tool_names == ["search"] and back.previous_turn_end == 0.0
    again = programs.program_tag(
        context, [user, CALL, result, {"role": "user", "content": "thanks"}], tools_offered=False
    )
    assert not again.after_tool_calls and not again.tools_offered
    assert programs.reply_tools({"role": "assistant", "content": "ok"}) == [] and programs.reply_tools(None) == []
    assert programs.program_tag(RequestContext(), [user], tools_offered=True) is None


def test_one_conversation_through_two_adapters_is_two_programs():
    """Issue 53: the adapter a request runs through is part of its program (KV, pins, ranks and
    turns are the adapter's own: the prefix cache shares nothing across adapters)."""
    context = RequestContext(key="k", session_id="s")
    base, first, again, other = (
        programs.program_id(context, None, None, adapter) for adapter in ("", "tools-v1", "tools-v1", "tools-v2")
    )
    assert first == again and len({base, first, other}) == 3
    assert base == programs.program_id(context, None, None)  # the base model's ids are as they were
    tag = programs.program_tag(context, [{"role": "user", "content": "hi"}], tools_offered=True, adapter="tools-v1")
    assert tag.program_id == first
