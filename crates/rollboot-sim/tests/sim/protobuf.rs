//! Protobuf request bodies in the simulated API server: the decoder on the bytes kubectl really
//! sends (kept in the recordings `tests/golden/100-...` onward), kubectl's typed generators
//! against a simulated cluster, and the simulator against what kube-apiserver v1.36 answered to
//! the same protobuf requests.

use crate::common;

use std::path::Path;
use std::process::Command;

use rollboot_sim::sim::kinds::Kind;
use rollboot_sim::sim::protobuf::{self, DecodeError, Message, Shape, Ty};
use rollboot_sim::sim::{Cluster, Scenario};
use serde_json::{json, Value};

// ---- recordings ----

fn golden_dir() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden"))
}

/// The recordings of protobuf requests (100-119), in order.
fn protobuf_goldens() -> Vec<(String, Value)> {
    let mut out: Vec<(String, Value)> = std::fs::read_dir(golden_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_string();
            let n: u32 = name.split('-').next()?.parse().ok()?;
            (100..120).contains(&n).then(|| {
                let v = serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
                (name, v)
            })
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn golden(prefix: &str) -> Value {
    protobuf_goldens()
        .into_iter()
        .find(|(n, _)| n.starts_with(prefix))
        .unwrap_or_else(|| panic!("no recording {prefix}"))
        .1
}

fn b64decode(s: &str) -> Vec<u8> {
    let val = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {c}"),
        }
    };
    let bytes: Vec<u8> = s.bytes().filter(|c| *c != b'=').collect();
    let mut out = Vec::new();
    for chunk in bytes.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, c)| acc | (val(*c) << (18 - 6 * i)));
        for i in 0..chunk.len() - 1 {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    out
}

/// The request body of a recording, as sent.
fn recorded_body(prefix: &str) -> Vec<u8> {
    b64decode(golden(prefix)["request"]["body_base64"].as_str().unwrap())
}

// ---- a protobuf writer for hand-made bodies (the layout of Go's generated marshal) ----

fn varint(mut n: u64, out: &mut Vec<u8>) {
    loop {
        let b = (n & 0x7f) as u8;
        n >>= 7;
        if n == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

fn key(number: u32, wire: u8) -> Vec<u8> {
    let mut out = Vec::new();
    varint(u64::from(number) << 3 | u64::from(wire), &mut out);
    out
}

fn bytes(number: u32, v: &[u8]) -> Vec<u8> {
    let mut out = key(number, 2);
    varint(v.len() as u64, &mut out);
    out.extend_from_slice(v);
    out
}

fn s(number: u32, v: &str) -> Vec<u8> {
    bytes(number, v.as_bytes())
}

fn int(number: u32, v: i64) -> Vec<u8> {
    let mut out = key(number, 0);
    varint(v as u64, &mut out);
    out
}

fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
    let mut out = b"k8s\0".to_vec();
    out.extend(bytes(1, &[s(1, api_version), s(2, kind)].concat()));
    out.extend(bytes(2, raw));
    out.extend(s(3, ""));
    out.extend(s(4, ""));
    out
}

/// ObjectMeta as Go writes it: every non-pointer field, empty or not.
fn meta(name: &str, namespace: &str) -> Vec<u8> {
    [
        s(1, name),
        s(2, ""),
        s(3, namespace),
        s(4, ""),
        s(5, ""),
        s(6, ""),
        int(7, 0),
        bytes(8, &[]),
    ]
    .concat()
}

fn decode(kind: Kind, body: &[u8]) -> Value {
    protobuf::decode_object(kind, body).unwrap_or_else(|e| panic!("{e}"))
}

// ---- the decoder on what kubectl sends ----

#[test]
fn kubectl_create_namespace_bytes_decode_to_the_json_kubectl_would_send() {
    let v = decode(Kind::Namespace, &recorded_body("100-"));
    // Every empty string, 0 and the zero creationTimestamp kubectl wrote are unset; the empty
    // spec and status messages stay empty objects, as Go's JSON writes them.
    assert_eq!(
        v,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "proto-golden"},
            "spec": {}, "status": {}})
    );
}

#[test]
fn kubectl_create_deployment_bytes_decode_to_the_json_kubectl_would_send() {
    let v = decode(Kind::Deployment, &recorded_body("101-"));
    assert_eq!(
        v,
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "proto-golden", "labels": {"app": "web"}},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "nginx", "image": "nginx:1.27",
                        "ports": [{"containerPort": 80}], "resources": {}}]},
                },
                "strategy": {},
            },
            "status": {},
        })
    );
}

/// The same objects as kubectl renders them itself in JSON (`--dry-run=client -o json`, for the
/// generators that need no server for it), when kubectl is installed: the decoder reads
/// kubectl's protobuf as kubectl's JSON says.
#[test]
fn decoded_bodies_equal_kubectls_own_json_rendering() {
    let cases: [(&str, Kind, &[&str]); 5] = [
        (
            "100-",
            Kind::Namespace,
            &["create", "namespace", "proto-golden"],
        ),
        (
            "101-",
            Kind::Deployment,
            &[
                "create",
                "deployment",
                "web",
                "-n",
                "proto-golden",
                "--image=nginx:1.27",
                "--replicas=3",
                "--port=80",
            ],
        ),
        (
            "102-",
            Kind::ConfigMap,
            &[
                "create",
                "configmap",
                "settings",
                "-n",
                "proto-golden",
                "--from-literal=mode=fast",
                "--from-literal=level=3",
            ],
        ),
        (
            "104-",
            Kind::Pdb,
            &[
                "create",
                "pdb",
                "web-min",
                "-n",
                "proto-golden",
                "--selector=app=web",
                "--min-available=2",
            ],
        ),
        (
            "105-",
            Kind::Pdb,
            &[
                "create",
                "pdb",
                "web-max",
                "-n",
                "proto-golden",
                "--selector=app=web",
                "--max-unavailable=25%",
            ],
        ),
    ];
    for (prefix, kind, args) in cases {
        let out = match Command::new("kubectl")
            .args(args)
            .args(["--dry-run=client", "-o", "json"])
            .env("KUBECONFIG", "/dev/null")
            .output()
        {
            Ok(o) => o,
            Err(e) => {
                eprintln!("kubectl not runnable ({e}); skipping the comparison with its JSON");
                return;
            }
        };
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut expected: Value = serde_json::from_slice(&out.stdout).unwrap();
        // Go writes a zero time as null; the decoder leaves it out (the same to the server).
        expected["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("creationTimestamp");
        if let Some(t) = expected.pointer_mut("/spec/template/metadata") {
            t.as_object_mut().unwrap().remove("creationTimestamp");
        }
        assert_eq!(decode(kind, &recorded_body(prefix)), expected, "{prefix}");
    }
}

#[test]
fn int_or_string_reads_as_a_number_or_a_string_by_its_type() {
    let min = decode(Kind::Pdb, &recorded_body("104-"));
    assert_eq!(min["spec"]["minAvailable"], json!(2));
    assert!(min["spec"].get("maxUnavailable").is_none());
    let max = decode(Kind::Pdb, &recorded_body("105-"));
    assert_eq!(max["spec"]["maxUnavailable"], json!("25%"));
    // The status kubectl sends has zero counters that Go's JSON writes too (no omitempty).
    assert_eq!(
        max["status"],
        json!({"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0})
    );
}

#[test]
fn an_empty_string_in_a_repeated_field_is_an_element_not_an_unset_value() {
    let role = decode(Kind::Role, &recorded_body("106-"));
    assert_eq!(
        role["rules"],
        json!([{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"]}])
    );
}

#[test]
fn a_pointer_field_sent_as_zero_stays_zero() {
    // replicas is *int32: Go writes it only when set, so 0 means "zero replicas".
    let spec = [int(1, 0), int(5, 0), int(7, 0)].concat();
    let body = envelope(
        "apps/v1",
        "Deployment",
        &[bytes(1, &meta("zero", "ns")), bytes(2, &spec)].concat(),
    );
    let v = decode(Kind::Deployment, &body);
    assert_eq!(v["spec"], json!({"replicas": 0}));
}

#[test]
fn times_quantities_bytes_managed_fields_and_inline_references_decode_as_json_has_them() {
    let cm_ref = [bytes(1, &s(1, "settings")), s(2, "mode"), int(3, 1)].concat();
    let env = [s(1, "MODE"), s(2, ""), bytes(3, &bytes(3, &cm_ref))].concat();
    let limits = [s(1, "memory"), bytes(2, &s(1, "64Mi"))].concat();
    let container = [
        s(1, "app"),
        s(2, "busybox"),
        bytes(7, &env),
        bytes(8, &bytes(1, &limits)),
    ]
    .concat();
    // supplementalGroups: one packed run and one unpacked element, both allowed in proto2.
    let mut packed = Vec::new();
    varint(10, &mut packed);
    varint(20, &mut packed);
    let sec = [bytes(4, &packed), int(4, 30)].concat();
    let spec = [bytes(2, &container), bytes(14, &sec)].concat();
    let managed = [
        s(1, "kubectl-create"),
        s(2, "Update"),
        bytes(4, &[int(1, 1_700_000_000), int(2, 5)].concat()),
        s(6, "FieldsV1"),
        bytes(7, &bytes(1, br#"{"f:metadata":{}}"#)),
    ]
    .concat();
    let md = [
        meta("p", "ns"),
        bytes(9, &int(1, 1_700_000_060)),
        bytes(17, &managed),
    ]
    .concat();
    let body = envelope("v1", "Pod", &[bytes(1, &md), bytes(2, &spec)].concat());
    let v = decode(Kind::Pod, &body);
    assert_eq!(v["metadata"]["deletionTimestamp"], "2023-11-14T22:14:20Z");
    assert_eq!(
        v["metadata"]["managedFields"],
        json!([{"manager": "kubectl-create", "operation": "Update",
            "time": "2023-11-14T22:13:20Z", "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {}}}])
    );
    let c = &v["spec"]["containers"][0];
    assert_eq!(c["resources"], json!({"limits": {"memory": "64Mi"}}));
    assert_eq!(
        c["env"][0],
        json!({"name": "MODE", "valueFrom": {"configMapKeyRef":
            {"name": "settings", "key": "mode", "optional": true}}})
    );
    assert_eq!(
        v["spec"]["securityContext"]["supplementalGroups"],
        json!([10, 20, 30])
    );

    let cm = [
        bytes(1, &meta("bin", "ns")),
        bytes(3, &[s(1, "blob"), bytes(2, &[0, 1, 2, 250, 251])].concat()),
    ]
    .concat();
    let v = decode(Kind::ConfigMap, &envelope("v1", "ConfigMap", &cm));
    assert_eq!(v["binaryData"], json!({"blob": "AAEC+vs="}));
}

#[test]
fn an_unknown_field_number_is_refused_with_the_message_type_and_number() {
    let spec = [bytes(2, &s(1, "app")), int(99, 1)].concat();
    let body = envelope(
        "v1",
        "Pod",
        &[bytes(1, &meta("p", "ns")), bytes(2, &spec)].concat(),
    );
    let err = protobuf::decode_object(Kind::Pod, &body).unwrap_err();
    assert_eq!(err.code, 400);
    assert_eq!(err.reason, Some("BadRequest"));
    assert_eq!(
        err.message.as_deref(),
        Some(
            "Pod in version \"v1\" cannot be handled as a Pod: protobuf field number 99 (wire \
             type 0) of k8s.io.api.core.v1.PodSpec is not in the simulated API server's protobuf \
             table; it is refused rather than dropped"
        )
    );
    // The typed error underneath, for the envelope and for a nested message alike.
    let mut bad = b"k8s\0".to_vec();
    bad.extend(int(7, 1));
    assert_eq!(
        protobuf::envelope(&bad).unwrap_err(),
        DecodeError::UnknownField {
            message: "k8s.io.apimachinery.pkg.runtime.Unknown",
            number: 7,
            wire: 0
        }
    );
}

#[test]
fn malformed_bodies_get_the_words_of_kube_apiservers_decoder() {
    assert_eq!(protobuf::envelope(b"").unwrap_err(), DecodeError::EmptyData);
    assert_eq!(
        protobuf::envelope(b"k8s\0").unwrap_err(),
        DecodeError::EmptyBody
    );
    assert_eq!(protobuf::envelope(b"{}").unwrap_err(), DecodeError::NoMagic);
    let mut overflow = b"k8s\0".to_vec();
    overflow.extend([0xff; 11]);
    assert_eq!(
        protobuf::envelope(&overflow).unwrap_err(),
        DecodeError::IntOverflow
    );
    // A field whose length runs past the end fails as such, before it is found unknown.
    let mut cut = b"k8s\0".to_vec();
    cut.extend(key(12, 2));
    cut.push(105);
    assert_eq!(
        protobuf::envelope(&cut).unwrap_err(),
        DecodeError::UnexpectedEof
    );
    // A known field with the wrong wire type.
    let body = envelope("v1", "Namespace", &int(1, 3));
    let err = protobuf::decode_object(Kind::Namespace, &body).unwrap_err();
    assert_eq!(
        err.message.as_deref(),
        Some(
            "Namespace in version \"v1\" cannot be handled as a Namespace: proto: wrong \
             wireType = 0 for field metadata of k8s.io.api.core.v1.Namespace"
        )
    );
}

#[test]
fn a_served_kind_without_a_table_is_refused_by_name() {
    let body = envelope("v1", "Node", &bytes(1, &meta("n", "")));
    let err = protobuf::decode_object(Kind::Node, &body).unwrap_err();
    assert_eq!(err.code, 400);
    assert_eq!(
        err.message.as_deref(),
        Some(
            "Node in version \"v1\" cannot be handled as a Node: the simulated API server has \
             no protobuf table for v1 Node; send it as JSON"
        )
    );
}

/// A body setting every field the table knows, once, with a non-zero value.
fn every_field(msg: &Message) -> Vec<u8> {
    fn one(number: u32, ty: Ty) -> Vec<u8> {
        match ty {
            Ty::Str => s(number, "x"),
            Ty::Bool => int(number, 1),
            Ty::I32 | Ty::I64 => int(number, 7),
            Ty::Bytes => bytes(number, b"hi"),
            Ty::Msg(m) | Ty::Inline(m) => bytes(number, &every_field(m)),
            Ty::IntOrString => bytes(number, &[int(1, 1), s(3, "50%")].concat()),
            Ty::Quantity => bytes(number, &s(1, "1")),
            Ty::Time => bytes(number, &int(1, 1_700_000_000)),
            Ty::FieldsV1 => bytes(number, &bytes(1, br#"{"f:x":{}}"#)),
        }
    }
    msg.fields
        .iter()
        .flat_map(|f| match f.shape {
            Shape::Map => bytes(f.number, &[s(1, "k"), one(2, f.ty)].concat()),
            _ => one(f.number, f.ty),
        })
        .collect()
}

/// Every JSON name of `msg` is present in `v` (recursively): nothing was dropped.
fn assert_all_present(msg: &Message, v: &Value, at: &str) {
    for f in msg.fields {
        let (field_value, inner) = match f.ty {
            Ty::Inline(m) => (v, Some(m)),
            Ty::Msg(m) => (&v[f.json], Some(m)),
            _ => (&v[f.json], None),
        };
        assert!(
            !field_value.is_null(),
            "{at}.{} ({} field {}) missing",
            f.json,
            msg.name,
            f.number
        );
        if let Some(m) = inner {
            let item = match f.shape {
                Shape::Repeated => &field_value[0],
                Shape::Map => &field_value["k"],
                _ => field_value,
            };
            assert_all_present(m, item, &format!("{at}.{}", f.json));
        }
    }
}

/// The table only holds fields the simulator's storage types keep (k8s-openapi), under the
/// JSON names those types use: a body setting every field decodes, survives storage and has
/// them all.
#[test]
fn every_field_in_the_table_survives_storage_under_its_json_name() {
    for kind in Kind::ALL {
        let Some(msg) = protobuf::message_of(kind) else {
            continue;
        };
        let body = envelope(kind.api_version(), kind.kind_name(), &every_field(msg));
        let v = protobuf::decode_object(kind, &body).unwrap_or_else(|e| panic!("{kind:?}: {e}"));
        assert_all_present(msg, &v, kind.kind_name());
        let stored = kind.canonicalize(v.clone()).unwrap();
        assert_eq!(stored, v, "{kind:?} changes when stored");
    }
    let body = envelope("policy/v1", "Eviction", &every_field(&protobuf::EVICTION));
    let v = protobuf::decode_eviction(&body).unwrap();
    assert_all_present(&protobuf::EVICTION, &v, "Eviction");
}

// ---- the simulator over HTTP ----

fn small() -> Scenario {
    Scenario {
        nodes: 2,
        pods_per_node: 2,
        replicas: 2,
        bare_pods: 0,
        mirror_pods: 0,
        empty_dir_pods: 0,
        daemon_sets: 0,
        pdb_share: 0.0,
        ..Scenario::default()
    }
}

/// One HTTP/1.1 request with a binary body; the status code and the body as JSON.
async fn send(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    content_type: &str,
    body: &[u8],
) -> (u16, Value) {
    let headers = [
        ("Accept", "application/json"),
        ("Content-Type", content_type),
    ];
    let (code, body) = common::request(addr, "test", method, path, &headers, body).await;
    (
        code,
        serde_json::from_str(&body).unwrap_or(Value::String(body)),
    )
}

/// Replays every recorded protobuf request (in order: the first creates the namespace the
/// others use) and compares the status code and the fields each recording lists in `compare`.
#[tokio::test]
async fn the_simulator_answers_recorded_protobuf_requests_as_kube_apiserver_did() {
    let cluster = Cluster::start(small()).await.unwrap();
    let goldens = protobuf_goldens();
    assert!(goldens.len() >= 17, "the recordings 100-116 are there");
    let mut problems = Vec::new();
    for (name, g) in &goldens {
        let req = &g["request"];
        let body = b64decode(req["body_base64"].as_str().unwrap());
        let (code, got) = send(
            cluster.addr(),
            req["method"].as_str().unwrap(),
            req["path"].as_str().unwrap(),
            req["content_type"].as_str().unwrap(),
            &body,
        )
        .await;
        let want = &g["response"]["body"];
        let want_code = g["response"]["status"].as_u64().unwrap() as u16;
        if code != want_code {
            problems.push(format!(
                "{name}: status {code}, kube-apiserver {want_code}: {got}"
            ));
            continue;
        }
        for p in g["compare"].as_array().expect("compare") {
            let p = p.as_str().unwrap();
            if got.pointer(p) != want.pointer(p) {
                problems.push(format!(
                    "{name} {p}: simulator {:?}, kube-apiserver {:?}",
                    got.pointer(p),
                    want.pointer(p)
                ));
            }
        }
    }
    cluster.shutdown().await;
    assert!(problems.is_empty(), "{problems:#?}");
}

#[tokio::test]
async fn an_unknown_field_number_is_a_400_naming_it_not_a_silent_drop() {
    let cluster = Cluster::start(small()).await.unwrap();
    let ns = [
        bytes(1, &meta("proto-unknown", "")),
        bytes(2, &[]),
        bytes(3, &s(1, "")),
        int(99, 7),
    ]
    .concat();
    let (code, body) = send(
        cluster.addr(),
        "POST",
        "/api/v1/namespaces",
        "application/vnd.kubernetes.protobuf",
        &envelope("v1", "Namespace", &ns),
    )
    .await;
    assert_eq!(code, 400, "{body}");
    assert_eq!(body["reason"], "BadRequest");
    assert_eq!(
        body["message"],
        "Namespace in version \"v1\" cannot be handled as a Namespace: protobuf field number 99 \
         (wire type 0) of k8s.io.api.core.v1.Namespace is not in the simulated API server's \
         protobuf table; it is refused rather than dropped"
    );
    let (code, _) = send(
        cluster.addr(),
        "GET",
        "/api/v1/namespaces/proto-unknown",
        "application/json",
        b"",
    )
    .await;
    assert_eq!(code, 404, "nothing was stored");
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_protobuf_eviction_evicts_like_a_json_one() {
    let cluster = Cluster::start(small()).await.unwrap();
    let (_, pods) = send(
        cluster.addr(),
        "GET",
        "/api/v1/pods",
        "application/json",
        b"",
    )
    .await;
    let pod = &pods["items"][0];
    let (ns, name) = (
        pod["metadata"]["namespace"].as_str().unwrap(),
        pod["metadata"]["name"].as_str().unwrap(),
    );
    let body = envelope(
        "policy/v1",
        "Eviction",
        &[bytes(1, &meta(name, ns)), bytes(2, &int(1, 0))].concat(),
    );
    let (code, st) = send(
        cluster.addr(),
        "POST",
        &format!("/api/v1/namespaces/{ns}/pods/{name}/eviction"),
        "application/vnd.kubernetes.protobuf",
        &body,
    )
    .await;
    assert_eq!((code, &st["status"]), (201, &json!("Success")), "{st}");
    let (code, _) = send(
        cluster.addr(),
        "GET",
        &format!("/api/v1/namespaces/{ns}/pods/{name}"),
        "application/json",
        b"",
    )
    .await;
    assert_eq!(
        code, 404,
        "gracePeriodSeconds 0 from the protobuf body: gone at once"
    );
    cluster.shutdown().await;
}

// ---- kubectl against the simulator ----

struct Kubectl {
    kubeconfig: std::path::PathBuf,
    cache: tempfile::TempDir,
}

impl Kubectl {
    fn new(cluster: &Cluster) -> Kubectl {
        let cache = tempfile::tempdir().unwrap();
        let kubeconfig = cache.path().join("kubeconfig");
        cluster.write_kubeconfig(&kubeconfig, "operator").unwrap();
        Kubectl { kubeconfig, cache }
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        Command::new("kubectl")
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .env("KUBECACHEDIR", self.cache.path().join("cache"))
            .output()
            .expect("kubectl runs")
    }

    /// Runs and expects success; returns stdout.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn get(&self, args: &[&str]) -> Value {
        let mut a = vec!["get"];
        a.extend_from_slice(args);
        a.extend_from_slice(&["-o", "json"]);
        serde_json::from_str(&self.ok(&a)).unwrap()
    }
}

fn kubectl_present() -> bool {
    match Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
    {
        Ok(_) => true,
        Err(e) => {
            eprintln!("kubectl not runnable ({e}); skipping the kubectl generator tests");
            false
        }
    }
}

#[test]
fn kubectls_typed_generators_create_what_kubectl_get_reads_back() {
    if !kubectl_present() {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let cluster = rt.block_on(Cluster::start(small())).unwrap();
    let k = Kubectl::new(&cluster);
    let ns = "proto-k";

    assert_eq!(
        k.ok(&["create", "namespace", ns]),
        "namespace/proto-k created\n"
    );
    let v = k.get(&["namespace", ns]);
    assert_eq!(v["metadata"]["labels"]["kubernetes.io/metadata.name"], ns);
    assert_eq!(v["spec"]["finalizers"], json!(["kubernetes"]));
    assert_eq!(v["status"]["phase"], "Active");

    assert_eq!(
        k.ok(&[
            "-n",
            ns,
            "create",
            "deployment",
            "web",
            "--image=nginx:1.27",
            "--replicas=3",
            "--port=80",
        ]),
        "deployment.apps/web created\n"
    );
    let d = k.get(&["-n", ns, "deployment", "web"]);
    assert_eq!(d["metadata"]["labels"], json!({"app": "web"}));
    assert_eq!(d["metadata"]["generation"], 1);
    assert_eq!(
        d["spec"],
        json!({
            "replicas": 3,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [{
                        "name": "nginx", "image": "nginx:1.27",
                        "ports": [{"containerPort": 80, "protocol": "TCP"}],
                        "resources": {},
                        "terminationMessagePath": "/dev/termination-log",
                        "terminationMessagePolicy": "File",
                        "imagePullPolicy": "IfNotPresent",
                    }],
                    "restartPolicy": "Always",
                    "terminationGracePeriodSeconds": 30,
                    "dnsPolicy": "ClusterFirst",
                    "securityContext": {},
                    "schedulerName": "default-scheduler",
                },
            },
            "strategy": {"type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}},
            "revisionHistoryLimit": 10,
            "progressDeadlineSeconds": 600,
        })
    );
    // An untagged image pulls :latest, so Always.
    k.ok(&["-n", ns, "create", "deployment", "edge", "--image=nginx"]);
    let d = k.get(&["-n", ns, "deployment", "edge"]);
    assert_eq!(d["spec"]["replicas"], 1);
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"],
        "Always"
    );

    k.ok(&[
        "-n",
        ns,
        "create",
        "configmap",
        "settings",
        "--from-literal=mode=fast",
        "--from-literal=level=3",
    ]);
    let cm = k.get(&["-n", ns, "configmap", "settings"]);
    assert_eq!(cm["data"], json!({"mode": "fast", "level": "3"}));

    k.ok(&["-n", ns, "create", "serviceaccount", "builder"]);
    let sa = k.get(&["-n", ns, "serviceaccount", "builder"]);
    assert_eq!(sa["metadata"]["namespace"], ns);

    k.ok(&[
        "-n",
        ns,
        "create",
        "pdb",
        "web-min",
        "--selector=app=web",
        "--min-available=2",
    ]);
    k.ok(&[
        "-n",
        ns,
        "create",
        "pdb",
        "web-max",
        "--selector=app=web",
        "--max-unavailable=25%",
    ]);
    let min = k.get(&["-n", ns, "pdb", "web-min"]);
    assert_eq!(
        min["spec"],
        json!({"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}})
    );
    let max = k.get(&["-n", ns, "pdb", "web-max"]);
    assert_eq!(max["spec"]["maxUnavailable"], "25%");

    k.ok(&[
        "-n",
        ns,
        "create",
        "role",
        "pod-reader",
        "--verb=get,list",
        "--resource=pods",
    ]);
    k.ok(&[
        "-n",
        ns,
        "create",
        "rolebinding",
        "pod-reader",
        "--role=pod-reader",
        "--serviceaccount=proto-k:builder",
        "--user=jane",
    ]);
    let rb = k.get(&["-n", ns, "rolebinding", "pod-reader"]);
    assert_eq!(
        rb["subjects"],
        json!([
            {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "jane"},
            {"kind": "ServiceAccount", "name": "builder", "namespace": "proto-k"},
        ])
    );
    assert_eq!(
        rb["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"})
    );
    k.ok(&[
        "create",
        "clusterrole",
        "proto-node-reader",
        "--verb=get",
        "--resource=nodes",
    ]);
    k.ok(&[
        "create",
        "clusterrolebinding",
        "proto-node-reader",
        "--clusterrole=proto-node-reader",
        "--group=ops",
    ]);
    let crb = k.get(&["clusterrolebinding", "proto-node-reader"]);
    assert_eq!(crb["subjects"][0]["name"], "ops");
    k.ok(&["create", "priorityclass", "proto-high", "--value=1000"]);
    let pc = k.get(&["priorityclass", "proto-high"]);
    assert_eq!(
        (
            &pc["value"],
            &pc["preemptionPolicy"],
            &pc["metadata"]["generation"]
        ),
        (&json!(1000), &json!("PreemptLowerPriority"), &json!(1))
    );

    // A kind with no protobuf table: refused with a message that says so.
    let out = k.run(&[
        "-n",
        ns,
        "create",
        "service",
        "clusterip",
        "svc",
        "--tcp=80:8080",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no protobuf table for v1 Service"),
        "kubectl create service: {err}"
    );

    // Created through kubectl and listed like any other object.
    let all = k.get(&["-n", ns, "deployments"]);
    let names: Vec<&str> = all["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["edge", "web"]);
    rt.block_on(cluster.shutdown());
}
