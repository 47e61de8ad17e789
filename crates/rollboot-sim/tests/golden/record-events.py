#!/usr/bin/env python3
"""Records tests/golden/120-159: what a real kube-apiserver v1.36 answers about Events.

Usage: KUBECONFIG=/path/to/admin.kubeconfig python3 crates/rollboot-sim/tests/golden/record-events.py

Talks only to the kubeconfig's server (a loopback control plane, see the realcluster recipe)
with its admin client certificate. Creates the namespace `evt-ops` and Events named `evt-...` in
`default` and `kube-system`; first removes what an earlier run left (not recorded). Each
recorded exchange is written as `NNN-short-name.json` in the golden format (case, request,
response, notes) plus `compare`: the JSON pointers into response.body a simulator must
reproduce exactly (uids, resourceVersions, creation timestamps and managedFields are left out:
they differ between servers; the status code is always compared).
"""

import base64
import http.client
import json
import os
import ssl
import sys
import tempfile
import time
import urllib.parse

import yaml  # PyYAML

HERE = os.path.dirname(os.path.abspath(__file__))
UA = "golden-recorder/1.0"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


def connect():
    cfg = yaml.safe_load(open(os.environ["KUBECONFIG"]))
    ctx_name = cfg["current-context"]
    ctx = next(c["context"] for c in cfg["contexts"] if c["name"] == ctx_name)
    cluster = next(c["cluster"] for c in cfg["clusters"] if c["name"] == ctx["cluster"])
    user = next(u["user"] for u in cfg["users"] if u["name"] == ctx["user"])
    url = urllib.parse.urlparse(cluster["server"])
    assert url.hostname in ("127.0.0.1", "localhost", "::1"), "loopback servers only"
    sslctx = ssl.create_default_context(
        cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
    )
    # The client certificate must come from files for the ssl module: a private temporary
    # directory, removed as soon as it is loaded.
    with tempfile.TemporaryDirectory() as d:
        cert, key = os.path.join(d, "c"), os.path.join(d, "k")
        for path, field in ((cert, "client-certificate-data"), (key, "client-key-data")):
            with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
                f.write(base64.b64decode(user[field]))
        sslctx.load_cert_chain(cert, key)
    return url.hostname, url.port or 443, sslctx


HOST, PORT, SSLCTX = connect()


def send(method, path, body=None, content_type="application/json", accept="application/json"):
    conn = http.client.HTTPSConnection(HOST, PORT, context=SSLCTX, timeout=30)
    headers = {"Accept": accept, "User-Agent": UA}
    data = None
    if body is not None:
        data = body if isinstance(body, str) else json.dumps(body)
        headers["Content-Type"] = content_type
    conn.request(method, path, body=data, headers=headers)
    r = conn.getresponse()
    raw = r.read().decode()
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = raw
    resp_headers = dict(r.getheaders())
    conn.close()
    return r.status, resp_headers, parsed, headers


def cleanup():
    for ns in ("default", "kube-system"):
        st, _, body, _ = send("GET", f"/api/v1/namespaces/{ns}/events")
        for item in body.get("items", []):
            name = item["metadata"]["name"]
            if name.startswith("evt-"):
                send("DELETE", f"/api/v1/namespaces/{ns}/events/{name}")
    send("DELETE", "/api/v1/namespaces/evt-ops")
    for _ in range(120):
        st, _, _, _ = send("GET", "/api/v1/namespaces/evt-ops")
        if st == 404:
            break
        time.sleep(1)
    else:
        sys.exit("namespace evt-ops is still terminating")
    st, _, body, _ = send("GET", "/api/v1/nodes")
    for item in body.get("items", []):
        if item["metadata"]["name"].startswith("evt-"):
            send("DELETE", "/api/v1/nodes/" + item["metadata"]["name"])


def write(n, slug, case, method, path, body, content_type, accept, compare, notes):
    status, resp_headers, resp_body, req_headers = send(method, path, body, content_type, accept)
    request = {"method": method, "path": path}
    if body is not None:
        request["content_type"] = content_type
        request["body"] = json.loads(body) if isinstance(body, str) else body
    request["headers"] = req_headers if body is None else {
        k: v for k, v in req_headers.items() if k != "Content-Type"
    }
    if callable(compare):
        compare = compare(resp_body)
    doc = {
        "case": case,
        "request": request,
        "response": {
            "status": status,
            "content_type": resp_headers.get("Content-Type", ""),
            "headers": resp_headers,
            "body": resp_body,
        },
        "compare": compare,
        "notes": notes,
    }
    with open(os.path.join(HERE, f"{n}-{slug}.json"), "w") as f:
        json.dump(doc, f, indent=2, ensure_ascii=False)
        f.write("\n")
    print(n, slug, status)
    return status, resp_body


EVENT_TIME = "2026-11-23T10:00:00.123456Z"
CONTROLLER = "evt.rollboot.dev/recorder"
V1 = "/apis/events.k8s.io/v1/namespaces"
CORE = "/api/v1/namespaces"
STATUS_FIELDS = ["/kind", "/status", "/message", "/reason", "/details", "/code"]
# Invalid answers whose message and details.name carry a generated name.
GENERATED_FIELDS = ["/kind", "/status", "/reason", "/details/kind", "/details/group",
                    "/details/causes", "/code"]
V1_FIELDS = ["/kind", "/apiVersion", "/metadata/name", "/metadata/namespace",
             "/metadata/generateName", "/metadata/labels",
             "/eventTime", "/series", "/reportingController", "/reportingInstance", "/action",
             "/reason", "/regarding", "/related", "/note", "/type", "/deprecatedSource",
             "/deprecatedFirstTimestamp", "/deprecatedLastTimestamp", "/deprecatedCount"]
CORE_FIELDS = ["/kind", "/apiVersion", "/metadata/name", "/metadata/namespace",
               "/metadata/generateName", "/metadata/labels",
               "/involvedObject", "/reason", "/message", "/source", "/firstTimestamp",
               "/lastTimestamp", "/count", "/type", "/eventTime", "/series", "/action",
               "/related", "/reportingComponent", "/reportingInstance"]


def list_fields(item_fields):
    def pointers(body):
        out = ["/kind", "/apiVersion"]
        items = body.get("items", []) if isinstance(body, dict) else []
        for i in range(len(items)):
            out += [f"/items/{i}{p}" for p in item_fields if p not in ("/kind", "/apiVersion")]
        out.append(f"/items/{len(items)}")  # absent in both: the same number of items
        return out
    return pointers


def recorder_event(name, node, ns=None, **extra):
    """What kube::runtime::events::Recorder (kube-runtime 5) sends for a Node."""
    ev = {
        "apiVersion": "events.k8s.io/v1", "kind": "Event",
        "metadata": {"name": name},
        "eventTime": EVENT_TIME,
        "reportingController": CONTROLLER,
        "reportingInstance": "controller-0",
        "action": "Cordon", "reason": "Cordoned", "type": "Normal",
        "note": f"cordoned {node} before its reboot",
        "regarding": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node},
    }
    if ns:
        ev["metadata"]["namespace"] = ns
    ev.update(extra)
    return ev


def core_event(name, **fields):
    ev = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": name}}
    ev.update(fields)
    return ev


def main():
    cleanup()
    R = write
    R(120, "evt-namespace-create", "POST a namespace evt-ops (where a controller like rollboot runs)",
      "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "evt-ops"}},
      "application/json", "application/json", [], "Set-up for the cases below; only the status is compared.")
    node_event = recorder_event("evt-node-1.187a1b2c3d4e5f60", "evt-node-1")
    R(121, "evt-v1-create-recorder-node-default", "events.k8s.io/v1 Event about a Node in default, as kube's Recorder writes it",
      "POST", f"{V1}/default/events", node_event, "application/json", "application/json", V1_FIELDS,
      "201. kube-runtime's Recorder: name <regarding name>.<hex nanos>, namespace of the regarding object or default, eventTime, reportingController/Instance, action, reason, type, note. The response adds deprecatedSource {} and null deprecated timestamps.")
    R(122, "evt-core-get-recorder-event", "The same Event read through core/v1",
      "GET", f"{CORE}/default/events/evt-node-1.187a1b2c3d4e5f60", None, None, "application/json", CORE_FIELDS,
      "One storage: regarding -> involvedObject, note -> message, reportingController -> reportingComponent, deprecatedSource -> source {}, null firstTimestamp/lastTimestamp, no count.")
    R(123, "evt-v1-create-node-event-outside-default", "events.k8s.io/v1 Event about a Node in namespace evt-ops (rollboot's lock namespace shape)",
      "POST", f"{V1}/evt-ops/events", recorder_event("evt-node-2.1", "evt-node-2"), "application/json", "application/json", STATUS_FIELDS,
      "422: an Event about a cluster-scoped object must live in default or kube-system when eventTime is set; the field named is involvedObject.namespace (the internal name) even through events.k8s.io/v1.")
    gen = recorder_event("", "evt-node-2")
    gen["metadata"] = {"generateName": "evt-node-2."}
    R(124, "evt-v1-create-generatename-dot", "events.k8s.io/v1 Event with generateName 'evt-node-2.' in default",
      "POST", f"{V1}/default/events", gen, "application/json", "application/json", GENERATED_FIELDS,
      "422: the strict (events.k8s.io/v1) validation checks generateName as a DNS subdomain prefix: a trailing '-' is masked, a trailing '.' is not. The message and details.name carry the generated name (random suffix), so they are not compared.")
    core_gen = core_event("", metadata={"generateName": "evt-node-2."}, eventTime=EVENT_TIME,
                          reportingComponent=CONTROLLER, reportingInstance="controller-0", action="Cordon",
                          reason="Cordoned", type="Normal", message="cordoned evt-node-2",
                          involvedObject={"apiVersion": "v1", "kind": "Node", "name": "evt-node-2", "uid": "evt-node-2"})
    R(125, "evt-core-create-generatename-dot", "core/v1 Event with generateName 'evt-node-2.' in default",
      "POST", f"{CORE}/default/events", core_gen, "application/json", "application/json",
      ["/kind", "/apiVersion", "/metadata/generateName", "/metadata/namespace", "/involvedObject", "/message", "/reportingComponent"],
      "201: through core/v1 only the legacy validation runs, which does not check names beyond the generic path-segment rule.")
    missing = recorder_event("evt-node-1.missing", "evt-node-1")
    for k in ("action", "reason", "reportingController", "reportingInstance"):
        del missing[k]
    R(126, "evt-v1-create-missing-reporting-fields", "events.k8s.io/v1 Event with eventTime but without action, reason, reportingController, reportingInstance",
      "POST", f"{V1}/default/events", missing, "application/json", "application/json", STATUS_FIELDS,
      "422 with one cause per missing field, in the legacy validator's order; reportingController also fails the qualified-name check.")
    no_time = recorder_event("evt-node-1.notime", "evt-node-1")
    del no_time["eventTime"]
    R(127, "evt-v1-create-no-eventtime-outside-default", "events.k8s.io/v1 Event without eventTime about a Node in evt-ops",
      "POST", f"{V1}/evt-ops/events", no_time, "application/json", "application/json", STATUS_FIELDS,
      "422: without eventTime the legacy namespace rule applies (empty involvedObject namespace: the Event must be in default), then eventTime is required by the strict rules.")
    R(128, "evt-v1-create-bad-type", "events.k8s.io/v1 Event with type Info",
      "POST", f"{V1}/default/events", recorder_event("evt-node-1.badtype", "evt-node-1", type="Info"), "application/json", "application/json", STATUS_FIELDS,
      "422: type must be Normal or Warning.")
    R(129, "evt-v1-create-note-too-long", "events.k8s.io/v1 Event with a note of 1025 bytes",
      "POST", f"{V1}/default/events", recorder_event("evt-node-1.longnote", "evt-node-1", note="n" * 1025), "application/json", "application/json", STATUS_FIELDS,
      "422: the note limit is 1024; the field is named message (internal name).")
    R(130, "evt-v1-create-bad-reporting-controller", "events.k8s.io/v1 Event with reportingController 'rollboot controller'",
      "POST", f"{V1}/default/events", recorder_event("evt-node-1.badrc", "evt-node-1", reportingController="rollboot controller"), "application/json", "application/json", STATUS_FIELDS,
      "422: reportingController must be a qualified name.")
    R(131, "evt-v1-create-too-long-fields", "events.k8s.io/v1 Event with reportingInstance, action and reason of 129 bytes",
      "POST", f"{V1}/default/events", recorder_event("evt-node-1.long", "evt-node-1", reportingInstance="i" * 129, action="A" * 129, reason="R" * 129), "application/json", "application/json", STATUS_FIELDS,
      "422: each is limited to 128.")
    R(132, "evt-v1-create-deprecated-fields-set", "events.k8s.io/v1 Event with deprecatedCount, deprecatedSource and deprecatedFirstTimestamp set",
      "POST", f"{V1}/default/events", recorder_event("evt-node-1.deprecated", "evt-node-1", deprecatedCount=2, deprecatedSource={"component": "x"}, deprecatedFirstTimestamp="2026-11-23T09:00:00Z"), "application/json", "application/json", STATUS_FIELDS,
      "422: the strict rules want the deprecated fields unset (named by their internal names).")
    R(133, "evt-v1-create-series-count-one", "events.k8s.io/v1 Event created with series.count 1",
      "POST", f"{V1}/default/events", recorder_event("evt-node-1.series1", "evt-node-1", series={"count": 1, "lastObservedTime": EVENT_TIME}), "application/json", "application/json", STATUS_FIELDS,
      "422: a series counts at least 2.")
    R(134, "evt-v1-create-eventtime-milliseconds", "events.k8s.io/v1 Event whose eventTime has 3 fractional digits",
      "POST", f"{V1}/default/events", recorder_event("evt-node-1.millis", "evt-node-1", eventTime="2026-11-23T10:00:00.123Z"), "application/json", "application/json", STATUS_FIELDS,
      "400: a MicroTime is parsed with the layout 2006-01-02T15:04:05.000000Z07:00, which wants exactly six digits.")
    old_style = core_event("evt-node-3.old", involvedObject={"apiVersion": "v1", "kind": "Node", "name": "evt-node-3", "uid": "evt-node-3"},
                           reason="NodeNotReady", message="evt-node-3 is not ready", source={"component": "evt-kubelet", "host": "evt-node-3"},
                           firstTimestamp="2026-11-23T09:00:00Z", lastTimestamp="2026-11-23T09:05:00Z", count=3, type="Warning")
    R(135, "evt-core-create-old-style-default", "core/v1 old-style Event (no eventTime; source, count, timestamps) about a Node in default",
      "POST", f"{CORE}/default/events", old_style, "application/json", "application/json", CORE_FIELDS,
      "201: old-style Events need no reporting fields; eventTime is served as null, reportingComponent/reportingInstance as ''.")
    R(136, "evt-core-create-old-style-outside-default", "core/v1 old-style Event about a Node in evt-ops",
      "POST", f"{CORE}/evt-ops/events", dict(old_style, metadata={"name": "evt-node-3.old"}), "application/json", "application/json", STATUS_FIELDS,
      "422: without eventTime, an Event about a cluster-scoped object must be in default.")
    new_core = core_event("evt-node-3.new", eventTime=EVENT_TIME, reportingInstance="controller-0", action="Drain", reason="Draining",
                          type="Normal", message="draining evt-node-3",
                          involvedObject={"apiVersion": "v1", "kind": "Node", "name": "evt-node-3", "uid": "evt-node-3"})
    R(137, "evt-core-create-eventtime-no-reporting-component", "core/v1 Event with eventTime but no reportingComponent",
      "POST", f"{CORE}/default/events", new_core, "application/json", "application/json", STATUS_FIELDS,
      "422: through core/v1 the missing field is named reportingComponent.")
    R(138, "evt-core-create-eventtime-outside-default", "core/v1 Event with eventTime about a Node in evt-ops",
      "POST", f"{CORE}/evt-ops/events", dict(new_core, reportingComponent=CONTROLLER), "application/json", "application/json", STATUS_FIELDS,
      "422: with eventTime, a cluster-scoped object's Events live in default or kube-system.")
    R(139, "evt-core-create-eventtime-kube-system", "core/v1 Event with eventTime about a Node in kube-system",
      "POST", f"{CORE}/kube-system/events", dict(new_core, reportingComponent=CONTROLLER, metadata={"name": "evt-node-3.system"}), "application/json", "application/json", CORE_FIELDS,
      "201: kube-system is the other namespace allowed for Events about cluster-scoped objects.")
    cm_event = recorder_event("evt-config.1", "evt-config")
    cm_event["regarding"] = {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "evt-app", "name": "evt-config", "uid": "evt-config"}
    R(140, "evt-v1-create-namespaced-object-other-namespace", "events.k8s.io/v1 Event in evt-ops about a ConfigMap in namespace evt-app",
      "POST", f"{V1}/evt-ops/events", cm_event, "application/json", "application/json", V1_FIELDS,
      "201: with eventTime set, the Event of a namespaced object may live in another namespace (the involved object need not exist).")
    R(141, "evt-core-create-old-style-other-namespace", "core/v1 old-style Event in evt-ops about a ConfigMap in evt-app",
      "POST", f"{CORE}/evt-ops/events", core_event("evt-config.old", involvedObject=cm_event["regarding"], reason="Changed", message="changed", type="Normal"),
      "application/json", "application/json", STATUS_FIELDS,
      "422: without eventTime the Event must be in its object's namespace.")
    series = dict(node_event, series={"count": 2, "lastObservedTime": "2026-11-23T10:01:00.654321Z"})
    R(142, "evt-v1-patch-series", "merge PATCH of the Recorder's Event adding series (the Recorder's repeat within 6 minutes)",
      "PATCH", f"{V1}/default/events/evt-node-1.187a1b2c3d4e5f60", series, "application/merge-patch+json", "application/json", V1_FIELDS,
      "200: kube-runtime sends the whole cached Event plus series {count, lastObservedTime} as a JSON merge patch.")
    R(143, "evt-v1-patch-series-count-one", "merge PATCH setting series.count 1",
      "PATCH", f"{V1}/default/events/evt-node-1.187a1b2c3d4e5f60", {"series": {"count": 1, "lastObservedTime": "2026-11-23T10:02:00.000000Z"}},
      "application/merge-patch+json", "application/json", STATUS_FIELDS,
      "422: a changed series is validated again.")
    R(144, "evt-v1-patch-immutable-note-reason", "merge PATCH through events.k8s.io/v1 changing note and reason",
      "PATCH", f"{V1}/default/events/evt-node-1.187a1b2c3d4e5f60", {"note": "changed", "reason": "Changed"},
      "application/merge-patch+json", "application/json", STATUS_FIELDS,
      "422: events.k8s.io/v1 updates may not change the Event's content; reason is checked twice by the real validator (two causes, one line in the message).")
    R(145, "evt-core-patch-message", "merge PATCH through core/v1 changing message",
      "PATCH", f"{CORE}/default/events/evt-node-1.187a1b2c3d4e5f60", {"message": "changed through core/v1"},
      "application/merge-patch+json", "application/json", CORE_FIELDS,
      "200: core/v1 updates get the legacy validation only.")
    R(146, "evt-v1-get-after-patches", "GET through events.k8s.io/v1 after both patches",
      "GET", f"{V1}/default/events/evt-node-1.187a1b2c3d4e5f60", None, None, "application/json", V1_FIELDS,
      "The series from 142 and the message from 145, in events.k8s.io/v1 form.")
    R(147, "evt-core-list-node-selectors", "core/v1 LIST in default with fieldSelector involvedObject.kind=Node,involvedObject.name=evt-node-1",
      "GET", f"{CORE}/default/events?fieldSelector=" + urllib.parse.quote("involvedObject.kind=Node,involvedObject.name=evt-node-1"), None, None,
      "application/json", list_fields(CORE_FIELDS),
      "kubectl get events --field-selector; the Event written through events.k8s.io/v1 is listed.")
    R(148, "evt-core-list-describe-node-selectors", "core/v1 LIST across namespaces with kubectl describe node's selector (name, empty namespace, kind, uid)",
      "GET", "/api/v1/events?fieldSelector=" + urllib.parse.quote("involvedObject.kind=Node,involvedObject.name=evt-node-1,involvedObject.namespace=,involvedObject.uid=evt-node-1") + "&limit=500", None, None,
      "application/json", list_fields(CORE_FIELDS),
      "kubectl describe node asks with involvedObject.namespace= (empty: a cluster-scoped object) and the node's uid.")
    R(149, "evt-v1-list-regarding-selectors", "events.k8s.io/v1 LIST with fieldSelector regarding.kind=Node,regarding.name=evt-node-1,reportingController=" + CONTROLLER,
      "GET", f"{V1}/default/events?fieldSelector=" + urllib.parse.quote(f"regarding.kind=Node,regarding.name=evt-node-1,reportingController={CONTROLLER}"), None, None,
      "application/json", list_fields(V1_FIELDS),
      "events.k8s.io/v1 names the fields regarding.* and reportingController.")
    R(150, "evt-v1-list-involvedobject-selector", "events.k8s.io/v1 LIST with fieldSelector involvedObject.kind=Node",
      "GET", f"{V1}/default/events?fieldSelector=" + urllib.parse.quote("involvedObject.kind=Node"), None, None,
      "application/json", ["/kind", "/status", "/message", "/reason", "/details", "/code"],
      "400: events.k8s.io/v1 does not know the core/v1 field labels.")
    R(151, "evt-core-list-source-type-selectors", "core/v1 LIST with fieldSelector source=evt-kubelet,type=Warning,reason=NodeNotReady",
      "GET", f"{CORE}/default/events?fieldSelector=" + urllib.parse.quote("source=evt-kubelet,type=Warning,reason=NodeNotReady"), None, None,
      "application/json", list_fields(CORE_FIELDS),
      "source selects source.component (or reportingComponent when empty).")
    R(152, "evt-core-list-unsupported-selector", "core/v1 LIST with fieldSelector note=x",
      "GET", f"{CORE}/default/events?fieldSelector=" + urllib.parse.quote("note=x"), None, None,
      "application/json", ["/kind", "/status", "/message", "/reason", "/details", "/code"],
      "400: note is not a core/v1 field label.")
    table_ptrs = ["/kind", "/apiVersion", "/columnDefinitions"] + [f"/rows/0/cells/{i}" for i in (1, 2, 3, 4, 5, 6, 8, 9)] + ["/rows/1"]
    R(153, "evt-core-list-table", "core/v1 LIST as a Table (kubectl get events) for evt-node-1",
      "GET", f"{CORE}/default/events?fieldSelector=" + urllib.parse.quote("involvedObject.name=evt-node-1"), None, None,
      TABLE, table_ptrs,
      "The server prints the wide columns; Last Seen and First Seen are relative times, not compared.")
    R(154, "evt-v1-list-table", "events.k8s.io/v1 LIST as a Table for evt-node-1",
      "GET", f"{V1}/default/events?fieldSelector=" + urllib.parse.quote("regarding.name=evt-node-1"), None, None,
      TABLE, table_ptrs,
      "Same printer for both versions.")
    put = core_event("evt-node-4.put", involvedObject={"apiVersion": "v1", "kind": "Node", "name": "evt-node-4"},
                     reason="Rebooted", message="evt-node-4 rebooted", type="Normal", source={"component": "evt-agent"})
    put["metadata"]["namespace"] = "default"
    R(155, "evt-core-put-creates", "core/v1 PUT of a missing Event",
      "PUT", f"{CORE}/default/events/evt-node-4.put", put, "application/json", "application/json", CORE_FIELDS,
      "201: the Event strategy allows create on update.")
    R(156, "evt-v1-delete", "DELETE through events.k8s.io/v1 of the Event about the ConfigMap",
      "DELETE", f"{V1}/evt-ops/events/evt-config.1", None, None, "application/json",
      ["/kind", "/apiVersion", "/status", "/details/name", "/details/group", "/details/kind"],
      "200 with a Status naming the resource as requested (group events.k8s.io).")
    R(157, "evt-v1-get-missing", "GET through events.k8s.io/v1 of a missing Event",
      "GET", f"{V1}/evt-ops/events/evt-config.1", None, None, "application/json", STATUS_FIELDS,
      "404 naming events.events.k8s.io.")
    R(158, "evt-node-create-generatename-dot", "POST a Node with generateName 'evt-gen.'",
      "POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"generateName": "evt-gen."}},
      "application/json", "application/json", GENERATED_FIELDS,
      "422: every kind whose strategy validates names as DNS subdomains refuses a generateName ending with a dot.")
    R(159, "evt-configmap-create-generatename-dash", "POST a ConfigMap with generateName 'evt-cm-' in evt-ops",
      "POST", f"{CORE}/evt-ops/configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "evt-cm-"}},
      "application/json", "application/json", ["/kind", "/apiVersion", "/metadata/generateName", "/metadata/namespace"],
      "201: a trailing dash is what generateName is for.")


main()
