//! Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`), decoded into the
//! JSON a JSON client would have sent for the same object.
//!
//! kubectl's typed generators (`kubectl create namespace`, `create deployment`, `create
//! configmap`, `create pdb`...) send their object this way. This module owns the wire format
//! (the `k8s\0` magic, then a `runtime.Unknown` envelope whose `raw` bytes hold the object) and a
//! table of the message types the simulator knows: field number -> JSON name, type and
//! presence, read from the `generated.proto` files and Go struct tags of Kubernetes v1.36. The
//! server then treats the decoded object exactly like a JSON body.
//!
//! It must never drop a field silently: a field number the table does not know, or a field the
//! simulator's storage types would lose, is refused with the message type and number named
//! (400 BadRequest, the code kube-apiserver answers for a body it cannot decode). kube-apiserver
//! itself skips unknown field numbers; the simulator refuses them because a number it does not
//! know may be one the real server stores. It must never touch the store or talk HTTP.

use serde_json::{json, Map, Value};
use thiserror::Error;

use super::errors::ApiError;
use super::kinds::Kind;

/// The media type of Kubernetes protobuf bodies.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The four bytes every Kubernetes protobuf body starts with.
pub const MAGIC: [u8; 4] = *b"k8s\0";

/// True when a Content-Type header names the Kubernetes protobuf media type (parameters aside).
pub fn is_protobuf(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .eq_ignore_ascii_case(MEDIA_TYPE)
}

/// Why a protobuf body could not be decoded. The malformed-input variants use the words of
/// kube-apiserver's decoder, so the simulator's message matches the real one.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum DecodeError {
    /// The body is empty.
    #[error("empty data")]
    EmptyData,
    /// The body is the magic and nothing else.
    #[error("empty body")]
    EmptyBody,
    /// The body does not start with `k8s\0`.
    #[error(
        "provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]"
    )]
    NoMagic,
    /// A length, varint or fixed-size value runs past the end of its message.
    #[error("unexpected EOF")]
    UnexpectedEof,
    /// A varint longer than 64 bits.
    #[error("proto: integer overflow")]
    IntOverflow,
    /// A length that does not fit a signed 64-bit integer.
    #[error("proto: negative length found during unmarshal")]
    NegativeLength,
    /// Field number 0 (or beyond the protobuf range).
    #[error("proto: {message}: illegal tag {number} (wire type {wire})")]
    IllegalTag {
        /// The message type being decoded.
        message: &'static str,
        /// The field number read.
        number: u64,
        /// The wire type read.
        wire: u8,
    },
    /// A wire type that does not exist, or a group (never used by Kubernetes).
    #[error("proto: {message}: illegal wireType {wire}")]
    IllegalWireType {
        /// The message type being decoded.
        message: &'static str,
        /// The wire type read.
        wire: u8,
    },
    /// A known field sent with another wire type than its type has.
    #[error("proto: wrong wireType = {wire} for field {field} of {message}")]
    WrongWireType {
        /// The message type being decoded.
        message: &'static str,
        /// The field's JSON name.
        field: &'static str,
        /// The wire type read.
        wire: u8,
    },
    /// A well-formed field whose number the simulator's table does not know.
    #[error("protobuf field number {number} (wire type {wire}) of {message} is not in the simulated API server's protobuf table; it is refused rather than dropped")]
    UnknownField {
        /// The message type being decoded.
        message: &'static str,
        /// The field number.
        number: u64,
        /// The wire type read.
        wire: u8,
    },
    /// An `IntOrString` whose type is neither 0 (int) nor 1 (string).
    #[error("impossible IntOrString.Type {0}")]
    IntOrStringType(i64),
    /// A managedFields `fieldsV1` that is not JSON.
    #[error("invalid fieldsV1: {0}")]
    FieldsV1(String),
    /// A timestamp outside the years 0-9999.
    #[error("Time.MarshalJSON: year outside of range [0,9999] ({0} s since the epoch)")]
    TimeRange(i64),
    /// The envelope names a kind the simulator serves but has no protobuf table for.
    #[error(
        "the simulated API server has no protobuf table for {api_version} {kind}; send it as JSON"
    )]
    NoTable {
        /// `apiVersion` of the envelope.
        api_version: String,
        /// `kind` of the envelope.
        kind: String,
    },
    /// The envelope names a kind the simulator does not serve.
    #[error("no kind \"{kind}\" is registered for version \"{api_version}\" in scheme \"k8s.io/kubernetes/pkg/api/legacyscheme/scheme.go:30\"")]
    UnknownKind {
        /// `apiVersion` of the envelope.
        api_version: String,
        /// `kind` of the envelope.
        kind: String,
    },
    /// A decoded field the simulator's storage types would drop.
    #[error("field \"{0}\" was decoded but the simulated API server cannot store it; it is refused rather than dropped")]
    NotStored(String),
}

type Result<T, E = DecodeError> = std::result::Result<T, E>;

/// A protobuf message type of the Kubernetes API, as far as the simulator knows it.
#[derive(Debug)]
pub struct Message {
    /// Fully qualified protobuf name, as in the error messages.
    pub name: &'static str,
    /// The fields the simulator decodes; any other number is refused.
    pub fields: &'static [Field],
}

/// One field of a [`Message`].
#[derive(Clone, Copy, Debug)]
pub struct Field {
    /// Protobuf field number.
    pub number: u32,
    /// JSON name (ignored for [`Ty::Inline`]).
    pub json: &'static str,
    /// Element type.
    pub ty: Ty,
    /// Cardinality and how a zero value reads.
    pub shape: Shape,
}

/// The type of a field (or of each element of a repeated field or map value).
#[derive(Clone, Copy, Debug)]
pub enum Ty {
    /// `string`.
    Str,
    /// `bool`.
    Bool,
    /// `int32` (varint).
    I32,
    /// `int64` (varint).
    I64,
    /// `bytes`, base64 in JSON.
    Bytes,
    /// A nested message, a JSON object.
    Msg(&'static Message),
    /// A nested message whose fields Go embeds inline in the parent's JSON.
    Inline(&'static Message),
    /// `intstr.IntOrString`: a JSON number or string.
    IntOrString,
    /// `resource.Quantity`: a JSON string.
    Quantity,
    /// `metav1.Time`: an RFC 3339 string with seconds, absent when zero.
    Time,
    /// `metav1.FieldsV1`: raw JSON bytes, inlined.
    FieldsV1,
}

/// Cardinality of a field and what its zero value means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// A Go value field with `omitempty`: Go writes it even when zero, and a zero (`""`, 0,
    /// false) means unset, so it is left out of the JSON. Nested messages are always kept.
    Value,
    /// A Go pointer field (written only when set) or one without `omitempty`: kept as sent,
    /// zero included.
    Kept,
    /// `repeated`: a JSON array (packed or not, for numbers).
    Repeated,
    /// `map<string, T>`: a JSON object.
    Map,
}

const fn value(number: u32, json: &'static str, ty: Ty) -> Field {
    Field {
        number,
        json,
        ty,
        shape: Shape::Value,
    }
}

const fn kept(number: u32, json: &'static str, ty: Ty) -> Field {
    Field {
        number,
        json,
        ty,
        shape: Shape::Kept,
    }
}

const fn repeated(number: u32, json: &'static str, ty: Ty) -> Field {
    Field {
        number,
        json,
        ty,
        shape: Shape::Repeated,
    }
}

const fn map(number: u32, json: &'static str, ty: Ty) -> Field {
    Field {
        number,
        json,
        ty,
        shape: Shape::Map,
    }
}

const fn inline(number: u32, m: &'static Message) -> Field {
    Field {
        number,
        json: "",
        ty: Ty::Inline(m),
        shape: Shape::Value,
    }
}

use Ty::{Bool, Bytes, IntOrString, Msg, Quantity, Str, Time, I32, I64};

// ---- k8s.io/apimachinery: runtime, meta/v1, intstr, resource ----

/// `runtime.Unknown`, the envelope of every protobuf body.
pub static UNKNOWN: Message = Message {
    name: "k8s.io.apimachinery.pkg.runtime.Unknown",
    fields: &[
        value(1, "typeMeta", Msg(&TYPE_META)),
        value(2, "raw", Bytes),
        value(3, "contentEncoding", Str),
        value(4, "contentType", Str),
    ],
};

static TYPE_META: Message = Message {
    name: "k8s.io.apimachinery.pkg.runtime.TypeMeta",
    fields: &[value(1, "apiVersion", Str), value(2, "kind", Str)],
};

static INT_OR_STRING: Message = Message {
    name: "k8s.io.apimachinery.pkg.util.intstr.IntOrString",
    fields: &[
        kept(1, "type", I64),
        kept(2, "intVal", I32),
        kept(3, "strVal", Str),
    ],
};

static QUANTITY: Message = Message {
    name: "k8s.io.apimachinery.pkg.api.resource.Quantity",
    fields: &[kept(1, "string", Str)],
};

static TIME: Message = Message {
    name: "k8s.io.apimachinery.pkg.apis.meta.v1.Time",
    fields: &[kept(1, "seconds", I64), kept(2, "nanos", I32)],
};

static FIELDS_V1: Message = Message {
    name: "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1",
    fields: &[kept(1, "Raw", Bytes)],
};

static OBJECT_META: Message = Message {
    name: "k8s.io.apimachinery.pkg.apis.meta.v1.ObjectMeta",
    fields: &[
        value(1, "name", Str),
        value(2, "generateName", Str),
        value(3, "namespace", Str),
        value(4, "selfLink", Str),
        value(5, "uid", Str),
        value(6, "resourceVersion", Str),
        value(7, "generation", I64),
        value(8, "creationTimestamp", Time),
        kept(9, "deletionTimestamp", Time),
        kept(10, "deletionGracePeriodSeconds", I64),
        map(11, "labels", Str),
        map(12, "annotations", Str),
        repeated(13, "ownerReferences", Msg(&OWNER_REFERENCE)),
        repeated(14, "finalizers", Str),
        repeated(17, "managedFields", Msg(&MANAGED_FIELDS_ENTRY)),
    ],
};

static OWNER_REFERENCE: Message = Message {
    name: "k8s.io.apimachinery.pkg.apis.meta.v1.OwnerReference",
    fields: &[
        kept(1, "kind", Str),
        kept(3, "name", Str),
        kept(4, "uid", Str),
        kept(5, "apiVersion", Str),
        kept(6, "controller", Bool),
        kept(7, "blockOwnerDeletion", Bool),
    ],
};

static MANAGED_FIELDS_ENTRY: Message = Message {
    name: "k8s.io.apimachinery.pkg.apis.meta.v1.ManagedFieldsEntry",
    fields: &[
        value(1, "manager", Str),
        value(2, "operation", Str),
        value(3, "apiVersion", Str),
        kept(4, "time", Time),
        value(6, "fieldsType", Str),
        kept(7, "fieldsV1", Ty::FieldsV1),
        value(8, "subresource", Str),
    ],
};

static LABEL_SELECTOR: Message = Message {
    name: "k8s.io.apimachinery.pkg.apis.meta.v1.LabelSelector",
    fields: &[
        map(1, "matchLabels", Str),
        repeated(2, "matchExpressions", Msg(&LABEL_SELECTOR_REQUIREMENT)),
    ],
};

static LABEL_SELECTOR_REQUIREMENT: Message = Message {
    name: "k8s.io.apimachinery.pkg.apis.meta.v1.LabelSelectorRequirement",
    fields: &[
        kept(1, "key", Str),
        kept(2, "operator", Str),
        repeated(3, "values", Str),
    ],
};

static CONDITION: Message = Message {
    name: "k8s.io.apimachinery.pkg.apis.meta.v1.Condition",
    fields: &[
        kept(1, "type", Str),
        kept(2, "status", Str),
        value(3, "observedGeneration", I64),
        kept(4, "lastTransitionTime", Time),
        kept(5, "reason", Str),
        kept(6, "message", Str),
    ],
};

static DELETE_OPTIONS: Message = Message {
    name: "k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions",
    fields: &[
        kept(1, "gracePeriodSeconds", I64),
        kept(2, "preconditions", Msg(&PRECONDITIONS)),
        kept(3, "orphanDependents", Bool),
        kept(4, "propagationPolicy", Str),
        repeated(5, "dryRun", Str),
        kept(6, "ignoreStoreReadErrorWithClusterBreakingPotential", Bool),
    ],
};

static PRECONDITIONS: Message = Message {
    name: "k8s.io.apimachinery.pkg.apis.meta.v1.Preconditions",
    fields: &[kept(1, "uid", Str), kept(2, "resourceVersion", Str)],
};

// ---- k8s.io/api/core/v1 ----

static NAMESPACE: Message = Message {
    name: "k8s.io.api.core.v1.Namespace",
    fields: &[
        value(1, "metadata", Msg(&OBJECT_META)),
        value(2, "spec", Msg(&NAMESPACE_SPEC)),
        value(3, "status", Msg(&NAMESPACE_STATUS)),
    ],
};

static NAMESPACE_SPEC: Message = Message {
    name: "k8s.io.api.core.v1.NamespaceSpec",
    fields: &[repeated(1, "finalizers", Str)],
};

static NAMESPACE_STATUS: Message = Message {
    name: "k8s.io.api.core.v1.NamespaceStatus",
    fields: &[
        value(1, "phase", Str),
        repeated(2, "conditions", Msg(&NAMESPACE_CONDITION)),
    ],
};

static NAMESPACE_CONDITION: Message = Message {
    name: "k8s.io.api.core.v1.NamespaceCondition",
    fields: &[
        kept(1, "type", Str),
        kept(2, "status", Str),
        value(4, "lastTransitionTime", Time),
        value(5, "reason", Str),
        value(6, "message", Str),
    ],
};

static CONFIG_MAP: Message = Message {
    name: "k8s.io.api.core.v1.ConfigMap",
    fields: &[
        value(1, "metadata", Msg(&OBJECT_META)),
        map(2, "data", Str),
        map(3, "binaryData", Bytes),
        kept(4, "immutable", Bool),
    ],
};

static SERVICE_ACCOUNT: Message = Message {
    name: "k8s.io.api.core.v1.ServiceAccount",
    fields: &[
        value(1, "metadata", Msg(&OBJECT_META)),
        repeated(2, "secrets", Msg(&OBJECT_REFERENCE)),
        repeated(3, "imagePullSecrets", Msg(&LOCAL_OBJECT_REFERENCE)),
        kept(4, "automountServiceAccountToken", Bool),
    ],
};

static OBJECT_REFERENCE: Message = Message {
    name: "k8s.io.api.core.v1.ObjectReference",
    fields: &[
        value(1, "kind", Str),
        value(2, "namespace", Str),
        value(3, "name", Str),
        value(4, "uid", Str),
        value(5, "apiVersion", Str),
        value(6, "resourceVersion", Str),
        value(7, "fieldPath", Str),
    ],
};

static LOCAL_OBJECT_REFERENCE: Message = Message {
    name: "k8s.io.api.core.v1.LocalObjectReference",
    fields: &[value(1, "name", Str)],
};

static POD: Message = Message {
    name: "k8s.io.api.core.v1.Pod",
    fields: &[
        value(1, "metadata", Msg(&OBJECT_META)),
        value(2, "spec", Msg(&POD_SPEC)),
        value(3, "status", Msg(&POD_STATUS)),
    ],
};

static POD_TEMPLATE_SPEC: Message = Message {
    name: "k8s.io.api.core.v1.PodTemplateSpec",
    fields: &[
        value(1, "metadata", Msg(&OBJECT_META)),
        value(2, "spec", Msg(&POD_SPEC)),
    ],
};

// Not known (refused when sent): volumes (1), affinity (18), hostAliases (23), dnsConfig
// (26), readinessGates (28), topologySpreadConstraints (33), ephemeralContainers (34), os
// (36), resourceClaims (39), resources (40), hostnameOverride (41), schedulingGroup (43).
static POD_SPEC: Message = Message {
    name: "k8s.io.api.core.v1.PodSpec",
    fields: &[
        repeated(2, "containers", Msg(&CONTAINER)),
        value(3, "restartPolicy", Str),
        kept(4, "terminationGracePeriodSeconds", I64),
        kept(5, "activeDeadlineSeconds", I64),
        value(6, "dnsPolicy", Str),
        map(7, "nodeSelector", Str),
        value(8, "serviceAccountName", Str),
        value(9, "serviceAccount", Str),
        value(10, "nodeName", Str),
        value(11, "hostNetwork", Bool),
        value(12, "hostPID", Bool),
        value(13, "hostIPC", Bool),
        kept(14, "securityContext", Msg(&POD_SECURITY_CONTEXT)),
        repeated(15, "imagePullSecrets", Msg(&LOCAL_OBJECT_REFERENCE)),
        value(16, "hostname", Str),
        value(17, "subdomain", Str),
        value(19, "schedulerName", Str),
        repeated(20, "initContainers", Msg(&CONTAINER)),
        kept(21, "automountServiceAccountToken", Bool),
        repeated(22, "tolerations", Msg(&TOLERATION)),
        value(24, "priorityClassName", Str),
        kept(25, "priority", I32),
        kept(27, "shareProcessNamespace", Bool),
        kept(29, "runtimeClassName", Str),
        kept(30, "enableServiceLinks", Bool),
        kept(31, "preemptionPolicy", Str),
        map(32, "overhead", Quantity),
        kept(35, "setHostnameAsFQDN", Bool),
        kept(37, "hostUsers", Bool),
        repeated(38, "schedulingGates", Msg(&POD_SCHEDULING_GATE)),
    ],
};

// Not known: seLinuxOptions (1), windowsOptions (8), sysctls (7), appArmorProfile (11).
static POD_SECURITY_CONTEXT: Message = Message {
    name: "k8s.io.api.core.v1.PodSecurityContext",
    fields: &[
        kept(2, "runAsUser", I64),
        kept(3, "runAsNonRoot", Bool),
        repeated(4, "supplementalGroups", I64),
        kept(5, "fsGroup", I64),
        kept(6, "runAsGroup", I64),
        kept(9, "fsGroupChangePolicy", Str),
        kept(10, "seccompProfile", Msg(&SECCOMP_PROFILE)),
        kept(12, "supplementalGroupsPolicy", Str),
        kept(13, "seLinuxChangePolicy", Str),
    ],
};

// Not known: seLinuxOptions (3), windowsOptions (10), appArmorProfile (12).
static SECURITY_CONTEXT: Message = Message {
    name: "k8s.io.api.core.v1.SecurityContext",
    fields: &[
        kept(1, "capabilities", Msg(&CAPABILITIES)),
        kept(2, "privileged", Bool),
        kept(4, "runAsUser", I64),
        kept(5, "runAsNonRoot", Bool),
        kept(6, "readOnlyRootFilesystem", Bool),
        kept(7, "allowPrivilegeEscalation", Bool),
        kept(8, "runAsGroup", I64),
        kept(9, "procMount", Str),
        kept(11, "seccompProfile", Msg(&SECCOMP_PROFILE)),
    ],
};

static CAPABILITIES: Message = Message {
    name: "k8s.io.api.core.v1.Capabilities",
    fields: &[repeated(1, "add", Str), repeated(2, "drop", Str)],
};

static SECCOMP_PROFILE: Message = Message {
    name: "k8s.io.api.core.v1.SeccompProfile",
    fields: &[kept(1, "type", Str), kept(2, "localhostProfile", Str)],
};

// Not known: livenessProbe (10), readinessProbe (11), lifecycle (12), volumeDevices (21),
// startupProbe (22), resizePolicy (23), restartPolicyRules (25).
static CONTAINER: Message = Message {
    name: "k8s.io.api.core.v1.Container",
    fields: &[
        kept(1, "name", Str),
        value(2, "image", Str),
        repeated(3, "command", Str),
        repeated(4, "args", Str),
        value(5, "workingDir", Str),
        repeated(6, "ports", Msg(&CONTAINER_PORT)),
        repeated(7, "env", Msg(&ENV_VAR)),
        value(8, "resources", Msg(&RESOURCE_REQUIREMENTS)),
        repeated(9, "volumeMounts", Msg(&VOLUME_MOUNT)),
        value(13, "terminationMessagePath", Str),
        value(14, "imagePullPolicy", Str),
        kept(15, "securityContext", Msg(&SECURITY_CONTEXT)),
        value(16, "stdin", Bool),
        value(17, "stdinOnce", Bool),
        value(18, "tty", Bool),
        repeated(19, "envFrom", Msg(&ENV_FROM_SOURCE)),
        value(20, "terminationMessagePolicy", Str),
        kept(24, "restartPolicy", Str),
    ],
};

static CONTAINER_PORT: Message = Message {
    name: "k8s.io.api.core.v1.ContainerPort",
    fields: &[
        value(1, "name", Str),
        value(2, "hostPort", I32),
        kept(3, "containerPort", I32),
        value(4, "protocol", Str),
        value(5, "hostIP", Str),
    ],
};

static ENV_VAR: Message = Message {
    name: "k8s.io.api.core.v1.EnvVar",
    fields: &[
        kept(1, "name", Str),
        value(2, "value", Str),
        kept(3, "valueFrom", Msg(&ENV_VAR_SOURCE)),
    ],
};

// Not known: fileKeyRef (5).
static ENV_VAR_SOURCE: Message = Message {
    name: "k8s.io.api.core.v1.EnvVarSource",
    fields: &[
        kept(1, "fieldRef", Msg(&OBJECT_FIELD_SELECTOR)),
        kept(2, "resourceFieldRef", Msg(&RESOURCE_FIELD_SELECTOR)),
        kept(3, "configMapKeyRef", Msg(&CONFIG_MAP_KEY_SELECTOR)),
        kept(4, "secretKeyRef", Msg(&SECRET_KEY_SELECTOR)),
    ],
};

static OBJECT_FIELD_SELECTOR: Message = Message {
    name: "k8s.io.api.core.v1.ObjectFieldSelector",
    fields: &[value(1, "apiVersion", Str), kept(2, "fieldPath", Str)],
};

static RESOURCE_FIELD_SELECTOR: Message = Message {
    name: "k8s.io.api.core.v1.ResourceFieldSelector",
    fields: &[
        value(1, "containerName", Str),
        kept(2, "resource", Str),
        value(3, "divisor", Quantity),
    ],
};

static CONFIG_MAP_KEY_SELECTOR: Message = Message {
    name: "k8s.io.api.core.v1.ConfigMapKeySelector",
    fields: &[
        inline(1, &LOCAL_OBJECT_REFERENCE),
        kept(2, "key", Str),
        kept(3, "optional", Bool),
    ],
};

static SECRET_KEY_SELECTOR: Message = Message {
    name: "k8s.io.api.core.v1.SecretKeySelector",
    fields: &[
        inline(1, &LOCAL_OBJECT_REFERENCE),
        kept(2, "key", Str),
        kept(3, "optional", Bool),
    ],
};

static ENV_FROM_SOURCE: Message = Message {
    name: "k8s.io.api.core.v1.EnvFromSource",
    fields: &[
        value(1, "prefix", Str),
        kept(2, "configMapRef", Msg(&CONFIG_MAP_ENV_SOURCE)),
        kept(3, "secretRef", Msg(&SECRET_ENV_SOURCE)),
    ],
};

static CONFIG_MAP_ENV_SOURCE: Message = Message {
    name: "k8s.io.api.core.v1.ConfigMapEnvSource",
    fields: &[
        inline(1, &LOCAL_OBJECT_REFERENCE),
        kept(2, "optional", Bool),
    ],
};

static SECRET_ENV_SOURCE: Message = Message {
    name: "k8s.io.api.core.v1.SecretEnvSource",
    fields: &[
        inline(1, &LOCAL_OBJECT_REFERENCE),
        kept(2, "optional", Bool),
    ],
};

static RESOURCE_REQUIREMENTS: Message = Message {
    name: "k8s.io.api.core.v1.ResourceRequirements",
    fields: &[
        map(1, "limits", Quantity),
        map(2, "requests", Quantity),
        repeated(3, "claims", Msg(&RESOURCE_CLAIM)),
    ],
};

static RESOURCE_CLAIM: Message = Message {
    name: "k8s.io.api.core.v1.ResourceClaim",
    fields: &[kept(1, "name", Str), value(2, "request", Str)],
};

static VOLUME_MOUNT: Message = Message {
    name: "k8s.io.api.core.v1.VolumeMount",
    fields: &[
        kept(1, "name", Str),
        value(2, "readOnly", Bool),
        kept(3, "mountPath", Str),
        value(4, "subPath", Str),
        kept(5, "mountPropagation", Str),
        value(6, "subPathExpr", Str),
        kept(7, "recursiveReadOnly", Str),
    ],
};

static TOLERATION: Message = Message {
    name: "k8s.io.api.core.v1.Toleration",
    fields: &[
        value(1, "key", Str),
        value(2, "operator", Str),
        value(3, "value", Str),
        value(4, "effect", Str),
        kept(5, "tolerationSeconds", I64),
    ],
};

static POD_SCHEDULING_GATE: Message = Message {
    name: "k8s.io.api.core.v1.PodSchedulingGate",
    fields: &[kept(1, "name", Str)],
};

// Not known: containerStatuses (8), initContainerStatuses (10), ephemeralContainerStatuses
// (13), resourceClaimStatuses (15), extendedResourceClaimStatus (18), allocatedResources (19),
// resources (20), nodeAllocatableResourceClaimStatuses (21).
static POD_STATUS: Message = Message {
    name: "k8s.io.api.core.v1.PodStatus",
    fields: &[
        value(1, "phase", Str),
        repeated(2, "conditions", Msg(&POD_CONDITION)),
        value(3, "message", Str),
        value(4, "reason", Str),
        value(5, "hostIP", Str),
        value(6, "podIP", Str),
        kept(7, "startTime", Time),
        value(9, "qosClass", Str),
        value(11, "nominatedNodeName", Str),
        repeated(12, "podIPs", Msg(&POD_IP)),
        value(14, "resize", Str),
        repeated(16, "hostIPs", Msg(&HOST_IP)),
        value(17, "observedGeneration", I64),
    ],
};

static POD_CONDITION: Message = Message {
    name: "k8s.io.api.core.v1.PodCondition",
    fields: &[
        kept(1, "type", Str),
        kept(2, "status", Str),
        value(3, "lastProbeTime", Time),
        value(4, "lastTransitionTime", Time),
        value(5, "reason", Str),
        value(6, "message", Str),
        value(7, "observedGeneration", I64),
    ],
};

static POD_IP: Message = Message {
    name: "k8s.io.api.core.v1.PodIP",
    fields: &[kept(1, "ip", Str)],
};

static HOST_IP: Message = Message {
    name: "k8s.io.api.core.v1.HostIP",
    fields: &[kept(1, "ip", Str)],
};

// ---- k8s.io/api/apps/v1 ----

static DEPLOYMENT: Message = Message {
    name: "k8s.io.api.apps.v1.Deployment",
    fields: &[
        value(1, "metadata", Msg(&OBJECT_META)),
        value(2, "spec", Msg(&DEPLOYMENT_SPEC)),
        value(3, "status", Msg(&DEPLOYMENT_STATUS)),
    ],
};

static DEPLOYMENT_SPEC: Message = Message {
    name: "k8s.io.api.apps.v1.DeploymentSpec",
    fields: &[
        kept(1, "replicas", I32),
        kept(2, "selector", Msg(&LABEL_SELECTOR)),
        kept(3, "template", Msg(&POD_TEMPLATE_SPEC)),
        value(4, "strategy", Msg(&DEPLOYMENT_STRATEGY)),
        value(5, "minReadySeconds", I32),
        kept(6, "revisionHistoryLimit", I32),
        value(7, "paused", Bool),
        kept(9, "progressDeadlineSeconds", I32),
    ],
};

static DEPLOYMENT_STRATEGY: Message = Message {
    name: "k8s.io.api.apps.v1.DeploymentStrategy",
    fields: &[
        value(1, "type", Str),
        kept(2, "rollingUpdate", Msg(&ROLLING_UPDATE_DEPLOYMENT)),
    ],
};

static ROLLING_UPDATE_DEPLOYMENT: Message = Message {
    name: "k8s.io.api.apps.v1.RollingUpdateDeployment",
    fields: &[
        kept(1, "maxUnavailable", IntOrString),
        kept(2, "maxSurge", IntOrString),
    ],
};

static DEPLOYMENT_STATUS: Message = Message {
    name: "k8s.io.api.apps.v1.DeploymentStatus",
    fields: &[
        value(1, "observedGeneration", I64),
        value(2, "replicas", I32),
        value(3, "updatedReplicas", I32),
        value(4, "availableReplicas", I32),
        value(5, "unavailableReplicas", I32),
        repeated(6, "conditions", Msg(&DEPLOYMENT_CONDITION)),
        value(7, "readyReplicas", I32),
        kept(8, "collisionCount", I32),
        kept(9, "terminatingReplicas", I32),
    ],
};

static DEPLOYMENT_CONDITION: Message = Message {
    name: "k8s.io.api.apps.v1.DeploymentCondition",
    fields: &[
        kept(1, "type", Str),
        kept(2, "status", Str),
        value(4, "reason", Str),
        value(5, "message", Str),
        value(6, "lastUpdateTime", Time),
        value(7, "lastTransitionTime", Time),
    ],
};

// ---- k8s.io/api/policy/v1 ----

static POD_DISRUPTION_BUDGET: Message = Message {
    name: "k8s.io.api.policy.v1.PodDisruptionBudget",
    fields: &[
        value(1, "metadata", Msg(&OBJECT_META)),
        value(2, "spec", Msg(&POD_DISRUPTION_BUDGET_SPEC)),
        value(3, "status", Msg(&POD_DISRUPTION_BUDGET_STATUS)),
    ],
};

static POD_DISRUPTION_BUDGET_SPEC: Message = Message {
    name: "k8s.io.api.policy.v1.PodDisruptionBudgetSpec",
    fields: &[
        kept(1, "minAvailable", IntOrString),
        kept(2, "selector", Msg(&LABEL_SELECTOR)),
        kept(3, "maxUnavailable", IntOrString),
        kept(4, "unhealthyPodEvictionPolicy", Str),
    ],
};

static POD_DISRUPTION_BUDGET_STATUS: Message = Message {
    name: "k8s.io.api.policy.v1.PodDisruptionBudgetStatus",
    fields: &[
        value(1, "observedGeneration", I64),
        map(2, "disruptedPods", Time),
        kept(3, "disruptionsAllowed", I32),
        kept(4, "currentHealthy", I32),
        kept(5, "desiredHealthy", I32),
        kept(6, "expectedPods", I32),
        repeated(7, "conditions", Msg(&CONDITION)),
    ],
};

/// `policy/v1` Eviction, the body of `pods/NAME/eviction`.
pub static EVICTION: Message = Message {
    name: "k8s.io.api.policy.v1.Eviction",
    fields: &[
        value(1, "metadata", Msg(&OBJECT_META)),
        kept(2, "deleteOptions", Msg(&DELETE_OPTIONS)),
    ],
};

// ---- k8s.io/api/rbac/v1 ----

static ROLE: Message = Message {
    name: "k8s.io.api.rbac.v1.Role",
    fields: &[
        value(1, "metadata", Msg(&OBJECT_META)),
        repeated(2, "rules", Msg(&POLICY_RULE)),
    ],
};

static CLUSTER_ROLE: Message = Message {
    name: "k8s.io.api.rbac.v1.ClusterRole",
    fields: &[
        value(1, "metadata", Msg(&OBJECT_META)),
        repeated(2, "rules", Msg(&POLICY_RULE)),
        kept(3, "aggregationRule", Msg(&AGGREGATION_RULE)),
    ],
};

static AGGREGATION_RULE: Message = Message {
    name: "k8s.io.api.rbac.v1.AggregationRule",
    fields: &[repeated(1, "clusterRoleSelectors", Msg(&LABEL_SELECTOR))],
};

static POLICY_RULE: Message = Message {
    name: "k8s.io.api.rbac.v1.PolicyRule",
    fields: &[
        repeated(1, "verbs", Str),
        repeated(2, "apiGroups", Str),
        repeated(3, "resources", Str),
        repeated(4, "resourceNames", Str),
        repeated(5, "nonResourceURLs", Str),
    ],
};

static ROLE_BINDING: Message = Message {
    name: "k8s.io.api.rbac.v1.RoleBinding",
    fields: &[
        value(1, "metadata", Msg(&OBJECT_META)),
        repeated(2, "subjects", Msg(&SUBJECT)),
        value(3, "roleRef", Msg(&ROLE_REF)),
    ],
};

static CLUSTER_ROLE_BINDING: Message = Message {
    name: "k8s.io.api.rbac.v1.ClusterRoleBinding",
    fields: &[
        value(1, "metadata", Msg(&OBJECT_META)),
        repeated(2, "subjects", Msg(&SUBJECT)),
        value(3, "roleRef", Msg(&ROLE_REF)),
    ],
};

static SUBJECT: Message = Message {
    name: "k8s.io.api.rbac.v1.Subject",
    fields: &[
        kept(1, "kind", Str),
        value(2, "apiGroup", Str),
        kept(3, "name", Str),
        value(4, "namespace", Str),
    ],
};

static ROLE_REF: Message = Message {
    name: "k8s.io.api.rbac.v1.RoleRef",
    fields: &[
        kept(1, "apiGroup", Str),
        kept(2, "kind", Str),
        kept(3, "name", Str),
    ],
};

// ---- k8s.io/api/scheduling/v1 ----

static PRIORITY_CLASS: Message = Message {
    name: "k8s.io.api.scheduling.v1.PriorityClass",
    fields: &[
        value(1, "metadata", Msg(&OBJECT_META)),
        kept(2, "value", I32),
        value(3, "globalDefault", Bool),
        value(4, "description", Str),
        kept(5, "preemptionPolicy", Str),
    ],
};

/// The top-level message of a served kind, if the simulator decodes it from protobuf.
pub fn message_of(kind: Kind) -> Option<&'static Message> {
    Some(match kind {
        Kind::Namespace => &NAMESPACE,
        Kind::ConfigMap => &CONFIG_MAP,
        Kind::ServiceAccount => &SERVICE_ACCOUNT,
        Kind::Pod => &POD,
        Kind::Deployment => &DEPLOYMENT,
        Kind::Pdb => &POD_DISRUPTION_BUDGET,
        Kind::Role => &ROLE,
        Kind::ClusterRole => &CLUSTER_ROLE,
        Kind::RoleBinding => &ROLE_BINDING,
        Kind::ClusterRoleBinding => &CLUSTER_ROLE_BINDING,
        Kind::PriorityClass => &PRIORITY_CLASS,
        _ => return None,
    })
}

// ---- wire format ----

/// One field as read off the wire.
#[derive(Clone, Copy, Debug)]
enum Payload<'a> {
    Varint(u64),
    /// No Kubernetes type uses fixed-size fields: only skipped over.
    Fixed64,
    Bytes(&'a [u8]),
    Fixed32,
}

impl Payload<'_> {
    fn wire(&self) -> u8 {
        match self {
            Payload::Varint(_) => 0,
            Payload::Fixed64 => 1,
            Payload::Bytes(_) => 2,
            Payload::Fixed32 => 5,
        }
    }
}

struct Reader<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(data: &'a [u8]) -> Reader<'a> {
        Reader { data, pos: 0 }
    }

    fn varint(&mut self) -> Result<u64> {
        let mut x = 0u64;
        let mut shift = 0u32;
        loop {
            if shift >= 64 {
                return Err(DecodeError::IntOverflow);
            }
            let b = *self.data.get(self.pos).ok_or(DecodeError::UnexpectedEof)?;
            self.pos += 1;
            x |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(x);
            }
            shift += 7;
        }
    }

    fn take(&mut self, n: u64) -> Result<&'a [u8]> {
        if n > i64::MAX as u64 {
            return Err(DecodeError::NegativeLength);
        }
        let rest = (self.data.len() - self.pos) as u64;
        if n > rest {
            return Err(DecodeError::UnexpectedEof);
        }
        let s = &self.data[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    /// The next field of `message`: its number and payload.
    fn next(&mut self, message: &'static str) -> Result<Option<(u64, Payload<'a>)>> {
        if self.pos >= self.data.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let (number, wire) = (key >> 3, (key & 7) as u8);
        if wire == 4 || wire == 3 || wire > 5 {
            return Err(DecodeError::IllegalWireType { message, wire });
        }
        if number == 0 || number > (1 << 29) - 1 {
            return Err(DecodeError::IllegalTag {
                message,
                number,
                wire,
            });
        }
        let payload = match wire {
            0 => Payload::Varint(self.varint()?),
            1 => {
                self.take(8)?;
                Payload::Fixed64
            }
            2 => {
                let n = self.varint()?;
                Payload::Bytes(self.take(n)?)
            }
            _ => {
                self.take(4)?;
                Payload::Fixed32
            }
        };
        Ok(Some((number, payload)))
    }
}

/// The decoded `runtime.Unknown` envelope.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Envelope<'a> {
    /// `typeMeta.apiVersion` ("" when not sent).
    pub api_version: String,
    /// `typeMeta.kind` ("" when not sent).
    pub kind: String,
    /// The encoded object.
    pub raw: &'a [u8],
    /// `contentEncoding` (kube-apiserver ignores it, and so does the simulator).
    pub content_encoding: String,
    /// `contentType` (kube-apiserver ignores it, and so does the simulator).
    pub content_type: String,
}

/// Reads the magic and the `runtime.Unknown` envelope of a protobuf body.
pub fn envelope(body: &[u8]) -> Result<Envelope<'_>> {
    if body.is_empty() {
        return Err(DecodeError::EmptyData);
    }
    let Some(data) = body.strip_prefix(&MAGIC) else {
        return Err(DecodeError::NoMagic);
    };
    if data.is_empty() {
        return Err(DecodeError::EmptyBody);
    }
    let mut env = Envelope::default();
    let mut r = Reader::new(data);
    while let Some((number, p)) = r.next(UNKNOWN.name)? {
        let field = find(&UNKNOWN, number, p)?;
        let bytes = expect_bytes(&UNKNOWN, field, p)?;
        match number {
            1 => {
                let tm = decode_message(&TYPE_META, bytes)?;
                let s = |k: &str| tm.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                env.api_version = s("apiVersion");
                env.kind = s("kind");
            }
            2 => env.raw = bytes,
            3 => env.content_encoding = String::from_utf8_lossy(bytes).into_owned(),
            _ => env.content_type = String::from_utf8_lossy(bytes).into_owned(),
        }
    }
    Ok(env)
}

fn find(msg: &'static Message, number: u64, p: Payload<'_>) -> Result<&'static Field> {
    msg.fields
        .iter()
        .find(|f| u64::from(f.number) == number)
        .ok_or(DecodeError::UnknownField {
            message: msg.name,
            number,
            wire: p.wire(),
        })
}

fn expect_bytes<'a>(msg: &'static Message, f: &Field, p: Payload<'a>) -> Result<&'a [u8]> {
    match p {
        Payload::Bytes(b) => Ok(b),
        _ => Err(wrong_wire(msg, f, p)),
    }
}

fn wrong_wire(msg: &'static Message, f: &Field, p: Payload<'_>) -> DecodeError {
    DecodeError::WrongWireType {
        message: msg.name,
        field: if f.json.is_empty() {
            "(inline)"
        } else {
            f.json
        },
        wire: p.wire(),
    }
}

/// Decodes one message into its JSON object, by the table.
pub fn decode_message(msg: &'static Message, data: &[u8]) -> Result<Map<String, Value>> {
    let mut out = Map::new();
    let mut r = Reader::new(data);
    while let Some((number, p)) = r.next(msg.name)? {
        let f = find(msg, number, p)?;
        match f.shape {
            Shape::Map => {
                let entry = expect_bytes(msg, f, p)?;
                let (k, v) = decode_entry(msg, f, entry)?;
                let m = out
                    .entry(f.json)
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Value::Object(m) = m {
                    m.insert(k, v);
                }
            }
            Shape::Repeated => {
                let mut items = Vec::new();
                match (f.ty, p) {
                    // Packed numbers: one length-delimited run of varints.
                    (Bool | I32 | I64, Payload::Bytes(b)) => {
                        let mut rr = Reader::new(b);
                        while rr.pos < b.len() {
                            let v = rr.varint()?;
                            items.push(scalar(msg, f, Payload::Varint(v))?.expect("scalar"));
                        }
                    }
                    _ => items.push(element(msg, f, p)?),
                }
                let a = out
                    .entry(f.json)
                    .or_insert_with(|| Value::Array(Vec::new()));
                if let Value::Array(a) = a {
                    a.extend(items);
                }
            }
            Shape::Value | Shape::Kept => {
                if let Ty::Inline(inner) = f.ty {
                    let obj = decode_message(inner, expect_bytes(msg, f, p)?)?;
                    out.extend(obj);
                    continue;
                }
                let v = element(msg, f, p)?;
                let unset = match &v {
                    Value::Null => true,
                    _ if f.shape == Shape::Kept => false,
                    Value::String(s) => s.is_empty() && !is_special(f.ty),
                    Value::Bool(b) => !b,
                    Value::Number(n) => n.as_i64() == Some(0) && !is_special(f.ty),
                    _ => false,
                };
                if unset {
                    // Go overwrites a field read twice: the later zero unsets it.
                    out.remove(f.json);
                } else if let (Some(Value::Object(old)), Value::Object(new)) =
                    (out.get_mut(f.json), &v)
                {
                    // Go merges a message field read twice into the first.
                    old.extend(new.clone());
                } else {
                    out.insert(f.json.to_string(), v);
                }
            }
        }
    }
    Ok(out)
}

/// Types whose zero value Go still writes into JSON (structs with their own marshalling).
fn is_special(ty: Ty) -> bool {
    matches!(ty, Ty::IntOrString | Ty::Quantity)
}

/// One value of field `f` (the field itself, or one element of a repeated field).
fn element(msg: &'static Message, f: &Field, p: Payload<'_>) -> Result<Value> {
    if let Some(v) = scalar(msg, f, p)? {
        return Ok(v);
    }
    let bytes = expect_bytes(msg, f, p)?;
    value_of(msg, f, bytes)
}

/// A varint-typed value, or `None` for length-delimited types.
fn scalar(msg: &'static Message, f: &Field, p: Payload<'_>) -> Result<Option<Value>> {
    let v = match f.ty {
        Bool | I32 | I64 => match p {
            Payload::Varint(v) => v,
            _ => return Err(wrong_wire(msg, f, p)),
        },
        _ => return Ok(None),
    };
    Ok(Some(match f.ty {
        Bool => json!(v != 0),
        // Go's int32 decoding keeps the low 32 bits of the varint.
        I32 => json!(v as u32 as i32),
        _ => json!(v as i64),
    }))
}

/// A length-delimited value of type `f.ty`.
fn value_of(msg: &'static Message, f: &Field, bytes: &[u8]) -> Result<Value> {
    Ok(match f.ty {
        Str => Value::String(String::from_utf8_lossy(bytes).into_owned()),
        Bytes => Value::String(base64(bytes)),
        Msg(inner) | Ty::Inline(inner) => Value::Object(decode_message(inner, bytes)?),
        IntOrString => {
            let m = decode_message(&INT_OR_STRING, bytes)?;
            match m.get("type").and_then(Value::as_i64).unwrap_or(0) {
                0 => json!(m.get("intVal").and_then(Value::as_i64).unwrap_or(0)),
                1 => json!(m.get("strVal").and_then(Value::as_str).unwrap_or("")),
                t => return Err(DecodeError::IntOrStringType(t)),
            }
        }
        Quantity => {
            let m = decode_message(&QUANTITY, bytes)?;
            json!(m.get("string").and_then(Value::as_str).unwrap_or("0"))
        }
        Time => time(bytes)?,
        Ty::FieldsV1 => {
            let mut raw: &[u8] = &[];
            let mut r = Reader::new(bytes);
            while let Some((number, p)) = r.next(FIELDS_V1.name)? {
                let rf = find(&FIELDS_V1, number, p)?;
                raw = expect_bytes(&FIELDS_V1, rf, p)?;
            }
            if raw.is_empty() {
                Value::Null
            } else {
                serde_json::from_slice(raw).map_err(|e| DecodeError::FieldsV1(e.to_string()))?
            }
        }
        Bool | I32 | I64 => return Err(wrong_wire(msg, f, Payload::Bytes(bytes))),
    })
}

/// A `metav1.Time`: absent (null) when the message is empty, as Go marshals a zero time; else
/// seconds-precision RFC 3339 in UTC, as Go's JSON has it.
fn time(bytes: &[u8]) -> Result<Value> {
    if bytes.is_empty() {
        return Ok(Value::Null);
    }
    let m = decode_message(&TIME, bytes)?;
    let secs = m.get("seconds").and_then(Value::as_i64).unwrap_or(0);
    let t = chrono::DateTime::from_timestamp(secs, 0)
        .filter(|t| (0..=9999).contains(&chrono::Datelike::year(t)))
        .ok_or(DecodeError::TimeRange(secs))?;
    Ok(json!(super::meta::timestamp(t)))
}

/// A map entry (`key` = 1, `value` = 2); a missing value is the type's zero, as in Go.
fn decode_entry(msg: &'static Message, f: &Field, data: &[u8]) -> Result<(String, Value)> {
    let (mut key, mut value) = (String::new(), None);
    let mut r = Reader::new(data);
    while let Some((number, p)) = r.next(msg.name)? {
        match number {
            1 => {
                let key_field = Field {
                    number: 1,
                    json: "key",
                    ty: Str,
                    shape: Shape::Kept,
                };
                key = String::from_utf8_lossy(expect_bytes(msg, &key_field, p)?).into_owned();
            }
            2 => value = Some(element(msg, f, p)?),
            _ => {
                return Err(DecodeError::UnknownField {
                    message: msg.name,
                    number,
                    wire: p.wire(),
                })
            }
        }
    }
    let value = match value {
        Some(v) => v,
        None => match f.ty {
            Str | Bytes => json!(""),
            Quantity => json!("0"),
            Msg(_) => json!({}),
            _ => Value::Null,
        },
    };
    Ok((key, value))
}

fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The served kind an envelope names, by `apiVersion` and `kind`.
fn kind_named(api_version: &str, kind: &str) -> Option<Kind> {
    Kind::ALL
        .into_iter()
        .find(|k| k.api_version() == api_version && k.kind_name() == kind)
}

/// Decodes a protobuf create or update body for `route_kind` into the JSON object a JSON
/// client would have sent (with `apiVersion` and `kind` from the envelope), or the 400 kube-apiserver
/// words for a body it cannot decode.
pub fn decode_object(route_kind: Kind, body: &[u8]) -> Result<Value, ApiError> {
    let env = envelope(body).map_err(|e| unrecognized(route_kind, &e, body))?;
    // As kube-apiserver: what the envelope leaves out comes from the URL.
    let api_version = if env.api_version.is_empty() {
        route_kind.api_version().to_string()
    } else {
        env.api_version.clone()
    };
    let kind_name = if env.kind.is_empty() {
        route_kind.kind_name().to_string()
    } else {
        env.kind.clone()
    };
    let fail = |e: DecodeError| cannot_handle(&kind_name, &api_version, route_kind, &e);
    let kind = kind_named(&api_version, &kind_name).ok_or_else(|| {
        fail(DecodeError::UnknownKind {
            api_version: api_version.clone(),
            kind: kind_name.clone(),
        })
    })?;
    let msg = message_of(kind).ok_or_else(|| {
        fail(DecodeError::NoTable {
            api_version: api_version.clone(),
            kind: kind_name.clone(),
        })
    })?;
    let mut obj = decode_message(msg, env.raw).map_err(fail)?;
    obj.insert("apiVersion".into(), json!(api_version));
    obj.insert("kind".into(), json!(kind_name));
    let obj = Value::Object(obj);
    if let Some(lost) = lost_field(kind, &obj) {
        return Err(fail(DecodeError::NotStored(lost)));
    }
    Ok(obj)
}

/// Decodes a protobuf `policy/v1` Eviction body into its JSON object (the 400 of
/// [`decode_object`] otherwise).
pub fn decode_eviction(body: &[u8]) -> Result<Value, ApiError> {
    let env = envelope(body).map_err(|e| {
        ApiError::bad_request(format!(
            "the object provided is unrecognized (must be of type Eviction): {e} ({})",
            summary(body)
        ))
    })?;
    let api_version = if env.api_version.is_empty() {
        "policy/v1".to_string()
    } else {
        env.api_version.clone()
    };
    let kind_name = if env.kind.is_empty() {
        "Eviction".to_string()
    } else {
        env.kind.clone()
    };
    let fail = |e: DecodeError| {
        ApiError::bad_request(format!(
            "{kind_name} in version \"{}\" cannot be handled as a Eviction: {e}",
            version_of(&api_version)
        ))
    };
    if kind_name != "Eviction" || !matches!(api_version.as_str(), "policy/v1" | "policy/v1beta1") {
        return Err(fail(DecodeError::UnknownKind {
            api_version: api_version.clone(),
            kind: kind_name.clone(),
        }));
    }
    let mut obj = decode_message(&EVICTION, env.raw).map_err(fail)?;
    obj.insert("apiVersion".into(), json!(api_version));
    obj.insert("kind".into(), json!(kind_name));
    Ok(Value::Object(obj))
}

/// A field of `obj` that storing it as `kind` would drop (the simulator's types are those of
/// k8s-openapi, which may lag the table).
fn lost_field(kind: Kind, obj: &Value) -> Option<String> {
    let canonical = kind.canonicalize(obj.clone()).ok()?;
    let mut lost = Vec::new();
    super::kinds::unknown_fields(obj, &canonical, "", &mut lost);
    lost.into_iter().next()
}

fn version_of(api_version: &str) -> &str {
    api_version.rsplit('/').next().unwrap_or(api_version)
}

/// kube-apiserver's 400 for a body whose envelope decoded but whose object did not.
fn cannot_handle(kind_name: &str, api_version: &str, into: Kind, e: &DecodeError) -> ApiError {
    ApiError::bad_request(format!(
        "{kind_name} in version \"{}\" cannot be handled as a {}: {e}",
        version_of(api_version),
        into.kind_name()
    ))
}

/// kube-apiserver's 400 for a body that is not a protobuf envelope at all.
fn unrecognized(into: Kind, e: &DecodeError, body: &[u8]) -> ApiError {
    ApiError::bad_request(format!(
        "the object provided is unrecognized (must be of type {}): {e} ({})",
        into.kind_name(),
        summary(body)
    ))
}

/// The start of a body as kube-apiserver quotes it in decode errors: 30 bytes at most, as
/// text when it looks like JSON, else in hex.
fn summary(body: &[u8]) -> String {
    let head = &body[..body.len().min(30)];
    let more = if body.len() > 30 { " ..." } else { "" };
    match body.first() {
        None => "<empty>".into(),
        Some(b'{') => format!("{}{more}", String::from_utf8_lossy(head)),
        Some(_) => {
            let hex: String = head.iter().map(|b| format!("{b:02x}")).collect();
            format!("{hex}{more}")
        }
    }
}
