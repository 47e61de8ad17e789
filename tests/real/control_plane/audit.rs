//! The kube-apiserver audit log of a run (`RUN_DIR/logs/audit.log`, level Metadata, written by
//! up.sh's audit policy): every request with its user, user agent, verb, object and answer.
//!
//! Owns reading it for rollboot's two identities (the controller's and the agents' service
//! accounts), telling rollboot's requests from the suite's own probes with those tokens (by
//! user agent: the probes send [`PROBE_USER_AGENT`]), the summary by identity, verb, resource
//! and code, and the classification of 409s on Nodes by the writes around them. It must never
//! need more than the Metadata level records.

use std::collections::BTreeMap;
use std::path::Path;

use chrono::{DateTime, Utc};
use serde_json::Value;

/// The controller's service account, as deploy/ creates it.
pub const CONTROLLER: &str = "system:serviceaccount:rollboot-system:rollboot-controller";
/// The agent's service account, as deploy/ creates it.
pub const AGENT: &str = "system:serviceaccount:rollboot-agent:rollboot-agent";
/// The node-lifecycle controller (kube-controller-manager with per-controller credentials).
pub const NODE_LIFECYCLE: &str = "system:serviceaccount:kube-system:node-controller";
/// The User-Agent of the suite's own requests with rollboot's tokens (check 6). Not kubectl's:
/// kubectl's `patch`, `annotate` and `label` GET the Node first, which the agent's RBAC does
/// not allow, so their writes would never reach the admission policy under test.
pub const PROBE_USER_AGENT: &str = "e2e-probe/1.0 (rollboot end-to-end, check 6)";

/// One completed request.
#[derive(Clone, Debug)]
pub struct Entry {
    /// `user.username`.
    pub user: String,
    /// The node-name claim of an agent token, if any.
    pub node_claim: Option<String>,
    /// `userAgent` ("" when none was sent).
    pub user_agent: String,
    /// `verb`.
    pub verb: String,
    /// `resource` or `resource/subresource` ("" for non-resource URLs).
    pub resource: String,
    /// `objectRef.name`.
    pub name: String,
    /// `requestURI`.
    pub uri: String,
    /// `responseStatus.code`.
    pub code: u16,
    /// `responseStatus.message`.
    pub message: String,
    /// `requestReceivedTimestamp`.
    pub received: DateTime<Utc>,
    /// `stageTimestamp` (when the answer was complete).
    pub done: DateTime<Utc>,
}

impl Entry {
    /// "controller", "agent" or the user name.
    pub fn identity(&self) -> String {
        match self.user.as_str() {
            CONTROLLER => "controller".into(),
            AGENT => "agent".into(),
            u => u.into(),
        }
    }

    /// A request the suite sent itself with a rollboot token: the probes' user agent, or
    /// kubectl's (`kubectl/...`, `kubectl-dispatcher/...`) should anyone use one by hand.
    pub fn is_probe(&self) -> bool {
        self.user_agent == PROBE_USER_AGENT || self.user_agent.starts_with("kubectl")
    }

    /// The cut of the suite's that explains this answer, if one does: a 5xx answer to a
    /// request of the cut's identity that was in flight during it (both controller replicas
    /// share an identity, as all agents do, so a request of a survivor in flight at that
    /// instant is counted here too), or a 401 or 403 while a kube-apiserver was starting.
    pub fn cut_by<'c>(&self, cuts: &'c [Cut]) -> Option<&'c Cut> {
        let slack = chrono::Duration::milliseconds(200);
        if self.code < 400 || !self.is_rollboot_identity() {
            return None;
        }
        cuts.iter().find(|c| {
            (self.code >= 500 || (c.starting && matches!(self.code, 401 | 403)))
                && c.user.is_none_or(|u| u == self.user)
                && self.received <= c.to + slack
                && self.done >= c.from - slack
        })
    }

    /// Sent with one of rollboot's identities.
    pub fn is_rollboot_identity(&self) -> bool {
        self.user == CONTROLLER || self.user == AGENT
    }
}

/// A span in which the suite cut rollboot's requests on purpose: the SIGKILL of a controller or
/// an agent (an instant), the kube-apiserver stopped and continued, or killed and started again
/// (until it answered ready), rollboot's processes stopped at the end of the run.
#[derive(Clone, Debug)]
pub struct Cut {
    /// Whose requests it cut: [`CONTROLLER`], [`AGENT`], or both (`None`).
    pub user: Option<&'static str>,
    /// From.
    pub from: DateTime<Utc>,
    /// To (`from` for an instant).
    pub to: DateTime<Utc>,
    /// What the suite did, for the report.
    pub what: String,
    /// A kube-apiserver was starting in it: until its caches are synced it answers 401 or 403
    /// to requests it will allow once ready (its RBAC authorizer reads informers).
    pub starting: bool,
}

impl Cut {
    /// A cut at one instant.
    pub fn at(user: Option<&'static str>, at: DateTime<Utc>, what: impl Into<String>) -> Cut {
        Cut {
            user,
            from: at,
            to: at,
            what: what.into(),
            starting: false,
        }
    }
}

fn ts(v: &Value) -> DateTime<Utc> {
    v.as_str()
        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
        .map(|d| d.to_utc())
        .unwrap_or_default()
}

/// Reads every ResponseComplete record of the log.
pub fn read(path: &Path) -> Result<Vec<Entry>, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let mut out = Vec::new();
    for line in text.lines() {
        let Ok(e) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if e["stage"] != "ResponseComplete" {
            continue;
        }
        let o = &e["objectRef"];
        let resource = match (o["resource"].as_str(), o["subresource"].as_str()) {
            (Some(r), Some(s)) if !s.is_empty() => format!("{r}/{s}"),
            (Some(r), _) => r.to_string(),
            _ => String::new(),
        };
        out.push(Entry {
            user: e["user"]["username"].as_str().unwrap_or("").into(),
            node_claim: e["user"]["extra"]["authentication.kubernetes.io/node-name"][0]
                .as_str()
                .map(String::from),
            user_agent: e["userAgent"].as_str().unwrap_or("").into(),
            verb: e["verb"].as_str().unwrap_or("").into(),
            resource,
            name: o["name"].as_str().unwrap_or("").into(),
            uri: e["requestURI"].as_str().unwrap_or("").into(),
            code: e["responseStatus"]["code"].as_u64().unwrap_or(0) as u16,
            message: e["responseStatus"]["message"]
                .as_str()
                .unwrap_or("")
                .chars()
                .take(300)
                .collect(),
            received: ts(&e["requestReceivedTimestamp"]),
            done: ts(&e["stageTimestamp"]),
        });
    }
    Ok(out)
}

/// Counts of rollboot's requests (probes excluded) by identity, verb, resource and code.
pub fn summary(entries: &[Entry]) -> String {
    let mut counts: BTreeMap<(String, String, String, u16), usize> = BTreeMap::new();
    for e in entries
        .iter()
        .filter(|e| e.is_rollboot_identity() && !e.is_probe())
    {
        *counts
            .entry((e.identity(), e.verb.clone(), e.resource.clone(), e.code))
            .or_default() += 1;
    }
    let mut out = String::from(
        "audit log: rollboot's requests (the suite's probes excluded) by identity, verb, resource, code\n",
    );
    out.push_str(&format!(
        "  {:>6}  {:<11} {:<17} {:<34} {}\n",
        "count", "identity", "verb", "resource", "code"
    ));
    for ((who, verb, res, code), n) in &counts {
        out.push_str(&format!(
            "  {n:>6}  {who:<11} {verb:<17} {res:<34} {code}\n"
        ));
    }
    let probes: Vec<&Entry> = entries
        .iter()
        .filter(|e| e.is_rollboot_identity() && e.is_probe())
        .collect();
    let mut pc: BTreeMap<(String, String, String, u16), usize> = BTreeMap::new();
    for e in &probes {
        *pc.entry((e.identity(), e.verb.clone(), e.resource.clone(), e.code))
            .or_default() += 1;
    }
    out.push_str(
        "the suite's own requests with rollboot's tokens (check 6's probes: e2e-probe/...; the\n  \
         kubectl-dispatcher's version checks while tokens.sh writes the kubeconfigs: kubectl...):\n",
    );
    for ((who, verb, res, code), n) in &pc {
        out.push_str(&format!(
            "  {n:>6}  {who:<11} {verb:<17} {res:<34} {code}\n"
        ));
    }
    out
}

/// Answers >= 400 to rollboot's requests other than 404, 409 and 429 (and those the suite's
/// `cuts` explain), grouped, each with a count and its first occurrence.
pub fn refused(entries: &[Entry], cuts: &[Cut]) -> Vec<String> {
    let mut groups: BTreeMap<(String, String, String, u16), (usize, &Entry)> = BTreeMap::new();
    for e in entries.iter().filter(|e| {
        e.is_rollboot_identity()
            && !e.is_probe()
            && e.code >= 400
            && ![404, 409, 429].contains(&e.code)
            && e.cut_by(cuts).is_none()
    }) {
        groups
            .entry((e.identity(), e.verb.clone(), e.resource.clone(), e.code))
            .or_insert((0, e))
            .0 += 1;
    }
    groups
        .into_iter()
        .map(|((who, verb, res, code), (n, first))| {
            let by = first
                .node_claim
                .as_deref()
                .map(|n| format!(" (token of {n})"))
                .unwrap_or_default();
            format!(
                "{n} x {code} to the {who}'s {verb} {res}: first at {}{by} {} {}: {}",
                first.received.format("%H:%M:%S%.3f"),
                first.verb.to_uppercase(),
                first.uri,
                first.message
            )
        })
        .collect()
}

/// rollboot's requests whose user agent is not `rollboot/...`, grouped by identity and agent.
pub fn without_user_agent(entries: &[Entry]) -> Vec<String> {
    let mut groups: BTreeMap<(String, String), usize> = BTreeMap::new();
    for e in entries
        .iter()
        .filter(|e| e.is_rollboot_identity() && !e.is_probe())
        .filter(|e| !e.user_agent.starts_with("rollboot/"))
    {
        *groups
            .entry((e.identity(), e.user_agent.clone()))
            .or_default() += 1;
    }
    groups
        .into_iter()
        .map(|((who, ua), n)| {
            format!(
                "{n} request(s) of the {who} sent User-Agent {:?}, not rollboot/<version> (...)",
                ua
            )
        })
        .collect()
}

/// The distinct user agents of rollboot's requests, with counts.
pub fn user_agents(entries: &[Entry]) -> Vec<String> {
    let mut groups: BTreeMap<(String, String), usize> = BTreeMap::new();
    for e in entries
        .iter()
        .filter(|e| e.is_rollboot_identity() && !e.is_probe())
    {
        *groups
            .entry((e.identity(), e.user_agent.clone()))
            .or_default() += 1;
    }
    groups
        .into_iter()
        .map(|((who, ua), n)| format!("{who}: {n} x {ua:?}"))
        .collect()
}

/// rollboot's requests (probes excluded) answered 2xx that were in flight at some moment
/// between `from` and `to` and that `pick` picks: what rollboot changed in a stretch a watch of
/// the suite may have missed (see `observe::Gap`).
pub fn changes_between(
    entries: &[Entry],
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    pick: impl Fn(&Entry) -> bool,
) -> Vec<&Entry> {
    entries
        .iter()
        .filter(|e| {
            e.is_rollboot_identity()
                && !e.is_probe()
                && (200..300).contains(&e.code)
                && e.received <= to
                && e.done >= from
                && pick(e)
        })
        .collect()
}

/// A write to a Node (patch or update of the object or a subresource).
pub fn is_node_write(e: &Entry) -> bool {
    e.resource.starts_with("nodes") && matches!(e.verb.as_str(), "patch" | "update")
}

/// What can take a pod down: an eviction, a pod deleted, or a Node write (the agent's ack
/// comes before its reboot; the controller's steps lead to one).
pub fn is_disruption(e: &Entry) -> bool {
    (e.resource == "pods/eviction" && e.verb == "create")
        || (e.resource == "pods" && matches!(e.verb.as_str(), "delete" | "deletecollection"))
        || is_node_write(e)
}

/// rollboot's 409 answers on Nodes, classified.
#[derive(Debug, Default)]
pub struct Conflicts {
    /// 409s on Node writes, in total.
    pub total: usize,
    /// By cause (see [`node_conflicts`]).
    pub by_cause: BTreeMap<String, usize>,
    /// The predictable ones, described.
    pub predictable: Vec<String>,
}

/// Classifies rollboot's 409 answers on Nodes. The Metadata level has no resourceVersions, so
/// the cause is read from the writes around each 409:
/// - `node-lifecycle`: the node-lifecycle controller wrote that Node within 1 s before the 409
///   was answered. It reacts to rollboot's own cordon, uncordon and reboot (the unschedulable
///   and not-ready taints) within milliseconds: rollboot can wait for that write, so such a
///   409 is predictable.
/// - `own write`: otherwise, when the last successful write to the Node before the 409 was
///   rollboot's own: rollboot decided from a view older than what it had written itself, also
///   predictable.
/// - otherwise the identity of that last write (the kubelet's status, the agent): a genuine race.
pub fn node_conflicts(entries: &[Entry]) -> Conflicts {
    let mut c = Conflicts::default();
    let writes: Vec<&Entry> = entries
        .iter()
        .filter(|e| {
            e.resource.starts_with("nodes")
                && matches!(e.verb.as_str(), "patch" | "update")
                && (200..300).contains(&e.code)
        })
        .collect();
    let second = chrono::Duration::seconds(1);
    for e in entries.iter().filter(|e| {
        e.is_rollboot_identity() && !e.is_probe() && e.resource == "nodes" && e.code == 409
    }) {
        c.total += 1;
        let same: Vec<&&Entry> = writes
            .iter()
            .filter(|w| w.name == e.name && w.done < e.done)
            .collect();
        let lifecycle = same
            .iter()
            .filter(|w| w.user == NODE_LIFECYCLE && w.done >= e.received - second)
            .max_by_key(|w| w.done);
        let last = same.iter().max_by_key(|w| w.done);
        let (cause, predictable) = match (lifecycle, last) {
            (Some(w), _) => (
                "node-lifecycle".to_string(),
                Some(format!(
                    "the node-lifecycle controller's {} {} of {} was answered {:.0} ms before",
                    w.verb,
                    w.resource,
                    e.name,
                    (e.done - w.done).num_microseconds().unwrap_or(0) as f64 / 1000.0
                )),
            ),
            (None, Some(w)) if w.user == e.user => (
                "own write".to_string(),
                Some(format!(
                    "the last write to {} before it was rollboot's own, {:.0} ms before",
                    e.name,
                    (e.done - w.done).num_microseconds().unwrap_or(0) as f64 / 1000.0
                )),
            ),
            (None, Some(w)) => (w.identity(), None),
            (None, None) => ("nobody".to_string(), None),
        };
        if let Some(why) = predictable {
            c.predictable.push(format!(
                "the {}'s {} of node {} got 409 at {}: {why}",
                e.identity(),
                e.verb,
                e.name,
                e.received.format("%H:%M:%S%.3f"),
            ));
        }
        *c.by_cause.entry(cause).or_default() += 1;
    }
    c
}
