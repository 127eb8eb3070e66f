"""Agent traffic against agentgate: ``python -m agentgate.loadtests``.

    python -m agentgate.loadtests --agents 16 --turns 4 --duration 60           # starts `agentgate serve` itself
    python -m agentgate.loadtests --url http://127.0.0.1:8000 --agents 8        # a running server
    python -m agentgate.loadtests --mode open --rate 2 --duration 30             # Poisson arrivals, 2 conversations/s
    python -m agentgate.loadtests --abort-every 5 --abort-fraction 0.3           # abort storms (client disconnects)
    python -m agentgate.loadtests --pause-at 20:5:keep                           # pause at 20 s for 5 s, then resume
    python -m agentgate.loadtests --save-result --metric-percentiles 50,90,99   # also vLLM bench's result JSON

Writes ``report.json``, ``latency_cdf.png`` and ``throughput.png`` to
``--out`` (default ``loadtests/out/<time>``) and prints a summary table; with
``--save-result``, also the JSON ``vllm bench serve --save-result`` writes
(:mod:`loadtests.vllm_bench`: its keys, names and percentiles). The
workload is described in :mod:`loadtests.workload`, the figures in
:mod:`loadtests.metrics`, the run in :mod:`loadtests.driver`.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from agentgate.loadtests import report as reporting
from agentgate.loadtests import vllm_bench
from agentgate.loadtests.driver import Pause, RunConfig, Runner, RunState
from agentgate.loadtests.metrics import SLO, percentile, summarize
from agentgate.loadtests.server import machine_busy_seconds, start_server, tree_cpu_seconds
from agentgate.loadtests.workload import WorkloadConfig

SERIES_KEYS = ("t", "agentgate_requests_running", "agentgate_requests_waiting", "agentgate_kv_cache_usage_ratio")


def _pause(text: str) -> Pause:
    """AT[:DURATION[:MODE]]"""
    parts = text.split(":")
    try:
        at = float(parts[0])
        duration = float(parts[1]) if len(parts) > 1 and parts[1] else 5.0
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected AT[:DURATION[:MODE]] in seconds, got {text!r}") from None
    mode = parts[2] if len(parts) > 2 else "keep"
    if mode not in ("abort", "wait", "keep"):
        raise argparse.ArgumentTypeError(f"pause mode must be abort, wait or keep, got {mode!r}")
    return Pause(at, duration, mode)


def _range(text: str) -> tuple[float, float]:
    low, _, high = text.partition(",")
    return float(low), float(high or low)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m agentgate.loadtests", description="Simulated agent traffic against agentgate."
    )
    target = p.add_argument_group("target")
    target.add_argument("--url", default=None, help="a running server (default: start one, see --serve)")
    target.add_argument(
        "--serve", action="store_true", help="start `agentgate serve` for the run (the default without --url)"
    )
    target.add_argument("--server-args", default="", help='flags for `agentgate serve`, e.g. "--runner sync"')
    target.add_argument("--server-pid", type=int, default=None, help="with --url: the server's pid, for CPU figures")
    target.add_argument("--api-key", default=os.environ.get("AGENTGATE_API_KEY"))
    target.add_argument(
        "--admin-key", default=os.environ.get("AGENTGATE_ADMIN_KEY"), help="for --pause-at and --abort-via server"
    )
    load = p.add_argument_group("load")
    load.add_argument("--agents", type=int, default=16, help="closed loop: concurrent agents")
    load.add_argument("--turns", type=int, default=4, help="requests per conversation")
    load.add_argument("--duration", type=float, default=60.0, help="seconds during which turns start")
    load.add_argument("--mode", choices=("closed", "open"), default="closed")
    load.add_argument("--rate", type=float, default=1.0, help="open loop: conversations per second (Poisson)")
    load.add_argument("--max-concurrency", type=int, default=256, help="open loop: most conversations at once")
    load.add_argument("--seed", type=int, default=0)
    load.add_argument("--reply-tokens", type=int, default=32)
    load.add_argument("--calls", type=_range, default=(1, 4), metavar="MIN,MAX", help="tool calls per turn")
    load.add_argument(
        "--tool-latency",
        type=_range,
        default=(0.05, 0.4),
        metavar="LOW,HIGH",
        help="seconds each simulated tool call takes (uniform)",
    )
    load.add_argument(
        "--complete-conversations",
        action="store_true",
        help="after --duration, finish the conversations begun (default: only the turns begun)",
    )
    load.add_argument("--think-time", type=float, default=0.0, help="closed loop: seconds between conversations")
    load.add_argument(
        "--format",
        choices=("text", "openai", "tools"),
        default="text",
        help="text: tools in the system prompt; openai: tools + tool messages (needs issue 7); "
        "tools: the model writes the calls, which are run and answered",
    )
    chaos = p.add_argument_group("chaos")
    chaos.add_argument("--abort-every", type=float, default=None, metavar="S", help="an abort storm every S seconds")
    chaos.add_argument("--abort-fraction", type=float, default=0.25, help="share of in-flight requests per storm")
    chaos.add_argument(
        "--abort-via",
        choices=("client", "server"),
        default="client",
        help="client: close the connection; server: POST /abort_requests (admin key)",
    )
    chaos.add_argument(
        "--pause-at",
        type=_pause,
        action="append",
        default=[],
        metavar="AT[:DUR[:MODE]]",
        help="pause the server AT seconds in for DUR seconds (default 5, mode keep); repeatable",
    )
    out = p.add_argument_group("report")
    out.add_argument("--slo-ttft", type=float, default=2.7, help="goodput: TTFT bound in seconds")
    out.add_argument("--slo-tpot", type=float, default=0.25, help="goodput: TPOT bound in seconds")
    out.add_argument("--out", type=Path, default=None, help="output folder (default loadtests/out/<time>)")
    out.add_argument("--no-plots", action="store_true")
    out.add_argument("--no-progress", action="store_true")
    out.add_argument("--profile", action="store_true", help="cProfile the load generator into profile.txt")
    out.add_argument("--metrics-interval", type=float, default=2.0, help="seconds between /metrics scrapes")
    out.add_argument("--timeout", type=float, default=600.0, help="seconds per request (connect/read/write)")
    bench = p.add_argument_group("vLLM bench's result JSON (loadtests/vllm_bench.py)")
    bench.add_argument("--save-result", action="store_true", help="write it to --out, named as vLLM bench names it")
    bench.add_argument("--result-filename", default=None, help="its file name instead")
    bench.add_argument(
        "--percentile-metrics", default=",".join(vllm_bench.DEFAULT_PERCENTILE_METRICS), help="of ttft,tpot,itl,e2el"
    )
    bench.add_argument("--metric-percentiles", default="99", help='comma-separated, e.g. "50,90,99"')
    return p


class ProgressView:
    """A rich progress bar: elapsed time against the duration, and the figures so far."""

    def __init__(self, console: Console, duration: float) -> None:
        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[info]}"),
            console=console,
            auto_refresh=False,  # refreshed from the run's loop: no extra thread competing for the CPU
            transient=False,
        )
        self.duration = duration
        self.task = self.progress.add_task("load", total=duration, info="")
        self._seen = 0
        self._ttfts: list[float] = []
        self._tokens = 0
        self._ok = 0

    def __call__(self, state: RunState) -> None:
        records = state.records
        for r in records[self._seen :]:
            self._ok += r.ok
            if r.ok and r.ttft is not None:
                self._ttfts.append(r.ttft)
            self._tokens += len(r.token_times)
        self._seen = len(records)
        now = state.now()
        ok = self._ok
        bad = len(records) - ok
        tokens = self._tokens  # of finished requests
        p50 = percentile(self._ttfts[-200:], 50)
        info = (
            f"{ok} ok, {bad} not ok | {len(state.in_flight)} in flight | "
            f"{tokens / max(now, 1e-9):.1f} tok/s | TTFT p50 {p50 or 0:.2f}s"
            + (" | draining" if state.draining else "")
        )
        self.progress.update(
            self.task, completed=min(now, self.duration), info=info, description="drain" if state.draining else "load"
        )
        self.progress.refresh()


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    console = Console()
    if not console.is_terminal:
        console = Console(width=120)  # a log file: room for the tables
    out = args.out or Path("loadtests/out") / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    server = None
    if args.url is None or args.serve:
        server_args = shlex.split(args.server_args)
        console.print(f"[dim]starting agentgate serve {' '.join(server_args)} (log: {out / 'server.log'})[/dim]")
        server = start_server(server_args, out, log_name="server.log")
        url, server_pid = server.url, server.pid
    else:
        url, server_pid = args.url, args.server_pid
    try:
        workload = WorkloadConfig(
            turns=args.turns,
            reply_tokens=args.reply_tokens,
            min_calls=int(args.calls[0]),
            max_calls=int(args.calls[1]),
            tool_latency=args.tool_latency,
            think_time=args.think_time,
            format=args.format,
        )
        config = RunConfig(
            url=url,
            agents=args.agents,
            duration=args.duration,
            mode=args.mode,
            rate=args.rate,
            max_concurrency=args.max_concurrency,
            seed=args.seed,
            workload=workload,
            slo=SLO(args.slo_ttft, args.slo_tpot),
            api_key=args.api_key,
            admin_key=args.admin_key,
            abort_every=args.abort_every,
            abort_fraction=args.abort_fraction,
            abort_via=args.abort_via,
            pauses=tuple(args.pause_at),
            metrics_interval=args.metrics_interval,
            request_timeout=args.timeout,
            complete_conversations=args.complete_conversations,
        )
        view = None if args.no_progress else ProgressView(console, args.duration)
        runner = Runner(config, on_progress=view)
        profiler = cProfile.Profile() if args.profile else None

        client_cpu0, server_cpu0 = time.process_time(), tree_cpu_seconds(server_pid) if server_pid else None
        busy0, total0 = machine_busy_seconds()
        wall0 = time.perf_counter()
        if view is not None:
            view.progress.start()
        try:
            if profiler is not None:
                profiler.enable()
            state = anyio.run(runner.run)
        finally:
            if profiler is not None:
                profiler.disable()
            if view is not None:
                view.progress.stop()
        wall = time.perf_counter() - wall0
        client_cpu = time.process_time() - client_cpu0
        server_cpu = tree_cpu_seconds(server_pid) - server_cpu0 if server_pid and server_cpu0 is not None else None
        busy1, total1 = machine_busy_seconds()

        records = state.records
        end = max((r.end for r in records), default=state.now())
        summary = summarize(records, end, config.slo)
        machine_busy = (busy1 - busy0) / wall if total1 > total0 else None
        cpu: dict[str, Any] = {
            "wall_s": wall,
            "client_cpu_s": client_cpu,
            "client_cores": client_cpu / wall,
            "server_cpu_s": server_cpu,
            "server_cores": server_cpu / wall if server_cpu is not None else None,
            "machine_busy_cores": machine_busy,
            "machine_cores": os.cpu_count(),
            "client_share_of_busy": (client_cpu / wall) / machine_busy if machine_busy else None,
            "client_cpu_ms_per_output_token": 1000 * client_cpu / max(1, sum(len(r.token_times) for r in records)),
        }
        report: dict[str, Any] = {
            "config": {
                "url": url,
                "server_command": server.command if server else None,
                "agents": args.agents,
                "turns": args.turns,
                "duration": args.duration,
                "mode": args.mode,
                "rate": args.rate if args.mode == "open" else None,
                "seed": args.seed,
                "reply_tokens": args.reply_tokens,
                "calls": list(args.calls),
                "tool_latency": list(args.tool_latency),
                "format": args.format,
                "complete_conversations": args.complete_conversations,
                "abort_every": args.abort_every,
                "abort_fraction": args.abort_fraction if args.abort_every else None,
                "abort_via": args.abort_via if args.abort_every else None,
                "pauses": [p.__dict__ for p in args.pause_at],
            },
            "run": {"conversations": state.conversations, "dropped_arrivals": state.dropped},
            "summary": summary,
            "server_view": reporting.server_view(state.samples),
            "cpu": cpu,
            "events": state.events,
            "series": {
                "metrics": [{k: s.get(k) for k in SERIES_KEYS} for s in state.samples],
            },
            "notes": [],
        }
        if profiler is not None:
            stream = io.StringIO()
            stats = pstats.Stats(profiler, stream=stream).strip_dirs().sort_stats("tottime")
            stats.print_stats(30)
            stream.write("\n\n-- by cumulative time --\n")
            stats.sort_stats("cumulative").print_stats(30)
            (out / "profile.txt").write_text(stream.getvalue())
            profiler.dump_stats(out / "profile.pstats")
            report["profile"] = str(out / "profile.txt")
        if args.save_result:
            report["vllm_bench_result"] = str(save_vllm_bench(args, records, end, config, out))
        plots = [] if args.no_plots else reporting.plot(report, records, state.samples, out)
        report["plots"] = [str(p) for p in plots]
        path = reporting.write_json(report, records, out)
        reporting.print_summary(report, console)
        console.print(f"report: {path}" + (f"; plots: {', '.join(str(p) for p in plots)}" if plots else ""))
        failed = summary["requests"]["ok"] == 0
        return 1 if failed else 0
    finally:
        if server is not None:
            server.stop()


def save_vllm_bench(args: argparse.Namespace, records: list, duration: float, config: RunConfig, out: Path) -> Path:
    """vLLM bench's result JSON of this run (the model as the server's /v1/models names it first)."""
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    models = httpx.get(f"{config.url}/v1/models", headers=headers, timeout=30).json()["data"]
    metrics = [m for m in args.percentile_metrics.split(",") if m]
    unknown = set(metrics) - set(vllm_bench.METRICS)
    if unknown:
        raise SystemExit(f"--percentile-metrics: unknown {sorted(unknown)}; known: {', '.join(vllm_bench.METRICS)}")
    result = vllm_bench.result_json(
        records,
        duration,
        config.slo,
        model_id=models[0]["id"],
        request_rate=args.rate if args.mode == "open" else None,
        max_concurrency=args.max_concurrency if args.mode == "open" else args.agents,
        percentile_metrics=metrics,
        percentiles=[float(p) for p in args.metric_percentiles.split(",") if p],
    )
    return vllm_bench.save(result, out, args.result_filename)


if __name__ == "__main__":
    sys.exit(main())
