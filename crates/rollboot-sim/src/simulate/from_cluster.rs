//! `rollboot simulate --from-cluster`: the read of a live cluster into a
//! [`Snapshot`](crate::sim::snapshot::Snapshot), product-side (the simulator never reads a
//! live cluster).
//!
//! Owns only I/O, and only lists (paged, as `rollboot plan` reads: [`rollboot::plan::read`]):
//! Nodes, Pods, PodDisruptionBudgets, Deployments, ReplicaSets, StatefulSets and DaemonSets,
//! each trimmed to what a rollout depends on. It must never write to the cluster.

use chrono::{DateTime, Utc};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Node, Pod, PodSpec, PodTemplateSpec};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::Api;
use serde_json::json;

use crate::sim::snapshot::{
    Labels, Owner, SnapBudget, SnapController, SnapCycle, SnapNode, SnapPod, SnapTemplate,
    Snapshot, Taint, FORMAT,
};
use rollboot::plan::read::list_all;
use rollboot::status::FetchError;

/// A pod's grace period when its spec does not say (the API server's default).
const DEFAULT_GRACE: i64 = 30;

fn labels(md: &ObjectMeta) -> Labels {
    md.labels.clone().unwrap_or_default().into_iter().collect()
}

fn controller_of(md: &ObjectMeta) -> Option<Owner> {
    md.owner_references
        .as_ref()?
        .iter()
        .find(|o: &&OwnerReference| o.controller == Some(true))
        .map(|o| Owner {
            api_version: o.api_version.clone(),
            kind: o.kind.clone(),
            name: o.name.clone(),
            uid: o.uid.clone(),
        })
}

fn has_empty_dir(spec: Option<&PodSpec>) -> bool {
    spec.and_then(|s| s.volumes.as_ref())
        .is_some_and(|vs| vs.iter().any(|v| v.empty_dir.is_some()))
}

fn node_selector(spec: Option<&PodSpec>) -> Labels {
    spec.and_then(|s| s.node_selector.clone())
        .unwrap_or_default()
        .into_iter()
        .collect()
}

fn template(t: &PodTemplateSpec) -> SnapTemplate {
    SnapTemplate {
        labels: t.metadata.as_ref().map(labels).unwrap_or_default(),
        grace_seconds: t
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(DEFAULT_GRACE),
        empty_dir: has_empty_dir(t.spec.as_ref()),
        node_selector: node_selector(t.spec.as_ref()),
    }
}

fn int_or_string(v: &Option<IntOrString>) -> Option<serde_json::Value> {
    v.as_ref().map(|v| match v {
        IntOrString::Int(i) => json!(i),
        IntOrString::String(s) => json!(s),
    })
}

/// The snapshot form of a Node.
pub fn node(n: &Node) -> SnapNode {
    let spec = n.spec.clone().unwrap_or_default();
    SnapNode {
        name: n.metadata.name.clone().unwrap_or_default(),
        labels: labels(&n.metadata),
        unschedulable: spec.unschedulable == Some(true),
        ready: n
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
        taints: spec
            .taints
            .unwrap_or_default()
            .into_iter()
            .map(|t| Taint {
                key: t.key,
                value: t.value,
                effect: t.effect,
            })
            .collect(),
        last_cycle: rollboot::node::NodeView::from_node(n)
            .history
            .last_cycle
            .map(|c| SnapCycle {
                drain_seconds: c.drain_seconds,
                reboot_seconds: c.reboot_seconds,
                gate_seconds: c.gate_seconds,
                pod_exit_seconds: c.pod_exit_seconds,
            }),
    }
}

/// The spans of the nodes' last reboot cycles, as rollboot recorded them: from the cycle's
/// start to its end (`last-reboot`). A pod created in one of them is most likely a replacement
/// that cycle's drain caused.
fn last_cycles(nodes: &[Node]) -> Vec<(DateTime<Utc>, DateTime<Utc>)> {
    nodes
        .iter()
        .filter_map(|n| {
            let h = rollboot::node::NodeView::from_node(n).history;
            let (done, c) = (h.last_reboot?, h.last_cycle?);
            let secs = c.drain_seconds? + c.reboot_seconds? + c.gate_seconds?;
            Some((
                done - chrono::TimeDelta::milliseconds((secs * 1000.0) as i64),
                done,
            ))
        })
        .collect()
}

/// How long `p` took from its creation to Ready, in seconds: only for a pod created during one
/// of `cycles` (a replacement a drain caused: what a rehearsal's start delay stands for) that
/// is Ready and whose containers never restarted (after a restart, or a readiness that came
/// and went, its Ready condition dates that, not its start).
fn ready_seconds(p: &Pod, cycles: &[(DateTime<Utc>, DateTime<Utc>)]) -> Option<f64> {
    let created = rollboot::time::from_time(p.metadata.creation_timestamp.as_ref()?);
    if !cycles.iter().any(|(a, b)| (*a..=*b).contains(&created)) {
        return None;
    }
    let status = p.status.as_ref()?;
    let ready = status
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")?;
    let since = rollboot::time::from_time(ready.last_transition_time.as_ref()?);
    let restarted = status
        .container_statuses
        .iter()
        .flatten()
        .any(|c| c.restart_count > 0);
    let secs = (since - created).num_milliseconds() as f64 / 1000.0;
    (!restarted && secs >= 0.0).then_some(secs)
}

/// The snapshot form of a Pod; `cycles` are the nodes' last reboot cycles (see
/// [`ready_seconds`]).
pub fn pod(p: &Pod, cycles: &[(DateTime<Utc>, DateTime<Utc>)]) -> SnapPod {
    let spec = p.spec.as_ref();
    let status = p.status.as_ref();
    let phase = status
        .and_then(|s| s.phase.clone())
        .unwrap_or_else(|| "Pending".into());
    SnapPod {
        namespace: p.metadata.namespace.clone().unwrap_or_default(),
        name: p.metadata.name.clone().unwrap_or_default(),
        uid: p.metadata.uid.clone().unwrap_or_default(),
        labels: labels(&p.metadata),
        owner: controller_of(&p.metadata),
        node_name: spec.and_then(|s| s.node_name.clone()),
        phase: match phase.as_str() {
            "Pending" | "Running" | "Succeeded" | "Failed" => phase,
            _ => "Unknown".into(),
        },
        ready: status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True")),
        grace_seconds: spec
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(DEFAULT_GRACE),
        empty_dir: has_empty_dir(spec),
        mirror: p
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror")),
        deleting: p.metadata.deletion_timestamp.is_some(),
        node_selector: node_selector(spec),
        ready_seconds: ready_seconds(p, cycles),
    }
}

/// The snapshot form of a PodDisruptionBudget.
pub fn budget(b: &PodDisruptionBudget) -> SnapBudget {
    let spec = b.spec.clone().unwrap_or_default();
    SnapBudget {
        namespace: b.metadata.namespace.clone().unwrap_or_default(),
        name: b.metadata.name.clone().unwrap_or_default(),
        selector: spec
            .selector
            .as_ref()
            .and_then(|s| serde_json::to_value(s).ok()),
        min_available: int_or_string(&spec.min_available),
        max_unavailable: int_or_string(&spec.max_unavailable),
        unhealthy_pod_eviction_policy: spec.unhealthy_pod_eviction_policy,
    }
}

fn controller(
    md: &ObjectMeta,
    replicas: Option<i32>,
    selector: &impl serde::Serialize,
    t: &PodTemplateSpec,
) -> SnapController {
    SnapController {
        namespace: md.namespace.clone().unwrap_or_default(),
        name: md.name.clone().unwrap_or_default(),
        uid: md.uid.clone().unwrap_or_default(),
        labels: labels(md),
        owner: controller_of(md),
        replicas: replicas.map(i64::from),
        selector: serde_json::to_value(selector).unwrap_or_default(),
        template: template(t),
    }
}

/// Reads the cluster `client` talks to (at `server`) into a snapshot, with lists only.
pub async fn read(client: &kube::Client, server: &str) -> Result<Snapshot, FetchError> {
    let c = || client.clone();
    let nodes = list_all(&Api::<Node>::all(c()), server, "the Nodes").await?;
    let pods = list_all(&Api::<Pod>::all(c()), server, "the Pods").await?;
    let budgets = list_all(
        &Api::<PodDisruptionBudget>::all(c()),
        server,
        "the PodDisruptionBudgets",
    )
    .await?;
    let deployments = list_all(&Api::<Deployment>::all(c()), server, "the Deployments").await?;
    let replica_sets = list_all(&Api::<ReplicaSet>::all(c()), server, "the ReplicaSets").await?;
    let stateful_sets = list_all(&Api::<StatefulSet>::all(c()), server, "the StatefulSets").await?;
    let daemon_sets = list_all(&Api::<DaemonSet>::all(c()), server, "the DaemonSets").await?;
    Ok(Snapshot {
        format: FORMAT.into(),
        taken_at: rollboot::time::annotation(chrono::Utc::now()),
        source: server.to_string(),
        nodes: nodes.iter().map(node).collect(),
        pods: {
            let cycles = last_cycles(&nodes);
            pods.iter().map(|p| pod(p, &cycles)).collect()
        },
        budgets: budgets.iter().map(budget).collect(),
        deployments: deployments
            .iter()
            .filter_map(|d| {
                let s = d.spec.as_ref()?;
                Some(controller(
                    &d.metadata,
                    Some(s.replicas.unwrap_or(1)),
                    &s.selector,
                    &s.template,
                ))
            })
            .collect(),
        replica_sets: replica_sets
            .iter()
            .filter_map(|d| {
                let s = d.spec.as_ref()?;
                Some(controller(
                    &d.metadata,
                    Some(s.replicas.unwrap_or(1)),
                    &s.selector,
                    s.template.as_ref()?,
                ))
            })
            .collect(),
        stateful_sets: stateful_sets
            .iter()
            .filter_map(|d| {
                let s = d.spec.as_ref()?;
                Some(controller(
                    &d.metadata,
                    Some(s.replicas.unwrap_or(1)),
                    &s.selector,
                    &s.template,
                ))
            })
            .collect(),
        daemon_sets: daemon_sets
            .iter()
            .filter_map(|d| {
                let s = d.spec.as_ref()?;
                Some(controller(&d.metadata, None, &s.selector, &s.template))
            })
            .collect(),
    })
}

/// Reads the cluster of `target` (identified as `simulate`, failing in seconds on a hung API
/// server).
pub async fn read_current(target: &rollboot::client::Target) -> anyhow::Result<Snapshot> {
    let mut kc = target.config().await?;
    rollboot::client::identify(&mut kc, "simulate");
    let limit = std::time::Duration::from_secs(30);
    kc.connect_timeout = Some(limit);
    kc.read_timeout = Some(limit);
    let server = kc.cluster_url.to_string();
    let client = kube::Client::try_from(kc)?;
    Ok(read(&client, &server).await?)
}
