"""The run's report: a JSON file, a summary table (rich), and PNG plots.

Files written to the output folder:

- ``report.json``: the configuration, the summary (see
  :func:`loadtests.metrics.summarize`), the server's view (prefix-cache hit
  rate and TTFT from /metrics deltas), CPU use of the client and the server,
  events (pauses, abort storms), time series, and every request;
- ``latency_cdf.png``: CDFs of TTFT, ITL, TPOT and end-to-end latency;
- ``throughput.png``: output tokens/s over time, with running/waiting requests
  and KV-cache usage from /metrics, and the pauses and abort storms marked.

Plots need matplotlib (``pip install agentgate[bench]``); without it they are
skipped with a note.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from agentgate.agents import prometheus
from agentgate.loadtests.metrics import RequestRecord, percentile


def server_view(samples: list[dict[str, float]]) -> dict[str, Any]:
    """Prefix-cache hit rate, server-side TTFT/ITL quantiles and request counts over the run (first vs last scrape)."""
    if len(samples) < 2:
        return {}
    first, last = samples[0], samples[-1]
    d = prometheus.delta(last, first)
    v = prometheus.value
    queries = v(d, "agentgate_prefix_cache_queries_tokens_total")
    hits = v(d, "agentgate_prefix_cache_hits_tokens_total")
    reasons = {}
    for key, value in d.items():
        name, labels = prometheus.split(key)
        if name == "agentgate_requests_total" and value:
            reasons[labels.get("finish_reason", "?")] = value
    drafted = v(d, "agentgate_spec_draft_tokens_total")
    accepted = v(d, "agentgate_spec_accepted_tokens_total")
    steps = v(d, "agentgate_decode_request_steps_total")
    return {
        "spec_draft_tokens": drafted,
        "spec_accepted_tokens": accepted,
        "spec_acceptance_rate": accepted / drafted if drafted else None,
        "tokens_per_step": v(d, "agentgate_decode_step_tokens_total") / steps if steps else None,
        "prefix_cache_hit_rate": hits / queries if queries else None,
        "prefix_cache_queries_tokens": queries,
        "prefix_cache_hits_tokens": hits,
        "ttft_p50_s": prometheus.histogram_quantile(d, "agentgate_time_to_first_token_seconds", 0.5),
        "ttft_p99_s": prometheus.histogram_quantile(d, "agentgate_time_to_first_token_seconds", 0.99),
        "itl_p50_s": prometheus.histogram_quantile(d, "agentgate_inter_token_latency_seconds", 0.5),
        "queue_time_p50_s": prometheus.histogram_quantile(d, "agentgate_request_queue_time_seconds", 0.5),
        "generation_tokens": v(d, "agentgate_generation_tokens_total"),
        "prompt_tokens": v(d, "agentgate_prompt_tokens_total"),
        "preemptions": v(d, "agentgate_preemptions_total"),
        "finished_by_reason": reasons,
        "kv_usage_max": max((s.get("agentgate_kv_cache_usage_ratio", 0.0) for s in samples), default=None),
        "running_max": max((s.get("agentgate_requests_running", 0.0) for s in samples), default=None),
    }


def _fmt(value: float | None, unit: str = "s", digits: int = 3) -> str:
    if value is None:
        return "-"
    if unit == "ms":
        return f"{value * 1000:.1f} ms"
    return f"{value:.{digits}f} {unit}".rstrip()


def latency_table(report: dict[str, Any]) -> Table:
    lat = report["summary"]["latency_s"]
    table = Table(title="agentgate load test: latency (client-side)", title_justify="left")
    table.add_column("metric", style="bold")
    for column in ("p50", "p90", "p99", "mean", "max"):
        table.add_column(column, justify="right")
    for name, key, unit in (
        ("TTFT", "ttft", "s"),
        ("ITL", "itl", "ms"),
        ("TPOT", "tpot", "ms"),
        ("E2EL", "e2e", "s"),
    ):
        d = lat[key]
        table.add_row(name, *(_fmt(d[q], unit) for q in ("p50", "p90", "p99", "mean", "max")))
    return table


def figures_table(report: dict[str, Any]) -> Table:
    s = report["summary"]
    tp, gp, req, tokens = s["throughput"], s["goodput"], s["requests"], s["tokens"]
    table = Table(title="throughput, goodput, requests, CPU", title_justify="left", show_header=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row(
        "output tokens/s", f"{tp['output_tokens_per_s']:.1f}  ({tp['output_tokens']} tokens in {s['window_s']:.1f} s)"
    )
    table.add_row("prompt tokens/s", f"{tp['prompt_tokens_per_s']:.1f}")
    table.add_row("requests/s", f"{tp['requests_per_s']:.2f}  ({report['run']['conversations']} conversations)")
    slo = gp["slo"]
    frac = "-" if gp["fraction"] is None else f"{gp['fraction']:.0%} of requests"
    table.add_row(
        f"goodput (TTFT <= {slo['ttft_s']:g} s, TPOT <= {slo['tpot_s'] * 1000:.0f} ms)",
        f"{gp['requests_per_s']:.2f} req/s, {gp['output_tokens_per_s']:.1f} tok/s, {frac}",
    )
    prompt = tokens["prompt"]
    by_turn = ", ".join(f"turn {int(t) + 1}: {m:.0f}" for t, m in tokens["prompt_mean_by_turn"].items())
    if prompt["count"]:
        table.add_row(
            "prompt tokens",
            f"min..max {tokens['prompt_min']}..{prompt['max']:.0f}, mean {prompt['mean']:.0f} ({by_turn})",
        )
        completion = tokens["completion"]
        table.add_row("reply tokens", f"p50 {completion['p50']:.0f}, max {completion['max']:.0f}")
    by_turn_ttft = s["latency_s"].get("ttft_p50_by_turn") or {}
    if by_turn_ttft:
        table.add_row(
            "TTFT p50 by turn",
            ", ".join(f"turn {int(t) + 1}: {v:.2f} s" for t, v in by_turn_ttft.items() if v is not None),
        )
    table.add_row(
        "requests",
        f"{req['ok']} ok, {req['aborted']} aborted, {req['errors']} errors, "
        f"{req['truncated']} cut short; {req['retries']} retried after 429/503",
    )
    server = report.get("server_view") or {}
    if server:
        hit = server.get("prefix_cache_hit_rate")
        table.add_row("prefix-cache hit rate", "-" if hit is None else f"{hit:.1%} of prompt tokens (/metrics)")
        rate, per_step = server.get("spec_acceptance_rate"), server.get("tokens_per_step")
        table.add_row(
            "speculation (/metrics)",
            f"acceptance {'-' if rate is None else f'{rate:.1%}'} of "
            f"{server.get('spec_draft_tokens') or 0:.0f} drafted, "
            f"{'-' if per_step is None else f'{per_step:.2f}'} tokens per request-step",
        )
        table.add_row(
            "server TTFT (/metrics)", f"p50 {_fmt(server.get('ttft_p50_s'))}, p99 {_fmt(server.get('ttft_p99_s'))}"
        )
    cpu = report.get("cpu") or {}
    if cpu:
        parts = [f"client {cpu['client_cores']:.2f}"]
        if cpu.get("server_cores") is not None:
            parts.append(f"server {cpu['server_cores']:.2f}")
        if cpu.get("machine_busy_cores") is not None:
            parts.append(f"whole machine {cpu['machine_busy_cores']:.2f} of {cpu['machine_cores']}")
        table.add_row("CPU (cores busy)", ", ".join(parts))
        table.add_row("client CPU per token", f"{cpu['client_cpu_ms_per_output_token']:.3f} ms")
    return table


def write_json(report: dict[str, Any], records: list[RequestRecord], out: Path) -> Path:
    data = dict(report)
    data["requests"] = [r.to_json() for r in records]
    path = out / "report.json"
    path.write_text(json.dumps(data, indent=1, default=str))
    return path


def plot(
    report: dict[str, Any], records: list[RequestRecord], samples: list[dict[str, float]], out: Path
) -> list[Path]:
    """The PNG plots; [] (and a note in the report) when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        report.setdefault("notes", []).append("plots skipped: matplotlib is not installed (pip install matplotlib)")
        return []
    ok = [r for r in records if r.ok]
    paths = []

    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    series = {
        "TTFT (s)": [r.ttft for r in ok if r.ttft is not None],
        "ITL (ms)": [g * 1000 for r in ok for g in r.itls()],
        "TPOT (ms)": [t * 1000 for r in ok if (t := r.tpot) is not None],
        "E2EL (s)": [r.e2e for r in ok],
    }
    slo = report["summary"]["goodput"]["slo"]
    for ax, (name, values) in zip(axes.flat, series.items()):
        values = sorted(values)
        if values:
            ys = [(i + 1) / len(values) for i in range(len(values))]
            ax.step(values, ys, where="post")
            for q, style in ((50, ":"), (99, "--")):
                ax.axvline(percentile(values, q), color="grey", linestyle=style, linewidth=0.8, label=f"p{q}")
        if name.startswith("TTFT"):
            ax.axvline(slo["ttft_s"], color="red", linewidth=0.8, label="SLO")
        if name.startswith("TPOT"):
            ax.axvline(slo["tpot_s"] * 1000, color="red", linewidth=0.8, label="SLO")
        if name.startswith("ITL") and values and values[-1] > 20 * max(values[len(values) // 2], 1e-3):
            ax.set_xscale("symlog", linthresh=1.0)  # a long tail (a pause): keep the body readable
        ax.set_xlabel(name)
        ax.set_ylabel("fraction of requests" if not name.startswith("ITL") else "fraction of token gaps")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    cfg = report["config"]
    fig.suptitle(
        f"latency CDFs: {cfg['agents']} agents ({cfg['mode']} loop), {cfg['turns']} turns, "
        f"{cfg['reply_tokens']}-token replies, {len(ok)} requests"
    )
    fig.tight_layout()
    path = out / "latency_cdf.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    paths.append(path)

    from agentgate.loadtests.metrics import token_rate_series

    end = max((r.end for r in records), default=0.0)
    rate = token_rate_series(records, end, bin_s=1.0)
    fig, ax = plt.subplots(figsize=(11, 5))
    ax.plot([t for t, _ in rate], [v for _, v in rate], label="output tokens/s (1 s bins)", color="tab:blue")
    window = report["summary"]["throughput"]["output_tokens_per_s"]
    ax.axhline(window, color="tab:blue", linestyle=":", linewidth=1, label=f"mean {window:.1f} tok/s")
    ax.set_xlabel("seconds since start")
    ax.set_ylabel("tokens/s")
    ax.grid(alpha=0.3)
    if samples:
        twin = ax.twinx()
        ts = [s["t"] for s in samples]
        twin.plot(
            ts, [s.get("agentgate_requests_running", 0) for s in samples], color="tab:green", label="running (engine)"
        )
        twin.plot(
            ts, [s.get("agentgate_requests_waiting", 0) for s in samples], color="tab:orange", label="waiting (engine)"
        )
        twin.plot(
            ts,
            [100 * s.get("agentgate_kv_cache_usage_ratio", 0) for s in samples],
            color="tab:purple",
            linestyle="--",
            label="KV usage %",
        )
        twin.set_ylabel("requests / KV %")
        lines = ax.get_legend_handles_labels()
        more = twin.get_legend_handles_labels()
        ax.legend(lines[0] + more[0], lines[1] + more[1], loc="upper left", fontsize=8)
    else:
        ax.legend(loc="upper left", fontsize=8)
    for event in report.get("events", []):
        color = {"pause": "red", "resume": "green", "abort_storm": "black"}.get(event["kind"])
        if color:
            ax.axvline(event["t"], color=color, linewidth=0.8, alpha=0.6)
    ax.axvline(cfg["duration"], color="grey", linestyle="--", linewidth=0.8)
    ax.set_title(
        "throughput over time (grey dashed: end of arrivals; red/green: pause/resume; black: abort storm)", fontsize=9
    )
    fig.tight_layout()
    path = out / "throughput.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    paths.append(path)
    return paths


def print_summary(report: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console()
    console.print(latency_table(report))
    console.print(figures_table(report))
    for note in report.get("notes", []):
        console.print(f"[yellow]note:[/yellow] {note}")
