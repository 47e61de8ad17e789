//! The operator's controls: `rollboot pause`, `resume`, `retry NODE` and `request NODE`.
//!
//! Owns what each command writes, or why it refuses, decided purely from what was read and
//! the instant of the command ([`plan_pause`], [`plan_resume`], [`plan_retry`],
//! [`plan_request`], [`in_flight_fate`]), and the I/O that carries it out ([`pause`],
//! [`resume`], [`retry`], [`request`]): read, decide, write with the resourceVersion read as a
//! precondition (a Node through the one node writer, as an operator: [`crate::node_writer`]);
//! after a 409 read again and decide again from the fresh object. It must never
//! write without that precondition (no blind overwrite), never take the lock from a holder
//! that is neither free, rollboot, nor an earlier pause, and never forget the nodes the lock
//! records in flight: a pause keeps them, and they finish their cycle under it.
//!
//! What a command prints is its [`Report`] or, when it did nothing, its [`Failure`] (text and
//! JSON from the same value, [`Render`]); [`Control`] is the command line's request.

use chrono::{DateTime, Utc};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use serde::Serialize;
use serde_json::Value;

use crate::config::Config;
use crate::lease::{LeaseError, LeaseRef};
use crate::lock::{LockEntry, LockRecord, Pause, PAUSE_HOLDER_PREFIX};
use crate::node::{self as proto, NodeState, NodeView};
use crate::node_writer::{Fence, NodeWriteError, NodeWriter, Writer};
use crate::render::Render;
use crate::time;

/// How many times a command reads again and decides again after a conflict before it gives up.
const ATTEMPTS: usize = 5;

/// Why a command does nothing: the state it found makes the request unsafe or meaningless.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ControlRefusal(pub String);

/// What can go wrong carrying out a control.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The command refuses (exit 3).
    #[error("refused: {0}")]
    Refused(#[from] ControlRefusal),
    /// The API server could not be asked, or refused the request (exit 1).
    #[error("{object} at the API server {server}: {source}")]
    Api {
        /// The API server's URL.
        server: String,
        /// What was being read or written.
        object: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The object changed under every attempt (exit 1).
    #[error("{object} at the API server {server} kept changing: gave up after {ATTEMPTS} conflicts (409); try again")]
    Contended {
        /// The API server's URL.
        server: String,
        /// The object.
        object: String,
    },
    /// The node writer would not send a write (exit 1).
    #[error(transparent)]
    Write(NodeWriteError),
    /// The object does not exist (exit 1).
    #[error("{object} does not exist at the API server {server}")]
    NotFound {
        /// The API server's URL.
        server: String,
        /// The object.
        object: String,
    },
}

/// What a command did, printed as text or as the `--output json` object.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// `pause`, `resume`, `retry` or `request`.
    pub command: &'static str,
    /// `paused`, `alreadyPaused`, `resumed`, `notPaused`, `retried`, `requested`,
    /// `alreadyRequested` or `refused`.
    pub outcome: &'static str,
    /// The object written or looked at (`Lease ns/name`, `Node name`).
    pub object: String,
    /// One sentence: what happened.
    pub message: String,
    /// What follows from it (one sentence each), such as what happens to each node in flight.
    pub notes: Vec<String>,
}

impl Render for Report {
    /// The message, then each note on a line of its own.
    fn text(&self) -> String {
        let mut out = format!("{}\n", self.message);
        for n in &self.notes {
            out.push_str(&format!("  - {n}\n"));
        }
        out
    }
}

/// A control that did nothing: refused (exit 3) or failed (exit 1). Its JSON is the
/// `--output json` object, with the keys of a [`Report`] (`notes` empty); its text is the line
/// said on stderr.
#[derive(Clone, Debug, Serialize)]
pub struct Failure {
    /// `pause`, `resume`, `retry` or `request`.
    pub command: &'static str,
    /// `refused` or `error`.
    pub outcome: &'static str,
    /// The object the command wrote or looked at (`Lease ns/name`, `Node name`).
    pub object: String,
    /// Why, naming the object.
    pub message: String,
    /// None: a command that did nothing has nothing that follows from it.
    pub notes: Vec<String>,
}

impl Failure {
    /// `control` ended with `e`.
    pub fn new(control: &Control, e: &ControlError) -> Failure {
        Failure {
            command: control.command(),
            object: control.object(),
            notes: Vec::new(),
            message: e.to_string(),
            outcome: if matches!(e, ControlError::Refused(_)) {
                "refused"
            } else {
                "error"
            },
        }
    }

    /// The command refused (rather than failed).
    pub fn refused(&self) -> bool {
        self.outcome == "refused"
    }
}

impl Render for Failure {
    fn text(&self) -> String {
        format!("error: {}: {}\n", self.command, self.message)
    }
}

/// One of the operator's controls, with what it needs: what the command line asks for.
#[derive(Debug)]
pub enum Control {
    /// `rollboot pause`: by `who`, for `reason`.
    Pause {
        /// The controller's config (the lock Lease).
        config: Config,
        /// Who pauses.
        who: String,
        /// Why.
        reason: Option<String>,
    },
    /// `rollboot resume`.
    Resume {
        /// The controller's config (the lock Lease).
        config: Config,
        /// Release the lock whoever holds it.
        force: bool,
    },
    /// `rollboot retry NODE`.
    Retry {
        /// The controller's config (its lock and leader Leases, for what follows); the
        /// defaults' without `--config`.
        config: Config,
        /// The node.
        node: String,
    },
    /// `rollboot request NODE`.
    Request {
        /// The controller's config (as for `retry`).
        config: Config,
        /// The node.
        node: String,
        /// Why.
        reason: Option<String>,
    },
}

impl Control {
    /// The command's name.
    pub fn command(&self) -> &'static str {
        match self {
            Control::Pause { .. } => "pause",
            Control::Resume { .. } => "resume",
            Control::Retry { .. } => "retry",
            Control::Request { .. } => "request",
        }
    }

    /// Carries it out with `client`; `server` names the API server in errors.
    pub async fn run(&self, client: &kube::Client, server: &str) -> Result<Report, ControlError> {
        match self {
            Control::Pause {
                config,
                who,
                reason,
            } => pause(client, server, config, who, reason.as_deref()).await,
            Control::Resume { config, force } => resume(client, server, config, *force).await,
            Control::Retry { config, node } => {
                let mut r = retry(client, server, node).await?;
                r.notes.extend(who_acts_now(client, config, node).await);
                Ok(r)
            }
            Control::Request {
                config,
                node,
                reason,
            } => {
                let mut r = request(client, server, node, reason.as_deref()).await?;
                r.notes.extend(who_acts_now(client, config, node).await);
                Ok(r)
            }
        }
    }

    /// The object the command writes or looks at, as its report names it.
    pub fn object(&self) -> String {
        match self {
            Control::Pause { config, .. } | Control::Resume { config, .. } => {
                format!("Lease {}/{}", config.lock.namespace, config.lock.name)
            }
            Control::Retry { node, .. } | Control::Request { node, .. } => format!("Node {node}"),
        }
    }
}

/// Whether anything will act on a node just retried or requested, from the config's lock and
/// leader Leases: one note each when something stands in the way (rollboot paused, the lock
/// held by another tool, no controller leading); what cannot be read is said, not failed on.
async fn who_acts_now(client: &kube::Client, config: &Config, node: &str) -> Vec<String> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), &config.lock.namespace);
    let lock = leases.get_opt(&config.lock.name).await;
    let leader_leases: Api<Lease> = Api::namespaced(client.clone(), &config.leader.namespace);
    let leader = leader_leases.get_opt(&config.leader.name).await;
    let mut notes = Vec::new();
    match lock {
        Ok(l) => notes.extend(lock_notes(
            &LockRecord::from_lease(l),
            &crate::lock::lock_owner(config),
            &format!("{}/{}", config.lock.namespace, config.lock.name),
            node,
        )),
        Err(e) => notes.push(format!(
            "the maintenance lock Lease {}/{} could not be read: {e}",
            config.lock.namespace, config.lock.name
        )),
    }
    match leader {
        Ok(l) => notes.extend(leader_note(config, l.as_ref(), Utc::now())),
        Err(e) => notes.push(format!(
            "the leader Lease {}/{} could not be read: {e}",
            config.leader.namespace, config.leader.name
        )),
    }
    notes
}

/// What the lock `name` says of a node just retried or requested (pure).
pub fn lock_notes(record: &LockRecord, ours: &str, name: &str, node: &str) -> Vec<String> {
    let mut notes = Vec::new();
    if let Some(p) = &record.pause {
        notes.push(format!(
            "rollboot is paused (by {}): nothing new starts until `rollboot resume`",
            p.by
        ));
    } else if let Some(h) = record.foreign_holder(ours) {
        notes.push(format!(
            "the maintenance lock {name} is held by `{h}`: rollboot starts nothing new while another tool holds it"
        ));
    }
    if record.entries.contains_key(node) {
        notes.push(format!(
            "{node} is still listed in the maintenance lock {name}: the controller frees or resumes its slot on its next pass"
        ));
    }
    notes
}

/// What the leader Lease says, as `rollboot status` reads it: a note when no controller leads
/// now (pure).
pub fn leader_note(config: &Config, lease: Option<&Lease>, now: DateTime<Utc>) -> Option<String> {
    let l = crate::status::leader(config, lease, now);
    if !l.expired {
        return None;
    }
    Some(match l.holder {
        Some(h) => format!(
            "the leader Lease {} names `{h}`, but it has not renewed it within its {}s: no controller may be running to act on it",
            l.lease, l.lease_duration_seconds
        ),
        None => format!(
            "no controller holds the leader Lease {}: nothing acts on it until one runs",
            l.lease
        ),
    })
}

// ---- decisions (pure) ------------------------------------------------------------------------

/// What `pause` does with the lock as read.
#[derive(Clone, Debug)]
pub enum PausePlan {
    /// Write this Lease (create it when the lock did not exist).
    Take(Box<Lease>),
    /// An operator already paused rollboot: nothing is written.
    Already(Pause),
}

/// Decides `pause` by `who`: take the lock when it is free or rollboot's own (keeping its
/// in-flight record), leave an earlier pause as it is, refuse another holder's lock.
pub fn plan_pause(
    record: &LockRecord,
    ours: &str,
    who: &str,
    reason: Option<&str>,
    now: DateTime<Utc>,
) -> Result<PausePlan, ControlRefusal> {
    if let Some(p) = &record.pause {
        return Ok(PausePlan::Already(p.clone()));
    }
    if let Some(h) = record.foreign_holder(ours) {
        return Err(ControlRefusal(format!(
            "the maintenance lock is held by `{h}`, not by rollboot nor by a `rollboot pause`: \
             rollboot already starts nothing new while another tool holds it, and a pause must \
             not take that tool's lock"
        )));
    }
    if who.trim().is_empty() || who.contains(['\n', '\r']) {
        return Err(ControlRefusal(format!(
            "`{who}` cannot name who pauses (--by): one line, not empty"
        )));
    }
    Ok(PausePlan::Take(Box::new(record.paused(who, reason, now))))
}

/// What `resume` does with the lock as read.
#[derive(Clone, Debug)]
pub enum ResumePlan {
    /// The lock is free (or absent): nothing is paused, nothing is written.
    NotPaused,
    /// Write this Lease; `was` says who held it and since when.
    Release {
        /// The Lease to write.
        lease: Box<Lease>,
        /// The previous holder, as a phrase.
        was: String,
    },
}

/// Decides `resume`: release an operator's pause; refuse rollboot's own lock or another
/// holder's unless `force`. The in-flight record is kept either way.
pub fn plan_resume(
    record: &LockRecord,
    ours: &str,
    force: bool,
    now: DateTime<Utc>,
) -> Result<ResumePlan, ControlRefusal> {
    let Some(holder) = &record.holder else {
        return Ok(ResumePlan::NotPaused);
    };
    let was = match &record.pause {
        Some(p) => pause_phrase(p),
        None if holder == ours && !force => {
            return Err(ControlRefusal(format!(
                "the maintenance lock is held by rollboot's controller (`{holder}`) for the {} \
                 node(s) in flight, not by a pause: nothing to resume (--force releases it; the \
                 controller takes it again for the nodes in flight)",
                record.entries.len()
            )))
        }
        None if !force => {
            return Err(ControlRefusal(format!(
                "the maintenance lock is held by `{holder}`, not by a `rollboot pause` (its holder \
                 would start with `{PAUSE_HOLDER_PREFIX}`): another tool's lock is released by \
                 that tool, or with --force"
            )))
        }
        None => format!("held by `{holder}` (released with --force)"),
    };
    Ok(ResumePlan::Release {
        lease: Box::new(record.released(ours, now)),
        was,
    })
}

fn pause_phrase(p: &Pause) -> String {
    let mut s = format!("paused by {}", p.by);
    if let Some(t) = p.at {
        s.push_str(&format!(" since {}", time::annotation(t)));
    }
    if let Some(r) = &p.reason {
        s.push_str(&format!(" ({r})"));
    }
    s
}

/// What happens to one node listed in the lock when rollboot is paused, as one sentence: it
/// finishes its cycle (the controller goes on with the nodes a pause keeps in the lock, and
/// only with them).
pub fn in_flight_fate(name: &str, node: Option<&NodeView>, entry: &LockEntry) -> String {
    let Some(n) = node else {
        return format!(
            "{name} is listed in flight but no longer exists: the controller frees its slot"
        );
    };
    let state = crate::controller::decide::this_cycle(n, entry);
    let doing = match state {
        Some(NodeState::Cordoning) => "is being cordoned",
        Some(NodeState::Draining) => "is draining",
        Some(NodeState::Rebooting) => "is rebooting",
        Some(NodeState::Verifying) => "is back and being verified",
        Some(NodeState::Done) => "is done",
        Some(NodeState::Failed) => "failed",
        None => "is starting (listed in the lock, its cordon next)",
    };
    match state {
        Some(NodeState::Done | NodeState::Failed) => {
            format!("{name} {doing}: the controller frees its slot")
        }
        _ => format!(
            "{name} {doing}: it finishes its cycle (reboot, verification, uncordon) under the \
             pause; nothing new starts"
        ),
    }
}

/// What `retry` writes: the merge patch, and what it means.
#[derive(Clone, Debug, PartialEq)]
pub struct RetryPlan {
    /// The merge patch (fenced by the node's resourceVersion).
    pub patch: Value,
    /// rollboot had cordoned it: it is uncordoned.
    pub uncordons: bool,
    /// Someone else cordoned it: it stays cordoned.
    pub stays_cordoned: bool,
}

/// Decides `retry` of a failed node: remove the failure's record and what its cycle left
/// ([`proto::FAILURE_RECORD`], [`proto::CYCLE_KEYS`], the lists the controller itself uses),
/// and uncordon it only if rollboot cordoned it. Refuses a node that is not failed.
pub fn plan_retry(n: &NodeView) -> Result<RetryPlan, ControlRefusal> {
    if n.state != Some(NodeState::Failed) {
        let state = match (n.state, n.is_malformed(proto::STATE)) {
            (Some(s), _) => format!("its state is `{s}`"),
            (None, true) => format!("its state annotation {} is malformed", proto::STATE),
            (None, false) => "it has no rollboot state".to_string(),
        };
        return Err(ControlRefusal(format!(
            "node {} is not failed ({state}): only a failed node is retried",
            n.name
        )));
    }
    let mut ann: Vec<(&str, Option<String>)> = proto::FAILURE_RECORD
        .iter()
        .chain(proto::CYCLE_KEYS.iter())
        .map(|k| (*k, None))
        .collect();
    let ours = n.cordoned_by.is_some();
    if ours {
        ann.push((proto::CORDONED_BY, None));
        ann.extend(proto::unprotect_keys(&n.protected));
    }
    let uncordons = ours && n.unschedulable;
    // A quarantine ends with the failure it came with.
    let labels: Vec<(String, Option<String>)> = n
        .quarantined
        .as_ref()
        .map(|_| (proto::QUARANTINED.to_string(), None))
        .into_iter()
        .collect();
    Ok(RetryPlan {
        patch: proto::with_labels(proto::patch(&ann, uncordons.then_some(false)), &labels),
        uncordons,
        stays_cordoned: n.unschedulable && !ours,
    })
}

/// What `request` writes.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestPlan {
    /// The merge patch, `None` when the node is already requested (its earlier instant kept,
    /// so its turn is not lost) and the reason is unchanged.
    pub patch: Option<Value>,
    /// The instant the request is dated (now, or the earlier request's).
    pub at: DateTime<Utc>,
    /// What else the operator should know (excluded, failed, in a cycle now).
    pub notes: Vec<String>,
}

/// Decides `request`: `reboot-requested` with the instant of the request, as the agent dates
/// its flag, so the order "oldest flag first" holds; an earlier dated request keeps its
/// instant; an undated one (`now` by hand) is dated now.
pub fn plan_request(n: &NodeView, reason: Option<&str>, now: DateTime<Utc>) -> RequestPlan {
    let earlier = n.requested_at;
    let mut ann: Vec<(&str, Option<String>)> = Vec::new();
    let at = match earlier {
        Some(t) => t,
        None => {
            ann.push((proto::REBOOT_REQUESTED, Some(time::annotation(now))));
            now
        }
    };
    if let Some(r) = reason.filter(|r| n.reboot_requested_reason.as_deref() != Some(*r)) {
        ann.push((proto::REBOOT_REQUESTED_REASON, Some(r.to_string())));
    }
    let mut notes = Vec::new();
    if n.excluded {
        notes.push(format!(
            "node {} carries the label {}: it is not rebooted while the label is there",
            n.name,
            proto::EXCLUDE
        ));
    }
    match n.state {
        Some(NodeState::Failed) => notes.push(format!(
            "node {} is failed: it is not started again until `rollboot retry {}`",
            n.name, n.name
        )),
        Some(s) if s.in_flight() => notes.push(format!(
            "node {} is in a cycle now ({s}): that cycle's end clears this request",
            n.name
        )),
        _ => {}
    }
    RequestPlan {
        patch: (!ann.is_empty()).then(|| proto::patch(&ann, None)),
        at,
        notes,
    }
}

// ---- I/O -----------------------------------------------------------------------------------

fn api_err(server: &str, object: &str) -> impl FnOnce(kube::Error) -> ControlError {
    let (server, object) = (server.to_string(), object.to_string());
    move |source| ControlError::Api {
        server,
        object,
        source,
    }
}

fn lease_err(server: &str, object: &str, e: LeaseError) -> ControlError {
    match e {
        LeaseError::Api { source, .. } => api_err(server, object)(source),
        LeaseError::Conflict { .. } => ControlError::Contended {
            server: server.into(),
            object: object.into(),
        },
    }
}

/// The maintenance lock of `config`, and how errors name it.
struct LockTarget {
    lease: LeaseRef,
    object: String,
    server: String,
    ours: String,
}

impl LockTarget {
    fn new(client: &kube::Client, server: &str, config: &Config) -> LockTarget {
        LockTarget {
            lease: LeaseRef::new(client.clone(), &config.lock.namespace, &config.lock.name),
            object: format!("Lease {}/{}", config.lock.namespace, config.lock.name),
            server: server.into(),
            ours: crate::lock::lock_owner(config),
        }
    }

    async fn read(&self) -> Result<LockRecord, ControlError> {
        crate::lock::read(&self.lease)
            .await
            .map_err(|e| lease_err(&self.server, &self.object, e))
    }

    /// Writes `l` as decided from `record`: a replace carrying the resourceVersion read, or a
    /// create when there was no Lease. `Ok(None)` on a conflict (decide again).
    async fn write(&self, record: &LockRecord, l: Lease) -> Result<Option<Lease>, ControlError> {
        let replacing = record.lease.is_some();
        let written = if replacing {
            self.lease.replace(&l).await
        } else {
            self.lease.create(l).await
        };
        match written {
            Ok(l) => Ok(Some(l)),
            Err(LeaseError::Conflict { .. }) => Ok(None),
            // Deleted since it was read: read again (then created). A create's 404 is the
            // namespace's: said as the API server says it, not retried as a conflict.
            Err(LeaseError::Api {
                source: kube::Error::Api(s),
                ..
            }) if s.code == 404 && replacing => Ok(None),
            Err(e) => Err(lease_err(&self.server, &self.object, e)),
        }
    }

    fn contended(&self) -> ControlError {
        ControlError::Contended {
            server: self.server.clone(),
            object: self.object.clone(),
        }
    }
}

/// `rollboot pause`: takes the maintenance lock as `who`'s pause, recording why; says what
/// happens to each node in flight.
pub async fn pause(
    client: &kube::Client,
    server: &str,
    config: &Config,
    who: &str,
    reason: Option<&str>,
) -> Result<Report, ControlError> {
    let target = LockTarget::new(client, server, config);
    for _ in 0..ATTEMPTS {
        let record = target.read().await?;
        match plan_pause(&record, &target.ours, who, reason, Utc::now())? {
            PausePlan::Already(p) => {
                return Ok(Report {
                    command: "pause",
                    outcome: "alreadyPaused",
                    object: target.object.clone(),
                    message: format!("rollboot is already {}; nothing written", pause_phrase(&p)),
                    notes: in_flight_notes(client, server, &record).await?,
                })
            }
            PausePlan::Take(l) => {
                let Some(written) = target.write(&record, *l).await? else {
                    continue;
                };
                let record = LockRecord::from_lease(Some(written));
                let mut notes = in_flight_notes(client, server, &record).await?;
                if let Some(why) = &record.untrusted {
                    notes.push(format!(
                        "the lock's in-flight record cannot be read ({why}): the nodes in flight \
                         wait until `rollboot resume`, when the controller rebuilds it"
                    ));
                }
                let p = record.pause.as_ref().expect("a pause was written");
                return Ok(Report {
                    command: "pause",
                    outcome: "paused",
                    object: target.object.clone(),
                    message: format!(
                        "rollboot is {}: it starts no new node until `rollboot resume`",
                        pause_phrase(p)
                    ),
                    notes,
                });
            }
        }
    }
    Err(target.contended())
}

/// One sentence per node the lock records in flight (each node read once).
async fn in_flight_notes(
    client: &kube::Client,
    server: &str,
    record: &LockRecord,
) -> Result<Vec<String>, ControlError> {
    let api: Api<Node> = Api::all(client.clone());
    let mut notes = Vec::new();
    for (name, entry) in &record.entries {
        // A name the Lease's writer chose that no Node can have is not put into a request
        // path (kube-rs does not encode it): no such Node.
        let node = match crate::url::is_dns_subdomain(name) {
            true => api
                .get_opt(name)
                .await
                .map_err(api_err(server, &format!("Node {name}")))?
                .map(|n| NodeView::from_node(&n)),
            false => None,
        };
        notes.push(in_flight_fate(name, node.as_ref(), entry));
    }
    if record.entries.is_empty() {
        notes.push("no node is in flight".into());
    }
    Ok(notes)
}

/// `rollboot resume`: releases an operator's pause (another holder's lock only with `force`).
pub async fn resume(
    client: &kube::Client,
    server: &str,
    config: &Config,
    force: bool,
) -> Result<Report, ControlError> {
    let target = LockTarget::new(client, server, config);
    for _ in 0..ATTEMPTS {
        let record = target.read().await?;
        match plan_resume(&record, &target.ours, force, Utc::now())? {
            ResumePlan::NotPaused => {
                return Ok(Report {
                    command: "resume",
                    outcome: "notPaused",
                    object: target.object.clone(),
                    message:
                        "the maintenance lock is free: rollboot is not paused; nothing written"
                            .into(),
                    notes: Vec::new(),
                })
            }
            ResumePlan::Release { lease, was } => {
                let Some(written) = target.write(&record, *lease).await? else {
                    continue;
                };
                let record = LockRecord::from_lease(Some(written));
                let now_held = match &record.holder {
                    Some(h) => format!(
                        "held by rollboot ({h}) for the {} node(s) in flight",
                        record.entries.len()
                    ),
                    None => "free".into(),
                };
                return Ok(Report {
                    command: "resume",
                    outcome: "resumed",
                    object: target.object.clone(),
                    message: format!(
                        "resumed: the maintenance lock was {was}; it is now {now_held}; rollboot \
                         starts new nodes again when nothing else blocks it"
                    ),
                    notes: Vec::new(),
                });
            }
        }
    }
    Err(target.contended())
}

/// Reads `name`, decides with `decide`, and writes its merge patch fenced by the resourceVersion
/// read, through the node writer as an operator; after a conflict reads again and decides again.
/// `what` names the write.
async fn node_write<T>(
    client: &kube::Client,
    server: &str,
    name: &str,
    what: &str,
    decide: impl Fn(&NodeView) -> Result<(Option<Value>, T), ControlRefusal>,
) -> Result<(NodeView, T), ControlError> {
    let writer = NodeWriter::new(client.clone(), Writer::Operator);
    let object = format!("Node {name}");
    let failed = |e: NodeWriteError| match e {
        NodeWriteError::Api { source, .. } => api_err(server, &object)(source),
        // The operator's writes are sent as decided (fenced), and are not refused otherwise.
        e => ControlError::Write(e),
    };
    for _ in 0..ATTEMPTS {
        let Some(node) = writer.read(name).await.map_err(failed)? else {
            return Err(ControlError::NotFound {
                server: server.into(),
                object,
            });
        };
        let view = NodeView::from_node(&node);
        let (patch, out) = decide(&view)?;
        let Some(patch) = patch else {
            return Ok((view, out));
        };
        match writer
            .write(name, Fence::At(&view.resource_version), what, patch)
            .await
        {
            Ok(n) => return Ok((NodeView::from_node(&n), out)),
            Err(NodeWriteError::Conflict { .. }) => continue,
            Err(e) => return Err(failed(e)),
        }
    }
    Err(ControlError::Contended {
        server: server.into(),
        object,
    })
}

/// `rollboot retry NODE`: clears a failed node so the controller takes it again from the start.
pub async fn retry(
    client: &kube::Client,
    server: &str,
    name: &str,
) -> Result<Report, ControlError> {
    let (after, (plan, reason)) = node_write(client, server, name, "clearing its failure", |v| {
        let plan = plan_retry(v)?;
        Ok((
            Some(plan.patch.clone()),
            (plan, v.failure_reason.clone().unwrap_or_default()),
        ))
    })
    .await?;
    let mut notes = Vec::new();
    if plan.uncordons {
        notes.push(format!("rollboot had cordoned {name}: it is uncordoned"));
    }
    if plan.stays_cordoned {
        notes.push(format!(
            "{name} was cordoned by someone else, not rollboot: it stays cordoned"
        ));
    }
    notes.push(if after.flagged() {
        format!("{name} is still flagged: the controller takes it again from the cordon, when nothing blocks it")
    } else {
        format!(
            "{name} is no longer flagged: it is not rebooted again unless flagged (`rollboot request {name}`)"
        )
    });
    Ok(Report {
        command: "retry",
        outcome: "retried",
        object: format!("Node {name}"),
        message: format!("cleared the failure of {name} ({reason})"),
        notes,
    })
}

/// `rollboot request NODE`: flags the node with the instant of the request.
pub async fn request(
    client: &kube::Client,
    server: &str,
    name: &str,
    reason: Option<&str>,
) -> Result<Report, ControlError> {
    let (_, plan) = node_write(client, server, name, "requesting its reboot", |v| {
        let plan = plan_request(v, reason, Utc::now());
        Ok((plan.patch.clone(), plan))
    })
    .await?;
    let at = time::annotation(plan.at);
    let (outcome, message) = if plan.patch.is_none() {
        (
            "alreadyRequested",
            format!("{name} was already requested at {at}; it keeps its turn; nothing written"),
        )
    } else {
        (
            "requested",
            format!("requested a reboot of {name} at {at} (oldest flag first)"),
        )
    };
    Ok(Report {
        command: "request",
        outcome,
        object: format!("Node {name}"),
        message,
        notes: plan.notes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::{PAUSED_AT, PAUSED_BY, PAUSE_REASON};
    use crate::node::fixtures::{annotate, node};
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use std::collections::BTreeMap;

    const OURS: &str = "rollboot/rollboot-system/rollboot-leader";

    fn t(s: &str) -> DateTime<Utc> {
        time::parse_annotation(s).unwrap()
    }

    fn lock(holder: Option<&str>, entries: &[(&str, &str)]) -> LockRecord {
        let entries: BTreeMap<String, LockEntry> = entries
            .iter()
            .map(|(n, since)| {
                (
                    n.to_string(),
                    LockEntry {
                        group: None,
                        state: NodeState::Cordoning,
                        since: t(since),
                        leader: "controller-0".into(),
                    },
                )
            })
            .collect();
        let mut l = Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(String::from),
                lease_transitions: Some(3),
                ..Default::default()
            }),
            ..Default::default()
        };
        l.metadata.resource_version = Some("41".into());
        l.metadata.annotations = Some(BTreeMap::from([(
            crate::lock::IN_FLIGHT.to_string(),
            serde_json::to_string(&entries).unwrap(),
        )]));
        LockRecord::from_lease(Some(l))
    }

    #[tokio::test]
    async fn a_lock_entry_no_node_can_be_is_never_put_into_a_request_path() {
        let (client, seen) = crate::client::recording_server(|_| None).await;
        let hostile = "../../../api/v1/namespaces/kube-system/secrets/x?y=1";
        let record = lock(
            Some(OURS),
            &[
                (hostile, "2026-03-01T02:00:00Z"),
                ("n-1", "2026-03-01T02:00:00Z"),
            ],
        );
        let notes = in_flight_notes(&client, "https://api", &record)
            .await
            .unwrap();
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert_eq!(*seen.lock().unwrap(), ["GET /api/v1/nodes/n-1"]);
    }

    #[test]
    fn a_pause_takes_rollboots_lock_and_keeps_its_nodes_in_flight() {
        let now = t("2026-03-01T10:00:00Z");
        let held = lock(Some(OURS), &[("node-3", "2026-03-01T09:58:00Z")]);
        let PausePlan::Take(l) = plan_pause(&held, OURS, "alice", Some("kernel CVE"), now).unwrap()
        else {
            panic!("not taken")
        };
        let back = LockRecord::from_lease(Some(*l.clone()));
        assert_eq!(back.holder.as_deref(), Some("rollboot-pause/alice"));
        assert_eq!(back.entries, held.entries, "the nodes in flight are kept");
        assert_eq!(
            back.pause,
            Some(Pause {
                by: "alice".into(),
                at: Some(now),
                reason: Some("kernel CVE".into())
            })
        );
        // Fenced: the replace carries the version read.
        assert_eq!(l.metadata.resource_version.as_deref(), Some("41"));
        assert_eq!(l.spec.as_ref().unwrap().lease_transitions, Some(4));
        // A free lock, and no reason.
        let PausePlan::Take(l) = plan_pause(&lock(None, &[]), OURS, "bob", None, now).unwrap()
        else {
            panic!("not taken")
        };
        let ann = l.metadata.annotations.unwrap();
        assert_eq!(ann[PAUSED_BY], "bob");
        assert_eq!(ann[PAUSED_AT], "2026-03-01T10:00:00.000Z");
        assert!(!ann.contains_key(PAUSE_REASON));
        // An absent Lease is created with the pause.
        assert!(matches!(
            plan_pause(&LockRecord::default(), OURS, "bob", None, now),
            Ok(PausePlan::Take(_))
        ));
    }

    #[test]
    fn a_pause_never_takes_another_tools_lock_and_leaves_an_earlier_pause() {
        let now = t("2026-03-01T10:00:00Z");
        let e = plan_pause(&lock(Some("ops-team"), &[]), OURS, "alice", None, now).unwrap_err();
        assert!(e.0.contains("held by `ops-team`"), "{e}");
        let paused =
            LockRecord::from_lease(Some(lock(None, &[]).paused("carol", Some("audit"), now)));
        match plan_pause(&paused, OURS, "alice", None, now).unwrap() {
            PausePlan::Already(p) => assert_eq!(
                (p.by.as_str(), p.reason.as_deref()),
                ("carol", Some("audit"))
            ),
            p => panic!("{p:?}"),
        }
        assert!(plan_pause(&lock(None, &[]), OURS, " ", None, now).is_err());
    }

    #[test]
    fn resume_releases_a_pause_only_unless_forced() {
        let now = t("2026-03-01T10:00:00Z");
        let base = lock(None, &[("node-3", "2026-03-01T09:58:00Z")]);
        let paused = LockRecord::from_lease(Some(base.paused("alice", Some("x"), now)));
        let ResumePlan::Release { lease, was } = plan_resume(&paused, OURS, false, now).unwrap()
        else {
            panic!()
        };
        assert!(was.contains("paused by alice"), "{was}");
        let back = LockRecord::from_lease(Some(*lease));
        // A node still in flight: the lock goes back to rollboot, its record kept.
        assert_eq!(back.holder.as_deref(), Some(OURS));
        assert_eq!(back.entries, base.entries);
        assert!(back.pause.is_none());
        let ann = back.lease.unwrap().metadata.annotations.unwrap();
        assert!(!ann.contains_key(PAUSED_BY) && !ann.contains_key(PAUSED_AT));
        // Nothing in flight: free.
        let idle = LockRecord::from_lease(Some(lock(None, &[]).paused("alice", None, now)));
        let ResumePlan::Release { lease, .. } = plan_resume(&idle, OURS, false, now).unwrap()
        else {
            panic!()
        };
        assert_eq!(LockRecord::from_lease(Some(*lease)).holder, None);
        // Rollboot's own lock and another tool's: refused, unless forced.
        let ours = lock(Some(OURS), &[("node-3", "2026-03-01T09:58:00Z")]);
        let e = plan_resume(&ours, OURS, false, now).unwrap_err();
        assert!(e.0.contains("rollboot's controller"), "{e}");
        assert!(plan_resume(&ours, OURS, true, now).is_ok());
        let other = lock(Some("ops-team"), &[]);
        let e = plan_resume(&other, OURS, false, now).unwrap_err();
        assert!(e.0.contains("`ops-team`") && e.0.contains("--force"), "{e}");
        let ResumePlan::Release { lease, .. } = plan_resume(&other, OURS, true, now).unwrap()
        else {
            panic!()
        };
        assert_eq!(LockRecord::from_lease(Some(*lease)).holder, None);
        assert!(matches!(
            plan_resume(&lock(None, &[]), OURS, false, now),
            Ok(ResumePlan::NotPaused)
        ));
    }

    fn failed(cordoned_by: Option<&str>, unschedulable: bool) -> NodeView {
        let mut n = [
            (proto::STATE, "failed"),
            (proto::STATE_SINCE, "2026-03-01T09:00:00Z"),
            (proto::FAILURE_REASON, "the reboot timed out"),
            (proto::REBOOT, "1790000000000-ab"),
            (proto::BOOT_ID_BEFORE, "boot-1"),
            (proto::REBOOT_ATTEMPT, "1"),
            (proto::HEALTH_GATE, "{}"),
        ]
        .into_iter()
        .fold(node("n1", &[]), |n, (k, v)| annotate(n, k, v));
        if let Some(c) = cordoned_by {
            n = annotate(n, proto::CORDONED_BY, c);
        }
        n.spec.get_or_insert_with(Default::default).unschedulable = Some(unschedulable);
        n.metadata.resource_version = Some("9".into());
        NodeView::from_node(&n)
    }

    #[test]
    fn retry_clears_the_failure_and_the_cycles_keys_and_uncordons_only_its_own_cordon() {
        let p = plan_retry(&failed(Some("controller-0"), true)).unwrap();
        let ann = &p.patch["metadata"]["annotations"];
        for k in proto::FAILURE_RECORD
            .iter()
            .chain(proto::CYCLE_KEYS.iter())
            .chain([proto::CORDONED_BY].iter())
        {
            assert_eq!(ann[*k], Value::Null, "{k} not removed");
            assert!(
                ann.as_object().unwrap().contains_key(*k),
                "{k} not in the patch"
            );
        }
        assert!(p.uncordons && !p.stays_cordoned);
        assert_eq!(p.patch["spec"]["unschedulable"], Value::Null);
        assert!(p.patch["spec"]
            .as_object()
            .unwrap()
            .contains_key("unschedulable"));
        // An operator's cordon stays.
        let p = plan_retry(&failed(None, true)).unwrap();
        assert!(!p.uncordons && p.stays_cordoned);
        assert!(p.patch.get("spec").is_none());
        assert!(!p.patch["metadata"]["annotations"]
            .as_object()
            .unwrap()
            .contains_key(proto::CORDONED_BY));
    }

    #[test]
    fn retry_ends_a_quarantine_with_its_failure() {
        let quarantined = NodeView {
            quarantined: Some("denied".into()),
            ..failed(Some("controller-0"), true)
        };
        let p = plan_retry(&quarantined).unwrap();
        let labels = p.patch["metadata"]["labels"].as_object().unwrap();
        assert_eq!(labels.get(proto::QUARANTINED), Some(&Value::Null));
        assert!(p.uncordons);
        // A node never quarantined: its labels are not touched.
        let p = plan_retry(&failed(Some("controller-0"), true)).unwrap();
        assert!(p.patch["metadata"].get("labels").is_none());
    }

    #[test]
    fn retry_refuses_a_node_that_is_not_failed_naming_its_state() {
        let draining = NodeView {
            state: Some(NodeState::Draining),
            ..failed(None, true)
        };
        let e = plan_retry(&draining).unwrap_err();
        assert!(e.0.contains("not failed (its state is `draining`)"), "{e}");
        let none = NodeView::from_node(&node("n2", &[]));
        assert!(plan_retry(&none)
            .unwrap_err()
            .0
            .contains("no rollboot state"));
        let garbled = NodeView::from_node(&annotate(node("n3", &[]), proto::STATE, "boom"));
        assert!(plan_retry(&garbled).unwrap_err().0.contains("malformed"));
    }

    #[test]
    fn a_request_is_dated_now_and_an_earlier_one_keeps_its_turn() {
        let now = t("2026-03-01T10:00:00Z");
        let fresh = NodeView::from_node(&node("n1", &[]));
        let p = plan_request(&fresh, Some("new kernel"), now);
        let ann = &p.patch.as_ref().unwrap()["metadata"]["annotations"];
        assert_eq!(ann[proto::REBOOT_REQUESTED], "2026-03-01T10:00:00.000Z");
        assert_eq!(ann[proto::REBOOT_REQUESTED_REASON], "new kernel");
        assert_eq!(p.at, now);
        let earlier = NodeView::from_node(&annotate(
            node("n1", &[]),
            proto::REBOOT_REQUESTED,
            "2026-03-01T08:00:00Z",
        ));
        let p = plan_request(&earlier, None, now);
        assert_eq!(p.patch, None);
        assert_eq!(p.at, t("2026-03-01T08:00:00Z"));
        // By hand, undated: dated now.
        let by_hand =
            NodeView::from_node(&annotate(node("n1", &[]), proto::REBOOT_REQUESTED, "now"));
        let p = plan_request(&by_hand, None, now);
        assert_eq!(
            p.patch.unwrap()["metadata"]["annotations"][proto::REBOOT_REQUESTED],
            "2026-03-01T10:00:00.000Z"
        );
        // Excluded and failed nodes are requested, and the operator told why nothing happens.
        let excluded = NodeView {
            excluded: true,
            state: Some(NodeState::Failed),
            ..fresh
        };
        let notes = plan_request(&excluded, None, now).notes;
        assert!(notes[0].contains(proto::EXCLUDE) && notes[1].contains("rollboot retry n1"));
    }

    #[test]
    fn each_node_in_flight_is_said_to_finish_its_cycle() {
        let e = LockEntry {
            group: None,
            state: NodeState::Cordoning,
            since: t("2026-03-01T09:00:00Z"),
            leader: "c-0".into(),
        };
        let mut n = [
            (proto::STATE, "draining"),
            (proto::STATE_SINCE, "2026-03-01T09:01:00Z"),
        ]
        .into_iter()
        .fold(node("node-3", &[]), |n, (k, v)| annotate(n, k, v));
        n.spec.get_or_insert_with(Default::default).unschedulable = Some(true);
        let s = in_flight_fate("node-3", Some(&NodeView::from_node(&n)), &e);
        assert!(
            s.starts_with("node-3 is draining: it finishes its cycle")
                && s.ends_with("nothing new starts"),
            "{s}"
        );
        assert!(in_flight_fate("gone", None, &e).contains("frees its slot"));
    }
}
