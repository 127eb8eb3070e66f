"""Two API keys on one server: neither reads, aborts nor shares the cache of the other's work
(issue 50). Real HTTP to a live ``agentgate serve`` on the null runner (its scheduler and prefix
cache are the real ones), two user keys.

- Prefix cache: by default keys share cached prompt prefixes (``usage.prompt_tokens_details.cached_tokens``);
  ``--prefix-cache-isolation key`` salts each key's, so keys never share KV; a request's
  ``cache_salt`` salts it further either way.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.gateway.conftest import NULL_FLAGS
from tests.support.servers import USER_KEY, USER_KEY_2, LiveServer, bearer, start_server

A, B = bearer(USER_KEY), bearer(USER_KEY_2)


@pytest.fixture(scope="module")
def isolated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """The null server's configuration, with ``--prefix-cache-isolation key``."""
    server = start_server(
        tmp_path_factory.mktemp("isolated"),
        *NULL_FLAGS,
        "--prefix-cache-isolation",
        "key",
        env={"AGENTGATE_API_KEY": f"{USER_KEY},{USER_KEY_2}"},
    )
    yield server
    server.stop()


def _prompt() -> str:
    """A prompt no other test sends, several KV blocks long."""
    return f"{uuid.uuid4()} " + " ".join(f"line {i} of a shared agent system prompt." for i in range(40))


def _cached(server: LiveServer, headers: dict[str, str], prompt: str, **fields: object) -> int:
    """The cached prompt tokens of one chat completion of ``prompt``."""
    # a system message of its own: the template's default one would be a prefix every test shares
    body = {"messages": [{"role": "system", "content": prompt}], "max_tokens": 2, **fields}
    r = httpx.post(f"{server.url}/v1/chat/completions", headers=headers, json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_by_default_two_keys_share_cached_prefixes(null):
    prompt = _prompt()
    assert _cached(null, A, prompt) == 0
    assert _cached(null, B, prompt) > 0  # the other key's prefix, reused


def test_under_key_isolation_two_keys_never_share_cached_prefixes(isolated):
    prompt = _prompt()
    assert _cached(isolated, A, prompt) == 0
    assert _cached(isolated, B, prompt) == 0  # B prefills its own
    assert _cached(isolated, A, prompt) > 0  # each key still reuses its own
    assert _cached(isolated, B, prompt) > 0
    # a cache_salt inside a key's isolation: only requests with the same salt (and key) share
    assert _cached(isolated, A, prompt, cache_salt="s1") == 0
    assert _cached(isolated, B, prompt, cache_salt="s1") == 0
    assert _cached(isolated, A, prompt, cache_salt="s1") > 0


def test_a_cache_salt_separates_requests_of_one_key(null):
    prompt = _prompt()
    assert _cached(null, A, prompt) == 0
    assert _cached(null, A, prompt, cache_salt="tenant-7") == 0  # another salt: not shared
    assert _cached(null, B, prompt, cache_salt="tenant-7") > 0  # the same salt: shared (isolation off)


@pytest.mark.parametrize("salt", ["", "x" * 257, 7])
def test_a_cache_salt_must_be_a_short_non_empty_string(null, salt):
    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1, "cache_salt": salt}
    r = httpx.post(f"{null.url}/v1/chat/completions", headers=A, json=body, timeout=30)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "cache_salt"
