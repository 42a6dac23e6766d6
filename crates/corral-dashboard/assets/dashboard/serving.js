// Served models: the list, and a model's page with where its model came from (the training
// run), its revisions with their traffic, and its replicas. It shows what the control plane
// decided; it decides nothing.
import { h } from "preact";
import { useMemo } from "preact/hooks";
import htm from "htm";
import { useBeat, useLive } from "./live.js";
import { ErrorLine, State, age, jobHref } from "./pages.js";
import { runHref } from "./runs.js";

const html = htm.bind(h);

export const modelHref = (ns, name) => `#/serving/${encodeURIComponent(ns)}/${encodeURIComponent(name)}`;

const traffic = (st) =>
  (st.revisions || [])
    .filter((r) => r.trafficPercent > 0)
    .map((r) => `${r.name} ${r.trafficPercent}%`)
    .join(", ") || "-";

export function Models() {
  const beat = useBeat();
  const { data, error } = useLive("/api/v1/servedmodels", beat);
  const models = useMemo(() => {
    const items = (data && data.items) || [];
    const key = (m) => `${m.metadata.namespace}/${m.metadata.name}`;
    return [...items].sort((a, b) => key(a).localeCompare(key(b)));
  }, [data]);
  return html`<h1>Served models</h1>
    <${ErrorLine} error=${error} />
    ${!data
      ? html`<p class="muted">loading…</p>`
      : !models.length
        ? html`<p class="muted" id="models-none">No served models. <code>corral submit</code> a ServedModel (docs/serving.md).</p>`
        : html`<table id="models">
            <thead><tr><th>namespace</th><th>model</th><th>ready</th><th>desired</th><th>traffic</th><th>trained by</th><th>url</th><th>last request</th></tr></thead>
            <tbody>${models.map((m) => {
              const ns = m.metadata.namespace || "default";
              const st = m.status || {};
              return html`<tr>
                <td>${ns}</td>
                <td><a href=${modelHref(ns, m.metadata.name)}>${m.metadata.name}</a></td>
                <td>${st.readyReplicas || 0}/${st.replicas || 0}</td>
                <td>${st.desiredReplicas || 0}${st.panic ? " (panic)" : ""}</td>
                <td>${traffic(st)}</td>
                <td>${st.model ? (st.model.pipelineRun ? `${st.model.pipelineRun} / ${st.model.step}` : st.model.trainingJob) : "-"}</td>
                <td><code>${st.url || ""}</code></td>
                <td>${st.lastRequestTime ? age(st.lastRequestTime) : "never"}</td></tr>`;
            })}</tbody>
          </table>`}`;
}

// Where the model came from: the training run it was pinned to when submitted.
function Origin({ namespace, origin }) {
  if (!origin) return html`<p class="muted" id="model-origin">The model server loads its own model (no <code>spec.model</code>).</p>`;
  if (origin.pipelineRun) {
    // htm drops whitespace that spans a line break: the spaces stay on their lines.
    const job = origin.trainingJob
      ? html` (job <a href=${jobHref(namespace, origin.trainingJob)}>${origin.trainingJob}</a>): `
      : " (a cached result): ";
    return html`<p id="model-origin">Output <code>${origin.output}</code> of step <code>${origin.step}</code> of <a href=${runHref(namespace, origin.pipelineRun)}>pipelinerun/${origin.pipelineRun}</a>${job}<code>${origin.path}</code>, content <code title=${origin.sha256}>${origin.sha256.slice(0, 19)}…</code></p>`;
  }
  return html`<p id="model-origin">Trained by <a href=${jobHref(namespace, origin.trainingJob)}>trainingjob/${origin.trainingJob}</a>
      (uid <code>${origin.uid}</code>${origin.completionTime ? html`, succeeded ${age(origin.completionTime)} ago` : ""}):
      <code>${origin.path}</code>, content <code title=${origin.sha256}>${origin.sha256.slice(0, 19)}…</code></p>`;
}

export function Model({ namespace, name }) {
  const beat = useBeat();
  const path = `/api/v1/namespaces/${encodeURIComponent(namespace)}/servedmodels/${encodeURIComponent(name)}`;
  const { data, error } = useLive(path, beat);
  if (!data) return html`<h1>${namespace}/${name}</h1>${error ? html`<${ErrorLine} error=${error} />` : html`<p class="muted">loading…</p>`}`;
  const m = data.model;
  const st = m.status || {};
  const canary = m.spec.canaryTrafficPercent;
  return html`<h1>Served model ${namespace}/${name}</h1>
    <${ErrorLine} error=${error} />
    <p>URL <code>${st.url || ""}</code>; ${st.readyReplicas || 0} of ${st.replicas || 0} replicas ready, ${st.desiredReplicas || 0} desired${st.panic ? " (panic: a burst)" : ""}; last request ${st.lastRequestTime ? `${age(st.lastRequestTime)} ago` : "never"}.</p>
    <h2>Model</h2>
    <${Origin} namespace=${namespace} origin=${st.model} />
    <h2>Revisions</h2>
    <p class="muted">latest ${st.latestRevision || "-"}, stable ${st.stableRevision || "-"}; ${canary === undefined || canary === null ? "the latest takes every request once ready" : `canary: ${canary}% to the latest`}</p>
    <table id="revisions">
      <thead><tr><th>revision</th><th>traffic</th><th>target</th><th>ready</th><th>desired</th><th>in flight</th><th>hash</th><th>own URL</th></tr></thead>
      <tbody>${(st.revisions || []).map(
        (r) => html`<tr data-revision=${r.name}><td>${r.name}</td><td>${r.trafficPercent}%</td><td>${r.targetPercent}%</td>
          <td>${r.readyReplicas}/${r.replicas}</td><td>${r.desiredReplicas}</td><td>${r.inFlight}</td>
          <td><code title=${r.hash}>${r.hash.slice(0, 19)}</code></td><td class="url"><code>${r.url || "-"}</code></td></tr>`,
      )}</tbody>
    </table>
    <h2>Replicas</h2>
    ${data.replicas.length
      ? html`<table id="model-replicas">
          <thead><tr><th>job</th><th>revision</th><th>state</th><th>in rotation</th><th>outstanding</th></tr></thead>
          <tbody>${data.replicas.map(
            (r) => html`<tr><td><a href=${jobHref(namespace, r.job)}>${r.job}</a></td><td>${r.revision || "-"}</td>
              <td><${State} state=${r.state} /></td><td>${r.ready ? "yes" : "no"}</td><td>${r.outstanding}</td></tr>`,
          )}</tbody>
        </table>`
      : html`<p class="muted">No replicas (scaled to zero, or waiting for room).</p>`}`;
}
