#!/usr/bin/env bash
# Crash safety under load: `corral up` is killed with SIGKILL again and again while jobs
# run, and started again each time. Afterwards it checks that
#   - no job was lost (every submitted job is listed and Succeeded),
#   - no replica incarnation was started twice (each start appends one line to a file),
#   - nothing is left running after the jobs are deleted.
# Prints one JSON line and exits non-zero if any check fails.
#
#   cargo build --release -p corral && scripts/chaos-kill9.sh
#   KILLS=30 JOBS=100 REPLICAS=5 scripts/chaos-kill9.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${CORRAL:-target/release/corral}
KILLS=${KILLS:-30}
JOBS=${JOBS:-100}
REPLICAS=${REPLICAS:-5}
work=$(mktemp -d)
data=$work/data
marks=$work/marks
mkdir -p "$marks"
# As root, replicas run as their namespace's uid: they pass through $work to their own
# directories and append to $marks (as /tmp, sticky and open to all).
chmod 711 "$work"
chmod 1777 "$marks"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
server=http://127.0.0.1:$port
cat >"$work/corral.yaml" <<EOF
kind: CorralConfig
ports: {min: 41000, max: 43999}
node: {cpu: "1000", memory: 1000Gi}
gracePeriodSeconds: 1
EOF

pid=
start() {
    "$BIN" up --data-dir "$data" -c "$work/corral.yaml" --listen "127.0.0.1:$port" \
        >>"$work/server.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 100); do
        if curl -fsS "$server/healthz" >/dev/null 2>&1; then return 0; fi
        sleep 0.05
    done
    echo "corral up did not answer; see $work/server.log" >&2
    exit 1
}
cleanup() {
    if [ -n "$pid" ]; then kill -9 "$pid" 2>/dev/null; fi
    pkill -9 -f "$marks" 2>/dev/null || true
}
trap cleanup EXIT

start
jobs_file=$work/jobs.yaml
: >"$jobs_file"
for i in $(seq 1 "$JOBS"); do
    cat >>"$jobs_file" <<EOF
---
apiVersion: corral.dev/v1alpha1
kind: TrainingJob
metadata: {name: chaos-$i}
spec:
  framework: generic
  replicas:
    worker:
      count: $REPLICAS
      restartPolicy: OnFailure
      resources: {cpu: 10m, memory: 16Mi}
      template:
        command: [/bin/sh, -c, 'echo "\$CORRAL_REPLICA \$CORRAL_INCARNATION" >> $marks/starts; sleep \$(( (\$\$ % 3) + 1 ))']
  runPolicy: {backoffLimit: 100}
EOF
done
"$BIN" submit --server "$server" "$jobs_file" >/dev/null

for _ in $(seq 1 "$KILLS"); do
    sleep "0.$(( (RANDOM % 9) + 1 ))"
    kill -9 "$pid"
    wait "$pid" 2>/dev/null || true
    start
done

# Every job finishes.
deadline=$((SECONDS + 600))
while :; do
    listed=$("$BIN" list --server "$server" -o json)
    total=$(echo "$listed" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["items"]))')
    done_=$(echo "$listed" | python3 -c 'import json,sys; print(sum(1 for j in json.load(sys.stdin)["items"] if j["state"] in ("Succeeded","Failed")))')
    [ "$done_" -ge "$total" ] && break
    [ $SECONDS -gt $deadline ] && break
    sleep 1
done
succeeded=$(echo "$listed" | python3 -c 'import json,sys; print(sum(1 for j in json.load(sys.stdin)["items"] if j["state"]=="Succeeded"))')
lost=$((JOBS - total))
# Jobs that did not succeed, described (for a failing run).
for name in $(echo "$listed" | python3 -c 'import json,sys; print(" ".join(j["name"] for j in json.load(sys.stdin)["items"] if j["state"]!="Succeeded"))'); do
    "$BIN" describe --server "$server" "$name" >&2 || true
done
twice=$(sort "$marks/starts" | uniq -d | wc -l)
for i in $(seq 1 "$JOBS"); do "$BIN" delete --server "$server" "chaos-$i" >/dev/null; done
deadline=$((SECONDS + 120))
while [ "$("$BIN" list --server "$server" -o json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["items"]))')" -gt 0 ] && [ $SECONDS -lt $deadline ]; do
    sleep 0.5
done
sleep 1
left=$(pgrep -f "$marks" | wc -l || true)
echo "{\"kills\": $KILLS, \"jobs\": $JOBS, \"replicas_per_job\": $REPLICAS, \"listed\": $total, \"succeeded\": $succeeded, \"lost\": $lost, \"started_twice\": $twice, \"processes_left_after_delete\": $left, \"starts\": $(wc -l <"$marks/starts")}"
[ "$lost" -eq 0 ] && [ "$twice" -eq 0 ] && [ "$left" -eq 0 ] && [ "$succeeded" -eq "$JOBS" ]
