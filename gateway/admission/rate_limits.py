"""Per-key rate limits, requests and tokens per minute, atomic across replicas.

Two token buckets per API key in Redis, refilled continuously at
``limit / 60`` per second up to ``limit`` and kept by one Lua script, so every
replica sees and changes the same numbers atomically (the clock is Redis's
``TIME``, not the replicas'):

- requests: an engine request takes one (an HTTP request with ``n`` choices
  of several prompts takes ``n x prompts``, all at once, charged by
  :func:`gateway.dispatch.dispatch` and nowhere else; a server-run tool loop's later
  rounds are not charged again); with too few left it is refused;
- tokens: a request is admitted while the bucket is above zero; when it ends,
  its prompt + completion tokens are taken out (the bucket may go below
  zero: the key then waits until it has refilled). Token limits are thus
  enforced per request, after the fact, as the count of a request's tokens is
  only known when it ends.

A refused request gets 429 (``rate_limit_error``, code
``rate_limit_exceeded``) with ``Retry-After``: the whole seconds until the
bucket holds enough again. Limits come from ``--rate-limit-rpm`` /
``--rate-limit-tpm`` (every key; 0: none) and ``--key-rate-limit KEY:RPM:TPM``
for one key. When Redis is unreachable, ``--rate-limit-redis-down allow``
(default) serves requests unlimited (stateless requests keep working) and
``reject`` answers 503.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable

from agentgate.gateway.errors import GatewayError
from agentgate.gateway.state.key_digests import key_digest
from agentgate.gateway.state.redis_state import RedisUnavailableError, SharedState

log = logging.getLogger("agentgate.ratelimit")

# KEYS: the requests bucket, the tokens bucket.
# ARGV: rpm, tpm, mode ('admit', 'debit' or 'peek'), requests to take (admit; at most rpm) or tokens (debit).
# admit -> {1, requests left, tokens left} or {0, wait ms, 'requests'|'tokens'}
_BUCKETS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local rpm, tpm = tonumber(ARGV[1]), tonumber(ARGV[2])
local function level(key, limit)
  local v = redis.call('HMGET', key, 'level', 'ts')
  local l, ts = tonumber(v[1]), tonumber(v[2])
  if not l then return limit end
  return math.min(limit, l + math.max(0, now - ts) * limit / 60)
end
local function save(key, l, limit)
  redis.call('HSET', key, 'level', tostring(l), 'ts', tostring(now))
  redis.call('PEXPIRE', key, math.ceil((limit - l) * 60000 / limit) + 1000)
end
local lr = rpm > 0 and level(KEYS[1], rpm) or 0
local lt = tpm > 0 and level(KEYS[2], tpm) or 0
if ARGV[3] == 'debit' then
  if tpm > 0 then save(KEYS[2], lt - tonumber(ARGV[4]), tpm) end
  return {1, 0, 0}
end
if ARGV[3] == 'peek' then
  return {1, tostring(lr), tostring(lt)}
end
local need = math.min(tonumber(ARGV[4]), rpm)
local wait, which = 0, ''
if rpm > 0 and lr < need then wait, which = (need - lr) * 60 / rpm, 'requests' end
if tpm > 0 and lt <= 0 then
  local w = (1 - lt) * 60 / tpm
  if w > wait then wait, which = w, 'tokens' end
end
if wait > 0 then return {0, math.ceil(wait * 1000), which} end
if rpm > 0 then save(KEYS[1], lr - need, rpm) end
return {1, math.floor(lr - need), math.floor(lt)}
"""


class RateLimitedError(GatewayError):
    status_code = 429
    error_type = "rate_limit_error"
    code = "rate_limit_exceeded"


def parse_key_limits(entries: Iterable[str]) -> dict[str, tuple[int, int]]:
    """``KEY:RPM:TPM`` entries -> {key digest: (rpm, tpm)} (the key may itself hold colons)."""
    limits = {}
    for entry in entries:
        key, rpm, tpm = _split(entry)
        limits[key_digest(key)] = (rpm, tpm)
    return limits


def _split(entry: str) -> tuple[str, int, int]:
    parts = entry.rsplit(":", 2)
    try:
        key, rpm, tpm = parts[0], int(parts[1]), int(parts[2])
    except (IndexError, ValueError):
        raise ValueError(
            f"--key-rate-limit expects KEY:RPM:TPM (0: unlimited), got {entry.split(':')[-2:]!r}"
        ) from None
    if not key or rpm < 0 or tpm < 0:
        raise ValueError("--key-rate-limit expects KEY:RPM:TPM with a key and non-negative limits")
    return key, rpm, tpm


class RateLimiter:
    def __init__(
        self,
        shared: SharedState,
        *,
        rpm: int = 0,
        tpm: int = 0,
        per_key: dict[str, tuple[int, int]] | None = None,
        redis_down: str = "allow",
    ) -> None:
        self.shared = shared
        self.default = (rpm, tpm)
        self.per_key = per_key or {}
        self.reject_when_down = redis_down == "reject"
        self.refused = 0
        self._script = shared.client.register_script(_BUCKETS)

    @property
    def enabled(self) -> bool:
        return any(self.default) or any(any(v) for v in self.per_key.values())

    def limits(self, digest: str) -> tuple[int, int]:
        return self.per_key.get(digest, self.default)

    def _keys(self, digest: str) -> list[str]:
        return [
            self.shared.keys.rate(digest, "requests"),
            self.shared.keys.rate(digest, "tokens"),
        ]

    async def admit(self, digest: str, requests: int = 1) -> None:
        """Take ``requests`` from the key's bucket, or raise 429 (503 when Redis is down and so configured)."""
        rpm, tpm = self.limits(digest)
        if not rpm and not tpm or requests < 1:
            return
        try:
            ok, value, which = await self.shared.guard(
                "rate limiting",
                self._script(keys=self._keys(digest), args=[rpm, tpm, "admit", requests]),
            )
        except RedisUnavailableError:
            if self.reject_when_down:
                raise
            return  # admitted unlimited while Redis is down
        if not ok:
            self.refused += 1
            retry_after = max(1, math.ceil(int(value) / 1000))
            limit = rpm if which == "requests" else tpm
            raise RateLimitedError(
                f"rate limit reached for {which} per minute (limit {limit}) on this API key; retry in {retry_after} s",
                headers={"Retry-After": str(retry_after)},
            )

    def debit(self, digest: str, tokens: int) -> None:
        """Take a finished request's tokens (in the background writer)."""
        rpm, tpm = self.limits(digest)
        if tpm and tokens:
            keys = self._keys(digest)
            self.shared.enqueue(lambda: self._script(keys=keys, args=[rpm, tpm, "debit", tokens]))

    async def status(self, digest: str) -> dict[str, dict[str, float | int | None]]:
        """The key's limits and what is left (GET /v1/rate_limits)."""
        rpm, tpm = self.limits(digest)
        _, left_requests, left_tokens = await self.shared.guard(
            "reading rate limits",
            self._script(keys=self._keys(digest), args=[rpm, tpm, "peek", 0]),
        )
        return {
            "requests": {
                "limit_per_minute": rpm or None,
                "remaining": math.floor(float(left_requests)) if rpm else None,
            },
            "tokens": {
                "limit_per_minute": tpm or None,
                "remaining": math.floor(float(left_tokens)) if tpm else None,
            },
        }
