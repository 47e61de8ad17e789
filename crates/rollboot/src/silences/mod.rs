//! Alertmanager: a silence for each node while it is in maintenance (`silences.alertmanager`),
//! and the alerts that block new starts (`blockers.alertmanager`).
//!
//! Owns, purely here: the matchers as written (`name="value"`, `!=`, `=~`, `!~`, the value
//! quoted or not) with `{{node}}` put in (regex-quoted in a regex matcher), the silence a node
//! gets (its matchers, from now until the longest its cycle can take plus `extra`), which
//! alerts block, what a silence ID is ([`SilenceId`]: a UUID, as Alertmanager makes them; a
//! Node's `rollboot.dev/silence-id` that is not one is [`Rejected`] and sent nowhere), and
//! which silence rollboot may expire ([`expiry`]: only one it made for that node). The
//! requests are [`client`]'s. It must never hold a reboot: a silence that cannot be made or
//! expired is a warning and a count, never a failure (the controller's callers see to it); an
//! Alertmanager that cannot be asked for alerts blocks, to be safe, as the Prometheus blocker
//! does.

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
        created_by: CREATED_BY.into(),
        comment: format!(
            "{} is in maintenance (cordon, drain, reboot); expired when its cycle ends",
            comment_head(node)
        ),
    }
}

/// The `createdBy` of rollboot's silences.
const CREATED_BY: &str = "rollboot";

/// How the comment of node `node`'s silence begins (the space ends the name: `n-1` is not
/// `n-10`).
fn comment_head(node: &str) -> String {
    format!("rollboot: node {node} ")
}

/// The ID of an Alertmanager silence: a UUID (`8-4-4-4-12` hex digits), the only IDs
/// Alertmanager makes and the only ones its API takes. Anything else never goes into a URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SilenceId(String);

impl SilenceId {
    /// `text` as a silence ID, exactly as written; `Err` says why it is not one.
    pub fn parse(text: &str) -> Result<SilenceId, String> {
        let b = text.as_bytes();
        let dash = |i: usize| matches!(i, 8 | 13 | 18 | 23);
        let uuid = b.len() == 36
            && b.iter().enumerate().all(|(i, c)| {
                if dash(i) {
                    *c == b'-'
                } else {
                    c.is_ascii_hexdigit()
                }
            });
        if uuid {
            Ok(SilenceId(text.to_string()))
        } else {
            Err("not an Alertmanager silence ID (a UUID, 8-4-4-4-12 hex digits)".into())
        }
    }

    /// The ID.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for SilenceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A recorded silence ID that is not one: the value (cut to [`SHOWN`] characters, for logs
/// and Events) and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejected {
    /// The value as recorded, cut.
    pub value: String,
    /// Why it is no silence ID.
    pub why: String,
}

/// Most characters of a rejected value that a log line or Event shows.
pub const SHOWN: usize = 80;

/// The silence a Node records (its `rollboot.dev/silence-id`, `value`): none, a silence ID, or
/// a value that is no silence ID, which is treated as no silence recorded (never sent to
/// Alertmanager, never expired) and said by the caller.
pub fn recorded(value: Option<&str>) -> Result<Option<SilenceId>, Rejected> {
    let Some(v) = value else {
        return Ok(None);
    };
    SilenceId::parse(v).map(Some).map_err(|why| Rejected {
        value: shown(v),
        why,
    })
}

/// A value from outside as a log line or Event shows it: cut to [`SHOWN`] characters.
pub fn shown(value: &str) -> String {
    cut(value, SHOWN)
}

/// `s` cut to `max` characters, with `…` when it was longer.
fn cut(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// A silence as `GET /api/v2/silence/{id}` answers it, the parts rollboot reads.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Existing {
    /// Who made it.
    #[serde(default)]
    pub created_by: String,
    /// Its comment.
    #[serde(default)]
    pub comment: String,
    /// `{state: active | pending | expired}`.
    #[serde(default)]
    pub status: Option<ExistingStatus>,
}

/// [`Existing`]'s `status`.
#[derive(Clone, Debug, Deserialize)]
pub struct ExistingStatus {
    /// `active`, `pending` or `expired`.
    #[serde(default)]
    pub state: String,
}

/// What to do with the silence a Node records, once Alertmanager said what it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// rollboot's silence of this node, still active or pending: expire it.
    Expire,
    /// Gone (Alertmanager does not know it) or already expired: nothing to do.
    Over,
    /// Not one rollboot made for this node: left alone, and why.
    NotOurs(String),
}

/// Whether node `node`'s recorded silence, as Alertmanager answered it (`None`: unknown to
/// it), may be expired: only a silence rollboot made for this node (its `createdBy` and the
/// comment [`silence_for`] writes). An ID written on the Node by someone else never makes
/// rollboot expire another's silence with its own token.
pub fn expiry(existing: Option<&Existing>, node: &str) -> Expiry {
    let Some(s) = existing else {
        return Expiry::Over;
    };
    if s.created_by != CREATED_BY || !s.comment.starts_with(&comment_head(node)) {
        return Expiry::NotOurs(format!(
            "made by `{}` with comment `{}`, not by rollboot for node {node}",
            cut(&s.created_by, SHOWN),
            cut(&s.comment, SHOWN)
        ));
    }
    match s.status.as_ref().map(|st| st.state.as_str()) {
        Some("expired") => Expiry::Over,
        _ => Expiry::Expire,
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

    const UUID: &str = "0b7c6f1e-aaaa-4bbb-8ccc-000000000001";

    #[test]
    fn only_a_uuid_is_a_silence_id() {
        assert_eq!(SilenceId::parse(UUID).unwrap().as_str(), UUID);
        assert!(SilenceId::parse(&UUID.to_uppercase()).is_ok());
        for bad in [
            "../../../admin?x=1",
            "",
            "silence-1",
            "0b7c6f1e-aaaa-4bbb-8ccc-00000000000",
            "0b7c6f1e-aaaa-4bbb-8ccc-0000000000012",
            "0b7c6f1eaaaaa4bbb-8ccc-000000000001",
            "0b7c6f1e-aaaa-4bbb-8ccc-00000000000g",
            "0b7c6f1e-aaaa-4bbb-8ccc-00000000/001",
            " 0b7c6f1e-aaaa-4bbb-8ccc-000000000001",
            "0b7c6f1e-aaaa-4bbb-8ccc-0000000000é",
        ] {
            assert!(SilenceId::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_recorded_value_that_is_no_uuid_is_rejected_and_cut_for_the_log() {
        assert_eq!(recorded(None), Ok(None));
        assert_eq!(recorded(Some(UUID)).unwrap().unwrap().as_str(), UUID);
        let r = recorded(Some("../../../admin?x=1")).unwrap_err();
        assert_eq!(r.value, "../../../admin?x=1");
        assert!(r.why.contains("UUID"), "{r:?}");
        let long = "é".repeat(500);
        let r = recorded(Some(&long)).unwrap_err();
        assert_eq!(r.value.chars().count(), SHOWN + 1, "{r:?}");
        assert!(r.value.ends_with('…'));
    }

    fn existing(by: &str, node: &str, state: &str) -> Existing {
        let s = silence_for(
            node,
            &[],
            DateTime::<Utc>::UNIX_EPOCH,
            chrono::Duration::zero(),
        );
        serde_json::from_value(serde_json::json!({
            "id": UUID, "createdBy": by, "comment": s.comment, "status": {"state": state},
            "matchers": [], "startsAt": "2026-01-01T00:00:00Z", "endsAt": "2026-01-01T01:00:00Z",
        }))
        .unwrap()
    }

    #[test]
    fn only_rollboot_s_own_silence_of_the_node_is_expired() {
        assert_eq!(
            expiry(Some(&existing("rollboot", "n-1", "active")), "n-1"),
            Expiry::Expire
        );
        assert_eq!(
            expiry(Some(&existing("rollboot", "n-1", "pending")), "n-1"),
            Expiry::Expire
        );
        assert_eq!(
            expiry(Some(&existing("rollboot", "n-1", "expired")), "n-1"),
            Expiry::Over
        );
        assert_eq!(expiry(None, "n-1"), Expiry::Over);
        // Another node's (`n-1` is not `n-10`), an operator's.
        assert!(matches!(
            expiry(Some(&existing("rollboot", "n-10", "active")), "n-1"),
            Expiry::NotOurs(_)
        ));
        assert!(matches!(
            expiry(Some(&existing("rollboot", "n-1", "active")), "n-10"),
            Expiry::NotOurs(_)
        ));
        let Expiry::NotOurs(why) = expiry(Some(&existing("alice", "n-1", "active")), "n-1") else {
            panic!("an operator's silence taken for rollboot's");
        };
        assert!(why.contains("`alice`") && why.contains("n-1"), "{why}");
    }
}
