//! The reboot history rollboot keeps on a Node: when its last cycle ended, the boots before and
//! after it, how many cycles it finished (and how many went undrained), and how long the parts
//! of the last one took.
//!
//! Owns [`History`] (as read into the view), [`LastCycle`] and its [`DrainPart`]s (their JSON),
//! and the annotations that record one more finished cycle ([`History::next`]). It must never
//! read a clock: the controller passes the instants it measured.

use chrono::{DateTime, Utc};

use super::keys::{
    LAST_BOOT_ID_AFTER, LAST_BOOT_ID_BEFORE, LAST_CYCLE, LAST_REBOOT, REBOOT_COUNT, UNDRAINED_COUNT,
};
use crate::time;

/// A node's reboot history, as the controller records it when a cycle ends `done`; each field
/// is `None` when absent or malformed (then listed in [`NodeView::malformed`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct History {
    /// `last-reboot`: when the last cycle ended.
    pub last_reboot: Option<DateTime<Utc>>,
    /// `last-boot-id-before`.
    pub boot_id_before: Option<String>,
    /// `last-boot-id-after`.
    pub boot_id_after: Option<String>,
    /// `reboot-count`.
    pub count: Option<u32>,
    /// `undrained-count`.
    pub undrained_count: Option<u32>,
    /// `last-cycle`: how long its parts took.
    pub last_cycle: Option<LastCycle>,
}

/// How long the parts of a node's last finished cycle took, measured by the controller from
/// what the cycle wrote to the cluster: its start in the maintenance lock, the reboot token's
/// instant, the instant it was back (`verifying`), and the instant it was `done`. The
/// annotation is its JSON (`{"drainSeconds": 41.2, "rebootSeconds": 95.0, "gateSeconds": 3.1,
/// "podExitSeconds": 2.4}`), seconds to the millisecond (a rehearsal's cycles are short); a
/// part that could not be measured is absent.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LastCycle {
    /// From the cycle's start (cordon) to the reboot request: cordon, hooks, drain, settle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_seconds: Option<f64>,
    /// From the (last) reboot request until the node was back: new boot ID, Ready, and no
    /// not-ready taint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reboot_seconds: Option<f64>,
    /// From back to done: uncordon, the health gate, the afterReboot hooks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate_seconds: Option<f64>,
    /// The median time the evicted pods took to go once their eviction was accepted, over
    /// the pods the drain saw go.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_exit_seconds: Option<f64>,
    /// Of the drain, the time spent waiting for the drained pods' volumes to detach
    /// (`drain.volumes.waitForDetach`), when it waited for any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detach_seconds: Option<f64>,
    /// The drain's steps, in order, each with its time and its wait for volumes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub drain_parts: Vec<DrainPart>,
    /// With `drain.volumes.waitForReattach`: from the health gate's start until every volume
    /// that moved with the evicted pods was attached where their replacements run (absent when
    /// none moved, or when the wait timed out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reattach_seconds: Option<f64>,
    /// The PersistentVolumes not seen attached where their pods' replacements run within
    /// `drain.volumes.reattachTimeout` (a warning: the node went on).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_reattached: Vec<String>,
    /// The cycle was a shutdown of its host that went before its drain was over: why (its
    /// parts measure what happened, not what a drained cycle takes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub undrained: Option<String>,
    /// The reboot token the cycle ended on, and how many tokens it issued (`reboot-attempt`):
    /// the cycle's end removes both from the Node (a restarted agent must find no token to
    /// refuse); the record keeps them. `None` for a reboot handed to its host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// See [`LastCycle::token`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
}

/// One step of a finished drain, as the cycle's record and the simulator's report show it.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DrainPart {
    /// The step ([`crate::drain::order::DrainStep::label`]).
    pub label: String,
    /// Its pods.
    pub pods: usize,
    /// From its first eviction until its pods were gone, seconds.
    pub seconds: f64,
    /// The wait for their volumes to detach after that, seconds.
    pub detach_seconds: f64,
}

// Its seconds come from clock differences, never NaN: equality is total.
impl Eq for DrainPart {}

impl LastCycle {
    /// The parts of a cycle that started at `start`, asked for its reboot at `requested`, was
    /// back at `back` and is done at `done`; each part only from instants in order. Pure.
    pub fn measure(
        start: Option<DateTime<Utc>>,
        requested: Option<DateTime<Utc>>,
        back: Option<DateTime<Utc>>,
        done: DateTime<Utc>,
        pod_exit_seconds: Option<f64>,
        detach_seconds: Option<f64>,
    ) -> LastCycle {
        let between = |a: Option<DateTime<Utc>>, b: Option<DateTime<Utc>>| {
            let (a, b) = (a?, b?);
            (b >= a).then(|| (b - a).num_milliseconds() as f64 / 1000.0)
        };
        LastCycle {
            drain_seconds: between(start, requested),
            reboot_seconds: between(requested, back),
            gate_seconds: between(back, Some(done)),
            pod_exit_seconds: pod_exit_seconds
                .filter(|s| s.is_finite() && *s >= 0.0)
                .map(|s| (s * 1000.0).round() / 1000.0),
            detach_seconds: detach_seconds
                .filter(|s| s.is_finite() && *s >= 0.0)
                .map(|s| (s * 1000.0).round() / 1000.0),
            drain_parts: Vec::new(),
            reattach_seconds: None,
            not_reattached: Vec::new(),
            undrained: None,
            token: None,
            attempts: None,
        }
    }

    /// The annotation text.
    pub fn to_annotation(&self) -> String {
        serde_json::to_string(self).expect("a LastCycle serializes")
    }

    /// Parses the annotation text: `None` unless every part present is a number of seconds
    /// (finite, not negative).
    pub fn parse(text: &str) -> Option<LastCycle> {
        let c: LastCycle = serde_json::from_str(text).ok()?;
        let ok = |v: Option<f64>| v.is_none_or(|s| s.is_finite() && s >= 0.0);
        (ok(c.drain_seconds)
            && ok(c.reboot_seconds)
            && ok(c.gate_seconds)
            && ok(c.pod_exit_seconds)
            && ok(c.detach_seconds)
            && ok(c.reattach_seconds))
        .then_some(c)
    }
}

impl History {
    /// The annotations that record one more finished cycle at `now`, from boot `before` to
    /// boot `after`: the count goes on from this one (from 1 when absent or malformed). An
    /// undrained cycle ([`LastCycle::undrained`]) is counted in `undrained-count`, not in
    /// `reboot-count`: its host went down with its pods on it.
    pub fn next(
        &self,
        now: DateTime<Utc>,
        before: &str,
        after: &str,
        cycle: &LastCycle,
    ) -> Vec<(&'static str, Option<String>)> {
        let (key, count) = if cycle.undrained.is_some() {
            (UNDRAINED_COUNT, self.undrained_count)
        } else {
            (REBOOT_COUNT, self.count)
        };
        vec![
            (LAST_REBOOT, Some(time::annotation(now))),
            (LAST_BOOT_ID_BEFORE, Some(before.to_string())),
            (LAST_BOOT_ID_AFTER, Some(after.to_string())),
            (
                key,
                Some((count.unwrap_or(0).saturating_add(1)).to_string()),
            ),
            (LAST_CYCLE, Some(cycle.to_annotation())),
        ]
    }
}
