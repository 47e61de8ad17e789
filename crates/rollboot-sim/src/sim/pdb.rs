//! PodDisruptionBudget arithmetic, as kube-controller-manager's disruption controller computes it.
//!
//! Pure: given a budget's spec, the indexes of the pods it selects and the scale of their
//! controllers, computes `expectedPods`, `desiredHealthy`, `currentHealthy` and
//! `disruptionsAllowed` (percentages round up in both fields, golden 49 and 51). It must never
//! read the store or the clock beyond what it is given.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::index::Index;

/// The computed numbers of one budget.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Budget {
    /// status.expectedPods
    pub expected: i64,
    /// status.desiredHealthy
    pub desired: i64,
    /// status.currentHealthy
    pub healthy: i64,
    /// status.disruptionsAllowed
    pub allowed: i64,
}

/// Resolves `value` (an int or "N%") against `total`, rounding percentages up.
pub fn scaled(value: &Value, total: i64) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64(),
        Value::String(s) => {
            let pct: i64 = s.strip_suffix('%')?.parse().ok()?;
            Some((pct * total + 99) / 100)
        }
        _ => None,
    }
}

/// True when a pod counts as healthy for a budget: Ready, not deleting, not recently disrupted.
pub fn healthy(pod: &Index, disrupted: &BTreeSet<String>) -> bool {
    pod.ready && !pod.deleting && !disrupted.contains(&pod.name)
}

/// Computes a budget over `pods` (already selected). `scale_of` gives the desired replica count
/// of a pod's controller keyed by controller uid. Pods without a known controller are left out
/// of the scale, as the real controller's `getExpectedScale` lists them as unmanaged pods
/// (they still count in `currentHealthy`).
pub fn compute(
    spec: &Value,
    pods: &[&Index],
    disrupted: &BTreeSet<String>,
    mut scale_of: impl FnMut(&Index) -> Option<(String, i64)>,
) -> Budget {
    let healthy_count = pods.iter().filter(|p| healthy(p, disrupted)).count() as i64;
    let mut controller_scale = || {
        let mut scales: BTreeMap<String, i64> = BTreeMap::new();
        for p in pods {
            if let Some((uid, n)) = scale_of(p) {
                scales.insert(uid, n);
            }
        }
        scales.values().sum::<i64>()
    };
    let (expected, desired) = if let Some(max) = spec.get("maxUnavailable").filter(|v| !v.is_null())
    {
        let expected = controller_scale();
        let max = scaled(max, expected).unwrap_or(0);
        (expected, (expected - max).max(0))
    } else {
        match spec.get("minAvailable") {
            Some(v @ Value::Number(_)) => (pods.len() as i64, v.as_i64().unwrap_or(0)),
            Some(v @ Value::String(_)) => {
                let expected = controller_scale();
                (expected, scaled(v, expected).unwrap_or(0))
            }
            _ => (pods.len() as i64, 1),
        }
    };
    let mut allowed = healthy_count - desired;
    if expected <= 0 || allowed <= 0 {
        allowed = 0;
    }
    Budget {
        expected,
        desired,
        healthy: healthy_count,
        allowed,
    }
}
