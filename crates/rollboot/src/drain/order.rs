//! The order a drain's pods leave in: `drain.order`'s rules, or the default order. Pure.
//!
//! Owns how the pods a drain takes ([`Member`]: identity, labels, priority, whether they have
//! volumes to detach, whether they are already terminating) are cut into [`DrainStep`]s run one
//! after another, and which are left on the node ([`Behavior::Skip`]). The drain
//! ([`super::run`]) runs the steps, and `rollboot plan` shows them, from this one function, so
//! both tell the same story. It must never do I/O: namespaces' labels and the pods' volumes
//! are read by the caller and handed in.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;

use super::pods::PodRef;
use crate::config::{Behavior, OrderRule};

/// The priority from which a pod is one of the critical pods the default order drains last:
/// `system-cluster-critical` (2000000000) and `system-node-critical` (2000001000).
pub const CRITICAL_PRIORITY: i32 = 2_000_000_000;

/// What the order needs to know of one pod the drain takes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// The pod.
    pub pod: PodRef,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// `spec.priority` (0 without one).
    pub priority: i32,
    /// `spec.priorityClassName`.
    pub priority_class: String,
    /// It has volumes to detach before the reboot (ReadWriteOnce, attached).
    pub volumes: bool,
    /// It is terminating already (an earlier leader's eviction): waited for, not evicted.
    pub terminating: bool,
}

impl Member {
    /// The facts of `pod`; `volumes` as the caller found them.
    pub fn of(pod: &Pod, volumes: bool) -> Member {
        let spec = pod.spec.as_ref();
        Member {
            pod: PodRef::of(pod),
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            priority: spec.and_then(|s| s.priority).unwrap_or(0),
            priority_class: spec
                .and_then(|s| s.priority_class_name.clone())
                .unwrap_or_default(),
            volumes,
            terminating: pod.metadata.deletion_timestamp.is_some(),
        }
    }

    /// Whether the default order drains it last.
    pub fn critical(&self) -> bool {
        self.priority >= CRITICAL_PRIORITY
            || matches!(
                self.priority_class.as_str(),
                "system-cluster-critical" | "system-node-critical"
            )
    }
}

/// One step of a drain: its pods are evicted (or awaited) together, and the next step starts
/// when all of them are gone or replaced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DrainStep {
    /// What the step is, as a person reads it (`priority 0`, `volumes: ns/pod`,
    /// `drain.order[1] (order 10)`).
    pub label: String,
    /// The pods to evict.
    pub evict: Vec<PodRef>,
    /// The pods already terminating: waited for with the evicted.
    pub terminating: Vec<PodRef>,
    /// The pods waited for until they terminate on their own (`waitCompleted`).
    pub await_completion: Vec<PodRef>,
}

impl DrainStep {
    /// Every pod of the step.
    pub fn pods(&self) -> impl Iterator<Item = &PodRef> {
        self.evict
            .iter()
            .chain(&self.terminating)
            .chain(&self.await_completion)
    }

    fn add(&mut self, m: &Member, behavior: Behavior) {
        let list = match (behavior, m.terminating) {
            (_, true) => &mut self.terminating,
            (Behavior::WaitCompleted, false) => &mut self.await_completion,
            _ => &mut self.evict,
        };
        list.push(m.pod.clone());
    }
}

/// A drain's order: its steps, in order, and the pods it leaves on the node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Order {
    /// The steps, run one after another.
    pub steps: Vec<DrainStep>,
    /// The pods a rule says to leave on the node (`behavior: skip`).
    pub skipped: Vec<PodRef>,
}

/// The order of `members`: by `rules` when there are any (a pod takes the first rule that
/// matches it, `namespaces` giving its namespace's labels; unmatched pods are in group 0 and
/// evicted), else the default order (see [`crate::config::OrderRule`]).
pub fn order(
    members: &[Member],
    rules: &[OrderRule],
    namespaces: &BTreeMap<String, BTreeMap<String, String>>,
) -> Order {
    if rules.is_empty() {
        return default_order(members);
    }
    let none = BTreeMap::new();
    let mut groups: BTreeMap<i32, DrainStep> = BTreeMap::new();
    let mut skipped = Vec::new();
    for m in members {
        let ns = namespaces.get(&m.pod.namespace).unwrap_or(&none);
        let rule = rules
            .iter()
            .enumerate()
            .find(|(_, r)| r.matches(&m.labels, m.priority, ns));
        let (order, behavior, label) = match rule {
            Some((i, r)) => (r.order, r.behavior, format!("drain.order[{i}]")),
            None => (0, Behavior::Drain, "no rule".to_string()),
        };
        if behavior == Behavior::Skip && !m.terminating {
            skipped.push(m.pod.clone());
            continue;
        }
        let step = groups.entry(order).or_insert_with(|| DrainStep {
            label: format!("order {order}"),
            ..DrainStep::default()
        });
        if !step.label.contains(&label) {
            step.label = format!("{} {label}", step.label);
        }
        step.add(m, behavior);
    }
    Order {
        steps: groups.into_values().collect(),
        skipped,
    }
}

/// The default order: for the pods that are not critical, then for the critical ones, the
/// pods without volumes to detach a step per priority (lowest first), then the pods with
/// volumes one step each (lowest priority first, then by name).
fn default_order(members: &[Member]) -> Order {
    let mut steps = Vec::new();
    for critical in [false, true] {
        let tier: Vec<&Member> = members
            .iter()
            .filter(|m| m.critical() == critical)
            .collect();
        let mut by_priority: BTreeMap<i32, DrainStep> = BTreeMap::new();
        for m in tier.iter().filter(|m| !m.volumes) {
            by_priority
                .entry(m.priority)
                .or_insert_with(|| DrainStep {
                    label: format!(
                        "{}priority {}",
                        if critical { "critical, " } else { "" },
                        m.priority
                    ),
                    ..DrainStep::default()
                })
                .add(m, Behavior::Drain);
        }
        steps.extend(by_priority.into_values());
        let mut with_volumes: Vec<&&Member> = tier.iter().filter(|m| m.volumes).collect();
        with_volumes.sort_by(|a, b| (a.priority, &a.pod).cmp(&(b.priority, &b.pod)));
        for m in with_volumes {
            let mut step = DrainStep {
                label: format!(
                    "{}volumes: {}",
                    if critical { "critical, " } else { "" },
                    m.pod
                ),
                ..DrainStep::default()
            };
            step.add(m, Behavior::Drain);
            steps.push(step);
        }
    }
    Order {
        steps,
        skipped: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(name: &str, priority: i32, volumes: bool) -> Member {
        Member {
            pod: PodRef {
                namespace: "apps".into(),
                name: name.into(),
                uid: format!("uid-{name}"),
            },
            labels: BTreeMap::from([("app".into(), name.into())]),
            priority,
            priority_class: String::new(),
            volumes,
            terminating: false,
        }
    }

    fn names(step: &DrainStep) -> Vec<&str> {
        step.pods().map(|p| p.name.as_str()).collect()
    }

    #[test]
    fn the_default_order_drains_by_priority_then_volumes_one_at_a_time_then_critical_pods() {
        let mut node_agent = member("agent", 0, false);
        node_agent.priority_class = "system-node-critical".into();
        let members = [
            member("db-1", 10, true),
            member("web", 10, false),
            node_agent,
            member("batch", -5, false),
            member("db-0", 10, true),
            member("cache", 10, false),
            member("low-db", 0, true),
        ];
        let o = order(&members, &[], &BTreeMap::new());
        let steps: Vec<(String, Vec<&str>)> = o
            .steps
            .iter()
            .map(|s| (s.label.clone(), names(s)))
            .collect();
        assert_eq!(
            steps,
            vec![
                ("priority -5".into(), vec!["batch"]),
                ("priority 10".into(), vec!["web", "cache"]),
                ("volumes: apps/low-db".into(), vec!["low-db"]),
                ("volumes: apps/db-0".into(), vec!["db-0"]),
                ("volumes: apps/db-1".into(), vec!["db-1"]),
                ("critical, priority 0".into(), vec!["agent"]),
            ]
        );
        assert!(o.skipped.is_empty());
    }

    fn rule(yaml: &str) -> OrderRule {
        let mut r: OrderRule = yaml_serde::from_str(yaml).unwrap();
        r.compile().unwrap();
        r
    }

    #[test]
    fn rules_group_pods_by_the_first_match_in_ascending_order_and_leave_skipped_pods() {
        let rules = [
            rule("{podSelector: app=osd, order: 100}"),
            rule("{podSelector: app=job, behavior: waitCompleted, order: -1}"),
            rule("{namespaceSelector: tier=infra, behavior: skip}"),
            rule("{minPriority: 1000, order: 50}"),
        ];
        let mut infra = member("probe", 0, false);
        infra.pod.namespace = "infra".into();
        let mut terminating_osd = member("osd", 0, true);
        terminating_osd.terminating = true;
        let members = [
            member("web", 0, false),
            member("job", 0, false),
            terminating_osd,
            infra,
            member("prio", 2000, false),
            member("osd", 0, false),
        ];
        let namespaces = BTreeMap::from([(
            "infra".to_string(),
            BTreeMap::from([("tier".to_string(), "infra".to_string())]),
        )]);
        let o = order(&members, &rules, &namespaces);
        let labels: Vec<&str> = o.steps.iter().map(|s| s.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "order -1 drain.order[1]",
                "order 0 no rule",
                "order 50 drain.order[3]",
                "order 100 drain.order[0]"
            ]
        );
        assert_eq!(o.steps[0].await_completion.len(), 1, "{o:?}");
        assert!(o.steps[0].evict.is_empty());
        assert_eq!(names(&o.steps[1]), ["web"]);
        assert_eq!(names(&o.steps[2]), ["prio"]);
        // The terminating osd pod is waited for in its group, not evicted again.
        assert_eq!(o.steps[3].evict.len(), 1);
        assert_eq!(o.steps[3].terminating.len(), 1);
        assert_eq!(o.skipped.len(), 1);
        assert_eq!(o.skipped[0].name, "probe");
    }

    #[test]
    fn a_pod_outside_a_rules_priority_range_takes_the_next_rule() {
        let rules = [
            rule("{maxPriority: 99, order: 1}"),
            rule("{minPriority: 100, order: 2}"),
        ];
        let o = order(
            &[member("a", 99, false), member("b", 100, false)],
            &rules,
            &BTreeMap::new(),
        );
        assert_eq!(names(&o.steps[0]), ["a"]);
        assert_eq!(names(&o.steps[1]), ["b"]);
    }
}
