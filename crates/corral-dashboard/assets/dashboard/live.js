// The API client and the live store: every job the token may see, kept up to date by
// /api/v1/watch. Pages read the store and ask the API; nothing here decides anything.
import { useEffect, useState, useRef } from "preact/hooks";

const TOKEN_KEY = "corral-token";

export const token = {
  get: () => sessionStorage.getItem(TOKEN_KEY) || "",
  set: (t) => sessionStorage.setItem(TOKEN_KEY, t),
  clear: () => sessionStorage.removeItem(TOKEN_KEY),
};

function headers() {
  const t = token.get();
  return t ? { Authorization: `Bearer ${t}` } : {};
}

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// Calls the API; an error answer becomes an ApiError with the server's message.
export async function api(path, { method = "GET", signal } = {}) {
  const r = await fetch(path, { method, headers: headers(), signal });
  const text = await r.text();
  let body = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = text;
  }
  if (!r.ok) {
    const e = body && body.error ? body.error : { code: String(r.status), message: text };
    throw new ApiError(r.status, e.code, e.message);
  }
  return body;
}

export const jobKey = (j) => `${j.namespace}/${j.name}`;

// What the watch stream has told: jobs by `ns/name`, why the waiting ones wait, the
// latest events, and whether the stream is up.
export const store = {
  jobs: new Map(),
  reasons: new Map(),
  events: [],
  version: 0,
  loaded: false,
  connected: false,
  needToken: false,
  error: "",
};
const MAX_EVENTS = 500;
const listeners = new Set();

let scheduled = false;
function changed() {
  store.version++;
  // One render per frame, however many messages arrived.
  if (scheduled) return;
  scheduled = true;
  requestAnimationFrame(() => {
    scheduled = false;
    for (const f of listeners) f(store.version);
  });
}

export function subscribe(f) {
  listeners.add(f);
  return () => listeners.delete(f);
}

// Re-renders the calling component when the store changes.
export function useStore() {
  const [, set] = useState(0);
  useEffect(() => subscribe(set), []);
  return store;
}

function applyJobs(m) {
  if (m.reset) {
    store.jobs = new Map();
    store.reasons = new Map();
  }
  for (const j of m.upsert) store.jobs.set(jobKey(j), j);
  for (const k of m.remove) {
    store.jobs.delete(k);
    store.reasons.delete(k);
  }
  for (const [k, why] of Object.entries(m.reasons)) {
    if (why === null) store.reasons.delete(k);
    else store.reasons.set(k, why);
  }
  store.loaded = true;
}

function applyEvent(e) {
  store.events.push(e);
  if (store.events.length > MAX_EVENTS) store.events.splice(0, store.events.length - MAX_EVENTS);
}

// Reads a text/event-stream body (fetch, not EventSource: EventSource cannot send the
// bearer header) and hands each message to `on(event, data)`.
export async function readEvents(response, on) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    let end;
    while ((end = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      let event = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) event = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      }
      if (data.length) on(event, data.join("\n"));
    }
  }
}

let watching = null;

// Opens the watch stream, and opens it again whenever it ends.
export function connect() {
  if (watching) watching.abort();
  const ctl = new AbortController();
  watching = ctl;
  (async () => {
    while (!ctl.signal.aborted) {
      try {
        const r = await fetch("/api/v1/watch", { headers: headers(), signal: ctl.signal });
        if (r.status === 401) {
          store.needToken = true;
          store.connected = false;
          changed();
          return;
        }
        if (!r.ok) throw new Error(`watch: ${r.status} ${await r.text()}`);
        store.connected = true;
        store.error = "";
        changed();
        await readEvents(r, (event, data) => {
          if (event === "jobs") applyJobs(JSON.parse(data));
          else if (event === "event") applyEvent(JSON.parse(data));
          else if (event === "error") store.error = data;
          changed();
        });
      } catch (e) {
        if (ctl.signal.aborted) return;
        store.error = String(e.message || e);
      }
      store.connected = false;
      changed();
      await new Promise((res) => setTimeout(res, 2000));
    }
  })();
}

// GETs `path` now and again when the store changed (at most once a second), so that
// what the watch stream does not carry (nodes, queues, a job's details) keeps up too.
export function useLive(path, beat = 0) {
  const s = useStore();
  const [state, setState] = useState({ data: null, error: null });
  const last = useRef({ path: null, at: 0, timer: 0 });
  useEffect(() => {
    if (!path) return;
    const l = last.current;
    const run = () => {
      l.at = Date.now();
      l.timer = 0;
      api(path).then(
        (data) => setState({ data, error: null }),
        (error) => setState((old) => ({ data: old.data, error })),
      );
    };
    if (l.path !== path) {
      clearTimeout(l.timer);
      l.path = path;
      setState({ data: null, error: null });
      run();
    } else if (!l.timer) {
      l.timer = setTimeout(run, Math.max(0, 1000 - (Date.now() - l.at)));
    }
  }, [path, s.version, beat]);
  useEffect(() => () => clearTimeout(last.current.timer), []);
  return state;
}

// What changes without a job row changing (a pipeline step cached, a served model's
// traffic): a beat every few seconds, to look again as well as on the watch stream's changes.
const REFRESH_MS = 3000;

export function useBeat() {
  const [beat, set] = useState(0);
  useEffect(() => {
    const t = setInterval(() => set((b) => b + 1), REFRESH_MS);
    return () => clearInterval(t);
  }, []);
  return beat;
}
