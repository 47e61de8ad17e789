//! The description of a simulated world: how many nodes, pods, budgets, and how fast time runs.
//!
//! Owns the knobs and their defaults (serde, camelCase keys, YAML or CLI). It must never build
//! anything: `world.rs` turns a scenario into objects, deterministically from `seed`.

use serde::{Deserialize, Serialize};

/// A world description. Durations are simulated seconds; `timeFactor` scales all of them
/// (0.01 turns a 30 s grace period into 0.3 s of real time).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default, deny_unknown_fields)]
pub struct Scenario {
    /// Worker nodes.
    pub nodes: usize,
    /// Zones the nodes are spread over (label `topology.kubernetes.io/zone`).
    pub zones: usize,
    /// ReplicaSet-owned pods per node (in Deployments of `replicas` pods).
    pub pods_per_node: usize,
    /// Replicas per Deployment.
    pub replicas: usize,
    /// How the Deployments' and StatefulSets' pods are laid out over the nodes at the start.
    pub placement: Placement,
    /// Share (0..=1) of Deployments covered by a PodDisruptionBudget.
    pub pdb_share: f64,
    /// The budgets' `maxUnavailable` (tightness: 1 lets one pod go at a time; 0 blocks all).
    pub pdb_max_unavailable: i64,
    /// DaemonSets (one pod per node each, in kube-system).
    pub daemon_sets: usize,
    /// StatefulSets of `replicas` pods each (pods `NAME-0`, `NAME-1`... spread over the nodes,
    /// recreated under the same name once evicted), in the apps namespaces.
    pub stateful_sets: usize,
    /// Pods with no owner (placed on the last nodes, so draining the first needs no --force).
    pub bare_pods: usize,
    /// ReplicaSet-owned pods that use an emptyDir volume.
    pub empty_dir_pods: usize,
    /// Mirror (static) pods, one per node on the first nodes.
    pub mirror_pods: usize,
    /// Namespaces the Deployments are spread over.
    pub namespaces: usize,
    /// Simulated reboot duration, seconds (NotReady to Ready).
    pub reboot_time: f64,
    /// Delay before a node goes NotReady once a reboot is asked, seconds.
    pub reboot_delay: f64,
    /// How long after a node is Ready again the node-lifecycle controller takes its
    /// `not-ready` taints off, seconds (kube-controller-manager notices on its 5 s monitor
    /// period: 0 to 5 s).
    pub taint_removal_delay: f64,
    /// Pods' terminationGracePeriodSeconds.
    pub grace_seconds: i64,
    /// Seconds a pod takes to exit once asked to terminate, when shorter than its grace period
    /// (an application that exits on SIGTERM). Absent: every pod uses its whole grace period.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_exit_seconds: Option<f64>,
    /// Delay from binding to Running+Ready, seconds.
    pub start_delay: f64,
    /// Real seconds per simulated second.
    pub time_factor: f64,
    /// Seed of every random choice.
    pub seed: u64,
    /// StatefulSets get `volumeClaimTemplates` (one ReadWriteOnce claim `data` of StorageClass
    /// `rollboot-sim-rwo`, CSI driver `rwo.csi.rollboot.dev` with `attachRequired: true`): each
    /// pod's claim `data-<pod>` is bound to a PersistentVolume, attached to the pod's node
    /// through a VolumeAttachment, and detached once the pod is gone.
    pub stateful_volumes: bool,
    /// Seconds the CSI attacher takes to attach a volume (VolumeAttachment created to
    /// `status.attached: true`); a pod with volumes starts after both this and `startDelay`.
    pub attach_seconds: f64,
    /// Seconds the CSI attacher takes to detach a volume (VolumeAttachment deleted to gone);
    /// none passes while the node is down in a reboot.
    pub detach_seconds: f64,
    /// Share (0..=1) of Deployments whose pods run at `priorityClassName:
    /// system-node-critical` (priority 2000001000), the last ones built; all other pods have
    /// priority 0, as Pod admission gives a pod without a class.
    pub node_critical_share: f64,
    /// Flagged nodes (the first ones, by name) whose hosts reboot themselves: a simulated
    /// Zincati each asks rollboot's FleetLock server (`pre-reboot` until 200), reboots, and
    /// gives the slot back once up (`steady-state`). Their agents run too, but flag nothing.
    pub fleetlock_hosts: usize,
    /// The Nodes' InternalIPs: `private` (10.x.y.z), or `loopback` (each its own address in
    /// 127.0.0.0/8, so that a test can send a host's FleetLock requests from its own address
    /// by binding the source). Default: `loopback` with `fleetlockHosts`, else `private`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_addresses: Option<NodeAddresses>,
    /// logind's `InhibitDelayMaxSec` on every host (simulated seconds): how long a host that
    /// shuts down by itself (chaos fault `hostShutdown`) waits at most for the agent's
    /// inhibitor. Default 300 (5 minutes: raised from logind's 5 s, as INSTALL.md says).
    pub inhibit_delay_seconds: f64,
    /// A fault schedule played during the rollout (`rollboot simulate`, `--serve`): written
    /// here by hand, or drawn by `--chaos SEED`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub faults: Option<super::fault_schedule::FaultSchedule>,
    /// medik8s' NodeMaintenance CRD (`nodemaintenance.medik8s.io/v1beta1`,
    /// `nodemaintenances`, cluster-scoped): `nodeMaintenance: {installed: true}` serves it
    /// (absent, or `installed: false`: its group answers 404 as an unknown group does), and
    /// with `operator: true` (the default) a simulated node-maintenance-operator acts on each
    /// NodeMaintenance (see `actors.rs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_maintenance: Option<NodeMaintenance>,
    /// An autoscaler that deletes empty cordoned nodes: `autoscaler: {scaleDownEmptyAfter:
    /// SECONDS}` (see `actors.rs`): a node cordoned and empty (no pod but DaemonSet and mirror
    /// pods) that long, unprotected (no `cluster-autoscaler.kubernetes.io/scale-down-disabled`
    /// nor `karpenter.sh/do-not-disrupt` `"true"`), is tainted `ToBeDeletedByClusterAutoscaler`
    /// and its host deleted for good.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub autoscaler: Option<Autoscaler>,
}

/// The scenario's `nodeMaintenance`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeMaintenance {
    /// The CRD is installed (default true).
    #[serde(default = "yes")]
    pub installed: bool,
    /// The simulated node-maintenance-operator acts on the NodeMaintenances (default true).
    #[serde(default = "yes")]
    pub operator: bool,
}

fn yes() -> bool {
    true
}

/// The scenario's `autoscaler`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Autoscaler {
    /// Simulated seconds a node must stay cordoned and empty before it is scaled down.
    pub scale_down_empty_after: f64,
}

impl Default for Scenario {
    fn default() -> Scenario {
        Scenario {
            nodes: 3,
            zones: 3,
            pods_per_node: 6,
            replicas: 3,
            placement: Placement::Spread,
            pdb_share: 0.5,
            pdb_max_unavailable: 1,
            daemon_sets: 1,
            stateful_sets: 0,
            bare_pods: 1,
            empty_dir_pods: 1,
            mirror_pods: 1,
            namespaces: 2,
            reboot_time: 60.0,
            reboot_delay: 2.0,
            taint_removal_delay: 3.0,
            grace_seconds: 30,
            pod_exit_seconds: None,
            start_delay: 2.0,
            time_factor: 0.01,
            seed: 1,
            stateful_volumes: false,
            attach_seconds: 2.0,
            detach_seconds: 3.0,
            node_critical_share: 0.0,
            fleetlock_hosts: 0,
            node_addresses: None,
            inhibit_delay_seconds: 300.0,
            faults: None,
            node_maintenance: None,
            autoscaler: None,
        }
    }
}

/// The addresses a world's Nodes get (`nodeAddresses`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum NodeAddresses {
    /// 10.x.y.z, as a cloud's private network.
    Private,
    /// 127.1.y.z: each node its own loopback address, which a local client can send from.
    Loopback,
}

impl Scenario {
    /// Whether the Nodes get loopback addresses (see [`Scenario::node_addresses`]).
    pub fn loopback_addresses(&self) -> bool {
        match self.node_addresses {
            Some(a) => a == NodeAddresses::Loopback,
            None => self.fleetlock_hosts > 0,
        }
    }
}

/// The InternalIP of node number `i` of a world.
pub fn node_address(i: usize, loopback: bool) -> String {
    if loopback {
        // From 127.1.0.1: 127.0.0.1 is every local client's own, and so no host's.
        let n = i + 1;
        format!("127.{}.{}.{}", 1 + n / 65536 % 254, n / 256 % 256, n % 256)
    } else {
        format!("10.{}.{}.{}", i / 65536 % 256, i / 256 % 256, i % 256)
    }
}

/// How a world's workload pods are laid out at the start (each node gets as many as any
/// other, give or take one, either way).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Placement {
    /// As kube-scheduler lays out a fresh cluster's Deployments: each pod on one of the least
    /// loaded nodes, picked at random (from `seed`), a workload's pods on different nodes
    /// while there are nodes it has none on (its default spreading by hostname). Siblings
    /// land on nodes far apart in name order.
    #[default]
    Spread,
    /// Round robin in name order: a workload's pods on consecutive nodes, so a rollout in name
    /// order drains siblings together and their budgets hold the drains (the worst case for
    /// `maxNodes` > 1).
    RoundRobin,
}

impl Scenario {
    /// Checks the knobs a world cannot be built from; the error names the key.
    pub fn validate(&self) -> Result<(), String> {
        let secs = |v: f64| v.is_finite() && v >= 0.0;
        let checks = [
            (
                self.nodes >= 1,
                "nodes: a simulated cluster needs at least 1 node",
            ),
            (self.zones >= 1, "zones: at least 1"),
            (self.namespaces >= 1, "namespaces: at least 1"),
            (
                (0.0..=1.0).contains(&self.pdb_share),
                "pdbShare: a share in 0..=1",
            ),
            (
                self.pdb_max_unavailable >= 0,
                "pdbMaxUnavailable: at least 0",
            ),
            (self.grace_seconds >= 0, "graceSeconds: at least 0"),
            (
                secs(self.reboot_time),
                "rebootTime: a number of seconds >= 0",
            ),
            (
                secs(self.reboot_delay),
                "rebootDelay: a number of seconds >= 0",
            ),
            (
                secs(self.taint_removal_delay),
                "taintRemovalDelay: a number of seconds >= 0",
            ),
            (
                secs(self.start_delay),
                "startDelay: a number of seconds >= 0",
            ),
            (
                secs(self.attach_seconds),
                "attachSeconds: a number of seconds >= 0",
            ),
            (
                secs(self.detach_seconds),
                "detachSeconds: a number of seconds >= 0",
            ),
            (
                (0.0..=1.0).contains(&self.node_critical_share),
                "nodeCriticalShare: a share in 0..=1",
            ),
            (
                self.time_factor.is_finite() && self.time_factor > 0.0,
                "timeFactor: a number of real seconds per simulated second > 0",
            ),
            (
                self.autoscaler
                    .as_ref()
                    .is_none_or(|a| secs(a.scale_down_empty_after)),
                "autoscaler.scaleDownEmptyAfter: a number of seconds >= 0",
            ),
        ];
        if let Some((_, why)) = checks.iter().find(|(ok, _)| !ok) {
            return Err(why.to_string());
        }
        match &self.faults {
            Some(f) => f.validate(),
            None => Ok(()),
        }
    }

    /// `nodes` nodes and no pod (no workload, DaemonSet, bare, emptyDir or mirror pod): for a
    /// test that adds what it needs. The rest as [`Scenario::default`].
    pub fn nodes_only(nodes: usize) -> Scenario {
        Scenario {
            nodes,
            pods_per_node: 0,
            daemon_sets: 0,
            bare_pods: 0,
            empty_dir_pods: 0,
            mirror_pods: 0,
            ..Scenario::default()
        }
    }

    /// A real-time duration for `secs` simulated seconds.
    pub fn scaled(&self, secs: f64) -> std::time::Duration {
        std::time::Duration::from_secs_f64((secs * self.time_factor).max(0.0))
    }
}
