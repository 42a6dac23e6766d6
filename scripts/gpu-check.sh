#!/usr/bin/env bash
# The GPU machine checks of issue 16, on a real NVIDIA GPU server (an H100 80GB HBM3 with
# cgroup v2 and PyTorch with CUDA: `python3 -c 'import torch; torch.cuda.init()'` works):
#   1. `corral doctor` is all OK (GPUs through NVML, cgroups enforced, ...);
#   2. a job asking gpuTypes [NVIDIA-H100-80GB-HBM3] and one asking [H100] both run;
#   3. while a replica multiplies matrices with torch, `corral top` shows its GPU
#      utilisation and GPU memory, and /metrics has per-GPU (DCGM_FI_DEV_*) and per-replica
#      (corral_replica_gpu_*) series naming it;
#   4. under cgroup v2, a replica over its memory limit is OOM-killed alone and reported
#      OOMKilled, while another replica keeps running;
#   5. a job that could never run says so at once: `validate` against the server refuses a
#      GPU type the machine lacks (naming what it has) and a replica with more GPUs than the
#      machine (naming the largest node); `corral plan` sees the same GPUs as `corral up`;
#   6. a Kubeflow PyTorchJob (torchrun, NCCL) with nvidia.com/gpu: 1 trains on the GPU;
#   7. `corral exec` (MPI's rsh agent's path) runs in the GPU replica: its env, cgroup, GPU;
#      the dashboard is served and the nodes data it draws shows the card in use; as root,
#      the replica runs under its namespace's uid (issue 33), not root's;
#   8. the MPI example (examples/mpi: mpirun through `corral rsh`, mpi4py) succeeds. Its Python
#      environment is built with uv; offline, point UV_FIND_LINKS at a directory of wheels
#      (mpi4py, numpy) and set UV_OFFLINE=1;
#   9. serving (issue 37): a training job of a lower JobPriorityClass holds every GPU; a
#      ServedModel of a higher class (a torch model server on the standard library) preempts
#      it, answers through the router on cuda, and once the model is deleted the training
#      job runs again.
# A second GPU job submitted while the first holds the GPU waits ("no GPUs are free"), then
# runs with CUDA_VISIBLE_DEVICES set. The doctor may warn of one thing only: no container
# runtime, where neither podman nor docker is installed (the check says so).
# Prints PASS/FAIL per check and a summary; exits 1 if any check fails.
#
#   cargo build --release -p corral && strip target/release/corral && scripts/gpu-check.sh
#   CORRAL=/path/to/corral GPU_TYPE=NVIDIA-H100-80GB-HBM3 ALIAS=H100 scripts/gpu-check.sh
#   (on an H200: GPU_TYPE=NVIDIA-H200 ALIAS=H200; MISSING names a type the machine lacks)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
BIN=${CORRAL:-target/release/corral}
GPU_TYPE=${GPU_TYPE:-NVIDIA-H100-80GB-HBM3}
ALIAS=${ALIAS:-H100}
MISSING=${MISSING:-A100}
# Absolute: a replica's PATH is the server's, but say exactly which interpreter holds torch.
PY=${PYTHON:-$(command -v python3)}
work=${GPU_CHECK_WORK:-$(mktemp -d)}
mkdir -p "$work"
# As root, replicas run as their namespace's uid: they must pass through to the data
# directory below (corral up refuses a data directory they cannot reach, and says this).
chmod o+x "$work"
data=$work/data
port=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
server=http://127.0.0.1:$port
export CORRAL_SERVER=$server
api=$server/api/v1/namespaces/default/trainingjobs
results=()
failed=0

pass() { results+=("PASS  $1"); echo "PASS  $1"; }
fail() { results+=("FAIL  $1"); echo "FAIL  $1" >&2; failed=1; }
check() { # check NAME COMMAND...: PASS when the command succeeds
    local name=$1
    shift
    if "$@"; then pass "$name"; else fail "$name"; return 1; fi
}

# GET URL to stdout; curl where installed, else Python (GPU images may lack curl).
get() {
    if command -v curl >/dev/null; then
        curl -fsS "$1"
    else
        "$PY" -c 'import sys, urllib.request; sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())' "$1"
    fi
}

pid=
cleanup() {
    if [ -n "$pid" ]; then
        kill "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    fi
}
trap cleanup EXIT

[ -x "$BIN" ] || { echo "no corral binary at $BIN (set CORRAL=...)" >&2; exit 1; }
command -v nvidia-smi >/dev/null && nvidia-smi -L
"$PY" -c 'import torch; assert torch.cuda.is_available(); print("torch", torch.__version__, torch.cuda.get_device_name(0))' \
    || { echo "PyTorch with CUDA is needed ($PY)" >&2; exit 1; }

echo "== 1. corral doctor"
"$BIN" doctor --data-dir "$data" | tee "$work/doctor.txt"
"$BIN" doctor --data-dir "$data" -o json >"$work/doctor.json"
doctor_ok() { # every finding OK, but for "no container runtime" where none is installed
    local runtime=0
    command -v podman >/dev/null || command -v docker >/dev/null || runtime=1
    "$PY" - "$work/doctor.json" "$runtime" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
none_installed = sys.argv[2] == "1"
warns = [f for f in r["findings"] if f["level"] != "OK"]
allowed = [f for f in warns if f["area"] == "containers" and none_installed]
for f in allowed:
    print("(allowed: no podman or docker on this machine:", f["what"] + ")")
sys.exit(0 if len(warns) == len(allowed) else 1)
EOF
}
check "corral doctor is all OK (a missing container runtime aside)" doctor_ok
check "doctor maps the NVML name to $GPU_TYPE" grep -q -- "-> type $GPU_TYPE" "$work/doctor.txt"
check "doctor finds cgroup v2 enforced" \
    "$PY" -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if r["cgroupVersion"]=="v2" else 1)' "$work/doctor.json"

echo "== corral up on port $port (log: $work/server.log)"
# The defaults a new user gets: replicas see the server's PATH and none of the rest of its
# environment, so torch there finds the CUDA driver through the loader's cache (ldconfig).
# Where the driver is found only through LD_LIBRARY_PATH, run with PASS_ENV=LD_LIBRARY_PATH
# (the config's passEnv).
: >"$work/corral.yaml"
if [ -n "${PASS_ENV:-}" ]; then
    printf 'apiVersion: corral.dev/v1alpha1\nkind: CorralConfig\npassEnv: [%s]\n' "$PASS_ENV" >"$work/corral.yaml"
    echo "passEnv: [$PASS_ENV]"
fi
# Check 9's classes: serving above training.
cat >>"$work/corral.yaml" <<'EOF'
---
apiVersion: corral.dev/v1alpha1
kind: JobPriorityClass
metadata: {name: gpu-check-serving}
spec: {value: 1000}
---
apiVersion: corral.dev/v1alpha1
kind: JobPriorityClass
metadata: {name: gpu-check-training}
spec: {value: 100}
EOF
"$BIN" up --data-dir "$data" --listen "127.0.0.1:$port" --config "$work/corral.yaml" >"$work/server.log" 2>&1 &
pid=$!
for _ in $(seq 1 200); do
    get "$server/healthz" >/dev/null 2>&1 && break
    sleep 0.1
done
get "$server/healthz" >/dev/null || { cat "$work/server.log"; echo "corral up did not answer" >&2; exit 1; }
head -3 "$work/server.log"
"$BIN" nodes

# A replica that multiplies 8192x8192 matrices on its GPU for SECONDS seconds.
matmul_job() { # NAME GPU_TYPES SECONDS
    cat <<EOF
apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {name: $1}
spec:
  framework: generic
  replicas:
    worker:
      count: 1
      restartPolicy: Never
      resources: {cpu: "2", memory: 16Gi, gpu: 1, gpuTypes: [$2]}
      template:
        command:
          - "$PY"
          - -c
          - |
            import os, time, torch
            print("CUDA_VISIBLE_DEVICES=" + os.environ.get("CUDA_VISIBLE_DEVICES", "unset"))
            print("CGROUP=" + open("/proc/self/cgroup").read().strip().splitlines()[-1], flush=True)
            a = torch.randn(8192, 8192, device="cuda")
            end = time.time() + $3
            while time.time() < end:
                b = a @ a
                torch.cuda.synchronize()
            print("done on", torch.cuda.get_device_name(0))
EOF
}

job_state() { # NAME -> state from `corral list`
    "$BIN" list -o json | "$PY" -c "
import json,sys
items=json.load(sys.stdin)['items']
print(next((j['state'] for j in items if j['name']=='$1'), 'missing'))"
}

wait_state() { # NAME WANTED SECONDS
    local s
    for _ in $(seq 1 $(($3 * 5))); do
        s=$(job_state "$1")
        [ "$s" = "$2" ] && return 0
        case "$s" in Failed) [ "$2" != Failed ] && { "$BIN" describe "$1"; return 1; } ;; esac
        sleep 0.2
    done
    echo "$1 is $s, not $2, after $3 s" >&2
    "$BIN" describe "$1" >&2
    return 1
}

echo "== 2 + 3. a job asking $GPU_TYPE; top and /metrics while it multiplies matrices"
matmul_job by-label "$GPU_TYPE" 45 >"$work/by-label.yaml"
"$BIN" validate "$work/by-label.yaml"
"$BIN" submit "$work/by-label.yaml"
check "job asking gpuTypes [$GPU_TYPE] runs" wait_state by-label Running 60
running=$?
[ "$running" -eq 0 ] || "$BIN" logs by-label 2>&1 | tail -20

# While by-label holds the GPU, a second GPU job waits and says why.
matmul_job by-alias "$ALIAS" 5 >"$work/by-alias.yaml"
"$BIN" submit "$work/by-alias.yaml"
waits_for_gpu() {
    sleep 1
    "$BIN" describe by-alias >"$work/by-alias.describe" || return 1
    grep -E '^(State|Waiting):' "$work/by-alias.describe"
    grep -q '^State: *Queued' "$work/by-alias.describe" &&
        grep -q 'no GPUs are free' "$work/by-alias.describe"
}
[ "$running" -eq 0 ] && check "a second job asking [$ALIAS] waits while the GPU is taken" waits_for_gpu

top_ok() {
    for _ in $(seq 1 60); do
        "$BIN" top -o json >"$work/top.json" 2>/dev/null
        if "$PY" - "$work/top.json" <<'EOF'
import json, sys
rows = [r for r in json.load(open(sys.argv[1]))["items"] if r["job"] == "by-label"]
ok = rows and rows[0].get("gpuUtilizationPercent", 0) > 0 and rows[0].get("gpuMemoryBytes", 0) > 0
sys.exit(0 if ok else 1)
EOF
        then
            "$BIN" top
            return 0
        fi
        sleep 0.5
    done
    cat "$work/top.json"
    return 1
}
if [ "$running" -eq 0 ]; then
    check "corral top shows the replica's GPU utilisation and GPU memory" top_ok
else
    fail "corral top shows the replica's GPU utilisation and GPU memory (the job never ran)"
fi

metrics_ok() {
    get "$server/metrics" >"$work/metrics.txt" || return 1
    grep -E '^(DCGM_FI_DEV_|corral_replica_gpu|corral_gpu_healthy)' "$work/metrics.txt"
    grep -q "^DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",UUID=\"GPU-" "$work/metrics.txt" &&
        grep -q '^DCGM_FI_DEV_FB_USED{.*job="by-label"' "$work/metrics.txt" &&
        grep -q '^DCGM_FI_DEV_POWER_USAGE{' "$work/metrics.txt" &&
        grep -q '^DCGM_FI_DEV_GPU_TEMP{' "$work/metrics.txt" &&
        grep -q '^corral_replica_gpu_memory_bytes{namespace="default",job="by-label"' "$work/metrics.txt" &&
        grep -q '^corral_replica_gpu_utilization_percent{namespace="default",job="by-label"' "$work/metrics.txt"
}
if [ "$running" -eq 0 ]; then
    check "/metrics has per-GPU (DCGM_FI_DEV_*) and per-replica GPU series" metrics_ok
else
    fail "/metrics has per-GPU (DCGM_FI_DEV_*) and per-replica GPU series (the job never ran)"
    get "$server/metrics" >"$work/metrics.txt"
fi
if command -v promtool >/dev/null; then
    # The DCGM series keep DCGM's camelCase label names on purpose; nothing else may be said.
    check "promtool accepts /metrics (DCGM's label names aside)" sh -c \
        "promtool check metrics <'$work/metrics.txt' 2>&1 | grep -v \"^DCGM_FI_DEV_.* label names should be written in 'snake_case' not 'camelCase'\$\" | (! grep .)"
fi
exec_in_replica() { # corral exec runs in the replica: its GPUs, its cgroup (v2 here)
    # shellcheck disable=SC2016 # expanded in the replica, not here
    "$BIN" exec by-label worker-0 -- sh -c 'echo "CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES"; echo "CGROUP=$(tail -1 /proc/self/cgroup)"' >"$work/exec.txt" || return 1
    "$BIN" exec by-label worker-0 -- "$PY" -c 'import torch; print("exec sees", torch.cuda.device_count(), "GPU:", torch.cuda.get_device_name(0))' >>"$work/exec.txt" || return 1
    cat "$work/exec.txt"
    local gpus cgroup
    gpus=$("$BIN" logs by-label | grep -m1 '^CUDA_VISIBLE_DEVICES=')
    cgroup=$("$BIN" logs by-label | grep -m1 '^CGROUP=')
    echo "the replica's own: $gpus $cgroup"
    grep -qxF "$gpus" "$work/exec.txt" && grep -qxF "$cgroup" "$work/exec.txt" && grep -q "^exec sees 1 GPU" "$work/exec.txt"
}
if [ "$running" -eq 0 ]; then
    check "corral exec runs in the replica (its CUDA_VISIBLE_DEVICES, its cgroup, torch sees its GPU)" exec_in_replica
fi
dashboard_ok() { # the page is served, and the nodes data it draws names the card in use
    get "$server/" | grep -qi '<html' || return 1
    get "$server/api/v1/nodes" >"$work/nodes.json" || return 1
    "$PY" - "$work/nodes.json" <<'EOF'
import json, sys
nodes = json.load(open(sys.argv[1]))["items"]
gpus = [g for n in nodes for g in n["gpus"]]
used = [g for g in gpus if g.get("usedBy") == "default/by-label"]
print("dashboard nodes data:", used)
sys.exit(0 if used and "utilizationPercent" in used[0] and "memoryUsedBytes" in used[0] else 1)
EOF
}
tenant_uid() { # as root, the replica runs under its namespace's uid, not root's
    [ "$(id -u)" -eq 0 ] || { echo "(not root: replicas run as the server's user)"; return 0; }
    local uid
    uid=$("$BIN" exec by-label worker-0 -- id -u) || return 1
    echo "the replica's uid: $uid"
    [ "$uid" -ne 0 ]
}
if [ "$running" -eq 0 ]; then
    check "the dashboard is served and its nodes data names the GPU in use with its utilisation" dashboard_ok
    check "as root, the GPU replica runs under its namespace's uid" tenant_uid
fi
"$BIN" nodes
[ "$running" -eq 0 ] && check "job asking $GPU_TYPE succeeds" wait_state by-label Succeeded 90
"$BIN" logs by-label 2>&1 | tail -3

check "job asking gpuTypes [$ALIAS] runs and succeeds" wait_state by-alias Succeeded 90
"$BIN" logs by-alias 2>&1 | tail -3
check "its replica saw its GPU as CUDA_VISIBLE_DEVICES" sh -c "'$BIN' logs by-alias | grep -q '^CUDA_VISIBLE_DEVICES=[0-9]'"

echo "== 4. a replica over its memory limit is OOM-killed alone (cgroup v2)"
cat >"$work/oom.yaml" <<EOF
apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {name: hog}
spec:
  framework: generic
  replicas:
    worker:
      count: 1
      restartPolicy: Never
      resources: {cpu: "1", memory: 256Mi}
      template:
        command: ["$PY", -c, "b = bytearray(1 << 30); [b.__setitem__(i, 1) for i in range(0, len(b), 4096)]; print('not killed')"]
---
apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {name: calm}
spec:
  framework: generic
  replicas:
    worker:
      count: 1
      restartPolicy: Never
      resources: {cpu: "1", memory: 256Mi}
      template:
        command: [sleep, "60"]
EOF
"$BIN" submit "$work/oom.yaml"
wait_state calm Running 60
check "the replica over its limit fails" wait_state hog Failed 60
oom_reported() {
    get "$api/hog/describe" >"$work/hog.json" || return 1
    "$PY" - "$work/hog.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
reasons = [r.get("reason") for r in d["replicas"]]
print("hog replicas:", reasons)
sys.exit(0 if "OOMKilled" in reasons else 1)
EOF
}
check "it is reported OOMKilled" oom_reported
check "the other replica still runs" sh -c "[ \"\$('$BIN' list -o json | '$PY' -c \"import json,sys; print([j['state'] for j in json.load(sys.stdin)['items'] if j['name']=='calm'][0])\")\" = Running ]"
"$BIN" delete calm hog by-label by-alias >/dev/null 2>&1

echo "== 5. jobs that could never run say so at once"
matmul_job missing "$MISSING" 5 >"$work/missing.yaml"
refused() {
    if "$BIN" validate "$work/missing.yaml" >"$work/missing.txt" 2>&1; then
        cat "$work/missing.txt"
        return 1
    fi
    cat "$work/missing.txt"
    grep -q "this cluster has GPU type $GPU_TYPE" "$work/missing.txt"
}
check "validate refuses gpuTypes [$MISSING], naming $GPU_TYPE" refused
gpus=$("$BIN" nodes -o json | "$PY" -c 'import json,sys; print(max(len(n["gpus"]) for n in json.load(sys.stdin)["items"]))' 2>/dev/null || echo 1)
matmul_job too-many "$GPU_TYPE" 5 | sed "s/gpu: 1,/gpu: $((gpus + 1)),/" >"$work/too-many.yaml"
too_many_refused() {
    if "$BIN" validate "$work/too-many.yaml" >"$work/too-many.txt" 2>&1; then
        cat "$work/too-many.txt"
        return 1
    fi
    cat "$work/too-many.txt"
    grep -q "a replica needs $((gpus + 1)) GPUs but the largest node has $gpus" "$work/too-many.txt"
}
check "validate refuses a $((gpus + 1))-GPU replica on $gpus-GPU nodes" too_many_refused
"$BIN" plan "$work/by-label.yaml" >"$work/plan.txt" 2>&1
head -3 "$work/plan.txt"
check "corral plan sees the machine's $GPU_TYPE and admits the job" \
    sh -c "grep -q 'this machine: .* x $GPU_TYPE' '$work/plan.txt' && grep -q '1 admitted' '$work/plan.txt'"

echo "== 6. a Kubeflow PyTorchJob runs torchrun with NCCL on the GPU"
# As written for the training operator, but for the image (a machine with podman and no
# registry could not pull it): the code ships with --code, torchrun reads PET_*.
cat >"$work/pytorchjob.yaml" <<EOF
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: kubeflow-ddp}
spec:
  nprocPerNode: "1"
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: Never
      template:
        spec:
          containers:
            - name: pytorch
              command: ["$PY", -m, torch.distributed.run, train.py]
              resources:
                limits: {cpu: "2", memory: 8Gi, nvidia.com/gpu: 1}
EOF
"$BIN" submit --code examples/pytorch "$work/pytorchjob.yaml"
check "a Kubeflow PyTorchJob (torchrun) succeeds with 1 GPU" wait_state kubeflow-ddp Succeeded 120
"$BIN" logs kubeflow-ddp 2>&1 | grep -E 'world size|^RESULT'
check "it trained on cuda:0 (NCCL) and fit the model" sh -c \
    "'$BIN' logs kubeflow-ddp | grep -q 'samples on cuda:0' && '$BIN' logs kubeflow-ddp | grep -q '^RESULT ok'"

echo "== 8. the MPI example: mpirun reaches the workers through corral rsh (no sshd)"
if command -v mpirun >/dev/null && command -v uv >/dev/null; then
    mpirun --version 2>&1 | head -1
    "$BIN" submit --code examples/mpi examples/mpi/job.yaml
    check "the MPI example (mpirun + corral rsh, mpi4py allreduce) succeeds" wait_state mpi-allreduce Succeeded 240
    "$BIN" logs mpi-allreduce launcher-0 2>&1 | tail -5
    check "its ranks ran in two worker replicas and fit the model" sh -c \
        "'$BIN' logs mpi-allreduce launcher-0 | grep -q '^RESULT ok ranks=2 replicas=2'"
else
    fail "the MPI example (mpirun and uv are needed on this machine: apt-get install openmpi-bin; pip install uv)"
fi

echo "== 9. a served torch model on the GPU takes it from a training job of a lower class"
mkdir -p "$work/serving"
cat >"$work/serving/torch_server.py" <<'EOF'
import json, os, torch
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

w = torch.randn(4, 4, device="cuda")


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/healthz":
            body = b"ok"
        else:
            y = (w @ torch.ones(4, 1, device="cuda")).sum().item()
            body = json.dumps({"device": str(w.device), "gpu": torch.cuda.get_device_name(0),
                               "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                               "y": y}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


ThreadingHTTPServer(("127.0.0.1", int(os.environ["PORT"])), Handler).serve_forever()
EOF
cat >"$work/serving/model.yaml" <<EOF
apiVersion: corral.dev/v1alpha1
kind: ServedModel
metadata: {name: gpu-model}
spec:
  template:
    command: ["$PY", torch_server.py]
  resources: {cpu: "1", memory: 8Gi, gpu: 1, gpuTypes: [$GPU_TYPE]}
  priorityClass: gpu-check-serving
  readiness: {path: /healthz, periodSeconds: 1}
  autoscaling: {minReplicas: 1, maxReplicas: 1}
EOF
# Every GPU of the machine in one replica of the lower class, multiplying for ten minutes.
matmul_job low-train "$GPU_TYPE" 600 | sed \
    -e "s/gpu: 1, gpuTypes/gpu: $gpus, gpuTypes/" \
    -e 's/^spec:$/spec:\n  priorityClass: gpu-check-training/' >"$work/low-train.yaml"
"$BIN" submit "$work/low-train.yaml"
check "a training job of a lower class holds every GPU" wait_state low-train Running 60
"$BIN" submit --code "$work/serving" "$work/serving/model.yaml"
model_answers() { # through the router (a request waits out the cold start), on cuda
    get "$server/serve/default/gpu-model/predict" >"$work/predict.json" || return 1
    cat "$work/predict.json"; echo
    "$PY" -c 'import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if r["device"].startswith("cuda") else 1)' "$work/predict.json"
}
check "the served model of a higher class answers through the router on the GPU" model_answers
preempted() {
    "$BIN" describe low-train >"$work/low-train.txt"
    grep -q Preempted "$work/low-train.txt" && [ "$(job_state low-train)" != Running ]
}
check "the training job gave the GPU up (preempted, back in its queue)" preempted
"$BIN" describe servedmodel gpu-model | head -20
"$BIN" delete servedmodel gpu-model
check "once the model is deleted, the training job runs again" wait_state low-train Running 120
"$BIN" delete low-train

echo
echo "== summary ($work)"
printf '%s\n' "${results[@]}"
if [ "$failed" -ne 0 ]; then
    echo "SOME CHECKS FAILED" >&2
    exit 1
fi
echo "ALL CHECKS PASSED"
