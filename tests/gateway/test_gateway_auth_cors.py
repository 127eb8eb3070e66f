"""API keys on every route group and CORS, against the null server's
configuration in process (two API keys, an admin key, one allowed origin)."""

from __future__ import annotations

import httpx
import pytest

from agentgate.gateway.errors import AuthenticationError, PermissionDeniedError
from agentgate.gateway.state.auth import Access, KeyChecker, Role, route_access
from tests.support.servers import ADMIN_KEY, ALLOWED_ORIGIN, USER_KEY, USER_KEY_2

USER_ROUTES = [
    ("GET", "/v1/models", None),
    ("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "max_tokens": 1}),
    ("POST", "/v1/completions", {"prompt": "x", "max_tokens": 1}),
    ("POST", "/tokenize", {"prompt": "x"}),
    ("POST", "/detokenize", {"tokens": [1, 2]}),
]
ADMIN_ROUTES = [
    ("GET", "/is_paused", None, 200),
    ("POST", "/resume", None, 200),
    ("POST", "/pause?mode=keep", None, 200),  # resumed right after
    ("POST", "/abort_requests", {"request_ids": ["none"]}, 200),
    ("DELETE", "/v1/requests/none", None, 404),
    ("GET", "/dashboard/stats", None, 200),
]
OPEN_ROUTES = ["/health", "/metrics", "/version", "/openapi.json"]


def _bearer(key: str | None) -> dict[str, str]:
    return {} if key is None else {"Authorization": f"Bearer {key}"}


def _call(gateway, method: str, path: str, body, key: str | None) -> httpx.Response:
    return gateway.client.request(method, path, json=body, headers=_bearer(key))


def _assert_error(r: httpx.Response, status: int, type_: str) -> None:
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == type_
    assert r.headers.get("x-request-id")


@pytest.mark.parametrize(("method", "path", "body"), USER_ROUTES)
def test_user_routes_need_an_api_key(gateway, method, path, body):
    for key in (None, "wrong-key", USER_KEY[:-1]):
        r = _call(gateway, method, path, body, key)
        _assert_error(r, 401, "authentication_error")
        if key is None:
            assert r.headers["www-authenticate"] == "Bearer"
    for key in (USER_KEY, USER_KEY_2, ADMIN_KEY):
        assert _call(gateway, method, path, body, key).status_code == 200


@pytest.mark.parametrize(("method", "path", "body", "ok"), ADMIN_ROUTES)
def test_admin_routes_need_the_admin_key(gateway, method, path, body, ok):
    for key in (None, "wrong-key"):
        _assert_error(_call(gateway, method, path, body, key), 401, "authentication_error")
    for key in (USER_KEY, USER_KEY_2):
        _assert_error(_call(gateway, method, path, body, key), 403, "permission_error")
    assert _call(gateway, method, path, body, ADMIN_KEY).status_code == ok
    _call(gateway, "POST", "/resume", None, ADMIN_KEY)


@pytest.mark.parametrize("path", OPEN_ROUTES)
def test_open_routes_need_no_key(gateway, path):
    assert gateway.client.get(path).status_code == 200


def test_cors_preflight_from_an_allowed_and_a_disallowed_origin(gateway):
    preflight = {
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization,content-type",
    }
    r = gateway.client.options("/v1/chat/completions", headers={"Origin": ALLOWED_ORIGIN, **preflight})
    assert r.status_code == 200 and r.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
    assert "POST" in r.headers["access-control-allow-methods"]
    r = gateway.client.options("/v1/chat/completions", headers={"Origin": "http://evil.example", **preflight})
    assert r.status_code == 400 and "access-control-allow-origin" not in r.headers
    # a simple request: the allowed origin can read the body and the request id, even of a 401
    r = gateway.client.get("/v1/models", headers={"Origin": ALLOWED_ORIGIN, **_bearer(USER_KEY)})
    assert r.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
    assert "x-request-id" in r.headers["access-control-expose-headers"].lower()
    r = gateway.client.get("/v1/models", headers={"Origin": ALLOWED_ORIGIN})
    assert r.status_code == 401 and r.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
    r = gateway.client.get("/v1/models", headers={"Origin": "http://evil.example", **_bearer(USER_KEY)})
    assert "access-control-allow-origin" not in r.headers


# -- the rules themselves, without a server ----------------------------------------------


def test_route_groups():
    assert route_access("GET", "/health") is Access.OPEN
    assert route_access("POST", "/v1/chat/completions") is Access.USER
    assert route_access("DELETE", "/v1/requests/x") is Access.ADMIN
    assert route_access("GET", "/v1/requests/x") is Access.USER
    assert route_access("POST", "/pause") is Access.ADMIN
    assert route_access("GET", "/unknown") is Access.USER


def test_admin_routes_are_closed_when_keys_exist_but_no_admin_key():
    keys = KeyChecker(["u"])
    keys.check(Access.USER, "u")
    with pytest.raises(PermissionDeniedError):
        keys.check(Access.ADMIN, "u")
    with pytest.raises(AuthenticationError):
        keys.check(Access.USER, None)


def test_only_an_admin_key_leaves_user_routes_open_and_no_keys_leaves_all_open():
    keys = KeyChecker([], "a")
    keys.check(Access.USER, None)
    keys.check(Access.ADMIN, "a")
    with pytest.raises(AuthenticationError):
        keys.check(Access.ADMIN, "b")
    KeyChecker().check(Access.ADMIN, None)


def test_roles():
    keys = KeyChecker(["u1", "u2"], "a")
    assert [keys.role(k) for k in ("u1", "u2", "a", "x", None, "")] == [
        Role.USER,
        Role.USER,
        Role.ADMIN,
        Role.NONE,
        Role.NONE,
        Role.NONE,
    ]
