//! What a workload watch keeps of each object it receives: the objects read slim (only the
//! fields kept are deserialized), and the readers of each kind ([`Keep`]).
//!
//! Owns the slim forms of a budget ([`SlimBudget`]) and of a ReplicaSet or StatefulSet
//! ([`SlimReplicas`]), and what is read of them: a budget's health, selector,
//! `status.disruptedPods`, `status.disruptionsAllowed` and, when it can never allow a
//! disruption ([`crate::budgets::judge::never_allows_now`]), what says so; a controller's
//! replicas. Pure: it must never do I/O; the watch that receives the objects is
//! [`super::follow`]'s.

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Deserialize;

use super::state::{Disrupted, Health, NeverAllows};
use crate::budgets::judge::never_allows_now;
use crate::client::Slim;

/// `spec.replicas` of a ReplicaSet or StatefulSet.
#[derive(Clone, Debug, Deserialize)]
pub(super) struct Scale {
    replicas: Option<i32>,
}

/// `status.readyReplicas` of a ReplicaSet or StatefulSet.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Ready {
    ready_replicas: Option<i32>,
}

/// `spec.selector` of a budget, and its limits (whether it can ever allow a disruption).
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct BudgetSpec {
    selector: Option<LabelSelector>,
    max_unavailable: Option<IntOrString>,
    min_available: Option<IntOrString>,
}

/// What the watches read of a budget's `status`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct BudgetStatus {
    #[serde(default)]
    current_healthy: i32,
    #[serde(default)]
    desired_healthy: i32,
    disrupted_pods: Option<Disrupted>,
    #[serde(default)]
    expected_pods: i32,
    #[serde(default)]
    disruptions_allowed: i32,
    observed_generation: Option<i64>,
}

/// A watched budget's [`NeverAllows`], if it can never allow a disruption.
pub(super) fn budget_never(p: &SlimBudget) -> Option<Box<NeverAllows>> {
    let spec = p.spec.as_ref()?;
    let st = p.status.clone().unwrap_or_default();
    let facts = NeverAllows {
        generation: p.metadata.generation,
        max_unavailable: spec.max_unavailable.clone(),
        min_available: spec.min_available.clone(),
        observed_generation: st.observed_generation,
        expected_pods: st.expected_pods,
        current_healthy: st.current_healthy,
        desired_healthy: st.desired_healthy,
        disruptions_allowed: st.disruptions_allowed,
    };
    let mut b = PodDisruptionBudget::default();
    facts.apply(&mut b);
    // A disruption under way explains an allowance of 0: judged with it, as the drain does.
    if let Some(status) = b.status.as_mut() {
        status.disrupted_pods = st.disrupted_pods.clone();
    }
    never_allows_now(&b).map(|_| Box::new(facts))
}

fn never_budget<K>(_: &K) -> Option<Box<NeverAllows>> {
    None
}

pub(super) type SlimBudget = Slim<PodDisruptionBudget, BudgetSpec, BudgetStatus>;
pub(super) type SlimReplicas<K> = Slim<K, Scale, Ready>;

pub(super) fn budget_health(p: &SlimBudget) -> Health {
    let s = p.status.clone().unwrap_or_default();
    Health::Budget {
        healthy: s.current_healthy,
        desired: s.desired_healthy,
    }
}

/// `spec.replicas` defaults to 1, as in the API.
pub(super) fn replicas<K>(o: &SlimReplicas<K>) -> Health {
    Health::Replicas {
        ready: o
            .status
            .as_ref()
            .and_then(|s| s.ready_replicas)
            .unwrap_or(0),
        want: o.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1),
    }
}

pub(super) fn budget_selector(p: &SlimBudget) -> Option<&LabelSelector> {
    p.spec.as_ref().and_then(|s| s.selector.as_ref())
}

fn no_selector<K>(_: &K) -> Option<&LabelSelector> {
    None
}

pub(super) fn budget_disrupted(p: &SlimBudget) -> Disrupted {
    p.status
        .as_ref()
        .and_then(|s| s.disrupted_pods.clone())
        .unwrap_or_default()
}

fn nothing_disrupted<K>(_: &K) -> Disrupted {
    Disrupted::new()
}

/// What a watch keeps of each object of kind `K`, read by these functions.
pub(super) struct Keep<K> {
    pub(super) health: fn(&K) -> Health,
    pub(super) selector: fn(&K) -> Option<&LabelSelector>,
    pub(super) disrupted: fn(&K) -> Disrupted,
    pub(super) never: fn(&K) -> Option<Box<NeverAllows>>,
    pub(super) allowed: fn(&K) -> i32,
}

/// What a watch keeps of a budget: its health, selector, disrupted pods, whether it can never
/// allow a disruption, and the disruptions it allows now.
pub(super) fn keep_budget() -> Keep<SlimBudget> {
    Keep {
        health: budget_health,
        selector: budget_selector,
        disrupted: budget_disrupted,
        never: budget_never,
        allowed: |p| p.status.as_ref().map_or(0, |s| s.disruptions_allowed),
    }
}

/// What a watch keeps of a ReplicaSet or StatefulSet: its replicas' health, nothing else.
pub(super) fn keep_scale<K>() -> Keep<SlimReplicas<K>> {
    Keep {
        health: replicas::<K>,
        selector: no_selector,
        disrupted: nothing_disrupted,
        never: never_budget,
        allowed: |_| 0,
    }
}
