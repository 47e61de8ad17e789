//! The hooks' decisions, pure: given a node's view, the config and now, the next hook step of
//! a phase, and the Node writes that record each step.
//!
//! A phase goes: begin (its record, labels and taints in one write), record and send the
//! fire-and-forget webhooks, wait for the gate annotations, ask each blocking webhook in turn
//! (each attempt recorded before it is sent, its answer recorded after), wait out
//! `drain.settle` after the drain, then record the phase as passed (removing its gate
//! annotations, so the next cycle waits for a fresh yes). It must never do I/O or read a
//! clock, and never return a step that sends an attempt already recorded.

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{Answer, Body, Call, PhaseRecord, Record};
use crate::config::hooks::{PhaseHooks, Webhook};
use crate::config::{Config, Phase};
use crate::node::{self as proto, NodeView, TaintView};

/// The next thing to do at a phase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    /// The phase has passed (or has nothing configured): the cycle goes on.
    Passed,
    /// A write, and what it records is then acted on.
    Act(Action),
    /// Nothing to do until the Node changes (a gate annotation appears) or until this instant.
    Wait {
        /// When to look again.
        until: DateTime<Utc>,
        /// What the node waits for.
        why: String,
    },
    /// The phase held the node past its timeout: the node fails (and is not rebooted).
    Fail(String),
}

/// A hook step: the write that records it comes first, then the act.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Write the phase's record (begun now) with its labels and taints.
    Begin,
    /// Record these fire-and-forget webhooks as sent (attempt 1, a fresh token each), then
    /// send them without waiting.
    Fire(Vec<String>),
    /// Record attempt `attempt` of blocking webhook `name`, then ask it and record its answer.
    Call {
        /// The webhook's name.
        name: String,
        /// The attempt (1 for the first).
        attempt: u32,
        /// The token of the earlier attempts; `None` for a fresh one.
        token: Option<String>,
    },
    /// Record the phase as passed and remove its gate annotations.
    Pass,
}

/// Whether anything happens at `phase` (for `afterDrain`, `drain.settle` counts).
pub fn configured(config: &Config, phase: Phase) -> bool {
    config.hooks.phase(phase).configured()
        || (phase == Phase::AfterDrain && config.drain.settle.is_some())
}

/// What a phase's hooks hold the node for, in words (its gate annotations, blocking webhooks,
/// and for afterDrain `drain.settle`); `None` when nothing holds it (labels, taints and
/// fire-and-forget webhooks only).
pub fn what_holds(phase: Phase, config: &Config) -> Option<String> {
    let ph = config.hooks.phase(phase);
    let mut parts = Vec::new();
    if !ph.gates.is_empty() {
        parts.push(format!("the gate annotation(s) {}", ph.gates.join(", ")));
    }
    let blocking: Vec<&str> = ph
        .webhooks
        .iter()
        .filter(|w| w.blocking)
        .map(|w| w.name.as_str())
        .collect();
    if !blocking.is_empty() {
        parts.push(format!("the blocking webhook(s) {}", blocking.join(", ")));
    }
    if phase == Phase::AfterDrain {
        if let Some(s) = config.drain.settle {
            parts.push(format!("drain.settle ({s})"));
        }
    }
    (!parts.is_empty()).then(|| parts.join(" and "))
}

/// The node's hooks record, `None` when absent or unreadable (see [`record_problem`]).
pub fn record(n: &NodeView) -> Option<Record> {
    Record::parse(n.hooks.as_deref()).ok().flatten()
}

/// Why the node's `hooks` annotation does not parse, if it does not.
pub fn record_problem(n: &NodeView) -> Option<String> {
    Record::parse(n.hooks.as_deref()).err()
}

/// The record of `phase`, if it was begun in the node's current state (at or after
/// `state_since`): a record from an earlier state or cycle is no record.
pub fn phase_record(n: &NodeView, phase: Phase, state_since: DateTime<Utc>) -> Option<PhaseRecord> {
    record(n)?
        .phases
        .remove(&phase)
        .filter(|p| p.since >= state_since)
}

/// The gate annotations of `ph` not yet given: absent, or `false`.
fn missing_gates<'a>(ph: &'a PhaseHooks, n: &NodeView) -> Vec<&'a str> {
    ph.gates
        .iter()
        .filter(|g| n.other_annotations.get(*g).is_none_or(|v| v == "false"))
        .map(String::as_str)
        .collect()
}

/// The next hook step of `phase` for node `n`, in the state it entered at `state_since`.
/// Idempotent: the same inputs give the same step.
pub fn next(
    phase: Phase,
    config: &Config,
    n: &NodeView,
    state_since: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Next {
    if !configured(config, phase) {
        return Next::Passed;
    }
    let ph = config.hooks.phase(phase);
    let Some(p) = phase_record(n, phase, state_since) else {
        return Next::Act(Action::Begin);
    };
    if p.passed.is_some() {
        return Next::Passed;
    }
    let unfired: Vec<String> = ph
        .webhooks
        .iter()
        .filter(|w| !w.blocking && !p.webhooks.contains_key(&w.name))
        .map(|w| w.name.clone())
        .collect();
    if !unfired.is_empty() {
        return Next::Act(Action::Fire(unfired));
    }
    let deadline = p.since + ph.timeout.to_chrono();
    let within = ph.timeout;
    let missing = missing_gates(ph, n);
    if !missing.is_empty() {
        let list = missing.join(", ");
        return if now >= deadline {
            Next::Fail(format!(
                "hooks.{phase}: the gate annotation(s) {list} were not given within {within}; the node is not rebooted"
            ))
        } else {
            Next::Wait {
                until: deadline,
                why: format!("hooks.{phase}: waiting for the gate annotation(s) {list}"),
            }
        };
    }
    for w in ph.webhooks.iter().filter(|w| w.blocking) {
        match p.webhooks.get(&w.name) {
            None if now >= deadline => {
                return Next::Fail(format!(
                "hooks.{phase}: webhook {} was not asked within {within}; the node is not rebooted",
                w.name
            ))
            }
            None => {
                return Next::Act(Action::Call {
                    name: w.name.clone(),
                    attempt: 1,
                    token: None,
                })
            }
            Some(Call {
                answer: Some(Answer { yes: true, .. }),
                ..
            }) => continue,
            Some(c) => return ask_again(phase, w, c, deadline, within, now),
        }
    }
    if phase == Phase::AfterDrain {
        if let Some(s) = config.drain.settle {
            let until = p.since + s.to_chrono();
            if now < until {
                return Next::Wait {
                    until,
                    why: format!("drain.settle: {s} after the drain before the reboot"),
                };
            }
        }
    }
    Next::Act(Action::Pass)
}

/// A blocking webhook whose last attempt said no, or whose answer was never recorded (the
/// leader that sent it stopped): the next attempt after the backoff, never the same one again.
fn ask_again(
    phase: Phase,
    w: &Webhook,
    c: &Call,
    deadline: DateTime<Utc>,
    within: crate::config::Duration,
    now: DateTime<Utc>,
) -> Next {
    let (last, again) = match &c.answer {
        Some(a) => (
            format!("attempt {} answered {}", c.attempt, a.detail),
            a.at + w.backoff_after(c.attempt).to_chrono(),
        ),
        None => {
            // Unanswered: it may still be under way until its request timeout.
            let over = c.at + w.request_timeout.to_chrono();
            (
                format!("attempt {} has no recorded answer", c.attempt),
                over + w.backoff_after(c.attempt).to_chrono(),
            )
        }
    };
    if now >= deadline {
        return Next::Fail(format!(
            "hooks.{phase}: blocking webhook {} did not say yes within {within} ({last}); the node is not rebooted",
            w.name
        ));
    }
    if now < again {
        return Next::Wait {
            until: again.min(deadline),
            why: format!(
                "hooks.{phase}: blocking webhook {} holds the node ({last}); asking again",
                w.name
            ),
        };
    }
    Next::Act(Action::Call {
        name: w.name.clone(),
        attempt: c.attempt + 1,
        token: Some(c.token.clone()),
    })
}

/// The record as it is on the Node, or a new one for a cycle whose first phase begins now.
fn current_record(n: &NodeView, now: DateTime<Utc>) -> Record {
    record(n).unwrap_or_else(|| Record {
        rollout: format!("{}-{}", n.name, now.timestamp_millis()),
        reason: flag_reason(n),
        phases: Default::default(),
    })
}

/// Why the node is flagged: the agent's sentinel reason, or the operator's request reason.
fn flag_reason(n: &NodeView) -> String {
    n.reboot_required_reason
        .clone()
        .or_else(|| n.reboot_requested_reason.clone())
        .unwrap_or_else(|| {
            if n.reboot_requested {
                "requested by an operator".into()
            } else {
                String::new()
            }
        })
}

/// The merge patch (to be fenced by the view's version) that begins `phase`: its record, its
/// labels, and the node's taint list with the phase's taints put and removed.
pub fn begin_patch(phase: Phase, config: &Config, n: &NodeView, now: DateTime<Utc>) -> Value {
    let ph = config.hooks.phase(phase);
    let mut r = current_record(n, now);
    r.phases.insert(
        phase,
        PhaseRecord {
            since: now,
            passed: None,
            webhooks: Default::default(),
        },
    );
    let mut p = proto::patch(&[(proto::HOOKS, Some(r.to_text()))], None);
    let labels: Vec<(String, Option<String>)> = ph
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), Some(v.clone())))
        .chain(
            ph.remove_labels
                .iter()
                .filter(|k| n.labels.contains_key(*k))
                .map(|k| (k.clone(), None)),
        )
        .collect();
    p = proto::with_labels(p, &labels);
    if !ph.taints.is_empty() || !ph.remove_taints.is_empty() {
        let mut taints: Vec<TaintView> = n
            .taints
            .iter()
            .filter(|t| !ph.remove_taints.contains(&t.key))
            .filter(|t| {
                !ph.taints
                    .iter()
                    .any(|s| s.key == t.key && s.effect == t.effect)
            })
            .cloned()
            .collect();
        taints.extend(ph.taints.iter().map(|s| TaintView {
            key: s.key.clone(),
            value: s.value.clone(),
            effect: s.effect.clone(),
            time_added: None,
        }));
        if taints != n.taints {
            p = proto::with_taints(p, &taints);
        }
    }
    p
}

/// The `hooks` annotation with `f` applied to the record of `phase` (which must have begun).
pub fn record_with(
    phase: Phase,
    n: &NodeView,
    now: DateTime<Utc>,
    f: impl FnOnce(&mut PhaseRecord),
) -> String {
    let mut r = current_record(n, now);
    let p = r.phases.entry(phase).or_insert_with(|| PhaseRecord {
        since: now,
        passed: None,
        webhooks: Default::default(),
    });
    f(p);
    r.to_text()
}

/// The merge patch that records `names` as fired (attempt 1 each, with its token).
pub fn fire_patch(
    phase: Phase,
    n: &NodeView,
    now: DateTime<Utc>,
    tokens: &[(String, String)],
) -> Value {
    let text = record_with(phase, n, now, |p| {
        for (name, token) in tokens {
            p.webhooks.insert(
                name.clone(),
                Call {
                    token: token.clone(),
                    attempt: 1,
                    at: now,
                    answer: None,
                },
            );
        }
    });
    proto::patch(&[(proto::HOOKS, Some(text))], None)
}

/// The merge patch that records attempt `attempt` of `name` with `token`, unanswered.
pub fn call_patch(
    phase: Phase,
    n: &NodeView,
    now: DateTime<Utc>,
    name: &str,
    token: &str,
    attempt: u32,
) -> Value {
    let text = record_with(phase, n, now, |p| {
        p.webhooks.insert(
            name.to_string(),
            Call {
                token: token.to_string(),
                attempt,
                at: now,
                answer: None,
            },
        );
    });
    proto::patch(&[(proto::HOOKS, Some(text))], None)
}

/// The merge patch that records `answer` to attempt `attempt` of `name` with `token`; `None`
/// when the node no longer shows that attempt unanswered (a newer attempt, a new cycle, an
/// answer already there): the answer belongs to nothing on the Node and is not written.
pub fn answer_patch(
    phase: Phase,
    n: &NodeView,
    name: &str,
    token: &str,
    attempt: u32,
    answer: Answer,
) -> Option<Value> {
    let r = record(n)?;
    let c = r.phases.get(&phase)?.webhooks.get(name)?;
    if c.token != token || c.attempt != attempt || c.answer.is_some() {
        return None;
    }
    let text = record_with(phase, n, answer.at, |p| {
        if let Some(c) = p.webhooks.get_mut(name) {
            c.answer = Some(answer);
        }
    });
    Some(proto::patch(&[(proto::HOOKS, Some(text))], None))
}

/// The merge patch that records `phase` as passed and removes its gate annotations.
pub fn pass_patch(phase: Phase, config: &Config, n: &NodeView, now: DateTime<Utc>) -> Value {
    let text = record_with(phase, n, now, |p| p.passed = Some(now));
    let mut ann: Vec<(&str, Option<String>)> = vec![(proto::HOOKS, Some(text))];
    for g in &config.hooks.phase(phase).gates {
        if n.other_annotations.contains_key(g) {
            ann.push((g.as_str(), None));
        }
    }
    proto::patch(&ann, None)
}

/// The body of attempt `attempt` of webhook `w` with `token`, sent at `now`.
pub fn body(
    phase: Phase,
    w: &Webhook,
    n: &NodeView,
    token: &str,
    attempt: u32,
    now: DateTime<Utc>,
) -> Body {
    let r = record(n);
    let reason = r
        .as_ref()
        .map(|r| r.reason.clone())
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| flag_reason(n));
    Body {
        node: n.name.clone(),
        phase,
        hook: w.name.clone(),
        token: token.to_string(),
        attempt,
        rollout_id: r.map(|r| r.rollout).unwrap_or_default(),
        reason,
        blocking: w.blocking,
        time: crate::time::annotation(now),
    }
}

/// The taint list of a node that must (`want`) or must not carry `key:PreferNoSchedule`, when
/// it differs from the one it has; `None` when nothing changes.
pub fn prefer_no_schedule(n: &NodeView, key: &str, want: bool) -> Option<Vec<TaintView>> {
    let has = n
        .taints
        .iter()
        .any(|t| t.key == key && t.effect == "PreferNoSchedule");
    if has == want {
        return None;
    }
    let mut taints: Vec<TaintView> = n
        .taints
        .iter()
        .filter(|t| !(t.key == key && t.effect == "PreferNoSchedule"))
        .cloned()
        .collect();
    if want {
        taints.push(TaintView {
            key: key.to_string(),
            value: String::new(),
            effect: "PreferNoSchedule".into(),
            time_added: None,
        });
    }
    Some(taints)
}

/// The nodes whose PreferNoSchedule taint (`hooks.preferNoScheduleTaint`) must change: every
/// flagged node rollboot may reboot carries it (failed ones too: they still need the reboot);
/// any other loses it. With the new taint list of each.
pub fn prefer_no_schedule_changes<'a>(
    nodes: impl IntoIterator<Item = &'a NodeView>,
    config: &Config,
) -> Vec<(&'a NodeView, Vec<TaintView>)> {
    let Some(key) = &config.hooks.prefer_no_schedule_taint else {
        return Vec::new();
    };
    nodes
        .into_iter()
        .filter(|n| !n.deleting)
        .filter_map(|n| {
            let want = n.flagged() && !n.excluded && config.node_selector().matches(&n.labels);
            prefer_no_schedule(n, key, want).map(|t| (n, t))
        })
        .collect()
}

#[cfg(test)]
mod tests;
