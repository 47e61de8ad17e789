//! The judgement of a PodDisruptionBudget against a drain: can it ever allow a disruption, or
//! only none now?
//!
//! Owns the rule that tells a budget that will clear ("now": no disruption allowed at the
//! moment, one will be once a pod is replaced) from one that never will ("never":
//! `maxUnavailable` 0, `minAvailable` at or above its pods, or a budget whose healthy pods are
//! all it expects and still allows none): [`never_allows`] from a count of the budget's pods
//! (what `rollboot plan` counts), [`never_allows_now`] from the budget's own status (what a
//! drain and the watches read). Pure: it must never do I/O; the drain reads the budgets and
//! acts on the answer (`drain.whenBlocked`, [`crate::drain::hold`]), and `rollboot plan` says
//! the same from its own read.

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

/// Why a budget can never allow a disruption of its `pods` pods, if it cannot: `maxUnavailable`
/// 0 (or 0%), or `minAvailable` at or above the pods it selects (a percentage rounded up, as
/// the disruption controller does).
pub fn never_allows(b: &PodDisruptionBudget, pods: usize) -> Option<String> {
    let spec = b.spec.as_ref()?;
    let pods = pods as i64;
    let scaled = |v: &IntOrString| match v {
        IntOrString::Int(i) => Some(i64::from(*i)),
        IntOrString::String(s) => {
            let pct: i64 = s.strip_suffix('%')?.trim().parse().ok()?;
            Some((pct * pods + 99) / 100)
        }
    };
    let text = |v: &IntOrString| match v {
        IntOrString::Int(i) => i.to_string(),
        IntOrString::String(s) => s.clone(),
    };
    if let Some(m) = &spec.max_unavailable {
        if scaled(m) == Some(0) {
            return Some(format!("maxUnavailable is {}", text(m)));
        }
    }
    if let Some(m) = &spec.min_available {
        if scaled(m).is_some_and(|need| need >= pods) {
            return Some(format!(
                "minAvailable {} is at or above the {pods} pod(s) it selects",
                text(m)
            ));
        }
    }
    None
}

/// [`never_allows`] from the budget alone, as a drain reads it: the pods it selects are its
/// `status.expectedPods`, trusted only when the disruption controller has seen the budget's
/// current spec (`observedGeneration`); without that, only `maxUnavailable` 0 is judged. A
/// budget with more healthy pods than it needs, no disruption under way, and still none
/// allowed is one too (what Gardener's drain calls misconfigured: the disruption controller
/// could not compute it, e.g. pods without a scalable controller under `maxUnavailable`). A
/// disruption under way (`disruptedPods`: an eviction just accepted) explains an allowance of 0
/// by itself, so it is never read as one.
pub fn never_allows_now(b: &PodDisruptionBudget) -> Option<String> {
    let status = b.status.as_ref().filter(|s| {
        s.observed_generation.is_some() && s.observed_generation == b.metadata.generation
    });
    let Some(s) = status else {
        // Zero pods: only a spec that refuses whatever the count says anything.
        return never_allows(b, i32::MAX as usize).filter(|why| why.starts_with("maxUnavailable"));
    };
    let expected = usize::try_from(s.expected_pods).unwrap_or(0);
    if expected == 0 {
        return None;
    }
    if let Some(why) = never_allows(b, expected) {
        return Some(why);
    }
    let disrupting = s.disrupted_pods.as_ref().is_some_and(|d| !d.is_empty());
    let stuck_at_zero =
        s.disruptions_allowed == 0 && s.current_healthy > s.desired_healthy && !disrupting;
    stuck_at_zero.then(|| {
        format!(
            "{} of its {} pod(s) are healthy, {} needed, no disruption under way, and it still allows none",
            s.current_healthy, s.expected_pods, s.desired_healthy
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::policy::v1::{PodDisruptionBudgetSpec, PodDisruptionBudgetStatus};

    fn budget(
        spec: serde_json::Value,
        status: Option<(i64, i32, i32, i32, i32)>,
    ) -> PodDisruptionBudget {
        let mut b = PodDisruptionBudget::default();
        b.metadata.generation = Some(2);
        b.spec = Some(serde_json::from_value::<PodDisruptionBudgetSpec>(spec).unwrap());
        b.status = status.map(|(observed, expected, healthy, desired, allowed)| {
            PodDisruptionBudgetStatus {
                observed_generation: Some(observed),
                expected_pods: expected,
                current_healthy: healthy,
                desired_healthy: desired,
                disruptions_allowed: allowed,
                ..Default::default()
            }
        });
        b
    }

    #[test]
    fn a_budget_that_never_allows_is_told_from_one_at_zero_now() {
        // maxUnavailable 0: never, whatever the status.
        let zero = budget(serde_json::json!({"maxUnavailable": 0}), None);
        assert_eq!(
            never_allows_now(&zero).as_deref(),
            Some("maxUnavailable is 0")
        );
        // minAvailable at its 3 expected pods, the spec seen: never.
        let all = budget(
            serde_json::json!({"minAvailable": 3}),
            Some((2, 3, 3, 3, 0)),
        );
        assert!(never_allows_now(&all).unwrap().contains("minAvailable 3"));
        // The same budget whose spec the disruption controller has not seen yet: not judged.
        let unseen = budget(
            serde_json::json!({"minAvailable": 3}),
            Some((1, 3, 3, 3, 0)),
        );
        assert_eq!(never_allows_now(&unseen), None);
        // maxUnavailable 1 with one pod already down: at 0 now, it clears.
        let now = budget(
            serde_json::json!({"maxUnavailable": 1}),
            Some((2, 5, 4, 4, 0)),
        );
        assert_eq!(never_allows_now(&now), None);
        // More healthy than needed, nothing under way, and still none allowed (the disruption
        // controller could not compute it): never.
        let odd = budget(
            serde_json::json!({"maxUnavailable": "10%"}),
            Some((2, 5, 5, 4, 0)),
        );
        assert!(never_allows_now(&odd)
            .unwrap()
            .contains("5 of its 5 pod(s) are healthy, 4 needed"));
        // The same shape while an eviction just accepted is in disruptedPods (seen on a real
        // kube-apiserver mid-drain: 8 healthy, 7 needed, 0 allowed): it clears, not never.
        let mut busy = budget(
            serde_json::json!({"maxUnavailable": 1}),
            Some((2, 8, 8, 7, 0)),
        );
        busy.status.as_mut().unwrap().disrupted_pods = Some(
            [(
                "web-1".to_string(),
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()),
            )]
            .into(),
        );
        assert_eq!(never_allows_now(&busy), None);
        // No pods expected: nothing to judge.
        let empty = budget(
            serde_json::json!({"minAvailable": 1}),
            Some((2, 0, 0, 1, 0)),
        );
        assert_eq!(never_allows_now(&empty), None);
    }
}
