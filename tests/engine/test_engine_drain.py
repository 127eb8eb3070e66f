"""An engine draining (its SIGTERM under ``agentgate engine --drain-seconds``): new requests are
refused with an error naming the drain, the streams in flight run to the deadline and are aborted
there, and the serving loop ends (``engine.front.process.EngineServer.drain``)."""

from __future__ import annotations

import threading
import time

import anyio
import pytest

from agentgate.engine.core import EngineCore
from agentgate.engine.errors import EngineError
from agentgate.engine.front.client import EngineClient
from agentgate.engine.front.process import DRAINING, EngineServer
from agentgate.engine.sampling_params import SamplingParams
from tests.support.inprocess import NULL_ENGINE


def _serve(tmp_path) -> tuple[EngineServer, threading.Thread, str]:
    address = f"ipc://{tmp_path}/engine.sock"
    server = EngineServer(EngineCore(NULL_ENGINE), address, "null")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread, address


async def _run_long(client: EngineClient, finished: list[str | None]) -> None:
    """A request that runs until the drain aborts it; its finish reasons go to ``finished``."""
    params = SamplingParams(max_tokens=100_000, ignore_eos=True)
    finished.extend([out.finish_reason async for out in client.generate("long", [1, 2, 3], params)])


@pytest.mark.anyio
async def test_a_draining_engine_refuses_new_work_and_aborts_the_rest_at_its_deadline(tmp_path):
    server, thread, address = _serve(tmp_path)
    try:
        async with EngineClient.connect(address, startup_timeout=30) as client:
            finished: list[str | None] = []
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(_run_long, client, finished)
                await anyio.sleep(0.2)
                started = time.monotonic()
                server.drain(0.5)
                with pytest.raises(EngineError, match="draining"):
                    async for _ in client.generate("late", [1, 2], SamplingParams(max_tokens=4)):
                        pass
            assert finished[-1] == "abort"
            assert 0.4 < time.monotonic() - started < 3.0
        thread.join(timeout=5)
        assert not thread.is_alive(), "the loop ends once drained"
    finally:
        server.stopping = True
        thread.join(timeout=5)
    assert "another engine" in DRAINING


@pytest.mark.anyio
async def test_a_registered_engine_serves_through_its_drain_notice_then_refuses(tmp_path):
    """Gateways read the registry once a second, so a request may still come in just after the
    drain began: during the notice it is served, after it refused."""
    server, thread, address = _serve(tmp_path)
    try:
        async with EngineClient.connect(address, startup_timeout=30) as client:
            finished: list[str | None] = []
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(_run_long, client, finished)
                await anyio.sleep(0.2)
                started = time.monotonic()
                server.drain(2.0, notice=0.6)
                early = [
                    out.finish_reason async for out in client.generate("early", [1, 2], SamplingParams(max_tokens=4))
                ]
                assert early[-1] == "length" and time.monotonic() - started < 0.6
                await anyio.sleep(0.6 - (time.monotonic() - started) + 0.05)
                with pytest.raises(EngineError, match="draining"):
                    async for _ in client.generate("late", [1, 2], SamplingParams(max_tokens=4)):
                        pass
            assert finished[-1] == "abort" and 1.8 < time.monotonic() - started < 4.0
        thread.join(timeout=5)
        assert not thread.is_alive()
    finally:
        server.stopping = True
        thread.join(timeout=5)


def test_an_idle_engine_ends_its_drain_when_the_notice_is_over_not_before(tmp_path):
    """It would otherwise vanish under a gateway that still routes there, and that request would
    wait for the heartbeat timeout instead of being served."""
    server, thread, _ = _serve(tmp_path)
    try:
        time.sleep(0.2)
        started = time.monotonic()
        server.drain(5.0, notice=0.6)
        time.sleep(0.4)
        assert thread.is_alive(), "the loop ended inside the notice"
        thread.join(timeout=5)
        assert not thread.is_alive() and 0.6 <= time.monotonic() - started < 2.0
    finally:
        server.stopping = True
        thread.join(timeout=5)
