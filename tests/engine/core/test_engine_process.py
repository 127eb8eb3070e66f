"""The engine in its own process behind the ZMQ boundary, driven through
EngineClient. The null runner stands in for the model: these tests are
about the process, the protocol and the client."""

import os
import signal
import time
from contextlib import aclosing
from pathlib import Path

import anyio
import pytest

from agentgate.engine.config import EngineConfig
from agentgate.engine.errors import EngineDeadError, InvalidRequestError
from agentgate.engine.front.client import EngineClient
from agentgate.engine.sampling_params import SamplingParams

pytestmark = pytest.mark.anyio

NULL = EngineConfig(runner="null", block_size=16, num_kv_blocks=4096, max_num_batched_tokens=256)
# 2 ms per step: slow enough that a stream is still running when the test acts.
SLOW_NULL = NULL.with_changes(null_step_seconds=0.002)


async def collect(client, rid, prompt, params):
    tokens, reason = [], None
    async with aclosing(client.generate(rid, prompt, params)) as outs:
        async for out in outs:
            tokens += out.new_token_ids
            reason = out.finish_reason
    return tokens, reason


async def test_handshake_generate_and_stats():
    async with EngineClient.spawn(NULL, model_name="null-model") as client:
        assert client.info.model == "null-model" and client.info.num_kv_blocks == 4096
        results = {}

        async def one(i):
            results[i] = await collect(
                client, f"r{i}", [1, 2, 3 + i], SamplingParams(max_tokens=5 + i, ignore_eos=True)
            )

        async with anyio.create_task_group() as tg:
            for i in range(32):
                tg.start_soon(one, i)
        assert all(len(results[i][0]) == 5 + i and results[i][1] == "length" for i in range(32))
        stats = await client.stats()
        assert stats.num_running == 0 and stats.kv_usage == 0.0
        assert await client.health()
        socket_file = client.address.removeprefix("ipc://")
        assert os.path.exists(socket_file)
    assert not os.path.exists(socket_file), "a stopped engine leaves no socket file behind"


async def test_bad_input_is_rejected_and_the_engine_keeps_serving():
    async with EngineClient.spawn(NULL) as client:
        with pytest.raises(InvalidRequestError, match="vocabulary"):
            await collect(client, "bad", [1, 2], SamplingParams(stop_token_ids=[10**9]))
        with pytest.raises(InvalidRequestError, match="empty"):
            await collect(client, "empty", [], SamplingParams())
        tokens, reason = await collect(client, "good", [1, 2], SamplingParams(max_tokens=3))
        assert len(tokens) == 3 and reason == "length"


async def test_leaving_a_stream_early_aborts_the_request():
    async with EngineClient.spawn(NULL) as client:
        async with aclosing(
            client.generate("long", [1, 2], SamplingParams(max_tokens=100_000, ignore_eos=True))
        ) as outs:
            async for _ in outs:
                break
        for _ in range(100):
            stats = await client.stats()
            if stats.num_running == 0:
                break
            await anyio.sleep(0.01)
        assert stats.num_running == 0 and stats.kv_usage == 0.0


async def test_pause_modes_through_the_client():
    async with EngineClient.spawn(SLOW_NULL) as client:
        reasons = {}

        async def run(rid, max_tokens):
            reasons[rid] = await collect(client, rid, [1, 2], SamplingParams(max_tokens=max_tokens, ignore_eos=True))

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "a", 10**6)
            await anyio.sleep(0.2)
            await client.pause("abort")
            assert await client.is_paused()
        assert reasons["a"][1] == "abort"
        await client.resume()

        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "b", 200)
            await anyio.sleep(0.1)
            await client.pause("wait")  # returns once b has finished
            await anyio.sleep(0.05)  # let b's task read its last output
            assert reasons["b"][1] == "length" and len(reasons["b"][0]) == 200
            tg.start_soon(run, "c", 3)
            await anyio.sleep(0.3)
            assert "c" not in reasons  # queued, not rejected, not run
            await client.resume()
        assert reasons["c"][1] == "length"


async def test_killing_the_engine_fails_every_waiter_within_a_second():
    async with EngineClient.spawn(SLOW_NULL) as client:
        errors = {}

        async def run(i):
            try:
                await collect(client, f"r{i}", [1, 2], SamplingParams(max_tokens=10**7, ignore_eos=True))
            except EngineDeadError as exc:
                errors[i] = (time.monotonic(), exc)

        async with anyio.create_task_group() as tg:
            for i in range(8):
                tg.start_soon(run, i)
            await anyio.sleep(0.3)
            killed_at = time.monotonic()
            os.kill(client.process.pid, signal.SIGKILL)
        assert sorted(errors) == list(range(8))
        assert max(t for t, _ in errors.values()) - killed_at < 1.0
        with pytest.raises(EngineDeadError):
            await client.stats()


async def test_a_failed_start_is_reported_with_its_cause(tmp_path):
    with pytest.raises(EngineDeadError, match="failed to start"):
        async with EngineClient.spawn(EngineConfig(model=str(tmp_path / "missing.gguf"), runner="sync")):
            pass


async def test_an_engine_connected_by_address_alone_is_declared_dead_when_it_stops_answering():
    from agentgate.engine.front.addresses import private_address, remove_socket_file
    from agentgate.engine.front.client import HEARTBEAT_TIMEOUT_S
    from agentgate.engine.front.spawn import start_engine_process, stop_engine_process

    address = private_address()
    process = start_engine_process(SLOW_NULL, address)
    try:
        async with EngineClient.connect(address) as client:  # no process handle: heartbeats only
            await anyio.sleep(1.5)  # heartbeats keep an idle engine alive
            assert not client.is_dead
            errors = []

            async def run():
                try:
                    await collect(client, "r", [1, 2], SamplingParams(max_tokens=10**7, ignore_eos=True))
                except EngineDeadError as exc:
                    errors.append((time.monotonic(), exc))

            async with anyio.create_task_group() as tg:
                tg.start_soon(run)
                await anyio.sleep(0.3)
                killed_at = time.monotonic()
                os.kill(process.pid, signal.SIGKILL)
            assert errors and "stopped answering" in str(errors[0][1])
            assert errors[0][0] - killed_at < HEARTBEAT_TIMEOUT_S + 1.0
    finally:
        stop_engine_process(process)
        remove_socket_file(address)


async def test_an_engine_busy_with_a_step_longer_than_the_heartbeat_timeout_is_alive(monkeypatch):
    """Heartbeats come from a thread of their own: a step that outlasts the front end's timeout (a long
    prefill on a busy CPU) does not get a working engine declared dead (here a 2.5 s step, a 1 s timeout)."""
    from agentgate.engine.front import client as client_module
    from agentgate.engine.front.addresses import private_address, remove_socket_file
    from agentgate.engine.front.client import start_engine_process, stop_engine_process

    monkeypatch.setattr(client_module, "HEARTBEAT_TIMEOUT_S", 1.0)
    address = private_address()
    process = start_engine_process(NULL.with_changes(null_step_seconds=2.5), address)
    try:
        async with EngineClient.connect(address) as client:  # no process handle: heartbeats only
            tokens, reason = await collect(client, "slow", [1, 2], SamplingParams(max_tokens=2, ignore_eos=True))
            assert (len(tokens), reason) == (2, "length") and not client.is_dead, client.dead_reason
    finally:
        stop_engine_process(process)
        remove_socket_file(address)


def test_the_engine_stops_when_the_process_that_started_it_is_killed(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "parent.py"
    script.write_text(
        "import sys, time\n"
        "from agentgate.engine.front.spawn import start_engine_process\n"
        "from agentgate.engine.config import EngineConfig\n"
        "if __name__ == '__main__':\n"
        f"    p = start_engine_process(EngineConfig(runner='null', num_kv_blocks=64), 'ipc://{tmp_path}/e.sock')\n"
        "    print(p.pid, flush=True)\n"
        "    time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    try:
        engine_pid = int(parent.stdout.readline())
        time.sleep(1.0)
        os.kill(engine_pid, 0)  # running
        parent.kill()
        parent.wait()
        # An engine still importing torch on a loaded machine takes seconds to get to its exit; one
        # that has exited but is not reaped yet (a zombie: its parent is gone) counts as stopped.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                state = Path(f"/proc/{engine_pid}/stat").read_text().rsplit(") ", 1)[1].split()[0]
            except (OSError, IndexError):
                break
            if state in ("Z", "X"):
                break
            time.sleep(0.1)
        else:
            os.kill(engine_pid, signal.SIGKILL)
            raise AssertionError("the engine outlived its parent")
    finally:
        parent.kill()


async def test_the_engine_stamps_arrival_with_its_own_clock(monkeypatch):
    """A front end whose monotonic clock reads far from the engine's (another host's) does not move
    the engine's queue times or wait bounds: the wire carries no time (issue 50)."""
    async with EngineClient.spawn(NULL) as client:
        real = time.monotonic
        monkeypatch.setattr(time, "monotonic", lambda: real() - 10_000.0)  # this process only
        first = None
        async with aclosing(client.generate("skewed", [1, 2, 3], SamplingParams(max_tokens=2, ignore_eos=True))) as s:
            async for out in s:
                first = out if first is None else first
        monkeypatch.setattr(time, "monotonic", real)
    assert first is not None and first.queue_time is not None and 0.0 <= first.queue_time < 5.0
