//! Fixed sequences of updates through the metrics' public API, each rendered at a fixed instant:
//! together they set every family and every label the controller exports (leader and standby,
//! every phase, every blocker kind and node state, escaped label values, the window open and
//! closed). Their output, as the hand-written exposition rendered it before the move onto
//! prometheus-client, is recorded in `testdata/<name>.prom` (written once, by the commit that
//! recorded it; never rewritten from the new code).

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::{DateTime, TimeZone, Utc};

use crate::metrics::{CyclePhase, Metrics, RolloutGauges};

/// One scenario: its name (the recording's file stem), the replica and the scrape's instant.
pub(super) struct Scenario {
    pub name: &'static str,
    pub metrics: Metrics,
    pub now: DateTime<Utc>,
}

fn at(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).unwrap()
}

fn config(yaml: &str) -> Arc<crate::config::Config> {
    Arc::new(crate::config::parse_str(yaml).unwrap())
}

/// A nightly window, 02:00-05:00 in Berlin.
const NIGHTLY: &str =
    "windows: [{schedule: \"0 2 * * *\", duration: 3h, timezone: Europe/Berlin}]\n";

/// Every scenario, in a fixed order.
pub(super) fn all() -> Vec<Scenario> {
    vec![leader(), standby(), starting(), leader_own_lock()]
}

/// The leader in a busy rollout: every counter and label, a foreign lock holder, a halt, the
/// window closed (00:00 UTC is 01:00 in Berlin) with its next opening an hour away.
fn leader() -> Scenario {
    let m = Metrics::default();
    m.replica(
        "controller-0",
        config(&format!(
            "{NIGHTLY}drain: {{timeout: 10m, settle: 30s}}\n\
             hooks: {{beforeDrain: {{gates: [a.example.com/ok], timeout: 20m}}, \
             afterDrain: {{gates: [a.example.com/ok], timeout: 2m}}, \
             afterReboot: {{gates: [a.example.com/ok], timeout: 5m}}}}\n\
             failures: {{maxFailures: 2}}"
        )),
    );
    m.set_leader(true);
    m.set_in_flight(2);
    for _ in 0..3 {
        m.started();
    }
    m.done();
    m.done();
    m.undrained();
    m.failed();
    m.evicted(3);
    m.evicted(14);
    for (i, kind) in [
        "node_write",
        "lock",
        "lease",
        "not_leader",
        "drain",
        "conflict",
        "client",
        "listen",
    ]
    .into_iter()
    .enumerate()
    {
        for _ in 0..=i {
            m.error(kind);
        }
    }
    // Below the first bucket, on a bucket's bound, past the last; a sum that is no short decimal.
    for (p, s) in [
        (CyclePhase::Drain, 0.5),
        (CyclePhase::Drain, 1.0),
        (CyclePhase::Drain, 42.0),
        (CyclePhase::Reboot, 300.0),
        (CyclePhase::Reboot, 7200.0),
        (CyclePhase::Reboot, 9000.5),
        (CyclePhase::HealthGate, 0.1),
        (CyclePhase::HealthGate, 0.2),
        (CyclePhase::Cycle, 4000.125),
    ] {
        m.phase(p, s);
    }
    m.eviction_refused("budget");
    m.eviction_refused("budget");
    m.eviction_refused("server_error");
    m.eviction_refused("denied");
    for outcome in ["sent", "failed", "timeout", "dropped"] {
        m.notification("ops-slack", "nodeDone", outcome);
    }
    m.notification("ops-slack", "nodeStarted", "sent");
    m.notification("pager \"duty\"\\\nnext", "rolloutHalted", "sent");
    for (phase, outcome) in [
        ("beforeDrain", "allowed"),
        ("beforeDrain", "allowed"),
        ("beforeDrain", "dropped"),
        ("afterDrain", "refused"),
        ("afterDrain", "failed"),
        ("afterReboot", "timeout"),
        ("afterReboot", "error"),
        ("afterReboot", "passed"),
    ] {
        m.hook_result(phase, outcome);
    }
    for outcome in ["created", "created", "failed", "expired", "expire_failed"] {
        m.silence(outcome);
    }
    for (endpoint, outcome) in [
        ("pre-reboot", "ok"),
        ("pre-reboot", "ok"),
        ("pre-reboot", "forwarded"),
        ("pre-reboot", "waiting_window"),
        ("steady-state", "ok"),
        ("unknown", "bad_body"),
    ] {
        m.fleetlock_request(endpoint, outcome);
    }
    m.set_rollout(RolloutGauges {
        nodes_by_state: BTreeMap::from([
            ("waiting", 3),
            ("draining", 1),
            ("rebooting", 1),
            ("done", 4),
            ("failed", 2),
        ]),
        blockers: BTreeMap::from([("lock_held", 1), ("alerts", 2), ("too_many_failures", 1)]),
        node_state_since: BTreeMap::from([
            ("node-1".to_string(), ("draining", 1_767_225_600.0)),
            ("node-2".to_string(), ("rebooting", 1_767_225_612.25)),
            ("node \"3\"\\x".to_string(), ("cordoning", 1_767_225_599.5)),
        ]),
        lock_holder: Some(("ops-team".into(), true)),
        halted: true,
    });
    Scenario {
        name: "leader",
        metrics: m,
        now: at(2026, 1, 1, 0, 0),
    }
}

/// A replica that led and stopped: its counters stay, the rollout's gauges go; no windows
/// configured (always open, no next opening); an identity that needs escaping.
fn standby() -> Scenario {
    let m = Metrics::default();
    m.replica("controller-1 \"b\"\\", config("{}"));
    m.set_leader(true);
    m.set_in_flight(1);
    m.started();
    m.set_rollout(RolloutGauges {
        halted: true,
        lock_holder: Some(("controller-1".into(), false)),
        ..Default::default()
    });
    m.set_leader(false);
    m.error("lease");
    m.fleetlock_request("pre-reboot", "forwarded");
    m.phase(CyclePhase::Cycle, 3600.0);
    Scenario {
        name: "standby",
        metrics: m,
        now: at(2026, 3, 29, 1, 30),
    }
}

/// A replica before its config is loaded: no window gauges, nothing counted yet.
fn starting() -> Scenario {
    Scenario {
        name: "starting",
        metrics: Metrics::default(),
        now: at(2026, 1, 1, 0, 0),
    }
}

/// A leader holding the lock itself, not halted, inside the window (00:30 UTC is 02:30 in
/// Berlin in summer).
fn leader_own_lock() -> Scenario {
    let m = Metrics::default();
    m.replica("controller-2", config(NIGHTLY));
    m.set_leader(true);
    m.set_rollout(RolloutGauges {
        nodes_by_state: BTreeMap::from([("cordoning", 1), ("verifying", 1)]),
        lock_holder: Some(("controller-2".into(), false)),
        ..Default::default()
    });
    Scenario {
        name: "leader-own-lock",
        metrics: m,
        now: at(2026, 7, 1, 0, 30),
    }
}

/// The recording's path for a scenario.
pub(super) fn recording(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/metrics/testdata")
        .join(format!("{name}.prom"))
}
