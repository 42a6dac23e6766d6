#!/usr/bin/env python3
"""Corral quickstart: data-parallel linear regression, Python standard library only.

Every replica fits the same linear model on its own shard of a synthetic data set. Each
step, every replica computes the gradient on its shard; rank 0 averages the gradients of
all ranks (weighted by shard size) and sends the average back, so every replica takes the
same step: synchronous data-parallel SGD, as DDP does with an allreduce.

It reads the environment Corral (and Kubeflow's training operator) injects:
  - PyTorch jobs: MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK
  - TensorFlow jobs: TF_CONFIG {"cluster": {...}, "task": {"type", "index"}}
  - neither: a single process trains alone.
Rank 0 listens on the master port; the others connect to it.

At the end, rank 0 checks the fitted weights against the ones the data was made from and
prints one line: `RESULT ok ...` (exit 0) or `RESULT FAILED ...` (exit 1).
"""

import json
import os
import random
import socket
import sys
import time

TRUE_WEIGHTS = [2.0, -3.0, 0.5, 1.5]
TRUE_BIAS = 0.7
SAMPLES = 4096
STEPS = int(os.environ.get("QUICKSTART_STEPS", "300"))
LEARNING_RATE = 0.1
TOLERANCE = 0.05
CONNECT_TIMEOUT_S = 120.0


def log(rank, message):
    print(f"[rank {rank}] {message}", flush=True)


def topology():
    """(rank, world_size, master host, master port) from the injected environment."""
    tf_config = os.environ.get("TF_CONFIG")
    if tf_config:
        config = json.loads(tf_config)
        cluster = config.get("cluster", {})
        task = config.get("task", {})
        # Ranks in a fixed order: chief, then master, then workers (evaluators train no part).
        members = []
        for role in ("chief", "master", "worker"):
            for index, address in enumerate(cluster.get(role, [])):
                members.append((role, index, address))
        me = (task.get("type"), int(task.get("index", 0)))
        rank = next(i for i, (r, x, _) in enumerate(members) if (r, x) == me)
        host, port = members[0][2].rsplit(":", 1)
        return rank, len(members), host, int(port)
    if "WORLD_SIZE" in os.environ:
        return (
            int(os.environ["RANK"]),
            int(os.environ["WORLD_SIZE"]),
            os.environ["MASTER_ADDR"],
            int(os.environ["MASTER_PORT"]),
        )
    return 0, 1, "127.0.0.1", 0


def make_data(rank, world_size):
    """This rank's shard of one synthetic data set (the same for every rank: fixed seed)."""
    rng = random.Random(1234)
    xs, ys = [], []
    for i in range(SAMPLES):
        x = [rng.uniform(-1.0, 1.0) for _ in TRUE_WEIGHTS]
        y = sum(w * v for w, v in zip(TRUE_WEIGHTS, x)) + TRUE_BIAS + rng.gauss(0.0, 0.01)
        if i % world_size == rank:
            xs.append(x)
            ys.append(y)
    return xs, ys


def gradient(params, xs, ys):
    """Sum of squared-error gradients over the shard, and the summed loss."""
    dims = len(TRUE_WEIGHTS)
    grad = [0.0] * (dims + 1)
    loss = 0.0
    for x, y in zip(xs, ys):
        err = sum(w * v for w, v in zip(params[:dims], x)) + params[dims] - y
        loss += err * err
        for j in range(dims):
            grad[j] += 2.0 * err * x[j]
        grad[dims] += 2.0 * err
    return grad, loss


def send(sock, message):
    sock.sendall((json.dumps(message) + "\n").encode())


class Lines:
    """Newline-delimited JSON messages from a socket."""

    def __init__(self, sock):
        self.file = sock.makefile("r", encoding="utf-8")

    def recv(self):
        line = self.file.readline()
        if not line:
            raise ConnectionError("peer closed the connection")
        return json.loads(line)


def serve(port, world_size, rank):
    """Rank 0: accept every other rank. Returns {rank: (socket, reader)}."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("", port))
    server.listen(world_size)
    server.settimeout(CONNECT_TIMEOUT_S)
    log(rank, f"listening on port {port} for {world_size - 1} peers")
    peers = {}
    while len(peers) < world_size - 1:
        conn, _ = server.accept()
        conn.settimeout(CONNECT_TIMEOUT_S)
        reader = Lines(conn)
        hello = reader.recv()
        peers[int(hello["rank"])] = (conn, reader)
    server.close()
    return peers


def connect(host, port, rank):
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while True:
        try:
            sock = socket.create_connection((host, port), timeout=5.0)
            sock.settimeout(CONNECT_TIMEOUT_S)
            send(sock, {"rank": rank})
            log(rank, f"connected to rank 0 at {host}:{port}")
            return sock, Lines(sock)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def report_progress(step, total_steps, **metrics):
    """Tells Corral how far training is: `corral describe` shows the percent and an ETA.

    Embedded, Corral names a file in CORRAL_PROGRESS_FILE; written whole, then renamed, so
    that it is never read half-written. On Kubernetes, the report is POSTed to
    CORRAL_PROGRESS_URL with the pod's token (docs/progress.md); a report that does not get
    through is dropped (the next one says more). Elsewhere it does nothing.
    """
    report = {"step": step, "totalSteps": total_steps, "metrics": metrics}
    path = os.environ.get("CORRAL_PROGRESS_FILE")
    if path:
        with open(path + ".new", "w", encoding="utf-8") as f:
            json.dump(report, f)
        os.replace(path + ".new", path)
    url = os.environ.get("CORRAL_PROGRESS_URL")
    token_file = os.environ.get("CORRAL_PROGRESS_TOKEN_FILE")
    if url and token_file:
        import urllib.request

        try:
            with open(token_file, encoding="utf-8") as f:
                token = f.read().strip()
            req = urllib.request.Request(
                url,
                data=json.dumps(report).encode(),
                headers={"Content-Type": "application/json", "Authorization": "Bearer " + token},
                method="POST",
            )
            urllib.request.urlopen(req, timeout=2).close()
        except OSError:
            pass


def main():
    rank, world_size, host, port = topology()
    xs, ys = make_data(rank, world_size)
    log(rank, f"world size {world_size}, {len(xs)} samples in my shard")
    params = [0.0] * (len(TRUE_WEIGHTS) + 1)

    if world_size > 1 and rank == 0:
        peers = serve(port, world_size, rank)
    elif world_size > 1:
        sock, reader = connect(host, port, rank)

    loss = 0.0
    for step in range(1, STEPS + 1):
        grad, local_loss = gradient(params, xs, ys)
        if world_size == 1:
            total, loss = grad, local_loss / len(xs)
        elif rank == 0:
            total = list(grad)
            summed_loss = local_loss
            for peer in sorted(peers):
                message = peers[peer][1].recv()
                total = [a + b for a, b in zip(total, message["grad"])]
                summed_loss += message["loss"]
            total = [g / SAMPLES for g in total]
            loss = summed_loss / SAMPLES
            for peer in sorted(peers):
                send(peers[peer][0], {"grad": total, "loss": loss})
        else:
            send(sock, {"grad": grad, "loss": local_loss})
            message = reader.recv()
            total, loss = message["grad"], message["loss"]
        if world_size == 1:
            total = [g / len(xs) for g in total]
        params = [p - LEARNING_RATE * g for p, g in zip(params, total)]
        if rank == 0 and (step % 50 == 0 or step == 1):
            log(rank, f"step {step}/{STEPS} loss {loss:.6f}")
            report_progress(step, STEPS, loss=loss)

    weights, bias = params[:-1], params[-1]
    error = max(abs(a - b) for a, b in zip(weights + [bias], TRUE_WEIGHTS + [TRUE_BIAS]))
    shown = ", ".join(f"{w:.3f}" for w in weights)
    if rank != 0:
        log(rank, f"done: weights [{shown}] bias {bias:.3f}")
        sock.close()
        return 0
    if world_size > 1:
        for conn, _ in peers.values():
            conn.close()
    ok = error <= TOLERANCE
    verdict = "ok" if ok else "FAILED"
    print(
        f"RESULT {verdict} weights=[{shown}] bias={bias:.3f} max_error={error:.4f} "
        f"tolerance={TOLERANCE} loss={loss:.6f} world_size={world_size} steps={STEPS}",
        flush=True,
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
