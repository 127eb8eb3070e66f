"""Generation and Choice without a server: a stub engine stands in for the
engine client, so merged outputs, stop strings and bookkeeping are exact."""

from __future__ import annotations

import dataclasses

import pytest

from agentgate.engine.front.protocol import EngineCoreOutput, TokenLogprobs
from agentgate.engine.model_files.model_path import default_model_path
from agentgate.engine.sampling_params import SamplingParams
from agentgate.engine.text.tokenizer import load_tokenizer
from agentgate.gateway.admission.waiting import Admission
from agentgate.gateway.config.settings import Settings
from agentgate.gateway.context import RequestContext
from agentgate.gateway.dispatch import Dispatcher, Job, dispatch
from agentgate.gateway.engines.pool import EnginePool
from agentgate.gateway.errors import BadRequestError, ConflictError, QueueFullError
from agentgate.gateway.formats.openai import ChatFormat
from agentgate.gateway.generation import Generation
from agentgate.gateway.http.sse import _chunks
from agentgate.gateway.observation.metrics import Metrics
from agentgate.gateway.state.requests_in_flight import RequestRegistry

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(default_model_path())


class StubEngine:
    """Yields the given outputs; records whether the stream was left early (an abort)."""

    address = "stub"
    dead_reason = None
    is_dead = False
    info = None  # says nothing of its size (EngineInfo): affinity keeps its programs on it

    def __init__(self, outputs: list[EngineCoreOutput]) -> None:
        self.outputs = outputs
        self.left_early = False
        self.open: set[str] = set()

    @property
    def num_streams(self) -> int:
        return len(self.open)

    def owns(self, request_id: str) -> bool:
        return request_id in self.open

    def add(self, request_id, prompt_ids, params, eos, program=None, **fields):  # tenant, salt, thinking, lora
        return self.generate(request_id, prompt_ids, params, eos)

    async def generate(self, request_id, prompt_ids, params, eos):
        self.open.add(request_id)
        finished = False
        try:
            for out in self.outputs:
                finished = out.finish_reason is not None
                yield out
        finally:
            self.open.discard(request_id)
            self.left_early = not finished


def _generation(tokenizer, engine, params, metrics=None, admission=None, request_id="r", n=1):
    admission = admission or Admission(0)
    job = Job(request_id, 0.0, [[1, 2, 3]], params, n)
    gen = Generation(job, engine, tokenizer, metrics or Metrics(), admission.enter())
    gen.submit()
    return gen


def _gateway(tokenizer, engine, admission) -> Dispatcher:
    """The services dispatch uses, around one stub engine and no Redis."""
    max_engine_requests = Settings().max_engine_requests_per_request
    return Dispatcher(EnginePool([engine]), RequestRegistry(), admission, Metrics(), tokenizer, max_engine_requests)


async def test_a_merged_output_streams_one_chunk_per_token_and_a_stop_string_aborts(tokenizer):
    ids = tokenizer.encode(" one two three four five", add_special_tokens=False)
    assert len(ids) == 5
    lps = [TokenLogprobs(-0.5, [], []) for _ in ids]
    engine = StubEngine(
        [
            EngineCoreOutput("r", ids[:1], logprobs=lps[:1], queue_time=0.25),
            EngineCoreOutput("r", ids[1:], logprobs=lps[1:]),  # four tokens queued up, merged by the client
        ]
    )
    metrics = Metrics()
    gen = _generation(tokenizer, engine, SamplingParams(max_tokens=10, stop=["four"], logprobs=0), metrics)
    choice = gen.choices[0]
    batches = [events async for events in choice.events(per_token=True)]
    assert [len(b) for b in batches] == [1, 3]  # " two", " three", then " four" hits the stop string
    texts = [e.text for b in batches for e in b]
    assert "".join(texts) == " one two three "
    assert batches[-1][-1].finish_reason == "stop" and choice.finish_reason == "stop"
    assert all(len(e.token_ids) == 1 and len(e.logprobs) == 1 for b in batches for e in b)
    assert engine.left_early, "the engine request was not aborted after the stop string"
    fmt = ChatFormat(gen.request_id, gen.created, "m", tokenizer, num_choices=1, include_usage=False)
    data = _chunks(fmt, choice, batches[1])
    assert data.count(b"data: ") == 3 and data.endswith(b"\r\n\r\n")
    gen.close()
    samples = {s.name: s.value for m in metrics.registry.collect() for s in m.samples}
    assert samples["agentgate_time_to_first_token_seconds_count"] == 1
    assert samples["agentgate_request_queue_time_seconds_sum"] == 0.25
    assert samples["agentgate_inter_token_latency_seconds_count"] == 3
    # The same, by engine (the dashboard's per-engine plots).
    by_engine = {(s.name, s.labels.get("engine")): s.value for m in metrics.registry.collect() for s in m.samples}
    assert by_engine[("agentgate_engine_time_to_first_token_seconds_count", "stub")] == 1
    assert by_engine[("agentgate_engine_inter_token_latency_seconds_count", "stub")] == 3
    assert samples["agentgate_generation_tokens_total"] == 4
    assert samples["agentgate_prompt_tokens_total"] == 3


async def test_tokens_merged_into_the_first_output_count_as_inter_token_gaps(tokenizer):
    """Under load the first output can carry several tokens (the client merges what queued up):
    one first token, and every other token one inter-token gap, as for later outputs."""
    ids = tokenizer.encode(" one two three four five", add_special_tokens=False)
    engine = StubEngine([EngineCoreOutput("r", ids[:3]), EngineCoreOutput("r", ids[3:], "length")])
    metrics = Metrics()
    gen = _generation(tokenizer, engine, SamplingParams(max_tokens=5), metrics)
    [_ async for _ in gen.choices[0].events()]
    gen.close()
    samples = {s.name: s.value for m in metrics.registry.collect() for s in m.samples}
    assert samples["agentgate_time_to_first_token_seconds_count"] == 1
    assert samples["agentgate_inter_token_latency_seconds_count"] == len(ids) - 1


async def test_non_streaming_collect_keeps_text_tokens_and_logprobs(tokenizer):
    ids = tokenizer.encode(" alpha beta gamma", add_special_tokens=False)
    engine = StubEngine([EngineCoreOutput("r", ids[:2]), EngineCoreOutput("r", ids[2:], "length")])
    gen = _generation(tokenizer, engine, SamplingParams(max_tokens=len(ids)))
    await gen.choices[0].collect()
    assert gen.choices[0].text == " alpha beta gamma" and gen.choices[0].token_ids == ids
    assert gen.choices[0].finish_reason == "length" and not engine.left_early
    assert gen.usage.completion_tokens == len(ids) and gen.usage.prompt_tokens == 3


async def test_tickets_and_ids_are_released_whatever_happens(tokenizer):
    admission = Admission(1)
    engine = StubEngine([EngineCoreOutput("x", [5], "length")])
    gw = _gateway(tokenizer, engine, admission)
    gen = await dispatch(gw, Job("x", 0.0, [[1, 2, 3]], SamplingParams()), RequestContext())
    with pytest.raises(QueueFullError):
        admission.enter()
    unbounded = dataclasses.replace(gw, admission=Admission(0))  # the same registry
    with pytest.raises(ConflictError):
        await dispatch(unbounded, Job("x", 0.0, [[1]], SamplingParams()), RequestContext())
    assert unbounded.admission.waiting == 0, "the refused request kept its ticket"
    gen.close()
    gen.close()  # idempotent
    assert admission.waiting == 0 and gw.registry.num_requests == 0
    admission.enter()


async def test_admission_counts_engine_requests_and_caps_them_per_request(tokenizer):
    """n x prompts engine requests: each waits in the admission count until its first token, and
    a request of more than --max-engine-requests-per-request is a 400 before anything is admitted."""
    admission = Admission(8)
    outputs = [EngineCoreOutput(f"fan-{i}", [5], "length") for i in range(6)]
    gw = dataclasses.replace(_gateway(tokenizer, StubEngine(outputs), admission), max_engine_requests=6)
    gen = await dispatch(gw, Job("fan", 0.0, [[1], [2], [3]], SamplingParams(), n=2), RequestContext())
    assert len(gen.choices) == 6 and admission.waiting == 6
    with pytest.raises(QueueFullError):  # 6 + 3 > 8
        await dispatch(gw, Job("more", 0.0, [[1], [2], [3]], SamplingParams()), RequestContext())
    with pytest.raises(BadRequestError) as refused:
        await dispatch(gw, Job("big", 0.0, [[1]], SamplingParams(), n=7), RequestContext())
    assert refused.value.param == "n" and admission.waiting == 6
    gen.choices[0]._update([5], None, None, None)  # a choice's first token frees its place
    assert admission.waiting == 5
    gen.close()
    assert admission.waiting == 0


async def test_n_choices_get_suffixed_engine_ids(tokenizer):
    gen = _generation(tokenizer, StubEngine([]), SamplingParams(), request_id="abc", n=3)
    assert [c.request_id for c in gen.choices] == ["abc-0", "abc-1", "abc-2"]
    assert [c.index for c in gen.choices] == [0, 1, 2]
    gen.close()
