#!/usr/bin/env python3
"""A fake kubelet for a control plane without real nodes (standard library only).

It registers N Nodes (node-1..node-N), keeps them Ready (a Lease in kube-node-lease and the
Ready condition's heartbeat), marks pods bound to them Running and Ready, finishes Terminating
pods (DELETE with grace 0 after --terminate-delay seconds), and "reboots" a node when a file
`reboot-NODE` appears in --state-dir (reboot.sh writes it): Ready=False and its pods NotReady
for --reboot-seconds, then a new status.nodeInfo.bootID and Ready=True again. Each reboot is
appended to STATE_DIR/reboots.log as "UTC-time node old-bootID new-bootID", and each node's current
boot ID is kept in STATE_DIR/boot-id-NODE (what a real agent reads from /proc/sys/kernel/random/boot_id).

The end-to-end suite's copy of the recipe's ../shared/realcluster/fake-kubelet.py
(tests/real/control_plane.rs runs this one). What it adds: each node's machine ID, the
status.nodeInfo.machineID it registers, is kept in STATE_DIR/machine-id-NODE (what a real agent
reads from /etc/machine-id), so an agent's reboot.hostBootIdFile and reboot.hostMachineIdFile can
be its fake host's.

Volumes (CSI, all optional; --csi-driver "" turns it off and leaves the behaviour above exactly as
it was). For each driver named by --csi-driver (repeatable or comma-separated; default
rwo.csi.rollboot.dev) it plays, for its own nodes only:
- the CSI external-attacher: a VolumeAttachment (created by kube-controller-manager's
  attach-detach controller) with spec.attacher = the driver and spec.nodeName = one of its nodes
  gets the finalizer external-attacher/<driver, each character not in [a-zA-Z0-9-] made '-'>,
  then after --attach-seconds status.attached=true (status subresource, merge patch); once it has
  a deletionTimestamp, after --detach-seconds status.attached=false and the finalizer is removed
  (two patches, in the real sidecar's order), so it goes. Nothing progresses for a node that is
  "rebooting": its attachments wait until it is back.
- the external-provisioner: a Pending PVC whose StorageClass's provisioner is the driver and
  which the PV controller has annotated volume.kubernetes.io/storage-provisioner=driver (and, for
  WaitForFirstConsumer, the scheduler volume.kubernetes.io/selected-node) gets a PV
  "pvc-<claim uid>" (spec.csi {driver, volumeHandle "vol-<claim uid>", fsType ext4}, the claim's
  accessModes/size/volumeMode, claimRef, storageClassName, the class's reclaimPolicy,
  annotation pv.kubernetes.io/provisioned-by); the real PV controller binds both. A Released PV
  it provisioned with reclaimPolicy Delete is deleted.
- the kubelet's volume manager: nodes carry the annotation
  volumes.kubernetes.io/controller-managed-attach-detach=true (without it the attach-detach
  controller ignores a node); status.volumesInUse lists the unique names
  ("kubernetes.io/csi/<driver>^<volumeHandle>") of the attachable volumes of the node's pods from the
  moment a pod is seen on the node (the real kubelet reports desired volumes as in use before it
  mounts them) until the pod is unmounted; a pod with such a volume starts (Running/Ready) only
  once the volume is both in status.volumesAttached (written by the attach-detach controller)
  and reported in use; until then it is Pending/ContainerCreating. A terminating pod is
  "unmounted" after --terminate-delay: its volumes leave volumesInUse (node status patch) and
  only then is the pod object deleted (with --in-use-lag S: the pod object is deleted at once and
  volumesInUse drops the volume S seconds later, as a real kubelet's periodic node status sync
  does); on a rebooting node such a pod stays until the node is back.
  A volume is attachable when its CSIDriver object has attachRequired true, or no CSIDriver
  object exists (the Kubernetes default). Pods without such volumes behave exactly as before.

Credentials: --server, --ca-file, --cert-file, --key-file (client certificate, e.g. the admin
one that up.sh writes under RUN_DIR/pki); defaults come from $RUN_DIR.
"""
import argparse, datetime, json, os, re, ssl, sys, time, urllib.error, urllib.request, uuid

def now():
    return datetime.datetime.now(datetime.timezone.utc)

def ts(t=None):
    return (t or now()).strftime("%Y-%m-%dT%H:%M:%SZ")

def mts(t=None):
    return (t or now()).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

def log(*a):
    print(ts(), *a, flush=True)

class Api:
    def __init__(self, server, ca, cert, key):
        self.server = server.rstrip("/")
        self.ctx = ssl.create_default_context(cafile=ca)
        self.ctx.load_cert_chain(cert, key)

    def call(self, method, path, body=None, ctype="application/json"):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.server + path, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", ctype)
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=20) as r:
                return r.status, json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            try:
                return e.code, json.loads(e.read() or b"{}")
            except Exception:
                return e.code, {}
        except Exception as e:  # apiserver unreachable / timed out: report and go on, like a kubelet
            log("api", method, path, "error", e)
            return 0, {}

def write_boot_id(state_dir, node, boot):
    """The fake host's boot ID, where an agent reads its host's (reboot.hostBootIdFile)."""
    tmp = os.path.join(state_dir, ".boot-id-" + node)
    with open(tmp, "w") as fh:
        fh.write(boot + "\n")
    os.replace(tmp, os.path.join(state_dir, "boot-id-" + node))

def write_machine_id(state_dir, node, machine):
    """The fake host's machine ID, where an agent reads its host's (reboot.hostMachineIdFile)."""
    tmp = os.path.join(state_dir, ".machine-id-" + node)
    with open(tmp, "w") as fh:
        fh.write(machine + "\n")
    os.replace(tmp, os.path.join(state_dir, "machine-id-" + node))

def conditions(ready, reason="KubeletReady", msg="kubelet is posting ready status", since=None):
    t = ts()
    out = []
    for typ in ("MemoryPressure", "DiskPressure", "PIDPressure"):
        out.append({"type": typ, "status": "False", "reason": "KubeletHasNo" + typ, "message": "ok",
                    "lastHeartbeatTime": t, "lastTransitionTime": since or t})
    out.append({"type": "Ready", "status": "True" if ready else "False", "reason": reason, "message": msg,
                "lastHeartbeatTime": t, "lastTransitionTime": since or t})
    return out

ANN_CMAD = "volumes.kubernetes.io/controller-managed-attach-detach"
SMP = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"

def attacher_finalizer(driver):
    """external-attacher's GetFinalizerName: SanitizeDriverName replaces [^a-zA-Z0-9-] with '-'
    and appends 'X' to a name ending in '-'."""
    name = re.sub(r"[^a-zA-Z0-9-]", "-", driver)
    if name.endswith("-"):
        name += "X"
    return "external-attacher/" + name

def claim_names(pod):
    """The claims a pod's volumes use: persistentVolumeClaim, and generic ephemeral volumes
    (claim <pod>-<volume>)."""
    out = []
    for v in pod.get("spec", {}).get("volumes", []) or []:
        if v.get("persistentVolumeClaim"):
            out.append(v["persistentVolumeClaim"]["claimName"])
        elif v.get("ephemeral"):
            out.append(pod["metadata"]["name"] + "-" + v["name"])
    return out

class Volumes:
    """CSI external-attacher + external-provisioner + the kubelet's volume reporting, for the
    nodes this fake kubelet plays (see the module docstring)."""

    def __init__(self, api, drivers, names, attach_seconds, detach_seconds, terminate_delay, in_use_lag=0.0):
        self.api, self.drivers, self.names = api, drivers, set(names)
        self.in_use_lag = in_use_lag
        self.lingering = {}      # (node, unique volume name) -> time until which it stays in volumesInUse
        self.attach_s, self.detach_s, self.term_delay = attach_seconds, detach_seconds, terminate_delay
        self.va_seen = {}        # VA uid -> first time seen (attach clock)
        self.va_del_seen = {}    # VA uid -> first time seen with deletionTimestamp (detach clock)
        self.csidriver = {}      # driver -> (fetched-at, attachRequired)
        self.waiting_logged = set()
        self.passes = 0
        self.reported = {n: True for n in names}  # node -> has a non-empty volumesInUse (unknown at start)

    def get(self, path):
        c, obj = self.api.call("GET", path)
        if c != 200:
            log("volumes: GET", path, c, obj.get("message", ""))
            return None
        return obj

    def attach_required(self, driver, t0):
        hit = self.csidriver.get(driver)
        if hit and t0 - hit[0] < 10:
            return hit[1]
        c, obj = self.api.call("GET", "/apis/storage.k8s.io/v1/csidrivers/" + driver)
        if c == 200:
            req = obj.get("spec", {}).get("attachRequired", True) is not False
        elif c == 404:
            req = True  # no CSIDriver object: Kubernetes assumes attach is required
        else:
            return hit[1] if hit else None
        self.csidriver[driver] = (t0, req)
        return req

    def pod_volumes(self, pod, pvcs, pvs, t0):
        """(unique names of the pod's attachable volumes of our drivers, all resolved?)"""
        ns = pod["metadata"]["namespace"]
        out, ok = [], True
        for cn in claim_names(pod):
            pvc = pvcs.get(ns + "/" + cn)
            if pvc is None or not pvc.get("spec", {}).get("volumeName"):
                ok = False
                continue
            pv = pvs.get(pvc["spec"]["volumeName"])
            if pv is None:
                ok = False
                continue
            csi = pv.get("spec", {}).get("csi")
            if not csi or csi.get("driver") not in self.drivers:
                continue
            req = self.attach_required(csi["driver"], t0)
            if req is None:
                ok = False
            elif req:
                out.append("kubernetes.io/csi/%s^%s" % (csi["driver"], csi["volumeHandle"]))
        return out, ok

    def provision(self, pvcs, pvs):
        pending = [p for p in pvcs.values() if p.get("status", {}).get("phase") == "Pending"
                   and not p.get("spec", {}).get("volumeName") and p.get("spec", {}).get("storageClassName")]
        pending = [p for p in pending
                   if (p["metadata"].get("annotations") or {}).get("volume.kubernetes.io/storage-provisioner") in self.drivers]
        if not pending:
            return True
        scl = self.get("/apis/storage.k8s.io/v1/storageclasses")
        if scl is None:
            return False
        scs = {x["metadata"]["name"]: x for x in scl.get("items", [])}
        for pvc in pending:
            md, sp = pvc["metadata"], pvc["spec"]
            sc = scs.get(sp["storageClassName"])
            if not sc or sc.get("provisioner") not in self.drivers:
                continue
            ann = md.get("annotations") or {}
            if sc.get("volumeBindingMode") == "WaitForFirstConsumer" and not ann.get("volume.kubernetes.io/selected-node"):
                continue
            name = "pvc-" + md["uid"]
            if name in pvs:
                continue
            driver = sc["provisioner"]
            size = ((sp.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")
            pv = {"apiVersion": "v1", "kind": "PersistentVolume",
                  "metadata": {"name": name, "annotations": {"pv.kubernetes.io/provisioned-by": driver}},
                  "spec": {"capacity": {"storage": size},
                           "accessModes": sp.get("accessModes") or ["ReadWriteOnce"],
                           "persistentVolumeReclaimPolicy": sc.get("reclaimPolicy", "Delete"),
                           "storageClassName": sc["metadata"]["name"],
                           "volumeMode": sp.get("volumeMode", "Filesystem"),
                           "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                                        "namespace": md["namespace"], "name": md["name"], "uid": md["uid"],
                                        "resourceVersion": md.get("resourceVersion", "")},
                           "csi": {"driver": driver, "volumeHandle": "vol-" + md["uid"], "fsType": "ext4"}}}
            if sc.get("mountOptions"):
                pv["spec"]["mountOptions"] = sc["mountOptions"]
            c, obj = self.api.call("POST", "/api/v1/persistentvolumes", pv)
            log("volumes: provision", md["namespace"] + "/" + md["name"], "->", name, c, obj.get("message", "") if c >= 300 else "")
            if c == 0:
                return False
        return True

    def reclaim(self, pvs):
        for pv in pvs.values():
            md = pv["metadata"]
            if (pv.get("status", {}).get("phase") == "Released" and not md.get("deletionTimestamp")
                    and pv["spec"].get("persistentVolumeReclaimPolicy") == "Delete"
                    and (md.get("annotations") or {}).get("pv.kubernetes.io/provisioned-by") in self.drivers):
                c, obj = self.api.call("DELETE", "/api/v1/persistentvolumes/" + md["name"])
                log("volumes: delete released PV", md["name"], c, obj.get("message", "") if c >= 300 else "")
                if c == 0:
                    return False
        return True

    def attacher(self, vas, t0, rebooting):
        live = set()
        for va in vas:
            md, sp, st = va["metadata"], va.get("spec", {}), va.get("status", {}) or {}
            live.add(md["uid"])
            if sp.get("attacher") not in self.drivers or sp.get("nodeName") not in self.names:
                continue
            if sp["nodeName"] in rebooting:
                continue  # the node is down: nothing progresses until it is back
            path = "/apis/storage.k8s.io/v1/volumeattachments/" + md["name"]
            fin = attacher_finalizer(sp["attacher"])
            fins = md.get("finalizers") or []
            if md.get("deletionTimestamp"):
                if fin not in fins:
                    continue
                first = self.va_del_seen.setdefault(md["uid"], t0)
                if t0 - first < self.detach_s:
                    continue
                if st.get("attached"):
                    c, obj = self.api.call("PATCH", path + "/status",
                                           {"status": {"attached": False, "detachError": None, "attachmentMetadata": None}}, MERGE)
                    if c != 200:
                        log("volumes: detach status", md["name"], c, obj.get("message", ""))
                        if c == 0:
                            return False
                        continue
                rest = [f for f in fins if f != fin]
                c, obj = self.api.call("PATCH", path, {"metadata": {"finalizers": rest or None}}, MERGE)
                log("volumes: detached", md["name"], sp.get("source", {}).get("persistentVolumeName"), "from", sp["nodeName"],
                    "finalizer removed", c, obj.get("message", "") if c >= 300 else "")
                if c == 0:
                    return False
                continue
            if fin not in fins:
                c, obj = self.api.call("PATCH", path, {"metadata": {"finalizers": fins + [fin]}}, MERGE)
                log("volumes: attach start", md["name"], sp.get("source", {}).get("persistentVolumeName"), "to", sp["nodeName"],
                    "finalizer", c, obj.get("message", "") if c >= 300 else "")
                if c == 0:
                    return False
                if c != 200:
                    continue
            first = self.va_seen.setdefault(md["uid"], t0)
            if not st.get("attached") and t0 - first >= self.attach_s:
                c, obj = self.api.call("PATCH", path + "/status", {"status": {"attached": True, "attachError": None}}, MERGE)
                log("volumes: attached", md["name"], "to", sp["nodeName"], c, obj.get("message", "") if c >= 300 else "")
                if c == 0:
                    return False
        for d in (self.va_seen, self.va_del_seen):
            for uid in list(d):
                if uid not in live:
                    del d[uid]
        return True

    def run(self, pods, t0, rebooting, term_seen):
        """One pass. Returns (hold, waiting, ok): pod uids whose deletion must wait (volumes not
        yet unmounted/reported), pod uids that must not start yet (volumes not attached)."""
        hold, waiting = set(), set()
        self.passes += 1
        vas = self.get("/apis/storage.k8s.io/v1/volumeattachments")
        if vas is None:
            return None
        pvcl = self.get("/api/v1/persistentvolumeclaims")
        if pvcl is None:
            return None
        pvcs = {x["metadata"]["namespace"] + "/" + x["metadata"]["name"]: x for x in pvcl.get("items", [])}
        ours = [p for p in pods if p.get("spec", {}).get("nodeName") in self.names and claim_names(p)]
        pvs = {}
        if pvcs or vas.get("items") or self.passes % 10 == 1:
            pvl = self.get("/api/v1/persistentvolumes")
            if pvl is None:
                return None
            pvs = {x["metadata"]["name"]: x for x in pvl.get("items", [])}
        if not self.provision(pvcs, pvs) or not self.reclaim(pvs):
            return None
        if not self.attacher(vas.get("items", []), t0, rebooting):
            return None
        if not ours and not any(self.reported.values()) and not self.lingering:
            return hold, waiting
        nl = self.get("/api/v1/nodes")
        if nl is None:
            return None
        nodes = {x["metadata"]["name"]: x for x in nl.get("items", []) if x["metadata"]["name"] in self.names}
        in_use = {n: set() for n in self.names}
        vols_of = {}
        for p in ours:
            md, node = p["metadata"], p["spec"]["nodeName"]
            vols, resolved = self.pod_volumes(p, pvcs, pvs, t0)
            vols_of[md["uid"]] = (vols, resolved)
            if p.get("status", {}).get("phase") in ("Succeeded", "Failed"):
                continue
            if md.get("deletionTimestamp") and node not in rebooting:
                first = term_seen.setdefault(md["uid"], t0)
                if t0 - first >= self.term_delay:
                    # unmounted: it leaves volumesInUse now and the pod is deleted after, or (with
                    # --in-use-lag) the pod is deleted now and volumesInUse follows later, like the
                    # real kubelet's next node status sync
                    if self.in_use_lag > 0:
                        for v in vols:
                            self.lingering.setdefault((node, v), first + self.term_delay + self.in_use_lag)
                    continue
            in_use[node].update(vols)
        for (n, v), until in list(self.lingering.items()):
            if t0 < until:
                in_use[n].add(v)
            elif n not in rebooting:
                del self.lingering[(n, v)]
        for n in self.names:
            node = nodes.get(n)
            if node is None:
                continue
            cur = node.get("status", {}).get("volumesInUse") or []
            self.reported[n] = bool(cur)
            if n in rebooting:
                continue  # the kubelet is down: it reports nothing
            want = sorted(in_use[n])
            if sorted(cur) != want:
                c, obj = self.api.call("PATCH", "/api/v1/nodes/%s/status" % n,
                                       {"status": {"volumesInUse": want or None}}, SMP)
                log("volumes: node", n, "volumesInUse", want, c, obj.get("message", "") if c >= 300 else "")
                if c == 200:
                    node["status"]["volumesInUse"] = want
                    self.reported[n] = bool(want)
                elif self.in_use_lag <= 0:
                    for p in ours:  # not reported unmounted: keep its terminating pods
                        if p["spec"]["nodeName"] == n and vols_of[p["metadata"]["uid"]][0]:
                            hold.add(p["metadata"]["uid"])
                    if c == 0:
                        return None
        for p in ours:
            md, node = p["metadata"], p["spec"]["nodeName"]
            vols, resolved = vols_of[md["uid"]]
            if md.get("deletionTimestamp"):
                if vols and node in rebooting:
                    hold.add(md["uid"])
                continue
            if p.get("status", {}).get("phase") == "Running":
                continue
            st = nodes.get(node, {}).get("status", {})
            attached = {x.get("name") for x in st.get("volumesAttached") or []}
            reported = set(st.get("volumesInUse") or [])
            if not resolved or any(v not in attached or v not in reported for v in vols):
                waiting.add(md["uid"])
                if md["uid"] not in self.waiting_logged:
                    self.waiting_logged.add(md["uid"])
                    log("volumes: pod", md["namespace"] + "/" + md["name"], "on", node, "waits for volumes", vols,
                        "resolved" if resolved else "claims not bound")
            else:
                self.waiting_logged.discard(md["uid"])
        return hold, waiting

def main():
    run_dir = os.environ.get("RUN_DIR", ".")
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", default="https://127.0.0.1:" + os.environ.get("API_PORT", "6443"))
    ap.add_argument("--ca-file", default=os.path.join(run_dir, "pki", "ca.crt"))
    ap.add_argument("--cert-file", default=os.path.join(run_dir, "pki", "admin.crt"))
    ap.add_argument("--key-file", default=os.path.join(run_dir, "pki", "admin.key"))
    ap.add_argument("--nodes", type=int, default=5)
    ap.add_argument("--zones", default="zone-a,zone-b,zone-c")
    ap.add_argument("--state-dir", default=os.path.join(run_dir, "fake-kubelet"))
    ap.add_argument("--terminate-delay", type=float, default=2.0)
    ap.add_argument("--reboot-seconds", type=float, default=8.0)
    ap.add_argument("--heartbeat", type=float, default=10.0)
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument("--csi-driver", action="append", default=None,
                    help="CSI driver(s) to play (attacher, provisioner, kubelet volume reporting); repeatable or "
                         "comma-separated; default rwo.csi.rollboot.dev; '' turns volume handling off")
    ap.add_argument("--attach-seconds", type=float, default=1.0)
    ap.add_argument("--detach-seconds", type=float, default=1.0)
    ap.add_argument("--in-use-lag", type=float, default=0.0,
                    help="seconds an unmounted volume stays in status.volumesInUse after its pod object is deleted "
                         "(the real kubelet reports on its next node status sync, up to 10s); 0: it leaves "
                         "volumesInUse before the pod object is deleted")
    a = ap.parse_args()
    drivers = [d.strip() for v in (a.csi_driver if a.csi_driver is not None else ["rwo.csi.rollboot.dev"])
               for d in v.split(",") if d.strip()]
    os.makedirs(a.state_dir, exist_ok=True)
    api = Api(a.server, a.ca_file, a.cert_file, a.key_file)
    zones = a.zones.split(",")
    names = ["node-%d" % i for i in range(1, a.nodes + 1)]
    # Loopback addresses, one per node: a test sends a host's own requests (FleetLock) from its
    # node's InternalIP by binding the source, and nothing leaves this machine.
    ips = {n: "127.1.0.%d" % i for i, n in enumerate(names, 1)}
    ready_since = {}
    vol = Volumes(api, drivers, names, a.attach_seconds, a.detach_seconds, a.terminate_delay, a.in_use_lag) if drivers else None

    for i, n in enumerate(names):
        code, obj = api.call("GET", "/api/v1/nodes/" + n)
        if code == 404:
            body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": n,
                "annotations": {ANN_CMAD: "true"} if vol else {}, "labels": {
                "kubernetes.io/hostname": n, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                "topology.kubernetes.io/zone": zones[i % len(zones)]}},
                "status": {}}
            code, obj = api.call("POST", "/api/v1/nodes", body)
            log("create node", n, code, obj.get("message", ""))
        elif vol and code == 200 and (obj.get("metadata", {}).get("annotations") or {}).get(ANN_CMAD) != "true":
            c, _ = api.call("PATCH", "/api/v1/nodes/" + n, {"metadata": {"annotations": {ANN_CMAD: "true"}}}, MERGE)
            log("node", n, "annotate", ANN_CMAD, c)
        boot = (obj.get("status", {}).get("nodeInfo", {}) or {}).get("bootID") or str(uuid.uuid4())
        machine = uuid.uuid5(uuid.NAMESPACE_DNS, n).hex
        cap = {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}
        st = {"status": {"capacity": cap, "allocatable": cap, "conditions": conditions(True),
              "addresses": [{"type": "InternalIP", "address": ips[n]}, {"type": "Hostname", "address": n}],
              "nodeInfo": {"bootID": boot, "machineID": machine,
                           "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_URL, n)), "kernelVersion": "6.1.0-fake",
                           "osImage": "fake-kubelet", "containerRuntimeVersion": "fake://1.0",
                           "kubeletVersion": "v1.36.2", "kubeProxyVersion": "", "operatingSystem": "linux",
                           "architecture": "amd64"}}}
        code, _ = api.call("PATCH", "/api/v1/nodes/%s/status" % n, st, "application/strategic-merge-patch+json")
        ready_since[n] = ts()
        log("node", n, "status", code, "bootID", boot)
        write_boot_id(a.state_dir, n, boot)
        write_machine_id(a.state_dir, n, machine)

    last_hb = 0.0
    term_seen = {}
    rebooting = {}  # node -> start time
    down_for = {}  # node -> seconds its current reboot takes
    while True:
        t0 = time.time()
        # reboots requested through files
        for n in names:
            f = os.path.join(a.state_dir, "reboot-" + n)
            if os.path.exists(f) and n not in rebooting:
                rebooting[n] = t0
                # `seconds=N` in the file: this reboot takes N s (else --reboot-seconds).
                try:
                    with open(f) as fh:
                        words = dict(w.split("=", 1) for w in fh.read().split() if "=" in w)
                    down_for[n] = float(words.get("seconds", a.reboot_seconds))
                except (OSError, ValueError):
                    down_for[n] = a.reboot_seconds
                ready_since[n] = ts()
                c, _ = api.call("PATCH", "/api/v1/nodes/%s/status" % n,
                                {"status": {"conditions": conditions(False, "KubeletNotReady", "rebooting", ready_since[n])}},
                                "application/strategic-merge-patch+json")
                log("reboot start", n, "NotReady patch", c)
            if n in rebooting and t0 - rebooting[n] >= down_for.get(n, a.reboot_seconds):
                c, obj = api.call("GET", "/api/v1/nodes/" + n)
                if c != 200:
                    continue
                old = obj.get("status", {}).get("nodeInfo", {}).get("bootID")
                new = str(uuid.uuid4())
                ready_since[n] = ts()
                c, _ = api.call("PATCH", "/api/v1/nodes/%s/status" % n,
                                {"status": {"nodeInfo": {"bootID": new}, "conditions": conditions(True, since=ready_since[n])}},
                                "application/strategic-merge-patch+json")
                if c != 200:
                    log("reboot done patch failed", n, c); continue
                log("reboot done", n, "bootID", old, "->", new, "patch", c)
                write_boot_id(a.state_dir, n, new)
                with open(os.path.join(a.state_dir, "reboots.log"), "a") as fh:
                    fh.write("%s %s %s %s\n" % (ts(), n, old, new))
                try:
                    os.remove(os.path.join(a.state_dir, "reboot-" + n))
                except FileNotFoundError:
                    pass
                del rebooting[n]
        # heartbeats
        if t0 - last_hb >= a.heartbeat:
            last_hb = t0
            for n in names:
                lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                         "metadata": {"name": n, "namespace": "kube-node-lease"},
                         "spec": {"holderIdentity": n, "leaseDurationSeconds": 40, "renewTime": mts()}}

                c, cur = api.call("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/" + n)
                if c == 404:
                    c, _ = api.call("POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", lease)
                else:
                    c, _ = api.call("PATCH", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/" + n,
                                    {"spec": {"renewTime": mts(), "holderIdentity": n}}, "application/merge-patch+json")
                if c >= 300:
                    log("lease", n, c)
                ready = n not in rebooting
                c, _ = api.call("PATCH", "/api/v1/nodes/%s/status" % n,
                                {"status": {"conditions": conditions(ready, "KubeletReady" if ready else "KubeletNotReady",
                                                                     "kubelet is posting ready status" if ready else "rebooting",
                                                                     ready_since[n])}},
                                "application/strategic-merge-patch+json")
                if c >= 300:
                    log("heartbeat", n, c)
        # pods
        c, pods = api.call("GET", "/api/v1/pods")
        if c != 200:
            log("list pods", c)
        hold, waiting = set(), set()
        if vol and c == 200:
            vr = vol.run(pods.get("items", []), t0, rebooting, term_seen)
            if vr is None:  # apiserver trouble: keep volume pods as they are this pass
                hold = waiting = {p["metadata"]["uid"] for p in pods.get("items", []) if claim_names(p)}
            else:
                hold, waiting = vr
        for p in pods.get("items", []):
            md, sp, st = p["metadata"], p.get("spec", {}), p.get("status", {})
            node = sp.get("nodeName")
            if node not in ips:
                continue
            key = md["namespace"] + "/" + md["name"]
            path = "/api/v1/namespaces/%s/pods/%s" % (md["namespace"], md["name"])
            if md.get("deletionTimestamp"):
                first = term_seen.setdefault(md["uid"], t0)
                if md["uid"] in hold:
                    continue
                if t0 - first >= a.terminate_delay:
                    c, _ = api.call("DELETE", path, {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                                                     "preconditions": {"uid": md["uid"]}})
                    log("finish terminating", key, "on", node, "delete", c)
                    term_seen.pop(md["uid"], None)
                continue
            if md["uid"] in waiting:
                if st.get("phase") == "Running" or any(((x.get("state") or {}).get("waiting") or {}).get("reason") == "ContainerCreating"
                                                       for x in st.get("containerStatuses") or []):
                    continue
                t = ts()
                cs = [{"name": ct["name"], "image": ct.get("image", ""), "imageID": "", "ready": False, "started": False,
                       "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}
                      for ct in sp.get("containers", [])]
                nr = {"reason": "ContainersNotReady", "message": "containers with unready status: [%s]"
                      % " ".join(ct["name"] for ct in sp.get("containers", []))}
                body = {"status": {"phase": "Pending", "hostIP": ips[node], "hostIPs": [{"ip": ips[node]}],
                                   "startTime": st.get("startTime", t),
                                   "conditions": [{"type": "PodReadyToStartContainers", "status": "False", "lastTransitionTime": t},
                                                  {"type": "Initialized", "status": "True", "lastTransitionTime": t},
                                                  dict({"type": "ContainersReady", "status": "False", "lastTransitionTime": t}, **nr),
                                                  dict({"type": "Ready", "status": "False", "lastTransitionTime": t}, **nr),
                                                  {"type": "PodScheduled", "status": "True", "lastTransitionTime": t}],
                                   "containerStatuses": cs}}
                c, resp = api.call("PATCH", path + "/status", body, "application/strategic-merge-patch+json")
                log("pod", key, "on", node, "ContainerCreating (waiting for volumes)", c, resp.get("message", "") if c >= 300 else "")
                continue
            ready = any(x.get("type") == "Ready" and x.get("status") == "True" for x in st.get("conditions", []))
            want = node not in rebooting
            if st.get("phase") == "Running" and ready == want:
                continue
            t = ts()
            rs = "True" if want else "False"
            cs = [{"name": ct["name"], "image": ct.get("image", ""), "imageID": "", "ready": want, "started": want,
                   "restartCount": 0, "containerID": "fake://" + md["uid"][:12] + ct["name"],
                   "state": {"running": {"startedAt": t}} if want else {"waiting": {"reason": "NodeRebooting"}}}
                  for ct in sp.get("containers", [])]
            body = {"status": {"phase": "Running", "hostIP": ips[node], "hostIPs": [{"ip": ips[node]}],
                               "podIP": st.get("podIP") or "10.244.%s.%d" % (ips[node].split(".")[-1], abs(hash(md["uid"])) % 250 + 2),
                               "startTime": st.get("startTime", t),
                               "conditions": [{"type": "PodReadyToStartContainers", "status": "True", "lastTransitionTime": t},
                                              {"type": "Initialized", "status": "True", "lastTransitionTime": t},
                                              {"type": "ContainersReady", "status": rs, "lastTransitionTime": t},
                                              {"type": "Ready", "status": rs, "lastTransitionTime": t},
                                              {"type": "PodScheduled", "status": "True", "lastTransitionTime": t}],
                               "containerStatuses": cs}}
            if sp.get("hostNetwork"):
                body["status"]["podIP"] = ips[node]
            body["status"]["podIPs"] = [{"ip": body["status"]["podIP"]}]
            c, resp = api.call("PATCH", path + "/status", body, "application/strategic-merge-patch+json")
            log("pod", key, "on", node, "Ready" if want else "NotReady", c, resp.get("message", "") if c >= 300 else "")
        time.sleep(max(0.0, a.interval - (time.time() - t0)))

if __name__ == "__main__":
    main()
