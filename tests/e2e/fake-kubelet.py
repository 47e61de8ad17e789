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
(tests/e2e_realcluster.rs runs this one). What it adds: each node's machine ID, the
status.nodeInfo.machineID it registers, is kept in STATE_DIR/machine-id-NODE (what a real agent
reads from /etc/machine-id), so an agent's reboot.hostBootIdFile and reboot.hostMachineIdFile can
be its fake host's.

Credentials: --server, --ca-file, --cert-file, --key-file (client certificate, e.g. the admin
one that up.sh writes under RUN_DIR/pki); defaults come from $RUN_DIR.
"""
import argparse, datetime, json, os, ssl, sys, time, urllib.error, urllib.request, uuid

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
    a = ap.parse_args()
    os.makedirs(a.state_dir, exist_ok=True)
    api = Api(a.server, a.ca_file, a.cert_file, a.key_file)
    zones = a.zones.split(",")
    names = ["node-%d" % i for i in range(1, a.nodes + 1)]
    ips = {n: "10.1.0.%d" % i for i, n in enumerate(names, 1)}
    ready_since = {}

    for i, n in enumerate(names):
        code, obj = api.call("GET", "/api/v1/nodes/" + n)
        if code == 404:
            body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": n, "labels": {
                "kubernetes.io/hostname": n, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                "topology.kubernetes.io/zone": zones[i % len(zones)]}},
                "status": {}}
            code, obj = api.call("POST", "/api/v1/nodes", body)
            log("create node", n, code, obj.get("message", ""))
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
    while True:
        t0 = time.time()
        # reboots requested through files
        for n in names:
            f = os.path.join(a.state_dir, "reboot-" + n)
            if os.path.exists(f) and n not in rebooting:
                rebooting[n] = t0
                ready_since[n] = ts()
                c, _ = api.call("PATCH", "/api/v1/nodes/%s/status" % n,
                                {"status": {"conditions": conditions(False, "KubeletNotReady", "rebooting", ready_since[n])}},
                                "application/strategic-merge-patch+json")
                log("reboot start", n, "NotReady patch", c)
            if n in rebooting and t0 - rebooting[n] >= a.reboot_seconds:
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
        for p in pods.get("items", []):
            md, sp, st = p["metadata"], p.get("spec", {}), p.get("status", {})
            node = sp.get("nodeName")
            if node not in ips:
                continue
            key = md["namespace"] + "/" + md["name"]
            path = "/api/v1/namespaces/%s/pods/%s" % (md["namespace"], md["name"])
            if md.get("deletionTimestamp"):
                first = term_seen.setdefault(md["uid"], t0)
                if t0 - first >= a.terminate_delay:
                    c, _ = api.call("DELETE", path, {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0,
                                                     "preconditions": {"uid": md["uid"]}})
                    log("finish terminating", key, "on", node, "delete", c)
                    term_seen.pop(md["uid"], None)
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
