//! The kube-apiserver audit log of a run (`RUN_DIR/logs/audit.log`, level Metadata, written by
//! up.sh's audit policy): every request with its user, user agent, verb, object and answer.
//!
//! Owns reading it for rollboot's two identities (the controller's and the agents' service
//! accounts), telling rollboot's requests from the suite's own probes (by user agent: the
//! probes are sent with kubectl, whose user agent starts `kubectl/`), the summary by identity,
//! verb, resource and code, and the classification of 409s on Nodes by the write that came
//! before them. It must never need more than the Metadata level records.

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

    /// A request the suite sent itself with a rollboot token (kubectl's user agent).
    pub fn is_probe(&self) -> bool {
        self.user_agent.starts_with("kubectl/")
    }

    /// Sent with one of rollboot's identities.
    pub fn is_rollboot_identity(&self) -> bool {
        self.user == CONTROLLER || self.user == AGENT
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
        "audit log: rollboot's requests (the suite's kubectl probes excluded) by identity, verb, resource, code\n",
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
    out.push_str("the suite's own probes with rollboot's tokens (user agent kubectl/...):\n");
    for ((who, verb, res, code), n) in &pc {
        out.push_str(&format!(
            "  {n:>6}  {who:<11} {verb:<17} {res:<34} {code}\n"
        ));
    }
    out
}

/// Answers >= 400 to rollboot's requests other than 404, 409 and 429, grouped, each with a
/// count and its first occurrence.
pub fn refused(entries: &[Entry]) -> Vec<String> {
    let mut groups: BTreeMap<(String, String, String, u16), (usize, &Entry)> = BTreeMap::new();
    for e in entries.iter().filter(|e| {
        e.is_rollboot_identity()
            && !e.is_probe()
            && e.code >= 400
            && ![404, 409, 429].contains(&e.code)
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

/// Who wrote a Node last before each 409 rollboot got on it.
#[derive(Debug, Default)]
pub struct Conflicts {
    /// 409s on Node writes, in total.
    pub total: usize,
    /// By the identity of the last successful write to that Node before the 409.
    pub by_last_writer: BTreeMap<String, usize>,
    /// The 409s whose last write came from the node-lifecycle controller, described.
    pub after_lifecycle: Vec<String>,
}

/// Classifies rollboot's 409 answers on Nodes. The last successful write to the same Node
/// (any subresource) completed before the 409 request arrived is taken as the one it lost to:
/// the node-lifecycle controller's taint updates follow rollboot's own cordon, uncordon and
/// the reboot, so a 409 after one of them is a conflict rollboot could have waited out.
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
    for e in entries.iter().filter(|e| {
        e.is_rollboot_identity() && !e.is_probe() && e.resource == "nodes" && e.code == 409
    }) {
        c.total += 1;
        let last = writes
            .iter()
            .filter(|w| w.name == e.name && w.done < e.received)
            .max_by_key(|w| w.done);
        let who = last.map_or_else(|| "nobody".to_string(), |w| w.identity());
        if last.is_some_and(|w| w.user == NODE_LIFECYCLE) {
            let w = last.unwrap();
            c.after_lifecycle.push(format!(
                "{} {} of node {} got 409 at {}; {:.0} ms earlier the node-lifecycle controller had written it ({} {}): {}",
                e.identity(),
                e.verb,
                e.name,
                e.received.format("%H:%M:%S%.3f"),
                (e.received - w.done).num_microseconds().unwrap_or(0) as f64 / 1000.0,
                w.verb,
                w.resource,
                e.message
            ));
        }
        *c.by_last_writer.entry(who).or_default() += 1;
    }
    c
}
