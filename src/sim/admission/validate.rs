//! What the API server sets and refuses in a ValidatingAdmissionPolicy or a binding when it is
//! written: the scheme's defaults (`failurePolicy: Fail`; in matchConstraints and
//! matchResources `matchPolicy: Equivalent`, empty selectors, rule `scope: "*"`), the checks
//! of kube-apiserver's `admissionregistration/validation` that need no CEL types, worded and
//! ordered as it words them, and what the simulator refuses because it does not model it
//! ([`unmodelled`]). Compiling a policy here is also how the evaluator gets its programs: what
//! is accepted is what runs.
//!
//! Owns the field errors only; it must never touch the store.

use std::collections::BTreeSet;

use k8s_openapi::api::admissionregistration::v1::{
    MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::{json, Value};

use super::expr::{compile, CompileError, Expr, Returns, Scope};
use super::matching::Criteria;
use super::{Binding, Policy, Validation};
use crate::sim::kinds::Kind;
use crate::sim::validation::{
    dns1123_subdomain, forbidden, invalid, invalid_value, label_value, path_segment_name,
    qualified_name, required, BadValue, ErrorType, FieldError,
};

/// kube-apiserver's `maxAuditAnnotationValueExpressionLength`.
const MAX_AUDIT_VALUE_EXPRESSION: usize = 5 * 1024;

/// A field the simulator does not model, refused: 422 `Invalid` with a `FieldValueForbidden`
/// cause naming the field. Why this answer: the refusal is about one field of an object the
/// API accepts, and kube-apiserver itself refuses a field it knows but will not act on (one
/// whose feature gate is off) this way, as `Forbidden` on that field (the field error type
/// apimachinery documents for a value "which would be accepted under some conditions, but
/// which is not permitted by current conditions"): kubectl prints the field, a client does
/// not retry (a 5xx would be retried; `501 Not Implemented` has no Status reason), and the
/// cause carries the field path, which a 400 `BadRequest` (the simulator's answer to an
/// unsupported query parameter such as `dryRun`) would not. Storing it and ignoring it would
/// let writes it should deny succeed.
pub fn unmodelled(field: &str, what: &str) -> FieldError {
    forbidden(
        field,
        &format!("{what} is not supported by the simulated API server (rollboot simulate)"),
    )
}

fn not_supported(field: &str, value: &str, supported: &[&str]) -> FieldError {
    let quoted: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
    FieldError {
        typ: ErrorType::NotSupported,
        field: field.into(),
        value: BadValue::Str(value.into()),
        detail: format!("supported values: {}", quoted.join(", ")),
    }
}

fn duplicate(field: &str, value: &str) -> FieldError {
    FieldError {
        typ: ErrorType::Duplicate,
        field: field.into(),
        value: BadValue::Str(value.into()),
        detail: String::new(),
    }
}

fn json_list(items: &[String]) -> BadValue {
    BadValue::Json(serde_json::to_string(items).unwrap_or_default())
}

/// The defaults kube-apiserver sets on a policy or binding it decodes.
pub fn apply_defaults(kind: Kind, v: &mut Value) {
    fn match_resources(m: &mut Value) {
        if !m.is_object() {
            return;
        }
        for (key, default) in [
            ("matchPolicy", json!("Equivalent")),
            ("namespaceSelector", json!({})),
            ("objectSelector", json!({})),
        ] {
            if m[key].is_null() {
                m[key] = default;
            }
        }
        for rules in ["resourceRules", "excludeResourceRules"] {
            for r in m
                .get_mut(rules)
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                if r.is_object() && r["scope"].is_null() {
                    r["scope"] = json!("*");
                }
            }
        }
    }
    match kind {
        Kind::ValidatingAdmissionPolicy => {
            // Served with an empty status until its type checking writes one.
            if v["status"].is_null() {
                v["status"] = json!({});
            }
            if v["spec"]["failurePolicy"].is_null() {
                v["spec"]["failurePolicy"] = json!("Fail");
            }
            if let Some(m) = v["spec"].get_mut("matchConstraints") {
                match_resources(m);
            }
        }
        Kind::ValidatingAdmissionPolicyBinding => {
            if let Some(m) = v.get_mut("spec").and_then(|s| s.get_mut("matchResources")) {
                match_resources(m);
            }
        }
        _ => {}
    }
}

/// The field errors of a (decoded, defaulted) policy.
pub fn check_policy(v: &Value) -> Vec<FieldError> {
    match serde_json::from_value::<ValidatingAdmissionPolicy>(v.clone()) {
        Ok(p) => Policy::compile(&p).err().unwrap_or_default(),
        Err(_) => Vec::new(),
    }
}

/// The field errors of a (decoded, defaulted) binding.
pub fn check_binding(v: &Value) -> Vec<FieldError> {
    match serde_json::from_value::<ValidatingAdmissionPolicyBinding>(v.clone()) {
        Ok(b) => Binding::compile(&b).err().unwrap_or_default(),
        Err(_) => Vec::new(),
    }
}

/// Compiles `source` at `field`, an error in `errs` if it does not compile.
fn expression(
    errs: &mut Vec<FieldError>,
    field: &str,
    source: &str,
    scope: Scope,
    returns: Returns,
) -> Option<Expr> {
    match compile(source, scope, returns) {
        Ok(e) => Some(e),
        Err(CompileError::Invalid(detail)) => {
            errs.push(invalid(field, source, detail));
            None
        }
        Err(CompileError::Unmodelled(detail)) => {
            errs.push(forbidden(field, &detail));
            None
        }
    }
}

/// `validateMatchResources`.
fn match_resources(m: &MatchResources, at: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match m.match_policy.as_deref() {
        None => errs.push(required(&format!("{at}.matchPolicy"), "")),
        Some("Equivalent" | "Exact") => {}
        Some(p) => errs.push(not_supported(
            &format!("{at}.matchPolicy"),
            p,
            &["Equivalent", "Exact"],
        )),
    }
    for (name, sel) in [
        ("namespaceSelector", &m.namespace_selector),
        ("objectSelector", &m.object_selector),
    ] {
        match sel {
            None => errs.push(required(&format!("{at}.{name}"), "")),
            Some(s) => errs.extend(label_selector(s, &format!("{at}.{name}"))),
        }
    }
    for (name, rules) in [
        ("resourceRules", &m.resource_rules),
        ("excludeResourceRules", &m.exclude_resource_rules),
    ] {
        for (i, r) in rules.iter().flatten().enumerate() {
            errs.extend(named_rule(r, &format!("{at}.{name}[{i}]")));
        }
    }
    errs
}

/// `ValidateLabelSelector`.
fn label_selector(s: &LabelSelector, at: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    for (k, v) in s.match_labels.iter().flatten() {
        let field = format!("{at}.matchLabels");
        errs.extend(qualified_name(k).into_iter().map(|m| invalid(&field, k, m)));
        errs.extend(label_value(v).into_iter().map(|m| invalid(&field, v, m)));
    }
    for (i, e) in s.match_expressions.iter().flatten().enumerate() {
        let at = format!("{at}.matchExpressions[{i}]");
        let values = e.values.as_deref().unwrap_or_default();
        match e.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => errs.push(required(
                &format!("{at}.values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            "Exists" | "DoesNotExist" if !values.is_empty() => errs.push(forbidden(
                &format!("{at}.values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            op => errs.push(invalid(
                &format!("{at}.operator"),
                op,
                "not a valid selector operator",
            )),
        }
        errs.extend(
            qualified_name(&e.key)
                .into_iter()
                .map(|m| invalid(&format!("{at}.key"), &e.key, m)),
        );
        for (j, v) in values.iter().enumerate() {
            errs.extend(
                label_value(v)
                    .into_iter()
                    .map(|m| invalid(&format!("{at}.values[{j}]"), v, m)),
            );
        }
    }
    errs
}

fn has_wildcard(items: &[String]) -> bool {
    items.iter().any(|i| i == "*")
}

/// `validateNamedRuleWithOperations`, with `validateRuleWithOperations` and `validateRule`.
fn named_rule(r: &NamedRuleWithOperations, at: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut names = BTreeSet::new();
    for (i, n) in r.resource_names.iter().flatten().enumerate() {
        let field = format!("{at}.resourceNames[{i}]");
        errs.extend(
            path_segment_name(n)
                .into_iter()
                .map(|m| invalid(&field, n, m)),
        );
        if !names.insert(n.as_str()) {
            errs.push(duplicate(&field, n));
        }
    }
    let ops = r.operations.as_deref().unwrap_or_default();
    if ops.is_empty() {
        errs.push(required(&format!("{at}.operations"), ""));
    }
    if ops.len() > 1 && has_wildcard(ops) {
        errs.push(invalid_value(
            &format!("{at}.operations"),
            json_list(ops),
            "if '*' is present, must not specify other operations",
        ));
    }
    for (i, op) in ops.iter().enumerate() {
        let supported = ["*", "CONNECT", "CREATE", "DELETE", "UPDATE"];
        if !supported.contains(&op.as_str()) {
            errs.push(not_supported(
                &format!("{at}.operations[{i}]"),
                op,
                &supported,
            ));
        }
    }
    let groups = r.api_groups.as_deref().unwrap_or_default();
    if groups.is_empty() {
        errs.push(required(&format!("{at}.apiGroups"), ""));
    }
    if groups.len() > 1 && has_wildcard(groups) {
        errs.push(invalid_value(
            &format!("{at}.apiGroups"),
            json_list(groups),
            "if '*' is present, must not specify other API groups",
        ));
    }
    let versions = r.api_versions.as_deref().unwrap_or_default();
    if versions.is_empty() {
        errs.push(required(&format!("{at}.apiVersions"), ""));
    }
    if versions.len() > 1 && has_wildcard(versions) {
        errs.push(invalid_value(
            &format!("{at}.apiVersions"),
            json_list(versions),
            "if '*' is present, must not specify other API versions",
        ));
    }
    for (i, v) in versions.iter().enumerate() {
        if v.is_empty() {
            errs.push(required(&format!("{at}.apiVersions[{i}]"), ""));
        }
    }
    errs.extend(resources(
        r.resources.as_deref().unwrap_or_default(),
        &format!("{at}.resources"),
    ));
    if let Some(scope) = r.scope.as_deref() {
        let supported = ["*", "Cluster", "Namespaced"];
        if !supported.contains(&scope) {
            errs.push(not_supported(&format!("{at}.scope"), scope, &supported));
        }
    }
    errs
}

/// `validateResources` (subresources allowed).
fn resources(items: &[String], at: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if items.is_empty() {
        errs.push(required(at, ""));
    }
    let (mut wildcard_sub, mut wildcard_res) = (BTreeSet::new(), BTreeSet::new());
    let (mut double, mut single, mut plain) = (false, false, false);
    for (i, rs) in items.iter().enumerate() {
        let field = format!("{at}[{i}]");
        if rs.is_empty() {
            errs.push(required(&field, ""));
            continue;
        }
        double |= rs == "*/*";
        single |= rs == "*";
        let Some((res, sub)) = rs.split_once('/') else {
            plain = rs != "*";
            continue;
        };
        if wildcard_sub.contains(res) {
            errs.push(invalid(
                &field,
                rs,
                format!("if '{res}/*' is present, must not specify {rs}"),
            ));
        }
        if wildcard_res.contains(sub) {
            errs.push(invalid(
                &field,
                rs,
                format!("if '*/{sub}' is present, must not specify {rs}"),
            ));
        }
        if sub == "*" {
            wildcard_sub.insert(res);
        }
        if res == "*" {
            wildcard_res.insert(sub);
        }
    }
    if items.len() > 1 && double {
        errs.push(invalid_value(
            at,
            json_list(items),
            "if '*/*' is present, must not specify other resources",
        ));
    }
    if single && plain {
        errs.push(invalid_value(
            at,
            json_list(items),
            "if '*' is present, must not specify other resources without subresources",
        ));
    }
    errs
}

/// `isCELIdentifier`.
fn cel_identifier(name: &str) -> bool {
    const RESERVED: [&str; 21] = [
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    ];
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c == '_' || c.is_ascii_alphabetic())
        && chars.all(|c| c == '_' || c.is_ascii_alphanumeric())
        && !RESERVED.contains(&name)
}

impl Policy {
    /// Checks and compiles a policy as the API server validates it on creation; the field
    /// errors otherwise.
    pub(super) fn compile(p: &ValidatingAdmissionPolicy) -> Result<Policy, Vec<FieldError>> {
        let spec = p.spec.clone().unwrap_or_default();
        let name = p.metadata.name.clone().unwrap_or_default();
        let mut errs = Vec::new();
        match spec.failure_policy.as_deref() {
            None => errs.push(required("spec.failurePolicy", "")),
            Some("Fail" | "Ignore") => {}
            Some(f) => errs.push(not_supported("spec.failurePolicy", f, &["Fail", "Ignore"])),
        }
        let params = spec.param_kind.is_some();
        if params {
            errs.push(unmodelled(
                "spec.paramKind",
                "a policy with parameters (paramKind; a binding's paramRef)",
            ));
        }
        match &spec.match_constraints {
            None => errs.push(required("spec.matchConstraints", "")),
            Some(m) => {
                errs.extend(match_resources(m, "spec.matchConstraints"));
                if m.resource_rules.as_ref().is_none_or(Vec::is_empty) {
                    errs.push(required("spec.matchConstraints.resourceRules", ""));
                }
            }
        }
        let no_variables = Scope {
            variables: None,
            authorizer: true,
            params,
        };
        let mut match_conditions = Vec::new();
        let mut condition_names = BTreeSet::new();
        for (i, c) in spec.match_conditions.iter().flatten().enumerate() {
            let at = format!("spec.matchConditions[{i}]");
            let trimmed = c.expression.trim();
            if trimmed.is_empty() {
                errs.push(required(&format!("{at}.expression"), ""));
            } else {
                match_conditions.extend(expression(
                    &mut errs,
                    &format!("{at}.expression"),
                    trimmed,
                    no_variables,
                    Returns::Bool,
                ));
            }
            if c.name.is_empty() {
                errs.push(required(&format!("{at}.name"), ""));
            } else {
                errs.extend(
                    qualified_name(&c.name)
                        .into_iter()
                        .map(|m| invalid(&format!("{at}.name"), &c.name, m)),
                );
                if !condition_names.insert(c.name.as_str()) {
                    errs.push(duplicate(&format!("{at}.name"), &c.name));
                }
            }
        }
        // The variables declared so far, with their types: a variable reads those before it;
        // `variables` exists only in a policy that has some.
        let mut declared: Vec<(String, Option<String>)> = Vec::new();
        let mut variables = Vec::new();
        for (i, v) in spec.variables.iter().flatten().enumerate() {
            let at = format!("spec.variables[{i}]");
            if v.name.trim().is_empty() {
                errs.push(required(&format!("{at}.name"), "name is not specified"));
            } else if !cel_identifier(&v.name) {
                errs.push(invalid(
                    &format!("{at}.name"),
                    &v.name,
                    "must be a valid CEL identifier",
                ));
            }
            let mut ty = None;
            if v.expression.trim().is_empty() {
                errs.push(required(
                    &format!("{at}.expression"),
                    "expression is not specified",
                ));
            } else {
                let scope = Scope {
                    variables: Some(&declared),
                    authorizer: true,
                    params,
                };
                if let Some(e) = expression(
                    &mut errs,
                    &format!("{at}.expression"),
                    &v.expression,
                    scope,
                    Returns::Any,
                ) {
                    ty = e.ty.clone();
                    variables.push((v.name.clone(), e));
                }
            }
            declared.push((v.name.clone(), ty));
        }
        let vars = (!declared.is_empty()).then_some(declared.as_slice());
        let scope = Scope {
            variables: vars,
            authorizer: true,
            params,
        };
        let message_scope = Scope {
            variables: vars,
            authorizer: false,
            params,
        };
        let mut validations = Vec::new();
        let mut audit_annotations = Vec::new();
        let validations_in = spec.validations.as_deref().unwrap_or_default();
        let audits_in = spec.audit_annotations.as_deref().unwrap_or_default();
        if validations_in.is_empty() && audits_in.is_empty() {
            let why = "validations or auditAnnotations must contain at least one item";
            errs.push(required("spec.validations", why));
            errs.push(required("spec.auditAnnotations", why));
        }
        for (i, v) in validations_in.iter().enumerate() {
            let at = format!("spec.validations[{i}]");
            let compiled = if v.expression.trim().is_empty() {
                errs.push(required(
                    &format!("{at}.expression"),
                    "expression is not specified",
                ));
                None
            } else {
                expression(
                    &mut errs,
                    &format!("{at}.expression"),
                    &v.expression,
                    scope,
                    Returns::Bool,
                )
            };
            let raw = v.message_expression.as_deref().unwrap_or("");
            let message_expression = if !raw.is_empty() && raw.trim().is_empty() {
                errs.push(invalid(
                    &format!("{at}.messageExpression"),
                    raw,
                    "must be non-empty if specified",
                ));
                None
            } else if !raw.trim().is_empty() {
                expression(
                    &mut errs,
                    &format!("{at}.messageExpression"),
                    raw,
                    message_scope,
                    Returns::String,
                )
            } else {
                None
            };
            let message = v.message.as_deref().unwrap_or("");
            if !message.is_empty() && message.trim().is_empty() {
                errs.push(invalid(
                    &format!("{at}.message"),
                    message,
                    "must be non-empty if specified",
                ));
            } else if message.trim().contains(['\n', '\r']) {
                errs.push(invalid(
                    &format!("{at}.message"),
                    message,
                    "must not contain line breaks",
                ));
            }
            if let Some(reason) = v.reason.as_deref() {
                let supported = ["Forbidden", "Invalid", "RequestEntityTooLarge"];
                if !supported.contains(&reason) {
                    errs.push(not_supported(&format!("{at}.reason"), reason, &supported));
                }
            }
            if let Some(expr) = compiled {
                validations.push(Validation {
                    expr,
                    message: v.message.clone(),
                    message_expression,
                    reason: v.reason.clone(),
                });
            }
        }
        let mut keys = BTreeSet::new();
        for (i, a) in audits_in.iter().enumerate() {
            let at = format!("spec.auditAnnotations[{i}]");
            if name.is_empty() {
                errs.push(invalid(
                    &format!("{at}.key"),
                    &a.key,
                    "requires metadata.name be non-empty",
                ));
            } else {
                let full = format!("{name}/{}", a.key);
                errs.extend(
                    qualified_name(&full)
                        .into_iter()
                        .map(|m| invalid(&format!("{at}.key"), &full, m)),
                );
            }
            let trimmed = a.value_expression.trim();
            if trimmed.is_empty() {
                errs.push(required(
                    &format!("{at}.valueExpression"),
                    "valueExpression is not specified",
                ));
            } else if trimmed.len() > MAX_AUDIT_VALUE_EXPRESSION {
                errs.push(required(
                    &format!("{at}.valueExpression"),
                    &format!("must not exceed {MAX_AUDIT_VALUE_EXPRESSION} bytes in length"),
                ));
            } else {
                let field = format!("{at}.valueExpression");
                match compile(trimmed, scope, Returns::StringOrNull) {
                    Ok(e) => audit_annotations.push(e),
                    Err(CompileError::Invalid(d)) => {
                        errs.push(invalid(&field, &a.value_expression, d))
                    }
                    Err(CompileError::Unmodelled(d)) => errs.push(forbidden(&field, &d)),
                }
            }
            if !keys.insert(a.key.as_str()) {
                errs.push(duplicate(&format!("{at}.key"), &a.key));
            }
        }
        if !errs.is_empty() {
            return Err(errs);
        }
        let request_fields = match_conditions
            .iter()
            .chain(variables.iter().map(|(_, e)| e))
            .chain(
                validations
                    .iter()
                    .flat_map(|v| std::iter::once(&v.expr).chain(&v.message_expression)),
            )
            .chain(&audit_annotations)
            .fold(0, |fields, e| fields | e.reads.request_fields);
        Ok(Policy {
            name,
            fail_closed: spec.failure_policy.as_deref() != Some("Ignore"),
            constraints: spec
                .match_constraints
                .as_ref()
                .map(Criteria::of)
                .unwrap_or_default(),
            match_conditions,
            variables,
            validations,
            audit_annotations,
            broken: None,
            request_fields,
        })
    }

    /// A policy read from the store (accepted when written): compiled, or, should it no
    /// longer compile, one that fails every request it matches under `failurePolicy: Fail`
    /// with why, as kube-apiserver answers for a policy whose expressions do not compile.
    pub(super) fn stored(v: &Value) -> Policy {
        let name = v["metadata"]["name"].as_str().unwrap_or("").to_string();
        let p: Result<ValidatingAdmissionPolicy, _> = serde_json::from_value(v.clone());
        let errs = match p.as_ref().map(Policy::compile) {
            Ok(Ok(policy)) => return policy,
            Ok(Err(errs)) => errs
                .iter()
                .map(|e| format!("{}: {}", e.field, e.body()))
                .collect::<Vec<_>>()
                .join(", "),
            Err(e) => e.to_string(),
        };
        tracing::warn!(policy = %name, errors = %errs, "a stored ValidatingAdmissionPolicy does not compile; it denies what it matches");
        let spec = p.ok().and_then(|p| p.spec).unwrap_or_default();
        Policy {
            name,
            fail_closed: spec.failure_policy.as_deref() != Some("Ignore"),
            constraints: spec
                .match_constraints
                .as_ref()
                .map(Criteria::of)
                .unwrap_or_default(),
            match_conditions: Vec::new(),
            variables: Vec::new(),
            validations: Vec::new(),
            audit_annotations: Vec::new(),
            broken: Some(format!("compilation error: {errs}")),
            request_fields: 0,
        }
    }
}

impl Binding {
    /// Checks and compiles a binding as the API server validates it on creation; the field
    /// errors otherwise.
    pub(super) fn compile(
        b: &ValidatingAdmissionPolicyBinding,
    ) -> Result<Binding, Vec<FieldError>> {
        let spec = b.spec.clone().unwrap_or_default();
        let mut errs = Vec::new();
        match spec.policy_name.as_deref().unwrap_or("") {
            "" => errs.push(required("spec.policyName", "")),
            p => errs.extend(
                dns1123_subdomain(p)
                    .into_iter()
                    .map(|m| invalid("spec.policyName", p, m)),
            ),
        }
        if spec.param_ref.is_some() {
            errs.push(unmodelled(
                "spec.paramRef",
                "a binding with parameters (paramRef; a policy's paramKind)",
            ));
        }
        if let Some(m) = &spec.match_resources {
            errs.extend(match_resources(m, "spec.matchResources"));
        }
        let actions = spec.validation_actions.as_deref().unwrap_or_default();
        let mut seen = BTreeSet::new();
        for (i, a) in actions.iter().enumerate() {
            let field = format!("spec.validationActions[{i}]");
            let supported = ["Audit", "Deny", "Warn"];
            if !supported.contains(&a.as_str()) {
                errs.push(not_supported(&field, a, &supported));
            }
            if !seen.insert(a.as_str()) {
                errs.push(duplicate(&field, a));
            }
        }
        if seen.contains("Deny") && seen.contains("Warn") {
            errs.push(invalid_value(
                "spec.validationActions",
                json_list(actions),
                "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
            ));
        }
        if seen.is_empty() {
            errs.push(required(
                "spec.validationActions",
                "at least one validation action is required",
            ));
        }
        if !errs.is_empty() {
            return Err(errs);
        }
        Ok(Binding {
            name: b.metadata.name.clone().unwrap_or_default(),
            deny: seen.contains("Deny"),
            warn: seen.contains("Warn"),
            resources: spec.match_resources.as_ref().map(Criteria::of),
        })
    }
}
