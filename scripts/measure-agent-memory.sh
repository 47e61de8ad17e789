#!/usr/bin/env bash
# Peak resident memory (VmHWM from /proc/PID/status) of one `rollboot agent` process, watching
# node-0000 of a simulated cluster, over a run that includes a sentinel change and a reboot token.
#
#   scripts/measure-agent-memory.sh [BINARY] [SECONDS] [NODES] [PODS_PER_NODE]
#
# BINARY may be the images' build (`cargo build --profile dist --no-default-features`): the
# simulated cluster is then served by SIM_BIN (default target/release/rollboot).
#
# The agent runs from its own copy of the binary whose page cache is dropped first
# (posix_fadvise DONTNEED), as on a node where nothing else runs that file: file-backed resident
# pages then come from what the agent itself touches (plus the kernel's read-around), not from
# pages the simulator (same binary) happened to load. WARM=1 runs the agent from the simulator's
# binary instead, as in the first measurement in issue 4.
#
# Defaults: target/release/rollboot (or $CARGO_TARGET_DIR/release/rollboot), 120 s, 500 nodes,
# 30 pods per node. Needs kubectl on PATH. Prints one sample line every 10 s and a summary line:
#   agent VmHWM <bytes> (<MiB> MiB), VmRSS at end <bytes>, RssAnon <kB>, RssFile <kB>, limit 15728640: PASS|FAIL
# Timeline: t=0 agent starts; t=20 s sentinel file created (the agent writes reboot-required);
# t=40 s node cordoned, listed in the maintenance lock, and given a fresh reboot token (the
# agent acknowledges it and runs its reboot command, `true` here); t=60 s sentinel removed.
set -euo pipefail

target_dir=${CARGO_TARGET_DIR:-target}
bin=${1:-$target_dir/release/rollboot}
# An image's binary has no `rollboot simulate`: see above.
if ! "$bin" simulate --help >/dev/null 2>&1; then
    sim_bin=${SIM_BIN:-$target_dir/release/rollboot}
fi
secs=${2:-120}
nodes=${3:-500}
pods=${4:-30}
limit=15728640
node=node-0000

. "$(dirname "$0")/sim-serve.sh"

# The agent acts only on its own host: here the simulated node-0000's, whose boot and machine
# IDs are given to it as files (reboot.hostBootIdFile, hostMachineIdFile).
kubectl --kubeconfig "$kc" get node "$node" -o jsonpath='{.status.nodeInfo.bootID}' >"$work/boot-id"
kubectl --kubeconfig "$kc" get node "$node" -o jsonpath='{.status.nodeInfo.machineID}' >"$work/machine-id"
cat >"$work/config.yaml" <<EOF
reboot:
  sentinelFile: $work/reboot-required
  checkPeriod: 2s
  method: command
  command: ["true"]
  hostBootIdFile: $work/boot-id
  hostMachineIdFile: $work/machine-id
lock:
  namespace: default   # the simulator's kubectl path cannot create namespaces
EOF

agent_bin=$bin
if [ "${WARM:-0}" != 1 ]; then
    agent_bin=$work/rollboot
    cp "$bin" "$agent_bin"
    sync "$agent_bin"
    python3 -c 'import os, sys; fd = os.open(sys.argv[1], os.O_RDONLY); os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "$agent_bin"
fi
KUBECONFIG=$kc "$agent_bin" agent --config "$work/config.yaml" --node-name "$node" >"$work/agent.log" 2>&1 &
agent_pid=$!
child_pid=$agent_pid

status() { grep -E "^$1:" "/proc/$agent_pid/status" | awk '{print $2}'; }
k() { kubectl --kubeconfig "$kc" "$@" >/dev/null; }

start=$(date +%s)
while :; do
    t=$(($(date +%s) - start))
    [ "$t" -ge "$secs" ] && break
    kill -0 "$agent_pid" 2>/dev/null || { cat "$work/agent.log"; echo "agent exited" >&2; exit 1; }
    case $t in
    20) [ -e "$work/reboot-required" ] || touch "$work/reboot-required" ;;
    40)
        if [ ! -e "$work/token-sent" ]; then
            touch "$work/token-sent"
            now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
            k cordon "$node"
            cat >"$work/lock.yaml" <<EOF
apiVersion: coordination.k8s.io/v1
kind: Lease
metadata:
  name: rollboot-lock
  namespace: default
  annotations:
    rollboot.dev/in-flight: '{"$node":{"state":"rebooting","since":"$now","leader":"measure"}}'
spec:
  holderIdentity: measure
EOF
            k create --validate=false -f "$work/lock.yaml"
            k annotate node "$node" --overwrite \
                "rollboot.dev/reboot=$(date +%s%3N)-00000000000000aa"
        fi
        ;;
    60) rm -f "$work/reboot-required" ;;
    esac
    if [ $((t % 10)) -eq 0 ] && [ "$t" != "${last:-}" ]; then
        last=$t
        echo "t=${t}s VmHWM=$(status VmHWM)kB VmRSS=$(status VmRSS)kB RssAnon=$(status RssAnon)kB RssFile=$(status RssFile)kB threads=$(status Threads)"
    fi
    sleep 0.5
done

hwm_kb=$(status VmHWM)
hwm=$((hwm_kb * 1024))
ack=$(kubectl --kubeconfig "$kc" get node "$node" -o jsonpath='{.metadata.annotations.rollboot\.dev/reboot-ack}')
required=$(kubectl --kubeconfig "$kc" get node "$node" -o jsonpath='{.metadata.annotations.rollboot\.dev/reboot-required}')
echo "agent log:"; sed 's/^/  /' "$work/agent.log" | tail -n 20
echo "node $node: reboot-ack=${ack:-<none>} reboot-required=${required:-<none>} (expected: an ack, and no reboot-required after the sentinel was removed)"
verdict=PASS
[ "$hwm" -lt "$limit" ] || verdict=FAIL
[ -n "$ack" ] || verdict="$verdict (but no reboot-ack: the token was not acted on)"
echo "agent VmHWM $hwm ($(awk "BEGIN{printf \"%.2f\", $hwm/1048576}") MiB), VmRSS at end $(($(status VmRSS) * 1024)), RssAnon $(status RssAnon) kB, RssFile $(status RssFile) kB, binary $(stat -c %s "$bin") bytes, limit $limit ($([ "${WARM:-0}" = 1 ] && echo warm || echo cold) page cache): $verdict"
