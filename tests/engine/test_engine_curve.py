"""CurveZMQ on the engine's socket (``engine.front.socket_keys``): an engine with keys serves a gateway that
holds the right ones, and a peer without a key, or with one the engine does not know, gets
nothing in: its Hello and AddRequest never reach the engine. Real sockets on 127.0.0.1, where an
engine given keys uses CURVE as it does off loopback. And an engine bound off loopback without
keys refuses to start, naming both flags."""

from __future__ import annotations

import logging
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import zmq

from agentgate.engine.core import EngineCore
from agentgate.engine.errors import EngineDeadError
from agentgate.engine.front.client import EngineClient
from agentgate.engine.front.process import EngineServer
from agentgate.engine.front.protocol import AddRequest, Hello, encode
from agentgate.engine.front.socket_keys import CurveKeyError, EngineKeys, GatewayKeys, is_loopback, make_keys
from agentgate.engine.sampling_params import SamplingParams
from agentgate.gateway.command.cli import _engine_socket_keys, build_parser, main
from agentgate.gateway.config.settings import Settings
from tests.support.inprocess import NULL_ENGINE
from tests.support.servers import free_port, run_agentgate

SILENCE_S = 1.5  # how long a refused peer waits for an answer that must not come


class Engine:
    """An engine with CURVE keys serving on 127.0.0.1 in a thread; ``received``: every message
    its loop handled (from whom, what)."""

    def __init__(self, keys: Path) -> None:
        self.address = f"tcp://127.0.0.1:{free_port()}"
        self.server = EngineServer(EngineCore(NULL_ENGINE), self.address, "null", curve=EngineKeys.load(keys))
        self.received: list[tuple[bytes, Any]] = []
        handle = self.server._handle

        def recording(identity: bytes, message: Any) -> None:
            self.received.append((identity, message))
            handle(identity, message)

        self.server._handle = recording
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.stopping = True
        self.thread.join(timeout=10)


@pytest.fixture
def keys(tmp_path) -> Path:
    make_keys(tmp_path / "keys")
    return tmp_path / "keys"


@pytest.fixture
def engine(keys) -> Iterator[Engine]:
    engine = Engine(keys)
    yield engine
    engine.stop()
    assert not engine.thread.is_alive()


async def _served(engine: Engine, keys: GatewayKeys) -> tuple[int, str | None]:
    """A request of 4 tokens through a client with ``keys``: the tokens it got, and how it ended."""
    async with EngineClient.connect(engine.address, startup_timeout=10, curve=keys) as client:
        assert client.info is not None
        params = SamplingParams(max_tokens=4, ignore_eos=True)
        outputs = [out async for out in client.generate("ours", [1, 2, 3], params)]
        return sum(len(out.new_token_ids) for out in outputs), outputs[-1].finish_reason


def _knock(address: str, curve: GatewayKeys | None) -> list[bytes]:
    """A raw DEALER that says Hello and submits a request; whatever came back within SILENCE_S."""
    context = zmq.Context()
    socket = context.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    if curve is not None:
        socket.curve_secretkey, socket.curve_publickey, socket.curve_serverkey = (
            curve.secret,
            curve.public,
            curve.engine,
        )
    socket.connect(address)
    try:
        socket.send(encode(Hello(client_name="stranger")))
        socket.send(encode(AddRequest("theirs", [1, 2, 3], SamplingParams(max_tokens=100_000, ignore_eos=True))))
        replies, deadline = [], time.monotonic() + SILENCE_S
        while (left := deadline - time.monotonic()) > 0:
            if socket.poll(int(left * 1000)):
                replies.append(socket.recv())
        return replies
    finally:
        socket.close()
        context.term()


def _stranger(tmp_path: Path, keys: Path) -> GatewayKeys:
    """A gateway key pair the engine never heard of, aimed at the right engine key."""
    make_keys(tmp_path / "other")
    other = GatewayKeys.load(tmp_path / "other")
    return GatewayKeys(other.public, other.secret, GatewayKeys.load(keys).engine)


@pytest.mark.anyio
async def test_an_engine_with_keys_serves_the_gateway_that_holds_them(engine, keys):
    assert await _served(engine, GatewayKeys.load(keys)) == (4, "length")
    assert [type(message).__name__ for _, message in engine.received] == ["Hello", "AddRequest"]


@pytest.mark.anyio
async def test_a_peer_without_a_key_gets_nothing_in(engine, keys, tmp_path):
    with pytest.raises(EngineDeadError, match="without CurveZMQ keys"):
        async with EngineClient.connect(engine.address, startup_timeout=SILENCE_S):
            pass
    assert _knock(engine.address, None) == []
    assert engine.received == [], "no message of a peer without a key reaches the engine"
    assert await _served(engine, GatewayKeys.load(keys)) == (4, "length"), "the engine serves on"


@pytest.mark.anyio
async def test_a_peer_with_a_key_the_engine_does_not_know_gets_nothing_in(engine, keys, tmp_path):
    stranger = _stranger(tmp_path, keys)
    with pytest.raises(EngineDeadError, match="with these CurveZMQ keys"):
        async with EngineClient.connect(engine.address, startup_timeout=SILENCE_S, curve=stranger):
            pass
    assert _knock(engine.address, stranger) == []
    assert engine.received == [], "no message of an unknown key reaches the engine"
    assert await _served(engine, GatewayKeys.load(keys)) == (4, "length"), "the engine serves on"


@pytest.mark.parametrize("bound", ["tcp://0.0.0.0:5555", "tcp://*:5555", "tcp://10.1.2.3:5555", "tcp://eth0:5555"])
def test_an_engine_off_loopback_without_keys_exits_naming_both_flags(bound):
    """Refused before anything loads: the process exits 2, its message naming the two ways on."""
    out = run_agentgate("engine", "--address", bound, "--runner", "null")
    assert out.returncode == 2, out.stderr[-2000:]
    assert "off loopback without authentication" in out.stderr, out.stderr
    assert "--engine-curve-dir" in out.stderr and "--insecure-engine-socket" in out.stderr, out.stderr


def test_insecure_engine_socket_lets_it_bind_off_loopback_with_a_warning(caplog):
    parser = build_parser()
    with caplog.at_level(logging.WARNING, logger="agentgate.gateway"):
        assert _engine_socket_keys(Settings(insecure_engine_socket=True), "tcp://0.0.0.0:5555", parser) is None
    assert "without authentication (--insecure-engine-socket)" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="agentgate.gateway"):
        assert _engine_socket_keys(Settings(), "tcp://127.0.0.1:5555", parser) is None
    assert caplog.text == "", "loopback needs no keys and no warning"


def test_an_engine_given_keys_loads_them_whatever_it_binds(keys):
    loaded = _engine_socket_keys(Settings(engine_curve_dir=str(keys)), "tcp://0.0.0.0:5555", build_parser())
    assert loaded == EngineKeys.load(keys) and loaded.gateways == {GatewayKeys.load(keys).public}


def test_only_loopback_and_ipc_addresses_count_as_loopback():
    for address in ("tcp://127.0.0.1:5555", "tcp://127.0.0.2:5555", "tcp://localhost:5555", "tcp://[::1]:5555"):
        assert is_loopback(address), address
    assert is_loopback("ipc:///tmp/engine.sock")
    for address in ("tcp://0.0.0.0:5555", "tcp://*:5555", "tcp://[::]:5555", "tcp://10.0.0.5:5555", "tcp://eth0:1"):
        assert not is_loopback(address), address
    assert not is_loopback("ws://127.0.0.1:5555"), "only tcp and ipc are understood"


def test_agentgate_keys_writes_both_pairs_once_secrets_private(tmp_path, capsys):
    directory = tmp_path / "curve"
    assert main(["keys", str(directory)]) == 0
    names = sorted(path.name for path in directory.iterdir())
    assert names == ["engine.key", "engine.key_secret", "gateway.key", "gateway.key_secret"]
    for name in names:
        mode = stat.S_IMODE((directory / name).stat().st_mode)
        assert mode == (0o600 if name.endswith("_secret") else 0o644), (name, oct(mode))
    assert "--engine-curve-dir" in capsys.readouterr().out
    before = (directory / "engine.key_secret").read_text()
    with pytest.raises(SystemExit) as exit_:
        main(["keys", str(directory)])
    assert exit_.value.code == 2 and "not overwritten" in capsys.readouterr().err
    assert (directory / "engine.key_secret").read_text() == before


def test_a_key_directory_missing_what_a_side_needs_is_named(tmp_path, keys):
    with pytest.raises(CurveKeyError, match="engine.key_secret"):
        EngineKeys.load(tmp_path / "nowhere")
    (keys / "gateway.key").unlink()
    with pytest.raises(CurveKeyError, match="no gateway public key"):
        EngineKeys.load(keys)
    (keys / "engine.key").unlink()
    with pytest.raises(CurveKeyError, match="engine.key"):
        GatewayKeys.load(keys)
