"""The ``agentgate`` command.

    agentgate serve [--engines N] [--gateway-workers M] [--model PATH] [--port 8000] ...
    agentgate engine --address tcp://0.0.0.0:5555 [--model PATH] [--runner overlap] ...
    agentgate gateway --engine tcp://HOST:5555 [--engine ...] [--redis-url redis://...] ...
    agentgate generate "Write a haiku about GPUs" [--max-tokens 64]

Process topology:

- ``serve`` (one machine): Redis (embedded ``redis-server`` on a private unix
  socket, unless ``--redis-url``), N engine processes on private IPC
  addresses, and the gateway. With ``--gateway-workers 1`` (default) the
  gateway runs in this process and owns the engines (it watches them and
  stops them on shutdown). With M > 1 this process is a supervisor: it starts
  M gateway processes, each binding the port with ``SO_REUSEPORT`` (the
  kernel spreads connections over them), each connected to every engine and
  to the one Redis, so they act as one (sessions, pause, aborts, rate
  limits). The supervisor stops them (SIGTERM: they drain), then the
  engines, then Redis; a worker whose supervisor dies stops itself.
- ``engine``: one engine process in the foreground, bound to ``--address``.
- ``gateway``: a gateway (or M workers) in front of engines started elsewhere
  (``--engine``, repeatable), with the embedded Redis unless ``--redis-url``.
  Several gateways on several machines share one ``--redis-url``.

Every flag can also be set as an ``AGENTGATE_*`` environment variable (see
``gateway.settings``); a flag on the command line wins. Shutdown on
SIGINT/SIGTERM is clean: requests in flight get ``--drain-seconds``, then
everything this command started stops.

``generate`` runs the offline engine (``engine.LLM``) in this process and
prints the completion.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import logging
import os
import signal
import socket
import sys
import threading
from collections.abc import Sequence
from typing import Any

from agentgate.gateway.settings import (
    Settings,
    env_name,
    field_kind,
    flag_name,
    optional,
    parse_value,
)

log = logging.getLogger("agentgate.gateway")


def _add_settings_flags(parser: argparse.ArgumentParser, command: str) -> None:
    for f in dataclasses.fields(Settings):
        if command not in f.metadata.get("commands", ("serve", "gateway")):
            continue
        flag = "--" + flag_name(f)
        kind = field_kind(f)
        default = f.default if f.default is not dataclasses.MISSING else None
        help = f"{f.metadata.get('help', '')} [env {env_name(f)}; default {default!r}]"
        if kind == "tuple":
            parser.add_argument(
                flag,
                dest=f.name,
                action="append",
                default=None,
                metavar="VALUE",
                help=help,
            )
        elif kind == "bool":
            parser.add_argument(
                flag,
                dest=f.name,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=help,
            )
        else:
            metavar = kind.upper() if kind != "str" else "TEXT"
            parser.add_argument(flag, dest=f.name, default=None, metavar=metavar, help=help)


def settings_from_args(args: argparse.Namespace) -> Settings:
    """Environment first, then the flags given on the command line."""
    given: dict[str, Any] = {}
    for f in dataclasses.fields(Settings):
        value = getattr(args, f.name, None)
        if value is None:
            continue
        if field_kind(f) == "tuple":
            given[f.name] = tuple(part.strip() for item in value for part in item.split(",") if part.strip())
        elif field_kind(f) == "bool":
            given[f.name] = value
        else:
            given[f.name] = parse_value(f, value) if (optional(f) or field_kind(f) != "str") else value
    return Settings.from_env(**given)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentgate", description="Serve language models to agents.")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser(
        "serve",
        help="start Redis, engine(s) and the OpenAI-compatible gateway (or gateway workers) on this machine",
    )
    _add_settings_flags(serve, "serve")
    serve.set_defaults(func=_serve)

    engine = commands.add_parser("engine", help="run one engine process, bound to --address, in the foreground")
    engine.add_argument("--address", default=None,
                        help="the address to bind: tcp://HOST:PORT or ipc:///PATH [env AGENTGATE_ADDRESS]")  # fmt: skip
    _add_settings_flags(engine, "engine")
    engine.set_defaults(func=_engine)

    gateway = commands.add_parser(
        "gateway",
        help="run the gateway in front of engines started elsewhere (--engine)",
    )
    gateway.add_argument("--engine", dest="engine_addresses", action="append", default=None, metavar="ADDRESS",
                         help="an engine to serve, tcp://HOST:PORT or ipc:///PATH (repeatable) "
                         "[env AGENTGATE_ENGINE, comma-separated]")  # fmt: skip
    _add_settings_flags(gateway, "gateway")
    gateway.set_defaults(func=_gateway)

    generate = commands.add_parser("generate", help="generate a completion offline (no server) and print it")
    generate.add_argument(
        "prompt",
        help="the prompt (sent as a user message when the model has a chat template)",
    )
    generate.add_argument(
        "--model",
        default=None,
        help="a .gguf file or an HF directory (default: the default model)",
    )
    generate.add_argument(
        "--runner",
        default=None,
        help="overlap (default), sync or null [env AGENTGATE_RUNNER]",
    )
    generate.add_argument("--max-tokens", type=int, default=64)
    generate.add_argument("--temperature", type=float, default=0.0)
    generate.add_argument("--top-p", type=float, default=1.0)
    generate.add_argument("--seed", type=int, default=None)
    generate.add_argument("--max-model-len", type=int, default=None)
    generate.add_argument("--dtype", default="auto", help="auto, float32, float16 or bfloat16")
    generate.add_argument(
        "--raw",
        action="store_true",
        help="send the prompt as is, without the chat template",
    )
    generate.set_defaults(func=_generate)
    # `agentgate ops ...` is the operator CLI in agents/ (an HTTP client); main() hands it its arguments
    commands.add_parser("ops", help="operate a running server: status, pause, resume, abort, sessions",
                        add_help=False)  # fmt: skip
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["ops"]:
        from agentgate.agents.ops_cli import main as ops_main

        return ops_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args, parser)
    except KeyboardInterrupt:
        return 130


def _setup(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Settings:
    try:
        settings = settings_from_args(args)
        if args.command in ("serve", "engine"):
            settings.engine_config()  # validated before anything starts
        if args.command in ("serve", "gateway"):
            settings.check_shared_state()
    except ValueError as exc:  # includes the engine's InvalidRequestError
        parser.error(str(exc))
    _logging(settings.log_level)
    # Engine processes read it for their own logging, which wants the upper-case name.
    os.environ["AGENTGATE_LOG_LEVEL"] = settings.log_level.upper()
    return settings


def _logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        force=True,
    )


def _serve(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    settings = _setup(args, parser)
    engine_config = settings.engine_config()
    from agentgate.engine.client import start_engine_process, stop_engine_process
    from agentgate.engine.ipc import private_address, remove_socket_file
    from agentgate.gateway.engines import EngineTarget

    with contextlib.ExitStack() as stack:
        settings = _with_redis(stack, settings)
        targets = []
        for i in range(settings.engines):
            address = private_address()
            log.info("starting engine %d/%d (runner %s, model %s) on %s", i + 1, settings.engines,
                     engine_config.runner, engine_config.model or "default", address)  # fmt: skip
            process = start_engine_process(engine_config, address)
            stack.callback(remove_socket_file, address)  # runs after the engine stopped
            stack.callback(stop_engine_process, process)
            targets.append(EngineTarget(address, process, owned=True))
        return _run_gateways(settings, targets)


def _gateway(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    settings = _setup(args, parser)
    given = args.engine_addresses or [os.environ.get("AGENTGATE_ENGINE", "")]
    addresses = [part.strip() for item in given for part in item.split(",") if part.strip()]
    if not addresses:
        parser.error("agentgate gateway needs at least one --engine ADDRESS (or AGENTGATE_ENGINE)")
    from agentgate.gateway.engines import EngineTarget

    with contextlib.ExitStack() as stack:
        settings = _with_redis(stack, settings)
        return _run_gateways(settings, [EngineTarget(address) for address in addresses])


def _engine(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    settings = _setup(args, parser)
    address = args.address or os.environ.get("AGENTGATE_ADDRESS")
    if not address:
        parser.error("agentgate engine needs --address (tcp://HOST:PORT or ipc:///PATH)")
    from agentgate.engine.model_path import model_display_name
    from agentgate.engine.process import run_engine_process

    config = settings.engine_config()
    log.info("engine (runner %s, model %s) binding %s", config.runner, config.model or "default", address)
    run_engine_process(config, address, model_display_name(config.model))
    return 0


def _with_redis(stack: contextlib.ExitStack, settings: Settings) -> Settings:
    """The settings with a Redis URL: the given one, or an embedded server's (stopped with ``stack``)."""
    if settings.redis_url is not None:
        return settings
    from agentgate.gateway.embedded_redis import EmbeddedRedis, EmbeddedRedisError

    try:
        redis = EmbeddedRedis(settings.redis_dir, port_hint=settings.port).start()
    except EmbeddedRedisError as exc:
        raise SystemExit(f"agentgate: {exc}") from None
    stack.callback(redis.stop)
    return dataclasses.replace(settings, redis_url=redis.url)


def _run_gateways(settings: Settings, targets: list) -> int:
    if settings.gateway_workers == 1:
        return _run_gateway(settings, targets)
    return _supervise(settings, targets)


def _run_gateway(settings: Settings, targets: list, sockets: list[socket.socket] | None = None) -> int:
    """The gateway in this process, under uvicorn, until a signal."""
    import uvicorn

    from agentgate.gateway.app import create_app

    app = create_app(settings, engines=targets)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=settings.log_level.lower(),
        lifespan="on",
        access_log=settings.access_log,
        timeout_graceful_shutdown=5,
    )
    server = _server_class(uvicorn)(config, app, settings.drain_seconds)
    # uvicorn re-raises the signal that stopped it once it is done; with the default SIGTERM action that
    # would end this process before the caller stops what it started (engines, Redis): make it a no-op.
    previous = signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        server.run(sockets=sockets)
    finally:
        signal.signal(signal.SIGTERM, previous)
    return 0 if server.started else 1


# -- several gateway processes on one port -----------------------------------------------------


def reuseport_socket(host: str, port: int, listen: bool = True) -> socket.socket:
    """A TCP socket bound with SO_REUSEPORT: every gateway worker binds its own
    on the same port and the kernel spreads new connections over them."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    if listen:
        sock.listen(2048)
    return sock


def gateway_worker(
    settings: Settings,
    engines: list[tuple[str, int | None]],
    parent_pid: int,
    index: int,
) -> None:
    """One gateway process of ``--gateway-workers`` (spawned by the supervisor)."""
    _logging(settings.log_level)
    from agentgate.gateway.engines import EngineTarget, WatchedPid

    def watch_parent() -> None:
        while True:
            if os.getppid() != parent_pid:
                log.warning("gateway worker %d: the supervisor is gone; stopping", index)
                os.kill(os.getpid(), signal.SIGTERM)
                return
            threading.Event().wait(0.5)

    threading.Thread(target=watch_parent, name="watch-supervisor", daemon=True).start()
    sock = reuseport_socket(settings.host, settings.port)
    targets = [EngineTarget(address, WatchedPid(pid) if pid else None) for address, pid in engines]
    try:
        code = _run_gateway(settings, targets, sockets=[sock])
    except KeyboardInterrupt:  # Ctrl-C reaches every process of the terminal's group; it has drained already
        code = 0
    sys.exit(code)


def _supervise(settings: Settings, targets: list) -> int:
    """Start ``gateway_workers`` gateway processes sharing the port; wait for a signal or a worker's death."""
    import multiprocessing

    probe = reuseport_socket(settings.host, settings.port, listen=False)  # fails now if the port is taken
    port = probe.getsockname()[1]
    settings = dataclasses.replace(settings, port=port)
    engines = [(t.address, getattr(t.process, "pid", None)) for t in targets]
    context = multiprocessing.get_context("spawn")
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    workers = []
    code = 0
    try:
        for i in range(settings.gateway_workers):
            worker = context.Process(target=gateway_worker, args=(settings, engines, os.getpid(), i),
                                     name=f"agentgate-gateway-{i}")  # fmt: skip
            worker.start()
            workers.append(worker)
        log.info("agentgate serving on http://%s:%d with %d gateway workers (SO_REUSEPORT), %d engine(s), redis %s",
                 settings.host, port, len(workers), len(targets), _redacted(settings.redis_url))  # fmt: skip
        while not stop.wait(0.2):
            for t in targets:  # reaps a dead engine, so workers see it gone
                if t.process is not None:
                    t.process.is_alive()
            dead = [w for w in workers if not w.is_alive()]
            if dead:
                log.error(
                    "gateway worker %s exited (code %s); stopping",
                    dead[0].name,
                    dead[0].exitcode,
                )
                code = 1
                break
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for worker in workers:
            if worker.is_alive():
                worker.terminate()  # SIGTERM: the worker drains its requests, then exits
        for worker in workers:
            worker.join(settings.drain_seconds + 15)
            if worker.is_alive():
                worker.kill()
                worker.join(5)
        probe.close()
    return code


def _redacted(url: str | None) -> str:
    from agentgate.gateway.redis_state import redact_url

    return redact_url(url) if url else "none"


def _server_class(uvicorn):
    """uvicorn.Server that drains the gateway before it shuts down: stop
    accepting, give requests in flight ``drain_seconds`` to finish, abort the
    rest (their streams end with finish reason "abort" and [DONE]), then
    uvicorn's own shutdown and the lifespan (which stops the engine)."""
    from sse_starlette.sse import AppStatus

    # sse-starlette would cancel every stream mid-flight at the first signal; the drain ends them instead.
    AppStatus.disable_automatic_graceful_drain()

    class GatewayServer(uvicorn.Server):
        def __init__(self, config, app, drain_seconds: float) -> None:
            super().__init__(config)
            self._app = app
            self._drain_seconds = drain_seconds

        async def startup(self, sockets=None) -> None:
            await super().startup(sockets)
            # Start-up objects (modules, tokenizer tables) never die: keep the collector off them, and
            # collect young objects less often, so no full collection stalls the loop mid-stream.
            gc.collect()
            gc.freeze()
            gc.set_threshold(20_000, 20, 20)

        async def shutdown(self, sockets=None) -> None:
            for listener in self.servers:
                listener.close()
            for connection in list(self.server_state.connections):
                connection.shutdown()  # no new requests on kept-alive connections
            state = getattr(self._app.state, "gateway", None)
            if state is not None:
                await state.registry.drain(self._drain_seconds, give_up=lambda: self.force_exit)
            AppStatus.should_exit = True
            await super().shutdown(sockets)

    return GatewayServer


def _generate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    import os

    from agentgate.engine import LLM, SamplingParams

    options: dict[str, Any] = {
        "runner": args.runner or os.environ.get("AGENTGATE_RUNNER", "overlap"),
        "dtype": args.dtype,
    }
    if args.max_model_len is not None:
        options["max_model_len"] = args.max_model_len
    llm = LLM(args.model, **options)
    params = SamplingParams(
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        top_p=args.top_p,
        seed=args.seed,
    )
    if args.raw or llm.tokenizer is None or llm.tokenizer.chat_template is None:
        [out] = llm.generate(args.prompt, params)
    else:
        [out] = llm.chat([{"role": "user", "content": args.prompt}], params)
    print(out.text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
