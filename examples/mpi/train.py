"""Data-parallel linear regression over MPI: every rank fits its own shard, the gradients
are averaged with MPI Allreduce each step (what Horovod's allreduce does, here with mpi4py:
Horovod does not build against current PyTorch on this platform's CI machine).

Run by `mpirun` in the launcher; each rank runs inside a worker replica (on the embedded
cluster mpirun reaches the workers through `corral rsh`). Rank 0 checks the fit and that the
ranks ran in distinct worker replicas, prints `RESULT ok ...`, and exits non-zero otherwise.
"""

import os
import sys
import time

import numpy as np
from mpi4py import MPI

TRUE_W = np.array([2.0, -3.0, 0.5, 1.5])
TRUE_B = 4.0
SAMPLES_PER_RANK = 4096
STEPS = 300
LR = 0.1


def main() -> int:
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    started = time.monotonic()
    # Each rank its own shard (a seed per rank), as each worker would read its own files.
    rng = np.random.default_rng(1000 + rank)
    x = rng.normal(size=(SAMPLES_PER_RANK, TRUE_W.size))
    y = x @ TRUE_W + TRUE_B + rng.normal(scale=0.01, size=SAMPLES_PER_RANK)
    w = np.zeros(TRUE_W.size)
    b = 0.0
    grad = np.empty(TRUE_W.size + 1)
    for step in range(STEPS):
        err = x @ w + b - y
        local = np.concatenate([x.T @ err, [err.sum()]]) * (2.0 / SAMPLES_PER_RANK)
        comm.Allreduce(local, grad, op=MPI.SUM)
        grad /= size
        w -= LR * grad[:-1]
        b -= LR * grad[-1]
        if rank == 0 and step % 100 == 0:
            loss = comm.allreduce(float((err**2).mean()), op=MPI.SUM) / size
            print(f"step {step} loss {loss:.6f}", flush=True)
        elif step % 100 == 0:
            comm.allreduce(float((err**2).mean()), op=MPI.SUM)
    # Where each rank ran: the replica Corral started it in (its CORRAL_REPLICA), else the
    # host name (Kubernetes: one pod per worker).
    where = os.environ.get("CORRAL_REPLICA") or MPI.Get_processor_name()
    places = comm.gather(where, root=0)
    if rank != 0:
        return 0
    error = float(np.abs(w - TRUE_W).max() + abs(b - TRUE_B))
    expected = int(os.environ.get("EXPECTED_RANKS", size))
    distinct = len(set(places))
    ok = error < 1e-2 and size == expected and distinct == size
    print(
        f"RESULT {'ok' if ok else 'FAILED'} ranks={size} replicas={distinct} "
        f"max_error={error:.2e} w={np.round(w, 3).tolist()} b={b:.3f} "
        f"seconds={time.monotonic() - started:.1f} where={sorted(places)}",
        flush=True,
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
