"""A background response whose first save fails gives back everything it took (issue 50): the
admission ticket, the registry entry, the lease and the engine request. Before, each such failure
leaked its ticket, so a few Redis blips filled ``--max-waiting`` and every later request got a 429.
The in-process gateway in front of a null-runner engine; the store's save fails as Redis down does."""

from __future__ import annotations

import time

from agentgate.gateway.config.settings import Settings
from agentgate.gateway.responses_api.store import ResponseStore
from agentgate.gateway.state.redis_state import RedisUnavailableError
from tests.support.inprocess import InProcessGateway


def test_a_background_response_whose_first_save_fails_leaks_nothing(monkeypatch):
    async def fails(self, stored):
        raise RedisUnavailableError("Redis is unreachable (storing a response)")

    with InProcessGateway(Settings(max_waiting=2), redis=True) as gw:
        monkeypatch.setattr(ResponseStore, "save", fails)
        body = {"input": "hi", "max_output_tokens": 400, "background": True, "ignore_eos": True}
        for _ in range(4):  # more than --max-waiting: a leaked ticket each time would end in 429s
            r = gw.client.post("/v1/responses", json=body)
            assert r.status_code == 503, r.text
        monkeypatch.undo()
        deadline = time.monotonic() + 5
        while gw.state.registry.num_requests and time.monotonic() < deadline:
            time.sleep(0.02)
        assert gw.state.registry.num_requests == 0, "a failed save left its request registered"
        assert gw.state.dispatcher.admission.waiting == 0, "a failed save kept its admission ticket"
        assert all(engine.num_streams == 0 for engine in gw.state.pool.engines)
        r = gw.client.post(
            "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        )
        assert r.status_code == 200, r.text
