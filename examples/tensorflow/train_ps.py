#!/usr/bin/env python3
"""TensorFlow parameter-server training: tf.distribute.ParameterServerStrategy with a
ClusterCoordinator, as TensorFlow's own parameter-server tutorial runs it.

Reads TF_CONFIG, as Kubeflow's TFJob sets it (Corral sets the same): the ps and worker tasks
start a tf.distribute.Server and serve until the job ends; the chief is the coordinator: it
places the variables on the parameter servers and schedules training steps on the workers,
which read and update the variables on the ps. The chief checks the fit and prints
`RESULT ok ...` (exit 0) or `RESULT FAILED ...` (exit 1); the job succeeds with the chief.

A parameter server that goes away makes the chief's steps fail (TensorFlow retries a failed
worker's steps, not a parameter server's); the chief exits non-zero and Corral restarts it,
and the ps, by their restartPolicy.

KILL_PS_ONCE (for failure tests), a path: the chief creates it after the first 100 steps if it
does not exist; ps 0, if the file did not exist when it started, then kills itself (SIGKILL).
"""

import json
import os
import signal
import sys
import threading
import time

import numpy as np
import tensorflow as tf

TRUE_WEIGHTS = np.array([[2.0], [-3.0], [0.5], [1.5]], dtype=np.float32)
TRUE_BIAS = 0.7
SAMPLES = 4096
STEPS = int(os.environ.get("TRAIN_STEPS", "300"))
LEARNING_RATE = 0.1
TOLERANCE = 0.05


def die_when_told(marker):
    while not os.path.exists(marker):
        time.sleep(0.1)
    print("[ps 0] killed (KILL_PS_ONCE)", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def serve(task_type, task_index, resolver):
    marker = os.environ.get("KILL_PS_ONCE")
    if marker and (task_type, task_index) == ("ps", 0) and not os.path.exists(marker):
        threading.Thread(target=die_when_told, args=(marker,), daemon=True).start()
    server = tf.distribute.Server(
        resolver.cluster_spec(), job_name=task_type, task_index=task_index,
        protocol="grpc", start=True)
    print(f"[{task_type} {task_index}] serving", flush=True)
    server.join()


def coordinate(resolver):
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        # Two variables, placed round-robin: one on each parameter server.
        w = tf.Variable(tf.zeros([4, 1]), name="w")
        b = tf.Variable(0.0, name="b")
    print(f"[chief] w on {w.device}, b on {b.device}", flush=True)

    def dataset_fn():
        rng = np.random.default_rng(1234)
        x = rng.uniform(-1, 1, size=(SAMPLES, 4)).astype(np.float32)
        y = x @ TRUE_WEIGHTS + TRUE_BIAS + rng.normal(0, 0.01, size=(SAMPLES, 1)).astype(np.float32)
        return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(SAMPLES).repeat().batch(64)

    per_worker = iter(coordinator.create_per_worker_dataset(dataset_fn))

    @tf.function
    def step(iterator):
        def replica_fn(batch):
            x, y = batch
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((tf.matmul(x, w) + b - y) ** 2)
            gw, gb = tape.gradient(loss, [w, b])
            # Asynchronous SGD: each worker updates the variables on the ps as it goes.
            w.assign_sub(LEARNING_RATE * gw)
            b.assign_sub(LEARNING_RATE * gb)
            return loss
        return strategy.run(replica_fn, args=(next(iterator),))

    for i in range(1, STEPS + 1):
        loss = coordinator.schedule(step, args=(per_worker,))
        if i % 100 == 0:
            coordinator.join()
            print(f"[chief] step {i}/{STEPS} loss {float(loss.fetch()):.6f}", flush=True)
            marker = os.environ.get("KILL_PS_ONCE")
            if i == 100 and marker and not os.path.exists(marker):
                open(marker, "w").close()
                time.sleep(2)  # ps 0 is gone by now: the next steps meet its absence
    coordinator.join()

    weights, bias = w.numpy().ravel(), float(b.numpy())
    error = float(max(np.max(np.abs(weights - TRUE_WEIGHTS.ravel())), abs(bias - TRUE_BIAS)))
    ok = error <= TOLERANCE
    shown = ", ".join(f"{v:.3f}" for v in weights)
    workers = len(resolver.cluster_spec().as_dict().get("worker", []))
    ps = len(resolver.cluster_spec().as_dict().get("ps", []))
    print(f"RESULT {'ok' if ok else 'FAILED'} weights=[{shown}] bias={bias:.3f} "
          f"max_error={error:.4f} tolerance={TOLERANCE} workers={workers} ps={ps} steps={STEPS}",
          flush=True)
    return 0 if ok else 1


def main():
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    if task["type"] in ("ps", "worker"):
        # A worker's steps fail fast while a ps is away instead of hanging (the tutorial's advice).
        os.environ["GRPC_FAIL_FAST"] = "use_caller"
        serve(task["type"], task["index"], resolver)
        return 0
    return coordinate(resolver)


if __name__ == "__main__":
    sys.exit(main())
