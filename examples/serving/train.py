#!/usr/bin/env python3
"""Trains the linear model that model_server.py serves and writes it where a ServedModel can
serve it from: $CORRAL_OUTPUT_DIR/model.json, the job's output directory (it outlives the
job). Standard library only; gradient descent on synthetic data drawn from known weights.
Prints `RESULT ok ...` (exit 0) when the fit is within tolerance, else `RESULT FAILED` (exit 1).
"""

import json
import os
import random
import sys

TRUE_WEIGHTS = [2.0, -1.0, 0.5, 0.25]
TRUE_BIAS = 1.0
TOLERANCE = 0.05


def main():
    rng = random.Random(7)
    data = []
    for _ in range(512):
        x = [rng.uniform(-1, 1) for _ in TRUE_WEIGHTS]
        data.append((x, sum(w * v for w, v in zip(TRUE_WEIGHTS, x)) + TRUE_BIAS))
    w, b, lr = [0.0] * len(TRUE_WEIGHTS), 0.0, 0.3
    for _ in range(300):
        gw, gb = [0.0] * len(w), 0.0
        for x, y in data:
            err = sum(wi * xi for wi, xi in zip(w, x)) + b - y
            gw = [g + err * xi for g, xi in zip(gw, x)]
            gb += err
        w = [wi - lr * g / len(data) for wi, g in zip(w, gw)]
        b -= lr * gb / len(data)
    max_error = max(abs(a - t) for a, t in zip(w + [b], TRUE_WEIGHTS + [TRUE_BIAS]))
    out = os.environ.get("CORRAL_OUTPUT_DIR", ".")
    with open(os.path.join(out, "model.json"), "w") as f:
        json.dump({"weights": [round(v, 6) for v in w], "bias": round(b, 6)}, f)
    verdict = "ok" if max_error <= TOLERANCE else "FAILED"
    print(f"RESULT {verdict} weights={[round(v, 3) for v in w]} bias={b:.3f} "
          f"max_error={max_error:.4f} model={out}/model.json", flush=True)
    return 0 if verdict == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
