"""What the gateway relies on from EngineClient.generate: a consumer that falls
behind gets the queued outputs merged into one (tokens and logprobs
concatenated, one finish reason), with exactly the tokens a prompt consumer
gets. The gateway splits such an output into one SSE chunk per token."""

from __future__ import annotations

from contextlib import aclosing

import anyio
import pytest

from agentgate.engine.config import EngineConfig
from agentgate.engine.front.client import EngineClient
from agentgate.engine.sampling_params import SamplingParams

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

NULL = EngineConfig(runner="null", num_kv_blocks=1024, null_step_seconds=0.002)


async def _run(client: EngineClient, request_id: str, delay: float):
    outputs = []
    params = SamplingParams(max_tokens=40, ignore_eos=True, temperature=0)
    async with aclosing(client.generate(request_id, [1, 2, 3, 4], params)) as stream:
        async for out in stream:
            outputs.append(out)
            await anyio.sleep(delay)  # a slow consumer: outputs queue up meanwhile
    return outputs


async def test_a_slow_consumer_gets_merged_outputs_with_the_same_tokens():
    async with EngineClient.spawn(NULL) as client:
        fast = await _run(client, "fast", 0.0)
        slow = await _run(client, "slow", 0.02)
    tokens = [t for out in fast for t in out.new_token_ids]
    assert len(tokens) == 40
    assert [t for out in slow for t in out.new_token_ids] == tokens
    assert len(slow) < len(fast), "nothing was merged: the slow consumer got every step on its own"
    assert max(len(out.new_token_ids) for out in slow) > 1
    for outputs in (fast, slow):
        assert [out.finish_reason for out in outputs].count("length") == 1 and outputs[-1].finish_reason == "length"
        assert all(out.logprobs is None or len(out.logprobs) == len(out.new_token_ids) for out in outputs)
        assert outputs[0].queue_time is not None
