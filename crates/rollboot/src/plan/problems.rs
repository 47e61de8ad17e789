//! The problems of a plan that no single drain meets: the cluster-wide blockers, as the
//! controller computes them ([`decide::blockers`]), Prometheus's answer, the nodes that get no
//! opening, and the slots failed nodes hold.
//!
//! Owns those problems' kinds, severities and sentences. Pure: it must never do I/O (the
//! cluster and Prometheus's answer are those [`super::read`] got).

use chrono::{DateTime, Utc};

use super::schedule::{self, Unscheduled};
use super::{labels, pod_name, Cluster, PlanProblem, ProblemKind, Severity};
use crate::config::Config;
use crate::controller::decide::{self, Blocker};
use crate::lock::LockRecord;
use crate::node::NodeView;

/// For each `blockers.podSelectors` selector (as written), the pods of `cluster` that match it
/// (`namespace/name`): what the controller's blocker counts, named (`plan` and `explain` say
/// them).
pub(crate) fn blocking_pods(cluster: &Cluster, config: &Config) -> Vec<(String, Vec<String>)> {
    config
        .blockers
        .pod_selectors
        .iter()
        .zip(config.blocking_pod_selectors())
        .map(|(text, sel)| {
            let pods = cluster
                .pods
                .iter()
                .filter(|p| sel.matches(&labels(p)))
                .map(pod_name)
                .collect();
            (text.clone(), pods)
        })
        .collect()
}

/// The cluster-wide blockers, as [`decide::blockers`] computes them (a closed window is not
/// one here: the schedule waits for the next opening), with the pods each blocking selector
/// matches.
pub(super) fn cluster_blockers(
    cluster: &Cluster,
    record: &LockRecord,
    foreign: Option<&str>,
    config: &Config,
    now: DateTime<Utc>,
) -> Vec<PlanProblem> {
    let matching = blocking_pods(cluster, config);
    let counts: Vec<(String, usize)> = matching
        .iter()
        .map(|(s, pods)| (s.clone(), pods.len()))
        .collect();
    let nodes: Vec<&NodeView> = cluster.nodes.iter().collect();
    let snap = decide::Snapshot {
        maintained: &decide::NOT_MAINTAINED,
        headroom: None,
        nodes: &nodes,
        in_flight: &record.entries,
        foreign_holder: foreign,
        blocking_pods: &counts,
        now,
    };
    decide::blockers(&snap, config, now)
        .into_iter()
        .filter_map(|b| {
            let message = b.to_string();
            let p = |kind| PlanProblem::new(Severity::Blocks, kind, message.clone());
            Some(match b {
                Blocker::WindowClosed => return None,
                Blocker::LockHeldBy(_) => p(ProblemKind::LockHeld),
                Blocker::TooManyUnready { nodes, .. } => PlanProblem {
                    nodes,
                    ..p(ProblemKind::UnreadyNodes)
                },
                Blocker::TooManyFailures { nodes, .. } => PlanProblem {
                    nodes,
                    ..p(ProblemKind::FailedNodes)
                },
                Blocker::BlockingPods { selector, .. } => {
                    let pods = matching
                        .iter()
                        .find(|(s, _)| *s == selector)
                        .map(|(_, pods)| pods.clone())
                        .unwrap_or_default();
                    PlanProblem {
                        message: format!(
                            "{} pod(s) match the blocking selector `{selector}`: {}",
                            pods.len(),
                            pods.join(", ")
                        ),
                        pods,
                        ..p(ProblemKind::BlockingPods)
                    }
                }
                // Prometheus is asked by the read, not through the snapshot: see `alerts`.
                // Prometheus is asked by the read; Alertmanager is not asked by `plan`.
                Blocker::Alerts { .. }
                | Blocker::AlertsUnknown { .. }
                | Blocker::AlertmanagerAlerts { .. }
                | Blocker::AlertmanagerUnknown { .. } => return None,
            })
        })
        .collect()
}

/// The problem Prometheus's answer makes, if any: firing alerts block (as the controller's
/// blocker says it), an unanswered query warns (from where the plan runs, an in-cluster
/// Prometheus is often out of reach; the controller does not start while it cannot ask).
pub(super) fn alerts(
    answer: &Option<(String, Result<Vec<String>, String>)>,
) -> Option<PlanProblem> {
    let (url, answer) = answer.as_ref()?;
    match answer {
        Ok(names) if names.is_empty() => None,
        Ok(names) => Some(PlanProblem::new(
            Severity::Blocks,
            ProblemKind::Alerts,
            Blocker::Alerts {
                names: names.clone(),
            }
            .to_string(),
        )),
        Err(error) => Some(PlanProblem::new(
            Severity::Warns,
            ProblemKind::AlertsUnknown,
            format!(
                "Prometheus at {url} could not be asked from here ({error}): the controller asks it before each start and starts nothing while it cannot; `rollboot plan --prometheus-url` asks another address (a port-forward)"
            ),
        )),
    }
}

/// One problem per failed node rollboot left cordoned ([`decide::holds_a_slot`]): it holds one
/// of `maxNodes`' slots (and of its group's). It blocks when nodes get no slot because of
/// them, else it warns.
pub(super) fn slots_held(
    cluster: &Cluster,
    record: &LockRecord,
    config: &Config,
    predicted: &schedule::RolloutSchedule,
) -> Vec<PlanProblem> {
    let starved: Vec<String> = predicted
        .unscheduled
        .iter()
        .filter(|(_, u)| **u == Unscheduled::SlotsHeld)
        .map(|(n, _)| n.clone())
        .collect();
    let severity = if starved.is_empty() {
        Severity::Warns
    } else {
        Severity::Blocks
    };
    let then = if config.failures.return_to_service {
        "failures.returnToService uncordons it once its host is up and Ready"
    } else {
        "until an operator clears it (or failures.returnToService)"
    };
    cluster
        .nodes
        .iter()
        .filter(|n| decide::holds_a_slot(n) && !record.entries.contains_key(&n.name))
        .map(|n| {
            let waiting = if starved.is_empty() {
                String::new()
            } else {
                format!(
                    "; {} node(s) get no slot: {}",
                    starved.len(),
                    starved.join(", ")
                )
            };
            PlanProblem {
                node: Some(n.name.clone()),
                nodes: starved.clone(),
                ..PlanProblem::new(
                    severity,
                    ProblemKind::FailedHoldsSlot,
                    format!(
                        "node {} failed ({}) and rollboot left it cordoned: it holds one of \
                         maxNodes' {} slot(s){}, {then}{waiting}",
                        n.name,
                        n.failure_reason.as_deref().unwrap_or("no reason recorded"),
                        config.concurrency.max_nodes,
                        match config.group_limit() {
                            Some((key, _)) => format!(
                                " and of its group's ({key}={})",
                                n.labels.get(key).map_or("", String::as_str)
                            ),
                            None => String::new(),
                        },
                    ),
                )
            }
        })
        .collect()
}

/// One problem per node another actor takes out (`otherMaintenance`), and one naming the
/// nodes cordoned by someone else that `maxNodes` does not count (`concurrency.countCordoned`
/// false): both warn.
pub(super) fn other_actors(
    cluster: &Cluster,
    record: &LockRecord,
    config: &Config,
) -> Vec<PlanProblem> {
    let outside = |n: &&NodeView| !record.entries.contains_key(&n.name) && !n.deleting;
    let mut out: Vec<PlanProblem> = cluster
        .nodes
        .iter()
        .filter(outside)
        .filter_map(|n| Some((n, n.other_actor.as_deref()?)))
        .map(|(n, actor)| PlanProblem {
            node: Some(n.name.clone()),
            ..PlanProblem::new(
                Severity::Warns,
                ProblemKind::OtherMaintenance,
                format!(
                    "node {}: otherMaintenance: {actor}; rollboot leaves it alone{} and counts it                      against maxNodes while it is out",
                    n.name,
                    if n.flagged() {
                        " although it is flagged"
                    } else {
                        ""
                    }
                ),
            )
        })
        .collect();
    if !config.concurrency.count_cordoned {
        let cordoned: Vec<String> = cluster
            .nodes
            .iter()
            .filter(outside)
            .filter(|n| n.unschedulable && n.cordoned_by.is_none() && n.other_actor.is_none())
            .map(|n| n.name.clone())
            .collect();
        if !cordoned.is_empty() {
            out.push(PlanProblem {
                nodes: cordoned.clone(),
                ..PlanProblem::new(
                    Severity::Warns,
                    ProblemKind::CordonedByOthers,
                    format!(
                        "{} node(s) cordoned by someone else, not counted against maxNodes                          (concurrency.countCordoned is false): {}",
                        cordoned.len(),
                        cordoned.join(", ")
                    ),
                )
            });
        }
    }
    out
}

/// One problem naming the nodes that get no maintenance opening within the look-ahead
/// horizon, if any.
pub(super) fn no_opening(predicted: &schedule::RolloutSchedule) -> Option<PlanProblem> {
    let names: Vec<String> = predicted
        .unscheduled
        .iter()
        .filter(|(_, u)| **u == Unscheduled::NoOpening)
        .map(|(n, _)| n.clone())
        .collect();
    (!names.is_empty()).then(|| PlanProblem {
        nodes: names.clone(),
        ..PlanProblem::new(
            Severity::Blocks,
            ProblemKind::NoOpening,
            format!(
                "no maintenance opening within the look-ahead horizon for {} node(s): {}",
                names.len(),
                names.join(", ")
            ),
        )
    })
}
