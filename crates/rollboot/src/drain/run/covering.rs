//! The budgets covering a drain's pods, as the Events of refused evictions name them.
//!
//! Owns the one read of the budgets covering the drained pods (from the workload watches or a
//! list, matched to each pod by its labels, [`Covering`]), the Event that says the budgets whose
//! selector cannot be evaluated, and the reading of a refusing budget's `status.disruptedPods`
//! for disruptions that are not happening ([`crate::budgets::phantom_disruptions`], read fresh
//! for each refusal). It must never act on what it reads: it only names and explains.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use super::NodeDrain;
use crate::budgets::{never_allows_now, phantom_disruptions, OwnEviction};
use crate::drain::api::{DrainApi, DrainError};
use crate::drain::pods::PodRef;
use crate::selector::{budget_may_select, selector_problem};

/// One budget covering a pod, as an Event about a refused eviction needs it.
#[derive(Clone, Debug, Default)]
pub(super) struct Covering {
    /// `namespace/name`.
    pub(super) name: String,
    /// `status.disruptedPods`.
    pub(super) disrupted: BTreeMap<String, DateTime<Utc>>,
    /// Why it can never allow a disruption, if it cannot ([`never_allows_now`]).
    pub(super) never: Option<String>,
}

impl<A: DrainApi> NodeDrain<'_, A> {
    /// The budgets that may cover `pod` (read once for all the drained pods, see
    /// [`NodeDrain::read_covering`]).
    pub(super) async fn covering_of(&self, pod: &PodRef) -> Result<Vec<Covering>, DrainError> {
        let covering = self
            .covering
            .get_or_try_init(|| self.read_covering())
            .await?;
        Ok(covering.get(pod).cloned().unwrap_or_default())
    }

    /// Reads the budgets of the drained pods' namespaces (all at once) and matches them to
    /// each pod; says in one Event the budgets whose selector cannot be evaluated (taken to
    /// cover the pods).
    async fn read_covering(&self) -> Result<BTreeMap<PodRef, Vec<Covering>>, DrainError> {
        let mut labels_by_ns: BTreeMap<String, Vec<BTreeMap<String, String>>> = BTreeMap::new();
        for p in self.found.drained() {
            labels_by_ns
                .entry(p.metadata.namespace.clone().unwrap_or_default())
                .or_default()
                .push(p.metadata.labels.clone().unwrap_or_default());
        }
        let reads = labels_by_ns.iter().map(|(ns, labels)| async move {
            Ok::<_, DrainError>((ns, self.api.budgets(ns, labels).await?))
        });
        let by_ns: BTreeMap<&String, Vec<PodDisruptionBudget>> =
            futures::future::try_join_all(reads)
                .await?
                .into_iter()
                .collect();
        let mut covering: BTreeMap<PodRef, Vec<Covering>> = BTreeMap::new();
        for p in self.found.drained() {
            let r = PodRef::of(p);
            let labels = p.metadata.labels.clone().unwrap_or_default();
            let budgets = by_ns[&r.namespace]
                .iter()
                .filter(|b| {
                    budget_may_select(b.spec.as_ref().and_then(|s| s.selector.as_ref()), &labels)
                })
                .map(|b| covering_budget(&r.namespace, b))
                .collect();
            covering.insert(r, budgets);
        }
        self.say_unreadable(&by_ns).await;
        Ok(covering)
    }

    /// One Event for all the budgets whose selector cannot be evaluated: Events about one node
    /// with one reason are one series.
    async fn say_unreadable(&self, by_ns: &BTreeMap<&String, Vec<PodDisruptionBudget>>) {
        let node = self.node;
        let mut unreadable = Vec::new();
        for (ns, budgets) in by_ns {
            for b in budgets {
                let Some(why) = b
                    .spec
                    .as_ref()
                    .and_then(|s| s.selector.as_ref())
                    .and_then(selector_problem)
                else {
                    continue;
                };
                let name = format!("{ns}/{}", b.metadata.name.as_deref().unwrap_or_default());
                tracing::warn!(budget = %name, why, "a PodDisruptionBudget's selector cannot be evaluated; taken to cover the node's pods");
                unreadable.push(format!("PodDisruptionBudget {name} ({why})"));
            }
        }
        if !unreadable.is_empty() {
            let note = format!(
                "selector cannot be evaluated: {}; rollboot takes each to cover the pods of node \
                 {node} and names it among the budgets that may refuse their evictions",
                unreadable.join("; ")
            );
            self.api
                .event(None, true, "BudgetSelectorUnreadable", note)
                .await;
        }
    }

    /// For a refused eviction of `pod`: the entries of `budgets` for pods whose deletion never
    /// happened (see [`phantom_disruptions`]).
    pub(super) async fn phantoms(
        &self,
        pod: &PodRef,
        budgets: Vec<Covering>,
    ) -> Result<Vec<String>, DrainError> {
        // `disruptedPods` changes with every eviction admitted: read now, not taken from the
        // drain's first read of its budgets (`covering`), which may predate the eviction whose
        // deletion never happened (a refusal, then an eviction cut off and refused again).
        let labels = self
            .found
            .drained()
            .find(|p| PodRef::of(p) == *pod)
            .and_then(|p| p.metadata.labels.clone())
            .unwrap_or_default();
        let now_read = self.api.budgets(&pod.namespace, &[labels]).await?;
        let mut notes = Vec::new();
        for mut b in budgets {
            if let Some(fresh) = now_read
                .iter()
                .map(|f| covering_budget(&pod.namespace, f))
                .find(|f| f.name == b.name)
            {
                b.disrupted = fresh.disrupted;
            }
            let mut deleting = BTreeMap::new();
            for listed in b.disrupted.keys() {
                deleting.insert(
                    listed.clone(),
                    self.api.pod_deleting(&pod.namespace, listed).await?,
                );
            }
            // Read after the pods' states: an eviction answered meanwhile is in it.
            let ours: BTreeMap<String, OwnEviction> = self
                .own
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .filter(|(p, _)| p.namespace == pod.namespace)
                .map(|(p, s)| (p.name.clone(), *s))
                .collect();
            notes.extend(phantom_disruptions(
                &b.name,
                &b.disrupted,
                &deleting,
                &ours,
                Utc::now(),
            ));
        }
        Ok(notes)
    }
}

/// The budgets' names, for an Event.
pub(super) fn names(budgets: &[Covering]) -> String {
    budgets
        .iter()
        .map(|b| b.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Budget `b` of `namespace` as an Event about a refused eviction needs it.
fn covering_budget(namespace: &str, b: &PodDisruptionBudget) -> Covering {
    Covering {
        name: format!(
            "{namespace}/{}",
            b.metadata.name.clone().unwrap_or_default()
        ),
        disrupted: b
            .status
            .as_ref()
            .and_then(|s| s.disrupted_pods.as_ref())
            .map(|d| {
                d.iter()
                    .map(|(pod, t)| (pod.clone(), crate::time::from_jiff(t.0)))
                    .collect()
            })
            .unwrap_or_default(),
        never: never_allows_now(b),
    }
}
