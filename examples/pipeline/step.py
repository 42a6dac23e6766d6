"""The steps of the example pipeline (docs/pipelines.md), standard library only.

    python3 step.py data|train|evaluate|report

Each reads its inputs from CORRAL_INPUT_<NAME> (an artifact's directory, or a
parameter's value) and writes its outputs into the directories CORRAL_OUTPUT_<NAME>.
"""

import json
import os
import pathlib
import sys


def log(what):
    # For tests: a line per run of a step, where the run asks for it.
    path = os.environ.get("STEPS_LOG")
    if path:
        with open(path, "a") as f:
            f.write(what + "\n")


def data():
    n = int(os.environ["CORRAL_INPUT_N"])
    out = pathlib.Path(os.environ["CORRAL_OUTPUT_DATASET"])
    (out / "data.csv").write_text("".join(f"{i}\n" for i in range(n)))
    print(f"wrote {n} rows to {out}")
    log("data")


def train():
    # A PyTorch-style job: every replica gets RANK and WORLD_SIZE; rank 0 writes the model.
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    rows = pathlib.Path(os.environ["CORRAL_INPUT_DATA"], "data.csv").read_text().split()
    # The learning rate: an input, or the item of a sweep's iteration (sweep.yaml).
    lr = float(os.environ.get("CORRAL_INPUT_LR") or os.environ["CORRAL_ITEM"])
    mine = [int(x) for x in rows[rank::world]]
    print(f"rank {rank}/{world}: {len(mine)} rows, lr {lr}")
    if rank == 0:
        weight = sum(int(x) for x in rows) * lr
        pathlib.Path(os.environ["CORRAL_OUTPUT_MODEL"], "model.txt").write_text(f"{weight}\n")
        log("train")


def evaluate():
    weight = float(pathlib.Path(os.environ["CORRAL_INPUT_MODEL"], "model.txt").read_text())
    out = pathlib.Path(os.environ["CORRAL_OUTPUT_METRICS"])
    (out / "score.txt").write_text(f"score={weight:g}\n")
    print(f"score={weight:g}")
    log("evaluate")


def report():
    # After a sweep: every iteration's model, collected in item order (a JSON list of
    # their directories in CORRAL_INPUT_MODELS), once every iteration has succeeded.
    dirs = json.loads(os.environ.get("CORRAL_INPUT_MODELS", "[]"))
    weights = [float(pathlib.Path(d, "model.txt").read_text()) for d in dirs]
    print(f"RESULT ok models={len(weights)} weights={weights}")
    log("report")


def fail():
    log("fail")
    print("this step always fails", file=sys.stderr)
    sys.exit(3)


{"data": data, "train": train, "evaluate": evaluate, "report": report, "fail": fail}[sys.argv[1]]()
