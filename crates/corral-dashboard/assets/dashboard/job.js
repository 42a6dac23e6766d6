// A job's page: conditions, why it waits, replicas with their placement, events, a live
// log tail per replica, and suspend/resume/delete behind a confirmation.
import { h } from "preact";
import { useEffect, useRef, useState } from "preact/hooks";
import htm from "htm";
import { api, token, useLive } from "./live.js";
import { ErrorLine, Events, State, age } from "./pages.js";
import { Chart, aligned, cores, lastHour, mib, percent, spanOf, useEvery } from "./charts.js";

const html = htm.bind(h);

// Asks before an action; the API's answer (or refusal) is shown as it comes.
function Confirm({ ask, onDone }) {
  const dialog = useRef(null);
  const [busy, setBusy] = useState(false);
  useEffect(() => {
    if (ask && dialog.current && !dialog.current.open) dialog.current.showModal();
  }, [ask]);
  if (!ask) return "";
  const close = (result) => {
    dialog.current.close();
    onDone(result);
  };
  const go = async () => {
    setBusy(true);
    try {
      await api(ask.path, { method: ask.method });
      close({ ok: `${ask.verb}: done` });
    } catch (e) {
      close({ error: e });
    } finally {
      setBusy(false);
    }
  };
  return html`<dialog ref=${dialog} id="confirm" onCancel=${() => onDone(null)}>
    <p>${ask.verb} job <b>${ask.job}</b>?</p>
    <p class="muted">${ask.detail}</p>
    <button id="confirm-yes" class="danger" disabled=${busy} onClick=${go}>${ask.verb}</button>
    <button id="confirm-no" onClick=${() => close(null)}>Cancel</button>
  </dialog>`;
}

// The replica's log, followed: the last lines, then what it writes, across restarts.
function LogTail({ namespace, name, replica }) {
  const pre = useRef(null);
  const [status, setStatus] = useState("connecting…");
  useEffect(() => {
    const ctl = new AbortController();
    const el = pre.current;
    el.textContent = "";
    const path = `/api/v1/namespaces/${encodeURIComponent(namespace)}/trainingjobs/${encodeURIComponent(name)}/logs?replica=${encodeURIComponent(replica)}&follow=true&tail=200`;
    const t = token.get();
    (async () => {
      try {
        const r = await fetch(path, { headers: t ? { Authorization: `Bearer ${t}` } : {}, signal: ctl.signal });
        if (!r.ok) {
          const body = await r.json().catch(() => null);
          setStatus(body && body.error ? body.error.message : `${r.status}`);
          return;
        }
        setStatus("following");
        const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          const stick = el.scrollTop + el.clientHeight >= el.scrollHeight - 4;
          el.textContent += value;
          // The tail only: a long-running log must not grow the page without bound.
          if (el.textContent.length > 200000) el.textContent = el.textContent.slice(-150000);
          if (stick) el.scrollTop = el.scrollHeight;
        }
        setStatus("ended (the replica stopped)");
      } catch (e) {
        if (!ctl.signal.aborted) setStatus(String(e.message || e));
      }
    })();
    return () => ctl.abort();
  }, [namespace, name, replica]);
  return html`<section><h2>Log of ${replica} <span class="muted" id="log-status">${status}</span></h2>
    <pre class="log" id="log" ref=${pre}></pre></section>`;
}

// How often an open job page looks again for what its replicas report.
const PROGRESS_REFRESH_MS = 3000;

// A job's reported progress in words, as `corral describe` says it (docs/progress.md).
function progressText(p) {
  const parts = [];
  if (p.percent != null) parts.push(`${p.percent}%`);
  parts.push(p.totalSteps != null ? `step ${p.step}/${p.totalSteps}` : `step ${p.step}`);
  if (p.samplesPerSecond != null) parts.push(`${p.samplesPerSecond} samples/s`);
  if (p.etaSeconds != null) parts.push(`ETA ${duration(p.etaSeconds)}`);
  const metrics = Object.entries(p.metrics || {}).map(([k, v]) => `${k}=${v}`);
  if (metrics.length) parts.push(metrics.join(" "));
  return `${parts.join(" · ")} (${p.replica}, ${age(p.updated)} ago)`;
}

function duration(secs) {
  if (secs < 120) return `${secs}s`;
  if (secs < 7200) return `${Math.floor(secs / 60)}m`;
  if (secs < 172800) return `${Math.floor(secs / 3600)}h`;
  return `${Math.floor(secs / 86400)}d`;
}

// Each replica's CPU, memory and GPU over the last hour, from the server's history (one
// reading a minute); looked at again every 30 s.
function ReplicaCharts({ namespace, name }) {
  const beat = useEvery(30000);
  const path = `/api/v1/series?kind=replica&namespace=${encodeURIComponent(namespace)}&job=${encodeURIComponent(name)}&from=${lastHour()}`;
  const { data, error } = useLive(path, beat);
  const list = (data && data.series) || [];
  const label = (s) => s.key.split("/").pop();
  const cpu = aligned(list, "cpuCores", label);
  const mem = aligned(list, "memoryBytes", label);
  const gpu = aligned(list, "gpuUtilizationPercent", label);
  const anyGpu = gpu.series.some((s) => s.values.some((v) => v !== null));
  return html`<section id="replica-charts"><h2>Replicas over the last hour <span class="muted">one reading a minute</span></h2>
    <${ErrorLine} error=${error} />
    <div class="cards">
      <div class="card"><${Chart} id="chart-cpu" title="CPU (cores)" times=${cpu.times} series=${cpu.series} span=${spanOf(data)} format=${cores} /></div>
      <div class="card"><${Chart} id="chart-memory" title="Memory" times=${mem.times} series=${mem.series} span=${spanOf(data)} format=${mib} /></div>
      ${anyGpu ? html`<div class="card"><${Chart} id="chart-gpu" title="GPU utilisation" times=${gpu.times} series=${gpu.series} span=${spanOf(data)} format=${percent} /></div>` : ""}
    </div></section>`;
}

export function Job({ namespace, name }) {
  const base = `/api/v1/namespaces/${encodeURIComponent(namespace)}/trainingjobs/${encodeURIComponent(name)}`;
  // The watch stream says when a job's row changes; what its replicas report (progress)
  // does not change the row, so the page also looks again every few seconds.
  const [beat, setBeat] = useState(0);
  useEffect(() => {
    const t = setInterval(() => setBeat((b) => b + 1), PROGRESS_REFRESH_MS);
    return () => clearInterval(t);
  }, []);
  const d = useLive(`${base}/describe`, beat);
  const [ask, setAsk] = useState(null);
  const [result, setResult] = useState(null);
  const [replica, setReplica] = useState(null);
  if (!d.data) {
    return html`<h1>${namespace}/${name}</h1>${d.error ? html`<${ErrorLine} error=${d.error} />` : html`<p class="muted">loading…</p>`}`;
  }
  const { summary: s, job, admission, replicas, events, pendingReason } = d.data;
  const conditions = (job.status && job.status.conditions) || [];
  const progress = job.status && job.status.progress;
  const suspended = !!(job.spec.runPolicy && job.spec.runPolicy.suspend);
  const placement = (r) => (admission ? admission.placements.find((p) => p.role === r.role && p.index === r.index) : null);
  const action = (verb, method, path, detail) => () => {
    setResult(null);
    setAsk({ verb, method, path: `${base}${path}`, job: `${namespace}/${name}`, detail });
  };
  const shownReplica = replica || (replicas[0] ? `${replicas[0].role}-${replicas[0].index}` : null);
  return html`<h1>${name} <${State} state=${s.state} /></h1>
    ${d.error ? html`<${ErrorLine} error=${d.error} />` : ""}
    <p class="muted">namespace ${s.namespace} · queue ${s.queue} · ${s.framework} · ${s.gpus} GPUs · submitted ${age(s.created)} ago · <span id="restarts">${s.restarts} restarts</span> · <span id="preemptions">${s.preemptions} preemptions</span></p>
    <div class="actions">
      ${suspended
        ? html`<button id="resume" onClick=${action("Resume", "POST", "/resume", "It goes back to its queue.")}>Resume</button>`
        : html`<button id="suspend" onClick=${action("Suspend", "POST", "/suspend", "Its replicas are stopped; it keeps its place in the queue's history.")}>Suspend</button>`}
      <button id="delete" class="danger" onClick=${action("Delete", "DELETE", "", "Its replicas are stopped and the job is removed.")}>Delete</button>
      ${result && result.ok ? html`<span class="ok">${result.ok}</span>` : ""}
      ${result && result.error ? html`<${ErrorLine} error=${result.error} />` : ""}
    </div>
    <${Confirm} ask=${ask} onDone=${(r) => {
      setAsk(null);
      setResult(r);
    }} />
    ${progress ? html`<p id="progress"><b>Progress:</b> ${progressText(progress)}</p>` : ""}
    ${pendingReason ? html`<p class="waiting-reason" id="pending-reason"><b>Why it waits:</b> ${pendingReason}</p>` : ""}
    <section><h2>Conditions</h2>
      <table><tr><th>type</th><th>status</th><th>reason</th><th>message</th><th>since</th></tr>
        ${conditions.map((c) => html`<tr><td>${c.type}</td><td>${c.status}</td><td>${c.reason}</td><td>${c.message}</td><td>${age(c.lastTransitionTime)}</td></tr>`)}
      </table></section>
    <section><h2>Replicas ${admission ? html`<span class="muted">pool ${admission.pool}${admission.gpuType ? `, ${admission.gpuType}` : ""}, admitted ${age(admission.admittedAt)} ago</span>` : ""}</h2>
      <table id="replicas"><tr><th>replica</th><th>phase</th><th>incarnation</th><th>node</th><th>GPUs</th><th>pid</th><th>port</th><th>restarts</th><th>exit</th><th>started</th><th></th></tr>
        ${replicas.map((r) => {
          const p = placement(r);
          const id = `${r.role}-${r.index}`;
          return html`<tr data-replica=${id}><td>${r.name}</td><td>${r.phase}</td><td>${r.incarnation}</td>
            <td class="node">${p ? p.node : ""}</td><td class="gpus-held">${(r.gpus.length ? r.gpus : p ? p.gpuIndices : []).join(", ")}</td>
            <td>${r.pid || ""}</td><td>${r.port || ""}</td><td>${r.restarts}</td>
            <td>${r.exitCode !== null && r.exitCode !== undefined ? `${r.exitCode}${r.reason ? ` (${r.reason})` : ""}` : ""}${r.message ? html`<div class="muted">${r.message}</div>` : ""}</td>
            <td>${age(r.started)}</td>
            <td><button class="link log-button" id=${`log-${id}`} onClick=${() => setReplica(id)}>log</button></td></tr>`;
        })}
      </table>
      ${replicas.length === 0 ? html`<p class="muted">No replica has started.</p>` : ""}
    </section>
    ${shownReplica ? html`<${LogTail} namespace=${namespace} name=${name} replica=${shownReplica} />` : ""}
    <${ReplicaCharts} namespace=${namespace} name=${name} />
    <section><h2>Events</h2><${Events} events=${[...events].reverse()} withJob=${false} /></section>`;
}
