"""What every route needs: a frozen record of the gateway's services, built by
the lifespan once the engines are connected (``gateway.http.app``) and read by
routes as ``request.state.gateway``. Nothing here acts: each service does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from agentgate.gateway.chat import ChatCore
from agentgate.gateway.config.settings import Settings
from agentgate.gateway.dispatch import Dispatcher
from agentgate.gateway.engines.pool import EnginePool
from agentgate.gateway.mcp import McpHost
from agentgate.gateway.observation.metrics import Metrics
from agentgate.gateway.served_model import ServedModel
from agentgate.gateway.state.requests_in_flight import RequestRegistry
from agentgate.gateway.state.sealing import Sealer

if TYPE_CHECKING:
    from agentgate.gateway.admission.rate_limits import RateLimiter
    from agentgate.gateway.engines.discovery import EngineDiscovery
    from agentgate.gateway.engines.supervisor import EngineSupervisor
    from agentgate.gateway.programs.turn_tokens import TurnTokens
    from agentgate.gateway.responses_api.store import ResponseStore
    from agentgate.gateway.state.auth import KeyChecker
    from agentgate.gateway.state.cluster import Cluster
    from agentgate.gateway.state.redis_state import SharedState
    from agentgate.gateway.state.sessions import SessionStore


@dataclass(frozen=True)
class GatewayState:
    """What the routes read. Generation routes hand what is below them the services they need
    (:attr:`chat`: the model, the dispatcher, the programs' last turns and the sealer; the MCP host; the
    response store), never this whole record."""

    settings: Settings
    model: ServedModel
    dispatcher: Dispatcher  # admission, routing, registration, submission (gateway.dispatch)
    cluster: Cluster  # operator calls across replicas
    keys: KeyChecker
    supervisor: EngineSupervisor | EngineDiscovery | None = None  # None: engines not supervised (in-process tests)
    replica_id: str = ""
    shared: SharedState | None = None  # None: no Redis configured (sessions and cross-replica routes answer 503)
    responses: ResponseStore | None = None  # stored /v1/responses (None: no Redis)
    turn_tokens: TurnTokens | None = None  # programs' last turns as tokens; None: not kept
    mcp: McpHost = field(default_factory=lambda: McpHost.from_settings(Settings()))  # hosted MCP tools: none allowed
    sealer: Sealer = field(default_factory=Sealer.random)  # seals what clients send back (gateway.state.sealing)

    @property
    def chat(self) -> ChatCore:
        """What a route hands below itself to start chat turns."""
        return ChatCore(self.model, self.dispatcher, self.turn_tokens, self.sealer)

    @property
    def pool(self) -> EnginePool:
        return self.dispatcher.pool

    @property
    def registry(self) -> RequestRegistry:
        return self.dispatcher.registry

    @property
    def metrics(self) -> Metrics:
        return self.dispatcher.metrics

    @property
    def sessions(self) -> SessionStore | None:
        return self.dispatcher.sessions

    @property
    def limiter(self) -> RateLimiter | None:
        return self.dispatcher.limiter
