// The overview, queues, jobs and nodes pages, and what they share (formatting).
import { h } from "preact";
import { useEffect, useMemo, useState } from "preact/hooks";
import htm from "htm";
import { jobKey, useLive, useStore } from "./live.js";
import { Chart, aligned, lastHour, spanOf, useEvery } from "./charts.js";

const html = htm.bind(h);

export const jobHref = (ns, name) => `#/jobs/${encodeURIComponent(ns)}/${encodeURIComponent(name)}`;

export function age(t) {
  if (!t) return "";
  const s = Math.max(0, (Date.now() - Date.parse(t)) / 1000);
  if (s < 60) return `${Math.floor(s)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m`;
  if (s < 86400) return `${Math.floor(s / 3600)}h`;
  return `${Math.floor(s / 86400)}d`;
}

export function bytes(n) {
  if (n === null || n === undefined) return "";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i++;
  }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

export const cpu = (milli) => (milli === null || milli === undefined ? "" : `${milli / 1000}`);

export const State = ({ state }) => html`<span class=${`state s-${state}`}>${state}</span>`;

export const ErrorLine = ({ error }) => (error ? html`<p class="error">${error.message}</p>` : "");

// A bar of `used` out of `total`.
const Meter = ({ used, total }) =>
  html`<span class="meter"><span style=${`width:${total ? (100 * used) / total : 0}%`}></span></span>`;

function gpuTypes(nodes) {
  const types = new Map();
  for (const n of nodes || []) {
    for (const g of n.gpus) {
      const t = types.get(n.gpuType || g.name) || { total: 0, used: 0, unhealthy: 0 };
      t.total++;
      if (g.usedBy) t.used++;
      if (g.unhealthy) t.unhealthy++;
      types.set(n.gpuType || g.name, t);
    }
  }
  return [...types.entries()].sort();
}

function countBy(items, f) {
  const m = new Map();
  for (const i of items) m.set(f(i), (m.get(f(i)) || 0) + 1);
  return [...m.entries()].sort();
}

// GPUs in use by type over the last hour (the server's history, a reading a minute).
function GpuHistory() {
  const beat = useEvery(30000);
  const { data, error } = useLive(`/api/v1/series?kind=gpus&from=${lastHour()}`, beat);
  const used = aligned((data && data.series) || [], "used", (x) => (x.key === "-" ? "no type" : x.key));
  return html`<section class="card"><h2>GPUs in use, last hour</h2><${ErrorLine} error=${error} />
    <${Chart} id="chart-gpus" title="" times=${used.times} series=${used.series} span=${spanOf(data)} format=${(v) => `${v}`} /></section>`;
}

export function Overview() {
  const s = useStore();
  const nodes = useLive("/api/v1/nodes");
  const queues = useLive("/api/v1/queues");
  const states = useMemo(() => countBy(s.jobs.values(), (j) => j.state), [s.version]);
  const types = gpuTypes(nodes.data && nodes.data.items);
  return html`<h1>Overview</h1>
    <div class="cards">
      <section class="card">
        <h2>GPUs by type, now</h2>
        <${ErrorLine} error=${nodes.error} />
        ${types.length === 0 && nodes.data ? html`<p class="muted">No GPUs on this cluster.</p>` : ""}
        <table id="gpu-types">
          <tr><th>type</th><th>used</th><th>free</th><th>unhealthy</th><th></th></tr>
          ${types.map(
            ([t, c]) => html`<tr><td>${t}</td><td>${c.used}</td><td>${c.total - c.used}</td><td>${c.unhealthy}</td><td><${Meter} used=${c.used} total=${c.total} /></td></tr>`,
          )}
        </table>
      </section>
      <${GpuHistory} />
      <section class="card">
        <h2>Jobs by state</h2>
        <table id="job-states">
          ${states.map(([st, n]) => html`<tr><td><a href=${`#/jobs?state=${st}`}><${State} state=${st} /></a></td><td>${n}</td></tr>`)}
        </table>
        <p class="muted">${s.jobs.size} job${s.jobs.size === 1 ? "" : "s"}</p>
      </section>
      <section class="card">
        <h2>Queue pressure</h2>
        <${ErrorLine} error=${queues.error} />
        <table>
          <tr><th>queue</th><th>pending</th><th>admitted</th><th>GPUs used / quota</th></tr>
          ${(queues.data ? queues.data.items : []).map((q) => {
            const used = q.usage.reduce((a, u) => a + (u.used.gpu || 0), 0);
            const quota = q.usage.reduce((a, u) => a + ((u.nominal && u.nominal.gpu) || 0), 0);
            return html`<tr><td><a href="#/queues">${q.name}</a></td><td>${q.pending}</td><td>${q.admitted}</td>
              <td>${used} / ${q.usage.some((u) => u.nominal && u.nominal.gpu !== undefined && u.nominal.gpu !== null) ? quota : "∞"}</td></tr>`;
          })}
        </table>
      </section>
    </div>
    <section>
      <h2>Latest events</h2>
      <${Events} events=${s.events.slice(-15).reverse()} withJob=${true} />
    </section>`;
}

export function Events({ events, withJob }) {
  if (!events.length) return html`<p class="muted">None yet.</p>`;
  return html`<table class="events">
    <tr><th>time</th>${withJob ? html`<th>job</th>` : ""}<th>type</th><th>reason</th><th>message</th></tr>
    ${events.map(
      (e) => html`<tr class=${e.type === "Warning" ? "warn" : ""}>
        <td title=${e.time}>${age(e.time)} ago</td>
        ${withJob ? html`<td><a href=${jobHref(e.namespace, e.job)}>${e.namespace}/${e.job}</a></td>` : ""}
        <td>${e.type}</td><td>${e.reason}</td><td>${e.message}</td></tr>`,
    )}
  </table>`;
}

const limits = (l) =>
  l ? [l.gpu !== undefined && l.gpu !== null ? `${l.gpu} GPU` : "", l.cpuMilli ? `${cpu(l.cpuMilli)} CPU` : "", l.memoryBytes ? bytes(l.memoryBytes) : ""].filter(Boolean).join(", ") || "unlimited" : "none";

export function Queues() {
  const s = useStore();
  const queues = useLive("/api/v1/queues");
  // What waits, by queue: the jobs the core gives a pending reason.
  const waiting = useMemo(() => {
    const m = new Map();
    for (const [k, why] of s.reasons) {
      const j = s.jobs.get(k);
      if (!j) continue;
      if (!m.has(j.queue)) m.set(j.queue, []);
      m.get(j.queue).push([j, why]);
    }
    return m;
  }, [s.version]);
  return html`<h1>Queues</h1><${ErrorLine} error=${queues.error} />
    ${(queues.data ? queues.data.items : []).map((q) => {
      const w = waiting.get(q.name) || [];
      return html`<section class="queue" id=${`queue-${q.name}`}>
        <h2>${q.name} <span class="muted">${q.cohort ? `cohort ${q.cohort}, ` : ""}weight ${q.weight}; ${q.pending} pending, ${q.admitted} admitted</span></h2>
        <table>
          <tr><th>pool</th><th>used</th><th>quota</th><th>borrowing limit</th><th>borrowed GPUs</th></tr>
          ${q.usage.map((u) => {
            const nominal = u.nominal && u.nominal.gpu;
            const borrowed = nominal !== undefined && nominal !== null ? Math.max(0, (u.used.gpu || 0) - nominal) : 0;
            return html`<tr><td>${u.pool}</td>
              <td>${u.used.gpu || 0} GPU, ${cpu(u.used.cpuMilli || 0)} CPU, ${bytes(u.used.memoryBytes || 0)}</td>
              <td>${limits(u.nominal)}</td><td>${u.borrowingLimit ? limits(u.borrowingLimit) : "no limit"}</td><td>${borrowed}</td></tr>`;
          })}
        </table>
        ${w.length
          ? html`<h3>Waiting</h3><table class="waiting">
              <tr><th>job</th><th>GPUs</th><th>age</th><th>why it waits</th></tr>
              ${w.slice(0, 50).map(
                ([j, why]) => html`<tr><td><a href=${jobHref(j.namespace, j.name)}>${j.namespace}/${j.name}</a></td><td>${j.gpus}</td><td>${age(j.created)}</td><td class="reason">${why}</td></tr>`,
              )}
            </table>
            ${w.length > 50 ? html`<p class="muted">${w.length - 50} more on the <a href="#/jobs">jobs</a> page.</p>` : ""}`
          : ""}
      </section>`;
    })}`;
}

const COLUMNS = [
  ["name", "name"],
  ["namespace", "namespace"],
  ["queue", "queue"],
  ["framework", "framework"],
  ["state", "state"],
  ["replicasReady", "ready"],
  ["gpus", "GPUs"],
  ["created", "age"],
  ["restarts", "restarts"],
  ["preemptions", "preemptions"],
];
const PAGE = 100;

function Select({ id, label, value, options, onChange }) {
  return html`<label>${label} <select id=${id} value=${value} onChange=${(e) => onChange(e.target.value)}>
    <option value="">all</option>
    ${options.map((o) => html`<option value=${o}>${o}</option>`)}
  </select></label>`;
}

function hashQuery() {
  const q = location.hash.split("?")[1] || "";
  return Object.fromEntries(new URLSearchParams(q));
}

export function Jobs() {
  const s = useStore();
  const init = hashQuery();
  const [f, setF] = useState({ namespace: "", queue: "", state: init.state || "", framework: "", search: "" });
  const [sort, setSort] = useState({ by: "created", desc: true });
  const [page, setPage] = useState(0);
  const set = (k) => (v) => {
    setF({ ...f, [k]: v });
    setPage(0);
  };
  const choices = useMemo(() => {
    const c = { namespace: new Set(), queue: new Set(), state: new Set(), framework: new Set() };
    for (const j of s.jobs.values()) for (const k in c) c[k].add(j[k]);
    return Object.fromEntries(Object.entries(c).map(([k, v]) => [k, [...v].sort()]));
  }, [s.version]);
  const rows = useMemo(() => {
    const needle = f.search.toLowerCase();
    const out = [];
    for (const j of s.jobs.values()) {
      if (f.namespace && j.namespace !== f.namespace) continue;
      if (f.queue && j.queue !== f.queue) continue;
      if (f.state && j.state !== f.state) continue;
      if (f.framework && j.framework !== f.framework) continue;
      if (needle && !j.name.toLowerCase().includes(needle) && !j.namespace.toLowerCase().includes(needle)) continue;
      out.push(j);
    }
    const k = sort.by;
    const dir = sort.desc ? -1 : 1;
    out.sort((a, b) => (a[k] < b[k] ? -dir : a[k] > b[k] ? dir : jobKey(a) < jobKey(b) ? -1 : 1));
    return out;
  }, [s.version, f, sort]);
  // When the first full list is on screen (what `corral`'s dashboard benchmark reads).
  useEffect(() => {
    if (s.loaded && !performance.getEntriesByName("corral-jobs-ready").length) performance.mark("corral-jobs-ready");
  }, [s.loaded]);
  const pages = Math.max(1, Math.ceil(rows.length / PAGE));
  const p = Math.min(page, pages - 1);
  const shown = rows.slice(p * PAGE, (p + 1) * PAGE);
  const head = (key, label) => html`<th class="sortable" id=${`sort-${key}`} onClick=${() => setSort({ by: key, desc: sort.by === key ? !sort.desc : false })}>
    ${label}${sort.by === key ? (sort.desc ? " ▼" : " ▲") : ""}</th>`;
  return html`<h1>Jobs</h1>
    <div class="filters">
      <input id="search" type="search" placeholder="search names" value=${f.search} onInput=${(e) => set("search")(e.target.value)} />
      <${Select} id="filter-namespace" label="namespace" value=${f.namespace} options=${choices.namespace} onChange=${set("namespace")} />
      <${Select} id="filter-queue" label="queue" value=${f.queue} options=${choices.queue} onChange=${set("queue")} />
      <${Select} id="filter-state" label="state" value=${f.state} options=${choices.state} onChange=${set("state")} />
      <${Select} id="filter-framework" label="framework" value=${f.framework} options=${choices.framework} onChange=${set("framework")} />
    </div>
    <p class="muted" id="jobs-count">${s.loaded ? `${rows.length} of ${s.jobs.size} jobs` : "loading…"}</p>
    <table id="jobs" class="jobs" data-ready=${s.loaded ? "yes" : "no"}>
      <thead><tr>${COLUMNS.map(([k, l]) => head(k, l))}<th>why it waits</th></tr></thead>
      <tbody>${shown.map((j) => {
        const k = jobKey(j);
        return html`<tr key=${k} data-job=${k}>
          <td><a class="job-link" href=${jobHref(j.namespace, j.name)}>${j.name}</a></td><td>${j.namespace}</td><td>${j.queue}</td><td>${j.framework}</td>
          <td><${State} state=${j.state} /></td><td>${j.replicasReady}/${j.replicasTotal}</td><td>${j.gpus}</td>
          <td title=${j.created}>${age(j.created)}</td><td>${j.restarts}</td><td>${j.preemptions}</td>
          <td class="reason">${s.reasons.get(k) || ""}</td></tr>`;
      })}</tbody>
    </table>
    <div class="pager">
      <button id="page-prev" disabled=${p === 0} onClick=${() => setPage(p - 1)}>‹ previous</button>
      <span>page ${p + 1} of ${pages}</span>
      <button id="page-next" disabled=${p >= pages - 1} onClick=${() => setPage(p + 1)}>next ›</button>
    </div>`;
}

export function Nodes() {
  const nodes = useLive("/api/v1/nodes");
  return html`<h1>Nodes</h1><${ErrorLine} error=${nodes.error} />
    ${(nodes.data ? nodes.data.items : []).map(
      (n) => html`<section class="node" id=${`node-${n.name}`}>
        <h2>${n.name} <span class="muted">${n.pool ? `pool ${n.pool}, ` : ""}${n.gpuType || "no GPU type"};
          CPU ${cpu(n.cpuMilliAllocated)} / ${cpu(n.cpuMilli)}, memory ${bytes(n.memoryBytesAllocated)} / ${bytes(n.memoryBytes)}</span></h2>
        ${n.gpus.length === 0 ? html`<p class="muted">No GPUs.</p>` : ""}
        <div class="gpus">
          ${n.gpus.map((g) => {
            const [ns, job] = g.usedBy && g.usedBy.includes("/") ? g.usedBy.split("/") : [null, null];
            return html`<div class=${`gpu ${g.usedBy ? "used" : "free"} ${g.unhealthy ? "sick" : ""}`} data-gpu=${g.index}>
              <div class="gpu-head">GPU ${g.index} <span class="muted">${g.name}</span></div>
              <div>${job ? html`<a href=${jobHref(ns, job)}>${g.usedBy}</a>` : g.usedBy || "free"}</div>
              ${g.utilizationPercent !== undefined && g.utilizationPercent !== null ? html`<div>util ${g.utilizationPercent}% <${Meter} used=${g.utilizationPercent} total=${100} /></div>` : ""}
              ${g.memoryBytes ? html`<div>mem ${bytes(g.memoryUsedBytes)} / ${bytes(g.memoryBytes)}</div>` : ""}
              ${g.temperatureCelsius !== undefined && g.temperatureCelsius !== null ? html`<div>${g.temperatureCelsius} °C${g.powerWatts ? `, ${Math.round(g.powerWatts)} W` : ""}</div>` : ""}
              ${g.unhealthy ? html`<div class="error">unhealthy: ${g.unhealthy}</div>` : ""}
            </div>`;
          })}
        </div>
      </section>`,
    )}`;
}
