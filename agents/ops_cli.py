"""``agentgate ops``: operate a running agentgate server.

    agentgate ops status                       paused?, running/waiting, KV usage, engines, TTFT
    agentgate ops pause [--mode abort|wait|keep]
    agentgate ops resume
    agentgate ops abort ID [ID ...]            by request id (X-Request-Id)
    agentgate ops abort --session S | --key K | --all
    agentgate ops sessions [list]              every session (admin)
    agentgate ops sessions show ID | delete ID

``--url`` (or ``AGENTGATE_URL``, default http://127.0.0.1:8000) names the
server, ``--admin-key`` (or ``AGENTGATE_ADMIN_KEY``) the admin key. ``--json``
prints the server's answers as JSON instead of tables. Exit status: 0 done,
1 the server refused or could not be reached, 2 a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

from agentgate.agents._requests import DEFAULT_URL
from agentgate.agents.admin import PAUSE_MODES, Admin, Status
from agentgate.agents.errors import AgentGateError, APIStatusError


def build_parser() -> argparse.ArgumentParser:
    def common(parser: argparse.ArgumentParser, default: Any) -> None:
        # accepted before and after the command: `ops --json status` and `ops status --json`
        value = (lambda v: v) if default is None else (lambda v: argparse.SUPPRESS)
        parser.add_argument("--url", default=value(None), help=f"the server [env AGENTGATE_URL; default {DEFAULT_URL}]")
        parser.add_argument("--admin-key", default=value(None), help="the admin key [env AGENTGATE_ADMIN_KEY]")
        parser.add_argument("--timeout", type=float, default=value(30.0), help="seconds to wait for each answer")
        parser.add_argument("--json", action="store_true", default=value(False), help="print JSON, not tables")

    parser = argparse.ArgumentParser(prog="agentgate ops", description="Operate a running agentgate server.")
    common(parser, None)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add = commands.add_parser

    def add_command(name: str, **kw: Any) -> argparse.ArgumentParser:
        sub = add(name, **kw)
        common(sub, argparse.SUPPRESS)
        return sub

    commands.add_parser = add_command  # type: ignore[method-assign]

    pause = commands.add_parser("pause", help="pause every engine")
    pause.add_argument(
        "--mode",
        choices=PAUSE_MODES,
        default="abort",
        help="abort: end requests in flight; wait: let them finish first; keep: freeze them (default abort)",
    )
    commands.add_parser("resume", help="resume every engine")
    status = commands.add_parser("status", help="paused?, running/waiting, KV usage, engines, latency")
    status.add_argument("--watch", type=float, default=None, metavar="SECONDS", help="refresh every SECONDS")

    abort = commands.add_parser("abort", help="abort requests by id, session, API key, or all")
    abort.add_argument("request_ids", nargs="*", metavar="ID", help="request ids (X-Request-Id)")
    abort.add_argument("--session", default=None, help="every request of this session")
    abort.add_argument("--key", default=None, help="every request made with this API key")
    abort.add_argument("--all", action="store_true", help="every request in flight")

    sessions = commands.add_parser("sessions", help="list, show or delete sessions")
    sessions.add_argument("action", nargs="?", choices=("list", "show", "delete"), default="list")
    sessions.add_argument("session_id", nargs="?", default=None)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    console = Console(highlight=False)
    errors = Console(stderr=True, highlight=False)
    if args.command == "abort":
        chosen = sum([bool(args.request_ids), args.session is not None, args.key is not None, args.all])
        if chosen != 1:
            parser.error("abort takes request ids, or exactly one of --session, --key, --all")
    if args.command == "sessions" and args.action in ("show", "delete") and not args.session_id:
        parser.error(f"sessions {args.action} needs a session id")
    admin_key = args.admin_key if args.admin_key is not None else os.environ.get("AGENTGATE_ADMIN_KEY")
    try:
        with Admin(args.url, admin_key=admin_key, timeout=args.timeout, max_retries=0) as admin:
            return COMMANDS[args.command](admin, args, console)
    except APIStatusError as exc:
        errors.print(
            f"[red]error:[/red] {exc.message} [dim](HTTP {exc.status_code}"
            f"{', ' + str(exc.code) if exc.code else ''})[/dim]"
        )
        if exc.status_code in (401, 403) and not admin_key:
            errors.print("[dim]pass the admin key with --admin-key or AGENTGATE_ADMIN_KEY[/dim]")
        if exc.status_code in (404, 405) and args.command == "sessions" and exc.code in (404, 405, None):
            errors.print("[dim]this server has no /v1/sessions routes (sessions come with issue 8)[/dim]")
        return 1
    except AgentGateError as exc:
        errors.print(f"[red]error:[/red] {exc}")
        return 1
    except KeyboardInterrupt:
        return 130


def _print_json(console: Console, value: Any) -> None:
    console.print_json(json.dumps(value, default=str))


def cmd_pause(admin: Admin, args: argparse.Namespace, console: Console) -> int:
    answer = admin.pause(args.mode)
    if args.json:
        _print_json(console, answer)
    else:
        console.print(f"[yellow]paused[/yellow] {admin.base_url} (mode [bold]{answer.get('mode', args.mode)}[/bold])")
    return 0


def cmd_resume(admin: Admin, args: argparse.Namespace, console: Console) -> int:
    answer = admin.resume()
    if args.json:
        _print_json(console, answer)
    else:
        console.print(f"[green]resumed[/green] {admin.base_url}")
    return 0


def status_table(status: Status) -> Table:
    table = Table(title=f"agentgate at {status.url}", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    if status.health is None and status.errors:
        table.add_row("health", "[red]unreachable[/red]")
        for error in status.errors:
            table.add_row("[red]error[/red]", error)
        return table
    if status.healthy:
        health = "[green]ok[/green]"
    else:
        detail = status.health.get("error", {}).get("message") if isinstance(status.health, dict) else status.health
        health = f"[red]unhealthy[/red] {detail or ''}"
    table.add_row("health", health)
    paused = {True: "[yellow]paused[/yellow]", False: "[green]running[/green]", None: "[dim]unknown[/dim]"}
    table.add_row("state", paused[status.paused])
    engines = "?" if status.engines is None else str(status.engines)
    alive = "?" if status.engines_alive is None else f"{status.engines_alive:.0f}"
    table.add_row("engines", f"{alive} alive / {engines}")
    if status.redis is not None:
        style = {"up": "green", "down": "red"}.get(status.redis, "dim")
        table.add_row("redis", f"[{style}]{status.redis}[/{style}]")
    table.add_row(
        "requests",
        f"{status.running:.0f} running, {status.waiting:.0f} waiting in the engines; "
        f"{status.gateway_in_flight:.0f} in flight at the gateway "
        f"({status.gateway_waiting:.0f} before their first token)",
    )
    table.add_row("KV cache", f"{status.kv_usage:.1%} in use")
    hit = "-" if status.prefix_hit_rate is None else f"{status.prefix_hit_rate:.1%} of prompt tokens"
    table.add_row("prefix cache hits", hit)
    ttft = "-" if status.ttft_p50 is None else f"p50 {status.ttft_p50:.3f} s, p99 {status.ttft_p99:.3f} s"
    table.add_row("time to first token", ttft)
    if status.requests_by_reason:
        done = ", ".join(f"{k} {v:.0f}" for k, v in sorted(status.requests_by_reason.items()) if v)
        table.add_row("finished", done or "0")
    table.add_row("preemptions", f"{status.preemptions:.0f}")
    if status.version:
        table.add_row("version", status.version)
    for error in status.errors:
        table.add_row("[red]error[/red]", error)
    return table


def cmd_status(admin: Admin, args: argparse.Namespace, console: Console) -> int:
    if args.watch:
        from rich.live import Live

        with Live(status_table(admin.status()), console=console, refresh_per_second=4) as live:
            while True:
                time.sleep(args.watch)
                live.update(status_table(admin.status()))
    status = admin.status()
    if args.json:
        _print_json(console, status.to_json())
    else:
        console.print(status_table(status))
    return 0 if status.healthy and not status.errors else 1


def cmd_abort(admin: Admin, args: argparse.Namespace, console: Console) -> int:
    if args.all:
        answer = admin.abort(all=True)
    elif args.session is not None:
        answer = admin.abort(session_id=args.session)
    elif args.key is not None:
        answer = admin.abort(api_key=args.key)
    else:
        answer = admin.abort(args.request_ids)
    if args.json:
        _print_json(console, answer)
        return 0
    aborted = answer.get("aborted", []) if isinstance(answer, dict) else []
    if args.all:
        console.print("[yellow]aborted every request in flight[/yellow]")
    elif args.request_ids:
        missing = [i for i in args.request_ids if i not in aborted]
        if aborted:
            console.print(f"[yellow]aborted[/yellow] {', '.join(aborted)}")
        if missing:
            console.print(f"[dim]not in flight: {', '.join(missing)}[/dim]")
        return 0 if aborted else 1
    else:
        what = f"session {args.session}" if args.session is not None else "the API key given"
        count = answer.get("count", len(aborted)) if isinstance(answer, dict) else "?"
        console.print(f"[yellow]aborted[/yellow] {count} request(s) of {what}")
    return 0


def _sessions_table(sessions: list[Any]) -> Table:
    table = Table(title=f"{len(sessions)} session(s)", title_justify="left")
    for column in ("id", "owner", "turns", "tokens in/out", "engine", "last activity", "expires in"):
        table.add_column(column)
    now = time.time()
    for s in sessions:
        if not isinstance(s, dict):
            table.add_row(str(s), *["-"] * 6)
            continue
        usage = s.get("usage") or {}
        tokens = f"{usage.get('prompt_tokens', '-')}/{usage.get('completion_tokens', '-')}" if usage else "-"
        engine = str(s.get("engine") or "-")
        expires = s.get("expires_at")
        table.add_row(
            str(s.get("id", "-")),
            str(s.get("owner", "-")),
            str(s.get("turns", "-")),
            tokens,
            engine if len(engine) <= 24 else "..." + engine[-21:],
            _cell(s.get("last_activity")),
            f"{expires - now:.0f} s" if isinstance(expires, (int, float)) else "-",
        )
    return table


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and value > 1e9:  # a Unix time
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(value))
    if isinstance(value, (dict, list)):
        text = json.dumps(value, default=str)
        return text if len(text) <= 60 else text[:57] + "..."
    return str(value)


def cmd_sessions(admin: Admin, args: argparse.Namespace, console: Console) -> int:
    if args.action == "list":
        sessions = admin.sessions()
        if args.json:
            _print_json(console, sessions)
        else:
            console.print(_sessions_table(sessions if isinstance(sessions, list) else [sessions]))
    elif args.action == "show":
        session = admin.get_session(args.session_id)
        if args.json or not isinstance(session, dict):
            _print_json(console, session)
        else:
            table = Table(title=f"session {args.session_id}", show_header=False, title_justify="left")
            table.add_column(style="bold")
            table.add_column()
            for key, value in session.items():
                if key == "messages" and isinstance(value, list):
                    table.add_row("messages", f"{len(value)} message(s)")
                    for m in value[-6:]:
                        text = m.get("content") if isinstance(m, dict) else m
                        role = m.get("role", "?") if isinstance(m, dict) else "?"
                        table.add_row("", f"[dim]{role}:[/dim] {_cell(text)[:100]}")
                else:
                    table.add_row(key, _cell(value))
            console.print(table)
    else:
        answer = admin.delete_session(args.session_id)
        if args.json:
            _print_json(console, answer)
        else:
            console.print(f"[yellow]deleted[/yellow] session {args.session_id}")
    return 0


COMMANDS = {
    "pause": cmd_pause,
    "resume": cmd_resume,
    "status": cmd_status,
    "abort": cmd_abort,
    "sessions": cmd_sessions,
}

if __name__ == "__main__":
    sys.exit(main())
