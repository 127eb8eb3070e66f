"""Behind a reverse proxy (``gateway.http.forwarded``): a loopback-bound gateway with no keys opens
its operator routes to callers on this machine only. Forwarded headers from a peer that is not a
trusted proxy make the caller remote (403 without a key); from a ``--trusted-proxies`` peer the
client they name decides. In process: every request comes from 127.0.0.1, as from a proxy there."""

from __future__ import annotations

import pytest

from agentgate.gateway.config.settings import Settings
from agentgate.gateway.http.forwarded import forwarded_chain
from tests.support.inprocess import InProcessGateway
from tests.support.servers import ADMIN_KEY, bearer

OPS = "/is_paused"
FROM_AFAR = [
    {"X-Forwarded-For": "203.0.113.5"},
    {"Forwarded": "for=203.0.113.5;proto=https"},
    {"Forwarded": 'for="[2001:db8::7]:4711"'},
]


@pytest.fixture(scope="module")
def untrusting():
    with InProcessGateway(Settings()) as gw:
        yield gw


@pytest.fixture(scope="module")
def behind_local_proxy():
    with InProcessGateway(Settings(trusted_proxies=("127.0.0.1/32", "10.0.0.0/8"), admin_key=None)) as gw:
        yield gw


def test_without_forwarded_headers_a_loopback_caller_is_local(untrusting):
    assert untrusting.client.get(OPS).status_code == 200


@pytest.mark.parametrize("headers", FROM_AFAR)
def test_forwarded_headers_from_an_untrusted_peer_make_the_caller_remote(untrusting, headers):
    refused = untrusting.client.get(OPS, headers=headers)
    assert refused.status_code == 403, refused.text
    assert "--admin-key" in refused.json()["error"]["message"]
    assert untrusting.client.get("/v1/models", headers=headers).status_code == 200  # user routes as before
    # even claiming loopback: an untrusted peer's claim is not believed either way
    assert untrusting.client.get(OPS, headers={"X-Forwarded-For": "127.0.0.1"}).status_code == 403


def test_a_trusted_proxy_names_the_client_which_decides(behind_local_proxy):
    gw = behind_local_proxy
    for headers in FROM_AFAR:
        assert gw.client.get(OPS, headers=headers).status_code == 403, headers
    assert gw.client.get(OPS, headers={"X-Forwarded-For": "127.0.0.1"}).status_code == 200
    # the rightmost hop that is not a trusted proxy is the client: a spoofed loopback on the left counts for nothing
    assert gw.client.get(OPS, headers={"X-Forwarded-For": "127.0.0.1, 203.0.113.5, 10.1.2.3"}).status_code == 403
    # trusted hops are skipped: behind two proxies of ours, the client they were given decides
    assert gw.client.get(OPS, headers={"X-Forwarded-For": "203.0.113.5, 127.0.0.1"}).status_code == 403
    assert gw.client.get(OPS, headers={"X-Forwarded-For": "::1, 10.0.0.9"}).status_code == 200


def test_an_admin_key_opens_the_routes_to_a_remote_caller():
    with InProcessGateway(Settings(admin_key=ADMIN_KEY)) as gw:
        assert gw.client.get(OPS, headers={**FROM_AFAR[0], **bearer(ADMIN_KEY)}).status_code == 200
        assert gw.client.get(OPS, headers=FROM_AFAR[0]).status_code == 401


def test_the_chain_reads_both_headers_client_first():
    headers = [(b"forwarded", b'for=192.0.2.1, for="[2001:db8::1]:80"'), (b"x-forwarded-for", b"10.0.0.2, 10.0.0.3")]
    assert forwarded_chain(headers) == ["192.0.2.1", "2001:db8::1", "10.0.0.2", "10.0.0.3"]
    assert forwarded_chain([(b"host", b"x")]) is None


def test_trusted_proxies_must_be_addresses_or_cidrs():
    with pytest.raises(ValueError, match="--trusted-proxies takes addresses or CIDRs"):
        Settings(trusted_proxies=("proxy.example",))
