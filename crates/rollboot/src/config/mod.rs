//! The config file: one typed model of everything rollboot reads, its defaults, and its
//! strict loading.
//!
//! Owns the YAML schema (camelCase keys, unknown keys rejected), the documented default of every
//! field, and validation that names the file, key path, line and column of each problem. It must
//! never touch the cluster or the clock: it turns bytes into a [`Config`] or into a list of
//! [`Problem`]s, and every later part takes its settings from here. Reading is [`load_file`]
//! and [`parse_str`], the rules per section `validate`, and `rollboot check-config`'s report
//! on a file [`check`]. The same types give the file's JSON Schema ([`schema`]) and its
//! reference page ([`reference`]).
//!
//! `config/rollboot.yaml` is the commented reference; a test checks it loads and that its
//! values equal these defaults, so the two cannot drift apart.

pub mod check;
mod duration;
pub mod hooks;
mod load;
pub mod notifications;
pub mod reference;
pub mod schema;
mod validate;

pub use duration::{Duration, DurationError};
pub use hooks::{Hooks, Phase};
pub(crate) use load::invalid;
pub use load::{load_file, parse_str, ConfigError, Problem, MAX_CONFIG_BYTES};
pub use notifications::Notifications;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize};

use crate::selector::Selector;
use crate::windows::Schedule;

/// Every setting of rollboot. Build it with [`load_file`] or [`parse_str`], which validate;
/// `Config::default()` is the configuration of an empty mapping (`{}`).
#[derive(Debug, Default, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Config {
    /// When new reboots may start. Absent: always. Present: a non-empty list.
    #[serde(
        deserialize_with = "present_list",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(with = "Vec<WindowConfig>", length(min = 1))]
    pub windows: Option<Vec<WindowConfig>>,
    /// Instants during which nothing new starts, even inside a window.
    pub blackouts: Vec<BlackoutConfig>,
    /// How many nodes may be in maintenance at once.
    pub concurrency: Concurrency,
    /// Which nodes rollboot may reboot, and in which order.
    pub nodes: Nodes,
    /// How a node is drained.
    pub drain: Drain,
    /// How a node is rebooted and how long it may take.
    pub reboot: Reboot,
    /// What must be healthy again before the next node starts.
    pub health_gate: HealthGate,
    /// Conditions that keep new reboots from starting.
    pub blockers: Blockers,
    /// The maintenance lock Lease.
    pub lock: Lock,
    /// Leader election among controller replicas.
    pub leader: Leader,
    /// What a failed node does to the rollout.
    pub failures: Failures,
    /// Who is told what the rollout does (Slack, Teams, a webhook).
    pub notifications: Notifications,
    /// What rollboot does, asks and waits for at each phase of a node's cycle.
    pub hooks: Hooks,
    /// Silences while a node is in maintenance.
    pub silences: Silences,
    /// The FleetLock server for hosts with their own update agent (Zincati, Flatcar).
    /// Absent: not served.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleetlock: Option<FleetLock>,
    /// Validated, compiled forms of the string fields above.
    #[serde(skip)]
    compiled: Compiled,
}

/// `fleetlock`: the FleetLock server. Every replica listens; only the leader decides (the
/// others forward to it).
#[derive(Debug, Deserialize, Serialize, Clone, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FleetLock {
    /// Address every replica listens on, `host:port` (such as `0.0.0.0:8086`).
    pub listen: String,
    /// FleetLock groups (the `group` a host's client sends) and what each means: a value of
    /// `concurrency.groupBy` the host's Node must have, or a `maxNodes` of its own for the
    /// hosts asking under it. Without any, every group is accepted and shares the global limit.
    #[serde(default)]
    pub groups: std::collections::BTreeMap<String, FleetLockGroup>,
    /// Answer a request only when its TCP peer address is one of the named host's Node
    /// addresses (InternalIP, ExternalIP); otherwise 403 `client_not_host`, nothing written.
    /// Default true. Off, anyone who can reach the port can drain any node.
    #[serde(default = "yes")]
    pub verify_client_address: bool,
    /// Proxies (CIDR blocks) whose `X-Forwarded-For` is read: from those peers only, its last
    /// hop is taken as the client's address. Default none.
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
    /// A token file that proves a replica to the others when it forwards a request to the
    /// leader: a projected ServiceAccount token of the controller's account with audience
    /// `rollboot.dev/fleetlock-forward` (`FleetLock::FORWARD_AUDIENCE`), checked by the leader
    /// with a TokenReview.
    #[serde(default = "FleetLock::default_forward_token_file")]
    pub forward_token_file: std::path::PathBuf,
}

impl FleetLock {
    /// The audience of the token a forwarding replica presents: a token for it is worth
    /// nothing to the API server, so one seen on the wire cannot be used against the API.
    pub const FORWARD_AUDIENCE: &'static str = "rollboot.dev/fleetlock-forward";

    /// Served on `listen`, everything else as a config without it says.
    pub fn on(listen: &str) -> FleetLock {
        FleetLock {
            listen: listen.into(),
            groups: Default::default(),
            verify_client_address: true,
            trusted_proxies: Vec::new(),
            forward_token_file: FleetLock::default_forward_token_file(),
        }
    }

    fn default_forward_token_file() -> std::path::PathBuf {
        "/var/run/secrets/rollboot.dev/fleetlock-forward/token".into()
    }

    /// What `verifyClientAddress: false` leaves open, as the controller warns it at start and
    /// `rollboot status` shows it.
    pub const UNVERIFIED: &'static str = "fleetlock.verifyClientAddress is false: any client that reaches the FleetLock port can have any node drained";

    /// `trustedProxies`, parsed (validation refuses a config with one that does not parse).
    pub fn trusted_proxies(&self) -> Vec<crate::fleetlock::caller::Cidr> {
        self.trusted_proxies
            .iter()
            .filter_map(|c| crate::fleetlock::caller::Cidr::parse(c).ok())
            .collect()
    }
}

/// One FleetLock group: exactly one of `groupBy` and `maxNodes`.
#[derive(Debug, Default, Deserialize, Serialize, Clone, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FleetLockGroup {
    /// The value of the `concurrency.groupBy` label the host's Node must carry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_by: Option<String>,
    /// At most this many hosts of this group in flight at once (within `maxNodes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_nodes: Option<u32>,
}

/// One maintenance window: a cron start, a length, a zone.
#[derive(Debug, Deserialize, Serialize, Clone, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WindowConfig {
    /// Standard 5-field cron expression for the window's start (`0 2 * * mon-fri`).
    pub schedule: String,
    /// How long the window stays open after each start, in real elapsed time.
    pub duration: Duration,
    /// IANA time zone the schedule is read in. Default `UTC`.
    #[serde(default = "utc")]
    pub timezone: String,
}

/// A span of time `[from, to)` during which nothing new starts.
#[derive(Debug, Deserialize, Serialize, Clone, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BlackoutConfig {
    /// RFC 3339 instant, inclusive.
    #[serde(deserialize_with = "rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub from: chrono::DateTime<chrono::FixedOffset>,
    /// RFC 3339 instant, exclusive.
    #[serde(deserialize_with = "rfc3339")]
    #[schemars(with = "String", extend("format" = "date-time"))]
    pub to: chrono::DateTime<chrono::FixedOffset>,
}

/// An RFC 3339 instant, with an error that says so (chrono's own is `premature end of input`
/// for a date alone, which names neither the format nor what is missing). The error is raised
/// inside the deserializer (a visitor), so the YAML library puts the key path and line on it.
fn rfc3339<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<chrono::DateTime<chrono::FixedOffset>, D::Error> {
    struct Instant;
    impl serde::de::Visitor<'_> for Instant {
        type Value = chrono::DateTime<chrono::FixedOffset>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an RFC 3339 instant such as 2026-12-24T00:00:00Z")
        }
        fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Self::Value, E> {
            chrono::DateTime::parse_from_rfc3339(text.trim()).map_err(|e| {
                let hint = if chrono::NaiveDate::parse_from_str(text.trim(), "%Y-%m-%d").is_ok() {
                    format!(
                        " (a date alone has no time and no offset: write {}T00:00:00Z for midnight UTC)",
                        text.trim()
                    )
                } else {
                    String::new()
                };
                E::custom(format!(
                    "`{text}` is not an RFC 3339 instant such as 2026-12-24T00:00:00Z{hint}: {e}"
                ))
            })
        }
    }
    d.deserialize_str(Instant)
}

/// Limits on nodes in maintenance at once.
#[derive(Debug, Deserialize, Serialize, Clone, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Concurrency {
    /// Nodes in flight at once, cluster-wide. Default 1.
    pub max_nodes: u32,
    /// Label key that groups nodes (such as `topology.kubernetes.io/zone`). Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group_by: Option<String>,
    /// Nodes in flight at once within one group. Default 1 when `groupBy` is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_nodes_per_group: Option<u32>,
    /// With `maxNodes` above 1, a waiting node whose drain would be held now (one of its pods'
    /// PodDisruptionBudgets has no disruption left once the nodes in flight are counted) is
    /// passed over for the next one whose budgets have room, at most this long (from its
    /// first pass over); then it is taken anyway. `0s` turns the budget-aware pick off: nodes
    /// are taken in order only. Default 10m.
    pub pass_over_for: Duration,
    /// Hosts that shut down by themselves (the agent's `shutdown-requested`) are drained at
    /// once, past `maxNodes` if need be, since the shutdown happens anyway; at most this many
    /// beyond `maxNodes` at once. Past it, a host's shutdown is drained only if a slot frees
    /// within its logind delay, and an Event says so. Default 1.
    pub max_shutdown_drains: u32,
    /// Every node cordoned by anyone counts against `maxNodes` (and `maxNodesPerGroup`), as
    /// OpenShift's MachineConfigPool counts every unavailable node against `maxUnavailable`.
    /// Off, only the nodes rollboot holds, those other actors take out (the autoscaler,
    /// Karpenter, node-maintenance-operator, an out-of-service taint) and the hosts shutting
    /// down by themselves count; `rollboot plan` warns about the nodes cordoned by others.
    /// Default false.
    pub count_cordoned: bool,
}

impl Default for Concurrency {
    fn default() -> Self {
        Concurrency {
            max_nodes: 1,
            group_by: None,
            max_nodes_per_group: None,
            pass_over_for: Duration::from_mins(10),
            max_shutdown_drains: 1,
            count_cordoned: false,
        }
    }
}

/// Which nodes are candidates, and what rollboot shows other actors of the nodes it holds.
#[derive(Debug, Deserialize, Serialize, Clone, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Nodes {
    /// Label selector of the nodes rollboot may reboot. Default: all nodes.
    pub selector: String,
    /// Order in which flagged nodes are taken.
    pub order: NodeOrder,
    /// A node rollboot rebooted less than this ago (its `rollboot.dev/last-reboot`) is not
    /// started again until then, however it is flagged (kured #1113). Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_reboot_interval: Option<Duration>,
    /// The annotations that keep cluster-autoscaler and Karpenter from removing a node
    /// rollboot holds (drained, it looks empty to them), written with the cordon and removed
    /// with the uncordon; each can be turned off.
    pub protect: Protect,
    /// Write KEP-5683's maintenance conditions on the Nodes rollboot reboots
    /// (`MaintenancePlanned`, `DrainInProgress`, `Drained`, `MaintenanceInProgress`), never
    /// touching one another writer wrote. Default true.
    pub publish_conditions: bool,
}

impl Default for Nodes {
    fn default() -> Self {
        Nodes {
            selector: String::new(),
            order: NodeOrder::default(),
            min_reboot_interval: None,
            protect: Protect::default(),
            publish_conditions: true,
        }
    }
}

/// The protections rollboot writes on a node from its cordon to its uncordon. rollboot
/// removes only those it wrote: one already on the node is left as found.
#[derive(Debug, Deserialize, Serialize, Clone, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Protect {
    /// `cluster-autoscaler.kubernetes.io/scale-down-disabled: "true"`. Default true.
    pub scale_down_disabled: bool,
    /// `karpenter.sh/do-not-disrupt: "true"`. Default true.
    pub do_not_disrupt: bool,
}

impl Default for Protect {
    fn default() -> Self {
        Protect {
            scale_down_disabled: true,
            do_not_disrupt: true,
        }
    }
}

impl Protect {
    /// The annotation keys to write with a cordon.
    pub fn keys(&self) -> Vec<&'static str> {
        let mut keys = Vec::new();
        if self.scale_down_disabled {
            keys.push(crate::node::SCALE_DOWN_DISABLED);
        }
        if self.do_not_disrupt {
            keys.push(crate::node::DO_NOT_DISRUPT);
        }
        keys
    }
}

/// Order in which flagged nodes are taken.
#[derive(Debug, Default, Deserialize, Serialize, Clone, Copy, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum NodeOrder {
    /// The node flagged longest ago first (the default).
    #[default]
    OldestFlag,
    /// Alphabetical by node name.
    Name,
}

/// Drain settings, with `kubectl drain` meanings.
#[derive(Debug, Deserialize, Serialize, Clone, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Drain {
    /// Longest a drain may take before the node fails. Default 15m.
    pub timeout: Duration,
    /// Longest wait between evictions refused by a PodDisruptionBudget (default 5s, as
    /// kubectl): the controller asks again as soon as its watch sees the budget allow a
    /// disruption, and after this at the latest.
    pub eviction_retry_interval: Duration,
    /// Evictions in flight at once for one node. Default 10.
    pub concurrent_evictions: u32,
    /// Leave DaemonSet pods alone (kubectl `--ignore-daemonsets`). Default true.
    pub ignore_daemon_sets: bool,
    /// Evict pods that use emptyDir volumes, losing that data (kubectl `--delete-emptydir-data`). Default false.
    pub delete_empty_dir_data: bool,
    /// Evict pods with no controller (kubectl `--force`): they are not recreated. Default false.
    pub evict_unreplicated: bool,
    /// Overrides each pod's termination grace period. Default: the pod's own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grace_period: Option<Duration>,
    /// Only pods matching this label selector are evicted. Default: all.
    pub pod_selector: String,
    /// When the timeout passes, delete the remaining pods even around their budgets. Default false.
    pub force_delete_after_timeout: bool,
    /// A wait after the drain before the reboot is asked for (so load balancers notice the
    /// node is gone). Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub settle: Option<Duration>,
    /// How long past its grace period an evicted pod may still be terminating before it is
    /// `stuck` (see `whenBlocked.stuck`). Default 2m.
    pub stuck_after: Duration,
    /// What a drain does about an eviction a budget holds, per cause (`budget`: none allowed
    /// now; `never`: the budget can never allow one).
    pub when_blocked: WhenBlocked,
    /// The order pods leave in: rules, the first that matches a pod giving its group and
    /// behaviour. Empty: the default order (see `drain.order[]`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub order: Vec<OrderRule>,
    /// Waiting for the drained pods' volumes to detach before the reboot.
    pub volumes: Volumes,
}

impl Default for Drain {
    fn default() -> Self {
        Drain {
            timeout: Duration::from_mins(15),
            eviction_retry_interval: Duration::from_secs(5),
            concurrent_evictions: 10,
            ignore_daemon_sets: true,
            delete_empty_dir_data: false,
            evict_unreplicated: false,
            grace_period: None,
            pod_selector: String::new(),
            force_delete_after_timeout: false,
            settle: None,
            stuck_after: Duration::from_mins(2),
            when_blocked: WhenBlocked::default(),
            order: Vec::new(),
            volumes: Volumes::default(),
        }
    }
}

/// One rule of `drain.order`: the pods it selects (all of its conditions hold), the group
/// they go in and what the drain does with them. A pod takes the first rule that matches it;
/// a pod no rule matches is in group 0 and is evicted. Groups run in ascending `order`: a
/// group starts when every pod of the groups before it is gone or replaced (and, with
/// `volumes.waitForDetach`, their volumes detached).
///
/// Without rules, the default order (KEP-4212's drain plan and Gardener's volume-aware drain):
/// pods without volumes to detach, a group per priority, lowest first; then pods with such
/// volumes, one at a time, lowest priority first; then the same two steps for the
/// `system-cluster-critical` and `system-node-critical` pods (priority 2000000000 and up).
#[derive(Debug, Default, Deserialize, Serialize, Clone, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OrderRule {
    /// Label selector of the pods. Absent: any.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pod_selector: String,
    /// Label selector of the pods' namespaces. Absent: any.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace_selector: String,
    /// Lowest `spec.priority` matched (a pod without one has 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_priority: Option<i32>,
    /// Highest `spec.priority` matched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_priority: Option<i32>,
    /// The group: lower goes first. Default 0.
    #[serde(default)]
    pub order: i32,
    /// What the drain does with the pods. Default `drain`.
    #[serde(default)]
    pub behavior: Behavior,
    /// The selectors, compiled by the loader.
    #[serde(skip)]
    compiled: Option<(Selector, Selector)>,
}

impl OrderRule {
    /// Compiles the two selectors; the error names the key (`podSelector` or
    /// `namespaceSelector`) and why.
    pub fn compile(&mut self) -> Result<(), (&'static str, String)> {
        let pods =
            Selector::parse(&self.pod_selector).map_err(|e| ("podSelector", e.to_string()))?;
        let namespaces = Selector::parse(&self.namespace_selector)
            .map_err(|e| ("namespaceSelector", e.to_string()))?;
        self.compiled = Some((pods, namespaces));
        Ok(())
    }

    /// Whether the rule selects a pod with these labels and priority in a namespace with
    /// these labels. An uncompiled rule (not from the loader) compiles its selectors here; one
    /// that cannot be compiled matches nothing.
    pub fn matches(
        &self,
        pod_labels: &std::collections::BTreeMap<String, String>,
        priority: i32,
        namespace_labels: &std::collections::BTreeMap<String, String>,
    ) -> bool {
        let fresh;
        let (pods, namespaces) = match &self.compiled {
            Some(c) => c,
            None => match (
                Selector::parse(&self.pod_selector),
                Selector::parse(&self.namespace_selector),
            ) {
                (Ok(p), Ok(n)) => {
                    fresh = (p, n);
                    &fresh
                }
                _ => return false,
            },
        };
        self.min_priority.is_none_or(|m| priority >= m)
            && self.max_priority.is_none_or(|m| priority <= m)
            && pods.matches(pod_labels)
            && namespaces.matches(namespace_labels)
    }

    /// Whether the rule reads namespaces' labels.
    pub fn reads_namespaces(&self) -> bool {
        !self.namespace_selector.trim().is_empty()
    }
}

/// What a drain does with the pods of a `drain.order` rule.
#[derive(Debug, Default, Deserialize, Serialize, Clone, Copy, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum Behavior {
    /// Evict them (the default).
    #[default]
    Drain,
    /// Leave them on the node through the reboot.
    Skip,
    /// Do not evict them: wait, within `drain.timeout`, until they have terminated on their
    /// own (a Job's pod finishing its run).
    WaitCompleted,
}

/// `drain.volumes`: the wait for the drained pods' volumes to leave the node.
#[derive(Debug, Deserialize, Serialize, Clone, Copy, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Volumes {
    /// Before the reboot is asked (and before the next group of `drain.order`), wait until no
    /// ReadWriteOnce volume of the evicted pods is in the node's `status.volumesAttached` or
    /// `status.volumesInUse` and no VolumeAttachment of the node for it is left. Default true.
    pub wait_for_detach: bool,
    /// Longest that wait, counted from when the group's pods are gone; past it the node
    /// fails, naming the PersistentVolume and its VolumeAttachment. Default 5m.
    pub detach_timeout: Duration,
    /// After the reboot, the health gate also waits until each such volume is attached where
    /// the replacement of its pod runs (a VolumeAttachment with `status.attached`). Default
    /// false.
    pub wait_for_reattach: bool,
    /// Longest that wait, counted from when the health gate starts; past it the node is done
    /// anyway, with a `VolumeNotReattached` warning naming each volume. Default 90s.
    pub reattach_timeout: Duration,
}

impl Default for Volumes {
    fn default() -> Self {
        Volumes {
            wait_for_detach: true,
            detach_timeout: Duration::from_mins(5),
            wait_for_reattach: false,
            reattach_timeout: Duration::from_secs(90),
        }
    }
}

/// Why an eviction is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum BlockCause {
    /// A budget that allows no disruption now, and may later.
    Budget,
    /// A budget that can never allow a disruption as it stands.
    Never,
    /// The Eviction API denied it with the same answer several times in a row (an admission
    /// webhook or policy, or RBAC).
    Denied,
    /// Its pod is still terminating past its grace period and `drain.stuckAfter`.
    Stuck,
}

impl BlockCause {
    /// The config key of its policy, under `drain.whenBlocked`.
    pub fn key(self) -> &'static str {
        match self {
            BlockCause::Budget => "budget",
            BlockCause::Never => "never",
            BlockCause::Denied => "denied",
            BlockCause::Stuck => "stuck",
        }
    }
}

impl std::fmt::Display for BlockCause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.key())
    }
}

/// What a drain does about a held eviction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum BlockPolicy {
    /// Ask again until `drain.timeout`.
    Wait,
    /// Fail the node at once, naming the cause, the budget and the pod.
    Fail,
    /// Fail the node at once and label it `rollboot.dev/quarantined=<cause>`: it stays
    /// cordoned with the pods it still has (never returned to service by
    /// `failures.returnToService`), until `rollboot retry`.
    Quarantine,
}

/// `drain.whenBlocked`: a policy per cause.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct WhenBlocked {
    /// A budget at 0 now. Default `wait`.
    pub budget: BlockPolicy,
    /// A budget that can never allow a disruption. Default `fail`, or `wait` when
    /// `drain.forceDeleteAfterTimeout` is set (its pods are then deleted at the timeout, as
    /// before this key existed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub never: Option<BlockPolicy>,
    /// An eviction denied with the same answer (not a budget's 429) several times in a row.
    /// Default `fail`.
    pub denied: BlockPolicy,
    /// A pod still terminating past its grace period and `drain.stuckAfter` (a finalizer
    /// nobody removes, a kubelet that does not answer). Default `wait`.
    pub stuck: BlockPolicy,
}

impl Default for WhenBlocked {
    fn default() -> Self {
        WhenBlocked {
            budget: BlockPolicy::Wait,
            never: None,
            denied: BlockPolicy::Fail,
            stuck: BlockPolicy::Wait,
        }
    }
}

impl WhenBlocked {
    /// The policy for `cause`, given whether `drain.forceDeleteAfterTimeout` is set: `never`
    /// unset fails, unless the pods are to be force-deleted at the timeout (as before the key
    /// was there).
    pub fn policy(&self, cause: BlockCause, force_delete_after_timeout: bool) -> BlockPolicy {
        match cause {
            BlockCause::Budget => self.budget,
            BlockCause::Never => self.never.unwrap_or(if force_delete_after_timeout {
                BlockPolicy::Wait
            } else {
                BlockPolicy::Fail
            }),
            BlockCause::Denied => self.denied,
            BlockCause::Stuck => self.stuck,
        }
    }
}

/// How the agent learns a reboot is needed and how it reboots.
#[derive(Debug, Deserialize, Serialize, Clone, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Reboot {
    /// Longest from the reboot request until the node is back with a new boot ID and Ready. Default 15m.
    pub timeout: Duration,
    /// A file whose existence means "reboot needed", as the agent sees it. Default
    /// `/host/var/run/reboot-required`: the host's `/var/run/reboot-required`, where the agent's
    /// DaemonSet mounts the host's `/var/run` (at `/host/var/run`, never over the container's
    /// own `/var/run`, which holds its service-account token).
    pub sentinel_file: String,
    /// A command (argv) whose exit status says whether a reboot is needed; replaces
    /// `sentinelFile`. It runs in the host's mount namespace (see `hostMountNamespace`), so
    /// the host's tools (`needs-restarting`) are found. Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sentinel_command: Option<Vec<String>>,
    /// The sentinel command's exit codes that mean "reboot needed". Default `[0]` (kured's
    /// rule); RHEL's `needs-restarting -r` exits 1 when a reboot is needed: `[1]`.
    pub sentinel_reboot_exit_codes: Vec<i32>,
    /// The exit codes that mean "no reboot needed". Default: 0 and 1, less
    /// `sentinelRebootExitCodes`. Any other code, a command that cannot start or is killed is
    /// an error: the flag is left as it was, and the agent says so.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sentinel_no_reboot_exit_codes: Option<Vec<i32>>,
    /// The mount namespace the sentinel command is started in (entered with setns(2), as the
    /// default reboot command's `nsenter -m` does): by default the host's, through PID 1 (the
    /// agent runs with hostPID). Empty: the agent container's own.
    pub host_mount_namespace: String,
    /// Where the agent reads its host's boot ID, which must equal its Node's
    /// `status.nodeInfo.bootID` before it acts on a token. Default PID 1's view,
    /// `/proc/1/root/proc/sys/kernel/random/boot_id` (the agent runs with hostPID): the ID the
    /// kubelet reports. A pod's own `/proc/sys/kernel/random/boot_id` is the kernel's, which is
    /// not the node's where nodes are containers (kind, k3d, systemd-nspawn).
    pub host_boot_id_file: String,
    /// Where the agent reads its host's machine ID, compared with its Node's
    /// `status.nodeInfo.machineID` where both are known. Default the host's
    /// `/proc/1/root/etc/machine-id` (through PID 1; unreadable without CAP_SYS_PTRACE, then not
    /// compared). Empty: not compared.
    pub host_machine_id_file: String,
    /// How often the agent checks the sentinel. Default 1m.
    pub check_period: Duration,
    /// How the agent reboots the host.
    pub method: RebootMethod,
    /// argv run for `method: command`. Default reboots the host through nsenter into PID 1.
    pub command: Vec<String>,
    /// Signal number sent to PID 1 for `method: signal`. Default 39 (SIGRTMIN+5: systemd's reboot).
    pub signal: i32,
    /// A cycle whose reboot went to its host (a FleetLock host, a host shutting down by
    /// itself) ends without a reboot (a slot given back, a shutdown cancelled or never
    /// followed) only once the node has stayed Ready on the same boot, never NotReady since,
    /// for this long: longer than a host takes to go down once it starts. Never while it is
    /// NotReady. Default 5m.
    pub ready_without_reboot_for: Duration,
}

impl Default for Reboot {
    fn default() -> Self {
        Reboot {
            timeout: Duration::from_mins(15),
            sentinel_file: "/host/var/run/reboot-required".into(),
            sentinel_command: None,
            sentinel_reboot_exit_codes: vec![0],
            sentinel_no_reboot_exit_codes: None,
            host_mount_namespace: "/proc/1/ns/mnt".into(),
            host_boot_id_file: "/proc/1/root/proc/sys/kernel/random/boot_id".into(),
            host_machine_id_file: "/proc/1/root/etc/machine-id".into(),
            check_period: Duration::from_mins(1),
            method: RebootMethod::Command,
            command: [
                "/usr/bin/nsenter",
                "-m/proc/1/ns/mnt",
                "--",
                "/bin/systemctl",
                "reboot",
            ]
            .map(String::from)
            .to_vec(),
            signal: 39,
            ready_without_reboot_for: Duration::from_mins(5),
        }
    }
}

impl Reboot {
    /// The sentinel command's exit codes that mean "no reboot needed":
    /// `sentinelNoRebootExitCodes`, or 0 and 1 less the codes that mean "reboot needed".
    pub fn sentinel_no_reboot_codes(&self) -> Vec<i32> {
        match &self.sentinel_no_reboot_exit_codes {
            Some(c) => c.clone(),
            None => [0, 1]
                .into_iter()
                .filter(|c| !self.sentinel_reboot_exit_codes.contains(c))
                .collect(),
        }
    }
}

/// How the agent reboots the host.
#[derive(Debug, Default, Deserialize, Serialize, Clone, Copy, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum RebootMethod {
    /// Run `reboot.command`.
    #[default]
    Command,
    /// Send `reboot.signal` to PID 1.
    Signal,
}

/// What must be healthy again after a node returns, before the next one starts.
#[derive(Debug, Deserialize, Serialize, Clone, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct HealthGate {
    /// Longest to wait for the budgets of the drained pods to be healthy again. Default 10m.
    pub timeout: Duration,
}

impl Default for HealthGate {
    fn default() -> Self {
        HealthGate {
            timeout: Duration::from_mins(10),
        }
    }
}

/// Conditions that keep new reboots from starting (in-flight nodes always finish).
#[derive(Debug, Default, Deserialize, Serialize, Clone, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Blockers {
    /// While any pod matches one of these label selectors, nothing new starts. Default: none.
    pub pod_selectors: Vec<String>,
    /// Nothing new starts while more than this many nodes (not in maintenance) are not Ready. Default 0.
    pub max_unready_nodes: u32,
    /// Nothing new starts while matching alerts fire in Prometheus. Default: not checked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prometheus: Option<Prometheus>,
    /// Nothing new starts while Alertmanager has active alerts that no silence or inhibition
    /// covers (a node's own maintenance silence does: its alerts do not stop the next node).
    /// Default: not checked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alertmanager: Option<AlertmanagerBlocker>,
}

/// `blockers.alertmanager`: an Alertmanager whose active alerts keep new reboots from
/// starting.
#[derive(Debug, Deserialize, Serialize, Clone, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AlertmanagerBlocker {
    /// Base URL, `http://` or `https://` (`http://alertmanager.monitoring:9093`).
    pub url: String,
    /// A bearer token, read from a Secret. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_from: Option<crate::config::notifications::SecretRef>,
    /// Matchers (`severity=~"critical|warning"`) that select the alerts that block. Default:
    /// every alert.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub filter: Vec<String>,
}

/// `silences`: silences rollboot holds while a node is in maintenance.
#[derive(Debug, Default, Deserialize, Serialize, Clone, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Silences {
    /// An Alertmanager silence per node, made before its drain and expired when its cycle
    /// ends. Default: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alertmanager: Option<AlertmanagerSilences>,
}

/// `silences.alertmanager`: the Alertmanager in which rollboot silences a node's alerts while
/// it is in maintenance.
#[derive(Debug, Deserialize, Serialize, Clone, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AlertmanagerSilences {
    /// Base URL, `http://` or `https://`.
    pub url: String,
    /// A bearer token, read from a Secret. Default: none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_from: Option<crate::config::notifications::SecretRef>,
    /// The silence's matchers, `{{node}}` standing for the node's name (regex-quoted in a
    /// regex matcher). Default: `node="{{node}}"`.
    #[serde(default = "default_silence_matchers")]
    pub matchers: Vec<String>,
    /// How much longer than the longest cycle (drain, reboot and health gate timeouts) the
    /// silence lasts if rollboot cannot expire it. Default 10m.
    #[serde(default = "default_silence_extra")]
    pub extra: Duration,
}

fn default_silence_matchers() -> Vec<String> {
    vec!["node=\"{{node}}\"".into()]
}

fn default_silence_extra() -> Duration {
    Duration::from_mins(10)
}

/// A Prometheus server whose alerts block new reboots.
#[derive(Debug, Deserialize, Serialize, Clone, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Prometheus {
    /// Base URL, `http://` or `https://`.
    pub url: String,
    /// Regular expression of alert names to ignore. Default: none ignored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert_filter: Option<String>,
    /// Only firing alerts block (not pending ones). Default true.
    #[serde(default = "yes")]
    pub firing_only: bool,
}

/// The maintenance lock Lease.
#[derive(Debug, Deserialize, Serialize, Clone, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Lock {
    /// Namespace of the Lease. Default `rollboot-system`.
    pub namespace: String,
    /// Name of the Lease. Default `rollboot-lock`.
    pub name: String,
}

impl Default for Lock {
    fn default() -> Self {
        Lock {
            namespace: DEFAULT_NAMESPACE.into(),
            name: "rollboot-lock".into(),
        }
    }
}

/// Leader election, with client-go's timings as defaults.
#[derive(Debug, Deserialize, Serialize, Clone, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Leader {
    /// Namespace of the Lease. Default `rollboot-system`.
    pub namespace: String,
    /// Name of the Lease. Default `rollboot-leader`.
    pub name: String,
    /// How long a lease is valid after a renewal. Default 15s.
    pub lease_duration: Duration,
    /// A leader that has not renewed within this stops acting. Default 10s.
    pub renew_deadline: Duration,
    /// Interval between attempts to take or renew. Default 2s.
    pub retry_period: Duration,
}

impl Default for Leader {
    fn default() -> Self {
        Leader {
            namespace: DEFAULT_NAMESPACE.into(),
            name: "rollboot-leader".into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// What failures do to the rollout.
#[derive(Debug, Default, Deserialize, Serialize, Clone, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct Failures {
    /// Failed nodes tolerated before nothing new starts. Default 0: one failure halts the rollout.
    pub max_failures: u32,
    /// Uncordon a failed node that rollboot cordoned once its host is up and Ready (its
    /// `failed` record and reason are kept), so it no longer takes one of `maxNodes`' slots.
    /// Default false: a failed node stays cordoned for an operator, and holds its slot.
    pub return_to_service: bool,
}

/// Where a validator reports a problem: its key path, then what is wrong and what is allowed.
pub(crate) type ProblemSink<'a> = dyn FnMut(String, String) + 'a;

/// Namespace rollboot's Leases live in unless configured.
pub const DEFAULT_NAMESPACE: &str = "rollboot-system";

/// Validated forms of the string fields, built once by the loader.
#[derive(Debug, Default)]
struct Compiled {
    schedule: Option<std::sync::Arc<Schedule>>,
    node_selector: Selector,
    pod_selector: Selector,
    blocking_pod_selectors: Vec<Selector>,
}

impl Config {
    /// The maintenance schedule (windows and blackouts).
    pub fn schedule(&self) -> &Schedule {
        // The loader always sets it; `Config::default()` has no windows and no blackouts.
        static ALWAYS: std::sync::OnceLock<Schedule> = std::sync::OnceLock::new();
        match &self.compiled.schedule {
            Some(s) => s,
            None => ALWAYS.get_or_init(|| Schedule::always_open(Vec::new())),
        }
    }

    /// Nodes rollboot may reboot.
    pub fn node_selector(&self) -> &Selector {
        &self.compiled.node_selector
    }

    /// Pods a drain evicts.
    pub fn drain_pod_selector(&self) -> &Selector {
        &self.compiled.pod_selector
    }

    /// Pods whose presence blocks new reboots.
    pub fn blocking_pod_selectors(&self) -> &[Selector] {
        &self.compiled.blocking_pod_selectors
    }

    /// The per-group limit: `(label key, nodes per group)` when `groupBy` is set.
    pub fn group_limit(&self) -> Option<(&str, u32)> {
        self.concurrency
            .group_by
            .as_deref()
            .map(|k| (k, self.concurrency.max_nodes_per_group.unwrap_or(1)))
    }
}

fn utc() -> String {
    "UTC".into()
}

fn yes() -> bool {
    true
}

/// A `windows:` key with nothing after it reads as an empty list, not as "absent": the
/// validator then rejects it, where `null` would otherwise silently mean "always open", the
/// opposite of what its writer likely meant.
fn present_list<'de, D, T>(d: D) -> Result<Option<Vec<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Some(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default()))
}
