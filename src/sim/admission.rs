//! Opt-in ValidatingAdmissionPolicy evaluation: the simulated server runs a policy and its
//! binding (parsed from `deploy/admission-policy.yaml`) on writes of known identities, with the
//! CEL interpreter of the `cel` crate, and answers a denial as kube-apiserver's validating
//! policy dispatcher does (422 `Invalid`, `... is forbidden: ValidatingAdmissionPolicy 'P' with
//! binding 'B' denied request: MSG`, the same text as the only cause).
//!
//! Owns the order of evaluation (matchConstraints, binding, matchConditions, variables in
//! order, validations in order; the first failed validation is reported). Not modelled:
//! paramKind/params, namespaceSelector/objectSelector, the binding's matchResources,
//! auditAnnotations, the `authorizer` variable, Warn/Audit actions (only Deny acts).

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

/// A policy with its bindings.
pub struct Admission {
    policy: ValidatingAdmissionPolicy,
    bindings: Vec<ValidatingAdmissionPolicyBinding>,
}

fn listed(list: Option<&Vec<String>>, x: &str) -> bool {
    list.is_some_and(|l| l.iter().any(|v| v == "*" || v == x))
}

fn cel(v: &Value) -> cel::Value {
    cel::to_value(v).unwrap_or(cel::Value::Null)
}

fn run(expr: &str, ctx: &cel::Context) -> Result<cel::Value, String> {
    let p = cel::Program::compile(expr).map_err(|e| format!("compilation failed: {e}"))?;
    p.execute(ctx).map_err(|e| e.to_string())
}

impl Admission {
    /// Reads the (first) ValidatingAdmissionPolicy and its ValidatingAdmissionPolicyBindings.
    pub fn from_yaml(text: &str) -> anyhow::Result<Admission> {
        let mut policy = None;
        let mut bindings = Vec::new();
        for de in yaml_serde::Deserializer::from_str(text) {
            let v: Value = serde::Deserialize::deserialize(de)?;
            match v["kind"].as_str() {
                Some("ValidatingAdmissionPolicy") if policy.is_none() => {
                    policy = Some(serde_json::from_value(v)?)
                }
                Some("ValidatingAdmissionPolicyBinding") => {
                    bindings.push(serde_json::from_value(v)?)
                }
                _ => {}
            }
        }
        let policy: ValidatingAdmissionPolicy =
            policy.ok_or_else(|| anyhow::anyhow!("no ValidatingAdmissionPolicy"))?;
        let name = policy.metadata.name.clone();
        bindings.retain(|b: &ValidatingAdmissionPolicyBinding| {
            b.spec.as_ref().and_then(|s| s.policy_name.clone()) == name
        });
        Ok(Admission { policy, bindings })
    }

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
    pub fn admit(&self, r: &Request) -> Result<(), ApiError> {
        if !self.matches(r) {
            return Ok(());
        }
        let Some(spec) = self.policy.spec.as_ref() else {
            return Ok(());
        };
        let policy = self.policy.metadata.name.clone().unwrap_or_default();
        let mut extra = serde_json::Map::new();
        if let Some(node) = &r.user.node {
            extra.insert(
                "authentication.kubernetes.io/node-name".into(),
                json!([node]),
            );
        }
        let request = json!({
            "kind": {"group": r.group, "version": r.version, "kind": ""},
            "resource": {"group": r.group, "version": r.version, "resource": r.resource},
            "subResource": r.subresource,
            "name": r.name,
            "namespace": r.namespace,
            "operation": r.operation,
            "userInfo": {"username": r.user.user, "groups": r.user.groups, "extra": extra},
            "dryRun": false,
        });
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
            let mut vars: HashMap<String, cel::Value> = HashMap::new();
            for v in spec.variables.iter().flatten() {
                let mut vctx = ctx.new_inner_scope();
                vctx.add_variable_from_value("variables", vars.clone());
                let val = run(&v.expression, &vctx).unwrap_or(cel::Value::Null);
                vars.insert(v.name.clone(), val);
            }
            let mut vctx = ctx.new_inner_scope();
            vctx.add_variable_from_value("variables", vars.clone());
            for v in spec.validations.iter().flatten() {
                match run(&v.expression, &vctx) {
                    Ok(cel::Value::Bool(true)) => {}
                    Ok(_) => {
                        let from_expr =
                            v.message_expression
                                .as_ref()
                                .and_then(|m| match run(m, &vctx) {
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
