//! Events in the simulated kube-apiserver, as kube-apiserver v1.36 does them: one storage read
//! through core/v1 and events.k8s.io/v1, the real validation of both versions, their field
//! selectors, the server-side Table, and what kubectl shows of an Event written with kube's
//! own `Recorder` (the way rollboot writes them).
//!
//! The recordings `tests/golden/120-159` (made by `tests/golden/record-events.py` against a
//! real control plane) are replayed in order against one simulator and compared on their
//! status code and on the JSON pointers each lists in `compare`.

use crate::common;

use std::process::Command;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Event as CoreEvent, Node, ObjectReference};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::events::{Event as RecorderEvent, EventType, Recorder, Reporter};
use kube::Resource;
use rollboot_sim::sim::{Cluster, Scenario};
use serde_json::{json, Value};

fn small() -> Scenario {
    Scenario {
        nodes: 2,
        pods_per_node: 1,
        replicas: 1,
        pdb_share: 0.0,
        bare_pods: 0,
        mirror_pods: 0,
        empty_dir_pods: 0,
        time_factor: 0.01,
        ..Scenario::default()
    }
}

/// One HTTP/1.1 exchange with the simulator, with the given headers (kube's client would
/// retry or hide what these tests compare). Returns the status code and the de-chunked body.
async fn send(
    c: &Cluster,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Value) {
    let (code, out) =
        common::request(c.addr(), "test", method, path, headers, body.as_bytes()).await;
    (
        code,
        serde_json::from_str(&out).unwrap_or(Value::String(out)),
    )
}

async fn post(c: &Cluster, path: &str, body: &Value) -> (u16, Value) {
    send(
        c,
        "POST",
        path,
        &[("Content-Type", "application/json")],
        &body.to_string(),
    )
    .await
}

async fn get(c: &Cluster, path: &str) -> (u16, Value) {
    send(c, "GET", path, &[("Accept", "application/json")], "").await
}

/// The recordings of this area (120-159), in order.
fn recordings() -> Vec<(String, Value)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden");
    let mut files: Vec<(u32, String, Value)> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().to_string();
            let n: u32 = name.split('-').next()?.parse().ok()?;
            ((120..160).contains(&n) && name.ends_with(".json")).then(|| {
                let text = std::fs::read_to_string(format!("{dir}/{name}")).unwrap();
                (n, name, serde_json::from_str(&text).unwrap())
            })
        })
        .collect();
    files.sort_by_key(|(n, _, _)| *n);
    files.into_iter().map(|(_, name, v)| (name, v)).collect()
}

/// Replays every recording of tests/golden/120-159 against one simulator, in order, and
/// compares the status code and each `compare` pointer with what the real server answered.
#[tokio::test]
async fn every_recorded_event_exchange_is_answered_as_kube_apiserver_did() {
    let cluster = Cluster::start(small()).await.unwrap();
    let c = &cluster;
    let recs = recordings();
    assert_eq!(recs.len(), 40, "recordings 120-159");
    let mut mismatches = Vec::new();
    for (name, rec) in &recs {
        let req = &rec["request"];
        let method = req["method"].as_str().unwrap();
        let path = req["path"].as_str().unwrap();
        let body = match &req["body"] {
            Value::Null => String::new(),
            Value::String(s) => s.clone(),
            v => v.to_string(),
        };
        let mut headers = vec![(
            "Accept",
            req["headers"]["Accept"]
                .as_str()
                .unwrap_or("application/json"),
        )];
        if let Some(ct) = req["content_type"].as_str() {
            headers.push(("Content-Type", ct));
        }
        let (code, got) = send(c, method, path, &headers, &body).await;
        let want_code = rec["response"]["status"].as_u64().unwrap() as u16;
        if code != want_code {
            mismatches.push(format!("{name}: status {code}, want {want_code}: {got}"));
            continue;
        }
        let want = &rec["response"]["body"];
        for p in rec["compare"].as_array().unwrap() {
            let p = p.as_str().unwrap();
            let (w, g) = (
                want.pointer(p).unwrap_or(&Value::Null),
                got.pointer(p).unwrap_or(&Value::Null),
            );
            if w != g {
                mismatches.push(format!("{name} {p}:\n  real: {w}\n  sim:  {g}"));
            }
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} differences from kube-apiserver:\n{}",
        mismatches.len(),
        mismatches.join("\n")
    );
    cluster.shutdown().await;
}

fn node_reference(name: &str, uid: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(name.into()),
        uid: Some(uid.into()),
        ..Default::default()
    }
}

/// An Event as rollboot writes it today: events.k8s.io/v1 with eventTime and reporting fields.
fn node_event(node: &str) -> Event {
    Event {
        event_time: Some(rollboot::time::micro(chrono::Utc::now())),
        action: Some("Cordon".into()),
        reason: Some("Cordoned".into()),
        note: Some(format!("cordoned {node}")),
        type_: Some("Normal".into()),
        reporting_controller: Some("rollboot.dev/controller".into()),
        reporting_instance: Some("controller-0".into()),
        regarding: Some(node_reference(node, node)),
        ..Default::default()
    }
}

fn cause_fields(err: &kube::Error) -> Vec<String> {
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 422, "{s:?}");
            s.details
                .as_ref()
                .map(|d| d.causes.iter().map(|c| c.field.clone()).collect())
                .unwrap_or_default()
        }
        e => panic!("not an API error: {e}"),
    }
}

/// kube-apiserver refused every Event rollboot wrote into its lock namespace about a Node: a
/// cluster-scoped object's Events live in `default` (or `kube-system`).
#[tokio::test]
async fn an_event_about_a_node_must_live_in_default() {
    let cluster = Cluster::start(small()).await.unwrap();
    let c = &cluster;
    let (code, _) = post(
        c,
        "/api/v1/namespaces",
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "rollboot-system"}}),
    )
    .await;
    assert_eq!(code, 201);
    let client = c.kube_client().await.unwrap();
    let mut ev = node_event("node-0000");
    ev.metadata.name = Some("node-0000.1".into());
    let elsewhere: Api<Event> = Api::namespaced(client.clone(), "rollboot-system");
    let err = elsewhere
        .create(&PostParams::default(), &ev)
        .await
        .unwrap_err();
    assert_eq!(cause_fields(&err), ["involvedObject.namespace"]);
    let core: Api<CoreEvent> = Api::namespaced(client.clone(), "rollboot-system");
    let old_style = CoreEvent {
        metadata: kube::api::ObjectMeta {
            name: Some("node-0000.2".into()),
            ..Default::default()
        },
        involved_object: node_reference("node-0000", "node-0000"),
        reason: Some("Cordoned".into()),
        ..Default::default()
    };
    let err = core
        .create(&PostParams::default(), &old_style)
        .await
        .unwrap_err();
    assert_eq!(cause_fields(&err), ["involvedObject.namespace"]);
    let default: Api<Event> = Api::namespaced(client.clone(), "default");
    default.create(&PostParams::default(), &ev).await.unwrap();
    let system: Api<Event> = Api::namespaced(client, "kube-system");
    system.create(&PostParams::default(), &ev).await.unwrap();
    cluster.shutdown().await;
}

/// One storage: an Event written through events.k8s.io/v1 is listed through core/v1 with the
/// field selectors kubectl uses, converted field by field, and the other way round.
#[tokio::test]
async fn an_event_written_as_events_v1_is_listed_as_core_v1() {
    let cluster = Cluster::start(small()).await.unwrap();
    let client = cluster.kube_client().await.unwrap();
    let v1: Api<Event> = Api::namespaced(client.clone(), "default");
    let mut ev = node_event("node-0001");
    ev.metadata.name = Some("node-0001.abc".into());
    let written = v1.create(&PostParams::default(), &ev).await.unwrap();
    let core: Api<CoreEvent> = Api::all(client.clone());
    let listed = core
        .list(&ListParams::default().fields(
            "involvedObject.kind=Node,involvedObject.name=node-0001,involvedObject.namespace=",
        ))
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    let got = &listed.items[0];
    assert_eq!(got.metadata.name, written.metadata.name);
    assert_eq!(got.metadata.uid, written.metadata.uid);
    assert_eq!(
        got.involved_object,
        node_reference("node-0001", "node-0001")
    );
    assert_eq!(got.message.as_deref(), Some("cordoned node-0001"));
    assert_eq!(
        got.reporting_component.as_deref(),
        Some("rollboot.dev/controller")
    );
    assert_eq!(got.reporting_instance.as_deref(), Some("controller-0"));
    assert_eq!(got.event_time, written.event_time);
    assert!(got.event_time.is_some());
    assert_eq!(got.action.as_deref(), Some("Cordon"));
    assert!(got.first_timestamp.is_none() && got.count.is_none());
    let none = core
        .list(&ListParams::default().fields("involvedObject.kind=Pod"))
        .await
        .unwrap();
    assert!(none.items.is_empty());

    // core/v1 -> events.k8s.io/v1: an old-style Event reads back with the deprecated fields.
    let old = CoreEvent {
        metadata: kube::api::ObjectMeta {
            name: Some("node-0001.old".into()),
            ..Default::default()
        },
        involved_object: node_reference("node-0001", "node-0001"),
        reason: Some("NodeNotReady".into()),
        message: Some("not ready".into()),
        count: Some(3),
        source: Some(k8s_openapi::api::core::v1::EventSource {
            component: Some("kubelet".into()),
            host: Some("node-0001".into()),
        }),
        type_: Some("Warning".into()),
        ..Default::default()
    };
    Api::<CoreEvent>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &old)
        .await
        .unwrap();
    let read = v1.get("node-0001.old").await.unwrap();
    assert_eq!(read.note.as_deref(), Some("not ready"));
    assert_eq!(read.deprecated_count, Some(3));
    assert_eq!(
        read.deprecated_source.unwrap().component.as_deref(),
        Some("kubelet")
    );
    assert_eq!(
        read.regarding,
        Some(node_reference("node-0001", "node-0001"))
    );
    let warnings = v1
        .list(&ListParams::default().fields("regarding.name=node-0001,type=Warning"))
        .await
        .unwrap();
    assert_eq!(warnings.items.len(), 1);
    assert_eq!(warnings.items[0].reason.as_deref(), Some("NodeNotReady"));
    cluster.shutdown().await;
}

/// A watch through events.k8s.io/v1 with a field selector sees an Event written through
/// core/v1, in events.k8s.io/v1 form.
#[tokio::test]
async fn a_watch_of_events_v1_sees_an_event_written_as_core_v1() {
    let cluster = Cluster::start(small()).await.unwrap();
    let client = cluster.kube_client().await.unwrap();
    let v1: Api<Event> = Api::namespaced(client.clone(), "default");
    let mut stream = v1
        .watch(
            &WatchParams::default()
                .fields("regarding.name=node-0000")
                .timeout(10),
            "0",
        )
        .await
        .unwrap()
        .boxed();
    let core: Api<CoreEvent> = Api::namespaced(client, "default");
    for (name, node) in [("node-0001.x", "node-0001"), ("node-0000.x", "node-0000")] {
        let ev = CoreEvent {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            involved_object: node_reference(node, node),
            reason: Some("Rebooted".into()),
            message: Some(format!("{node} rebooted")),
            ..Default::default()
        };
        core.create(&PostParams::default(), &ev).await.unwrap();
    }
    let first = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("a watch event")
        .unwrap()
        .unwrap();
    match first {
        WatchEvent::Added(e) => {
            assert_eq!(e.metadata.name.as_deref(), Some("node-0000.x"));
            assert_eq!(e.note.as_deref(), Some("node-0000 rebooted"));
            assert_eq!(e.regarding, Some(node_reference("node-0000", "node-0000")));
        }
        other => panic!("unexpected {other:?}"),
    }
    cluster.shutdown().await;
}

/// A generateName prefix may end with `-` (the random suffix follows) but not with `.`, for
/// every kind whose names are DNS subdomains (rollboot's `NODE.` was refused); core/v1 Events
/// only get the path-segment check.
#[tokio::test]
async fn generate_name_may_not_end_with_a_dot() {
    let cluster = Cluster::start(small()).await.unwrap();
    let client = cluster.kube_client().await.unwrap();
    let mut ev = node_event("node-0000");
    ev.metadata.generate_name = Some("node-0000.".into());
    let v1: Api<Event> = Api::namespaced(client.clone(), "default");
    let err = v1.create(&PostParams::default(), &ev).await.unwrap_err();
    assert_eq!(cause_fields(&err), ["metadata.generateName"]);
    ev.metadata.generate_name = Some("node-0000-".into());
    let made = v1.create(&PostParams::default(), &ev).await.unwrap();
    let name = made.metadata.name.unwrap();
    assert!(name.starts_with("node-0000-") && name.len() == "node-0000-".len() + 5);

    let cm = |prefix: &str| ConfigMap {
        metadata: kube::api::ObjectMeta {
            generate_name: Some(prefix.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let err = cms
        .create(&PostParams::default(), &cm("cm."))
        .await
        .unwrap_err();
    assert_eq!(cause_fields(&err), ["metadata.generateName"]);
    cms.create(&PostParams::default(), &cm("cm-"))
        .await
        .unwrap();
    let nodes: Api<Node> = Api::all(client.clone());
    let node = Node {
        metadata: kube::api::ObjectMeta {
            generate_name: Some("worker.".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let err = nodes
        .create(&PostParams::default(), &node)
        .await
        .unwrap_err();
    assert_eq!(cause_fields(&err), ["metadata.generateName"]);

    let core: Api<CoreEvent> = Api::namespaced(client, "default");
    let old = CoreEvent {
        metadata: kube::api::ObjectMeta {
            generate_name: Some("node-0000.".into()),
            ..Default::default()
        },
        involved_object: node_reference("node-0000", "node-0000"),
        ..Default::default()
    };
    core.create(&PostParams::default(), &old).await.unwrap();
    cluster.shutdown().await;
}

async fn recorder(cluster: &Cluster) -> (Recorder, kube::Client) {
    let client = cluster.kube_client().await.unwrap();
    let reporter = Reporter {
        controller: "rollboot.dev/controller".into(),
        instance: Some("controller-0".into()),
    };
    (Recorder::new(client.clone(), reporter), client)
}

fn cordoned() -> RecorderEvent {
    RecorderEvent {
        type_: EventType::Normal,
        reason: "Cordoned".into(),
        note: Some("cordoned before its reboot".into()),
        action: "Cordon".into(),
        secondary: None,
    }
}

/// kube's Recorder writes an Event about a Node into `default`, and its repeat within six
/// minutes becomes a merge PATCH adding `series`, which the simulator accepts as the real
/// server does (tests/golden/142).
#[tokio::test]
async fn kubes_recorder_writes_node_events_and_their_series() {
    let cluster = Cluster::start(small()).await.unwrap();
    let (rec, client) = recorder(&cluster).await;
    let node = Api::<Node>::all(client.clone())
        .get("node-0000")
        .await
        .unwrap();
    let reference = node.object_ref(&());
    rec.publish(&cordoned(), &reference).await.unwrap();
    rec.publish(&cordoned(), &reference).await.unwrap();
    let v1: Api<Event> = Api::namespaced(client, "default");
    let all = v1.list(&ListParams::default()).await.unwrap();
    assert_eq!(all.items.len(), 1, "one Event, repeated");
    let ev = &all.items[0];
    assert!(ev
        .metadata
        .name
        .as_deref()
        .unwrap()
        .starts_with("node-0000."));
    assert_eq!(ev.series.as_ref().map(|s| s.count), Some(2));
    assert_eq!(ev.regarding.as_ref().unwrap().uid, node.metadata.uid);
    cluster.shutdown().await;
}

/// Runs kubectl against the simulator; None (after one line saying so) when kubectl is absent.
fn kubectl(kubeconfig: &std::path::Path, args: &[&str]) -> Option<String> {
    let out = match Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            eprintln!("kubectl not runnable ({e}); skipping kubectl {args:?}");
            return None;
        }
    };
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8_lossy(&out.stdout).to_string())
}

/// The line of kubectl's output naming `needle`.
fn line_with<'a>(out: &'a str, needle: &str) -> &'a str {
    out.lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle:?} in:\n{out}"))
}

/// What an operator sees: `kubectl get events -A`, `kubectl get events --field-selector
/// involvedObject.kind=Node`, `kubectl events` and `kubectl describe node` all show an Event
/// that kube's Recorder wrote through events.k8s.io/v1 (describe finds it by the node's uid; an
/// Event whose uid is the node's name, as rollboot wrote them, is found by its second query).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_shows_events_written_by_kubes_recorder() {
    let cluster = Cluster::start(small()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    cluster.write_kubeconfig(&kc, "test").unwrap();
    let (rec, client) = recorder(&cluster).await;
    let node = Api::<Node>::all(client.clone())
        .get("node-0001")
        .await
        .unwrap();
    rec.publish(&cordoned(), &node.object_ref(&()))
        .await
        .unwrap();
    let mut by_name = node_event("node-0001");
    by_name.metadata.name = Some("node-0001.byname".into());
    by_name.reason = Some("Draining".into());
    by_name.note = Some("draining node-0001".into());
    Api::<Event>::namespaced(client, "default")
        .create(&PostParams::default(), &by_name)
        .await
        .unwrap();

    let Some(all) = kubectl(&kc, &["get", "events", "-A"]) else {
        return;
    };
    let header = all.lines().next().unwrap();
    for col in [
        "NAMESPACE",
        "LAST SEEN",
        "TYPE",
        "REASON",
        "OBJECT",
        "MESSAGE",
    ] {
        assert!(header.contains(col), "{header}");
    }
    let line = line_with(&all, "Cordoned");
    for cell in [
        "default",
        "Normal",
        "node/node-0001",
        "cordoned before its reboot",
    ] {
        assert!(line.contains(cell), "{line}");
    }
    let nodes_only = kubectl(
        &kc,
        &[
            "get",
            "events",
            "-n",
            "default",
            "--field-selector",
            "involvedObject.kind=Node",
        ],
    )
    .unwrap();
    assert!(line_with(&nodes_only, "Cordoned").contains("node/node-0001"));
    let pods_only = kubectl(
        &kc,
        &[
            "get",
            "events",
            "-n",
            "default",
            "--field-selector",
            "involvedObject.kind=Pod",
        ],
    )
    .unwrap();
    assert!(!pods_only.contains("Cordoned"), "{pods_only}");

    let events = kubectl(&kc, &["events", "-n", "default"]).unwrap();
    // kubectl events prints the kind as it is (kubectl get lowercases it).
    assert!(line_with(&events, "Cordoned").contains("Node/node-0001"));
    let events_for = kubectl(&kc, &["events", "-A", "--for", "node/node-0001"]).unwrap();
    assert!(events_for.contains("Cordoned") && events_for.contains("Draining"));

    let described = kubectl(&kc, &["describe", "node", "node-0001"]).unwrap();
    let events_section = described
        .split_once("\nEvents:")
        .unwrap_or_else(|| panic!("no Events section:\n{described}"))
        .1;
    let line = line_with(events_section, "Cordoned");
    for cell in [
        "Normal",
        "rollboot.dev/controller",
        "cordoned before its reboot",
    ] {
        assert!(line.contains(cell), "{line}");
    }
    assert!(line_with(events_section, "Draining").contains("draining node-0001"));
    cluster.shutdown().await;
}

/// The Event of a namespaced object lives in that object's namespace, unless it carries an
/// eventTime (then any namespace is accepted, as kube-apiserver does).
#[tokio::test]
async fn a_namespaced_objects_old_style_event_lives_in_its_namespace() {
    let cluster = Cluster::start(small()).await.unwrap();
    let client = cluster.kube_client().await.unwrap();
    let lease = ObjectReference {
        api_version: Some("coordination.k8s.io/v1".into()),
        kind: Some("Lease".into()),
        name: Some("rollboot-lock".into()),
        namespace: Some("kube-system".into()),
        ..Default::default()
    };
    let core: Api<CoreEvent> = Api::namespaced(client.clone(), "default");
    let old = CoreEvent {
        metadata: kube::api::ObjectMeta {
            name: Some("rollboot-lock.1".into()),
            ..Default::default()
        },
        involved_object: lease.clone(),
        reason: Some("LockHeld".into()),
        ..Default::default()
    };
    let err = core.create(&PostParams::default(), &old).await.unwrap_err();
    assert_eq!(cause_fields(&err), ["involvedObject.namespace"]);
    let mut ev = node_event("x");
    ev.regarding = Some(lease);
    ev.metadata.name = Some("rollboot-lock.2".into());
    Api::<Event>::namespaced(client, "default")
        .create(&PostParams::default(), &ev)
        .await
        .unwrap();
    cluster.shutdown().await;
}

/// Updates through events.k8s.io/v1 may not change what an Event says; core/v1 may.
#[tokio::test]
async fn an_events_v1_update_may_not_change_the_event() {
    let cluster = Cluster::start(small()).await.unwrap();
    let c = &cluster;
    let mut ev = serde_json::to_value(node_event("node-0000")).unwrap();
    ev["metadata"] = json!({"name": "node-0000.u"});
    let (code, _) = post(c, "/apis/events.k8s.io/v1/namespaces/default/events", &ev).await;
    assert_eq!(code, 201);
    let patch = |path: &'static str, body: Value| async move {
        send(
            c,
            "PATCH",
            path,
            &[("Content-Type", "application/merge-patch+json")],
            &body.to_string(),
        )
        .await
    };
    let (code, body) = patch(
        "/apis/events.k8s.io/v1/namespaces/default/events/node-0000.u",
        json!({"action": "Drain", "deprecatedCount": 4}),
    )
    .await;
    assert_eq!(code, 422, "{body}");
    let fields: Vec<&str> = body["details"]["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["field"].as_str().unwrap())
        .collect();
    assert_eq!(fields, ["count", "action"]);
    assert_eq!(
        body["details"]["causes"][0]["message"],
        "Invalid value: 4: field is immutable"
    );
    let (code, body) = patch(
        "/api/v1/namespaces/default/events/node-0000.u",
        json!({"action": "Drain"}),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    let (_, read) = get(
        c,
        "/apis/events.k8s.io/v1/namespaces/default/events/node-0000.u",
    )
    .await;
    assert_eq!(read["action"], "Drain");
    cluster.shutdown().await;
}
