//! Which notifications are due, and what each says: pure.
//!
//! Owns the [`Tracker`] that turns what the leader sees (each pass: the window, the waiting and
//! in-flight nodes, the blockers; each node started or ended) into [`Notice`]s, the rendering of
//! a template with a notice's fields, and the body each kind of sink is sent. It must never do
//! I/O or read a clock: the runtime gives it the instant, and sends what it returns.
//!
//! What it remembers (whether a rollout is under way, since when work is blocked, whether the
//! window was closed) lives in the leader's memory only: a new leader starts from what it sees,
//! so it never repeats a `blocked` or `windowOpened` notice for a state it found, and takes a
//! rollout with a node in flight as already announced (one that takes over between two nodes,
//! nothing in flight, announces the next start again).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::config::notifications::NotifyEvent;
use crate::config::notifications::{parse_template, Piece, SinkKind, Templates};
use crate::config::Notifications;

/// One thing to tell, with the fields its template and body use (keys are the placeholders).
#[derive(Clone, Debug, PartialEq)]
pub struct Notice {
    /// What happened.
    pub event: NotifyEvent,
    /// When the controller saw it.
    pub at: DateTime<Utc>,
    /// The event's fields: `node`, `reason`, `pending`, ... (see [`NotifyEvent::placeholders`]).
    pub fields: BTreeMap<&'static str, Value>,
}

impl Notice {
    fn new(event: NotifyEvent, at: DateTime<Utc>) -> Notice {
        Notice {
            event,
            at,
            fields: BTreeMap::new(),
        }
    }

    fn with(mut self, key: &'static str, v: impl Into<Value>) -> Notice {
        self.fields.insert(key, v.into());
        self
    }
}

/// What one pass of the leader saw.
#[derive(Clone, Debug)]
pub struct Pass<'a> {
    /// The instant of the pass.
    pub now: DateTime<Utc>,
    /// Whether the schedule allows new reboots now.
    pub window_open: bool,
    /// When the current opening ends, if open and known.
    pub window_end: Option<DateTime<Utc>>,
    /// Flagged nodes that could start (not in the lock).
    pub pending: usize,
    /// Nodes in the lock.
    pub in_flight: usize,
    /// The blockers of new reboots, as said in logs; `window_closed` says whether a closed
    /// window (or blackout) is among them.
    pub blockers: &'a [String],
    /// A closed window (or a blackout) is among the blockers.
    pub window_closed: bool,
    /// The rollout is halted (`failures.maxFailures`): a window opening starts nothing.
    pub halted: bool,
}

/// How a node's cycle ended.
#[derive(Clone, Debug, PartialEq)]
pub enum End {
    /// `done`, the whole cycle having taken this long (when known).
    Done {
        /// From the start (lock entry) to `done`.
        cycle: Option<chrono::Duration>,
    },
    /// `failed`.
    Failed {
        /// The failure reason written on the Node.
        reason: String,
        /// Failed nodes now, this one included.
        failed: usize,
        /// `failures.maxFailures`.
        max_failures: u32,
    },
}

/// The notification state of one leader.
#[derive(Clone, Debug, Default)]
pub struct Tracker {
    /// Whether a rollout is under way; `None` before the first pass.
    rollout: Option<bool>,
    /// The window as last seen; `None` before the first pass.
    window_open: Option<bool>,
    /// Since when waiting work has been blocked by something other than the window.
    blocked_since: Option<DateTime<Utc>>,
    /// Whether this blocked spell was told.
    blocked_told: bool,
    /// Waiting nodes as last seen.
    pending: usize,
}

impl Tracker {
    /// A pass: returns `blocked` once per blocked spell that lasts `blocked_after`, and
    /// `windowOpened` when a window is seen open after being seen closed, with work waiting
    /// and the rollout not halted (an opening that starts nothing is not news).
    pub fn pass(&mut self, p: &Pass<'_>, blocked_after: chrono::Duration) -> Vec<Notice> {
        let mut out = Vec::new();
        self.pending = p.pending;
        match self.rollout {
            None => self.rollout = Some(p.in_flight > 0),
            Some(_) if p.in_flight == 0 && p.pending == 0 => self.rollout = Some(false),
            Some(_) => {}
        }
        if self.window_open == Some(false) && p.window_open && p.pending > 0 && !p.halted {
            let mut n = Notice::new(NotifyEvent::WindowOpened, p.now).with("pending", p.pending);
            if let Some(end) = p.window_end {
                n = n.with("windowEnd", crate::time::annotation(end));
            } else {
                n = n.with("windowEnd", "(no end)");
            }
            out.push(n);
        }
        self.window_open = Some(p.window_open);
        let blocked = p.pending > 0 && !p.window_closed && !p.blockers.is_empty();
        if blocked {
            let since = *self.blocked_since.get_or_insert(p.now);
            if !self.blocked_told && p.now - since >= blocked_after {
                self.blocked_told = true;
                out.push(
                    Notice::new(NotifyEvent::Blocked, p.now)
                        .with("blockers", p.blockers.to_vec())
                        .with("blockedFor", human(p.now - since))
                        .with("pending", p.pending),
                );
            }
        } else {
            self.blocked_since = None;
            self.blocked_told = false;
        }
        out
    }

    /// A node's Node was deleted mid-cycle, for `reason`: `nodeGone`.
    pub fn gone(&mut self, node: &str, reason: &str, now: DateTime<Utc>) -> Vec<Notice> {
        vec![Notice::new(NotifyEvent::NodeGone, now)
            .with("node", node)
            .with("reason", reason)]
    }

    /// A node was started: `rolloutStarted` when no rollout was under way.
    pub fn started(&mut self, node: &str, now: DateTime<Utc>) -> Vec<Notice> {
        if self.rollout == Some(true) {
            return Vec::new();
        }
        self.rollout = Some(true);
        vec![Notice::new(NotifyEvent::RolloutStarted, now)
            .with("node", node)
            .with("pending", self.pending.max(1))]
    }

    /// A node's cycle ended: `nodeDone`, or `nodeFailed` (and `rolloutHalted` when its failure
    /// takes the failed nodes past `maxFailures`).
    pub fn ended(&mut self, node: &str, end: &End, now: DateTime<Utc>) -> Vec<Notice> {
        match end {
            End::Done { cycle } => vec![Notice::new(NotifyEvent::NodeDone, now)
                .with("node", node)
                .with(
                    "duration",
                    cycle.map(human).unwrap_or_else(|| "unknown".into()),
                )],
            End::Failed {
                reason,
                failed,
                max_failures,
            } => {
                let mut out = vec![Notice::new(NotifyEvent::NodeFailed, now)
                    .with("node", node)
                    .with("reason", reason.as_str())];
                if halts(*failed, *max_failures) {
                    out.push(
                        Notice::new(NotifyEvent::RolloutHalted, now)
                            .with("node", node)
                            .with("reason", reason.as_str())
                            .with("failed", *failed)
                            .with("maxFailures", *max_failures),
                    );
                }
                out
            }
        }
    }
}

/// Whether `failed` failed nodes halt the rollout under `failures.maxFailures` (the rule of
/// `decide::after_failure` and of the failures blocker).
pub fn halts(failed: usize, max_failures: u32) -> bool {
    failed > max_failures as usize
}

/// A duration for people: `1h2m`, `3m4s`, `5s`.
pub fn human(d: chrono::Duration) -> String {
    let s = d.num_seconds().max(0);
    match (s / 3600, s % 3600 / 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, m, _) => format!("{h}h{m}m"),
    }
}

/// A field as text in a message: strings as they are, lists joined with `; `.
fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(a) => a.iter().map(text_of).collect::<Vec<_>>().join("; "),
        Value::Null => String::new(),
        v => v.to_string(),
    }
}

/// The message for `n` with its event's template (configured or built in). `cluster` is
/// `notifications.cluster`; `{cluster}` renders ` (NAME)`, or nothing when it is empty. A
/// placeholder the notice has no field for (the loader refuses unknown ones) renders empty.
pub fn render(templates: &Templates, n: &Notice, cluster: &str) -> String {
    let t = templates.text(n.event);
    let pieces = match parse_template(t) {
        Ok(p) => p,
        // Validated at load; the built-in ones are tested.
        Err(_) => return t.to_string(),
    };
    let mut out = String::new();
    for p in pieces {
        match p {
            Piece::Text(s) => out.push_str(&s),
            Piece::Var("event") => out.push_str(n.event.as_str()),
            Piece::Var("time") => out.push_str(&crate::time::annotation(n.at)),
            Piece::Var("cluster") if cluster.is_empty() => {}
            Piece::Var("cluster") => {
                out.push_str(" (");
                out.push_str(cluster);
                out.push(')');
            }
            Piece::Var(v) => {
                if let Some(f) = n.fields.get(v) {
                    out.push_str(&text_of(f));
                }
            }
        }
    }
    out
}

/// One body to post to one sink.
#[derive(Clone, Debug, PartialEq)]
pub struct Message {
    /// The index of the sink in `notifications.sinks`.
    pub sink: usize,
    /// What it is about.
    pub event: NotifyEvent,
    /// The body, in the sink's shape.
    pub body: Value,
}

/// The messages due for `notices` under `config`: for each notice, in order, one per sink that
/// takes its event, with the event's template rendered.
pub fn messages(config: &Notifications, notices: &[Notice]) -> Vec<Message> {
    let mut out = Vec::new();
    for n in notices {
        let text = render(&config.templates, n, &config.cluster);
        for (i, sink) in config.sinks.iter().enumerate() {
            if sink.wants(n.event) {
                out.push(Message {
                    sink: i,
                    event: n.event,
                    body: body(sink.kind, n, &text, &config.cluster),
                });
            }
        }
    }
    out
}

/// The body a sink of `kind` is sent for `n`, whose message is `text`.
///
/// - `webhook`: `{"event", "time", "cluster", "text", ...the event's fields}`.
/// - `slack`: `{"text"}`, with `&`, `<`, `>` escaped as Slack asks.
/// - `teams`: a `message` with one Adaptive Card (what a Teams Workflows "when a webhook
///   request is received" flow posts), the event as its title and the text below.
pub fn body(kind: SinkKind, n: &Notice, text: &str, cluster: &str) -> Value {
    match kind {
        SinkKind::Webhook => {
            let mut m = serde_json::Map::new();
            m.insert("event".into(), n.event.as_str().into());
            m.insert("time".into(), crate::time::annotation(n.at).into());
            m.insert("cluster".into(), cluster.into());
            m.insert("text".into(), text.into());
            for (k, v) in &n.fields {
                m.insert((*k).into(), v.clone());
            }
            Value::Object(m)
        }
        SinkKind::Slack => json!({
            "text": text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;"),
        }),
        SinkKind::Teams => json!({
            "type": "message",
            "attachments": [{
                "contentType": "application/vnd.microsoft.card.adaptive",
                "content": {
                    "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                    "type": "AdaptiveCard",
                    "version": "1.4",
                    "body": [
                        {"type": "TextBlock", "text": format!("rollboot: {}", n.event.as_str()), "weight": "Bolder", "wrap": true},
                        {"type": "TextBlock", "text": text, "wrap": true},
                    ],
                },
            }],
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        crate::time::parse_annotation(s).unwrap()
    }

    fn pass<'a>(
        now: &str,
        open: bool,
        pending: usize,
        in_flight: usize,
        b: &'a [String],
    ) -> Pass<'a> {
        Pass {
            now: t(now),
            window_open: open,
            window_end: None,
            pending,
            in_flight,
            blockers: b,
            window_closed: !open,
            halted: false,
        }
    }

    fn events(v: &[Notice]) -> Vec<NotifyEvent> {
        v.iter().map(|n| n.event).collect()
    }

    const HOUR: chrono::Duration = chrono::Duration::hours(1);

    #[test]
    fn a_rollout_is_announced_once_at_its_first_start_and_again_after_it_ends() {
        let mut tr = Tracker::default();
        assert!(tr
            .pass(&pass("2026-01-01T00:00:00Z", true, 3, 0, &[]), HOUR)
            .is_empty());
        let n = tr.started("n1", t("2026-01-01T00:00:01Z"));
        assert_eq!(events(&n), vec![NotifyEvent::RolloutStarted]);
        assert_eq!(n[0].fields["node"], "n1");
        assert_eq!(n[0].fields["pending"], 3);
        tr.pass(&pass("2026-01-01T00:00:02Z", true, 2, 1, &[]), HOUR);
        assert!(tr.started("n2", t("2026-01-01T00:00:03Z")).is_empty());
        // Nothing waiting, nothing in flight: the rollout is over; the next start is a new one.
        tr.pass(&pass("2026-01-01T00:10:00Z", true, 0, 0, &[]), HOUR);
        tr.pass(&pass("2026-01-02T00:00:00Z", true, 1, 0, &[]), HOUR);
        assert_eq!(
            events(&tr.started("n3", t("2026-01-02T00:00:01Z"))),
            vec![NotifyEvent::RolloutStarted]
        );
    }

    #[test]
    fn a_new_leader_finding_a_node_in_flight_does_not_announce_the_rollout_again() {
        let mut tr = Tracker::default();
        tr.pass(&pass("2026-01-01T00:00:00Z", true, 2, 1, &[]), HOUR);
        assert!(tr.started("n2", t("2026-01-01T00:00:01Z")).is_empty());
    }

    #[test]
    fn blocked_is_told_once_per_spell_after_blocked_after_and_never_for_a_closed_window() {
        let b = vec!["at least one pod matches the blocking selector `app=backup`".to_string()];
        let mut tr = Tracker::default();
        assert!(tr
            .pass(&pass("2026-01-01T00:00:00Z", true, 2, 0, &b), HOUR)
            .is_empty());
        assert!(tr
            .pass(&pass("2026-01-01T00:59:59Z", true, 2, 0, &b), HOUR)
            .is_empty());
        let n = tr.pass(&pass("2026-01-01T01:00:00Z", true, 2, 0, &b), HOUR);
        assert_eq!(events(&n), vec![NotifyEvent::Blocked]);
        assert_eq!(n[0].fields["blockedFor"], "1h0m");
        assert_eq!(n[0].fields["blockers"], serde_json::json!(b));
        assert!(tr
            .pass(&pass("2026-01-01T03:00:00Z", true, 2, 0, &b), HOUR)
            .is_empty());
        // The spell ends; a new one is told again after its own hour.
        tr.pass(&pass("2026-01-01T03:00:01Z", true, 2, 0, &[]), HOUR);
        assert!(tr
            .pass(&pass("2026-01-01T03:00:02Z", true, 2, 0, &b), HOUR)
            .is_empty());
        assert_eq!(
            events(&tr.pass(&pass("2026-01-01T04:00:02Z", true, 2, 0, &b), HOUR)),
            vec![NotifyEvent::Blocked]
        );
        // A closed window is the schedule, not a block; nothing waiting is no block either.
        let mut tr = Tracker::default();
        let closed = vec!["no maintenance window is open".to_string()];
        tr.pass(&pass("2026-01-01T00:00:00Z", false, 2, 0, &closed), HOUR);
        assert!(tr
            .pass(&pass("2026-01-01T05:00:00Z", false, 2, 0, &closed), HOUR)
            .is_empty());
        let mut tr = Tracker::default();
        tr.pass(&pass("2026-01-01T00:00:00Z", true, 0, 0, &b), HOUR);
        assert!(tr
            .pass(&pass("2026-01-01T05:00:00Z", true, 0, 0, &b), HOUR)
            .is_empty());
    }

    #[test]
    fn a_window_opening_is_told_only_with_work_waiting_and_only_after_being_seen_closed() {
        let mut tr = Tracker::default();
        // First pass open: not an opening this leader saw.
        assert!(tr
            .pass(&pass("2026-01-01T02:00:00Z", true, 1, 0, &[]), HOUR)
            .is_empty());
        tr.pass(&pass("2026-01-01T05:00:00Z", false, 1, 0, &[]), HOUR);
        let mut p = pass("2026-01-02T02:00:00Z", true, 1, 0, &[]);
        p.window_end = Some(t("2026-01-02T05:00:00Z"));
        let n = tr.pass(&p, HOUR);
        assert_eq!(events(&n), vec![NotifyEvent::WindowOpened]);
        assert_eq!(n[0].fields["windowEnd"], "2026-01-02T05:00:00.000Z");
        // Closed then open with nothing waiting: nothing to say.
        tr.pass(&pass("2026-01-02T05:00:00Z", false, 0, 0, &[]), HOUR);
        assert!(tr
            .pass(&pass("2026-01-03T02:00:00Z", true, 0, 0, &[]), HOUR)
            .is_empty());
        // Closed then open while the rollout is halted: it starts nothing, nothing to say.
        tr.pass(&pass("2026-01-03T05:00:00Z", false, 2, 0, &[]), HOUR);
        let mut halted = pass("2026-01-04T02:00:00Z", true, 2, 0, &[]);
        halted.halted = true;
        assert!(tr.pass(&halted, HOUR).is_empty());
    }

    #[test]
    fn a_failure_past_max_failures_also_halts_the_rollout() {
        let mut tr = Tracker::default();
        let now = t("2026-01-01T00:00:00Z");
        let failed = |failed, max| End::Failed {
            reason: "drain timed out".into(),
            failed,
            max_failures: max,
        };
        assert_eq!(
            events(&tr.ended("n1", &failed(1, 1), now)),
            vec![NotifyEvent::NodeFailed]
        );
        let n = tr.ended("n1", &failed(1, 0), now);
        assert_eq!(
            events(&n),
            vec![NotifyEvent::NodeFailed, NotifyEvent::RolloutHalted]
        );
        assert_eq!(n[1].fields["failed"], 1);
        let done = tr.ended(
            "n2",
            &End::Done {
                cycle: Some(chrono::Duration::seconds(754)),
            },
            now,
        );
        assert_eq!(done[0].fields["duration"], "12m34s");
    }

    #[test]
    fn each_notice_goes_to_the_sinks_that_take_its_event_with_its_template() {
        let config = crate::config::parse_str(
            "notifications:
  cluster: lab
  templates: {nodeDone: \"{node} back\"}
  sinks:
    - {name: all, type: webhook, urlFrom: {env: A}}
    - {name: failures, type: slack, urlFrom: {env: B}, events: [nodeFailed, rolloutHalted]}
",
        )
        .unwrap();
        let now = t("2026-01-01T00:00:00Z");
        let mut tr = Tracker::default();
        let mut notices = tr.ended("n1", &End::Done { cycle: None }, now);
        notices.extend(tr.ended(
            "n2",
            &End::Failed {
                reason: "boom".into(),
                failed: 1,
                max_failures: 0,
            },
            now,
        ));
        let m = messages(&config.notifications, &notices);
        let routed: Vec<(usize, NotifyEvent)> = m.iter().map(|m| (m.sink, m.event)).collect();
        assert_eq!(
            routed,
            vec![
                (0, NotifyEvent::NodeDone),
                (0, NotifyEvent::NodeFailed),
                (1, NotifyEvent::NodeFailed),
                (0, NotifyEvent::RolloutHalted),
                (1, NotifyEvent::RolloutHalted),
            ]
        );
        assert_eq!(m[0].body["text"], "n1 back");
        assert_eq!(
            m[2].body,
            json!({"text": "rollboot (lab): node n2 failed: boom"})
        );
    }

    #[test]
    fn templates_render_fields_cluster_and_escapes_and_bodies_have_each_sinks_shape() {
        let n = Notice::new(NotifyEvent::NodeFailed, t("2026-01-01T00:00:00Z"))
            .with("node", "n1")
            .with("reason", "a <b> & c");
        let templates = Templates {
            node_failed: Some("{{{event}}}{cluster} {node}: {reason} at {time}".into()),
            ..Templates::default()
        };
        let text = render(&templates, &n, "prod");
        assert_eq!(
            text,
            "{nodeFailed} (prod) n1: a <b> & c at 2026-01-01T00:00:00.000Z"
        );
        assert_eq!(
            render(&Templates::default(), &n, ""),
            "rollboot: node n1 failed: a <b> & c"
        );
        let w = body(SinkKind::Webhook, &n, &text, "prod");
        assert_eq!(
            w,
            json!({"event": "nodeFailed", "time": "2026-01-01T00:00:00.000Z", "cluster": "prod",
                   "text": text, "node": "n1", "reason": "a <b> & c"})
        );
        assert_eq!(
            body(SinkKind::Slack, &n, "a <b> & c", ""),
            json!({"text": "a &lt;b&gt; &amp; c"})
        );
        let teams = body(SinkKind::Teams, &n, "hello", "");
        assert_eq!(teams["type"], "message");
        assert_eq!(
            teams["attachments"][0]["contentType"],
            "application/vnd.microsoft.card.adaptive"
        );
        assert_eq!(
            teams["attachments"][0]["content"]["body"][1]["text"],
            "hello"
        );
    }
}
