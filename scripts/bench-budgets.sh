#!/usr/bin/env bash
# Issue 26's benchmark: rollouts where budgets bind. bench/budgets-200.yaml (Deployments of 5
# under budgets of maxUnavailable 1, pods Ready 30 s after they start, reboot 30 s, time
# factor 0.01) at NODES:MAX_NODES sizes, with both layouts (`spread`, as kube-scheduler lays
# out a fresh cluster; `roundRobin`, siblings on consecutive nodes), with the budget-aware pick
# (concurrency.passOverFor 10m) and, for comparison, without it (0s: nodes in order only).
# Prints makespan, the lower bound and its binding term, the ratio, the health gate's share of a
# cycle, the mean nodes in flight and the PDB violations.
#
#   scripts/bench-budgets.sh [BINARY]
#
# SIZES (default "200:20 50:5"), LAYOUTS (default "spread roundRobin") and PICKS (default "10m
# 0s") override; RUNS (default 1) repeats each row, a line per run (the ratio moves by a few
# points from run to run); RETRY sets drain.evictionRetryInterval (default: the config's 5s,
# 50 ms at the time factor). BINARY defaults to target/release/rollboot. Run it on a quiet
# machine.
set -euo pipefail

target_dir=${CARGO_TARGET_DIR:-target}
bin=${1:-$target_dir/release/rollboot}
here=$(cd "$(dirname "$0")/.." && pwd)
sizes=${SIZES-200:20 50:5}
picks=${PICKS-10m 0s}
layouts=${LAYOUTS-spread roundRobin}
runs=${RUNS:-1}
retry=${RETRY:+evictionRetryInterval: $RETRY, }
[ -x "$bin" ] || { echo "no binary at $bin (cargo build --release)" >&2; exit 2; }

echo "| nodes | maxNodes | layout | passOverFor | makespan | lower bound (binding) | ratio | mean cycle | gate share | mean in flight | evictions refused | PDB violations |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for size in $sizes; do
    IFS=: read -r nodes max <<<"$size"
    for layout in $layouts; do
        for pick in $picks; do
            for _ in $(seq "$runs"); do
                dir=$(mktemp -d)
                sed "s/^placement: .*/placement: $layout/" "$here/bench/budgets-200.yaml" >"$dir/scenario.yaml"
                printf 'concurrency: {maxNodes: %s, passOverFor: %s}\ndrain: {%stimeout: 6h, evictUnreplicated: true, deleteEmptyDirData: true}\nreboot: {timeout: 6h}\nhealthGate: {timeout: 6h}\n' \
                    "$max" "$pick" "$retry" >"$dir/config.yaml"
                "$bin" simulate --scenario "$dir/scenario.yaml" --nodes "$nodes" --config "$dir/config.yaml" \
                    --output json >"$dir/report.json" 2>"$dir/log" || true
                python3 - "$dir" "$nodes" "$max" "$layout" "$pick" <<'PY'
import json, sys
d, nodes, mx, layout, pick = sys.argv[1:]
try:
    r = json.load(open(f"{d}/report.json"))
except Exception as e:
    print(f"| {nodes} | {mx} | {layout} | {pick} | no report ({e}); log in {d}/log | | | | | | | |")
    sys.exit()
m, b = r["makespanSeconds"], r["lowerBoundSeconds"]
c = r.get("cycleParts") or {}
note = "" if r["ok"] else f" ({r['outcome']})"
print(f"| {nodes} | {mx} | {layout} | {pick} | {m:.2f} s{note} | {b:.2f} s ({r['lowerBound']['binding']}) "
      f"| {m / b:.2f} | {c.get('cycle', {}).get('mean', 0):.3f} s | {c.get('gateShare', 0) * 100:.0f}% "
      f"| {c.get('meanInFlight', 0):.1f} | {r['blockedByCause'].get('budget', 0)} | {r['pdbViolations']} |")
PY
            done
        done
    done
done
