"""A gateway in this process in front of an engine whose replies are scripted.

:class:`ScriptedRunner` is the null runner (no model, instant steps, the same
per-request bookkeeping) with one difference: what it "samples" is the script
given for the request, token by token, whatever the grammar bitmask says (a
script that a grammar forbids ends its request with an error, as the engine
would). So a stream through :func:`scripted_gateway` is the same bytes every
time: the SSE-bytes golden test (``tests/gateway/test_stream_bytes.py``) and the
walk of one request (``tests/gateway/test_request_walk.py``) read it.

Its engine is a real ``EngineCore`` served by ``EngineServer`` from a thread, as
in :mod:`tests.support.inprocess`, so the gateway talks to it over the real ZMQ
boundary; its config names the default model, whose tokenizer compiles the
grammars of ``tool_choice`` required.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Iterator

import anyio.from_thread
import httpx
import torch
import uvicorn

from agentgate.engine.config import EngineConfig
from agentgate.engine.core import EngineCore
from agentgate.engine.front.addresses import private_address
from agentgate.engine.front.process import EngineServer
from agentgate.engine.model_files.model_path import default_model_path, model_display_name
from agentgate.engine.runner.null import NullRunner, _State
from agentgate.engine.sampling_params import SamplingParams
from agentgate.engine.scheduling.scheduler_output import ModelRunnerOutput, NewRequestData, SchedulerOutput
from agentgate.gateway.config.settings import Settings
from agentgate.gateway.http.app import EngineTarget, create_app
from agentgate.gateway.observation.tracing import Tracer
from agentgate.gateway.state.embedded_redis import EmbeddedRedis
from tests.support.inprocess import _PortalTransport, _WatchedThread, _WithLifespanState

# (engine request id, its sampling parameters: a script may answer as a model under the request's
# grammar would) -> the tokens it replies, its end token last
Script = Callable[[str, SamplingParams], list[int]]
# (the request's prompt token ids, its sampling parameters) -> the same: for clients whose request
# ids a test does not choose (the agent CLIs), the reply follows what the conversation holds
PromptScript = Callable[[list[int], SamplingParams], list[int]]


class ScriptedRunner(NullRunner):
    """The null runner, replying each request's script (see the module docstring)."""

    def __init__(self, script: Script | None, prompt_script: PromptScript | None = None, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self.script = script
        self.prompt_script = prompt_script
        self._replies: dict[str, list[int]] = {}

    def _reply(self, new: NewRequestData) -> list[int]:
        if self.prompt_script is not None:
            return self.prompt_script(new.token_ids[: new.num_prompt_tokens], new.params)
        assert self.script is not None, "a scripted runner needs a script or a prompt script"
        return self.script(new.request_id, new.params)

    def execute(self, step: SchedulerOutput) -> ModelRunnerOutput:
        self.release(step.released_request_ids)
        for new in step.new_requests:
            self._replies[new.request_id] = self._reply(new)
            self.states[new.request_id] = _State(new, list(new.token_ids), len(new.block_ids), new.num_computed_tokens)
        ids, tokens = [], []
        for row in step.scheduled:
            state = self.states[row.request_id]
            state.num_computed += row.num_tokens
            if row.samples:
                reply = self._replies[row.request_id]
                token = reply[min(len(state.token_ids) - state.new.num_prompt_tokens, len(reply) - 1)]
                state.token_ids.append(token)
                ids.append(row.request_id)
                tokens.append(token)
        self.num_steps += 1
        return ModelRunnerOutput(ids, tokens, None)

    def complete(
        self, handle: ModelRunnerOutput, bitmask: torch.Tensor, redirect: object = None, unnarrowed: object = None
    ) -> None:
        """A constrained step: the script asks neither the grammar nor a thinking redirect. The script
        is the model's best token: where a forced-call budget narrowed the mask (``unnarrowed``) and
        the narrowed mask forbids it, the budget removed it (``ModelRunnerOutput.overridden_rows``)."""
        if unnarrowed is not None:
            handle.overridden_rows = {
                row
                for row, token in enumerate(handle.sampled_token_ids)
                if not (int(bitmask[row, token >> 5]) >> (token & 31)) & 1
            }

    def release(self, request_ids: list[str]) -> None:
        super().release(request_ids)
        for request_id in request_ids:
            self._replies.pop(request_id, None)


SCRIPTED_ENGINE = EngineConfig(
    model=str(default_model_path()),
    runner="sync",  # never built (the core is handed the scripted runner); not "null", so grammars compile
    speculative="off",
    max_num_seqs=64,
    max_model_len=1024,
    num_kv_blocks=4096,
)


@dataclasses.dataclass
class ScriptedGateway:
    client: httpx.Client
    state: object  # the lifespan's GatewayState
    portal: anyio.from_thread.BlockingPortal
    asgi: httpx.ASGITransport  # the client's, on the portal's loop: its ``app`` may be wrapped (tests.support.walk)


@contextlib.contextmanager
def scripted_gateway(
    settings: Settings,
    script: Script | None,
    *,
    prompt_script: PromptScript | None = None,
    engine: EngineConfig = SCRIPTED_ENGINE,
    redis: bool = True,
    tracer: Tracer | None = None,
) -> Iterator[ScriptedGateway]:
    """``create_app`` in this process over a :class:`ScriptedRunner` engine (and an embedded Redis);
    ``prompt_script`` replies by the prompt instead of ``script``; ``engine``: the engine's config
    (a longer ``max_model_len`` for long prompts); ``tracer``: the app's (``gateway.observation.tracing``)."""
    with contextlib.ExitStack() as stack:
        runner = ScriptedRunner(
            script, prompt_script, num_blocks=engine.num_kv_blocks, max_model_len=engine.max_model_len
        )
        address = private_address()
        server = EngineServer(EngineCore(engine, runner), address, model_display_name(engine.model))
        thread = threading.Thread(target=server.serve_forever, name="scripted-engine", daemon=True)
        thread.start()

        def stop() -> None:
            server.stopping = True
            thread.join(10)

        stack.callback(stop)
        if redis:
            embedded = EmbeddedRedis().start()
            stack.callback(embedded.stop)
            settings = dataclasses.replace(settings, redis_url=embedded.url)
        portal = stack.enter_context(anyio.from_thread.start_blocking_portal())
        target = EngineTarget(address, _WatchedThread(thread))  # type: ignore[arg-type]
        app = create_app(settings, engines=[target], tracer=tracer)
        state = stack.enter_context(portal.wrap_async_context_manager(app.router.lifespan_context(app)))
        transport = _PortalTransport(portal, _WithLifespanState(app, state))
        client = stack.enter_context(httpx.Client(transport=transport, base_url="http://gateway", timeout=30))
        yield ScriptedGateway(client, state["gateway"], portal, transport.asgi)


@contextlib.contextmanager
def served_over_http(gateway: ScriptedGateway) -> Iterator[str]:
    """The scripted gateway also on a real socket (its URL): uvicorn serving on the portal's event
    loop, where the gateway's state lives, so a real client (the openai SDK) streams from it."""
    config = uvicorn.Config(gateway.asgi.app, host="127.0.0.1", port=0, lifespan="off", log_level="warning")
    server = uvicorn.Server(config)
    done = gateway.portal.start_task_soon(server.serve)
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or done.done():
            raise RuntimeError("the scripted gateway's HTTP server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}"
    finally:
        server.should_exit = True
        done.result(10)
