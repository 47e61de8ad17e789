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
# points from run to run), and with RUNS above 1 a second table sums each row's runs up: mean,
# median and range of the ratio, and how many runs are within issue 26's goal for the layout
# (1.2 `spread`, 1.3 `roundRobin`) and had no PDB violation; RETRY sets
# drain.evictionRetryInterval (default: the config's 5s, 50 ms at the time factor). BINARY defaults to target/release/rollboot. Run it on a quiet
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
# One line per run (nodes, maxNodes, layout, passOverFor, ratio, PDB violations, finished) for
# the summary; a run without a report is written as not finished.
runs_file=$(mktemp)
trap 'rm -f "$runs_file"' EXIT

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
                python3 - "$dir" "$nodes" "$max" "$layout" "$pick" "$runs_file" <<'PY'
import json, sys
d, nodes, mx, layout, pick, runs_file = sys.argv[1:]
def record(ratio, violations, ok):
    with open(runs_file, "a") as f:
        f.write(f"{nodes} {mx} {layout} {pick} {ratio:.4f} {violations} {int(ok)}\n")
try:
    r = json.load(open(f"{d}/report.json"))
except Exception as e:
    print(f"| {nodes} | {mx} | {layout} | {pick} | no report ({e}); log in {d}/log | | | | | | | |")
    record(float("nan"), 0, False)
    sys.exit()
m, b = r["makespanSeconds"], r["lowerBoundSeconds"]
c = r.get("cycleParts") or {}
note = "" if r["ok"] else f" ({r['outcome']})"
print(f"| {nodes} | {mx} | {layout} | {pick} | {m:.2f} s{note} | {b:.2f} s ({r['lowerBound']['binding']}) "
      f"| {m / b:.2f} | {c.get('cycle', {}).get('mean', 0):.3f} s | {c.get('gateShare', 0) * 100:.0f}% "
      f"| {c.get('meanInFlight', 0):.1f} | {r['blockedByCause'].get('budget', 0)} | {r['pdbViolations']} |")
record(m / b, r["pdbViolations"], r["ok"])
PY
            done
        done
    done
done
[ "$runs" -gt 1 ] || exit 0
echo
echo "| nodes | maxNodes | layout | passOverFor | runs | mean ratio | median | range | goal | runs within it, 0 PDB violations |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
python3 - "$runs_file" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    nodes, mx, layout, pick, ratio, violations, ok = line.split()
    rows.setdefault((nodes, mx, layout, pick), []).append((float(ratio), int(violations), ok == "1"))
# Issue 26's goals: within 1.2 of the bound with `spread`, 1.3 with `roundRobin`.
goals = {"spread": 1.2, "roundRobin": 1.3}
for (nodes, mx, layout, pick), runs in rows.items():
    # A run that did not finish its rollout has no makespan to compare: counted, not within.
    ratios = sorted(r for r, _, ok in runs if ok)
    failed = len(runs) - len(ratios)
    goal = goals.get(layout)
    # A ratio as printed (two decimals) is what is held to the goal.
    within = "-" if goal is None else sum(1 for r, v, ok in runs if ok and round(r, 2) <= goal and v == 0)
    stats = (f"{statistics.mean(ratios):.3f} | {statistics.median(ratios):.3f} | {ratios[0]:.2f}-{ratios[-1]:.2f}"
             if ratios else "- | - | -")
    note = f" ({failed} did not finish)" if failed else ""
    print(f"| {nodes} | {mx} | {layout} | {pick} | {len(runs)}{note} | {stats} | {goal or '-'} | {within} of {len(runs)} |")
PY
