//! The drain preview of one node, before scheduling: what its drain would evict, leave and
//! refuse (the drain's own rule, [`drain::classify`]), what the Eviction API would answer for
//! each pod to evict (the budgets that select it), and the node's duration estimate.
//!
//! Owns the per-pod problems a drain meets and the drain's estimate. Pure: it must never do
//! I/O; the cluster is the one [`super::Cluster`] read.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use super::estimate::Measured;
use super::{
    budget_name, labels, pod_name, terminal, Cluster, Estimate, Options, PlanProblem, PlanStep,
    PlanVolume, PodPlan, ProblemKind, Severity, Skipped, DEFAULT_DETACH_SECONDS,
    DEFAULT_GRACE_SECONDS,
};
use crate::budgets::never_allows;
use crate::config::{BlockCause, BlockPolicy, Config};
use crate::drain::{self, Disposition, PodRef, Reason};
use crate::node::{LastCycle, NodeView};

/// The cluster's pods by node, and its budgets by namespace with the live pods each selects.
pub(super) struct Index<'a> {
    /// Each node's pods, by namespace and name.
    pods_by_node: BTreeMap<&'a str, Vec<&'a Pod>>,
    /// How many live pods each budget (`namespace/name`) selects: what `minAvailable` is
    /// weighed against.
    budget_pods: BTreeMap<String, usize>,
    /// The budgets of each namespace.
    budgets_by_ns: BTreeMap<&'a str, Vec<&'a PodDisruptionBudget>>,
}

impl<'a> Index<'a> {
    /// Indexes the pods and budgets of `cluster`.
    pub(super) fn of(cluster: &'a Cluster) -> Index<'a> {
        let mut pods_by_node: BTreeMap<&str, Vec<&Pod>> = BTreeMap::new();
        for p in &cluster.pods {
            if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
                pods_by_node.entry(n).or_default().push(p);
            }
        }
        // By namespace and name, whatever order the server listed them in.
        for pods in pods_by_node.values_mut() {
            pods.sort_by_key(|p| (p.metadata.namespace.clone(), p.metadata.name.clone()));
        }
        let mut live_by_ns: BTreeMap<&str, Vec<&Pod>> = BTreeMap::new();
        for p in &cluster.pods {
            if !terminal(p) && p.metadata.deletion_timestamp.is_none() {
                let ns = p.metadata.namespace.as_deref().unwrap_or_default();
                live_by_ns.entry(ns).or_default().push(p);
            }
        }
        let budget_pods = cluster
            .budgets
            .iter()
            .map(|b| {
                let ns = b.metadata.namespace.as_deref().unwrap_or_default();
                let sel = b.spec.as_ref().and_then(|s| s.selector.as_ref());
                let n = live_by_ns.get(ns).map_or(0, |pods| {
                    pods.iter()
                        .filter(|q| crate::selector::selector_matches(sel, &labels(q)))
                        .count()
                });
                (budget_name(b), n)
            })
            .collect();
        let mut budgets_by_ns: BTreeMap<&str, Vec<&PodDisruptionBudget>> = BTreeMap::new();
        for b in &cluster.budgets {
            let ns = b.metadata.namespace.as_deref().unwrap_or_default();
            budgets_by_ns.entry(ns).or_default().push(b);
        }
        Index {
            pods_by_node,
            budget_pods,
            budgets_by_ns,
        }
    }

    /// The pods on `node`.
    fn pods(&self, node: &str) -> &[&'a Pod] {
        self.pods_by_node.get(node).map_or(&[], Vec::as_slice)
    }

    /// The budgets that may select `p` (`namespace/name`), with the first of them.
    fn covering(&self, p: &Pod) -> (Vec<String>, Option<&'a PodDisruptionBudget>) {
        let ns = p.metadata.namespace.as_deref().unwrap_or_default();
        let pod_labels = labels(p);
        let covering: Vec<&PodDisruptionBudget> = self
            .budgets_by_ns
            .get(ns)
            .into_iter()
            .flatten()
            .copied()
            .filter(|b| {
                crate::selector::budget_may_select(
                    b.spec.as_ref().and_then(|s| s.selector.as_ref()),
                    &pod_labels,
                )
            })
            .collect();
        (
            covering.iter().map(|b| budget_name(b)).collect(),
            covering.first().copied(),
        )
    }
}

/// The drain preview of one node, before scheduling.
pub(super) struct Preview {
    /// The pods it would evict.
    pub(super) evict: Vec<PodPlan>,
    /// The pods it would leave, with why.
    pub(super) skip: Vec<Skipped>,
    /// The pods it would refuse to evict, failing the node at once.
    pub(super) refuse: Vec<Skipped>,
    /// What its drain would meet, in the order of its pods.
    pub(super) problems: Vec<PlanProblem>,
    /// Its duration estimate.
    pub(super) estimate: Estimate,
    /// Its drain is predicted to fail.
    pub(super) fails: bool,
    /// Its drain's steps.
    pub(super) steps: Vec<PlanStep>,
    /// The volumes its drain would wait to see detached.
    pub(super) volumes: Vec<PlanVolume>,
}

/// A preview under way: the pods sorted so far.
#[derive(Default)]
struct Sorting {
    evict: Vec<PodPlan>,
    skip: Vec<Skipped>,
    refuse: Vec<Skipped>,
    problems: Vec<PlanProblem>,
    /// A budget holds one of the evictions.
    held: bool,
    /// The longest grace period of the pods to evict, and that pod.
    longest: Option<(i64, String)>,
    /// The drain's steps ([`Sorting::order`]).
    steps: Vec<PlanStep>,
    /// The volumes it would wait for.
    volumes: Vec<PlanVolume>,
    /// The steps that wait for volumes to detach.
    detach_waits: i64,
    /// The sum over the steps of each one's longest grace period.
    stepped_grace: Option<i64>,
}

/// Previews the drain of `view` and estimates its duration.
pub(super) fn preview(
    view: &NodeView,
    index: &Index,
    cluster: &Cluster,
    config: &Config,
    opts: &Options,
    measured: &Measured,
) -> Preview {
    let node = view.name.as_str();
    let mut sorting = Sorting::default();
    let mut to_evict = Vec::new();
    for p in index.pods(node) {
        let name = pod_name(p);
        let ds_exists = match (drain::controller_of(p), p.metadata.namespace.as_deref()) {
            (Some(("DaemonSet", ds)), Some(ns)) => cluster
                .daemon_sets
                .contains(&(ns.to_string(), ds.to_string())),
            _ => false,
        };
        match drain::classify(p, &config.drain, config.drain_pod_selector(), ds_exists) {
            Disposition::Skip(reason) => sorting.skip(node, name, reason),
            Disposition::Refuse(reason) => sorting.refuse(node, name, reason),
            Disposition::Evict => {
                sorting.evict(node, p, name, index, config);
                to_evict.push(*p);
            }
        }
    }
    sorting.order(node, &to_evict, cluster, config);
    sorting.finish(view, config, opts, measured)
}

impl Sorting {
    /// A pod the drain leaves: a warning when it goes down with the reboot unevicted.
    fn skip(&mut self, node: &str, name: String, reason: Reason) {
        if reason == Reason::OutsidePodSelector {
            self.problems.push(
                PlanProblem::new(
                    Severity::Warns,
                    ProblemKind::OutsidePodSelector,
                    format!(
                        "node {node}: pod {name} is {}: the drain leaves it, and it goes down with the reboot without an eviction (its budget is not asked)",
                        reason.text()
                    ),
                )
                .on(node, &name),
            );
        }
        self.skip.push(Skipped { pod: name, reason });
    }

    /// A pod the drain refuses to evict: the node fails at once.
    fn refuse(&mut self, node: &str, name: String, reason: Reason) {
        self.refuse.push(Skipped {
            pod: name.clone(),
            reason,
        });
        let kind = match reason {
            Reason::Unreplicated => ProblemKind::Unreplicated,
            Reason::EmptyDir => ProblemKind::EmptyDir,
            _ => ProblemKind::DaemonSet,
        };
        self.problems.push(
            PlanProblem::new(
                Severity::Fails,
                kind,
                format!(
                    "node {node}: pod {name} {}: the drain fails at once",
                    match reason {
                        Reason::DaemonSetNotIgnored => format!("is a {}", reason.text()),
                        _ => reason.text().to_string(),
                    }
                ),
            )
            .on(node, &name),
        );
    }

    /// A pod the drain evicts: its grace period, and what its budgets would answer.
    fn evict(&mut self, node: &str, p: &Pod, name: String, index: &Index, config: &Config) {
        let cfg = &config.drain;
        let grace = cfg.grace_period.map_or_else(
            || {
                p.spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
                    .unwrap_or(DEFAULT_GRACE_SECONDS)
            },
            |g| g.as_millis() / 1000,
        );
        if self.longest.as_ref().is_none_or(|(g, _)| grace > *g) {
            self.longest = Some((grace, name.clone()));
        }
        let (names, first) = index.covering(p);
        // The Eviction API lets a completed pod go whatever its budgets say.
        let problem = if terminal(p) {
            None
        } else {
            budget_problem(node, &name, &names, first, index, config)
        };
        if let Some(mut problem) = problem {
            self.held = true;
            if cfg.force_delete_after_timeout {
                problem.severity = Severity::Warns;
                problem.kind = ProblemKind::ForceDelete;
                problem.message = format!(
                    "{}; drain.forceDeleteAfterTimeout deletes it around the budget after {}",
                    problem.message, cfg.timeout
                );
            } else if problem.kind != ProblemKind::BudgetAllowsNoneNow {
                problem.message = format!(
                    "{}: the drain fails at drain.timeout {}",
                    problem.message, cfg.timeout
                );
            }
            self.problems.push(problem);
        }
        self.evict.push(PodPlan {
            pod: name,
            grace_seconds: grace,
            budgets: names,
        });
    }

    /// The drain's steps, as the drain orders them ([`drain::order::order`]), from the pods
    /// to evict and the volumes of their claims; a pod a rule skips leaves the evicted for
    /// the skipped (with a warning), a pod a rule waits for leaves them for its step.
    fn order(&mut self, node: &str, pods: &[&Pod], cluster: &Cluster, config: &Config) {
        let volumes_of = |p: &Pod| -> Vec<String> {
            let ns = p.metadata.namespace.clone().unwrap_or_default();
            drain::claims_of(p)
                .into_iter()
                .filter_map(|c| cluster.claims.get(&(ns.clone(), c))?.clone().ok())
                .collect()
        };
        let mut members = Vec::new();
        for p in pods {
            let pvs = volumes_of(p);
            for pv in &pvs {
                self.volumes.push(PlanVolume {
                    pod: pod_name(p),
                    pv: pv.clone(),
                });
            }
            members.push(drain::order::Member::of(p, !pvs.is_empty()));
        }
        let with_volumes: Vec<PodRef> = members
            .iter()
            .filter(|m| m.volumes)
            .map(|m| m.pod.clone())
            .collect();
        let o = drain::order::order(&members, &config.drain.order, &cluster.namespaces);
        let grace: BTreeMap<String, i64> = self
            .evict
            .iter()
            .map(|p| (p.pod.clone(), p.grace_seconds))
            .collect();
        let mut stepped = None::<i64>;
        for s in &o.steps {
            let evict: Vec<String> = s.evict.iter().map(|p| p.to_string()).collect();
            let longest = evict.iter().filter_map(|p| grace.get(p)).max().copied();
            if let Some(g) = longest {
                stepped = Some(stepped.unwrap_or(0) + g);
            }
            if s.pods().any(|p| with_volumes.contains(p)) {
                self.detach_waits += 1;
            }
            self.steps.push(PlanStep {
                label: s.label.clone(),
                evict,
                await_completion: s.await_completion.iter().map(|p| p.to_string()).collect(),
            });
        }
        self.stepped_grace = stepped;
        let not_evicted: Vec<String> = o
            .skipped
            .iter()
            .chain(o.steps.iter().flat_map(|s| &s.await_completion))
            .map(|p| p.to_string())
            .collect();
        self.evict.retain(|p| !not_evicted.contains(&p.pod));
        for p in &o.skipped {
            let name = p.to_string();
            self.problems.push(
                PlanProblem::new(
                    Severity::Warns,
                    ProblemKind::OrderSkip,
                    format!(
                        "node {node}: pod {name} is {}: it goes down with the reboot without an eviction (its budget is not asked)",
                        Reason::OrderSkip.text()
                    ),
                )
                .on(node, &name),
            );
            self.skip.push(Skipped {
                pod: name,
                reason: Reason::OrderSkip,
            });
        }
    }

    /// The preview, with the node's estimate: drain, then reboot and gate unless it fails.
    fn finish(
        self,
        view: &NodeView,
        config: &Config,
        opts: &Options,
        measured: &Measured,
    ) -> Preview {
        let cfg = &config.drain;
        let refused = !self.refuse.is_empty();
        let (drain_seconds, drain_basis) = self.drain_estimate(view, config);
        let (detach_seconds, detach_basis) = self.detach_estimate(view, config);
        let fails = refused || (self.held && !cfg.force_delete_after_timeout);
        let (reboot, gate) = measured.reboot_and_gate(Some(view), opts);
        let (reboot_seconds, gate_seconds) = if fails {
            (0, 0)
        } else {
            (reboot.seconds, gate.seconds)
        };
        Preview {
            evict: self.evict,
            skip: self.skip,
            refuse: self.refuse,
            problems: self.problems,
            steps: self.steps,
            volumes: self.volumes,
            estimate: Estimate {
                drain_seconds,
                drain_basis,
                detach_seconds,
                detach_basis,
                reboot_seconds,
                reboot_basis: reboot.basis,
                gate_seconds,
                gate_basis: gate.basis,
                total_seconds: drain_seconds + reboot_seconds + gate_seconds,
            },
            fails,
        }
    }

    /// The drain's seconds and their basis: none when refused, `drain.timeout` when a budget
    /// holds an eviction, else as measured on the node's last cycle, else the longest grace
    /// period of its pods to evict (capped by `drain.timeout`).
    fn drain_estimate(&self, view: &NodeView, config: &Config) -> (i64, String) {
        let cfg = &config.drain;
        let timeout = cfg.timeout.as_millis() / 1000;
        let refused = !self.refuse.is_empty();
        let (seconds, basis) = if refused {
            (
                0,
                "the drain is refused at once (see the problems)".to_string(),
            )
        } else if self.held {
            (
                timeout,
                format!("drain.timeout {}: a budget holds an eviction", cfg.timeout),
            )
        } else if self.steps.len() > 1 || self.detach_waits > 0 {
            // Steps run one after another, each as long as its longest grace period, then the
            // wait for its volumes.
            let (detach, _) = self.detach_estimate(view, config);
            let g = self.stepped_grace.unwrap_or(0);
            (
                (g + detach).min(timeout + detach),
                format!(
                    "{} steps, each its longest grace period ({g}s in all), and {detach}s waiting for volumes to detach",
                    self.steps.len()
                ),
            )
        } else {
            match &self.longest {
                None => (0, "no pod to evict".to_string()),
                Some((g, pod)) if *g > timeout => (
                    timeout,
                    format!(
                        "drain.timeout {} (pod {pod} has {g}s of grace)",
                        cfg.timeout
                    ),
                ),
                Some((g, pod)) => (
                    *g,
                    if cfg.grace_period.is_some() {
                        format!("drain.gracePeriod {g}s")
                    } else {
                        format!("the longest grace period of the pods to evict: {g}s (pod {pod})")
                    },
                ),
            }
        };
        // A drain this node's last cycle measured replaces the grace-period rule: it counts
        // what the rule cannot see (budgets pacing the evictions, replacements starting, pods
        // that exit before their grace period ends). A drain predicted to be refused or held
        // stays so.
        match (&view.history.last_cycle, refused || self.held) {
            (
                Some(LastCycle {
                    drain_seconds: Some(d),
                    ..
                }),
                false,
            ) => (
                d.round() as i64,
                format!(
                    "measured on its last cycle{} (the rule says {seconds}s: {basis})",
                    view.history.last_reboot.map_or(String::new(), |w| format!(
                        " ({})",
                        w.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                    ))
                ),
            ),
            _ => (seconds, basis),
        }
    }
}

impl Sorting {
    /// The wait for volumes to detach in the node's drain: as measured on its last cycle,
    /// else [`DEFAULT_DETACH_SECONDS`] per step with volumes; none without
    /// `drain.volumes.waitForDetach` or volumes.
    fn detach_estimate(&self, view: &NodeView, config: &Config) -> (i64, String) {
        if !config.drain.volumes.wait_for_detach {
            return (0, "drain.volumes.waitForDetach is false".into());
        }
        if self.detach_waits == 0 {
            return (0, "no volume to detach".into());
        }
        match view
            .history
            .last_cycle
            .as_ref()
            .and_then(|c| c.detach_seconds)
        {
            Some(d) => (d.round() as i64, "measured on its last cycle".into()),
            None => (
                self.detach_waits * DEFAULT_DETACH_SECONDS,
                format!(
                    "{} step(s) with volumes, {DEFAULT_DETACH_SECONDS}s each (no measured cycle)",
                    self.detach_waits
                ),
            ),
        }
    }
}

/// What the budgets selecting a pod to evict (`names`, the first `first`) would make of its
/// eviction: 500 for overlapping budgets, a budget that can never allow it, one that allows
/// none now; `None` when the eviction would go through.
fn budget_problem(
    node: &str,
    name: &str,
    names: &[String],
    first: Option<&PodDisruptionBudget>,
    index: &Index,
    config: &Config,
) -> Option<PlanProblem> {
    let problem = |kind, message| PlanProblem {
        budgets: names.to_vec(),
        ..PlanProblem::new(Severity::Fails, kind, message).on(node, name)
    };
    if names.len() > 1 {
        return Some(problem(
            ProblemKind::OverlappingBudgets,
            format!(
                "node {node}: pod {name} is selected by {} budgets ({}): the Eviction API answers 500 to every eviction of it",
                names.len(),
                names.join(", ")
            ),
        ));
    }
    let b = first?;
    let selects = index.budget_pods.get(&names[0]).copied().unwrap_or(0);
    if let Some(why) = never_allows(b, selects) {
        return Some(problem(
            ProblemKind::BudgetNeverAllows,
            format!(
                "node {node}: pod {name} is protected by PodDisruptionBudget {} that can never allow a disruption ({why}); {}",
                names[0],
                held_outcome(config, BlockCause::Never)
            ),
        ));
    }
    let allowed = b.status.as_ref().map(|s| s.disruptions_allowed);
    (allowed == Some(0)).then(|| {
        problem(
            ProblemKind::BudgetAllowsNoneNow,
            format!(
                "node {node}: pod {name} is protected by PodDisruptionBudget {} that allows no disruption now (status.disruptionsAllowed 0); {}",
                names[0],
                held_outcome(config, BlockCause::Budget)
            ),
        )
    })
}

/// What the drain does about a pod held for `cause`, as `drain.whenBlocked` says.
fn held_outcome(config: &Config, cause: BlockCause) -> String {
    let d = &config.drain;
    match (d.when_blocked.policy(cause, d.force_delete_after_timeout), cause) {
        (BlockPolicy::Fail, _) => format!(
            "drain.whenBlocked.{cause} is fail: the node fails at its first refused eviction"
        ),
        (BlockPolicy::Quarantine, _) => format!(
            "drain.whenBlocked.{cause} is quarantine: at its first refused eviction the node fails and stays cordoned with its pods, labelled rollboot.dev/quarantined={cause}"
        ),
        (BlockPolicy::Wait, BlockCause::Never) if d.force_delete_after_timeout => format!(
            "drain.whenBlocked.{cause} is wait: the pod is deleted around its budget at drain.timeout {}",
            d.timeout
        ),
        (BlockPolicy::Wait, BlockCause::Never) => format!(
            "drain.whenBlocked.{cause} is wait: the drain fails at drain.timeout {}",
            d.timeout
        ),
        (BlockPolicy::Wait, _) => format!(
            "its eviction waits, and the drain fails at drain.timeout {} unless the budget recovers",
            d.timeout
        ),
    }
}
