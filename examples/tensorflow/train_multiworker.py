#!/usr/bin/env python3
"""TensorFlow synchronous multi-worker training: tf.distribute.MultiWorkerMirroredStrategy
with a custom training loop.

Reads TF_CONFIG, as Kubeflow's TFJob sets it (Corral sets the same). Every worker holds a
mirrored copy of the variables and one shard of the data; each step the gradients are
averaged across the workers (a collective allreduce over gRPC), so every copy takes the same
step. Worker 0 checks the fit and prints `RESULT ok ...` (exit 0) or `RESULT FAILED ...`
(exit 1); the job succeeds with worker 0, as on Kubeflow.
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf

TRUE_WEIGHTS = np.array([[2.0], [-3.0], [0.5], [1.5]], dtype=np.float32)
TRUE_BIAS = 0.7
SAMPLES = 4096
STEPS = int(os.environ.get("TRAIN_STEPS", "300"))
LEARNING_RATE = 0.1
TOLERANCE = 0.05


def main():
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    rank, world = task["index"], strategy.num_replicas_in_sync
    with strategy.scope():
        # After the explicit allreduce below every copy holds the same update.
        agg = tf.VariableAggregation.ONLY_FIRST_REPLICA
        w = tf.Variable(tf.zeros([4, 1]), aggregation=agg)
        b = tf.Variable(0.0, aggregation=agg)

    rng = np.random.default_rng(1234)
    x = rng.uniform(-1, 1, size=(SAMPLES, 4)).astype(np.float32)
    y = x @ TRUE_WEIGHTS + TRUE_BIAS + rng.normal(0, 0.01, size=(SAMPLES, 1)).astype(np.float32)
    x, y = tf.constant(x[rank::world]), tf.constant(y[rank::world])  # this worker's shard
    print(f"[worker {rank}] {world} workers in sync, {len(x)} samples", flush=True)

    @tf.function
    def step():
        def replica_fn():
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.matmul(x, w) + b - y) ** 2)
            grads = tape.gradient(loss, [w, b])
            ctx = tf.distribute.get_replica_context()
            gw, gb, loss = ctx.all_reduce(tf.distribute.ReduceOp.MEAN, grads + [loss])
            w.assign_sub(LEARNING_RATE * gw)
            b.assign_sub(LEARNING_RATE * gb)
            return loss
        return strategy.run(replica_fn)

    for i in range(1, STEPS + 1):
        loss = step()
        if rank == 0 and (i == 1 or i % 100 == 0):
            print(f"[worker 0] step {i}/{STEPS} loss {float(loss):.6f}", flush=True)

    weights, bias = w.numpy().ravel(), float(b.numpy())
    error = float(max(np.max(np.abs(weights - TRUE_WEIGHTS.ravel())), abs(bias - TRUE_BIAS)))
    ok = error <= TOLERANCE
    if rank == 0:
        shown = ", ".join(f"{v:.3f}" for v in weights)
        print(f"RESULT {'ok' if ok else 'FAILED'} weights=[{shown}] bias={bias:.3f} "
              f"max_error={error:.4f} tolerance={TOLERANCE} workers={world} steps={STEPS}",
              flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
