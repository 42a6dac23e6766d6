#!/usr/bin/env python3
"""JAX multi-process data parallelism: a linear regression with jax.distributed.

Runs unchanged on Corral and on Kubeflow (JAXJob): both set COORDINATOR_ADDRESS and
COORDINATOR_PORT (process 0), NUM_PROCESSES and PROCESS_ID, which this script hands to
jax.distributed.initialize. Each process computes the gradient on its shard; the gradients
are gathered from every process (multihost_utils.process_allgather, a collective over Gloo on
CPU) and averaged. Rank 0 checks the fit and the number of processes, and prints
`RESULT ok ...` (exit 0) or `RESULT FAILED ...` (exit 1).
"""

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils

TRUE_WEIGHTS = np.array([2.0, -3.0, 0.5, 1.5])
TRUE_BIAS = 0.7
SAMPLES = 4096
STEPS = int(os.environ.get("TRAIN_STEPS", "300"))
LEARNING_RATE = 0.1
TOLERANCE = 0.05


def main():
    coordinator = os.environ.get("COORDINATOR_ADDRESS")
    if coordinator and os.environ.get("COORDINATOR_PORT"):
        coordinator = f"{coordinator}:{os.environ['COORDINATOR_PORT']}"
    if coordinator and int(os.environ.get("NUM_PROCESSES", "1")) > 1:
        try:
            # Cross-process collectives on CPU (GPUs use NCCL on their own).
            jax.config.update("jax_cpu_collectives_implementation", "gloo")
        except (AttributeError, ValueError):
            pass
        jax.distributed.initialize(
            coordinator_address=coordinator,
            num_processes=int(os.environ["NUM_PROCESSES"]),
            process_id=int(os.environ["PROCESS_ID"]),
        )
    rank, world = jax.process_index(), jax.process_count()

    rng = np.random.default_rng(1234)
    x = rng.uniform(-1.0, 1.0, size=(SAMPLES, len(TRUE_WEIGHTS)))
    y = x @ TRUE_WEIGHTS + TRUE_BIAS + rng.normal(0.0, 0.01, size=SAMPLES)
    x, y = jnp.asarray(x[rank::world]), jnp.asarray(y[rank::world])
    print(f"[rank {rank}] world size {world}, {len(x)} samples", flush=True)

    def loss_fn(params):
        w, b = params
        return jnp.sum((x @ w + b - y) ** 2)

    grad_fn = jax.jit(jax.value_and_grad(loss_fn))
    params = (jnp.zeros(len(TRUE_WEIGHTS)), jnp.zeros(()))
    for step in range(1, STEPS + 1):
        loss, (gw, gb) = grad_fn(params)
        # Sum the per-process gradients and losses (an allreduce across processes).
        summed = multihost_utils.process_allgather(jnp.concatenate([gw, gb[None], loss[None]]))
        total = jnp.sum(jnp.reshape(summed, (world, -1)), axis=0) / SAMPLES
        gw, gb, loss = total[:-2], total[-2], total[-1]
        params = (params[0] - LEARNING_RATE * gw, params[1] - LEARNING_RATE * gb)
        if rank == 0 and (step == 1 or step % 50 == 0):
            print(f"[rank 0] step {step}/{STEPS} loss {float(loss):.6f}", flush=True)

    w, b = np.asarray(params[0]), float(params[1])
    error = float(max(np.max(np.abs(w - TRUE_WEIGHTS)), abs(b - TRUE_BIAS)))
    ok = error <= TOLERANCE and world == int(os.environ.get("NUM_PROCESSES", "1"))
    if rank == 0:
        shown = ", ".join(f"{v:.3f}" for v in w)
        verdict = "ok" if ok else "FAILED"
        print(
            f"RESULT {verdict} weights=[{shown}] bias={b:.3f} max_error={error:.4f} "
            f"tolerance={TOLERANCE} world_size={world} steps={STEPS}",
            flush=True,
        )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
