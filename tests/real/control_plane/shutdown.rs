//! Issue 27's shutdown phase (check 21): a host that shuts down by itself, outside rollboot,
//! with the agent's logind delay inhibitor in between.
//!
//! The suite plays the host's logind: a fake `org.freedesktop.login1` on a private
//! `dbus-daemon` (`crates/rollboot-testkit/src/fake_logind.rs`), whose address the node's agent gets as
//! `DBUS_SYSTEM_BUS_ADDRESS`. Everything else is real: the agent process, the controllers, the
//! kube-apiserver's admission policy on the agent's `shutdown-requested`, the Eviction API and
//! the budget. The host's shutdown itself is the fake kubelet's reboot file, written by the
//! suite (no reboot command runs), with the agent process stopped while the host is down, as it
//! would be.

use std::time::{Duration, Instant};

use chrono::Utc;

use super::audit::{self, Cut};
use super::observe::NodeVersion;
use super::report::Report;
use super::{reboot_requests, reboots, title, Suite, CYCLE_TIMEOUT};
use rollboot_testkit::fake_logind::{closed_within, FakeLogind, Inhibited, PrivateBus};

/// logind's `InhibitDelayMaxUSec` on the fake host: INSTALL.md's advice (5m), longer than any
/// drain of the suite.
const DELAY_MAX: Duration = Duration::from_secs(300);
/// How long the agent may take to hold its lock after it starts (or after a cancel).
const LOCK_WITHIN: Duration = Duration::from_secs(30);

impl Suite<'_> {
    /// Check 21: the shutdown of the busiest node's host, first cancelled mid-drain, then
    /// carried through.
    pub(crate) async fn host_shutdown(&mut self, report: &mut Report) -> Result<(), String> {
        let Some(bus) = PrivateBus::start() else {
            report.not_run("21", title("21"), "dbus-daemon is not installed");
            return Ok(());
        };
        // Not one of node-3..5: the leader-kill phases after it read a first cycle of theirs.
        let node = self.busiest(&["node-1", "node-2"]);
        let mut logind = FakeLogind::serve(&bus, DELAY_MAX).await;
        let agent = format!("agent-{node}");
        self.cluster.kill(&agent)?;
        self.cuts.push(Cut::at(
            Some(audit::AGENT),
            Utc::now(),
            format!("the suite restarted {agent} on its fake host's system bus (check 21)"),
        ));
        self.buses.insert(node.clone(), bus.address.clone());
        self.spawn_agent(&node, &self.rb.join(format!("agent-{node}.yaml")))?;
        println!(
            "e2e: started {agent} with a fake logind on {} (check 21)",
            bus.address
        );
        let mut failures = Vec::new();
        let mut notes = Vec::new();
        let r = self
            .shutdown_cycles(&node, &mut logind, &mut failures, &mut notes)
            .await;
        if let Err(e) = &r {
            failures.push(e.clone());
        }
        let ok = failures.is_empty();
        report.check("21", title("21"), failures, notes);
        // The bus and its logind end here: the agent says so and goes on without them.
        drop(logind);
        drop(bus);
        if ok {
            Ok(())
        } else {
            Err(format!(
                "{node}: the unplanned shutdown did not go as it must"
            ))
        }
    }

    async fn shutdown_cycles(
        &mut self,
        node: &str,
        logind: &mut FakeLogind,
        failures: &mut Vec<String>,
        notes: &mut Vec<String>,
    ) -> Result<(), String> {
        let lock = Self::lock(logind, node).await?;
        if lock.args[0] != "shutdown" || lock.args[3] != "delay" {
            failures.push(format!(
                "the agent's lock is {:?}, not a delay lock on shutdown",
                lock.args
            ));
        }
        let asked0 = reboot_requests(&self.state, node);
        let rebooted0 = reboots(&self.state, node);

        // 1. Cancelled mid-drain: the cycle ends without a reboot, the node uncordoned.
        let pods0 = self.obs.with(|w| w.evictable_on(node).len());
        let t0 = Utc::now();
        logind.prepare_for_shutdown(true).await;
        let n = node.to_string();
        let draining = self
            .obs
            .wait(CYCLE_TIMEOUT, |w| {
                let v = w.node_since(&n, t0);
                let v = v.last()?;
                let evicting = w.evictable_on(&n).iter().any(|p| p.deleting);
                (v.state() == Some("draining") && (evicting || pods0 == 0)).then_some(())
            })
            .await;
        if draining.is_none() {
            return Err(format!(
                "the node was not seen draining (a pod of it terminating) within {} s of PrepareForShutdown(true): {}",
                CYCLE_TIMEOUT.as_secs(),
                self.describe(node)
            ));
        }
        let requested = self.obs.with(|w| {
            w.node_since(node, t0).iter().any(|v| {
                v.has("shutdown-requested")
                    && v.rollboot.get("rollboot.dev/cycle-for").map(String::as_str)
                        == Some("shutdown")
            })
        });
        if !requested {
            failures.push(
                "the node was never seen with shutdown-requested and cycle-for: shutdown".into(),
            );
        }
        let cancel = Instant::now();
        logind.prepare_for_shutdown(false).await;
        let released = self
            .obs
            .wait(CYCLE_TIMEOUT, |w| {
                let v = w.node(&n)?;
                (ended_uncordoned(v) && !v.has("cycle-for")).then(|| w.evictable_on(&n).len())
            })
            .await;
        match released {
            Some(left) => notes.push(format!(
                "cancelled mid-drain: released {:.1} s after PrepareForShutdown(false), {left} of {pods0} pod(s) to evict left on the node (the drain stopped)",
                cancel.elapsed().as_secs_f64()
            )),
            None => {
                return Err(format!(
                    "after PrepareForShutdown(false) the node was not released (done, uncordoned, no shutdown-requested) within {} s: {}",
                    CYCLE_TIMEOUT.as_secs(),
                    self.describe(node)
                ))
            }
        }
        match self
            .await_event(node, "ReleasedWithoutReboot", |m| m.contains("cancelled"))
            .await
        {
            Some((_, m)) => notes.push(format!("ReleasedWithoutReboot Event: {m}")),
            None => failures.push("no ReleasedWithoutReboot Event naming the cancel".into()),
        }
        if !closed_within(&lock, Duration::from_secs(5)).await {
            failures.push("the first lock is still held after the cancel".into());
        }
        // A new lock for the next shutdown.
        let lock = Self::lock(logind, node).await?;

        // 2. Carried through: drained, the lock let go, the host down and back, verified.
        let pods1 = self.obs.with(|w| w.evictable_on(node).len());
        let t1 = Utc::now();
        let seen = Instant::now();
        logind.prepare_for_shutdown(true).await;
        if !closed_within(&lock, CYCLE_TIMEOUT).await {
            return Err(format!(
                "the agent held its lock more than {} s after PrepareForShutdown(true): {}",
                CYCLE_TIMEOUT.as_secs(),
                self.describe(node)
            ));
        }
        let held = seen.elapsed();
        let released = Utc::now();
        // The suite's watch may be a moment behind the agent's: the version the agent acted on
        // is the first since the signal that says `rebooting` and `handed-off`. The lock must
        // not have gone before that version was written (its `state-since`, the controller's
        // clock on this machine), and it carries no token.
        let handed = self
            .obs
            .wait(Duration::from_secs(10), |w| {
                w.node_since(&n, t1)
                    .into_iter()
                    .find(|v| v.state() == Some("rebooting") && v.has("handed-off"))
                    .map(|v| {
                        (
                            v.unschedulable,
                            v.has("reboot"),
                            v.rollboot.get("rollboot.dev/state-since").cloned(),
                        )
                    })
            })
            .await;
        match handed {
            None => failures.push(format!(
                "no version since PrepareForShutdown(true) says rebooting and handed-off, within 10 s of the lock's release: {}",
                self.describe(node)
            )),
            Some((cordoned, token, since)) => {
                if !cordoned || token {
                    failures.push(format!(
                        "the hand-off: cordoned {cordoned}, a reboot token written {token}; want cordoned and no token"
                    ));
                }
                let since = since
                    .as_deref()
                    .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok());
                if since.is_none_or(|t| t > released) {
                    failures.push(format!(
                        "the lock was let go at {released} before the hand-off was written (state-since {since:?})"
                    ));
                }
            }
        }
        // The drain ended before the hand-off was written: nothing left to evict.
        let left: Vec<String> = self
            .obs
            .with(|w| w.evictable_on(node).iter().map(|p| p.key.clone()).collect());
        if !left.is_empty() {
            failures.push(format!(
                "the lock was let go with pods left to evict: {left:?}"
            ));
        }
        notes.push(format!(
            "PrepareForShutdown(true) to the lock's release: {:.1} s; pods evicted in that time: {} of {pods1}",
            held.as_secs_f64(),
            pods1.saturating_sub(left.len())
        ));
        // The host goes down: the agent with it, then the fake host's reboot.
        let agent = format!("agent-{node}");
        self.cluster.kill(&agent)?;
        self.cuts.push(Cut::at(
            Some(audit::AGENT),
            Utc::now(),
            format!("the suite stopped {agent} as its host shut down (check 21)"),
        ));
        let before = self
            .obs
            .with(|w| w.node(node).map(|v| v.boot_id.clone()))
            .unwrap_or_default();
        let file = self.state.join(format!("reboot-{node}"));
        std::fs::write(&file, "shutdown\n").map_err(|e| format!("{}: {e}", file.display()))?;
        *self.host_reboots.entry(node.into()).or_default() += 1;
        let back = Instant::now();
        let up = self
            .obs
            .wait(CYCLE_TIMEOUT, |w| {
                w.node(&n)
                    .filter(|v| v.boot_id != before && v.ready)
                    .map(|_| ())
            })
            .await;
        if up.is_none() {
            return Err(format!(
                "the host did not come back on a new boot: {}",
                self.describe(node)
            ));
        }
        // The agent starts again with the host, and holds a lock for the next shutdown.
        self.cluster.restart(&agent)?;
        Self::lock(logind, node).await?;
        let done = self
            .obs
            .wait(CYCLE_TIMEOUT, |w| {
                ended_uncordoned(w.node(&n)?).then_some(())
            })
            .await;
        if done.is_none() {
            return Err(format!(
                "after the host came back the node was not verified and uncordoned within {} s: {}",
                CYCLE_TIMEOUT.as_secs(),
                self.describe(node)
            ));
        }
        notes.push(format!(
            "host down to done (8 s fake reboot, health gate): {:.1} s",
            back.elapsed().as_secs_f64()
        ));
        let verified = self.obs.with(|w| {
            w.node_since(node, t1)
                .iter()
                .any(|v| v.state() == Some("verifying"))
        });
        if !verified {
            failures.push("the node was never seen verifying after its host came back".into());
        }
        let asked = reboot_requests(&self.state, node) - asked0;
        let rebooted = reboots(&self.state, node) - rebooted0;
        if asked != 0 || rebooted != 1 {
            failures.push(format!(
                "{asked} reboot command(s) ran and the host went down {rebooted} time(s); want 0 and 1 (the cancelled shutdown none)"
            ));
        }
        Ok(())
    }

    /// The next lock the agent of `node` takes on the fake logind.
    async fn lock(logind: &mut FakeLogind, node: &str) -> Result<Inhibited, String> {
        logind.lock_within(LOCK_WITHIN).await.ok_or_else(|| {
            format!(
                "the agent of {node} took no logind lock within {} s",
                LOCK_WITHIN.as_secs()
            )
        })
    }
}

/// The cycle is over and left nothing of rollboot's: `done`, uncordoned, and neither the
/// cordon's record nor the agent's shutdown request left on the Node.
fn ended_uncordoned(v: &NodeVersion) -> bool {
    v.state() == Some("done")
        && !v.unschedulable
        && !v.has("cordoned-by")
        && !v.has("shutdown-requested")
}
