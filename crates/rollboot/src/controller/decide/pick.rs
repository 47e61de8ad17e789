//! Which waiting nodes start, and in what order: the candidates the pick looks at, within
//! `maxNodes`, the per-group limit, the FleetLock groups' own limits and, with the
//! budget-aware pick (`concurrency.passOverFor`), the room in the budgets of their pods.
//!
//! Owns the order nodes are taken in (`nodes.order`), the slots the nodes in flight and the
//! failed nodes left cordoned take, the nodes passed over because a budget holds them (and
//! when such a record is stale), and how many nodes' pods the pick needs read. It must never
//! decide whether anything may start at all (the blockers do), nor read pods itself: the
//! budgets come in the snapshot's `headroom`.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};

use super::blockers::{is_candidate, other_maintenance, out_holding, resting_until};
use super::Snapshot;
use crate::budgets::{BudgetHold, Claims, Headroom};
use crate::config::{Config, NodeOrder};
use crate::lock::LockEntry;
use crate::node::{NodeState, NodeView};

/// What [`pick_detail`] decided: the nodes to start now, in order, and the waiting nodes it
/// passed over because a budget of theirs holds them now.
#[derive(Debug, Default)]
pub struct Picked<'a> {
    /// The nodes to start, in order.
    pub nodes: Vec<&'a NodeView>,
    /// The nodes passed over, each with the budget that holds it.
    pub passed_over: Vec<(&'a NodeView, BudgetHold)>,
    /// Nodes taken although a budget holds them: passed over for `concurrency.passOverFor`
    /// already.
    pub taken_anyway: Vec<(&'a NodeView, BudgetHold)>,
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
    let busy = s.in_flight.len() + out_holding(s, config).count();
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
                && other_maintenance(n, s).is_none()
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
/// nodes in flight and the failed nodes rollboot left cordoned ([`super::holds_a_slot`]) take the
/// slots. Call only when [`super::blockers()`] is empty.
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
    if free == 0 {
        return Picked::default();
    }
    let headroom = s.headroom.filter(|_| budget_aware(config));
    let mut picking = Picking {
        slots: Slots::new(s, config, free),
        claims: match headroom {
            Some(r) => Claims::in_flight(r, draining(s)),
            None => Claims::default(),
        },
        headroom,
        out: Picked::default(),
    };
    let pass_over_for = config.concurrency.pass_over_for.to_chrono();
    let (held_back, unread) = picking.in_order(candidates, s.now, pass_over_for);
    picking.fill(held_back, unread)
}

/// What has no room for a waiting node the pick left ([`no_room`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoRoom {
    /// Every slot of `maxNodes` is taken.
    Slots,
    /// Its group under `concurrency.groupBy` (the label's value) has `maxNodesPerGroup` nodes.
    Group(String),
    /// Its FleetLock group (named) has the `maxNodes` it declares.
    FleetLockGroup(String),
}

/// Why [`pick_among`] left `n`, a waiting node it neither took nor passed over, once it took
/// `picked` from `s`: what has no room for it, as the pick's own count of the slots and the
/// groups stands after its last take. A node is left when the slots, or its groups, were full
/// at its turn, and they only fill as the pick goes. Empty when everything has room (`n` was
/// taken or passed over, or is no candidate). `rollboot explain` asks it; the pick never does.
pub fn no_room(
    s: &Snapshot<'_>,
    config: &Config,
    picked: &[&NodeView],
    n: &NodeView,
) -> Vec<NoRoom> {
    let max = config.concurrency.max_nodes as usize;
    let busy = s.in_flight.len() + out_holding(s, config).count();
    let mut slots = Slots::new(s, config, max.saturating_sub(busy));
    for p in picked {
        slots.take(p);
    }
    let mut out = Vec::new();
    if slots.full() {
        out.push(NoRoom::Slots);
    }
    out.extend(slots.label_group_full(n).map(NoRoom::Group));
    out.extend(slots.fleetlock_group_full(n).map(NoRoom::FleetLockGroup));
    out
}

/// The slots and the groups' counts the pick takes nodes into: the nodes in flight, the failed
/// nodes that hold a slot, and the nodes taken so far.
struct Slots<'c> {
    /// `maxNodes`.
    max: usize,
    /// The slots taken.
    busy: usize,
    /// `concurrency.groupBy`'s label, and the limit per group.
    group: Option<(&'c str, u32)>,
    /// The FleetLock groups that declare a `maxNodes` of their own, with it.
    fl_limits: BTreeMap<&'c str, u32>,
    /// The nodes counted in each label group, and in each FleetLock group (under [`fl_key`]).
    per_group: HashMap<String, usize>,
    /// Nodes in the lock whose Node is gone and whose entry names no group (written before
    /// entries named one): they count in every group, as their host may be down in any.
    anywhere: usize,
}

impl<'c> Slots<'c> {
    /// The slots of `s`, `free` of them left, with its nodes in flight and its failed nodes
    /// that hold a slot counted in their groups.
    fn new(s: &Snapshot<'_>, config: &'c Config, free: usize) -> Self {
        let max = config.concurrency.max_nodes as usize;
        let mut slots = Slots {
            max,
            busy: max - free,
            group: config.group_limit(),
            fl_limits: fleetlock_limits(config),
            per_group: HashMap::new(),
            anywhere: 0,
        };
        if let Some((key, _)) = slots.group {
            // Built only for a per-group limit: an index of every Node per pick was a cost in
            // the cluster's size (issue 14).
            let by_name: HashMap<&str, &NodeView> =
                s.nodes.iter().map(|n| (n.name.as_str(), *n)).collect();
            for (name, entry) in s.in_flight {
                // A Node gone mid-cycle keeps its slot (see `next_step`), and its group with it.
                match (by_name.get(name.as_str()), &entry.group) {
                    (Some(n), _) => slots.count(label_group(n, key)),
                    (None, Some(g)) => slots.count(g.clone()),
                    (None, None) => slots.anywhere += 1,
                }
            }
            for n in out_holding(s, config) {
                slots.count(label_group(n, key));
            }
        }
        // FleetLock groups with a `maxNodes` of their own: their hosts in flight, by group.
        if !slots.fl_limits.is_empty() {
            for n in s.nodes.iter().filter(|n| s.in_flight.contains_key(&n.name)) {
                if let Some(g) = slots.fl_group(n) {
                    slots.count(fl_key(&g));
                }
            }
        }
        slots
    }

    /// One more node in the group counted under `key`.
    fn count(&mut self, key: String) {
        *self.per_group.entry(key).or_default() += 1;
    }

    /// How many nodes the group counted under `key` has.
    fn counted(&self, key: &str) -> usize {
        self.per_group.get(key).copied().unwrap_or(0)
    }

    /// Whether every slot is taken.
    fn full(&self) -> bool {
        self.busy >= self.max
    }

    /// The FleetLock group with a `maxNodes` of its own whose host `n` is, if any.
    fn fl_group(&self, n: &NodeView) -> Option<String> {
        let g = &n.fleetlock.as_ref().filter(|_| n.hands_off())?.group;
        self.fl_limits.contains_key(g.as_str()).then(|| g.clone())
    }

    /// Whether `n` fits within its label group's limit and its FleetLock group's.
    fn fits(&self, n: &NodeView) -> bool {
        self.label_group_full(n).is_none() && self.fleetlock_group_full(n).is_none()
    }

    /// `n`'s group under `concurrency.groupBy` when that group has its limit.
    fn label_group_full(&self, n: &NodeView) -> Option<String> {
        let (key, limit) = self.group?;
        let g = label_group(n, key);
        (self.counted(&g) + self.anywhere >= limit as usize).then_some(g)
    }

    /// `n`'s FleetLock group when that group has the `maxNodes` it declares.
    fn fleetlock_group_full(&self, n: &NodeView) -> Option<String> {
        let g = self.fl_group(n)?;
        (self.counted(&fl_key(&g)) >= self.fl_limits[g.as_str()] as usize).then_some(g)
    }

    /// `n` takes a slot, and counts in its groups.
    fn take(&mut self, n: &NodeView) {
        if let Some((key, _)) = self.group {
            self.count(label_group(n, key));
        }
        if let Some(g) = self.fl_group(n) {
            self.count(fl_key(&g));
        }
        self.busy += 1;
    }
}

/// One pick under way: the slots, what the budgets owe to the nodes in flight and to those
/// taken (the budget-aware pick's `headroom`; `None`: order only), and what is decided so far.
struct Picking<'a, 'c> {
    slots: Slots<'c>,
    claims: Claims,
    headroom: Option<&'a Headroom>,
    out: Picked<'a>,
}

impl<'a> Picking<'a, '_> {
    /// `n` starts: it takes a slot, its groups count it, and its budgets owe its pods.
    fn take(&mut self, n: &'a NodeView) {
        if let Some(r) = self.headroom {
            self.claims.take(&n.name, r);
        }
        self.slots.take(n);
        self.out.nodes.push(n);
    }

    /// Takes the `candidates` in order while slots are free, each that fits its groups and has
    /// room in its budgets (or was passed over for `pass_over_for` already at `now`). Returns
    /// the nodes a budget holds, in order: passed over for later ones with room; and the nodes
    /// whose pods were not read yet: taken, in order, only for a slot left after the held ones.
    #[allow(clippy::type_complexity)]
    fn in_order(
        &mut self,
        candidates: Vec<&'a NodeView>,
        now: DateTime<Utc>,
        pass_over_for: chrono::Duration,
    ) -> (Vec<(&'a NodeView, BudgetHold)>, Vec<&'a NodeView>) {
        let mut held_back = Vec::new();
        let mut unread = Vec::new();
        for n in candidates {
            if self.slots.full() {
                break;
            }
            if !self.slots.fits(n) {
                continue;
            }
            if let Some(r) = self.headroom {
                if !r.nodes.contains_key(&n.name) {
                    unread.push(n);
                    continue;
                }
                let recorded = n.passed_over.as_ref().map(|p| p.budget.as_str());
                if let Some(held) = self.claims.held_keeping(&n.name, r, recorded) {
                    let starved = n
                        .passed_over
                        .as_ref()
                        .is_some_and(|p| now - p.since >= pass_over_for);
                    if !starved {
                        held_back.push((n, held));
                        continue;
                    }
                    self.out.taken_anyway.push((n, held));
                }
            }
            self.take(n);
        }
        (held_back, unread)
    }

    /// The slots [`Picking::in_order`] left, filled with the nodes it held back, then with
    /// those not read; the held ones left are passed over.
    fn fill(
        mut self,
        mut held_back: Vec<(&'a NodeView, BudgetHold)>,
        unread: Vec<&'a NodeView>,
    ) -> Picked<'a> {
        // Slots no node with room could fill go to the held ones: an idle slot does nothing, a
        // drain held on one budget evicts its other pods meanwhile. Those whose drains would
        // wait least first (issue 26: refused evictions per 200-node run fell from 78-99 to
        // 58-76), in order otherwise (the sort is stable). Only those left then were passed
        // over for a node with room.
        if let Some(r) = self.headroom {
            held_back.sort_by_cached_key(|(n, _)| self.claims.hold_weight(&n.name, r));
        }
        for (n, held) in held_back {
            if !self.slots.full() && self.slots.fits(n) {
                self.take(n);
            } else {
                self.out.passed_over.push((n, held));
            }
        }
        for n in unread {
            if !self.slots.full() && self.slots.fits(n) {
                self.take(n);
            }
        }
        self.out
    }
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
    Some(label_group(n, key))
}

/// The node's value of the label `key` (empty when it has none): its group under
/// `concurrency.groupBy` when that is `key`.
fn label_group(n: &NodeView, key: &str) -> String {
    n.labels.get(key).cloned().unwrap_or_default()
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
