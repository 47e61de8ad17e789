//! Alertmanager: a silence for each node while it is in maintenance (`silences.alertmanager`),
//! and the alerts that block new starts (`blockers.alertmanager`).
//!
//! Owns, purely here: the matchers as written (`name="value"`, `!=`, `=~`, `!~`, the value
//! quoted or not) with `{{node}}` put in (regex-quoted in a regex matcher), the silence a node
//! gets (its matchers, from now until the longest its cycle can take plus `extra`), and which
//! alerts block. The requests are [`client`]'s. It must never hold a reboot: a silence that
//! cannot be made or expired is a warning and a count, never a failure (the controller's
//! callers see to it); an Alertmanager that cannot be asked for alerts blocks, to be safe, as
//! the Prometheus blocker does.

pub mod client;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One label matcher of Alertmanager's API v2.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Matcher {
    /// The label.
    pub name: String,
    /// The value, or regex.
    pub value: String,
    /// `=~` / `!~`.
    pub is_regex: bool,
    /// `=` / `=~` (not `!=` / `!~`).
    pub is_equal: bool,
}

impl Matcher {
    /// Parses `name="value"` (`=`, `!=`, `=~`, `!~`; double quotes optional).
    pub fn parse(text: &str) -> Result<Matcher, String> {
        let t = text.trim();
        let i = t
            .find(['=', '!'])
            .ok_or_else(|| format!("`{text}` is not a matcher (name=\"value\", !=, =~, !~)"))?;
        let name = t[..i].trim();
        let rest = &t[i..];
        let (op, value) = ["=~", "!~", "!=", "="]
            .iter()
            .find_map(|op| rest.strip_prefix(op).map(|v| (*op, v)))
            .ok_or_else(|| format!("`{text}` is not a matcher (name=\"value\", !=, =~, !~)"))?;
        let valid_name = !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit());
        if !valid_name {
            return Err(format!("`{text}`: `{name}` is not a label name"));
        }
        let value = value.trim();
        let value = match value.strip_prefix('"') {
            Some(v) => v
                .strip_suffix('"')
                .ok_or_else(|| format!("`{text}`: unclosed quote"))?
                .replace("\\\"", "\""),
            None => value.to_string(),
        };
        Ok(Matcher {
            name: name.into(),
            value,
            is_regex: op.ends_with('~'),
            is_equal: !op.starts_with('!'),
        })
    }

    /// The matcher for node `node`: `{{node}}` replaced by the name (regex-quoted in a regex).
    pub fn for_node(&self, node: &str) -> Matcher {
        let name = if self.is_regex {
            regex::escape(node)
        } else {
            node.to_string()
        };
        Matcher {
            value: self.value.replace("{{node}}", &name),
            ..self.clone()
        }
    }

    /// As Alertmanager's `filter` parameter writes it.
    pub fn filter_text(&self) -> String {
        let op = match (self.is_equal, self.is_regex) {
            (true, false) => "=",
            (false, false) => "!=",
            (true, true) => "=~",
            (false, true) => "!~",
        };
        format!("{}{op}\"{}\"", self.name, self.value.replace('"', "\\\""))
    }
}

/// A silence to create: `POST /api/v2/silences`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Silence {
    /// Its matchers.
    pub matchers: Vec<Matcher>,
    /// From.
    pub starts_at: DateTime<Utc>,
    /// Until (expired earlier by rollboot once the node's cycle ends).
    pub ends_at: DateTime<Utc>,
    /// `rollboot`.
    pub created_by: String,
    /// Which node and why.
    pub comment: String,
}

/// The silence of node `node`'s cycle, from `now` to `now + longest` (the longest the cycle can
/// take: drain, reboot and health gate timeouts, plus `extra`): if rollboot could not expire it
/// (its Alertmanager unreachable at the cycle's end), it ends on its own.
pub fn silence_for(
    node: &str,
    matchers: &[Matcher],
    now: DateTime<Utc>,
    longest: chrono::Duration,
) -> Silence {
    Silence {
        matchers: matchers.iter().map(|m| m.for_node(node)).collect(),
        starts_at: now,
        ends_at: now + longest,
        created_by: "rollboot".into(),
        comment: format!(
            "rollboot: node {node} is in maintenance (cordon, drain, reboot); expired when its cycle ends"
        ),
    }
}

/// One alert of `GET /api/v2/alerts`, the parts rollboot reads.
#[derive(Clone, Debug, Deserialize)]
pub struct Alert {
    /// Its labels; `alertname` names it.
    #[serde(default)]
    pub labels: std::collections::BTreeMap<String, String>,
}

/// The names of `alerts`, sorted and deduplicated (the query asked Alertmanager for the active,
/// unsilenced, uninhibited ones only).
pub fn alert_names(alerts: &[Alert]) -> Vec<String> {
    let mut names: Vec<String> = alerts
        .iter()
        .map(|a| {
            a.labels
                .get("alertname")
                .cloned()
                .unwrap_or_else(|| "(unnamed)".into())
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matchers_parse_with_or_without_quotes_and_take_the_node() {
        let m = Matcher::parse(r#"instance=~"{{node}}:.*""#).unwrap();
        assert!(m.is_regex && m.is_equal);
        assert_eq!(m.for_node("n-1.example").value, r"n\-1\.example:.*");
        let m = Matcher::parse("node={{node}}").unwrap();
        assert_eq!(m.for_node("n-1").value, "n-1");
        assert_eq!(m.filter_text(), r#"node="{{node}}""#);
        let m = Matcher::parse(r#"severity!="info""#).unwrap();
        assert!(!m.is_equal && !m.is_regex);
        assert_eq!(m.filter_text(), r#"severity!="info""#);
        assert!(Matcher::parse("no operator").is_err());
        assert!(Matcher::parse(r#"1a="x""#).is_err());
        assert!(Matcher::parse(r#"a="x"#).is_err());
    }

    #[test]
    fn a_node_s_silence_ends_on_its_own_after_the_longest_cycle() {
        let now = DateTime::parse_from_rfc3339("2026-11-26T02:00:00Z")
            .unwrap()
            .to_utc();
        let s = silence_for(
            "n-1",
            &[Matcher::parse("node={{node}}").unwrap()],
            now,
            chrono::Duration::minutes(40),
        );
        assert_eq!(s.matchers[0].value, "n-1");
        assert_eq!((s.ends_at - s.starts_at).num_minutes(), 40);
        let body = serde_json::to_value(&s).unwrap();
        assert_eq!(body["createdBy"], "rollboot");
        assert_eq!(body["matchers"][0]["isEqual"], true);
    }
}
