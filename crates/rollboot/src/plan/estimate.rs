//! A node's duration estimate beyond its drain: its reboot and health gate, from the
//! operator's flag, the node's own measured last cycle, the median of the cluster's measured
//! cycles, or the default, in that order.
//!
//! Owns that rule and the basis it states for each figure. Pure: it must never read a clock
//! or the cluster (the cycles are the Nodes' `rollboot.dev/last-cycle`, as read).

use chrono::{DateTime, Utc};

use super::{Options, DEFAULT_GATE, DEFAULT_REBOOT};
use crate::config::Duration;
use crate::node::{LastCycle, NodeView};

/// Where a part of an estimate comes from, and its figure: the operator's flag, the node's own
/// last cycle, the median of the nodes' last cycles, or the default.
#[derive(Clone, Debug)]
pub(super) struct PartEstimate {
    /// The figure, whole seconds.
    pub(super) seconds: i64,
    /// Where it comes from, as a phrase.
    pub(super) basis: String,
}

/// The cycles rollboot measured on this cluster ([`LastCycle`] on each Node),
/// summarized for the estimates.
#[derive(Clone, Debug, Default)]
pub(super) struct Measured {
    /// Nodes with a recorded last cycle.
    pub(super) nodes: usize,
    /// Median reboot and gate seconds over the nodes that recorded them.
    reboot: Option<f64>,
    gate: Option<f64>,
}

impl Measured {
    /// The summary of the cycles recorded on `nodes`.
    pub(super) fn of(nodes: &[NodeView]) -> Measured {
        let cycles: Vec<&LastCycle> = nodes
            .iter()
            .filter_map(|n| n.history.last_cycle.as_ref())
            .collect();
        let median = |part: fn(&LastCycle) -> Option<f64>| {
            crate::time::median(&mut cycles.iter().filter_map(|c| part(c)).collect())
        };
        Measured {
            nodes: cycles.len(),
            reboot: median(|c| c.reboot_seconds),
            gate: median(|c| c.gate_seconds),
        }
    }

    /// The estimate of one part for a node whose own last cycle measured `own` (at `when`):
    /// the flag, else its own figure, else the cluster's median, else `default`.
    fn part(
        &self,
        flag: Option<Duration>,
        flag_name: &str,
        own: Option<(f64, Option<DateTime<Utc>>)>,
        median: Option<f64>,
        default: Duration,
    ) -> PartEstimate {
        let whole = |s: f64| s.round() as i64;
        if let Some(d) = flag {
            return PartEstimate {
                seconds: d.as_millis() / 1000,
                basis: format!("{flag_name} {d}"),
            };
        }
        if let Some((secs, when)) = own {
            return PartEstimate {
                seconds: whole(secs),
                basis: match when {
                    Some(w) => format!(
                        "measured on its last cycle ({})",
                        w.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                    ),
                    None => "measured on its last cycle".into(),
                },
            };
        }
        if let Some(m) = median {
            return PartEstimate {
                seconds: whole(m),
                basis: format!("the median of {} node(s)' last cycles", self.nodes),
            };
        }
        PartEstimate {
            seconds: default.as_millis() / 1000,
            basis: format!("the default {default} (no {flag_name}, no measured cycle)"),
        }
    }

    /// A node's reboot and gate estimates.
    pub(super) fn reboot_and_gate(
        &self,
        node: Option<&NodeView>,
        opts: &Options,
    ) -> (PartEstimate, PartEstimate) {
        let own = |part: fn(&LastCycle) -> Option<f64>| {
            let n = node?;
            let c = n.history.last_cycle.as_ref()?;
            Some((part(c)?, n.history.last_reboot))
        };
        (
            self.part(
                opts.reboot_time,
                "--reboot-time",
                own(|c| c.reboot_seconds),
                self.reboot,
                DEFAULT_REBOOT,
            ),
            self.part(
                opts.gate_time,
                "--gate-time",
                own(|c| c.gate_seconds),
                self.gate,
                DEFAULT_GATE,
            ),
        )
    }
}
