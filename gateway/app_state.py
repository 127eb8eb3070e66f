"""What every route needs: a frozen record of the gateway's services, built by
the lifespan once the engines are connected (``gateway.http.app``) and read by
routes as ``request.state.gateway``. Nothing here acts: each service does.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agentgate.engine.tokenizer import Tokenizer
from agentgate.gateway.admission import Admission
from agentgate.gateway.engines import EnginePool
from agentgate.gateway.errors import NotFoundError
from agentgate.gateway.metrics import Metrics
from agentgate.gateway.output_budget import OutputBudget
from agentgate.gateway.registry import RequestRegistry
from agentgate.gateway.sampling_defaults import OPENAI_DEFAULTS, SamplingDefaults
from agentgate.gateway.settings import Settings

if TYPE_CHECKING:
    from agentgate.gateway.auth import KeyChecker
    from agentgate.gateway.cluster import Cluster
    from agentgate.gateway.discovery import EngineDiscovery
    from agentgate.gateway.engine_supervisor import EngineSupervisor
    from agentgate.gateway.program_store import ProgramStore
    from agentgate.gateway.ratelimit import RateLimiter
    from agentgate.gateway.redis_state import SharedState
    from agentgate.gateway.responses_api.store import ResponseStore
    from agentgate.gateway.sessions import SessionStore
    from agentgate.gateway.turn_tokens import TurnTokens


@dataclass(frozen=True)
class ServedModel:
    """The model behind the engines, as requests see it: its names, its tokenizer, its limits."""

    names: tuple[str, ...]
    root: str  # the name of the file (or directory) it was loaded from, never its path: /v1/models shows it
    tokenizer: Tokenizer
    max_model_len: int
    vocab_size: int
    tool_call_parser: str | None = None  # --tool-call-parser (None: chosen from the chat template)
    max_forced_tool_calls: int = 4  # --max-forced-tool-calls
    sampling: SamplingDefaults = OPENAI_DEFAULTS  # for the fields a request leaves unset
    budget: OutputBudget = OutputBudget()  # --max-tokens-default, --max-tokens-cap
    created: int = field(default_factory=lambda: int(time.time()))

    @property
    def name(self) -> str:
        return self.names[0]

    def check(self, model: str | None) -> None:
        """404 for a model this gateway does not serve (None means the served one)."""
        if model is not None and model not in self.names:
            raise NotFoundError(
                f"The model `{model}` does not exist; this server serves {', '.join(self.names)}.",
                param="model",
                code="model_not_found",
            )


@dataclass(frozen=True)
class GatewayState:
    settings: Settings
    model: ServedModel
    pool: EnginePool
    registry: RequestRegistry
    admission: Admission
    metrics: Metrics
    cluster: Cluster
    keys: KeyChecker
    supervisor: EngineSupervisor | EngineDiscovery | None = None  # None: engines not supervised (in-process tests)
    replica_id: str = ""
    shared: SharedState | None = None  # None: no Redis configured (sessions and cross-replica routes answer 503)
    sessions: SessionStore | None = None
    programs: ProgramStore | None = None  # agent programs' last turns (None: no Redis)
    limiter: RateLimiter | None = None  # None: no rate limit configured
    responses: ResponseStore | None = None  # stored /v1/responses (None: no Redis)
    turn_tokens: TurnTokens | None = None  # programs' last turns as tokens (gateway.turn_tokens); None: not kept
