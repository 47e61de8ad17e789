//! Which requests a policy's `matchConstraints`, or a binding's `matchResources`, select, as
//! kube-apiserver's `matching.Matcher` decides: the namespaceSelector (on the labels of the
//! request's Namespace; a cluster-scoped resource other than a Namespace is always selected),
//! the objectSelector (on the labels of the object or of the old object), the excluded and
//! included resource rules (operations, API groups and versions, `resource/subresource` with
//! its wildcards, scope, resourceNames), and under `matchPolicy: Equivalent` the resources
//! served from the same storage (here the two Event APIs, core/v1 and events.k8s.io/v1).
//!
//! Owns the matching only: what is evaluated once matched is `mod.rs`'s, and it must never
//! read the store (the request's Namespace comes through its caller).

use k8s_openapi::api::admissionregistration::v1::{MatchResources, NamedRuleWithOperations};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde_json::Value;

use super::Operation;
use crate::sim::errors::ApiError;
use crate::sim::kinds::Kind;

/// A label selector (`metav1.LabelSelectorAsSelector`); empty selects everything.
#[derive(Clone, Debug, Default)]
pub struct Selector {
    /// `matchLabels` and `matchExpressions`, each as (key, operator, values).
    requirements: Vec<(String, String, Vec<String>)>,
}

impl Selector {
    fn of(s: Option<&LabelSelector>) -> Selector {
        let Some(s) = s else {
            return Selector::default();
        };
        let mut requirements: Vec<(String, String, Vec<String>)> = s
            .match_labels
            .iter()
            .flatten()
            .map(|(k, v)| (k.clone(), "In".to_string(), vec![v.clone()]))
            .collect();
        requirements.extend(s.match_expressions.iter().flatten().map(|e| {
            (
                e.key.clone(),
                e.operator.clone(),
                e.values.clone().unwrap_or_default(),
            )
        }));
        Selector { requirements }
    }

    fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether labels (a JSON object, or null for none) are selected.
    fn matches(&self, labels: &Value) -> bool {
        self.requirements.iter().all(|(key, op, values)| {
            let value = labels.get(key).and_then(Value::as_str);
            match op.as_str() {
                "In" => value.is_some_and(|v| values.iter().any(|x| x == v)),
                "NotIn" => value.is_none_or(|v| !values.iter().any(|x| x == v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                _ => false,
            }
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scope {
    All,
    Namespaced,
    Cluster,
}

/// One `NamedRuleWithOperations`.
#[derive(Clone, Debug)]
struct Rule {
    operations: Vec<String>,
    groups: Vec<String>,
    versions: Vec<String>,
    resources: Vec<String>,
    scope: Scope,
    names: Vec<String>,
}

fn listed(items: &[String], x: &str) -> bool {
    items.iter().any(|i| i == "*" || i == x)
}

impl Rule {
    fn of(r: &NamedRuleWithOperations) -> Rule {
        let v = |x: &Option<Vec<String>>| x.clone().unwrap_or_default();
        Rule {
            operations: v(&r.operations),
            groups: v(&r.api_groups),
            versions: v(&r.api_versions),
            resources: v(&r.resources),
            scope: match r.scope.as_deref() {
                Some("Namespaced") => Scope::Namespaced,
                Some("Cluster") => Scope::Cluster,
                _ => Scope::All,
            },
            names: v(&r.resource_names),
        }
    }

    /// `rules.Matcher` without scope and names: operation, group, version, resource.
    fn selects(&self, kind: Kind, sub: &str, op: Operation) -> bool {
        (listed(&self.operations, op.as_str()))
            && listed(&self.groups, kind.group())
            && listed(&self.versions, "v1")
            && self.resources.iter().any(|rs| {
                let (res, rsub) = rs.split_once('/').unwrap_or((rs, ""));
                (res == "*" || res == kind.plural()) && (rsub == "*" || rsub == sub)
            })
    }

    fn matches(&self, a: &Attributes, kind: Kind) -> bool {
        let namespace_resource = kind == Kind::Namespace;
        let scope = match self.scope {
            Scope::All => true,
            Scope::Namespaced => !namespace_resource && !a.namespace.is_empty(),
            Scope::Cluster => namespace_resource || a.namespace.is_empty(),
        };
        scope
            && self.selects(kind, a.subresource, a.operation)
            && (self.names.is_empty() || self.names.iter().any(|n| n == a.name))
    }
}

/// The resource served from the same storage as `kind` under another API, if any.
fn equivalent(kind: Kind) -> Option<Kind> {
    match kind {
        Kind::Event => Some(Kind::EventV1),
        Kind::EventV1 => Some(Kind::Event),
        _ => None,
    }
}

/// A request as the matcher reads it.
pub struct Attributes<'a> {
    /// The operation.
    pub operation: Operation,
    /// The resource of the request's path.
    pub kind: Kind,
    /// Its subresource ("" for none).
    pub subresource: &'a str,
    /// The namespace (a Namespace's own name for a Namespace, as kube-apiserver's request info).
    pub namespace: &'a str,
    /// The object's name.
    pub name: &'a str,
    /// The object after the write (null for DELETE).
    pub object: &'a Value,
    /// The object before the write (null for CREATE).
    pub old_object: &'a Value,
    /// The request's Namespace, if it exists.
    pub namespace_object: &'a dyn Fn() -> Option<Value>,
}

/// A policy's matchConstraints or a binding's matchResources.
#[derive(Clone, Debug, Default)]
pub struct Criteria {
    namespace_selector: Selector,
    object_selector: Selector,
    rules: Vec<Rule>,
    exclude: Vec<Rule>,
    equivalent: bool,
}

impl Criteria {
    /// From a (defaulted) MatchResources.
    pub fn of(m: &MatchResources) -> Criteria {
        Criteria {
            namespace_selector: Selector::of(m.namespace_selector.as_ref()),
            object_selector: Selector::of(m.object_selector.as_ref()),
            rules: m.resource_rules.iter().flatten().map(Rule::of).collect(),
            exclude: m
                .exclude_resource_rules
                .iter()
                .flatten()
                .map(Rule::of)
                .collect(),
            equivalent: m.match_policy.as_deref() != Some("Exact"),
        }
    }

    /// Whether some request to `kind`/`sub` with `op` may be selected (the rules alone, for
    /// the index that keeps requests no policy selects off the evaluator).
    pub fn may_select(&self, kind: Kind, sub: &str, op: Operation) -> bool {
        self.rules.is_empty()
            || self.rules.iter().any(|r| {
                r.selects(kind, sub, op)
                    || (self.equivalent && equivalent(kind).is_some_and(|e| r.selects(e, sub, op)))
            })
    }

    /// `Matcher.Matches`: the resource the request is matched as (its own, or an equivalent),
    /// or none; a missing Namespace is an error only for a request the rules select.
    pub fn matches(&self, a: &Attributes) -> Result<Option<Kind>, ApiError> {
        let mut namespace_error = None;
        // A cluster-scoped resource other than a Namespace is never exempted.
        let cluster_scoped = a.namespace.is_empty() && a.kind != Kind::Namespace;
        if !self.namespace_selector.is_empty() && !cluster_scoped {
            let own = a.kind == Kind::Namespace
                && a.subresource.is_empty()
                && matches!(a.operation, Operation::Create | Operation::Update);
            let labels = if own {
                Some(a.object["metadata"]["labels"].clone())
            } else {
                (a.namespace_object)().map(|ns| ns["metadata"]["labels"].clone())
            };
            match labels {
                Some(l) if !self.namespace_selector.matches(&l) => return Ok(None),
                Some(_) => {}
                None => namespace_error = Some(ApiError::not_found(Kind::Namespace, a.namespace)),
            }
        }
        // A missing object (DELETE's, CREATE's old one) has no labels to match, not empty ones.
        let selected =
            |o: &Value| o.is_object() && self.object_selector.matches(&o["metadata"]["labels"]);
        if !self.object_selector.is_empty() && !selected(a.object) && !selected(a.old_object) {
            return Ok(None);
        }
        if self.in_rules(&self.exclude, a).is_some() {
            return Ok(None);
        }
        let matched = if self.rules.is_empty() {
            Some(a.kind)
        } else {
            self.in_rules(&self.rules, a)
        };
        match (matched, namespace_error) {
            (Some(_), Some(e)) => Err(e),
            (m, _) => Ok(m),
        }
    }

    /// `matchesResourceRules`: the resource the rules select the request as, its own first.
    fn in_rules(&self, rules: &[Rule], a: &Attributes) -> Option<Kind> {
        if rules.iter().any(|r| r.matches(a, a.kind)) {
            return Some(a.kind);
        }
        if !self.equivalent {
            return None;
        }
        equivalent(a.kind).filter(|e| rules.iter().any(|r| r.matches(a, *e)))
    }
}
