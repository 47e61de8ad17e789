//! Kubernetes label selectors: their string form (`app=web,tier!=db,zone in (a,b),!legacy`) and
//! the API's structured form (a PodDisruptionBudget's `spec.selector`).
//!
//! Owns parsing and matching of the selector strings that the config file and the API's
//! `labelSelector` query parameter carry, with the grammar of `k8s.io/apimachinery/pkg/labels`;
//! and the matching of a budget's [`LabelSelector`] against a pod's labels ([`selector_matches`],
//! [`selector_problem`], [`budget_may_select`]), which the drain, the health gate and
//! `rollboot plan` share. It must never talk to the API or hold state: a selector is a value.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// A parsed label selector: all requirements must hold (logical AND), as in Kubernetes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    requirements: Vec<Requirement>,
}

/// One clause of a selector.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Requirement {
    /// `key=value` or `key==value`
    Equals(String, String),
    /// `key!=value`: also true when the label is absent, as in Kubernetes.
    NotEquals(String, String),
    /// `key in (a,b)`
    In(String, Vec<String>),
    /// `key notin (a,b)`: also true when the label is absent.
    NotIn(String, Vec<String>),
    /// `key`
    Exists(String),
    /// `!key`
    DoesNotExist(String),
}

/// Why a selector string does not parse; names the offending clause.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid label selector `{selector}`: {reason}")]
pub struct SelectorError {
    /// The whole selector as written.
    pub selector: String,
    /// What is wrong, naming the clause.
    pub reason: String,
}

impl Selector {
    /// The selector that matches everything (the empty string).
    pub fn everything() -> Selector {
        Selector::default()
    }

    /// True when the selector has no requirement and so matches every object.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// The requirements, in the order written.
    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// Parses the string form. Empty or blank means "everything".
    pub fn parse(input: &str) -> Result<Selector, SelectorError> {
        let err = |reason: String| SelectorError {
            selector: input.to_string(),
            reason,
        };
        let mut requirements = Vec::new();
        for clause in split_clauses(input).map_err(err)? {
            let clause = clause.trim();
            if clause.is_empty() {
                if input.trim().is_empty() {
                    continue;
                }
                return Err(err(
                    "empty clause (two commas in a row, or a trailing comma)".into(),
                ));
            }
            requirements.push(parse_clause(clause).map_err(err)?);
        }
        Ok(Selector { requirements })
    }

    /// True when every requirement holds for these labels.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }

    /// One `key=value` every object this selector matches carries, when it requires one: an
    /// index of objects by label finds the candidates from it.
    pub fn first_equality(&self) -> Option<(&str, &str)> {
        self.requirements.iter().find_map(|r| match r {
            Requirement::Equals(k, v) => Some((k.as_str(), v.as_str())),
            Requirement::In(k, vs) if vs.len() == 1 => Some((k.as_str(), vs[0].as_str())),
            _ => None,
        })
    }
}

impl Requirement {
    /// True when this clause holds for these labels.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::Equals(k, v) => labels.get(k) == Some(v),
            Requirement::NotEquals(k, v) => labels.get(k) != Some(v),
            Requirement::In(k, vs) => labels.get(k).is_some_and(|l| vs.contains(l)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|l| !vs.contains(l)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        }
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self
            .requirements
            .iter()
            .map(|r| match r {
                Requirement::Equals(k, v) => format!("{k}={v}"),
                Requirement::NotEquals(k, v) => format!("{k}!={v}"),
                Requirement::In(k, vs) => format!("{k} in ({})", vs.join(",")),
                Requirement::NotIn(k, vs) => format!("{k} notin ({})", vs.join(",")),
                Requirement::Exists(k) => k.clone(),
                Requirement::DoesNotExist(k) => format!("!{k}"),
            })
            .collect();
        f.write_str(&parts.join(","))
    }
}

/// Splits on commas that are not inside a parenthesised value set.
fn split_clauses(input: &str) -> Result<Vec<&str>, String> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in input.char_indices() {
        match c {
            '(' => {
                if depth > 0 {
                    return Err("nested parentheses".into());
                }
                depth += 1;
            }
            ')' => {
                if depth == 0 {
                    return Err("unbalanced `)`".into());
                }
                depth -= 1;
            }
            ',' if depth == 0 => {
                out.push(&input[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unclosed `(`".into());
    }
    out.push(&input[start..]);
    Ok(out)
}

fn parse_clause(clause: &str) -> Result<Requirement, String> {
    if let Some(key) = clause.strip_prefix('!') {
        let key = key.trim();
        validate_key(key)?;
        return Ok(Requirement::DoesNotExist(key.to_string()));
    }
    for (op, ctor) in [
        (
            "!=",
            Requirement::NotEquals as fn(String, String) -> Requirement,
        ),
        ("==", Requirement::Equals),
        ("=", Requirement::Equals),
    ] {
        if let Some((k, v)) = clause.split_once(op) {
            let (k, v) = (k.trim(), v.trim());
            validate_key(k)?;
            validate_value(v)?;
            return Ok(ctor(k.to_string(), v.to_string()));
        }
    }
    let words: Vec<&str> = clause.splitn(2, char::is_whitespace).collect();
    if words.len() == 2 {
        let key = words[0];
        let rest = words[1].trim_start();
        let (op, set) = if let Some(s) = rest.strip_prefix("notin") {
            ("notin", s)
        } else if let Some(s) = rest.strip_prefix("in") {
            ("in", s)
        } else {
            return Err(format!(
                "clause `{clause}`: expected `=`, `==`, `!=`, `in (...)`, `notin (...)`"
            ));
        };
        validate_key(key)?;
        let set = set.trim();
        let inner = set
            .strip_prefix('(')
            .and_then(|s| s.strip_suffix(')'))
            .ok_or_else(|| format!("clause `{clause}`: `{op}` needs a set like `(a,b)`"))?;
        let values: Vec<String> = inner.split(',').map(|v| v.trim().to_string()).collect();
        if values.iter().all(|v| v.is_empty()) {
            return Err(format!(
                "clause `{clause}`: `{op}` needs at least one value"
            ));
        }
        for v in &values {
            validate_value(v)?;
        }
        return Ok(if op == "in" {
            Requirement::In(key.to_string(), values)
        } else {
            Requirement::NotIn(key.to_string(), values)
        });
    }
    validate_key(clause)?;
    Ok(Requirement::Exists(clause.to_string()))
}

/// A label key: optional DNS-subdomain prefix and `/`, then a name of at most 63 characters
/// of alphanumerics, `-`, `_`, `.`, starting and ending alphanumeric.
fn validate_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.rsplit_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        let ok = !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|l| {
                !l.is_empty()
                    && l.chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            });
        if !ok {
            return Err(format!(
                "key `{key}`: prefix `{p}` must be a DNS subdomain (lowercase letters, digits, `-`, `.`)"
            ));
        }
    }
    if !is_label_name(name) || name.is_empty() {
        return Err(format!(
            "key `{key}`: name must be 1-63 characters of letters, digits, `-`, `_`, `.`, starting and ending with a letter or digit"
        ));
    }
    Ok(())
}

fn validate_value(v: &str) -> Result<(), String> {
    if v.is_empty() || is_label_name(v) {
        Ok(())
    } else {
        Err(format!(
            "value `{v}` must be at most 63 characters of letters, digits, `-`, `_`, `.`, starting and ending with a letter or digit"
        ))
    }
}

fn is_label_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// Why rollboot cannot evaluate a budget's selector, if it cannot: an operator other than
/// In, NotIn, Exists and DoesNotExist, In or NotIn without values, Exists or DoesNotExist with
/// some. kube-apiserver refuses such a selector when the budget is written; one can still be
/// met (stored before that validation, or served by a server that does not validate). It
/// names the requirement.
pub fn selector_problem(sel: &LabelSelector) -> Option<String> {
    sel.match_expressions.iter().flatten().find_map(|e| {
        let values = e.values.as_deref().unwrap_or(&[]);
        let why = match e.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => "has no values",
            "Exists" | "DoesNotExist" if !values.is_empty() => "has values",
            "In" | "NotIn" | "Exists" | "DoesNotExist" => return None,
            _ => "is not In, NotIn, Exists or DoesNotExist",
        };
        Some(format!(
            "matchExpressions requirement on key `{}` with operator `{}` {why}",
            e.key, e.operator
        ))
    })
}

/// Whether a budget with this selector may select a pod with these labels: it does, or its
/// selector cannot be evaluated (see [`selector_problem`]) and it is taken to, the safe side
/// for every use rollboot makes of it (naming the budgets that may refuse an eviction,
/// waiting for the budgets of the evicted pods to be healthy again).
pub fn budget_may_select(sel: Option<&LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
    sel.is_some_and(|s| selector_problem(s).is_some()) || selector_matches(sel, labels)
}

/// True when the budget's selector matches the labels (a budget with no selector matches none).
pub fn selector_matches(sel: Option<&LabelSelector>, labels: &BTreeMap<String, String>) -> bool {
    let Some(sel) = sel else { return false };
    let ml = sel.match_labels.as_ref();
    let me = sel.match_expressions.as_ref();
    if ml.is_none_or(|m| m.is_empty()) && me.is_none_or(|m| m.is_empty()) {
        return true;
    }
    ml.is_none_or(|m| m.iter().all(|(k, v)| labels.get(k) == Some(v)))
        && me.is_none_or(|es| {
            es.iter().all(|e| {
                let vals = e.values.as_deref().unwrap_or(&[]);
                match e.operator.as_str() {
                    "In" => labels.get(&e.key).is_some_and(|v| vals.contains(v)),
                    "NotIn" => labels.get(&e.key).is_none_or(|v| !vals.contains(v)),
                    "Exists" => labels.contains_key(&e.key),
                    "DoesNotExist" => !labels.contains_key(&e.key),
                    _ => false,
                }
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn empty_selector_matches_everything() {
        let s = Selector::parse("").unwrap();
        assert!(s.is_empty());
        assert!(s.matches(&labels(&[])));
    }

    #[test]
    fn all_operators_parse_and_match_as_kubernetes_does() {
        let s = Selector::parse("app=web,tier!=db,zone in (a, b),env notin (prod),gpu,!legacy")
            .unwrap();
        assert_eq!(s.requirements().len(), 6);
        let ok = labels(&[("app", "web"), ("zone", "b"), ("gpu", "")]);
        assert!(s.matches(&ok));
        let mut bad = ok.clone();
        bad.insert("legacy".into(), "1".into());
        assert!(!s.matches(&bad));
        let mut bad = ok.clone();
        bad.insert("zone".into(), "c".into());
        assert!(!s.matches(&bad));
        let mut bad = ok.clone();
        bad.insert("env".into(), "prod".into());
        assert!(!s.matches(&bad));
        let mut bad = ok;
        bad.insert("tier".into(), "db".into());
        assert!(!s.matches(&bad));
    }

    #[test]
    fn prefixed_keys_are_allowed() {
        let s = Selector::parse("node-role.kubernetes.io/worker").unwrap();
        assert!(s.matches(&labels(&[("node-role.kubernetes.io/worker", "")])));
        assert!(!s.matches(&labels(&[("node-role.kubernetes.io/control-plane", "")])));
    }

    #[test]
    fn malformed_selectors_are_rejected_with_the_clause() {
        for (bad, needle) in [
            ("app in (a,b", "unclosed"),
            ("app=web,,x=y", "empty clause"),
            ("app in ()", "at least one value"),
            ("app=we b", "value `we b`"),
            ("-bad=x", "key `-bad`"),
            ("app foo (a)", "expected"),
        ] {
            let e = Selector::parse(bad).unwrap_err();
            assert!(e.to_string().contains(needle), "{bad}: {e}");
        }
    }

    #[test]
    fn display_round_trips() {
        let text = "app=web,zone in (a,b),!legacy";
        let s = Selector::parse(text).unwrap();
        assert_eq!(Selector::parse(&s.to_string()).unwrap(), s);
    }
}
