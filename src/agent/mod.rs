//! The agent: one per node, the node's "sidecar".
//!
//! Owns noticing that its host needs a reboot (a sentinel file or command, checked every
//! `checkPeriod`, written to the Node only when the answer changes) and rebooting the host when
//! the controller writes a new `reboot` token: it writes `reboot-ack` with that token first,
//! then reboots through a [`RebootMethod`]. It watches only its own Node. It must never act on a
//! token twice (the ack on the Node survives restarts), and never reboot a node that is not
//! listed in the maintenance lock, not cordoned, whose token is older than the reboot timeout,
//! whose host already rebooted since the token was issued, or whose `reboot-ack` it cannot read:
//! it is the last line of defence, and says why it refused with an Event. An agent that starts
//! and finds its ack of the live token while its host is still on the boot from before the
//! request (it died between the ack and the reboot) writes `reboot-lost` with that token, for
//! the controller to issue a new one: it never acts on the old token again itself.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use chrono::Utc;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::Client;

use crate::config::Config;
use crate::controller::events::Recorder;
use crate::lease::LeaseRef;
use crate::lock;
use crate::node::{self as proto, NodeView, Token};

/// What can go wrong in the agent.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// A write to its Node failed.
    #[error("node {node}: {what}: {source}")]
    Node {
        /// Node.
        node: String,
        /// What was being written.
        what: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The reboot method failed.
    #[error("node {node}: reboot failed: {reason}")]
    Reboot {
        /// Node.
        node: String,
        /// Why.
        reason: String,
    },
}

/// How the host is rebooted. Command, signal, and (in the simulator) a simulated reboot.
pub trait RebootMethod: Send + Sync {
    /// Reboots the host of `node`, acting on `token`. Returns once the reboot is under way.
    fn reboot(
        &self,
        node: &str,
        token: &str,
    ) -> impl Future<Output = Result<(), AgentError>> + Send;

    /// The host's current boot ID (what the kubelet reports as `status.nodeInfo.bootID`), read
    /// from the host itself rather than from the Node, which the kubelet may not have updated
    /// yet after a reboot; `None` when it cannot be read.
    fn boot_id(&self, node: &str) -> Option<String>;
}

/// The kernel's boot ID, which the kubelet reports as the node's bootID. Not namespaced: a
/// container reads its host's.
const KERNEL_BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

fn kernel_boot_id() -> Option<String> {
    let id = std::fs::read_to_string(KERNEL_BOOT_ID).ok()?;
    let id = id.trim();
    (!id.is_empty()).then(|| id.to_string())
}

/// Reboots by running an argv (by default `nsenter` into PID 1's mount namespace, `systemctl reboot`).
pub struct CommandReboot(pub Vec<String>);

impl RebootMethod for CommandReboot {
    async fn reboot(&self, node: &str, _token: &str) -> Result<(), AgentError> {
        let err = |reason: String| AgentError::Reboot {
            node: node.into(),
            reason,
        };
        let (prog, args) = self
            .0
            .split_first()
            .ok_or_else(|| err("reboot.command is empty".into()))?;
        let status = tokio::process::Command::new(prog)
            .args(args)
            .status()
            .await
            .map_err(|e| err(format!("running `{}`: {e}", self.0.join(" "))))?;
        if status.success() {
            Ok(())
        } else {
            Err(err(format!("`{}` exited with {status}", self.0.join(" "))))
        }
    }

    fn boot_id(&self, _node: &str) -> Option<String> {
        kernel_boot_id()
    }
}

/// Reboots by sending a signal to PID 1 (39, SIGRTMIN+5, is systemd's "reboot").
#[derive(Debug, PartialEq, Eq)]
pub struct SignalReboot {
    /// The signal number.
    pub signal: i32,
    /// The process signalled: 1 on a host (the agent runs with hostPID); another in tests.
    pub pid: i32,
}

impl SignalReboot {
    /// `signal` to PID 1.
    pub fn pid1(signal: i32) -> SignalReboot {
        SignalReboot { signal, pid: 1 }
    }
}

impl RebootMethod for SignalReboot {
    async fn reboot(&self, node: &str, _token: &str) -> Result<(), AgentError> {
        // kill(2) directly: the agent image need not carry a `kill` binary, and the error is
        // the kernel's (EPERM without the capability, ESRCH without hostPID).
        // SAFETY: kill has no memory-safety preconditions.
        let r = unsafe { libc::kill(self.pid, self.signal) };
        if r == 0 {
            Ok(())
        } else {
            Err(AgentError::Reboot {
                node: node.into(),
                reason: format!(
                    "sending signal {} to PID {}: {}",
                    self.signal,
                    self.pid,
                    std::io::Error::last_os_error()
                ),
            })
        }
    }

    fn boot_id(&self, _node: &str) -> Option<String> {
        kernel_boot_id()
    }
}

/// The host reboot method the config asks for (`reboot.method`), chosen at start-up.
pub enum HostReboot {
    /// `method: command`.
    Command(CommandReboot),
    /// `method: signal`.
    Signal(SignalReboot),
}

impl HostReboot {
    /// The method `reboot` configures.
    pub fn from_config(r: &crate::config::Reboot) -> HostReboot {
        match r.method {
            crate::config::RebootMethod::Command => {
                HostReboot::Command(CommandReboot(r.command.clone()))
            }
            crate::config::RebootMethod::Signal => HostReboot::Signal(SignalReboot::pid1(r.signal)),
        }
    }
}

impl RebootMethod for HostReboot {
    async fn reboot(&self, node: &str, token: &str) -> Result<(), AgentError> {
        match self {
            HostReboot::Command(m) => m.reboot(node, token).await,
            HostReboot::Signal(m) => m.reboot(node, token).await,
        }
    }

    fn boot_id(&self, node: &str) -> Option<String> {
        match self {
            HostReboot::Command(m) => m.boot_id(node),
            HostReboot::Signal(m) => m.boot_id(node),
        }
    }
}

/// Whether the host needs a reboot: `Some(reason)` when it does.
pub trait Sentinel: Send + Sync {
    /// Checks once.
    fn check(&self) -> impl Future<Output = Option<String>> + Send;
}

/// A file whose existence means "reboot needed".
pub struct FileSentinel(pub PathBuf);

impl Sentinel for FileSentinel {
    async fn check(&self) -> Option<String> {
        // One stat of a local file: done inline rather than through `tokio::fs`, which would
        // start a blocking-pool thread (and a malloc arena with it) every check period.
        self.0
            .try_exists()
            .unwrap_or(false)
            .then(|| format!("sentinel file {} exists", self.0.display()))
    }
}

/// A command whose exit status 0 means "reboot needed".
pub struct CommandSentinel(pub Vec<String>);

impl Sentinel for CommandSentinel {
    async fn check(&self) -> Option<String> {
        let (prog, args) = self.0.split_first()?;
        let ok = tokio::process::Command::new(prog)
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .await
            .is_ok_and(|s| s.success());
        ok.then(|| format!("sentinel command `{}` exited 0", self.0.join(" ")))
    }
}

/// The sentinel the config asks for: `reboot.sentinelCommand` when set, else `reboot.sentinelFile`.
pub enum HostSentinel {
    /// `sentinelFile`.
    File(FileSentinel),
    /// `sentinelCommand`.
    Command(CommandSentinel),
}

impl HostSentinel {
    /// The sentinel `reboot` configures.
    pub fn from_config(r: &crate::config::Reboot) -> HostSentinel {
        match &r.sentinel_command {
            Some(cmd) => HostSentinel::Command(CommandSentinel(cmd.clone())),
            None => HostSentinel::File(FileSentinel(r.sentinel_file.clone().into())),
        }
    }
}

impl Sentinel for HostSentinel {
    async fn check(&self) -> Option<String> {
        match self {
            HostSentinel::File(s) => s.check().await,
            HostSentinel::Command(s) => s.check().await,
        }
    }
}

/// Why the agent refuses a token, if it does: pure. `host_boot` is the host's boot ID as read
/// on the host, when it can be.
pub fn refusal(
    view: &NodeView,
    token: &str,
    in_lock: bool,
    host_boot: Option<&str>,
    config: &Config,
    now: chrono::DateTime<Utc>,
) -> Option<String> {
    let Some(t) = Token::parse(token) else {
        return Some(format!("token `{token}` is not one rollboot writes"));
    };
    if now - t.issued > config.reboot.timeout.to_chrono() {
        return Some(format!(
            "token {token} is older than the reboot timeout ({})",
            config.reboot.timeout
        ));
    }
    if view.is_malformed(proto::REBOOT_ACK) {
        return Some(format!(
            "{} is malformed, so the agent cannot tell whether it already acted on token {token}",
            proto::REBOOT_ACK
        ));
    }
    // The host rebooted since the controller read its boot ID for this request: acting now
    // would be a second reboot. The Node says so once the kubelet is back; for a token issued
    // in answer to a lost one, the host says so at once (that report was made on the host's
    // boot `before`, read on the host itself, so a host boot that differs now is a reboot).
    if let Some(before) = &view.boot_id_before {
        let retry = view.reboot_attempt.is_some_and(|a| a >= 2);
        let now_boot = match host_boot {
            Some(h) if retry && h != before => Some(h),
            _ => Some(view.boot_id.as_str()).filter(|b| !b.is_empty() && b != before),
        };
        if let Some(b) = now_boot {
            return Some(format!(
                "the host already rebooted since token {token} was issued (boot ID {before} -> {b})"
            ));
        }
    }
    if !view.unschedulable {
        return Some(format!("node {} is not cordoned", view.name));
    }
    if !in_lock {
        return Some(format!(
            "node {} is not listed in the maintenance lock",
            view.name
        ));
    }
    None
}

/// The token to report lost, if any: pure. It is the live token of a rebooting node that
/// this node's agent acknowledged, but not this process (`acted`: the tokens it acknowledged
/// itself), while the host is still on the boot from before the request: an earlier agent died
/// between its ack and the reboot. Needs the host's own boot ID: the Node's may lag behind a
/// reboot that did happen, and reporting that one lost would cause a second.
pub fn lost_token(
    view: &NodeView,
    host_boot: Option<&str>,
    acted: &[String],
    config: &Config,
    now: chrono::DateTime<Utc>,
) -> Option<String> {
    let token = view.reboot_token.as_deref()?;
    let live =
        Token::parse(token).is_some_and(|t| now - t.issued <= config.reboot.timeout.to_chrono());
    let unchanged = host_boot.is_some() && view.boot_id_before.as_deref() == host_boot;
    (view.state == Some(proto::NodeState::Rebooting)
        && view.reboot_ack.as_deref() == Some(token)
        && view.reboot_lost.as_deref() != Some(token)
        && !acted.iter().any(|a| a == token)
        && live
        && unchanged)
        .then(|| token.to_string())
}

/// What one agent process remembers between the events it handles.
struct Agent<'a, R> {
    api: Api<Node>,
    lock_ref: LeaseRef,
    events: Recorder,
    config: &'a Config,
    node: &'a str,
    method: &'a R,
    /// The last refusal said, (token, why): said once, looked at again while the token lives.
    refused: Option<(String, String)>,
    /// Tokens this process acknowledged itself (the last few): never reported lost by it.
    acted: Vec<String>,
    /// The last look at a token ended on a failed request (reading the lock, writing the ack):
    /// looked at again on the next check, as no change of the Node may come to wake it.
    unsettled: bool,
}

impl<R: RebootMethod> Agent<'_, R> {
    async fn patch(&self, p: serde_json::Value, what: &str) -> Result<(), AgentError> {
        self.api
            .patch(self.node, &PatchParams::default(), &Patch::Merge(&p))
            .await
            .map(|_| ())
            .map_err(|source| AgentError::Node {
                node: self.node.into(),
                what: what.into(),
                source,
            })
    }

    /// Acts on the Node as `v` shows it: reports a lost token, or reboots for a new one.
    async fn act(&mut self, v: &NodeView) {
        let node = self.node;
        self.unsettled = false;
        let host_boot = self.method.boot_id(node);
        if let Some(token) = lost_token(
            v,
            host_boot.as_deref(),
            &self.acted,
            self.config,
            Utc::now(),
        ) {
            // Fenced: a Node changed since (a new token, a reboot seen) is decided again.
            let p = proto::fenced(
                proto::patch(&[(proto::REBOOT_LOST, Some(token.clone()))], None),
                &v.resource_version,
            );
            match self.patch(p, "reporting a lost reboot token").await {
                Ok(()) => {
                    let boot = host_boot.unwrap_or_default();
                    tracing::warn!(node, token, boot_id = %boot, "an earlier agent acknowledged this token and the host did not reboot; reported it lost");
                    self.events.publish_action(node, true, "RebootLost", &format!("ReportLost {token}"), format!("agent acknowledged token {token} earlier but the host did not reboot (boot ID still {boot}): the agent stopped between its ack and the reboot; asking the controller for a new token")).await;
                }
                Err(e) => {
                    tracing::warn!(node, token, error = %e, "could not report a lost reboot token; trying again on the next check");
                    self.unsettled = true;
                }
            }
            return;
        }
        let Some(token) = v.token_unacknowledged().map(str::to_string) else {
            self.refused = None;
            return;
        };
        let now = Utc::now();
        let mut why = refusal(v, &token, true, host_boot.as_deref(), self.config, now);
        if why.is_none() {
            why = match lock::read(&self.lock_ref).await {
                Ok(r) => match &r.untrusted {
                    Some(e) => Some(format!(
                        "the maintenance lock's in-flight record cannot be read ({e})"
                    )),
                    None => refusal(
                        v,
                        &token,
                        r.entries.contains_key(node),
                        host_boot.as_deref(),
                        self.config,
                        now,
                    ),
                },
                Err(e) => {
                    tracing::warn!(node, error = %e, "reading the maintenance lock; trying again on the next check");
                    self.unsettled = true;
                    return;
                }
            };
        }
        if let Some(why) = why {
            let said = (token.clone(), why.clone());
            if self.refused.as_ref() != Some(&said) {
                tracing::warn!(node, token, reason = %why, "refusing to reboot");
                // One Event per token and reason: a later reason for the same token is not
                // folded into the first Event, whose note it would keep.
                let action = format!("Refuse {token}: {why}");
                self.events
                    .publish_action(
                        node,
                        true,
                        "RebootRefused",
                        &action,
                        format!("agent refuses token {token}: {why}"),
                    )
                    .await;
                self.refused = Some(said);
            }
            return;
        }
        self.refused = None;
        // One token, one reboot: the ack is on the Node before anything happens. Fenced by the
        // version the checks above were made on: a cordon lifted, a token withdrawn or replaced
        // since makes it a 409, and the newer version (which the watch brings) is judged again.
        let ack = proto::fenced(
            proto::patch(&[(proto::REBOOT_ACK, Some(token.clone()))], None),
            &v.resource_version,
        );
        match self.patch(ack, "acknowledging the reboot token").await {
            Ok(()) => {}
            Err(AgentError::Node {
                source: kube::Error::Api(e),
                ..
            }) if e.code == 409 => {
                tracing::info!(
                    node,
                    token,
                    "the node changed since it was checked; deciding again from the newer version"
                );
                return;
            }
            Err(e) => {
                tracing::warn!(node, token, error = %e, "could not acknowledge; not rebooting now, trying again on the next check");
                self.unsettled = true;
                return;
            }
        }
        if self.acted.len() >= 8 {
            self.acted.remove(0);
        }
        self.acted.push(token.clone());
        tracing::info!(node, token, "rebooting");
        self.events
            .publish(
                node,
                false,
                "Rebooting",
                format!("agent acknowledged token {token} and is rebooting the host"),
            )
            .await;
        if let Err(e) = self.method.reboot(node, &token).await {
            tracing::error!(node, token, error = %e, "reboot failed");
            self.events
                .publish(node, true, "RebootFailed", e.to_string())
                .await;
        }
    }
}

/// Runs the agent for `node` until `shutdown` resolves (or the future is dropped).
pub async fn run<R: RebootMethod, S: Sentinel>(
    client: Client,
    config: Arc<Config>,
    node: String,
    method: R,
    sentinel: S,
    shutdown: impl Future<Output = ()>,
) -> Result<(), AgentError> {
    let api: Api<Node> = Api::all(client.clone());
    let mut agent = Agent {
        api: api.clone(),
        lock_ref: LeaseRef::new(client.clone(), &config.lock.namespace, &config.lock.name),
        events: Recorder::new(
            client.clone(),
            &config.lock.namespace,
            "rollboot.dev/agent",
            &node,
        ),
        config: &config,
        node: &node,
        method: &method,
        refused: None,
        acted: Vec::new(),
        unsettled: false,
    };
    let stream = watcher(
        api.clone(),
        watcher::Config::default().fields(&format!("metadata.name={node}")),
    )
    .default_backoff()
    .applied_objects();
    futures::pin_mut!(stream);
    tokio::pin!(shutdown);
    let mut view: Option<NodeView> = None;
    let mut tick = tokio::time::interval(config.reboot.check_period.to_std());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = &mut shutdown => return Ok(()),
            ev = stream.next() => {
                match ev {
                    Some(Ok(n)) => view = Some(NodeView::from_node(&n)),
                    Some(Err(e)) => { tracing::warn!(node, error = %e, "watching own node"); continue }
                    None => return Ok(()),
                }
                if let Some(v) = &view {
                    agent.act(v).await;
                }
            }
            _ = tick.tick() => {
                let Some(v) = &view else { continue };
                // A refusal for a reason that can pass with no change to this Node (the node
                // listed in the lock again), or a look cut short by a failed request, is
                // looked at again, while the token lives.
                if agent.refused.is_some() || agent.unsettled {
                    agent.act(v).await;
                }
                let answer = sentinel.check().await;
                let needed = answer.is_some();
                // Against the Node as it is, not as this process last wrote it: a Node
                // registered again by its kubelet, or whose flag was lost, is flagged again.
                if needed != v.reboot_required {
                    let p = if needed {
                        proto::patch(&[(proto::REBOOT_REQUIRED, Some(crate::time::annotation(Utc::now()))), (proto::REBOOT_REQUIRED_REASON, answer.clone())], None)
                    } else {
                        proto::patch(&[(proto::REBOOT_REQUIRED, None), (proto::REBOOT_REQUIRED_REASON, None)], None)
                    };
                    match agent.patch(p, "writing reboot-required").await {
                        Ok(()) => tracing::info!(node, needed, reason = answer.as_deref().unwrap_or(""), "reboot-required changed"),
                        Err(e) => tracing::warn!(node, error = %e, "could not write reboot-required; trying again on the next check"),
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn the_configured_sentinel_is_the_one_checked() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("reboot-required");
        let mut r = crate::config::Reboot {
            sentinel_file: file.display().to_string(),
            ..Default::default()
        };
        let s = HostSentinel::from_config(&r);
        assert!(matches!(s, HostSentinel::File(_)));
        assert_eq!(s.check().await, None);
        std::fs::write(&file, "").unwrap();
        assert!(s.check().await.unwrap().contains("reboot-required"));
        // A sentinel command replaces the file, whatever the file says.
        r.sentinel_command = Some(vec!["false".into()]);
        let s = HostSentinel::from_config(&r);
        assert!(matches!(s, HostSentinel::Command(_)));
        assert_eq!(s.check().await, None);
    }

    #[tokio::test]
    async fn the_command_method_runs_the_argv_and_reports_its_failure() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("rebooted");
        let argv = |script: &str| -> Vec<String> {
            vec!["sh".into(), "-c".into(), script.into(), "sh".into()]
        };
        let m = CommandReboot(argv(&format!("echo asked > {}", out.display())));
        m.reboot("n1", "t1").await.unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "asked\n");
        let e = CommandReboot(argv("exit 3"))
            .reboot("n1", "t1")
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("n1") && e.contains("exit 3") && e.contains("exit status: 3"),
            "{e}"
        );
        let e = CommandReboot(vec!["/nonexistent/reboot".into()])
            .reboot("n1", "t1")
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/reboot"), "{e}");
        assert!(CommandReboot(vec![]).reboot("n1", "t1").await.is_err());
    }

    #[tokio::test]
    async fn the_signal_method_signals_the_process() {
        use std::os::unix::process::ExitStatusExt;
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let m = SignalReboot {
            signal: libc::SIGTERM,
            pid: child.id() as i32,
        };
        m.reboot("n1", "t1").await.unwrap();
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGTERM));
        // The child is reaped: its PID names no process now.
        let e = m.reboot("n1", "t1").await.unwrap_err().to_string();
        assert!(
            e.contains(&format!("signal 15 to PID {}", child.id())),
            "{e}"
        );
    }

    #[test]
    fn the_configured_reboot_method_is_the_one_used() {
        let mut r = crate::config::Reboot::default();
        assert!(matches!(
            HostReboot::from_config(&r),
            HostReboot::Command(CommandReboot(argv)) if argv == r.command
        ));
        r.method = crate::config::RebootMethod::Signal;
        assert!(matches!(
            HostReboot::from_config(&r),
            HostReboot::Signal(SignalReboot { signal: 39, pid: 1 })
        ));
    }

    use super::*;
    use crate::node::fixtures::node;

    #[test]
    fn the_agent_refuses_a_node_outside_the_lock_or_uncordoned_or_a_stale_token() {
        let c = Config::default();
        let now = Utc::now();
        let fresh = Token::new(now, 1).text;
        let cordoned = NodeView {
            unschedulable: true,
            ..NodeView::from_node(&node("n1", &[]))
        };
        assert_eq!(refusal(&cordoned, &fresh, true, None, &c, now), None);
        assert!(refusal(&cordoned, &fresh, false, None, &c, now)
            .unwrap()
            .contains("maintenance lock"));
        let open = NodeView {
            unschedulable: false,
            ..cordoned.clone()
        };
        assert!(refusal(&open, &fresh, true, None, &c, now)
            .unwrap()
            .contains("not cordoned"));
        let old = Token::new(now - chrono::Duration::hours(1), 2).text;
        assert!(refusal(&cordoned, &old, true, None, &c, now)
            .unwrap()
            .contains("older"));
        assert!(refusal(&cordoned, "junk", true, None, &c, now).is_some());
    }

    /// A cordoned node asked to reboot with `token` on boot `boot-1`.
    fn asked(token: &str) -> NodeView {
        NodeView {
            unschedulable: true,
            state: Some(proto::NodeState::Rebooting),
            boot_id_before: Some("boot-1".into()),
            reboot_token: Some(token.into()),
            reboot_attempt: Some(1),
            ..NodeView::from_node(&node("n1", &[]))
        }
    }

    #[test]
    fn the_agent_refuses_a_token_when_its_ack_is_unreadable_or_the_host_already_rebooted() {
        let c = Config::default();
        let now = Utc::now();
        let fresh = Token::new(now, 1).text;
        let v = asked(&fresh);
        assert_eq!(refusal(&v, &fresh, true, Some("boot-1"), &c, now), None);
        // Someone wrote garbage over the ack: whether the current token was acted on is unknown.
        let garbled = NodeView::from_node(&crate::node::fixtures::annotate(
            node("n1", &[]),
            proto::REBOOT_ACK,
            "garbage",
        ));
        let garbled = NodeView {
            malformed: garbled.malformed,
            ..v.clone()
        };
        assert!(refusal(&garbled, &fresh, true, Some("boot-1"), &c, now)
            .unwrap()
            .contains("rollboot.dev/reboot-ack is malformed"));
        // The Node already shows a new boot: acting would be a second reboot.
        let back = NodeView {
            boot_id: "boot-2".into(),
            ..v.clone()
        };
        assert!(refusal(&back, &fresh, true, Some("boot-2"), &c, now)
            .unwrap()
            .contains("already rebooted"));
        // A token issued after a lost one: the host's own boot ID is believed before the Node's
        // (the kubelet may not have reported the new boot yet).
        let retry = NodeView {
            reboot_attempt: Some(2),
            ..v.clone()
        };
        assert!(refusal(&retry, &fresh, true, Some("boot-2"), &c, now)
            .unwrap()
            .contains("boot-1 -> boot-2"));
        assert_eq!(refusal(&retry, &fresh, true, Some("boot-1"), &c, now), None);
        // On a first token a host whose boot ID is not the Node's (a test rig of fake
        // kubelets) is not taken for a rebooted one.
        assert_eq!(refusal(&v, &fresh, true, Some("other-host"), &c, now), None);
    }

    #[test]
    fn a_token_is_reported_lost_only_when_an_earlier_agent_took_it_on_the_same_boot() {
        let c = Config::default();
        let now = Utc::now();
        let t = Token::new(now, 7).text;
        let acked = NodeView {
            reboot_ack: Some(t.clone()),
            ..asked(&t)
        };
        assert_eq!(
            lost_token(&acked, Some("boot-1"), &[], &c, now),
            Some(t.clone())
        );
        // This process took it itself: its reboot is under way.
        assert_eq!(
            lost_token(&acked, Some("boot-1"), std::slice::from_ref(&t), &c, now),
            None
        );
        // The host booted since: the reboot happened, whatever the Node says yet.
        assert_eq!(lost_token(&acked, Some("boot-2"), &[], &c, now), None);
        // Without the host's own boot ID, a reboot the kubelet has not reported yet cannot be
        // told from a lost one: nothing is reported.
        assert_eq!(lost_token(&acked, None, &[], &c, now), None);
        // Already reported, not acknowledged, or too old.
        let reported = NodeView {
            reboot_lost: Some(t.clone()),
            ..acked.clone()
        };
        assert_eq!(lost_token(&reported, Some("boot-1"), &[], &c, now), None);
        assert_eq!(lost_token(&asked(&t), Some("boot-1"), &[], &c, now), None);
        let later = now + chrono::Duration::hours(1);
        assert_eq!(lost_token(&acked, Some("boot-1"), &[], &c, later), None);
    }

    #[tokio::test]
    async fn a_file_sentinel_reports_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("reboot-required");
        let s = FileSentinel(f.clone());
        assert_eq!(s.check().await, None);
        std::fs::write(&f, "").unwrap();
        assert!(s.check().await.unwrap().contains("exists"));
        assert!(CommandSentinel(vec!["true".into()]).check().await.is_some());
        assert!(CommandSentinel(vec!["false".into()])
            .check()
            .await
            .is_none());
    }
}
