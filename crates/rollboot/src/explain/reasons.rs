//! Each reason's sentence, from what the controller's pure code decided of the snapshot
//! ([`super::decision`]) and the node's own facts as [`decide`] reads them.
//!
//! Owns which reasons are said for a node, in which order, and their words: the node's own
//! state, what holds every node, its place in the pick, and a node in flight's state. Pure: it
//! must never do I/O, and never decide what the controller's code does not (a reason is said
//! only where [`decide`] holds the node for it).

use chrono::{DateTime, Utc};

use super::decision::Decided;
use super::{ExplainReason, Gathered, ReasonCode};
use crate::config::{Config, Phase};
use crate::controller::decide::{self, Blocker, NoRoom, Position, Snapshot, Step};
use crate::hooks::decide::{self as hooks, Action, Next};
use crate::lock::{LockEntry, LockRecord};
use crate::node::{self as proto, NodeState, NodeView};
use crate::render::instant;

/// What the reasons of one node are said from.
pub(super) struct Facts<'a> {
    /// The node.
    pub(super) node: &'a NodeView,
    /// The snapshot a pass would build.
    pub(super) snap: &'a Snapshot<'a>,
    /// The lock as read.
    pub(super) record: &'a LockRecord,
    /// The controller's config.
    pub(super) config: &'a Config,
    /// What the start of new nodes decides of the snapshot.
    pub(super) decided: &'a Decided,
    /// Each blocking selector as written, and the pods (`namespace/name`) it matches.
    pub(super) blocking_pods: &'a [(String, Vec<String>)],
    /// The instant of the decision.
    pub(super) now: DateTime<Utc>,
}

/// Prometheus's and Alertmanager's answers as the blockers a pass hands over; what could not
/// be asked from here is said apart (the controller, which asks from the cluster, may reach it).
pub(super) fn alerts(g: &Gathered) -> (Vec<Blocker>, Vec<String>) {
    let mut blockers = Vec::new();
    let mut not_checked = Vec::new();
    if let Some((url, answer)) = &g.cluster.alerts {
        match answer {
            Ok(names) if names.is_empty() => {}
            Ok(names) => blockers.push(Blocker::Alerts {
                names: names.clone(),
            }),
            Err(e) => not_checked.push(format!(
                "blockers.prometheus: Prometheus at {url} could not be asked from here ({e}); the controller asks it before each start and starts nothing while it cannot"
            )),
        }
    }
    if let Some((url, answer)) = &g.alertmanager {
        match answer {
            Ok(names) if names.is_empty() => {}
            Ok(names) => blockers.push(Blocker::AlertmanagerAlerts {
                names: names.clone(),
            }),
            Err(e) => not_checked.push(format!(
                "blockers.alertmanager: Alertmanager at {url} could not be asked from here ({e}); the controller asks it before each start and starts nothing while it cannot"
            )),
        }
    }
    (blockers, not_checked)
}

/// Every reason that holds the node, in [`ReasonCode`]'s order.
pub(super) fn all(f: &Facts<'_>) -> Vec<ExplainReason> {
    let n = f.node;
    if let Some(entry) = f.record.entries.get(&n.name) {
        return in_flight(f, entry);
    }
    let mut out = own(f);
    let shutting_down = decide::shutting_down(f.snap, f.config)
        .iter()
        .any(|s| s.name == n.name);
    if shutting_down {
        // Its host goes down anyway: windows and blockers do not hold it, only the slots and
        // the lock.
        out.extend(shutdown(f));
    } else {
        out.extend(f.decided.blockers.iter().map(|b| blocker(f, b)));
        if decide::is_candidate(n, f.config) {
            out.extend(resting(f));
            out.extend(pick(f));
        }
    }
    out.sort_by_key(|r| r.code);
    out
}

/// What the node's own state says: failed (and quarantined), not flagged, excluded. Another
/// actor taking the node out (`otherMaintenance`) is such a fact, and is said here too.
fn own(f: &Facts<'_>) -> Vec<ExplainReason> {
    let n = f.node;
    let mut out = Vec::new();
    if n.state == Some(NodeState::Failed) {
        let slot = if decide::holds_a_slot(n) {
            "; rollboot left it cordoned, and it holds one of maxNodes' slots until then"
        } else {
            ""
        };
        out.push(
            ExplainReason::new(
                ReasonCode::Failed,
                format!(
                    "it failed: {}; the controller takes it again once an operator clears it with `rollboot retry {}`{slot}",
                    n.failure_reason.as_deref().unwrap_or("no reason recorded"),
                    n.name
                ),
            )
            .since(n.state_since),
        );
        if let Some(cause) = &n.quarantined {
            out.push(ExplainReason::new(
                ReasonCode::Quarantined,
                format!(
                    "its drain was held ({cause}) and drain.whenBlocked quarantined it (label {}): it stays cordoned with its pods until `rollboot retry {}`",
                    proto::QUARANTINED, n.name
                ),
            ).since(n.state_since));
        }
    }
    if let Some(actor) = &n.other_actor {
        out.push(ExplainReason::new(
            ReasonCode::OtherMaintenance,
            format!(
                "otherMaintenance: {actor}: rollboot leaves the node alone while another actor takes it out, and counts it against maxNodes"
            ),
        ));
    }
    if !n.flagged() && !n.shutdown_requested {
        out.push(ExplainReason::new(
            ReasonCode::NotFlagged,
            format!(
                "nothing asks for a reboot: the agent's sentinel did not flag it ({}) and no one requested one ({}; `rollboot request {}`)",
                proto::REBOOT_REQUIRED, proto::REBOOT_REQUESTED, n.name
            ),
        ));
    }
    out.extend(excluded(f));
    out
}

/// The exclude label, `nodes.selector`, the Node's deletion: each that keeps it out.
fn excluded(f: &Facts<'_>) -> Vec<ExplainReason> {
    let n = f.node;
    let mut out = Vec::new();
    if n.excluded {
        out.push(ExplainReason::new(
            ReasonCode::Excluded,
            format!(
                "the label {}={} excludes it: rollboot never reboots it",
                proto::EXCLUDE,
                n.labels.get(proto::EXCLUDE).map_or("", String::as_str)
            ),
        ));
    }
    if !f.config.node_selector().matches(&n.labels) {
        out.push(ExplainReason::new(
            ReasonCode::Excluded,
            format!(
                "nodes.selector `{}` does not select it",
                f.config.nodes.selector
            ),
        ));
    }
    if n.deleting {
        out.push(ExplainReason::new(
            ReasonCode::Excluded,
            "the Node is being deleted: rollboot starts no cycle on it",
        ));
    }
    out
}

/// What one blocker says of every waiting node.
fn blocker(f: &Facts<'_>, b: &Blocker) -> ExplainReason {
    match b {
        Blocker::WindowClosed => window_closed(f),
        Blocker::LockHeldBy(holder) => held_lock(f, holder, "nothing new starts"),
        Blocker::BlockingPods { selector, .. } => {
            let pods = f
                .blocking_pods
                .iter()
                .find(|(s, _)| s == selector)
                .map(|(_, p)| p.as_slice())
                .unwrap_or_default();
            ExplainReason::new(
                ReasonCode::Blocked,
                format!(
                    "{} pod(s) match the blocking selector `{selector}` (blockers.podSelectors): {}",
                    pods.len(),
                    list(pods)
                ),
            )
        }
        Blocker::TooManyUnready { .. } => ExplainReason::new(
            ReasonCode::Blocked,
            format!("{b} (blockers.maxUnreadyNodes)"),
        ),
        Blocker::TooManyFailures { .. } => {
            ExplainReason::new(ReasonCode::Blocked, format!("{b} (failures.maxFailures)"))
        }
        _ => ExplainReason::new(ReasonCode::Blocked, b.to_string()),
    }
}

/// At most ten names, then how many more.
fn list(names: &[String]) -> String {
    let mut s = names
        .iter()
        .take(10)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > 10 {
        s.push_str(&format!(" and {} more", names.len() - 10));
    }
    s
}

/// No window open now: until the next opening.
fn window_closed(f: &Facts<'_>) -> ExplainReason {
    let next = f.config.schedule().next_opening(f.now);
    let message = match &next {
        Some(o) => format!(
            "no maintenance window is open now (windows, blackouts): the next opening is {} to {}",
            instant(o.start),
            if o.end == DateTime::<Utc>::MAX_UTC {
                "no end".to_string()
            } else {
                instant(o.end)
            }
        ),
        None => "no maintenance window is open now (windows, blackouts), and none opens within the look-ahead".to_string(),
    };
    ExplainReason::new(ReasonCode::WindowClosed, message).until(next.map(|o| o.start))
}

/// The lock held by `holder`, not rollboot: an operator's pause, or another tool. `effect` is
/// what it does to the node.
fn held_lock(f: &Facts<'_>, holder: &str, effect: &str) -> ExplainReason {
    let lease = format!("{}/{}", f.config.lock.namespace, f.config.lock.name);
    if let Some(p) = &f.record.pause {
        let why = p
            .reason
            .as_deref()
            .map_or(String::new(), |r| format!(" ({r})"));
        return ExplainReason::new(
            ReasonCode::Paused,
            format!(
                "rollboot is paused by {}{why}: {effect} until `rollboot resume`",
                p.by
            ),
        )
        .since(p.at);
    }
    let since = f
        .record
        .lease
        .as_ref()
        .and_then(|l| l.spec.as_ref()?.acquire_time.as_ref())
        .map(crate::time::from_micro);
    ExplainReason::new(
        ReasonCode::LockHeldByOther,
        format!(
            "the maintenance lock {lease} is held by `{holder}`, not by rollboot nor by a `rollboot pause`: {effect} while it holds it"
        ),
    )
    .since(since)
}

/// `nodes.minRebootInterval`: rebooted too recently.
fn resting(f: &Facts<'_>) -> Option<ExplainReason> {
    let until = decide::resting_until(f.node, f.config, f.now)?;
    let interval = f.config.nodes.min_reboot_interval?;
    let last = f.node.history.last_reboot;
    Some(
        ExplainReason::new(
            ReasonCode::RestingUntil,
            format!(
                "rollboot rebooted it at {}, less than nodes.minRebootInterval ({interval}) ago: it may start again at {}",
                last.map_or("?".to_string(), instant),
                instant(until)
            ),
        )
        .since(last)
        .until(Some(until)),
    )
}

/// A host shutting down by itself: no slot left for it, or the lock held by another.
fn shutdown(f: &Facts<'_>) -> Vec<ExplainReason> {
    let name = &f.node.name;
    let mut out = Vec::new();
    if f.decided.deferred_shutdowns.contains(name) {
        let c = &f.config.concurrency;
        out.push(ExplainReason::new(
            ReasonCode::MaxNodesReached,
            format!(
                "its host shuts down by itself, but maxNodes ({}) and concurrency.maxShutdownDrains ({}) are taken: {}; it is drained only if a slot frees while logind holds its shutdown",
                c.max_nodes,
                c.max_shutdown_drains,
                described(f, &holders(f, |_| true))
            ),
        ));
    }
    if f.decided.undrained_shutdowns.contains(name) {
        if let Some(holder) = f.snap.foreign_holder {
            out.push(held_lock(
                f,
                holder,
                "its host shuts down by itself and is not drained",
            ));
        }
    }
    out
}

/// The node's place in the pick: passed over for a budget, or no room in the slots or its
/// groups.
fn pick(f: &Facts<'_>) -> Vec<ExplainReason> {
    let n = f.node;
    if let Some((_, held)) = f.decided.passed_over.iter().find(|(p, _)| *p == n.name) {
        let since = n.passed_over.as_ref().map(|p| p.since);
        let pass_over_for = f.config.concurrency.pass_over_for;
        let until = since.unwrap_or(f.now) + pass_over_for.to_chrono();
        return vec![ExplainReason::new(
            ReasonCode::PassedOver,
            format!(
                "the budget-aware pick passes it over for a later node: {held}; it is taken once the budget has room, or anyway at {} (concurrency.passOverFor {pass_over_for})",
                instant(until)
            ),
        )
        .since(since)
        .until(Some(until))];
    }
    let mut out: Vec<ExplainReason> = f.decided.no_room.iter().map(|r| no_room(f, r)).collect();
    let resting = decide::resting_until(n, f.config, f.now).is_some();
    if out.is_empty() && !resting && !f.decided.picked.contains(&n.name) {
        // The pick looks at a window of the waiting nodes in order; the slots went to nodes
        // ahead of it.
        out.push(ExplainReason::new(
            ReasonCode::MaxNodesReached,
            format!(
                "the pick looks at the waiting nodes in order and takes none past the slots of maxNodes ({}) it can fill: {}",
                f.config.concurrency.max_nodes,
                described(f, &holders(f, |_| true))
            ),
        ));
    }
    out
}

/// What had no room for the node, in words.
fn no_room(f: &Facts<'_>, r: &NoRoom) -> ExplainReason {
    let c = &f.config.concurrency;
    match r {
        NoRoom::Slots => ExplainReason::new(
            ReasonCode::MaxNodesReached,
            format!(
                "all {} slot(s) of concurrency.maxNodes are taken: {}",
                c.max_nodes,
                described(f, &holders(f, |_| true))
            ),
        ),
        NoRoom::Group(g) => {
            let (key, limit) = f.config.group_limit().unwrap_or_default();
            let in_group = holders(f, |h| match h {
                Holder::Gone(_, e) => e.group.as_ref().is_none_or(|eg| eg == g),
                _ => decide::group_of(h.node().expect("a Node"), f.config).as_ref() == Some(g),
            });
            ExplainReason::new(
                ReasonCode::GroupFull,
                format!(
                    "its group {key}={g} has its limit of {limit} node(s) (concurrency.maxNodesPerGroup): {}",
                    described(f, &in_group)
                ),
            )
        }
        NoRoom::FleetLockGroup(g) => {
            let limit = decide::fleetlock_limits(f.config)
                .get(g.as_str())
                .copied()
                .unwrap_or_default();
            let in_group = holders(f, |h| {
                h.node().is_some_and(|n| {
                    n.hands_off() && n.fleetlock.as_ref().is_some_and(|fl| fl.group == *g)
                }) && !matches!(h, Holder::Failed(_))
            });
            ExplainReason::new(
                ReasonCode::GroupFull,
                format!(
                    "its FleetLock group {g} has its limit of {limit} host(s) (fleetlock.groups.{g}.maxNodes): {}",
                    described(f, &in_group)
                ),
            )
        }
    }
}

/// A node that takes a slot the node asked about could have had.
enum Holder<'a> {
    /// In the lock, its Node read.
    InFlight(&'a NodeView, &'a LockEntry),
    /// In the lock, its Node gone.
    Gone(&'a str, &'a LockEntry),
    /// Failed and left cordoned by rollboot ([`decide::holds_a_slot`]).
    Failed(&'a NodeView),
    /// Taken by the pick ahead of it.
    Ahead(&'a NodeView),
}

impl Holder<'_> {
    fn node(&self) -> Option<&NodeView> {
        match self {
            Holder::InFlight(n, _) | Holder::Failed(n) | Holder::Ahead(n) => Some(n),
            Holder::Gone(..) => None,
        }
    }
}

/// The nodes that take slots, as the pick counts them, that `keep` keeps.
fn holders<'a>(f: &Facts<'a>, keep: impl Fn(&Holder<'a>) -> bool) -> Vec<Holder<'a>> {
    let find = |name: &str| f.snap.nodes.iter().copied().find(|n| n.name == name);
    let mut out: Vec<Holder<'a>> = f
        .decided
        .in_flight
        .iter()
        .map(|(name, e)| match find(name) {
            Some(n) => Holder::InFlight(n, e),
            None => Holder::Gone(name, e),
        })
        .collect();
    out.extend(
        f.snap
            .nodes
            .iter()
            .copied()
            .filter(|n| decide::holds_a_slot(n) && !f.decided.in_flight.contains_key(&n.name))
            .map(Holder::Failed),
    );
    out.extend(
        f.decided
            .picked
            .iter()
            .filter_map(|p| find(p))
            .map(Holder::Ahead),
    );
    out.retain(|h| keep(h));
    out
}

/// The holders, each with why it holds a slot.
fn described(f: &Facts<'_>, holders: &[Holder<'_>]) -> String {
    let words: Vec<String> = holders
        .iter()
        .map(|h| match h {
            Holder::InFlight(n, e) => match decide::position(n, e) {
                Position::At(state, since) => {
                    format!("{} (in flight: {state} since {})", n.name, instant(since))
                }
                _ => format!("{} (in flight since {})", n.name, instant(e.since)),
            },
            Holder::Gone(name, e) => format!(
                "{name} (in flight since {}, its Node gone{})",
                instant(e.since),
                if e.group.is_none() && f.config.group_limit().is_some() {
                    ": counted in every group"
                } else {
                    ""
                }
            ),
            Holder::Failed(n) => format!("{} (failed, left cordoned by rollboot)", n.name),
            Holder::Ahead(n) => format!("{} (ahead of it in order)", n.name),
        })
        .collect();
    if words.is_empty() {
        "none".to_string()
    } else {
        list(&words)
    }
}

/// A node in flight: its state and since when, what holds it, and a hook it waits for.
fn in_flight(f: &Facts<'_>, entry: &LockEntry) -> Vec<ExplainReason> {
    let n = f.node;
    let step = decide::next_step(Some(n), entry, f.config, f.now);
    let (state, since) = match decide::position(n, entry) {
        Position::At(state, since) => (state.to_string(), since),
        Position::StartOver => ("starting over from the cordon".to_string(), entry.since),
        Position::Unverifiable(_) => ("unverifiable reboot".to_string(), entry.since),
    };
    let hook = hook_wait(f, entry, &step);
    let held = match (&step, &hook) {
        (Step::Hold { why, until }, None) => format!("; held: {why}, until {}", instant(*until)),
        _ => String::new(),
    };
    let mut out = vec![ExplainReason::new(
        ReasonCode::InFlight,
        format!(
            "in maintenance since {} (started by {}): {state} since {}{held}",
            instant(entry.since),
            if entry.leader.is_empty() {
                "rollboot"
            } else {
                &entry.leader
            },
            instant(since)
        ),
    )
    .since(Some(since))];
    out.extend(hook);
    // Under another holder than a pause the nodes in flight wait (a pass resumes none).
    if let (Some(holder), None) = (f.snap.foreign_holder, &f.record.pause) {
        out.push(held_lock(f, holder, "its cycle waits"));
    }
    out
}

/// The hook the node in flight waits for, as its next step says: a phase's gate annotations, a
/// blocking webhook asked or to ask again, or `drain.settle`.
fn hook_wait(f: &Facts<'_>, entry: &LockEntry, step: &Step) -> Option<ExplainReason> {
    let n = f.node;
    let Position::At(state, since) = decide::position(n, entry) else {
        return None;
    };
    let phase = match state {
        NodeState::Cordoning => Phase::BeforeDrain,
        NodeState::Draining => Phase::AfterDrain,
        NodeState::Verifying => Phase::AfterReboot,
        NodeState::Done => Phase::AfterDone,
        NodeState::Rebooting | NodeState::Failed => return None,
    };
    match step {
        Step::Hold { until, why } => {
            let from_hook = matches!(
                hooks::next(phase, f.config, n, since, f.now),
                Next::Wait { why: w, .. } if w == *why
            );
            from_hook.then(|| {
                ExplainReason::new(ReasonCode::WaitingForHook, why.clone()).until(Some(*until))
            })
        }
        Step::Hook {
            phase,
            action: Action::Call { name, attempt, .. },
        } => Some(ExplainReason::new(
            ReasonCode::WaitingForHook,
            format!("hooks.{phase}: asking blocking webhook {name} (attempt {attempt})"),
        )),
        _ => None,
    }
}
