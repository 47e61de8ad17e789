//! The agent: one per node, the node's "sidecar".
//!
//! Owns noticing that its host needs a reboot (a sentinel file or command, checked every
//! `checkPeriod`, written to the Node only when the answer changes) and rebooting the host when
//! the controller writes a new `reboot` token: it writes `reboot-ack` with that token first,
//! then reboots through a [`RebootMethod`]. It watches only its own Node. It must never act on a
//! token twice (the ack on the Node survives restarts), and never reboot a node that is not
//! listed in the maintenance lock, not cordoned, or whose token is older than the reboot
//! timeout: it is the last line of defence, and says why it refused with an Event.

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

/// Why the agent refuses a token, if it does: pure.
pub fn refusal(
    view: &NodeView,
    token: &str,
    in_lock: bool,
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
    let lock_ref = LeaseRef::new(client.clone(), &config.lock.namespace, &config.lock.name);
    let events = Recorder::new(
        client.clone(),
        &config.lock.namespace,
        "rollboot.dev/agent",
        &node,
    );
    let stream = watcher(
        api.clone(),
        watcher::Config::default().fields(&format!("metadata.name={node}")),
    )
    .default_backoff()
    .applied_objects();
    futures::pin_mut!(stream);
    tokio::pin!(shutdown);
    let mut view: Option<NodeView> = None;
    let mut last_answer: Option<bool> = None;
    let mut refused: Option<String> = None;
    let mut tick = tokio::time::interval(config.reboot.check_period.to_std());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let patch = |p: serde_json::Value, what: &'static str| {
        let api = api.clone();
        let node = node.clone();
        async move {
            api.patch(&node, &PatchParams::default(), &Patch::Merge(&p))
                .await
                .map(|_| ())
                .map_err(|source| AgentError::Node {
                    node,
                    what: what.into(),
                    source,
                })
        }
    };
    loop {
        tokio::select! {
            _ = &mut shutdown => return Ok(()),
            ev = stream.next() => {
                match ev {
                    Some(Ok(n)) => view = Some(NodeView::from_node(&n)),
                    Some(Err(e)) => { tracing::warn!(node, error = %e, "watching own node"); continue }
                    None => return Ok(()),
                }
                let Some(v) = &view else { continue };
                let Some(token) = v.token_unacknowledged().map(str::to_string) else { continue };
                if refused.as_deref() == Some(token.as_str()) {
                    continue;
                }
                let in_lock = match lock::read(&lock_ref).await {
                    Ok(r) => r.entries.contains_key(&node),
                    Err(e) => { tracing::warn!(node, error = %e, "reading the maintenance lock"); continue }
                };
                if let Some(why) = refusal(v, &token, in_lock, &config, Utc::now()) {
                    tracing::warn!(node, token, reason = %why, "refusing to reboot");
                    events.publish(&node, true, "RebootRefused", format!("agent refuses token {token}: {why}")).await;
                    refused = Some(token);
                    continue;
                }
                // One token, one reboot: the ack is on the Node before anything happens.
                if let Err(e) = patch(proto::patch(&[(proto::REBOOT_ACK, Some(token.clone()))], None), "acknowledging the reboot token").await {
                    tracing::warn!(node, token, error = %e, "could not acknowledge; not rebooting");
                    continue;
                }
                tracing::info!(node, token, "rebooting");
                events.publish(&node, false, "Rebooting", format!("agent acknowledged token {token} and is rebooting the host")).await;
                if let Err(e) = method.reboot(&node, &token).await {
                    tracing::error!(node, token, error = %e, "reboot failed");
                    events.publish(&node, true, "RebootFailed", e.to_string()).await;
                }
            }
            _ = tick.tick() => {
                let answer = sentinel.check().await;
                let needed = answer.is_some();
                let Some(v) = &view else { continue };
                if last_answer != Some(needed) {
                    last_answer = Some(needed);
                    if needed != v.reboot_required {
                        let p = if needed {
                            proto::patch(&[(proto::REBOOT_REQUIRED, Some(crate::time::annotation(Utc::now()))), (proto::REBOOT_REQUIRED_REASON, answer.clone())], None)
                        } else {
                            proto::patch(&[(proto::REBOOT_REQUIRED, None), (proto::REBOOT_REQUIRED_REASON, None)], None)
                        };
                        match patch(p, "writing reboot-required").await {
                            Ok(()) => tracing::info!(node, needed, reason = ?answer, "reboot-required changed"),
                            Err(e) => { tracing::warn!(node, error = %e, "could not write reboot-required"); last_answer = None }
                        }
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
        assert_eq!(refusal(&cordoned, &fresh, true, &c, now), None);
        assert!(refusal(&cordoned, &fresh, false, &c, now)
            .unwrap()
            .contains("maintenance lock"));
        let open = NodeView {
            unschedulable: false,
            ..cordoned.clone()
        };
        assert!(refusal(&open, &fresh, true, &c, now)
            .unwrap()
            .contains("not cordoned"));
        let old = Token::new(now - chrono::Duration::hours(1), 2).text;
        assert!(refusal(&cordoned, &old, true, &c, now)
            .unwrap()
            .contains("older"));
        assert!(refusal(&cordoned, "junk", true, &c, now).is_some());
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
