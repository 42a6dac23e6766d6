// Charts over time, drawn by uPlot (vendored): one component for every chart of the
// dashboard, fed with the shape `GET /api/v1/series` answers (times in Unix seconds, one
// array of values per series, aligned with them).
import { h } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import htm from "htm";
import uPlot from "uplot";

const html = htm.bind(h);

const COLORS = ["#2f5fd0", "#157f3b", "#a15c07", "#b42318", "#6941c6", "#0e7490", "#9d174d", "#4d7c0f"];

export const color = (i) => COLORS[i % COLORS.length];

// A count that goes up every `ms`: the history has a reading a minute, so its charts look
// again every so often, not on every change the watch stream reports.
export function useEvery(ms) {
  const [n, set] = useState(0);
  useEffect(() => {
    const t = setInterval(() => set((x) => x + 1), ms);
    return () => clearInterval(t);
  }, [ms]);
  return n;
}

// The last hour up to this minute, as the series API's `from` (the same text all minute
// long, so that a page asks again only when it means to).
export const lastHour = () => new Date((Math.floor(Date.now() / 60000) - 60) * 60000).toISOString();

// What a series answer covers, for a chart's `span`.
export const spanOf = (data) => (data ? [Date.parse(data.from) / 1000, Date.parse(data.to) / 1000] : undefined);

// `series`: [{label, values}]; `format` writes an axis value and the legend's.
// `span`: the time range shown, [from, to] in Unix seconds (else the readings' own, which
// for one reading is years wide).
export function Chart({ id, title, times, series, span, format = (v) => `${v}`, bars = false, height = 180 }) {
  const box = useRef(null);
  const key = JSON.stringify([title, span, times, series.map((s) => [s.label, s.values])]);
  useEffect(() => {
    const el = box.current;
    if (!el || !times.length) return undefined;
    const opts = {
      title,
      width: Math.max(320, el.clientWidth || 600),
      height,
      scales: { x: span ? { time: true, range: () => span } : { time: true } },
      axes: [{}, { values: (u, ticks) => ticks.map(format), size: 70 }],
      series: [
        {},
        ...series.map((s, i) => ({
          label: s.label,
          stroke: color(i),
          fill: bars ? `${color(i)}55` : undefined,
          width: bars ? 1 : 1.6,
          paths: bars ? uPlot.paths.bars({ size: [0.7, 48] }) : undefined,
          value: (u, v) => (v === null || v === undefined ? "–" : format(v)),
        })),
      ],
    };
    const plot = new uPlot(opts, [times, ...series.map((s) => s.values)], el);
    return () => plot.destroy();
  }, [key]);
  if (!times.length) return html`<p class="muted" id=${id}>${title}: no readings yet.</p>`;
  return html`<div class="chart" id=${id} data-points=${times.length} data-series=${series.length} ref=${box}></div>`;
}

// Series of `GET /api/v1/series` on one time axis: the union of their times, each value
// array padded with null where a series has no reading (a replica not yet started).
export function aligned(list, field, label = (s) => s.key) {
  const times = [...new Set(list.flatMap((s) => s.times))].sort((a, b) => a - b);
  const at = new Map(times.map((t, i) => [t, i]));
  const series = list.map((s) => {
    const values = times.map(() => null);
    const v = (s.values && s.values[field]) || [];
    s.times.forEach((t, i) => {
      values[at.get(t)] = v[i] === undefined ? null : v[i];
    });
    return { label: label(s), values };
  });
  return { times, series };
}

export const cores = (v) => (v >= 10 ? v.toFixed(0) : v.toFixed(2));
export const mib = (v) => (v >= 1 << 30 ? `${(v / (1 << 30)).toFixed(1)} GiB` : `${(v / (1 << 20)).toFixed(0)} MiB`);
export const percent = (v) => `${v.toFixed(0)}%`;
