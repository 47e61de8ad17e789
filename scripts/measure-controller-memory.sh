#!/usr/bin/env bash
# Peak resident memory (VmHWM from /proc/PID/status) of one `rollboot controller` process in a
# large simulated cluster, idle and then through whole reboot cycles (cordon, drain, reboot,
# health gate) of a few nodes.
#
#   scripts/measure-controller-memory.sh [BINARY] [NODES] [PODS_PER_NODE] [CYCLES]
#
# Defaults: target/release/rollboot (or $CARGO_TARGET_DIR/release/rollboot), 5000 nodes, 30 pods
# per node (150,000 pods, 25,000 ReplicaSets and 12,500 budgets per namespace), 3 cycles. The
# simulator runs in its own process (`rollboot simulate --serve`, ~650 MiB at the default size);
# the controller is a separate process talking HTTP to it, as in a cluster. There are no agents:
# this script plays the agent's part by giving a node that is asked to reboot a new bootID
# (the simulator keeps it Ready). Needs kubectl on PATH.
# Prints a sample line every 5 s and a summary:
#   controller VmHWM idle <bytes>, peak <bytes> (<MiB> MiB), cycles done N/M, limit 104857600: PASS|FAIL
set -euo pipefail

target_dir=${CARGO_TARGET_DIR:-target}
bin=${1:-$target_dir/release/rollboot}
nodes=${2:-5000}
pods=${3:-30}
cycles=${4:-3}
limit=104857600

. "$(dirname "$0")/sim-serve.sh"
k() { kubectl --kubeconfig "$kc" "$@"; }

cat >"$work/config.yaml" <<EOF
concurrency: {maxNodes: 1}
drain: {timeout: 2m, evictionRetryInterval: 1s, evictUnreplicated: true, deleteEmptyDirData: true}
reboot: {timeout: 5m}
healthGate: {timeout: 5m}
lock: {namespace: default}
leader: {namespace: default}
EOF

KUBECONFIG=$kc ${WRAP:-} "$bin" controller --config "$work/config.yaml" --identity measure \
    --metrics-addr 127.0.0.1:0 >"$work/ctl.log" 2>&1 &
ctl_pid=$!
child_pid=$ctl_pid
status() { grep -E "^$1:" "/proc/$ctl_pid/status" | awk '{print $2}'; }
alive() { kill -0 "$ctl_pid" 2>/dev/null || { tail -n 30 "$work/ctl.log"; echo "controller exited" >&2; exit 1; }; }

for _ in $(seq 1 300); do
    grep -q 'leading' "$work/ctl.log" && break
    alive
    sleep 0.2
done
sleep 10
idle_kb=$(status VmHWM)
echo "leading and idle: VmHWM=${idle_kb}kB VmRSS=$(status VmRSS)kB RssAnon=$(status RssAnon)kB RssFile=$(status RssFile)kB"

flagged=()
for i in $(seq 0 $((cycles - 1))); do
    flagged+=("$(printf 'node-%04d' "$i")")
done
k annotate node "${flagged[@]}" rollboot.dev/reboot-requested=now >/dev/null

start=$(date +%s)
declare -A rebooted=()
done_count=0
while [ "$done_count" -lt "$cycles" ]; do
    alive
    [ $(($(date +%s) - start)) -gt 900 ] && { echo "timed out" >&2; break; }
    done_count=0
    for n in "${flagged[@]}"; do
        state=$(k get node "$n" -o jsonpath='{.metadata.annotations.rollboot\.dev/state}')
        case $state in
        done) done_count=$((done_count + 1)) ;;
        rebooting)
            if [ -z "${rebooted[$n]:-}" ]; then
                rebooted[$n]=1
                k patch node "$n" --subresource=status --type=merge \
                    -p "{\"status\":{\"nodeInfo\":{\"bootID\":\"measured-$(date +%s%N)\"}}}" >/dev/null
            fi
            ;;
        failed)
            echo "$n failed: $(k get node "$n" -o jsonpath='{.metadata.annotations.rollboot\.dev/failure-reason}')" >&2
            done_count=$cycles
            ;;
        esac
    done
    now=$(($(date +%s) - start))
    if [ $((now % 5)) -eq 0 ] && [ "$now" != "${last:-}" ]; then
        last=$now
        echo "t=${now}s done=$done_count/$cycles VmHWM=$(status VmHWM)kB VmRSS=$(status VmRSS)kB RssAnon=$(status RssAnon)kB RssFile=$(status RssFile)kB"
    fi
    sleep 0.3
done

hwm=$(($(status VmHWM) * 1024))
verdict=PASS
[ "$hwm" -lt "$limit" ] || verdict=FAIL
echo "controller VmHWM idle $((idle_kb * 1024)), peak $hwm ($(awk "BEGIN{printf \"%.1f\", $hwm/1048576}") MiB), cycles done $done_count/$cycles, $nodes nodes x $pods pods, limit $limit: $verdict"
