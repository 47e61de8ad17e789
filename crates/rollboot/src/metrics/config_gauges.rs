//! The gauges every replica computes from its config at each scrape: whether the schedule lets
//! new reboots start now (`rollboot_window_open`), the next window's opening, how long a node
//! may stay in each state ([`state_timeouts`]) and `failures.maxFailures`.
//!
//! Owns these families and the states' timeouts. It must never read the cluster or keep
//! anything between scrapes: a config reload is seen at the next scrape.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;

use super::exposition::{write_gauge, write_gauges};
use crate::config::Config;

/// The config of one scrape, and its instant.
#[derive(Debug)]
pub struct ConfigGauges {
    pub config: Arc<Config>,
    pub now: DateTime<Utc>,
}

impl Collector for ConfigGauges {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        let e = &mut encoder;
        let schedule = self.config.schedule();
        write_gauge(
            e,
            "window_open",
            "1 while new reboots may start by the schedule (a window open, no blackout)",
            Some(u64::from(schedule.is_allowed(self.now))),
        )?;
        write_gauge(
            e,
            "window_next_opening_timestamp_seconds",
            "Unix time of the next window opening after now (absent when none is scheduled)",
            schedule.next_opening(self.now).map(|o| o.start.timestamp()),
        )?;
        write_gauges(
            e,
            "state_timeout_seconds",
            "The longest a node may stay in each state before the controller fails it: the state's own timeout plus those of the hooks that hold the node in it",
            state_timeouts(&self.config).map(|(state, secs)| ([("state", state)], secs)),
        )?;
        write_gauge(
            e,
            "max_failures",
            "failures.maxFailures: failed nodes tolerated before the rollout halts",
            Some(self.config.failures.max_failures),
        )
    }
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
