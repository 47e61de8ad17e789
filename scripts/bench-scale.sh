#!/usr/bin/env bash
# The scaling benchmark of issue 14. Prints two tables:
#
# 1. `rollboot simulate` (controller replicas, agents and simulated cluster in one process) per
#    size NODES:PODS_PER_NODE:MAX_NODES: makespan, lower bound, ratio, process CPU (from
#    /usr/bin/time: the world's set-up before the rollout and the report after it included),
#    rollout CPU (the report's rolloutCpuSeconds: the process's CPU from the flagging to the
#    decision) and per rebooted node, and peak RSS.
# 2. The controller alone, as its own process against a served simulator (as
#    scripts/measure-controller-memory.sh runs it), per size NODES:PODS_PER_NODE: its CPU per
#    rebooted node over CYCLES nodes (maxNodes 5) played by scripts/play-reboots.py (a new
#    boot ID when asked to reboot), after a first rollout of WARMUP nodes whose CPU is shown
#    apart (it includes the first list of each namespace's ReplicaSets and budgets by the
#    health gates' shared watches: once per rollout, in the cluster's size), and its CPU while
#    leading idle for 20 s.
#
#   scripts/bench-scale.sh [BINARY]
#
# SIM_SIZES (default "50:30:1 100:10:5 1000:10:20 5000:30:50"), CTL_SIZES (default "100:30
# 1000:30 5000:30"), CYCLES (default 100, or the nodes after the first WARMUP where fewer: the
# CPU is read in clock ticks, 10 ms, so 20 nodes measured it to 0.5 ms) and WARMUP (default 5)
# override the sizes; an empty one skips its table. BINARY defaults to
# target/release/rollboot. Run it on a quiet machine: whatever else runs is measured too.
set -euo pipefail

target_dir=${CARGO_TARGET_DIR:-target}
bin=${1:-$target_dir/release/rollboot}
here=$(cd "$(dirname "$0")" && pwd)
sim_sizes=${SIM_SIZES-50:30:1 100:10:5 1000:10:20 5000:30:50}
ctl_sizes=${CTL_SIZES-100:30 1000:30 5000:30}
cycles=${CYCLES:-100}
warmup=${WARMUP:-5}
[ -x "$bin" ] || { echo "no binary at $bin (cargo build --release)" >&2; exit 2; }

echo "rollboot simulate (in-process: simulator, 2 controller replicas, one agent per node)"
echo "| nodes | pods/node | maxNodes | makespan | lower bound | ratio | process CPU | rollout CPU | rollout CPU per node | RSS |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for size in $sim_sizes; do
    IFS=: read -r nodes pods max <<<"$size"
    dir=$(mktemp -d)
    # Timeouts far beyond any cycle: the table measures throughput, and a cycle slowed by a
    # saturated machine must not fail its node (at the time factor of 0.01 the default
    # 10-minute drain timeout is 6 real seconds).
    printf 'concurrency: {maxNodes: %s}\ndrain: {timeout: 6h, evictUnreplicated: true, deleteEmptyDirData: true}\nreboot: {timeout: 6h}\nhealthGate: {timeout: 6h}\n' \
        "$max" >"$dir/config.yaml"
    /usr/bin/time -f '%U %S %M' -o "$dir/time" "$bin" simulate --nodes "$nodes" \
        --pods-per-node "$pods" --config "$dir/config.yaml" --output json \
        >"$dir/report.json" 2>"$dir/log" || true
    python3 - "$dir" "$nodes" "$pods" "$max" <<'PY'
import json, sys
d, nodes, pods, mx = sys.argv[1:]
try:
    r = json.load(open(f"{d}/report.json"))
except Exception as e:
    print(f"| {nodes} | {pods} | {mx} | no report ({e}); log in {d}/log | | | | | | |")
    sys.exit()
u, s, kb = open(f"{d}/time").read().split()[-3:]
cpu = float(u) + float(s)
m, b = r["makespanSeconds"], r["lowerBoundSeconds"]
n = max(r["rebootedOnce"], 1)
note = "" if r["ok"] else f" ({r['outcome']}: {r['rebootedOnce']}/{r['flagged']} rebooted)"
rc = r.get("rolloutCpuSeconds")
rollout = "-" if rc is None else f"{rc:.1f} s"
per = "-" if rc is None else f"{rc / n * 1000:.0f} ms"
print(f"| {nodes} | {pods} | {mx} | {m:.1f} s{note} | {b:.1f} s | {m / b:.2f} | {cpu:.1f} s "
      f"| {rollout} | {per} | {int(kb) // 1024} MiB |")
PY
    rm -rf "$dir"
done

echo
echo "The controller alone (its own process, against a served simulator; up to $cycles nodes after a first $warmup, maxNodes 5)"
echo "| nodes | pods/node | CPU per rebooted node (nodes) | CPU of the first $warmup nodes | CPU idle (20 s, leading) | rollout wall time | peak RSS |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for size in $ctl_sizes; do
    IFS=: read -r nodes pods <<<"$size"
    count=$((nodes - warmup < cycles ? nodes - warmup : cycles))
    (
        . "$here/sim-serve.sh"
        cat >"$work/config.yaml" <<EOF
concurrency: {maxNodes: 5}
drain: {timeout: 2m, evictionRetryInterval: 1s, evictUnreplicated: true, deleteEmptyDirData: true}
reboot: {timeout: 5m}
healthGate: {timeout: 5m}
lock: {namespace: default}
leader: {namespace: default}
EOF
        KUBECONFIG=$kc "$bin" controller --config "$work/config.yaml" --identity bench \
            --metrics-addr 127.0.0.1:0 >"$work/ctl.log" 2>&1 &
        ctl_pid=$!
        child_pid=$ctl_pid
        ticks() { awk '{print $14 + $15}' "/proc/$ctl_pid/stat"; }
        for _ in $(seq 1 300); do
            grep -q 'leading' "$work/ctl.log" && break
            sleep 0.2
        done
        grep -q 'leading' "$work/ctl.log" || { tail -n 20 "$work/ctl.log"; exit 1; }
        sleep 5
        idle0=$(ticks)
        sleep 20
        idle1=$(ticks)
        # Reboots nodes FIRST..FIRST+COUNT-1 (flagged at once) and waits until they are done.
        rollout() {
            local names=() i
            for i in $(seq "$1" $(($1 + $2 - 1))); do names+=("$(printf 'node-%04d' "$i")"); done
            kubectl --kubeconfig "$kc" annotate node "${names[@]}" rollboot.dev/reboot-requested=now >/dev/null
            python3 "$here/play-reboots.py" "$kc" "$2" 900 >"$work/play.log" 2>&1 \
                || { cat "$work/play.log"; tail -n 20 "$work/ctl.log"; exit 1; }
        }
        rollout 0 "$warmup"
        warm=$(ticks)
        t0=$(date +%s.%N)
        rollout "$warmup" "$count"
        t1=$(date +%s.%N)
        busy=$(ticks)
        hz=$(getconf CLK_TCK)
        hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$ctl_pid/status")
        python3 -c "
hz, c = $hz, $count
per = ($busy - $warm) / hz / c
first = ($warm - $idle1) / hz
idle = ($idle1 - $idle0) / hz
print(f'| $nodes | $pods | {per * 1000:.1f} ms ({c}) | {first * 1000:.0f} ms | {idle:.2f} s | {$t1 - $t0:.1f} s | {$hwm // 1024} MiB |')
"
    )
done
