//! A health gate waiting: following the [`WorkloadWatches`] of its namespaces until what it
//! waits for is healthy again, or its deadline.
//!
//! Owns [`Gate`] (started as soon as the reboot is asked, so the watches' initial lists are done
//! while the node reboots) and the forwarding of each watch's events to the one gate, only
//! those about what it waits for (a gate is woken only by changes to what it waits for). It
//! must never write: finishing or failing the node is the caller's; a budget it cannot read is
//! said in an Event.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;

use super::record::{GateRecord, GateState, Update};
use crate::budgets::watches::{pair_hash, Feed, FeedEvent, Obj, Stream, Wanted};
use crate::budgets::WorkloadWatches;
use crate::controller::task::Task;
use crate::events::Recorder;
use crate::selector::selector_problem;

/// A gate following its namespaces' watches. The controller starts it as soon as the reboot is
/// asked, so the watches' initial lists are done while the node reboots instead of after it is
/// back: those lists were most of the time between a node's return and the next node's start.
pub struct Gate {
    record: GateRecord,
    state: GateState,
    rx: mpsc::UnboundedReceiver<Update>,
    _watches: Vec<Task>,
}

impl Gate {
    /// Follows the watch of every stream of `record` (started by `watches` when none runs);
    /// they feed this gate until it is dropped. `concurrent`: other nodes may be in flight
    /// (`maxNodes` above 1), see [`GateState::restored_once_is_enough`].
    pub fn start(watches: &WorkloadWatches, record: &GateRecord, concurrent: bool) -> Gate {
        watches.sweep();
        let state = match concurrent {
            true => GateState::new(record).restored_once_is_enough(),
            false => GateState::new(record),
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let watches = state
            .streams()
            .into_iter()
            .map(|s| {
                let wanted = state.wanted[&s].clone();
                let feed = watches.feed(&s);
                Task(tokio::spawn(forward(feed, s, wanted, tx.clone())))
            })
            .collect();
        Gate {
            record: record.clone(),
            state,
            rx,
            _watches: watches,
        }
    }

    /// What the gate waits on.
    pub fn record(&self) -> &GateRecord {
        &self.record
    }

    /// Waits until the gate passes (`Ok`) or `deadline` (`Err` with what it still waits for).
    /// What the watches reported since [`Gate::start`] counts: the verdict is about now. A
    /// budget it cannot read is said in a warning Event about `node`.
    pub async fn wait(
        mut self,
        deadline: DateTime<Utc>,
        node: &str,
        events: &Recorder,
    ) -> Result<(), String> {
        loop {
            // Apply what is queued before deciding.
            while let Ok(u) = self.rx.try_recv() {
                self.state.apply(u);
            }
            for (budget, note) in self.state.take_notes() {
                tracing::warn!("{note}");
                events
                    .publish_action(
                        node,
                        true,
                        "BudgetSelectorUnreadable",
                        &format!("Wait {budget}"),
                        note,
                    )
                    .await;
            }
            let why = match self.state.verdict() {
                None => return Ok(()),
                Some(why) => why,
            };
            let left = (deadline - Utc::now()).to_std().unwrap_or_default();
            if left.is_zero() {
                return Err(why);
            }
            tracing::debug!(why, "health gate waiting");
            match tokio::time::timeout(left, self.rx.recv()).await {
                Ok(Some(u)) => self.state.apply(u),
                // No watch is left (none was needed): the verdict above already decided.
                Ok(None) => tokio::time::sleep(left.min(Duration::from_secs(1))).await,
                Err(_) => return Err(why),
            }
        }
    }
}

/// Turns a feed's events into one gate's [`Update`]s about what `wanted` waits for.
pub(super) struct Forwarder {
    stream: Stream,
    pub(super) wanted: Wanted,
    /// Names forwarded since the last list: a budget whose selector stops selecting the pods
    /// is forgotten, not left waited on with its last health.
    forwarded: BTreeSet<String>,
    /// Budgets whose selector cannot be evaluated, reported once each.
    reported: BTreeSet<String>,
    /// Every `label=value` of the pods `wanted` selects budgets for, hashed as the budget index
    /// hashes them (see [`Forwarder::wants`]).
    pairs: HashSet<u64>,
}

impl Forwarder {
    pub(super) fn new(stream: Stream, wanted: Wanted) -> Forwarder {
        let pairs = (wanted.selecting.iter())
            .flat_map(|labels| labels.iter().map(|(k, v)| pair_hash(k, v)))
            .collect();
        Forwarder {
            stream,
            wanted,
            forwarded: BTreeSet::new(),
            reported: BTreeSet::new(),
            pairs,
        }
    }

    /// [`Wanted::wants`], with a budget whose selector requires a `label=value` none of the
    /// pods has turned down by one hash lookup: every budget event of a namespace reaches each
    /// gate in flight, and matching it against each evicted pod's labels was 3% of a
    /// 5,000-node simulation (perf). A hash two pairs share only leaves the full match to say.
    pub(super) fn wants(&self, o: &Obj) -> bool {
        if let Some(Some((k, v))) = o.slot() {
            if !self.pairs.contains(&pair_hash(k, v)) && !self.wanted.names.contains(&o.name) {
                return false;
            }
        }
        self.wanted.wants(&o.name, o.selector.as_ref())
    }

    /// The updates `ev` makes.
    pub(super) fn updates(&mut self, ev: FeedEvent) -> Vec<Update> {
        let s = || self.stream.clone();
        match ev {
            FeedEvent::Init => {
                self.forwarded.clear();
                vec![Update::Listing(s())]
            }
            FeedEvent::InitDone => vec![Update::Listed(s())],
            FeedEvent::Apply(o) => {
                let sel = o.selector.as_ref();
                if self.wants(&o) {
                    let mut out = Vec::new();
                    if let Some(why) = sel.and_then(selector_problem) {
                        if self.reported.insert(o.name.clone()) {
                            out.push(Update::Unreadable(s(), o.name.clone(), why));
                        }
                    }
                    self.forwarded.insert(o.name.clone());
                    out.push(Update::Seen(s(), o.name.clone(), o.health));
                    out
                } else if self.forwarded.remove(&o.name) {
                    vec![Update::Gone(s(), o.name.clone())]
                } else {
                    Vec::new()
                }
            }
            FeedEvent::Delete(name) => {
                if self.forwarded.remove(&name) {
                    vec![Update::Gone(s(), name)]
                } else {
                    Vec::new()
                }
            }
        }
    }
}

/// Feeds one gate from `feed`: what the watch knows now, then its changes; after falling too
/// far behind, what it knows again (a relist for the gate).
async fn forward(
    feed: Arc<Feed>,
    stream: Stream,
    wanted: Wanted,
    tx: mpsc::UnboundedSender<Update>,
) {
    let mut fwd = Forwarder::new(stream, wanted);
    loop {
        let (replay, mut rx) = feed.join(&fwd.wanted);
        for ev in replay {
            for u in fwd.updates(ev) {
                if tx.send(u).is_err() {
                    return;
                }
            }
        }
        loop {
            match rx.recv().await {
                Ok(ev) => {
                    for u in fwd.updates(ev) {
                        if tx.send(u).is_err() {
                            return;
                        }
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => break,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    }
}
