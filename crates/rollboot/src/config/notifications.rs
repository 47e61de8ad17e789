//! The `notifications` section: where rollboot tells people what it does, and in what words.
//!
//! Owns the schema of the sinks (generic JSON webhook, Slack and Microsoft Teams incoming
//! webhooks), the secret references their URLs and tokens are read from, the per-event
//! message templates and their placeholders, and the validation of all of it. It must never
//! hold a URL or a token itself: a webhook URL carries its credential, and the config is a
//! ConfigMap, readable by far more people than a Secret; so a sink names an environment
//! variable or a file (both filled from a Secret) and the URL is read only when a message is
//! sent.

use std::collections::BTreeMap;
use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Duration;
use super::ProblemSink;

/// Notifications about the rollout, sent off the controller's step path (never holding a
/// reboot). Default: no sink, nothing is sent.
#[derive(Debug, Deserialize, Serialize, Clone, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Notifications {
    /// Where notifications go. Default: none.
    pub sinks: Vec<Sink>,
    /// Per event, the message text (placeholders in braces); an event not listed uses the
    /// built-in text.
    pub templates: Templates,
    /// Work waiting this long while something other than a closed window keeps it from
    /// starting is reported once (`blocked`). Default 1h.
    pub blocked_after: Duration,
    /// Longest one send may take before it counts as failed. Default 10s.
    pub timeout: Duration,
    /// Messages waiting per sink at most; more are dropped (logged and counted). Default 100.
    pub queue_size: u32,
    /// A name for this cluster, the `{cluster}` placeholder. Default empty.
    pub cluster: String,
}

impl Default for Notifications {
    fn default() -> Self {
        Notifications {
            sinks: Vec::new(),
            templates: Templates::default(),
            blocked_after: Duration::from_mins(60),
            timeout: Duration::from_secs(10),
            queue_size: 100,
            cluster: String::new(),
        }
    }
}

/// One destination of notifications.
#[derive(Debug, Deserialize, Serialize, Clone, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Sink {
    /// A name for logs and the `sink` label of the metrics (unique).
    pub name: String,
    /// The kind of endpoint, which decides the body's shape.
    #[serde(rename = "type")]
    pub kind: SinkKind,
    /// Where the webhook URL is read from when a message is sent.
    pub url_from: SecretRef,
    /// Where a bearer token is read from, sent as `Authorization: Bearer ...`. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_from: Option<SecretRef>,
    /// The events sent to this sink. Default: all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<NotifyEvent>>,
    /// Present only to refuse a URL written into the config with a message saying why.
    #[serde(default, skip_serializing)]
    #[schemars(skip)]
    pub url: Option<yaml_serde::Value>,
    /// Present only to refuse a token written into the config with a message saying why.
    #[serde(default, skip_serializing)]
    #[schemars(skip)]
    pub token: Option<yaml_serde::Value>,
}

impl Sink {
    /// Whether this sink takes `event`.
    pub fn wants(&self, event: NotifyEvent) -> bool {
        self.events.as_ref().is_none_or(|e| e.contains(&event))
    }
}

/// The kind of endpoint.
#[derive(Debug, Deserialize, Serialize, Clone, Copy, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum SinkKind {
    /// Any HTTP endpoint: a JSON body with the event, its fields and the text.
    Webhook,
    /// A Slack incoming webhook: `{"text": ...}`.
    Slack,
    /// A Microsoft Teams incoming webhook (Workflows): a message with one Adaptive Card.
    Teams,
}

impl SinkKind {
    /// As written in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            SinkKind::Webhook => "webhook",
            SinkKind::Slack => "slack",
            SinkKind::Teams => "teams",
        }
    }
}

/// Where a secret value is read from: exactly one of an environment variable of the controller
/// (set from a Secret with `env[].valueFrom.secretKeyRef`) or a file (a mounted Secret).
#[derive(Debug, Deserialize, Serialize, Clone, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(extend("minProperties" = 1, "maxProperties" = 1))]
pub struct SecretRef {
    /// An environment variable's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<String>,
    /// A file's path; its content, trimmed of surrounding whitespace, is the value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
}

impl fmt::Display for SecretRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.env, &self.file) {
            (Some(e), _) => write!(f, "environment variable {e}"),
            (None, Some(p)) => write!(f, "file {p}"),
            (None, None) => f.write_str("nothing"),
        }
    }
}

/// What a notification is about.
#[derive(
    Debug, Deserialize, Serialize, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub enum NotifyEvent {
    /// The first node of a rollout started.
    RolloutStarted,
    /// A node finished its cycle.
    NodeDone,
    /// A node failed.
    NodeFailed,
    /// A node's Node was deleted in the middle of its cycle (by the autoscaler, Karpenter, an
    /// operator): its slot is freed at once.
    NodeGone,
    /// A failure took the failed nodes past `failures.maxFailures`: nothing new starts.
    RolloutHalted,
    /// Work has waited `blockedAfter` while something other than a closed window blocks it.
    Blocked,
    /// A maintenance window opened with nodes waiting.
    WindowOpened,
}

impl NotifyEvent {
    /// Every event, in the order documented.
    pub const ALL: [NotifyEvent; 7] = [
        NotifyEvent::RolloutStarted,
        NotifyEvent::NodeDone,
        NotifyEvent::NodeFailed,
        NotifyEvent::NodeGone,
        NotifyEvent::RolloutHalted,
        NotifyEvent::Blocked,
        NotifyEvent::WindowOpened,
    ];

    /// The name used in the config, the bodies and the metrics' `event` label.
    pub fn as_str(self) -> &'static str {
        match self {
            NotifyEvent::RolloutStarted => "rolloutStarted",
            NotifyEvent::NodeDone => "nodeDone",
            NotifyEvent::NodeFailed => "nodeFailed",
            NotifyEvent::NodeGone => "nodeGone",
            NotifyEvent::RolloutHalted => "rolloutHalted",
            NotifyEvent::Blocked => "blocked",
            NotifyEvent::WindowOpened => "windowOpened",
        }
    }

    /// The placeholders a template for this event may use, besides [`COMMON_PLACEHOLDERS`].
    pub fn placeholders(self) -> &'static [&'static str] {
        match self {
            NotifyEvent::RolloutStarted => &["node", "pending"],
            NotifyEvent::NodeDone => &["node", "duration"],
            NotifyEvent::NodeFailed => &["node", "reason"],
            NotifyEvent::NodeGone => &["node", "reason"],
            NotifyEvent::RolloutHalted => &["node", "reason", "failed", "maxFailures"],
            NotifyEvent::Blocked => &["blockers", "blockedFor", "pending"],
            NotifyEvent::WindowOpened => &["pending", "windowEnd"],
        }
    }

    /// The built-in text.
    pub fn default_template(self) -> &'static str {
        match self {
            NotifyEvent::RolloutStarted => {
                "rollboot{cluster}: rollout started with node {node} ({pending} node(s) waiting)"
            }
            NotifyEvent::NodeDone => "rollboot{cluster}: node {node} rebooted and healthy again (cycle {duration})",
            NotifyEvent::NodeFailed => "rollboot{cluster}: node {node} failed: {reason}",
            NotifyEvent::NodeGone => {
                "rollboot{cluster}: node {node} was deleted in the middle of its reboot cycle ({reason}); its slot is freed"
            }
            NotifyEvent::RolloutHalted => {
                "rollboot{cluster}: rollout halted after node {node} failed ({failed} failed, at most {maxFailures} tolerated); clear a failed node with `rollboot retry NODE`"
            }
            NotifyEvent::Blocked => {
                "rollboot{cluster}: {pending} node(s) waiting, blocked for {blockedFor}: {blockers}"
            }
            NotifyEvent::WindowOpened => {
                "rollboot{cluster}: maintenance window open until {windowEnd} with {pending} node(s) waiting"
            }
        }
    }
}

/// Placeholders every event's template may use: `{event}`, `{cluster}` (` (NAME)` when
/// `notifications.cluster` is set, else empty) and `{time}` (RFC 3339, UTC).
pub const COMMON_PLACEHOLDERS: [&str; 3] = ["event", "cluster", "time"];

/// Message templates, one optional text per event. Every template may also use `{event}`,
/// `{cluster}` and `{time}`; `{{` and `}}` are literal braces.
#[derive(Debug, Deserialize, Serialize, Clone, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Templates {
    /// `rolloutStarted`'s text, with `{node}` and `{pending}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout_started: Option<String>,
    /// `nodeDone`'s text, with `{node}` and `{duration}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_done: Option<String>,
    /// `nodeFailed`'s text, with `{node}` and `{reason}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_failed: Option<String>,
    /// `nodeGone`'s text, with `{node}` and `{reason}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_gone: Option<String>,
    /// `rolloutHalted`'s text, with `{node}`, `{reason}`, `{failed}` and `{maxFailures}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rollout_halted: Option<String>,
    /// `blocked`'s text, with `{blockers}`, `{blockedFor}` and `{pending}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocked: Option<String>,
    /// `windowOpened`'s text, with `{pending}` and `{windowEnd}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_opened: Option<String>,
}

impl Templates {
    /// The configured text for `event`, if any.
    pub fn get(&self, event: NotifyEvent) -> Option<&str> {
        match event {
            NotifyEvent::RolloutStarted => self.rollout_started.as_deref(),
            NotifyEvent::NodeDone => self.node_done.as_deref(),
            NotifyEvent::NodeFailed => self.node_failed.as_deref(),
            NotifyEvent::NodeGone => self.node_gone.as_deref(),
            NotifyEvent::RolloutHalted => self.rollout_halted.as_deref(),
            NotifyEvent::Blocked => self.blocked.as_deref(),
            NotifyEvent::WindowOpened => self.window_opened.as_deref(),
        }
    }

    /// The text used for `event`: the configured one or the built-in one.
    pub fn text(&self, event: NotifyEvent) -> &str {
        self.get(event).unwrap_or(event.default_template())
    }
}

/// One piece of a template: literal text or a placeholder's name.
#[derive(Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Text as written (`{{` and `}}` already unescaped).
    Text(String),
    /// `{name}`.
    Var(&'a str),
}

/// Splits a template into text and placeholders; `{{` and `}}` are literal braces. An error
/// says what is wrong and where (byte offset).
pub fn parse_template(t: &str) -> Result<Vec<Piece<'_>>, String> {
    let mut out = Vec::new();
    let mut text = String::new();
    let mut rest = t;
    let mut at = 0;
    while let Some(c) = rest.chars().next() {
        match c {
            '{' if rest.starts_with("{{") => {
                text.push('{');
                rest = &rest[2..];
                at += 2;
            }
            '}' if rest.starts_with("}}") => {
                text.push('}');
                rest = &rest[2..];
                at += 2;
            }
            '{' => {
                let Some(end) = rest.find('}') else {
                    return Err(format!(
                        "unclosed `{{` at offset {at} (write `{{{{` for a literal brace)"
                    ));
                };
                let name = &rest[1..end];
                if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                    return Err(format!(
                        "`{{{name}}}` at offset {at} is not a placeholder name (write `{{{{` for a literal brace)"
                    ));
                }
                if !text.is_empty() {
                    out.push(Piece::Text(std::mem::take(&mut text)));
                }
                out.push(Piece::Var(name));
                at += end + 1;
                rest = &rest[end + 1..];
            }
            '}' => {
                return Err(format!(
                    "lone `}}` at offset {at} (write `}}}}` for a literal brace)"
                ))
            }
            c => {
                text.push(c);
                rest = &rest[c.len_utf8()..];
                at += c.len_utf8();
            }
        }
    }
    if !text.is_empty() {
        out.push(Piece::Text(text));
    }
    Ok(out)
}

/// Checks the section; `report` gets each problem with its key path.
pub(super) fn validate(n: &Notifications, report: &mut ProblemSink) {
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, s) in n.sinks.iter().enumerate() {
        sink(i, s, &mut names, report);
    }
    for event in NotifyEvent::ALL {
        if let Some(t) = n.templates.get(event) {
            template(event, t, report);
        }
    }
    if !n.blocked_after.is_positive() {
        report(
            "notifications.blockedAfter".into(),
            format!("must be a positive duration, got `{}`", n.blocked_after),
        );
    }
    if !n.timeout.is_positive() {
        report(
            "notifications.timeout".into(),
            format!("must be a positive duration, got `{}`", n.timeout),
        );
    }
    if n.queue_size == 0 {
        report(
            "notifications.queueSize".into(),
            "must be at least 1".into(),
        );
    }
}

/// `sinks[i]`: a unique name (`names`: those so far) usable as a metrics label, its URL and
/// token named, never written, and an event list that is not empty.
fn sink<'a>(i: usize, s: &'a Sink, names: &mut BTreeMap<&'a str, usize>, report: &mut ProblemSink) {
    let at = |k: &str| format!("notifications.sinks[{i}].{k}");
    if s.name.is_empty()
        || !s
            .name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        report(
            at("name"),
            format!(
                "`{}` is not a sink name: letters, digits, `-` and `_`, not empty (it is a metrics label)",
                s.name
            ),
        );
    }
    if let Some(first) = names.insert(&s.name, i) {
        report(
            at("name"),
            format!(
                "`{}` is already the name of notifications.sinks[{first}]: names must be unique",
                s.name
            ),
        );
    }
    if s.url.is_some() {
        report(
            at("url"),
            "a webhook URL is a credential and must not be written in the config (a ConfigMap): \
             put it in a Secret and name it with `urlFrom: {env: VAR}` or `urlFrom: {file: PATH}`"
                .into(),
        );
    }
    if s.token.is_some() {
        report(
            at("token"),
            "a token must not be written in the config (a ConfigMap): put it in a Secret and \
             name it with `tokenFrom: {env: VAR}` or `tokenFrom: {file: PATH}`"
                .into(),
        );
    }
    secret_ref(&at("urlFrom"), &s.url_from, report);
    if let Some(t) = &s.token_from {
        secret_ref(&at("tokenFrom"), t, report);
        if s.kind != SinkKind::Webhook {
            report(
                at("tokenFrom"),
                format!(
                    "only a `webhook` sink sends a token; a {} incoming webhook authenticates by its URL alone",
                    s.kind.as_str()
                ),
            );
        }
    }
    if let Some(e) = &s.events {
        if e.is_empty() {
            report(
                at("events"),
                "is an empty list, so this sink would never be sent anything: list events, or remove the key for all".into(),
            );
        }
    }
}

/// `templates.<event>`: some text, well-formed braces, and only the event's placeholders.
fn template(event: NotifyEvent, t: &str, report: &mut ProblemSink) {
    let path = format!("notifications.templates.{}", event.as_str());
    if t.trim().is_empty() {
        report(path.clone(), "is empty: a message needs some text".into());
    }
    let pieces = match parse_template(t) {
        Err(e) => return report(path, e),
        Ok(pieces) => pieces,
    };
    for p in pieces {
        let Piece::Var(v) = p else {
            continue;
        };
        if !COMMON_PLACEHOLDERS.contains(&v) && !event.placeholders().contains(&v) {
            let mut known: Vec<&str> = event.placeholders().to_vec();
            known.extend(COMMON_PLACEHOLDERS);
            report(
                path.clone(),
                format!(
                    "unknown placeholder `{{{v}}}` for {}: known are {}",
                    event.as_str(),
                    known
                        .iter()
                        .map(|k| format!("{{{k}}}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
        }
    }
}

/// A [`SecretRef`] at `path`: exactly one of a valid environment variable name and a path.
pub(crate) fn check_secret_ref(path: &str, r: &SecretRef, report: &mut ProblemSink) {
    secret_ref(path, r, report)
}

fn secret_ref(path: &str, r: &SecretRef, report: &mut ProblemSink) {
    match (&r.env, &r.file) {
        (Some(_), Some(_)) => report(
            path.into(),
            "give one of `env` and `file`, not both".into(),
        ),
        (None, None) => report(
            path.into(),
            "give `env` (an environment variable of the controller, set from a Secret) or `file` (the path of a mounted Secret key)".into(),
        ),
        (Some(e), None) => {
            let ok = !e.is_empty()
                && !e.starts_with(|c: char| c.is_ascii_digit())
                && e.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ok {
                report(
                    format!("{path}.env"),
                    format!("`{e}` is not an environment variable name (letters, digits and `_`, not starting with a digit)"),
                );
            }
        }
        (None, Some(f)) => {
            if !f.starts_with('/') {
                report(
                    format!("{path}.file"),
                    format!("`{f}` must be an absolute path (where the Secret is mounted)"),
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_split_into_text_and_placeholders_with_escaped_braces() {
        assert_eq!(
            parse_template("a {node} {{x}} b").unwrap(),
            vec![
                Piece::Text("a ".into()),
                Piece::Var("node"),
                Piece::Text(" {x} b".into())
            ]
        );
        assert!(parse_template("a {node").unwrap_err().contains("unclosed"));
        assert!(parse_template("a } b").unwrap_err().contains("lone"));
        assert!(parse_template("{no de}")
            .unwrap_err()
            .contains("not a placeholder"));
    }

    #[test]
    fn every_built_in_template_uses_only_its_events_placeholders() {
        for e in NotifyEvent::ALL {
            for p in parse_template(e.default_template()).unwrap() {
                if let Piece::Var(v) = p {
                    assert!(
                        COMMON_PLACEHOLDERS.contains(&v) || e.placeholders().contains(&v),
                        "{} uses {v}",
                        e.as_str()
                    );
                }
            }
        }
    }
}
