"""EngineClient: the front end's handle on one engine process (anyio).

One dispatch task reads the engine's socket and fans outputs out to
per-request memory streams; a watcher notices a dead engine and fails every
waiter with EngineDeadError at once. Use it as an async context manager:

    async with EngineClient.spawn(config) as engine:
        async with aclosing(engine.generate(rid, ids, params)) as outputs:
            async for out in outputs: ...

:meth:`EngineClient.add` submits a request and returns its :class:`RequestStream` at once (the gateway
submits before its route returns, and reads the stream later, as vLLM's ``AsyncLLM.add_request`` returns
a collector); :meth:`EngineClient.generate` is that stream read to its end.
"""

from __future__ import annotations

import itertools
import math
import multiprocessing
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing, asynccontextmanager
from typing import Any

import anyio
import msgspec
import zmq
import zmq.asyncio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from agentgate.engine.config import EngineConfig
from agentgate.engine.errors import EngineDeadError, EngineError, InvalidRequestError
from agentgate.engine.front.addresses import private_address, remove_socket_file
from agentgate.engine.front.output_merging import merge_queued
from agentgate.engine.front.protocol import (
    AbortRequests,
    AddRequest,
    CallResult,
    EngineCall,
    EngineCoreOutput,
    EngineInfo,
    EngineOutputs,
    GetStats,
    Health,
    Hello,
    IsPaused,
    LoadLora,
    Pause,
    PauseMode,
    ProgramTag,
    Ready,
    Resume,
    SchedulerStats,
    StartupFailed,
    ThinkingSpec,
    ToolsReturned,
    TurnEnded,
    UnloadLora,
    decode_from_engine,
    encode,
)
from agentgate.engine.front.socket_keys import GatewayKeys, secure_client, uses_curve
from agentgate.engine.front.spawn import start_engine_process, stop_engine_process
from agentgate.engine.sampling_params import SamplingParams

WATCH_INTERVAL_S = 0.05
# An engine we cannot watch as a process is dead after this long without a
# message (it sends a heartbeat every 0.5 s, busy or idle).
HEARTBEAT_TIMEOUT_S = 5.0


class _Call:
    """A call waiting for its result."""

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class EngineClient:
    def __init__(
        self,
        address: str,
        process: multiprocessing.process.BaseProcess | None = None,
        curve: GatewayKeys | None = None,
    ) -> None:
        """``curve``: this gateway's keys, for an engine whose peers authenticate (``engine.front.socket_keys``)."""
        self.address = address
        self.process = process
        self.curve = curve if uses_curve(address) else None
        self.info: EngineInfo | None = None
        self.dead_reason: str | None = None
        self._last_seen = time.monotonic()
        self._context = zmq.asyncio.Context()
        self._socket = self._context.socket(zmq.DEALER)
        self._socket.setsockopt(zmq.IDENTITY, f"fe-{os.getpid()}-{uuid.uuid4().hex[:8]}".encode())
        self._socket.setsockopt(zmq.SNDHWM, 0)
        self._socket.setsockopt(zmq.RCVHWM, 0)
        self._socket.setsockopt(zmq.LINGER, 0)
        if self.curve is not None:
            secure_client(self._socket, self.curve)
        self._socket.connect(address)
        self._streams: dict[str, MemoryObjectSendStream[EngineCoreOutput | BaseException]] = {}
        self._calls: dict[int, _Call] = {}
        self._call_ids = itertools.count()

    # -- lifecycle ------------------------------------------------------------
    @classmethod
    @asynccontextmanager
    async def spawn(
        cls, config: EngineConfig, model_name: str | None = None, startup_timeout: float = 600.0
    ) -> AsyncIterator[EngineClient]:
        """Start an engine process on a private socket and connect to it."""
        address = private_address()
        process = start_engine_process(config, address, model_name)
        try:
            async with cls.connect(address, process=process, startup_timeout=startup_timeout) as client:
                yield client
        finally:
            await anyio.to_thread.run_sync(stop_engine_process, process)
            remove_socket_file(address)

    @classmethod
    @asynccontextmanager
    async def connect(
        cls,
        address: str,
        *,
        process: multiprocessing.process.BaseProcess | None = None,
        startup_timeout: float = 600.0,
        curve: GatewayKeys | None = None,
    ) -> AsyncIterator[EngineClient]:
        """Connect to a running engine at ``address`` and wait until it is ready."""
        client = cls(address, process, curve)
        try:
            await client._handshake(startup_timeout)
            async with anyio.create_task_group() as tasks:
                tasks.start_soon(client._dispatch)
                tasks.start_soon(client._watch_process if process is not None else client._watch_heartbeats)
                try:
                    yield client
                finally:
                    tasks.cancel_scope.cancel()
        finally:
            client._fail_everyone(client.dead_reason or "the engine client was closed")
            client._socket.close(0)
            client._context.term()

    async def _handshake(self, timeout: float) -> None:
        await self._socket.send(encode(Hello(client_name=f"pid{os.getpid()}")))
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if await self._socket.poll(int(WATCH_INTERVAL_S * 1000)):
                message = decode_from_engine(await self._socket.recv())
                if isinstance(message, Ready):
                    self.info = message.info
                    self._last_seen = time.monotonic()
                    return
                if isinstance(message, StartupFailed):
                    raise EngineDeadError(f"the engine failed to start: {message.message}")
            elif self.process is not None and not self.process.is_alive():
                if await self._socket.poll(200):
                    continue  # read its last words first
                raise EngineDeadError(f"the engine process exited during start-up (exit code {self.process.exitcode})")
        # An engine whose peers authenticate says nothing to a peer with the wrong keys (or none).
        keys = "with these CurveZMQ keys" if self.curve is not None else "without CurveZMQ keys (--engine-curve-dir)"
        hint = f", or does not accept this gateway {keys}" if uses_curve(self.address) else ""
        raise EngineDeadError(f"the engine at {self.address} did not become ready within {timeout:.0f} s{hint}")

    @property
    def is_dead(self) -> bool:
        return self.dead_reason is not None

    # -- requests ---------------------------------------------------------------
    def add(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        eos_token_ids: frozenset[int] | list[int] = frozenset(),
        program: ProgramTag | None = None,
        *,
        tenant: str = "",
        cache_salt: str = "",
        thinking: ThinkingSpec | None = None,
        lora: str = "",
    ) -> RequestStream:
        """Submit a request (its ``AddRequest``, whose fields these are, ``thinking`` included, is sent
        now, without waiting: ZMQ queues it) and return the stream of its outputs."""
        self._check_alive()
        if request_id in self._streams:
            raise InvalidRequestError(f"request id {request_id!r} is already in use", "request_id")
        send, receive = anyio.create_memory_object_stream[EngineCoreOutput | BaseException](math.inf)
        self._streams[request_id] = send
        ids, eos = list(prompt_token_ids), sorted(eos_token_ids)
        add = AddRequest(request_id, ids, params, eos, program, tenant, cache_salt, thinking, lora)
        self._socket.send(encode(add))
        return RequestStream(self, request_id, send, receive)

    async def generate(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        eos_token_ids: frozenset[int] | list[int] = frozenset(),
        program: ProgramTag | None = None,
    ) -> AsyncIterator[EngineCoreOutput]:
        """Submit a request and yield its outputs until one carries a finish
        reason. Leaving early (break, cancel, aclose) aborts it in the engine."""
        async with aclosing(self.add(request_id, prompt_token_ids, params, eos_token_ids, program)) as outputs:
            async for out in outputs:
                yield out

    def turn_ended(self, program_id: str, request_id: str, tool_names: list[str], server_hold: float = 0.0) -> None:
        """Tell the engine what a program's finished turn called (none: drop what it keeps for
        it; ``server_hold`` > 0: the server runs them, for at most that many seconds). Sent without
        waiting (ZMQ queues it), so a request's synchronous close can call it."""
        if not self.is_dead:
            self._socket.send(encode(TurnEnded(program_id, request_id, list(tool_names), server_hold)))

    def tools_returned(self, program_id: str, request_id: str) -> None:
        """Tell the engine the server-run tools of a turn returned and no next round follows."""
        if not self.is_dead:
            self._socket.send(encode(ToolsReturned(program_id, request_id)))

    async def abort(self, request_ids: list[str]) -> None:
        self._check_alive()
        await self._send(AbortRequests(list(request_ids)))

    async def abort_all(self) -> None:
        self._check_alive()
        await self._send(AbortRequests([], all_requests=True))

    @property
    def num_streams(self) -> int:
        """Requests of this client still open."""
        return len(self._streams)

    def owns(self, request_id: str) -> bool:
        return request_id in self._streams

    def forget(self, request_id: str) -> None:
        """Stop routing ``request_id``'s outputs (its stream closed)."""
        self._streams.pop(request_id, None)

    # -- calls ------------------------------------------------------------------
    async def _call(self, make: Callable[[int], EngineCall]) -> Any:
        """Send the call ``make(call_id)`` and wait for its result's value."""
        self._check_alive()
        call_id = next(self._call_ids)
        pending = self._calls[call_id] = _Call()
        try:
            await self._send(make(call_id))
            await pending.done.wait()
        finally:
            self._calls.pop(call_id, None)
        if pending.error is not None:
            raise pending.error
        return pending.result

    async def pause(self, mode: PauseMode = "abort") -> None:
        await self._call(lambda call_id: Pause(call_id, mode))

    async def resume(self) -> None:
        await self._call(Resume)

    async def is_paused(self) -> bool:
        return bool(await self._call(IsPaused))

    async def stats(self) -> SchedulerStats:
        return await self._call(GetStats)

    async def health(self) -> bool:
        return bool(await self._call(Health))

    async def load_lora(self, name: str, path: str) -> None:
        """Load a LoRA adapter in the engine (EngineError naming what it refuses)."""
        await self._call(lambda call_id: LoadLora(call_id, name, path))

    async def unload_lora(self, name: str) -> None:
        await self._call(lambda call_id: UnloadLora(call_id, name))

    # -- internals -------------------------------------------------------------
    def _check_alive(self) -> None:
        if self.dead_reason is not None:
            raise EngineDeadError(self.dead_reason)

    async def _send(self, message: msgspec.Struct) -> None:
        await self._socket.send(encode(message))

    async def _dispatch(self) -> None:
        while True:
            message = decode_from_engine(await self._socket.recv())
            self._last_seen = time.monotonic()
            if isinstance(message, EngineOutputs):
                for out in message.outputs:
                    stream = self._streams.get(out.request_id)
                    if stream is not None:
                        stream.send_nowait(out)
            elif isinstance(message, CallResult):
                pending = self._calls.get(message.call_id)
                if pending is not None:
                    if message.error is not None:
                        pending.error = EngineError(message.error)
                    pending.result = message.value
                    pending.done.set()

    async def _watch_process(self) -> None:
        while self.process.is_alive():
            await anyio.sleep(WATCH_INTERVAL_S)
        self._fail_everyone(f"the engine process died (exit code {self.process.exitcode})")

    async def _watch_heartbeats(self) -> None:
        while time.monotonic() - self._last_seen < HEARTBEAT_TIMEOUT_S:
            await anyio.sleep(WATCH_INTERVAL_S * 4)
        self._fail_everyone(
            f"the engine at {self.address} stopped answering (no heartbeat for {HEARTBEAT_TIMEOUT_S:.0f} s)"
        )

    def _fail_everyone(self, reason: str) -> None:
        if self.dead_reason is None:
            self.dead_reason = reason
        error = EngineDeadError(self.dead_reason)
        for stream in list(self._streams.values()):
            try:
                stream.send_nowait(error)
            except (anyio.ClosedResourceError, anyio.BrokenResourceError):
                pass
        for pending in list(self._calls.values()):
            pending.error = error
            pending.done.set()


class RequestStream:
    """One engine request's outputs, an async iterator that ends after the output carrying a
    finish reason (an engine error is raised: InvalidRequestError for what the request asked,
    EngineError otherwise; EngineDeadError when the engine died). :meth:`aclose` ends it: a
    request not finished yet is aborted in the engine (shielded from cancellation)."""

    __slots__ = ("request_id", "_client", "_send", "_receive", "_held", "_finished", "_closed")

    def __init__(
        self,
        client: EngineClient,
        request_id: str,
        send: MemoryObjectSendStream[EngineCoreOutput | BaseException],
        receive: MemoryObjectReceiveStream[EngineCoreOutput | BaseException],
    ) -> None:
        self.request_id = request_id
        self._client = client
        self._send = send
        self._receive = receive
        self._held: EngineCoreOutput | BaseException | None = None  # taken from the queue, not returned yet
        self._finished = False
        self._closed = False

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> EngineCoreOutput:
        """The next output; a consumer that fell behind gets what queued up merged into one."""
        if self._finished or self._closed:
            raise StopAsyncIteration
        try:
            item, self._held = self._held if self._held is not None else await self._receive.receive(), None
        except anyio.EndOfStream:
            raise StopAsyncIteration from None
        if isinstance(item, BaseException):
            await self.aclose()
            raise item
        if item.finish_reason == "error" and item.error:
            self._finished = True
            await self.aclose()
            raise InvalidRequestError(item.error) if item.invalid else EngineError(item.error)
        item, self._held = merge_queued(item, self._receive)
        if item.finish_reason is not None:
            self._finished = True
            await self.aclose()
        return item

    async def aclose(self) -> None:
        """Stop reading: the request is forgotten here and, unless it finished, aborted in the engine."""
        if self._closed:
            return
        self._closed = True
        client = self._client
        client.forget(self.request_id)
        self._send.close()
        self._receive.close()
        if not self._finished and not client.is_dead:
            with anyio.CancelScope(shield=True):
                await client.abort([self.request_id])
