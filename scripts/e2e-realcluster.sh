#!/usr/bin/env bash
# Runs the end-to-end suite (tests/real/control_plane.rs) against a real Kubernetes control plane
# that it starts and stops itself (the recipe in ../shared/realcluster, on free loopback ports,
# in a temporary directory). Prints every check, the audit-log summary and the phase timings.
#
# Usage: scripts/e2e-realcluster.sh [BIN_DIR]
#   BIN_DIR   the recipe's build output (rc-etcd, rc-kube-apiserver, rc-kube-controller-manager,
#             rc-kube-scheduler). Default: $ROLLBOOT_REALCLUSTER_BIN, else RECIPE/out/bin
#             (build.sh's default OUT_DIR).
#   ROLLBOOT_REALCLUSTER_RECIPE   the recipe (default: shared/realcluster in the nearest
#             ancestor folder that has one, as the test itself looks for it).
#   ROLLBOOT_E2E_KEEP=1           keep the run directory (logs, audit log) after a pass too.
#   ROLLBOOT_E2E_BIN              the rollboot binary to run (default: the one this build makes;
#             set it to a hard link of it when another build shares the target directory).
set -euo pipefail
cd "$(dirname "$0")/.."

recipe=${ROLLBOOT_REALCLUSTER_RECIPE:-}
if [ -z "$recipe" ]; then
    d=$(pwd)
    while [ "$d" != / ]; do
        d=$(dirname "$d")
        if [ -f "$d/shared/realcluster/up.sh" ]; then recipe="$d/shared/realcluster"; break; fi
    done
fi
if [ -z "$recipe" ] || [ ! -f "$recipe/up.sh" ]; then
    echo "no realcluster recipe found: set ROLLBOOT_REALCLUSTER_RECIPE to the folder with up.sh" >&2
    exit 2
fi
bin=${1:-${ROLLBOOT_REALCLUSTER_BIN:-$recipe/out/bin}}
for b in rc-etcd rc-kube-apiserver rc-kube-controller-manager rc-kube-scheduler; do
    if [ ! -x "$bin/$b" ]; then
        echo "$bin/$b is missing: build the control plane first (see $recipe/README.md):" >&2
        echo "  K8S_SRC=<extracted source> OUT_DIR=$bin GO=<go binary> $recipe/build.sh" >&2
        exit 2
    fi
done
export ROLLBOOT_REALCLUSTER_BIN="$bin" ROLLBOOT_REALCLUSTER_RECIPE="$recipe"
# nice: the suite runs a control plane, two controllers and five agents on the same cores.
exec nice -n 10 cargo test --locked --test real control_plane:: -- --nocapture
