//! Request accounting: how much API load the clients put on the simulated server.
//!
//! Owns counters of requests keyed by (identity, verb, group, resource, subresource,
//! namespace), of the error statuses answered to them, of watch events sent, of injected
//! faults, and of the User-Agents each identity sent. Identity is the bearer token the client presented (any token is accepted). It must never affect how a request is answered.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use serde::Serialize;

/// What one counter counts.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub struct RequestKey {
    /// Bearer token of the caller ("anonymous" without one).
    pub identity: String,
    /// get, list, watch, create, update, patch, delete
    pub verb: String,
    /// API group ("" for core)
    pub group: String,
    /// plural resource
    pub resource: String,
    /// subresource ("" for none)
    pub subresource: String,
    /// namespace ("" for cluster-scoped or all namespaces)
    pub namespace: String,
}

/// A snapshot of the counters.
#[derive(Clone, Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatsReport {
    /// Requests per key.
    pub requests: Vec<(RequestKey, u64)>,
    /// Total requests.
    pub total_requests: u64,
    /// Watch events sent (all watches).
    pub watch_events_sent: u64,
    /// Faults injected.
    pub faults_injected: u64,
    /// Requests answered with an error status, per key and status code.
    pub errors: Vec<((RequestKey, u16), u64)>,
    /// The User-Agent headers each identity sent ("" for a request without one).
    pub user_agents: BTreeMap<String, BTreeSet<String>>,
}

impl StatsReport {
    /// Requests matching a verb and resource, all identities and namespaces.
    pub fn count(&self, verb: &str, resource: &str) -> u64 {
        self.requests
            .iter()
            .filter(|(k, _)| k.verb == verb && k.resource == resource)
            .map(|(_, n)| n)
            .sum()
    }

    /// Requests of `identity` matching a verb and resource answered with `code`.
    pub fn answered(&self, identity: &str, verb: &str, resource: &str, code: u16) -> u64 {
        self.errors
            .iter()
            .filter(|((k, c), _)| {
                *c == code && k.identity == identity && k.verb == verb && k.resource == resource
            })
            .map(|(_, n)| n)
            .sum()
    }

    /// Requests per verb.
    pub fn by_verb(&self) -> BTreeMap<String, u64> {
        let mut m = BTreeMap::new();
        for (k, n) in &self.requests {
            *m.entry(k.verb.clone()).or_default() += n;
        }
        m
    }
}

/// The shared counters.
#[derive(Default)]
pub struct Stats {
    requests: Mutex<BTreeMap<RequestKey, u64>>,
    errors: Mutex<BTreeMap<(RequestKey, u16), u64>>,
    watch_events: AtomicU64,
    faults: AtomicU64,
    user_agents: Mutex<BTreeMap<String, BTreeSet<String>>>,
}

impl Stats {
    /// Counts one request.
    pub fn request(&self, key: RequestKey) {
        *self
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key)
            .or_default() += 1;
    }

    /// Counts the answer to one request, when it is an error (status 400 and up).
    pub fn answer(&self, key: &RequestKey, status: u16) {
        if status < 400 {
            return;
        }
        *self
            .errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry((key.clone(), status))
            .or_default() += 1;
    }

    /// Notes the User-Agent `identity` sent.
    pub fn user_agent(&self, identity: &str, user_agent: &str) {
        let mut m = self.user_agents.lock().unwrap_or_else(|e| e.into_inner());
        if !m.get(identity).is_some_and(|s| s.contains(user_agent)) {
            m.entry(identity.to_string())
                .or_default()
                .insert(user_agent.to_string());
        }
    }

    /// Counts watch events sent.
    pub fn watch_events(&self, n: u64) {
        self.watch_events.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts an injected fault.
    pub fn fault(&self) {
        self.faults.fetch_add(1, Ordering::Relaxed);
    }

    /// A snapshot.
    pub fn report(&self) -> StatsReport {
        let requests: Vec<_> = self
            .requests
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(k, n)| (k.clone(), *n))
            .collect();
        let errors = self
            .errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(k, n)| (k.clone(), *n))
            .collect();
        StatsReport {
            errors,
            total_requests: requests.iter().map(|(_, n)| n).sum(),
            requests,
            watch_events_sent: self.watch_events.load(Ordering::Relaxed),
            faults_injected: self.faults.load(Ordering::Relaxed),
            user_agents: self
                .user_agents
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        }
    }
}
