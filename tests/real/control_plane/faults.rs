//! The phases of issue 22's cases, each judged as a numbered check of the report (`CHECKS` in
//! `tests/real/control_plane.rs`):
//! - 12, 13, 14a, 17 ([`Suite::mid_reboot`]): four nodes flagged at once; as each one's agent has
//!   taken its reboot token and its host is down, the admin writes over its `state` (garbled,
//!   then backwards), garbles its `reboot-ack`, or deletes the lock and leader Leases;
//! - 14b, 15 ([`Suite::refusals`]): tokens the agent must refuse: its `reboot-ack` garbled before
//!   the token, and an agent whose host is another node's; each node fails, and is cleared with
//!   `rollboot retry`;
//! - 16a, 16b ([`Suite::apiserver_outages`]): the kube-apiserver stopped for 20 s, then killed and
//!   started again, each while a node drains.
//!
//! Owns each case's trigger, what the suite does to the cluster as the admin, and the judgement
//! of the case against what rollboot promises. A phase leaves the cluster as the next one needs
//! it: every node it flagged ends `done` (a failed one cleared and rebooted), uncordoned, with
//! nothing garbled left behind; a node it cannot bring there stops the flow.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::audit::{self, Cut};
use super::cluster::kubectl;
use super::observe::{At, NodeVersion, World};
use super::report::Report;
use super::{reboot_requests, reboots, short, title, Suite, CYCLE_TIMEOUT, NODES, WEB_MIN_HEALTHY};

/// `reboot.timeout` of the suite's configs (tests/real/control_plane/rollboot-config.sh's REBOOT_TIMEOUT).
const REBOOT_TIMEOUT: Duration = Duration::from_secs(60);
/// "Within seconds": the longest a node may take to fail once its agent refused its token.
const REFUSAL_BOUND: Duration = Duration::from_secs(10);
/// How long the kube-apiserver is stopped (SIGSTOP) mid-drain.
const APISERVER_STOP: Duration = Duration::from_secs(20);
/// What a garbled annotation reads (neither a state nor a token).
const GARBLED: &str = "banana";

const STATE: &str = "rollboot.dev/state";
const REBOOT: &str = "rollboot.dev/reboot";
const REBOOT_ACK: &str = "rollboot.dev/reboot-ack";
const BOOT_ID_BEFORE: &str = "rollboot.dev/boot-id-before";
const REBOOT_REFUSED: &str = "rollboot.dev/reboot-refused";
const FAILURE_REASON: &str = "rollboot.dev/failure-reason";
const STATE_SINCE: &str = "rollboot.dev/state-since";

/// How a node's cycle ended.
#[derive(Clone, Debug)]
pub enum End {
    /// `done`, uncordoned and out of the lock: when it was first seen `done`.
    Done(At),
    /// `failed`: when it was first seen so, and its `rollboot.dev/failure-reason`.
    Failed(At, String),
}

/// What the suite does mid-reboot: while a node's agent has taken its token (`reboot-ack` ==
/// `reboot`, `boot-id-before` set) and its host is still down for that reboot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MidReboot {
    /// Check 12: `kubectl annotate node N rollboot.dev/state=banana --overwrite`.
    GarbledState,
    /// Check 13: `rollboot.dev/state=draining` over `rebooting`.
    BackwardsState,
    /// Check 14a: `rollboot.dev/reboot-ack=banana` over the agent's ack.
    GarbledAck,
    /// Check 17: `kubectl delete lease rollboot-lock rollboot-leader`.
    LeasesDeleted,
}

impl MidReboot {
    fn id(self) -> &'static str {
        match self {
            MidReboot::GarbledState => "12",
            MidReboot::BackwardsState => "13",
            MidReboot::GarbledAck => "14a",
            MidReboot::LeasesDeleted => "17",
        }
    }

    /// The annotation the admin writes, as (key, value).
    fn annotation(self) -> Option<(&'static str, &'static str)> {
        match self {
            MidReboot::GarbledState => Some((STATE, GARBLED)),
            MidReboot::BackwardsState => Some((STATE, "draining")),
            MidReboot::GarbledAck => Some((REBOOT_ACK, GARBLED)),
            MidReboot::LeasesDeleted => None,
        }
    }
}

/// One mid-reboot case as it was applied.
struct Applied {
    case: MidReboot,
    node: String,
    /// The token the agent had acknowledged.
    token: String,
    /// The node's `boot-id-before`.
    boot_before: String,
    /// When the suite wrote (or deleted).
    at: At,
    /// Why the case does not test what it should (the host was back before the write landed).
    raced: Option<String>,
}

/// What the kube-apiserver suffers mid-drain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outage {
    /// Check 16a: SIGSTOP for [`APISERVER_STOP`], then SIGCONT.
    Stopped,
    /// Check 16b: SIGKILL, then started again with the same command line.
    Killed,
}

impl Outage {
    fn id(self) -> &'static str {
        match self {
            Outage::Stopped => "16a",
            Outage::Killed => "16b",
        }
    }
}

/// One outage as it was done.
struct Struck {
    case: Outage,
    /// The node that was draining.
    node: String,
    /// From the signal until the kube-apiserver was back; `None` when the node left draining
    /// too soon (nothing was done).
    span: Option<(At, At)>,
}

/// The first version in `vs` whose annotation `key` reads `value`.
fn first_with<'w>(vs: &[&'w NodeVersion], key: &str, value: &str) -> Option<&'w NodeVersion> {
    vs.iter()
        .copied()
        .find(|v| v.rollboot.get(key).map(String::as_str) == Some(value))
}

/// The versions of `node` from the first cordon after `t0` on: its cycle begun after `t0` (a
/// cycle's keys from the one before stay on the Node until its next cordon removes them).
fn cycle<'w>(w: &'w World, node: &str, t0: At) -> Vec<&'w NodeVersion> {
    let vs = w.node_since(node, t0);
    let start = vs
        .iter()
        .position(|v| v.state() == Some("cordoning"))
        .unwrap_or(vs.len());
    vs[start..].to_vec()
}

/// Seconds from `a` to `b`.
fn secs(a: At, b: At) -> f64 {
    (b - a).num_milliseconds() as f64 / 1000.0
}

fn hms(t: At) -> String {
    t.format("%H:%M:%S%.3f").to_string()
}

/// The agent's refusal as it wrote it in `rollboot.dev/reboot-refused`.
#[derive(Clone, Debug)]
struct Refusal {
    token: String,
    cause: String,
    reason: String,
    at: Option<DateTime<Utc>>,
    /// The annotation's text.
    text: String,
}

impl Refusal {
    fn parse(text: &str) -> Option<Refusal> {
        let v: serde_json::Value = serde_json::from_str(text).ok()?;
        Some(Refusal {
            token: v["token"].as_str()?.to_string(),
            cause: v["cause"].as_str()?.to_string(),
            reason: v["reason"].as_str().unwrap_or_default().to_string(),
            at: v["at"]
                .as_str()
                .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
                .map(|d| d.to_utc()),
            text: text.to_string(),
        })
    }
}

/// A refused token's timeline on its Node, as the suite's watch saw it.
#[derive(Debug, Default)]
struct Timeline {
    /// The token of the cycle and when it was first seen.
    token: Option<(String, At)>,
    /// The agent's refusal of that token, and when it was first seen.
    refusal: Option<(Refusal, At)>,
    /// When `failed` was first seen, with `state-since` and the failure reason.
    failed: Option<(At, Option<String>, String)>,
}

impl Timeline {
    /// From the cycle of `node` begun after `since`.
    fn read(w: &World, node: &str, since: At) -> Timeline {
        let vs = cycle(w, node, since);
        let mut t = Timeline::default();
        for v in &vs {
            if t.token.is_none() {
                if let Some(tok) = v.rollboot.get(REBOOT) {
                    t.token = Some((tok.clone(), v.at));
                }
            }
            if t.refusal.is_none() {
                let r = v
                    .rollboot
                    .get(REBOOT_REFUSED)
                    .and_then(|r| Refusal::parse(r));
                if let (Some(r), Some((tok, _))) = (r, &t.token) {
                    if r.token == *tok {
                        t.refusal = Some((r, v.at));
                    }
                }
            }
            if t.failed.is_none() && v.state() == Some("failed") {
                t.failed = Some((
                    v.at,
                    v.rollboot.get(STATE_SINCE).cloned(),
                    v.rollboot.get(FAILURE_REASON).cloned().unwrap_or_default(),
                ));
            }
        }
        t
    }
}

impl Suite<'_> {
    // ---- helpers -----------------------------------------------------------------------------

    /// `node`'s lines in reboots.log (the fake kubelet's imitated reboots) and
    /// reboot-requests.log (each run of the agent's reboot.command).
    fn counts(&self, node: &str) -> (usize, usize) {
        (
            reboots(&self.state, node),
            reboot_requests(&self.state, node),
        )
    }

    /// Failures when `node` did not reboot `want` time(s) since `before` (its counts then), by
    /// either log; a note when it did.
    fn exactly(
        &self,
        node: &str,
        before: (usize, usize),
        want: usize,
        failures: &mut Vec<String>,
        notes: &mut Vec<String>,
    ) {
        let now = self.counts(node);
        let (done, asked) = (now.0 - before.0, now.1 - before.1);
        if done != want {
            failures.push(format!(
                "{node} rebooted {done} time(s), not {want} (fake kubelet's reboots.log)"
            ));
        }
        if asked != want {
            failures.push(format!(
                "{node}: reboot.command ran {asked} time(s), not {want} (reboot-requests.log)"
            ));
        }
        if done == want && asked == want {
            notes.push(format!(
                "{node}: {want} reboot(s) in reboots.log, {want} run(s) of reboot.command in reboot-requests.log"
            ));
        }
    }

    /// Waits for the cycle of `node` begun after `t0` to end: `done` after `rebooting`,
    /// uncordoned and out of the lock, or `failed`.
    async fn await_end(&self, node: &str, t0: At, timeout: Duration) -> Result<End, String> {
        self.obs
            .wait(timeout, |w| {
                let vs = w.node_since(node, t0);
                let latest = vs.last()?;
                match latest.state()? {
                    "failed" => {
                        let first = vs
                            .iter()
                            .rev()
                            .take_while(|v| v.state() == Some("failed"))
                            .last()?;
                        Some(End::Failed(
                            first.at,
                            latest
                                .rollboot
                                .get(FAILURE_REASON)
                                .cloned()
                                .unwrap_or_default(),
                        ))
                    }
                    "done" => {
                        let rebooting = vs.iter().position(|v| v.state() == Some("rebooting"))?;
                        let done = vs[rebooting..].iter().find(|v| v.state() == Some("done"))?;
                        let clean = !latest.unschedulable && !latest.has("cordoned-by");
                        let freed = w
                            .lease("rollboot-lock")
                            .is_some_and(|l| !l.in_flight.contains_key(node));
                        (clean && freed).then_some(End::Done(done.at))
                    }
                    _ => None,
                }
            })
            .await
            .ok_or_else(|| {
                format!(
                    "{node}: its cycle did not end (done or failed) within {}s: {}",
                    timeout.as_secs(),
                    self.describe(node)
                )
            })
    }

    /// `kubectl annotate node NODE ARG --overwrite` as the admin (`KEY=VALUE`, or `KEY-`).
    async fn annotate(&self, node: &str, arg: &str) -> Result<(), String> {
        let out = kubectl(
            &self.cluster.admin,
            &["annotate", "node", node, arg, "--overwrite"],
        )
        .await;
        if out.ok {
            Ok(())
        } else {
            Err(format!(
                "kubectl annotate node {node} {arg}: {}",
                out.stderr.trim()
            ))
        }
    }

    /// `rollboot retry NODE` as the admin, then the cycle that follows when the node is still
    /// flagged (or its return to idle when not). Returns what retry said and how it ended.
    async fn retry(&self, node: &str) -> Result<(String, Option<End>), String> {
        self.await_host_settled(node).await?;
        let t = Utc::now();
        // Not run_rollboot: retry takes no --config (it writes the Node only).
        let out = tokio::process::Command::new(&self.cluster.setup.rollboot)
            .args(["retry", node])
            .env("KUBECONFIG", &self.cluster.admin)
            .env("NO_COLOR", "1")
            .output()
            .await
            .map_err(|e| format!("running rollboot retry {node}: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "rollboot retry {node} exited {}: {}",
                out.status,
                short(&String::from_utf8_lossy(&out.stderr), 400)
            ));
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let said = short(&text, 200);
        if text.contains("still flagged") {
            let end = self.await_end(node, t, CYCLE_TIMEOUT).await?;
            return Ok((said, Some(end)));
        }
        self.obs
            .wait(Duration::from_secs(30), |w| {
                w.node(node)
                    .is_some_and(|v| v.state().is_none() && !v.unschedulable)
                    .then_some(())
            })
            .await
            .ok_or_else(|| format!("{node} not idle 30 s after `rollboot retry`: {said}"))?;
        Ok((said, None))
    }

    /// Waits (up to 20 s) until no fake reboot of `nodes` is under way (the fake kubelet
    /// removes `reboot-NODE` once the node is back and its reboot is in reboots.log).
    async fn await_fake_reboots(&self, nodes: &[&str]) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while nodes
            .iter()
            .any(|n| self.state.join(format!("reboot-{n}")).exists())
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Waits until `node`'s host is as an operator would retry it on: no fake reboot under way,
    /// Ready without a not-ready taint, and its flag as its agent's sentinel says (the agent
    /// takes its flag off once a reboot removed the sentinel). A failed node retried while its
    /// host is still going down would be taken again at once, on its old boot.
    async fn await_host_settled(&self, node: &str) -> Result<(), String> {
        self.await_fake_reboots(&[node]).await;
        let sentinel = self.rb.join("sentinels").join(node);
        self.obs
            .wait(Duration::from_secs(30), |w| {
                let v = w.node(node)?;
                (v.ready
                    && v.lifecycle_taints().is_empty()
                    && v.has("reboot-required") == sentinel.exists())
                .then_some(())
            })
            .await
            .ok_or_else(|| {
                format!(
                    "{node}'s host did not settle within 30 s: {}",
                    self.describe(node)
                )
            })
    }

    /// rollboot's Events about Node `node` with `reason`, as `kubectl get events -A` (admin)
    /// shows them: (type, message).
    pub(crate) async fn events(&self, node: &str, reason: &str) -> Vec<(String, String)> {
        let out = kubectl(&self.cluster.admin, &["get", "events", "-A", "-o", "json"]).await;
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&out.stdout) else {
            return Vec::new();
        };
        v["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| {
                e["involvedObject"]["kind"] == "Node"
                    && e["involvedObject"]["name"] == node
                    && e["reason"] == reason
                    && [&e["reportingComponent"], &e["source"]["component"]]
                        .iter()
                        .any(|c| c.as_str().is_some_and(|s| s.contains("rollboot")))
            })
            .map(|e| {
                (
                    e["type"].as_str().unwrap_or_default().to_string(),
                    e["message"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }

    /// Waits up to 15 s for an Event of [`Suite::events`] whose message passes `ok`.
    pub(crate) async fn await_event(
        &self,
        node: &str,
        reason: &str,
        ok: impl Fn(&str) -> bool,
    ) -> Option<(String, String)> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(e) = self
                .events(node, reason)
                .await
                .into_iter()
                .find(|(_, m)| ok(m))
            {
                return Some(e);
            }
            if tokio::time::Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// The distinct reboot tokens `node` carried in its cycle begun after `t0`.
    fn tokens_since(&self, node: &str, t0: At) -> BTreeSet<String> {
        self.obs.with(|w| {
            cycle(w, node, t0)
                .iter()
                .filter_map(|v| v.rollboot.get(REBOOT).cloned())
                .collect()
        })
    }

    /// The nodes by how many pods a drain would evict from them, fewest first (ties: by name).
    fn by_pods(&self) -> Vec<String> {
        self.obs.with(|w| {
            let mut v: Vec<(usize, String)> = NODES
                .iter()
                .map(|n| (w.evictable_on(n).len(), n.to_string()))
                .collect();
            v.sort();
            v.into_iter().map(|(_, n)| n).collect()
        })
    }

    /// Fewest healthy web pods at any pod change since `since`, with the moments below the
    /// budget (at most five).
    fn budget_since(&self, since: At) -> (usize, Vec<String>) {
        self.obs.with(|w| {
            let samples: Vec<_> = w.web.iter().filter(|h| h.at >= since).collect();
            let min = samples.iter().map(|h| h.healthy).min().unwrap_or(0);
            let below = samples
                .iter()
                .filter(|h| h.healthy < WEB_MIN_HEALTHY)
                .take(5)
                .map(|h| {
                    format!(
                        "only {} web pods healthy at {}: {}",
                        h.healthy,
                        hms(h.at),
                        h.not_healthy.join(", ")
                    )
                })
                .collect();
            (min, below)
        })
    }

    /// Nodes left cordoned now, or carrying `cordoned-by`.
    fn cordoned_now(&self) -> Vec<String> {
        self.obs.with(|w| {
            NODES
                .iter()
                .filter_map(|n| {
                    let v = w.node(n)?;
                    (v.unschedulable || v.has("cordoned-by")).then(|| {
                        format!(
                            "{n} left cordoned (unschedulable {}, cordoned-by {:?}, state {:?})",
                            v.unschedulable,
                            v.rollboot.get("rollboot.dev/cordoned-by"),
                            v.state()
                        )
                    })
                })
                .collect()
        })
    }

    // ---- checks 12, 13, 14a, 17 ---------------------------------------------------------------

    /// Checks 12, 13, 14a and 17: four nodes flagged at once (the four with the fewest pods: the
    /// cases are about the reboot); as each has its token acknowledged with its host down, the
    /// next case is done to it. The Leases go second, so two nodes start after them.
    pub(crate) async fn mid_reboot(&mut self, report: &mut Report) -> Result<(), String> {
        let cases = [
            MidReboot::GarbledState,
            MidReboot::LeasesDeleted,
            MidReboot::BackwardsState,
            MidReboot::GarbledAck,
        ];
        let nodes: Vec<String> = self.by_pods().into_iter().take(cases.len()).collect();
        let before: BTreeMap<String, (usize, usize)> =
            nodes.iter().map(|n| (n.clone(), self.counts(n))).collect();
        let mut t0 = BTreeMap::new();
        for n in &nodes {
            t0.insert(n.clone(), self.flag(n)?);
        }
        for n in &nodes {
            self.await_flag(n, t0[n]).await?;
        }
        self.struck.extend(nodes.iter().cloned());
        let mut applied: Vec<Applied> = Vec::new();
        for case in cases {
            let taken: Vec<String> = applied.iter().map(|a| a.node.clone()).collect();
            let found = self
                .obs
                .wait(CYCLE_TIMEOUT, |w| {
                    nodes.iter().filter(|n| !taken.contains(n)).find_map(|n| {
                        let v = *w.node_since(n, t0[n]).last()?;
                        let token = v.rollboot.get(REBOOT)?;
                        let before = v.rollboot.get(BOOT_ID_BEFORE)?;
                        (v.state() == Some("rebooting")
                            && v.rollboot.get(REBOOT_ACK) == Some(token)
                            && v.boot_id == *before)
                            .then(|| (n.clone(), token.clone(), before.clone()))
                    })
                })
                .await;
            let Some((node, token, boot_before)) = found else {
                let e = format!(
                    "no node of {nodes:?} left was seen `rebooting` with its token acknowledged and its host down within {}s: {}",
                    CYCLE_TIMEOUT.as_secs(),
                    nodes
                        .iter()
                        .filter(|n| !taken.contains(n))
                        .map(|n| format!("{n}: {}", self.describe(n)))
                        .collect::<Vec<_>>()
                        .join("; ")
                );
                for c in cases
                    .iter()
                    .filter(|c| !applied.iter().any(|a| a.case == **c))
                {
                    report.check(c.id(), title(c.id()), vec![e.clone()], vec![]);
                }
                return Err(e);
            };
            let at = Utc::now();
            let raced = match case.annotation() {
                Some((key, value)) => {
                    self.annotate(&node, &format!("{key}={value}")).await?;
                    println!("e2e: wrote {key}={value} on {node} (check {})", case.id());
                    let landed = self
                        .obs
                        .wait(Duration::from_secs(10), |w| {
                            first_with(&w.node_since(&node, at), key, value).cloned()
                        })
                        .await;
                    match landed {
                        None => Some(format!("{key}={value} was never seen on {node}")),
                        Some(v) if v.boot_id != boot_before => Some(format!(
                            "{node}'s host was back (boot ID {}) before {key}={value} landed",
                            v.boot_id
                        )),
                        Some(_) => None,
                    }
                }
                None => {
                    let out = kubectl(
                        &self.cluster.admin,
                        &[
                            "-n",
                            "rollboot-system",
                            "delete",
                            "lease",
                            "rollboot-lock",
                            "rollboot-leader",
                        ],
                    )
                    .await;
                    if !out.ok {
                        return Err(format!(
                            "kubectl delete lease rollboot-lock rollboot-leader: {}",
                            out.stderr.trim()
                        ));
                    }
                    println!(
                        "e2e: deleted the lock and leader Leases while {node} reboots (check 17)"
                    );
                    let back = self
                        .obs
                        .with(|w| w.node(&node).map(|v| v.boot_id.clone()))
                        .unwrap_or_default();
                    (back != boot_before).then(|| {
                        format!(
                            "{node}'s host was back (boot ID {back}) when the deletion returned"
                        )
                    })
                }
            };
            applied.push(Applied {
                case,
                node,
                token,
                boot_before,
                at,
                raced,
            });
        }
        let mut ends = BTreeMap::new();
        for a in &applied {
            let end = self.await_end(&a.node, t0[&a.node], CYCLE_TIMEOUT).await;
            ends.insert(a.node.clone(), end);
        }
        let names: Vec<&str> = nodes.iter().map(String::as_str).collect();
        self.await_fake_reboots(&names).await;
        for a in &applied {
            let mut failures = Vec::new();
            let mut notes = vec![format!(
                "{} on {} at {} (token {} acknowledged, boot-id-before {})",
                match a.case.annotation() {
                    Some((k, v)) => format!("wrote {k}={v}"),
                    None => "deleted the Leases rollboot-lock and rollboot-leader".into(),
                },
                a.node,
                hms(a.at),
                a.token,
                a.boot_before
            )];
            match &ends[&a.node] {
                Ok(End::Done(at)) => {
                    notes.push(format!("{} done {:.1}s after it", a.node, secs(a.at, *at)))
                }
                Ok(End::Failed(at, why)) => failures.push(format!(
                    "{} failed {:.1}s after it: {why}",
                    a.node,
                    secs(a.at, *at)
                )),
                Err(e) => failures.push(e.clone()),
            }
            self.exactly(&a.node, before[&a.node], 1, &mut failures, &mut notes);
            let tokens = self.tokens_since(&a.node, t0[&a.node]);
            if tokens.len() != 1 {
                failures.push(format!(
                    "{} was given {} reboot tokens in one cycle: {tokens:?}",
                    a.node,
                    tokens.len()
                ));
            }
            match a.case {
                MidReboot::GarbledState | MidReboot::BackwardsState => {
                    let value = a.case.annotation().map(|(_, v)| v).unwrap_or_default();
                    let shown = format!("`{value}`");
                    match self
                        .await_event(&a.node, "MalformedAnnotation", |m| {
                            m.contains(STATE) && m.contains(&shown)
                        })
                        .await
                    {
                        Some((kind, m)) => {
                            notes.push(format!("MalformedAnnotation ({kind}): {}", short(&m, 300)))
                        }
                        None => failures.push(format!(
                            "no MalformedAnnotation Event about {} names {STATE} and {shown}: {:?}",
                            a.node,
                            self.events(&a.node, "MalformedAnnotation").await
                        )),
                    }
                }
                MidReboot::GarbledAck => {
                    let verified = self.obs.with(|w| {
                        w.node_since(&a.node, a.at)
                            .iter()
                            .any(|v| v.state() == Some("verifying"))
                    });
                    if !verified {
                        failures.push(format!(
                            "{} was never seen `verifying` after its reboot-ack was garbled",
                            a.node
                        ));
                    }
                    let left = self.obs.with(|w| {
                        w.node(&a.node)
                            .and_then(|v| v.rollboot.get(REBOOT_ACK).cloned())
                    });
                    if left.as_deref() == Some(GARBLED) {
                        // What an operator does after the MalformedAnnotation Event: while it is
                        // there, the agent refuses every later token of this node.
                        self.annotate(&a.node, &format!("{REBOOT_ACK}-")).await?;
                        notes.push(format!(
                            "the garbled {REBOOT_ACK} was still on {} after its cycle: removed as the admin (the agent would refuse every later token)",
                            a.node
                        ));
                    }
                }
                MidReboot::LeasesDeleted => {
                    let (leader, lock, after) = self.obs.with(|w| {
                        let leader = w
                            .leases
                            .iter()
                            .find(|l| {
                                l.name == "rollboot-leader" && l.at > a.at && l.holder.is_some()
                            })
                            .map(|l| (secs(a.at, l.at), l.holder.clone().unwrap_or_default()));
                        let lock = w
                            .leases
                            .iter()
                            .find(|l| l.name == "rollboot-lock" && l.at > a.at && !l.deleted)
                            .map(|l| (secs(a.at, l.at), l.in_flight.clone()));
                        // The phase's nodes whose cycle started (cordoning) after the deletion,
                        // and whether it got as far as its token.
                        let after: Vec<(String, bool)> = nodes
                            .iter()
                            .filter_map(|n| {
                                let vs = cycle(w, n, a.at);
                                let first = vs.first()?;
                                (first.state() == Some("cordoning")).then(|| {
                                    let token = vs
                                        .iter()
                                        .any(|v| v.state() == Some("rebooting") && v.has("reboot"));
                                    (n.clone(), token)
                                })
                            })
                            .collect();
                        (leader, lock, after)
                    });
                    match leader {
                        Some((s, h)) => notes.push(format!(
                            "the leader Lease held again by {h} {s:.1}s after the deletion"
                        )),
                        None => failures.push(
                            "no controller held the leader Lease again after its deletion".into(),
                        ),
                    }
                    match lock {
                        Some((s, f)) => notes.push(format!("the lock Lease written again {s:.1}s after the deletion, in flight {f:?}")),
                        None => failures.push("the lock Lease was never written again after its deletion".into()),
                    }
                    if after.is_empty() {
                        failures.push(format!(
                            "no node of {nodes:?} started a cycle after the Leases were deleted: the rollout did not go on"
                        ));
                    }
                    // Going on is getting as far as the reboot: how each of those cycles ends
                    // is its own case's check.
                    for (n, token) in &after {
                        if *token {
                            notes.push(format!(
                                "{n} started after the deletion and was given its token (it ended {})",
                                match &ends[n] {
                                    Ok(End::Done(_)) => "done".to_string(),
                                    Ok(End::Failed(..)) => "failed: see its own check".to_string(),
                                    Err(_) => "not in time".to_string(),
                                }
                            ));
                        } else {
                            failures.push(format!(
                                "{n} started after the Leases were deleted but was never given its token: {}",
                                self.describe(n)
                            ));
                        }
                    }
                }
            }
            match &a.raced {
                Some(why) if failures.is_empty() => {
                    report.not_run(a.case.id(), title(a.case.id()), why.clone())
                }
                Some(why) => {
                    failures.push(format!("(and the case raced: {why})"));
                    report.check(a.case.id(), title(a.case.id()), failures, notes);
                }
                None => report.check(a.case.id(), title(a.case.id()), failures, notes),
            }
        }
        self.settle(&nodes).await
    }

    /// Leaves `nodes` as the next phase needs them: a failed one cleared with `rollboot retry`
    /// (and its cycle, if still flagged, waited for). Errs when one cannot be brought back.
    async fn settle(&self, nodes: &[String]) -> Result<(), String> {
        for n in nodes {
            let failed = self
                .obs
                .with(|w| w.node(n).is_some_and(|v| v.state() == Some("failed")));
            if failed {
                println!("e2e: clearing the failure of {n} (rollboot retry) for the next phases");
                if let (_, Some(End::Failed(_, why))) = self.retry(n).await? {
                    return Err(format!("{n} failed again after `rollboot retry`: {why}"));
                }
            }
        }
        Ok(())
    }

    // ---- checks 14b, 15 ------------------------------------------------------------------------

    /// Checks 14b and 15: tokens the agent refuses.
    pub(crate) async fn refusals(&mut self, report: &mut Report) -> Result<(), String> {
        let busiest = self.by_pods().pop().unwrap_or_else(|| "node-5".into());
        self.unreadable_ack(report, &busiest).await?;
        let node = self
            .by_pods()
            .into_iter()
            .find(|n| *n != busiest)
            .unwrap_or_else(|| "node-1".into());
        self.wrong_host(report, &node, &busiest).await
    }

    /// Check 18: a PodDisruptionBudget with `maxUnavailable: 0` over a pod of `node` (a
    /// Deployment of one pinned there): its drain fails at the first refused eviction, naming
    /// the budget, with no reboot; once the budget is gone, `rollboot retry` reboots it once.
    pub(crate) async fn never_allowing_budget(
        &mut self,
        report: &mut Report,
    ) -> Result<(), String> {
        let id = "18";
        let node = self
            .by_pods()
            .into_iter()
            .next()
            .unwrap_or_else(|| "node-3".into());
        let dir = self.rb.join("frozen.yaml");
        let manifest = format!(
            r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: frozen, namespace: demo}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: frozen}}}}
  template:
    metadata: {{labels: {{app: frozen}}}}
    spec:
      nodeName: {node}
      containers: [{{name: c, image: registry.k8s.io/pause:3.10}}]
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{name: frozen, namespace: demo}}
spec:
  maxUnavailable: 0
  selector: {{matchLabels: {{app: frozen}}}}
"#
        );
        std::fs::write(&dir, manifest).map_err(|e| format!("{}: {e}", dir.display()))?;
        let admin = &self.cluster.admin;
        let path = dir.to_string_lossy().into_owned();
        let out = kubectl(admin, &["apply", "-f", &path]).await;
        if !out.ok {
            return Err(format!("kubectl apply {path}: {}", out.stderr));
        }
        let ready = kubectl(
            admin,
            &[
                "-n",
                "demo",
                "rollout",
                "status",
                "deployment/frozen",
                "--timeout=60s",
            ],
        )
        .await;
        if !ready.ok {
            return Err(format!(
                "deployment demo/frozen not ready: {}",
                ready.stderr
            ));
        }
        let before = self.counts(&node);
        let t0 = self.flag(&node)?;
        self.await_flag(&node, t0).await?;
        let end = self.await_end(&node, t0, CYCLE_TIMEOUT).await;
        let timeline = self
            .obs
            .with(|w| first_with(&w.node_since(&node, t0), STATE, "draining").map(|v| v.at));
        let mut failures = Vec::new();
        let mut notes = Vec::new();
        match (&end, timeline) {
            (Ok(End::Failed(failed, why)), Some(draining)) => {
                let took = secs(draining, *failed);
                notes.push(format!(
                    "{node} draining at {}, failed {took:.2}s later: {why}",
                    hms(draining)
                ));
                report.header.push(format!(
                    "check 18: seconds from the drain's start to the node's failure for a budget that never allows: {took:.2} (drain.timeout before: the whole timeout)"
                ));
                if took > REFUSAL_BOUND.as_secs_f64() {
                    failures.push(format!(
                        "{node} failed {took:.1}s after it started draining, not within {}s",
                        REFUSAL_BOUND.as_secs()
                    ));
                }
                if !why.contains("PodDisruptionBudget demo/frozen can never allow a disruption") {
                    failures.push(format!(
                        "{node}'s failure reason does not name the budget demo/frozen: {why}"
                    ));
                }
            }
            (Ok(End::Failed(_, why)), None) => {
                failures.push(format!("{node} failed without being seen draining: {why}"))
            }
            (Ok(End::Done(_)), _) => failures.push(format!(
                "{node} ended done: its pod under demo/frozen (maxUnavailable 0) went"
            )),
            (Err(e), _) => failures.push(e.clone()),
        }
        let blocked = self.events(&node, "BudgetNeverAllows").await;
        match blocked.first() {
            Some((_, note)) => notes.push(format!("BudgetNeverAllows Event: {}", short(note, 200))),
            None => failures.push(format!("no BudgetNeverAllows Event about {node}")),
        }
        if self.counts(&node) != before {
            failures.push(format!(
                "{node}: a reboot command ran although its drain failed"
            ));
        }
        // Cleared as an operator would: the budget and its Deployment removed, then retry.
        let out = kubectl(admin, &["delete", "-f", &path, "--wait=false"]).await;
        if !out.ok {
            failures.push(format!("kubectl delete {path}: {}", out.stderr));
        }
        if matches!(end, Ok(End::Failed(..))) {
            self.struck.insert(node.clone());
            let (said, after) = self.retry(&node).await?;
            notes.push(format!("rollboot retry {node}: {said}"));
            match after {
                Some(End::Done(_)) => {
                    self.struck.remove(&node);
                    notes.push(format!("{node} then rebooted and ended done"))
                }
                other => failures.push(format!("{node} after rollboot retry: {other:?}")),
            }
            self.exactly(&node, before, 1, &mut failures, &mut notes);
        }
        report.check(id, title(id), failures, notes);
        self.settle(&[node]).await
    }

    /// Check 14b: `reboot-ack` garbled while `node` drains, before its token is issued.
    async fn unreadable_ack(&mut self, report: &mut Report, node: &str) -> Result<(), String> {
        let id = "14b";
        let before = self.counts(node);
        let t0 = self.flag(node)?;
        self.await_flag(node, t0).await?;
        let draining = self
            .obs
            .wait(CYCLE_TIMEOUT, |w| {
                let v = *w.node_since(node, t0).last()?;
                (v.state() == Some("draining") && !v.has("reboot")).then_some(())
            })
            .await;
        if draining.is_none() {
            let e = format!("{node} was never seen draining: {}", self.describe(node));
            report.check(id, title(id), vec![e.clone()], vec![]);
            return Err(e);
        }
        let at = Utc::now();
        self.annotate(node, &format!("{REBOOT_ACK}={GARBLED}"))
            .await?;
        println!("e2e: wrote {REBOOT_ACK}={GARBLED} on {node} while it drains (check {id})");
        let landed = self
            .obs
            .wait(Duration::from_secs(10), |w| {
                first_with(&w.node_since(node, at), REBOOT_ACK, GARBLED).cloned()
            })
            .await;
        let raced = match &landed {
            None => Some(format!("{REBOOT_ACK}={GARBLED} was never seen on {node}")),
            Some(v) if v.has("reboot") => Some(format!(
                "{node} had its token already ({:?}, state {:?}) when {REBOOT_ACK}={GARBLED} landed",
                v.rollboot.get(REBOOT),
                v.state()
            )),
            Some(_) => None,
        };
        let end = self
            .await_end(node, t0, REBOOT_TIMEOUT + Duration::from_secs(30))
            .await;
        self.await_fake_reboots(&[node]).await;
        let asked_at_end = self.counts(node);
        let timeline = self.obs.with(|w| Timeline::read(w, node, t0));
        let mut failures = Vec::new();
        let mut notes = vec![format!(
            "wrote {REBOOT_ACK}={GARBLED} on {node} at {} while it drained",
            hms(at)
        )];
        let token_at = timeline.token.as_ref().map(|(t, a)| (t.clone(), *a));
        match (&end, &token_at) {
            (Ok(End::Failed(failed, why)), Some((token, issued))) => {
                notes.push(format!(
                    "token {token} issued at {}, node failed {:.1}s later: {why}",
                    hms(*issued),
                    secs(*issued, *failed)
                ));
                if secs(*issued, *failed) > REFUSAL_BOUND.as_secs_f64() {
                    failures.push(format!(
                        "{node} failed {:.1}s after its token was issued, not within {}s of the agent's refusal (reboot.timeout is {}s)",
                        secs(*issued, *failed),
                        REFUSAL_BOUND.as_secs(),
                        REBOOT_TIMEOUT.as_secs()
                    ));
                }
                if !why.contains(REBOOT_ACK) {
                    failures.push(format!(
                        "{node}'s failure reason does not name {REBOOT_ACK}: {why}"
                    ));
                }
            }
            (Ok(End::Failed(_, why)), None) => {
                failures.push(format!("{node} failed before any token was issued: {why}"))
            }
            (Ok(End::Done(_)), _) => failures.push(format!(
                "{node} ended done: it was rebooted on a token whose ack could not be read"
            )),
            (Err(e), _) => failures.push(e.clone()),
        }
        match &timeline.refusal {
            Some((r, seen)) if r.cause == "ackUnreadable" => notes.push(format!(
                "{REBOOT_REFUSED} seen at {}: {}",
                hms(*seen),
                short(&r.text, 300)
            )),
            Some((r, _)) => failures.push(format!(
                "the agent refused with cause {}, not ackUnreadable: {}",
                r.cause, r.text
            )),
            None => failures.push(format!(
                "no {REBOOT_REFUSED} for the token on {node} (the agent's refusal)"
            )),
        }
        if asked_at_end != before {
            failures.push(format!(
                "{node}: reboot.command ran {} time(s), reboots.log {} line(s), for a token whose ack could not be read",
                asked_at_end.1 - before.1,
                asked_at_end.0 - before.0
            ));
        } else {
            notes.push(format!("{node}: no reboot command ran"));
        }
        // Cleared as an operator would, after the Event: the garbled ack removed (the agent
        // refuses every token while it is there), then `rollboot retry`.
        if matches!(end, Ok(End::Failed(..))) {
            let out = self
                .obs
                .wait(Duration::from_secs(15), |w| {
                    w.lease("rollboot-lock")
                        .is_some_and(|l| !l.in_flight.contains_key(node))
                        .then_some(())
                })
                .await;
            if out.is_none() {
                failures.push(format!("{node} failed but stays listed in the lock"));
            }
            self.annotate(node, &format!("{REBOOT_ACK}-")).await?;
            // Two of the agent's check periods with the failed cycle's token readable.
            tokio::time::sleep(Duration::from_secs(4)).await;
            if self.counts(node) != before {
                failures.push(format!(
                    "{node}: a reboot command ran on the failed cycle's token once its ack was readable again, before any retry"
                ));
            }
            let (said, after) = self.retry(node).await?;
            notes.push(format!("rollboot retry {node}: {said}"));
            match after {
                Some(End::Done(_)) => {
                    // A clean cycle: the node's last one for the predictions.
                    self.struck.remove(node);
                    notes.push(format!("{node} then rebooted and ended done"))
                }
                other => failures.push(format!("{node} after rollboot retry: {other:?}")),
            }
            self.exactly(node, before, 1, &mut failures, &mut notes);
        }
        match raced {
            Some(why) if failures.is_empty() => report.not_run(id, title(id), why),
            Some(why) => {
                failures.push(format!("(and the case raced: {why})"));
                report.check(id, title(id), failures, notes);
            }
            None => report.check(id, title(id), failures, notes),
        }
        self.settle(&[node.to_string()]).await
    }

    /// Check 15: the agent of `node` started with `reboot.hostBootIdFile` pointing at the boot ID
    /// file of `other`'s fake host.
    async fn wrong_host(
        &mut self,
        report: &mut Report,
        node: &str,
        other: &str,
    ) -> Result<(), String> {
        let id = "15";
        if !self.fake_hosts {
            report.check(
                id,
                title(id),
                vec![
                    "this rollboot does not accept reboot.hostBootIdFile and reboot.hostMachineIdFile (issue 22, item 3): an agent cannot be put on another host"
                        .into(),
                ],
                vec![],
            );
            return Ok(());
        }
        let right = self.rb.join(format!("agent-{node}.yaml"));
        let wrong = self.rb.join(format!("agent-{node}-wrong-host.yaml"));
        let text =
            std::fs::read_to_string(&right).map_err(|e| format!("{}: {e}", right.display()))?;
        // Another host entirely: its boot ID and its machine ID. (Another boot ID with this
        // machine's ID reads as this host rebooted and its kubelet not yet saying so.)
        let mut wrong_text = text.clone();
        for (key, file) in [
            ("hostBootIdFile", "boot-id"),
            ("hostMachineIdFile", "machine-id"),
        ] {
            let own = self
                .state
                .join(format!("{file}-{node}"))
                .display()
                .to_string();
            let theirs = self
                .state
                .join(format!("{file}-{other}"))
                .display()
                .to_string();
            if !text.contains(&format!("{key}: {own}\n")) {
                return Err(format!("{} does not read {key}: {own}", right.display()));
            }
            wrong_text =
                wrong_text.replace(&format!("{key}: {own}\n"), &format!("{key}: {theirs}\n"));
        }
        std::fs::write(&wrong, wrong_text).map_err(|e| e.to_string())?;
        let name = format!("agent-{node}");
        self.cluster.kill(&name)?;
        self.cuts.push(Cut::at(
            Some(audit::AGENT),
            Utc::now(),
            format!("the suite killed {name} to start it on {other}'s host"),
        ));
        self.spawn_agent(node, &wrong)?;
        println!("e2e: started {name} on {other}'s fake host (reboot.hostBootIdFile, hostMachineIdFile; check {id})");
        let before = self.counts(node);
        let t0 = self.flag(node)?;
        self.await_flag(node, t0).await?;
        let end = self
            .await_end(node, t0, REBOOT_TIMEOUT + Duration::from_secs(30))
            .await;
        self.await_fake_reboots(&[node]).await;
        let at_end = self.counts(node);
        let timeline = self.obs.with(|w| Timeline::read(w, node, t0));
        let mut failures = Vec::new();
        let mut notes = Vec::new();
        if at_end != before {
            failures.push(format!(
                "{node}: reboot.command ran {} time(s) (reboots.log {}) with the agent on {other}'s host",
                at_end.1 - before.1,
                at_end.0 - before.0
            ));
        } else {
            notes.push(format!("{node}: no reboot command ran"));
        }
        let token = timeline.token.as_ref().map(|(t, _)| t.clone());
        match &timeline.refusal {
            Some((r, seen)) => {
                notes.push(format!(
                    "{REBOOT_REFUSED} seen at {}: {}",
                    hms(*seen),
                    short(&r.text, 300)
                ));
                if r.cause != "wrongHost" {
                    failures.push(format!(
                        "the agent refused with cause {}, not wrongHost",
                        r.cause
                    ));
                }
                if r.at.is_none() {
                    failures.push(format!(
                        "{REBOOT_REFUSED}'s `at` is not RFC 3339: {}",
                        r.text
                    ));
                }
            }
            None => failures.push(format!(
                "no {REBOOT_REFUSED} naming the token {token:?} on {node}: {:?}",
                self.obs.with(|w| w
                    .node(node)
                    .and_then(|v| v.rollboot.get(REBOOT_REFUSED).cloned()))
            )),
        }
        match &token {
            Some(t) => match self
                .await_event(node, "RebootRefused", |m| m.contains(t.as_str()))
                .await
            {
                Some((kind, m)) if kind == "Warning" => {
                    notes.push(format!("RebootRefused (Warning): {}", short(&m, 300)))
                }
                Some((kind, m)) => failures.push(format!(
                    "the RebootRefused Event is {kind}, not Warning: {m}"
                )),
                None => failures.push(format!(
                    "no RebootRefused Event about {node} names token {t}"
                )),
            },
            None => failures.push(format!("{node} was never given a token")),
        }
        match (&end, &timeline.refusal) {
            (Ok(End::Failed(failed, why)), Some((r, seen))) => {
                let by_watch = secs(*seen, *failed);
                let by_at = r.at.map(|at| {
                    let since = timeline
                        .failed
                        .as_ref()
                        .and_then(|(_, s, _)| s.as_deref())
                        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
                        .map(|d| d.to_utc());
                    (secs(at, *failed), since.map(|s| secs(at, s)))
                });
                notes.push(format!(
                    "seconds from the refusal to `state: failed`: {by_watch:.2}s as the suite's watch saw both; {}",
                    match by_at {
                        Some((seen, Some(since))) => format!(
                            "{seen:.2}s from the refusal's `at` to failed as seen, {since:.0}s from `at` to the failure's state-since (both whole seconds)"
                        ),
                        Some((seen, None)) => format!("{seen:.2}s from the refusal's `at` to failed as seen"),
                        None => "the refusal has no `at`".into(),
                    }
                ));
                if by_watch > REFUSAL_BOUND.as_secs_f64() {
                    failures.push(format!(
                        "{node} failed {by_watch:.1}s after its agent's refusal was on the Node, not within {}s (reboot.timeout {}s)",
                        REFUSAL_BOUND.as_secs(),
                        REBOOT_TIMEOUT.as_secs()
                    ));
                }
                if !why.contains(r.reason.as_str()) || !why.contains(r.cause.as_str()) {
                    failures.push(format!(
                        "{node}'s failure reason is not the agent's ({}: {}): {why}",
                        r.cause, r.reason
                    ));
                }
            }
            (Ok(End::Failed(failed, why)), None) => failures.push(format!(
                "{node} failed at {} without the agent's refusal on it: {why}",
                hms(*failed)
            )),
            (Ok(End::Done(_)), _) => failures.push(format!(
                "{node} ended done with its agent on {other}'s host"
            )),
            (Err(e), _) => failures.push(e.clone()),
        }
        // The agent on its own host again; it must not act on the failed cycle's token.
        self.cluster.kill(&name)?;
        self.cuts.push(Cut::at(
            Some(audit::AGENT),
            Utc::now(),
            format!("the suite killed {name} to start it on its own host again"),
        ));
        self.spawn_agent(node, &right)?;
        if matches!(end, Ok(End::Failed(..))) {
            tokio::time::sleep(Duration::from_secs(4)).await;
            if self.counts(node) != before {
                failures.push(format!(
                    "{node}: a reboot command ran on the failed cycle's token once the agent was on its own host, before any retry"
                ));
            }
            let (said, after) = self.retry(node).await?;
            notes.push(format!("rollboot retry {node}: {said}"));
            match after {
                Some(End::Done(_)) => {
                    // A clean cycle: the node's last one for the predictions.
                    self.struck.remove(node);
                    notes.push(format!("{node} then rebooted and ended done"))
                }
                other => failures.push(format!("{node} after rollboot retry: {other:?}")),
            }
            self.exactly(node, before, 1, &mut failures, &mut notes);
        }
        report.check(id, title(id), failures, notes);
        self.settle(&[node.to_string()]).await
    }

    // ---- checks 16a, 16b -----------------------------------------------------------------------

    /// Checks 16a and 16b: the two nodes with the most pods flagged together; the kube-apiserver
    /// is stopped while the first drains and killed while the second drains, each as the node
    /// waits for its last evicted pods to go.
    pub(crate) async fn apiserver_outages(&mut self, report: &mut Report) -> Result<(), String> {
        let cases = [Outage::Stopped, Outage::Killed];
        let nodes: Vec<String> = self.by_pods().into_iter().rev().take(2).collect();
        let empty: Vec<&String> = nodes
            .iter()
            .filter(|n| self.obs.with(|w| w.evictable_on(n).is_empty()))
            .collect();
        if !empty.is_empty() {
            for c in cases {
                report.not_run(
                    c.id(),
                    title(c.id()),
                    format!("{empty:?} had no pod to evict: no drain long enough to act in"),
                );
            }
            return Ok(());
        }
        self.struck.extend(nodes.iter().cloned());
        let start = Utc::now();
        let before: BTreeMap<String, (usize, usize)> =
            nodes.iter().map(|n| (n.clone(), self.counts(n))).collect();
        let mut t0 = BTreeMap::new();
        for n in &nodes {
            t0.insert(n.clone(), self.flag(n)?);
        }
        for n in &nodes {
            self.await_flag(n, t0[n]).await?;
        }
        let mut done: Vec<Struck> = Vec::new();
        for case in cases {
            let taken: Vec<String> = done.iter().map(|d| d.node.clone()).collect();
            let found = self
                .obs
                .wait(CYCLE_TIMEOUT, |w| {
                    nodes.iter().filter(|n| !taken.contains(n)).find_map(|n| {
                        let v = *w.node_since(n, t0[n]).last()?;
                        let pods = w.evictable_on(n);
                        let all_evicted = !pods.is_empty() && pods.iter().all(|p| p.deleting);
                        (v.state() == Some("draining") && all_evicted).then(|| n.clone())
                    })
                })
                .await;
            let Some(node) = found else {
                let e = format!(
                    "none of {nodes:?} left was seen draining with its last pods terminating within {}s",
                    CYCLE_TIMEOUT.as_secs()
                );
                report.check(case.id(), title(case.id()), vec![e.clone()], vec![]);
                return Err(e);
            };
            // Struck once every eviction of the drain was accepted: an eviction request the
            // outage cuts can leave a phantom entry in the budget's status.disruptedPods, which
            // holds the next drains for 2 minutes (seen with a SIGSTOP while the drain retried
            // an eviction every 2 s: the leader stepped down and dropped the request, which the
            // kube-apiserver then carried out halfway when continued).
            let still = self
                .obs
                .with(|w| w.node(&node).and_then(|v| v.state().map(String::from)));
            if still.as_deref() != Some("draining") {
                done.push(Struck {
                    case,
                    node,
                    span: None,
                });
                continue;
            }
            let from = Utc::now();
            match case {
                Outage::Stopped => {
                    self.cluster.signal_plane("kube-apiserver", libc::SIGSTOP)?;
                    println!("e2e: SIGSTOPped the kube-apiserver while {node} drains (check 16a)");
                    tokio::time::sleep(APISERVER_STOP).await;
                    self.cluster.signal_plane("kube-apiserver", libc::SIGCONT)?;
                    println!("e2e: SIGCONTed the kube-apiserver");
                }
                Outage::Killed => {
                    let pid = self.cluster.restart_plane("kube-apiserver")?;
                    println!("e2e: SIGKILLed the kube-apiserver while {node} drains and started it again (pid {pid}, check 16b)");
                    self.await_apiserver_ready(Duration::from_secs(90)).await?;
                }
            }
            let to = Utc::now();
            self.cuts.push(Cut {
                user: None,
                from,
                // Requests queued while it was out are answered just after.
                to: to + chrono::Duration::seconds(3),
                what: match case {
                    Outage::Stopped => format!(
                        "the suite stopped the kube-apiserver (SIGSTOP) for {}s",
                        APISERVER_STOP.as_secs()
                    ),
                    Outage::Killed => {
                        "the suite killed the kube-apiserver (SIGKILL) and started it again, until it was ready"
                            .into()
                    }
                },
                starting: case == Outage::Killed,
            });
            done.push(Struck {
                case,
                node,
                span: Some((from, to)),
            });
        }
        // A request cut by the outage can leave a phantom entry in the budget's
        // status.disruptedPods that holds evictions for 2 minutes (see kill_mid_drain).
        let mut ends = BTreeMap::new();
        for n in &nodes {
            let end = self
                .await_end(n, t0[n], CYCLE_TIMEOUT + Duration::from_secs(120))
                .await;
            ends.insert(n.clone(), end);
        }
        let names: Vec<&str> = nodes.iter().map(String::as_str).collect();
        self.await_fake_reboots(&names).await;
        for Struck { case, node, span } in &done {
            let id = case.id();
            let Some((from, to)) = span else {
                report.not_run(
                    id,
                    title(id),
                    format!("{node} left draining before the kube-apiserver could be struck"),
                );
                continue;
            };
            let mut failures = Vec::new();
            let mut notes = vec![format!(
                "{} from {} to {} ({:.1}s) while {node} drained",
                match case {
                    Outage::Stopped => "kube-apiserver stopped",
                    Outage::Killed => "kube-apiserver killed, started again and ready",
                },
                hms(*from),
                hms(*to),
                secs(*from, *to)
            )];
            for n in &nodes {
                match &ends[n] {
                    Ok(End::Done(at)) => notes.push(format!("{n} done at {}", hms(*at))),
                    Ok(End::Failed(_, why)) => failures.push(format!("{n} failed: {why}")),
                    Err(e) => failures.push(e.clone()),
                }
                self.exactly(n, before[n], 1, &mut failures, &mut notes);
            }
            let (min, below) = self.budget_since(start);
            failures.extend(below);
            notes.push(format!(
                "fewest web pods healthy since the flags: {min} of 8"
            ));
            failures.extend(self.cordoned_now());
            let (leader, gaps, phantoms) = self.obs.with(|w| {
                let leader = w
                    .leases
                    .iter()
                    .find(|l| l.name == "rollboot-leader" && l.at > *to && l.holder.is_some())
                    .map(|l| (secs(*from, l.at), l.holder.clone().unwrap_or_default()));
                let phantoms: Vec<String> = w
                    .disrupted_pods_since(*from)
                    .into_iter()
                    .filter(|(_, s)| *s >= 30.0)
                    .map(|(p, s)| format!("{p} for {s:.0}s"))
                    .collect();
                let gaps: Vec<String> = w
                    .gaps
                    .iter()
                    .filter(|g| g.to >= *from)
                    .map(|g| g.to_string())
                    .collect();
                (leader, gaps, phantoms)
            });
            if let Some((s, h)) = leader {
                notes.push(format!(
                    "leader Lease renewed or taken by {h} {s:.1}s after the outage began"
                ));
            }
            if !phantoms.is_empty() {
                notes.push(format!(
                    "the budget demo/web kept {} in status.disruptedPods after the outage (a request cut by it: issue 10, point 7)",
                    phantoms.join(", ")
                ));
            }
            if !gaps.is_empty() {
                notes.push(format!(
                    "the suite's watches: {} (check 2 and 3 say whether the audit log covers it)",
                    gaps.join("; ")
                ));
            }
            report.check(id, title(id), failures, notes);
        }
        self.settle(&nodes).await
    }

    /// Waits for the kube-apiserver's /readyz (admin).
    async fn await_apiserver_ready(&self, timeout: Duration) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let out = kubectl(&self.cluster.admin, &["get", "--raw", "/readyz"]).await;
            if out.ok && out.stdout.trim() == "ok" {
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(format!(
                    "the kube-apiserver started again was not ready within {}s: {}",
                    timeout.as_secs(),
                    short(&(out.stdout + &out.stderr), 300)
                ));
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}
