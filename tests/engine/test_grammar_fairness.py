"""Issue 50: grammar compiles are bounded in time and shared fairly by tenants. The pool's rules with
jobs that wait on events (no model), the engine's deadline, then the real default model: one key's
slow schema is a clear error within its bound while another key's small constrained request runs;
compiled grammars are shared only by requests of one cache salt (no compile time reveals another
tenant's schemas)."""

from __future__ import annotations

import json
import threading
import time
from concurrent import futures
from concurrent.futures import Future

import pytest

from agentgate.engine import LLM, SamplingParams
from agentgate.engine.request import Request
from agentgate.engine.sampling_params import StructuredOutput
from agentgate.engine.structured.compile_pool import FairCompilePool, tenant_share
from agentgate.engine.structured.grammar_waits import GrammarWaits

# xgrammar takes seconds over this pattern's repetition bound (about 6 s on two idle cores)
SLOW = {"type": "object", "properties": {"a": {"type": "string", "pattern": "[a-z]{1,10000}"}}, "required": ["a"]}
SMALL = {"type": "object", "properties": {"b": {"type": "integer"}}, "required": ["b"]}  # milliseconds
TIMEOUT = 1.5


def _blocked(release: threading.Event, ran: list[str], name: str):
    def job() -> str:
        ran.append(name)
        release.wait(10)
        return name

    return job


def _until(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def test_a_tenant_runs_on_half_the_workers_and_the_rest_stay_free_for_others():
    assert [tenant_share(n) for n in (1, 2, 3, 4, 8)] == [1, 1, 1, 2, 4]
    pool, release, ran = FairCompilePool(4), threading.Event(), []
    try:
        a = [pool.submit("a", _blocked(release, ran, f"a{i}")) for i in range(4)]
        _until(lambda: len(ran) == 2)
        time.sleep(0.05)
        assert sorted(ran) == ["a0", "a1"] and pool.running("a") == 2  # a2, a3 wait behind a's own
        b = pool.submit("b", lambda: "b")
        assert b.result(5) == "b"  # a free worker, at once, while a's compiles hold theirs
        release.set()
        assert [f.result(5) for f in a] == ["a0", "a1", "a2", "a3"]
    finally:
        release.set()
        pool.shutdown()


def test_a_free_worker_goes_to_the_tenant_with_the_fewest_running():
    pool, release, ran = FairCompilePool(4), threading.Event(), []  # a tenant runs at most 2
    first = threading.Event()
    try:
        held = [pool.submit("a", _blocked(release, ran, "a0")), pool.submit("b", _blocked(first, ran, "b0"))]
        held += [pool.submit("b", _blocked(release, ran, "b1")), pool.submit("c", _blocked(release, ran, "c0"))]
        _until(lambda: len(ran) == 4)
        later = [pool.submit("a", _blocked(release, ran, "a1")), pool.submit("d", _blocked(release, ran, "d0"))]
        first.set()  # b0's worker frees: d (none running) goes before a (one), though a asked first
        _until(lambda: len(ran) == 5)
        assert ran[4] == "d0" and not later[0].running()
        release.set()
        assert [f.result(5) for f in held + later] == ["a0", "b0", "b1", "c0", "a1", "d0"]
    finally:
        first.set()
        release.set()
        pool.shutdown()


def test_a_compile_cancelled_while_it_waits_never_runs():
    pool, release, ran = FairCompilePool(1), threading.Event(), []
    try:
        running = pool.submit("a", _blocked(release, ran, "a0"))
        waiting = pool.submit("b", _blocked(release, ran, "b0"))
        _until(lambda: ran == ["a0"])
        assert waiting.cancel()
        after = pool.submit("c", lambda: "c")
        release.set()
        assert running.result(5) == "a0" and after.result(5) == "c" and ran == ["a0"]
        assert waiting in futures.wait([waiting], timeout=5).done  # told cancelled, as an executor's would be
    finally:
        release.set()
        pool.shutdown()


def test_a_grammar_not_ready_by_its_deadline_is_an_invalid_request_naming_the_flag():
    import agentgate.engine.structured.structured_output  # noqa: F401 - take_ready's first import, not timed here

    waits = GrammarWaits(timeout=0.5)
    never: Future = Future()
    request = Request(
        "late", [1, 2, 3], SamplingParams(max_tokens=4), seed=0, eos_token_ids=frozenset(), max_model_len=64
    )
    waits.add(request, never)
    assert waits.take_ready() == ([], []) and "late" in waits
    time.sleep(0.55)
    ready, [failed] = waits.take_ready()
    assert not ready and failed.request_id == "late" and failed.invalid and failed.finish_reason == "error"
    assert "--grammar-compile-timeout" in failed.error and never.cancelled() and not waits


@pytest.fixture(scope="module")
def llm():
    return LLM(runner="sync", grammar_compile_timeout=TIMEOUT, grammar_compile_workers=2, max_num_batched_tokens=256)


def test_one_keys_slow_schema_is_a_clear_error_in_its_bound_and_never_holds_another_keys(llm):
    core, tokenizer = llm.core, llm.tokenizer
    prompt = tokenizer.encode("Describe a user of a web site as JSON.")
    [warm] = llm.generate([prompt], SamplingParams(max_tokens=2, structured=StructuredOutput(json_object=True)))
    assert warm.token_ids  # the compiler built: what follows times compiles alone
    small = SamplingParams(temperature=0, max_tokens=8, structured=StructuredOutput(json_schema=json.dumps(SMALL)))
    slow = SamplingParams(max_tokens=8, structured=StructuredOutput(json_schema=json.dumps(SLOW)))
    compiler = core._grammar_compiler()
    started = time.monotonic()
    core.add_request("slow", prompt, slow, tenant="a")
    time.sleep(0.05)  # a's compile runs
    core.add_request("small", prompt, small, tenant="b")
    ended: dict[str, tuple[float, object]] = {}
    slow_compiled: float | None = None  # when a's compile ended (it runs on past a's bound)
    while (core.has_work or slow_compiled is None) and time.monotonic() - started < 60:
        if slow_compiled is None and not compiler.compiling("a"):
            slow_compiled = time.monotonic() - started
        if not core.has_work or core.only_compiling:
            time.sleep(0.005)
        for out in core.step():
            if out.finish_reason is not None:
                ended[out.request_id] = (time.monotonic() - started, out)
    (small_at, small_out), (slow_at, slow_out) = ended["small"], ended["slow"]
    assert small_out.error is None and small_out.finish_reason in ("stop", "length")
    # The rule, not a timing under load: b's request ended while a's compile still ran (one shared
    # worker: b's compile waits behind a's and ends after it), and a's wait ended at its bound, before
    # its compile did.
    assert slow_compiled is not None and small_at < slow_compiled, (small_at, slow_compiled)
    assert TIMEOUT <= slow_at < slow_compiled, (slow_at, slow_compiled)
    assert slow_out.invalid and "--grammar-compile-timeout" in slow_out.error


SALTED = StructuredOutput(json_schema=json.dumps({"type": "object", "properties": {"n": {"type": "integer"}}}))


def test_a_salted_request_compiles_its_own_grammar_and_unsalted_ones_share():
    """A compile's time would tell a tenant whether another already sent its schema: compiled grammars
    are shared only within one cache salt (the prefix cache's, per request or per key)."""
    from agentgate.engine.model_files.model_path import resolve_model_path
    from agentgate.engine.structured.structured_output import GrammarCompiler  # imported here, as by the engine

    compiler = GrammarCompiler(resolve_model_path(None), 49152)
    try:

        def compiles(tenant: str, salt: str = "") -> int:
            compiler.submit(SALTED, tenant, salt).result(30)
            return compiler.num_compiles

        assert compiles("a", "salt-a") == 1
        assert compiles("b", "salt-b") == 2  # the same schema, another salt: its own compile
        assert compiles("a", "salt-a") == 2  # the same salt: found cached
        assert compiles("b", "salt-b") == 2
        assert compiles("a") == 3  # unsalted: one compile that every unsalted request shares
        assert compiles("b") == 3
    finally:
        compiler.shutdown()


def test_the_engine_files_a_requests_grammar_under_its_cache_salt(llm):
    core, prompt = llm.core, llm.tokenizer.encode("Give a number as JSON.")
    params = SamplingParams(temperature=0, max_tokens=4, structured=SALTED)
    core.add_request("salted", prompt, params, tenant="c", cache_salt="salt-c")  # not the slow key a
    core.add_request("unsalted", prompt, params, tenant="d")
    ended, deadline = {}, time.monotonic() + 30
    while core.has_work and time.monotonic() < deadline:
        if core.only_compiling:
            time.sleep(0.005)
        ended.update((out.request_id, out.error) for out in core.step() if out.finish_reason is not None)
    assert ended == {"salted": None, "unsalted": None}
    cached = core._grammars._cache
    assert ("salt-c", *SALTED.kind()) in cached and ("", *SALTED.kind()) in cached
    assert ("salt-d", *SALTED.kind()) not in cached and ("salt-a", *SALTED.kind()) not in cached
