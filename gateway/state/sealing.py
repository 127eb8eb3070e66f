"""Sealing: what the server hands a client to send back unchanged, protected by a deployment key.

Two kinds of seal, one key:

- :meth:`Sealer.seal` / :meth:`Sealer.open`: authenticated encryption (AES-256-GCM) for a
  Responses item's ``encrypted_content`` (a ``reasoning`` item's reasoning, a ``compaction``
  item's summary). The client can neither read nor change it: one byte changed and it does not
  open.
- :meth:`Sealer.sign` / :meth:`Sealer.verify`: an HMAC-SHA256 tag for what the client may read
  but must not change (an Anthropic ``thinking`` block's ``signature`` over its text).

Purposes are kept apart: each purpose (:data:`REASONING`, :data:`COMPACTION`, :data:`THINKING`)
has its own key derived from the deployment key (HKDF-SHA256, the purpose as its ``info``), and
an encrypted seal also binds its purpose as associated data, so a reasoning item's content
sent back as a compaction item's does not open.

The deployment key (``--sealing-key`` / ``AGENTGATE_SEALING_KEY``, repeatable, comma-separated
in the environment): the first key seals, every key given opens, so a key is rotated by putting
the new one first and dropping the old one once what it sealed no longer matters. A seal names
its key by a 4-byte id (a hash of the key, never the key). With no key given, the gateway takes
the one in Redis (``{prefix}:sealing-key``, made by whichever replica asked first), so every
replica that shares the Redis shares it and it outlives a gateway restart for as long as Redis
keeps its data; with no Redis (or Redis unreachable at start), a random key for this process,
with a warning: its seals do not open after a restart or on another replica. docs/sealing.md.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import os
import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

if TYPE_CHECKING:
    from agentgate.gateway.state.redis_state import SharedState

log = logging.getLogger(__name__)

REASONING = "responses.reasoning"  # a Responses reasoning item's encrypted_content
COMPACTION = "responses.compaction"  # a Responses compaction item's encrypted_content
THINKING = "anthropic.thinking"  # an Anthropic thinking block's signature
PURPOSES = frozenset({REASONING, COMPACTION, THINKING})

MIN_KEY_CHARS = 16
VERSION = "ag1."  # every seal starts with it: a later format can be told apart
_KEY_ID = 4
_NONCE = 12
_REDIS_KEY = "sealing-key"


class SealError(ValueError):
    """A seal that does not open (or a signature that does not verify): changed, made for another
    purpose, made under a key this server does not hold, or not a seal at all."""


class Sealer:
    """Seals and signatures under the deployment keys (the first seals, all open)."""

    def __init__(self, keys: Sequence[str], *, origin: str = "--sealing-key") -> None:
        if not keys:
            raise ValueError("a Sealer needs at least one key")
        for key in keys:
            if len(key) < MIN_KEY_CHARS:
                raise ValueError(f"sealing_key must be at least {MIN_KEY_CHARS} characters (a random string)")
        self.origin = origin  # where the key came from, for the start-up line
        self._keys = {_key_id(key): key.encode() for key in keys}
        self._sealing_id = _key_id(keys[0])
        self._derived: dict[tuple[bytes, str], bytes] = {}

    @classmethod
    def random(cls) -> Sealer:
        """A Sealer under a fresh random key (this process's own)."""
        return cls([secrets.token_urlsafe(32)], origin="a random key of this process")

    def _subkey(self, key_id: bytes, purpose: str) -> bytes:
        if purpose not in PURPOSES:
            raise ValueError(f"unknown sealing purpose {purpose!r}")
        derived = self._derived.get((key_id, purpose))
        if derived is None:
            hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"agentgate seal " + purpose.encode())
            derived = self._derived[(key_id, purpose)] = hkdf.derive(self._keys[key_id])
        return derived

    def seal(self, purpose: str, payload: bytes) -> str:
        """``payload`` encrypted and authenticated for ``purpose``: ``ag1.`` then URL-safe base64."""
        nonce = os.urandom(_NONCE)
        sealed = AESGCM(self._subkey(self._sealing_id, purpose)).encrypt(nonce, payload, purpose.encode())
        return VERSION + _b64(self._sealing_id + nonce + sealed)

    def open(self, purpose: str, token: object) -> bytes:
        """The payload :meth:`seal` sealed for ``purpose``; SealError when it does not open."""
        raw = self._raw(token)
        key_id, nonce, sealed = raw[:_KEY_ID], raw[_KEY_ID : _KEY_ID + _NONCE], raw[_KEY_ID + _NONCE :]
        try:
            return AESGCM(self._subkey(key_id, purpose)).decrypt(nonce, sealed, purpose.encode())
        except Exception as exc:  # cryptography's InvalidTag, or a ciphertext too short to hold a tag
            raise SealError("it was changed, or sealed for another use") from exc

    def sign(self, purpose: str, data: bytes) -> str:
        """An HMAC tag of ``data`` for ``purpose``: ``ag1.`` then URL-safe base64."""
        return VERSION + _b64(self._sealing_id + self._mac(self._sealing_id, purpose, data))

    def verify(self, purpose: str, data: bytes, signature: object) -> None:
        """Nothing when ``signature`` is :meth:`sign`'s for ``data`` and ``purpose``; else SealError."""
        raw = self._raw(signature)
        if not hmac.compare_digest(raw[_KEY_ID:], self._mac(raw[:_KEY_ID], purpose, data)):
            raise SealError("it does not match the block: the block was changed, or signed for another use")

    def _mac(self, key_id: bytes, purpose: str, data: bytes) -> bytes:
        return hmac.new(self._subkey(key_id, purpose), data, hashlib.sha256).digest()

    def _raw(self, token: object) -> bytes:
        if not isinstance(token, str) or not token.startswith(VERSION):
            raise SealError("not a seal this server made")
        try:
            raw = base64.urlsafe_b64decode(token[len(VERSION) :].encode())
        except (binascii.Error, ValueError) as exc:
            raise SealError("not a seal this server made") from exc
        if raw[:_KEY_ID] not in self._keys:
            raise SealError("sealed under a key this server does not hold (rotated out, or another deployment's)")
        return raw


def _key_id(key: str) -> bytes:
    return hashlib.sha256(b"agentgate key id " + key.encode()).digest()[:_KEY_ID]


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode()


async def deployment_sealer(keys: Sequence[str], shared: SharedState | None) -> Sealer:
    """The gateway's Sealer: ``keys`` (``--sealing-key``) when given; else the key shared in Redis
    (made on first use); else a random key of this process, with a warning (see the module doc)."""
    if keys:
        return Sealer(keys)
    if shared is not None:
        name = f"{shared.keys.prefix}:{_REDIS_KEY}"
        try:
            await shared.client.set(name, secrets.token_urlsafe(32), nx=True)
            key = await shared.client.get(name)
        except Exception as exc:  # redis' errors and OSError: start anyway, under a key of our own
            log.warning("redis unreachable at start (%s): no sealing key shared", exc)
        else:
            if isinstance(key, str):
                return Sealer([key], origin=f"the key shared in redis ({name})")
    log.warning(
        "no --sealing-key and no shared one in redis: sealing under a random key of this process, so encrypted_content "
        "and thinking signatures it hands out do not open after a restart or on another replica (docs/sealing.md)"
    )
    return Sealer.random()
