#!/usr/bin/env bash
# Write short-timing rollboot configs for the end-to-end suite (tests/real/control_plane.rs):
#   $OUT/controller.yaml and $OUT/agent-NODE.yaml (one per node: own sentinel file, a
#   reboot.command that runs the recipe's reboot.sh, which hands the "reboot" to the fake
#   kubelet, and the fake host's identity files).
# Usage: RECIPE=DIR ROLLBOOT=BIN rollboot-config.sh OUT_DIR FAKE_KUBELET_STATE_DIR NODE...
#   RECIPE    the recipe folder (../shared/realcluster), for reboot.sh
#   ROLLBOOT  the rollboot binary, asked (check-config) which keys it accepts
#
# The suite's copy of the recipe's rollboot-config.sh. What it changes:
# - reboot.timeout is REBOOT_TIMEOUT (default 1m, not 3m): a fake reboot takes 8 s, and a token
#   refused by its agent fails the node at that timeout when nothing fails it sooner;
# - each agent reads its fake host's boot ID and machine ID from the fake kubelet's state dir
#   (reboot.hostBootIdFile: STATE/boot-id-NODE, reboot.hostMachineIdFile: STATE/machine-id-NODE),
#   each key written only when `rollboot check-config` accepts it (a build from before the
#   agent checked its host has neither; the defaults would read this machine's own IDs).
set -euo pipefail
: "${RECIPE:?set RECIPE to the realcluster recipe (for reboot.sh)}"
out="$1"; state="$2"; shift 2
mkdir -p "$out" "$out/sentinels"
out="$(cd "$out" && pwd)"; state="$(cd "$state" && pwd)"; recipe="$(cd "$RECIPE" && pwd)"
[ -f "$recipe/reboot.sh" ] || { echo "$recipe/reboot.sh is missing" >&2; exit 1; }
reboot_timeout="${REBOOT_TIMEOUT:-1m}"
common() {
cat <<YAML
concurrency:
  maxNodes: 1
nodes:
  selector: ""
  order: name
drain:
  timeout: 5m
  evictionRetryInterval: 2s
  concurrentEvictions: 10
  ignoreDaemonSets: true
  deleteEmptyDirData: false
  evictUnreplicated: false
  podSelector: ""
  forceDeleteAfterTimeout: false
  volumes:
    waitForDetach: true
    waitForReattach: true
    reattachTimeout: 60s
healthGate:
  timeout: 3m
blockers:
  podSelectors: []
  maxUnreadyNodes: 0
lock:
  namespace: rollboot-system
  name: rollboot-lock
leader:
  namespace: rollboot-system
  name: rollboot-leader
  leaseDuration: ${LEASE_DURATION:-8s}
  renewDeadline: ${RENEW_DEADLINE:-5s}
  retryPeriod: ${RETRY_PERIOD:-1s}
failures:
  maxFailures: 0
YAML
}
# A reboot handed to its host ends without one only after the node stayed Ready this long
# (reboot.readyWithoutRebootFor, when this rollboot has it): short, for the suite's checks 24-25.
ready_for=""
if [ -n "${ROLLBOOT:-}" ] && [ -x "${ROLLBOOT}" ]; then
  probe="$(mktemp)"; printf 'reboot:\n  readyWithoutRebootFor: 10s\n' > "$probe"
  if "$ROLLBOOT" check-config "$probe" >/dev/null 2>&1; then ready_for="  readyWithoutRebootFor: ${READY_WITHOUT_REBOOT_FOR:-10s}\n"; fi
  rm -f "$probe"
fi
{ common; printf "reboot:\n  timeout: %s\n  checkPeriod: 2s\n  method: command\n  command: [\"true\"]\n${ready_for}" "$reboot_timeout"; } > "$out/controller.yaml"
# accepts KEY: whether this rollboot's config has reboot.KEY.
accepts() {
  [ -n "${ROLLBOOT:-}" ] && [ -x "${ROLLBOOT}" ] || return 1
  local probe rc=0
  probe="$(mktemp)"; printf 'reboot:\n  %s: /dev/null\n' "$1" > "$probe"
  "$ROLLBOOT" check-config "$probe" >/dev/null 2>&1 || rc=1
  rm -f "$probe"; return $rc
}
boot_key=""; machine_key=""
if accepts hostBootIdFile; then boot_key=yes; fi
if accepts hostMachineIdFile; then machine_key=yes; fi
for n in "$@"; do
  { common
    printf 'reboot:\n  timeout: %s\n  sentinelFile: %s\n  checkPeriod: 2s\n  method: command\n' "$reboot_timeout" "$out/sentinels/$n"
    printf '  command: ["sh", "%s", "%s", "%s", "%s"]\n' "$recipe/reboot.sh" "$n" "$out/sentinels/$n" "$state"
    [ -z "$boot_key" ] || printf '  hostBootIdFile: %s\n' "$state/boot-id-$n"
    [ -z "$machine_key" ] || printf '  hostMachineIdFile: %s\n' "$state/machine-id-$n"
  } > "$out/agent-$n.yaml"
done
echo "host identity keys: hostBootIdFile ${boot_key:-not accepted}, hostMachineIdFile ${machine_key:-not accepted}"
ls "$out"
