//! The pure view of a Node: everything rollboot reads of one, parsed once ([`NodeView`]), and
//! the trimmed Node the controller caches ([`trim`]).
//!
//! Owns how a Node's annotations, labels, taints, conditions and node info become a
//! [`NodeView`] (a value that does not parse reads as absent and is listed as [`Malformed`]),
//! what the view answers (flagged, came back, handed off, ...), and what of a Node is kept
//! before it is cached. It must never write: the patches are built by [`super::patch`] from
//! what the view says, and sent by the node writer.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Node;
use serde_json::{json, Value};

use super::history::{History, LastCycle};
use super::keys::*;
use super::others::{other_actor, parse_protected, MaintenanceCondition};
use super::values::{
    boot_id_well_formed, boot_words, same_boot, AgentHost, FleetLockRecord, NodeState, PassedOver,
    Refusal, ShutdownRequest, Token, Undrained,
};
use crate::time;

/// A rollboot annotation whose value is not in the format rollboot writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Malformed {
    /// The annotation key.
    pub key: &'static str,
    /// Its value as found.
    pub value: String,
    /// What a value of this key looks like.
    pub expected: &'static str,
}

/// The value of annotation `key` as `parse` reads it; a present value it refuses is listed in
/// `malformed` (with what a value should look like) and reads as absent.
fn parsed<T>(
    ann: &BTreeMap<String, String>,
    malformed: &mut Vec<Malformed>,
    key: &'static str,
    expected: &'static str,
    parse: impl Fn(&str) -> Option<T>,
) -> Option<T> {
    let v = ann.get(key)?;
    let out = parse(v);
    if out.is_none() {
        malformed.push(Malformed {
            key,
            value: v.clone(),
            expected,
        });
    }
    out
}

/// Everything rollboot needs from one Node, parsed once: a plain value, cheap to test with.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeView {
    /// Node name.
    pub name: String,
    /// `metadata.resourceVersion` of the version this view was parsed from: a write decided
    /// from this view carries it as a precondition (see [`fenced`]); empty when unknown.
    pub resource_version: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// `spec.unschedulable`.
    pub unschedulable: bool,
    /// A `not-ready` or `unreachable` taint is on the node: the node-lifecycle controller does
    /// not count it as back yet, and pods that land on it may be evicted by that taint.
    pub not_ready_taint: bool,
    /// The `unschedulable` taint is on the node (the node-lifecycle controller's copy of
    /// `spec.unschedulable`, written a few milliseconds after a cordon or uncordon).
    pub unschedulable_taint: bool,
    /// Ready condition is True.
    pub ready: bool,
    /// `status.nodeInfo.bootID`.
    pub boot_id: String,
    /// `status.nodeInfo.machineID` (empty when unknown).
    pub machine_id: String,
    /// Being deleted.
    pub deleting: bool,
    /// `reboot-required` present.
    pub reboot_required: bool,
    /// `reboot-required-reason`.
    pub reboot_required_reason: Option<String>,
    /// `reboot-requested` present.
    pub reboot_requested: bool,
    /// The instant written in `reboot-requested`, when it is one.
    pub requested_at: Option<DateTime<Utc>>,
    /// `reboot-requested` present with a value that is not an RFC 3339 instant (`now`, `true`
    /// written by hand): it dates nothing, and the controller writes in its place the instant it
    /// first saw it, so the order "oldest flag first" holds for it too.
    pub request_undated: bool,
    /// `reboot-requested-reason`.
    pub reboot_requested_reason: Option<String>,
    /// The earliest instant written in either flag, when parseable.
    pub flagged_at: Option<DateTime<Utc>>,
    /// The `exclude` label is present (any value but `false`).
    pub excluded: bool,
    /// The `quarantined` label's cause, when present.
    pub quarantined: Option<String>,
    /// `state`, when it parses.
    pub state: Option<NodeState>,
    /// `state-since`.
    pub state_since: Option<DateTime<Utc>>,
    /// `cordoned-by`.
    pub cordoned_by: Option<String>,
    /// `boot-id-before`, when well formed (see [`boot_id_well_formed`]).
    pub boot_id_before: Option<String>,
    /// `init-start-before`, when it parses.
    pub init_start_before: Option<u64>,
    /// `reboot` token text.
    pub reboot_token: Option<String>,
    /// `reboot-ack` token text, as found (a malformed one is also listed in `malformed`).
    pub reboot_ack: Option<String>,
    /// `reboot-lost` token text, as found.
    pub reboot_lost: Option<String>,
    /// `reboot-attempt`, when it parses.
    pub reboot_attempt: Option<u32>,
    /// `reboot-refused`, when it parses.
    pub reboot_refused: Option<Refusal>,
    /// The rollboot annotations present whose value does not parse, in key order; each reads
    /// as absent in the fields above (`reboot-ack` and `reboot-lost` excepted: kept as found).
    pub malformed: Vec<Malformed>,
    /// `health-gate` JSON.
    pub health_gate: Option<String>,
    /// `silence-id`: the Alertmanager silence of this cycle.
    pub silence_id: Option<String>,
    /// `passed-over`: since when the budget-aware pick passes this waiting node over, and for
    /// which budget (absent, or unreadable: never passed over).
    pub passed_over: Option<PassedOver>,
    /// `shutdown-requested` is present: its host is shutting down by itself.
    pub shutdown_requested: bool,
    /// The instant written in `shutdown-requested`, when it is one.
    pub shutdown_requested_at: Option<DateTime<Utc>>,
    /// The logind delay the agent holds the shutdown for, as its request says (seconds).
    pub shutdown_delay_seconds: Option<u64>,
    /// Since when the Ready condition is True (its `lastTransitionTime`), when it is.
    pub ready_since: Option<DateTime<Utc>>,
    /// `agent-host`, when it parses: the agent's reading of its host.
    pub agent_host: Option<AgentHost>,
    /// `undrained`, when it parses: the host of this shutdown cycle went down before its drain
    /// was over.
    pub undrained: Option<Undrained>,
    /// `fleetlock-id`: the host's FleetLock id, given by an operator.
    pub fleetlock_id: Option<String>,
    /// `cycle-for`: why this cycle started (`shutdown`), when rollboot wrote it.
    pub cycle_for: Option<String>,
    /// `handed-off`, when it parses: the reboot was handed to the host at this instant.
    pub handed_off: Option<DateTime<Utc>>,
    /// `fleetlock`, when it parses: the FleetLock server's record of this Node's host.
    pub fleetlock: Option<FleetLockRecord>,
    /// `failure-reason` (with `state: failed`).
    pub failure_reason: Option<String>,
    /// The reboot history rollboot keeps on the Node.
    pub history: History,
    /// `hooks` JSON, as found (parsed by [`crate::hooks::Record::parse`]).
    pub hooks: Option<String>,
    /// The Node's annotations outside `rollboot.dev/` that the object it was parsed from
    /// carries (the controller's cache keeps only the hooks' gate annotations: see
    /// [`trim_keeping`]).
    pub other_annotations: BTreeMap<String, String>,
    /// Every taint of the Node, as stored (a write of the taint list is built from it).
    pub taints: Vec<TaintView>,
    /// Another actor taking the node out of service, in words ([`other_actor`]): rollboot
    /// leaves such a node alone, and counts it out while it is.
    pub other_actor: Option<String>,
    /// KEP-5683's maintenance conditions on the node, whoever wrote them.
    pub maintenance_conditions: Vec<MaintenanceCondition>,
    /// `protected`: the protections rollboot wrote with its cordon, to remove with its uncordon.
    pub protected: Vec<String>,
}

/// One taint of a Node, every field kept, so a taint list written back is the one read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaintView {
    /// Key.
    pub key: String,
    /// Value (empty when absent).
    pub value: String,
    /// Effect.
    pub effect: String,
    /// `timeAdded` (the node-lifecycle controller sets it on NoExecute taints), as RFC 3339.
    pub time_added: Option<String>,
}

impl TaintView {
    /// The JSON of this taint in `spec.taints`.
    pub fn to_json(&self) -> Value {
        let mut t = json!({"key": self.key, "effect": self.effect});
        if !self.value.is_empty() {
            t["value"] = Value::String(self.value.clone());
        }
        if let Some(at) = &self.time_added {
            t["timeAdded"] = Value::String(at.clone());
        }
        t
    }
}

/// The keys of the cycle in progress, as parsed (a malformed value reads as absent).
struct CycleKeys {
    state: Option<NodeState>,
    state_since: Option<DateTime<Utc>>,
    boot_id_before: Option<String>,
    init_start_before: Option<u64>,
    reboot_token: Option<String>,
    handed_off: Option<DateTime<Utc>>,
    reboot_attempt: Option<u32>,
    reboot_refused: Option<Refusal>,
}

/// What a boot ID annotation looks like.
const BOOT_ID_TEXT: &str = "a boot ID: not empty, no whitespace, at most 128 bytes";

impl CycleKeys {
    /// Parses the cycle's keys of `ann`, listing the malformed ones in `malformed` (the
    /// agent's `reboot-ack` and `reboot-lost` are only checked: they are kept as found).
    fn parse(ann: &BTreeMap<String, String>, malformed: &mut Vec<Malformed>) -> CycleKeys {
        let token = "a reboot token `<milliseconds>-<hex>`";
        let as_token = |v: &str| Token::parse(v).map(|_| v.to_string());
        let keys = CycleKeys {
            state: parsed(
                ann,
                malformed,
                STATE,
                "one of cordoning, draining, rebooting, verifying, done, failed",
                |v| v.parse::<NodeState>().ok(),
            ),
            state_since: parsed(
                ann,
                malformed,
                STATE_SINCE,
                "an RFC 3339 instant",
                time::parse_annotation,
            ),
            boot_id_before: parsed(ann, malformed, BOOT_ID_BEFORE, BOOT_ID_TEXT, |v| {
                boot_id_well_formed(v).then(|| v.to_string())
            }),
            init_start_before: parsed(
                ann,
                malformed,
                INIT_START_BEFORE,
                "a whole number (clock ticks)",
                |v| v.parse::<u64>().ok(),
            ),
            reboot_token: parsed(ann, malformed, REBOOT, token, as_token),
            handed_off: parsed(
                ann,
                malformed,
                HANDED_OFF,
                "an RFC 3339 instant",
                time::parse_annotation,
            ),
            reboot_attempt: parsed(
                ann,
                malformed,
                REBOOT_ATTEMPT,
                "a whole number from 1",
                |v| v.parse::<u32>().ok().filter(|a| *a >= 1),
            ),
            reboot_refused: parsed(
                ann,
                malformed,
                REBOOT_REFUSED,
                "JSON with token, cause, reason and at, as the agent writes it",
                Refusal::parse,
            ),
        };
        parsed(ann, malformed, REBOOT_ACK, token, as_token);
        parsed(ann, malformed, REBOOT_LOST, token, as_token);
        keys
    }
}

impl History {
    /// Parses the history keys of `ann`, listing the malformed ones in `malformed`.
    fn parse(ann: &BTreeMap<String, String>, malformed: &mut Vec<Malformed>) -> History {
        let well_formed = |v: &str| boot_id_well_formed(v).then(|| v.to_string());
        History {
            last_reboot: parsed(
                ann,
                malformed,
                LAST_REBOOT,
                "an RFC 3339 instant",
                time::parse_annotation,
            ),
            boot_id_before: parsed(ann, malformed, LAST_BOOT_ID_BEFORE, BOOT_ID_TEXT, well_formed),
            boot_id_after: parsed(ann, malformed, LAST_BOOT_ID_AFTER, BOOT_ID_TEXT, well_formed),
            count: parsed(
                ann,
                malformed,
                REBOOT_COUNT,
                "a whole number from 1",
                |v| v.parse::<u32>().ok().filter(|c| *c >= 1),
            ),
            undrained_count: parsed(
                ann,
                malformed,
                UNDRAINED_COUNT,
                "a whole number from 1",
                |v| v.parse::<u32>().ok().filter(|c| *c >= 1),
            ),
            last_cycle: parsed(
                ann,
                malformed,
                LAST_CYCLE,
                "JSON with drainSeconds, rebootSeconds, gateSeconds, podExitSeconds (numbers of seconds, each optional)",
                LastCycle::parse,
            ),
        }
    }
}

impl TaintView {
    /// A Node's taint, every field kept.
    fn of(t: &k8s_openapi::api::core::v1::Taint) -> TaintView {
        TaintView {
            key: t.key.clone(),
            value: t.value.clone().unwrap_or_default(),
            effect: t.effect.clone(),
            // As the API serializes it, so it is written back unchanged.
            time_added: t
                .time_added
                .as_ref()
                .and_then(|at| serde_json::to_value(at).ok())
                .and_then(|v| v.as_str().map(str::to_string)),
        }
    }
}

impl NodeView {
    /// Parses the parts of a Node rollboot uses.
    pub fn from_node(node: &Node) -> NodeView {
        let meta = &node.metadata;
        let empty = BTreeMap::new();
        let ann = meta.annotations.as_ref().unwrap_or(&empty);
        let get = |k: &str| ann.get(k).cloned();
        let labels = meta.labels.clone().unwrap_or_default();
        let status = node.status.as_ref();
        let ready_condition = status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"));
        let ready = ready_condition.is_some_and(|c| c.status == "True");
        let ready_since = ready_condition
            .filter(|_| ready)
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| time::from_jiff(t.0));
        let shutdown = ann
            .get(SHUTDOWN_REQUESTED)
            .map(|v| ShutdownRequest::parse(v));
        let info = status.and_then(|s| s.node_info.as_ref());
        let taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_deref())
            .unwrap_or(&[]);
        let tainted = |keys: &[&str]| taints.iter().any(|t| keys.contains(&t.key.as_str()));
        let requested = ann.get(REBOOT_REQUESTED);
        let mut malformed = Vec::new();
        let cycle = CycleKeys::parse(ann, &mut malformed);
        let history = History::parse(ann, &mut malformed);
        malformed.sort_by_key(|m| m.key);
        NodeView {
            name: meta.name.clone().unwrap_or_default(),
            resource_version: meta.resource_version.clone().unwrap_or_default(),
            unschedulable: node
                .spec
                .as_ref()
                .and_then(|s| s.unschedulable)
                .unwrap_or(false),
            not_ready_taint: tainted(&[TAINT_NOT_READY, TAINT_UNREACHABLE]),
            unschedulable_taint: tainted(&[TAINT_UNSCHEDULABLE]),
            ready,
            boot_id: info.map(|i| i.boot_id.clone()).unwrap_or_default(),
            machine_id: info.map(|i| i.machine_id.clone()).unwrap_or_default(),
            deleting: meta.deletion_timestamp.is_some(),
            reboot_required: ann.contains_key(REBOOT_REQUIRED),
            reboot_required_reason: get(REBOOT_REQUIRED_REASON),
            reboot_requested: requested.is_some(),
            requested_at: requested.and_then(|v| time::parse_annotation(v)),
            request_undated: requested.is_some_and(|v| time::parse_annotation(v).is_none()),
            reboot_requested_reason: get(REBOOT_REQUESTED_REASON),
            flagged_at: [REBOOT_REQUIRED, REBOOT_REQUESTED]
                .iter()
                .filter_map(|k| ann.get(*k).and_then(|v| time::parse_annotation(v)))
                .min(),
            excluded: labels.get(EXCLUDE).is_some_and(|v| v != "false"),
            quarantined: labels.get(QUARANTINED).cloned(),
            state: cycle.state,
            state_since: cycle.state_since,
            cordoned_by: get(CORDONED_BY),
            boot_id_before: cycle.boot_id_before,
            init_start_before: cycle.init_start_before,
            reboot_token: cycle.reboot_token,
            reboot_ack: get(REBOOT_ACK),
            reboot_lost: get(REBOOT_LOST),
            reboot_attempt: cycle.reboot_attempt,
            reboot_refused: cycle.reboot_refused,
            malformed,
            health_gate: get(HEALTH_GATE),
            silence_id: get(SILENCE_ID),
            passed_over: ann
                .get(PASSED_OVER)
                .and_then(|v| serde_json::from_str(v).ok()),
            shutdown_requested: ann.contains_key(SHUTDOWN_REQUESTED),
            shutdown_requested_at: shutdown.as_ref().and_then(|s| s.at),
            shutdown_delay_seconds: shutdown.as_ref().and_then(|s| s.delay_seconds),
            ready_since,
            agent_host: ann.get(AGENT_HOST).and_then(|v| AgentHost::parse(v)),
            undrained: ann.get(UNDRAINED).and_then(|v| Undrained::parse(v)),
            fleetlock_id: get(FLEETLOCK_ID),
            cycle_for: get(CYCLE_FOR),
            handed_off: cycle.handed_off,
            fleetlock: ann
                .get(FLEETLOCK)
                .and_then(|v| serde_json::from_str(v).ok()),
            failure_reason: get(FAILURE_REASON),
            history,
            labels,
            hooks: get(HOOKS),
            other_annotations: ann
                .iter()
                .filter(|(k, _)| !k.starts_with(PREFIX))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            taints: taints.iter().map(TaintView::of).collect(),
            ..NodeView::others(node, ann)
        }
    }

    /// The fields of [`NodeView::from_node`] that say what other actors do with the node, and
    /// what rollboot wrote to show itself to them.
    fn others(node: &Node, ann: &BTreeMap<String, String>) -> NodeView {
        // The keys only: `from_node` keeps the taints themselves.
        let taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_deref())
            .unwrap_or(&[]);
        let maintenance_conditions: Vec<MaintenanceCondition> = node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_deref())
            .unwrap_or(&[])
            .iter()
            .filter_map(MaintenanceCondition::of)
            .collect();
        NodeView {
            other_actor: other_actor(
                taints.iter().map(|t| t.key.as_str()),
                &maintenance_conditions,
            ),
            maintenance_conditions,
            protected: ann
                .get(PROTECTED)
                .map(|v| parse_protected(v))
                .unwrap_or_default(),
            ..NodeView::default()
        }
    }

    /// The maintenance condition `kind` on the node, when it is there.
    pub fn maintenance_condition(&self, kind: &str) -> Option<&MaintenanceCondition> {
        self.maintenance_conditions.iter().find(|c| c.kind == kind)
    }

    /// Flagged for a reboot by the agent or an operator.
    pub fn flagged(&self) -> bool {
        self.reboot_required || self.reboot_requested
    }

    /// When the reboot was handed to the host (`handed-off`), if it was and no token stands
    /// beside it: the host reboots itself.
    pub fn handed_off_at(&self) -> Option<DateTime<Utc>> {
        self.handed_off.filter(|_| self.reboot_token.is_none())
    }

    /// The start of its host's PID 1 on the boot the Node reports, as its agent wrote it
    /// (`None` when the agent's record is of another boot ID, or has none).
    pub fn host_init_start(&self) -> Option<u64> {
        self.agent_host
            .as_ref()
            .filter(|h| h.boot_id.eq_ignore_ascii_case(&self.boot_id))
            .and_then(|h| h.init_start)
    }

    /// The boot the node is on, as the annotations that record it before a reboot have it:
    /// `boot-id-before` (its boot ID) and `init-start-before` (its host's PID 1 start, where
    /// the agent wrote it for that boot ID).
    pub fn boot_before(&self) -> Vec<(&'static str, Option<String>)> {
        vec![
            (BOOT_ID_BEFORE, Some(self.boot_id.clone())),
            (
                INIT_START_BEFORE,
                self.host_init_start().map(|t| t.to_string()),
            ),
        ]
    }

    /// The boot the node is on, in words.
    pub fn boot_words(&self) -> String {
        boot_words(&self.boot_id, self.host_init_start())
    }

    /// Whether the node is on a boot other than `before` and `init-start-before`
    /// ([`same_boot`]): it reports another boot ID, or (a kind-like node, whose boot ID never
    /// changes) its agent reports another start of the host's PID 1.
    pub fn booted_since(&self, before: &str) -> bool {
        !self.boot_id.is_empty()
            && !same_boot(
                before,
                self.init_start_before,
                &self.boot_id,
                self.host_init_start(),
            )
    }

    /// The node is on a boot other than `boot-id-before`.
    pub fn came_back(&self) -> bool {
        self.boot_id_before
            .as_deref()
            .is_some_and(|b| self.booted_since(b))
    }

    /// This cycle was started for a shutdown of its host (`cycle-for: shutdown`).
    pub fn for_shutdown(&self) -> bool {
        self.cycle_for.as_deref() == Some(CYCLE_FOR_SHUTDOWN)
    }

    /// Its host reboots itself: a FleetLock host asked for this cycle (its `pre-reboot`
    /// flagged it), so the reboot is handed to the host instead of a token to the agent.
    pub fn hands_off(&self) -> bool {
        self.reboot_requested
            && self.reboot_requested_reason.as_deref() == Some(FLEETLOCK_REASON)
            && self.fleetlock.is_some()
    }

    /// The node-lifecycle controller has not yet copied `spec.unschedulable` into its taint.
    /// It will, within milliseconds, and that write changes the Node's resourceVersion: a
    /// write decided from this view would be refused with 409 (see [`fenced`]).
    pub fn cordon_taint_pending(&self) -> bool {
        self.unschedulable != self.unschedulable_taint
    }

    /// Whether the value of `key` is present and malformed.
    pub fn is_malformed(&self, key: &str) -> bool {
        self.malformed.iter().any(|m| m.key == key)
    }

    /// The reboot token is written and not yet acknowledged by the agent.
    pub fn token_unacknowledged(&self) -> Option<&str> {
        match (&self.reboot_token, &self.reboot_ack) {
            (Some(t), Some(a)) if t == a => None,
            (Some(t), _) => Some(t),
            _ => None,
        }
    }
}

/// Keeps of a Node only what [`NodeView::from_node`] reads, before it is cached: name,
/// resourceVersion, labels, rollboot's own annotations and the protections it may write,
/// deletion, `spec.unschedulable`, the taints, the Ready and maintenance conditions, the boot ID
/// and the machine ID. A kubelet's Node carries images, volumes,
/// addresses, capacity and a dozen conditions; 5,000 of them kept whole were half the
/// controller's memory. Every taint is kept (a Node has a handful): a write of the taint list
/// replaces it whole, so it must be built from all of them.
pub fn trim(node: Node) -> Node {
    trim_keeping(node, &[])
}

/// The Node address types (`status.addresses`) a host's own requests may come from: the
/// FleetLock server answers a host only from one of them.
pub const HOST_ADDRESS_TYPES: [&str; 2] = ["InternalIP", "ExternalIP"];

/// [`trim`], keeping also the annotations named in `keep` (the hooks' gate annotations).
pub fn trim_keeping(node: Node, keep: &[String]) -> Node {
    use k8s_openapi::api::core::v1::{NodeSpec, NodeStatus, NodeSystemInfo};
    let meta = node.metadata;
    let status = node.status.map(|s| NodeStatus {
        conditions: s.conditions.map(|cs| {
            cs.into_iter()
                .filter(|c| {
                    c.type_ == "Ready" || MAINTENANCE_CONDITIONS.contains(&c.type_.as_str())
                })
                .collect()
        }),
        node_info: s.node_info.map(|i| NodeSystemInfo {
            boot_id: i.boot_id,
            // The FleetLock server finds a host's Node by an id derived from it.
            machine_id: i.machine_id,
            ..Default::default()
        }),
        // The FleetLock server answers a host only from one of these.
        addresses: s.addresses.map(|a| {
            a.into_iter()
                .filter(|a| HOST_ADDRESS_TYPES.contains(&a.type_.as_str()))
                .collect()
        }),
        ..Default::default()
    });
    Node {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: meta.name,
            uid: meta.uid,
            resource_version: meta.resource_version,
            deletion_timestamp: meta.deletion_timestamp,
            labels: meta.labels,
            annotations: meta.annotations.map(|a| {
                a.into_iter()
                    .filter(|(k, _)| {
                        k.starts_with(PREFIX)
                            || keep.contains(k)
                            || PROTECTIONS.contains(&k.as_str())
                    })
                    .collect()
            }),
            ..Default::default()
        },
        spec: node.spec.map(|s| NodeSpec {
            unschedulable: s.unschedulable,
            taints: s.taints,
            ..Default::default()
        }),
        status,
    }
}
