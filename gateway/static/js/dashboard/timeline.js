// The dashboard's numbers over time: snapshots of /dashboard/stats in,
// series for the plots out. Counters are cumulative on the server, so rates
// (tokens/s, prefix-cache hit rate) are differences between consecutive
// snapshots of the same replica, and latency percentiles come from the
// difference of two histograms LATENCY_WINDOW_S apart, interpolated within a
// bucket as Prometheus's histogram_quantile does.

export const LATENCY_WINDOW_S = 10;
export const QUANTILES = [0.5, 0.9, 0.99];

/** The q-quantile of a histogram given as cumulative counts per upper bound (+Inf last); null when empty. */
export function quantile(bounds, counts, q) {
  const total = counts.at(-1) ?? 0;
  if (!(total > 0)) return null;
  const rank = q * total;
  const i = counts.findIndex((c) => c >= rank);
  if (i >= bounds.length) return bounds.at(-1) ?? null; // in the +Inf bucket: its lower bound, as Prometheus says
  const lower = i === 0 ? 0 : bounds[i - 1];
  const below = i === 0 ? 0 : counts[i - 1];
  const inside = counts[i] - below;
  return inside > 0 ? lower + ((bounds[i] - lower) * (rank - below)) / inside : bounds[i];
}

function histogramDelta(now, then) {
  if (!then || now.counts.length !== then.counts.length) return now.counts;
  const delta = now.counts.map((c, i) => c - then.counts[i]);
  return delta.some((d) => d < 0) ? now.counts : delta; // the counters restarted: take them whole
}

export class Timeline {
  constructor(windowSeconds = 300) {
    this.windowSeconds = windowSeconds;
    this.reset();
  }

  reset() {
    this.engines = []; // addresses, in the server's order
    this.points = []; // {t, engines: [{running, waiting, kv, prefix, tps}], ttft: [[..ms] per group], itl: same}
    this.history = new Map(); // replica -> recent snapshots (for rates and the latency window)
  }

  /** Folds one snapshot in; returns true when the engines changed (the plots must be rebuilt). */
  push(snapshot) {
    const addresses = snapshot.engines.map((e) => e.address);
    const changed = addresses.join() !== this.engines.join();
    if (changed) {
      this.reset();
      this.engines = addresses;
    }
    const recent = this.history.get(snapshot.replica) ?? [];
    const previous = recent.at(-1);
    const dt = previous ? snapshot.time - previous.time : 0;
    const engines = snapshot.engines.map((e, i) => {
      const before = previous?.engines[i];
      const queries = before ? e.prefix_queries - before.prefix_queries : 0;
      const hits = before ? e.prefix_hits - before.prefix_hits : 0;
      const tokens = before ? e.tokens - before.tokens : 0;
      return {
        running: e.running,
        waiting: e.waiting,
        kv: e.kv_usage * 100,
        prefix: queries > 0 && hits >= 0 ? (100 * hits) / queries : null,
        tps: dt > 0 && tokens >= 0 ? tokens / dt : null,
      };
    });
    recent.push(snapshot);
    while (recent.length > 1 && snapshot.time - recent[0].time > LATENCY_WINDOW_S) recent.shift();
    this.history.set(snapshot.replica, recent);
    const base = recent.length > 1 ? recent[0] : null;
    const percentiles = (h, then) => {
      const counts = histogramDelta(h, then);
      return QUANTILES.map((q) => {
        const seconds = quantile(h.bounds, counts, q);
        return seconds === null ? null : seconds * 1000;
      });
    };
    // One group of percentiles: all engines' together; with several engines, one group each.
    const latencies = (name) =>
      snapshot.engines.length > 1 && snapshot.engines.every((e) => e[name])
        ? snapshot.engines.map((e, i) => percentiles(e[name], base?.engines[i]?.[name]))
        : [percentiles(snapshot[name], base?.[name])];
    this.points.push({ t: snapshot.time, engines, ttft: latencies("ttft"), itl: latencies("itl") });
    while (this.points.length && snapshot.time - this.points[0].t > this.windowSeconds) this.points.shift();
    return changed;
  }

  /** Engine labels for the legends. */
  engineLabel(i) {
    return this.engines.length > 1 ? `engine ${i + 1}` : "";
  }

  /** [xs, ...series] for uPlot, and the series' names, for one plot. */
  series(plot) {
    const xs = this.points.map((p) => p.t);
    const out = [];
    const names = [];
    const perEngine = (field, name) =>
      this.engines.forEach((_, i) => {
        names.push([name, this.engineLabel(i)].filter(Boolean).join(" · "));
        out.push(this.points.map((p) => p.engines[i]?.[field] ?? null));
      });
    if (plot === "load") {
      perEngine("running", "running");
      perEngine("waiting", "waiting");
    } else if (plot === "kv") {
      perEngine("kv", "KV used");
    } else if (plot === "prefix") {
      perEngine("prefix", "hit rate");
    } else if (plot === "tps") {
      perEngine("tps", "tok/s");
      if (this.engines.length > 1) {
        names.push("all engines");
        out.push(this.points.map((p) => (p.engines.some((e) => e.tps !== null) ? p.engines.reduce((s, e) => s + (e.tps ?? 0), 0) : null)));
      }
    } else if (plot === "ttft" || plot === "itl") {
      const groups = Math.max(1, ...this.points.map((p) => p[plot].length));
      for (let g = 0; g < groups; g++) {
        QUANTILES.forEach((q, i) => {
          names.push([`p${Math.round(q * 100)}`, groups > 1 ? this.engineLabel(g) : ""].filter(Boolean).join(" · "));
          out.push(this.points.map((p) => p[plot][g]?.[i] ?? null));
        });
      }
    }
    return { data: [xs, ...out], names };
  }
}
