#!/usr/bin/env python3
"""Plays the agents' part for a measurement against a served simulator (no agent processes):
watches the Nodes and gives each node that rollboot moves to `state: rebooting` a new boot ID
(the simulator keeps it Ready), once per cycle. Exits when COUNT nodes show `state: done`, or
with status 1 when one fails or after TIMEOUT seconds.

    play-reboots.py KUBECONFIG COUNT [TIMEOUT]

Reads the server address and bearer token from the kubeconfig the simulator wrote. One watch,
one status patch per reboot: its own cost on the simulator stays small next to what is measured.
"""
import http.client
import json
import re
import sys
import time
import urllib.parse

kubeconfig, count = sys.argv[1], int(sys.argv[2])
timeout = float(sys.argv[3]) if len(sys.argv) > 3 else 900.0
text = open(kubeconfig).read()
server = urllib.parse.urlparse(re.search(r"server:\s*(\S+)", text).group(1))
token = re.search(r"token:\s*(\S+)", text).group(1)
headers = {"Authorization": f"Bearer {token}", "User-Agent": "play-reboots"}
deadline = time.time() + timeout


def conn():
    return http.client.HTTPConnection(server.hostname, server.port, timeout=60)


def reboot(name):
    body = json.dumps({"status": {"nodeInfo": {"bootID": f"played-{time.time_ns()}"}}})
    c = conn()
    c.request("PATCH", f"/api/v1/nodes/{name}/status", body,
              {**headers, "Content-Type": "application/merge-patch+json"})
    r = c.getresponse()
    r.read()
    if r.status != 200:
        sys.exit(f"patching the boot ID of {name}: HTTP {r.status}")


rebooted, done = set(), set()
rv = ""
while time.time() < deadline:
    c = conn()
    query = "watch=1&timeoutSeconds=60" + (f"&resourceVersion={rv}" if rv else "")
    c.request("GET", f"/api/v1/nodes?{query}", headers=headers)
    r = c.getresponse()
    if r.status != 200:
        sys.exit(f"watching nodes: HTTP {r.status}")
    for line in r:
        ev = json.loads(line)
        obj = ev["object"]
        if ev["type"] == "ERROR":
            rv = ""
            break
        rv = obj["metadata"].get("resourceVersion", rv)
        name = obj["metadata"]["name"]
        state = (obj["metadata"].get("annotations") or {}).get("rollboot.dev/state")
        if state == "rebooting" and name not in rebooted:
            rebooted.add(name)
            reboot(name)
        elif state == "done" and name in rebooted:
            done.add(name)
            if len(done) >= count:
                print(f"{len(done)} nodes done")
                sys.exit(0)
        elif state == "failed":
            reason = obj["metadata"]["annotations"].get("rollboot.dev/failure-reason")
            sys.exit(f"{name} failed: {reason}")
sys.exit(f"timed out: {len(done)} of {count} nodes done")
