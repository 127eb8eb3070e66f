"""The trace replay's reading of the Mooncake format (sessions, scaling, refusals), the prompt text
its block hashes stand for (token-exact, prefixes shared where hashes are), the repository's
synthetic trace, and the KV it sizes for "about half fit"."""

from __future__ import annotations

import json

import pytest

from agentgate.engine.model_files.model_path import default_model_path
from agentgate.engine.text.tokenizer import load_tokenizer
from agentgate.loadtests.agent_programs import CALL_TOKENS, TOKENS_PER_BLOCK
from agentgate.loadtests.mooncake_trace import (
    SYNTHETIC_TRACE,
    PromptText,
    TraceError,
    TraceTurn,
    parse_trace,
    read_trace,
)
from agentgate.loadtests.synthetic_trace import synthetic_rows
from agentgate.loadtests.trace_replay import TOOLS_PROMPT_TOKENS, default_blocks


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(default_model_path())


def _lines(*rows: dict) -> list[str]:
    return [json.dumps(r) for r in rows]


def test_sessions_are_their_lines_in_order_and_lines_without_one_are_sessions_of_one_turn():
    lines = _lines(
        {"session_id": "b", "timestamp": 2000, "input_length": 1024, "output_length": 32, "hash_ids": [0, 1]},
        {"timestamp": 500, "input_length": 600, "output_length": 8, "hash_ids": [0, 9]},
        {"session_id": "b", "delay": 1500, "input_length": 1600, "output_length": 64, "hash_ids": [0, 1, 2, 3]},
        {"session_id": "b", "timestamp": 9000, "input_length": 1700, "output_length": 64, "hash_ids": [0, 1, 2, 3]},
    )
    sessions = parse_trace(lines, length_divisor=16, time_scale=0.5)
    assert [s.session_id for s in sessions] == ["line-2", "b"]  # by first arrival
    single, agent = sessions
    assert single.start_s == 0.25 and len(single.turns) == 1
    assert agent.start_s == 1.0 and [t.line for t in agent.turns] == [1, 3, 4]
    first, second, third = agent.turns
    assert (first.input_tokens, first.output_tokens, first.delay_s) == (64, 2, None)
    assert (second.input_tokens, second.delay_s, second.hash_ids) == (100, 0.75, (0, 1, 2, 3))
    assert third.delay_s is None and third.timestamp_s == 4.5
    assert agent.final_tokens == third.input_tokens + third.output_tokens


def test_missing_hash_ids_are_the_lines_own_and_extra_ones_are_not_used():
    short, long = parse_trace(
        _lines(
            {"timestamp": 0, "input_length": 1500, "output_length": 1, "hash_ids": [7]},
            {"timestamp": 1, "input_length": 1500, "output_length": 1, "hash_ids": [7, 8, 9, 10, 11]},
        )
    )
    assert short.turns[0].hash_ids[0] == 7 and len(short.turns[0].hash_ids) == 3
    assert all(h < 0 for h in short.turns[0].hash_ids[1:])  # never an id another line names
    assert long.turns[0].hash_ids == (7, 8, 9)


@pytest.mark.parametrize(
    ("row", "says"),
    [
        ({"input_length": 10, "output_length": 1}, "first request needs a 'timestamp'"),
        ({"timestamp": 0, "input_length": 0, "output_length": 1}, "'input_length' must be a positive integer"),
        ({"timestamp": 0, "input_length": 10, "output_length": 1.5}, "'output_length' must be a positive integer"),
        ({"timestamp": -1, "input_length": 10, "output_length": 1}, "'timestamp' must be milliseconds >= 0"),
        ({"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": ["a"]}, "list of integers"),
        ([1, 2], "a request is a JSON object"),
    ],
)
def test_a_line_that_is_not_a_request_is_refused_naming_it(row, says):
    with pytest.raises(TraceError, match=f"line 2: .*{says}"):
        parse_trace(["", json.dumps(row)])


def test_a_later_turn_without_a_time_and_a_bad_scale_are_refused():
    first = {"session_id": "a", "timestamp": 0, "input_length": 10, "output_length": 1}
    with pytest.raises(TraceError, match="line 2: a later turn needs a 'delay' or a 'timestamp'"):
        parse_trace(_lines(first, {"session_id": "a", "input_length": 20, "output_length": 1}))
    with pytest.raises(TraceError, match="must divide 512"):
        parse_trace(_lines(first), length_divisor=3)
    with pytest.raises(TraceError, match="must be positive"):
        parse_trace(_lines(first), time_scale=0)
    with pytest.raises(TraceError, match="line 1: not JSON"):
        parse_trace(["{"])


def test_block_text_is_token_exact_and_shared_where_the_hashes_are(tokenizer):
    text = PromptText(tokenizer, block_tokens=32, salt="r0")
    a = TraceTurn(1, 0.0, None, 80, 5, (0, 1, 2))
    b = TraceTurn(2, 0.0, None, 70, 5, (0, 1, 3))  # another session sharing two blocks
    grown = TraceTurn(3, None, 1.0, 140, 5, (0, 1, 2, 4, 5))

    def encode(s: str) -> list[int]:
        return tokenizer.encode(s, add_special_tokens=False)

    ta, tb = encode(text.prompt(a)), encode(text.prompt(b))
    assert len(ta) == 80 and len(tb) == 70
    assert ta[:64] == tb[:64] and ta[64:70] != tb[64:70]  # they share exactly their two common blocks
    growth = text.growth(a, grown)
    assert len(encode(growth)) == 140 - 80 - 5
    assert encode(text.prompt(a) + growth)[:80] == ta  # the conversation extends its prompt token for token
    other_round = PromptText(tokenizer, block_tokens=32, salt="r1")
    assert encode(other_round.prompt(a))[:32] != ta[:32]  # no round hits another's cache
    too_little = TraceTurn(4, None, 1.0, 81, 5, (0, 1, 2))  # the trace adds less than the reply
    assert len(encode(text.growth(a, too_little))) == 1


def test_the_repository_trace_is_the_generator_s_output_and_reads_as_agents():
    committed = SYNTHETIC_TRACE.read_text().splitlines()
    assert committed == [json.dumps(row) for row in synthetic_rows()]
    sessions = read_trace(SYNTHETIC_TRACE, length_divisor=16)
    assert len(sessions) == 16 and all(3 <= len(s.turns) <= 6 for s in sessions)
    assert all(s.turns[0].hash_ids[:6] == tuple(range(6)) for s in sessions)  # one harness's system prompt
    for session in sessions:
        for before, after in zip(session.turns, session.turns[1:], strict=False):
            assert after.input_tokens > before.input_tokens + before.output_tokens and after.delay_s is not None
            assert after.hash_ids[: len(before.hash_ids) - 1] == before.hash_ids[:-1]  # the prefix is kept


def test_about_half_of_the_final_conversations_fit_and_never_less_than_the_longest():
    agent = [
        {"session_id": "a", "timestamp": 0, "input_length": 3200, "output_length": 16},
        {"session_id": "a", "delay": 10, "input_length": 6400, "output_length": 320},
    ]
    single = {"timestamp": 0, "input_length": 1600, "output_length": 16}
    # The agent: its final conversation, its call's reply at a call's length, the tools' prompt.
    agent_tokens = 6400 + 320 + (CALL_TOKENS - 16) + TOOLS_PROMPT_TOKENS
    alone = parse_trace(_lines(*agent, single))
    assert default_blocks(alone) == -(-agent_tokens * 5 // 4 // TOKENS_PER_BLOCK) == 548  # half (269) would not hold it
    many = parse_trace(_lines(*agent, *[single] * 8))
    assert default_blocks(many) == (agent_tokens + 8 * 1616) // TOKENS_PER_BLOCK // 2 == 623
