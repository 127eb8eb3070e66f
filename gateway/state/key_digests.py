"""An API key's digests, in one home, and the secret file that keys them.

- :func:`key_digest`: what Redis and the request registry file a key under
  (sessions' owners, in-flight requests by key, rate limits): HMAC-SHA256
  under the gateway's digest secret, hex, so a digest read out of Redis cannot
  be brute-forced back to a weak key without the secret; ``"anonymous"``
  without a key.
- The digest secret: ``--key-digest-secret`` (:func:`use_digest_secret`, when
  a gateway is built), else this machine's own, made once in the state
  directory (:func:`machine_secret`), so every gateway of one deployment files
  a key under one digest.
- :func:`check_digest`: what :class:`~gateway.state.auth.KeyChecker` compares with
  ``secrets.compare_digest``, the key's plain SHA-256: it never leaves the
  process, and a checker stays right whatever secret a gateway built after it
  in the same process sets.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import secrets
from pathlib import Path

from agentgate.gateway.context import ANONYMOUS

_secret = b""  # the key of key digests: use_digest_secret() sets it when a gateway is built


def key_digest(key: str | None) -> str:
    """An API key's keyed digest, HMAC-SHA256 under the gateway's digest secret (what Redis and
    the registry store; without the secret a digest cannot be brute-forced back to a weak key),
    or ``"anonymous"``."""
    return hmac.new(_secret, key.encode(), hashlib.sha256).hexdigest() if key else ANONYMOUS


def check_digest(key: str) -> bytes:
    """The digest a presented key is compared by (``secrets.compare_digest``): fixed length, unkeyed."""
    return hashlib.sha256(key.encode()).digest()


def use_digest_secret(secret: str | None) -> None:
    """Key digests from now on use ``secret`` (``--key-digest-secret``), else this machine's own
    (:func:`machine_secret`), so every gateway of one deployment files a key under one digest."""
    global _secret
    _secret = (secret or machine_secret()).encode()


def machine_secret() -> str:
    """A random secret kept in the state directory (made once, mode 0600): shared by the gateways
    of one machine. Gateways on several machines need one ``--key-digest-secret``."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    path = Path(base) / "agentgate" / "key-digest-secret"
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another gateway made it meanwhile
            return path.read_text().strip()
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
        return path.read_text().strip()
