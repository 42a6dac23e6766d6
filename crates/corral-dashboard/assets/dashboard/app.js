// The dashboard's shell: the token, the navigation (#/..., one page at a time) and the
// live store's connection.
import { h, render } from "preact";
import { useEffect, useState } from "preact/hooks";
import htm from "htm";
import { api, connect, store, token, useStore } from "./live.js";
import { Jobs, Nodes, Overview, Queues } from "./pages.js";
import { Job } from "./job.js";
import { Run, Runs } from "./runs.js";
import { Model, Models } from "./serving.js";
import { Usage } from "./usage.js";

const html = htm.bind(h);

function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("?")[0].split("/").map(decodeURIComponent);
  return parts;
}

function useRoute() {
  const [r, set] = useState(route());
  useEffect(() => {
    const on = () => set(route());
    addEventListener("hashchange", on);
    return () => removeEventListener("hashchange", on);
  }, []);
  return r;
}

// Asks for a token when the server wants one; it is kept for this tab only.
function TokenForm({ message }) {
  const [value, set] = useState("");
  const submit = (e) => {
    e.preventDefault();
    token.set(value.trim());
    location.reload();
  };
  return html`<form class="token" onSubmit=${submit}>
    <h2>This server asks for an API token</h2>
    <p>${message || "Paste a token from the server's configuration (tokens:)."} It is kept in this tab only (sessionStorage) and sent as the API's bearer header.</p>
    <input id="token" type="password" autocomplete="off" value=${value} onInput=${(e) => set(e.target.value)} placeholder="token" />
    <button id="token-submit" type="submit">Open</button>
  </form>`;
}

const NAV = [
  ["", "Overview"],
  ["queues", "Queues"],
  ["jobs", "Jobs"],
  ["nodes", "Nodes"],
  ["runs", "Pipelines"],
  ["serving", "Serving"],
  ["usage", "Usage"],
];

function App() {
  const r = useRoute();
  const s = useStore();
  const [who, setWho] = useState({ namespace: undefined, error: null });
  useEffect(() => {
    api("/api/v1/whoami").then(
      (w) => {
        setWho({ namespace: w.namespace, error: null });
        connect();
      },
      (error) => setWho({ namespace: undefined, error }),
    );
  }, []);
  if (who.error && who.error.status === 401) {
    return html`<${TokenForm} message=${token.get() ? who.error.message : ""} />`;
  }
  if (s.needToken) return html`<${TokenForm} />`;
  let page;
  if (r[0] === "queues") page = html`<${Queues} />`;
  else if (r[0] === "jobs" && r.length >= 3) page = html`<${Job} namespace=${r[1]} name=${r[2]} />`;
  else if (r[0] === "jobs") page = html`<${Jobs} />`;
  else if (r[0] === "nodes") page = html`<${Nodes} />`;
  else if (r[0] === "runs" && r.length >= 3) page = html`<${Run} namespace=${r[1]} name=${r[2]} />`;
  else if (r[0] === "runs") page = html`<${Runs} />`;
  else if (r[0] === "serving" && r.length >= 3) page = html`<${Model} namespace=${r[1]} name=${r[2]} />`;
  else if (r[0] === "serving") page = html`<${Models} />`;
  else if (r[0] === "usage") page = html`<${Usage} />`;
  else page = html`<${Overview} />`;
  const signOut = () => {
    token.clear();
    location.reload();
  };
  return html`<header>
      <a class="brand" href="#/">Corral</a>
      <nav>${NAV.map(
        ([p, label]) => html`<a id=${`nav-${p || "overview"}`} class=${r[0] === p ? "on" : ""} href=${`#/${p}`}>${label}</a>`,
      )}</nav>
      <span class="who">
        <span class=${`dot ${s.connected ? "up" : "down"}`} title=${s.connected ? "live" : s.error || "connecting"}></span>
        ${who.namespace ? html`namespace <b id="token-namespace">${who.namespace}</b>` : who.namespace === null ? "all namespaces" : ""}
        ${token.get() ? html` <button class="link" onClick=${signOut}>forget token</button>` : ""}
      </span>
    </header>
    ${who.error && who.error.status !== 401 ? html`<p class="error">${who.error.message}</p>` : ""}
    <main>${page}</main>`;
}

// The page's "Loading…" note goes: render() diffs against what the container holds.
const root = document.getElementById("app");
root.textContent = "";
render(html`<${App} />`, root);
