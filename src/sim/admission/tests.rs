use super::*;

fn user() -> Identity {
    Identity::unchecked("admin")
}

fn no_namespace() -> Option<Value> {
    None
}

/// The decision of `admission` on a write of `kind` (cluster-scoped, no Namespace lookups).
fn decide(
    admission: &Admission,
    operation: Operation,
    kind: Kind,
    object: &Value,
    old_object: &Value,
) -> Outcome {
    let user = user();
    let r = Request {
        operation,
        kind,
        subresource: "",
        namespace: "",
        name: "x",
        user: &user,
        object,
        old_object,
        namespace_object: &no_namespace,
    };
    let mut out = Outcome::default();
    admission.admit(&r, &mut out).unwrap();
    out
}

fn policy(spec: &str, actions: &str) -> Admission {
    Admission::from_yaml(&format!(
        "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: p}}
spec:
{spec}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: b}}
spec: {{policyName: p, validationActions: {actions}}}
"
    ))
    .unwrap()
}

#[test]
fn the_index_keeps_writes_no_policy_can_match_off_the_evaluator() {
    let deploy =
        Admission::from_yaml(include_str!("../../../deploy/admission-policy.yaml")).unwrap();
    assert!(!deploy.ignores(Kind::Node, "", Operation::Update));
    assert!(!deploy.ignores(Kind::Node, "status", Operation::Update));
    assert!(!deploy.ignores(Kind::Node, "", Operation::Delete));
    assert!(deploy.ignores(Kind::Pod, "", Operation::Update));
    assert!(deploy.ignores(Kind::Pod, "eviction", Operation::Create));
    assert!(deploy.ignores(Kind::EventV1, "", Operation::Create));
    assert!(Admission::default().ignores(Kind::Node, "", Operation::Update));
}

#[test]
fn a_rule_on_core_events_holds_events_k8s_io_writes_unless_matching_is_exact() {
    let spec = |policy: &str| {
        format!(
            "  matchConstraints:
    matchPolicy: {policy}
    resourceRules:
    - {{apiGroups: [''], apiVersions: [v1], operations: [CREATE], resources: [events]}}
  validations:
  - expression: \"request.kind.group == 'x'\"
    messageExpression: \"request.kind.group + '/' + request.requestKind.group + ' ' + object.reason\""
        )
    };
    let stored = json!({"metadata": {"name": "x"}, "reason": "Rebooted", "involvedObject": {}});
    let out = decide(
        &policy(&spec("Equivalent"), "[Deny]"),
        Operation::Create,
        Kind::EventV1,
        &stored,
        &Value::Null,
    );
    // Matched as core/v1 events: `request.kind` is the matched one, `requestKind` the
    // request's, the object the core/v1 form.
    assert_eq!(out.denials.len(), 1, "{out:?}");
    assert_eq!(out.denials[0].message, "/events.k8s.io Rebooted");
    let out = decide(
        &policy(&spec("Exact"), "[Deny]"),
        Operation::Create,
        Kind::EventV1,
        &stored,
        &Value::Null,
    );
    assert!(out.denials.is_empty(), "{out:?}");
}

#[test]
fn match_condition_errors_deny_together_under_fail_and_skip_the_policy_under_ignore() {
    let spec = |failure: &str| {
        format!(
            "  failurePolicy: {failure}
  matchConstraints:
    resourceRules:
    - {{apiGroups: [''], apiVersions: [v1], operations: [UPDATE], resources: [nodes]}}
  matchConditions:
  - {{name: a, expression: \"object.data.nokey == 'x'\"}}
  - {{name: b, expression: \"object.data.other == 'y'\"}}
  validations:
  - expression: 'false'"
        )
    };
    let node = json!({"metadata": {"name": "x"}, "data": {}});
    let out = decide(
        &policy(&spec("Fail"), "[Deny]"),
        Operation::Update,
        Kind::Node,
        &node,
        &node,
    );
    assert_eq!(
        out.denials[0].message,
        "[expression 'object.data.nokey == 'x'' resulted in error: no such key: nokey, expression 'object.data.other == 'y'' resulted in error: no such key: other]"
    );
    let out = decide(
        &policy(&spec("Ignore"), "[Deny]"),
        Operation::Update,
        Kind::Node,
        &node,
        &node,
    );
    assert!(out.denials.is_empty(), "{out:?}");
}

#[test]
fn an_audit_annotation_that_fails_denies_whatever_the_bindings_actions() {
    let spec = "  matchConstraints:
    resourceRules:
    - {apiGroups: [''], apiVersions: [v1], operations: [UPDATE], resources: [nodes]}
  auditAnnotations:
  - {key: k, valueExpression: 'string(object.data.nokey)'}
  - {key: fine, valueExpression: \"'a'\"}";
    let node = json!({"metadata": {"name": "x"}, "data": {}});
    let out = decide(
        &policy(spec, "[Audit]"),
        Operation::Update,
        Kind::Node,
        &node,
        &node,
    );
    assert_eq!(
        out.denials[0].message,
        "expression 'string(object.data.nokey)' resulted in error: no such key: nokey"
    );
}

#[test]
fn warnings_are_told_once_quoted_and_cut_when_they_grow_long() {
    assert_eq!(
        warning_headers(&["a \"quoted\" \\ text".into(), "a \"quoted\" \\ text".into()]),
        vec![r#"299 - "a \"quoted\" \\ text""#.to_string()]
    );
    let long: Vec<String> = (0..20)
        .map(|i| format!("{i:03}{}", "x".repeat(297)))
        .collect();
    let headers = warning_headers(&long);
    // Past 4096 characters in all, each is cut to 256 (and the total still bounds them).
    assert!(headers.iter().all(|h| h.len() == 256 + 8), "{headers:?}");
    assert_eq!(headers.len(), 16);
}
