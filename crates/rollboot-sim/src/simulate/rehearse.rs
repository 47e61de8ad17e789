//! Rehearsing the user's own config (and, with a snapshot, the user's own cluster) in the
//! simulator: the config's durations scaled by the scenario's time factor, and the rehearsal's
//! part of the report (what was scaled, what was ignored, the makespan in real time, the nodes
//! that would fail and why, how long each budget held a drain).
//!
//! Owns [`scale_config`] (pure: a config in, the config a rehearsal runs and the list of what
//! changed out) and [`Rehearsal`]. It must never change what the user's config decides (drain
//! rules, concurrency, order, failures): only how long things take, in proportion, and the
//! windows and blackouts, which the controller reads on the wall clock and a rehearsal cannot
//! honour on the simulated one (they are dropped and named in the report).

use std::collections::BTreeMap;

use serde::Serialize;

use rollboot::config::{Config, Duration};

/// Why a rehearsal cannot run with a config.
#[derive(Debug, thiserror::Error)]
pub enum RehearseError {
    /// The time factor is not a positive number.
    #[error("time factor {0} must be a positive number (real seconds per simulated second)")]
    TimeFactor(f64),
    /// The scaled config no longer validates (a bug of the scaling, named).
    #[error("the config with its durations scaled by {factor} does not validate: {problems}")]
    Invalid {
        /// The factor applied.
        factor: f64,
        /// The validator's problems, one per line.
        problems: String,
    },
    /// The config does not serialize (a bug).
    #[error("the config cannot be written back to YAML: {0}")]
    Serialize(String),
}

/// A duration setting of the config and the smallest value a rehearsal runs it with, and why.
struct Floor {
    key: &'static str,
    floor: Duration,
    why: &'static str,
}

/// Every duration of the config that a rehearsal scales, with its floor. Each key is a JSON
/// path of the config as serialized (camelCase); `drain.gracePeriod` is not here on purpose
/// (see [`KEPT_AS_WRITTEN`]).
const SCALED: &[Floor] = &[
    Floor {
        key: "leader.leaseDuration",
        floor: Duration::from_secs(3),
        why: "leader election renews over HTTP in a process shared with the simulated API server and every agent: below 3 s / 2 s / 500 ms a busy moment deposes the leader and the run measures failovers, not the rollout",
    },
    Floor {
        key: "leader.renewDeadline",
        floor: Duration::from_secs(2),
        why: "as leader.leaseDuration",
    },
    Floor {
        key: "leader.retryPeriod",
        floor: Duration::from_millis(500),
        why: "as leader.leaseDuration",
    },
    Floor {
        key: "drain.settle",
        floor: Duration::from_millis(1),
        why: "",
    },
    Floor {
        key: "reboot.timeout",
        floor: Duration::from_millis(1),
        why: "",
    },
    Floor {
        key: "reboot.readyWithoutRebootFor",
        floor: Duration::from_millis(1),
        why: "",
    },
    Floor {
        key: "reboot.checkPeriod",
        floor: Duration::from_millis(100),
        why: "every agent polls its simulated sentinel on this period; below 100 ms thousands of agents poll the one process's CPU away",
    },
    Floor {
        key: "drain.timeout",
        floor: Duration::from_millis(1),
        why: "",
    },
    Floor {
        key: "drain.stuckAfter",
        floor: Duration::from_millis(1),
        why: "",
    },
    Floor {
        key: "drain.evictionRetryInterval",
        floor: Duration::from_millis(20),
        why: "each pod a budget holds is asked again on this period; below 20 ms the retries of a blocked drain crowd out the rest",
    },
    Floor {
        key: "healthGate.timeout",
        floor: Duration::from_millis(1),
        why: "",
    },
    Floor {
        key: "concurrency.passOverFor",
        floor: Duration::from_millis(1),
        why: "",
    },
    Floor {
        key: "drain.volumes.detachTimeout",
        floor: Duration::from_millis(1),
        why: "",
    },
    Floor {
        key: "drain.volumes.reattachTimeout",
        floor: Duration::from_millis(1),
        why: "",
    },
];

/// Duration settings kept as written, and why.
const KEPT_AS_WRITTEN: &[(&str, &str)] = &[(
    "drain.gracePeriod",
    "sent to the API as the pods' grace period, which the simulated kubelets already run on the simulated clock",
)];

/// One duration setting as written and as the rehearsal runs it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaledSetting {
    /// Config key (`drain.timeout`).
    pub key: String,
    /// As written in the config (or its default).
    pub as_written: String,
    /// As the rehearsal runs it (real time).
    pub as_run: String,
    /// When the floor applied instead of the product: why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floor: Option<String>,
}

/// What a rehearsal did to the user's config.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigScaling {
    /// Real seconds per simulated second.
    pub time_factor: f64,
    /// Every duration setting, as written and as run.
    pub scaled: Vec<ScaledSetting>,
    /// Duration settings kept as written: `key: why`.
    pub kept: Vec<String>,
    /// Settings the rehearsal does not honour, with what they said.
    pub ignored: Vec<String>,
}

/// `d` times `factor`, to the millisecond, never below `floor` nor 1 ms.
fn scale(d: Duration, factor: f64, floor: Duration) -> (Duration, bool) {
    // 0 turns a setting off (`concurrency.passOverFor: 0s`): it stays off.
    if d.as_millis() == 0 {
        return (d, false);
    }
    let product = Duration::from_millis(((d.as_millis() as f64) * factor).round() as i64);
    let floor = floor.max(Duration::from_millis(1));
    if product < floor {
        (floor, true)
    } else {
        (product, false)
    }
}

/// The config a rehearsal runs: every duration of `config` times `time_factor` (with the
/// floors of [`SCALED`]), windows and blackouts dropped (the controller reads the wall clock;
/// the rehearsal starts at once, as inside a window), everything else as written. Pure.
pub fn scale_config(
    config: &Config,
    time_factor: f64,
) -> Result<(Config, ConfigScaling), RehearseError> {
    scale_config_calling(config, time_factor, false)
}

/// [`scale_config`], but with `call_hooks` (`simulate --call-hooks`) the hooks' webhooks and
/// gates and the notification sinks are kept: a served rollout calls them, so that an operator
/// can try a receiver against a simulated rollout (Alertmanager silences stay dropped).
pub fn scale_config_calling(
    config: &Config,
    time_factor: f64,
    call_hooks: bool,
) -> Result<(Config, ConfigScaling), RehearseError> {
    if !(time_factor.is_finite() && time_factor > 0.0) {
        return Err(RehearseError::TimeFactor(time_factor));
    }
    let mut v =
        serde_json::to_value(config).map_err(|e| RehearseError::Serialize(e.to_string()))?;
    let mut scaled = Vec::new();
    for f in SCALED {
        let pointer = format!("/{}", f.key.replace('.', "/"));
        let Some(slot) = v.pointer_mut(&pointer) else {
            continue;
        };
        let Some(written) = slot.as_str().and_then(|s| s.parse::<Duration>().ok()) else {
            continue;
        };
        let (run, floored) = scale(written, time_factor, f.floor);
        *slot = serde_json::Value::String(run.to_string());
        scaled.push(ScaledSetting {
            key: f.key.into(),
            as_written: written.to_string(),
            as_run: run.to_string(),
            floor: (floored && !f.why.is_empty()).then(|| format!("floor {}: {}", f.floor, f.why)),
        });
    }
    let mut kept = Vec::new();
    for (key, why) in KEPT_AS_WRITTEN {
        let pointer = format!("/{}", key.replace('.', "/"));
        if let Some(s) = v.pointer(&pointer).and_then(|s| s.as_str()) {
            kept.push(format!("{key} {s}: {why}"));
        }
    }
    let mut ignored = Vec::new();
    if let Some(obj) = v.as_object_mut() {
        if let Some(w) = obj.remove("windows") {
            let list: Vec<String> = w
                .as_array()
                .into_iter()
                .flatten()
                .map(|w| {
                    format!(
                        "`{}` for {} ({})",
                        w["schedule"].as_str().unwrap_or(""),
                        w["duration"].as_str().unwrap_or(""),
                        w["timezone"].as_str().unwrap_or("UTC")
                    )
                })
                .collect();
            ignored.push(format!(
                "windows ({}): the controller reads the wall clock, so the rehearsal starts at once as if inside a window; `rollboot plan` computes the openings",
                list.join(", ")
            ));
        }
        // A rehearsal must never post to the operator's real Slack, Teams or webhook: every
        // sink is dropped (with its durations, which then govern nothing), unless asked to.
        if let Some(n) = (!call_hooks).then(|| obj.remove("notifications")).flatten() {
            let sinks: Vec<String> = n["sinks"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|s| {
                    format!(
                        "{} ({})",
                        s["name"].as_str().unwrap_or(""),
                        s["type"].as_str().unwrap_or("")
                    )
                })
                .collect();
            if !sinks.is_empty() {
                ignored.push(format!(
                    "notifications (sinks {}): a rehearsal sends none",
                    sinks.join(", ")
                ));
            }
        }
        // Nor silence the operator's real alerts, nor wait on their Alertmanager.
        if let Some(sil) = obj.remove("silences") {
            if let Some(url) = sil["alertmanager"]["url"].as_str() {
                ignored.push(format!(
                    "silences.alertmanager ({url}): a rehearsal creates no silence"
                ));
            }
        }
        if let Some(am) = obj
            .get_mut("blockers")
            .and_then(|b| b.as_object_mut())
            .and_then(|b| b.remove("alertmanager"))
        {
            ignored.push(format!(
                "blockers.alertmanager ({}): a rehearsal asks no Alertmanager",
                am["url"].as_str().unwrap_or("")
            ));
        }
        // Nor call its webhooks (a change ticket opened by a rehearsal), nor wait on gate
        // annotations no other controller sets here (every node would fail at the phase's
        // timeout). Labels and taints are kept: the simulated cluster stores them as a real one.
        if let Some(hooks) = obj
            .get_mut("hooks")
            .and_then(|h| h.as_object_mut())
            .filter(|_| !call_hooks)
        {
            let mut dropped = Vec::new();
            for (phase, h) in hooks.iter_mut() {
                let Some(h) = h.as_object_mut() else { continue };
                for w in h
                    .remove("webhooks")
                    .and_then(|w| w.as_array().cloned())
                    .unwrap_or_default()
                {
                    dropped.push(format!(
                        "webhook {} at {phase}",
                        w["name"].as_str().unwrap_or("")
                    ));
                }
                for g in h
                    .remove("gates")
                    .and_then(|g| g.as_array().cloned())
                    .unwrap_or_default()
                {
                    dropped.push(format!("gate {} at {phase}", g.as_str().unwrap_or("")));
                }
            }
            if !dropped.is_empty() {
                ignored.push(format!(
                    "hooks ({}): a rehearsal calls no webhook and waits on no gate annotation",
                    dropped.join(", ")
                ));
            }
        }
        let blackouts = obj.remove("blackouts");
        if let Some(list) = blackouts.as_ref().and_then(|b| b.as_array()) {
            if !list.is_empty() {
                let spans: Vec<String> = list
                    .iter()
                    .map(|b| {
                        format!(
                            "{} to {}",
                            b["from"].as_str().unwrap_or(""),
                            b["to"].as_str().unwrap_or("")
                        )
                    })
                    .collect();
                ignored.push(format!(
                    "blackouts ({}): read on the wall clock, as windows",
                    spans.join(", ")
                ));
            }
        }
    }
    let yaml = yaml_serde::to_string(&v).map_err(|e| RehearseError::Serialize(e.to_string()))?;
    let run = rollboot::config::parse_str(&yaml).map_err(|problems| RehearseError::Invalid {
        factor: time_factor,
        problems: problems
            .iter()
            .map(|p| format!("{p:?}"))
            .collect::<Vec<_>>()
            .join("\n"),
    })?;
    Ok((
        run,
        ConfigScaling {
            time_factor,
            scaled,
            kept,
            ignored,
        },
    ))
}

/// What the operator said about the timings of a rehearsal's simulated world.
#[derive(Clone, Copy, Debug, Default)]
pub struct Given {
    /// A `--scenario` file gave every timing (as written, or its defaults).
    pub scenario: bool,
    /// `--reboot-time`, simulated seconds.
    pub reboot_time: Option<f64>,
    /// `--time-factor`.
    pub time_factor: Option<f64>,
}

/// One timing of a rehearsal's simulated world, and where it came from.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorldTiming {
    /// The scenario key (`rebootTime`, `podExitSeconds`, `startDelay`, `timeFactor`).
    pub key: String,
    /// Its value: seconds of the cluster's (simulated) time, or the time factor.
    pub value: Option<f64>,
    /// Where it came from.
    pub source: String,
}

/// The coarsest and finest time factors a rehearsal picks by itself: finer runs every step
/// closer to its real timing (the work of the controller, the agents and the simulator is not
/// slowed down with the world, so at 0.01 each millisecond of it reads as 100 ms of the
/// cluster's time: on the real control plane of the end-to-end suite, a rehearsal of five
/// nodes predicted +17% at 0.01 and +3% at 0.1 with a release build, +18% at 0.1 with a debug
/// build), coarser finishes a long rollout sooner.
pub const TIME_FACTOR_RANGE: (f64, f64) = (0.01, 0.25);
/// How long a rehearsal should take, at most, when it picks its own time factor (seconds).
pub const REHEARSAL_TARGET_SECONDS: f64 = 120.0;

/// The simulated world's timings for a rehearsal of `snap`: what the operator gave, else what
/// the cluster measured (the nodes' last cycles as rollboot recorded them: reboot and pod exit
/// times; the pods' own start times), else `base`'s; and the time factor, picked so that the
/// rehearsal of `flagged` nodes under `config` takes about [`REHEARSAL_TARGET_SECONDS`]
/// within [`TIME_FACTOR_RANGE`] unless given. Pure.
pub fn world_timings(
    snap: &crate::sim::snapshot::Snapshot,
    base: &crate::sim::Scenario,
    given: Given,
    config: &Config,
    flagged: usize,
) -> (crate::sim::Scenario, Vec<WorldTiming>) {
    let mut sc = base.clone();
    let cycles: Vec<&crate::sim::snapshot::SnapCycle> = snap
        .nodes
        .iter()
        .filter_map(|n| n.last_cycle.as_ref())
        .collect();
    let median_of = |part: fn(&crate::sim::snapshot::SnapCycle) -> Option<f64>| {
        let mut v: Vec<f64> = cycles.iter().filter_map(|c| part(c)).collect();
        let n = v.len();
        rollboot::time::median(&mut v).map(|m| (m, n))
    };
    let timing = |key: &str, value: Option<f64>, source: String| WorldTiming {
        key: key.into(),
        value,
        source,
    };
    let from_file = "the --scenario file";
    let mut out = Vec::new();

    let reboot = match (
        given.reboot_time,
        given.scenario,
        median_of(|c| c.reboot_seconds),
    ) {
        (Some(r), _, _) => {
            sc.reboot_time = r;
            "--reboot-time".to_string()
        }
        (None, true, _) => from_file.to_string(),
        (None, false, Some((m, n))) => {
            // The measured figure runs from the request until the node was back; the world
            // adds its reboot delay and the node-lifecycle controller's taint removal to the
            // reboot time itself.
            let added = sc.reboot_delay + sc.taint_removal_delay;
            sc.reboot_time = millis((m - added).max(0.0));
            format!(
                "measured: the median of {n} node(s)' last cycles, {m:.1} s from the reboot request until the node was back, less the {added:.1} s of rebootDelay and taintRemovalDelay the simulated world adds"
            )
        }
        (None, false, None) => format!(
            "the default {} s (no node's last cycle was recorded; --reboot-time sets it)",
            sc.reboot_time
        ),
    };
    out.push(timing("rebootTime", Some(sc.reboot_time), reboot));

    let exit = match (given.scenario, median_of(|c| c.pod_exit_seconds)) {
        (true, _) => from_file.to_string(),
        (false, Some((m, n))) => {
            sc.pod_exit_seconds = Some(millis(m));
            format!(
                "measured: the median of {n} node(s)' last drains, from each accepted eviction until the pod was gone (a pod with a shorter grace period goes at its end)"
            )
        }
        (false, None) => {
            "none measured: every pod takes its whole grace period, the longest a drain waits"
                .to_string()
        }
    };
    out.push(timing("podExitSeconds", sc.pod_exit_seconds, exit));

    let mut ready: Vec<f64> = snap.pods.iter().filter_map(|p| p.ready_seconds).collect();
    let ready_pods = ready.len();
    let start = match (given.scenario, rollboot::time::median(&mut ready)) {
        (true, _) => from_file.to_string(),
        (false, Some(m)) => {
            sc.start_delay = millis(m);
            format!(
                "measured: the median of {ready_pods} pod(s) created during the nodes' last cycles (replacements their drains caused), from creation until Ready"
            )
        }
        (false, None) => format!(
            "the default {} s (no pod's start could be measured)",
            sc.start_delay
        ),
    };
    out.push(timing("startDelay", Some(sc.start_delay), start));

    let factor = match (given.time_factor, given.scenario) {
        (Some(f), _) => {
            sc.time_factor = f;
            "--time-factor".to_string()
        }
        (None, true) => from_file.to_string(),
        (None, false) => {
            // One node's cycle: as measured, else what the world will make of it.
            let measured = {
                let mut v: Vec<f64> = cycles
                    .iter()
                    .filter_map(|c| Some(c.drain_seconds? + c.reboot_seconds? + c.gate_seconds?))
                    .collect();
                rollboot::time::median(&mut v)
            };
            let grace = snap
                .pods
                .iter()
                .map(|p| p.grace_seconds as f64)
                .fold(0.0, f64::max);
            let cycle = measured.unwrap_or(
                sc.pod_exit_seconds.map_or(grace, |e| e.min(grace))
                    + sc.start_delay
                    + sc.reboot_delay
                    + sc.reboot_time
                    + sc.taint_removal_delay,
            );
            let slots = f64::from(config.concurrency.max_nodes.max(1));
            let rounds = (flagged.min(snap.nodes.len()) as f64 / slots)
                .ceil()
                .max(1.0);
            let rough = (rounds * cycle).max(1.0);
            let (finest, coarsest) = TIME_FACTOR_RANGE;
            sc.time_factor = (REHEARSAL_TARGET_SECONDS / rough).clamp(finest, coarsest);
            format!(
                "picked: a rollout of about {rough:.0} s ({rounds:.0} round(s) of maxNodes {slots:.0}, a {cycle:.0} s cycle{}) rehearsed in about {:.0} s; within {finest}..{coarsest}, finer is closer to the real timings",
                if measured.is_some() { " as measured" } else { "" },
                rough * sc.time_factor
            )
        }
    };
    out.push(timing("timeFactor", Some(sc.time_factor), factor));
    (sc, out)
}

/// Seconds to the millisecond: a measured median read back in reports.
fn millis(s: f64) -> f64 {
    (s * 1000.0).round() / 1000.0
}

/// Where the config of a run came from.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigUsed {
    /// `FILE (as written, durations scaled)`, or `built-in simulation config`.
    pub source: String,
    /// For the built-in config: its settings, so nobody is surprised by `evictUnreplicated`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub built_in: Option<String>,
}

/// How long one budget held drains: from the first eviction it refused for a pod to that pod's
/// eviction (or the end of the run), in real (unscaled) seconds.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetHold {
    /// `namespace/name`.
    pub budget: String,
    /// Pods whose eviction it refused at least once.
    pub pods_held: usize,
    /// The longest hold of one pod, real seconds.
    pub longest_seconds: f64,
    /// All holds summed, real seconds.
    pub total_seconds: f64,
    /// Pods still held when the run ended.
    pub still_holding: Vec<String>,
}

/// A node that failed, and the controller's reason.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeFailure {
    /// The node.
    pub node: String,
    /// `rollboot.dev/failure-reason` as the controller wrote it.
    pub reason: String,
}

/// The rehearsal's part of the report of `rollboot simulate`.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rehearsal {
    /// The config the run used.
    pub config: ConfigUsed,
    /// With a config file: every duration as written and as run (`configScaled`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub config_scaled: Vec<ScaledSetting>,
    /// Settings kept as written, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub config_kept: Vec<String>,
    /// Settings not honoured by the rehearsal, with what they said.
    pub config_ignored: Vec<String>,
    /// Real seconds per simulated second.
    pub time_factor: f64,
    /// The makespan divided by the time factor: what the rollout would take for real.
    pub makespan_real_seconds: f64,
    /// Nodes that failed, each with its reason.
    pub failures: Vec<NodeFailure>,
    /// Per budget that refused an eviction, how long it held drains.
    pub budget_holds: Vec<BudgetHold>,
    /// The snapshot rehearsed, when one was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<crate::sim::snapshot::Summary>,
    /// With a snapshot: the simulated world's timings and where each came from.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub world_timings: Vec<WorldTiming>,
}

impl Rehearsal {
    /// Text form (lines appended to the run's report).
    pub fn text(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        if let Some(snap) = &self.snapshot {
            let _ = writeln!(
                s,
                "  snapshot                 {} ({} nodes, {} pods, {} budgets), taken {}",
                snap.source, snap.nodes, snap.pods, snap.budgets, snap.taken_at
            );
        }
        let _ = writeln!(
            s,
            "  makespan for real        {:.0} s ({:.1} min; makespan / time factor {})",
            self.makespan_real_seconds,
            self.makespan_real_seconds / 60.0,
            self.time_factor
        );
        for t in &self.world_timings {
            let _ = writeln!(
                s,
                "  world timing             {} {}: {}",
                t.key,
                t.value.map_or("none".into(), |v| format!(
                    "{}",
                    (v * 1000.0).round() / 1000.0
                )),
                t.source
            );
        }
        let _ = writeln!(s, "  config                   {}", self.config.source);
        if let Some(b) = &self.config.built_in {
            for line in b.lines() {
                let _ = writeln!(s, "    {line}");
            }
        }
        if !self.config_scaled.is_empty() {
            let _ = writeln!(s, "  config scaled            key, as written -> as run");
            for c in &self.config_scaled {
                let _ = writeln!(
                    s,
                    "    {:<28} {:>8} -> {}{}",
                    c.key,
                    c.as_written,
                    c.as_run,
                    c.floor
                        .as_deref()
                        .map(|f| format!(" ({f})"))
                        .unwrap_or_default()
                );
            }
        }
        for k in &self.config_kept {
            let _ = writeln!(s, "  kept as written          {k}");
        }
        for i in &self.config_ignored {
            let _ = writeln!(s, "  IGNORED                  {i}");
        }
        for f in &self.failures {
            let _ = writeln!(s, "  node failed              {}: {}", f.node, f.reason);
        }
        if !self.budget_holds.is_empty() {
            let _ = writeln!(s, "  budgets that held drains (real time)");
            for b in &self.budget_holds {
                let _ = writeln!(
                    s,
                    "    {:<40} {} pod(s), longest {:.0} s, total {:.0} s{}",
                    b.budget,
                    b.pods_held,
                    b.longest_seconds,
                    b.total_seconds,
                    if b.still_holding.is_empty() {
                        String::new()
                    } else {
                        format!(", still holding {}", b.still_holding.join(", "))
                    }
                );
            }
        }
        s
    }
}

/// Per budget, its holds in real seconds (`holds` in the simulator's seconds: divided by the
/// time factor), sorted by total, longest first.
pub fn budget_holds(holds: &[crate::sim::invariants::Hold], time_factor: f64) -> Vec<BudgetHold> {
    let mut by: BTreeMap<&str, BudgetHold> = BTreeMap::new();
    for h in holds {
        let b = by.entry(h.budget.as_str()).or_insert_with(|| BudgetHold {
            budget: h.budget.clone(),
            pods_held: 0,
            longest_seconds: 0.0,
            total_seconds: 0.0,
            still_holding: Vec::new(),
        });
        let real = h.seconds / time_factor;
        b.pods_held += 1;
        b.longest_seconds = b.longest_seconds.max(real);
        b.total_seconds += real;
        if !h.released {
            b.still_holding.push(h.pod.clone());
        }
    }
    let mut v: Vec<BudgetHold> = by.into_values().collect();
    v.sort_by(|a, b| b.total_seconds.total_cmp(&a.total_seconds));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Config {
        rollboot::config::parse_str(yaml).unwrap()
    }

    fn row<'a>(s: &'a ConfigScaling, key: &str) -> &'a ScaledSetting {
        s.scaled.iter().find(|r| r.key == key).unwrap()
    }

    #[test]
    fn a_fifteen_minute_timeout_runs_nine_seconds_at_a_hundredth() {
        let (run, s) = scale_config(&parse("drain: {timeout: 15m}"), 0.01).unwrap();
        assert_eq!(run.drain.timeout, Duration::from_secs(9));
        assert_eq!(
            row(&s, "drain.timeout"),
            &ScaledSetting {
                key: "drain.timeout".into(),
                as_written: "15m".into(),
                as_run: "9s".into(),
                floor: None
            }
        );
        // Defaults are scaled as well: the reboot timeout (15m) and the health gate (10m).
        assert_eq!(run.reboot.timeout, Duration::from_secs(9));
        assert_eq!(run.health_gate.timeout, Duration::from_secs(6));
        assert_eq!(run.drain.eviction_retry_interval, Duration::from_millis(50));
        assert_eq!(run.reboot.check_period, Duration::from_millis(600));
    }

    #[test]
    fn leader_timings_stop_at_their_floor_and_say_why() {
        let (run, s) = scale_config(&parse("{}"), 0.01).unwrap();
        assert_eq!(run.leader.lease_duration, Duration::from_secs(3));
        assert_eq!(run.leader.renew_deadline, Duration::from_secs(2));
        assert_eq!(run.leader.retry_period, Duration::from_millis(500));
        let r = row(&s, "leader.leaseDuration");
        assert_eq!((r.as_written.as_str(), r.as_run.as_str()), ("15s", "3s"));
        assert!(
            r.floor.as_deref().unwrap().starts_with("floor 3s: "),
            "{r:?}"
        );
        // Above the floor, the product is kept.
        let (run, s) = scale_config(
            &parse("leader: {leaseDuration: 10m, renewDeadline: 5m, retryPeriod: 1m}"),
            0.01,
        )
        .unwrap();
        assert_eq!(run.leader.lease_duration, Duration::from_secs(6));
        assert_eq!(run.leader.renew_deadline, Duration::from_secs(3));
        assert_eq!(run.leader.retry_period, Duration::from_millis(600));
        assert_eq!(row(&s, "leader.leaseDuration").floor, None);
    }

    #[test]
    fn what_the_config_decides_is_kept_as_written() {
        let yaml = "concurrency: {maxNodes: 3}\ndrain: {evictUnreplicated: false, deleteEmptyDirData: false, gracePeriod: 30s, podSelector: 'app!=x'}\nfailures: {maxFailures: 2}\nnodes: {order: name}";
        let (run, s) = scale_config(&parse(yaml), 0.01).unwrap();
        assert_eq!(run.concurrency.max_nodes, 3);
        assert!(!run.drain.evict_unreplicated && !run.drain.delete_empty_dir_data);
        assert_eq!(run.drain.grace_period, Some(Duration::from_secs(30)));
        assert_eq!(run.drain.pod_selector, "app!=x");
        assert_eq!(run.failures.max_failures, 2);
        assert!(s.kept[0].starts_with("drain.gracePeriod 30s: "), "{s:?}");
    }

    #[test]
    fn windows_and_blackouts_are_dropped_and_named() {
        let yaml = "windows: [{schedule: '0 2 * * mon-fri', duration: 4h, timezone: Europe/Berlin}]\nblackouts: [{from: '2026-12-24T00:00:00+01:00', to: '2027-01-02T00:00:00+01:00'}]";
        let (run, s) = scale_config(&parse(yaml), 0.01).unwrap();
        assert!(run.windows.is_none() && run.blackouts.is_empty());
        assert!(run.schedule().is_allowed(chrono::Utc::now()));
        assert_eq!(s.ignored.len(), 2, "{s:?}");
        assert!(
            s.ignored[0].contains("`0 2 * * mon-fri` for 4h (Europe/Berlin)"),
            "{s:?}"
        );
        assert!(s.ignored[1].contains("2026-12-24T00:00:00+01:00"), "{s:?}");
    }

    #[test]
    fn a_rehearsal_sends_no_notification_and_says_so() {
        let yaml = "notifications: {sinks: [{name: ops, type: slack, urlFrom: {env: SLACK_URL}}], blockedAfter: 5m}";
        let (run, s) = scale_config(&parse(yaml), 0.01).unwrap();
        assert!(run.notifications.sinks.is_empty());
        assert_eq!(
            s.ignored,
            ["notifications (sinks ops (slack)): a rehearsal sends none"]
        );
        // Without sinks there is nothing to say.
        let (_, s) = scale_config(&parse("{}"), 0.01).unwrap();
        assert!(s.ignored.is_empty(), "{s:?}");
    }

    #[test]
    fn a_rehearsal_silences_nothing_and_asks_no_alertmanager() {
        let yaml = "silences: {alertmanager: {url: 'http://am:9093'}}\nblockers: {alertmanager: {url: 'http://am:9093'}, maxUnreadyNodes: 1}";
        let (run, s) = scale_config(&parse(yaml), 0.01).unwrap();
        assert!(run.silences.alertmanager.is_none());
        assert!(run.blockers.alertmanager.is_none());
        assert_eq!(run.blockers.max_unready_nodes, 1);
        assert_eq!(
            s.ignored,
            [
                "silences.alertmanager (http://am:9093): a rehearsal creates no silence",
                "blockers.alertmanager (http://am:9093): a rehearsal asks no Alertmanager"
            ]
        );
    }

    #[test]
    fn a_rehearsal_calls_no_webhook_and_waits_on_no_gate_and_says_so() {
        let yaml = "drain: {settle: 30s}\nhooks:\n  afterDrain:\n    webhooks: [{name: ticket, url: 'http://127.0.0.1:1/t', blocking: true}]\n    gates: [example.com/ok]\n    labels: {example.com/rebooting: 'true'}\n";
        let (run, s) = scale_config(&parse(yaml), 0.01).unwrap();
        assert!(
            run.hooks.after_drain.webhooks.is_empty() && run.hooks.after_drain.gates.is_empty()
        );
        assert_eq!(run.hooks.after_drain.labels.len(), 1, "labels are kept");
        assert_eq!(
            s.ignored,
            ["hooks (webhook ticket at afterDrain, gate example.com/ok at afterDrain): a rehearsal calls no webhook and waits on no gate annotation"]
        );
        let settle = s.scaled.iter().find(|r| r.key == "drain.settle").unwrap();
        assert_eq!(
            (settle.as_written.as_str(), settle.as_run.as_str()),
            ("30s", "300ms")
        );
    }

    #[test]
    fn every_duration_of_the_reference_config_is_scaled_or_kept_on_purpose() {
        // A duration added to the config later must be listed in SCALED or KEPT_AS_WRITTEN.
        let text = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../config/rollboot.yaml"
        ))
        .unwrap();
        let mut c = parse(&text);
        c.drain.grace_period = Some(Duration::from_secs(30));
        let v = serde_json::to_value(&c).unwrap();
        let mut found = Vec::new();
        fn walk(v: &serde_json::Value, path: &str, out: &mut Vec<String>) {
            match v {
                serde_json::Value::Object(m) => {
                    for (k, x) in m {
                        let p = if path.is_empty() {
                            k.clone()
                        } else {
                            format!("{path}.{k}")
                        };
                        walk(x, &p, out);
                    }
                }
                serde_json::Value::String(s) if s.parse::<Duration>().is_ok() => {
                    out.push(path.to_string())
                }
                _ => {}
            }
        }
        walk(&v, "", &mut found);
        let known: Vec<&str> = SCALED
            .iter()
            .map(|f| f.key)
            .chain(KEPT_AS_WRITTEN.iter().map(|k| k.0))
            .collect();
        for key in found {
            // Window durations go with the windows; notifications are not sent in a rehearsal.
            if key.starts_with("windows") || key.starts_with("notifications") {
                continue;
            }
            assert!(
                known.contains(&key.as_str()),
                "{key} is neither scaled nor kept"
            );
        }
    }

    #[test]
    fn a_factor_that_is_not_positive_is_refused() {
        assert!(matches!(
            scale_config(&parse("{}"), 0.0),
            Err(RehearseError::TimeFactor(_))
        ));
        assert!(scale_config(&parse("{}"), f64::NAN).is_err());
    }

    #[test]
    fn holds_add_up_per_budget_in_real_seconds() {
        use crate::sim::invariants::Hold;
        let h = |b: &str, p: &str, s: f64, released| Hold {
            budget: b.into(),
            pod: p.into(),
            seconds: s,
            released,
        };
        let v = budget_holds(
            &[
                h("a/web", "a/web-1", 0.2, true),
                h("a/web", "a/web-2", 0.5, false),
                h("a/db", "a/db-0", 0.1, true),
            ],
            0.01,
        );
        assert_eq!(v[0].budget, "a/web");
        assert_eq!(v[0].pods_held, 2);
        assert!((v[0].longest_seconds - 50.0).abs() < 1e-9);
        assert!((v[0].total_seconds - 70.0).abs() < 1e-9);
        assert_eq!(v[0].still_holding, vec!["a/web-2".to_string()]);
        assert_eq!(v[1].budget, "a/db");
    }

    fn measured_snapshot() -> crate::sim::snapshot::Snapshot {
        use crate::sim::snapshot::{SnapCycle, SnapNode, SnapPod, Snapshot};
        let cycle = |reboot: f64, exit: Option<f64>| SnapCycle {
            drain_seconds: Some(4.0),
            reboot_seconds: Some(reboot),
            gate_seconds: Some(1.0),
            pod_exit_seconds: exit,
        };
        let node = |name: &str, c: Option<SnapCycle>| SnapNode {
            name: name.into(),
            ready: true,
            last_cycle: c,
            ..Default::default()
        };
        let pod = |name: &str, ready: Option<f64>| SnapPod {
            namespace: "a".into(),
            name: name.into(),
            uid: name.into(),
            phase: "Running".into(),
            ready: true,
            grace_seconds: 30,
            ready_seconds: ready,
            ..Default::default()
        };
        Snapshot {
            nodes: vec![
                node("n1", Some(cycle(10.0, Some(2.0)))),
                node("n2", Some(cycle(12.0, None))),
                node("n3", None),
            ],
            pods: vec![pod("p1", Some(1.0)), pod("p2", Some(3.0)), pod("p3", None)],
            ..Default::default()
        }
    }

    fn timing<'a>(t: &'a [WorldTiming], key: &str) -> &'a WorldTiming {
        t.iter().find(|t| t.key == key).unwrap()
    }

    #[test]
    fn a_rehearsal_runs_with_the_timings_the_cluster_measured() {
        let base = crate::sim::Scenario::default();
        let (sc, t) = world_timings(
            &measured_snapshot(),
            &base,
            Given::default(),
            &parse("{}"),
            3,
        );
        // The median of 10 and 12 s, less the 2 s delay and 3 s taint removal the world adds.
        assert_eq!(sc.reboot_time, 6.0);
        assert!(timing(&t, "rebootTime")
            .source
            .starts_with("measured: the median of 2 node(s)"));
        assert_eq!(sc.pod_exit_seconds, Some(2.0));
        assert_eq!(sc.start_delay, 2.0, "the median of 1 and 3 s");
        assert!(timing(&t, "startDelay").source.contains("2 pod(s)"));
        // Three rounds of a measured 16 s cycle: 48 s, rehearsed at the finest factor.
        assert_eq!(sc.time_factor, TIME_FACTOR_RANGE.1);
        assert!(
            timing(&t, "timeFactor").source.contains("about 48 s"),
            "{t:?}"
        );
    }

    #[test]
    fn what_the_operator_gives_wins_over_what_was_measured() {
        let base = crate::sim::Scenario::default();
        let given = Given {
            scenario: false,
            reboot_time: Some(90.0),
            time_factor: Some(0.02),
        };
        let (sc, t) = world_timings(&measured_snapshot(), &base, given, &parse("{}"), 3);
        assert_eq!((sc.reboot_time, sc.time_factor), (90.0, 0.02));
        assert_eq!(timing(&t, "rebootTime").source, "--reboot-time");
        // A scenario file gives every timing as written.
        let given = Given {
            scenario: true,
            ..Given::default()
        };
        let (sc, t) = world_timings(&measured_snapshot(), &base, given, &parse("{}"), 3);
        assert_eq!(
            (
                sc.reboot_time,
                sc.pod_exit_seconds,
                sc.start_delay,
                sc.time_factor
            ),
            (
                base.reboot_time,
                base.pod_exit_seconds,
                base.start_delay,
                base.time_factor
            )
        );
        assert!(t.iter().all(|t| t.source == "the --scenario file"), "{t:?}");
    }

    #[test]
    fn a_long_rollout_is_rehearsed_coarser_and_nothing_measured_says_so() {
        let mut snap = measured_snapshot();
        for n in &mut snap.nodes {
            n.last_cycle = None;
        }
        for p in &mut snap.pods {
            p.ready_seconds = None;
        }
        let base = crate::sim::Scenario {
            reboot_time: 300.0,
            ..crate::sim::Scenario::default()
        };
        let template = snap.nodes[0].clone();
        snap.nodes = (0..5000)
            .map(|i| crate::sim::snapshot::SnapNode {
                name: format!("n{i}"),
                ..template.clone()
            })
            .collect();
        // 10 nodes, two at a time, each 30 + 2 + 2 + 300 + 3 s: about 1,685 s.
        let two = parse("concurrency: {maxNodes: 2}");
        let (sc, t) = world_timings(&snap, &base, Given::default(), &two, 10);
        assert_eq!(sc.reboot_time, 300.0);
        assert!(timing(&t, "rebootTime")
            .source
            .starts_with("the default 300 s"));
        assert_eq!(sc.pod_exit_seconds, None);
        assert!(
            (sc.time_factor - REHEARSAL_TARGET_SECONDS / 1685.0).abs() < 1e-9,
            "{}",
            sc.time_factor
        );
        // All 5,000 of them: never coarser than the range allows.
        let (sc, _) = world_timings(&snap, &base, Given::default(), &two, 5000);
        assert_eq!(sc.time_factor, TIME_FACTOR_RANGE.0);
    }
}
