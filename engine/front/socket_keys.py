"""CurveZMQ on the engine's socket: who may talk to an engine reachable beyond this machine.

Whoever reaches an engine's socket can submit, abort and pause requests and reads every request's
tokens, so a socket off loopback authenticates and encrypts with CurveZMQ. The keys are files in one
directory (``--engine-curve-dir``), in zmq.auth's certificate format; ``agentgate keys DIR`` makes
them, and a Kubernetes Secret mounted as a directory holds them as well:

    engine.key          the engines' public key (engines and gateways)
    engine.key_secret   the engines' key pair (engines only)
    gateway.key_secret  a gateway's key pair (gateways only)
    *.key               every other one: the public key of a gateway the engines accept (gateway.key)

With the directory, both sides use CURVE on every address but ``ipc://`` ones (guarded by the socket
file's permissions), loopback included; the engine accepts only the gateway keys it holds
(zmq.auth's authenticator), and a peer with another key (or none) gets no answer. Without it, an
engine refuses to bind off loopback unless ``--insecure-engine-socket`` says it may
(``gateway.command.cli``).
"""

from __future__ import annotations

import ipaddress
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

ENGINE = "engine"
GATEWAY = "gateway"
# Interface names libzmq binds that mean loopback, besides the loopback addresses.
LOOPBACK_NAMES = frozenset({"localhost", "lo"})


class CurveKeyError(ValueError):
    """A key directory that lacks a file this side needs, or holds one that is no certificate."""


def _read(path: Path) -> tuple[bytes, bytes | None]:
    """The (public, secret) keys of a certificate file (z85; no secret in a public one)."""
    try:
        return zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise CurveKeyError(f"cannot read the CurveZMQ key {path}: {exc} (agentgate keys DIR makes them)") from None


def _key_pair(directory: Path, name: str) -> tuple[bytes, bytes]:
    public, secret = _read(directory / f"{name}.key_secret")
    if not secret:
        raise CurveKeyError(f"{directory / f'{name}.key_secret'} holds no secret key")
    return public, secret


@dataclass(frozen=True)
class EngineKeys:
    """An engine's side: its key pair and the public keys of the gateways it accepts (z85)."""

    public: bytes
    secret: bytes
    gateways: frozenset[bytes]

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> EngineKeys:
        directory = Path(directory)
        public, secret = _key_pair(directory, ENGINE)
        gateways = frozenset(_read(path)[0] for path in directory.glob("*.key") if path.name != f"{ENGINE}.key")
        if not gateways:
            raise CurveKeyError(f"{directory} holds no gateway public key (*.key besides {ENGINE}.key)")
        return cls(public, secret, gateways)


@dataclass(frozen=True)
class GatewayKeys:
    """A gateway's side: its key pair and the engines' public key (z85)."""

    public: bytes
    secret: bytes
    engine: bytes

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> GatewayKeys:
        directory = Path(directory)
        public, secret = _key_pair(directory, GATEWAY)
        return cls(public, secret, _read(directory / f"{ENGINE}.key")[0])


def uses_curve(address: str) -> bool:
    """Whether a socket at ``address`` uses CURVE when keys are given (every one but ``ipc://``)."""
    return not address.startswith(("ipc://", "inproc://"))


def is_loopback(address: str) -> bool:
    """Whether only this machine can reach ``address``: ``ipc://``, or TCP on a loopback host
    (a wildcard, an interface or any other host is not)."""
    scheme, _, rest = address.partition("://")
    if scheme in ("ipc", "inproc"):
        return True
    if scheme != "tcp":
        return False
    host = rest.rpartition(":")[0].removeprefix("[").removesuffix("]")
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _KnownGateways:
    """zmq.auth's credentials provider: a client key is accepted when it is one of ours."""

    def __init__(self, keys: frozenset[bytes]) -> None:
        self.keys = keys

    def callback(self, domain: str, key: bytes) -> bool:
        return key in self.keys


def secure_server(socket: zmq.Socket, keys: EngineKeys) -> ThreadAuthenticator:
    """Make ``socket`` (not bound yet) a CURVE server accepting only ``keys.gateways``; the
    authenticator returned runs until stopped (before the socket's context is terminated)."""
    authenticator = ThreadAuthenticator(socket.context)
    authenticator.start()
    authenticator.configure_curve_callback("*", credentials_provider=_KnownGateways(keys.gateways))
    socket.curve_secretkey = keys.secret
    socket.curve_publickey = keys.public
    socket.curve_server = True
    return authenticator


def secure_client(socket: zmq.Socket, keys: GatewayKeys) -> None:
    """Make ``socket`` (not connected yet) a CURVE client of the engines' key."""
    socket.curve_secretkey = keys.secret
    socket.curve_publickey = keys.public
    socket.curve_serverkey = keys.engine


def make_keys(directory: str | os.PathLike[str]) -> list[Path]:
    """Write a new engine key pair and gateway key pair into ``directory`` (created if need be);
    the files written. Secret files are readable by their owner only; nothing is overwritten."""
    directory = Path(directory)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    names = [f"{name}{suffix}" for name in (ENGINE, GATEWAY) for suffix in (".key", ".key_secret")]
    if present := [name for name in names if (directory / name).exists()]:
        raise CurveKeyError(f"{directory} already holds {', '.join(present)}: not overwritten")
    # Written in a private directory first, so a secret file is never readable by others.
    with tempfile.TemporaryDirectory(dir=directory) as staging:
        for name in (ENGINE, GATEWAY):
            zmq.auth.create_certificates(staging, name)
        for name in names:
            os.chmod(Path(staging) / name, 0o600 if name.endswith("_secret") else 0o644)
            os.replace(Path(staging) / name, directory / name)
    return [directory / name for name in names]
