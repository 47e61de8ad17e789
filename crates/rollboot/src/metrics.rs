//! The controller's Prometheus metrics and its `/metrics`, `/healthz` and `/readyz` endpoints.
//!
//! Owns the counters, gauges and histograms and their text exposition (written by hand: a
//! few families, no registry needed), and the readiness state behind `/readyz`. It must never
//! block the controller: every update is an atomic operation or a short uncontended lock.
//!
//! The rollout's gauges (nodes by state, blockers by kind, per-node state ages, the lock's
//! holder, the halt) are set by the leader on each pass and cleared when it stops leading, so
//! a standby replica exports none of them and dashboards can aggregate with `max`. The window
//! gauges are computed from the config at scrape time, by every replica. The deploy/monitoring
//! dashboard and alerts use only families rendered here (tests/monitoring.rs checks).
//!
//! `/healthz` is liveness: the process answers HTTP. `/readyz` answers 200 only while the
//! replica can act or stand by correctly: its controller loop runs with a loaded config, its
//! Node cache has synced at least once, and its leader elector's last answer from the API
//! server (it tries every retry period, leader or not) is younger than the lease duration.
//! Otherwise 503 with a one-line reason.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::config::Config;
use crate::lease::Leadership;

/// Upper bounds (seconds) of the phase-duration histogram's buckets: a simulated phase takes
/// a second, a real drain minutes, a whole cycle up to an hour or two.
pub const PHASE_BUCKETS: [f64; 12] = [
    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0,
];

/// A timed part of a node's cycle: the `phase` label of `rollboot_phase_duration_seconds`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// From `draining` until the reboot is requested.
    Drain,
    /// From the reboot request until the node is back (new boot ID, Ready).
    Reboot,
    /// From `verifying` until `done`.
    HealthGate,
    /// From the node's start (its lock entry) until `done`.
    Cycle,
}

impl Phase {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Drain => "drain",
            Phase::Reboot => "reboot",
            Phase::HealthGate => "health_gate",
            Phase::Cycle => "cycle",
        }
    }
}

/// One histogram: cumulative counts per bucket of [`PHASE_BUCKETS`], sum and count.
#[derive(Debug, Default, Clone)]
struct Histogram {
    buckets: [u64; PHASE_BUCKETS.len()],
    sum: f64,
    count: u64,
}

/// What the leader saw of the rollout on its last pass.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct RolloutGauges {
    /// Nodes per `rollboot.dev/state`, plus `waiting` for flagged nodes not yet started.
    pub nodes_by_state: BTreeMap<&'static str, u64>,
    /// Active blockers per kind (each kind 0 or more).
    pub blockers: BTreeMap<&'static str, u64>,
    /// For each node in flight: (state, since when, Unix seconds).
    pub node_state_since: BTreeMap<String, (&'static str, f64)>,
    /// The lock's holder and whether it is someone other than this installation.
    pub lock_holder: Option<(String, bool)>,
    /// Failed nodes past `failures.maxFailures`: nothing new starts.
    pub halted: bool,
}

/// Every blocker kind, so each is exported (0 when inactive) once the leader has looked.
pub const BLOCKER_KINDS: [&str; 7] = [
    "window_closed",
    "lock_held",
    "too_many_unready",
    "too_many_failures",
    "blocking_pods",
    "alerts",
    "alerts_unknown",
];

/// The states of `rollboot_nodes`, in order.
pub const NODE_STATES: [&str; 7] = [
    "waiting",
    "cordoning",
    "draining",
    "rebooting",
    "verifying",
    "done",
    "failed",
];

/// Counters and gauges of one controller replica.
#[derive(Debug, Default)]
pub struct Metrics {
    leader: AtomicU64,
    in_flight: AtomicU64,
    started: AtomicU64,
    done: AtomicU64,
    undrained: AtomicU64,
    failed: AtomicU64,
    evicted: AtomicU64,
    errors: Mutex<BTreeMap<&'static str, u64>>,
    identity: Mutex<String>,
    phases: Mutex<BTreeMap<Phase, Histogram>>,
    evictions_refused: Mutex<BTreeMap<&'static str, u64>>,
    notifications: Mutex<BTreeMap<(String, String, String), u64>>,
    hooks: Mutex<BTreeMap<(String, String), u64>>,
    silences: Mutex<BTreeMap<&'static str, u64>>,
    fleetlock: Mutex<BTreeMap<(&'static str, &'static str), u64>>,
    /// The address this replica's FleetLock server is bound to, once bound.
    fleetlock_addr: Mutex<Option<std::net::SocketAddr>>,
    rollout: Mutex<Option<RolloutGauges>>,
    config: Mutex<Option<Arc<Config>>>,
    /// What `/readyz` answers from.
    pub readiness: Readiness,
}

/// Whether the replica is ready, as `/readyz` reports it. Set by the controller loop.
#[derive(Default)]
pub struct Readiness {
    /// The running replica's leadership handle (its elector's API contact) and lease duration.
    replica: Mutex<Option<(Leadership, Duration)>>,
    nodes_synced: AtomicBool,
}

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Readiness")
            .field("ready", &self.check())
            .finish()
    }
}

impl Readiness {
    /// A controller replica started with a loaded config: readiness now follows its elector.
    /// Its Node cache starts unsynced (a config reload starts a new replica and a new cache).
    pub fn replica_started(&self, leadership: Leadership, lease_duration: Duration) {
        self.nodes_synced.store(false, Ordering::Relaxed);
        *self.replica.lock().expect("readiness") = Some((leadership, lease_duration));
    }

    /// The Node cache received its initial list.
    pub fn nodes_synced(&self) {
        self.nodes_synced.store(true, Ordering::Relaxed);
    }

    /// `Ok` when ready, else why not.
    pub fn check(&self) -> Result<(), String> {
        let (contact, lease_duration) = match &*self.replica.lock().expect("readiness") {
            Some((l, d)) => (l.contact(), *d),
            None => return Err("controller not started: no config loaded yet".into()),
        };
        let error = contact
            .last_error
            .map(|e| format!(": {e}"))
            .unwrap_or_default();
        match contact.last_answer {
            None => return Err(format!("no answer from the API server yet{error}")),
            Some(t) if t.elapsed() > lease_duration => {
                return Err(format!(
                    "no answer from the API server for {}s (lease duration {}s){error}",
                    t.elapsed().as_secs(),
                    lease_duration.as_secs_f64()
                ))
            }
            Some(_) => {}
        }
        if !self.nodes_synced.load(Ordering::Relaxed) {
            return Err("node cache not synced yet".into());
        }
        Ok(())
    }
}

impl Metrics {
    /// Whether this replica leads. A replica that stops leading stops exporting the rollout's
    /// gauges (they would go stale).
    pub fn set_leader(&self, l: bool) {
        self.leader.store(l as u64, Ordering::Relaxed);
        if !l {
            *self.rollout.lock().expect("metrics") = None;
        }
    }
    /// The replica's identity (the `identity` label of `rollboot_leader_info`) and its config
    /// (the window gauges are computed from its schedule at each scrape).
    pub fn replica(&self, identity: &str, config: Arc<Config>) {
        *self.identity.lock().expect("metrics") = identity.to_string();
        *self.config.lock().expect("metrics") = Some(config);
    }
    /// A phase of a node's cycle ended after `seconds`.
    pub fn phase(&self, phase: Phase, seconds: f64) {
        let mut all = self.phases.lock().expect("metrics");
        let h = all.entry(phase).or_default();
        for (i, le) in PHASE_BUCKETS.iter().enumerate() {
            if seconds <= *le {
                h.buckets[i] += 1;
            }
        }
        h.sum += seconds;
        h.count += 1;
    }
    /// An eviction refused: `budget` (429, a PodDisruptionBudget allows no disruption now) or
    /// `server_error` (5xx: usually more than one budget covers the pod).
    pub fn eviction_refused(&self, reason: &'static str) {
        *self
            .evictions_refused
            .lock()
            .expect("metrics")
            .entry(reason)
            .or_default() += 1;
    }
    /// A notification's outcome (`sent`, `failed`, `timeout`, `dropped`) for one sink.
    pub fn notification(&self, sink: &str, event: &str, outcome: &str) {
        *self
            .notifications
            .lock()
            .expect("metrics")
            .entry((sink.into(), event.into(), outcome.into()))
            .or_default() += 1;
    }
    /// A hook's outcome at a phase (the hooks runtime calls this; labels are its own words).
    pub fn hook_result(&self, phase: &str, outcome: &str) {
        *self
            .hooks
            .lock()
            .expect("metrics")
            .entry((phase.into(), outcome.into()))
            .or_default() += 1;
    }
    /// An Alertmanager silence's fate: `created`, `failed`, `expired`, `expire_failed`.
    pub fn silence(&self, outcome: &'static str) {
        *self
            .silences
            .lock()
            .expect("metrics")
            .entry(outcome)
            .or_default() += 1;
    }
    /// A FleetLock request answered: its endpoint (`pre-reboot`, `steady-state`, `unknown`)
    /// and outcome (`ok`, or the answer's kind; `forwarded` when another replica answered).
    pub fn fleetlock_request(&self, endpoint: &'static str, outcome: &'static str) {
        *self
            .fleetlock
            .lock()
            .expect("metrics")
            .entry((endpoint, outcome))
            .or_default() += 1;
    }
    /// Records where this replica's FleetLock server listens.
    pub fn set_fleetlock_addr(&self, addr: Option<std::net::SocketAddr>) {
        *self.fleetlock_addr.lock().expect("metrics") = addr;
    }
    /// Where this replica's FleetLock server listens, once bound.
    pub fn fleetlock_addr(&self) -> Option<std::net::SocketAddr> {
        *self.fleetlock_addr.lock().expect("metrics")
    }
    /// The rollout as the leader saw it on its last pass.
    pub fn set_rollout(&self, g: RolloutGauges) {
        *self.rollout.lock().expect("metrics") = Some(g);
    }
    /// The rollout gauges last set, while leading.
    pub fn rollout(&self) -> Option<RolloutGauges> {
        self.rollout.lock().expect("metrics").clone()
    }
    /// Nodes in the lock.
    pub fn set_in_flight(&self, n: usize) {
        self.in_flight.store(n as u64, Ordering::Relaxed);
    }
    /// A node started.
    pub fn started(&self) {
        self.started.fetch_add(1, Ordering::Relaxed);
    }
    /// A node finished.
    pub fn done(&self) {
        self.done.fetch_add(1, Ordering::Relaxed);
    }
    /// A finished cycle was a shutdown of its host that went before its drain was over.
    pub fn undrained(&self) {
        self.undrained.fetch_add(1, Ordering::Relaxed);
    }
    /// A node failed.
    pub fn failed(&self) {
        self.failed.fetch_add(1, Ordering::Relaxed);
    }
    /// Pods evicted.
    pub fn evicted(&self, n: usize) {
        self.evicted.fetch_add(n as u64, Ordering::Relaxed);
    }
    /// An error, by label.
    pub fn error(&self, label: &'static str) {
        *self
            .errors
            .lock()
            .expect("metrics")
            .entry(label)
            .or_default() += 1;
    }
    /// Whether this replica leads, as last published.
    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::Relaxed) == 1
    }

    /// Nodes finished so far.
    pub fn done_count(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        self.render_at(chrono::Utc::now())
    }

    /// The text exposition with the window gauges computed at `now`.
    pub(crate) fn render_at(&self, now: chrono::DateTime<chrono::Utc>) -> String {
        let mut s = String::new();
        let g = |s: &mut String, name: &str, help: &str, kind: &str, v: u64| {
            let _ = writeln!(
                s,
                "# HELP rollboot_{name} {help}\n# TYPE rollboot_{name} {kind}\nrollboot_{name} {v}"
            );
        };
        g(
            &mut s,
            "leader",
            "1 while this replica leads",
            "gauge",
            self.leader.load(Ordering::Relaxed),
        );
        g(
            &mut s,
            "nodes_in_flight",
            "Nodes in the maintenance lock",
            "gauge",
            self.in_flight.load(Ordering::Relaxed),
        );
        g(
            &mut s,
            "nodes_started_total",
            "Reboot cycles started",
            "counter",
            self.started.load(Ordering::Relaxed),
        );
        g(
            &mut s,
            "nodes_done_total",
            "Reboot cycles finished",
            "counter",
            self.done.load(Ordering::Relaxed),
        );
        g(
            &mut s,
            "shutdowns_undrained_total",
            "Finished cycles whose host shut down by itself before the drain was over (the pods went down with it, budgets not kept)",
            "counter",
            self.undrained.load(Ordering::Relaxed),
        );
        g(
            &mut s,
            "nodes_failed_total",
            "Reboot cycles failed",
            "counter",
            self.failed.load(Ordering::Relaxed),
        );
        g(
            &mut s,
            "pods_evicted_total",
            "Pods evicted",
            "counter",
            self.evicted.load(Ordering::Relaxed),
        );
        let _ = writeln!(
            s,
            "# HELP rollboot_errors_total Errors by kind\n# TYPE rollboot_errors_total counter"
        );
        for (k, v) in self.errors.lock().expect("metrics").iter() {
            let _ = writeln!(s, "rollboot_errors_total{{kind=\"{k}\"}} {v}");
        }
        self.render_more(&mut s, now);
        s
    }

    /// The families after the plain counters, section by section.
    fn render_more(&self, s: &mut String, now: chrono::DateTime<chrono::Utc>) {
        self.render_leader_and_phases(s);
        self.render_labelled(s);
        let config = self.config.lock().expect("metrics").clone();
        if let Some(c) = config {
            render_config(s, &c, now);
        }
        self.render_rollout(s);
    }

    /// `rollboot_leader_info` and the phase-duration histogram.
    fn render_leader_and_phases(&self, s: &mut String) {
        head(
            s,
            "leader_info",
            "1 while the replica with this identity leads, else 0",
            "gauge",
        );
        let _ = writeln!(
            s,
            "rollboot_leader_info{{identity=\"{}\"}} {}",
            escape(&self.identity.lock().expect("metrics")),
            self.leader.load(Ordering::Relaxed)
        );
        head(
            s,
            "phase_duration_seconds",
            "Duration of completed phases of reboot cycles (drain, reboot, health_gate, cycle)",
            "histogram",
        );
        for (phase, h) in self.phases.lock().expect("metrics").iter() {
            let p = phase.as_str();
            for (le, n) in PHASE_BUCKETS.iter().zip(h.buckets) {
                let _ = writeln!(
                    s,
                    "rollboot_phase_duration_seconds_bucket{{phase=\"{p}\",le=\"{le}\"}} {n}"
                );
            }
            let _ = writeln!(
                s,
                "rollboot_phase_duration_seconds_bucket{{phase=\"{p}\",le=\"+Inf\"}} {}\n\
                 rollboot_phase_duration_seconds_sum{{phase=\"{p}\"}} {}\n\
                 rollboot_phase_duration_seconds_count{{phase=\"{p}\"}} {}",
                h.count, h.sum, h.count
            );
        }
    }

    /// The counters by label: refused evictions, notifications, hook results.
    fn render_labelled(&self, s: &mut String) {
        head(
            s,
            "evictions_refused_total",
            "Evictions refused: budget (429, a PodDisruptionBudget allows none now), server_error (5xx, usually overlapping budgets), denied (400/403/422, an admission webhook or policy, or RBAC)",
            "counter",
        );
        for (r, v) in self.evictions_refused.lock().expect("metrics").iter() {
            let _ = writeln!(s, "rollboot_evictions_refused_total{{reason=\"{r}\"}} {v}");
        }
        head(
            s,
            "notifications_total",
            "Notifications by sink, event and outcome (sent, failed, timeout, dropped)",
            "counter",
        );
        for ((sink, event, outcome), v) in self.notifications.lock().expect("metrics").iter() {
            let _ = writeln!(
                s,
                "rollboot_notifications_total{{sink=\"{}\",event=\"{}\",outcome=\"{}\"}} {v}",
                escape(sink),
                escape(event),
                escape(outcome)
            );
        }
        head(
            s,
            "hook_results_total",
            "Hook calls and checks by phase and outcome",
            "counter",
        );
        for ((phase, outcome), v) in self.hooks.lock().expect("metrics").iter() {
            let _ = writeln!(
                s,
                "rollboot_hook_results_total{{phase=\"{}\",outcome=\"{}\"}} {v}",
                escape(phase),
                escape(outcome)
            );
        }
        head(
            s,
            "silences_total",
            "Alertmanager silences of nodes in maintenance, by outcome (created, failed, expired, expire_failed)",
            "counter",
        );
        for (outcome, v) in self.silences.lock().expect("metrics").iter() {
            let _ = writeln!(s, "rollboot_silences_total{{outcome=\"{outcome}\"}} {v}");
        }
        head(
            s,
            "fleetlock_requests_total",
            "FleetLock requests answered by this replica, by endpoint and outcome (ok, the answer's kind, or forwarded)",
            "counter",
        );
        for ((endpoint, outcome), v) in self.fleetlock.lock().expect("metrics").iter() {
            let _ = writeln!(
                s,
                "rollboot_fleetlock_requests_total{{endpoint=\"{endpoint}\",outcome=\"{outcome}\"}} {v}"
            );
        }
    }

    /// The rollout's gauges: their headers always, their samples only while this replica
    /// leads (the leader sets them; see the module doc).
    fn render_rollout(&self, s: &mut String) {
        let rollout = self.rollout.lock().expect("metrics").clone();
        head(
            s,
            "nodes",
            "Nodes by rollboot state (waiting: flagged, not started); exported by the leader",
            "gauge",
        );
        head(
            s,
            "blockers_active",
            "Active blockers of new reboots by kind; exported by the leader",
            "gauge",
        );
        head(
            s,
            "node_state_since_timestamp_seconds",
            "Unix time each node in flight entered its state; exported by the leader",
            "gauge",
        );
        head(
            s,
            "lock_holder_info",
            "1 for the maintenance lock's holder; foreign=\"true\" when it is not this rollboot; exported by the leader",
            "gauge",
        );
        head(
            s,
            "rollout_halted",
            "1 while failed nodes exceed failures.maxFailures; exported by the leader",
            "gauge",
        );
        let Some(r) = rollout else {
            return;
        };
        for state in NODE_STATES {
            let v = r.nodes_by_state.get(state).copied().unwrap_or(0);
            let _ = writeln!(s, "rollboot_nodes{{state=\"{state}\"}} {v}");
        }
        for kind in BLOCKER_KINDS {
            let v = r.blockers.get(kind).copied().unwrap_or(0);
            let _ = writeln!(s, "rollboot_blockers_active{{kind=\"{kind}\"}} {v}");
        }
        for (node, (state, since)) in &r.node_state_since {
            let _ = writeln!(
                s,
                "rollboot_node_state_since_timestamp_seconds{{node=\"{}\",state=\"{state}\"}} {since}",
                escape(node)
            );
        }
        if let Some((holder, foreign)) = &r.lock_holder {
            let _ = writeln!(
                s,
                "rollboot_lock_holder_info{{holder=\"{}\",foreign=\"{foreign}\"}} 1",
                escape(holder)
            );
        }
        let _ = writeln!(s, "rollboot_rollout_halted {}", u8::from(r.halted));
    }
}

/// A family's `# HELP` and `# TYPE` lines.
fn head(s: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(
        s,
        "# HELP rollboot_{name} {help}\n# TYPE rollboot_{name} {kind}"
    );
}

/// The gauges computed from the config at scrape time: the window, the next opening, the
/// states' timeouts, `failures.maxFailures`.
fn render_config(s: &mut String, c: &Config, now: chrono::DateTime<chrono::Utc>) {
    let schedule = c.schedule();
    head(
        s,
        "window_open",
        "1 while new reboots may start by the schedule (a window open, no blackout)",
        "gauge",
    );
    let _ = writeln!(
        s,
        "rollboot_window_open {}",
        u8::from(schedule.is_allowed(now))
    );
    head(
        s,
        "window_next_opening_timestamp_seconds",
        "Unix time of the next window opening after now (absent when none is scheduled)",
        "gauge",
    );
    if let Some(o) = schedule.next_opening(now) {
        let _ = writeln!(
            s,
            "rollboot_window_next_opening_timestamp_seconds {}",
            o.start.timestamp()
        );
    }
    head(
        s,
        "state_timeout_seconds",
        "The longest a node may stay in each state before the controller fails it: the state's own timeout plus those of the hooks that hold the node in it",
        "gauge",
    );
    for (state, secs) in state_timeouts(c) {
        let _ = writeln!(
            s,
            "rollboot_state_timeout_seconds{{state=\"{state}\"}} {secs}"
        );
    }
    head(
        s,
        "max_failures",
        "failures.maxFailures: failed nodes tolerated before the rollout halts",
        "gauge",
    );
    let _ = writeln!(s, "rollboot_max_failures {}", c.failures.max_failures);
}

/// The longest a node may stay in each state, in seconds, before the controller fails it:
/// `cordoning` its beforeDrain hooks (0 without: a cordon takes seconds); `draining` the drain
/// and then its afterDrain hooks and `drain.settle` (the state stays `draining` through them);
/// `rebooting` the reboot; `verifying` its afterReboot hooks and the health gate. The stuck
/// alert (deploy/monitoring) fires past these: a node a hook holds is not stuck until its hook's
/// timeout, and a node held past it is.
pub fn state_timeouts(c: &Config) -> [(&'static str, f64); 4] {
    use crate::config::Phase;
    let hooks = |phase: Phase| {
        let h = c.hooks.phase(phase);
        if h.configured() {
            h.timeout.as_millis()
        } else {
            0
        }
    };
    let settle = c.drain.settle.map_or(0, |d| d.as_millis());
    let secs = |ms: i64| ms as f64 / 1000.0;
    [
        ("cordoning", secs(hooks(Phase::BeforeDrain))),
        (
            "draining",
            secs(c.drain.timeout.as_millis() + hooks(Phase::AfterDrain) + settle),
        ),
        ("rebooting", secs(c.reboot.timeout.as_millis())),
        (
            "verifying",
            secs(hooks(Phase::AfterReboot) + c.health_gate.timeout.as_millis()),
        ),
    ]
}

/// A label value in the text exposition: backslash, double quote and newline escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Serves `/metrics`, `/healthz` and `/readyz` on a bound listener until the process ends (the
/// caller binds, so that an address in use is a start-up error it reports), within
/// [`crate::serve::Limits::default`].
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
) -> std::io::Result<()> {
    use axum::http::StatusCode;
    use axum::routing::get;
    let ready = metrics.clone();
    let app = axum::Router::new()
        .route("/metrics", get(move || async move { metrics.render() }))
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || async move {
                match ready.readiness.check() {
                    Ok(()) => (StatusCode::OK, "ok".to_string()),
                    Err(why) => (
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!("not ready: {why}\n"),
                    ),
                }
            }),
        );
    crate::serve::serve(listener, app, crate::serve::Limits::default()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    mod scenarios;

    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    }

    #[test]
    fn a_phase_lands_in_every_bucket_at_or_above_it_with_sum_and_count() {
        let m = Metrics::default();
        m.phase(Phase::Drain, 42.0);
        m.phase(Phase::Drain, 0.5);
        let t = m.render();
        let b = |le: &str| {
            sample(
                &t,
                &format!("rollboot_phase_duration_seconds_bucket{{phase=\"drain\",le=\"{le}\"}}"),
            )
        };
        assert_eq!(b("1"), Some(1.0));
        assert_eq!(b("30"), Some(1.0));
        assert_eq!(b("60"), Some(2.0));
        assert_eq!(b("+Inf"), Some(2.0));
        assert_eq!(
            sample(&t, "rollboot_phase_duration_seconds_sum{phase=\"drain\"}"),
            Some(42.5)
        );
        assert_eq!(
            sample(&t, "rollboot_phase_duration_seconds_count{phase=\"drain\"}"),
            Some(2.0)
        );
        assert!(
            !t.contains("phase=\"reboot\""),
            "no series for a phase never seen"
        );
    }

    #[test]
    fn a_replica_that_stops_leading_stops_exporting_the_rollout_and_labels_are_escaped() {
        let m = Metrics::default();
        m.set_leader(true);
        m.set_rollout(RolloutGauges {
            lock_holder: Some(("ops \"team\"\\x".into(), true)),
            halted: true,
            ..Default::default()
        });
        let t = m.render();
        assert_eq!(sample(&t, "rollboot_rollout_halted"), Some(1.0));
        assert_eq!(
            sample(&t, "rollboot_blockers_active{kind=\"lock_held\"}"),
            Some(0.0)
        );
        assert!(
            t.contains(r#"rollboot_lock_holder_info{holder="ops \"team\"\\x",foreign="true"} 1"#),
            "{t}"
        );
        m.set_leader(false);
        let t = m.render();
        assert_eq!(sample(&t, "rollboot_rollout_halted"), None);
        assert!(!t.contains("rollboot_lock_holder_info{"));
    }

    #[test]
    fn a_state_s_timeout_counts_the_hooks_that_hold_the_node_in_it() {
        let c = crate::config::parse_str(
            "drain: {timeout: 10m, settle: 30s}\nhooks: {beforeDrain: {gates: [a.example.com/ok], timeout: 20m}, afterReboot: {gates: [a.example.com/ok], timeout: 5m}}",
        )
        .unwrap();
        assert_eq!(
            state_timeouts(&c),
            [
                ("cordoning", 1200.0),
                ("draining", 630.0),
                ("rebooting", 900.0),
                ("verifying", 900.0),
            ]
        );
        let plain = crate::config::parse_str("{}").unwrap();
        assert_eq!(state_timeouts(&plain)[0], ("cordoning", 0.0));
    }

    #[tokio::test]
    async fn the_controllers_metrics_server_is_served_within_bounds() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve_on(listener, Arc::new(Metrics::default())));
        let answer = crate::serve::test_client::answer(
            addr,
            b"GET /metrics HTTP/1.1\r\nhost: a\r\ncontent-length: 100000\r\nconnection: close\r\n\r\n",
        )
        .await;
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    }
}
