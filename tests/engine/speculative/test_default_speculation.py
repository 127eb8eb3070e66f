"""Speculation under the defaults changes nothing (issue 41): on the CPU ``--speculative`` is
``auto``, which drafts only in small steps, those decoding for at most 4 requests, where every
decode token is computed exactly as a lone request's (`engine.step_rows`). So fifty agent-shaped
greedy replies are the same token ids with and without drafts, and whichever requests share their
steps, while drafts are proposed and accepted.

The prompts go a few at a time, every step small: a larger batch's decode rows differ with its
make-up (the dense copy past the crossover, the shared prefix read apart), and its make-up with
the timing of the run (requests overdue under load go first), with or without drafts.

One engine under the defaults; its runs without speculation take its speculator away between
calls, which is what ``--speculative off`` builds (`engine.core_parts.make_speculator` gives None)."""

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from agentgate.engine import LLM, SamplingParams
from agentgate.engine.config import EngineConfig
from tests.engine.speculative.agent_prompts import agent_prompts

pytestmark = pytest.mark.slow

PROMPTS = agent_prompts(50)
GREEDY = SamplingParams(temperature=0, max_tokens=24)


@pytest.fixture(scope="module")
def llm():
    llm = LLM()
    assert llm.core.scheduler.speculator is not None, "speculation is not on by default on the CPU"
    return llm


@contextmanager
def without_speculation(llm: LLM) -> Iterator[None]:
    scheduler = llm.core.scheduler
    speculator, scheduler.speculator = scheduler.speculator, None
    try:
        yield
    finally:
        scheduler.speculator = speculator


def replies(llm: LLM, group: int) -> list[list[int]]:
    """Every prompt's reply token ids, ``group`` prompts submitted together at a time."""
    out = []
    for start in range(0, len(PROMPTS), group):
        out += [r.token_ids for r in llm.chat(PROMPTS[start : start + group], GREEDY)]
    return out


def test_the_default_on_the_cpu_is_auto_and_cuda_stays_off():
    assert EngineConfig(device="cpu").resolved_speculative() == "auto"
    assert EngineConfig(device="cuda").resolved_speculative() == "off"
    assert EngineConfig(device="cpu", speculative="off").resolved_speculative() == "off"


def test_fifty_replies_are_the_same_with_and_without_drafts_and_whatever_their_neighbours(llm):
    """Groups of 3 without drafts against groups of 4 with them: each reply has other
    neighbours, and drafts, in one run and not in the other."""
    stats = llm.core.scheduler.stats
    with without_speculation(llm):
        want = replies(llm, 3)
    before = stats()
    got = replies(llm, 4)
    after = stats()
    differ = [i for i, (a, b) in enumerate(zip(want, got)) if a != b]
    assert not differ, f"replies {differ} of {len(PROMPTS)} changed with speculation or with their neighbours"
    drafted = after.num_draft_tokens - before.num_draft_tokens
    accepted = after.num_accepted_tokens - before.num_accepted_tokens
    assert accepted > 0.3 * drafted > 0, f"{accepted} of {drafted} drafts accepted: the test proves little"
