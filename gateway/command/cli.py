"""The ``agentgate`` command.

    agentgate serve [--engines N] [--gateway-workers M] [--model PATH] [--port 8000] ...
    agentgate engine --address tcp://0.0.0.0:5555 [--model PATH] [--redis-url redis://... --advertise-address ...]
    agentgate gateway --engine tcp://HOST:5555 [--engine ...] [--redis-url redis://...] ...
    agentgate gateway --redis-url redis://...      (the engines registered in Redis, found while it runs)
    agentgate generate "Write a haiku about GPUs" [--max-tokens 64]
    agentgate keys DIR      (CurveZMQ keys for --engine-curve-dir)

Process topology:

- ``serve`` (one machine): Redis (embedded ``redis-server`` on a private unix
  socket, unless ``--redis-url``), N engine processes on private IPC
  addresses, and the gateway. With ``--gateway-workers 1`` (default) the
  gateway runs in this process (``gateway.http.server``) and owns the engines (it
  watches them and stops them on shutdown). With M > 1 this process is a
  supervisor of M gateway processes sharing the port (``gateway.command.workers``);
  it stops them, then the engines, then Redis.
- ``engine``: one engine process in the foreground, bound to ``--address``; with
  ``--redis-url`` it announces itself in Redis (``gateway.engines.registry``), and SIGTERM
  drains it for ``--drain-seconds`` (its entry says draining), then it exits 0.
- ``gateway``: a gateway (or M workers) in front of engines started elsewhere
  (``--engine``, repeatable), with the embedded Redis unless ``--redis-url``; without
  ``--engine``, the engines registered in ``--redis-url`` (``gateway.engines.discovery``).
  Several gateways on several machines share one ``--redis-url``.
- ``keys``: writes an engine key pair and a gateway key pair for ``--engine-curve-dir``
  (``engine.front.socket_keys``): an engine bound off loopback authenticates its gateways with them, and
  refuses to start without them unless ``--insecure-engine-socket``.

Every flag can also be set as an ``AGENTGATE_*`` environment variable (see
``gateway.config.settings`` and ``gateway.config.flags``); a flag on the command line wins. Shutdown on
SIGINT/SIGTERM is clean: requests in flight get ``--drain-seconds``, then
everything this command started stops.

``generate`` runs the offline engine (``engine.LLM``) in this process and
prints the completion.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import logging
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from agentgate.engine.scheduling.wait_bound import WaitBound
from agentgate.gateway.config.flags import add_settings_flags, configure_logging, settings_from_args
from agentgate.gateway.config.settings import Settings
from agentgate.gateway.observation.tracing import check_tracing, traces_endpoint

if TYPE_CHECKING:
    from agentgate.engine.front.socket_keys import EngineKeys
    from agentgate.gateway.engines.pool import EngineTarget

log = logging.getLogger("agentgate.gateway")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentgate", description="Serve language models to agents.")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser(
        "serve",
        help="start Redis, engine(s) and the OpenAI-compatible gateway (or gateway workers) on this machine",
    )
    add_settings_flags(serve, "serve")
    serve.set_defaults(func=_serve)

    engine = commands.add_parser("engine", help="run one engine process, bound to --address, in the foreground")
    engine.add_argument(
        "--address", default=None, help="the address to bind: tcp://HOST:PORT or ipc:///PATH [env AGENTGATE_ADDRESS]"
    )
    engine.add_argument(
        "--advertise-address",
        default=None,
        help="with --redis-url: the address gateways dial, announced in the registry (default: "
        "--address; required when that binds every interface: 0.0.0.0, [::] or *), e.g. tcp://engine-0.engines:5555 "
        "[env AGENTGATE_ADVERTISE_ADDRESS]",
    )
    add_settings_flags(engine, "engine")
    engine.set_defaults(func=_engine)

    gateway = commands.add_parser(
        "gateway",
        help="run the gateway in front of engines started elsewhere (--engine)",
    )
    gateway.add_argument(
        "--engine",
        dest="engine_addresses",
        action="append",
        default=None,
        metavar="ADDRESS",
        help="an engine to serve, tcp://HOST:PORT or ipc:///PATH (repeatable) [env AGENTGATE_ENGINE, comma-separated]",
    )
    add_settings_flags(gateway, "gateway")
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
    keys = commands.add_parser(
        "keys", help="write CurveZMQ key pairs for engines and gateways into DIR (for --engine-curve-dir)"
    )
    keys.add_argument("directory", metavar="DIR", help="created if need be; existing keys are not overwritten")
    keys.set_defaults(func=_keys)
    # `agentgate ops ...` is the operator CLI in agents/ (an HTTP client); main() hands it its arguments
    commands.add_parser("ops", help="operate a running server: status, pause, resume, abort, sessions", add_help=False)
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
            check_tracing(traces_endpoint(settings.otlp_traces_endpoint))
        if args.command == "gateway" and settings.engine_curve_dir:
            from agentgate.engine.front.socket_keys import GatewayKeys

            GatewayKeys.load(settings.engine_curve_dir)  # read again by each gateway process
    except ValueError as exc:  # includes the engine's InvalidRequestError
        parser.error(str(exc))
    configure_logging(settings.log_level)
    # Engine processes read it for their own logging, which wants the upper-case name.
    os.environ["AGENTGATE_LOG_LEVEL"] = settings.log_level.upper()
    return settings


def _serve(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    settings = _setup(args, parser)
    engine_config = settings.engine_config()
    from agentgate.engine.front.addresses import private_address, remove_socket_file
    from agentgate.engine.front.spawn import start_engine_process, stop_engine_process
    from agentgate.gateway.engines.pool import EngineTarget
    from agentgate.gateway.engines.supervisor import spawner

    with contextlib.ExitStack() as stack:
        settings = _with_redis(stack, settings)
        targets = []
        for i in range(settings.engines):
            address = private_address()
            log.info(
                "starting engine %d/%d (runner %s, model %s, wait bound %s) on %s",
                i + 1,
                settings.engines,
                engine_config.runner,
                engine_config.model or "default",
                WaitBound(engine_config.max_wait).describe(),
                address,
            )
            process = start_engine_process(engine_config, address)
            stack.callback(remove_socket_file, address)  # runs after the engine stopped
            stack.callback(stop_engine_process, process)
            # Restarted by the gateway (one process), or by the supervisor of --gateway-workers, whose
            # workers re-attach (gateway.engines.supervisor).
            targets.append(EngineTarget(address, process, owned=True, start=spawner(engine_config, address)))
        return _run_gateways(settings, targets)


def _gateway(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    settings = _setup(args, parser)
    given = args.engine_addresses or [os.environ.get("AGENTGATE_ENGINE", "")]
    addresses = [part.strip() for item in given for part in item.split(",") if part.strip()]
    if not addresses and settings.redis_url is None:
        parser.error(
            "agentgate gateway needs --engine ADDRESS (or AGENTGATE_ENGINE), or --redis-url to find the "
            "engines registered there"
        )
    if not addresses:
        log.info("no --engine: serving the engines registered in redis (agentgate engine --redis-url)")
    from agentgate.gateway.engines.pool import EngineTarget

    with contextlib.ExitStack() as stack:
        settings = _with_redis(stack, settings)
        return _run_gateways(settings, [EngineTarget(address) for address in addresses])


def _engine(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    settings = _setup(args, parser)
    address = args.address or os.environ.get("AGENTGATE_ADDRESS")
    if not address:
        parser.error("agentgate engine needs --address (tcp://HOST:PORT or ipc:///PATH)")
    from agentgate.engine.front.process import run_engine_process
    from agentgate.engine.model_files.model_path import model_display_name

    config = settings.engine_config()
    log.info(
        "engine (runner %s, model %s, wait bound %s) binding %s",
        config.runner,
        config.model or "default",
        WaitBound(config.max_wait).describe(),
        address,
    )
    lifecycle = None
    if settings.redis_url is not None:  # announced in the registry gateways without --engine read
        from agentgate.gateway.engines.registry import EngineAnnouncer, undialable

        advertised = args.advertise_address or os.environ.get("AGENTGATE_ADVERTISE_ADDRESS") or address
        if why := undialable(advertised):
            parser.error(
                f"agentgate engine will not register in redis: {why}; give --advertise-address (or "
                "AGENTGATE_ADVERTISE_ADDRESS) with the address gateways dial, e.g. tcp://10.1.2.3:5555"
            )
        lifecycle = EngineAnnouncer(
            settings.redis_url, settings.redis_prefix, advertised, lambda: _vocab_digest(config.model)
        )
    curve = _engine_socket_keys(settings, address, parser)
    run_engine_process(
        config,
        address,
        model_display_name(config.model),
        drain_seconds=settings.drain_seconds,
        lifecycle=lifecycle,
        curve=curve,
    )
    return 0


def _engine_socket_keys(settings: Settings, address: str, parser: argparse.ArgumentParser) -> EngineKeys | None:
    """The keys the engine's peers must hold (``--engine-curve-dir``). Off loopback there must be
    some: without them the engine exits 2, naming both flags, unless ``--insecure-engine-socket``."""
    from agentgate.engine.front.socket_keys import CurveKeyError, EngineKeys, is_loopback, uses_curve

    if settings.engine_curve_dir:
        try:
            keys = EngineKeys.load(settings.engine_curve_dir)
        except CurveKeyError as exc:
            parser.error(str(exc))
        if uses_curve(address):
            log.info("engine socket %s: CurveZMQ, %d gateway key(s) accepted", address, len(keys.gateways))
        return keys
    if is_loopback(address):
        return None
    if not settings.insecure_engine_socket:
        parser.error(
            f"agentgate engine will not bind {address} off loopback without authentication: whoever reaches "
            "it could submit, abort and read every request; give --engine-curve-dir DIR (agentgate keys DIR "
            "makes the keys; docs/deploy.md) or, on a private network only, --insecure-engine-socket"
        )
    log.warning(
        "engine socket %s is off loopback without authentication (--insecure-engine-socket): whoever "
        "reaches it can submit, abort and read every request",
        address,
    )
    return None


def _keys(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from agentgate.engine.front.socket_keys import CurveKeyError, make_keys

    try:
        written = make_keys(args.directory)
    except (CurveKeyError, OSError) as exc:
        parser.error(str(exc))
    print("\n".join(str(path) for path in written))
    print(
        "engines need engine.key, engine.key_secret and gateway.key; gateways engine.key and "
        "gateway.key_secret; both take the directory as --engine-curve-dir (docs/deploy.md)"
    )
    return 0


def _vocab_digest(model: str | None) -> str:
    """The digest of ``model``'s tokenizer, announced with the engine; "" when it has none (a
    gateway takes no such engine, and could not serve the model either)."""
    from agentgate.engine.errors import ModelLoadError
    from agentgate.engine.model_files.model_path import resolve_model_path
    from agentgate.engine.text.tokenizer import load_tokenizer

    try:
        return load_tokenizer(resolve_model_path(model)).vocab_digest
    except ModelLoadError as exc:
        log.warning("the model's tokenizer cannot be read (%s): gateways will not route here", exc)
        return ""


def _with_redis(stack: contextlib.ExitStack, settings: Settings) -> Settings:
    """The settings with a Redis URL: the given one, or an embedded server's (stopped with ``stack``)."""
    if settings.redis_url is not None:
        return settings
    from agentgate.gateway.state.embedded_redis import EmbeddedRedis, EmbeddedRedisError

    try:
        redis = EmbeddedRedis(settings.redis_dir, port_hint=settings.port).start()
    except EmbeddedRedisError as exc:
        raise SystemExit(f"agentgate: {exc}") from None
    stack.callback(redis.stop)
    return dataclasses.replace(settings, redis_url=redis.url)


def _run_gateways(settings: Settings, targets: list[EngineTarget]) -> int:
    """The gateway in this process, or ``--gateway-workers`` of them under a supervisor."""
    if settings.gateway_workers == 1:
        from agentgate.gateway.http.server import run_gateway

        return run_gateway(settings, targets)
    from agentgate.gateway.command.workers import supervise

    return supervise(settings, targets)


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
