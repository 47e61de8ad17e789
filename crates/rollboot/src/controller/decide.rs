//! The controller's decisions, pure: what blocks new work, which flagged nodes start next, and
//! what each in-flight node's next step is.
//!
//! Owns candidate selection (`nodes.selector`, the exclude label, order, `maxNodes`, the per-group
//! limit), the blockers, the per-node state machine as a function of (node, lock entry,
//! config, now), which of a Node's states belong to the current cycle ([`this_cycle`]), the
//! in-flight record rebuilt from the Nodes when the lock's is lost ([`rebuild`]), and what is
//! said about malformed annotations ([`annotation_warnings`]) and failures ([`after_failure`]).
//! It must never do I/O or read a clock: the runtime in [`super`] feeds it what the cluster
//! says and carries out the step it returns.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;

use chrono::{DateTime, Utc};

use super::gate::record::GateRecord;
use super::room::{Claims, Held, Rooms};
use crate::config::{Config, NodeOrder, Phase};
use crate::hooks::decide::{self as hooks, Action};
use crate::lock::LockEntry;
use crate::node::{self as proto, NodeState, NodeView, Token};

/// Something that keeps new reboots from starting (in-flight nodes always finish).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Blocker {
    /// No maintenance window is open, or a blackout is in force.
    WindowClosed,
    /// The maintenance lock is held by another holder.
    LockHeldBy(String),
    /// Too many nodes outside maintenance are not Ready.
    TooManyUnready {
        /// The unready nodes.
        nodes: Vec<String>,
        /// `blockers.maxUnreadyNodes`.
        max: u32,
    },
    /// More failed nodes than `failures.maxFailures`.
    TooManyFailures {
        /// The failed nodes.
        nodes: Vec<String>,
        /// `failures.maxFailures`.
        max: u32,
    },
    /// Pods match a blocking selector.
    BlockingPods {
        /// The selector as written.
        selector: String,
        /// How many pods match.
        count: usize,
    },
    /// Alerts fire in Prometheus (`blockers.prometheus`).
    Alerts {
        /// The blocking alerts' names.
        names: Vec<String>,
    },
    /// Prometheus could not be asked: fail safe, nothing new starts.
    AlertsUnknown {
        /// The Prometheus URL.
        url: String,
        /// What went wrong.
        error: String,
    },
    /// Alertmanager has active alerts no silence or inhibition covers
    /// (`blockers.alertmanager`).
    AlertmanagerAlerts {
        /// Their names.
        names: Vec<String>,
    },
    /// Alertmanager could not be asked: fail safe, nothing new starts.
    AlertmanagerUnknown {
        /// Its URL.
        url: String,
        /// What went wrong.
        error: String,
    },
}

impl fmt::Display for Blocker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Blocker::WindowClosed => write!(f, "no maintenance window is open"),
            Blocker::LockHeldBy(h) => write!(f, "the maintenance lock is held by `{h}`"),
            Blocker::TooManyUnready { nodes, max } => write!(
                f,
                "{} node(s) not Ready ({}), at most {max} allowed",
                nodes.len(),
                nodes.join(", ")
            ),
            Blocker::TooManyFailures { nodes, max } => write!(
                f,
                "{} failed node(s) ({}), at most {max} tolerated: {CLEAR_FAILED} to resume",
                nodes.len(),
                nodes.join(", ")
            ),
            // The count comes from a list of one (rollboot asks whether any pod matches).
            Blocker::BlockingPods { selector, .. } => {
                write!(
                    f,
                    "at least one pod matches the blocking selector `{selector}`"
                )
            }
            Blocker::Alerts { names } => write!(
                f,
                "{} alert(s) firing in Prometheus: {}",
                names.len(),
                names.join(", ")
            ),
            Blocker::AlertsUnknown { url, error } => write!(
                f,
                "Prometheus at {url} could not be asked for alerts (blocking to be safe): {error}"
            ),
            Blocker::AlertmanagerAlerts { names } => write!(
                f,
                "{} alert(s) active in Alertmanager, not silenced nor inhibited: {}",
                names.len(),
                names.join(", ")
            ),
            Blocker::AlertmanagerUnknown { url, error } => write!(
                f,
                "Alertmanager at {url} could not be asked for alerts (blocking to be safe): {error}"
            ),
        }
    }
}

/// How an operator clears a failed node (the words every message about failures uses).
pub const CLEAR_FAILED: &str = "clear a failed node with `rollboot retry NODE`";

/// The flagged nodes whose `reboot-requested` is undated (`now` or any value that is not an
/// RFC 3339 instant, written by hand): the controller writes the instant it sees them in its
/// place, before it picks, so such a request takes its turn as of when it was first seen,
/// after every flag dated earlier and before every later one, across restarts and leaders.
pub fn undated_requests<'a>(nodes: impl IntoIterator<Item = &'a NodeView>) -> Vec<&'a NodeView> {
    nodes
        .into_iter()
        .filter(|n| n.request_undated && !n.deleting)
        .collect()
}

/// Whether a pass must read this node although it did not change: it may be picked (flagged,
/// which an undated request to be dated is too), block new starts (not Ready, failed), need
/// its PreferNoSchedule taint put on or taken off, or carry a rollboot annotation to warn about.
/// Every decision of a pass over the nodes this picks, plus those in the lock, is the decision
/// over every node; the controller keeps the set up to date as Nodes change
/// ([`crate::controller::node_cache::ViewCache::with_notable`]).
pub fn needs_a_look(n: &NodeView, config: &Config) -> bool {
    n.flagged()
        || n.shutdown_requested
        || n.passed_over.is_some()
        || !n.ready
        || n.state == Some(NodeState::Failed)
        || has_annotation_warnings(n)
        || config
            .hooks
            .prefer_no_schedule_taint
            .as_ref()
            .is_some_and(|key| n.taints.iter().any(|t| t.key == *key))
}

/// The Event reason of a node's failure, saying what failed by the state it failed in.
pub fn failure_event_reason(state: Option<NodeState>) -> &'static str {
    match state {
        Some(NodeState::Cordoning | NodeState::Draining) => "DrainFailed",
        Some(NodeState::Rebooting) => "RebootFailed",
        Some(NodeState::Verifying) => "HealthGateFailed",
        _ => "NodeFailed",
    }
}

/// The cluster as the controller sees it at one instant.
pub struct Snapshot<'a> {
    /// The Nodes: every one, or at least every one [`needs_a_look`] picks and every one in the
    /// lock. The others change no decision here, so a pass hands over only those (issue 14: a
    /// look at every Node per pass was a cost in the cluster's size).
    pub nodes: &'a [&'a NodeView],
    /// The nodes listed in the maintenance lock.
    pub in_flight: &'a BTreeMap<String, LockEntry>,
    /// Holder of the lock when it is someone other than rollboot.
    pub foreign_holder: Option<&'a str>,
    /// For each blocking pod selector (as written), how many pods match it.
    pub blocking_pods: &'a [(String, usize)],
    /// The instant the picks are made at (`nodes.minRebootInterval` and
    /// `concurrency.passOverFor` count to it).
    pub now: DateTime<Utc>,
    /// What the budget-aware pick knows (the budgets of the nodes it looks at, and of those in
    /// flight); `None`: nodes are taken in order only.
    pub rooms: Option<&'a Rooms>,
}

/// Everything that keeps new nodes from starting now; empty means "go".
pub fn blockers(s: &Snapshot<'_>, config: &Config, now: DateTime<Utc>) -> Vec<Blocker> {
    let mut out = Vec::new();
    if !config.schedule().is_allowed(now) {
        out.push(Blocker::WindowClosed);
    }
    if let Some(h) = s.foreign_holder {
        out.push(Blocker::LockHeldBy(h.to_string()));
    }
    let unready: Vec<String> = s
        .nodes
        .iter()
        .copied()
        .filter(|n| !n.ready && !s.in_flight.contains_key(&n.name))
        .map(|n| n.name.clone())
        .collect();
    if unready.len() > config.blockers.max_unready_nodes as usize {
        out.push(Blocker::TooManyUnready {
            nodes: unready,
            max: config.blockers.max_unready_nodes,
        });
    }
    let failed: Vec<String> = s
        .nodes
        .iter()
        .filter(|n| n.state == Some(NodeState::Failed))
        .map(|n| n.name.clone())
        .collect();
    if failed.len() > config.failures.max_failures as usize {
        out.push(Blocker::TooManyFailures {
            nodes: failed,
            max: config.failures.max_failures,
        });
    }
    for (selector, count) in s.blocking_pods {
        if *count > 0 {
            out.push(Blocker::BlockingPods {
                selector: selector.clone(),
                count: *count,
            });
        }
    }
    out
}

/// A node rollboot may start: flagged, selected, not excluded, not failed, not being deleted.
pub fn is_candidate(n: &NodeView, config: &Config) -> bool {
    n.flagged()
        && !n.excluded
        && !n.deleting
        && n.state != Some(NodeState::Failed)
        && config.node_selector().matches(&n.labels)
}

/// When a node rollboot rebooted less than `nodes.minRebootInterval` ago may start again;
/// `None` when it may now (no interval, no reboot on record, or long enough ago).
pub fn resting_until(n: &NodeView, config: &Config, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let interval = config.nodes.min_reboot_interval?;
    let until = n.history.last_reboot? + interval.to_chrono();
    (until > now).then_some(until)
}

/// The soonest instant a flagged node held only by `nodes.minRebootInterval` may start: when
/// the controller looks again.
pub fn next_rested(s: &Snapshot<'_>, config: &Config) -> Option<DateTime<Utc>> {
    s.nodes
        .iter()
        .filter(|n| !s.in_flight.contains_key(&n.name) && is_candidate(n, config))
        .filter_map(|n| resting_until(n, config, s.now))
        .min()
}

/// Sorts candidates in the order the controller takes them (`nodes.order`); `rollboot plan`
/// orders its preview with it too.
pub fn sort_candidates(candidates: &mut [&NodeView], order: NodeOrder) {
    candidates.sort_by(|a, b| take_order(a, b, order));
}

/// The order the controller takes candidates in: a total order (names are unique).
fn take_order(a: &NodeView, b: &NodeView, order: NodeOrder) -> std::cmp::Ordering {
    match order {
        NodeOrder::Name => a.name.cmp(&b.name),
        // Unparseable flag instants go last, then by name, so the order is total and stable.
        NodeOrder::OldestFlag => (a.flagged_at.is_none(), a.flagged_at, &a.name).cmp(&(
            b.flagged_at.is_none(),
            b.flagged_at,
            &b.name,
        )),
    }
}

/// The node's group under `concurrency.groupBy` (the label's value, empty when it has none),
/// `None` without a per-group limit: what a lock entry records when the node starts.
pub fn group_of(n: &NodeView, config: &Config) -> Option<String> {
    let (key, _) = config.group_limit()?;
    Some(n.labels.get(key).cloned().unwrap_or_default())
}

/// A failed node that rollboot cordoned and that is still cordoned: it is out of service
/// because of rollboot, so it takes one of `maxNodes`' slots (and of its group's) until an
/// operator clears it or `failures.returnToService` uncordons it. Capacity is capacity: an
/// operator reads `maxNodes` as the most nodes rollboot may take out at once.
pub fn holds_a_slot(n: &NodeView) -> bool {
    n.state == Some(NodeState::Failed) && n.unschedulable && n.cordoned_by.is_some() && !n.deleting
}

/// The failed nodes that [`holds_a_slot`] and are not in the lock (a node is failed, then
/// freed from the lock).
fn failed_holding<'a, 's>(s: &'s Snapshot<'a>) -> impl Iterator<Item = &'a NodeView> + 's {
    s.nodes
        .iter()
        .copied()
        .filter(|n| holds_a_slot(n) && !s.in_flight.contains_key(&n.name))
}

/// The nodes whose `rollboot.dev/passed-over` record is stale: no longer waiting (not a
/// candidate, or started without its cordon having removed it). Housekeeping removes it, so a
/// node flagged again later is not taken for one starved since long ago.
pub fn stale_passed_over<'a>(
    nodes: &[&'a NodeView],
    in_flight: &BTreeMap<String, LockEntry>,
    config: &Config,
) -> Vec<&'a NodeView> {
    nodes
        .iter()
        .copied()
        .filter(|n| n.passed_over.is_some())
        .filter(|n| {
            !is_candidate(n, config)
                || (in_flight.contains_key(&n.name) && n.state.is_some_and(|s| s.in_flight()))
        })
        .collect()
}

/// The failed nodes `failures.returnToService` uncordons now: each [`holds_a_slot`], is out
/// of the lock, and its host is up and Ready (no not-ready or unreachable taint): a node still
/// down in a reboot, or not back, stays cordoned, and so does a quarantined one.
pub fn returning_to_service<'a>(
    nodes: &[&'a NodeView],
    in_flight: &BTreeMap<String, LockEntry>,
    config: &Config,
) -> Vec<&'a NodeView> {
    if !config.failures.return_to_service {
        return Vec::new();
    }
    nodes
        .iter()
        .copied()
        .filter(|n| {
            holds_a_slot(n)
                && n.quarantined.is_none()
                && !in_flight.contains_key(&n.name)
                && n.ready
                && !n.not_ready_taint
        })
        .collect()
}

/// What [`pick_detail`] decided: the nodes to start now, in order, and the waiting nodes it
/// passed over because a budget of theirs holds them now.
#[derive(Debug, Default)]
pub struct Picked<'a> {
    /// The nodes to start, in order.
    pub nodes: Vec<&'a NodeView>,
    /// The nodes passed over, each with the budget that holds it.
    pub passed_over: Vec<(&'a NodeView, Held)>,
    /// Nodes taken although a budget holds them: passed over for `concurrency.passOverFor`
    /// already.
    pub taken_anyway: Vec<(&'a NodeView, Held)>,
}

/// How many waiting nodes, in order, the budget-aware pick looks at for `free` slots: enough
/// to find nodes whose budgets have room when the first ones share budgets with the nodes in
/// flight (siblings on consecutive nodes; or, spread as kube-scheduler lays them out, each
/// node's pods under ten budgets of which any may be busy: on issue 26's scenario about one
/// waiting node in fifteen has room at a given instant), bounded so that the pick looks at a
/// few nodes, not at the cluster. A pass reads the pods of at most [`reads_per_pass`] of them.
pub fn scan_window(free: usize) -> usize {
    free * 4 + 64
}

/// How many of the nodes the pick looks at a pass reads the pods of, at most (the first
/// not yet read, then the longest read ago): the others are known from an earlier pass, or
/// not yet (such a node is taken only for a slot no node known to have room could fill).
pub fn reads_per_pass(free: usize) -> usize {
    free * 4 + 16
}

/// Whether the budget-aware pick is on (`concurrency.passOverFor` above 0).
pub fn budget_aware(config: &Config) -> bool {
    config.concurrency.pass_over_for.is_positive()
}

/// The slots free now, and the waiting nodes the pick looks at, in its order: without the
/// budget-aware pick the first free slots' worth, with it the first [`scan_window`]'s worth
/// (the pass reads their pods). Empty when no slot is free.
pub fn looked_at<'a>(s: &Snapshot<'a>, config: &Config) -> (usize, Vec<&'a NodeView>) {
    let max = config.concurrency.max_nodes as usize;
    let busy = s.in_flight.len() + failed_holding(s).count();
    if busy >= max {
        return (0, Vec::new());
    }
    let free = max - busy;
    // Hashed: a lookup per candidate, thousands per pass in a rollout of every node.
    let started: HashSet<&str> = s.in_flight.keys().map(String::as_str).collect();
    let mut candidates: Vec<&NodeView> = s
        .nodes
        .iter()
        .copied()
        .filter(|n| {
            !started.contains(n.name.as_str())
                && is_candidate(n, config)
                && resting_until(n, config, s.now).is_none()
        })
        .collect();
    // Without a per-group limit only the first few are looked at: those are found without
    // sorting every candidate (a sort of thousands per pass in such a rollout).
    let window = if budget_aware(config) {
        scan_window(free)
    } else {
        free
    };
    if config.group_limit().is_none() && candidates.len() > window {
        let order = config.nodes.order;
        candidates.select_nth_unstable_by(window - 1, |a, b| take_order(a, b, order));
        candidates.truncate(window);
    }
    sort_candidates(&mut candidates, config.nodes.order);
    (free, candidates)
}

/// The flagged nodes to start now, in order, within `maxNodes` and the per-group limit: the
/// nodes in flight and the failed nodes rollboot left cordoned ([`holds_a_slot`]) take the
/// slots. Call only when [`blockers`] is empty.
pub fn pick<'a>(s: &Snapshot<'a>, config: &Config) -> Vec<&'a NodeView> {
    pick_detail(s, config).nodes
}

/// [`pick`], saying which nodes the budget-aware pick passed over and why: order stays the
/// first criterion, but a node whose drain a budget holds now (see [`Claims::held`]: the
/// budget has no disruption left once the nodes in flight and those picked before it are
/// counted) is passed over for the next one, unless it was first passed over
/// `concurrency.passOverFor` ago or more (its `rollboot.dev/passed-over`): then it is taken
/// anyway, so no node starves.
pub fn pick_detail<'a>(s: &Snapshot<'a>, config: &Config) -> Picked<'a> {
    let (free, candidates) = looked_at(s, config);
    pick_among(s, config, free, candidates)
}

/// [`pick_detail`] from what [`looked_at`] returned for `s` (`free` slots, `candidates` in
/// order): the pass asks for them first, to read their pods, and does not filter and order
/// every Node twice.
pub fn pick_among<'a>(
    s: &Snapshot<'a>,
    config: &Config,
    free: usize,
    candidates: Vec<&'a NodeView>,
) -> Picked<'a> {
    let max = config.concurrency.max_nodes as usize;
    let mut out = Picked::default();
    if free == 0 {
        return out;
    }
    let mut busy = max - free;
    let group = config.group_limit();
    let group_of = |n: &NodeView, key: &str| n.labels.get(key).cloned().unwrap_or_default();
    let mut per_group: HashMap<String, usize> = HashMap::new();
    // Nodes in the lock whose Node is gone and whose entry names no group (written before
    // entries named one): they count in every group, as their host may be down in any.
    let mut anywhere = 0;
    if let Some((key, _)) = group {
        // Built only for a per-group limit: an index of every Node per pick was a cost in the
        // cluster's size (issue 14).
        let by_name: HashMap<&str, &NodeView> =
            s.nodes.iter().map(|n| (n.name.as_str(), *n)).collect();
        for (name, entry) in s.in_flight {
            // A Node gone mid-cycle keeps its slot (see `next_step`), and its group with it.
            match (by_name.get(name.as_str()), &entry.group) {
                (Some(n), _) => *per_group.entry(group_of(n, key)).or_default() += 1,
                (None, Some(g)) => *per_group.entry(g.clone()).or_default() += 1,
                (None, None) => anywhere += 1,
            }
        }
        for n in failed_holding(s) {
            *per_group.entry(group_of(n, key)).or_default() += 1;
        }
    }
    // FleetLock groups with a `maxNodes` of their own: their hosts in flight, by group.
    let fl_limits = fleetlock_limits(config);
    let fl_group = |n: &NodeView| -> Option<String> {
        let g = &n.fleetlock.as_ref().filter(|_| n.hands_off())?.group;
        fl_limits.contains_key(g.as_str()).then(|| g.clone())
    };
    if !fl_limits.is_empty() {
        for n in s.nodes.iter().filter(|n| s.in_flight.contains_key(&n.name)) {
            if let Some(g) = fl_group(n) {
                *per_group.entry(fl_key(&g)).or_default() += 1;
            }
        }
    }
    let rooms = s.rooms.filter(|_| budget_aware(config));
    let mut claims = match rooms {
        Some(r) => Claims::in_flight(r, draining(s)),
        None => Claims::default(),
    };
    let pass_over_for = config.concurrency.pass_over_for.to_chrono();
    let fits = |n: &NodeView, per_group: &HashMap<String, usize>| {
        let in_group = match group {
            Some((key, limit)) => {
                per_group.get(&group_of(n, key)).copied().unwrap_or(0) + anywhere < limit as usize
            }
            None => true,
        };
        in_group
            && fl_group(n).is_none_or(|g| {
                per_group.get(&fl_key(&g)).copied().unwrap_or(0) < fl_limits[g.as_str()] as usize
            })
    };
    // The nodes a budget holds, in order: passed over for later ones with room. And the nodes
    // whose pods were not read yet: taken, in order, only for a slot left after the held ones.
    let mut held_back: Vec<(&NodeView, Held)> = Vec::new();
    let mut unread: Vec<&NodeView> = Vec::new();
    let take = |n: &'a NodeView,
                busy: &mut usize,
                per_group: &mut HashMap<String, usize>,
                claims: &mut Claims,
                out: &mut Picked<'a>| {
        if let Some(r) = rooms {
            claims.take(&n.name, r);
        }
        if let Some((key, _)) = group {
            *per_group.entry(group_of(n, key)).or_default() += 1;
        }
        if let Some(g) = fl_group(n) {
            *per_group.entry(fl_key(&g)).or_default() += 1;
        }
        *busy += 1;
        out.nodes.push(n);
    };
    for n in candidates {
        if busy >= max {
            break;
        }
        if !fits(n, &per_group) {
            continue;
        }
        if let Some(r) = rooms {
            if !r.nodes.contains_key(&n.name) {
                unread.push(n);
                continue;
            }
            let recorded = n.passed_over.as_ref().map(|p| p.budget.as_str());
            if let Some(held) = claims.held_keeping(&n.name, r, recorded) {
                let starved = n
                    .passed_over
                    .as_ref()
                    .is_some_and(|p| s.now - p.since >= pass_over_for);
                if !starved {
                    held_back.push((n, held));
                    continue;
                }
                out.taken_anyway.push((n, held));
            }
        }
        take(n, &mut busy, &mut per_group, &mut claims, &mut out);
    }
    // Slots no node with room could fill go to the held ones: an idle slot does nothing, a
    // drain held on one budget evicts its other pods meanwhile. Those whose drains would wait
    // least first (issue 26: refused evictions per 200-node run fell from 78-99 to 58-76), in
    // order otherwise (the sort is stable). Only those left then were passed over for a node
    // with room.
    if let Some(r) = rooms {
        held_back.sort_by_cached_key(|(n, _)| claims.hold_weight(&n.name, r));
    }
    for (n, held) in held_back {
        if busy < max && fits(n, &per_group) {
            take(n, &mut busy, &mut per_group, &mut claims, &mut out);
        } else {
            out.passed_over.push((n, held));
        }
    }
    for n in unread {
        if busy < max && fits(n, &per_group) {
            take(n, &mut busy, &mut per_group, &mut claims, &mut out);
        }
    }
    out
}

/// The FleetLock groups that declare a `maxNodes` of their own, with it.
pub fn fleetlock_limits(config: &Config) -> BTreeMap<&str, u32> {
    config
        .fleetlock
        .iter()
        .flat_map(|f| &f.groups)
        .filter_map(|(name, g)| Some((name.as_str(), g.max_nodes?)))
        .collect()
}

/// The key a FleetLock group's count takes beside the label groups' (a label value cannot
/// start with a NUL).
fn fl_key(group: &str) -> String {
    format!("\0fleetlock/{group}")
}

/// The nodes in the lock that may still evict pods: not yet past their drain.
pub fn draining<'a>(s: &Snapshot<'a>) -> impl Iterator<Item = &'a str> + 'a {
    let in_flight = s.in_flight;
    s.nodes
        .iter()
        .copied()
        .filter(move |n| in_flight.contains_key(&n.name))
        // Just started (no state yet, or the last cycle's), cordoning or draining.
        .filter(|n| !matches!(n.state, Some(NodeState::Rebooting | NodeState::Verifying)))
        .map(|n| n.name.as_str())
}

/// How long a step waits, at most, for the node-lifecycle controller to copy a cordon or an
/// uncordon into the `unschedulable` taint before writing again. That copy changes the Node's
/// resourceVersion a few milliseconds after rollboot's write, so a write decided before it
/// arrives is refused with 409 and decided again: a wasted round trip on every cycle. Bounded,
/// because a cluster whose controller-manager is down (or which runs without that controller)
/// never writes the taint, and the rollout must not hang on it.
pub const LIFECYCLE_SETTLE: chrono::Duration = chrono::Duration::seconds(2);

/// The next thing to do for a node listed in the lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Write `state: cordoning` and cordon; record `cordoned-by` unless an operator had cordoned it.
    Cordon {
        /// Whether rollboot owns the cordon (and so will uncordon).
        record_cordoned_by: bool,
    },
    /// Write `state: draining` (if not yet) and drain until the deadline.
    Drain {
        /// When the drain times out.
        deadline: DateTime<Utc>,
    },
    /// Write `state: rebooting`, `boot-id-before`, a fresh `reboot` token and its attempt
    /// number: the agent reported the previous token lost (it died between its ack and the
    /// reboot), so a new token, a new and single reboot, is issued.
    RequestReboot {
        /// Which request of the cycle this is (2 for the first new token).
        attempt: u32,
    },
    /// Hand the reboot to the host itself: write `state: rebooting`, `boot-id-before` and
    /// `handed-off`, and no token. A FleetLock host's next `pre-reboot` is answered 200; a host
    /// shutting down by itself is let go by its agent (the Node says drained).
    HandOff,
    /// The host of a cycle for its own shutdown went down before the drain was over and is on
    /// a new boot (saying so): write `state: rebooting` with `handed-off` and `undrained`, so
    /// the cycle goes on to verify it and ends counted as undrained. Nothing more is evicted.
    Overtaken(String),
    /// End the cycle without a reboot (the host gave its FleetLock slot back before it
    /// rebooted, saying why): uncordon if rollboot cordoned it, remove the cycle's keys and the
    /// host's request, and free the slot.
    Release(String),
    /// Nothing to do until the node comes back (or the deadline passes).
    AwaitReboot {
        /// When the reboot times out.
        deadline: DateTime<Utc>,
    },
    /// The node is back with a new boot ID and Ready: write `state: verifying`.
    MarkVerifying,
    /// Uncordon (rollboot cordoned it).
    Uncordon,
    /// Wait for the health gate, then finish.
    HealthGate {
        /// When the gate times out.
        deadline: DateTime<Utc>,
    },
    /// Nothing to do until the node-lifecycle controller has copied the cordon or uncordon into
    /// its taint (a watched change), or until this instant.
    Settle {
        /// When to go on without it.
        until: DateTime<Utc>,
    },
    /// Nothing to do, and the slot stays taken, until the node's Node says more (a watched
    /// change) or until this instant.
    Hold {
        /// When to look again.
        until: DateTime<Utc>,
        /// Why the slot is held.
        why: String,
    },
    /// A hook step at `phase` (see [`crate::hooks::decide`]): its write first, then its act.
    Hook {
        /// The phase.
        phase: Phase,
        /// What to record and do.
        action: Action,
    },
    /// Write `state: failed` with the reason, and free the slot.
    Fail(String),
    /// A hook held the node past its phase's timeout: as [`Step::Fail`], said as a hook's
    /// failure (Event `HookFailed`).
    FailHook {
        /// The phase that held it.
        phase: Phase,
        /// Why.
        reason: String,
    },
    /// Free the node's slot in the lock.
    Free(String),
}

/// How many reboot tokens one cycle may issue: the first, and a new one each time the agent
/// reports the previous one lost (acknowledged, then the agent restarted on the same boot).
/// When they are spent the node fails, saying so.
pub const REBOOT_ATTEMPTS: u32 = 3;

/// The agent acknowledged the current token: its reboot is under way, happened, or was lost.
fn acknowledged(n: &NodeView) -> bool {
    n.reboot_token.is_some() && n.reboot_token == n.reboot_ack
}

/// The agent acknowledged the current token, then reported it lost, and the node's boot ID is
/// still the one from before the request: nothing rebooted and nothing will for this token.
fn reboot_lost(n: &NodeView) -> bool {
    acknowledged(n)
        && n.reboot_lost == n.reboot_token
        && n.boot_id_before
            .as_deref()
            .is_some_and(|b| !n.booted_since(b))
}

/// What a Node's reboot annotations say of the reboot of the cycle `entry` started, whatever
/// its `state` says: a token once issued and taken is never followed by another for the same
/// cycle unless the agent reported it lost on an unchanged boot (see [`reboot_lost`]).
#[derive(Clone, Debug, PartialEq, Eq)]
enum RebootFacts {
    /// No token of this cycle that the agent took or may still take.
    None,
    /// A token of this cycle, issued at `issued` with `boot-id-before` on a cordoned node (or
    /// already taken by the agent): the cycle is at its reboot, and the reboot may be under way.
    Asked {
        /// The token.
        token: String,
        /// When it was issued (the instant `rebooting` was written with it).
        issued: DateTime<Utc>,
    },
    /// The agent acknowledged a token of this cycle, but `boot-id-before` is missing or
    /// malformed: whether the host rebooted cannot be verified, and asking again could
    /// reboot it a second time.
    Unverifiable {
        /// The token.
        token: String,
    },
}

/// The reboot facts of `n` for the cycle `entry` started.
fn reboot_facts(n: &NodeView, entry: &LockEntry) -> RebootFacts {
    // A reboot handed to the host (no token: the host reboots itself) once asked is asked,
    // cordoned or not: the host may be rebooting now, and starting over would drain a node
    // that is going down anyway and hand it over a second time.
    if let Some(issued) = n.handed_off_at().filter(|t| *t >= entry.since) {
        if n.boot_id_before.is_some() {
            return RebootFacts::Asked {
                token: String::new(),
                issued,
            };
        }
    }
    let Some(token) = n
        .reboot_token
        .as_deref()
        .and_then(Token::parse)
        .filter(|t| t.issued >= entry.since)
    else {
        return RebootFacts::None;
    };
    let taken = acknowledged(n);
    match &n.boot_id_before {
        // Uncordoned before the agent took the token, or after it reported it lost: the agent
        // refuses it (it acts only on a cordoned node), so the cycle may start over; the
        // cordon's write is conditional on this version, so an ack that lands first wins.
        Some(_) if !n.unschedulable && (!taken || reboot_lost(n)) => RebootFacts::None,
        Some(_) => RebootFacts::Asked {
            token: token.text,
            issued: token.issued,
        },
        None if taken => RebootFacts::Unverifiable { token: token.text },
        // Not taken and nothing to verify against: starting over (fenced) is safe.
        None => RebootFacts::None,
    }
}

/// Where a node listed in the lock stands in the cycle its entry started, as the cluster says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Position {
    /// In `state` since the instant given.
    At(NodeState, DateTime<Utc>),
    /// Nothing of this cycle that rollboot would go on from: it starts over from the cordon.
    StartOver,
    /// The agent took a reboot token of this cycle (named) that cannot be verified (see
    /// [`RebootFacts::Unverifiable`]): the node fails rather than be asked again.
    Unverifiable(String),
}

/// Where the node stands in the cycle that `entry` started (see [`Position`]), from what
/// rollboot writes in this cycle:
/// - `failed`, and `done` (written with `boot-id-before` removed), dated in this cycle, end it;
/// - a reboot token issued in this cycle with `boot-id-before` (or taken by the agent) puts the
///   cycle at its reboot, whatever `state` says (garbled, or gone backwards to `cordoning` or
///   `draining`): `verifying` when that is written and the boot ID changed, else `rebooting`
///   since the token's instant. Starting over there would issue a second token, a second
///   reboot of a host that may already be back;
/// - otherwise a state and its `state-since` (rollboot writes both in one patch) no older than
///   the entry, that agrees with what rollboot writes along with it: `draining` on a cordoned
///   node only; `verifying` once the boot ID differs from `boot-id-before` (`rebooting` always
///   comes with this cycle's token).
///
/// Anything else (a stale state from an earlier cycle, or one forged or garbled before any
/// token) starts over from the cordon: rollboot never drains, or asks for the reboot of, a node
/// that is not cordoned.
pub fn position(n: &NodeView, entry: &LockEntry) -> Position {
    let written = n
        .state
        .zip(n.state_since)
        .filter(|(_, since)| *since >= entry.since);
    match written {
        Some((NodeState::Failed, since)) => return Position::At(NodeState::Failed, since),
        Some((NodeState::Done, since)) if n.boot_id_before.is_none() => {
            return Position::At(NodeState::Done, since)
        }
        _ => {}
    }
    match reboot_facts(n, entry) {
        RebootFacts::Unverifiable { token } => return Position::Unverifiable(token),
        RebootFacts::Asked { issued, .. } => {
            return match written {
                Some((NodeState::Verifying, since)) if n.came_back() => {
                    Position::At(NodeState::Verifying, since)
                }
                _ => Position::At(NodeState::Rebooting, issued),
            }
        }
        RebootFacts::None => {}
    }
    let Some((state, since)) = written else {
        return Position::StartOver;
    };
    let agrees = match state {
        NodeState::Cordoning | NodeState::Failed => true,
        NodeState::Draining => n.unschedulable,
        // Without this cycle's token (the facts above): forged, stale or half-written.
        NodeState::Rebooting | NodeState::Done => false,
        NodeState::Verifying => n.came_back(),
    };
    if agrees {
        Position::At(state, since)
    } else {
        Position::StartOver
    }
}

/// The node's state in the cycle that `entry` started, as [`position`] reads it; `None` when
/// the cycle starts over (or cannot go on).
pub fn this_cycle(n: &NodeView, entry: &LockEntry) -> Option<NodeState> {
    match position(n, entry) {
        Position::At(state, _) => Some(state),
        Position::StartOver | Position::Unverifiable(_) => None,
    }
}

/// When the `state` written on a node listed in the lock is not where its cycle stands (a
/// garbled value, or one gone backwards behind a reboot token of this cycle), the sentence
/// that says so: what was found, what is read instead, and why. `None` when they agree, or
/// when the cycle starts over anyway.
pub fn state_contradiction(n: &NodeView, entry: &LockEntry) -> Option<String> {
    let RebootFacts::Asked { token, issued } = reboot_facts(n, entry) else {
        return None;
    };
    let Position::At(read, _) = position(n, entry) else {
        return None;
    };
    if n.state == Some(read) {
        return None;
    }
    let found = match n.state {
        Some(s) => format!("`{s}`"),
        None => "not a state".to_string(),
    };
    if token.is_empty() {
        return Some(format!(
            "node {}: annotation {} is {found} while its reboot was handed to its host at {} \
             ({} {}): read as {read}; the host reboots itself, nothing is asked again",
            n.name,
            proto::STATE,
            crate::time::annotation(issued),
            proto::BOOT_ID_BEFORE,
            n.boot_id_before.as_deref().unwrap_or_default(),
        ));
    }
    Some(format!(
        "node {}: annotation {} is {found} while its cycle holds reboot token {token} (issued \
         {}, {} {}{}): read as {read}; no second token is issued for this cycle unless the \
         agent reports this one lost with the boot ID unchanged",
        n.name,
        proto::STATE,
        crate::time::annotation(issued),
        proto::BOOT_ID_BEFORE,
        n.boot_id_before.as_deref().unwrap_or_default(),
        if acknowledged(n) {
            ", acknowledged by the agent"
        } else {
            ""
        },
    ))
}

/// The agent's refusal of the node's current reboot token, if it wrote one the controller
/// takes: once the agent acknowledged the token, only its reboot command failing
/// (`rebootCommandFailed`). Any other refusal of an acknowledged token (an agent restarted on
/// a boot its kubelet has not reported yet, an ack garbled since) says nothing of the reboot
/// that is under way or happened: the boot ID says that, or the reboot timeout does.
fn refused(n: &NodeView) -> Option<&proto::Refusal> {
    n.reboot_refused
        .as_ref()
        .filter(|r| n.reboot_token.as_deref() == Some(r.token.as_str()))
        .filter(|r| !acknowledged(n) || r.cause == proto::RefusalCause::RebootCommandFailed)
}

/// Why a reboot handed to the host did not end in time.
fn handed_timeout_reason(n: &NodeView, config: &Config) -> String {
    let within = config.reboot.timeout;
    let before = n.boot_id_before.as_deref().unwrap_or_default();
    if !n.booted_since(before) {
        format!(
            "the host was given its reboot (it reboots itself) but its boot ID is still {before} \
             after {within}: it did not reboot, or is still down"
        )
    } else if !n.ready {
        format!(
            "the host rebooted (boot ID {before} -> {}) but the node is not Ready within {within}",
            n.boot_id
        )
    } else {
        format!(
            "the host rebooted and is Ready, but the node-lifecycle controller still had its \
             not-ready or unreachable taint on it after {within}"
        )
    }
}

/// Why a reboot did not end in time, from what did and did not happen.
fn reboot_timeout_reason(n: &NodeView, config: &Config) -> String {
    let within = config.reboot.timeout;
    let token = n.reboot_token.as_deref().unwrap_or_default();
    let before = n.boot_id_before.as_deref().unwrap_or_default();
    if !acknowledged(n) {
        let ack = if n.is_malformed(proto::REBOOT_ACK) {
            format!(
                " ({} is malformed, so the agent acts on no token)",
                proto::REBOOT_ACK
            )
        } else {
            String::new()
        };
        match refused(n) {
            Some(r) => format!(
                "the agent did not acknowledge reboot token {token} within {within}{ack}: it \
                 refused it ({}): {}",
                r.cause, r.reason
            ),
            None => format!(
                "the agent did not acknowledge reboot token {token} within {within}{ack}: it is \
                 not running, or it refused the token (see the node's RebootRefused Events)"
            ),
        }
    } else if n.boot_id.is_empty() {
        format!("the node reports no boot ID {within} after the agent acknowledged reboot token {token}")
    } else if !n.booted_since(before) {
        format!(
            "the agent acknowledged reboot token {token}, but the node's boot ID is still \
             {before} after {within}: the host did not reboot, or is still down"
        )
    } else if !n.ready {
        format!(
            "the node rebooted (boot ID {before} -> {}) but is not Ready within {within}",
            n.boot_id
        )
    } else {
        format!(
            "the node rebooted and is Ready, but the node-lifecycle controller still had its \
             not-ready or unreachable taint on it after {within}"
        )
    }
}

/// The per-node state machine: from what the cluster says, the next step. Idempotent: the same
/// inputs give the same step, so a step interrupted at any point is simply decided again.
pub fn next_step(
    node: Option<&NodeView>,
    entry: &LockEntry,
    config: &Config,
    now: DateTime<Utc>,
) -> Step {
    // The longest a host can be out of service in a cycle that started at `entry.since`: its
    // drain, then its reboot, each to its timeout.
    let out_until =
        entry.since + config.drain.timeout.to_chrono() + config.reboot.timeout.to_chrono();
    let Some(n) = node.filter(|n| !n.deleting) else {
        // A Node deleted mid-cycle says nothing of its host, which may be down in the reboot
        // asked of it and register its Node again NotReady: freeing the slot at once let
        // another node start beside it (the chaos campaign, seed 616: 3 out with maxNodes 2).
        let gone = if node.is_some() {
            "is being deleted"
        } else {
            "was deleted from the cluster"
        };
        return if now < out_until {
            Step::Hold {
                until: out_until,
                why: format!("the node {gone} while in maintenance; its host may still be draining or rebooting"),
            }
        } else {
            Step::Free(format!(
                "the node {gone} and was not registered again within the drain and reboot timeouts ({} + {}) of its start",
                config.drain.timeout, config.reboot.timeout
            ))
        };
    };
    let position = position(n, entry);
    if position == Position::StartOver && n.state.is_none() && !n.flagged() && !n.shutdown_requested
    {
        // No trace of this cycle and nothing asked: a Node registered again (its annotations
        // went with the old object) after its host rebooted (the agent does not flag it again:
        // its sentinel went with the reboot). Starting over would reboot it a second time. It
        // keeps its slot until it is Ready, as any node coming back from a reboot. (A node
        // whose reboot token of this cycle is on it has a position: it is never taken for one
        // registered again, whatever its `state` reads.)
        if n.ready && !n.not_ready_taint {
            return Step::Free(
                "the node was registered again, Ready, and asks for no reboot".into(),
            );
        }
        return if now < out_until {
            Step::Hold {
                until: out_until,
                why: "the node was registered again and is not Ready yet".into(),
            }
        } else {
            Step::Fail(format!(
                "the node was registered again during its cycle and was not Ready within the drain and reboot timeouts ({} + {}) of its start",
                config.drain.timeout, config.reboot.timeout
            ))
        };
    }
    let (current, since) = match position {
        Position::At(state, since) => (state, since),
        Position::StartOver => return cordon_step(n, entry.since, now),
        Position::Unverifiable(token) => {
            return Step::Fail(format!(
                "the agent acknowledged reboot token {token} of this cycle, but {} is missing \
                 or malformed: whether the host rebooted cannot be verified, and asking again \
                 could reboot it twice; no new token is issued",
                proto::BOOT_ID_BEFORE
            ))
        }
    };
    // The host of a shutdown cycle went down before the drain was over and is back: nothing
    // is left to drain for that shutdown; the cycle is at its reboot, undrained. The reason
    // for the reboot went away before it (its host's shutdown cancelled, a FleetLock host's
    // slot given back): the cycle ends now, mid-drain too. Evicting more pods for a reboot
    // that will not happen, or that happened, is disruption for nothing.
    if matches!(current, NodeState::Cordoning | NodeState::Draining) {
        // Just cordoned: whatever ends the cycle now waits for the node-lifecycle controller's
        // taint first (a write decided before it lands is refused with 409).
        if current == NodeState::Cordoning && n.unschedulable {
            if let Some(wait) = settling(n, since, now) {
                return wait;
            }
        }
        if let Some(why) = overtaken(n) {
            return Step::Overtaken(why);
        }
        if let Some(why) = abandoned(n, entry.since) {
            return Step::Release(why);
        }
        if let Some(why) = shutdown_not_followed(n, config, now) {
            return Step::Release(why);
        }
    }
    let hook = |phase: Phase| hook_step(phase, config, n, since, now);
    match current {
        NodeState::Done => hook(Phase::AfterDone).unwrap_or(Step::Free("its cycle is done".into())),
        NodeState::Failed => Step::Free("it failed".into()),
        NodeState::Cordoning if !n.unschedulable => cordon_step(n, entry.since, now),
        NodeState::Cordoning => settling(n, since, now)
            .or_else(|| hook(Phase::BeforeDrain))
            .unwrap_or(Step::Drain {
                deadline: now + config.drain.timeout.to_chrono(),
            }),
        // Drained (the drain began the afterDrain phase): its hooks, then the reboot. The
        // drain's timeout is over; the phase's own holds the node now.
        NodeState::Draining if hooks::phase_record(n, Phase::AfterDrain, since).is_some() => {
            hook(Phase::AfterDrain).unwrap_or_else(|| reboot_step(n, entry.since))
        }
        NodeState::Draining => {
            let deadline = since + config.drain.timeout.to_chrono();
            if now >= deadline && !config.drain.force_delete_after_timeout {
                Step::Fail(format!(
                    "the drain did not finish within {}",
                    config.drain.timeout
                ))
            } else {
                Step::Drain { deadline }
            }
        }
        NodeState::Rebooting => rebooting_step(n, since, config, now),
        NodeState::Verifying => verifying_step(n, since, config, now),
    }
}

/// The reboot of a drained node past its afterDrain hooks: a token to the agent, or, for a
/// host that reboots itself, the hand-off (or the end without a reboot, when the host gave
/// its slot back in this cycle or no longer asks).
///
/// `start`: when the cycle started (its lock entry's instant). The drain's end asks it too,
/// when no afterDrain hooks come first.
pub fn reboot_step(n: &NodeView, start: DateTime<Utc>) -> Step {
    // Its host shut down by itself and is back: never a token for a reboot that happened.
    if let Some(why) = overtaken(n) {
        return Step::Overtaken(why);
    }
    // Its host shuts down by itself: handed over once drained, whatever started the cycle.
    if n.shutdown_requested {
        return Step::HandOff;
    }
    if let Some(why) = abandoned(n, start) {
        return Step::Release(why);
    }
    if n.hands_off() {
        Step::HandOff
    } else {
        Step::RequestReboot { attempt: 1 }
    }
}

/// Why a cycle (started at `start`) before its reboot no longer has a reason for one: its
/// host's shutdown was cancelled, or its FleetLock host gave its slot back. `None` while it
/// has one. Its host shutting down again (`shutdown-requested`) is a reason, whatever came
/// before.
pub fn abandoned(n: &NodeView, start: DateTime<Utc>) -> Option<String> {
    if n.shutdown_requested {
        return None;
    }
    if n.for_shutdown() {
        // Back on a new boot, the request removed by the agent of that boot: the shutdown
        // happened ([`overtaken`]), it was not cancelled.
        if n.came_back() {
            return None;
        }
        return Some(shutdown_cancelled(n));
    }
    given_back(n, start)
}

/// Why a cycle for its host's own shutdown is at its reboot before its drain was over, if it
/// is: the host went down and is back on a new boot (its agent let it go at logind's limit,
/// or was killed with the node's pods by the kubelet's graceful node shutdown, or there was
/// no inhibitor at all).
pub fn overtaken(n: &NodeView) -> Option<String> {
    if !n.for_shutdown() || n.handed_off.is_some() || !n.came_back() {
        return None;
    }
    Some(format!(
        "its host shut down by itself before the drain was over: the node is on a new boot \
         ({} -> {}) with the pods that were left on it gone down with the host, budgets not \
         kept{}",
        proto::boot_words(
            n.boot_id_before.as_deref().unwrap_or_default(),
            n.init_start_before
        ),
        n.boot_words(),
        if kubelet_first(n) {
            " (the kubelet's graceful node shutdown is on there: it kills the pods at once, \
             without evictions)"
        } else {
            ""
        }
    ))
}

/// Whether the agent says the kubelet holds a shutdown inhibitor on the node (its graceful
/// node shutdown goes first).
fn kubelet_first(n: &NodeView) -> bool {
    n.agent_host
        .as_ref()
        .is_some_and(|h| h.shutdown_drain == proto::ShutdownDrain::Kubelet)
}

/// Why a cycle for its host's own shutdown, handed back to the host at `now`, is not drained,
/// if it is not: the kubelet's graceful node shutdown killed the node's pods without evictions
/// the moment the shutdown began (the agent says the kubelet holds a shutdown inhibitor),
/// whatever the drain then found to evict; or logind's delay ran out before the drain was over
/// (the agent lets its inhibitor go a margin before logind's limit, counted from its request:
/// the host went down with what was left, and may still be going down now). `None` for any
/// other cycle, or where the agent wrote no delay.
pub fn undrained_at_hand_off(n: &NodeView, now: DateTime<Utc>) -> Option<String> {
    if !n.for_shutdown() {
        return None;
    }
    if kubelet_first(n) {
        return Some(
            "the kubelet's graceful node shutdown is on: it killed the node's pods without \
             evictions when the shutdown began, before rollboot's drain, so the budgets were not \
             kept (set the kubelet's shutdownGracePeriod to 0s for rollboot to drain first)"
                .to_string(),
        );
    }
    let delay = n.agent_host.as_ref()?.inhibit_delay_seconds?;
    let asked = n.shutdown_requested_at?;
    let hold = crate::agent::logind::decide::release_after(std::time::Duration::from_secs(delay));
    let released = asked + chrono::TimeDelta::from_std(hold).ok()?;
    (now >= released).then(|| {
        format!(
            "logind waits at most {delay}s for the agent's inhibitor: the agent let the shutdown \
             go at {} with the drain not over, and the host went down with what was left on it \
             (raise InhibitDelayMaxSec)",
            crate::time::annotation(released)
        )
    })
}

/// Why a cycle started for a shutdown ends without a reboot: the agent removed its request
/// (the shutdown was cancelled, or the agent started again on the same boot).
fn shutdown_cancelled(n: &NodeView) -> String {
    format!(
        "its host's shutdown was cancelled ({} removed by the agent on boot {})",
        proto::SHUTDOWN_REQUESTED,
        n.boot_id
    )
}

/// How many of [`shutting_down`]'s nodes may start now: past `maxNodes`, at most
/// `concurrency.maxShutdownDrains` in flight beyond it. Five agents writing a request at once
/// (with no shutdown behind them) had five nodes cordoned and draining with `maxNodes: 1`.
pub fn shutdown_room(s: &Snapshot<'_>, config: &Config) -> usize {
    let cap =
        config.concurrency.max_nodes as usize + config.concurrency.max_shutdown_drains as usize;
    cap.saturating_sub(s.in_flight.len())
}

/// The nodes whose host shuts down by itself (`shutdown-requested`) and that are not in
/// flight: started at once, whatever the windows, the blockers and `maxNodes` (they count in
/// it for the others), since the shutdown happens anyway, within [`shutdown_room`] (oldest
/// request first). Not a node excluded, outside `nodes.selector`, failed or being deleted.
pub fn shutting_down<'a>(s: &Snapshot<'a>, config: &Config) -> Vec<&'a NodeView> {
    let mut v: Vec<&NodeView> = s
        .nodes
        .iter()
        .copied()
        .filter(|n| n.shutdown_requested && !s.in_flight.contains_key(&n.name))
        .filter(|n| !n.excluded && !n.deleting && n.state != Some(NodeState::Failed))
        .filter(|n| config.node_selector().matches(&n.labels))
        .collect();
    v.sort_by(|a, b| (a.shutdown_requested_at, &a.name).cmp(&(b.shutdown_requested_at, &b.name)));
    v
}

/// Whether the node has stayed up on the boot it had before its reboot (`before`) since
/// `since`: Ready now, not tainted not-ready, on the same boot, and Ready since at or before
/// `since` (no NotReady since). Unknown when Ready came is not up: nothing ends on a guess.
fn stayed_up(n: &NodeView, since: DateTime<Utc>, before: &str) -> bool {
    n.ready
        && !n.not_ready_taint
        && (before.is_empty() || !n.booted_since(before))
        && n.ready_since.is_some_and(|r| r <= since)
}

/// logind's delay for a host's shutdown: its agent's request says it, else its `agent-host`;
/// without either, the reboot timeout (the longest rollboot waits for any reboot).
fn shutdown_delay(n: &NodeView, config: &Config) -> chrono::TimeDelta {
    n.shutdown_delay_seconds
        .or_else(|| n.agent_host.as_ref()?.inhibit_delay_seconds)
        .and_then(|s| chrono::TimeDelta::try_seconds(i64::try_from(s).ok()?))
        .unwrap_or_else(|| config.reboot.timeout.to_chrono())
}

/// Why a shutdown cycle ends as cancelled although its agent's request is still there: no
/// shutdown followed `what` (at `at`).
fn not_followed(n: &NodeView, what: &str, at: DateTime<Utc>, config: &Config) -> String {
    format!(
        "its host's shutdown was cancelled: the node stayed Ready on boot {} for {} after {what}          at {} ({} still there, written by the agent, but no shutdown followed)",
        n.boot_words(),
        config.reboot.ready_without_reboot_for,
        crate::time::annotation(at),
        proto::SHUTDOWN_REQUESTED
    )
}

/// Why a cycle for its host's shutdown, not handed back yet, ends as cancelled: logind's delay
/// (the agent lets the shutdown go before it ends) and [`Reboot::ready_without_reboot_for`]
/// have passed since the request, and the node stayed Ready on its boot all along. A request
/// with no shutdown behind it otherwise held its node cordoned until the reboot timeout,
/// failed it and halted the rollout.
///
/// [`Reboot::ready_without_reboot_for`]: crate::config::Reboot::ready_without_reboot_for
pub fn shutdown_not_followed(n: &NodeView, config: &Config, now: DateTime<Utc>) -> Option<String> {
    if !n.for_shutdown() || !n.shutdown_requested {
        return None;
    }
    let at = n.shutdown_requested_at?;
    let delay = shutdown_delay(n, config);
    let until = at + delay + config.reboot.ready_without_reboot_for.to_chrono();
    let before = n.boot_id_before.as_deref().unwrap_or_default();
    (now >= until && stayed_up(n, at, before)).then(|| {
        not_followed(
            n,
            &format!("logind's delay ({}s) from its request", delay.num_seconds()),
            at,
            config,
        )
    })
}

/// Why a FleetLock host's cycle ends without a reboot: its host called `steady-state` in this
/// cycle (started at `start`) before its boot ID changed.
fn given_back(n: &NodeView, start: DateTime<Utc>) -> Option<String> {
    let f = n.fleetlock.as_ref()?;
    let at = f.returned.filter(|t| *t >= start)?;
    let unchanged = n
        .boot_id_before
        .as_deref()
        .is_none_or(|b| !n.booted_since(b));
    unchanged.then(|| {
        format!(
            "its host (FleetLock id {}) gave its slot back at {} before rebooting (steady-state on boot {})",
            f.id,
            crate::time::annotation(at),
            n.boot_id
        )
    })
}

/// The next step of a node at its reboot (`rebooting` since `since`): back (a new boot ID,
/// Ready, the node-lifecycle controller's taints off), a new token for one the agent reported
/// lost, a failure (the tokens spent, a refusal that will not pass, the reboot timeout), or
/// the wait.
fn rebooting_step(n: &NodeView, since: DateTime<Utc>, config: &Config, now: DateTime<Utc>) -> Step {
    let before = n.boot_id_before.as_deref().unwrap_or_default();
    // Back means a new boot, Ready, and the node-lifecycle controller agreeing: until it
    // takes its not-ready/unreachable taints off, pods scheduled there after an
    // uncordon can be evicted by the NoExecute taint.
    if n.booted_since(before) && n.ready && !n.not_ready_taint {
        return Step::MarkVerifying;
    }
    if let Some(handed) = n.handed_off_at() {
        let deadline = since + config.reboot.timeout.to_chrono();
        // The host was given its reboot, and may be going down now: the cycle ends without one
        // only once the node has stayed Ready on this boot since the hand-off for longer than a
        // host takes to go down (never while it is NotReady, nor after a NotReady since: then
        // only its new boot, or the reboot timeout, ends it). Ended earlier, a give-back a second
        // after a `pre-reboot` 200 uncordoned a node mid-reboot and let the next one start.
        let up_until = stayed_up(n, handed, before)
            .then(|| handed + config.reboot.ready_without_reboot_for.to_chrono());
        if let Some(until) = up_until {
            let why = if n.for_shutdown() {
                Some(if n.shutdown_requested {
                    not_followed(n, "its hand-off", handed, config)
                } else {
                    shutdown_cancelled(n)
                })
            } else {
                given_back(n, handed)
            };
            match why {
                Some(why) if now >= until => return Step::Release(why),
                // A host's answer (a slot given back, a shutdown cancelled) is said while it waits.
                Some(why) if !n.shutdown_requested => {
                    return Step::Hold {
                        until: until.min(deadline),
                        why: format!(
                            "{why}; its cycle ends without a reboot at {} if the node stays Ready on boot {} until then",
                            crate::time::annotation(until),
                            n.boot_words()
                        ),
                    }
                }
                _ => {}
            }
        }
        return if now >= deadline {
            Step::Fail(handed_timeout_reason(n, config))
        } else {
            Step::AwaitReboot {
                deadline: up_until.map_or(deadline, |u| u.min(deadline)),
            }
        };
    }
    if reboot_lost(n) {
        // A malformed count is taken as spent: no more tokens on a guess.
        let attempt = if n.is_malformed(proto::REBOOT_ATTEMPT) {
            REBOOT_ATTEMPTS
        } else {
            n.reboot_attempt.unwrap_or(1)
        };
        if attempt >= REBOOT_ATTEMPTS {
            return Step::Fail(format!(
                "the agent acknowledged {attempt} reboot token(s), the last {}, and each \
                 time started again before the host rebooted: the boot ID is still \
                 {before}",
                n.reboot_token.as_deref().unwrap_or_default()
            ));
        }
        return Step::RequestReboot {
            attempt: attempt + 1,
        };
    }
    // The agent said it will not act on this token, for a cause that will not pass:
    // failed now, with its reason, rather than at the reboot timeout.
    if let Some(r) = refused(n).filter(|r| r.cause.fails_the_node()) {
        return Step::Fail(format!(
            "the agent refused reboot token {} ({}): {}",
            r.token, r.cause, r.reason
        ));
    }
    let deadline = since + config.reboot.timeout.to_chrono();
    if now >= deadline {
        Step::Fail(reboot_timeout_reason(n, config))
    } else {
        Step::AwaitReboot { deadline }
    }
}

/// The next step of a node back from its reboot (`verifying` since `since`): the afterReboot
/// hooks, the uncordon, the wait for the node-lifecycle controller, then the health gate (or a
/// failure: a record that does not parse, the gate's timeout).
fn verifying_step(n: &NodeView, since: DateTime<Utc>, config: &Config, now: DateTime<Utc>) -> Step {
    // Back and still cordoned: the afterReboot hooks come before the uncordon.
    if let Some(step) = hook_step(Phase::AfterReboot, config, n, since, now) {
        return step;
    }
    if n.unschedulable && n.cordoned_by.is_some() {
        return Step::Uncordon;
    }
    // The uncordon and the health gate come after the afterReboot hooks: their clocks
    // start when the phase passed, not when the node came back.
    let since = hooks::phase_record(n, Phase::AfterReboot, since)
        .and_then(|p| p.passed)
        .map_or(since, |p| p.max(since));
    // The health gate may pass at once, and its `done` would race the taint's removal.
    if let Some(wait) = settling(n, since, now) {
        return wait;
    }
    if let Some(why) = gate_problem(n) {
        return Step::Fail(format!(
            "the health gate cannot tell what must be healthy again: {why}"
        ));
    }
    let deadline = since + config.health_gate.timeout.to_chrono();
    if now >= deadline {
        Step::Fail(format!(
            "the health gate did not pass within {}",
            config.health_gate.timeout
        ))
    } else {
        Step::HealthGate { deadline }
    }
}

/// The cordon that starts (or starts over) the cycle that began at `start`; first, while a
/// node uncordoned a moment ago (`rollboot retry`, an operator) still carries the
/// node-lifecycle controller's `unschedulable` taint, the wait for that controller to take it
/// off, bounded from the cycle's start: a cordon written before would be refused with 409.
fn cordon_step(n: &NodeView, start: DateTime<Utc>, now: DateTime<Utc>) -> Step {
    settling(n, start, now).unwrap_or(Step::Cordon {
        record_cordoned_by: !n.unschedulable || n.cordoned_by.is_some(),
    })
}

/// The hook step of `phase` for a node in the state it entered at `since`, `None` once the
/// phase has passed (or has nothing configured).
fn hook_step(
    phase: Phase,
    config: &Config,
    n: &NodeView,
    since: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Option<Step> {
    match hooks::next(phase, config, n, since, now) {
        hooks::Next::Passed => None,
        hooks::Next::Act(action) => Some(Step::Hook { phase, action }),
        hooks::Next::Wait { until, why } => Some(Step::Hold { until, why }),
        hooks::Next::Fail(reason) => Some(Step::FailHook { phase, reason }),
    }
}

/// After rollboot's cordon or uncordon at `since`: [`Step::Settle`] while the node-lifecycle
/// controller has not copied it into its taint, for at most [`LIFECYCLE_SETTLE`].
fn settling(n: &NodeView, since: DateTime<Utc>, now: DateTime<Utc>) -> Option<Step> {
    let until = since + LIFECYCLE_SETTLE;
    (n.cordon_taint_pending() && now < until).then_some(Step::Settle { until })
}

/// Why the node's `health-gate` record does not parse, if it does not.
fn gate_problem(n: &NodeView) -> Option<String> {
    let text = n.health_gate.as_deref()?;
    serde_json::from_str::<GateRecord>(text)
        .err()
        .map(|e| format!("annotation {} does not parse: {e}", proto::HEALTH_GATE))
}

/// Whether a reboot may be requested for the node now: only for a cordoned node (it is in the
/// lock, or no step would have been decided for it). `Err` says why not.
pub fn may_request_reboot(n: &NodeView) -> Result<(), String> {
    if n.unschedulable {
        Ok(())
    } else {
        Err(format!(
            "node {} is not cordoned: no reboot is asked for, and its cycle starts over from the cordon",
            n.name
        ))
    }
}

/// The in-flight record as the Nodes tell it, for when the lock's own is lost (its Lease was
/// deleted, or its record does not parse): every node, not being deleted, whose `state` is an
/// in-flight one that rollboot wrote (see [`this_cycle`], dated by its own `state-since`) and
/// would go on from rather than start over. A node left out (a stale or forged state) is
/// treated as any other: started again from the cordon if flagged, except a node in `acting`
/// (this leader has a step of it under way, such as a cordon not yet written after its
/// `cordoning` state): it is in flight whatever its Node shows yet, and leaving it out let a
/// new node start beside it (found by the chaos campaign: the lock deleted between a node's
/// `cordoning` and its cordon). The record is not capped at `maxNodes`: a node in flight is out
/// whether or not it is listed, and `pick` starts nothing while the listed ones fill the slots.
pub fn rebuild(
    nodes: &[NodeView],
    leader: &str,
    config: &Config,
    now: DateTime<Utc>,
    acting: &BTreeSet<String>,
) -> BTreeMap<String, LockEntry> {
    nodes
        .iter()
        .filter(|n| !n.deleting)
        .filter_map(|n| {
            let (state, since) = match (n.state, n.state_since) {
                (Some(s), Some(since)) if s.in_flight() => (s, since),
                (Some(NodeState::Done | NodeState::Failed), _) => return None,
                // A state garbled or undated on a node that holds a reboot token with the boot ID
                // to verify it against: the cycle is at its reboot (see `position`), dated by
                // the token. Left out, the node would be started again from the cordon, and a
                // second token would reboot it twice.
                _ => {
                    n.boot_id_before.as_ref()?;
                    let t = Token::parse(n.reboot_token.as_deref()?)?;
                    (NodeState::Rebooting, t.issued)
                }
            };
            let entry = LockEntry {
                group: group_of(n, config),
                state,
                since,
                leader: leader.to_string(),
            };
            let resumes = acting.contains(&n.name)
                || !matches!(next_step(Some(n), &entry, config, now), Step::Cordon { .. });
            resumes.then(|| (n.name.clone(), entry))
        })
        .collect()
}

/// A warning about one malformed rollboot annotation of a Node: the key, the value found, and
/// what rollboot does about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnnotationWarning {
    /// The annotation key.
    pub key: &'static str,
    /// The value found.
    pub value: String,
    /// One sentence for the log and the Event: node, key, value, what is expected, and the
    /// action taken.
    pub note: String,
}

/// A value as quoted in a warning: at most 100 characters.
fn quoted(v: &str) -> String {
    match v.char_indices().nth(100) {
        Some((i, _)) => format!("`{}...`", &v[..i]),
        None => format!("`{v}`"),
    }
}

/// Whether [`annotation_warnings`] has anything to say about the node (in or out of the lock).
pub fn has_annotation_warnings(n: &NodeView) -> bool {
    !n.malformed.is_empty()
        || (n.hooks.is_some() && hooks::record_problem(n).is_some())
        || (n.health_gate.is_some() && gate_problem(n).is_some())
}

/// The warnings about a Node's malformed rollboot annotations; `in_lock` when it is listed in
/// the maintenance lock (its cycle is in progress).
pub fn annotation_warnings(n: &NodeView, entry: Option<&LockEntry>) -> Vec<AnnotationWarning> {
    let in_lock = entry.is_some();
    let restart = "its maintenance cycle starts over from the cordon";
    // A cycle that holds a reboot token goes on from it, whatever its state reads.
    let position = entry.map(|e| position(n, e));
    let at_reboot = match &position {
        Some(Position::At(s @ (NodeState::Rebooting | NodeState::Verifying), _)) => Some(*s),
        _ => None,
    };
    let resumes = |s: NodeState| {
        format!(
            "its cycle holds this cycle's reboot token {}: it goes on as {s} from the token and \
             {}, and no second token is issued",
            n.reboot_token.as_deref().unwrap_or_default(),
            proto::BOOT_ID_BEFORE
        )
    };
    let mut out: Vec<AnnotationWarning> = n
        .malformed
        .iter()
        .map(|m| {
            let action = match m.key {
                proto::STATE | proto::STATE_SINCE if at_reboot.is_some() => {
                    format!("read as absent; {}", resumes(at_reboot.expect("some")))
                }
                proto::STATE if in_lock => format!("read as no state: {restart}"),
                proto::STATE => {
                    "read as no state: if flagged, the node starts a cycle from the cordon".into()
                }
                proto::STATE_SINCE if in_lock => {
                    format!("its state cannot be dated to this cycle: {restart}")
                }
                proto::BOOT_ID_BEFORE if matches!(position, Some(Position::Unverifiable(_))) => {
                    "the agent took this cycle's reboot token, so whether the host rebooted \
                     cannot be verified: the node fails rather than be asked to reboot again"
                        .into()
                }
                proto::BOOT_ID_BEFORE if in_lock => {
                    format!("a reboot cannot be verified against it: {restart}")
                }
                proto::REBOOT if in_lock => {
                    format!("read as no token, which the agent does not act on: {restart}")
                }
                proto::REBOOT => "read as no token: the agent does not act on it".into(),
                proto::REBOOT_ACK => "the agent acts on no reboot token of this node while it is \
                    malformed (it cannot tell whether it acted on the current one); a rebooting \
                    node fails at its reboot timeout unless it comes back with a new boot ID"
                    .into(),
                proto::REBOOT_LOST => "ignored: no new reboot token is issued for it".into(),
                proto::REBOOT_COUNT => {
                    "read as absent: the next finished cycle counts 1 again".into()
                }
                proto::REBOOT_ATTEMPT => format!(
                    "taken as the last attempt ({REBOOT_ATTEMPTS}): no new reboot token is issued \
                     after a lost reboot"
                ),
                _ => "read as absent".into(),
            };
            AnnotationWarning {
                key: m.key,
                value: m.value.clone(),
                note: format!(
                    "node {}: annotation {} is {}, not {}; {action}",
                    n.name,
                    m.key,
                    quoted(&m.value),
                    m.expected
                ),
            }
        })
        .collect();
    // A state that parses but contradicts this cycle's reboot token (gone backwards): said as
    // a malformed one is (a garbled one is said above).
    if let Some(note) = entry
        .filter(|_| !n.is_malformed(proto::STATE))
        .and_then(|e| state_contradiction(n, e))
    {
        out.push(AnnotationWarning {
            key: proto::STATE,
            value: n.state.map(|s| s.as_str().to_string()).unwrap_or_default(),
            note,
        });
    }
    if let (Some(why), Some(v)) = (hooks::record_problem(n), &n.hooks) {
        out.push(AnnotationWarning {
            key: proto::HOOKS,
            value: v.clone(),
            note: format!(
                "node {}: annotation {} does not parse ({why}); read as no record: the current hook phase begins again, asking its webhooks with new tokens",
                n.name,
                proto::HOOKS
            ),
        });
    }
    if let (Some(why), Some(v)) = (gate_problem(n), &n.health_gate) {
        out.push(AnnotationWarning {
            key: proto::HEALTH_GATE,
            value: v.clone(),
            note: format!(
                "node {}: {why}; the node fails at its health gate instead of passing it blind",
                n.name
            ),
        });
    }
    out
}

/// What a node's failure means for the rollout, `failed` counting every failed node with it.
pub fn after_failure(failed: usize, config: &Config) -> String {
    let max = config.failures.max_failures;
    if failed > max as usize {
        format!(
            "the rollout halts: {failed} failed node(s), at most {max} tolerated \
             (failures.maxFailures); no new node starts until an operator clears one: \
             {CLEAR_FAILED}"
        )
    } else {
        format!(
            "the rollout goes on: {failed} failed node(s), up to {max} tolerated \
             (failures.maxFailures)"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse_str;
    use crate::node::fixtures::{annotate, node};
    use crate::node::{self as proto, NodeView};

    fn t(s: &str) -> DateTime<Utc> {
        crate::time::parse_annotation(s).unwrap()
    }

    fn cfg(yaml: &str) -> Config {
        parse_str(yaml).unwrap()
    }

    fn flagged(name: &str, at: &str, labels: &[(&str, &str)]) -> NodeView {
        NodeView::from_node(&annotate(node(name, labels), proto::REBOOT_REQUIRED, at))
    }

    fn entry(since: &str) -> LockEntry {
        LockEntry {
            group: None,
            state: NodeState::Cordoning,
            since: t(since),
            leader: "c-0".into(),
        }
    }

    fn names(v: Vec<&NodeView>) -> Vec<&str> {
        v.into_iter().map(|n| n.name.as_str()).collect()
    }

    fn snapshot<'a>(
        nodes: &'a [NodeView],
        in_flight: &'a BTreeMap<String, LockEntry>,
    ) -> Snapshot<'a> {
        // A test's few views, by reference as a pass hands them over (leaked: a test's worth).
        let nodes: &'a [&'a NodeView] = Vec::leak(nodes.iter().collect());
        Snapshot {
            rooms: None,
            nodes,
            in_flight,
            foreign_holder: None,
            blocking_pods: &[],
            now: t("2026-01-05T00:00:00Z"),
        }
    }

    #[test]
    fn the_oldest_flag_goes_first_and_max_nodes_caps_the_batch() {
        let nodes = vec![
            flagged("a", "2026-01-03T00:00:00Z", &[]),
            flagged("b", "2026-01-01T00:00:00Z", &[]),
            flagged("c", "2026-01-02T00:00:00Z", &[]),
        ];
        let none = BTreeMap::new();
        let c = cfg("concurrency: {maxNodes: 2}");
        assert_eq!(names(pick(&snapshot(&nodes, &none), &c)), ["b", "c"]);
        let c = cfg("nodes: {order: name}");
        assert_eq!(names(pick(&snapshot(&nodes, &none), &c)), ["a"]);
    }

    /// Rooms where each node's pods fall under the budgets given (one pod per budget), and
    /// the budgets allow what is given, with those pods already counted as disrupted.
    fn rooms(
        nodes: &[(&str, &[&str])],
        budgets: &[(&str, i32)],
        disrupted: &[&str],
    ) -> crate::controller::room::Rooms {
        use crate::controller::room::{BudgetNow, Rooms};
        Rooms {
            nodes: nodes
                .iter()
                .map(|(n, bs)| {
                    let m = bs
                        .iter()
                        .map(|b| (format!("ns/{b}"), vec![format!("ns/{b}-{n}")]))
                        .collect();
                    (n.to_string(), m)
                })
                .collect(),
            budgets: budgets
                .iter()
                .map(|(b, allowed)| {
                    let disrupted = disrupted.iter().map(|p| p.to_string()).collect();
                    let now = BudgetNow {
                        allowed: *allowed,
                        disrupted,
                    };
                    (format!("ns/{b}"), now)
                })
                .collect(),
        }
    }

    /// a, b and c wait, in that order; x drains, in the lock.
    fn three_waiting_and_x_draining() -> (Vec<NodeView>, BTreeMap<String, LockEntry>) {
        let nodes = vec![
            flagged("a", "2026-01-01T00:00:00Z", &[]),
            flagged("b", "2026-01-02T00:00:00Z", &[]),
            flagged("c", "2026-01-03T00:00:00Z", &[]),
            in_state(
                flagged("x", "2025-12-31T00:00:00Z", &[]),
                NodeState::Draining,
                "2026-01-04T00:00:00Z",
            ),
        ];
        let lock = BTreeMap::from([("x".to_string(), entry("2026-01-04T00:00:00Z"))]);
        (nodes, lock)
    }

    #[test]
    fn a_node_whose_budget_is_held_is_passed_over_and_taken_once_the_budget_has_room() {
        // x drains (in the lock), and its pod under budget `web` is not yet evicted; a and b
        // wait before c in order, and their pods are under `web` too.
        let (mut nodes, lock) = three_waiting_and_x_draining();
        let c = cfg("concurrency: {maxNodes: 2}");
        let held = rooms(
            &[
                ("x", &["web"]),
                ("a", &["web"]),
                ("b", &["web", "db"]),
                ("c", &["db"]),
            ],
            &[("web", 1), ("db", 1)],
            &[],
        );
        let s = Snapshot {
            rooms: Some(&held),
            ..snapshot(&nodes, &lock)
        };
        let d = pick_detail(&s, &c);
        assert_eq!(names(d.nodes), ["c"]);
        let passed: Vec<(&str, &str)> = d
            .passed_over
            .iter()
            .map(|(n, h)| (n.name.as_str(), h.budget.as_str()))
            .collect();
        assert_eq!(passed, [("a", "ns/web"), ("b", "ns/web")]);
        assert_eq!(d.passed_over[0].1.taken_by, ["x"]);
        // Without the budget-aware pick, order only.
        let off = cfg("concurrency: {maxNodes: 2, passOverFor: 0s}");
        assert_eq!(names(pick(&s, &off)), ["a"]);
        // x's pod was evicted and its replacement is Ready: the budget allows one again and
        // x no longer owes it. a goes first again (order is the first criterion).
        let room = rooms(
            &[
                ("x", &["web"]),
                ("a", &["web"]),
                ("b", &["web", "db"]),
                ("c", &["db"]),
            ],
            &[("web", 1), ("db", 1)],
            &["web-x"],
        );
        nodes[3] = in_state(
            nodes[3].clone(),
            NodeState::Rebooting,
            "2026-01-04T00:01:00Z",
        );
        let s = Snapshot {
            rooms: Some(&room),
            ..snapshot(&nodes, &lock)
        };
        let d = pick_detail(&s, &c);
        assert_eq!(names(d.nodes), ["a"]);
        assert!(d.passed_over.is_empty());
        // Two free slots: a takes `web`, so b (sharing it) is passed over for c.
        let c3 = cfg("concurrency: {maxNodes: 3}");
        let d = pick_detail(&s, &c3);
        assert_eq!(names(d.nodes), ["a", "c"]);
        assert_eq!(d.passed_over[0].1.taken_by, ["a"]);
    }

    #[test]
    fn with_no_node_with_room_the_held_ones_fill_the_free_slots_in_order() {
        let nodes = vec![
            flagged("a", "2026-01-01T00:00:00Z", &[]),
            flagged("b", "2026-01-02T00:00:00Z", &[]),
            flagged("c", "2026-01-03T00:00:00Z", &[]),
        ];
        let none = BTreeMap::new();
        let c = cfg("concurrency: {maxNodes: 2}");
        let all_held = rooms(
            &[("a", &["web"]), ("b", &["web"]), ("c", &["web"])],
            &[("web", 0)],
            &[],
        );
        let s = Snapshot {
            rooms: Some(&all_held),
            ..snapshot(&nodes, &none)
        };
        let d = pick_detail(&s, &c);
        // An idle slot does nothing; a held drain evicts its other pods meanwhile.
        assert_eq!(names(d.nodes), ["a", "b"]);
        assert_eq!(d.passed_over.len(), 1);
        assert_eq!(d.passed_over[0].0.name, "c");
    }

    #[test]
    fn a_slot_no_node_with_room_fills_goes_to_the_held_node_whose_drain_waits_least() {
        // x drains and still owes `web` its pod; `db` is at 0 with nobody owing it (a
        // disruption granted, its replacement on its way). a waits behind x's eviction and
        // its replacement, b only behind db's replacement, c behind both.
        let (nodes, lock) = three_waiting_and_x_draining();
        let held = rooms(
            &[
                ("x", &["web"]),
                ("a", &["web"]),
                ("b", &["db"]),
                ("c", &["web", "db"]),
            ],
            &[("web", 1), ("db", 0)],
            &[],
        );
        let s = Snapshot {
            rooms: Some(&held),
            ..snapshot(&nodes, &lock)
        };
        let d = pick_detail(&s, &cfg("concurrency: {maxNodes: 2}"));
        assert_eq!(names(d.nodes), ["b"]);
        let passed: Vec<&str> = d.passed_over.iter().map(|(n, _)| n.name.as_str()).collect();
        assert_eq!(passed, ["a", "c"]);
        // Two free slots: b, then a before c (c waits on both budgets).
        let d = pick_detail(&s, &cfg("concurrency: {maxNodes: 3}"));
        assert_eq!(names(d.nodes), ["b", "a"]);
    }

    #[test]
    fn a_node_passed_over_is_taken_anyway_once_passed_over_for_its_bound() {
        let passed = |since: &str| {
            let v = serde_json::json!({"since": since, "budget": "ns/web", "why": "w"});
            let n = annotate(
                node("a", &[]),
                proto::REBOOT_REQUIRED,
                "2026-01-01T00:00:00Z",
            );
            NodeView::from_node(&annotate(n, proto::PASSED_OVER, &v.to_string()))
        };
        let c = cfg("concurrency: {maxNodes: 1, passOverFor: 10m}");
        let budgets = rooms(
            &[("a", &["web"]), ("b", &["db"])],
            &[("web", 0), ("db", 1)],
            &[],
        );
        let none = BTreeMap::new();
        // The snapshot's now is 2026-01-05T00:00:00Z: passed over 9 minutes ago, it waits...
        let nodes = vec![
            passed("2026-01-04T23:51:00Z"),
            flagged("b", "2026-01-02T00:00:00Z", &[]),
        ];
        let s = Snapshot {
            rooms: Some(&budgets),
            ..snapshot(&nodes, &none)
        };
        let d = pick_detail(&s, &c);
        assert_eq!(names(d.nodes), ["b"]);
        assert_eq!(d.passed_over.len(), 1);
        assert!(d.taken_anyway.is_empty());
        // ...passed over 10 minutes ago, it is taken although its budget still allows none.
        let nodes = vec![
            passed("2026-01-04T23:50:00Z"),
            flagged("b", "2026-01-02T00:00:00Z", &[]),
        ];
        let s = Snapshot {
            rooms: Some(&budgets),
            ..snapshot(&nodes, &none)
        };
        let d = pick_detail(&s, &c);
        assert_eq!(names(d.nodes), ["a"]);
        assert!(d.passed_over.is_empty());
        assert_eq!(d.taken_anyway[0].1.budget, "ns/web");
        // Its record is stale once it is no longer waiting: housekeeping removes it.
        assert!(stale_passed_over(&[&nodes[0]], &none, &c).is_empty());
        let unflagged = NodeView {
            reboot_required: false,
            ..nodes[0].clone()
        };
        assert_eq!(stale_passed_over(&[&unflagged], &none, &c).len(), 1);
    }

    #[test]
    fn a_node_rebooted_within_min_reboot_interval_waits_until_it_has_rested() {
        // Snapshot instant: 2026-01-05T00:00Z. `a` was rebooted 2 h before, `b` 2 days before.
        let rebooted = |name: &str, at: &str| {
            NodeView::from_node(&annotate(
                annotate(
                    node(name, &[]),
                    proto::REBOOT_REQUESTED,
                    "2026-01-04T23:00:00Z",
                ),
                proto::LAST_REBOOT,
                at,
            ))
        };
        let nodes = vec![
            rebooted("a", "2026-01-04T22:00:00Z"),
            rebooted("b", "2026-01-03T00:00:00Z"),
        ];
        let none = BTreeMap::new();
        let c = cfg("concurrency: {maxNodes: 2}\nnodes: {minRebootInterval: 24h}");
        let s = snapshot(&nodes, &none);
        assert_eq!(names(pick(&s, &c)), ["b"]);
        assert_eq!(
            resting_until(&nodes[0], &c, s.now),
            Some(t("2026-01-05T22:00:00Z"))
        );
        assert_eq!(next_rested(&s, &c), Some(t("2026-01-05T22:00:00Z")));
        // Without the key both start; once rested, `a` starts too.
        let plain = cfg("concurrency: {maxNodes: 2}");
        assert_eq!(names(pick(&s, &plain)), ["a", "b"]);
        assert_eq!(next_rested(&s, &plain), None);
        let later = Snapshot {
            rooms: None,
            now: t("2026-01-05T22:00:00Z"),
            ..snapshot(&nodes, &none)
        };
        assert_eq!(names(pick(&later, &c)), ["a", "b"]);
    }

    #[test]
    fn a_hand_written_request_is_dated_before_anything_is_picked() {
        let by_hand =
            NodeView::from_node(&annotate(node("b", &[]), proto::REBOOT_REQUESTED, "now"));
        let nodes = vec![
            flagged("a", "2026-01-01T00:00:00Z", &[]),
            by_hand.clone(),
            NodeView::from_node(&annotate(
                node("c", &[]),
                proto::REBOOT_REQUESTED,
                "2026-01-01T00:05:00Z",
            )),
        ];
        let undated: Vec<&str> = undated_requests(&nodes)
            .iter()
            .map(|n| n.name.as_str())
            .collect();
        assert_eq!(undated, ["b"]);
        // Undated, it would sort last; dated with the instant the controller saw it (00:03),
        // it takes its turn between the flags before and after that instant.
        let c = cfg("concurrency: {maxNodes: 3}");
        let none = BTreeMap::new();
        assert_eq!(names(pick(&snapshot(&nodes, &none), &c)), ["a", "c", "b"]);
        let mut dated = nodes.clone();
        dated[1] = NodeView::from_node(&annotate(
            node("b", &[]),
            proto::REBOOT_REQUESTED,
            "2026-01-01T00:03:00.000Z",
        ));
        assert!(undated_requests(&dated).is_empty());
        assert_eq!(names(pick(&snapshot(&dated, &none), &c)), ["a", "b", "c"]);
        // A node being deleted is left alone.
        let deleting = NodeView {
            deleting: true,
            ..by_hand
        };
        assert!(undated_requests(&[deleting]).is_empty());
    }

    #[test]
    fn a_full_lock_starts_nothing() {
        let nodes = vec![flagged("a", "2026-01-01T00:00:00Z", &[])];
        let busy = BTreeMap::from([("z".to_string(), entry("2026-01-01T00:00:00Z"))]);
        assert!(pick(&snapshot(&nodes, &busy), &cfg("{}")).is_empty());
    }

    #[test]
    fn excluded_unselected_and_unflagged_nodes_are_never_candidates() {
        let nodes = vec![
            flagged(
                "excluded",
                "2026-01-01T00:00:00Z",
                &[(proto::EXCLUDE, "true")],
            ),
            flagged("gpu", "2026-01-01T00:00:00Z", &[("pool", "gpu")]),
            NodeView::from_node(&node("quiet", &[("pool", "web")])),
            flagged("web", "2026-01-02T00:00:00Z", &[("pool", "web")]),
        ];
        let none = BTreeMap::new();
        let c = cfg("nodes: {selector: 'pool=web'}\nconcurrency: {maxNodes: 5}");
        assert_eq!(names(pick(&snapshot(&nodes, &none), &c)), ["web"]);
    }

    #[test]
    fn the_per_group_limit_spreads_a_batch_across_zones() {
        let z = "topology.kubernetes.io/zone";
        let nodes = vec![
            flagged("a1", "2026-01-01T00:00:00Z", &[(z, "a")]),
            flagged("a2", "2026-01-01T00:00:01Z", &[(z, "a")]),
            flagged("b1", "2026-01-01T00:00:02Z", &[(z, "b")]),
            flagged("c1", "2026-01-01T00:00:03Z", &[(z, "c")]),
        ];
        let c = cfg(
            "concurrency: {maxNodes: 2, groupBy: topology.kubernetes.io/zone, maxNodesPerGroup: 1}",
        );
        let none = BTreeMap::new();
        assert_eq!(names(pick(&snapshot(&nodes, &none), &c)), ["a1", "b1"]);
        let busy = BTreeMap::from([("a1".to_string(), entry("2026-01-01T00:00:00Z"))]);
        assert_eq!(names(pick(&snapshot(&nodes, &busy), &c)), ["b1"]);
        // A node whose Node is gone (deleted mid-cycle) still counts in the group its entry
        // recorded (the chaos campaign, seed 27: a second node of zone-b started beside one
        // deleted while draining)...
        let gone = |group: Option<&str>| {
            BTreeMap::from([(
                "b0".to_string(),
                LockEntry {
                    group: group.map(str::to_string),
                    ..entry("2026-01-01T00:00:00Z")
                },
            )])
        };
        assert_eq!(names(pick(&snapshot(&nodes, &gone(Some("b"))), &c)), ["a1"]);
        // ... and in every group when its entry records none.
        assert!(pick(&snapshot(&nodes, &gone(None)), &c).is_empty());
        assert_eq!(group_of(&nodes[2], &c).as_deref(), Some("b"));
        assert_eq!(group_of(&nodes[2], &cfg("{}")), None);
    }

    #[test]
    fn a_failure_event_says_what_failed_and_blockers_say_what_they_know() {
        assert_eq!(
            failure_event_reason(Some(NodeState::Draining)),
            "DrainFailed"
        );
        assert_eq!(
            failure_event_reason(Some(NodeState::Cordoning)),
            "DrainFailed"
        );
        assert_eq!(
            failure_event_reason(Some(NodeState::Rebooting)),
            "RebootFailed"
        );
        assert_eq!(
            failure_event_reason(Some(NodeState::Verifying)),
            "HealthGateFailed"
        );
        let b = Blocker::BlockingPods {
            selector: "app=backup".into(),
            count: 1,
        };
        assert_eq!(
            b.to_string(),
            "at least one pod matches the blocking selector `app=backup`"
        );
        let f = Blocker::TooManyFailures {
            nodes: vec!["n1".into()],
            max: 0,
        };
        assert!(f.to_string().contains("rollboot retry NODE"), "{f}");
    }

    #[test]
    fn a_failure_beyond_max_failures_blocks_new_work() {
        let mut bad = flagged("bad", "2026-01-01T00:00:00Z", &[]);
        bad.state = Some(NodeState::Failed);
        let nodes = vec![bad, flagged("ok", "2026-01-01T00:00:00Z", &[])];
        let none = BTreeMap::new();
        let s = snapshot(&nodes, &none);
        let b = blockers(&s, &cfg("{}"), t("2026-01-05T00:00:00Z"));
        assert!(
            matches!(&b[..], [Blocker::TooManyFailures { max: 0, .. }]),
            "{b:?}"
        );
        assert!(blockers(
            &s,
            &cfg("failures: {maxFailures: 1}"),
            t("2026-01-05T00:00:00Z")
        )
        .is_empty());
        // A failed node is never picked again until an operator clears it.
        assert_eq!(names(pick(&s, &cfg("concurrency: {maxNodes: 3}"))), ["ok"]);
    }

    /// A node that failed in a cycle rollboot cordoned it for (and left it cordoned).
    fn failed_cordoned(name: &str, labels: &[(&str, &str)]) -> NodeView {
        NodeView {
            unschedulable: true,
            cordoned_by: Some("c-0".into()),
            failure_reason: Some("the drain did not finish within 15m".into()),
            ..in_state(
                NodeView::from_node(&node(name, labels)),
                NodeState::Failed,
                "2026-01-01T00:10:00Z",
            )
        }
    }

    #[test]
    fn a_failed_node_rollboot_left_cordoned_takes_a_slot_overall_and_in_its_group() {
        let z = "topology.kubernetes.io/zone";
        let tolerated = "failures: {maxFailures: 5}\n";
        let nodes = vec![
            failed_cordoned("a0", &[(z, "a")]),
            flagged("a1", "2026-01-01T00:00:00Z", &[(z, "a")]),
            flagged("b1", "2026-01-01T00:00:01Z", &[(z, "b")]),
        ];
        let none = BTreeMap::new();
        // maxNodes 1: the failed node is out because of rollboot; nothing else starts.
        assert!(pick(&snapshot(&nodes, &none), &cfg(tolerated)).is_empty());
        let two = cfg(&format!("{tolerated}concurrency: {{maxNodes: 2}}"));
        assert_eq!(names(pick(&snapshot(&nodes, &none), &two)), ["a1"]);
        // Per group: zone a's one slot is the failed node's.
        let zones = cfg(&format!(
            "{tolerated}concurrency: {{maxNodes: 3, groupBy: {z}, maxNodesPerGroup: 1}}"
        ));
        assert_eq!(names(pick(&snapshot(&nodes, &none), &zones)), ["b1"]);
        // Cordoned by an operator, or uncordoned since: not rollboot's to count.
        for other in [
            NodeView {
                cordoned_by: None,
                ..nodes[0].clone()
            },
            NodeView {
                unschedulable: false,
                ..nodes[0].clone()
            },
        ] {
            assert!(!holds_a_slot(&other));
            let mut ns = nodes.clone();
            ns[0] = other;
            assert_eq!(names(pick(&snapshot(&ns, &none), &two)), ["a1", "b1"]);
        }
        // Still in the lock (failed, its slot not freed yet): counted once.
        let busy = BTreeMap::from([("a0".to_string(), entry("2026-01-01T00:00:00Z"))]);
        assert_eq!(names(pick(&snapshot(&nodes, &busy), &two)), ["a1"]);
    }

    #[test]
    fn return_to_service_uncordons_a_failed_node_only_once_its_host_is_back() {
        let on = cfg("failures: {maxFailures: 1, returnToService: true}");
        let ready = NodeView {
            ready: true,
            ..failed_cordoned("a0", &[])
        };
        let none = BTreeMap::new();
        fn back(n: &NodeView, c: &Config, lock: &BTreeMap<String, LockEntry>) -> Vec<String> {
            returning_to_service(&[n], lock, c)
                .into_iter()
                .map(|n| n.name.clone())
                .collect()
        }
        assert_eq!(back(&ready, &on, &none), ["a0"]);
        // Off by default.
        assert!(back(&ready, &cfg("failures: {maxFailures: 1}"), &none).is_empty());
        // Down, or still tainted not-ready: it stays cordoned.
        let down = NodeView {
            ready: false,
            ..ready.clone()
        };
        assert!(back(&down, &on, &none).is_empty());
        let tainted = NodeView {
            not_ready_taint: true,
            ..ready.clone()
        };
        assert!(back(&tainted, &on, &none).is_empty());
        // Quarantined by its drain: it stays cordoned with its pods until `rollboot retry`.
        let quarantined = NodeView {
            quarantined: Some("never".into()),
            ..ready.clone()
        };
        assert!(back(&quarantined, &on, &none).is_empty());
        // Not rollboot's cordon, or not freed from the lock yet.
        let theirs = NodeView {
            cordoned_by: None,
            ..ready.clone()
        };
        assert!(back(&theirs, &on, &none).is_empty());
        let busy = BTreeMap::from([("a0".to_string(), entry("2026-01-01T00:00:00Z"))]);
        assert!(back(&ready, &on, &busy).is_empty());
    }

    #[test]
    fn unready_nodes_and_a_foreign_lock_holder_block() {
        let mut down = flagged("down", "2026-01-01T00:00:00Z", &[]);
        down.ready = false;
        let nodes = vec![down];
        let none = BTreeMap::new();
        let blocking = [("app=backup".to_string(), 2)];
        let s = Snapshot {
            rooms: None,
            nodes: &nodes.iter().collect::<Vec<_>>(),
            in_flight: &none,
            foreign_holder: Some("ops-team"),
            blocking_pods: &blocking,
            now: t("2026-01-05T00:00:00Z"),
        };
        let b = blockers(&s, &cfg("{}"), t("2026-01-05T00:00:00Z"));
        assert_eq!(b.len(), 3, "{b:?}");
        assert_eq!(b[0], Blocker::LockHeldBy("ops-team".into()));
        // The same unready node in flight is rollboot's own doing and blocks nothing.
        let busy = BTreeMap::from([("down".to_string(), entry("2026-01-01T00:00:00Z"))]);
        assert!(blockers(
            &snapshot(&nodes, &busy),
            &cfg("{}"),
            t("2026-01-05T00:00:00Z")
        )
        .is_empty());
    }

    /// A reboot token issued at `at`.
    fn token(at: &str) -> String {
        Token::new(t(at), 0xabc).text
    }

    fn in_state(n: NodeView, state: NodeState, since: &str) -> NodeView {
        NodeView {
            state: Some(state),
            state_since: Some(t(since)),
            ..n
        }
    }

    #[test]
    fn a_new_entry_cordons_and_leaves_an_operator_cordon_alone() {
        let c = cfg("{}");
        let e = entry("2026-01-01T00:00:00Z");
        let now = t("2026-01-01T00:00:01Z");
        let n = flagged("n", "2026-01-01T00:00:00Z", &[]);
        assert_eq!(
            next_step(Some(&n), &e, &c, now),
            Step::Cordon {
                record_cordoned_by: true
            }
        );
        // Cordoned by an operator (the node-lifecycle controller's taint with it).
        let cordoned = NodeView {
            unschedulable: true,
            unschedulable_taint: true,
            ..n.clone()
        };
        assert_eq!(
            next_step(Some(&cordoned), &e, &c, now),
            Step::Cordon {
                record_cordoned_by: false
            }
        );
        // `done` from an earlier cycle does not count for this one.
        let old = in_state(n, NodeState::Done, "2025-12-01T00:00:00Z");
        assert_eq!(
            next_step(Some(&old), &e, &c, now),
            Step::Cordon {
                record_cordoned_by: true
            }
        );
    }

    #[test]
    fn a_cordoned_node_drains_until_its_timeout_then_fails() {
        let c = cfg("drain: {timeout: 10m}");
        let e = entry("2026-01-01T00:00:00Z");
        let n = NodeView {
            unschedulable: true,
            ..in_state(
                flagged("n", "2026-01-01T00:00:00Z", &[]),
                NodeState::Draining,
                "2026-01-01T00:00:00Z",
            )
        };
        assert_eq!(
            next_step(Some(&n), &e, &c, t("2026-01-01T00:05:00Z")),
            Step::Drain {
                deadline: t("2026-01-01T00:10:00Z")
            }
        );
        assert!(matches!(
            next_step(Some(&n), &e, &c, t("2026-01-01T00:10:00Z")),
            Step::Fail(_)
        ));
        let force = cfg("drain: {timeout: 10m, forceDeleteAfterTimeout: true}");
        assert!(matches!(
            next_step(Some(&n), &e, &force, t("2026-01-01T00:11:00Z")),
            Step::Drain { .. }
        ));
    }

    #[test]
    fn a_rebooting_node_is_verified_only_with_a_new_boot_id_and_ready() {
        let c = cfg("reboot: {timeout: 5m}");
        let e = entry("2026-01-01T00:00:00Z");
        let base = NodeView {
            unschedulable: true,
            boot_id_before: Some("boot-1".into()),
            reboot_token: Some(token("2026-01-01T00:01:00Z")),
            ..in_state(
                flagged("n", "2026-01-01T00:00:00Z", &[]),
                NodeState::Rebooting,
                "2026-01-01T00:01:00Z",
            )
        };
        let now = t("2026-01-01T00:02:00Z");
        assert_eq!(
            next_step(Some(&base), &e, &c, now),
            Step::AwaitReboot {
                deadline: t("2026-01-01T00:06:00Z")
            }
        );
        let back_not_ready = NodeView {
            boot_id: "boot-2".into(),
            ready: false,
            ..base.clone()
        };
        assert!(matches!(
            next_step(Some(&back_not_ready), &e, &c, now),
            Step::AwaitReboot { .. }
        ));
        let back = NodeView {
            boot_id: "boot-2".into(),
            ..base.clone()
        };
        assert_eq!(next_step(Some(&back), &e, &c, now), Step::MarkVerifying);
        // Ready with a new boot ID, but the node-lifecycle controller still has its not-ready
        // taint on: pods scheduled after an uncordon now could be evicted by it. Not back yet.
        let still_tainted = NodeView {
            not_ready_taint: true,
            ..back.clone()
        };
        assert!(matches!(
            next_step(Some(&still_tainted), &e, &c, now),
            Step::AwaitReboot { .. }
        ));
        assert!(matches!(
            next_step(Some(&base), &e, &c, t("2026-01-01T00:06:00Z")),
            Step::Fail(_)
        ));
    }

    #[test]
    fn after_a_cordon_or_uncordon_the_next_write_waits_for_the_lifecycle_taint_a_bounded_time() {
        let c = cfg("{}");
        let e = entry("2026-01-01T00:00:00Z");
        let since = "2026-01-01T00:01:00Z";
        // Cordoned by rollboot; the controller-manager has not written its taint yet.
        let cordoned = NodeView {
            unschedulable: true,
            cordoned_by: Some("c-0".into()),
            ..in_state(
                flagged("n", "2026-01-01T00:00:00Z", &[]),
                NodeState::Cordoning,
                since,
            )
        };
        assert_eq!(
            next_step(Some(&cordoned), &e, &c, t("2026-01-01T00:01:00.500Z")),
            Step::Settle {
                until: t("2026-01-01T00:01:02Z")
            }
        );
        let mirrored = NodeView {
            unschedulable_taint: true,
            ..cordoned.clone()
        };
        assert!(matches!(
            next_step(Some(&mirrored), &e, &c, t("2026-01-01T00:01:00.500Z")),
            Step::Drain { .. }
        ));
        // A cluster that never writes the taint only costs the bound.
        assert!(matches!(
            next_step(Some(&cordoned), &e, &c, t("2026-01-01T00:01:02Z")),
            Step::Drain { .. }
        ));
        // Uncordoned with `verifying`; the taint still there.
        let uncordoned = NodeView {
            unschedulable: false,
            cordoned_by: None,
            unschedulable_taint: true,
            boot_id: "boot-2".into(),
            boot_id_before: Some("boot-1".into()),
            ..in_state(
                flagged("n", "2026-01-01T00:00:00Z", &[]),
                NodeState::Verifying,
                since,
            )
        };
        assert!(matches!(
            next_step(Some(&uncordoned), &e, &c, t("2026-01-01T00:01:00.010Z")),
            Step::Settle { .. }
        ));
        let gone = NodeView {
            unschedulable_taint: false,
            ..uncordoned
        };
        assert!(matches!(
            next_step(Some(&gone), &e, &c, t("2026-01-01T00:01:00.010Z")),
            Step::HealthGate { .. }
        ));
    }

    #[test]
    fn verifying_uncordons_only_what_rollboot_cordoned() {
        let c = cfg("{}");
        let e = entry("2026-01-01T00:00:00Z");
        let now = t("2026-01-01T00:02:00Z");
        let ours = NodeView {
            unschedulable: true,
            cordoned_by: Some("rollboot".into()),
            boot_id: "boot-2".into(),
            boot_id_before: Some("boot-1".into()),
            ..in_state(
                flagged("n", "2026-01-01T00:00:00Z", &[]),
                NodeState::Verifying,
                "2026-01-01T00:01:00Z",
            )
        };
        assert_eq!(next_step(Some(&ours), &e, &c, now), Step::Uncordon);
        let operators = NodeView {
            cordoned_by: None,
            ..ours
        };
        assert!(matches!(
            next_step(Some(&operators), &e, &c, now),
            Step::HealthGate { .. }
        ));
    }

    #[test]
    fn a_finished_node_frees_its_slot() {
        let c = cfg("{}");
        let e = entry("2026-01-01T00:00:00Z");
        let now = t("2026-01-01T00:02:00Z");
        let done = in_state(
            flagged("n", "2026-01-01T00:00:00Z", &[]),
            NodeState::Done,
            "2026-01-01T00:01:00Z",
        );
        assert!(matches!(next_step(Some(&done), &e, &c, now), Step::Free(_)));
    }

    #[test]
    fn a_deleted_node_keeps_its_slot_while_its_host_may_be_out() {
        // Drain 6m + reboot 4m: the host may be out until 00:10 of a cycle started at 00:00.
        let c = cfg("{drain: {timeout: 6m}, reboot: {timeout: 4m}}");
        let e = entry("2026-01-01T00:00:00Z");
        let end = t("2026-01-01T00:10:00Z");
        let during = t("2026-01-01T00:09:59Z");
        assert_eq!(
            next_step(None, &e, &c, during),
            Step::Hold {
                until: end,
                why: "the node was deleted from the cluster while in maintenance; its host may still be draining or rebooting".into()
            }
        );
        match next_step(None, &e, &c, end) {
            Step::Free(why) => assert!(
                why.contains(
                    "was not registered again within the drain and reboot timeouts (6m + 4m)"
                ),
                "{why}"
            ),
            other => panic!("{other:?}"),
        }
        // Being deleted (a finalizer holds it): the same.
        let deleting = NodeView {
            deleting: true,
            unschedulable: true,
            ..in_state(
                flagged("n", "2026-01-01T00:00:00Z", &[]),
                NodeState::Rebooting,
                "2026-01-01T00:01:00Z",
            )
        };
        assert!(
            matches!(next_step(Some(&deleting), &e, &c, during), Step::Hold { until, .. } if until == end)
        );
        assert!(matches!(
            next_step(Some(&deleting), &e, &c, end),
            Step::Free(_)
        ));
    }

    #[test]
    fn a_node_registered_again_unflagged_is_never_rebooted_twice() {
        let c = cfg("{drain: {timeout: 6m}, reboot: {timeout: 4m}}");
        let e = entry("2026-01-01T00:00:00Z");
        let now = t("2026-01-01T00:03:00Z");
        // Registered again by its kubelet while the host boots: no annotations, NotReady.
        let mut fresh = node("n", &[]);
        fresh.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "False".into();
        let booting = NodeView::from_node(&fresh);
        assert!(matches!(
            next_step(Some(&booting), &e, &c, now),
            Step::Hold { .. }
        ));
        // Ready but the node-lifecycle controller's taint still on: still out.
        let tainted = NodeView {
            ready: true,
            not_ready_taint: true,
            ..booting.clone()
        };
        assert!(matches!(
            next_step(Some(&tainted), &e, &c, now),
            Step::Hold { .. }
        ));
        // Back and Ready: the slot is freed, no cordon, no second reboot.
        let back = NodeView::from_node(&node("n", &[]));
        assert!(matches!(next_step(Some(&back), &e, &c, now), Step::Free(_)));
        // Never Ready within the timeouts: it fails, which the rollout's maxFailures counts.
        match next_step(Some(&booting), &e, &c, t("2026-01-01T00:10:00Z")) {
            Step::Fail(why) => assert!(why.contains("was not Ready within"), "{why}"),
            other => panic!("{other:?}"),
        }
        // Flagged again (its host did not reboot: the sentinel is still there): the cycle
        // starts over from the cordon.
        let again = flagged("n", "2026-01-01T00:02:00Z", &[]);
        assert_eq!(
            next_step(Some(&again), &e, &c, now),
            Step::Cordon {
                record_cordoned_by: true
            }
        );
    }

    /// A node in the lock since `e`, cordoned by rollboot, asked to reboot at 00:01 (token,
    /// boot ID `boot-1` before), its agent having acknowledged the token.
    fn rebooting(ack: bool) -> NodeView {
        let tok = token("2026-01-01T00:01:00Z");
        NodeView {
            unschedulable: true,
            cordoned_by: Some("c-0".into()),
            boot_id_before: Some("boot-1".into()),
            reboot_ack: ack.then(|| tok.clone()),
            reboot_token: Some(tok),
            reboot_attempt: Some(1),
            ..in_state(
                flagged("n", "2026-01-01T00:00:00Z", &[]),
                NodeState::Rebooting,
                "2026-01-01T00:01:00Z",
            )
        }
    }

    #[test]
    fn after_its_ack_only_a_failed_reboot_command_fails_the_node() {
        let c = cfg("{}");
        let now = t("2026-01-01T00:02:00Z");
        let e = entry("2026-01-01T00:00:00Z");
        let refusing = |ack: bool, cause: proto::RefusalCause| {
            let n = rebooting(ack);
            NodeView {
                reboot_refused: Some(proto::Refusal {
                    token: n.reboot_token.clone().unwrap(),
                    cause,
                    reason: "x".into(),
                    at: "2026-01-01T00:01:30Z".into(),
                }),
                ..n
            }
        };
        // Acknowledged, then refused for a cause that says nothing of the reboot: ignored.
        for cause in [
            proto::RefusalCause::AckUnreadable,
            proto::RefusalCause::WrongHost,
            proto::RefusalCause::HostUnknown,
        ] {
            let n = refusing(true, cause);
            assert!(
                matches!(next_step(Some(&n), &e, &c, now), Step::AwaitReboot { .. }),
                "{cause}: {:?}",
                next_step(Some(&n), &e, &c, now)
            );
        }
        let n = refusing(true, proto::RefusalCause::RebootCommandFailed);
        assert!(matches!(next_step(Some(&n), &e, &c, now), Step::Fail(_)));
        // Refused before any ack: taken as before.
        let n = refusing(false, proto::RefusalCause::AckUnreadable);
        assert!(matches!(next_step(Some(&n), &e, &c, now), Step::Fail(_)));
    }

    #[test]
    fn a_draining_state_on_an_uncordoned_node_starts_over_from_the_cordon() {
        let c = cfg("{}");
        let e = entry("2026-01-01T00:00:00Z");
        let now = t("2026-01-01T00:01:00Z");
        let start_over = Step::Cordon {
            record_cordoned_by: true,
        };
        // Forged (or left by an uncordon) on a schedulable node, dated in this cycle or not
        // dated at all: never a drain.
        let forged = in_state(
            flagged("n", "2026-01-01T00:00:00Z", &[]),
            NodeState::Draining,
            "2026-01-01T00:00:30Z",
        );
        assert_eq!(next_step(Some(&forged), &e, &c, now), start_over);
        let undated = NodeView {
            state_since: None,
            ..forged.clone()
        };
        assert_eq!(next_step(Some(&undated), &e, &c, now), start_over);
        assert_eq!(this_cycle(&undated, &e), None);
        // The same state on the cordoned node is this cycle's drain.
        let cordoned = NodeView {
            unschedulable: true,
            ..forged
        };
        assert!(matches!(
            next_step(Some(&cordoned), &e, &c, now),
            Step::Drain { .. }
        ));
    }

    #[test]
    fn rebooting_without_this_cycles_token_and_boot_id_starts_over_and_never_asks_again() {
        let c = cfg("{}");
        let e = entry("2026-01-01T00:00:00Z");
        let now = t("2026-01-01T00:02:00Z");
        let start_over =
            |n: &NodeView| matches!(next_step(Some(n), &e, &c, now), Step::Cordon { .. });
        let ok = rebooting(false);
        assert!(matches!(
            next_step(Some(&ok), &e, &c, now),
            Step::AwaitReboot { .. }
        ));
        // No boot ID to verify against (missing or garbled: it reads as absent).
        assert!(start_over(&NodeView {
            boot_id_before: None,
            ..ok.clone()
        }));
        // No token, or a token of an earlier cycle.
        assert!(start_over(&NodeView {
            reboot_token: None,
            ..ok.clone()
        }));
        assert!(start_over(&NodeView {
            reboot_token: Some(token("2025-12-31T23:59:59Z")),
            ..ok.clone()
        }));
        // Uncordoned before the agent took the token: the agent would refuse it; start over.
        assert!(start_over(&NodeView {
            unschedulable: false,
            ..ok.clone()
        }));
        // Uncordoned after the agent took it: the reboot is under way and cannot be called
        // back; it is awaited.
        let taken = NodeView {
            unschedulable: false,
            ..rebooting(true)
        };
        assert!(matches!(
            next_step(Some(&taken), &e, &c, now),
            Step::AwaitReboot { .. }
        ));
        // Nothing decided here ever asks for a reboot of an uncordoned node.
        assert!(may_request_reboot(&NodeView {
            unschedulable: false,
            ..ok.clone()
        })
        .unwrap_err()
        .contains("not cordoned"));
        assert_eq!(may_request_reboot(&ok), Ok(()));
    }

    #[test]
    fn a_garbled_or_backward_state_behind_this_cycles_token_awaits_the_reboot_and_never_asks_again()
    {
        let c = cfg("reboot: {timeout: 5m}");
        let e = entry("2026-01-01T00:00:00Z");
        let now = t("2026-01-01T00:02:00Z");
        let issued = rebooting(false).reboot_token.clone();
        let issued_at = Token::parse(issued.as_deref().unwrap()).unwrap().issued;
        for acked in [false, true] {
            let r = rebooting(acked);
            // `kubectl annotate ... state=banana`: the state reads as none. Gone backwards to
            // `cordoning` or `draining`, or forward to `done` with the boot ID still to verify.
            let garbled = NodeView {
                state: None,
                malformed: vec![proto::Malformed {
                    key: proto::STATE,
                    value: "banana".into(),
                    expected: "a state",
                }],
                ..r.clone()
            };
            let undated = NodeView {
                state_since: None,
                ..r.clone()
            };
            let backwards = |s: NodeState| in_state(r.clone(), s, "2026-01-01T00:01:30Z");
            for n in [
                garbled,
                undated,
                backwards(NodeState::Cordoning),
                backwards(NodeState::Draining),
                backwards(NodeState::Done),
            ] {
                assert_eq!(
                    position(&n, &e),
                    Position::At(NodeState::Rebooting, issued_at),
                    "{:?} acked {acked}",
                    n.state
                );
                // The reboot's deadline runs from the token, not from the state written.
                assert_eq!(
                    next_step(Some(&n), &e, &c, now),
                    Step::AwaitReboot {
                        deadline: issued_at + chrono::Duration::minutes(5)
                    },
                    "{:?} acked {acked}",
                    n.state
                );
                // Not unflagged either: never taken for a Node registered again.
                let quiet = NodeView {
                    reboot_required: false,
                    ..n.clone()
                };
                assert!(matches!(
                    next_step(Some(&quiet), &e, &c, now),
                    Step::AwaitReboot { .. }
                ));
                // Back with a new boot ID: verified, as any reboot.
                let back = NodeView {
                    boot_id: "boot-2".into(),
                    ready: true,
                    ..n.clone()
                };
                assert_eq!(next_step(Some(&back), &e, &c, now), Step::MarkVerifying);
                // Lost on the same boot: the one case a new token is issued.
                if acked {
                    let lost = NodeView {
                        reboot_lost: n.reboot_token.clone(),
                        ..n.clone()
                    };
                    assert_eq!(
                        next_step(Some(&lost), &e, &c, now),
                        Step::RequestReboot { attempt: 2 }
                    );
                }
            }
        }
        // A `verifying` written after the new boot stands.
        let verifying = NodeView {
            boot_id: "boot-2".into(),
            ..in_state(
                rebooting(true),
                NodeState::Verifying,
                "2026-01-01T00:01:40Z",
            )
        };
        assert_eq!(
            position(&verifying, &e),
            Position::At(NodeState::Verifying, t("2026-01-01T00:01:40Z"))
        );
        // A `done` written by the cycle's end (boot-id-before removed with it) ends it.
        let done = NodeView {
            boot_id_before: None,
            ..in_state(rebooting(true), NodeState::Done, "2026-01-01T00:01:50Z")
        };
        assert_eq!(
            next_step(Some(&done), &e, &c, now),
            Step::Free("its cycle is done".into())
        );
    }

    #[test]
    fn a_node_uncordoned_a_moment_ago_is_cordoned_once_the_lifecycle_taint_is_off() {
        // `rollboot retry` uncordoned it; the node-lifecycle controller has not yet taken its
        // unschedulable taint off: a cordon now would be refused (409, found on a real control
        // plane, check 5c).
        let c = cfg("{}");
        let e = entry("2026-01-01T00:00:00Z");
        let retried = NodeView {
            unschedulable: false,
            unschedulable_taint: true,
            ..flagged("n", "2026-01-01T00:00:00Z", &[])
        };
        assert_eq!(
            next_step(Some(&retried), &e, &c, t("2026-01-01T00:00:01Z")),
            Step::Settle {
                until: t("2026-01-01T00:00:02Z")
            }
        );
        // Bounded: a cluster whose controller never writes the taint is not waited for.
        assert_eq!(
            next_step(Some(&retried), &e, &c, t("2026-01-01T00:00:02Z")),
            Step::Cordon {
                record_cordoned_by: true
            }
        );
        let settled = NodeView {
            unschedulable_taint: false,
            ..retried
        };
        assert_eq!(
            next_step(Some(&settled), &e, &c, t("2026-01-01T00:00:01Z")),
            Step::Cordon {
                record_cordoned_by: true
            }
        );
    }

    #[test]
    fn a_taken_token_without_a_boot_id_to_verify_against_fails_the_node_instead_of_asking_again() {
        let c = cfg("{}");
        let e = entry("2026-01-01T00:00:00Z");
        let now = t("2026-01-01T00:02:00Z");
        let garbled = NodeView {
            boot_id_before: None,
            ..rebooting(true)
        };
        match next_step(Some(&garbled), &e, &c, now) {
            Step::Fail(why) => assert!(
                why.contains(proto::BOOT_ID_BEFORE) && why.contains("no new token"),
                "{why}"
            ),
            s => panic!("{s:?}"),
        }
        // The warning says the same.
        let w = annotation_warnings(
            &NodeView {
                malformed: vec![proto::Malformed {
                    key: proto::BOOT_ID_BEFORE,
                    value: " ".into(),
                    expected: "a boot ID",
                }],
                ..garbled
            },
            Some(&e),
        );
        assert!(w[0].note.contains("fails rather than"), "{}", w[0].note);
    }

    #[test]
    fn a_state_against_this_cycles_token_is_warned_about_naming_key_and_value() {
        let e = entry("2026-01-01T00:00:00Z");
        let back = in_state(rebooting(true), NodeState::Draining, "2026-01-01T00:01:30Z");
        let w = annotation_warnings(&back, Some(&e));
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!((w[0].key, w[0].value.as_str()), (proto::STATE, "draining"));
        assert!(
            w[0].note.contains("`draining`")
                && w[0].note.contains("read as rebooting")
                && w[0].note.contains("no second token"),
            "{}",
            w[0].note
        );
        let garbled = NodeView::from_node(&annotate(
            annotate(
                annotate(
                    annotate(
                        annotate(node("n", &[]), proto::STATE, "banana"),
                        proto::STATE_SINCE,
                        "2026-01-01T00:01:00Z",
                    ),
                    proto::BOOT_ID_BEFORE,
                    "boot-1",
                ),
                proto::REBOOT,
                &token("2026-01-01T00:01:00Z"),
            ),
            proto::REBOOT_ACK,
            &token("2026-01-01T00:01:00Z"),
        ));
        let w = annotation_warnings(&garbled, Some(&e));
        assert_eq!(w.len(), 1, "{w:?}");
        assert_eq!((w[0].key, w[0].value.as_str()), (proto::STATE, "banana"));
        assert!(
            w[0].note.contains("goes on as rebooting") && !w[0].note.contains("starts over"),
            "{}",
            w[0].note
        );
        // Agreeing states say nothing.
        assert!(annotation_warnings(&rebooting(true), Some(&e)).is_empty());
    }

    #[test]
    fn a_lost_lock_is_rebuilt_with_a_node_whose_garbled_state_holds_a_token() {
        let c = cfg("{}");
        let now = t("2026-01-01T00:02:00Z");
        let garbled = NodeView {
            state: None,
            ..rebooting(true)
        };
        let record = rebuild(
            std::slice::from_ref(&garbled),
            "c-1",
            &c,
            now,
            &BTreeSet::new(),
        );
        let e = record.get("n").expect("the node stays in flight");
        assert_eq!(
            (e.state, e.since),
            (NodeState::Rebooting, t("2026-01-01T00:01:00Z"))
        );
        assert!(matches!(
            next_step(Some(&garbled), e, &c, now),
            Step::AwaitReboot { .. }
        ));
    }

    #[test]
    fn verifying_without_a_new_boot_id_starts_over() {
        let c = cfg("{}");
        let e = entry("2026-01-01T00:00:00Z");
        let now = t("2026-01-01T00:02:00Z");
        let forged = NodeView {
            unschedulable: false,
            ..in_state(
                flagged("n", "2026-01-01T00:00:00Z", &[]),
                NodeState::Verifying,
                "2026-01-01T00:01:00Z",
            )
        };
        assert!(matches!(
            next_step(Some(&forged), &e, &c, now),
            Step::Cordon { .. }
        ));
        let same_boot = NodeView {
            boot_id_before: Some("boot-1".into()),
            ..forged.clone()
        };
        assert!(matches!(
            next_step(Some(&same_boot), &e, &c, now),
            Step::Cordon { .. }
        ));
        let rebooted = NodeView {
            boot_id: "boot-2".into(),
            ..same_boot
        };
        assert!(matches!(
            next_step(Some(&rebooted), &e, &c, now),
            Step::HealthGate { .. }
        ));
    }

    #[test]
    fn a_lost_reboot_gets_a_new_token_until_the_attempts_are_spent() {
        let c = cfg("reboot: {timeout: 5m}");
        let e = entry("2026-01-01T00:00:00Z");
        let now = t("2026-01-01T00:02:00Z");
        let acked = rebooting(true);
        // Acknowledged and not lost: the reboot is under way.
        assert!(matches!(
            next_step(Some(&acked), &e, &c, now),
            Step::AwaitReboot { .. }
        ));
        let lost = NodeView {
            reboot_lost: acked.reboot_token.clone(),
            ..acked.clone()
        };
        assert_eq!(
            next_step(Some(&lost), &e, &c, now),
            Step::RequestReboot { attempt: 2 }
        );
        // Past the deadline too: a lost token is answered, not timed out.
        assert_eq!(
            next_step(Some(&lost), &e, &c, t("2026-01-01T00:09:00Z")),
            Step::RequestReboot { attempt: 2 }
        );
        let second = NodeView {
            reboot_attempt: Some(2),
            ..lost.clone()
        };
        assert_eq!(
            next_step(Some(&second), &e, &c, now),
            Step::RequestReboot { attempt: 3 }
        );
        let last = NodeView {
            reboot_attempt: Some(REBOOT_ATTEMPTS),
            ..lost.clone()
        };
        match next_step(Some(&last), &e, &c, now) {
            Step::Fail(why) => assert!(
                why.contains("acknowledged 3 reboot token(s)")
                    && why.contains("boot ID is still boot-1"),
                "{why}"
            ),
            s => panic!("{s:?}"),
        }
        // A garbled count is not a licence for more tokens.
        let garbled = NodeView {
            reboot_attempt: None,
            malformed: vec![proto::Malformed {
                key: proto::REBOOT_ATTEMPT,
                value: "many".into(),
                expected: "",
            }],
            ..lost.clone()
        };
        assert!(matches!(
            next_step(Some(&garbled), &e, &c, now),
            Step::Fail(_)
        ));
        // A lost report of an older token, or a host that did reboot, is no reason.
        let old_report = NodeView {
            reboot_lost: Some(token("2026-01-01T00:00:30Z")),
            ..acked.clone()
        };
        assert!(matches!(
            next_step(Some(&old_report), &e, &c, now),
            Step::AwaitReboot { .. }
        ));
        let came_back = NodeView {
            boot_id: "boot-2".into(),
            ..lost.clone()
        };
        assert_eq!(
            next_step(Some(&came_back), &e, &c, now),
            Step::MarkVerifying
        );
        // Lost on an uncordoned node: nothing is under way, and the cycle starts over.
        let open = NodeView {
            unschedulable: false,
            ..lost
        };
        assert!(matches!(
            next_step(Some(&open), &e, &c, now),
            Step::Cordon { .. }
        ));
    }

    #[test]
    fn a_reboot_timeout_says_what_did_not_happen() {
        let c = cfg("reboot: {timeout: 5m}");
        let e = entry("2026-01-01T00:00:00Z");
        let late = t("2026-01-01T00:06:00Z");
        let reason = |n: &NodeView| match next_step(Some(n), &e, &c, late) {
            Step::Fail(why) => why,
            s => panic!("{s:?}"),
        };
        assert!(reason(&rebooting(false)).contains("did not acknowledge reboot token"));
        assert!(reason(&rebooting(true)).contains("boot ID is still boot-1"));
        let down = NodeView {
            boot_id: "boot-2".into(),
            ready: false,
            ..rebooting(true)
        };
        assert!(reason(&down).contains("boot-1 -> boot-2) but is not Ready"));
        let tainted = NodeView {
            boot_id: "boot-2".into(),
            not_ready_taint: true,
            ..rebooting(true)
        };
        assert!(reason(&tainted).contains("not-ready or unreachable taint"));
    }

    #[test]
    fn the_in_flight_record_is_rebuilt_from_the_states_rollboot_wrote() {
        let c = cfg("{}");
        let now = t("2026-01-01T00:02:00Z");
        let cordoned = |n: NodeView| NodeView {
            unschedulable: true,
            ..n
        };
        let nodes = vec![
            // Draining on a cordoned node: resumed.
            cordoned(in_state(
                flagged("a", "2026-01-01T00:00:00Z", &[]),
                NodeState::Draining,
                "2026-01-01T00:01:00Z",
            )),
            // Rebooting with its token: resumed, dated by its own state-since.
            NodeView {
                name: "b".into(),
                ..rebooting(true)
            },
            // A forged draining on an uncordoned node: left out.
            in_state(
                flagged("c", "2026-01-01T00:00:00Z", &[]),
                NodeState::Draining,
                "2026-01-01T00:01:00Z",
            ),
            // Done and failed are not in flight.
            in_state(
                flagged("d", "2026-01-01T00:00:00Z", &[]),
                NodeState::Done,
                "2026-01-01T00:01:00Z",
            ),
            in_state(
                flagged("e", "2026-01-01T00:00:00Z", &[]),
                NodeState::Failed,
                "2026-01-01T00:01:00Z",
            ),
            // Being deleted: nothing to resume.
            NodeView {
                deleting: true,
                ..cordoned(in_state(
                    flagged("f", "2026-01-01T00:00:00Z", &[]),
                    NodeState::Cordoning,
                    "2026-01-01T00:01:00Z",
                ))
            },
            // No state-since: not a state rollboot wrote.
            NodeView {
                state_since: None,
                ..cordoned(in_state(
                    flagged("g", "2026-01-01T00:00:00Z", &[]),
                    NodeState::Draining,
                    "2026-01-01T00:01:00Z",
                ))
            },
        ];
        let r = rebuild(&nodes, "c-1", &c, now, &BTreeSet::new());
        assert_eq!(r.keys().collect::<Vec<_>>(), ["a", "b"]);
        // A node this leader acts on is in flight, whatever its Node shows yet: here `c`'s
        // state without the cordon, as between the two writes of a start.
        let acting = BTreeSet::from(["c".to_string()]);
        let r2 = rebuild(&nodes, "c-1", &c, now, &acting);
        assert_eq!(r2.keys().collect::<Vec<_>>(), ["a", "b", "c"]);
        assert_eq!(
            r["b"],
            LockEntry {
                group: None,
                state: NodeState::Rebooting,
                since: t("2026-01-01T00:01:00Z"),
                leader: "c-1".into(),
            }
        );
        // What it resumes: each goes on where it was.
        assert!(matches!(
            next_step(Some(&nodes[0]), &r["a"], &c, now),
            Step::Drain { .. }
        ));
        assert!(matches!(
            next_step(Some(&nodes[1]), &r["b"], &c, now),
            Step::AwaitReboot { .. }
        ));
    }

    #[test]
    fn malformed_annotations_are_named_with_what_rollboot_does() {
        use crate::node::fixtures::annotate;
        let n = NodeView::from_node(&annotate(
            annotate(
                annotate(
                    annotate(node("n7", &[]), proto::STATE, "exploding"),
                    proto::BOOT_ID_BEFORE,
                    " ",
                ),
                proto::REBOOT_ACK,
                "yes",
            ),
            proto::HEALTH_GATE,
            "{not json",
        ));
        assert_eq!(n.state, None);
        assert_eq!(n.boot_id_before, None);
        let w = annotation_warnings(&n, Some(&entry("2026-01-01T00:00:00Z")));
        let keys: Vec<&str> = w.iter().map(|w| w.key).collect();
        assert_eq!(
            keys,
            [
                proto::BOOT_ID_BEFORE,
                proto::REBOOT_ACK,
                proto::STATE,
                proto::HEALTH_GATE
            ]
        );
        for w in &w {
            assert!(
                w.note.starts_with("node n7: ") && w.note.contains(w.key),
                "{}",
                w.note
            );
        }
        assert!(
            w[2].note.contains("`exploding`") && w[2].note.contains("starts over from the cordon")
        );
        assert!(w[1].note.contains("agent acts on no reboot token"));
        assert!(w[3].note.contains("fails at its health gate"));
        // Outside the lock, a garbled state is only read as none.
        let outside = annotation_warnings(&n, None);
        assert!(
            outside[2].note.contains("if flagged"),
            "{}",
            outside[2].note
        );
        // And the health gate fails rather than pass blind.
        let verifying = NodeView {
            state: Some(NodeState::Verifying),
            state_since: Some(t("2026-01-01T00:01:00Z")),
            boot_id: "boot-2".into(),
            boot_id_before: Some("boot-1".into()),
            ..n
        };
        match next_step(
            Some(&verifying),
            &entry("2026-01-01T00:00:00Z"),
            &cfg("{}"),
            t("2026-01-01T00:02:00Z"),
        ) {
            Step::Fail(why) => assert!(why.contains(proto::HEALTH_GATE), "{why}"),
            s => panic!("{s:?}"),
        }
        // A clean node has nothing to say.
        assert!(annotation_warnings(
            &flagged("ok", "2026-01-01T00:00:00Z", &[]),
            Some(&entry("2026-01-01T00:00:00Z"))
        )
        .is_empty());
    }

    #[test]
    fn a_failure_within_max_failures_says_the_rollout_goes_on() {
        let halts = after_failure(1, &cfg("{}"));
        assert!(
            halts.starts_with("the rollout halts: 1 failed node(s), at most 0"),
            "{halts}"
        );
        let goes_on = after_failure(2, &cfg("failures: {maxFailures: 2}"));
        assert!(
            goes_on.starts_with("the rollout goes on: 2 failed node(s), up to 2"),
            "{goes_on}"
        );
        assert!(after_failure(3, &cfg("failures: {maxFailures: 2}")).contains("halts"));
    }

    #[test]
    fn a_pass_over_the_nodes_that_need_a_look_and_those_in_the_lock_decides_as_over_every_node() {
        use k8s_openapi::api::core::v1::Taint;
        use rand::{Rng, SeedableRng};
        let config = cfg(
            "concurrency: {maxNodes: 4, groupBy: zone, maxNodesPerGroup: 2}\n\
             blockers: {maxUnreadyNodes: 2}\nfailures: {maxFailures: 1}\n\
             nodes: {selector: 'pool!=gpu'}\n\
             hooks: {preferNoScheduleTaint: rollboot.dev/reboot-pending}\n",
        );
        let mut rng = rand::rngs::SmallRng::seed_from_u64(14);
        for round in 0..200 {
            let mut views = Vec::new();
            for i in 0..30 {
                let zone = ["a", "b", "c"][rng.random_range(0..3)];
                let pool = if rng.random_bool(0.2) { "gpu" } else { "web" };
                let mut n = node(&format!("n-{i:02}"), &[("zone", zone), ("pool", pool)]);
                let add = |n, key, value: &str| annotate(n, key, value);
                if rng.random_bool(0.4) {
                    let at = format!("2026-01-0{}T00:00:00Z", rng.random_range(1..4));
                    n = add(n, proto::REBOOT_REQUIRED, &at);
                }
                if rng.random_bool(0.1) {
                    n = add(n, proto::REBOOT_REQUESTED, "now");
                }
                let state = ["", "done", "failed", "draining", "bogus"][rng.random_range(0..5)];
                if !state.is_empty() {
                    n = add(n, proto::STATE, state);
                }
                if rng.random_bool(0.05) {
                    n = add(n, proto::HOOKS, "{not json");
                }
                if rng.random_bool(0.1) {
                    n = add(n, proto::EXCLUDE, "true");
                }
                if rng.random_bool(0.15) {
                    let status = n.status.as_mut().unwrap();
                    status.conditions.as_mut().unwrap()[0].status = "False".into();
                }
                if rng.random_bool(0.2) {
                    n.spec.as_mut().unwrap().taints = Some(vec![Taint {
                        key: "rollboot.dev/reboot-pending".into(),
                        effect: "PreferNoSchedule".into(),
                        ..Default::default()
                    }]);
                }
                if rng.random_bool(0.05) {
                    n.metadata.deletion_timestamp =
                        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                        ));
                }
                views.push(NodeView::from_node(&n));
            }
            let mut in_flight = BTreeMap::new();
            for v in views.iter().filter(|_| rng.random_bool(0.1)) {
                let mut e = entry("2026-01-01T00:00:00Z");
                e.group = v.labels.get("zone").cloned();
                in_flight.insert(v.name.clone(), e);
            }
            let every: Vec<&NodeView> = views.iter().collect();
            let looked: Vec<&NodeView> = views
                .iter()
                .filter(|v| needs_a_look(v, &config) || in_flight.contains_key(&v.name))
                .collect();
            let snap = |nodes| Snapshot {
                rooms: None,
                nodes,
                in_flight: &in_flight,
                foreign_holder: None,
                blocking_pods: &[],
                now: t("2026-01-05T00:00:00Z"),
            };
            let (all, some) = (snap(&every), snap(&looked));
            let now = t("2026-01-05T00:00:00Z");
            assert_eq!(
                blockers(&all, &config, now),
                blockers(&some, &config, now),
                "round {round}"
            );
            assert_eq!(names(pick(&all, &config)), names(pick(&some, &config)));
            assert_eq!(
                names(undated_requests(every.iter().copied())),
                names(undated_requests(looked.iter().copied()))
            );
            let taints = |nodes: &[&NodeView]| {
                hooks::prefer_no_schedule_changes(nodes.iter().copied(), &config)
                    .into_iter()
                    .map(|(n, t)| (n.name.clone(), t))
                    .collect::<Vec<_>>()
            };
            assert_eq!(taints(&every), taints(&looked), "round {round}");
            for v in &views {
                if !annotation_warnings(v, in_flight.get(&v.name)).is_empty() {
                    assert!(looked.iter().any(|l| l.name == v.name), "{}", v.name);
                }
            }
            let mut states = HashMap::new();
            for s in views.iter().filter_map(|v| v.state) {
                *states.entry(s).or_default() += 1;
            }
            let mut record = crate::lock::LockRecord::default();
            record.entries = in_flight.clone();
            let gauges = |nodes: &[&NodeView]| {
                let g = super::super::observe::gauges(nodes, &states, &record, &[], &config, "x");
                (g.nodes_by_state, g.node_state_since, g.halted)
            };
            assert_eq!(gauges(&every), gauges(&looked), "round {round}");
        }
    }

    #[test]
    fn without_a_group_limit_the_first_free_slots_are_picked_in_order_as_a_full_sort_would() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(3);
        for yaml in [
            "concurrency: {maxNodes: 3}\nnodes: {order: name}",
            "concurrency: {maxNodes: 3}",
        ] {
            let config = cfg(yaml);
            for _ in 0..200 {
                let views: Vec<NodeView> = (0..rng.random_range(0..12))
                    .map(|i| {
                        let at = format!("2026-01-0{}T00:00:00Z", rng.random_range(1..4));
                        let at = if rng.random_bool(0.1) {
                            "now".into()
                        } else {
                            at
                        };
                        flagged(
                            &format!("n-{:02}", rng.random_range(0..40) * 12 + i),
                            &at,
                            &[],
                        )
                    })
                    .collect();
                let mut in_flight = BTreeMap::new();
                for v in views.iter().filter(|_| rng.random_bool(0.15)).take(2) {
                    in_flight.insert(v.name.clone(), entry("2026-01-01T00:00:00Z"));
                }
                let mut all: Vec<&NodeView> = views
                    .iter()
                    .filter(|v| !in_flight.contains_key(&v.name))
                    .collect();
                sort_candidates(&mut all, config.nodes.order);
                all.truncate(3 - in_flight.len());
                let s = snapshot(&views, &in_flight);
                assert_eq!(names(pick(&s, &config)), names(all), "{yaml}");
            }
        }
    }

    /// A FleetLock host's node in flight since `since`, drained and past its afterDrain
    /// hooks' start (none configured), with `extra` annotations.
    fn fleetlock_drained(since: &str, extra: &[(&str, &str)]) -> NodeView {
        let mut n = node("fl", &[]);
        n.spec.get_or_insert_with(Default::default).unschedulable = Some(true);
        for (k, v) in [
            (proto::STATE, "draining"),
            (proto::STATE_SINCE, since),
            (proto::CORDONED_BY, "c-0"),
            (proto::REBOOT_REQUESTED, since),
            (proto::REBOOT_REQUESTED_REASON, proto::FLEETLOCK_REASON),
            (proto::FLEETLOCK, r#"{"id":"abc","group":"default"}"#),
        ]
        .into_iter()
        .chain(extra.iter().copied())
        {
            n = annotate(n, k, v);
        }
        let view = NodeView::from_node(&n);
        let p = crate::hooks::decide::begin_patch(Phase::AfterDrain, &cfg("{}"), &view, t(since));
        let hooks = p["metadata"]["annotations"][proto::HOOKS].as_str().unwrap();
        NodeView::from_node(&annotate(n, proto::HOOKS, hooks))
    }

    #[test]
    fn a_fleetlock_hosts_reboot_is_handed_to_it_and_verified_like_any_other() {
        let c = cfg("reboot: {timeout: 10m}");
        let e = entry("2026-01-05T00:00:00Z");
        let now = t("2026-01-05T00:05:00Z");
        let drained = fleetlock_drained("2026-01-05T00:01:00Z", &[]);
        assert_eq!(next_step(Some(&drained), &e, &c, now), Step::HandOff);
        // The same node flagged by its agent instead gets a token.
        let mut agent = drained.clone();
        agent.reboot_requested_reason = None;
        assert_eq!(
            next_step(Some(&agent), &e, &c, now),
            Step::RequestReboot { attempt: 1 }
        );
        // Handed off: rebooting since the hand-off, no token, waiting for the host.
        let handed = [
            (proto::STATE, "rebooting"),
            (proto::STATE_SINCE, "2026-01-05T00:02:00Z"),
            (proto::HANDED_OFF, "2026-01-05T00:02:00Z"),
            (proto::BOOT_ID_BEFORE, "boot-1"),
        ];
        let waiting = fleetlock_drained("2026-01-05T00:01:00Z", &handed);
        assert_eq!(
            next_step(Some(&waiting), &e, &c, now),
            Step::AwaitReboot {
                deadline: t("2026-01-05T00:12:00Z")
            }
        );
        // A garbled state does not start the cycle over: the host may be rebooting.
        let mut garbled = waiting.clone();
        garbled.state = Some(NodeState::Cordoning);
        assert_eq!(
            position(&garbled, &e),
            Position::At(NodeState::Rebooting, t("2026-01-05T00:02:00Z"))
        );
        assert!(state_contradiction(&garbled, &e)
            .unwrap()
            .contains("handed to its host"));
        // Never back within reboot.timeout: failed, saying the host did not reboot.
        match next_step(Some(&waiting), &e, &c, t("2026-01-05T00:12:00Z")) {
            Step::Fail(why) => assert!(why.contains("boot ID is still boot-1"), "{why}"),
            s => panic!("{s:?}"),
        }
        // Back on a new boot, Ready: verified as a token's reboot is.
        let mut back = waiting.clone();
        back.boot_id = "boot-2".into();
        assert_eq!(next_step(Some(&back), &e, &c, now), Step::MarkVerifying);
    }

    #[test]
    fn a_fleetlock_host_that_gives_its_slot_back_before_rebooting_is_released() {
        let c = cfg("{}");
        let e = entry("2026-01-05T00:00:00Z");
        let now = t("2026-01-05T00:05:00Z");
        let returned = r#"{"id":"abc","group":"default","returned":"2026-01-05T00:03:00Z"}"#;
        // Given back while draining: the drain's end releases it instead of handing it off.
        let drained = fleetlock_drained("2026-01-05T00:01:00Z", &[(proto::FLEETLOCK, returned)]);
        assert!(
            matches!(next_step(Some(&drained), &e, &c, now), Step::Release(why) if why.contains("gave its slot back"))
        );
        // Given back mid-drain: released at once; given back before the cycle started: drained on.
        let mut mid = drained.clone();
        mid.hooks = None;
        assert!(matches!(
            next_step(Some(&mid), &e, &c, now),
            Step::Release(why) if why.contains("gave its slot back")
        ));
        let before = r#"{"id":"abc","group":"default","returned":"2026-01-04T23:00:00Z"}"#;
        let mut mid = fleetlock_drained("2026-01-05T00:01:00Z", &[(proto::FLEETLOCK, before)]);
        mid.hooks = None;
        assert!(matches!(
            next_step(Some(&mid), &e, &c, now),
            Step::Drain { .. }
        ));
        // Given back after the hand-off, on the same boot.
        let handed = [
            (proto::STATE, "rebooting"),
            (proto::STATE_SINCE, "2026-01-05T00:02:00Z"),
            (proto::HANDED_OFF, "2026-01-05T00:02:00Z"),
            (proto::BOOT_ID_BEFORE, "boot-1"),
            (proto::FLEETLOCK, returned),
        ];
        let mut n = fleetlock_drained("2026-01-05T00:01:00Z", &handed);
        n.ready_since = Some(t("2026-01-04T00:00:00Z"));
        // The host may be going down: held until it has stayed Ready on this boot for
        // reboot.readyWithoutRebootFor (5m) since the hand-off, then released.
        assert!(matches!(
            next_step(Some(&n), &e, &c, t("2026-01-05T00:03:05Z")),
            Step::Hold { until, ref why } if until == t("2026-01-05T00:07:00Z") && why.contains("gave its slot back")
        ));
        assert!(matches!(
            next_step(Some(&n), &e, &c, t("2026-01-05T00:07:00Z")),
            Step::Release(_)
        ));
        // Never while NotReady, nor after a NotReady since the hand-off: only a new boot (or
        // the reboot timeout) ends it then.
        let mut down = n.clone();
        down.ready = false;
        down.ready_since = None;
        assert!(matches!(
            next_step(Some(&down), &e, &c, t("2026-01-05T00:08:00Z")),
            Step::AwaitReboot { .. }
        ));
        let mut flapped = n.clone();
        flapped.ready_since = Some(t("2026-01-05T00:02:30Z"));
        assert!(matches!(
            next_step(Some(&flapped), &e, &c, t("2026-01-05T00:08:00Z")),
            Step::AwaitReboot { .. }
        ));
        assert!(matches!(
            next_step(Some(&flapped), &e, &c, t("2026-01-05T00:17:00Z")),
            Step::Fail(_)
        ));
        // A give-back of an earlier cycle does not count in this one.
        let old = r#"{"id":"abc","group":"default","returned":"2026-01-04T00:00:00Z"}"#;
        let n = fleetlock_drained("2026-01-05T00:01:00Z", &[(proto::FLEETLOCK, old)]);
        assert_eq!(next_step(Some(&n), &e, &c, now), Step::HandOff);
        // After the boot ID changed it is a reboot: verified, not released.
        let mut back = fleetlock_drained("2026-01-05T00:01:00Z", &handed);
        back.boot_id = "boot-2".into();
        assert_eq!(next_step(Some(&back), &e, &c, now), Step::MarkVerifying);
    }

    #[test]
    fn a_fleetlock_groups_own_max_nodes_limits_its_hosts() {
        let c = cfg(
            "concurrency: {maxNodes: 3}\nfleetlock: {listen: '127.0.0.1:0', groups: {edge: {maxNodes: 1}, default: {maxNodes: 3}}}",
        );
        let host = |name: &str, at: &str, group: &str| {
            let mut n = node(name, &[]);
            for (k, v) in [
                (proto::REBOOT_REQUESTED, at),
                (proto::REBOOT_REQUESTED_REASON, proto::FLEETLOCK_REASON),
            ] {
                n = annotate(n, k, v);
            }
            let rec = format!(r#"{{"id":"{name}","group":"{group}"}}"#);
            NodeView::from_node(&annotate(n, proto::FLEETLOCK, &rec))
        };
        let nodes = vec![
            host("e1", "2026-01-01T00:00:00Z", "edge"),
            host("e2", "2026-01-02T00:00:00Z", "edge"),
            host("d1", "2026-01-03T00:00:00Z", "default"),
            flagged("x", "2026-01-04T00:00:00Z", &[]),
        ];
        let none = BTreeMap::new();
        assert_eq!(names(pick(&snapshot(&nodes, &none), &c)), ["e1", "d1", "x"]);
        // With e1 in flight, e2 still waits.
        let busy: BTreeMap<String, LockEntry> =
            [("e1".to_string(), entry("2026-01-05T00:00:00Z"))].into();
        assert_eq!(names(pick(&snapshot(&nodes, &busy), &c)), ["d1", "x"]);
    }

    #[test]
    fn a_host_shutting_down_is_started_at_once_and_handed_over_once_drained() {
        // Windows closed, maxNodes full: a shutdown does not wait for either.
        let c = cfg("windows: [{schedule: '0 2 * * *', duration: 1m}]\nconcurrency: {maxNodes: 1}");
        let down = |name: &str, at: &str| {
            NodeView::from_node(&annotate(node(name, &[]), proto::SHUTDOWN_REQUESTED, at))
        };
        let nodes = vec![
            down("b", "2026-01-05T00:00:02Z"),
            down("a", "2026-01-05T00:00:01Z"),
            flagged("x", "2026-01-01T00:00:00Z", &[]),
            NodeView::from_node(&annotate(
                node("ex", &[(proto::EXCLUDE, "true")]),
                proto::SHUTDOWN_REQUESTED,
                "2026-01-05T00:00:00Z",
            )),
        ];
        let busy: BTreeMap<String, LockEntry> =
            [("x".to_string(), entry("2026-01-05T00:00:00Z"))].into();
        assert_eq!(
            names(shutting_down(&snapshot(&nodes, &busy), &c)),
            ["a", "b"]
        );
        // Drained: handed over (no token), whatever started the cycle.
        let mut drained = fleetlock_drained("2026-01-05T00:01:00Z", &[]);
        drained.reboot_requested = false;
        drained.fleetlock = None;
        drained.shutdown_requested = true;
        drained.cycle_for = Some(proto::CYCLE_FOR_SHUTDOWN.into());
        let e = entry("2026-01-05T00:00:00Z");
        let now = t("2026-01-05T00:05:00Z");
        assert_eq!(next_step(Some(&drained), &e, &c, now), Step::HandOff);
        // Cancelled before the drain's end: released, no reboot.
        let mut cancelled = drained.clone();
        cancelled.shutdown_requested = false;
        assert!(
            matches!(next_step(Some(&cancelled), &e, &c, now), Step::Release(why) if why.contains("cancelled"))
        );
        // Cancelled mid-drain: released at once, the drain not run to its end; a shutdown asked
        // again goes on draining.
        let mut mid = cancelled.clone();
        mid.hooks = None;
        assert!(matches!(
            next_step(Some(&mid), &e, &c, now),
            Step::Release(why) if why.contains("cancelled")
        ));
        mid.shutdown_requested = true;
        assert!(matches!(
            next_step(Some(&mid), &e, &c, now),
            Step::Drain { .. }
        ));
        // Cancelled before the cordon's end too.
        let mut cordoning = cancelled.clone();
        cordoning.state = Some(NodeState::Cordoning);
        assert!(matches!(
            next_step(Some(&cordoning), &e, &c, now),
            Step::Release(_)
        ));
        // Cancelled after the hand-off, on the same boot: released; on a new boot: verified.
        let mut handed = cancelled.clone();
        handed.state = Some(NodeState::Rebooting);
        handed.state_since = Some(t("2026-01-05T00:02:00Z"));
        handed.handed_off = Some(t("2026-01-05T00:02:00Z"));
        handed.boot_id_before = Some("boot-1".into());
        handed.ready_since = Some(t("2026-01-04T00:00:00Z"));
        assert!(matches!(
            next_step(Some(&handed), &e, &c, now),
            Step::Hold { ref why, .. } if why.contains("cancelled")
        ));
        assert!(matches!(
            next_step(Some(&handed), &e, &c, t("2026-01-05T00:07:00Z")),
            Step::Release(_)
        ));
        let mut down = handed.clone();
        down.ready = false;
        assert!(matches!(
            next_step(Some(&down), &e, &c, t("2026-01-05T00:07:00Z")),
            Step::AwaitReboot { .. }
        ));
        let mut back = handed.clone();
        back.boot_id = "boot-2".into();
        assert_eq!(next_step(Some(&back), &e, &c, now), Step::MarkVerifying);
        // Still shutting down after the hand-off: waits for the host.
        let mut waiting = handed.clone();
        waiting.shutdown_requested = true;
        assert!(matches!(
            next_step(Some(&waiting), &e, &c, now),
            Step::AwaitReboot { deadline } if deadline == t("2026-01-05T00:07:00Z")
        ));
        // No shutdown followed the hand-off: it ends as cancelled once the node stayed Ready.
        assert!(matches!(
            next_step(Some(&waiting), &e, &c, t("2026-01-05T00:07:00Z")),
            Step::Release(why) if why.contains("no shutdown followed")
        ));
    }

    #[test]
    fn a_shutdown_request_no_shutdown_follows_ends_cancelled_after_loginds_delay_and_a_margin() {
        // Found by trying rollboot as an attacker would: a request with no shutdown behind it
        // held its node cordoned until reboot.timeout, failed it and halted the rollout.
        let c = cfg("{}");
        let e = entry("2026-01-05T00:00:00Z");
        let mut n = shutdown_draining();
        n.ready_since = Some(t("2026-01-04T00:00:00Z"));
        n.shutdown_requested_at = Some(t("2026-01-05T00:00:00Z"));
        n.shutdown_delay_seconds = Some(60);
        // Within logind's delay (60 s) and the margin (5m): the drain goes on.
        assert!(matches!(
            next_step(Some(&n), &e, &c, t("2026-01-05T00:05:59Z")),
            Step::Drain { .. }
        ));
        match next_step(Some(&n), &e, &c, t("2026-01-05T00:06:00Z")) {
            Step::Release(why) => assert!(why.contains("no shutdown followed"), "{why}"),
            s => panic!("{s:?}"),
        }
        // The host went down meanwhile (NotReady, or Ready again since): not cancelled.
        let mut down = n.clone();
        down.ready = false;
        assert!(matches!(
            next_step(Some(&down), &e, &c, t("2026-01-05T00:09:00Z")),
            Step::Drain { .. } | Step::Fail(_)
        ));
        let mut flapped = n.clone();
        flapped.ready_since = Some(t("2026-01-05T00:01:00Z"));
        assert!(!matches!(
            next_step(Some(&flapped), &e, &c, t("2026-01-05T00:09:00Z")),
            Step::Release(_)
        ));
        // Without a delay in the request, the agent's `agent-host` one; without either, the
        // reboot timeout (15m).
        let mut unknown = n.clone();
        unknown.shutdown_delay_seconds = None;
        assert!(!matches!(
            next_step(Some(&unknown), &e, &c, t("2026-01-05T00:19:59Z")),
            Step::Release(_)
        ));
        assert!(matches!(
            next_step(Some(&unknown), &e, &c, t("2026-01-05T00:20:00Z")),
            Step::Release(_)
        ));
    }

    #[test]
    fn shutdown_drains_beyond_max_nodes_are_capped_by_max_shutdown_drains() {
        let shutting = |name: &str, at: &str| {
            let mut n = NodeView::from_node(&node(name, &[]));
            n.shutdown_requested = true;
            n.shutdown_requested_at = Some(t(at));
            n
        };
        let nodes: Vec<NodeView> = (0..5)
            .map(|i| shutting(&format!("n{i}"), &format!("2026-01-05T00:00:0{i}Z")))
            .collect();
        let none = BTreeMap::new();
        let s = snapshot(&nodes, &none);
        // maxNodes 1 + maxShutdownDrains 1: two of the five, the oldest requests first.
        let c = cfg("{}");
        let room = shutdown_room(&s, &c);
        let all = shutting_down(&s, &c);
        assert_eq!(all.len(), 5);
        assert_eq!(room, 2);
        assert_eq!(names(all[..room].to_vec()), ["n0", "n1"]);
        // One in flight already: one more.
        let busy = BTreeMap::from([("x".to_string(), entry("2026-01-05T00:00:00Z"))]);
        assert_eq!(shutdown_room(&snapshot(&nodes, &busy), &c), 1);
        let c = cfg("concurrency: {maxNodes: 2, maxShutdownDrains: 0}");
        assert_eq!(shutdown_room(&snapshot(&nodes, &busy), &c), 1);
    }

    /// A cycle for its host's own shutdown, mid-drain, started on boot `boot-1`.
    fn shutdown_draining() -> NodeView {
        let mut n = fleetlock_drained("2026-01-05T00:01:00Z", &[]);
        n.reboot_requested = false;
        n.fleetlock = None;
        n.hooks = None;
        n.shutdown_requested = true;
        n.cycle_for = Some(proto::CYCLE_FOR_SHUTDOWN.into());
        n.boot_id = "boot-1".into();
        n.boot_id_before = Some("boot-1".into());
        n
    }

    #[test]
    fn a_shutdown_that_goes_before_its_drain_is_recorded_undrained_never_cancelled_nor_asked_again()
    {
        let c = cfg("{}");
        let e = entry("2026-01-05T00:00:00Z");
        let now = t("2026-01-05T00:05:00Z");
        let mid = shutdown_draining();
        assert!(matches!(
            next_step(Some(&mid), &e, &c, now),
            Step::Drain { .. }
        ));
        // The host went down mid-drain and is back; its new agent removed the request.
        let mut back = mid.clone();
        back.boot_id = "boot-2".into();
        back.shutdown_requested = false;
        let Step::Overtaken(why) = next_step(Some(&back), &e, &c, now) else {
            panic!("{:?}", next_step(Some(&back), &e, &c, now));
        };
        assert!(
            why.contains("before the drain was over") && why.contains("(boot-1 -> boot-2)"),
            "{why}"
        );
        assert_eq!(abandoned(&back, e.since), None, "not a cancelled shutdown");
        // The drain's end decides the same: never a token for a reboot that happened.
        assert!(matches!(reboot_step(&back, e.since), Step::Overtaken(_)));
        // Recorded (rebooting, handed off): verified like any reboot.
        let mut recorded = back.clone();
        recorded.state = Some(NodeState::Rebooting);
        recorded.state_since = Some(t("2026-01-05T00:04:00Z"));
        recorded.handed_off = Some(t("2026-01-05T00:04:00Z"));
        assert_eq!(overtaken(&recorded), None);
        assert_eq!(next_step(Some(&recorded), &e, &c, now), Step::MarkVerifying);
        // A kind-like node: the boot ID stays, its agent's PID 1 start tells.
        let host = |init| proto::AgentHost {
            boot_id: "boot-1".into(),
            init_start: Some(init),
            machine_id: None,
            shutdown_drain: proto::ShutdownDrain::Ready,
            inhibit_delay_seconds: Some(1020),
        };
        let mut kind = mid.clone();
        kind.init_start_before = Some(100);
        kind.agent_host = Some(host(100));
        assert!(matches!(
            next_step(Some(&kind), &e, &c, now),
            Step::Drain { .. }
        ));
        kind.agent_host = Some(host(900));
        assert!(matches!(
            next_step(Some(&kind), &e, &c, now),
            Step::Overtaken(_)
        ));
    }

    #[test]
    fn a_shutdown_the_kubelet_went_through_first_is_handed_back_undrained() {
        let mut drained = shutdown_draining();
        assert_eq!(
            undrained_at_hand_off(&drained, t("2026-01-05T00:05:00Z")),
            None
        );
        drained.agent_host = Some(proto::AgentHost {
            boot_id: "boot-1".into(),
            init_start: None,
            machine_id: None,
            shutdown_drain: proto::ShutdownDrain::Kubelet,
            inhibit_delay_seconds: Some(20),
        });
        let why = undrained_at_hand_off(&drained, t("2026-01-05T00:05:00Z")).unwrap();
        assert!(
            why.contains("kubelet") && why.contains("shutdownGracePeriod"),
            "{why}"
        );
        // A FleetLock or token cycle on such a node is rollboot's own reboot: drained first.
        let mut fleet = fleetlock_drained("2026-01-05T00:01:00Z", &[]);
        fleet.agent_host = drained.agent_host.clone();
        assert_eq!(
            undrained_at_hand_off(&fleet, t("2026-01-05T00:05:00Z")),
            None
        );
    }

    #[test]
    fn a_shutdown_handed_back_after_logind_let_the_host_go_is_undrained() {
        // The agent asked at 00:01:00 with logind waiting 300 s: it lets go 270 s later.
        let mut n = shutdown_draining();
        n.shutdown_requested_at = Some(t("2026-01-05T00:01:00Z"));
        n.agent_host = Some(proto::AgentHost {
            boot_id: "boot-1".into(),
            init_start: None,
            machine_id: None,
            shutdown_drain: proto::ShutdownDrain::ShortDelay,
            inhibit_delay_seconds: Some(300),
        });
        assert_eq!(undrained_at_hand_off(&n, t("2026-01-05T00:05:29Z")), None);
        let why = undrained_at_hand_off(&n, t("2026-01-05T00:05:30Z")).unwrap();
        assert!(
            why.contains("300s") && why.contains("2026-01-05T00:05:30.000Z"),
            "{why}"
        );
        // No delay written by the agent: nothing to tell it by.
        n.agent_host = None;
        assert_eq!(undrained_at_hand_off(&n, t("2026-01-05T01:00:00Z")), None);
    }

    #[test]
    fn on_a_kind_like_node_a_reboot_is_verified_by_its_agents_pid_1_start() {
        let c = cfg("reboot: {timeout: 10m}");
        let e = entry("2026-01-05T00:00:00Z");
        let now = t("2026-01-05T00:05:00Z");
        let tok = Token::new(t("2026-01-05T00:02:00Z"), 1).text;
        let host = |init| proto::AgentHost {
            boot_id: "kernel-boot".into(),
            init_start: Some(init),
            machine_id: None,
            shutdown_drain: proto::ShutdownDrain::NoLogind,
            inhibit_delay_seconds: None,
        };
        let mut n = node("k1", &[]);
        n.spec.get_or_insert_with(Default::default).unschedulable = Some(true);
        for (k, v) in [
            (proto::STATE, "rebooting"),
            (proto::STATE_SINCE, "2026-01-05T00:02:00Z"),
            (proto::CORDONED_BY, "c-0"),
            (proto::BOOT_ID_BEFORE, "kernel-boot"),
            (proto::INIT_START_BEFORE, "100"),
            (proto::REBOOT, tok.as_str()),
            (proto::REBOOT_ACK, tok.as_str()),
        ] {
            n = annotate(n, k, v);
        }
        let mut v = NodeView::from_node(&n);
        v.boot_id = "kernel-boot".into();
        v.agent_host = Some(host(100));
        // The same boot (the agent restarted, or the node is still down): waits.
        assert!(matches!(
            next_step(Some(&v), &e, &c, now),
            Step::AwaitReboot { .. }
        ));
        // The agent of the new boot says PID 1 started again: back.
        v.agent_host = Some(host(5000));
        assert_eq!(next_step(Some(&v), &e, &c, now), Step::MarkVerifying);
        // A token reported lost by an agent restarted on the same boot is asked again; not
        // once the node booted.
        let mut lost = v.clone();
        lost.agent_host = Some(host(100));
        lost.reboot_lost = Some(tok.clone());
        assert!(matches!(
            next_step(Some(&lost), &e, &c, now),
            Step::RequestReboot { attempt: 2 }
        ));
        lost.agent_host = Some(host(5000));
        assert_eq!(next_step(Some(&lost), &e, &c, now), Step::MarkVerifying);
    }
}
