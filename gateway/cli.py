"""The ``agentgate`` command.

    agentgate serve [--model PATH] [--port 8000] [--api-key KEY ...] ...
    agentgate generate "Write a haiku about GPUs" [--max-tokens 64]

``serve`` starts the engine process on a private IPC socket, then uvicorn
with the gateway, whose lifespan connects to the engine and stops it on
shutdown (SIGINT/SIGTERM), so no engine outlives its gateway. Every
``serve`` flag can also be set as an ``AGENTGATE_*`` environment variable
(see ``gateway.settings``); a flag on the command line wins.

``generate`` runs the offline engine (``engine.LLM``) in this process and
prints the completion.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import logging
import sys
from collections.abc import Sequence
from typing import Any

from gateway.settings import Settings, env_name, field_kind, flag_name, optional, parse_value

log = logging.getLogger("agentgate.gateway")


def _add_settings_flags(parser: argparse.ArgumentParser) -> None:
    for f in dataclasses.fields(Settings):
        flag = "--" + flag_name(f)
        kind = field_kind(f)
        default = f.default if f.default is not dataclasses.MISSING else None
        help = f"{f.metadata.get('help', '')} [env {env_name(f)}; default {default!r}]"
        if kind == "tuple":
            parser.add_argument(flag, dest=f.name, action="append", default=None, metavar="VALUE", help=help)
        elif kind == "bool":
            parser.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=help)
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

    serve = commands.add_parser("serve", help="start an engine and the OpenAI-compatible gateway in front of it")
    _add_settings_flags(serve)
    serve.set_defaults(func=_serve)

    generate = commands.add_parser("generate", help="generate a completion offline (no server) and print it")
    generate.add_argument("prompt", help="the prompt (sent as a user message when the model has a chat template)")
    generate.add_argument("--model", default=None, help="a .gguf file or an HF directory (default: the default model)")
    generate.add_argument("--runner", default=None, help="overlap (default), sync or null [env AGENTGATE_RUNNER]")
    generate.add_argument("--max-tokens", type=int, default=64)
    generate.add_argument("--temperature", type=float, default=0.0)
    generate.add_argument("--top-p", type=float, default=1.0)
    generate.add_argument("--seed", type=int, default=None)
    generate.add_argument("--max-model-len", type=int, default=None)
    generate.add_argument("--dtype", default="auto", help="auto, float32, float16 or bfloat16")
    generate.add_argument("--raw", action="store_true", help="send the prompt as is, without the chat template")
    generate.set_defaults(func=_generate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args, parser)
    except KeyboardInterrupt:
        return 130


def _serve(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    try:
        settings = settings_from_args(args)
        engine_config = settings.engine_config()
    except ValueError as exc:  # includes the engine's InvalidRequestError
        parser.error(str(exc))
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s", force=True
    )

    import uvicorn

    from engine.client import private_address, start_engine_process, stop_engine_process
    from gateway.app import EngineTarget, create_app

    address = private_address()
    log.info("starting the engine (runner %s, model %s) on %s", engine_config.runner,
             engine_config.model or "default", address)  # fmt: skip
    process = start_engine_process(engine_config, address)
    try:
        app = create_app(settings, engines=[EngineTarget(address, process, owned=True)])
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
        server.run()
        return 0 if server.started else 1
    finally:
        stop_engine_process(process)


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
                await state.drain(self._drain_seconds, give_up=lambda: self.force_exit)
            AppStatus.should_exit = True
            await super().shutdown(sockets)

    return GatewayServer


def _generate(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    import os

    from engine import LLM, SamplingParams

    options: dict[str, Any] = {
        "runner": args.runner or os.environ.get("AGENTGATE_RUNNER", "overlap"),
        "dtype": args.dtype,
    }
    if args.max_model_len is not None:
        options["max_model_len"] = args.max_model_len
    llm = LLM(args.model, **options)
    params = SamplingParams(max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p, seed=args.seed)
    if args.raw or llm.tokenizer is None or llm.tokenizer.chat_template is None:
        [out] = llm.generate(args.prompt, params)
    else:
        [out] = llm.chat([{"role": "user", "content": args.prompt}], params)
    print(out.text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
