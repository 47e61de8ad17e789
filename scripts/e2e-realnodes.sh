#!/usr/bin/env bash
# Runs the end-to-end suite on real nodes (tests/real/nodes.rs): three systemd-nspawn nodes
# with systemd, containerd and the real kubelet, joined to a real control plane, started and
# stopped by the suite (tests/realnodes/, the suite's copy of ../shared/realnodes). Needs root.
#
# Usage: scripts/e2e-realnodes.sh [BIN_DIR [ROOTFS_DIR]]
#   BIN_DIR     rc-etcd, rc-kube-apiserver, rc-kube-controller-manager, rc-kube-scheduler
#               (../shared/realcluster/build.sh) and kubelet (tests/realnodes/build-kubelet.sh).
#               Default: $ROLLBOOT_REALNODES_BIN
#   ROOTFS_DIR  the node rootfs (tests/realnodes/build-node-rootfs.sh). Default:
#               $ROLLBOOT_REALNODES_ROOTFS
#   ROLLBOOT_REALNODES_IMAGES=DIR  take rollboot-controller.tar and rollboot-agent.tar from DIR
#               instead of building them (scripts/build-image.sh, profile image-test, or
#               ROLLBOOT_REALNODES_PROFILE)
#   ROLLBOOT_REALNODES_RUN=DIR     where the run directory goes (default: the temp dir)
#   ROLLBOOT_E2E_KEEP=1            keep the run directory after a pass too
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-${ROLLBOOT_REALNODES_BIN:-}}
rootfs=${2:-${ROLLBOOT_REALNODES_ROOTFS:-}}
if [ -z "$bin" ] || [ -z "$rootfs" ]; then
    echo "usage: scripts/e2e-realnodes.sh BIN_DIR ROOTFS_DIR (docs/development.md, 'End-to-end on real nodes')" >&2
    exit 2
fi
[ "$(id -u)" = 0 ] || { echo "scripts/e2e-realnodes.sh: the real nodes need root" >&2; exit 2; }
export ROLLBOOT_REALNODES_BIN="$bin" ROLLBOOT_REALNODES_ROOTFS="$rootfs"
exec cargo test --locked --test real nodes:: -- --nocapture
