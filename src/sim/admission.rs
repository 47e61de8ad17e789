//! Opt-in ValidatingAdmissionPolicy evaluation: the simulated server runs policies and their
//! bindings (parsed from `deploy/admission-policy.yaml` and test fixtures) on writes of known
//! identities, with the CEL interpreter of the `cel` crate, and answers a denial as
//! kube-apiserver's validating policy dispatcher does (422 `Invalid`, `... is forbidden:
//! ValidatingAdmissionPolicy 'P' with binding 'B' denied request: MSG`, the same text as the
//! only cause).
//!
//! Owns the order of evaluation (policies in order; per policy matchConstraints, binding,
//! matchConditions, variables, validations in order; the first failed validation is
//! reported) and the shape of the `request` variable, which is kube-apiserver's: an
//! AdmissionRequest converted with its `omitempty` rules, so an empty `subResource`, `name`,
//! `namespace` or `userInfo.extra` is absent rather than empty (reading it is the CEL error
//! `no such key: ...`, `has()` is false), and a service-account token's `userInfo.extra`
//! carries its credential id and, when bound to a pod, `authentication.kubernetes.io/node-name`
//! (not the pod's name and uid, nor the node's uid). Errors are worded as cel-go and the apiserver
//! word them. Not modelled: paramKind/params, namespaceSelector/objectSelector, the binding's
//! matchResources, auditAnnotations, the `authorizer` variable, Warn/Audit actions (only Deny
//! acts).

use std::collections::HashMap;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use serde_json::{json, Value};

use super::errors::ApiError;
use super::rbac::Identity;

/// One write as the admission chain sees it.
#[derive(Clone, Debug)]
pub struct Request<'a> {
    /// CREATE, UPDATE, DELETE
    pub operation: &'a str,
    /// API group
    pub group: &'a str,
    /// API version
    pub version: &'a str,
    /// plural resource
    pub resource: &'a str,
    /// the kind (`Node`)
    pub kind: &'a str,
    /// subresource ("" for none)
    pub subresource: &'a str,
    /// namespace ("" for cluster scope)
    pub namespace: &'a str,
    /// object name
    pub name: &'a str,
    /// the caller
    pub user: &'a Identity,
    /// the object after the write (null for DELETE)
    pub object: &'a Value,
    /// the object before the write (null for CREATE)
    pub old_object: &'a Value,
}

/// One policy with its bindings.
struct Policy {
    policy: ValidatingAdmissionPolicy,
    bindings: Vec<ValidatingAdmissionPolicyBinding>,
}

/// The policies in force, in the order they were read.
pub struct Admission {
    policies: Vec<Policy>,
}

fn listed(list: Option<&Vec<String>>, x: &str) -> bool {
    list.is_some_and(|l| l.iter().any(|v| v == "*" || v == x))
}

fn cel(v: &Value) -> cel::Value {
    cel::to_value(v).unwrap_or(cel::Value::Null)
}

/// An evaluation error as cel-go words it (the cel crate capitalizes some).
fn cel_error(e: cel::ExecutionError) -> String {
    match e {
        cel::ExecutionError::NoSuchKey(k) => format!("no such key: {k}"),
        e => e.to_string(),
    }
}

fn run(expr: &str, ctx: &cel::Context) -> Result<cel::Value, String> {
    let p = cel::Program::compile(expr).map_err(|e| format!("compilation failed: {e}"))?;
    p.execute(ctx).map_err(cel_error)
}

/// kube-apiserver's `request` variable for `r`: an AdmissionRequest converted to unstructured
/// JSON, where every `omitempty` field that is empty is left out.
pub fn request_variable(r: &Request) -> Value {
    let kind = json!({"group": r.group, "version": r.version, "kind": r.kind});
    let resource = json!({"group": r.group, "version": r.version, "resource": r.resource});
    let mut request = json!({
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
        "operation": r.operation,
        "userInfo": {"username": r.user.user},
        "dryRun": false,
    });
    let options = match r.operation {
        "CREATE" => Some("CreateOptions"),
        "UPDATE" => Some("UpdateOptions"),
        "DELETE" => Some("DeleteOptions"),
        _ => None,
    };
    if let Some(o) = options {
        request["options"] = json!({"kind": o, "apiVersion": "meta.k8s.io/v1"});
    }
    for (key, value) in [
        ("subResource", r.subresource),
        ("requestSubResource", r.subresource),
        ("name", r.name),
        ("namespace", r.namespace),
    ] {
        if !value.is_empty() {
            request[key] = json!(value);
        }
    }
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

impl Admission {
    /// Reads every ValidatingAdmissionPolicy of the YAML documents, each with the
    /// ValidatingAdmissionPolicyBindings that name it.
    pub fn from_yaml(text: &str) -> anyhow::Result<Admission> {
        Admission::from_yaml_docs(&[text])
    }

    /// [`Admission::from_yaml`] over several files.
    pub fn from_yaml_docs(texts: &[&str]) -> anyhow::Result<Admission> {
        let mut policies: Vec<ValidatingAdmissionPolicy> = Vec::new();
        let mut bindings: Vec<ValidatingAdmissionPolicyBinding> = Vec::new();
        for text in texts {
            for de in yaml_serde::Deserializer::from_str(text) {
                let v: Value = serde::Deserialize::deserialize(de)?;
                match v["kind"].as_str() {
                    Some("ValidatingAdmissionPolicy") => policies.push(serde_json::from_value(v)?),
                    Some("ValidatingAdmissionPolicyBinding") => {
                        bindings.push(serde_json::from_value(v)?)
                    }
                    _ => {}
                }
            }
        }
        if policies.is_empty() {
            anyhow::bail!("no ValidatingAdmissionPolicy");
        }
        let policies = policies
            .into_iter()
            .map(|policy| {
                let name = policy.metadata.name.clone();
                let bindings = bindings
                    .iter()
                    .filter(|b| b.spec.as_ref().and_then(|s| s.policy_name.clone()) == name)
                    .cloned()
                    .collect();
                Policy { policy, bindings }
            })
            .collect();
        Ok(Admission { policies })
    }

    /// Admits or denies `r`: the first policy that denies decides.
    pub fn admit(&self, r: &Request) -> Result<(), ApiError> {
        self.policies.iter().try_for_each(|p| p.admit(r))
    }
}

impl Policy {
    fn matches(&self, r: &Request) -> bool {
        let Some(mc) = self
            .policy
            .spec
            .as_ref()
            .and_then(|s| s.match_constraints.as_ref())
        else {
            return false;
        };
        let res = if r.subresource.is_empty() {
            r.resource.to_string()
        } else {
            format!("{}/{}", r.resource, r.subresource)
        };
        mc.resource_rules.iter().flatten().any(|rule| {
            listed(rule.api_groups.as_ref(), r.group)
                && listed(rule.api_versions.as_ref(), r.version)
                && listed(rule.operations.as_ref(), r.operation)
                && listed(rule.resources.as_ref(), &res)
        })
    }

    /// Admits or denies `r` (Ok when the policy does not apply or every validation holds).
    fn admit(&self, r: &Request) -> Result<(), ApiError> {
        if !self.matches(r) {
            return Ok(());
        }
        let Some(spec) = self.policy.spec.as_ref() else {
            return Ok(());
        };
        let policy = self.policy.metadata.name.clone().unwrap_or_default();
        let request = request_variable(r);
        let mut ctx = cel::Context::default();
        ctx.add_variable_from_value("object", cel(r.object));
        ctx.add_variable_from_value("oldObject", cel(r.old_object));
        ctx.add_variable_from_value("request", cel(&request));
        ctx.add_variable_from_value("params", cel::Value::Null);
        ctx.add_variable_from_value("namespaceObject", cel::Value::Null);
        let fail_closed = spec.failure_policy.as_deref() != Some("Ignore");
        for b in &self.bindings {
            let bname = b.metadata.name.clone().unwrap_or_default();
            let deny = b
                .spec
                .as_ref()
                .and_then(|s| s.validation_actions.as_ref())
                .is_some_and(|a| a.iter().any(|x| x == "Deny"));
            let denied = |msg: String| -> Result<(), ApiError> {
                if !deny {
                    return Ok(());
                }
                Err(denial(r, &policy, &bname, &msg))
            };
            // matchConditions: all true to apply; an error fails closed under failurePolicy Fail.
            let mut applies = true;
            for c in spec.match_conditions.iter().flatten() {
                match run(&c.expression, &ctx) {
                    Ok(cel::Value::Bool(true)) => {}
                    Ok(_) => applies = false,
                    Err(e) if fail_closed => {
                        return denied(format!(
                            "failed to evaluate matchCondition '{}': {e}",
                            c.name
                        ))
                    }
                    Err(_) => applies = false,
                }
            }
            if !applies {
                continue;
            }
            // Variables are evaluated lazily by kube-apiserver: one that fails is an error only
            // where an expression really reads it (`true || variables.x` does not). Left out of
            // `variables`, it fails exactly there with "no such key", reworded as the
            // composition library words it.
            let mut vars: HashMap<String, cel::Value> = HashMap::new();
            let mut failed: HashMap<String, String> = HashMap::new();
            for v in spec.variables.iter().flatten() {
                let mut vctx = ctx.new_inner_scope();
                vctx.add_variable_from_value("variables", vars.clone());
                match run(&v.expression, &vctx) {
                    Ok(val) => {
                        vars.insert(v.name.clone(), val);
                    }
                    Err(e) => {
                        failed.insert(v.name.clone(), e);
                    }
                }
            }
            let mut vctx = ctx.new_inner_scope();
            vctx.add_variable_from_value("variables", vars.clone());
            let eval = |expr: &str| -> Result<cel::Value, String> {
                run(expr, &vctx).map_err(|e| {
                    match e
                        .strip_prefix("no such key: ")
                        .and_then(|k| failed.get(k).map(|f| (k, f)))
                    {
                        Some((name, why)) => {
                            format!("composited variable \"{name}\" fails to evaluate: {why}")
                        }
                        None => e,
                    }
                })
            };
            for v in spec.validations.iter().flatten() {
                match eval(&v.expression) {
                    Ok(cel::Value::Bool(true)) => {}
                    Ok(_) => {
                        let from_expr = v.message_expression.as_ref().and_then(|m| match eval(m) {
                            Ok(cel::Value::String(s)) if !s.trim().is_empty() => {
                                Some(s.to_string())
                            }
                            _ => None,
                        });
                        let msg = from_expr
                            .or_else(|| v.message.clone().filter(|m| !m.is_empty()))
                            .unwrap_or_else(|| format!("failed expression: {}", v.expression));
                        return denied(msg);
                    }
                    Err(e) if fail_closed => {
                        return denied(format!(
                            "expression '{}' resulted in error: {e}",
                            v.expression
                        ))
                    }
                    Err(_) => {}
                }
            }
        }
        Ok(())
    }
}

/// The Status of a denial: `admission.NewForbidden` with the dispatcher's message, reason
/// `Invalid` (no `reason` on the validation), code 422, the message again as a cause.
pub fn denial(r: &Request, policy: &str, binding: &str, msg: &str) -> ApiError {
    let message = format!(
        "ValidatingAdmissionPolicy '{policy}' with binding '{binding}' denied request: {msg}"
    );
    let qualified = if r.group.is_empty() {
        r.resource.to_string()
    } else {
        format!("{}.{}", r.resource, r.group)
    };
    let mut details = serde_json::Map::new();
    details.insert("name".into(), json!(r.name));
    if !r.group.is_empty() {
        details.insert("group".into(), json!(r.group));
    }
    details.insert("kind".into(), json!(r.resource));
    details.insert("causes".into(), json!([{"message": message}]));
    ApiError {
        code: 422,
        reason: Some("Invalid"),
        message: Some(format!("{qualified} {:?} is forbidden: {message}", r.name)),
        details: Some(Value::Object(details)),
        retry_after: None,
        metadata: None,
        plain_text: false,
    }
}
