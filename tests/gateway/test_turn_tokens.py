"""A program's next turn starts with the tokens its last turn read and wrote (gateway.programs.turn_tokens),
with the default model's tokenizer and template, and only when the conversation carries that
turn unchanged."""

import json

from agentgate.gateway.programs.turn_tokens import TurnTokens
from agentgate.gateway.tools import render_chat_prompt

QUERY = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
TOOLS = [{"type": "function", "function": {"name": "search_docs", "parameters": QUERY}}]
# What the model wrote: compact JSON, which the canonical arguments string re-renders with spaces.
WRITTEN = '<tool_call>\n{"name": "search_docs", "arguments": {"query":"disk full"}}\n</tool_call>'


def echoed(arguments='{"query": "disk full"}', content=None):
    """The reply as a client sends it back: the call's id and type, content null."""
    call = {"id": "call_1", "type": "function", "function": {"name": "search_docs", "arguments": arguments}}
    return {"role": "assistant", "content": content, "tool_calls": [call]}


REPLY = {"role": "assistant", "content": "", "tool_calls": [echoed()["tool_calls"][0]]}
ECHOED = echoed()
RESULT = {"role": "tool", "tool_call_id": "call_1", "content": json.dumps({"hits": 3})}


def first_turn():
    return [{"role": "system", "content": "You are on call."}, {"role": "user", "content": "The disk is full."}]


def render(tokenizer, messages, add_generation_prompt=True):
    return render_chat_prompt(tokenizer, messages, tools=TOOLS, add_generation_prompt=add_generation_prompt)


def written_ids(tokenizer):
    """The reply as the model might spell it: one token per character, then the end token."""
    ids = [tokenizer.encode(ch, add_special_tokens=False)[0] for ch in WRITTEN]
    assert tokenizer.decode(ids) == WRITTEN
    return ids + [tokenizer.eos_token_id]


def kept(tokenizer, reply=REPLY, output=None):
    store = TurnTokens(tokenizer)
    prompt_text = render(tokenizer, first_turn())
    prompt_ids = tokenizer.encode(prompt_text, add_special_tokens=False)
    store.remember("p", prompt_text, prompt_ids, written_ids(tokenizer) if output is None else output, reply)
    return store, prompt_ids


def next_ids(store, tokenizer, messages, program="p"):
    text = render(tokenizer, messages)
    returning = store.returning(program, text, messages)
    if returning is None:
        return None, text
    through = render(tokenizer, messages[: returning.last + 1], add_generation_prompt=False)
    return store.prompt_ids(returning, text, through), text


def test_the_next_turn_is_the_kept_tokens_then_the_text_after_the_reply(smollm_tokenizer):
    tok = smollm_tokenizer
    store, prompt_ids = kept(tok)
    messages = [*first_turn(), ECHOED, RESULT]
    ids, text = next_ids(store, tok, messages)
    turn = prompt_ids + written_ids(tok)
    assert ids[: len(turn)] == turn
    rest = text[text.rindex("</tool_call><|im_end|>") + len("</tool_call><|im_end|>") :]
    assert rest.startswith("\n<|im_start|>user\n<tool_response>")
    assert ids[len(turn) :] == tok.encode(rest, add_special_tokens=False)
    # Tokenized as before, the same conversation leaves the kept tokens inside the reply.
    plain = tok.encode(text, add_special_tokens=False)
    assert plain[: len(prompt_ids)] == prompt_ids and plain[: len(turn)] != turn
    assert tok.decode(ids, skip_special_tokens=False).replace('"query":"', '"query": "') == text


def test_anything_else_tokenizes_as_before(smollm_tokenizer):
    tok = smollm_tokenizer
    store, _ = kept(tok)
    other_args = echoed('{"query": "cpu"}')
    edited = [{"role": "system", "content": "You are the pager."}, *first_turn()[1:], ECHOED, RESULT]
    assert next_ids(store, tok, [*first_turn(), ECHOED, RESULT], program="other")[0] is None
    assert next_ids(store, tok, [*first_turn(), other_args, RESULT])[0] is None
    assert next_ids(store, tok, [*edited])[0] is None
    assert next_ids(store, tok, [*first_turn(), {"role": "user", "content": "again"}])[0] is None
    assert next_ids(store, tok, [*first_turn(), ECHOED, RESULT])[0] is not None
    # Whitespace a client's JSON library adds to the arguments is the same reply.
    spaced = echoed('{ "query" : "disk full" }')
    assert next_ids(store, tok, [*first_turn(), spaced, RESULT])[0] is not None
    assert next_ids(store, tok, [*first_turn(), echoed(content="Let me look."), RESULT])[0] is None


def test_only_a_reply_ended_by_the_model_without_reasoning_is_kept(smollm_tokenizer):
    tok = smollm_tokenizer
    assert len(kept(tok, reply={**REPLY, "reasoning_content": "think"})[0]) == 0
    assert len(kept(tok, output=written_ids(tok)[:-1])[0]) == 0  # cut by max_tokens
    store, _ = kept(tok)
    store.remember("p", "x", [1], [2, 3], REPLY)  # the program's next turn, not kept, forgets this one
    assert len(store) == 0


def _one_turn_bytes(tokenizer, prompt_text: str) -> int:
    store = TurnTokens(tokenizer)
    store.remember("p0", prompt_text, list(range(99)), [tokenizer.eos_token_id], {"role": "assistant", "content": "r0"})
    return store.nbytes


def test_the_least_recently_used_turns_go_past_the_bound(smollm_tokenizer):
    eos = smollm_tokenizer.eos_token_id
    one = _one_turn_bytes(smollm_tokenizer, "x" * 10)
    assert one >= 10 + 4 * 100  # the prompt's characters and the ids' 4 bytes each, at least
    store = TurnTokens(smollm_tokenizer, max_bytes=3 * one)
    for i in range(5):
        store.remember(f"p{i}", "x" * 10, list(range(99)), [eos], {"role": "assistant", "content": f"r{i}"})
    assert len(store) == 3
    assert store.returning("p0", "x" * 10, []) is None
    store.remember("p2", "x" * 10, list(range(99)), [eos], {"role": "assistant", "content": "r2"})
    assert len(store) == 3 and store.nbytes == 3 * one


def test_the_bound_counts_bytes_not_characters(smollm_tokenizer):
    """A prompt of 1000 euro signs holds 2000 bytes or more (CPython stores them 2 bytes each); a bound
    of 1500 bytes, room for 1000 characters, keeps none of the turns fed to it."""
    eos = smollm_tokenizer.eos_token_id
    assert _one_turn_bytes(smollm_tokenizer, "\u20ac" * 1000) >= 2000 + 4 * 100
    store = TurnTokens(smollm_tokenizer, max_bytes=1500)
    for i in range(20):
        store.remember(f"p{i}", "\u20ac" * 1000, [1], [eos], {"role": "assistant", "content": f"r{i}"})
    assert len(store) == 0 and store.nbytes == 0
    for i in range(200):  # more distinct programs than the bound holds
        store.remember(f"p{i}", "x", [1], [eos], {"role": "assistant", "content": "ok"})
    assert 0 < len(store) < 200 and store.nbytes <= 1500
