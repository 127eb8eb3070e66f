// The KV-retention panel: what the engines keep of agent programs' conversations while
// their tools run (a snapshot's `retention`: the engines' figures summed, as /metrics has
// them). Counters run since each engine started; pins and blocks are now.

const RELEASED = {
  released_returned: "program returned",
  released_expired: "expired",
  released_pressure: "memory",
  released_no_tool_call: "no tool call",
};

/** The panel's [label, value] rows for a snapshot's `retention`. */
export function retentionFigures(r) {
  const rate = r.returning_queries_tokens > 0 ? `${Math.round((100 * r.returning_hits_tokens) / r.returning_queries_tokens)}%` : "–";
  const gap = r.tool_gaps > 0 ? `${(r.tool_gap_seconds_sum / r.tool_gaps).toFixed(1)} s` : "–";
  return [
    ["Pinned now", `${r.pins} program${r.pins === 1 ? "" : "s"} · ${r.held_blocks} of at most ${r.max_held_blocks} KV blocks`],
    ["Returning turns", `${r.returning_turns} · prefix hit rate ${rate}`],
    ["Tool gaps", `${r.tool_gaps} observed · mean ${gap}`],
    ["Pins made", String(r.pinned_total)],
    ["Pins released", Object.entries(RELEASED).map(([field, reason]) => `${reason} ${r[field]}`).join(" · ")],
  ];
}

/** Draws the rows into a <dl>. */
export function drawRetention(list, r) {
  list.replaceChildren(
    ...retentionFigures(r).flatMap(([label, value]) => {
      const term = document.createElement("dt");
      const figure = document.createElement("dd");
      term.textContent = label;
      figure.textContent = value;
      return [term, figure];
    }),
  );
}
