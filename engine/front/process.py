"""The engine in its own process: a ZMQ ROUTER socket in front of EngineCore.

Front ends connect DEALER sockets, say Hello and get Ready (model info, KV
capacity) once the model is loaded, or StartupFailed. Each request's outputs
go back to the front end that sent it; an abort from any front end reaches
every request. The loop never dies from a request: a failing step ends the
requests it held with finish reason "error" and the engine carries on.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import traceback
from collections import defaultdict
from typing import Any, Protocol

import zmq

from agentgate.engine.config import EngineConfig
from agentgate.engine.core import COMPILE_POLL_S, EngineCore
from agentgate.engine.errors import EngineError
from agentgate.engine.front.addresses import remove_socket_file
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
    Heartbeat,
    Hello,
    IsPaused,
    LoadLora,
    Pause,
    Ready,
    Resume,
    StartupFailed,
    ToolsReturned,
    TurnEnded,
    UnloadLora,
    decode_to_engine,
    encode,
)
from agentgate.engine.front.socket_keys import EngineKeys, secure_server, uses_curve

log = logging.getLogger("agentgate.engine")

DRAINING = "the engine is draining (shutting down): send the request to another engine"
# A registered engine's drain first serves new requests this long: the gateways read the registry
# every second (gateway.engines.discovery.POLL_S), so one may route here until it has read "draining".
DRAIN_NOTICE_S = 2.0
IDLE_POLL_MS = 100
HEARTBEAT_INTERVAL_S = 0.5
# prctl(PR_SET_PDEATHSIG): the signal Linux sends us when our parent dies.
_PR_SET_PDEATHSIG = 1


class Lifecycle(Protocol):
    """Who hears of the engine's life (``agentgate engine`` announces it in Redis:
    ``gateway.engines.registry``): ready to serve, draining, stopped."""

    def ready(self, info: EngineInfo, max_num_seqs: int) -> None: ...

    def draining(self) -> None: ...

    def stopped(self) -> None: ...


class EngineServer:
    """Serves one EngineCore on ``address`` until stopped.

    Draining (:meth:`drain`, on SIGTERM when ``drain_seconds`` > 0): after a notice period
    in which new requests are still served, new requests are refused with an error naming the
    drain; those in flight run until they finish or the deadline, when they are aborted (finish
    reason "abort"); then the loop ends."""

    def __init__(
        self,
        core: EngineCore | None,
        address: str,
        model_name: str,
        startup_error: str | None = None,
        *,
        curve: EngineKeys | None = None,
    ):
        """``curve``: the keys of an engine whose peers authenticate (``engine.front.socket_keys``; not on ``ipc://``)."""
        self.core = core
        self.model_name = model_name
        self.startup_error = startup_error
        self.context = zmq.Context()
        self.socket = self.context.socket(zmq.ROUTER)
        self.socket.setsockopt(zmq.SNDHWM, 0)
        self.socket.setsockopt(zmq.RCVHWM, 0)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.setsockopt(zmq.ROUTER_MANDATORY, 0)
        self._authenticator = secure_server(self.socket, curve) if curve is not None and uses_curve(address) else None
        self.socket.bind(address)
        self.address = address
        self.stopping = False
        self._owners: dict[str, bytes] = {}
        self._pending_wait: list[tuple[bytes, int]] = []
        self._front_ends: set[bytes] = set()
        # The socket is used by this loop and by the heartbeat thread, one at a time: a step can
        # outlast the front ends' heartbeat timeout (a long prefill on a busy CPU), and an engine busy
        # stepping is alive, not dead.
        self._socket_lock = threading.Lock()
        self._stop_beating = threading.Event()
        self.drain_deadline: float | None = None  # time.monotonic() by which a drain aborts what is left
        self.drain_refuses_at: float | None = None  # time.monotonic() from which a drain refuses new requests

    def drain(self, seconds: float, notice: float = 0.0) -> None:
        """Take no new requests after ``notice`` seconds (those that come sooner are served, for
        front ends that have not heard of the drain yet); stop once those in flight are done and
        the notice is over, aborting them after ``seconds``."""
        if self.drain_deadline is None:
            now = time.monotonic()
            self.drain_deadline = now + seconds
            self.drain_refuses_at = now + min(notice, seconds)
            log.info(
                "draining: new requests refused in %.1f s; %d in flight get %.0f s",
                min(notice, seconds),
                len(self._owners),
                seconds,
            )

    def _drained(self) -> bool:
        """During a drain: whether the loop may end (nothing in flight after the notice, or the deadline passed)."""
        if not self._owners:
            return time.monotonic() >= self.drain_refuses_at
        if time.monotonic() < self.drain_deadline:
            return False
        log.warning("drain deadline: aborting %d request(s) still in flight", len(self._owners))
        self._send_outputs(self.core.abort_requests(None))
        return True

    def serve_forever(self) -> None:
        beats = threading.Thread(target=self._beat, name="engine-heartbeat", daemon=True)
        beats.start()
        try:
            while not self.stopping:
                if self.drain_deadline is not None and (self.core is None or self._drained()):
                    break
                self._drain_inbox(self._poll_ms())
                if self.core is None:
                    continue
                if self.core.has_work:
                    self._send_outputs(self._safe_step())
                self._answer_pause_waiters()
        finally:
            self._stop_beating.set()
            beats.join()
            self.socket.close(linger=1000)
            if self._authenticator is not None:
                self._authenticator.stop()
            self.context.term()
            remove_socket_file(self.address)
            if self.core is not None:
                self.core.shutdown()

    def _poll_ms(self) -> int:
        """How long the loop may wait for messages before its next step."""
        core = self.core
        if core is None or not core.has_work:
            return IDLE_POLL_MS
        return round(COMPILE_POLL_S * 1000) if core.only_compiling else 0

    # -- inbox -------------------------------------------------------------
    def _drain_inbox(self, timeout_ms: int) -> None:
        with self._socket_lock:  # the heartbeat thread waits out the poll: at most IDLE_POLL_MS
            if not self.socket.poll(timeout_ms):
                return
        while True:
            try:
                with self._socket_lock:
                    identity, payload = self.socket.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            try:
                message = decode_to_engine(payload)
            except Exception:
                log.warning("dropping a malformed message from %r", identity)
                continue
            self._handle(identity, message)

    def _handle(self, identity: bytes, message: Any) -> None:
        if isinstance(message, Hello):
            self._front_ends.add(identity)
            if self.core is None:
                self._send(identity, StartupFailed(self.startup_error or "engine failed to start"))
                self.stopping = True
            else:
                self._send(identity, Ready(self.core.info(self.model_name)))
        elif self.core is None:
            return
        elif isinstance(message, AddRequest):
            self._add(identity, message)
        elif isinstance(message, TurnEnded):
            self.core.turn_ended(message.program_id, message.request_id, message.tool_names, message.server_hold)
        elif isinstance(message, ToolsReturned):
            self.core.tools_returned(message.program_id, message.request_id)
        elif isinstance(message, AbortRequests):
            ids = None if message.all_requests else message.request_ids
            self._send_outputs(self.core.abort_requests(ids))
        else:
            self._call(identity, message)

    def _add(self, identity: bytes, message: AddRequest) -> None:
        if self.drain_refuses_at is not None and time.monotonic() >= self.drain_refuses_at:
            refused = EngineCoreOutput(message.request_id, [], "error", error=DRAINING)
            self._send(identity, EngineOutputs([refused]))
            return
        try:
            self.core.add_request(
                message.request_id,
                message.prompt_token_ids,
                message.params,
                frozenset(message.eos_token_ids),
                program=message.program,
                tenant=message.tenant,
                cache_salt=message.cache_salt,
                thinking=message.thinking,
                lora=message.lora,
            )
        except EngineError as exc:
            failed = EngineCoreOutput(message.request_id, [], "error", error=str(exc), invalid=True)
            self._send(identity, EngineOutputs([failed]))
            return
        self._owners[message.request_id] = identity

    def _call(self, identity: bytes, call: EngineCall) -> None:
        core = self.core
        value: bool | Any = True
        try:
            match call:
                case Pause(mode=mode):
                    self._send_outputs(core.pause(mode))
                    if mode == "wait" and not core.is_drained:
                        self._pending_wait.append((identity, call.call_id))  # answered by _answer_pause_waiters
                        return
                case Resume():
                    core.resume()
                case IsPaused():
                    value = core.is_paused
                case GetStats():
                    value = core.stats()
                case Health():
                    pass
                case LoadLora(name=name, path=path):
                    core.load_lora(name, path)
                case UnloadLora(name=name):
                    core.unload_lora(name)
        except EngineError as exc:
            self._send(identity, CallResult(call.call_id, error=str(exc)))
            return
        self._send(identity, CallResult(call.call_id, value))

    def _answer_pause_waiters(self) -> None:
        if self._pending_wait and self.core.is_drained:
            for identity, call_id in self._pending_wait:
                self._send(identity, CallResult(call_id, True))
            self._pending_wait.clear()

    def _beat(self) -> None:
        """The heartbeat thread: every front end hears from the engine every HEARTBEAT_INTERVAL_S,
        busy or idle, however long a step takes, until the loop ends."""
        beat = Heartbeat()
        while not self._stop_beating.wait(HEARTBEAT_INTERVAL_S):
            for identity in tuple(self._front_ends):  # one C-level copy: the loop may add one meanwhile
                self._send(identity, beat)

    # -- outbox ------------------------------------------------------------
    def _safe_step(self) -> list[EngineCoreOutput]:
        try:
            return self.core.step()
        except Exception:
            message = traceback.format_exc()
            log.error("engine step failed; failing the requests it held:\n%s", message)
            return self.core.fail_all(message.strip().splitlines()[-1])

    def _send_outputs(self, outputs: list[EngineCoreOutput]) -> None:
        if not outputs:
            return
        by_owner: dict[bytes, list[EngineCoreOutput]] = defaultdict(list)
        for out in outputs:
            owner = self._owners.get(out.request_id)
            if owner is None:
                continue
            by_owner[owner].append(out)
            if out.finish_reason is not None:
                del self._owners[out.request_id]
        for owner, batch in by_owner.items():
            self._send(owner, EngineOutputs(batch))

    def _send(self, identity: bytes, message: Any) -> None:
        try:
            with self._socket_lock:
                self.socket.send_multipart([identity, encode(message)], zmq.NOBLOCK)
        except zmq.ZMQError:
            log.warning("could not reach front end %r", identity)


def _exit_with_parent(parent_pid: int) -> None:
    """Have Linux send us SIGTERM when the process that started us dies, so a
    killed gateway leaves no engine behind."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        log.warning("cannot ask to be stopped with the parent process on this platform")
    if os.getppid() != parent_pid:  # it died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def run_engine_process(
    config: EngineConfig,
    address: str,
    model_name: str,
    parent_pid: int | None = None,
    *,
    drain_seconds: float = 0.0,
    lifecycle: Lifecycle | None = None,
    curve: EngineKeys | None = None,
) -> None:
    """Entry point of the engine process (spawned, or `agentgate engine`).
    With ``parent_pid``, the engine stops when that process dies. With ``drain_seconds`` > 0, a
    first SIGTERM drains (``EngineServer.drain``) and a second stops at once; ``lifecycle``
    hears of it (and of the engine being ready, and stopped). ``curve``: the keys its peers must
    hold (``engine.front.socket_keys``)."""
    logging.basicConfig(
        level=os.environ.get("AGENTGATE_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s engine %(levelname)s %(message)s",
    )
    if parent_pid is not None:
        _exit_with_parent(parent_pid)
    core, error = None, None
    try:
        core = EngineCore(config)
    except Exception as exc:  # reported to every front end that says Hello
        error = f"{type(exc).__name__}: {exc}"
        log.error("engine failed to start: %s", error)
    server = EngineServer(core, address, model_name, error, curve=curve)

    def stop(signum: int, frame: Any) -> None:
        server.stopping = True

    def drain(signum: int, frame: Any) -> None:
        if server.drain_deadline is not None or server.core is None:
            server.stopping = True  # a second signal: stop now
            return
        server.drain(drain_seconds, notice=DRAIN_NOTICE_S if lifecycle is not None else 0.0)
        if lifecycle is not None:
            lifecycle.draining()

    signal.signal(signal.SIGTERM, drain if drain_seconds > 0 else stop)
    # An engine started by a gateway shares its terminal's process group: a
    # Ctrl-C is the gateway's to handle (it drains, then stops the engine).
    signal.signal(signal.SIGINT, signal.SIG_IGN if parent_pid is not None else stop)
    if core is not None:
        info = core.info(model_name)
        log.info(
            "ready on %s: %s (%s, %s, %s), quantization %s (%s; %.1f MB of weights read per step), "
            "KV cache %d blocks x %d = %d tokens, max_model_len %d, runner %s",
            address,
            model_name,
            info.architecture,
            info.device,
            info.dtype,
            info.quantization,
            info.weights or "no model",
            info.weight_bytes_per_step / 1e6,
            info.num_kv_blocks,
            info.block_size,
            info.kv_capacity_tokens,
            info.max_model_len,
            info.runner,
        )
        if lifecycle is not None:
            lifecycle.ready(info, config.max_num_seqs)
    try:
        server.serve_forever()
    finally:
        if lifecycle is not None:
            lifecycle.stopped()
