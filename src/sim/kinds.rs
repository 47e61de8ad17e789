//! The resources the simulated API server serves, and what it knows about each.
//!
//! Owns the table of kinds (group, version, plural, scope, subresources), the validation of a
//! written object by decoding it into its k8s-openapi type (as kube-apiserver decodes into its Go
//! type), the small parsed [`Index`] kept beside each stored object, and the field selectors each
//! resource supports. It must never store anything or talk HTTP.

use std::collections::BTreeMap;

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

use super::errors::ApiError;
use super::validation::NameRule;

/// A served resource.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// core/v1 nodes
    Node,
    /// core/v1 pods
    Pod,
    /// core/v1 namespaces
    Namespace,
    /// core/v1 events
    Event,
    /// events.k8s.io/v1 events: the same stored objects as core/v1 events, converted (see
    /// `events.rs`)
    EventV1,
    /// coordination.k8s.io/v1 leases
    Lease,
    /// policy/v1 poddisruptionbudgets
    Pdb,
    /// apps/v1 daemonsets
    DaemonSet,
    /// apps/v1 replicasets
    ReplicaSet,
    /// apps/v1 deployments
    Deployment,
    /// apps/v1 statefulsets
    StatefulSet,
    /// core/v1 serviceaccounts (stored only: no tokens are issued)
    ServiceAccount,
    /// core/v1 configmaps
    ConfigMap,
    /// core/v1 services (stored only: no cluster IP is allocated, no endpoints)
    Service,
    /// rbac.authorization.k8s.io/v1 roles (stored only: enforcement is `rbac.rs`, opt-in)
    Role,
    /// rbac.authorization.k8s.io/v1 rolebindings
    RoleBinding,
    /// rbac.authorization.k8s.io/v1 clusterroles
    ClusterRole,
    /// rbac.authorization.k8s.io/v1 clusterrolebindings
    ClusterRoleBinding,
    /// scheduling.k8s.io/v1 priorityclasses (stored only: the world does not preempt)
    PriorityClass,
    /// admissionregistration.k8s.io/v1 validatingadmissionpolicies (enforced with their
    /// bindings on every write they match: `admission/`)
    ValidatingAdmissionPolicy,
    /// admissionregistration.k8s.io/v1 validatingadmissionpolicybindings
    ValidatingAdmissionPolicyBinding,
}

impl Kind {
    /// Every served kind.
    pub const ALL: [Kind; 21] = [
        Kind::Node,
        Kind::Pod,
        Kind::Namespace,
        Kind::Event,
        Kind::EventV1,
        Kind::Lease,
        Kind::Pdb,
        Kind::DaemonSet,
        Kind::ReplicaSet,
        Kind::Deployment,
        Kind::StatefulSet,
        Kind::ServiceAccount,
        Kind::ConfigMap,
        Kind::Service,
        Kind::Role,
        Kind::RoleBinding,
        Kind::ClusterRole,
        Kind::ClusterRoleBinding,
        Kind::PriorityClass,
        Kind::ValidatingAdmissionPolicy,
        Kind::ValidatingAdmissionPolicyBinding,
    ];

    /// The served API groups ("" for core), each with version v1.
    pub const GROUPS: [&'static str; 8] = [
        "",
        "apps",
        "events.k8s.io",
        "policy",
        "coordination.k8s.io",
        "rbac.authorization.k8s.io",
        "scheduling.k8s.io",
        "admissionregistration.k8s.io",
    ];

    /// API group ("" for core).
    pub fn group(self) -> &'static str {
        match self {
            Kind::Node
            | Kind::Pod
            | Kind::Namespace
            | Kind::Event
            | Kind::ServiceAccount
            | Kind::ConfigMap
            | Kind::Service => "",
            Kind::EventV1 => "events.k8s.io",
            Kind::Lease => "coordination.k8s.io",
            Kind::Pdb => "policy",
            Kind::DaemonSet | Kind::ReplicaSet | Kind::Deployment | Kind::StatefulSet => "apps",
            Kind::Role | Kind::RoleBinding | Kind::ClusterRole | Kind::ClusterRoleBinding => {
                "rbac.authorization.k8s.io"
            }
            Kind::PriorityClass => "scheduling.k8s.io",
            Kind::ValidatingAdmissionPolicy | Kind::ValidatingAdmissionPolicyBinding => {
                "admissionregistration.k8s.io"
            }
        }
    }

    /// `apiVersion` of objects of this kind.
    pub fn api_version(self) -> &'static str {
        match self.group() {
            "" => "v1",
            "events.k8s.io" => "events.k8s.io/v1",
            "coordination.k8s.io" => "coordination.k8s.io/v1",
            "policy" => "policy/v1",
            "rbac.authorization.k8s.io" => "rbac.authorization.k8s.io/v1",
            "scheduling.k8s.io" => "scheduling.k8s.io/v1",
            "admissionregistration.k8s.io" => "admissionregistration.k8s.io/v1",
            _ => "apps/v1",
        }
    }

    /// Plural resource name, as in URLs.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Node => "nodes",
            Kind::Pod => "pods",
            Kind::Namespace => "namespaces",
            Kind::Event | Kind::EventV1 => "events",
            Kind::Lease => "leases",
            Kind::Pdb => "poddisruptionbudgets",
            Kind::DaemonSet => "daemonsets",
            Kind::ReplicaSet => "replicasets",
            Kind::Deployment => "deployments",
            Kind::StatefulSet => "statefulsets",
            Kind::ServiceAccount => "serviceaccounts",
            Kind::ConfigMap => "configmaps",
            Kind::Service => "services",
            Kind::Role => "roles",
            Kind::RoleBinding => "rolebindings",
            Kind::ClusterRole => "clusterroles",
            Kind::ClusterRoleBinding => "clusterrolebindings",
            Kind::PriorityClass => "priorityclasses",
            Kind::ValidatingAdmissionPolicy => "validatingadmissionpolicies",
            Kind::ValidatingAdmissionPolicyBinding => "validatingadmissionpolicybindings",
        }
    }

    /// `kind` of objects.
    pub fn kind_name(self) -> &'static str {
        match self {
            Kind::Node => "Node",
            Kind::Pod => "Pod",
            Kind::Namespace => "Namespace",
            Kind::Event | Kind::EventV1 => "Event",
            Kind::Lease => "Lease",
            Kind::Pdb => "PodDisruptionBudget",
            Kind::DaemonSet => "DaemonSet",
            Kind::ReplicaSet => "ReplicaSet",
            Kind::Deployment => "Deployment",
            Kind::StatefulSet => "StatefulSet",
            Kind::ServiceAccount => "ServiceAccount",
            Kind::ConfigMap => "ConfigMap",
            Kind::Service => "Service",
            Kind::Role => "Role",
            Kind::RoleBinding => "RoleBinding",
            Kind::ClusterRole => "ClusterRole",
            Kind::ClusterRoleBinding => "ClusterRoleBinding",
            Kind::PriorityClass => "PriorityClass",
            Kind::ValidatingAdmissionPolicy => "ValidatingAdmissionPolicy",
            Kind::ValidatingAdmissionPolicyBinding => "ValidatingAdmissionPolicyBinding",
        }
    }

    /// `plural` or `plural.group`, as in error messages.
    pub fn qualified(self) -> String {
        if self.group().is_empty() {
            self.plural().to_string()
        } else {
            format!("{}.{}", self.plural(), self.group())
        }
    }

    /// The kind whose table holds this kind's objects: events.k8s.io/v1 Events are core/v1
    /// Events read through another API, as in kube-apiserver.
    pub fn storage(self) -> Kind {
        match self {
            Kind::EventV1 => Kind::Event,
            k => k,
        }
    }

    /// Either Event kind.
    pub fn is_event(self) -> bool {
        self.storage() == Kind::Event
    }

    /// How the kind's strategy validates names and generateName prefixes on create
    /// (`ValidateObjectMeta`'s name function; kinds whose strategy does not validate metadata
    /// get only the generic path-segment check).
    pub fn name_rule(self) -> NameRule {
        match self {
            Kind::Namespace | Kind::StatefulSet | Kind::Service => NameRule::DnsLabel,
            Kind::Event
            | Kind::Pdb
            | Kind::Role
            | Kind::RoleBinding
            | Kind::ClusterRole
            | Kind::ClusterRoleBinding => NameRule::PathSegment,
            _ => NameRule::DnsSubdomain,
        }
    }

    /// Namespaced or cluster-scoped.
    pub fn namespaced(self) -> bool {
        !matches!(
            self,
            Kind::Node
                | Kind::Namespace
                | Kind::ClusterRole
                | Kind::ClusterRoleBinding
                | Kind::PriorityClass
                | Kind::ValidatingAdmissionPolicy
                | Kind::ValidatingAdmissionPolicyBinding
        )
    }

    /// The kind for a URL's group and plural, if served.
    pub fn from_path(group: &str, plural: &str) -> Option<Kind> {
        Kind::ALL
            .into_iter()
            .find(|k| k.group() == group && k.plural() == plural)
    }

    /// Subresources served besides the object itself.
    pub fn subresources(self) -> &'static [&'static str] {
        match self {
            Kind::Node => &["status"],
            Kind::Pod => &["status", "eviction"],
            Kind::Pdb => &["status"],
            _ => &[],
        }
    }

    /// True when a PUT/PATCH of the main resource keeps the stored status (status subresource).
    pub fn has_status_subresource(self) -> bool {
        matches!(
            self,
            Kind::Node
                | Kind::Pod
                | Kind::Pdb
                | Kind::DaemonSet
                | Kind::ReplicaSet
                | Kind::Deployment
                | Kind::StatefulSet
                | Kind::Service
                | Kind::ValidatingAdmissionPolicy
                | Kind::Namespace
        )
    }

    /// True when the real server maintains `metadata.generation` (bumped on spec changes).
    pub fn sets_generation(self) -> bool {
        matches!(
            self,
            Kind::Pod
                | Kind::Pdb
                | Kind::DaemonSet
                | Kind::ReplicaSet
                | Kind::Deployment
                | Kind::StatefulSet
                | Kind::PriorityClass
                | Kind::ValidatingAdmissionPolicy
                | Kind::ValidatingAdmissionPolicyBinding
        )
    }

    /// Decodes `value` into the k8s-openapi type and back: validation and canonical form.
    pub fn canonicalize(self, value: Value) -> Result<Value, ApiError> {
        use k8s_openapi::api as a;
        match self {
            Kind::Node => roundtrip::<a::core::v1::Node>(self, value),
            Kind::Pod => roundtrip::<a::core::v1::Pod>(self, value),
            Kind::Namespace => roundtrip::<a::core::v1::Namespace>(self, value),
            Kind::Event => roundtrip::<a::core::v1::Event>(self, value),
            Kind::EventV1 => roundtrip::<a::events::v1::Event>(self, value),
            Kind::Lease => roundtrip::<a::coordination::v1::Lease>(self, value),
            Kind::Pdb => roundtrip::<a::policy::v1::PodDisruptionBudget>(self, value),
            Kind::DaemonSet => roundtrip::<a::apps::v1::DaemonSet>(self, value),
            Kind::ReplicaSet => roundtrip::<a::apps::v1::ReplicaSet>(self, value),
            Kind::Deployment => roundtrip::<a::apps::v1::Deployment>(self, value),
            Kind::StatefulSet => roundtrip::<a::apps::v1::StatefulSet>(self, value),
            Kind::ServiceAccount => roundtrip::<a::core::v1::ServiceAccount>(self, value),
            Kind::ConfigMap => roundtrip::<a::core::v1::ConfigMap>(self, value),
            Kind::Service => roundtrip::<a::core::v1::Service>(self, value),
            Kind::Role => roundtrip::<a::rbac::v1::Role>(self, value),
            Kind::RoleBinding => roundtrip::<a::rbac::v1::RoleBinding>(self, value),
            Kind::ClusterRole => roundtrip::<a::rbac::v1::ClusterRole>(self, value),
            Kind::ClusterRoleBinding => roundtrip::<a::rbac::v1::ClusterRoleBinding>(self, value),
            Kind::PriorityClass => roundtrip::<a::scheduling::v1::PriorityClass>(self, value),
            Kind::ValidatingAdmissionPolicy => {
                roundtrip::<a::admissionregistration::v1::ValidatingAdmissionPolicy>(self, value)
            }
            Kind::ValidatingAdmissionPolicyBinding => roundtrip::<
                a::admissionregistration::v1::ValidatingAdmissionPolicyBinding,
            >(self, value),
        }
    }

    /// `fieldValidation=Strict`: the 400 kube-apiserver answers when `value` has fields its
    /// type does not know (they would be dropped on decoding).
    pub fn check_strict(self, value: &Value) -> Result<(), ApiError> {
        let canonical = self.canonicalize(value.clone())?;
        let mut unknown = Vec::new();
        unknown_fields(value, &canonical, "", &mut unknown);
        if unknown.is_empty() {
            return Ok(());
        }
        let list: Vec<String> = unknown
            .iter()
            .map(|f| format!("unknown field \"{f}\""))
            .collect();
        Err(self.decode_error(format!("strict decoding error: {}", list.join(", "))))
    }

    /// The 400 answer for a body that does not decode (golden 65).
    pub fn decode_error(self, err: impl std::fmt::Display) -> ApiError {
        let k = self.kind_name();
        ApiError::bad_request(format!(
            "{k} in version \"v1\" cannot be handled as a {k}: {err}"
        ))
    }

    /// Field-selector value of `field` for an indexed object, or 400 for an unsupported field.
    pub fn field_value<'a>(self, idx: &'a Index, field: &str) -> Result<&'a str, ApiError> {
        match (self, field) {
            (_, "metadata.name") => Ok(&idx.name),
            (k, "metadata.namespace") if k.namespaced() => Ok(&idx.namespace),
            (Kind::Pod, "spec.nodeName") => Ok(idx.node_name.as_deref().unwrap_or("")),
            (Kind::Pod, "status.phase") => Ok(idx.phase.as_deref().unwrap_or("")),
            (Kind::Node, "spec.unschedulable") => {
                Ok(if idx.unschedulable { "true" } else { "false" })
            }
            (Kind::Event | Kind::EventV1, f) => {
                static EMPTY: super::events::Fields = super::events::Fields::EMPTY;
                let fields = idx.event.as_deref().unwrap_or(&EMPTY);
                let value = if self == Kind::Event {
                    fields.core(f)
                } else {
                    fields.v1(f)
                };
                value.ok_or_else(|| {
                    ApiError::bad_request(format!("field label not supported: {field}"))
                })
            }
            _ => Err(ApiError::bad_request(format!(
                "field label not supported: {field}"
            ))),
        }
    }
}

/// Fields of `raw` (dotted paths, `[i]` for list items) that `canonical` lost.
pub(crate) fn unknown_fields(raw: &Value, canonical: &Value, at: &str, out: &mut Vec<String>) {
    let join = |k: &str| {
        if at.is_empty() {
            k.to_string()
        } else {
            format!("{at}.{k}")
        }
    };
    match (raw, canonical) {
        (Value::Object(r), Value::Object(c)) => {
            for (k, v) in r {
                match c.get(k) {
                    Some(cv) => unknown_fields(v, cv, &join(k), out),
                    None if !v.is_null() => out.push(join(k)),
                    None => {}
                }
            }
        }
        (Value::Array(r), Value::Array(c)) if r.len() == c.len() => {
            for (i, (v, cv)) in r.iter().zip(c).enumerate() {
                unknown_fields(v, cv, &format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
}

fn roundtrip<T: DeserializeOwned + Serialize>(kind: Kind, value: Value) -> Result<Value, ApiError> {
    let typed: T = serde_json::from_value(value).map_err(|e| kind.decode_error(e))?;
    serde_json::to_value(&typed).map_err(|e| kind.decode_error(e))
}

/// The small parsed view kept beside each stored object, so selectors never reparse JSON.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Index {
    /// metadata.namespace ("" for cluster-scoped)
    pub namespace: String,
    /// metadata.name
    pub name: String,
    /// metadata.uid
    pub uid: String,
    /// metadata.resourceVersion
    pub rv: u64,
    /// metadata.labels
    pub labels: BTreeMap<String, String>,
    /// spec.nodeName (pods)
    pub node_name: Option<String>,
    /// status.phase (pods)
    pub phase: Option<String>,
    /// Ready condition is True (pods and nodes)
    pub ready: bool,
    /// metadata.deletionTimestamp is set
    pub deleting: bool,
    /// spec.unschedulable (nodes)
    pub unschedulable: bool,
    /// a `node.kubernetes.io/not-ready` or `unreachable` taint (nodes)
    pub not_ready_taint: bool,
    /// cordoned (`spec.unschedulable`) with rollboot's `rollboot.dev/cordoned-by` on it (nodes):
    /// out of service because of rollboot, which the invariant watch holds to `maxNodes`
    pub cordoned_by_rollboot: bool,
    /// the controller owner reference: (kind, name, uid)
    pub owner: Option<(String, String, String)>,
    /// spec.selector of a PodDisruptionBudget, parsed once: the budgets of a pod are found on
    /// every eviction and every pod change, and reparsing each budget's JSON there dominated
    /// the simulator's CPU time at a few hundred budgets per namespace.
    pub pdb_selector: Option<crate::selector::Selector>,
    /// The field-selector values of an Event (stored form).
    pub event: Option<Box<super::events::Fields>>,
    /// `status.nodeInfo.bootID` (nodes): the simulated agents read it on every check.
    pub boot_id: Option<String>,
    /// `status.nodeInfo.machineID` (nodes): a simulated agent reads it as its host's.
    pub machine_id: Option<String>,
    /// `metadata.deletionGracePeriodSeconds` (pods being deleted).
    pub deletion_grace: Option<i64>,
    /// What the world reads of a workload controller (ReplicaSet, StatefulSet, Deployment,
    /// DaemonSet) on every change of one of its pods: read from here, its JSON is parsed
    /// only when it is to be written.
    pub workload: Option<Box<Workload>>,
}

/// The numbers of a workload controller the world and the budgets read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Workload {
    /// The pods it wants: `spec.replicas` (a DaemonSet's `status.desiredNumberScheduled`).
    pub scale: Option<i64>,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// The counts of its `status`, by field name ([`Workload::COUNTS`]).
    pub counts: BTreeMap<&'static str, i64>,
}

impl Workload {
    /// The `status` counts kept in [`Workload::counts`].
    pub const COUNTS: [&'static str; 7] = [
        "observedGeneration",
        "replicas",
        "readyReplicas",
        "availableReplicas",
        "currentReplicas",
        "updatedReplicas",
        "fullyLabeledReplicas",
    ];

    fn of(value: &Value) -> Option<Box<Workload>> {
        let scale = match value["kind"].as_str()? {
            "ReplicaSet" | "Deployment" | "StatefulSet" => value["spec"]["replicas"].as_i64(),
            "DaemonSet" => value["status"]["desiredNumberScheduled"].as_i64(),
            _ => return None,
        };
        let counts = Self::COUNTS
            .into_iter()
            .filter_map(|f| Some((f, value["status"][f].as_i64()?)))
            .collect();
        Some(Box::new(Workload {
            scale,
            generation: value["metadata"]["generation"].as_i64(),
            counts,
        }))
    }
}

impl Index {
    /// Builds the index of a canonical object.
    pub fn of(value: &Value) -> Index {
        let md = &value["metadata"];
        let s = |v: &Value| v.as_str().map(str::to_string);
        let labels = md["labels"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or("").to_string()))
                    .collect()
            })
            .unwrap_or_default();
        let ready = value["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        });
        let owner = md["ownerReferences"].as_array().and_then(|refs| {
            refs.iter().find(|r| r["controller"] == true).map(|r| {
                (
                    s(&r["kind"]).unwrap_or_default(),
                    s(&r["name"]).unwrap_or_default(),
                    s(&r["uid"]).unwrap_or_default(),
                )
            })
        });
        Index {
            namespace: s(&md["namespace"]).unwrap_or_default(),
            name: s(&md["name"]).unwrap_or_default(),
            uid: s(&md["uid"]).unwrap_or_default(),
            rv: md["resourceVersion"]
                .as_str()
                .and_then(|r| r.parse().ok())
                .unwrap_or(0),
            labels,
            node_name: s(&value["spec"]["nodeName"]),
            phase: s(&value["status"]["phase"]),
            ready,
            deleting: !md["deletionTimestamp"].is_null(),
            unschedulable: value["spec"]["unschedulable"] == true,
            not_ready_taint: value["spec"]["taints"].as_array().is_some_and(|ts| {
                ts.iter().any(|t| {
                    t["key"] == "node.kubernetes.io/not-ready"
                        || t["key"] == "node.kubernetes.io/unreachable"
                })
            }),
            cordoned_by_rollboot: value["spec"]["unschedulable"] == true
                && !md["annotations"][crate::node::CORDONED_BY].is_null(),
            owner,
            pdb_selector: if value["kind"] == "PodDisruptionBudget" {
                super::pdb::label_selector(&value["spec"]["selector"])
            } else {
                None
            },
            event: (value["kind"] == "Event" && value["apiVersion"] == "v1")
                .then(|| Box::new(super::events::Fields::of(value))),
            boot_id: s(&value["status"]["nodeInfo"]["bootID"]).filter(|_| value["kind"] == "Node"),
            machine_id: s(&value["status"]["nodeInfo"]["machineID"])
                .filter(|_| value["kind"] == "Node"),
            deletion_grace: md["deletionGracePeriodSeconds"].as_i64(),
            workload: Workload::of(value),
        }
    }

    /// The store key: `namespace/name` or `name`.
    pub fn key(&self) -> String {
        key_of(&self.namespace, &self.name)
    }
}

/// The store key for a namespace and name.
pub fn key_of(namespace: &str, name: &str) -> String {
    if namespace.is_empty() {
        name.to_string()
    } else {
        format!("{namespace}/{name}")
    }
}

/// The MicroTime format check of a request body (golden 65: a MicroTime is parsed with Go's
/// layout `2006-01-02T15:04:05.000000Z07:00`, so its six fractional digits are mandatory).
/// Kind-specific semantic validation lives with each kind (`events.rs`).
pub fn validate(kind: Kind, raw: &Value) -> Result<(), ApiError> {
    let micro = |v: &Value| -> Result<(), ApiError> {
        let Some(t) = v.as_str() else {
            return Ok(());
        };
        let digits = t
            .get(19..)
            .and_then(|rest| rest.strip_prefix('.'))
            .map(|f| f.chars().take_while(char::is_ascii_digit).count());
        let rest = match digits {
            Some(6) => return Ok(()),
            Some(n) if n > 6 => (&t[26..], "Z07:00"),
            _ => (&t[t.len().min(19)..], ".000000"),
        };
        Err(kind.decode_error(format!(
            "parsing time \"{t}\" as \"2006-01-02T15:04:05.000000Z07:00\": cannot parse \"{}\" as \"{}\"",
            rest.0, rest.1
        )))
    };
    match kind {
        Kind::Lease => {
            micro(&raw["spec"]["renewTime"])?;
            micro(&raw["spec"]["acquireTime"])?;
        }
        Kind::Event | Kind::EventV1 => {
            micro(&raw["eventTime"])?;
            micro(&raw["series"]["lastObservedTime"])?;
        }
        _ => {}
    }
    Ok(())
}

/// The strategy's checks of a (decoded, defaulted) object beyond its metadata, on create and
/// update, for the kinds whose objects the simulator acts on: admission policies and their
/// bindings (`admission::check_policy`). Other kinds' specs are not validated (see `sim`).
pub fn validate_spec(kind: Kind, v: &Value) -> Vec<super::validation::FieldError> {
    match kind {
        Kind::ValidatingAdmissionPolicy => super::admission::check_policy(v),
        Kind::ValidatingAdmissionPolicyBinding => super::admission::check_binding(v),
        _ => Vec::new(),
    }
}

/// Defaults the real server fills in on create (a subset: see the module docs of `sim`): the
/// scheme's defaults of [`default_fields`], then the registry strategies' create rules and, for
/// Pods, what the ServiceAccount, Priority and DefaultTolerationSeconds admission plugins add
/// (not the service-account token volume).
pub fn apply_defaults(kind: Kind, v: &mut Value) {
    default_fields(kind, v);
    match kind {
        Kind::Pod => admit_pod(v),
        Kind::Namespace => {
            v["status"] = json!({"phase": "Active"});
            let fin = &mut v["spec"]["finalizers"];
            match fin.as_array_mut() {
                Some(a) if a.iter().any(|f| f == "kubernetes") => {}
                Some(a) => a.push(json!("kubernetes")),
                None => *fin = json!(["kubernetes"]),
            }
        }
        _ => {}
    }
}

/// The scheme's defaults, which kube-apiserver applies to every object it decodes: on create,
/// update and to the result of a patch alike.
pub fn default_fields(kind: Kind, v: &mut Value) {
    match kind {
        Kind::Pod => default_pod(v),
        Kind::Deployment => default_deployment(v),
        Kind::Namespace => {
            let name = v["metadata"]["name"].as_str().unwrap_or("").to_string();
            if !name.is_empty() {
                v["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
            }
        }
        Kind::PriorityClass => set_if_null(v, "preemptionPolicy", json!("PreemptLowerPriority")),
        Kind::ValidatingAdmissionPolicy | Kind::ValidatingAdmissionPolicyBinding => {
            super::admission::apply_defaults(kind, v)
        }
        Kind::RoleBinding | Kind::ClusterRoleBinding => {
            for s in v
                .get_mut("subjects")
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                if s["apiGroup"].as_str().unwrap_or("").is_empty()
                    && matches!(s["kind"].as_str(), Some("User" | "Group"))
                {
                    s["apiGroup"] = json!("rbac.authorization.k8s.io");
                }
            }
        }
        _ => {}
    }
}

fn set_if_null(v: &mut Value, key: &str, d: Value) {
    if v[key].is_null() {
        v[key] = d;
    }
}

/// apps/v1 Deployment defaults, and those of its pod template.
fn default_deployment(v: &mut Value) {
    let spec = &mut v["spec"];
    set_if_null(spec, "replicas", json!(1));
    let strategy = &mut spec["strategy"];
    set_if_null(strategy, "type", json!("RollingUpdate"));
    if strategy["type"] == "RollingUpdate" {
        let ru = &mut strategy["rollingUpdate"];
        set_if_null(ru, "maxUnavailable", json!("25%"));
        set_if_null(ru, "maxSurge", json!("25%"));
    }
    set_if_null(spec, "revisionHistoryLimit", json!(10));
    set_if_null(spec, "progressDeadlineSeconds", json!(600));
    default_pod_spec(&mut spec["template"]["spec"]);
}

/// The defaults of every PodSpec (a Pod's or a template's) and of its containers.
fn default_pod_spec(spec: &mut Value) {
    set_if_null(spec, "dnsPolicy", json!("ClusterFirst"));
    set_if_null(spec, "restartPolicy", json!("Always"));
    set_if_null(spec, "securityContext", json!({}));
    set_if_null(spec, "terminationGracePeriodSeconds", json!(30));
    set_if_null(spec, "schedulerName", json!("default-scheduler"));
    for c in containers_mut(spec) {
        default_container(c);
    }
}

/// The containers and init containers of a PodSpec, for writing (none when it has none: a
/// missing list is not indexed mutably, which would write a `null` into the spec).
fn containers_mut(spec: &mut Value) -> impl Iterator<Item = &mut Value> {
    let Some(spec) = spec.as_object_mut() else {
        return Vec::new().into_iter();
    };
    spec.iter_mut()
        .filter(|(k, _)| *k == "initContainers" || *k == "containers")
        .filter_map(|(_, v)| v.as_array_mut())
        .flatten()
        .collect::<Vec<_>>()
        .into_iter()
}

fn default_container(c: &mut Value) {
    if c["imagePullPolicy"].is_null() {
        let latest = image_tag(c["image"].as_str().unwrap_or("")) == Some("latest");
        c["imagePullPolicy"] = json!(if latest { "Always" } else { "IfNotPresent" });
    }
    set_if_null(c, "terminationMessagePath", json!("/dev/termination-log"));
    set_if_null(c, "terminationMessagePolicy", json!("File"));
    for p in c
        .get_mut("ports")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        set_if_null(p, "protocol", json!("TCP"));
    }
    for e in c
        .get_mut("env")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(field_ref) = e
            .pointer_mut("/valueFrom/fieldRef")
            .filter(|f| f.is_object())
        {
            set_if_null(field_ref, "apiVersion", json!("v1"));
        }
    }
}

/// The tag an image reference pulls: "latest" when it names neither a tag nor a digest.
fn image_tag(image: &str) -> Option<&str> {
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    let last = name.rsplit('/').next().unwrap_or(name);
    match last.rsplit_once(':') {
        Some((_, tag)) => Some(tag),
        None if digest.is_none() => Some("latest"),
        None => None,
    }
}

/// A Pod: its spec's defaults and the Pod-only ones.
fn default_pod(v: &mut Value) {
    let spec = &mut v["spec"];
    default_pod_spec(spec);
    set_if_null(spec, "enableServiceLinks", json!(true));
    // Requests default to limits, per resource (Pods only, not templates).
    for c in containers_mut(spec) {
        let limits = c["resources"]["limits"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        for (res, q) in limits {
            if c["resources"]["requests"][&res].is_null() {
                c["resources"]["requests"][&res] = q;
            }
        }
    }
}

/// What admission and the registry add to a new Pod: its service account, priority, the
/// tolerations of the not-ready and unreachable taints, phase and QoS class.
fn admit_pod(v: &mut Value) {
    let spec = &mut v["spec"];
    set_if_null(spec, "serviceAccountName", json!("default"));
    let sa = spec["serviceAccountName"].clone();
    set_if_null(spec, "serviceAccount", sa);
    set_if_null(spec, "priority", json!(0));
    set_if_null(spec, "preemptionPolicy", json!("PreemptLowerPriority"));
    for taint in [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ] {
        let tolerated = spec["tolerations"].as_array().is_some_and(|ts| {
            ts.iter().any(|t| {
                let key = t["key"].as_str().unwrap_or("");
                let effect = t["effect"].as_str().unwrap_or("");
                (key == taint || (key.is_empty() && t["operator"] == "Exists"))
                    && (effect.is_empty() || effect == "NoExecute")
            })
        });
        if !tolerated {
            let t = json!({"key": taint, "operator": "Exists", "effect": "NoExecute",
                "tolerationSeconds": 300});
            match spec["tolerations"].as_array_mut() {
                Some(ts) => ts.push(t),
                None => spec["tolerations"] = json!([t]),
            }
        }
    }
    let qos = qos_class(&v["spec"]);
    set_if_null(&mut v["status"], "phase", json!("Pending"));
    set_if_null(&mut v["status"], "qosClass", json!(qos));
}

/// The QoS class of a pod spec, from its containers' cpu and memory requests and limits.
fn qos_class(spec: &Value) -> &'static str {
    let containers: Vec<&Value> = ["initContainers", "containers"]
        .iter()
        .flat_map(|l| spec[*l].as_array().into_iter().flatten())
        .collect();
    let mut any = false;
    let mut guaranteed = true;
    for c in containers {
        for res in ["cpu", "memory"] {
            let req = &c["resources"]["requests"][res];
            let lim = &c["resources"]["limits"][res];
            any |= !req.is_null() || !lim.is_null();
            guaranteed &= !lim.is_null() && (req.is_null() || req == lim);
        }
    }
    match (any, guaranteed) {
        (false, _) => "BestEffort",
        (true, true) => "Guaranteed",
        (true, false) => "Burstable",
    }
}
