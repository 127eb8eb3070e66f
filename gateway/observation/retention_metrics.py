"""/metrics for KV retention of agent programs (engine.retention), summed over engines:
pins and blocks held now, pins made and why they ended, returning turns and their prefix
hits, tool gaps (count and seconds). The dashboard shows the same sums
(``gateway.observation.dashboard_stats``)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from agentgate.engine.front.protocol import RetentionStats, SchedulerStats

_GAUGES = {
    "pins": "Programs whose conversation's KV is pinned while their tools run.",
    "held_blocks": "KV blocks held by retention pins.",
    "max_held_blocks": "The most KV blocks retention may hold (--kv-retention-max-fraction).",
}
_COUNTERS = {
    "pinned_total": "Turns whose conversation's KV was pinned when they ended.",
    "released_returned": "Pins released because the program's next turn was admitted.",
    "released_expired": "Pins released at their TTL.",
    "released_pressure": "Pins released for memory (bound or pressure).",
    "released_no_tool_call": "Pins released because the turn called no tool.",
    "released_loop_ended": "Pins of server-run tools released because the tool loop stopped after them.",
    "returning_turns": "Turns returning after tool calls their program's last turn made on this engine.",
    "returning_queries_tokens": "Prompt tokens of returning turns looked up in the prefix cache.",
    "returning_hits_tokens": "Prompt tokens of returning turns found in the prefix cache.",
    "tool_gaps": "Tool gaps observed (a turn's end to its program's next turn).",
    "tool_gap_seconds_sum": "Seconds of the tool gaps observed.",
    "pressure_released_blocks": "Pinned KV blocks released for memory (held by those pins alone).",
    "returning_missed_after_eviction": "Returning turns whose pin was released for memory that then missed "
    "part of what it held.",
}


def retention_totals(known: list[SchedulerStats]) -> RetentionStats:
    """The engines' retention figures summed (what /metrics and the dashboard show)."""
    stats = [s.retention for s in known if s.retention is not None]
    return RetentionStats(*(sum(getattr(s, name) for s in stats) for name in RetentionStats.__struct_fields__))


def retention_metrics(known: list[SchedulerStats]) -> Iterator[Metric]:
    totals = retention_totals(known)
    for name, doc in _GAUGES.items():
        yield GaugeMetricFamily(f"agentgate_kv_retention_{name}", doc, value=getattr(totals, name))
    for name, doc in _COUNTERS.items():
        value = getattr(totals, name)
        yield CounterMetricFamily(f"agentgate_kv_retention_{name.removesuffix('_total')}", doc, value=value)
