// GPU-hour accounting: what the usage ledger says each namespace and queue held, by GPU
// type, per day or month (`GET /api/v1/usage`, as `corral usage`), charted and tabled, with
// the queues' budgets. A namespace's token sees its own namespace only (the API's rule).
import { h } from "preact";
import { useMemo, useState } from "preact/hooks";
import htm from "htm";
import { useLive } from "./live.js";
import { ErrorLine } from "./pages.js";
import { Chart, spanOf } from "./charts.js";

const html = htm.bind(h);

const monthStart = () => {
  const d = new Date();
  return `${d.getUTCFullYear()}-${String(d.getUTCMonth() + 1).padStart(2, "0")}-01`;
};
const hours = (v) => (v >= 100 ? v.toFixed(0) : v >= 1 ? v.toFixed(2) : v.toFixed(4));

// The period's start (`2026-11-26` or `2026-11`) in Unix seconds, UTC.
const periodTime = (p) => Date.parse(p.length === 7 ? `${p}-01T00:00:00Z` : `${p}T00:00:00Z`) / 1000;

export function Usage() {
  const [q, setQ] = useState({ from: monthStart(), to: "", period: "day", by: "queue" });
  const set = (k) => (e) => setQ({ ...q, [k]: e.target.value });
  const params = new URLSearchParams({ from: q.from, period: q.period, by: q.by });
  if (q.to) params.set("to", q.to);
  const { data, error } = useLive(`/api/v1/usage?${params}`);
  const items = (data && data.items) || [];
  // GPU-hours per period and namespace, for the chart; totals per namespace, queue and type.
  const chart = useMemo(() => {
    const periods = [...new Set(items.map((i) => i.period))].sort();
    const namespaces = [...new Set(items.map((i) => i.namespace))].sort();
    const at = new Map(periods.map((p, i) => [p, i]));
    const series = namespaces.map((ns) => {
      const values = periods.map(() => 0);
      for (const i of items) if (i.namespace === ns) values[at.get(i.period)] += i.gpuHours;
      return { label: ns, values };
    });
    return { times: periods.map(periodTime), series };
  }, [data]);
  const totals = useMemo(() => {
    const m = new Map();
    for (const i of items) {
      const k = `${i.namespace}\u0000${i.queue}\u0000${i.gpuType}`;
      const t = m.get(k) || { namespace: i.namespace, queue: i.queue, gpuType: i.gpuType, gpuHours: 0, cpuHours: 0 };
      t.gpuHours += i.gpuHours;
      t.cpuHours += i.cpuSeconds / 3600;
      m.set(k, t);
    }
    return [...m.values()].sort((a, b) => b.gpuHours - a.gpuHours);
  }, [data]);
  const csv = () => {
    const head = ["period", "namespace", "queue", ...(q.by === "job" ? ["job"] : []), "gpuType", "gpuHours", "cpuHours"];
    const quote = (v) => (/[",\n]/.test(`${v}`) ? `"${`${v}`.replace(/"/g, '""')}"` : `${v}`);
    const rows = items.map((i) => [i.period, i.namespace, i.queue, ...(q.by === "job" ? [i.job] : []), i.gpuType, i.gpuHours, i.cpuSeconds / 3600]);
    return `data:text/csv;charset=utf-8,${encodeURIComponent([head, ...rows].map((r) => r.map(quote).join(",")).join("\n"))}`;
  };
  return html`<h1>Usage</h1>
    <div class="filters">
      <label>from <input id="usage-from" type="date" value=${q.from} onChange=${set("from")} /></label>
      <label>to <input id="usage-to" type="date" value=${q.to} onChange=${set("to")} /></label>
      <label>per <select id="usage-period" value=${q.period} onChange=${set("period")}><option value="day">day</option><option value="month">month</option></select></label>
      <label>by <select id="usage-by" value=${q.by} onChange=${set("by")}><option value="queue">queue</option><option value="job">job</option></select></label>
      <a id="usage-csv" download="corral-usage.csv" href=${csv()}>CSV</a>
    </div>
    <${ErrorLine} error=${error} />
    ${data ? html`<p class="muted">From ${data.from} to ${data.to}${data.namespace ? `, namespace ${data.namespace}` : ""}: GPU-hours held, as the usage ledger counts them (docs/usage.md).</p>` : html`<p class="muted">loading…</p>`}
    <${Chart} id="usage-chart" title=${`GPU-hours per ${q.period}, by namespace`} times=${chart.times} series=${chart.series} span=${spanOf(data)} format=${hours} bars=${true} />
    <h2>Totals</h2>
    <table id="usage-totals">
      <thead><tr><th>namespace</th><th>queue</th><th>GPU type</th><th>GPU-hours</th><th>CPU-hours</th></tr></thead>
      <tbody>${totals.map((t) => html`<tr data-namespace=${t.namespace}><td>${t.namespace}</td><td>${t.queue}</td><td>${t.gpuType || "-"}</td><td class="gpu-hours">${hours(t.gpuHours)}</td><td>${hours(t.cpuHours)}</td></tr>`)}</tbody>
    </table>
    ${data && data.budgets && data.budgets.length
      ? html`<h2>Budgets</h2><table id="usage-budgets"><thead><tr><th>queue</th><th>budget</th><th>used</th><th>renews</th><th>exhausted</th></tr></thead>
          <tbody>${data.budgets.map((b) => html`<tr class=${b.exhausted ? "warn" : ""}><td>${b.queue}</td><td>${b.budgetGpuHours} GPU-hours per ${b.period}</td><td>${hours(b.usedGpuHours)}</td><td>${b.renewsAt}</td><td>${b.exhausted ? "yes" : "no"}</td></tr>`)}</tbody></table>`
      : ""}
    <h2>Per ${q.period}</h2>
    <table id="usage-items">
      <thead><tr><th>${q.period}</th><th>namespace</th><th>queue</th>${q.by === "job" ? html`<th>job</th>` : ""}<th>GPU type</th><th>GPU-hours</th><th>CPU-hours</th></tr></thead>
      <tbody>${items.map((i) => html`<tr><td>${i.period}</td><td>${i.namespace}</td><td>${i.queue}</td>${q.by === "job" ? html`<td>${i.job}</td>` : ""}<td>${i.gpuType || "-"}</td><td>${hours(i.gpuHours)}</td><td>${hours(i.cpuSeconds / 3600)}</td></tr>`)}</tbody>
    </table>`;
}
