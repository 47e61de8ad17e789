//! Fault injection, off by default: errors, delays, cut watches and an API server outage.
//!
//! Owns the per-run fault settings and the random draws that apply them. The reliability
//! tests set them through [`super::Cluster::set_faults`] and [`super::Cluster::outage`]. It
//! must never inject anything while every rate is zero.

use std::sync::RwLock;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// Fault settings for a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct FaultConfig {
    /// Share of resource requests answered 500 InternalError.
    pub error_rate: f64,
    /// Share of resource requests answered 429 TooManyRequests (Retry-After: 1).
    pub throttle_rate: f64,
    /// Share of resource requests delayed by `delay_ms`.
    pub delay_rate: f64,
    /// Delay in milliseconds.
    pub delay_ms: u64,
    /// When set, each watch is cut after a random time up to this many milliseconds.
    pub watch_cut_max_ms: Option<u64>,
}

/// What to do with one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Answer normally.
    None,
    /// Answer 500.
    Error,
    /// Answer 429.
    Throttle,
    /// Wait, then answer normally.
    Delay(Duration),
}

/// Live fault settings.
#[derive(Default)]
pub struct Faults {
    config: RwLock<FaultConfig>,
    down_until: RwLock<Option<Instant>>,
}

impl Faults {
    /// Replaces the settings.
    pub fn set(&self, config: FaultConfig) {
        *self.config.write().unwrap_or_else(|e| e.into_inner()) = config;
    }

    /// The settings.
    pub fn config(&self) -> FaultConfig {
        self.config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Refuses connections for `d` from now.
    pub fn outage(&self, d: Duration) {
        *self.down_until.write().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now() + d);
    }

    /// How long the outage still lasts.
    pub fn down_for(&self) -> Option<Duration> {
        let until = (*self.down_until.read().unwrap_or_else(|e| e.into_inner()))?;
        until.checked_duration_since(Instant::now())
    }

    /// Draws the fault for one request.
    pub fn draw(&self) -> Fault {
        let c = self.config.read().unwrap_or_else(|e| e.into_inner());
        if c.error_rate <= 0.0 && c.throttle_rate <= 0.0 && c.delay_rate <= 0.0 {
            return Fault::None;
        }
        let x: f64 = rand::random();
        if x < c.error_rate {
            Fault::Error
        } else if x < c.error_rate + c.throttle_rate {
            Fault::Throttle
        } else if rand::random::<f64>() < c.delay_rate {
            Fault::Delay(Duration::from_millis(c.delay_ms))
        } else {
            Fault::None
        }
    }

    /// When to cut a new watch, if cuts are on.
    pub fn watch_cut(&self) -> Option<Duration> {
        let max = self
            .config
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .watch_cut_max_ms?;
        Some(Duration::from_millis(rand::random_range(0..=max.max(1))))
    }
}
