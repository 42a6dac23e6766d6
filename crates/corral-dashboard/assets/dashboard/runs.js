// Pipelines: the stored ones (each with its parameters and the runs made from it), the
// runs, and a run's page with its DAG drawn (laid out by dagre), its steps, artifacts and
// events. It shows what the control plane decided; it decides nothing.
import { h } from "preact";
import { useMemo } from "preact/hooks";
import htm from "htm";
import dagre from "dagre";
// A run's steps change without a job row changing (a step cached, skipped, a run ending):
// useBeat looks again every few seconds as well as on the watch stream's changes.
import { useBeat, useLive } from "./live.js";
import { ErrorLine, Events, age, jobHref } from "./pages.js";

const html = htm.bind(h);

export const runHref = (ns, name) => `#/runs/${encodeURIComponent(ns)}/${encodeURIComponent(name)}`;


// `name (generation N)` of the stored pipeline a run was made from, if it was.
const pipelineOf = (run) => {
  const ref = run.spec.pipelineRef;
  if (!ref) return "";
  return ref.generation ? `${ref.name} (generation ${ref.generation})` : ref.name;
};

const Phase = ({ phase }) => html`<span class=${`state p-${phase}`}>${phase}</span>`;

function counts(run) {
  const steps = Object.values((run.status && run.status.steps) || {});
  const done = steps.filter((s) => !["Pending", "Running"].includes(s.phase)).length;
  const cached = steps.filter((s) => s.phase === "Cached").length;
  return { done, cached, total: steps.length };
}

// The stored pipelines, each with its version and how many runs were made from it.
function Pipelines({ runs }) {
  const beat = useBeat();
  const { data, error } = useLive("/api/v1/pipelines", beat);
  const items = (data && data.items) || [];
  if (!items.length) return html`<${ErrorLine} error=${error} />`;
  const made = (ns, name) =>
    runs.filter((r) => (r.metadata.namespace || "default") === ns && r.spec.pipelineRef && r.spec.pipelineRef.name === name);
  const param = (p) => `${p.name}${p.default === undefined ? " (required)" : `=${JSON.stringify(p.default)}`}`;
  return html`<h2>Stored pipelines</h2>
    <${ErrorLine} error=${error} />
    <table id="pipelines">
      <thead><tr><th>namespace</th><th>pipeline</th><th>generation</th><th>steps</th><th>parameters</th><th>runs</th><th>age</th></tr></thead>
      <tbody>${items.map((p) => {
        const ns = p.metadata.namespace || "default";
        const mine = made(ns, p.metadata.name);
        return html`<tr data-pipeline=${p.metadata.name}>
          <td>${ns}</td><td>${p.metadata.name}</td><td>${p.metadata.generation || "-"}</td>
          <td>${p.spec.steps.map((st) => st.name).join(", ")}</td>
          <td>${(p.spec.parameters || []).map(param).join(", ") || "-"}</td>
          <td class="runs-made">${mine.length
            ? mine.map((r, i) => html`${i ? ", " : ""}<a href=${runHref(ns, r.metadata.name)}>${r.metadata.name}</a>`)
            : html`<span class="muted">none: <code>corral run ${p.metadata.name}</code></span>`}</td>
          <td>${age(p.metadata.creationTimestamp)}</td></tr>`;
      })}</tbody>
    </table>
    <h2>Runs</h2>`;
}

export function Runs() {
  const beat = useBeat();
  const { data, error } = useLive("/api/v1/pipelineruns", beat);
  const runs = useMemo(() => {
    const items = (data && data.items) || [];
    const created = (r) => r.metadata.creationTimestamp || "";
    return [...items].sort((a, b) => created(b).localeCompare(created(a)));
  }, [data]);
  return html`<h1>Pipelines</h1>
    <${ErrorLine} error=${error} />
    <${Pipelines} runs=${runs} />
    ${!data
      ? html`<p class="muted">loading…</p>`
      : !runs.length
        ? html`<p class="muted" id="runs-none">No pipeline runs. <code>corral submit</code> a PipelineRun (docs/pipelines.md).</p>`
        : html`<table id="runs">
            <thead><tr><th>namespace</th><th>run</th><th>pipeline</th><th>phase</th><th>steps done</th><th>cached</th><th>age</th><th>message</th></tr></thead>
            <tbody>${runs.map((r) => {
              const ns = r.metadata.namespace || "default";
              const c = counts(r);
              const st = r.status || {};
              return html`<tr>
                <td>${ns}</td>
                <td><a href=${runHref(ns, r.metadata.name)}>${r.metadata.name}</a></td>
                <td>${pipelineOf(r) || html`<span class="muted">inline</span>`}</td>
                <td><${Phase} phase=${st.phase || "Pending"} /></td>
                <td>${c.done}/${c.total}</td><td>${c.cached}</td>
                <td>${age(r.metadata.creationTimestamp)}</td>
                <td class="reason">${st.message || ""}</td></tr>`;
            })}</tbody>
          </table>`}`;
}

const NODE_W = 170;
const NODE_H = 44;

// The steps as a graph, laid out left to right: each node a step (its phase as its colour),
// each edge what a step needs.
function Dag({ namespace, steps }) {
  const layout = useMemo(() => {
    const g = new dagre.graphlib.Graph();
    g.setGraph({ rankdir: "LR", nodesep: 18, ranksep: 46, marginx: 8, marginy: 8 });
    g.setDefaultEdgeLabel(() => ({}));
    for (const s of steps) g.setNode(s.name, { width: NODE_W, height: NODE_H });
    for (const s of steps) for (const n of s.needs) if (g.hasNode(n)) g.setEdge(n, s.name);
    dagre.layout(g);
    return g;
  }, [steps.map((s) => `${s.name}<${s.needs.join(",")}`).join(";")]);
  const size = layout.graph();
  const byName = new Map(steps.map((s) => [s.name, s]));
  return html`<svg id="dag" class="dag" width=${size.width} height=${size.height} viewBox=${`0 0 ${size.width} ${size.height}`}>
    <defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" /></marker></defs>
    ${layout.edges().map((e) => {
      const pts = layout.edge(e).points;
      const d = pts.map((p, i) => `${i ? "L" : "M"} ${p.x} ${p.y}`).join(" ");
      return html`<path class="edge" d=${d} marker-end="url(#arrow)" />`;
    })}
    ${layout.nodes().map((name) => {
      const n = layout.node(name);
      const s = byName.get(name);
      const box = html`<g class=${`step p-${s.phase}`} data-step=${name} data-phase=${s.phase} transform=${`translate(${n.x - NODE_W / 2},${n.y - NODE_H / 2})`}>
        <title>${name}: ${s.phase}${s.message ? ` (${s.message})` : ""}${s.cachedFrom ? ` (reused ${s.cachedFrom})` : ""}</title>
        <rect width=${NODE_W} height=${NODE_H} rx="5" />
        <text x="8" y="18" class="name">${name.length > 22 ? `${name.slice(0, 21)}…` : name}</text>
        <text x="8" y="35" class="phase">${s.phase}</text>
      </g>`;
      return s.job ? html`<a href=${jobHref(namespace, s.job)}>${box}</a>` : box;
    })}
  </svg>`;
}

export function Run({ namespace, name }) {
  const beat = useBeat();
  const base = `/api/v1/namespaces/${encodeURIComponent(namespace)}/pipelineruns/${encodeURIComponent(name)}`;
  const { data, error } = useLive(`${base}/describe`, beat);
  if (!data) return html`<h1>${namespace}/${name}</h1>${error ? html`<${ErrorLine} error=${error} />` : html`<p class="muted">loading…</p>`}`;
  const run = data.run;
  const st = run.status || {};
  const params = Object.entries(run.spec.params || {});
  const outputs = Object.entries(st.steps || {}).flatMap(([step, s]) =>
    Object.entries(s.outputs || {}).map(([o, a]) => ({ step, output: o, ...a })),
  );
  return html`<h1>Pipeline run ${namespace}/${name} <${Phase} phase=${st.phase || "Pending"} /></h1>
    <${ErrorLine} error=${error} />
    <p id="run-message">${st.message || ""}</p>
    ${run.spec.pipelineRef ? html`<p class="muted" id="run-pipeline">from pipeline ${pipelineOf(run)}</p>` : ""}
    ${params.length ? html`<p class="muted">parameters: ${params.map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(", ")}</p>` : ""}
    <h2>Steps</h2>
    <div class="dag-box"><${Dag} namespace=${namespace} steps=${data.steps} /></div>
    <table id="steps">
      <thead><tr><th>step</th><th>phase</th><th>job</th><th>needs</th><th>note</th></tr></thead>
      <tbody>${data.steps.map(
        (s) => html`<tr>
          <td>${s.name}</td><td><${Phase} phase=${s.phase} /></td>
          <td>${s.job ? html`<a href=${jobHref(namespace, s.job)}>${s.job}</a>${s.jobState ? ` (${s.jobState})` : ""}` : "-"}</td>
          <td>${s.needs.join(", ") || "-"}</td>
          <td>${s.cachedFrom ? `reused ${s.cachedFrom}` : s.message || ""}</td></tr>`,
      )}</tbody>
    </table>
    ${outputs.length
      ? html`<h2>Artifacts</h2><table id="artifacts"><thead><tr><th>step</th><th>output</th><th>path</th><th>sha256</th></tr></thead>
        <tbody>${outputs.map((a) => html`<tr><td>${a.step}</td><td>${a.output}</td><td><code>${a.path}</code></td><td><code>${a.sha256}</code></td></tr>`)}</tbody></table>`
      : ""}
    <h2>Events</h2>
    <${Events} events=${data.events} />`;
}
