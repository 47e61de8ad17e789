#!/usr/bin/env bash
# Starts a real Kubernetes cluster of N nodes on this host (default 3), offline, as root:
# - network namespaces: PREFIX-cp with the bridge PREFIXbr0 at RN_NET.1 (the control plane) and
#   PREFIX-nodeN at RN_NET.(10+N), a veth into the bridge each; routes to the pod subnets;
# - the control plane (lib/cp-up.sh, realcluster's up.sh bound to RN_NET.1: etcd, kube-apiserver,
#   KCM, scheduler) inside PREFIX-cp;
# - per node: a copy of the rootfs, its Node name/IP, a client cert (system:node:nodeN),
#   CNI bridge config, then its power loop (lib/run-node.sh): systemd-nspawn with systemd,
#   containerd and the real kubelet inside; `systemctl reboot` in the node really reboots it;
# - waits until all N Nodes are Ready and prints the kubeconfig.
#
#   N (argument)   number of nodes (default 3)
#   RUN_DIR        all state (default ./run next to this script); down-nodes.sh with the same
#   KUBELET        the kubelet binary (build-kubelet.sh; default ./out/bin/kubelet)
#   ROOTFS_DIR     a rootfs from build-node-rootfs.sh (default ./out/rootfs), or
#   ROOTFS_TAR     a tarball of one (used when set; e.g. `tar -C ROOTFS_DIR -cpf FILE .`)
#   BIN_DIR        the control-plane binaries of ../realcluster/build.sh (default ../realcluster/out/bin)
#   RC_DIR         the realcluster recipe (default ../realcluster next to this folder; its down.sh stops the control plane)
#   IMAGES="a.tar b.tar"  more OCI archives imported into containerd on every node's first boot
#   KUBELET_SHUTDOWN_GRACE=20s  the kubelet's shutdownGracePeriod (0s: graceful node shutdown off)
#   KUBELET_SHUTDOWN_GRACE_CRITICAL  shutdownGracePeriodCriticalPods (default 5s, 0s when the above is 0s)
#   APISERVER_FLAGS  more kube-apiserver flags     READY_TIMEOUT=240  seconds to wait for Ready
#   KIND_LIKE="3 4"  nodes that see one boot ID, the host kernel's, on every boot (as kind's
#                    nodes do): their Node's bootID never changes; "all" for every node
#   LOGIND_INHIBIT_DELAY=17min  logind's InhibitDelayMaxSec on every node (default: logind's own, 5s)
#   RN_PREFIX, RN_NET: see lib/common.sh
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
NODES="${1:-3}"
RUN_DIR="${RUN_DIR:-$HERE/run}"
mkdir -p "$RUN_DIR"; RUN_DIR="$(cd "$RUN_DIR" && pwd)"
[ ! -f "$RUN_DIR/rn.env" ] || { echo "$RUN_DIR/rn.env exists: a cluster is (or was) up there; down-nodes.sh first, or a new RUN_DIR" >&2; exit 1; }
. "$HERE/lib/common.sh"
RC_DIR="${RC_DIR:-$HERE/../realcluster}"
BIN_DIR="${BIN_DIR:-$RC_DIR/out/bin}"
KUBELET="${KUBELET:-$HERE/out/bin/kubelet}"
ROOTFS_DIR="${ROOTFS_DIR:-$HERE/out/rootfs}"
GRACE="${KUBELET_SHUTDOWN_GRACE:-20s}"
if [ "$GRACE" = 0s ] || [ "$GRACE" = 0 ]; then GRACE=0s; GRACE_CRIT="${KUBELET_SHUTDOWN_GRACE_CRITICAL:-0s}"
else GRACE_CRIT="${KUBELET_SHUTDOWN_GRACE_CRITICAL:-5s}"; fi
READY_TIMEOUT="${READY_TIMEOUT:-240}"
t0=$(date +%s%N)
say() { local ms=$(( ($(date +%s%N) - t0) / 1000000 )); printf '[%d.%ds] %s\n' $((ms / 1000)) $(((ms % 1000) / 100)) "$*"; }

# --- checks ---
[ "$(id -u)" = 0 ] || { echo "up-nodes.sh: run as root" >&2; exit 1; }
for c in ip systemd-nspawn nsenter pgrep openssl kubectl curl tar; do
  command -v "$c" >/dev/null || { echo "up-nodes.sh: $c is needed" >&2; exit 1; }; done
[ -x "$KUBELET" ] || { echo "no kubelet at $KUBELET (KUBELET=..., build-kubelet.sh)" >&2; exit 1; }
for b in rc-etcd rc-kube-apiserver rc-kube-controller-manager rc-kube-scheduler; do
  [ -x "$BIN_DIR/$b" ] || { echo "no $b in $BIN_DIR (BIN_DIR=..., ../realcluster/build.sh)" >&2; exit 1; }; done
if [ -n "${ROOTFS_TAR:-}" ]; then [ -f "$ROOTFS_TAR" ] || { echo "no $ROOTFS_TAR" >&2; exit 1; }
else [ -x "$ROOTFS_DIR/lib/systemd/systemd" ] || { echo "no rootfs at $ROOTFS_DIR (ROOTFS_DIR/ROOTFS_TAR, build-node-rootfs.sh)" >&2; exit 1; }; fi
for i in ${IMAGES:-}; do [ -f "$i" ] || { echo "no image archive $i" >&2; exit 1; }; done
ip netns list | grep -qw "$CP_NS" && { echo "network namespace $CP_NS exists: another cluster with RN_PREFIX=$RN_PREFIX?" >&2; exit 1; }
[ "$(stat -fc %T /sys/fs/cgroup)" = tmpfs ] || { echo "up-nodes.sh: needs a cgroup v1 (or hybrid) host" >&2; exit 1; }

KUBELET="$(cd "$(dirname "$KUBELET")" && pwd)/$(basename "$KUBELET")"
cat > "$RUN_DIR/rn.env" <<ENV
RN_PREFIX=$RN_PREFIX
RN_NET=$RN_NET
NODES=$NODES
KUBELET=$KUBELET
RC_DIR=$(cd "$RC_DIR" && pwd)
ENV
. "$HERE/lib/common.sh"

# --- network: the control plane's namespace and bridge ---
ip netns add "$CP_NS"
ip -n "$CP_NS" link set lo up
ip -n "$CP_NS" link add "$BRIDGE" type bridge
ip -n "$CP_NS" addr add "$RN_NET.1/24" dev "$BRIDGE"
ip -n "$CP_NS" link set "$BRIDGE" up
ip netns exec "$CP_NS" sh -c 'echo 1 > /proc/sys/net/ipv4/ip_forward'   # this namespace's, not the host's
say "network namespace $CP_NS, bridge $BRIDGE $RN_NET.1/24"

# --- control plane ---
CPD="$RUN_DIR/cp"; P="$CPD/pki"
ip netns exec "$CP_NS" env RUN_DIR="$CPD" BIN_DIR="$BIN_DIR" API_BIND="$RN_NET.1" API_SANS="IP:$RN_NET.1" \
  CM_FLAGS="--secure-port=0 ${CM_FLAGS:-}" SCHED_FLAGS="--secure-port=0 ${SCHED_FLAGS:-}" \
  APISERVER_FLAGS="--kubelet-preferred-address-types=InternalIP --kubelet-client-certificate=$P/admin.crt --kubelet-client-key=$P/admin.key ${APISERVER_FLAGS:-}" \
  "$HERE/lib/cp-up.sh" > "$RUN_DIR/cp-up.log" 2>&1 || { cat "$RUN_DIR/cp-up.log" >&2; exit 1; }
printf '#!/bin/sh\n# kubectl for this cluster (the apiserver is reachable only inside %s)\nexec ip netns exec %s kubectl --kubeconfig %s "$@"\n' \
  "$CP_NS" "$CP_NS" "$CPD/admin.kubeconfig" > "$RUN_DIR/kubectl"
chmod +x "$RUN_DIR/kubectl"
K="$RUN_DIR/kubectl"
say "control plane up (log $RUN_DIR/cp-up.log)"

# --- nodes ---
for N in $(seq 1 "$NODES"); do
  D="$(node_dir "$N")"; IP="$(node_ip "$N")"; R="$D/root"
  mkdir -p "$D/fakes" "$R"
  if [ -n "${ROOTFS_TAR:-}" ]; then tar -xpf "$ROOTFS_TAR" -C "$R" --numeric-owner
  else cp -a "$ROOTFS_DIR/." "$R/"; fi
  echo "node$N" > "$R/etc/hostname"
  tr -d - < /proc/sys/kernel/random/uuid > "$R/etc/machine-id"
  printf 'nameserver %s\n' "$RN_NET.1" > "$R/etc/resolv.conf"
  printf 'NODE_NAME=node%s\nNODE_IP=%s\nAPI_SERVICE_IP=10.0.0.1\nAPI_ENDPOINT=%s:6443\n' "$N" "$IP" "$RN_NET.1" > "$R/etc/kubernetes/node.env"
  cat > "$R/etc/cni/net.d/10-rn.conflist" <<J
{"cniVersion":"0.4.0","name":"rn","plugins":[
 {"type":"bridge","bridge":"cni0","isGateway":true,"ipMasq":false,
  "ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.$N.0/24"}]],"routes":[{"dst":"0.0.0.0/0"}]}}]}
J
  sed -i "s/^shutdownGracePeriod: .*/shutdownGracePeriod: $GRACE/; s/^shutdownGracePeriodCriticalPods: .*/shutdownGracePeriodCriticalPods: $GRACE_CRIT/" \
    "$R/etc/kubernetes/kubelet.yaml"
  # the kubelet's identity: system:node:nodeN in system:nodes (the Node authorizer's rules)
  cp "$P/ca.crt" "$R/etc/kubernetes/pki/ca.crt"
  openssl req -newkey rsa:2048 -nodes -keyout "$D/kubelet.key" -out "$D/kubelet.csr" \
    -subj "/O=system:nodes/CN=system:node:node$N" 2>/dev/null
  openssl x509 -req -in "$D/kubelet.csr" -CA "$P/ca.crt" -CAkey "$P/ca.key" -CAcreateserial \
    -out "$D/kubelet.crt" -days 30 -extfile "$P/client.ext" 2>/dev/null
  KC="$R/etc/kubernetes/kubelet.kubeconfig"; rm -f "$KC"
  kubectl config --kubeconfig="$KC" set-cluster realnodes --server="https://$RN_NET.1:6443" \
    --certificate-authority="$P/ca.crt" --embed-certs=true >/dev/null
  kubectl config --kubeconfig="$KC" set-credentials "node$N" --client-certificate="$D/kubelet.crt" \
    --client-key="$D/kubelet.key" --embed-certs=true >/dev/null
  kubectl config --kubeconfig="$KC" set-context realnodes --cluster=realnodes --user="node$N" >/dev/null
  kubectl config --kubeconfig="$KC" use-context realnodes >/dev/null
  chmod 600 "$KC"
  for i in ${IMAGES:-}; do cp "$i" "$R/opt/images/"; done
  # sysctl values the kubelet wants, bind-mounted by node-fakes.service (never the host's)
  echo 1 > "$D/fakes/overcommit_memory"; echo 0 > "$D/fakes/panic_on_oom"
  echo 10 > "$D/fakes/panic"; echo 1 > "$D/fakes/panic_on_oops"
  case " ${KIND_LIKE:-} " in
    *" all "*|*" $N "*) echo "the kernel's boot ID on every boot" > "$D/fakes/kind-like" ;;
  esac
  if [ -n "${LOGIND_INHIBIT_DELAY:-}" ]; then
    mkdir -p "$R/etc/systemd/logind.conf.d"
    printf '[Login]\nInhibitDelayMaxSec=%s\n' "$LOGIND_INHIBIT_DELAY" > "$R/etc/systemd/logind.conf.d/rollboot.conf"
  fi
  NS="$(node_ns "$N")"
  ip netns add "$NS"
  ip link add "veth-n$N" netns "$CP_NS" type veth peer name eth0 netns "$NS"
  ip -n "$CP_NS" link set "veth-n$N" master "$BRIDGE" up
  ip -n "$NS" link set lo up
  ip -n "$NS" addr add "$IP/24" dev eth0
  ip -n "$NS" link set eth0 up
  ip -n "$NS" route add default via "$RN_NET.1"
  ip -n "$CP_NS" route replace "10.244.$N.0/24" via "$IP" onlink dev "$BRIDGE"
  setsid nohup "$HERE/lib/run-node.sh" "$N" > "$D/run-node.out" 2>&1 < /dev/null &
  echo $! > "$D/run-node.pid"
  say "node$N: $IP, pods 10.244.$N.0/24, power loop pid $(cat "$D/run-node.pid")"
done

# --- wait for Ready ---
deadline=$(( $(date +%s) + READY_TIMEOUT ))
while :; do
  ready="$("$K" get nodes -o jsonpath='{range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null | grep -c '=True$' || true)"
  [ "$ready" -ge "$NODES" ] && break
  if [ "$(date +%s)" -ge "$deadline" ]; then
    "$K" get nodes -o wide >&2 || true
    echo "up-nodes.sh: only $ready of $NODES Nodes Ready after ${READY_TIMEOUT}s (see $RUN_DIR/nodes/node*/console.log; node-exec.sh N journalctl -u kubelet)" >&2
    exit 1
  fi
  sleep 2
done
"$K" get nodes -o wide
say "$NODES Nodes Ready"
echo "kubeconfig: $CPD/admin.kubeconfig (server $RN_NET.1: use it inside $CP_NS, or $K)"
