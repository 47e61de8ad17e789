//! The resources the simulated API server serves, and what it knows about each.
//!
//! Owns the table of kinds (group, version, plural, scope, subresources, the name rule of each
//! kind's strategy) and the decoding of a written object into its k8s-openapi type (as
//! kube-apiserver decodes into its Go type): its canonical form, the strict check of unknown
//! fields and the MicroTime formats, failing with a [`DecodeError`] that `errors.rs` words as
//! the server does. It is the bottom of the simulated server: every other module names kinds,
//! and this one names none of them but the field-validation rules. It must never store
//! anything, word an HTTP answer, or talk HTTP. The index kept beside each stored object is
//! `index.rs`; what each kind's strategy does on a write (defaults, spec checks) is
//! `strategy.rs`.

use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use super::crd;
use super::quantity::{Quantity, QuantityError};
use super::validation::NameRule;

/// A written object that does not decode as its kind's type: the server's 400 (golden 65),
/// worded by `errors.rs`.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("cannot decode a {}: {message}", .kind.kind_name())]
pub struct DecodeError {
    /// The kind it was decoded as.
    pub kind: Kind,
    /// What the decoder said.
    pub message: String,
}

impl DecodeError {
    fn new(kind: Kind, err: impl std::fmt::Display) -> DecodeError {
        DecodeError {
            kind,
            message: err.to_string(),
        }
    }
}

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
    /// core/v1 persistentvolumes (the world's provisioner creates them for its claims)
    PersistentVolume,
    /// core/v1 persistentvolumeclaims (the world's StatefulSet controller creates them from
    /// `volumeClaimTemplates`)
    PersistentVolumeClaim,
    /// storage.k8s.io/v1 storageclasses (stored only: the world provisions its own class)
    StorageClass,
    /// storage.k8s.io/v1 csidrivers (the world's attach/detach controller reads `attachRequired`)
    CsiDriver,
    /// storage.k8s.io/v1 volumeattachments (the world's attach/detach controller and CSI
    /// attacher write them)
    VolumeAttachment,
    /// nodemaintenance.medik8s.io/v1beta1 nodemaintenances: a custom resource, served only
    /// while its CRD is installed (`crd.rs`), kept as JSON (no k8s-openapi type)
    NodeMaintenance,
}

impl Kind {
    /// Every served kind.
    pub const ALL: [Kind; 27] = [
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
        Kind::PersistentVolume,
        Kind::PersistentVolumeClaim,
        Kind::StorageClass,
        Kind::CsiDriver,
        Kind::VolumeAttachment,
        Kind::NodeMaintenance,
    ];

    /// The served API groups ("" for core), each with version v1.
    pub const GROUPS: [&'static str; 9] = [
        "",
        "apps",
        "events.k8s.io",
        "policy",
        "coordination.k8s.io",
        "rbac.authorization.k8s.io",
        "scheduling.k8s.io",
        "admissionregistration.k8s.io",
        "storage.k8s.io",
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
            | Kind::Service
            | Kind::PersistentVolume
            | Kind::PersistentVolumeClaim => "",
            Kind::StorageClass | Kind::CsiDriver | Kind::VolumeAttachment => "storage.k8s.io",
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
            Kind::NodeMaintenance => crd::GROUP,
        }
    }

    /// The served version: v1, but for the custom resource's.
    pub fn version(self) -> &'static str {
        match self {
            Kind::NodeMaintenance => crd::VERSION,
            _ => "v1",
        }
    }

    /// Whether `group`/`version` is one of the built-in groups (each served at v1) or the
    /// custom resource's (served only while installed: `server.rs` checks).
    pub fn serves(group: &str, version: &str) -> bool {
        (version == "v1" && Kind::GROUPS.contains(&group))
            || (group == crd::GROUP && version == crd::VERSION)
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
            "storage.k8s.io" => "storage.k8s.io/v1",
            crd::GROUP => crd::API_VERSION,
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
            Kind::PersistentVolume => "persistentvolumes",
            Kind::PersistentVolumeClaim => "persistentvolumeclaims",
            Kind::StorageClass => "storageclasses",
            Kind::CsiDriver => "csidrivers",
            Kind::VolumeAttachment => "volumeattachments",
            Kind::NodeMaintenance => "nodemaintenances",
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
            Kind::PersistentVolume => "PersistentVolume",
            Kind::PersistentVolumeClaim => "PersistentVolumeClaim",
            Kind::StorageClass => "StorageClass",
            Kind::CsiDriver => "CSIDriver",
            Kind::VolumeAttachment => "VolumeAttachment",
            Kind::NodeMaintenance => "NodeMaintenance",
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
                | Kind::PersistentVolume
                | Kind::StorageClass
                | Kind::CsiDriver
                | Kind::VolumeAttachment
                | Kind::NodeMaintenance
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
            Kind::Pdb
            | Kind::PersistentVolume
            | Kind::PersistentVolumeClaim
            | Kind::VolumeAttachment
            | Kind::NodeMaintenance => &["status"],
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
                | Kind::PersistentVolume
                | Kind::PersistentVolumeClaim
                | Kind::VolumeAttachment
                | Kind::NodeMaintenance
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
                | Kind::NodeMaintenance
        )
    }

    /// True when an update that changes the spec bumps `metadata.generation`: the kinds that
    /// set it on create, and CSIDrivers, created without one (their strategy only bumps it).
    pub fn bumps_generation(self) -> bool {
        self.sets_generation() || self == Kind::CsiDriver
    }

    /// Decodes `value` into the k8s-openapi type and back: validation and canonical form,
    /// with the quantities and empty strings of the volume kinds as kube-apiserver's Go types
    /// decode and serve them ([`go_form`]).
    pub fn canonicalize(self, value: Value) -> Result<Value, DecodeError> {
        let mut v = self.roundtrip(value)?;
        go_form(self, &mut v).map_err(|e| DecodeError::new(self, e))?;
        Ok(v)
    }

    fn roundtrip(self, value: Value) -> Result<Value, DecodeError> {
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
            Kind::PersistentVolume => roundtrip::<a::core::v1::PersistentVolume>(self, value),
            Kind::PersistentVolumeClaim => {
                roundtrip::<a::core::v1::PersistentVolumeClaim>(self, value)
            }
            Kind::StorageClass => roundtrip::<a::storage::v1::StorageClass>(self, value),
            Kind::CsiDriver => roundtrip::<a::storage::v1::CSIDriver>(self, value),
            Kind::VolumeAttachment => roundtrip::<a::storage::v1::VolumeAttachment>(self, value),
            // Unstructured, as kube-apiserver keeps a custom resource: pruned by its schema.
            Kind::NodeMaintenance => crd::prune(value).map_err(|e| DecodeError::new(self, e)),
        }
    }

    /// `fieldValidation=Strict`: the 400 kube-apiserver answers when `value` has fields its
    /// type does not know (they would be dropped on decoding).
    pub fn check_strict(self, value: &Value) -> Result<(), DecodeError> {
        // Unknown fields are those the type drops, not those its Go form leaves out.
        let canonical = self.roundtrip(value.clone())?;
        go_form(self, &mut canonical.clone()).map_err(|e| DecodeError::new(self, e))?;
        let mut unknown = Vec::new();
        unknown_fields(value, &canonical, "", &mut unknown);
        if unknown.is_empty() {
            return Ok(());
        }
        let list: Vec<String> = unknown
            .iter()
            .map(|f| format!("unknown field \"{f}\""))
            .collect();
        Err(DecodeError::new(
            self,
            format!("strict decoding error: {}", list.join(", ")),
        ))
    }
}

/// The resource lists of each kind whose values are `resource.Quantity`s.
fn quantity_lists(kind: Kind) -> &'static [&'static str] {
    match kind {
        Kind::PersistentVolume => &["/spec/capacity"],
        Kind::PersistentVolumeClaim => &[
            "/spec/resources/requests",
            "/spec/resources/limits",
            "/status/capacity",
            "/status/allocatedResources",
        ],
        _ => &[],
    }
}

/// What the Go types make of a decoded object where k8s-openapi's keep it as written: each
/// quantity parsed (the decoder's error when one does not parse), rounded up to milli units
/// (the scheme's `SetDefaults_ResourceList`) and served in its canonical form, and a
/// PersistentVolume's empty `storageClassName` (a plain `omitempty` string there) left out.
/// Quantities of other kinds (a Pod's resources, a Node's capacity) are kept as written (see
/// `sim`).
fn go_form(kind: Kind, v: &mut Value) -> Result<(), QuantityError> {
    for list in quantity_lists(kind) {
        let Some(map) = v.pointer_mut(list).and_then(Value::as_object_mut) else {
            continue;
        };
        for q in map.values_mut() {
            if let Some(s) = q.as_str() {
                let mut parsed = Quantity::parse(s)?;
                // SetDefaults_ResourceList: rounded up to milli units.
                parsed.round_up(-3);
                *q = Value::String(parsed.canonical());
            }
        }
    }
    if kind == Kind::PersistentVolume && v["spec"]["storageClassName"] == "" {
        if let Some(spec) = v["spec"].as_object_mut() {
            spec.remove("storageClassName");
        }
    }
    Ok(())
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

fn roundtrip<T: DeserializeOwned + Serialize>(
    kind: Kind,
    value: Value,
) -> Result<Value, DecodeError> {
    let typed: T = serde_json::from_value(value).map_err(|e| DecodeError::new(kind, e))?;
    serde_json::to_value(&typed).map_err(|e| DecodeError::new(kind, e))
}

/// The MicroTime format check of a request body (golden 65: a MicroTime is parsed with Go's
/// layout `2006-01-02T15:04:05.000000Z07:00`, so its six fractional digits are mandatory).
/// Kind-specific semantic validation lives with each kind (`events.rs`, `strategy.rs`).
pub fn validate(kind: Kind, raw: &Value) -> Result<(), DecodeError> {
    let micro = |v: &Value| -> Result<(), DecodeError> {
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
        Err(DecodeError::new(kind, format!(
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
