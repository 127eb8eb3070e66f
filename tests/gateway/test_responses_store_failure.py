"""Issue 28: a Responses stream whose store (Redis) fails at its end tells the client why: an
``error`` event, then ``response.failed``, never a stream that just stops. The in-process gateway
in front of a real null-runner engine and a real embedded redis-server, stopped mid-stream."""

from __future__ import annotations

import json
import threading
import time

from agentgate.gateway.config.settings import Settings
from agentgate.gateway.state.embedded_redis import EmbeddedRedis
from tests.support.inprocess import InProcessGateway


def test_a_store_failure_at_the_end_of_a_stream_sends_error_then_response_failed():
    redis = EmbeddedRedis().start()
    try:
        with InProcessGateway(Settings(redis_url=redis.url)) as gw:
            body = {"input": "Hi", "max_output_tokens": 400, "stream": True, "store": True}
            stopper = threading.Timer(0.3, redis.stop)  # the stream runs ~1.6 s on the null runner
            started = time.monotonic()
            stopper.start()
            r = gw.client.post("/v1/responses", json=body, headers={"X-Request-Id": "store-fails"})
            stopper.join()
            assert time.monotonic() - started > 0.3, "SET-UP: the stream ended before Redis stopped"
    finally:
        redis.stop()
    assert r.status_code == 200
    kinds = [line.split(": ", 1)[1] for line in r.text.splitlines() if line.startswith("event: ")]
    assert kinds[0] == "response.created" and kinds[-2:] == ["error", "response.failed"], kinds[-4:]
    error = r.text.split("event: error\ndata: ", 1)[1].split("\n", 1)[0]
    assert "Redis" in json.loads(error)["message"], error
