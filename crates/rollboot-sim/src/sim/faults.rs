//! Fault injection, off by default: errors, delays, cut watches, an API server outage,
//! holding back every request of one client identity, and failing its next requests of a kind.
//!
//! Owns the per-run fault settings and the random draws that apply them. The reliability
//! tests set them through [`super::Cluster::set_faults`], [`super::Cluster::outage`] and
//! [`super::Cluster::hold`]. It must never inject anything while every rate is zero and no
//! hold is set.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
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

/// Every request of one identity held back before it is served: a paused process or a slow
/// network between that client and the API server. A held request is served after the delay
/// even when its client has given up on it meanwhile: once sent, a request lands.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Hold {
    delay: Duration,
    /// `(verb, resource)`: the hold starts with the first such request (held too); until then
    /// the identity is served normally. `None`: it starts at once.
    from: Option<(String, String)>,
}

/// Live fault settings.
#[derive(Default)]
pub struct Faults {
    config: RwLock<FaultConfig>,
    down_until: RwLock<Option<Instant>>,
    holds: RwLock<HashMap<String, Hold>>,
    /// Identities the drawn faults (rates) never hit: the hands of a test or of a fault
    /// player, which must act on time.
    exempt: RwLock<std::collections::HashSet<String>>,
    /// `(identity, verb, resource)`: how many more such requests to answer 500.
    failures: RwLock<HashMap<(String, String, String), usize>>,
    abandoned_evictions: AtomicUsize,
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

    /// The next `n` evictions a budget admits are abandoned half-way, as when the evicting client is
    /// killed mid-request: the budget records the disruption (`status.disruptedPods`), the pod
    /// is not deleted, and the client gets 504.
    pub fn abandon_evictions(&self, n: usize) {
        self.abandoned_evictions.store(n, Ordering::SeqCst);
    }

    /// Whether the eviction being served now is to be abandoned (counts it).
    pub fn take_abandoned_eviction(&self) -> bool {
        self.abandoned_evictions
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
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

    /// Holds every request of `identity` for `delay` before serving it, from now on, or, with
    /// `from = Some((verb, resource))`, from the first such request of that identity on.
    pub fn hold(&self, identity: &str, delay: Duration, from: Option<(&str, &str)>) {
        let hold = Hold {
            delay,
            from: from.map(|(v, r)| (v.to_string(), r.to_string())),
        };
        self.holds
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(identity.to_string(), hold);
    }

    /// Ends the hold on `identity` (requests already held are still served late).
    pub fn release(&self, identity: &str) {
        self.holds
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(identity);
    }

    /// How long to hold one request of `identity`, if at all. A request matching a pending
    /// `from` starts the hold.
    pub fn held(&self, identity: &str, verb: &str, resource: &str) -> Option<Duration> {
        if self
            .holds
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
        {
            return None;
        }
        let mut holds = self.holds.write().unwrap_or_else(|e| e.into_inner());
        let h = holds.get_mut(identity)?;
        if let Some((v, r)) = &h.from {
            if v != verb || r != resource {
                return None;
            }
            h.from = None;
        }
        Some(h.delay)
    }

    /// Answers the next `n` requests `verb resource` of `identity` with 500 InternalError: one
    /// client's failed request at a chosen line, where rates hit everybody at random.
    pub fn fail_next(&self, identity: &str, verb: &str, resource: &str, n: usize) {
        self.failures
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert((identity.into(), verb.into(), resource.into()), n);
    }

    /// Whether this request is one [`Faults::fail_next`] asked to fail (counts it).
    pub fn take_failure(&self, identity: &str, verb: &str, resource: &str) -> bool {
        if self
            .failures
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
        {
            return false;
        }
        let mut f = self.failures.write().unwrap_or_else(|e| e.into_inner());
        let key = (identity.to_string(), verb.to_string(), resource.to_string());
        match f.get_mut(&key) {
            Some(n) if *n > 0 => {
                *n -= 1;
                if *n == 0 {
                    f.remove(&key);
                }
                true
            }
            _ => false,
        }
    }

    /// Exempts `identity` from the drawn faults (errors, throttling, delays; not outages,
    /// holds or [`Faults::fail_next`]).
    pub fn exempt(&self, identity: &str) {
        self.exempt
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(identity.to_string());
    }

    /// Draws the fault for one request of `identity`.
    pub fn draw(&self, identity: &str) -> Fault {
        let c = self.config.read().unwrap_or_else(|e| e.into_inner());
        if c.error_rate <= 0.0 && c.throttle_rate <= 0.0 && c.delay_rate <= 0.0 {
            return Fault::None;
        }
        if self
            .exempt
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(identity)
        {
            return Fault::None;
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hold_starts_with_its_first_matching_request_and_then_holds_everything() {
        let f = Faults::default();
        assert_eq!(f.held("c", "patch", "nodes"), None);
        let d = Duration::from_secs(3);
        f.hold("c", d, Some(("patch", "nodes")));
        assert_eq!(f.held("c", "update", "leases"), None);
        assert_eq!(f.held("other", "patch", "nodes"), None);
        assert_eq!(f.held("c", "patch", "nodes"), Some(d));
        assert_eq!(f.held("c", "update", "leases"), Some(d));
        f.release("c");
        assert_eq!(f.held("c", "patch", "nodes"), None);
        f.hold("c", d, None);
        assert_eq!(f.held("c", "get", "pods"), Some(d));
    }

    #[test]
    fn fail_next_fails_exactly_that_many_requests_of_that_client_and_kind() {
        let f = Faults::default();
        f.fail_next("agent", "get", "leases", 2);
        assert!(!f.take_failure("agent", "list", "leases"));
        assert!(!f.take_failure("controller-0", "get", "leases"));
        assert!(f.take_failure("agent", "get", "leases"));
        assert!(f.take_failure("agent", "get", "leases"));
        assert!(!f.take_failure("agent", "get", "leases"));
    }
}
