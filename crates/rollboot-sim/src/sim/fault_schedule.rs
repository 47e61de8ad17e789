//! Chaos on demand: a fault schedule drawn from a seed (or written by hand in a scenario's
//! `faults:` section), and the player that says, from the time elapsed and the Nodes' rollboot
//! states, which fault begins or ends now.
//!
//! Owns the schedule's format, the draw, and the player's bookkeeping. Pure and sans-IO: it must
//! never touch a cluster or a process. The served cluster (`simulate::chaos::serve`) and the
//! rollout harness (`simulate::Harness`) apply the steps it returns, each what it can: the
//! served cluster has no controller or agent to kill.
//!
//! A replay of a seed draws the same schedule (a seeded `StdRng`, nothing else random); the run
//! itself may differ in timing, as real processes on a real clock do.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::FaultConfig;

/// One kind of fault. Faults with a node target (agent, host, node faults) take the node in
/// the fault's `whenState`, or its `node`, or else the first node in flight.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub enum Fault {
    /// A share of API requests answered 500 and 429.
    #[serde(rename_all = "camelCase")]
    ApiErrors {
        /// Share answered 500.
        error_rate: f64,
        /// Share answered 429.
        throttle_rate: f64,
    },
    /// A share of API requests delayed.
    #[serde(rename_all = "camelCase")]
    SlowApi {
        /// Share delayed.
        delay_rate: f64,
        /// Delay, milliseconds.
        delay_ms: u64,
    },
    /// Every watch cut after a random time up to `maxMs`.
    #[serde(rename_all = "camelCase")]
    WatchCuts {
        /// Longest life of a watch, milliseconds.
        max_ms: u64,
    },
    /// The API server refuses connections.
    Outage,
    /// The leading controller replica crashes; it starts again when the fault ends.
    KillLeader,
    /// The leading controller replica stalls: each of its requests is held for the fault's
    /// length (longer than the lease, so another replica takes over meanwhile).
    PauseLeader,
    /// The target node's agent crashes; it starts again when the fault ends.
    KillAgent,
    /// The target node's agent stops between its ack and the reboot; it is killed and started
    /// again when the fault ends.
    StallAgent,
    /// The target host acknowledges reboots but never goes down, until the fault ends.
    HostHangs,
    /// The target host's reboot command fails, until the fault ends.
    HostFails,
    /// The target Node object is deleted; its kubelet registers it again when the fault ends.
    DeleteNode,
    /// The target host shuts down by itself (an operator's `systemctl reboot`, a cloud
    /// maintenance event): logind delays it while the agent's inhibitor lives, at most the
    /// scenario's `inhibitDelaySeconds`, then it goes down and comes back on a new boot.
    HostShutdown,
    /// The maintenance lock Lease is deleted.
    DeleteLock,
    /// Every PodDisruptionBudget allows no disruption (`maxUnavailable: 0`) until the fault
    /// ends.
    BlockBudgets,
    /// A validating admission policy denies every eviction (422, the same answer each time, as
    /// a drain-cleaner webhook that holds its pods), until the fault ends.
    DenyEvictions,
    /// Pods take this long (simulated seconds) from binding to Ready, until the fault ends.
    #[serde(rename_all = "camelCase")]
    SlowPods {
        /// Start delay, simulated seconds.
        start_delay: f64,
    },
    /// Volumes take this long (simulated seconds) to detach, for the detaches that begin
    /// until the fault ends (a slow CSI driver).
    #[serde(rename_all = "camelCase")]
    SlowDetach {
        /// Detach time, simulated seconds.
        detach_seconds: f64,
    },
    /// Another actor takes a node out for the fault's length: a NodeMaintenance for it
    /// (medik8s' operator drains it; deleted when the fault ends: the scenario gets the CRD),
    /// or the autoscaler's `ToBeDeletedByClusterAutoscaler` or Karpenter's
    /// `karpenter.sh/disrupted` taint, put on and taken off again (the node is not deleted).
    /// Its node: the fault's `node`, else one that is in no rollboot cycle then (no state, or
    /// `done`), the `pick`-th of them in name order, modulo their number.
    #[serde(rename_all = "camelCase")]
    OtherMaintenance {
        /// Which actor.
        by: Actor,
        /// Which of the nodes out of any cycle, when the fault names no node.
        #[serde(default)]
        pick: u32,
    },
}

/// The actor of an `otherMaintenance` fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Actor {
    /// A medik8s NodeMaintenance.
    NodeMaintenance,
    /// cluster-autoscaler's `ToBeDeletedByClusterAutoscaler` taint.
    ClusterAutoscaler,
    /// Karpenter's `karpenter.sh/disrupted` taint.
    Karpenter,
}

impl Actor {
    /// Every actor, in the order a draw picks from.
    pub const ALL: [Actor; 3] = [
        Actor::NodeMaintenance,
        Actor::ClusterAutoscaler,
        Actor::Karpenter,
    ];
}

impl Fault {
    /// The name used in reports.
    pub fn name(&self) -> &'static str {
        match self {
            Fault::ApiErrors { .. } => "apiErrors",
            Fault::SlowApi { .. } => "slowApi",
            Fault::WatchCuts { .. } => "watchCuts",
            Fault::Outage => "outage",
            Fault::KillLeader => "killLeader",
            Fault::PauseLeader => "pauseLeader",
            Fault::KillAgent => "killAgent",
            Fault::StallAgent => "stallAgent",
            Fault::HostHangs => "hostHangs",
            Fault::HostFails => "hostFails",
            Fault::DeleteNode => "deleteNode",
            Fault::HostShutdown => "hostShutdown",
            Fault::DeleteLock => "deleteLock",
            Fault::BlockBudgets => "blockBudgets",
            Fault::DenyEvictions => "denyEvictions",
            Fault::SlowPods { .. } => "slowPods",
            Fault::SlowDetach { .. } => "slowDetach",
            Fault::OtherMaintenance { .. } => "otherMaintenance",
        }
    }

    /// Whether the fault acts on one node.
    pub fn targets_a_node(&self) -> bool {
        matches!(
            self,
            Fault::KillAgent
                | Fault::StallAgent
                | Fault::HostHangs
                | Fault::HostFails
                | Fault::DeleteNode
                | Fault::HostShutdown
                | Fault::OtherMaintenance { .. }
        )
    }

    /// Whether the fault needs controller or agent processes (absent behind `--serve`).
    pub fn needs_processes(&self) -> bool {
        matches!(
            self,
            Fault::KillLeader
                | Fault::PauseLeader
                | Fault::KillAgent
                | Fault::StallAgent
                | Fault::HostHangs
                | Fault::HostFails
                | Fault::HostShutdown
        )
    }
}

/// One fault of a schedule.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TimedFault {
    /// Earliest start, real seconds after the rollout began.
    pub at: f64,
    /// Starts at the first moment, at or after `at`, that some node is in this rollboot state
    /// (`cordoning`, `draining`, `rebooting`, `verifying`); that node is the target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when_state: Option<String>,
    /// The target node, when fixed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// How long it lasts, real seconds (the schedule's `stopAfter` cuts it).
    #[serde(default)]
    pub for_seconds: f64,
    /// What happens: a name (`killLeader`) or a map of one name to its settings
    /// (`{apiErrors: {errorRate: 0.3, throttleRate: 0.1}}`), in YAML as in JSON.
    #[serde(with = "fault_form")]
    pub fault: Fault,
}

/// A fault in the form JSON gives an externally tagged enum, in YAML too: YAML libraries
/// write and expect such enums as tags (`!apiErrors`), which a schedule copied from a JSON
/// report would not parse as.
mod fault_form {
    use serde::{de::Error, Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(f: &super::Fault, s: S) -> Result<S::Ok, S::Error> {
        serde_json::to_value(f)
            .map_err(serde::ser::Error::custom)?
            .serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<super::Fault, D::Error> {
        serde_json::from_value(serde_json::Value::deserialize(d)?).map_err(D::Error::custom)
    }
}

/// A fault schedule: `faults:` in a scenario file, or drawn by `--chaos SEED`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FaultSchedule {
    /// The seed it was drawn from; absent when written by hand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Real seconds after the rollout began at which every fault has ended and none starts
    /// any more: from then on the rollout must finish.
    pub stop_after: f64,
    /// The faults, in any order.
    pub faults: Vec<TimedFault>,
}

/// States a drawn fault may wait for.
const STATES: [&str; 4] = ["cordoning", "draining", "rebooting", "verifying"];

impl FaultSchedule {
    /// Draws a schedule from `seed`: 2 to 6 faults starting in the first 8 s, all over by
    /// 12 s. Lengths are chosen against the simulation's 3 s leader lease (a pause outlasts it)
    /// and stay well inside the timeouts a chaos run uses, so a fault delays the rollout
    /// without failing a node, except the host faults, which are meant to.
    pub fn draw(seed: u64) -> FaultSchedule {
        let mut rng = StdRng::seed_from_u64(seed);
        let n = rng.random_range(2..=6);
        let mut faults: Vec<TimedFault> = (0..n).map(|_| draw_one(&mut rng)).collect();
        faults.sort_by(|a, b| a.at.total_cmp(&b.at));
        FaultSchedule {
            seed: Some(seed),
            stop_after: 12.0,
            faults,
        }
    }

    /// Whether a fault of the schedule creates a NodeMaintenance (its CRD must be installed).
    pub fn needs_node_maintenance(&self) -> bool {
        self.faults.iter().any(|f| {
            matches!(
                f.fault,
                Fault::OtherMaintenance {
                    by: Actor::NodeMaintenance,
                    ..
                }
            )
        })
    }

    /// Errors naming the fault (by index) and the field.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.stop_after.is_finite() && self.stop_after >= 0.0) {
            return Err(format!(
                "faults.stopAfter: {} is not a number of seconds >= 0",
                self.stop_after
            ));
        }
        for (i, f) in self.faults.iter().enumerate() {
            let at = |what: &str| format!("faults.faults[{i}].{what}");
            if !(f.at.is_finite() && f.at >= 0.0) {
                return Err(format!("{}: must be a number of seconds >= 0", at("at")));
            }
            if !(f.for_seconds.is_finite() && f.for_seconds >= 0.0) {
                return Err(format!(
                    "{}: must be a number of seconds >= 0",
                    at("forSeconds")
                ));
            }
            if let Some(s) = &f.when_state {
                if !STATES.contains(&s.as_str()) {
                    return Err(format!(
                        "{}: `{s}` is not one of {}",
                        at("whenState"),
                        STATES.join(", ")
                    ));
                }
            }
            let rate = |r: f64| (0.0..=1.0).contains(&r);
            match &f.fault {
                Fault::ApiErrors {
                    error_rate,
                    throttle_rate,
                } if !(rate(*error_rate)
                    && rate(*throttle_rate)
                    && error_rate + throttle_rate <= 1.0) =>
                {
                    return Err(format!(
                        "{}: errorRate and throttleRate must be shares in 0..=1 with a sum <= 1",
                        at("fault.apiErrors")
                    ));
                }
                Fault::SlowApi { delay_rate, .. } if !rate(*delay_rate) => {
                    return Err(format!(
                        "{}: must be a share in 0..=1",
                        at("fault.slowApi.delayRate")
                    ));
                }
                Fault::SlowPods { start_delay }
                    if !(start_delay.is_finite() && *start_delay >= 0.0) =>
                {
                    return Err(format!(
                        "{}: must be a number of seconds >= 0",
                        at("fault.slowPods.startDelay")
                    ));
                }
                Fault::SlowDetach { detach_seconds }
                    if !(detach_seconds.is_finite() && *detach_seconds >= 0.0) =>
                {
                    return Err(format!(
                        "{}: must be a number of seconds >= 0",
                        at("fault.slowDetach.detachSeconds")
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }
}

fn draw_one(rng: &mut StdRng) -> TimedFault {
    let at = (rng.random_range(0.0..8.0f64) * 10.0).round() / 10.0;
    let secs =
        |rng: &mut StdRng, lo: f64, hi: f64| (rng.random_range(lo..hi) * 10.0).round() / 10.0;
    let state = |rng: &mut StdRng, among: &[&str]| {
        Some(among[rng.random_range(0..among.len())].to_string())
    };
    let (fault, for_seconds, when_state) = match rng.random_range(0..16) {
        0 => (
            Fault::ApiErrors {
                error_rate: secs(rng, 0.1, 0.5),
                throttle_rate: secs(rng, 0.0, 0.3),
            },
            secs(rng, 1.0, 5.0),
            None,
        ),
        1 => (
            Fault::SlowApi {
                delay_rate: secs(rng, 0.2, 0.8),
                delay_ms: rng.random_range(50..800),
            },
            secs(rng, 1.0, 5.0),
            None,
        ),
        2 => (
            Fault::WatchCuts {
                max_ms: rng.random_range(100..2000),
            },
            secs(rng, 2.0, 6.0),
            None,
        ),
        3 => (Fault::Outage, secs(rng, 1.0, 4.0), None),
        4 => (Fault::KillLeader, secs(rng, 0.5, 5.0), state(rng, &STATES)),
        5 => (Fault::PauseLeader, secs(rng, 4.0, 7.0), state(rng, &STATES)),
        6 => (Fault::KillAgent, secs(rng, 0.5, 4.0), state(rng, &STATES)),
        // Before the ack: the stall, the hang and the failure wait for the reboot to come.
        7 => (
            Fault::StallAgent,
            secs(rng, 0.5, 5.0),
            state(rng, &["cordoning", "draining"]),
        ),
        8 => (
            Fault::HostHangs,
            secs(rng, 2.0, 8.0),
            state(rng, &["cordoning", "draining"]),
        ),
        9 => (
            Fault::HostFails,
            secs(rng, 0.5, 4.0),
            state(rng, &["cordoning", "draining"]),
        ),
        10 => (
            Fault::DeleteNode,
            secs(rng, 0.5, 4.0),
            state(rng, &["draining"]),
        ),
        11 => (Fault::DeleteLock, 0.0, state(rng, &STATES)),
        12 => (Fault::BlockBudgets, secs(rng, 2.0, 6.0), None),
        13 => (
            Fault::DenyEvictions,
            secs(rng, 1.0, 5.0),
            state(rng, &["draining"]),
        ),
        14 => (
            Fault::SlowPods {
                start_delay: secs(rng, 100.0, 500.0),
            },
            secs(rng, 2.0, 6.0),
            None,
        ),
        _ => (
            Fault::OtherMaintenance {
                by: Actor::ALL[rng.random_range(0..Actor::ALL.len())],
                pick: rng.random_range(0..1000),
            },
            secs(rng, 2.0, 8.0),
            None,
        ),
    };
    TimedFault {
        at,
        when_state,
        node: None,
        for_seconds,
        fault,
    }
}

/// The node an `otherMaintenance` fault without a node takes: the `pick`-th, modulo their
/// number, of the nodes in no rollboot cycle (no state, or `done`); none when every node is in
/// one (the fault waits).
fn out_of_cycles(nodes: &[(String, Option<String>)], fault: &Fault) -> Option<String> {
    let Fault::OtherMaintenance { pick, .. } = fault else {
        return None;
    };
    let free: Vec<&String> = nodes
        .iter()
        .filter(|(_, s)| s.as_deref().is_none_or(|s| s == "done"))
        .map(|(n, _)| n)
        .collect();
    (!free.is_empty()).then(|| free[*pick as usize % free.len()].clone())
}

/// What to do now.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Fault `index` of the schedule begins, on `target` when it has one.
    Begin {
        /// Index in the schedule.
        index: usize,
        /// The fault.
        fault: Fault,
        /// Its node.
        target: Option<String>,
    },
    /// Fault `index` ends.
    End {
        /// Index in the schedule.
        index: usize,
        /// The fault.
        fault: Fault,
        /// Its node.
        target: Option<String>,
    },
}

/// What became of one fault, for the report.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Played {
    /// The fault's name.
    pub fault: String,
    /// Its node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// When it began (real seconds after the rollout began); absent when it never did (its
    /// state was not reached before `stopAfter`, or it had no node to act on).
    pub began: Option<f64>,
    /// When it ended.
    pub ended: Option<f64>,
}

#[derive(Clone, Debug, Default)]
struct Progress {
    began: Option<f64>,
    ended: Option<f64>,
    target: Option<String>,
}

/// Plays a schedule: call [`Player::tick`] often (every change of the Nodes, and at least every
/// few hundred milliseconds) and apply the steps it returns.
#[derive(Clone, Debug)]
pub struct Player {
    schedule: FaultSchedule,
    progress: Vec<Progress>,
}

impl Player {
    /// A player at the start of the rollout.
    pub fn new(schedule: FaultSchedule) -> Player {
        let progress = vec![Progress::default(); schedule.faults.len()];
        Player { schedule, progress }
    }

    /// The schedule played.
    pub fn schedule(&self) -> &FaultSchedule {
        &self.schedule
    }

    /// The steps due at `t` (real seconds since the rollout began), given every node's name and
    /// `rollboot.dev/state` annotation, sorted by name.
    pub fn tick(&mut self, t: f64, nodes: &[(String, Option<String>)]) -> Vec<Step> {
        let mut steps = Vec::new();
        let stopping = t >= self.schedule.stop_after;
        for (index, f) in self.schedule.faults.iter().enumerate() {
            let p = &mut self.progress[index];
            match (p.began, p.ended) {
                (None, _) if !stopping && t >= f.at => {
                    let in_state = |want: &str| {
                        nodes
                            .iter()
                            .find(|(_, s)| s.as_deref() == Some(want))
                            .map(|(n, _)| n.clone())
                    };
                    let target = match (&f.when_state, &f.node) {
                        (Some(s), Some(n)) => nodes
                            .iter()
                            .any(|(m, st)| m == n && st.as_deref() == Some(s.as_str()))
                            .then(|| n.clone()),
                        (Some(s), None) => in_state(s),
                        (None, Some(n)) => Some(n.clone()),
                        (None, None) if matches!(f.fault, Fault::OtherMaintenance { .. }) => {
                            out_of_cycles(nodes, &f.fault)
                        }
                        (None, None) if f.fault.targets_a_node() => nodes
                            .iter()
                            .find(|(_, s)| s.as_deref().is_some_and(|s| STATES.contains(&s)))
                            .map(|(n, _)| n.clone()),
                        (None, None) => None,
                    };
                    // A fault that waits for a state, or needs a node, waits on.
                    let ready = if f.when_state.is_some() || f.fault.targets_a_node() {
                        target.is_some()
                    } else {
                        true
                    };
                    if ready {
                        p.began = Some(t);
                        p.target = target.clone();
                        steps.push(Step::Begin {
                            index,
                            fault: f.fault.clone(),
                            target: target.filter(|_| f.fault.targets_a_node()),
                        });
                    }
                }
                (Some(b), None) if stopping || t >= b + f.for_seconds => {
                    p.ended = Some(t);
                    steps.push(Step::End {
                        index,
                        fault: f.fault.clone(),
                        target: p.target.clone().filter(|_| f.fault.targets_a_node()),
                    });
                }
                _ => {}
            }
        }
        steps
    }

    /// True once no fault is on or can start any more.
    pub fn over(&self, t: f64) -> bool {
        t >= self.schedule.stop_after
            && self
                .progress
                .iter()
                .all(|p| p.began.is_none() || p.ended.is_some())
    }

    /// The API server's fault settings for the API faults on now (rates of overlapping faults
    /// add up, capped at 1; the longest delay and the shortest watch life win).
    pub fn api_faults(&self) -> FaultConfig {
        let mut c = FaultConfig::default();
        for (f, p) in self.schedule.faults.iter().zip(&self.progress) {
            if p.began.is_none() || p.ended.is_some() {
                continue;
            }
            match &f.fault {
                Fault::ApiErrors {
                    error_rate,
                    throttle_rate,
                } => {
                    c.error_rate = (c.error_rate + error_rate).min(1.0);
                    c.throttle_rate = (c.throttle_rate + throttle_rate).min(1.0 - c.error_rate);
                }
                Fault::SlowApi {
                    delay_rate,
                    delay_ms,
                } => {
                    c.delay_rate = (c.delay_rate + delay_rate).min(1.0);
                    c.delay_ms = c.delay_ms.max(*delay_ms);
                }
                Fault::WatchCuts { max_ms } => {
                    c.watch_cut_max_ms =
                        Some(c.watch_cut_max_ms.map_or(*max_ms, |m| m.min(*max_ms)));
                }
                _ => {}
            }
        }
        c
    }

    /// What became of each fault.
    pub fn played(&self) -> Vec<Played> {
        self.schedule
            .faults
            .iter()
            .zip(&self.progress)
            .map(|(f, p)| Played {
                fault: f.fault.name().into(),
                target: p.target.clone().filter(|_| f.fault.targets_a_node()),
                began: p.began,
                ended: p.ended,
            })
            .collect()
    }

    /// Nodes a host fault (hang or failed reboot) was played on: their failure is expected.
    pub fn host_fault_nodes(&self) -> Vec<String> {
        self.schedule
            .faults
            .iter()
            .zip(&self.progress)
            .filter(|(f, p)| {
                matches!(f.fault, Fault::HostHangs | Fault::HostFails) && p.began.is_some()
            })
            .filter_map(|(_, p)| p.target.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(states: &[(&str, Option<&str>)]) -> Vec<(String, Option<String>)> {
        states
            .iter()
            .map(|(n, s)| (n.to_string(), s.map(str::to_string)))
            .collect()
    }

    #[test]
    fn a_seed_draws_the_same_schedule_every_time_and_seeds_differ() {
        assert_eq!(FaultSchedule::draw(7), FaultSchedule::draw(7));
        assert_ne!(FaultSchedule::draw(7), FaultSchedule::draw(8));
        for seed in 0..200 {
            let s = FaultSchedule::draw(seed);
            s.validate().unwrap_or_else(|e| panic!("seed {seed}: {e}"));
            assert!((2..=6).contains(&s.faults.len()));
            assert!(s.faults.iter().all(|f| f.at < s.stop_after));
        }
    }

    #[test]
    fn every_kind_of_fault_is_drawn_within_a_few_hundred_seeds() {
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..300 {
            for f in FaultSchedule::draw(seed).faults {
                seen.insert(f.fault.name());
            }
        }
        assert_eq!(seen.len(), 16, "{seen:?}");
    }

    #[test]
    fn a_schedule_round_trips_through_yaml_and_bad_fields_are_named() {
        let s = FaultSchedule::draw(3);
        let y = yaml_serde::to_string(&s).unwrap();
        assert_eq!(yaml_serde::from_str::<FaultSchedule>(&y).unwrap(), s);
        let written = "stopAfter: 10\nfaults:\n- {at: 1, forSeconds: 2, fault: {apiErrors: {errorRate: 0.5, throttleRate: 0.1}}}\n- {at: 2, whenState: draining, fault: killLeader}\n";
        let s: FaultSchedule = yaml_serde::from_str(written).unwrap();
        assert_eq!(s.faults[1].fault, Fault::KillLeader);
        assert!(yaml_serde::from_str::<FaultSchedule>(
            "stopAfter: 1\nfaults: [{at: 1, fault: meteor}]"
        )
        .is_err());
        let bad = FaultSchedule {
            faults: vec![TimedFault {
                when_state: Some("sleeping".into()),
                ..s.faults[0].clone()
            }],
            ..s
        };
        assert_eq!(
            bad.validate().unwrap_err(),
            "faults.faults[0].whenState: `sleeping` is not one of cordoning, draining, rebooting, verifying"
        );
    }

    #[test]
    fn a_fault_waits_for_its_state_takes_that_node_and_ends_after_its_length() {
        let mut p = Player::new(FaultSchedule {
            seed: None,
            stop_after: 20.0,
            faults: vec![TimedFault {
                at: 1.0,
                when_state: Some("draining".into()),
                node: None,
                for_seconds: 2.0,
                fault: Fault::KillAgent,
            }],
        });
        assert!(p.tick(0.5, &nodes(&[("a", Some("draining"))])).is_empty());
        assert!(p.tick(1.5, &nodes(&[("a", Some("cordoning"))])).is_empty());
        let begin = p.tick(2.0, &nodes(&[("a", Some("done")), ("b", Some("draining"))]));
        assert_eq!(
            begin,
            vec![Step::Begin {
                index: 0,
                fault: Fault::KillAgent,
                target: Some("b".into())
            }]
        );
        assert!(p.tick(3.9, &[]).is_empty());
        assert!(!p.over(3.9));
        assert_eq!(
            p.tick(4.0, &[]),
            vec![Step::End {
                index: 0,
                fault: Fault::KillAgent,
                target: Some("b".into())
            }]
        );
        assert!(!p.over(4.0), "faults may still start until stopAfter");
        assert!(p.over(20.0));
    }

    #[test]
    fn stop_after_ends_every_fault_and_starts_none() {
        let mut p = Player::new(FaultSchedule {
            seed: None,
            stop_after: 5.0,
            faults: vec![
                TimedFault {
                    at: 0.0,
                    when_state: None,
                    node: None,
                    for_seconds: 100.0,
                    fault: Fault::ApiErrors {
                        error_rate: 0.4,
                        throttle_rate: 0.2,
                    },
                },
                TimedFault {
                    at: 1.0,
                    when_state: Some("rebooting".into()),
                    node: None,
                    for_seconds: 1.0,
                    fault: Fault::KillLeader,
                },
            ],
        });
        assert_eq!(p.tick(0.0, &[]).len(), 1);
        assert_eq!(p.api_faults().error_rate, 0.4);
        assert!(!p.over(4.0));
        let end = p.tick(5.0, &nodes(&[("a", Some("rebooting"))]));
        assert!(
            matches!(end.as_slice(), [Step::End { index: 0, .. }]),
            "{end:?}"
        );
        assert_eq!(p.api_faults(), FaultConfig::default());
        assert!(p.over(5.0));
        assert_eq!(p.played()[1].began, None);
    }

    #[test]
    fn another_actors_maintenance_takes_a_node_in_no_cycle_and_waits_for_one() {
        let fault = Fault::OtherMaintenance {
            by: Actor::Karpenter,
            pick: 3,
        };
        let mut p = Player::new(FaultSchedule {
            seed: None,
            stop_after: 20.0,
            faults: vec![TimedFault {
                at: 0.0,
                when_state: None,
                node: None,
                for_seconds: 2.0,
                fault: fault.clone(),
            }],
        });
        let busy = nodes(&[("a", Some("draining")), ("b", Some("failed"))]);
        assert!(p.tick(0.0, &busy).is_empty(), "no node out of any cycle");
        let some = nodes(&[
            ("a", Some("draining")),
            ("b", None),
            ("c", Some("done")),
            ("d", Some("rebooting")),
        ]);
        // The free ones are b and c: pick 3 is c.
        assert_eq!(
            p.tick(1.0, &some),
            vec![Step::Begin {
                index: 0,
                fault,
                target: Some("c".into())
            }]
        );
        let y = "stopAfter: 5\nfaults: [{at: 1, node: node-0001, forSeconds: 2, fault: {otherMaintenance: {by: nodeMaintenance}}}]";
        let s: FaultSchedule = yaml_serde::from_str(y).unwrap();
        assert!(s.needs_node_maintenance());
        assert!(!FaultSchedule::draw(1).faults.is_empty());
    }

    #[test]
    fn overlapping_api_faults_add_up_capped() {
        let f = |e, t| TimedFault {
            at: 0.0,
            when_state: None,
            node: None,
            for_seconds: 10.0,
            fault: Fault::ApiErrors {
                error_rate: e,
                throttle_rate: t,
            },
        };
        let mut p = Player::new(FaultSchedule {
            seed: None,
            stop_after: 10.0,
            faults: vec![f(0.6, 0.3), f(0.6, 0.3)],
        });
        p.tick(0.0, &[]);
        let c = p.api_faults();
        assert_eq!((c.error_rate, c.throttle_rate), (1.0, 0.0));
    }
}
