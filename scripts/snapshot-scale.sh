#!/usr/bin/env bash
# The 5,000-node / 150,000-pod snapshot rehearsal of issue 11, with the CLI only:
# serve a generated world, snapshot it with --from-cluster (lists only), rehearse the file.
#   ROLLBOOT=target/release/rollboot OUT=/tmp/snapshot-scale [TIME_FACTOR=F] scripts/snapshot-scale.sh
# Without TIME_FACTOR the rehearsal picks its own (see the report's worldTimings).
set -euo pipefail
: "${ROLLBOOT:?set ROLLBOOT to a release rollboot binary}"
ROLLBOOT=$(realpath "$ROLLBOOT")  # the script works in $OUT
OUT="${OUT:-/tmp/snapshot-scale}"
tf=(); [ -n "${TIME_FACTOR:-}" ] && tf=(--time-factor "$TIME_FACTOR")
mkdir -p "$OUT"; cd "$OUT"
printf 'concurrency: {maxNodes: 100}\ndrain: {evictUnreplicated: true, deleteEmptyDirData: true}\n' > big.yaml
nice -n 10 "$ROLLBOOT" simulate --serve --nodes 5000 --pods-per-node 29 --kubeconfig-out big.kubeconfig > serve.log 2>&1 &
SP=$!
for _ in $(seq 1 300); do grep -q '^kubeconfig:' serve.log && break; sleep 1; done
KUBECONFIG=big.kubeconfig nice -n 10 "$ROLLBOOT" simulate --from-cluster --snapshot-out big-snap.json --flagged 0 --output json > take.json
kill -INT "$SP"; wait "$SP" || true
/usr/bin/time -v nice -n 10 "$ROLLBOOT" simulate --snapshot big-snap.json --config big.yaml \
  "${tf[@]}" --output json > big-report.json 2> big.err || true
grep -E 'Elapsed|Maximum resident' big.err
python3 -c 'import json; r = json.load(open("big-report.json")); print("outcome", r["outcome"], "|", r["rebootedOnce"], "of", r["flagged"], "rebooted |", "makespan for real", round(r["makespanRealSeconds"]), "s at time factor", r["timeFactor"], "| PDB violations", r["pdbViolations"])'
