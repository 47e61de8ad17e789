//! The predicted schedule of a rollout, pure and sans-IO: when each node starts and ends.
//!
//! Owns the replay of the controller's start rule over time: at an instant when maintenance
//! is allowed (window open, no blackout) and the rollout is not halted, the controller's own
//! [`decide::pick`] chooses the next nodes within `maxNodes` and the per-group limit; a node
//! runs for its estimated duration whether or not its window closes meanwhile (the controller
//! finishes in-flight nodes and starts none outside a window); a node predicted to fail counts
//! against `failures.maxFailures` when it fails, and once more failed than tolerated nothing new
//! starts. It must never do I/O or read a clock: the caller passes `now`, the nodes and each
//! node's estimate.

use std::collections::BTreeMap;

use chrono::{DateTime, TimeDelta, Utc};
use serde::Serialize;

use crate::config::Config;
use crate::controller::decide;
use crate::lock::LockEntry;
use crate::node::{NodeState, NodeView};

/// What the schedule needs to know of one node's maintenance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Job {
    /// How long from its start until its slot is free again.
    pub duration: TimeDelta,
    /// It is predicted to fail (its slot is freed at the end of `duration`, and it counts
    /// against `failures.maxFailures`).
    pub fails: bool,
}

/// A node already in the lock when the plan is made.
#[derive(Clone, Debug)]
pub struct Running {
    /// Its lock entry (the instant it started).
    pub entry: LockEntry,
    /// Its estimate, counted from the entry's start.
    pub job: Job,
}

/// The maintenance opening a node starts in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StartWindow {
    /// The opening's first instant; `None` when unbounded (no windows configured).
    pub start: Option<DateTime<Utc>>,
    /// The opening's end; `None` when unbounded.
    pub end: Option<DateTime<Utc>>,
    /// Index of the configured window (0 when no windows are configured).
    pub index: usize,
}

/// One node's predicted slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Slot {
    /// When the controller starts it.
    pub start: DateTime<Utc>,
    /// When its slot is free again.
    pub end: DateTime<Utc>,
    /// The opening it starts in.
    pub window: StartWindow,
    /// It ends after its opening closes (the controller lets it finish).
    pub overruns_window: bool,
}

/// Why a node gets no slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Unscheduled {
    /// The rollout halts first: more failed nodes than `failures.maxFailures`.
    Halted,
    /// No opening within the schedule's look-ahead horizon.
    NoOpening,
    /// Every slot it could take is held by failed nodes rollboot left cordoned
    /// ([`decide::holds_a_slot`]) until an operator clears them.
    SlotsHeld,
}

/// The predicted schedule.
#[derive(Clone, Debug, Default)]
pub struct RolloutSchedule {
    /// Slots by node name, for the nodes that get one.
    pub slots: BTreeMap<String, Slot>,
    /// Nodes that get no slot, and why.
    pub unscheduled: BTreeMap<String, Unscheduled>,
    /// The predicted end of the nodes already in flight, by name.
    pub in_flight_end: BTreeMap<String, DateTime<Utc>>,
    /// The failure that halts the rollout: (node, instant), when one does.
    pub halted: Option<(String, DateTime<Utc>)>,
    /// When the last slot ends (in-flight nodes included); `None` when nothing runs.
    pub end: Option<DateTime<Utc>>,
}

fn bounded(t: DateTime<Utc>) -> Option<DateTime<Utc>> {
    (t != DateTime::<Utc>::MAX_UTC && t != DateTime::<Utc>::MIN_UTC).then_some(t)
}

/// Replays the controller from `now`. `candidates` are the nodes to reboot, each carrying a
/// flag (`decide::pick` takes flagged nodes only); `others` are the cluster's other nodes,
/// needed for the groups of `running` ones and for the failed nodes rollboot left cordoned
/// among them, which hold slots ([`decide::holds_a_slot`]; leave them out to take them as
/// cleared); `jobs` has an entry per candidate; `failed` is how many nodes have already failed.
/// A node predicted to fail holds its slot from then on, unless `failures.returnToService`
/// (its host is up: its drain failed).
pub fn predict(
    candidates: &[NodeView],
    running: &BTreeMap<String, Running>,
    others: &[NodeView],
    jobs: &BTreeMap<String, Job>,
    failed: usize,
    config: &Config,
    now: DateTime<Utc>,
) -> RolloutSchedule {
    let mut replay = Replay::new(candidates, running, others, jobs, failed, config, now);
    let mut t = now;
    loop {
        replay.free_slots(t);
        let halted = replay.halted();
        if halted || !replay.waiting() {
            if replay.ends.is_empty() {
                break;
            }
        } else if replay.windows.is_allowed(t) {
            replay.start(t);
        }
        match replay.next_change(t, halted) {
            Some(next) => t = next.max(t),
            None => break,
        }
    }
    replay.finish(running, t)
}

/// The replay of the controller at one instant: who is in flight until when, who waits.
struct Replay<'a> {
    config: &'a Config,
    /// The maintenance schedule (windows and blackouts).
    windows: &'a crate::windows::Schedule,
    jobs: &'a BTreeMap<String, Job>,
    /// The views `pick` sees: the candidates not yet started, plus every in-flight node (for
    /// its group) and every node holding a slot; a node leaves once its slot is free (unless
    /// it fails and holds it).
    views: Vec<NodeView>,
    /// The lock's entries: the nodes in flight.
    entries: BTreeMap<String, LockEntry>,
    /// When each node in flight frees its slot, and whether it fails then.
    ends: BTreeMap<String, (DateTime<Utc>, bool)>,
    /// Failed nodes so far.
    failures: usize,
    out: RolloutSchedule,
}

impl<'a> Replay<'a> {
    /// The replay at `now`: the nodes in `running` in flight from their entry's start.
    fn new(
        candidates: &[NodeView],
        running: &BTreeMap<String, Running>,
        others: &[NodeView],
        jobs: &'a BTreeMap<String, Job>,
        failed: usize,
        config: &'a Config,
        now: DateTime<Utc>,
    ) -> Replay<'a> {
        let mut views: Vec<NodeView> = candidates.to_vec();
        views.extend(
            others
                .iter()
                .filter(|n| running.contains_key(&n.name) || decide::holds_a_slot(n))
                .cloned(),
        );
        let mut replay = Replay {
            config,
            windows: config.schedule(),
            jobs,
            views,
            entries: BTreeMap::new(),
            ends: BTreeMap::new(),
            failures: failed,
            out: RolloutSchedule::default(),
        };
        for (name, r) in running {
            let end = (r.entry.since + r.job.duration).max(now);
            replay.entries.insert(name.clone(), r.entry.clone());
            replay.ends.insert(name.clone(), (end, r.job.fails));
            replay.out.in_flight_end.insert(name.clone(), end);
        }
        replay
    }

    /// More failed nodes than tolerated: nothing new starts.
    fn halted(&self) -> bool {
        self.failures > self.config.failures.max_failures as usize
    }

    /// Whether `v` may still start (a failed one only holds its slot).
    fn startable(&self, v: &NodeView) -> bool {
        !self.entries.contains_key(&v.name) && v.state != Some(NodeState::Failed)
    }

    /// Some node waits to start.
    fn waiting(&self) -> bool {
        self.views.iter().any(|v| self.startable(v))
    }

    /// Frees the slots that end by `t`, counting failures (the first one past the limit
    /// halts the rollout).
    fn free_slots(&mut self, t: DateTime<Utc>) {
        let finished: Vec<String> = self
            .ends
            .iter()
            .filter(|(_, (end, _))| *end <= t)
            .map(|(n, _)| n.clone())
            .collect();
        for name in finished {
            let (end, fails) = self.ends.remove(&name).expect("listed");
            self.entries.remove(&name);
            // A node that fails stays cordoned by rollboot (unless an operator had cordoned
            // it), and holds its slot.
            let holds = fails && !self.config.failures.return_to_service;
            self.views.retain_mut(|v| {
                if v.name != name {
                    return true;
                }
                if !holds || (v.unschedulable && v.cordoned_by.is_none()) {
                    return false;
                }
                v.state = Some(NodeState::Failed);
                v.unschedulable = true;
                v.cordoned_by = Some("rollboot plan".into());
                true
            });
            if fails {
                self.failures += 1;
                if self.halted() && self.out.halted.is_none() {
                    self.out.halted = Some((name.clone(), end));
                }
            }
        }
    }

    /// Starts at `t` the nodes the controller's `pick` takes, in the opening open at `t`.
    fn start(&mut self, t: DateTime<Utc>) {
        let nodes: Vec<&NodeView> = self.views.iter().collect();
        let snap = decide::Snapshot {
            maintained: &decide::NOT_MAINTAINED,
            headroom: None,
            nodes: &nodes,
            in_flight: &self.entries,
            foreign_holder: None,
            blocking_pods: &[],
            now: t,
        };
        let picked: Vec<String> = decide::pick(&snap, self.config)
            .into_iter()
            .map(|n| n.name.clone())
            .collect();
        let opening = self.windows.opening_at(t);
        for name in picked {
            let job = self.jobs.get(&name).copied().unwrap_or(Job {
                duration: TimeDelta::zero(),
                fails: false,
            });
            let end = t + job.duration;
            let window = StartWindow {
                start: opening.and_then(|o| bounded(o.start)),
                end: opening.and_then(|o| bounded(o.end)),
                index: opening.map_or(0, |o| o.window),
            };
            self.out.slots.insert(
                name.clone(),
                Slot {
                    start: t,
                    end,
                    window,
                    overruns_window: window.end.is_some_and(|e| end > e),
                },
            );
            self.entries.insert(
                name.clone(),
                LockEntry {
                    group: None,
                    state: NodeState::Cordoning,
                    since: t,
                    leader: "plan".into(),
                },
            );
            self.ends.insert(name, (end, job.fails));
        }
    }

    /// The next instant anything can change after `t`: a slot frees, (while closed, with
    /// nodes waiting and the rollout not `halted`) an opening starts, or a node held by
    /// `nodes.minRebootInterval` has rested. `None`: nothing will.
    fn next_change(&self, t: DateTime<Utc>, halted: bool) -> Option<DateTime<Utc>> {
        let next_end = self.ends.values().map(|(e, _)| *e).min();
        let next_open = (self.waiting() && !halted && !self.windows.is_allowed(t))
            .then(|| self.windows.next_opening(t).map(|o| o.start))
            .flatten();
        let rested = (!halted)
            .then(|| {
                self.views
                    .iter()
                    .filter(|v| self.startable(v))
                    .filter_map(|v| decide::resting_until(v, self.config, t))
                    .min()
            })
            .flatten();
        [next_end, next_open, rested].into_iter().flatten().min()
    }

    /// The schedule, once nothing changes after `t`: why each node left waiting got no slot,
    /// and when the last slot ends.
    fn finish(mut self, running: &BTreeMap<String, Running>, t: DateTime<Utc>) -> RolloutSchedule {
        let held = self.views.iter().any(decide::holds_a_slot);
        let halted = self.halted();
        for v in self
            .views
            .iter()
            .filter(|v| v.state != Some(NodeState::Failed))
        {
            if !self.out.slots.contains_key(&v.name) && !running.contains_key(&v.name) {
                let why = if halted {
                    Unscheduled::Halted
                } else if held && self.ends.is_empty() && self.windows.is_allowed(t) {
                    Unscheduled::SlotsHeld
                } else {
                    Unscheduled::NoOpening
                };
                self.out.unscheduled.insert(v.name.clone(), why);
            }
        }
        self.out.end = self
            .out
            .slots
            .values()
            .map(|s| s.end)
            .chain(self.out.in_flight_end.values().copied())
            .max();
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::fixtures::{annotate, node};
    use crate::node::REBOOT_REQUIRED;

    fn t(s: &str) -> DateTime<Utc> {
        crate::time::parse_annotation(s).unwrap()
    }

    fn cfg(yaml: &str) -> Config {
        crate::config::parse_str(yaml).unwrap()
    }

    fn flagged(name: &str, labels: &[(&str, &str)]) -> NodeView {
        NodeView::from_node(&annotate(
            node(name, labels),
            REBOOT_REQUIRED,
            "2026-01-01T00:00:00Z",
        ))
    }

    fn jobs(names: &[&str], minutes: i64) -> BTreeMap<String, Job> {
        names
            .iter()
            .map(|n| {
                (
                    n.to_string(),
                    Job {
                        duration: TimeDelta::minutes(minutes),
                        fails: false,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn one_at_a_time_in_a_daily_window_each_node_starts_when_the_previous_ends() {
        // 02:00 UTC for 1h; 25 min per node: 02:00, 02:25, 02:50 (ends 03:15, after the window
        // closes: the controller lets it finish).
        let c = cfg("windows: [{schedule: '0 2 * * *', duration: 1h}]");
        let nodes = [flagged("a", &[]), flagged("b", &[]), flagged("c", &[])];
        let s = predict(
            &nodes,
            &BTreeMap::new(),
            &[],
            &jobs(&["a", "b", "c"], 25),
            0,
            &c,
            t("2026-03-10T12:00:00Z"),
        );
        let start = |n: &str| s.slots[n].start;
        assert_eq!(start("a"), t("2026-03-11T02:00:00Z"));
        assert_eq!(start("b"), t("2026-03-11T02:25:00Z"));
        assert_eq!(start("c"), t("2026-03-11T02:50:00Z"));
        assert!(s.slots["c"].overruns_window);
        assert!(!s.slots["b"].overruns_window);
        assert_eq!(s.slots["a"].window.end, Some(t("2026-03-11T03:00:00Z")));
        assert_eq!(s.end, Some(t("2026-03-11T03:15:00Z")));
    }

    #[test]
    fn a_node_whose_turn_comes_after_the_window_closes_waits_for_the_next_opening() {
        let c = cfg("windows: [{schedule: '0 2 * * *', duration: 1h}]");
        let nodes = [flagged("a", &[]), flagged("b", &[]), flagged("c", &[])];
        let s = predict(
            &nodes,
            &BTreeMap::new(),
            &[],
            &jobs(&["a", "b", "c"], 40),
            0,
            &c,
            t("2026-03-10T12:00:00Z"),
        );
        assert_eq!(s.slots["a"].start, t("2026-03-11T02:00:00Z"));
        assert_eq!(s.slots["b"].start, t("2026-03-11T02:40:00Z"));
        // b frees its slot at 03:20, after the window: c waits a day.
        assert_eq!(s.slots["c"].start, t("2026-03-12T02:00:00Z"));
        assert_eq!(s.end, Some(t("2026-03-12T02:40:00Z")));
    }

    #[test]
    fn the_group_limit_and_max_nodes_shape_the_batches() {
        let z = "zone";
        let c = cfg("concurrency: {maxNodes: 2, groupBy: zone}\nnodes: {order: name}");
        let nodes = [
            flagged("a1", &[(z, "a")]),
            flagged("a2", &[(z, "a")]),
            flagged("b1", &[(z, "b")]),
        ];
        let now = t("2026-03-10T12:00:00Z");
        let s = predict(
            &nodes,
            &BTreeMap::new(),
            &[],
            &jobs(&["a1", "a2", "b1"], 10),
            0,
            &c,
            now,
        );
        assert_eq!(s.slots["a1"].start, now);
        assert_eq!(s.slots["b1"].start, now);
        assert_eq!(s.slots["a2"].start, now + TimeDelta::minutes(10));
        assert_eq!(s.slots["a1"].window.start, None, "no windows: unbounded");
    }

    #[test]
    fn a_failure_beyond_max_failures_halts_what_has_not_started() {
        let c = cfg("nodes: {order: name}");
        let nodes = [flagged("a", &[]), flagged("b", &[])];
        let mut j = jobs(&["a", "b"], 10);
        j.get_mut("a").unwrap().fails = true;
        let now = t("2026-03-10T12:00:00Z");
        let s = predict(&nodes, &BTreeMap::new(), &[], &j, 0, &c, now);
        assert_eq!(
            s.halted,
            Some(("a".to_string(), now + TimeDelta::minutes(10)))
        );
        assert_eq!(s.unscheduled["b"], Unscheduled::Halted);
        // Tolerated, and the failed node back in service (else it holds the one slot).
        let c = cfg("nodes: {order: name}\nfailures: {maxFailures: 1, returnToService: true}");
        let s = predict(&nodes, &BTreeMap::new(), &[], &j, 0, &c, now);
        assert_eq!(s.halted, None);
        assert_eq!(s.slots["b"].start, now + TimeDelta::minutes(10));
    }

    #[test]
    fn a_node_in_flight_holds_its_slot_until_its_estimate_runs_out() {
        let c = cfg("{}");
        let now = t("2026-03-10T12:00:00Z");
        let busy = NodeView::from_node(&node("busy", &[]));
        let running = BTreeMap::from([(
            "busy".to_string(),
            Running {
                entry: LockEntry {
                    group: None,
                    state: NodeState::Cordoning,
                    since: now - TimeDelta::minutes(4),
                    leader: "c-0".into(),
                },
                job: Job {
                    duration: TimeDelta::minutes(10),
                    fails: false,
                },
            },
        )]);
        let s = predict(
            &[flagged("a", &[])],
            &running,
            &[busy],
            &jobs(&["a"], 10),
            0,
            &c,
            now,
        );
        assert_eq!(s.slots["a"].start, now + TimeDelta::minutes(6));
        assert_eq!(s.in_flight_end["busy"], now + TimeDelta::minutes(6));
    }

    #[test]
    fn a_failed_node_left_cordoned_holds_its_slot_in_the_replay() {
        let c = cfg("nodes: {order: name}\nfailures: {maxFailures: 3}");
        let now = t("2026-03-10T12:00:00Z");
        let held = NodeView {
            unschedulable: true,
            cordoned_by: Some("c-0".into()),
            state: Some(NodeState::Failed),
            ..NodeView::from_node(&crate::node::fixtures::node("z", &[]))
        };
        // maxNodes 1 and the slot is the failed node's: nothing starts, and it says why.
        let s = predict(
            &[flagged("a", &[])],
            &BTreeMap::new(),
            std::slice::from_ref(&held),
            &jobs(&["a"], 10),
            0,
            &c,
            now,
        );
        assert!(s.slots.is_empty());
        assert_eq!(s.unscheduled["a"], Unscheduled::SlotsHeld);
        // Taken as cleared (the failures blocker assumed lifted): it starts at once.
        let s = predict(
            &[flagged("a", &[])],
            &BTreeMap::new(),
            &[],
            &jobs(&["a"], 10),
            0,
            &c,
            now,
        );
        assert_eq!(s.slots["a"].start, now);
        // A node predicted to fail holds its slot from then on, unless returnToService.
        let mut j = jobs(&["a", "b"], 10);
        j.get_mut("a").unwrap().fails = true;
        let nodes = [flagged("a", &[]), flagged("b", &[])];
        let s = predict(&nodes, &BTreeMap::new(), &[], &j, 0, &c, now);
        assert_eq!(s.unscheduled.get("b"), Some(&Unscheduled::SlotsHeld));
        let back = cfg("nodes: {order: name}\nfailures: {maxFailures: 3, returnToService: true}");
        let s = predict(&nodes, &BTreeMap::new(), &[], &j, 0, &back, now);
        assert_eq!(s.slots["b"].start, now + TimeDelta::minutes(10));
    }

    #[test]
    fn a_blackout_over_the_next_window_pushes_the_start_a_day() {
        let c = cfg(
            "windows: [{schedule: '0 2 * * *', duration: 1h}]\nblackouts: [{from: '2026-03-11T00:00:00Z', to: '2026-03-11T23:00:00Z'}]",
        );
        let s = predict(
            &[flagged("a", &[])],
            &BTreeMap::new(),
            &[],
            &jobs(&["a"], 10),
            0,
            &c,
            t("2026-03-10T12:00:00Z"),
        );
        assert_eq!(s.slots["a"].start, t("2026-03-12T02:00:00Z"));
    }
}
