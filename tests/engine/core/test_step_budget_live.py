"""The step budget on the real default model, under the defaults (auto: 60 ms on the CPU): a long
prompt that arrives while requests decode goes in slices, and answers what it answers without."""

import random

import pytest

from agentgate.engine.config import EngineConfig
from agentgate.engine.core import EngineCore
from agentgate.engine.sampling_params import SamplingParams

LONG_PROMPT = 600  # tokens: several hundred ms of prompt on a CPU, far over a 60 ms step


@pytest.fixture(scope="module")
def core():
    # No prefix caching: the second run computes the long prompt again instead of hitting it.
    engine = EngineCore(EngineConfig(enable_prefix_caching=False, max_step_ms="auto"))
    yield engine
    engine.shutdown()


def long_prompt_beside_decodes(core: EngineCore, tag: str) -> tuple[int, list[int]]:
    """Two requests decode; a long prompt arrives. Its first chunk, and its greedy tokens."""
    rng = random.Random(0)
    decoding = SamplingParams(temperature=0, max_tokens=400, ignore_eos=True)
    for i in range(2):
        core.add_request(f"{tag}-d{i}", [rng.randrange(100, 30000) for _ in range(8)], decoding)
    for _ in range(3):
        core.step()
    core.add_request(
        f"{tag}-long",
        [rng.randrange(100, 30000) for _ in range(LONG_PROMPT)],
        SamplingParams(temperature=0, max_tokens=8, ignore_eos=True),
    )
    tokens: list[int] = []
    first_chunk, finished = None, False
    while not finished:
        for out in core.step():
            if out.request_id == f"{tag}-long":
                tokens += out.new_token_ids
                finished = out.finish_reason is not None
        if first_chunk is None:
            first_chunk = core.scheduler.requests[f"{tag}-long"].num_computed_tokens
        assert all(r.status.name == "RUNNING" for r in core.scheduler.requests.values())  # the decoders still run
    core.abort_requests(None)
    while core.has_work:
        core.step()
    return first_chunk, tokens


def test_a_long_prompt_goes_in_slices_beside_decodes_and_answers_the_same(core):
    budget = core.scheduler.step_budget
    assert budget is not None and budget.max_step_ms == 60.0  # auto, on the CPU with a model
    chunk, sliced = long_prompt_beside_decodes(core, "on")
    assert budget.num_observed > 0
    assert chunk < LONG_PROMPT and chunk < core.config.max_num_batched_tokens - 2
    assert chunk % core.runner.kv_spec.block_size == 0
    core.scheduler.step_budget = None  # the same engine without a budget
    try:
        whole, unsliced = long_prompt_beside_decodes(core, "off")
    finally:
        core.scheduler.step_budget = budget
    assert whole == LONG_PROMPT  # beside two decodes, in one chunk of the 1024-token budget
    assert len(sliced) == 8 and sliced == unsliced
