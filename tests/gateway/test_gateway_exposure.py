"""A gateway told it listens off loopback (host 0.0.0.0 or 10.1.2.3 in its settings; in process,
no traffic leaves this machine): the operator routes, the dashboard and /metrics refuse without a
key, take the admin key, open under --allow-unauthenticated-ops; start-up warns of what is open;
no route tells a client where the model lives on the server."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import httpx
import pytest

from agentgate.engine.errors import EngineDeadError
from agentgate.engine.model_files.model_path import resolve_model_path
from agentgate.gateway.command.cli import build_parser, settings_from_args
from agentgate.gateway.command.exposure import exposure_warnings, is_loopback
from agentgate.gateway.config.settings import Settings
from agentgate.gateway.errors import error_parts, redact_paths
from tests.gateway.test_gateway_auth_cors import ADMIN_ROUTES
from tests.support.inprocess import InProcessGateway
from tests.support.servers import ADMIN_KEY, USER_KEY, bearer

# Every operator route (method, path, body, status when allowed): the admin group of gateway/state/auth.py,
# the admin session routes (they need Redis), and the dashboard page.
OPS_ROUTES = [
    *ADMIN_ROUTES,
    ("GET", "/v1/sessions", None, 200),
    ("GET", "/v1/requests", None, 200),
    ("GET", "/v1/replicas", None, 200),
]
DASHBOARD = ("GET", "/dashboard", None, 200)
LOG = "agentgate.gateway"


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def lines(self, level: int) -> list[str]:
        return [r.getMessage() for r in self.records if r.levelno == level]


@contextlib.contextmanager
def _started(settings: Settings) -> Iterator[tuple[InProcessGateway, _Records]]:
    """The gateway in process (with Redis, for the session routes) and what its start-up logged."""
    logger, handler = logging.getLogger(LOG), _Records()
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        with InProcessGateway(settings, redis=True) as gw:
            logger.removeHandler(handler)
            yield gw, handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@pytest.fixture(scope="module")
def exposed() -> Iterator[tuple[InProcessGateway, _Records]]:
    """Bound to every interface, no key at all: the issue's `agentgate serve --host 0.0.0.0`."""
    with _started(Settings(host="0.0.0.0")) as started:
        yield started


@pytest.fixture(scope="module")
def keyed() -> Iterator[tuple[InProcessGateway, _Records]]:
    with _started(Settings(host="10.1.2.3", api_keys=(USER_KEY,), admin_key=ADMIN_KEY)) as started:
        yield started


@pytest.fixture(scope="module")
def allowed() -> Iterator[tuple[InProcessGateway, _Records]]:
    with _started(Settings(host="0.0.0.0", allow_unauthenticated_ops=True)) as started:
        yield started


@pytest.fixture(scope="module")
def loopback() -> Iterator[tuple[InProcessGateway, _Records]]:
    with _started(Settings()) as started:
        yield started


def _call(gw: InProcessGateway, route: tuple, key: str | None = None) -> httpx.Response:
    method, path, body, _ = route
    response = gw.client.request(method, path, json=body, headers=bearer(key) if key else {})
    gw.client.post("/resume", headers=bearer(ADMIN_KEY))  # a pause that got through ends here
    return response


def _refused(r: httpx.Response, flag: str = "--admin-key") -> None:
    assert r.status_code == 403, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "permission_error"
    assert flag in error["message"] and "--allow-unauthenticated-ops" in error["message"]


def _not_paused(gw: InProcessGateway) -> None:
    r = gw.client.post("/v1/completions", json={"prompt": "x", "max_tokens": 2})
    assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize("route", [*OPS_ROUTES, DASHBOARD], ids=lambda r: f"{r[0]} {r[1]}")
def test_ops_routes_refuse_everyone_off_loopback_without_an_admin_key(exposed, route):
    gw, _ = exposed
    for key in (None, "some-key", ADMIN_KEY):
        method, path, body, _ = route
        r = gw.client.request(method, path, json=body, headers=bearer(key) if key else {})
        _refused(r)
    _not_paused(gw)


def test_metrics_refuses_off_loopback_when_no_key_is_set(exposed):
    gw, _ = exposed
    _refused(gw.client.get("/metrics"))
    assert gw.client.get("/metrics").json()["error"]["code"] == "key_required"


def test_inference_and_probes_stay_open_off_loopback_without_an_api_key(exposed):
    gw, _ = exposed
    for path in ("/v1/models", "/health", "/version", "/openapi.json", "/playground"):
        assert gw.client.get(path).status_code == 200, path
    _not_paused(gw)


@pytest.mark.parametrize("route", OPS_ROUTES, ids=lambda r: f"{r[0]} {r[1]}")
def test_ops_routes_off_loopback_take_the_admin_key(keyed, route):
    gw, _ = keyed
    assert _call(gw, route).status_code == 401
    assert _call(gw, route, USER_KEY).status_code == 403
    assert _call(gw, route, ADMIN_KEY).status_code == route[3]


def test_with_an_admin_key_the_dashboard_page_is_served_and_metrics_take_any_key(keyed):
    gw, _ = keyed
    assert gw.client.get("/dashboard").status_code == 200  # no secret in it: the admin key is typed into it
    assert gw.client.get("/metrics").status_code == 401
    for key in (USER_KEY, ADMIN_KEY):
        r = gw.client.get("/metrics", headers=bearer(key))
        assert r.status_code == 200 and "agentgate_requests_running" in r.text


@pytest.mark.parametrize("route", [*OPS_ROUTES, DASHBOARD], ids=lambda r: f"{r[0]} {r[1]}")
def test_allow_unauthenticated_ops_serves_them_to_anyone(allowed, route):
    gw, _ = allowed
    assert _call(gw, route).status_code == route[3]
    assert gw.client.get("/metrics").status_code == 200


@pytest.mark.parametrize("route", [*OPS_ROUTES, DASHBOARD], ids=lambda r: f"{r[0]} {r[1]}")
def test_loopback_without_keys_is_open_as_before(loopback, route):
    gw, records = loopback
    assert _call(gw, route).status_code == route[3]
    assert gw.client.get("/metrics").status_code == 200
    assert not records.lines(logging.WARNING)
    assert any("| auth: open |" in line for line in records.lines(logging.INFO))


def test_start_up_warns_of_open_inference_and_unauthenticated_ops(allowed):
    _, records = allowed
    warnings = records.lines(logging.WARNING)
    assert len(warnings) == 2, warnings
    inference, ops = warnings
    assert "inference is open" in inference and "port 8000 on any address" in inference and "--api-key" in inference
    assert "--allow-unauthenticated-ops" in ops and "/pause" in ops and "private network" in ops
    assert any(
        "auth: open /v1, operator routes open (--allow-unauthenticated-ops)" in line
        for line in records.lines(logging.INFO)
    )


def test_start_up_says_the_operator_routes_are_closed(exposed, keyed):
    warnings = exposed[1].lines(logging.WARNING)
    assert len(warnings) == 1 and "inference is open" in warnings[0]
    assert any(
        "operator routes, dashboard and /metrics closed off loopback" in line for line in exposed[1].lines(logging.INFO)
    )
    assert not keyed[1].lines(logging.WARNING)  # an API key and an admin key: nothing open to warn of


def test_the_flag_is_documented_and_read_from_the_environment(monkeypatch):
    serve = build_parser()._subparsers._group_actions[0].choices["serve"]
    text = " ".join(serve.format_help().split())
    assert "--allow-unauthenticated-ops" in text and "AGENTGATE_ALLOW_UNAUTHENTICATED_OPS" in text
    monkeypatch.setenv("AGENTGATE_ALLOW_UNAUTHENTICATED_OPS", "true")
    assert settings_from_args(build_parser().parse_args(["serve"])).allow_unauthenticated_ops
    flag_wins = build_parser().parse_args(["serve", "--no-allow-unauthenticated-ops"])
    assert not settings_from_args(flag_wins).allow_unauthenticated_ops


def test_warnings_name_who_can_reach_what():
    assert exposure_warnings(Settings()) == exposure_warnings(Settings(host="localhost")) == []
    [inference] = exposure_warnings(Settings(host="10.1.2.3", port=9000, admin_key="a"))
    assert "10.1.2.3:9000" in inference
    [metrics] = exposure_warnings(Settings(host="10.1.2.3", api_keys=("k",), allow_unauthenticated_ops=True))
    assert "/metrics is open" in metrics


# Formatted by hand: a table of cases, several to a line.
@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.3.2.1", True), ("::1", True), ("[::1]", True), ("localhost", True),
     ("LocalHost", True), ("::ffff:127.0.0.1", True), ("0.0.0.0", False), ("::", False), ("", False),
     ("10.1.2.3", False), ("192.168.0.7", False), ("fe80::1%eth0", False), ("gateway.example", False)],
)  # fmt: skip
def test_what_counts_as_loopback(host, loopback):
    assert is_loopback(host) is loopback


# -- no server path reaches a client -------------------------------------------------------------


def test_models_version_and_errors_carry_no_server_path(exposed):
    gw, _ = exposed
    model_path = resolve_model_path(gw.settings.model)
    assert model_path.is_absolute()
    models = gw.client.get("/v1/models")
    card = gw.client.get(f"/v1/models/{gw.state.model.name}")
    [listed] = models.json()["data"]
    assert listed["root"] == card.json()["root"] == model_path.name
    missing = gw.client.get("/v1/models/nope")
    chat = gw.client.post(
        "/v1/chat/completions", json={"model": "nope", "messages": [{"role": "user", "content": "x"}]}
    )
    assert missing.status_code == chat.status_code == 404
    for r in (models, card, missing, chat, gw.client.get("/version"), gw.client.get("/health")):
        assert str(model_path.parent) not in r.text, r.text


def test_engine_errors_reach_clients_without_server_paths():
    reason = "the engine failed to start: model path /srv/models/team/x.gguf does not exist"
    status, info, _ = error_parts(EngineDeadError(reason))
    assert status == 503 and info.message == "the engine failed to start: model path x.gguf does not exist"
    gone = "engine 0 at ipc:///tmp/agentgate-engine-1f.sock is down since 2025-01-01T00:00:00Z (3.0 s): died"
    assert redact_paths(gone) == gone.replace("ipc:///tmp/", "ipc://")
    for kept in (
        "the engine at tcp://10.1.2.3:5555 did not answer",
        "see http://host:80/a/b",
        "models/x.gguf",
        "'#/properties/a/items' is invalid",
    ):
        assert redact_paths(kept) == kept
