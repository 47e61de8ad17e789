//! Opt-in RBAC enforcement: the simulated server authorizes each request of a known token
//! against Roles, ClusterRoles and their bindings (parsed from the deploy manifests), as the
//! kube-apiserver RBAC authorizer does, and answers 403 with the real server's Status.
//!
//! Owns the token → user mapping (to an [`Identity`]), the rule matching (verbs, API groups,
//! `resource/subresource`, resourceNames; RoleBindings grant only in their namespace) and the
//! record of which grant (role × verb × group × resource × resourceName) allowed at least one
//! request. Tokens without an identity are not checked (they play cluster-admin: the test
//! harness, the world). Off unless a test calls [`Cluster::enforce`](super::Cluster::enforce).

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, Subject,
};
use serde_json::{json, Map, Value};

use super::errors::ApiError;
// The identity type lives below both this module and admission, which reads it as
// `request.userInfo`; it stays nameable here, where the tests and the harness look for it.
pub use super::identity::Identity;

/// The attributes the authorizer decides on (k8s.io/apiserver `authorizer.Attributes`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attributes {
    /// get, list, watch, create, update, patch, delete
    pub verb: String,
    /// API group ("" for core)
    pub group: String,
    /// plural resource
    pub resource: String,
    /// subresource ("" for none)
    pub subresource: String,
    /// namespace ("" for cluster scope)
    pub namespace: String,
    /// object name: from the path, or for list/watch from `fieldSelector=metadata.name=X`
    pub name: String,
}

/// One grant of a role: a rule expanded to a single verb, group, resource and resourceName
/// ("" when the rule names none).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Grant {
    /// `ClusterRole/NAME` or `Role/NS/NAME`.
    pub role: String,
    /// The verb.
    pub verb: String,
    /// The API group.
    pub group: String,
    /// `resource` or `resource/subresource`.
    pub resource: String,
    /// A resourceName of the rule, or "".
    pub resource_name: String,
}

impl std::fmt::Display for Grant {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} {}{}{}",
            self.role,
            self.verb,
            if self.group.is_empty() {
                String::new()
            } else {
                format!("{}/", self.group)
            },
            self.resource,
            if self.resource_name.is_empty() {
                String::new()
            } else {
                format!(" [{}]", self.resource_name)
            }
        )
    }
}

struct Bound {
    role: String,
    rules: Vec<PolicyRule>,
    /// The RoleBinding's namespace; `None` for a ClusterRoleBinding.
    namespace: Option<String>,
    subjects: Vec<Subject>,
}

/// The RBAC state of the simulated cluster.
#[derive(Default)]
pub struct Rbac {
    bound: Vec<Bound>,
    used: Mutex<BTreeSet<Grant>>,
    denied: Mutex<Vec<String>>,
}

fn subject_matches(s: &Subject, binding_ns: Option<&str>, who: &Identity) -> bool {
    match s.kind.as_str() {
        "User" => s.name == who.user,
        "Group" => who.groups.contains(&s.name),
        "ServiceAccount" => {
            let ns = s.namespace.as_deref().or(binding_ns).unwrap_or("");
            who.user == format!("system:serviceaccount:{ns}:{}", s.name)
        }
        _ => false,
    }
}

fn has(list: &[String], x: &str) -> bool {
    list.iter().any(|v| v == "*" || v == x)
}

fn resource_matches(rule: &PolicyRule, a: &Attributes) -> bool {
    let resources = rule.resources.as_deref().unwrap_or_default();
    let combined = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    resources.iter().any(|r| {
        r == "*"
            || *r == combined
            || (!a.subresource.is_empty() && *r == format!("*/{}", a.subresource))
    })
}

fn rule_allows(rule: &PolicyRule, a: &Attributes) -> bool {
    has(&rule.verbs, &a.verb)
        && has(rule.api_groups.as_deref().unwrap_or_default(), &a.group)
        && resource_matches(rule, a)
        && match rule.resource_names.as_deref() {
            None | Some([]) => true,
            Some(names) => !a.name.is_empty() && names.contains(&a.name),
        }
}

impl Rbac {
    /// Reads every Role, ClusterRole, RoleBinding and ClusterRoleBinding of the YAML documents
    /// (other kinds are skipped). Bindings to missing roles grant nothing.
    pub fn from_yaml(docs: &[&str]) -> anyhow::Result<Rbac> {
        let mut roles: HashMap<String, Vec<PolicyRule>> = HashMap::new();
        let mut bindings: Vec<(String, Option<String>, Vec<Subject>)> = Vec::new();
        for text in docs {
            for de in yaml_serde::Deserializer::from_str(text) {
                let v: Value = serde::Deserialize::deserialize(de)?;
                match v["kind"].as_str() {
                    Some("ClusterRole") => {
                        let r: ClusterRole = serde_json::from_value(v)?;
                        roles.insert(
                            format!("ClusterRole/{}", r.metadata.name.unwrap_or_default()),
                            r.rules.unwrap_or_default(),
                        );
                    }
                    Some("Role") => {
                        let r: Role = serde_json::from_value(v)?;
                        roles.insert(
                            format!(
                                "Role/{}/{}",
                                r.metadata.namespace.unwrap_or_default(),
                                r.metadata.name.unwrap_or_default()
                            ),
                            r.rules.unwrap_or_default(),
                        );
                    }
                    Some("ClusterRoleBinding") => {
                        let b: ClusterRoleBinding = serde_json::from_value(v)?;
                        bindings.push((
                            format!("{}/{}", b.role_ref.kind, b.role_ref.name),
                            None,
                            b.subjects.unwrap_or_default(),
                        ));
                    }
                    Some("RoleBinding") => {
                        let b: RoleBinding = serde_json::from_value(v)?;
                        let ns = b.metadata.namespace.unwrap_or_default();
                        let role = if b.role_ref.kind == "Role" {
                            format!("Role/{ns}/{}", b.role_ref.name)
                        } else {
                            format!("ClusterRole/{}", b.role_ref.name)
                        };
                        bindings.push((role, Some(ns), b.subjects.unwrap_or_default()));
                    }
                    _ => {}
                }
            }
        }
        let bound = bindings
            .into_iter()
            .map(|(role, namespace, subjects)| Bound {
                rules: roles.get(&role).cloned().unwrap_or_default(),
                role,
                namespace,
                subjects,
            })
            .collect();
        Ok(Rbac {
            bound,
            ..Rbac::default()
        })
    }

    /// Decides a request of `who`; records the grants that allowed it, or the denial.
    pub fn authorize(&self, who: &Identity, a: &Attributes) -> Result<(), ApiError> {
        let mut hits = Vec::new();
        for b in &self.bound {
            if let Some(ns) = &b.namespace {
                if *ns != a.namespace {
                    continue;
                }
            }
            if !b
                .subjects
                .iter()
                .any(|s| subject_matches(s, b.namespace.as_deref(), who))
            {
                continue;
            }
            for rule in b.rules.iter().filter(|r| rule_allows(r, a)) {
                let named = rule.resource_names.as_ref().is_some_and(|n| !n.is_empty());
                hits.push(Grant {
                    role: b.role.clone(),
                    verb: a.verb.clone(),
                    group: a.group.clone(),
                    resource: if a.subresource.is_empty() {
                        a.resource.clone()
                    } else {
                        format!("{}/{}", a.resource, a.subresource)
                    },
                    resource_name: if named { a.name.clone() } else { String::new() },
                });
            }
        }
        if hits.is_empty() {
            let e = forbidden(&who.user, a);
            self.denied
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(e.message.clone().unwrap_or_default());
            return Err(e);
        }
        self.used
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(hits);
        Ok(())
    }

    /// Every grant bound to `who` (each verb × group × resource × resourceName of each rule).
    pub fn grants_of(&self, who: &Identity) -> BTreeSet<Grant> {
        let mut out = BTreeSet::new();
        for b in &self.bound {
            if !b
                .subjects
                .iter()
                .any(|s| subject_matches(s, b.namespace.as_deref(), who))
            {
                continue;
            }
            for rule in &b.rules {
                let names: Vec<String> = match rule.resource_names.as_deref() {
                    None | Some([]) => vec![String::new()],
                    Some(n) => n.to_vec(),
                };
                for verb in &rule.verbs {
                    for group in rule.api_groups.as_deref().unwrap_or_default() {
                        for resource in rule.resources.as_deref().unwrap_or_default() {
                            for name in &names {
                                out.insert(Grant {
                                    role: b.role.clone(),
                                    verb: verb.clone(),
                                    group: group.clone(),
                                    resource: resource.clone(),
                                    resource_name: name.clone(),
                                });
                            }
                        }
                    }
                }
            }
        }
        out
    }

    /// The grants that allowed at least one request so far.
    pub fn used(&self) -> BTreeSet<Grant> {
        self.used.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The messages of the requests denied so far.
    pub fn denied(&self) -> Vec<String> {
        self.denied
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// The 403 kube-apiserver answers for a request the authorizer did not allow:
/// `responsewriters.forbiddenMessage` wrapped by `apierrors.NewForbidden(groupResource, name)`.
pub fn forbidden(user: &str, a: &Attributes) -> ApiError {
    let resource = if a.subresource.is_empty() {
        a.resource.clone()
    } else {
        format!("{}/{}", a.resource, a.subresource)
    };
    let why = if a.namespace.is_empty() {
        format!(
            "User {user:?} cannot {} resource {resource:?} in API group {:?} at the cluster scope",
            a.verb, a.group
        )
    } else {
        format!(
            "User {user:?} cannot {} resource {resource:?} in API group {:?} in the namespace {:?}",
            a.verb, a.group, a.namespace
        )
    };
    let qualified = if a.group.is_empty() {
        a.resource.clone()
    } else {
        format!("{}.{}", a.resource, a.group)
    };
    let message = if a.name.is_empty() {
        format!("{qualified} is forbidden: {why}")
    } else {
        format!("{qualified} {:?} is forbidden: {why}", a.name)
    };
    let mut d = Map::new();
    if !a.name.is_empty() {
        d.insert("name".into(), json!(a.name));
    }
    if !a.group.is_empty() {
        d.insert("group".into(), json!(a.group));
    }
    d.insert("kind".into(), json!(a.resource));
    ApiError {
        code: 403,
        reason: Some("Forbidden"),
        message: Some(message),
        details: Some(Value::Object(d)),
        retry_after: None,
        metadata: None,
        plain_text: false,
    }
}

/// The name the real request-info resolver gives a list or watch: the value of an exact
/// `metadata.name` term of its field selector.
pub fn selector_name(field_selector: &str) -> String {
    field_selector
        .split(',')
        .filter_map(|t| {
            let t = t.trim();
            if t.contains("!=") {
                return None;
            }
            let (f, v) = t.split_once("==").or_else(|| t.split_once('='))?;
            (f.trim() == "metadata.name").then(|| v.trim().to_string())
        })
        .next()
        .unwrap_or_default()
}

/// What the server enforces, by token; set once with
/// [`Cluster::enforce`](super::Cluster::enforce).
#[derive(Default)]
pub struct Enforcement {
    /// Token → identity. Other tokens are not checked.
    pub identities: HashMap<String, Identity>,
    /// RBAC, if enforced.
    pub rbac: Option<Rbac>,
    /// Admission policies enforced on these identities' writes (as well as those in the
    /// store, which apply to every caller).
    pub admission: Option<super::admission::Admission>,
}
