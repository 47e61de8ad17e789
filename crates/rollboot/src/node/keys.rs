//! The protocol's names: the `rollboot.dev/` annotation and label keys, the groups of them that
//! are written or removed together, and the Kubernetes keys rollboot reads.
//!
//! Owns each key's name and who writes it (the agent, the controller, an operator), the groups
//! ([`FAILURE_RECORD`], [`CYCLE_KEYS`], [`TOKEN_KEYS`], [`AGENT_KEYS`]) and the kubelet's and
//! node-lifecycle controller's keys rollboot reads. It must never parse or build a value: the
//! other modules of [`crate::node`] do.

/// Prefix of every key rollboot reads or writes.
pub const PREFIX: &str = "rollboot.dev/";
/// Agent: the host's sentinel says a reboot is needed; the value is when it was first seen.
pub const REBOOT_REQUIRED: &str = "rollboot.dev/reboot-required";
/// Agent: why (the sentinel that said so).
pub const REBOOT_REQUIRED_REASON: &str = "rollboot.dev/reboot-required-reason";
/// Operator: reboot this node even without a sentinel. `rollboot request` writes the instant
/// of the request (RFC 3339), so "oldest flag first" holds; any other value (`now`, `true`,
/// written by hand) is undated: the controller writes in its place the instant it first saw
/// it (see [`NodeView::request_undated`]).
pub const REBOOT_REQUESTED: &str = "rollboot.dev/reboot-requested";
/// Operator: why the reboot was requested (`rollboot request --reason`).
pub const REBOOT_REQUESTED_REASON: &str = "rollboot.dev/reboot-requested-reason";
/// Operator, a label: never reboot this node.
pub const EXCLUDE: &str = "rollboot.dev/exclude";
/// Controller, a label: the node's drain was held for this cause (`budget`, `never`, `denied`,
/// `stuck`) and `drain.whenBlocked` says quarantine: it stays cordoned with its pods, failed,
/// until `rollboot retry` removes the label with the failure.
pub const QUARANTINED: &str = "rollboot.dev/quarantined";
/// Controller: the node's maintenance state.
pub const STATE: &str = "rollboot.dev/state";
/// Controller: when `state` was written.
pub const STATE_SINCE: &str = "rollboot.dev/state-since";
/// Controller: rollboot cordoned the node (value: the controller identity), so it may uncordon.
pub const CORDONED_BY: &str = "rollboot.dev/cordoned-by";
/// Controller: `status.nodeInfo.bootID` before the reboot.
pub const BOOT_ID_BEFORE: &str = "rollboot.dev/boot-id-before";
/// Controller: the start of the host's PID 1 before the reboot, as its agent wrote it in
/// `agent-host` (written with `boot-id-before` where known): on a node whose boot ID never
/// changes (kind-like), a new start is the new boot.
pub const INIT_START_BEFORE: &str = "rollboot.dev/init-start-before";
/// Controller: a fresh token meaning "reboot now".
pub const REBOOT: &str = "rollboot.dev/reboot";
/// Agent: the token it acted on, written before it reboots.
pub const REBOOT_ACK: &str = "rollboot.dev/reboot-ack";
/// Agent: a token it acknowledged whose reboot never happened: the agent started again on the
/// same boot of its host (it died between the ack and the reboot). The controller answers with
/// a new token, a new and single reboot, a bounded number of times.
pub const REBOOT_LOST: &str = "rollboot.dev/reboot-lost";
/// Agent: a reboot token it will not act on, or could not (its reboot command failed), and
/// why (JSON, see [`Refusal`]). The controller fails the node at once where the cause will not
/// pass ([`RefusalCause::fails_the_node`]) instead of waiting out `reboot.timeout`.
pub const REBOOT_REFUSED: &str = "rollboot.dev/reboot-refused";
/// Controller: which reboot request of the cycle the current `reboot` token is (1, 2, ...).
pub const REBOOT_ATTEMPT: &str = "rollboot.dev/reboot-attempt";
/// Controller: why the node failed (with `state: failed`).
pub const FAILURE_REASON: &str = "rollboot.dev/failure-reason";
/// Controller: what the health gate must see healthy again (JSON, written with `rebooting`).
pub const HEALTH_GATE: &str = "rollboot.dev/health-gate";
/// Controller: the volumes a drain waits to see detached (JSON list of `{pv, unique,
/// attachment}`), written before the pods using them are evicted, so that a drain resumed by
/// another leader waits for them too (once a detach has begun, only their VolumeAttachments
/// show them). Removed with `done`.
pub const DRAIN_VOLUMES: &str = "rollboot.dev/drain-volumes";
/// Controller: the ID of the Alertmanager silence of this cycle (`silences.alertmanager`),
/// written with `draining`, so that whichever leader ends the cycle expires it. Removed with
/// `done` or `failed`.
pub const SILENCE_ID: &str = "rollboot.dev/silence-id";
/// Controller: a flagged node passed over by the budget-aware pick (JSON, see [`PassedOver`]):
/// since when, and for which budget. Its `since` is the clock of `concurrency.passOverFor`, so
/// a new leader does not restart it. Removed when the node's cycle starts (the cordon), or when
/// the node is no longer waiting.
pub const PASSED_OVER: &str = "rollboot.dev/passed-over";
/// Agent: its host is shutting down by itself (logind's `PrepareForShutdown(true)` for a
/// shutdown rollboot did not ask for); the value is when the agent saw it (RFC 3339). The
/// controller cordons and drains the node at once, whatever the window, and hands the host back
/// (`rebooting` with no token) once drained. The agent removes it when the shutdown is
/// cancelled, or when it starts again (on the same boot: cancelled; on a new one: done).
pub const SHUTDOWN_REQUESTED: &str = "rollboot.dev/shutdown-requested";
/// Agent: what the agent reads of its host (JSON, see [`AgentHost`]): its boot ID and machine
/// ID as the host's PID 1 sees them, PID 1's start time (which tells one boot from the next on
/// a node whose boot ID never changes), and how a shutdown nobody planned would go there.
/// Written when the agent starts and whenever what it reads changes.
pub const AGENT_HOST: &str = "rollboot.dev/agent-host";
/// Controller: the host of a cycle started for its own shutdown went down before the drain
/// was over (JSON, see [`Undrained`]): what was left, and why. Written when the controller sees
/// the host on a new boot, or hands it back with the kubelet's graceful node shutdown having
/// killed the pods; `done` counts the cycle as undrained.
pub const UNDRAINED: &str = "rollboot.dev/undrained";
/// Operator: the FleetLock id of this Node's host, when it cannot be derived from
/// `status.nodeInfo.machineID` (lower-case hex, as the host's FleetLock client sends it).
pub const FLEETLOCK_ID: &str = "rollboot.dev/fleetlock-id";
/// Controller: the reboot of this cycle was handed to the host itself (RFC 3339 instant), in
/// place of a `reboot` token: a FleetLock host whose `pre-reboot` is now answered 200, or a
/// host shutting down by itself once drained. Written with `rebooting` and `boot-id-before`;
/// like a token, it puts the cycle at its reboot whatever `state` says.
pub const HANDED_OFF: &str = "rollboot.dev/handed-off";
/// Controller: why this cycle started when its host reboots itself (`shutdown`: the agent
/// said its host shuts down by itself), written with the cordon: a cycle for a shutdown that
/// is cancelled ends without a reboot.
pub const CYCLE_FOR: &str = "rollboot.dev/cycle-for";
/// The value of [`CYCLE_FOR`] for a cycle started by `shutdown-requested`.
pub const CYCLE_FOR_SHUTDOWN: &str = "shutdown";
/// Controller: what the FleetLock server knows of this Node's host (JSON, see
/// [`FleetLockRecord`]): its id and group, whether it gave its slot back before rebooting, and
/// its last request and answer (written when the answer changes, or a minute after the last
/// write: hosts poll).
pub const FLEETLOCK: &str = "rollboot.dev/fleetlock";
/// The `reboot-requested-reason` the FleetLock server writes with the request of a host's
/// `pre-reboot`: a cycle so flagged is handed to the host instead of a token to the agent.
pub const FLEETLOCK_REASON: &str = "fleetlock";
/// Controller, history: when the node's last reboot cycle ended `done` (RFC 3339).
pub const LAST_REBOOT: &str = "rollboot.dev/last-reboot";
/// Controller, history: the boot ID before the last reboot rollboot verified.
pub const LAST_BOOT_ID_BEFORE: &str = "rollboot.dev/last-boot-id-before";
/// Controller, history: the boot ID after it.
pub const LAST_BOOT_ID_AFTER: &str = "rollboot.dev/last-boot-id-after";
/// Controller, history: how many reboot cycles rollboot finished on this node.
pub const REBOOT_COUNT: &str = "rollboot.dev/reboot-count";
/// Controller, history: how many of the node's cycles ended with a shutdown of its host that
/// went before the drain was over ([`UNDRAINED`]); those are not counted in `reboot-count`.
pub const UNDRAINED_COUNT: &str = "rollboot.dev/undrained-count";
/// Controller, history: how long the parts of the last cycle took (JSON, see [`LastCycle`]),
/// for `rollboot plan`'s estimates and a rehearsal's timings.
pub const LAST_CYCLE: &str = "rollboot.dev/last-cycle";

/// Controller: the hooks of this cycle, phase by phase (JSON, see [`crate::hooks::Record`]):
/// when each phase began and passed, and for each webhook the token, the attempt under way or
/// done and its answer. Written before each hook is acted on, so a new leader neither calls a
/// webhook again for an attempt already made nor asks again once it said yes.
pub const HOOKS: &str = "rollboot.dev/hooks";

/// The record of a failure: removed (with [`CYCLE_KEYS`]) when an operator clears a failed
/// node (`rollboot retry`), so the controller takes it again from the start.
pub const FAILURE_RECORD: [&str; 3] = [STATE, STATE_SINCE, FAILURE_REASON];
/// What one cycle leaves for its later steps and the agent to act on: a cycle starts without
/// them (the controller's cordon step removes them), and clearing a failure removes them too.
/// The agent's ack, lost report and refusal name the token they go with: they go with it (a
/// garbled ack left behind would make the agent refuse every later token).
pub const CYCLE_KEYS: [&str; 12] = [
    REBOOT,
    HANDED_OFF,
    UNDRAINED,
    INIT_START_BEFORE,
    CYCLE_FOR,
    BOOT_ID_BEFORE,
    HEALTH_GATE,
    REBOOT_ATTEMPT,
    HOOKS,
    REBOOT_ACK,
    REBOOT_LOST,
    REBOOT_REFUSED,
];

/// A cycle's reboot token and what the agent wrote of it: removed when the cycle is done (and
/// with [`CYCLE_KEYS`] when the next starts).
pub const TOKEN_KEYS: [&str; 5] = [
    REBOOT,
    REBOOT_ATTEMPT,
    REBOOT_ACK,
    REBOOT_LOST,
    REBOOT_REFUSED,
];

/// Every key an agent writes, and the only ones it may: the agent's own Node's flag, its ack,
/// lost report and refusal of a token, its request for a drain before a shutdown, and what it
/// reads of its host. The node writer refuses an agent's patch with any other key (the
/// admission policy of `deploy/` refuses it at the API server too).
pub const AGENT_KEYS: [&str; 7] = [
    REBOOT_REQUIRED,
    REBOOT_REQUIRED_REASON,
    REBOOT_ACK,
    REBOOT_LOST,
    REBOOT_REFUSED,
    SHUTDOWN_REQUESTED,
    AGENT_HOST,
];

/// Annotation kubelet puts on mirror pods.
pub const MIRROR_POD: &str = "kubernetes.io/config.mirror";
/// Taint the node-lifecycle controller puts on a node whose Ready condition is not True
/// (NoSchedule at once, NoExecute after the grace period) and removes some seconds after Ready.
pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
/// Taint the node-lifecycle controller puts on a node whose kubelet stopped reporting.
pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// Taint the node-lifecycle controller keeps in step with `spec.unschedulable` (a cordon).
pub const TAINT_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// Controller: the annotations of other actors that rollboot wrote with its cordon, to keep
/// them off the node while it holds it (comma-separated keys of [`PROTECTIONS`]). rollboot
/// removes with its uncordon only the keys listed here: one an operator wrote stays.
pub const PROTECTED: &str = "rollboot.dev/protected";
/// cluster-autoscaler's Node annotation: never scale this node down.
pub const SCALE_DOWN_DISABLED: &str = "cluster-autoscaler.kubernetes.io/scale-down-disabled";
/// Karpenter's Node annotation: never disrupt (consolidate, drift, expire) this node.
pub const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
/// The protections rollboot may write with its cordon, each `"true"`.
pub const PROTECTIONS: [&str; 2] = [SCALE_DOWN_DISABLED, DO_NOT_DISRUPT];

/// Taint cluster-autoscaler puts on a node it is about to delete.
pub const TAINT_TO_BE_DELETED: &str = "ToBeDeletedByClusterAutoscaler";
/// Taint Karpenter puts on a node it is disrupting (consolidation, drift, expiry).
pub const TAINT_KARPENTER_DISRUPTED: &str = "karpenter.sh/disrupted";
/// Taint medik8s' node-maintenance-operator puts on a node it keeps in maintenance.
pub const TAINT_MEDIK8S_DRAIN: &str = "medik8s.io/drain";
/// Taint an operator puts on a node whose host is known down (non-graceful node shutdown).
pub const TAINT_OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";

/// KEP-5683's Node condition: maintenance is planned for the node.
pub const CONDITION_MAINTENANCE_PLANNED: &str = "MaintenancePlanned";
/// KEP-5683's Node condition: the node is being drained.
pub const CONDITION_DRAIN_IN_PROGRESS: &str = "DrainInProgress";
/// KEP-5683's Node condition: the node's drain is over.
pub const CONDITION_DRAINED: &str = "Drained";
/// KEP-5683's Node condition: the node is in maintenance (for rollboot: its reboot).
pub const CONDITION_MAINTENANCE_IN_PROGRESS: &str = "MaintenanceInProgress";
/// The maintenance conditions, in the order a cycle sets them.
pub const MAINTENANCE_CONDITIONS: [&str; 4] = [
    CONDITION_MAINTENANCE_PLANNED,
    CONDITION_DRAIN_IN_PROGRESS,
    CONDITION_DRAINED,
    CONDITION_MAINTENANCE_IN_PROGRESS,
];
/// How the message of a maintenance condition rollboot wrote begins: a condition of these
/// types whose message does not is another writer's, and rollboot never touches it.
pub const CONDITION_MESSAGE_PREFIX: &str = "rollboot: ";
