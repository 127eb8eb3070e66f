"""Servers of their own: backpressure (429), an engine that keeps dying (the
gateway exits non-zero), and shutdown on SIGTERM / SIGINT that leaves no
engine process behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import anyio
import httpx
import pytest

from tests.support.http import StreamRecorder, chat_body, check_chat_stream, parse_sse, wait_for
from tests.support.servers import REPO, alive, start_server

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def fragile(tmp_path_factory):
    # Formatted by hand: each flag beside its value, as on a command line.
    server = start_server(
        tmp_path_factory.mktemp("fragile"),
        "--runner", "null", "--null-step-seconds", "0.004", "--max-waiting", "2", "--max-model-len", "1024",
        "--engine-max-restarts", "0",
    )  # fmt: skip
    yield server
    server.stop()


@pytest.mark.anyio
async def test_a_full_waiting_queue_answers_429_with_retry_after(fragile):
    url = f"{fragile.url}/v1/chat/completions"
    async with httpx.AsyncClient(timeout=30) as client:
        assert (await client.post(f"{fragile.url}/pause", params={"mode": "keep"})).status_code == 200
        waiting = [StreamRecorder(), StreamRecorder()]
        async with anyio.create_task_group() as tasks:
            for recorder in waiting:
                tasks.start_soon(recorder.run, client, url, chat_body(4), {})
            with anyio.fail_after(5):
                while any(r.status is None for r in waiting):
                    await anyio.sleep(0.01)
            r = await client.post(url, json=chat_body(4, stream=False))
            assert r.status_code == 429 and r.headers["retry-after"] == "1"
            error = r.json()["error"]
            assert error["type"] == "rate_limit_error" and error["code"] == "queue_full"
            await client.post(f"{fragile.url}/resume")
        for recorder in waiting:
            assert check_chat_stream(recorder.payloads())["finish"] == {0: "length"}
        assert (await client.post(url, json=chat_body(4, stream=False))).status_code == 200


@pytest.mark.anyio
async def test_an_engine_that_dies_past_its_restart_budget_ends_streams_and_the_gateway_exits_non_zero(fragile):
    """--engine-max-restarts 0: the first death is one too many. Open streams end with an error
    event, the death is logged at ERROR with the signal, and the gateway exits 1 (an outer
    supervisor takes over) leaving no process behind. (Restarts: tests/reliability.)"""
    url = f"{fragile.url}/v1/chat/completions"
    [engine] = fragile.engine_pids()
    tree = fragile.all_descendants()
    recorder = StreamRecorder()
    async with httpx.AsyncClient(timeout=30) as client, anyio.create_task_group() as tasks:
        tasks.start_soon(recorder.run, client, url, chat_body(900), {})
        with anyio.fail_after(5):
            while recorder.events < 3:
                await anyio.sleep(0.01)
        os.kill(engine, signal.SIGKILL)
    payloads = parse_sse(recorder.raw)
    assert payloads[-1] == "[DONE]" and '"error"' in payloads[-2] and "engine" in payloads[-2]
    code = await anyio.to_thread.run_sync(fragile.process.wait, 30)
    assert code == 1
    assert "ERROR engine 0 at" in fragile.log() and "killed by SIGKILL" in fragile.log()
    wait_for(lambda: not any(alive(p) for p in tree), timeout=10, message="every child to exit")


@pytest.mark.anyio
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_shutdown_signal_drains_streams_and_stops_the_engine(tmp_path, sig):
    """A signal: requests that finish within --drain-seconds finish; the rest
    are aborted and end cleanly ([DONE]); the engine process goes too."""
    server = await anyio.to_thread.run_sync(
        lambda: start_server(
            tmp_path,
            "--runner",
            "null",
            "--null-step-seconds",
            "0.004",
            "--max-model-len",
            "1024",
            "--drain-seconds",
            "0.6",
        )
    )
    try:
        [engine] = server.engine_pids()
        tree = server.all_descendants()
        assert alive(engine)
        url = f"{server.url}/v1/chat/completions"
        short, long = StreamRecorder(), StreamRecorder()
        async with httpx.AsyncClient(timeout=30) as client, anyio.create_task_group() as tasks:
            tasks.start_soon(short.run, client, url, chat_body(60), {})
            tasks.start_soon(long.run, client, url, chat_body(900), {})
            with anyio.fail_after(10):
                while short.events < 2 or long.events < 2:
                    await anyio.sleep(0.01)
            server.process.send_signal(sig)
        assert check_chat_stream(short.payloads())["finish"] == {0: "length"}
        assert check_chat_stream(long.payloads())["finish"] == {0: "abort"}
        code = await anyio.to_thread.run_sync(server.process.wait, 20)
        assert code in (0, 130, -sig)
        log = server.log()
        assert "agentgate ready at" in log and "KV cache" in log and "aborting 1 request" in log
        await anyio.to_thread.run_sync(
            lambda: wait_for(lambda: not any(alive(p) for p in tree), timeout=10, message="every child to exit")
        )
    finally:
        if server.process.poll() is None:
            server.kill()


def test_start_up_fails_cleanly_on_a_missing_model(tmp_path):
    process = subprocess.run(
        [
            sys.executable,
            "-m",
            "agentgate.gateway.command.cli",
            "serve",
            "--runner",
            "sync",
            "--model",
            str(tmp_path / "missing.gguf"),
            "--port",
            "0",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert process.returncode != 0
    assert "missing.gguf" in process.stdout + process.stderr
