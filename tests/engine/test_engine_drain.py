"""An engine draining (its SIGTERM under ``agentgate engine --drain-seconds``): new requests are
refused with an error naming the drain, the streams in flight run to the deadline and are aborted
there, and the serving loop ends (``engine.process.EngineServer.drain``)."""

from __future__ import annotations

import threading
import time

import anyio
import pytest

from agentgate.engine.client import EngineClient
from agentgate.engine.core import EngineCore
from agentgate.engine.errors import EngineError
from agentgate.engine.process import DRAINING, EngineServer
from agentgate.engine.sampling_params import SamplingParams
from tests.support.inprocess import NULL_ENGINE


@pytest.mark.anyio
async def test_a_draining_engine_refuses_new_work_and_aborts_the_rest_at_its_deadline(tmp_path):
    address = f"ipc://{tmp_path}/engine.sock"
    server = EngineServer(EngineCore(NULL_ENGINE), address, "null")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        async with EngineClient.connect(address, startup_timeout=30) as client:
            finished: list[str | None] = []

            async def long() -> None:
                params = SamplingParams(max_tokens=100_000, ignore_eos=True)
                async for out in client.generate("long", [1, 2, 3], params):
                    if out.finish_reason is not None:
                        finished.append(out.finish_reason)

            async with anyio.create_task_group() as tasks:
                tasks.start_soon(long)
                await anyio.sleep(0.2)
                started = time.monotonic()
                server.drain(0.5)
                with pytest.raises(EngineError, match="draining"):
                    async for _ in client.generate("late", [1, 2], SamplingParams(max_tokens=4)):
                        pass
            assert finished == ["abort"]
            assert 0.4 < time.monotonic() - started < 3.0
        thread.join(timeout=5)
        assert not thread.is_alive(), "the loop ends once drained"
    finally:
        server.stopping = True
        thread.join(timeout=5)
    assert "another engine" in DRAINING
