//! ValidatingAdmissionPolicy: the simulated server's validating admission policy plugin. Every
//! policy and binding in the store (created through the API, as by `kubectl apply -k deploy/`)
//! is enforced on every write it matches, whoever sends it; policies parsed from YAML and
//! given to [`Cluster::enforce`](super::Cluster::enforce) are enforced the same way on the
//! writes of its identities (how tests give a token a node claim). One evaluator serves both.
//!
//! Owns, as kube-apiserver's dispatcher does: a policy with its bindings
//! (`spec.policyName`); matching by the policy's matchConstraints then by each binding's
//! matchResources (`matching.rs`); matchConditions (a false one skips the policy, errors
//! deny under `failurePolicy: Fail`); variables (a failing one is an error only where an
//! expression reads it); validations in order, each failure a decision; auditAnnotations
//! (published nowhere, but an error in one denies as in kube-apiserver); and the binding's
//! `validationActions` on each decision: `Deny` denies (the first denial is answered: 422
//! `Invalid`, or the validation's `reason`, `... is forbidden: ValidatingAdmissionPolicy 'P'
//! with binding 'B' denied request: MSG`, the message again as the only cause), `Warn` adds a
//! `Warning: 299 - "Validation failed for ValidatingAdmissionPolicy 'P' with binding 'B':
//! MSG"` header, `Audit` has no visible effect. CREATE (the object the registry would store,
//! no old object), UPDATE (both) and DELETE (the old object only) are admitted, under the store
//! lock with the object the write replaces; writes of policies and bindings themselves are not
//! (kube-apiserver exempts them). Also owns the shape of the `request` variable, which is
//! kube-apiserver's: an AdmissionRequest converted with its `omitempty` rules, so an empty
//! `subResource`, `name`, `namespace` or `userInfo.extra` is absent rather than empty
//! (reading it is the CEL error `no such key: ...`, `has()` is false), and a service-account
//! token's `userInfo.extra` carries its credential id and, when bound to a pod,
//! `authentication.kubernetes.io/node-name` (not the pod's name and uid, nor the node's uid).
//!
//! A policy is refused at creation (422, `validation.rs`' wording) where kube-apiserver refuses
//! it (required fields, selectors, rules, actions; expression syntax, undeclared references,
//! the fields of the typed `request` and `namespaceObject`, a condition whose type is plainly
//! not `bool`: see `expr.rs`), and where this evaluator cannot do what it asks
//! ([`unmodelled`]): `paramKind`, a binding's `paramRef`, the `authorizer` variable, CEL
//! functions the `cel` crate lacks. Programs are compiled once per stored policy version
//! ([`Stored`]); an index by resource keeps writes no policy can match away from the
//! evaluator, and a policy's `request` holds only the fields its expressions read. It must
//! never write to the store. Not modelled beyond that: full CEL type checking (a type error
//! only a full checker finds is an error when the expression runs) and cost limits, the
//! writes of the world's own controllers (they do not pass the API), `dryRun` (refused).

mod expr;
mod matching;
mod validate;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use serde_json::{json, Value};

use super::errors::ApiError;
use super::identity::Identity;
use super::kinds::Kind;
use super::store::Inner;
use super::validation::FieldError;
use expr::{Expr, Inputs};
use matching::{Attributes, Criteria};

pub use validate::{apply_defaults, check_binding, check_policy, unmodelled};

/// Why policies read from YAML documents cannot be enforced.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// A document is not YAML.
    #[error("reading admission policies: {0}")]
    Yaml(#[from] yaml_serde::Error),
    /// A policy or binding does not decode into its type.
    #[error("{kind} {name:?}: {source}")]
    Decode {
        /// The kind.
        kind: &'static str,
        /// Its name.
        name: String,
        /// Why.
        source: serde_json::Error,
    },
    /// A policy or binding the API server would refuse (the field errors, as it words them).
    #[error("{kind} {name:?} is invalid: {errors}")]
    Invalid {
        /// The kind.
        kind: &'static str,
        /// Its name.
        name: String,
        /// `field: error` each, joined by `; `.
        errors: String,
    },
    /// No policy among the documents.
    #[error("no ValidatingAdmissionPolicy in the documents")]
    NoPolicy,
}

/// An admitted operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    /// POST (an eviction included).
    Create,
    /// PUT or PATCH.
    Update,
    /// DELETE.
    Delete,
}

impl Operation {
    /// As in rules and in `request.operation`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
        }
    }

    const ALL: [Operation; 3] = [Operation::Create, Operation::Update, Operation::Delete];
}

/// One write as the admission chain sees it.
pub struct Request<'a> {
    /// The operation.
    pub operation: Operation,
    /// The resource of the request's path.
    pub kind: Kind,
    /// Its subresource ("" for none).
    pub subresource: &'a str,
    /// The namespace ("" for cluster scope; a Namespace's own name for a Namespace).
    pub namespace: &'a str,
    /// The object's name (for a create with generateName, the generated one).
    pub name: &'a str,
    /// The caller.
    pub user: &'a Identity,
    /// The object after the write, as stored (an Event in its core/v1 form; null for DELETE;
    /// the Eviction for an eviction).
    pub object: &'a Value,
    /// The object before the write, as stored (null for CREATE).
    pub old_object: &'a Value,
    /// The request's Namespace, if it exists.
    pub namespace_object: &'a dyn Fn() -> Option<Value>,
}

impl Request<'_> {
    fn attributes(&self) -> Attributes<'_> {
        Attributes {
            operation: self.operation,
            kind: self.kind,
            subresource: self.subresource,
            namespace: self.namespace,
            name: self.name,
            object: self.object,
            old_object: self.old_object,
            namespace_object: self.namespace_object,
        }
    }

    /// The group, version and kind of the request's object (an eviction's is an Eviction).
    fn request_kind(&self) -> (&'static str, &'static str) {
        if self.kind == Kind::Pod && self.subresource == "eviction" {
            ("policy", "Eviction")
        } else {
            (self.kind.group(), self.kind.kind_name())
        }
    }
}

/// kube-apiserver's `request` variable for `r` matched as `matched` (its own resource, or an
/// equivalent one): an AdmissionRequest converted to unstructured JSON, where every
/// `omitempty` field that is empty is left out; only with the fields `fields` (bits of
/// [`expr::REQUEST_FIELDS`]) asks for, as what a policy's expressions do not read need not be
/// built and converted to CEL.
fn request_variable(r: &Request, matched: Kind, fields: u16) -> Value {
    let wanted = |f: &str| fields & expr::request_field(f) != 0;
    let (request_group, request_kind) = r.request_kind();
    let (group, kind) = if matched == r.kind {
        (request_group, request_kind)
    } else {
        (matched.group(), matched.kind_name())
    };
    let mut request = serde_json::Map::new();
    let mut put = |key: &str, value: Value| {
        if wanted(key) {
            request.insert(key.into(), value);
        }
    };
    put(
        "kind",
        json!({"group": group, "version": "v1", "kind": kind}),
    );
    put(
        "resource",
        json!({"group": matched.group(), "version": "v1", "resource": matched.plural()}),
    );
    put(
        "requestKind",
        json!({"group": request_group, "version": "v1", "kind": request_kind}),
    );
    put(
        "requestResource",
        json!({"group": r.kind.group(), "version": "v1", "resource": r.kind.plural()}),
    );
    put("operation", json!(r.operation.as_str()));
    put("dryRun", json!(false));
    let options = match r.operation {
        Operation::Create => "CreateOptions",
        Operation::Update => "UpdateOptions",
        Operation::Delete => "DeleteOptions",
    };
    put(
        "options",
        json!({"kind": options, "apiVersion": "meta.k8s.io/v1"}),
    );
    for (key, value) in [
        ("subResource", r.subresource),
        ("requestSubResource", r.subresource),
        ("name", r.name),
        ("namespace", r.namespace),
    ] {
        if !value.is_empty() {
            put(key, json!(value));
        }
    }
    if !wanted("userInfo") {
        return Value::Object(request);
    }
    let mut request = Value::Object(request);
    request["userInfo"] = json!({"username": r.user.user});
    if !r.user.groups.is_empty() {
        request["userInfo"]["groups"] = json!(r.user.groups);
    }
    // Every service-account token carries its credential id as an extra (so `extra` is present
    // even without a bound pod); one bound to a pod also names the pod's node.
    let mut extra = serde_json::Map::new();
    if r.user.user.starts_with("system:serviceaccount:") {
        extra.insert(
            "authentication.kubernetes.io/credential-id".into(),
            json!(["JTI=00000000-0000-4000-8000-000000000000"]),
        );
    }
    if let Some(node) = &r.user.node {
        extra.insert(
            "authentication.kubernetes.io/node-name".into(),
            json!([node]),
        );
    }
    if !extra.is_empty() {
        request["userInfo"]["extra"] = Value::Object(extra);
    }
    request
}

/// kube-apiserver's `namespaceObject`: the Namespace's status, spec and part of its metadata.
fn namespace_variable(ns: &Value) -> Value {
    let mut metadata = serde_json::Map::new();
    for key in [
        "name",
        "generateName",
        "namespace",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "finalizers",
    ] {
        if let Some(v) = ns["metadata"].get(key) {
            metadata.insert(key.into(), v.clone());
        }
    }
    json!({"metadata": metadata, "spec": ns["spec"], "status": ns["status"]})
}

/// One validation of a compiled policy.
#[derive(Debug)]
struct Validation {
    expr: Expr,
    message: Option<String>,
    message_expression: Option<Expr>,
    reason: Option<String>,
}

/// A policy, compiled.
#[derive(Debug)]
struct Policy {
    name: String,
    fail_closed: bool,
    constraints: Criteria,
    match_conditions: Vec<Expr>,
    variables: Vec<(String, Expr)>,
    validations: Vec<Validation>,
    audit_annotations: Vec<Expr>,
    /// Why a stored policy no longer compiles (it then only fails what it matches).
    broken: Option<String>,
    /// The fields of `request` its expressions read ([`expr::Reads::request_fields`]).
    request_fields: u16,
}

/// A binding, compiled.
#[derive(Debug)]
struct Binding {
    name: String,
    deny: bool,
    warn: bool,
    resources: Option<Criteria>,
}

/// A policy with the bindings that name it.
#[derive(Debug)]
struct Hook {
    policy: Arc<Policy>,
    bindings: Vec<Binding>,
}

/// What a matched policy decided, before its bindings' actions apply.
#[derive(Debug, Default)]
struct Evaluation {
    /// Failed validations and errors (under `failurePolicy: Fail`): (message, reason).
    decisions: Vec<(String, Option<String>)>,
    /// Errors of audit annotations: denials whatever the binding's actions.
    audit_errors: Vec<String>,
}

/// One denial.
#[derive(Clone, Debug)]
struct Denial {
    policy: String,
    binding: Option<String>,
    message: String,
    reason: Option<String>,
}

/// What the policies decided about one request: its denials (the first is answered) and
/// warnings.
#[derive(Debug, Default)]
pub struct Outcome {
    denials: Vec<Denial>,
    warnings: Vec<String>,
}

/// A compiled set of policies with their bindings, indexed by the resources they can match.
#[derive(Debug, Default)]
pub struct Admission {
    hooks: Vec<Hook>,
    /// (resource, subresource, operation) -> the hooks whose rules can select it.
    index: HashMap<(Kind, &'static str, Operation), Vec<usize>>,
}

/// The served subresource named `sub` of `kind`, as the `'static` the index is keyed by.
fn static_sub(kind: Kind, sub: &str) -> Option<&'static str> {
    if sub.is_empty() {
        return Some("");
    }
    kind.subresources().iter().copied().find(|s| *s == sub)
}

impl Admission {
    fn new(mut hooks: Vec<Hook>) -> Admission {
        hooks.retain(|h| !h.bindings.is_empty());
        let mut index: HashMap<(Kind, &'static str, Operation), Vec<usize>> = HashMap::new();
        for kind in Kind::ALL {
            let subs = std::iter::once("").chain(kind.subresources().iter().copied());
            for sub in subs {
                for op in Operation::ALL {
                    let matching: Vec<usize> = (0..hooks.len())
                        .filter(|i| hooks[*i].policy.constraints.may_select(kind, sub, op))
                        .collect();
                    if !matching.is_empty() {
                        index.insert((kind, sub, op), matching);
                    }
                }
            }
        }
        Admission { hooks, index }
    }

    /// Reads every ValidatingAdmissionPolicy of the YAML documents, each with the
    /// ValidatingAdmissionPolicyBindings that name it, checked and defaulted as the API server
    /// would on creation.
    pub fn from_yaml(text: &str) -> Result<Admission, PolicyError> {
        Admission::from_yaml_docs(&[text])
    }

    /// [`Admission::from_yaml`] over several files.
    pub fn from_yaml_docs(texts: &[&str]) -> Result<Admission, PolicyError> {
        let mut policies = Vec::new();
        let mut bindings = Vec::new();
        for text in texts {
            for de in yaml_serde::Deserializer::from_str(text) {
                let mut v: Value = serde::Deserialize::deserialize(de)?;
                let kind = match v["kind"].as_str() {
                    Some("ValidatingAdmissionPolicy") => Kind::ValidatingAdmissionPolicy,
                    Some("ValidatingAdmissionPolicyBinding") => {
                        Kind::ValidatingAdmissionPolicyBinding
                    }
                    _ => continue,
                };
                apply_defaults(kind, &mut v);
                let name = v["metadata"]["name"].as_str().unwrap_or("").to_string();
                let invalid = |errors: Vec<FieldError>| PolicyError::Invalid {
                    kind: kind.kind_name(),
                    name: name.clone(),
                    errors: errors
                        .iter()
                        .map(|e| format!("{}: {}", e.field, e.body()))
                        .collect::<Vec<_>>()
                        .join("; "),
                };
                let decode = |source| PolicyError::Decode {
                    kind: kind.kind_name(),
                    name: name.clone(),
                    source,
                };
                if kind == Kind::ValidatingAdmissionPolicy {
                    let p: ValidatingAdmissionPolicy = serde_json::from_value(v).map_err(decode)?;
                    policies.push(Arc::new(Policy::compile(&p).map_err(invalid)?));
                } else {
                    let b: ValidatingAdmissionPolicyBinding =
                        serde_json::from_value(v).map_err(decode)?;
                    let policy = b.spec.as_ref().and_then(|s| s.policy_name.clone());
                    bindings.push((policy, Binding::compile(&b).map_err(invalid)?));
                }
            }
        }
        if policies.is_empty() {
            return Err(PolicyError::NoPolicy);
        }
        Ok(Admission::new(group(policies, bindings)))
    }

    /// Whether no policy can select a write of `kind`/`sub` with `op`: the evaluator need
    /// not be asked (nor the objects read).
    pub fn ignores(&self, kind: Kind, sub: &str, op: Operation) -> bool {
        static_sub(kind, sub).is_none_or(|s| !self.index.contains_key(&(kind, s, op)))
    }

    /// Runs every policy that matches `r` and records what it decided in `out`; an error for
    /// a request that cannot be admitted at all (its Namespace is gone).
    pub fn admit(&self, r: &Request, out: &mut Outcome) -> Result<(), ApiError> {
        let Some(candidates) = static_sub(r.kind, r.subresource)
            .and_then(|s| self.index.get(&(r.kind, s, r.operation)))
        else {
            return Ok(());
        };
        let attrs = r.attributes();
        for hook in candidates.iter().map(|i| &self.hooks[*i]) {
            let policy = &hook.policy;
            let matched = match policy.constraints.matches(&attrs) {
                Ok(Some(m)) => m,
                Ok(None) => continue,
                Err(e) => {
                    out.config_error(policy, None, &e);
                    continue;
                }
            };
            let mut evaluation: Option<Evaluation> = None;
            for b in &hook.bindings {
                match b.resources.as_ref().map(|c| c.matches(&attrs)) {
                    None | Some(Ok(Some(_))) => {}
                    Some(Ok(None)) => continue,
                    Some(Err(e)) => {
                        out.config_error(policy, Some(&b.name), &e);
                        continue;
                    }
                }
                let ev = match &evaluation {
                    Some(ev) => ev,
                    None => evaluation.insert(policy.evaluate(r, matched)?),
                };
                for (message, reason) in &ev.decisions {
                    if b.deny {
                        out.denials.push(Denial {
                            policy: policy.name.clone(),
                            binding: Some(b.name.clone()),
                            message: message.clone(),
                            reason: reason.clone(),
                        });
                    }
                    if b.warn {
                        out.warnings.push(format!(
                            "Validation failed for ValidatingAdmissionPolicy '{}' with binding '{}': {message}",
                            policy.name, b.name
                        ));
                    }
                }
                for message in &ev.audit_errors {
                    out.denials.push(Denial {
                        policy: policy.name.clone(),
                        binding: Some(b.name.clone()),
                        message: message.clone(),
                        reason: None,
                    });
                }
            }
        }
        Ok(())
    }
}

/// The policies with the bindings naming them, in order; a binding naming no policy is left
/// out (it takes effect if the policy comes).
fn group(policies: Vec<Arc<Policy>>, bindings: Vec<(Option<String>, Binding)>) -> Vec<Hook> {
    let mut hooks: Vec<Hook> = policies
        .into_iter()
        .map(|policy| Hook {
            policy,
            bindings: Vec::new(),
        })
        .collect();
    for (name, b) in bindings {
        if let Some(h) = hooks
            .iter_mut()
            .find(|h| Some(&h.policy.name) == name.as_ref())
        {
            h.bindings.push(b);
        }
    }
    hooks
}

impl Outcome {
    fn config_error(&mut self, policy: &Policy, binding: Option<&str>, e: &ApiError) {
        if !policy.fail_closed {
            return;
        }
        let what = if binding.is_some() {
            "binding"
        } else {
            "policy"
        };
        self.denials.push(Denial {
            policy: policy.name.clone(),
            binding: binding.map(str::to_string),
            message: format!(
                "failed to configure {what}: {}",
                e.message.as_deref().unwrap_or("")
            ),
            reason: None,
        });
    }

    /// The warnings, in order.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The answer to the request: the first denial, if any.
    pub fn denied(&self, r: &Request) -> Option<ApiError> {
        self.denials.first().map(|d| denial(r, d))
    }
}

/// An error of a CEL expression, where it read a variable that failed: worded as the
/// composition library words it.
fn composited(e: String, failed: &HashMap<String, String>) -> String {
    match e
        .strip_prefix("no such key: ")
        .and_then(|k| failed.get(k).map(|f| (k, f)))
    {
        Some((name, why)) => format!("composited variable \"{name}\" fails to evaluate: {why}"),
        None => e,
    }
}

/// kube-apiserver's `MaxEvaluatedMessageExpressionSizeBytes`.
const MAX_MESSAGE_BYTES: usize = 5 * 1024;

impl Policy {
    /// Evaluates the policy for `r` matched as `matched`: matchConditions, variables,
    /// validations, audit annotations.
    fn evaluate(&self, r: &Request, matched: Kind) -> Result<Evaluation, ApiError> {
        let mut ev = Evaluation::default();
        if let Some(why) = &self.broken {
            if self.fail_closed {
                ev.decisions.push((why.clone(), None));
            }
            return Ok(ev);
        }
        // The object in the version the policy matched (an Event read through either API;
        // other kinds are stored as served, and are not copied).
        let (object, old_object) = (
            stored_as(matched, r.object),
            stored_as(matched, r.old_object),
        );
        let request = request_variable(r, matched, self.request_fields);
        // A Namespace is its own namespace in the request, but has no namespaceObject.
        let namespace_object = if r.namespace.is_empty() || r.kind == Kind::Namespace {
            Value::Null
        } else {
            match (r.namespace_object)() {
                Some(ns) => namespace_variable(&ns),
                None => return Err(ApiError::not_found(Kind::Namespace, r.namespace)),
            }
        };
        let inputs = Inputs::new(&object, &old_object, &request, &namespace_object);
        let no_variables = HashMap::new();
        let fails =
            |e: &Expr, why: String| format!("expression '{}' resulted in error: {why}", e.source);
        let mut errors = Vec::new();
        for c in &self.match_conditions {
            match c.eval(&inputs, &no_variables) {
                Ok(cel::Value::Bool(false)) => return Ok(ev),
                Ok(_) => {}
                Err(e) => errors.push(fails(c, e)),
            }
        }
        if !errors.is_empty() {
            if self.fail_closed {
                // utilerrors.NewAggregate: one error as it is, several in brackets.
                let message = if errors.len() == 1 {
                    errors.remove(0)
                } else {
                    format!("[{}]", errors.join(", "))
                };
                ev.decisions.push((message, None));
            }
            return Ok(ev);
        }
        // Variables are evaluated lazily by kube-apiserver: one that fails is an error only
        // where an expression really reads it (`true || variables.x` does not). Left out of
        // `variables`, it fails exactly there with "no such key", reworded as the
        // composition library words it.
        let mut variables: HashMap<String, cel::Value> = HashMap::new();
        let mut failed: HashMap<String, String> = HashMap::new();
        let needed = self.validations.iter().any(|v| {
            v.expr.reads.variables
                || v.message_expression
                    .as_ref()
                    .is_some_and(|m| m.reads.variables)
        }) || self.audit_annotations.iter().any(|a| a.reads.variables);
        if needed {
            for (name, v) in &self.variables {
                match v.eval(&inputs, &variables) {
                    Ok(val) => {
                        variables.insert(name.clone(), val);
                    }
                    Err(e) => {
                        failed.insert(name.clone(), e);
                    }
                }
            }
        }
        let eval = |e: &Expr| {
            e.eval(&inputs, &variables)
                .map_err(|x| composited(x, &failed))
        };
        for v in &self.validations {
            match eval(&v.expr) {
                Ok(cel::Value::Bool(true)) => {}
                Ok(_) => {
                    let from_expression = v.message_expression.as_ref().and_then(|m| {
                        match eval(m) {
                            Ok(cel::Value::String(s)) => Some(s.trim().to_string()),
                            _ => None,
                        }
                        .filter(|s| {
                            !s.is_empty() && s.len() <= MAX_MESSAGE_BYTES && !s.contains('\n')
                        })
                    });
                    let message = from_expression
                        .or_else(|| {
                            v.message
                                .as_deref()
                                .map(str::trim)
                                .filter(|m| !m.is_empty())
                                .map(str::to_string)
                        })
                        .unwrap_or_else(|| format!("failed expression: {}", v.expr.source.trim()));
                    ev.decisions.push((message, v.reason.clone()));
                }
                Err(e) if self.fail_closed => ev.decisions.push((fails(&v.expr, e), None)),
                Err(_) => {}
            }
        }
        for a in &self.audit_annotations {
            match eval(a) {
                Ok(cel::Value::String(_) | cel::Value::Null) => {}
                Ok(other) => ev.audit_errors.push(format!(
                    "valueExpression '{}' resulted in unsupported return type: {}. Return type must be either string or null.",
                    a.source.trim(),
                    expr::type_name(&other)
                )),
                Err(e) if self.fail_closed => ev.audit_errors.push(fails(a, e)),
                Err(_) => {}
            }
        }
        Ok(ev)
    }
}

/// A stored object as a request matched as `kind` reads it.
fn stored_as(kind: Kind, stored: &Value) -> std::borrow::Cow<'_, Value> {
    match kind {
        Kind::EventV1 => std::borrow::Cow::Owned(super::events::view(kind, stored)),
        _ => std::borrow::Cow::Borrowed(stored),
    }
}

/// The Status of a denial: `admission.NewForbidden` with the dispatcher's message, the
/// validation's reason (`Invalid` when it gives none) and its code, the message again as the
/// only cause.
fn denial(r: &Request, d: &Denial) -> ApiError {
    let message = match &d.binding {
        Some(b) => format!(
            "ValidatingAdmissionPolicy '{}' with binding '{b}' denied request: {}",
            d.policy, d.message
        ),
        None => format!(
            "ValidatingAdmissionPolicy '{}' denied request: {}",
            d.policy, d.message
        ),
    };
    // `extractResourceName`: the request's name, else the object's (generated by now), else
    // its generateName, else "Unknown".
    let md = &r.object["metadata"];
    let name = [
        r.name,
        md["name"].as_str().unwrap_or(""),
        md["generateName"].as_str().unwrap_or(""),
    ]
    .into_iter()
    .find(|n| !n.is_empty())
    .unwrap_or("Unknown");
    let group = r.kind.group();
    let qualified = if group.is_empty() {
        r.kind.plural().to_string()
    } else {
        format!("{}.{group}", r.kind.plural())
    };
    let mut details = serde_json::Map::new();
    details.insert("name".into(), json!(name));
    if !group.is_empty() {
        details.insert("group".into(), json!(group));
    }
    details.insert("kind".into(), json!(r.kind.plural()));
    details.insert("causes".into(), json!([{"message": message}]));
    let (code, reason) = match d.reason.as_deref() {
        Some("Forbidden") => (403, "Forbidden"),
        Some("Unauthorized") => (401, "Unauthorized"),
        Some("RequestEntityTooLarge") => (413, "RequestEntityTooLarge"),
        _ => (422, "Invalid"),
    };
    ApiError {
        code,
        reason: Some(reason),
        message: Some(format!(
            "{qualified} {} is forbidden: {message}",
            super::validation::go_quote(name)
        )),
        details: Some(Value::Object(details)),
        retry_after: None,
        metadata: None,
        plain_text: false,
    }
}

/// kube-apiserver's warning recorder: each distinct warning once, as the value of a `Warning`
/// header (`299 - "text"`, `"` and `\` escaped); past 4096 characters in all, each is cut to
/// 256 characters.
pub fn warning_headers(warnings: &[String]) -> Vec<String> {
    const TOTAL: usize = 4 * 1024;
    const ITEM: usize = 256;
    let mut distinct: Vec<&str> = Vec::new();
    for w in warnings {
        if !w.is_empty() && !distinct.contains(&w.as_str()) {
            distinct.push(w);
        }
    }
    let total: usize = distinct.iter().map(|w| w.chars().count()).sum();
    let truncate = total > TOTAL;
    let mut written = 0;
    let mut out = Vec::new();
    for w in distinct {
        if truncate && written >= TOTAL {
            break;
        }
        let text: String = if truncate {
            w.chars().take(ITEM).collect()
        } else {
            w.to_string()
        };
        written += text.chars().count();
        let mut quoted = String::with_capacity(text.len() + 2);
        quoted.push('"');
        for c in text.chars() {
            if matches!(c, '"' | '\\') {
                quoted.push('\\');
            }
            quoted.push(c);
        }
        quoted.push('"');
        out.push(format!("299 - {quoted}"));
    }
    out
}

/// The policies and bindings of the store, compiled: rebuilt when one of them changed (each
/// policy version compiled once), so a write pays for policies only when one can match it.
#[derive(Default)]
pub struct Stored {
    cache: Mutex<Cache>,
}

#[derive(Default)]
struct Cache {
    /// The revisions of the last policy and binding writes the set was built at.
    seen: Option<(u64, u64)>,
    admission: Arc<Admission>,
    /// uid -> (resourceVersion, the compiled policy).
    compiled: HashMap<String, (u64, Arc<Policy>)>,
}

impl Stored {
    /// The policies in force now (`inner`: the store, locked by the caller).
    pub fn current(&self, inner: &Inner) -> Arc<Admission> {
        let seen = (
            inner.last_write(Kind::ValidatingAdmissionPolicy),
            inner.last_write(Kind::ValidatingAdmissionPolicyBinding),
        );
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if cache.seen == Some(seen) {
            return cache.admission.clone();
        }
        let mut compiled = HashMap::new();
        let mut policies = Vec::new();
        for e in inner.range(Kind::ValidatingAdmissionPolicy, None, None) {
            let (uid, rv) = (e.idx.uid.clone(), e.idx.rv);
            let policy = match cache.compiled.get(&uid) {
                Some((at, p)) if *at == rv => p.clone(),
                _ => Arc::new(Policy::stored(&e.value())),
            };
            compiled.insert(uid, (rv, policy.clone()));
            policies.push(policy);
        }
        let bindings = inner
            .range(Kind::ValidatingAdmissionPolicyBinding, None, None)
            .filter_map(|e| {
                let b: ValidatingAdmissionPolicyBinding = serde_json::from_value(e.value()).ok()?;
                let policy = b.spec.as_ref().and_then(|s| s.policy_name.clone());
                // Refused at creation when it does not compile: a stored one always does.
                Some((policy, Binding::compile(&b).ok()?))
            })
            .collect();
        let admission = Arc::new(Admission::new(group(policies, bindings)));
        *cache = Cache {
            seen: Some(seen),
            admission: admission.clone(),
            compiled,
        };
        admission
    }
}

#[cfg(test)]
mod tests;
