"""Where a request's time went, as the engine tells it on the request's last output
(``RequestTimings``: the gateway's trace spans are built from it), driven by the null runner."""

import time

from agentgate.engine.front.protocol import EngineCoreOutput, EngineOutputs, decode_from_engine, encode
from agentgate.engine.sampling_params import SamplingParams
from tests.engine.core.test_scheduler import make_core


def _outputs(core) -> dict[str, list[EngineCoreOutput]]:
    outputs: dict[str, list[EngineCoreOutput]] = {}
    while core.has_work:
        for out in core.step():
            outputs.setdefault(out.request_id, []).append(out)
    return outputs


def test_the_last_output_carries_the_queue_prefill_and_decode_of_its_request():
    core = make_core(max_num_seqs=1)  # one at a time: the second request waits for the first
    arrival = time.monotonic()
    for rid in ("first", "second"):
        core.add_request(rid, [5, 6, 7, 8, 9], SamplingParams(max_tokens=6, ignore_eos=True), arrival_time=arrival)
    outputs = _outputs(core)
    for rid in ("first", "second"):
        *before, last = outputs[rid]
        assert last.finish_reason == "length" and all(o.timings is None for o in before)
        t = last.timings
        assert t is not None and t.queued >= 0 and t.prefill is not None and t.decode is not None
        assert t.prefill >= 0 and t.decode > 0  # five more tokens after the first took five steps
    first, second = outputs["first"][-1].timings, outputs["second"][-1].timings
    # The second was first scheduled after the first had ended: it queued through all of it.
    assert second.queued > first.queued + first.prefill + first.decode


def test_a_one_token_reply_has_its_decode_and_the_wire_keeps_timings():
    core = make_core()
    core.add_request("one", [5, 6, 7], SamplingParams(max_tokens=1, ignore_eos=True))
    [last] = _outputs(core)["one"]
    assert last.timings is not None and last.timings.decode == 0.0  # the first token was the last
    [sent] = decode_from_engine(encode(EngineOutputs([last]))).outputs  # as the gateway reads it
    assert sent.timings == last.timings
