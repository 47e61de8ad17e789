//! The start of new nodes in a pass, as one decision: from the Nodes and the lock to the plan
//! the runtime carries out.
//!
//! Owns [`start()`] and what it decides, in the order its reads allow. First, from the Nodes
//! and the lock alone ([`Start`]): the hosts shutting down by themselves (started at once and
//! alone, whatever blocks the others; deferred past `concurrency.maxShutdownDrains`; left
//! undrained while another holder holds the lock), and whether any node waits. Then, with the
//! blockers read from outside the Nodes, whether any starts at all, and if not when to look
//! again ([`Queued::blockers_read`]). Last, with the budgets of the nodes the pick looks at,
//! which start, which are passed over and which rest, and when to look again
//! ([`Pick::decide`]: the [`StartPlan`]). Each stage says what it needs read next, so a pass
//! reads nothing it does not need: an idle cluster costs no query of blockers, a blocked one
//! no list of pods. It must never read, write nor wait: the runtime reads what a stage asks
//! for, and carries out what it decides.

use chrono::{DateTime, Utc};

use super::blockers::{blockers, is_candidate, look_again, resting, Blocker};
use super::pick::{budget_aware, draining, group_of, looked_at, pick_among, reads_per_pass};
use super::shutdown::{shutdown_room, shutting_down};
use super::Snapshot;
use crate::budgets::{BudgetHold, Headroom};
use crate::config::Config;
use crate::node::NodeView;

/// A node to start, with the group its lock entry records ([`group_of`]).
#[derive(Debug)]
pub struct Starting<'a> {
    /// The node.
    pub node: &'a NodeView,
    /// Its group under `concurrency.groupBy`; `None` without a per-group limit.
    pub group: Option<String>,
}

impl<'a> Starting<'a> {
    /// `node`, with its group under `config`.
    fn new(node: &'a NodeView, config: &Config) -> Self {
        Starting {
            node,
            group: group_of(node, config),
        }
    }

    /// The slot it takes in the lock: its name and group.
    pub fn slot(&self) -> (String, Option<String>) {
        (self.node.name.clone(), self.group.clone())
    }
}

/// What the Nodes and the lock alone decide of a pass's starts ([`start()`]).
pub struct Start<'a> {
    /// The hosts shutting down by themselves that wait for a slot: `maxNodes` and
    /// `concurrency.maxShutdownDrains` are taken. Each is drained only if a slot frees while
    /// logind holds its shutdown.
    pub deferred_shutdowns: Vec<&'a NodeView>,
    /// The hosts shutting down by themselves that are not drained: the lock is held by another
    /// holder (the snapshot's `foreign_holder`).
    pub undrained_shutdowns: Vec<&'a NodeView>,
    /// What follows.
    pub then: Then<'a>,
}

/// What follows the first look of [`start()`].
pub enum Then<'a> {
    /// Start these hosts shutting down by themselves now, oldest request first, and nothing
    /// else in this pass: the others are decided on the next, with these in flight.
    Shutdowns(Vec<Starting<'a>>),
    /// No node waits to start: nothing to read, and no blocker to say.
    NothingWaits,
    /// Nodes wait to start: read the blockers from outside the Nodes, then
    /// [`Queued::blockers_read`].
    Queued(Queued<'a>),
}

/// Nodes wait to start; the blockers from outside the Nodes are not read yet.
pub struct Queued<'a> {
    snap: Snapshot<'a>,
    config: &'a Config,
}

/// What keeps every waiting node from starting now, and when to look again.
#[derive(Debug)]
pub struct Blocked {
    /// The blockers: those the Nodes and the lock say first, then the alerts.
    pub blockers: Vec<Blocker>,
    /// When to look again at the latest ([`look_again`]): when a closed window opens, soon
    /// while alerts block, else a while later (a watched change wakes a pass sooner).
    pub look_again: DateTime<Utc>,
}

/// Nothing blocks: the pick, with the slots free now and the waiting nodes it looks at.
pub struct Pick<'a> {
    snap: Snapshot<'a>,
    config: &'a Config,
    free: usize,
    looked_at: Vec<&'a NodeView>,
}

/// What the budget-aware pick needs read before it decides ([`Pick::budget_reads`]).
pub struct BudgetReads<'p, 'a> {
    /// The waiting nodes the pick looks at, in its order: the budgets of their pods.
    pub looked_at: &'p [&'a NodeView],
    /// The nodes in flight that may still evict pods ([`draining`]): the budgets of theirs.
    pub draining: Vec<&'a str>,
    /// How many of `looked_at` to read the pods of, at most ([`reads_per_pass`]).
    pub reads: usize,
}

/// Which waiting nodes start now, which are held and why, and when to look again: the start
/// decided once nothing blocks ([`Pick::decide`]).
#[derive(Debug)]
pub struct StartPlan<'a> {
    /// The nodes to start now, in order: their slots are taken in one write.
    pub start: Vec<Starting<'a>>,
    /// Nodes started although a budget holds them: passed over for `concurrency.passOverFor`
    /// already.
    pub taken_anyway: Vec<(&'a NodeView, BudgetHold)>,
    /// The waiting nodes passed over because a budget of their pods holds them now, each with
    /// that budget.
    pub passed_over: Vec<(&'a NodeView, BudgetHold)>,
    /// The waiting nodes `nodes.minRebootInterval` holds, each with when it may start.
    pub resting: Vec<(&'a NodeView, DateTime<Utc>)>,
    /// When to look again at the latest, unless a watched change comes first: the soonest a
    /// resting node may start, or a passed-over one is taken anyway. `None`: only on a change.
    pub look_again: Option<DateTime<Utc>>,
}

/// The start of new nodes at `s.now`, as far as the Nodes and the lock decide it: the hosts
/// shutting down by themselves first ([`shutting_down`], within [`shutdown_room`]), then
/// whether any candidate waits. `s` comes without blocking pods nor budgets: the next stages
/// take them, when they need them.
pub fn start<'a>(s: &Snapshot<'a>, config: &'a Config) -> Start<'a> {
    let mut urgent = shutting_down(s, config);
    let deferred_shutdowns = urgent.split_off(shutdown_room(s, config).min(urgent.len()));
    let undrained_shutdowns = match s.foreign_holder {
        Some(_) => urgent,
        None if !urgent.is_empty() => {
            let start = urgent.into_iter().map(|n| Starting::new(n, config));
            return Start {
                deferred_shutdowns,
                undrained_shutdowns: Vec::new(),
                then: Then::Shutdowns(start.collect()),
            };
        }
        None => Vec::new(),
    };
    let waiting = s
        .nodes
        .iter()
        .any(|n| is_candidate(n, config) && !s.in_flight.contains_key(&n.name));
    let then = if waiting {
        Then::Queued(Queued { snap: *s, config })
    } else {
        Then::NothingWaits
    };
    Start {
        deferred_shutdowns,
        undrained_shutdowns,
        then,
    }
}

impl<'a> Queued<'a> {
    /// The blockers at `now` (the instant after the reads: a window that closed while they
    /// were answered is seen closed; it is also the start the lock records), with
    /// `blocking_pods` (each blocking selector as written, and how many pods match it) and the
    /// `alerts` read. `Err` when any holds: nothing starts. Else the pick, with the nodes it
    /// looks at.
    pub fn blockers_read(
        self,
        blocking_pods: &'a [(String, usize)],
        alerts: Vec<Blocker>,
        now: DateTime<Utc>,
    ) -> Result<Pick<'a>, Blocked> {
        let snap = Snapshot {
            blocking_pods,
            now,
            ..self.snap
        };
        let mut blocked = blockers(&snap, self.config, now);
        blocked.extend(alerts);
        if !blocked.is_empty() {
            return Err(Blocked {
                look_again: look_again(self.config, &blocked, now),
                blockers: blocked,
            });
        }
        let (free, looked_at) = looked_at(&snap, self.config);
        Ok(Pick {
            snap,
            config: self.config,
            free,
            looked_at,
        })
    }
}

impl<'a> Pick<'a> {
    /// What to read for the budget-aware pick; `None` without it (`concurrency.passOverFor`
    /// 0), or with no node to look at.
    pub fn budget_reads(&self) -> Option<BudgetReads<'_, 'a>> {
        (budget_aware(self.config) && !self.looked_at.is_empty()).then(|| BudgetReads {
            looked_at: &self.looked_at,
            draining: draining(&self.snap).collect(),
            reads: reads_per_pass(self.free),
        })
    }

    /// The plan, with the budgets [`Pick::budget_reads`] asked for (`None` when it asked for
    /// none).
    pub fn decide(self, headroom: Option<&'a Headroom>) -> StartPlan<'a> {
        let snap = Snapshot {
            headroom,
            ..self.snap
        };
        let config = self.config;
        let picked = pick_among(&snap, config, self.free, self.looked_at);
        let resting: Vec<(&NodeView, DateTime<Utc>)> = resting(&snap, config).collect();
        let pass_over_for = config.concurrency.pass_over_for.to_chrono();
        let taken_anyway_at = picked
            .passed_over
            .iter()
            .filter_map(|(n, _)| Some(n.passed_over.as_ref()?.since + pass_over_for));
        let look_again = resting
            .iter()
            .map(|(_, until)| *until)
            .chain(taken_anyway_at)
            .min();
        StartPlan {
            start: picked
                .nodes
                .into_iter()
                .map(|n| Starting::new(n, config))
                .collect(),
            taken_anyway: picked.taken_anyway,
            passed_over: picked.passed_over,
            resting,
            look_again,
        }
    }
}
