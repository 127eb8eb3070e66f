"""A Redis outage longer than the engine records' TTL lets every record expire, since no engine
can renew its own meanwhile: the first registry read once Redis is back finds none. Gateways
must not take that for every engine gone (each would route nothing until the engines announce
again); a record still missing once the engines have had a TTL to renew it is an engine gone
(``gateway.engines.discovery``). The same outage on live hosts: ``tests/reliability/test_multi_host.py``."""

from __future__ import annotations

from types import SimpleNamespace

import anyio
import pytest

from agentgate.gateway.engines import discovery as discovery_module
from agentgate.gateway.engines.discovery import EngineDiscovery
from agentgate.gateway.engines.identity import GatewayModel
from agentgate.gateway.engines.registry import EngineRecord
from agentgate.gateway.state.redis_state import RedisUnavailableError

A, B = "tcp://10.0.0.1:5555", "tcp://10.0.0.2:5555"


def _record(address: str) -> EngineRecord:
    return EngineRecord(address, "m", 1024, 8, "cpu", 0.0, vocab_digest="v")


class Registry:
    """What each registry read answers: a set of addresses, or None for Redis unreachable."""

    def __init__(self) -> None:
        self.serving: set[str] | None = {A, B}

    async def read(self, shared) -> dict[str, EngineRecord]:
        if self.serving is None:
            raise RedisUnavailableError("redis is away")
        return {address: _record(address) for address in self.serving}


@pytest.fixture
def registry(monkeypatch) -> Registry:
    registry = Registry()
    monkeypatch.setattr(discovery_module, "registered_engines", registry.read)
    return registry


def _discovery() -> EngineDiscovery:
    """Discovery holding A and B already (no connection is made: both count as held)."""
    discovery = EngineDiscovery(shared=None, startup_timeout=1)
    discovery.model = GatewayModel("m", "v")
    discovery.pool = SimpleNamespace(engines=[SimpleNamespace(address=A), SimpleNamespace(address=B)], leaving=set())
    discovery._held = {A, B}
    return discovery


@pytest.mark.anyio
async def test_records_expired_during_an_outage_do_not_drop_the_engines(registry, monkeypatch):
    discovery = _discovery()
    async with anyio.create_task_group() as tasks:
        await discovery._poll(tasks)
        registry.serving = None  # Redis away, longer than the TTL
        await discovery._poll(tasks)
        registry.serving = set()  # back: every record expired meanwhile
        await discovery._poll(tasks)
        assert discovery.pool.leaving == set()
        registry.serving = {A}  # A renewed its record, B did not
        await discovery._poll(tasks)
        assert discovery.pool.leaving == set()
        monkeypatch.setattr(discovery_module, "RENEW_GRACE_S", 0.0)
        registry.serving = None
        await discovery._poll(tasks)
        registry.serving = {A}  # a TTL after the outage, B's record is still missing: B is gone
        await discovery._poll(tasks)
        assert discovery.pool.leaving == {B}


@pytest.mark.anyio
async def test_without_an_outage_a_missing_record_is_an_engine_gone(registry):
    discovery = _discovery()
    async with anyio.create_task_group() as tasks:
        await discovery._poll(tasks)
        registry.serving = {A}
        await discovery._poll(tasks)
    assert discovery.pool.leaving == {B}
