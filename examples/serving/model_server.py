"""A tiny model server on the Python standard library, for Corral's serving example.

It listens on $PORT (Corral gives each replica its own), answers the readiness check on
/healthz, and serves a linear model:

  GET  /healthz                 -> 200 ok
  POST /predict  {"x": [1, 2]}  -> {"y": w.x + b, "replica": ..., "version": $MODEL_VERSION}
  GET  /predict?x=1,2           -> the same (idempotent: the router may retry it)
       &sleep_ms=N              -> answers after N ms (to make load)
       &exit=PATH               -> unless PATH exists: creates it, and the process dies
                                   without answering (a crash, once)
  GET  /stream?n=3              -> server-sent events, one per chunk, flushed each
       &gate=PATH               -> before chunk i > 0, waits until PATH.i exists

$MODEL_VERSION (default v1) names the weights: v2 adds 1 to the bias (a new revision of the
served model when its template's env changes; see canary.yaml). A model served from a
training job's output (from-training.yaml) reads its weights from $CORRAL_MODEL_PATH instead
(the JSON train.py writes), and its version is the trained file's.
"""

import json
import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

# The "trained weights": y = 2*x0 - 1*x1 + 0.5*x2 ... + 1
WEIGHTS = [2.0, -1.0, 0.5, 0.25]
VERSION = os.environ.get("MODEL_VERSION", "v1")
BIAS = 2.0 if VERSION == "v2" else 1.0
if os.environ.get("CORRAL_MODEL_PATH"):
    with open(os.environ["CORRAL_MODEL_PATH"]) as f:
        trained = json.load(f)
    WEIGHTS, BIAS = trained["weights"], trained["bias"]
    VERSION = "trained-" + os.environ.get("CORRAL_MODEL_PATH").split("/")[-2]
REPLICA = os.environ.get("CORRAL_REPLICA", "local")


def predict(xs):
    return sum(w * x for w, x in zip(WEIGHTS, xs)) + BIAS


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def answer(self, status, body, content_type="application/json"):
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def prediction(self, xs):
        return json.dumps({"y": predict(xs), "replica": REPLICA, "version": VERSION})

    def do_GET(self):
        url = urlparse(self.path)
        q = parse_qs(url.query)
        if url.path == "/healthz":
            return self.answer(200, "ok", "text/plain")
        if url.path == "/predict":
            once = q.get("exit", [None])[0]
            if once and not os.path.exists(once):
                open(once, "w").close()
                os._exit(1)
            time.sleep(int(q.get("sleep_ms", ["0"])[0]) / 1000)
            try:
                xs = [float(v) for v in q.get("x", [""])[0].split(",") if v]
            except ValueError:
                return self.answer(400, json.dumps({"error": "x: numbers, comma separated"}))
            return self.answer(200, self.prediction(xs))
        if url.path == "/stream":
            return self.stream(int(q.get("n", ["3"])[0]), q.get("gate", [None])[0])
        self.answer(404, json.dumps({"error": f"no route {url.path}"}))

    def do_POST(self):
        if urlparse(self.path).path != "/predict":
            return self.answer(404, json.dumps({"error": "POST /predict only"}))
        length = int(self.headers.get("Content-Length", "0"))
        try:
            xs = [float(v) for v in json.loads(self.rfile.read(length))["x"]]
        except (ValueError, KeyError, TypeError):
            return self.answer(400, json.dumps({"error": 'send {"x": [numbers]}'}))
        self.answer(200, self.prediction(xs))

    def stream(self, n, gate):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for i in range(n):
            if gate and i > 0:
                deadline = time.time() + 60
                while not os.path.exists(f"{gate}.{i}") and time.time() < deadline:
                    time.sleep(0.01)
            event = f"data: {json.dumps({'token': i, 'replica': REPLICA})}\n\n".encode()
            self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def main():
    port = int(os.environ["PORT"])
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"model server {REPLICA} on 127.0.0.1:{port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
