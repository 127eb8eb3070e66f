// One uPlot line chart per figure, sized to its container and coloured
// from the page's theme. Each figure also states its latest values in text
// (its caption), for screen readers and for a glance.

import uPlot from "../../vendor/uplot/uPlot.esm.js";

const PALETTE = ["#1a73e8", "#e8710a", "#12b5cb", "#d01884", "#7cb342", "#9334e6", "#f9ab00", "#5f6368"];
const HEIGHT = 190;
const MIN_SPAN_S = 60; // the x axis spans at least this much, up to the whole window

function cssVar(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

export class Chart {
  /**
   * @param {HTMLElement} figure  a <figure> holding a .chart div and a caption with a .latest span
   * @param {{unit?: string, digits?: number, max?: number, window: () => number}} options
   *   window: the most seconds the x axis spans (ending at the newest point)
   */
  constructor(figure, options = {}) {
    this.figure = figure;
    this.holder = figure.querySelector(".chart");
    this.latest = figure.querySelector(".latest");
    this.options = options;
    this.plot = null;
    this.names = null;
    new ResizeObserver(() => this.plot?.setSize({ width: this.width(), height: HEIGHT })).observe(this.holder);
  }

  width() {
    return Math.max(200, this.holder.clientWidth);
  }

  build(names) {
    this.plot?.destroy();
    this.names = names;
    const text = cssVar("--muted");
    const grid = cssVar("--line");
    const axis = { stroke: text, grid: { stroke: grid, width: 1 }, ticks: { stroke: grid, width: 1 } };
    const { unit = "", digits = 0, max, window } = this.options;
    const y = { ...axis, size: 52, values: (u, ticks) => ticks.map((v) => v.toFixed(v >= 100 ? 0 : digits)) };
    if (digits === 0) y.incrs = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10000];
    this.plot = new uPlot(
      {
        width: this.width(),
        height: HEIGHT,
        legend: { show: true, live: false },
        cursor: { drag: { x: false, y: false } },
        scales: {
          x: { time: true, range: (u, lo, hi) => [Math.max(hi - window(), Math.min(lo, hi - MIN_SPAN_S)), hi] },
          y: { range: (u, lo, hi) => [0, Math.max(max ?? 0, hi * 1.1 || 1)] },
        },
        axes: [axis, y],
        series: [
          {},
          ...names.map((label, i) => ({
            label,
            stroke: PALETTE[i % PALETTE.length],
            width: 2,
            spanGaps: false,
            value: (u, v) => (v === null || v === undefined ? "–" : `${v.toFixed(digits)}${unit}`),
          })),
        ],
      },
      [[], ...names.map(() => [])],
      this.holder,
    );
    this.plot.root.setAttribute("aria-hidden", "true"); // the caption says the same in words
  }

  /** Redraws with `data` ([xs, ...series]); rebuilt when the series' names change. */
  update({ data, names }) {
    if (!this.plot || names.join("|") !== this.names.join("|")) this.build(names);
    this.plot.setData(data);
    const { unit = "", digits = 0 } = this.options;
    const parts = names.map((name, i) => {
      const value = data[i + 1].at(-1);
      return `${name} ${value === null || value === undefined ? "–" : value.toFixed(digits) + unit}`;
    });
    this.latest.textContent = data[0].length ? `(now: ${parts.join(", ")})` : "";
    this.figure.dataset.points = String(data[0].length);
  }

  /** Drops the numbers (no data, or the key was refused): nothing stale stays on screen. */
  clear() {
    this.latest.textContent = "";
    if (this.plot) this.plot.setData([[], ...this.names.map(() => [])]);
    this.figure.dataset.points = "0";
  }

  /** Rebuilds with the theme's colours. */
  restyle() {
    if (this.plot) {
      const data = this.plot.data;
      this.build(this.names);
      this.plot.setData(data);
    }
  }
}
