//! The plan as the lines a person reads (the JSON form is [`Plan`]'s serialization), one
//! function per section.
//!
//! Owns layout only: it must never decide anything the JSON does not say.

use std::fmt::Write as _;

use super::{NodePlan, Plan, PredictedOutcome, Severity};
use crate::config::Duration;
use crate::render::{instant, table, Render};

fn secs(s: i64) -> String {
    Duration::from_secs(s).to_string()
}

impl Render for Plan {
    fn text(&self) -> String {
        let mut out = String::new();
        summary(&mut out, self);
        problems(&mut out, self);
        if self.nodes.is_empty() {
            return out;
        }
        let _ = writeln!(out);
        nodes(&mut out, &self.nodes);
        let _ = writeln!(out);
        for n in &self.nodes {
            node(&mut out, self, n);
        }
        out
    }
}

/// The verdict, the estimate's rules, the nodes in flight, and the rollout's start and end.
fn summary(out: &mut String, p: &Plan) {
    let verdict = if p.proceeds {
        "the rollout would PROCEED".to_string()
    } else {
        let n = p
            .problems
            .iter()
            .filter(|x| x.severity != Severity::Warns)
            .count();
        format!("the rollout would be BLOCKED or FAIL: {n} problem(s)")
    };
    let _ = writeln!(
        out,
        "plan at {}: {} node(s) to reboot{}; {verdict}",
        instant(p.now),
        p.nodes.len(),
        if p.all {
            " (--all: every selected node)"
        } else {
            " (flagged)"
        }
    );
    let e = &p.estimate;
    let _ = writeln!(
        out,
        "estimate:     per node = drain (as measured on its last cycle, else the longest grace period of its pods to evict{}, default {}s, capped by drain.timeout {}) + reboot {} ({}) + health gate {} ({}); {} node(s) with a measured last cycle use their own figures",
        e.drain_grace_period_seconds
            .map_or(String::new(), |g| format!(", drain.gracePeriod {g}s")),
        e.default_grace_seconds,
        secs(e.drain_timeout_seconds),
        secs(e.reboot_seconds),
        e.reboot_basis,
        secs(e.gate_seconds),
        e.gate_basis,
        e.measured_nodes,
    );
    for f in &p.in_flight {
        let _ = writeln!(
            out,
            "in flight:    {} since {}, estimated free at {}",
            f.node,
            instant(f.since),
            instant(f.estimated_end)
        );
    }
    let r = &p.rollout;
    match (r.start, r.end) {
        (Some(s), Some(end)) => {
            let _ = writeln!(
                out,
                "rollout:      starts {}, ends {} ({} from now){}",
                instant(s),
                instant(end),
                secs(r.makespan_seconds.unwrap_or(0)),
                if r.assumes_blockers_cleared {
                    "; supposing the blockers below cleared now"
                } else {
                    ""
                }
            );
        }
        _ => {
            let _ = writeln!(out, "rollout:      nothing would start");
        }
    }
    if let Some(h) = &r.halted_by {
        let _ = writeln!(
            out,
            "halts:        node {} fails at {}: more failed nodes than failures.maxFailures, nothing new starts after it",
            h.node,
            instant(h.at)
        );
    }
    let _ = writeln!(out);
}

/// The problems that block the rollout or fail a node, then the warnings.
fn problems(out: &mut String, p: &Plan) {
    let blocking: Vec<_> = p
        .problems
        .iter()
        .filter(|x| x.severity != Severity::Warns)
        .collect();
    if blocking.is_empty() {
        let _ = writeln!(out, "problems:     none");
    } else {
        let _ = writeln!(out, "problems:");
        for x in blocking {
            let tag = match x.severity {
                Severity::Blocks => "BLOCKS",
                _ => "FAILS",
            };
            let _ = writeln!(out, "  - {tag} [{}] {}", x.kind.code(), x.message);
        }
    }
    let warnings: Vec<_> = p
        .problems
        .iter()
        .filter(|x| x.severity == Severity::Warns)
        .collect();
    if !warnings.is_empty() {
        let _ = writeln!(out, "warnings:");
        for x in warnings {
            let _ = writeln!(out, "  - [{}] {}", x.kind.code(), x.message);
        }
    }
    if !p.not_checked.is_empty() {
        let _ = writeln!(out, "not checked:  {}", p.not_checked.join("; "));
    }
}

/// The table of the nodes, in the controller's order.
fn nodes(out: &mut String, nodes: &[NodePlan]) {
    let header = [
        "#", "NODE", "GROUP", "START", "END", "DRAIN", "REBOOT", "GATE", "EVICT", "OUTCOME",
    ];
    let rows: Vec<Vec<String>> = nodes
        .iter()
        .map(|n| {
            let mut outcome = match n.outcome {
                PredictedOutcome::Reboots => "reboots".to_string(),
                PredictedOutcome::Fails => "FAILS".to_string(),
                PredictedOutcome::NotStarted => "not started".to_string(),
            };
            if n.overruns_window {
                outcome.push_str(", runs past its window");
            }
            if let Some(t) = n.resting_until {
                outcome.push_str(&format!(
                    ", rested from {} (nodes.minRebootInterval)",
                    instant(t)
                ));
            }
            if let Some(p) = &n.passed_over {
                outcome.push_str(&format!(
                    ", passed over since {} for budget {}",
                    instant(p.since),
                    p.budget
                ));
            }
            if let Some(f) = &n.fleetlock {
                outcome.push_str(&format!(", FleetLock host {} reboots itself", f.id));
                if let Some(l) = &f.last {
                    outcome.push_str(&format!(
                        " (last {} {}: {})",
                        l.endpoint,
                        instant(l.at),
                        l.answer
                    ));
                }
            }
            vec![
                n.order.to_string(),
                n.name.clone(),
                n.group.clone().unwrap_or_else(|| "-".into()),
                n.start.map_or("-".into(), instant),
                n.end.map_or("-".into(), instant),
                secs(n.estimate.drain_seconds),
                secs(n.estimate.reboot_seconds),
                secs(n.estimate.gate_seconds),
                n.evict.len().to_string(),
                outcome,
            ]
        })
        .collect();
    table(out, &header, &rows);
}

/// One node: the basis of its estimate, its window, and what its drain evicts, refuses and
/// leaves.
fn node(out: &mut String, p: &Plan, n: &NodePlan) {
    let e = &n.estimate;
    let _ = writeln!(out, "{}: drain: {}", n.name, e.drain_basis);
    // A part whose basis differs from the rule in the header (its own measured cycle).
    for (part, seconds, basis, rule) in [
        (
            "reboot",
            e.reboot_seconds,
            &e.reboot_basis,
            &p.estimate.reboot_basis,
        ),
        (
            "health gate",
            e.gate_seconds,
            &e.gate_basis,
            &p.estimate.gate_basis,
        ),
    ] {
        if seconds > 0 && basis != rule {
            let _ = writeln!(out, "  {part} {}: {basis}", secs(seconds));
        }
    }
    if let Some(w) = n.window {
        if let (Some(s), Some(e)) = (w.start, w.end) {
            let _ = writeln!(
                out,
                "  window {}: {} -> {}",
                w.index,
                instant(s),
                instant(e)
            );
        }
    }
    for pod in &n.evict {
        let budgets = if pod.budgets.is_empty() {
            String::new()
        } else {
            format!(", budget {}", pod.budgets.join(", "))
        };
        let _ = writeln!(
            out,
            "  evict {} ({}s grace{budgets})",
            pod.pod, pod.grace_seconds
        );
    }
    for s in &n.refuse {
        let _ = writeln!(out, "  REFUSE {} ({})", s.pod, s.reason);
    }
    for s in &n.skip {
        let _ = writeln!(out, "  leave {} ({})", s.pod, s.reason);
    }
    // The order, when there is more than one step to it.
    if n.steps.len() > 1 || !n.volumes.is_empty() {
        for (i, s) in n.steps.iter().enumerate() {
            let mut pods = s.evict.join(", ");
            if !s.await_completion.is_empty() {
                if !pods.is_empty() {
                    pods.push_str("; ");
                }
                pods.push_str(&format!(
                    "wait for {} to end",
                    s.await_completion.join(", ")
                ));
            }
            let _ = writeln!(out, "  step {} ({}): {pods}", i + 1, s.label);
        }
    }
    for v in &n.volumes {
        let _ = writeln!(out, "  volume {} of {}: waited for to detach", v.pv, v.pod);
    }
    if e.detach_seconds > 0 {
        let _ = writeln!(
            out,
            "  detach {}: {}",
            secs(e.detach_seconds),
            e.detach_basis
        );
    }
}
