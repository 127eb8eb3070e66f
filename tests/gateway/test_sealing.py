"""Sealing (``gateway.state.sealing``): what opens, what is refused, how a key is rotated and shared,
and the Responses items that carry seals (compaction, reasoning) read back or refused by field."""

from __future__ import annotations

import time

import msgspec
import pytest

from agentgate.gateway.errors import BadRequestError
from agentgate.gateway.responses_api import items as it
from agentgate.gateway.responses_api.reasoning_items import seal_reasoning
from agentgate.gateway.state.redis_state import SharedState
from agentgate.gateway.state.sealing import COMPACTION, REASONING, THINKING, Sealer, SealError, deployment_sealer

KEY = "the-first-deployment-key"
NEW_KEY = "the-second-deployment-key"


def _flip(token: str, at: int) -> str:
    """``token`` with one base64 character changed (``at`` counts from the end)."""
    i = len(token) - at
    return token[:i] + ("A" if token[i] != "A" else "B") + token[i + 1 :]


def test_a_seal_opens_for_its_purpose_and_for_no_other():
    sealer = Sealer([KEY])
    sealed = sealer.seal(REASONING, b"I think, therefore")
    assert sealed.startswith("ag1.") and b"think" not in sealed.encode()  # unreadable
    assert sealer.open(REASONING, sealed) == b"I think, therefore"
    assert sealer.seal(REASONING, b"x") != sealer.seal(REASONING, b"x")  # a fresh nonce each time
    with pytest.raises(SealError, match="another use"):
        sealer.open(COMPACTION, sealed)  # a reasoning item replayed as a compaction


@pytest.mark.parametrize("at", [3, 20, 40])  # the tag, the ciphertext, the nonce
def test_a_changed_seal_does_not_open(at):
    sealer = Sealer([KEY])
    sealed = sealer.seal(COMPACTION, b'{"summary": "the plan"}' * 2)
    with pytest.raises(SealError):
        sealer.open(COMPACTION, _flip(sealed, at))


@pytest.mark.parametrize("token", [None, 3, "", "ag1.", "ag1.!!!", "eyJ2IjogMX0=", "ag1.AAAAAAAA"])
def test_what_is_not_a_seal_is_refused_not_crashed_on(token):
    with pytest.raises(SealError):
        Sealer([KEY]).open(REASONING, token)


def test_another_deployments_seal_does_not_open():
    with pytest.raises(SealError, match="key this server does not hold"):
        Sealer([NEW_KEY]).open(REASONING, Sealer([KEY]).seal(REASONING, b"secret"))


def test_rotation_the_first_key_seals_every_key_opens():
    old = Sealer([KEY]).seal(COMPACTION, b"before")
    rotated = Sealer([NEW_KEY, KEY])
    assert rotated.open(COMPACTION, old) == b"before"  # sealed before the rotation
    new = rotated.seal(COMPACTION, b"after")
    assert Sealer([NEW_KEY]).open(COMPACTION, new) == b"after"  # sealed under the new key
    with pytest.raises(SealError):
        Sealer([NEW_KEY]).open(COMPACTION, old)  # the old key dropped: its seals are gone


def test_a_signature_verifies_its_text_only_for_its_purpose():
    sealer = Sealer([KEY])
    signature = sealer.sign(THINKING, b"Let me think.")
    sealer.verify(THINKING, b"Let me think.", signature)
    Sealer([NEW_KEY, KEY]).verify(THINKING, b"Let me think.", signature)  # still verifies after a rotation
    for purpose, text, sig in [
        (THINKING, b"Let me think!", signature),  # the block edited
        (THINKING, b"Let me think.", _flip(signature, 5)),  # the signature edited
        (REASONING, b"Let me think.", signature),  # another purpose
    ]:
        with pytest.raises(SealError):
            sealer.verify(purpose, text, sig)


def test_a_short_key_is_refused_at_start():
    with pytest.raises(ValueError, match="at least 16 characters"):
        Sealer(["short"])
    from agentgate.gateway.config.settings import Settings

    with pytest.raises(ValueError, match="sealing_key"):
        Settings(sealing_key=("short",))


def test_a_compaction_item_is_sealed_and_refused_by_field_when_changed():
    sealer = Sealer([KEY])
    item = it.compaction_item("We launch on Tuesday.", sealer, cut=True, dropped=2)
    payload = msgspec.json.decode(sealer.open(COMPACTION, item["encrypted_content"]))
    assert payload == {"v": 1, "summary": "We launch on Tuesday.", "cut": True, "dropped_messages": 2}
    user = {"role": "user", "content": "Go on."}
    messages, _ = it.input_messages([item, user], sealer)
    assert messages[0] == {
        "role": "assistant",
        "content": it.SUMMARY_PREFIX + "We launch on Tuesday." + it.CUT_SUMMARY_NOTE,
    }
    forged = [user, {**item, "encrypted_content": _flip(item["encrypted_content"], 4)}]
    reasoning_as_compaction = [user, {**item, "encrypted_content": seal_reasoning(sealer, "We launch.")}]
    for window in (forged, reasoning_as_compaction):
        with pytest.raises(BadRequestError) as refused:
            it.input_messages(window, sealer)
        assert refused.value.param == "input[1].encrypted_content"


def test_reasoning_items_reach_the_assistant_turn_that_follows_them():
    sealer = Sealer([KEY])
    sealed = {"type": "reasoning", "summary": [], "encrypted_content": seal_reasoning(sealer, "Paris is in France.")}
    readable = {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "Use the tool."}]}
    summary_only = {"type": "reasoning", "summary": [{"type": "summary_text", "text": "Answer briefly."}]}
    call = {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{}"}
    window = [
        {"role": "user", "content": "Weather in Paris?"},
        sealed,
        call,
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
        readable,
        summary_only,
        {"role": "assistant", "content": "Sunny."},
        {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "no turn follows"}]},
        {"role": "user", "content": "Thanks."},
    ]
    messages, items = it.input_messages(window, sealer)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant", "user"]
    assert messages[1]["reasoning_content"] == "Paris is in France." and messages[1]["tool_calls"][0]["id"] == "c1"
    assert messages[3] == {
        "role": "assistant",
        "content": "Sunny.",
        "reasoning_content": "Use the tool.\n\nAnswer briefly.",
    }
    assert "reasoning_content" not in messages[4]  # reasoning no assistant turn followed is dropped
    assert [i["type"] for i in items].count("reasoning") == 4  # stored as they came
    changed = {**sealed, "encrypted_content": _flip(sealed["encrypted_content"], 4)}
    with pytest.raises(BadRequestError) as refused:
        it.input_messages([{"role": "user", "content": "Hi"}, changed, call], sealer)
    assert refused.value.param == "input[1].encrypted_content"
    with pytest.raises(BadRequestError) as refused:
        it.input_messages([{"type": "reasoning", "content": "text"}], sealer)
    assert refused.value.param == "input[0].content"


@pytest.mark.anyio
async def test_without_a_key_replicas_share_the_one_in_redis(redis_server):
    prefix = f"seal{time.monotonic_ns()}"
    replicas = [SharedState(redis_server.url, prefix=prefix, replica_id=f"r{i}", session_ttl=60) for i in range(2)]
    try:
        first, second = [await deployment_sealer((), shared) for shared in replicas]
        assert "redis" in first.origin
        assert second.open(REASONING, first.seal(REASONING, b"shared")) == b"shared"
        given = await deployment_sealer((KEY,), replicas[0])  # a key given wins over the shared one
        assert given.origin == "--sealing-key" and Sealer([KEY]).open(REASONING, given.seal(REASONING, b"k")) == b"k"
    finally:
        for shared in replicas:
            await shared.close()
    alone = await deployment_sealer((), None)
    assert alone.origin == "a random key of this process"
    with pytest.raises(SealError):
        alone.open(REASONING, first.seal(REASONING, b"shared"))
