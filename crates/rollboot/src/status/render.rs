//! The status report as the lines a person reads (its JSON form is [`Status`]'s
//! serialization), one function per section.
//!
//! Owns layout only: it must never decide anything the JSON does not say.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};

use super::{
    CordonedBy, FailureCount, Hosts, LeaderLease, LockLease, Maintenance, NodeHistory, NodeStatus,
    Status,
};
use crate::config::Duration;
use crate::controller::decide;
use crate::node::LastCycle;
use crate::render::{instant, table, Render};

impl Render for Status {
    fn text(&self) -> String {
        let mut out = String::new();
        leader(&mut out, self.now, &self.leader);
        lock(&mut out, self.now, &self.lock);
        maintenance(&mut out, &self.maintenance);
        failures(&mut out, &self.failures);
        let c = &self.counts;
        let _ = writeln!(
            out,
            "nodes:        {} flagged, {} in flight, {} done, {} failed, {} excluded (of {})",
            c.flagged, c.in_flight, c.done, c.failed, c.excluded, c.nodes
        );
        if self.blockers.is_empty() {
            let _ = writeln!(out, "blockers:     none");
        } else {
            let _ = writeln!(out, "blockers:");
            for b in &self.blockers {
                let _ = writeln!(out, "  - {b}");
            }
        }
        if !self.not_checked.is_empty() {
            let _ = writeln!(out, "not checked:  {}", self.not_checked.join(", "));
        }
        for u in &self.unsafe_settings {
            let _ = writeln!(out, "unsafe:       {u}");
        }
        hosts(&mut out, &self.hosts);
        nodes(&mut out, &self.nodes);
        history(&mut out, &self.history);
        out
    }
}

/// How long ago `t` was at `now` (`in ...` for an instant still to come).
fn ago(now: DateTime<Utc>, t: DateTime<Utc>) -> String {
    let s = (now - t).num_seconds();
    if s < 0 {
        return format!("in {}", Duration::from_secs(-s));
    }
    format!("{} ago", Duration::from_secs(s))
}

/// `leader:`: the holder and its last renewal, or that no replica leads.
fn leader(out: &mut String, now: DateTime<Utc>, l: &LeaderLease) {
    let _ = match (&l.holder, l.renew_time) {
        (Some(h), Some(r)) => writeln!(
            out,
            "leader:       {h} (lease {}: renewed {}, {}; {}s lease, {})",
            l.lease,
            instant(r),
            ago(now, r),
            l.lease_duration_seconds,
            if l.expired {
                "EXPIRED: no replica is leading"
            } else {
                "live"
            }
        ),
        (Some(h), None) => writeln!(out, "leader:       {h} (lease {}: never renewed)", l.lease),
        (None, _) => writeln!(
            out,
            "leader:       none (lease {}: no replica is leading)",
            l.lease
        ),
    };
}

/// `lock:` and `in flight:`: who holds the maintenance lock (a pause, another tool,
/// rollboot), and the nodes it records in flight.
fn lock(out: &mut String, now: DateTime<Utc>, k: &LockLease) {
    let _ = match (&k.holder, k.foreign, &k.pause) {
        (None, _, _) => writeln!(out, "lock:         free (lease {})", k.lease),
        (Some(h), true, Some(p)) => writeln!(
            out,
            "lock:         PAUSED by {}{}{} (holder `{h}`, lease {}): rollboot starts nothing new; the nodes in flight finish their cycle; `rollboot resume` to go on",
            p.by,
            p.at.map(|t| format!(" since {} ({})", instant(t), ago(now, t))).unwrap_or_default(),
            p.reason.as_ref().map(|r| format!(": {r}")).unwrap_or_default(),
            k.lease
        ),
        (Some(h), true, None) => writeln!(
            out,
            "lock:         held by `{h}`, not rollboot: PAUSED, rollboot starts nothing new (lease {})",
            k.lease
        ),
        (Some(h), false, _) => writeln!(out, "lock:         held by rollboot ({h}) (lease {})", k.lease),
    };
    if k.in_flight.is_empty() {
        let _ = writeln!(out, "in flight:    none");
        return;
    }
    let _ = writeln!(out, "in flight:    {} node(s)", k.in_flight.len());
    for e in &k.in_flight {
        let _ = writeln!(
            out,
            "  {}  {}  since {} ({}), started {} by {}",
            e.node,
            e.state,
            instant(e.since),
            ago(now, e.since),
            instant(e.started),
            e.leader
        );
        if let Some(w) = &e.waiting {
            let _ = writeln!(
                out,
                "    waiting: {} (until {} at most)",
                w.why,
                instant(w.until)
            );
        }
    }
}

/// `maintenance:`: allowed now or not, until when, and the next opening.
fn maintenance(out: &mut String, m: &Maintenance) {
    let next = match &m.next_opening {
        Some(o) => match o.end {
            Some(e) => format!("next opening {} -> {}", instant(o.start), instant(e)),
            None => format!("next opening {} (open-ended)", instant(o.start)),
        },
        None => "no opening in the look-ahead horizon".to_string(),
    };
    let _ = if m.allowed_now {
        match m.current_window_end {
            Some(e) => writeln!(
                out,
                "maintenance:  allowed now, until {}; {next}",
                instant(e)
            ),
            None => writeln!(out, "maintenance:  allowed now (no window end)"),
        }
    } else {
        writeln!(out, "maintenance:  not allowed now; {next}")
    };
}

/// `failures:`: failed nodes against the limit, and the slots failed nodes hold.
fn failures(out: &mut String, f: &FailureCount) {
    let _ = writeln!(
        out,
        "failures:     {} failed node(s), {} tolerated{}",
        f.failed.len(),
        f.max_failures,
        if f.halted {
            format!(
                ": rollout HALTED until an operator clears one: {}",
                decide::CLEAR_FAILED
            )
        } else {
            String::new()
        }
    );
    if !f.holding_slots.is_empty() {
        let _ = writeln!(
            out,
            "              {} failed node(s) left cordoned by rollboot hold a slot of maxNodes: {}{}",
            f.holding_slots.len(),
            f.holding_slots.join(", "),
            if f.return_to_service {
                " (failures.returnToService uncordons each once its host is up and Ready)"
            } else {
                " (until an operator clears them, or failures.returnToService)"
            }
        );
    }
}

/// The table of flagged, in-flight and failed nodes.
fn nodes(out: &mut String, nodes: &[NodeStatus]) {
    if nodes.is_empty() {
        return;
    }
    let rows: Vec<Vec<String>> = nodes
        .iter()
        .map(|n| {
            let mut note = Vec::new();
            if n.excluded {
                note.push("excluded".to_string());
            }
            if !n.ready {
                note.push("not Ready".to_string());
            }
            if n.in_lock {
                note.push("in lock".to_string());
            }
            if n.holds_slot {
                note.push("holds a maxNodes slot".to_string());
            }
            if let Some(actor) = &n.other_maintenance {
                note.push(format!("otherMaintenance: {actor}"));
            }
            if let Some(t) = n.resting_until {
                note.push(format!(
                    "rebooted recently: may start from {} (nodes.minRebootInterval)",
                    crate::time::annotation(t)
                ));
            }
            if let Some(p) = &n.passed_over {
                note.push(format!(
                    "passed over since {} ({}): taken once it has room, or from {} (concurrency.passOverFor)",
                    crate::time::annotation(p.since),
                    p.why,
                    crate::time::annotation(p.taken_anyway_from)
                ));
            }
            if let Some(f) = &n.fleetlock {
                let now = if f.holds_slot {
                    "holds its slot, reboots itself"
                } else if f.asking {
                    "asks for a slot"
                } else {
                    "asks nothing"
                };
                let last = f.last.as_ref().map_or(String::new(), |l| {
                    format!(
                        "; last {} at {}: {}",
                        l.endpoint,
                        crate::time::annotation(l.at),
                        l.answer
                    )
                });
                note.push(format!(
                    "FleetLock host {} (group {}): {now}{last}",
                    f.id, f.group
                ));
            }
            if let Some(cause) = &n.quarantined {
                note.push(format!(
                    "quarantined ({cause}): stays cordoned until `rollboot retry`"
                ));
            }
            if let Some(r) = &n.failure_reason {
                note.push(format!("failure: {r}"));
            }
            vec![
                n.name.clone(),
                n.state.map_or("-".into(), |s| s.to_string()),
                n.state_since.or(n.flagged_at).map_or("-".into(), instant),
                n.flag_reason.clone().unwrap_or_else(|| "-".into()),
                match n.cordoned_by {
                    Some(CordonedBy::Rollboot) => "rollboot".into(),
                    Some(CordonedBy::Operator) => "operator".into(),
                    None => "-".into(),
                },
                note.join(", "),
            ]
        })
        .collect();
    let _ = writeln!(out);
    table(
        out,
        &["NODE", "STATE", "SINCE", "FLAGGED", "CORDONED", "NOTE"],
        &rows,
    );
}

/// `unplanned shutdowns:` how a shutdown nobody planned would go, by state with what the
/// others mean and their nodes; `host mismatch:` the nodes whose agent reads another host.
fn hosts(out: &mut String, h: &Hosts) {
    if !h.shutdown_drain.is_empty() {
        let counts: Vec<String> = h
            .shutdown_drain
            .iter()
            .map(|(state, n)| format!("{n} {state}"))
            .collect();
        let _ = writeln!(out, "unplanned shutdowns: {}", counts.join(", "));
        for (state, meaning) in h.meaning.iter().filter(|(s, _)| *s != "ready") {
            let _ = writeln!(out, "  - {state}: {meaning}");
        }
        if !h.not_drainable.is_empty() {
            let _ = writeln!(
                out,
                "  not drained first on: {}",
                h.not_drainable.join(", ")
            );
        }
    }
    for m in &h.mismatched {
        let _ = writeln!(
            out,
            "host mismatch: {}: {} (its agent refuses every reboot token)",
            m.node, m.why
        );
    }
}

/// The reboot history table.
fn history(out: &mut String, history: &[NodeHistory]) {
    if history.is_empty() {
        return;
    }
    let rows: Vec<Vec<String>> = history
        .iter()
        .map(|h| {
            let id = |b: &Option<String>| b.clone().unwrap_or_else(|| "?".into());
            let count = match (h.count, h.undrained) {
                (Some(c), _) => c.to_string(),
                (None, Some(_)) => "0".into(),
                (None, None) => "?".into(),
            };
            vec![
                h.node.clone(),
                match h.undrained {
                    Some(u) => format!("{count} (+{u} undrained)"),
                    None => count,
                },
                h.last_reboot.map_or("?".into(), instant),
                format!("{} -> {}", id(&h.boot_id_before), id(&h.boot_id_after)),
                h.last_cycle.as_ref().map_or("-".into(), cycle_text),
            ]
        })
        .collect();
    let _ = writeln!(out, "\nreboot history:");
    table(
        out,
        &[
            "NODE",
            "REBOOTS",
            "LAST REBOOT",
            "BOOT ID (BEFORE -> AFTER)",
            "LAST CYCLE (DRAIN / REBOOT / GATE)",
        ],
        &rows,
    );
}

/// A last cycle's parts as `12.3s / 95.0s / 3.1s` (`?` for a part not measured), with the
/// pods' exit time when measured.
fn cycle_text(c: &LastCycle) -> String {
    let s = |v: Option<f64>| v.map_or("?".into(), |v| format!("{v:.1}s"));
    let mut t = format!(
        "{} / {} / {}",
        s(c.drain_seconds),
        s(c.reboot_seconds),
        s(c.gate_seconds)
    );
    if let Some(e) = c.pod_exit_seconds {
        t.push_str(&format!(" (pods exit in {e:.1}s)"));
    }
    t
}
