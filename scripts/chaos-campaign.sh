#!/usr/bin/env bash
# Runs `rollboot simulate --chaos SEED` for every seed in FIRST..LAST, JOBS at a time, and prints a
# table: each seed's outcome, faults drawn and played, exit code, breaks and planned starts over
# capacity (`overcap`), then every invariant broken, with the command that replays it. Exit 0
# only when every seed kept every invariant.
#
#   scripts/chaos-campaign.sh FIRST LAST [JOBS] [BINARY]
#
# JOBS defaults to 8 (a run mostly waits on its simulated clock). BINARY defaults to
# target/release/rollboot (built first when absent). Reports are kept in $OUT (default a new
# temporary directory) as SEED.json and SEED.log.
set -euo pipefail
first=${1:?usage: chaos-campaign.sh FIRST LAST [JOBS] [BINARY]}
last=${2:?usage: chaos-campaign.sh FIRST LAST [JOBS] [BINARY]}
jobs=${3:-8}
bin=${4:-target/release/rollboot}
if [ ! -x "$bin" ]; then
  cargo build --release --locked
fi
out=${OUT:-$(mktemp -d -t rollboot-chaos.XXXXXX)}
mkdir -p "$out"
start=$(date +%s)
export bin out
seq "$first" "$last" | xargs -P "$jobs" -I{} sh -c \
  '"$bin" simulate --chaos {} --report json > "$out/{}.json" 2> "$out/{}.log"; echo $? > "$out/{}.rc"'
end=$(date +%s)
python3 - "$out" "$first" "$last" "$((end - start))" "$bin" <<'PY'
import json, os, sys
out, first, last, wall, binary = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
rows, bad, outcomes, kinds = [], [], {}, {}
planned_over = seeds_over = by_shutdown = by_others = 0
for seed in range(first, last + 1):
    rc = open(os.path.join(out, f"{seed}.rc")).read().strip()
    try:
        r = json.load(open(os.path.join(out, f"{seed}.json")))
    except Exception as e:
        bad.append((seed, rc, [f"no report ({e}); see {out}/{seed}.log"]))
        continue
    f = r.get("faults") or {}
    played = [p for p in f.get("played", []) if p.get("began") is not None]
    for p in f.get("played", []):
        k = kinds.setdefault(p["fault"], [0, 0])
        k[0] += 1
        k[1] += p.get("began") is not None
    outcomes[r["outcome"]] = outcomes.get(r["outcome"], 0) + 1
    over = r.get("plannedStartsOverCapacity", 0)
    planned_over += over
    seeds_over += over > 0
    by_shutdown += len(r.get("overCapacityByShutdown", []))
    by_others += len(r.get("overCapacityByOtherMaintenance", []))
    rows.append((seed, r["outcome"], len(f.get("schedule", {}).get("faults", [])), len(played),
                 len(r["failed"]), round(r["makespanSeconds"], 1), rc, len(r["invariantBreaks"]),
                 over))
    if rc != "0" or r["invariantBreaks"]:
        bad.append((seed, rc, r["invariantBreaks"] or [r["outcomeReason"]]))
print(f"{'seed':>6} {'outcome':>9} {'drawn':>5} {'played':>6} {'failed':>6} {'seconds':>7} {'exit':>4} {'breaks':>6} {'overcap':>7}")
for row in rows:
    print(f"{row[0]:>6} {row[1]:>9} {row[2]:>5} {row[3]:>6} {row[4]:>6} {row[5]:>7} {row[6]:>4} {row[7]:>6} {row[8]:>7}")
print()
print(f"seeds {first}..{last}: {len(rows)} reports, wall time {wall} s; outcomes {outcomes}")
print("faults drawn / played: " + ", ".join(f"{k} {v[0]}/{v[1]}" for k, v in sorted(kinds.items())))
print(f"plannedStartsOverCapacity: {planned_over} in {seeds_over} seed(s); over capacity by a shutdown "
      f"{by_shutdown} time(s), by another actor {by_others} time(s) (allowed)")
if bad:
    print(f"\n{len(bad)} seed(s) broke an invariant or exited non-zero:")
    for seed, rc, why in bad:
        print(f"  seed {seed} (exit {rc}): replay with `{binary} simulate --chaos {seed}`")
        for w in why:
            print(f"    {w}")
    sys.exit(1)
print("0 invariant breaks")
PY
