#!/usr/bin/env python3
"""Distributed XGBoost through xgboost's own tracker and collective.

Reads the env the Kubeflow XGBoostJob sets (Corral sets the same): MASTER_ADDR, MASTER_PORT,
WORLD_SIZE, RANK. Rank 0 (the master) runs the RabitTracker on MASTER_ADDR:MASTER_PORT and
trains as a worker too; every rank trains on its own shard and the histograms are summed
across ranks (allreduce), so all ranks hold the same model. Rank 0 checks the held-out
accuracy and prints `RESULT ok ...` (exit 0) or `RESULT FAILED ...` (exit 1).
"""

import os
import sys

import numpy as np
import xgboost as xgb
from xgboost import collective
from xgboost.tracker import RabitTracker

SAMPLES = 20000
FEATURES = 10
ROUNDS = int(os.environ.get("XGB_ROUNDS", "30"))
MIN_ACCURACY = 0.9


def synthetic(seed):
    """Same data on every rank: a nonlinear rule over the features, 2% of labels flipped."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(SAMPLES, FEATURES))
    y = ((x[:, 0] * x[:, 1] + np.sin(x[:, 2]) + 0.5 * x[:, 3] ** 2) > 0.5).astype(np.float32)
    flip = rng.random(SAMPLES) < 0.02
    y[flip] = 1 - y[flip]
    return x, y


def main():
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
    port = int(os.environ.get("MASTER_PORT", "9091"))

    tracker = None
    if rank == 0:
        # sortby="task": the ranks are the ones Corral (and Kubeflow) gave, not arrival order.
        tracker = RabitTracker(host_ip=addr, n_workers=world, port=port, sortby="task")
        tracker.start()
    args = {
        "dmlc_tracker_uri": addr,
        "dmlc_tracker_port": port,
        "dmlc_task_id": str(rank),
        "dmlc_retry": 10,  # workers may start before the master's tracker listens
        "dmlc_timeout": 120,
    }
    with collective.CommunicatorContext(**args):
        got_rank, got_world = collective.get_rank(), collective.get_world_size()
        x, y = synthetic(1234)
        train_x, train_y = x[:16000], y[:16000]
        test_x, test_y = x[16000:], y[16000:]
        shard = slice(got_rank, None, got_world)
        dtrain = xgb.DMatrix(train_x[shard], label=train_y[shard])
        print(f"[rank {got_rank}] world size {got_world}, {dtrain.num_row()} rows", flush=True)
        params = {"objective": "binary:logistic", "tree_method": "hist", "max_depth": 4,
                  "eta": 0.3, "nthread": 1}
        booster = xgb.train(params, dtrain, num_boost_round=ROUNDS)
        pred = booster.predict(xgb.DMatrix(test_x)) > 0.5
        accuracy = float(np.mean(pred == test_y))
        ok = accuracy >= MIN_ACCURACY and got_world == world
        if got_rank == 0:
            verdict = "ok" if ok else "FAILED"
            print(f"RESULT {verdict} accuracy={accuracy:.4f} min_accuracy={MIN_ACCURACY} "
                  f"world_size={got_world} rounds={ROUNDS}", flush=True)
    if tracker is not None:
        tracker.wait_for()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
