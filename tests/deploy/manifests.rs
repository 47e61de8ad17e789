//! The install manifests in `deploy/`: the Kustomize base, the Helm chart's default render, the
//! RBAC derived from the code, the pods' security settings, the admission policy and the
//! Dockerfile.
//!
//! These tests read files and need no helm binary; one starts the in-process simulated cluster
//! for `kubectl apply --dry-run=client`. Where `kubectl`, `hadolint` or the
//! Helm library of the PyPI package helm-python-sdk (through deploy/helm/render.py) is available
//! they are run too; where not, that part is skipped with a note on stderr and the committed
//! golden render stands in for Helm.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{
    ConfigMap, Container, Namespace, PodSpec, Service, ServiceAccount,
};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("reading {rel}: {e}"))
}

/// Every non-empty document of a multi-document YAML text.
fn docs(text: &str, what: &str) -> Vec<Value> {
    yaml_serde::Deserializer::from_str(text)
        .map(|d| Value::deserialize(d).unwrap_or_else(|e| panic!("{what}: {e}")))
        .filter(|v| !v.is_null())
        .collect()
}

/// The objects `kubectl kustomize deploy/` renders: the base has only `resources`, so they are
/// the listed files' documents ([`kubectl_kustomize_renders_exactly_the_listed_files`] checks).
fn kustomize() -> Vec<Value> {
    #[derive(Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Kustomization {
        #[serde(rename = "apiVersion")]
        _api_version: String,
        #[serde(rename = "kind")]
        _kind: String,
        resources: Vec<String>,
    }
    let k: Kustomization =
        yaml_serde::from_str(&read("deploy/kustomization.yaml")).expect("kustomization.yaml");
    k.resources
        .iter()
        .flat_map(|f| docs(&read(&format!("deploy/{f}")), f))
        .collect()
}

fn helm_golden() -> Vec<Value> {
    docs(
        &read("deploy/helm/rollboot/rendered-default.yaml"),
        "rendered-default.yaml",
    )
}

fn s<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// apiVersion, kind, namespace, name.
fn key(v: &Value) -> (String, String, String, String) {
    (
        s(v, "/apiVersion").into(),
        s(v, "/kind").into(),
        s(v, "/metadata/namespace").into(),
        s(v, "/metadata/name").into(),
    )
}

fn by_key(objects: &[Value]) -> BTreeMap<(String, String, String, String), Value> {
    let mut m = BTreeMap::new();
    for o in objects {
        assert!(
            m.insert(key(o), o.clone()).is_none(),
            "duplicate object {:?}",
            key(o)
        );
    }
    m
}

fn find<T: DeserializeOwned>(objects: &[Value], kind: &str, ns: &str, name: &str) -> T {
    let v = objects
        .iter()
        .find(|o| {
            s(o, "/kind") == kind
                && s(o, "/metadata/namespace") == ns
                && s(o, "/metadata/name") == name
        })
        .unwrap_or_else(|| panic!("no {kind} {ns}/{name} in deploy/"));
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{kind} {ns}/{name}: {e}"))
}

/// The first place where `a` and `b` differ, as a JSON pointer.
fn first_difference(a: &Value, b: &Value, at: String) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            x.keys()
                .chain(y.keys())
                .find_map(|k| match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) => first_difference(p, q, format!("{at}/{k}")),
                    (p, q) => Some(format!("{at}/{k}: {p:?} vs {q:?}")),
                })
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .find_map(|(i, (p, q))| first_difference(p, q, format!("{at}/{i}"))),
        _ if a == b => None,
        _ => Some(format!("{at}: {a} vs {b}")),
    }
}

/// Parses `v` as `T` and serializes it back: a field `T` does not know (a typo, a field of a newer
/// API) is dropped on the way, and shows up as a difference.
fn round_trip<T: DeserializeOwned + Serialize>(v: &Value) -> Result<(), String> {
    let t: T = serde_json::from_value(v.clone()).map_err(|e| e.to_string())?;
    let back = serde_json::to_value(&t).map_err(|e| e.to_string())?;
    match first_difference(v, &back, String::new()) {
        None => Ok(()),
        Some(d) => Err(format!("not kept by the typed object: {d}")),
    }
}

fn parses_as_its_type(v: &Value) -> Result<(), String> {
    match (s(v, "/apiVersion"), s(v, "/kind")) {
        ("v1", "Namespace") => round_trip::<Namespace>(v),
        ("v1", "ServiceAccount") => round_trip::<ServiceAccount>(v),
        ("v1", "ConfigMap") => round_trip::<ConfigMap>(v),
        ("v1", "Service") => round_trip::<Service>(v),
        ("apps/v1", "Deployment") => round_trip::<Deployment>(v),
        ("apps/v1", "DaemonSet") => round_trip::<DaemonSet>(v),
        ("policy/v1", "PodDisruptionBudget") => round_trip::<PodDisruptionBudget>(v),
        ("scheduling.k8s.io/v1", "PriorityClass") => round_trip::<PriorityClass>(v),
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => round_trip::<ClusterRole>(v),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => {
            round_trip::<ClusterRoleBinding>(v)
        }
        ("rbac.authorization.k8s.io/v1", "Role") => round_trip::<Role>(v),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => round_trip::<RoleBinding>(v),
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy") => {
            round_trip::<ValidatingAdmissionPolicy>(v)
        }
        ("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding") => {
            round_trip::<ValidatingAdmissionPolicyBinding>(v)
        }
        (api, kind) => Err(format!("unexpected {api} {kind}")),
    }
}

#[test]
fn every_kustomize_and_helm_object_parses_as_its_kubernetes_type_with_no_unknown_field() {
    let optional = docs(&read("deploy/optional/force-delete-rbac.yaml"), "optional");
    let operator = docs(&read("deploy/optional/operator-rbac.yaml"), "operator");
    let all: Vec<Value> = kustomize()
        .into_iter()
        .chain(helm_golden())
        .chain(optional)
        .chain(operator)
        .collect();
    let problems: Vec<String> = all
        .iter()
        .filter_map(|v| {
            parses_as_its_type(v)
                .err()
                .map(|e| format!("{:?}: {e}", key(v)))
        })
        .collect();
    assert!(problems.is_empty(), "{problems:#?}");
    assert_eq!(kustomize().len(), 23, "objects in the Kustomize base");
}

#[test]
fn kubectl_kustomize_renders_exactly_the_listed_files() {
    let out = match Command::new("kubectl")
        .args(["kustomize", "deploy/"])
        .current_dir(root())
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            eprintln!("kubectl not runnable ({e}); skipping the kubectl kustomize comparison");
            return;
        }
    };
    assert!(
        out.status.success(),
        "kubectl kustomize deploy/: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered = by_key(&docs(
        &String::from_utf8_lossy(&out.stdout),
        "kubectl kustomize",
    ));
    assert_eq!(rendered, by_key(&kustomize()));
}

/// Runs `kubectl ARGS` in the crate root with its discovery cache in `cache`; `None` when
/// kubectl cannot be started.
fn kubectl(args: &[&str], cache: &Path) -> Option<std::process::Output> {
    match Command::new("kubectl")
        .args(args)
        .env("KUBECACHEDIR", cache)
        .current_dir(root())
        .output()
    {
        Ok(o) => Some(o),
        Err(e) => {
            eprintln!("kubectl not runnable ({e}); skipping kubectl {args:?}");
            None
        }
    }
}

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Issue 5's check: `kubectl apply -k deploy/ --dry-run=client -o yaml` renders against a
/// server (the simulator: kubectl needs discovery and `/openapi/v3` even for a client dry run),
/// every object it prints parses as its k8s-openapi type with no unknown field, and they are the
/// objects of `kubectl kustomize deploy/`, each plus only the last-applied annotation (which
/// holds that very object). Then the same base is applied for real to the simulator (with
/// kubectl's default `--validate=strict`, so the server refuses unknown fields) and read back.
#[test]
fn kubectl_apply_dry_run_renders_the_base_against_the_simulator() {
    let cache = tempfile::tempdir().unwrap();
    let Some(kustomized) = kubectl(&["kustomize", "deploy/"], cache.path()) else {
        return;
    };
    assert!(kustomized.status.success());
    let expected = by_key(&docs(
        &String::from_utf8_lossy(&kustomized.stdout),
        "kubectl kustomize",
    ));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let sc = rollboot_sim::sim::Scenario {
        nodes: 1,
        pods_per_node: 1,
        ..Default::default()
    };
    let cluster = rt.block_on(rollboot_sim::sim::Cluster::start(sc)).unwrap();
    let kubeconfig = cache.path().join("kubeconfig");
    cluster.write_kubeconfig(&kubeconfig, "operator").unwrap();
    let kc = kubeconfig.to_str().unwrap();

    let out = kubectl(
        &[
            "--kubeconfig",
            kc,
            "apply",
            "-k",
            "deploy/",
            "--dry-run=client",
            "-o",
            "yaml",
        ],
        cache.path(),
    )
    .unwrap();
    assert!(
        out.status.success(),
        "kubectl apply -k deploy/ --dry-run=client -o yaml: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list = docs(
        &String::from_utf8_lossy(&out.stdout),
        "kubectl apply output",
    );
    assert_eq!(list.len(), 1, "one List");
    assert_eq!(s(&list[0], "/kind"), "List");
    let items = list[0]["items"].as_array().expect("items").clone();
    let problems: Vec<String> = items
        .iter()
        .filter_map(|v| {
            parses_as_its_type(v)
                .err()
                .map(|e| format!("{:?}: {e}", key(v)))
        })
        .collect();
    assert!(problems.is_empty(), "{problems:#?}");
    let mut printed = Vec::new();
    for mut item in items {
        let k = key(&item);
        let annotations = item["metadata"]["annotations"]
            .as_object_mut()
            .unwrap_or_else(|| panic!("{k:?} has no annotations"));
        let applied = annotations
            .remove(LAST_APPLIED)
            .unwrap_or_else(|| panic!("no {LAST_APPLIED}"));
        if annotations.is_empty() {
            item["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("annotations");
        }
        // The annotation is the object as given (with an empty annotations map if it had none).
        let mut applied: Value = serde_json::from_str(applied.as_str().unwrap()).unwrap();
        if applied["metadata"]["annotations"] == serde_json::json!({}) {
            applied["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("annotations");
        }
        assert_eq!(
            first_difference(&applied, &item, String::new()),
            None,
            "{:?}: last-applied differs",
            key(&item)
        );
        printed.push(item);
    }
    let printed = by_key(&printed);
    assert_eq!(
        printed.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>(),
        "the same objects as kubectl kustomize"
    );
    for (k, v) in &expected {
        assert_eq!(
            first_difference(v, &printed[k], String::new()),
            None,
            "{k:?} differs"
        );
    }

    // For real: every object is accepted (strict field validation) and can be read back.
    let out = kubectl(
        &["--kubeconfig", kc, "apply", "-k", "deploy/"],
        cache.path(),
    )
    .unwrap();
    assert!(
        out.status.success(),
        "kubectl apply -k deploy/: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = kubectl(
        &["--kubeconfig", kc, "get", "-k", "deploy/", "-o", "json"],
        cache.path(),
    )
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stored: Value = serde_json::from_slice(&out.stdout).unwrap();
    let stored = stored["items"].as_array().unwrap();
    assert_eq!(stored.len(), expected.len());
    for v in stored {
        let k = key(v);
        assert!(expected.contains_key(&k), "{k:?} not in the base");
        assert!(s(v, "/metadata/uid").len() == 36, "{k:?} stored");
    }
    rt.block_on(cluster.shutdown());
}

#[test]
fn the_helm_chart_default_render_equals_the_kustomize_base_object_by_object() {
    let helm = by_key(&helm_golden());
    let kust = by_key(&kustomize());
    assert_eq!(
        helm.keys().collect::<Vec<_>>(),
        kust.keys().collect::<Vec<_>>(),
        "the same objects"
    );
    for (k, v) in &kust {
        assert_eq!(
            first_difference(v, &helm[k], String::new()),
            None,
            "{k:?} differs"
        );
    }
}

/// Every `.Values.a.b` a template reads is in values.yaml (a cheap guard, since helm cannot run here).
#[test]
fn every_value_the_helm_templates_read_is_defined_in_values_yaml() {
    let values: Value = yaml_serde::from_str(&read("deploy/helm/rollboot/values.yaml")).unwrap();
    let dir = root().join("deploy/helm/rollboot/templates");
    let mut missing = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for (i, _) in text.match_indices(".Values.") {
            let rest = &text[i + ".Values.".len()..];
            let end = rest
                .find(|c: char| !(c.is_alphanumeric() || c == '.'))
                .unwrap_or(rest.len());
            let pointer = format!("/{}", rest[..end].trim_end_matches('.').replace('.', "/"));
            if values.pointer(&pointer).is_none() {
                missing.push(format!(
                    "{}: .Values{}",
                    path.display(),
                    pointer.replace('/', ".")
                ));
            }
        }
    }
    assert!(missing.is_empty(), "{missing:#?}");
}

fn installed_config(objects: &[Value], ns: &str) -> String {
    let cm: ConfigMap = find(objects, "ConfigMap", ns, "rollboot-config");
    cm.data
        .and_then(|d| d.get("rollboot.yaml").cloned())
        .unwrap_or_else(|| panic!("ConfigMap {ns}/rollboot-config has no rollboot.yaml"))
}

#[test]
fn the_installed_config_is_valid_and_the_same_in_both_namespaces() {
    let objects = kustomize();
    let text = installed_config(&objects, "rollboot-system");
    assert_eq!(text, installed_config(&objects, "rollboot-agent"));
    let config = rollboot::config::parse_str(&text)
        .unwrap_or_else(|e| panic!("the installed config is refused: {e:#?}"));
    // The Leases live where the controller's Role is, under the names the RBAC grants.
    assert_eq!(config.lock.namespace, "rollboot-system");
    assert_eq!(config.leader.namespace, "rollboot-system");
    assert_eq!(config.lock.name, "rollboot-lock");
    assert_eq!(config.leader.name, "rollboot-leader");
    // Safe by default: a window, one node at a time, the first failure halts.
    assert!(
        config.windows.is_some(),
        "no window would reboot right after installing"
    );
    assert_eq!(config.concurrency.max_nodes, 1);
    assert_eq!(config.failures.max_failures, 0);
    assert!(
        !config.drain.force_delete_after_timeout,
        "the base RBAC cannot delete pods"
    );
    // The agent sees the sentinel where the config says it is.
    let ds: DaemonSet = find(&objects, "DaemonSet", "rollboot-agent", "rollboot-agent");
    let pod = ds.spec.unwrap().template.spec.unwrap();
    let sentinel_dir = Path::new(&config.reboot.sentinel_file)
        .parent()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let mount = pod.containers[0]
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.mount_path == sentinel_dir)
        .expect("the sentinel's directory is mounted");
    assert_eq!(mount.read_only, Some(true));
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == mount.name)
        .unwrap();
    // The host's directory of that name, under /host in the container.
    let host_dir = sentinel_dir
        .strip_prefix("/host")
        .expect("the sentinel is read under /host");
    assert_eq!(volume.host_path.as_ref().unwrap().path, host_dir);
}

/// One grant: (namespace or "" for cluster-wide, apiGroup, resource, verb, resourceNames).
type Grant = (String, String, String, String, String);

fn grants(namespace: &str, rules: &[PolicyRule]) -> BTreeSet<Grant> {
    let mut out = BTreeSet::new();
    for r in rules {
        let names = r.resource_names.clone().unwrap_or_default().join(",");
        for g in r.api_groups.iter().flatten() {
            for res in r.resources.iter().flatten() {
                for v in &r.verbs {
                    out.insert((
                        namespace.into(),
                        g.clone(),
                        res.clone(),
                        v.clone(),
                        names.clone(),
                    ));
                }
            }
        }
        assert!(r.non_resource_urls.is_none(), "a non-resource URL grant");
    }
    out
}

/// Everything the service account `ns/name` is granted by the base's bindings.
fn granted_to(objects: &[Value], ns: &str, name: &str) -> BTreeSet<Grant> {
    let is_ours = |subjects: &Option<Vec<k8s_openapi::api::rbac::v1::Subject>>| {
        subjects.iter().flatten().any(|s| {
            s.kind == "ServiceAccount" && s.name == name && s.namespace.as_deref() == Some(ns)
        })
    };
    let mut out = BTreeSet::new();
    for o in objects {
        match s(o, "/kind") {
            "ClusterRoleBinding" => {
                let b: ClusterRoleBinding = serde_json::from_value(o.clone()).unwrap();
                if is_ours(&b.subjects) {
                    assert_eq!(b.role_ref.kind, "ClusterRole");
                    let r: ClusterRole = find(objects, "ClusterRole", "", &b.role_ref.name);
                    out.extend(grants("", &r.rules.unwrap_or_default()));
                }
            }
            "RoleBinding" => {
                let b: RoleBinding = serde_json::from_value(o.clone()).unwrap();
                if is_ours(&b.subjects) {
                    let bns = b.metadata.namespace.clone().unwrap();
                    assert_eq!(
                        b.role_ref.kind, "Role",
                        "no ClusterRole bound per namespace"
                    );
                    let r: Role = find(objects, "Role", &bns, &b.role_ref.name);
                    out.extend(grants(&bns, &r.rules.unwrap_or_default()));
                }
            }
            _ => {}
        }
    }
    out
}

fn expect(rows: &[(&str, &str, &str, &str, &str)]) -> BTreeSet<Grant> {
    rows.iter()
        .map(|(a, b, c, d, e)| {
            (
                a.to_string(),
                b.to_string(),
                c.to_string(),
                d.to_string(),
                e.to_string(),
            )
        })
        .collect()
}

#[test]
fn no_rule_uses_a_wildcard_or_reaches_secrets_or_escalates() {
    let mut optional = docs(&read("deploy/optional/force-delete-rbac.yaml"), "optional");
    optional.extend(docs(
        &read("deploy/optional/operator-rbac.yaml"),
        "operator",
    ));
    for o in kustomize().iter().chain(&helm_golden()).chain(&optional) {
        let rules: Vec<PolicyRule> = match s(o, "/kind") {
            "ClusterRole" => {
                serde_json::from_value::<ClusterRole>(o.clone())
                    .unwrap()
                    .rules
            }
            "Role" => serde_json::from_value::<Role>(o.clone()).unwrap().rules,
            "ClusterRoleBinding" | "RoleBinding" => {
                assert_ne!(s(o, "/roleRef/name"), "cluster-admin", "{:?}", key(o));
                continue;
            }
            _ => continue,
        }
        .unwrap_or_default();
        for (_, group, resource, verb, _) in grants("", &rules) {
            for word in [&group, &resource, &verb] {
                assert!(!word.contains('*'), "wildcard in {:?}: {word}", key(o));
            }
            assert!(
                !matches!(
                    resource.as_str(),
                    "secrets" | "serviceaccounts/token" | "pods/exec" | "nodes/proxy"
                ),
                "{:?} reaches {resource}",
                key(o)
            );
            assert!(
                !matches!(
                    verb.as_str(),
                    "escalate" | "bind" | "impersonate" | "deletecollection"
                ),
                "{:?} grants {verb}",
                key(o)
            );
        }
    }
}

/// The agent's calls (wt-ctl, commit 1b60085):
/// - nodes list+watch, fieldSelector metadata.name (agent/mod.rs:185-195), patch (agent/mod.rs:206-210);
/// - the lock Lease get (agent/mod.rs:234 -> lock.rs:124 -> lease.rs:86);
/// - events.k8s.io Events about its Node, in `default` where kube-apiserver keeps Events about
///   cluster-scoped objects: create, and patch for a repeated Event's series (agent/mod.rs ->
///   controller/events.rs, kube's events recorder).
#[test]
fn the_agent_may_do_exactly_what_the_agent_code_calls() {
    let got = granted_to(&kustomize(), "rollboot-agent", "rollboot-agent");
    let want = expect(&[
        ("", "", "nodes", "list", ""),
        ("", "", "nodes", "watch", ""),
        ("", "", "nodes", "patch", ""),
        (
            "rollboot-system",
            "coordination.k8s.io",
            "leases",
            "get",
            "rollboot-lock",
        ),
        ("default", "events.k8s.io", "events", "create", ""),
        ("default", "events.k8s.io", "events", "patch", ""),
    ]);
    assert_eq!(got, want);
}

/// The controller's calls (wt-ctl, commit 1b60085); see deploy/controller-rbac.yaml for each line.
#[test]
fn the_controller_may_do_exactly_what_the_controller_code_calls() {
    let got = granted_to(&kustomize(), "rollboot-system", "rollboot-controller");
    let leases = "rollboot-leader,rollboot-lock";
    let want = expect(&[
        ("", "", "nodes", "list", ""),
        ("", "", "nodes", "watch", ""),
        ("", "", "nodes", "patch", ""),
        // KEP-5683's maintenance conditions (node_writer.rs, write_status).
        ("", "", "nodes/status", "patch", ""),
        // Another actor's maintenance (node_maintenance.rs, read).
        (
            "",
            "nodemaintenance.medik8s.io",
            "nodemaintenances",
            "list",
            "",
        ),
        ("", "", "pods", "list", ""),
        ("", "", "pods", "watch", ""),
        ("", "", "pods/eviction", "create", ""),
        ("", "apps", "daemonsets", "get", ""),
        ("", "apps", "replicasets", "list", ""),
        ("", "apps", "replicasets", "watch", ""),
        ("", "apps", "statefulsets", "list", ""),
        ("", "apps", "statefulsets", "watch", ""),
        ("", "policy", "poddisruptionbudgets", "list", ""),
        ("", "policy", "poddisruptionbudgets", "watch", ""),
        // drain.order's namespaceSelector; drain.volumes' claims, volumes, CSI drivers and
        // VolumeAttachments (drain/kube_drain.rs).
        ("", "", "namespaces", "get", ""),
        ("", "", "persistentvolumeclaims", "get", ""),
        ("", "", "persistentvolumes", "get", ""),
        ("", "storage.k8s.io", "csidrivers", "get", ""),
        ("", "storage.k8s.io", "volumeattachments", "get", ""),
        (
            "rollboot-system",
            "coordination.k8s.io",
            "leases",
            "get",
            leases,
        ),
        (
            "rollboot-system",
            "coordination.k8s.io",
            "leases",
            "update",
            leases,
        ),
        (
            "rollboot-system",
            "coordination.k8s.io",
            "leases",
            "list",
            "rollboot-lock",
        ),
        (
            "rollboot-system",
            "coordination.k8s.io",
            "leases",
            "watch",
            "rollboot-lock",
        ),
        (
            "rollboot-system",
            "coordination.k8s.io",
            "leases",
            "create",
            "",
        ),
        // Events about the lock Lease stay in its namespace; Events about Nodes go to
        // `default`. kube's events recorder creates, and patches a repeated one (a series).
        ("rollboot-system", "events.k8s.io", "events", "create", ""),
        ("rollboot-system", "events.k8s.io", "events", "patch", ""),
        ("default", "events.k8s.io", "events", "create", ""),
        ("default", "events.k8s.io", "events", "patch", ""),
    ]);
    assert_eq!(got, want);
    assert!(
        !got.iter().any(|g| g.2 == "pods" && g.3 == "delete"),
        "deleting pods is opt-in (deploy/optional/force-delete-rbac.yaml)"
    );
}

fn pod_of_deployment(objects: &[Value]) -> PodSpec {
    let d: Deployment = find(
        objects,
        "Deployment",
        "rollboot-system",
        "rollboot-controller",
    );
    d.spec.unwrap().template.spec.unwrap()
}

fn arg_after(c: &Container, flag: &str) -> Option<String> {
    let args = c.args.clone().unwrap_or_default();
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1).cloned())
}

#[test]
fn the_controller_pod_meets_the_restricted_pod_security_standard() {
    let objects = kustomize();
    let ns: Namespace = find(&objects, "Namespace", "", "rollboot-system");
    let labels = ns.metadata.labels.unwrap();
    assert_eq!(labels["pod-security.kubernetes.io/enforce"], "restricted");
    let pod = pod_of_deployment(&objects);
    let psc = pod.security_context.clone().unwrap();
    assert_eq!(psc.run_as_non_root, Some(true));
    assert_eq!(psc.seccomp_profile.unwrap().type_, "RuntimeDefault");
    assert!(pod.host_pid.is_none() && pod.host_network.is_none() && pod.host_ipc.is_none());
    assert!(pod.volumes.iter().flatten().all(|v| v.host_path.is_none()));
    for c in &pod.containers {
        let sc = c.security_context.clone().unwrap();
        assert_eq!(sc.allow_privilege_escalation, Some(false));
        assert_eq!(sc.read_only_root_filesystem, Some(true));
        let caps = sc.capabilities.unwrap();
        assert_eq!(caps.drop, Some(vec!["ALL".to_string()]));
        assert!(caps.add.is_none());
        assert!(sc.privileged != Some(true));
        assert!(
            c.resources.as_ref().unwrap().requests.is_some(),
            "requests set"
        );
        assert!(c.resources.as_ref().unwrap().limits.is_some(), "limits set");
    }
    let d: Deployment = find(
        &objects,
        "Deployment",
        "rollboot-system",
        "rollboot-controller",
    );
    assert_eq!(d.spec.unwrap().replicas, Some(2));
    assert!(pod.affinity.unwrap().pod_anti_affinity.is_some());
    assert_eq!(pod.priority_class_name.as_deref(), Some("rollboot"));
    let pdb: PodDisruptionBudget = find(
        &objects,
        "PodDisruptionBudget",
        "rollboot-system",
        "rollboot-controller",
    );
    assert!(pdb.spec.unwrap().selector.is_some());
}

#[test]
fn the_controller_probes_metrics_port_and_config_path_match_the_binary() {
    let objects = kustomize();
    let pod = pod_of_deployment(&objects);
    let c = &pod.containers[0];
    assert_eq!(c.args.as_ref().unwrap()[0], "controller");
    // `--metrics-addr` serves /metrics, /healthz and /readyz (`metrics::serve_on`).
    let addr: std::net::SocketAddr = arg_after(c, "--metrics-addr").unwrap().parse().unwrap();
    let port = c
        .ports
        .iter()
        .flatten()
        .find(|p| p.name.as_deref() == Some("http-metrics"))
        .unwrap();
    assert_eq!(port.container_port, i32::from(addr.port()));
    let path = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
        p.as_ref()
            .unwrap()
            .http_get
            .as_ref()
            .unwrap()
            .path
            .clone()
            .unwrap()
    };
    assert_eq!(path(&c.liveness_probe), "/healthz");
    assert_eq!(path(&c.readiness_probe), "/readyz");
    let svc: Service = find(
        &objects,
        "Service",
        "rollboot-system",
        "rollboot-controller-metrics",
    );
    let sp = &svc.spec.unwrap().ports.unwrap()[0];
    assert_eq!(
        sp.target_port,
        Some(
            k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(
                "http-metrics".into()
            )
        )
    );
    // POD_NAME is the replica's identity in the leader Lease (cli.rs:72-74).
    let env = c.env.clone().unwrap();
    let pod_name = env.iter().find(|e| e.name == "POD_NAME").unwrap();
    assert_eq!(
        pod_name
            .value_from
            .as_ref()
            .unwrap()
            .field_ref
            .as_ref()
            .unwrap()
            .field_path,
        "metadata.name"
    );
    assert_config_mounted(&pod, c);
}

fn assert_config_mounted(pod: &PodSpec, c: &Container) {
    let file = arg_after(c, "--config").expect("--config FILE");
    let dir = Path::new(&file).parent().unwrap().to_str().unwrap();
    let m = c
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.mount_path == dir)
        .unwrap();
    let v = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == m.name)
        .unwrap();
    assert_eq!(v.config_map.as_ref().unwrap().name, "rollboot-config");
    assert!(file.ends_with("/rollboot.yaml"), "the ConfigMap's key");
}

#[test]
fn the_agent_runs_on_every_node_with_only_the_documented_privileges() {
    let objects = kustomize();
    let ns: Namespace = find(&objects, "Namespace", "", "rollboot-agent");
    let labels = ns.metadata.labels.unwrap();
    assert_eq!(labels["pod-security.kubernetes.io/enforce"], "privileged");
    assert_eq!(labels["pod-security.kubernetes.io/warn"], "baseline");
    let ds: DaemonSet = find(&objects, "DaemonSet", "rollboot-agent", "rollboot-agent");
    let pod = ds.spec.unwrap().template.spec.unwrap();
    assert_eq!(pod.host_pid, Some(true), "nsenter needs the host's PID 1");
    assert!(pod.host_network.is_none() && pod.host_ipc.is_none());
    let tol = pod.tolerations.clone().unwrap();
    assert_eq!(tol.len(), 1);
    assert_eq!(tol[0].operator.as_deref(), Some("Exists"));
    assert!(
        tol[0].key.is_none() && tol[0].effect.is_none(),
        "tolerates every taint"
    );
    let c = &pod.containers[0];
    assert_eq!(c.args.as_ref().unwrap()[0], "agent");
    let env = c.env.clone().unwrap();
    let node = env
        .iter()
        .find(|e| e.name == "NODE_NAME")
        .expect("NODE_NAME");
    assert_eq!(
        node.value_from
            .as_ref()
            .unwrap()
            .field_ref
            .as_ref()
            .unwrap()
            .field_path,
        "spec.nodeName"
    );
    let sc = c.security_context.clone().unwrap();
    assert_eq!(sc.privileged, Some(false));
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    let caps = sc.capabilities.unwrap();
    assert_eq!(caps.drop, Some(vec!["ALL".to_string()]));
    let added: BTreeSet<String> = caps.add.unwrap().into_iter().collect();
    let documented: BTreeSet<String> = ["SYS_ADMIN", "SYS_CHROOT", "SYS_PTRACE"]
        .map(String::from)
        .into();
    assert_eq!(added, documented);
    let text = read("deploy/agent.yaml");
    for cap in &added {
        assert!(
            text.contains(&format!("CAP_{cap}")),
            "CAP_{cap} is explained in agent.yaml"
        );
    }
    let host_paths: BTreeSet<(String, Option<String>)> = pod
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| v.host_path.as_ref())
        .map(|h| (h.path.clone(), h.type_.clone()))
        .collect();
    assert_eq!(
        host_paths,
        [
            ("/var/run".to_string(), Some("Directory".to_string())),
            // The system bus's directory, created when absent: a host without D-Bus still runs
            // the agent (agent/logind goes on without logind).
            (
                "/run/dbus".to_string(),
                Some("DirectoryOrCreate".to_string())
            ),
        ]
        .into(),
        "two host paths: the sentinel's directory and the system bus's"
    );
    // No mount covers where the runtime mounts the service-account token (a read-only host
    // directory at /var/run kept every agent pod from starting on a real node:
    // RunContainerError, "mkdir .../var/run/secrets: read-only file system"), nor any other
    // path of the container's own: host directories go under /host.
    let token = Path::new("/var/run/secrets/kubernetes.io/serviceaccount");
    for m in c.volume_mounts.iter().flatten() {
        let at = Path::new(&m.mount_path);
        assert!(
            !token.starts_with(at) && !Path::new("/run/secrets").starts_with(at),
            "{} covers the service-account token's mount point",
            m.mount_path
        );
        let host = pod
            .volumes
            .iter()
            .flatten()
            .find(|v| v.name == m.name)
            .is_some_and(|v| v.host_path.is_some());
        assert!(
            !host || at.starts_with("/host/"),
            "host directory mounted at {} instead of under /host",
            m.mount_path
        );
    }
    // The agent's DBUS_SYSTEM_BUS_ADDRESS is the host's socket, in the mounted directory.
    let bus = env
        .iter()
        .find(|e| e.name == "DBUS_SYSTEM_BUS_ADDRESS")
        .and_then(|e| e.value.clone())
        .expect("DBUS_SYSTEM_BUS_ADDRESS");
    let socket = bus
        .strip_prefix("unix:path=")
        .expect("a unix socket address");
    let bus_mount = c
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| Path::new(socket).parent() == Some(Path::new(&m.mount_path)))
        .expect("the system bus socket's directory is mounted");
    let bus_volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == bus_mount.name)
        .unwrap();
    assert_eq!(bus_volume.host_path.as_ref().unwrap().path, "/run/dbus");
    assert_eq!(
        Path::new(socket).file_name(),
        Some(std::ffi::OsStr::new("system_bus_socket"))
    );
    assert!(c
        .volume_mounts
        .iter()
        .flatten()
        .all(|m| m.read_only == Some(true)));
    assert!(c.resources.as_ref().unwrap().limits.is_some());
    assert_config_mounted(&pod, c);
}

#[test]
fn the_admission_policy_binds_to_the_agent_identity_and_names_only_its_annotations() {
    let objects = kustomize();
    let p: ValidatingAdmissionPolicy = find(
        &objects,
        "ValidatingAdmissionPolicy",
        "",
        "rollboot-agent-own-node",
    );
    let spec = p.spec.unwrap();
    assert_eq!(spec.failure_policy.as_deref(), Some("Fail"));
    let ds: DaemonSet = find(&objects, "DaemonSet", "rollboot-agent", "rollboot-agent");
    let sa = ds
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .service_account_name
        .unwrap();
    let username = format!("system:serviceaccount:rollboot-agent:{sa}");
    let conds = spec.match_conditions.unwrap();
    assert_eq!(conds.len(), 1);
    assert_eq!(
        conds[0].expression,
        format!("request.userInfo.username == '{username}'")
    );
    let rules = spec.match_constraints.unwrap().resource_rules.unwrap();
    assert!(rules
        .iter()
        .any(|r| r.resources.iter().flatten().any(|x| x == "nodes")
            && r.operations.iter().flatten().any(|o| o == "UPDATE")));
    let vars = spec.variables.unwrap();
    let allowed = &vars
        .iter()
        .find(|v| v.name == "allowed")
        .unwrap()
        .expression;
    // Exactly the keys the agent writes (agent/mod.rs: Agent::act, refuse, check_sentinel,
    // know_host; agent/logind: shutdown-requested; node.rs).
    assert_eq!(
        allowed,
        "['rollboot.dev/reboot-required', 'rollboot.dev/reboot-required-reason', 'rollboot.dev/reboot-ack', 'rollboot.dev/reboot-lost', 'rollboot.dev/reboot-refused', 'rollboot.dev/shutdown-requested', 'rollboot.dev/agent-host']"
    );
    let node_name = &vars
        .iter()
        .find(|v| v.name == "nodeName")
        .unwrap()
        .expression;
    assert!(
        node_name.contains("request.userInfo.extra['authentication.kubernetes.io/node-name'][0]")
    );
    let validations = spec.validations.unwrap();
    assert!(validations
        .iter()
        .any(|v| v.expression == "object.metadata.name == variables.nodeName"));
    assert!(validations
        .iter()
        .any(|v| v.expression == "object.spec == oldObject.spec"));
    assert!(validations
        .iter()
        .all(|v| v.message.is_some() || v.message_expression.is_some()));
    let b: ValidatingAdmissionPolicyBinding = find(
        &objects,
        "ValidatingAdmissionPolicyBinding",
        "",
        "rollboot-agent-own-node",
    );
    let bs = b.spec.unwrap();
    assert_eq!(bs.policy_name.as_deref(), Some("rollboot-agent-own-node"));
    assert_eq!(bs.validation_actions, Some(vec!["Deny".to_string()]));
}

/// Dockerfile instructions, continuation lines joined, comments dropped.
fn instructions(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('#') || (t.is_empty() && cur.is_empty()) {
            continue;
        }
        if let Some(body) = t.strip_suffix('\\') {
            cur.push_str(body);
            cur.push(' ');
            continue;
        }
        cur.push_str(t);
        let (op, args) = cur.split_once(char::is_whitespace).unwrap_or((&cur, ""));
        out.push((op.to_uppercase(), args.trim().to_string()));
        cur.clear();
    }
    assert!(
        cur.is_empty(),
        "the Dockerfile ends inside a continued line"
    );
    out
}

#[test]
fn the_dockerfile_builds_a_nonroot_controller_and_an_agent_stage() {
    let text = read("deploy/Dockerfile");
    let known = [
        "FROM",
        "RUN",
        "COPY",
        "ARG",
        "ENV",
        "WORKDIR",
        "USER",
        "ENTRYPOINT",
        "CMD",
        "EXPOSE",
        "LABEL",
    ];
    let mut stages: Vec<String> = Vec::new();
    let mut users: BTreeMap<String, String> = BTreeMap::new();
    for (op, args) in instructions(&text) {
        assert!(known.contains(&op.as_str()), "unknown instruction {op}");
        match op.as_str() {
            "FROM" => {
                let words: Vec<&str> = args.split_whitespace().collect();
                assert!(
                    words.len() == 3 && words[1].eq_ignore_ascii_case("AS"),
                    "FROM IMAGE AS NAME: {args}"
                );
                stages.push(words[2].to_string());
            }
            "COPY" => {
                if let Some(from) = args.strip_prefix("--from=") {
                    let stage = from.split_whitespace().next().unwrap();
                    assert!(
                        stages[..stages.len() - 1].iter().any(|s| s == stage),
                        "COPY --from={stage}: no earlier stage"
                    );
                } else {
                    // The build context holds only what .dockerignore lets through.
                    let ignore = read(".dockerignore");
                    let words: Vec<&str> = args.split_whitespace().collect();
                    for src in &words[..words.len() - 1] {
                        let src = src.trim_end_matches('/');
                        assert!(
                            ignore
                                .lines()
                                .any(|l| l.trim_start_matches('!').trim_end_matches('/') == src),
                            "{src} is excluded by .dockerignore"
                        );
                    }
                }
            }
            "ENTRYPOINT" | "CMD" => {
                let v: Vec<String> = serde_json::from_str(&args)
                    .unwrap_or_else(|e| panic!("{op} must be exec form (JSON): {e}"));
                assert!(!v.is_empty());
            }
            "USER" => {
                users.insert(stages.last().unwrap().clone(), args.clone());
            }
            _ => {}
        }
    }
    assert_eq!(stages, ["builder", "agent", "controller"]);
    // The images hold the product alone: every build leaves the simulator out.
    let builds: Vec<String> = instructions(&text)
        .into_iter()
        .filter(|(op, args)| op == "RUN" && args.contains("cargo build"))
        .map(|(_, args)| args)
        .collect();
    assert!(!builds.is_empty());
    for b in &builds {
        assert!(
            b.contains("--no-default-features") && b.contains("--profile dist"),
            "an image build with the simulator in it: {b}"
        );
    }
    // Both images carry the man pages the builder's binary writes of itself.
    assert!(
        builds
            .iter()
            .any(|b| b.contains("rollboot man --out /src/man/man1")),
        "no man pages written in the builder"
    );
    let man_copies = instructions(&text)
        .iter()
        .filter(|(op, args)| op == "COPY" && args.ends_with(" /usr/share/man/man1/"))
        .count();
    assert_eq!(man_copies, 2, "each image copies the man pages");
    assert_eq!(
        users["controller"], "65532:65532",
        "the controller image runs as non-root"
    );
    // The controller Deployment runs as the image's user.
    let pod = pod_of_deployment(&kustomize());
    assert_eq!(pod.security_context.unwrap().run_as_user, Some(65532));
    match Command::new("hadolint")
        .arg("deploy/Dockerfile")
        .current_dir(root())
        .output()
    {
        Ok(o) => assert!(
            o.status.success(),
            "hadolint: {}",
            String::from_utf8_lossy(&o.stdout)
        ),
        Err(e) => eprintln!("hadolint not runnable ({e}); only the built-in checks ran"),
    }
}

/// The Dockerfile's instructions by stage, in order: (stage name, its instructions).
fn stages(text: &str) -> Vec<(String, Vec<(String, String)>)> {
    let mut out: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for (op, args) in instructions(text) {
        if op == "FROM" {
            let name = args.split_whitespace().nth(2).unwrap_or_default();
            out.push((name.to_string(), Vec::new()));
        } else if let Some((_, ins)) = out.last_mut() {
            ins.push((op, args));
        }
    }
    out
}

/// The one container of the pod of a Deployment or DaemonSet.
fn container_of(objects: &[Value], kind: &str, ns: &str, name: &str) -> Container {
    let pod = match kind {
        "Deployment" => find::<Deployment>(objects, kind, ns, name)
            .spec
            .unwrap()
            .template
            .spec
            .unwrap(),
        _ => find::<DaemonSet>(objects, kind, ns, name)
            .spec
            .unwrap()
            .template
            .spec
            .unwrap(),
    };
    assert_eq!(pod.containers.len(), 1, "{kind} {name}: one container");
    pod.containers[0].clone()
}

/// (Dockerfile target, kind, namespace, name) of each workload built from the Dockerfile.
const WORKLOADS: [(&str, &str, &str, &str); 2] = [
    (
        "controller",
        "Deployment",
        "rollboot-system",
        "rollboot-controller",
    ),
    ("agent", "DaemonSet", "rollboot-agent", "rollboot-agent"),
];

#[test]
fn the_images_hold_the_binary_the_manifests_run() {
    let stages = stages(&read("deploy/Dockerfile"));
    let (builder, build) = &stages[0];
    // The builder compiles the crate's binary into target/PROFILE/ under its WORKDIR.
    let workdir = build
        .iter()
        .find(|(op, _)| op == "WORKDIR")
        .map(|(_, a)| a.clone())
        .expect("the builder's WORKDIR");
    let cargo_build = build
        .iter()
        .filter(|(op, _)| op == "RUN")
        .map(|(_, a)| a.clone())
        .rfind(|a| a.contains("cargo build"))
        .expect("the builder runs cargo build");
    let words: Vec<&str> = cargo_build.split_whitespace().collect();
    let after = |flag: &str| {
        words
            .iter()
            .position(|w| *w == flag)
            .map(|i| words[i + 1].to_string())
            .unwrap_or_else(|| panic!("cargo build without {flag}: {cargo_build}"))
    };
    let (profile, bin) = (after("--profile"), after("--bin"));
    assert!(
        read("Cargo.toml").contains(&format!("[[bin]]\nname = \"{bin}\"")),
        "--bin {bin} is not the crate's binary"
    );
    assert!(
        read("Cargo.toml").contains(&format!("[profile.{profile}]")),
        "--profile {profile} is not defined in Cargo.toml"
    );
    let artifact = format!("{}/target/{profile}/{bin}", workdir.trim_end_matches('/'));
    // Base images named in full: podman and buildah refuse a short name (`rust:1.89`) unless
    // the host configures an alias or a search registry (Debian's podman does not).
    for (op, args) in instructions(&read("deploy/Dockerfile")) {
        if op == "FROM" {
            let image = args.split_whitespace().next().unwrap();
            let host = image.split('/').next().unwrap();
            assert!(
                image.contains('/') && (host.contains('.') || host.contains(':')),
                "FROM {image}: name the registry"
            );
        }
    }
    // What the build copies from the context exists (and .dockerignore lets it through:
    // the_dockerfile_builds_a_nonroot_controller_and_an_agent_stage).
    for (_, ins) in &stages {
        for (op, args) in ins {
            if op == "COPY" && !args.starts_with("--from=") {
                let words: Vec<&str> = args.split_whitespace().collect();
                for src in &words[..words.len() - 1] {
                    assert!(
                        root().join(src).exists(),
                        "COPY {src}: not in the repository"
                    );
                }
            }
        }
    }
    let objects = kustomize();
    for (target, kind, ns, name) in WORKLOADS {
        let (_, ins) = stages
            .iter()
            .find(|(s, _)| s == target)
            .unwrap_or_else(|| panic!("no stage {target}"));
        // The image holds the builder's binary, and its entrypoint is that binary.
        let dest = ins
            .iter()
            .filter(|(op, _)| op == "COPY")
            .find_map(|(_, a)| {
                let w: Vec<&str> = a.split_whitespace().collect();
                (w.len() == 3 && w[0] == format!("--from={builder}") && w[1] == artifact)
                    .then(|| w[2].to_string())
            })
            .unwrap_or_else(|| panic!("stage {target} does not copy {artifact} from {builder}"));
        let entrypoint: Vec<String> = ins
            .iter()
            .find(|(op, _)| op == "ENTRYPOINT")
            .map(|(_, a)| serde_json::from_str(a).unwrap())
            .unwrap_or_else(|| panic!("stage {target} has no ENTRYPOINT"));
        assert_eq!(entrypoint, [dest], "stage {target}");
        // The pod runs that entrypoint (no `command` replaces it) with a subcommand the binary
        // has: the one named like the stage.
        let c = container_of(&objects, kind, ns, name);
        assert!(
            c.command.is_none(),
            "{kind} {name} replaces the image's entrypoint"
        );
        let args = c.args.clone().unwrap_or_default();
        assert_eq!(
            args.first().map(String::as_str),
            Some(target),
            "{kind} {name}"
        );
        let help = Command::new(env!("CARGO_BIN_EXE_rollboot"))
            .args([target, "--help"])
            .output()
            .unwrap();
        assert!(help.status.success(), "rollboot {target} --help failed");
    }
}

/// The fenced code blocks of a Markdown text: (language, body).
fn code_blocks(md: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut open: Option<(String, String)> = None;
    for line in md.lines() {
        let t = line.trim_start();
        match (&mut open, t.strip_prefix("```")) {
            (None, Some(lang)) => open = Some((lang.trim().to_string(), String::new())),
            (Some(_), Some(_)) => out.push(open.take().unwrap()),
            (Some((_, body)), None) => {
                body.push_str(line);
                body.push('\n');
            }
            (None, None) => {}
        }
    }
    out
}

/// A shell word after `flag` on a command line (`-t NAME`, `--target T`), `$REGISTRY` replaced.
fn shell_arg(line: &str, flag: &str, registry: &str) -> Option<String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let i = words.iter().position(|w| *w == flag)?;
    Some(words.get(i + 1)?.replace("$REGISTRY", registry))
}

#[test]
fn the_install_docs_build_push_and_install_the_images_the_manifests_run() {
    let version = env!("CARGO_PKG_VERSION");
    let objects = kustomize();
    let image = |kind, ns, name| container_of(&objects, kind, ns, name).image.unwrap();
    // The base runs the images the Dockerfile's own example builds, tagged with the crate's
    // version (the Helm chart renders the same objects:
    // the_helm_chart_default_render_equals_the_kustomize_base_object_by_object).
    let dockerfile = read("deploy/Dockerfile");
    for (target, kind, ns, name) in WORKLOADS {
        let run = image(kind, ns, name);
        assert!(
            run.ends_with(&format!(":{version}")),
            "{kind} {name} runs {run}"
        );
        let built: Vec<String> = dockerfile
            .lines()
            .filter(|l| l.contains("build") && l.contains(&format!("--target {target} ")))
            .filter_map(|l| shell_arg(l, "-t", ""))
            .collect();
        assert_eq!(
            built,
            std::slice::from_ref(&run),
            "deploy/Dockerfile's example for {target}"
        );
    }
    for doc in ["deploy/INSTALL.md", "README.md"] {
        let text = read(doc);
        let blocks = code_blocks(&text);
        let registry = blocks
            .iter()
            .flat_map(|(_, b)| b.lines())
            .find_map(|l| l.trim().strip_prefix("REGISTRY="))
            .map(|r| r.split_whitespace().next().unwrap().to_string())
            .unwrap_or_else(|| panic!("{doc}: no REGISTRY= example"));
        let lines: Vec<&str> = blocks
            .iter()
            .filter(|(lang, _)| lang == "sh")
            .flat_map(|(_, b)| b.lines())
            .collect();
        for (target, kind, ns, name) in WORKLOADS {
            // Built offline by scripts/build-image.sh into its archive and copied to
            // REGISTRY/ + the name the base runs; a `docker build` example, where the doc
            // gives one, tags and pushes the same name.
            let want = format!("{registry}/{}", image(kind, ns, name));
            let archive = format!("oci-archive:target/image/rollboot-{target}.tar");
            let copied = lines.iter().any(|l| {
                let w: Vec<String> = l
                    .split_whitespace()
                    .map(|w| w.replace("$REGISTRY", &registry))
                    .collect();
                w.len() >= 4
                    && w[0] == "skopeo"
                    && w[1] == "copy"
                    && w[2] == archive
                    && w[3] == format!("docker://{want}")
            });
            assert!(
                copied,
                "{doc}: `skopeo copy {archive} docker://{want}` is not shown"
            );
            assert!(
                lines
                    .iter()
                    .any(|l| l.trim_start().starts_with("scripts/build-image.sh")),
                "{doc}: scripts/build-image.sh is not shown"
            );
            let built: Vec<String> = lines
                .iter()
                .filter(|l| {
                    l.contains("docker build") && l.contains(&format!("--target {target} "))
                })
                .filter_map(|l| shell_arg(l, "-t", &registry))
                .collect();
            if !built.is_empty() {
                assert_eq!(
                    built,
                    std::slice::from_ref(&want),
                    "{doc}: the docker build of {target}"
                );
                let pushed = lines
                    .iter()
                    .flat_map(|l| l.split("&&"))
                    .filter_map(|l| shell_arg(l, "push", &registry))
                    .any(|p| p == want);
                assert!(pushed, "{doc}: {want} is built with docker but not pushed");
            }
            // Helm is pointed at the same repository (its tags default to the version).
            let helm_key = format!("image.{target}.repository=");
            let repo = lines
                .iter()
                .find_map(|l| {
                    l.split_whitespace()
                        .find_map(|w| w.strip_prefix(helm_key.as_str()))
                })
                .unwrap_or_else(|| panic!("{doc}: no --set {helm_key}"))
                .replace("$REGISTRY", &registry);
            assert_eq!(format!("{repo}:{version}"), want, "{doc}: Helm {target}");
        }
    }
    let values = read("deploy/helm/rollboot/values.yaml");
    assert_eq!(
        values.matches(&format!("tag: \"{version}\"")).count(),
        2,
        "the chart's image tags are the crate's version"
    );
    // The Kustomize directory INSTALL.md tells the user to write, rendered next to a checkout
    // of this repository: it runs the pushed images.
    let install = read("deploy/INSTALL.md");
    let blocks = code_blocks(&install);
    let overlay = blocks
        .iter()
        .find(|(lang, b)| lang == "yaml" && b.contains("kind: Kustomization"))
        .map(|(_, b)| b.clone())
        .expect("INSTALL.md: a kustomization.yaml with images:");
    let registry = blocks
        .iter()
        .flat_map(|(_, b)| b.lines())
        .find_map(|l| l.trim().strip_prefix("REGISTRY="))
        .unwrap()
        .to_string();
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(root(), dir.path().join("rollboot")).unwrap();
    let mine = dir.path().join("mine");
    std::fs::create_dir(&mine).unwrap();
    std::fs::write(mine.join("kustomization.yaml"), &overlay).unwrap();
    let out = match Command::new("kubectl")
        .args(["kustomize", mine.to_str().unwrap()])
        .output()
    {
        Ok(o) => o,
        Err(e) => {
            eprintln!("kubectl not runnable ({e}); the documented overlay was not rendered");
            return;
        }
    };
    assert!(
        out.status.success(),
        "kubectl kustomize of INSTALL.md's overlay: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rendered = docs(&String::from_utf8_lossy(&out.stdout), "the overlay");
    for (_, kind, ns, name) in WORKLOADS {
        let base = image(kind, ns, name);
        let c = container_of(&rendered, kind, ns, name);
        assert_eq!(
            c.image.as_deref(),
            Some(format!("{registry}/{base}").as_str()),
            "the overlay's {kind} {name}"
        );
    }
    assert_eq!(
        rendered.len(),
        objects.len(),
        "the overlay renders the whole base"
    );
}

/// Runs deploy/helm/render.py (real Helm, from the PyPI package helm-python-sdk); `None` when
/// that package is not installed here.
fn helm_render(args: &[&str]) -> Option<String> {
    let probe = Command::new("python3")
        .args(["-c", "import helm_python"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        eprintln!("helm-python-sdk not installed; checking the committed golden render only");
        return None;
    }
    let out = Command::new("python3")
        .arg("deploy/helm/render.py")
        .args(args)
        .current_dir(root())
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "render.py {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8(out.stdout).unwrap())
}

#[test]
fn the_committed_helm_render_is_the_charts_current_render_and_lints_clean() {
    let Some(text) = helm_render(&[]) else {
        return;
    };
    assert_eq!(
        by_key(&docs(&text, "helm render")),
        by_key(&helm_golden()),
        "re-run deploy/helm/render.py --write"
    );
    helm_render(&["--lint"]);
}

/// The chart's `rbac.operator.create` renders the objects of deploy/optional/operator-rbac.yaml
/// (whose grants tests/deploy/rbac_drift.rs checks against the commands), and only with it.
#[test]
fn the_helm_operator_role_is_deploy_optional_operator_rbac() {
    let want = by_key(&docs(
        &read("deploy/optional/operator-rbac.yaml"),
        "operator",
    ));
    assert_eq!(want.len(), 4, "a ClusterRole, a Role and their bindings");
    assert!(helm_golden().iter().all(|o| !want.contains_key(&key(o))));
    let Some(text) = helm_render(&["--values", r#"{"rbac": {"operator": {"create": true}}}"#])
    else {
        return;
    };
    let rendered = by_key(&docs(&text, "helm render with the operator role"));
    for (k, v) in &want {
        let got = rendered
            .get(k)
            .unwrap_or_else(|| panic!("{k:?} not rendered"));
        assert_eq!(
            first_difference(v, got, String::new()),
            None,
            "{k:?} differs"
        );
    }
}

#[test]
fn the_helm_options_render_valid_objects() {
    let values = r#"{"rbac": {"forceDelete": true}, "extraLabels": {"team": "infra"},
        "agent": {"capabilities": null}, "admissionPolicy": {"enabled": false},
        "namespaces": {"create": false}, "priorityClass": {"create": false, "name": "system-node-critical"}}"#;
    let Some(text) = helm_render(&["--values", values]) else {
        return;
    };
    let objects = docs(&text, "helm render with options");
    for o in &objects {
        parses_as_its_type(o).unwrap_or_else(|e| panic!("{:?}: {e}", key(o)));
        assert_eq!(s(o, "/metadata/labels/team"), "infra", "{:?}", key(o));
    }
    let kinds: Vec<&str> = objects.iter().map(|o| s(o, "/kind")).collect();
    assert!(!kinds.contains(&"ValidatingAdmissionPolicy"));
    assert!(!kinds.contains(&"Namespace") && !kinds.contains(&"PriorityClass"));
    let controller = granted_to(&objects, "rollboot-system", "rollboot-controller");
    assert!(controller.contains(&(
        String::new(),
        String::new(),
        "pods".into(),
        "delete".into(),
        String::new()
    )));
    let ds: DaemonSet = find(&objects, "DaemonSet", "rollboot-agent", "rollboot-agent");
    let pod = ds.spec.unwrap().template.spec.unwrap();
    let caps = pod.containers[0]
        .security_context
        .clone()
        .unwrap()
        .capabilities
        .unwrap();
    assert!(
        caps.add.is_none(),
        "method: signal needs no added capability"
    );
    assert_eq!(
        pod.priority_class_name.as_deref(),
        Some("system-node-critical")
    );
}

/// The policy's CEL, evaluated by deploy/check-policy.py (PyPI cel-python) on the agent's own
/// writes (allowed) and on writes to another node, other annotations, labels, spec and status
/// (denied). Skipped when cel-python is not installed; the simulator will evaluate the same
/// policy in Rust.
#[test]
fn the_admission_policy_lets_an_agent_write_only_its_own_nodes_flags() {
    let probe = Command::new("python3")
        .args(["-c", "import celpy, yaml"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        eprintln!("cel-python or PyYAML not installed; the policy's CEL was not evaluated");
        return;
    }
    let out = Command::new("python3")
        .arg("deploy/check-policy.py")
        .current_dir(root())
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Helm values that move both namespaces: the config the chart writes names the Leases in the
/// controller's namespace, where its Role grants them by name and where the Deployment runs;
/// the agent's copy of the config is the same. (Issue 25: the config kept `rollboot-system`.)
#[test]
fn a_helm_render_in_other_namespaces_keeps_config_rbac_and_deployment_together() {
    let values = r#"{"namespaces": {"controller": "ops-reboot", "agent": "ops-reboot-agent"}}"#;
    let Some(text) = helm_render(&["--values", values]) else {
        return;
    };
    let objects = docs(&text, "helm render in other namespaces");
    let config_text = installed_config(&objects, "ops-reboot");
    assert_eq!(config_text, installed_config(&objects, "ops-reboot-agent"));
    let config = rollboot::config::parse_str(&config_text)
        .unwrap_or_else(|e| panic!("the rendered config is refused: {e:#?}"));
    assert_eq!(config.lock.namespace, "ops-reboot");
    assert_eq!(config.leader.namespace, "ops-reboot");
    let deployment: Deployment = find(&objects, "Deployment", "ops-reboot", "rollboot-controller");
    assert!(deployment.spec.is_some());
    let grants = granted_to(&objects, "ops-reboot", "rollboot-controller");
    for lease in [&config.lock.name, &config.leader.name] {
        for verb in ["get", "update"] {
            assert!(
                grants
                    .iter()
                    .any(|(ns, group, resource, v, names)| ns == "ops-reboot"
                        && group == "coordination.k8s.io"
                        && resource == "leases"
                        && v == verb
                        && names.split(',').any(|n| n == lease.as_str())),
                "no `{verb}` of Lease ops-reboot/{lease} for the controller: {grants:#?}"
            );
        }
    }
    assert!(
        !text.contains("rollboot-system"),
        "the default namespace is still named somewhere"
    );
}

/// docs/security.md, "Ports": every port a rollboot pod listens on has a NetworkPolicy in
/// deploy/optional/ that selects that pod (by its template's labels, in its namespace) and
/// admits that port: the controller's metrics (8080) and FleetLock (8086, from the config's
/// `fleetlock.listen`), the agent's metrics (8081).
#[test]
fn every_port_rollboot_listens_on_has_a_network_policy_that_selects_its_pods() {
    let base = kustomize();
    let mut policies = docs(
        &read("deploy/optional/network-policy.yaml"),
        "network-policy.yaml",
    );
    policies.extend(docs(
        &read("deploy/optional/fleetlock.yaml"),
        "fleetlock.yaml",
    ));
    let policies: Vec<&Value> = policies
        .iter()
        .filter(|p| p["kind"] == "NetworkPolicy")
        .collect();
    let mut wanted: Vec<(String, BTreeMap<String, String>, i64)> = Vec::new();
    for o in base
        .iter()
        .filter(|o| o["kind"] == "Deployment" || o["kind"] == "DaemonSet")
    {
        let ns = o["metadata"]["namespace"].as_str().unwrap().to_string();
        let labels: BTreeMap<String, String> =
            serde_json::from_value(o["spec"]["template"]["metadata"]["labels"].clone()).unwrap();
        for c in o["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap()
        {
            for p in c["ports"].as_array().into_iter().flatten() {
                wanted.push((
                    ns.clone(),
                    labels.clone(),
                    p["containerPort"].as_i64().unwrap(),
                ));
            }
        }
    }
    // The FleetLock port every replica listens on (deploy/optional/fleetlock.yaml's Service).
    let controller = wanted
        .iter()
        .find(|(_, l, _)| {
            l.get("app.kubernetes.io/component").map(String::as_str) == Some("controller")
        })
        .cloned()
        .expect("the controller's pods");
    wanted.push((controller.0, controller.1, 8086));
    assert!(wanted.len() >= 3, "{wanted:?}");
    for (ns, labels, port) in &wanted {
        let covered = policies.iter().any(|p| {
            p["metadata"]["namespace"] == ns.as_str()
                && p["spec"]["podSelector"]["matchLabels"]
                    .as_object()
                    .is_some_and(|m| {
                        m.iter()
                            .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str())
                    })
                && p["spec"]["ingress"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|r| {
                        r["ports"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .any(|q| q["port"].as_i64() == Some(*port))
                    })
        });
        assert!(
            covered,
            "no NetworkPolicy admits port {port} of the pods {labels:?} in {ns}"
        );
    }
}
