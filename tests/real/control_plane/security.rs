//! Issue 47's phases (checks 22 to 25): rollboot tried as an attacker would, on the real
//! control plane.
//!
//! - 22: FleetLock answers only the host a request names: from another address 403
//!   `client_not_host`; a forward forged by anyone but a replica (no token, another account's
//!   token, the controller's own API token for the API's audience) 403 `untrusted_forward`,
//!   the real kube-apiserver's TokenReview deciding; nothing written on the Node.
//! - 23: the servers are bounded: a body over the limit 413, a client that sends its headers
//!   slowly disconnected, on the FleetLock port and the metrics port.
//! - 24: a slot given back one second into the host's own reboot never frees the node while
//!   it is down: it ends on its new boot, the reboot recorded, never uncordoned NotReady.
//! - 25: three agents each write `shutdown-requested` on their own Node with no shutdown behind
//!   it: never more than maxNodes + maxShutdownDrains cordoned at once, each ends cancelled
//!   (uncordoned, no reboot), none fails.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use chrono::Utc;

use super::observe::{At, World};
use super::report::Report;
use super::{reboots, title, Suite, CYCLE_TIMEOUT};
use rollboot_testkit::fleetlock_client::{body, post, post_with, zincati_id};

/// The fake kubelet's InternalIP of `node` (`node-N`: 127.1.0.N).
pub fn host_ip(node: &str) -> Option<IpAddr> {
    let n: u8 = node.strip_prefix("node-")?.parse().ok()?;
    Some(IpAddr::from([127, 1, 0, n]))
}

/// The bearer token of a kubeconfig the suite wrote (`tokens.sh`).
fn kubeconfig_token(path: &std::path::Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    text.lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .map(|t| t.trim().trim_matches('"').to_string())
}

/// The most nodes cordoned by rollboot at once among the versions seen since `since`.
fn max_cordoned_since(w: &World, since: At) -> usize {
    let mut events: Vec<(At, &str, bool)> = w
        .nodes
        .iter()
        .flat_map(|(name, vs)| {
            vs.iter().filter(|v| v.at >= since).map(move |v| {
                (
                    v.at,
                    name.as_str(),
                    v.unschedulable && v.rollboot.contains_key("rollboot.dev/cordoned-by"),
                )
            })
        })
        .collect();
    events.sort_by_key(|e| e.0);
    let mut now: std::collections::BTreeMap<&str, bool> = w
        .nodes
        .iter()
        .map(|(name, vs)| {
            let before = vs.iter().rev().find(|v| v.at < since);
            (
                name.as_str(),
                before.is_some_and(|v| {
                    v.unschedulable && v.rollboot.contains_key("rollboot.dev/cordoned-by")
                }),
            )
        })
        .collect();
    let mut most = now.values().filter(|c| **c).count();
    for (_, name, cordoned) in events {
        now.insert(name, cordoned);
        most = most.max(now.values().filter(|c| **c).count());
    }
    most
}

impl Suite<'_> {
    /// The leader's and a standby's FleetLock addresses.
    pub(crate) fn fleetlock_pair(&self) -> Result<(SocketAddr, SocketAddr), String> {
        let leader = self
            .obs
            .with(|w| w.lease("rollboot-leader").and_then(|l| l.holder.clone()))
            .unwrap_or_default();
        let find = |lead: bool| {
            self.fleetlock
                .iter()
                .find(|(id, _)| (*id == leader) == lead)
                .map(|x| x.1)
        };
        match (find(true), find(false)) {
            (Some(l), Some(s)) => Ok((l, s)),
            _ => Err(format!("no FleetLock address for the leader `{leader}`")),
        }
    }

    /// The body a node's Zincati sends.
    pub(crate) fn zincati_body(&self, node: &str) -> Result<String, String> {
        let f = self.state.join(format!("machine-id-{node}"));
        let machine = std::fs::read_to_string(&f).map_err(|e| format!("{}: {e}", f.display()))?;
        Ok(body(&zincati_id(machine.trim()), "default"))
    }

    /// Check 22: FleetLock answers only the host it is asked about.
    pub(crate) async fn fleetlock_callers(&mut self, report: &mut Report) -> Result<(), String> {
        let node = "node-2";
        let mut failures = Vec::new();
        let mut notes = Vec::new();
        let (lead, standby) = self.fleetlock_pair()?;
        let b = self.zincati_body(node)?;
        let t0 = Utc::now();
        let own = host_ip(node);
        for (from, what) in [(None, "127.0.0.1"), (host_ip("node-3"), "node-3's address")] {
            for (addr, who) in [(lead, "the leader"), (standby, "a standby")] {
                let a = post(from, addr, "/v1/pre-reboot", b.clone(), true).await;
                if (a.status, a.kind.as_deref()) != (403, Some("client_not_host")) {
                    failures.push(format!("{node}'s id from {what} to {who}: {a:?}"));
                }
            }
        }
        let forged = |auth: Option<&str>| {
            let auth = auth.map(|t| format!("authorization: Bearer {t}\r\n"));
            format!(
                "fleet-lock-protocol: true\r\nrollboot-forwarded: controller-z\r\nrollboot-forwarded-for: {}\r\n{}",
                own.map(|i| i.to_string()).unwrap_or_default(),
                auth.unwrap_or_default()
            )
        };
        let agent_token = kubeconfig_token(&self.rb.join("agent-node-3.kubeconfig"));
        let api_token = kubeconfig_token(&self.rb.join("controller.kubeconfig"));
        for (auth, what) in [
            (None, "no token"),
            (agent_token.as_deref(), "an agent's token"),
            (
                api_token.as_deref(),
                "the controller's API token (the API server's audience)",
            ),
        ] {
            let a = post_with(None, lead, "/v1/pre-reboot", b.clone(), &forged(auth)).await;
            if (a.status, a.kind.as_deref()) != (403, Some("untrusted_forward")) {
                failures.push(format!("a forward forged with {what}: {a:?}"));
            } else {
                notes.push(format!("forged with {what}: 403 ({})", a.value));
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        self.obs.with(|w| {
            let written = w.node_since(node, t0).into_iter().find(|v| {
                v.unschedulable
                    || v.rollboot
                        .get("rollboot.dev/reboot-requested-reason")
                        .map(String::as_str)
                        == Some("fleetlock")
            });
            if let Some(v) = written {
                failures.push(format!(
                    "{node} was written for a request that was not its host's: {:?}",
                    v.rollboot
                ));
            }
        });
        // The host itself through the standby: the forward's proof passes the real
        // TokenReview, and the leader records the request (its `fleetlock` record) from the
        // address the standby checked. A steady-state: it starts no cycle.
        let a = post(own, standby, "/v1/steady-state", b, true).await;
        if a.status != 200 {
            failures.push(format!(
                "the host's steady-state through the standby: {a:?}"
            ));
        }
        let recorded = self
            .obs
            .wait(Duration::from_secs(20), |w| {
                w.node(node)
                    .and_then(|v| v.rollboot.get("rollboot.dev/fleetlock"))
                    .filter(|r| r.contains("steady-state"))
                    .map(|_| ())
            })
            .await;
        if recorded.is_none() {
            failures.push(format!(
                "the leader did not record the host's own request forwarded by the standby: {}",
                self.describe(node)
            ));
        } else {
            notes.push(
                "the host's own steady-state through the standby: 200, recorded by the leader"
                    .into(),
            );
        }
        let ok = failures.is_empty();
        report.check("22", title("22"), failures, notes);
        if ok {
            Ok(())
        } else {
            Err("FleetLock answered a caller that is not the host".into())
        }
    }

    /// Check 23: every server of the controller is bounded (a body over the limit, headers
    /// sent slowly).
    pub(crate) async fn bounded_servers(&mut self, report: &mut Report) -> Result<(), String> {
        let mut failures = Vec::new();
        let mut notes = Vec::new();
        let (lead, _) = self.fleetlock_pair()?;
        let mut ports: Vec<(String, SocketAddr)> = vec![("FleetLock".into(), lead)];
        ports.extend(
            self.metrics_addrs
                .iter()
                .map(|(id, a)| (format!("{id} /metrics"), *a)),
        );
        let results = tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            for (what, addr) in ports {
                // A body of 64 KiB to the one server that reads bodies: refused with 413, not
                // buffered. (The others serve GET only.)
                let fleetlock = what == "FleetLock";
                let big = "x".repeat(64 << 10);
                let r = (|| -> std::io::Result<String> {
                    if !fleetlock {
                        return Ok(String::new());
                    }
                    let mut s = std::net::TcpStream::connect(addr)?;
                    s.set_read_timeout(Some(Duration::from_secs(20)))?;
                    let path = "/v1/pre-reboot";
                    write!(
                        s,
                        "POST {path} HTTP/1.1\r\nhost: x\r\nfleet-lock-protocol: true\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        big.len()
                    )?;
                    let _ = s.write_all(big.as_bytes());
                    let mut text = String::new();
                    let _ = s.read_to_string(&mut text);
                    Ok(text.lines().next().unwrap_or_default().to_string())
                })();
                if fleetlock {
                    out.push((what.clone(), "body", r.map_err(|e| e.to_string())));
                }
                // Headers trickled one byte a second: disconnected within 30 s.
                let r = (|| -> std::io::Result<String> {
                    let mut s = std::net::TcpStream::connect(addr)?;
                    let start = Instant::now();
                    for b in b"GET /healthz HTTP/1.1\r\nhost: x\r\nx-slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa" {
                        if s.write_all(&[*b]).is_err() {
                            return Ok(format!("closed after {:.0} s", start.elapsed().as_secs_f64()));
                        }
                        std::thread::sleep(Duration::from_secs(1));
                        let mut buf = [0u8; 256];
                        s.set_nonblocking(true)?;
                        match s.read(&mut buf) {
                            Ok(0) => {
                                return Ok(format!(
                                    "closed after {:.0} s",
                                    start.elapsed().as_secs_f64()
                                ))
                            }
                            Ok(n) => {
                                return Ok(format!(
                                    "answered after {:.0} s: {}",
                                    start.elapsed().as_secs_f64(),
                                    String::from_utf8_lossy(&buf[..n]).lines().next().unwrap_or_default()
                                ))
                            }
                            Err(_) => {}
                        }
                        s.set_nonblocking(false)?;
                        if start.elapsed() > Duration::from_secs(30) {
                            return Ok("still open after 30 s".into());
                        }
                    }
                    Ok("sent every byte and still open".into())
                })();
                out.push((what, "slow headers", r.map_err(|e| e.to_string())));
            }
            out
        })
        .await
        .map_err(|e| e.to_string())?;
        for (what, test, r) in results {
            match (test, r) {
                ("body", Ok(line)) if line.contains(" 413 ") => {
                    notes.push(format!("{what}: 64 KiB body: {line}"))
                }
                ("slow headers", Ok(line))
                    if !line.starts_with("still") && !line.starts_with("sent") =>
                {
                    notes.push(format!("{what}: slow headers: {line}"))
                }
                (test, r) => failures.push(format!("{what}: {test}: {r:?}")),
            }
        }
        report.check("23", title("23"), failures, notes);
        Ok(())
    }

    /// Check 24: a FleetLock host's slot given back one second into its own reboot.
    pub(crate) async fn give_back_mid_reboot(&mut self, report: &mut Report) -> Result<(), String> {
        let node = "node-2";
        let mut failures = Vec::new();
        let mut notes = Vec::new();
        let (lead, standby) = self.fleetlock_pair()?;
        let b = self.zincati_body(node)?;
        let own = host_ip(node);
        let rebooted_before = reboots(&self.state, node);
        let t0 = Utc::now();
        let start = Instant::now();
        let granted = loop {
            let a = post(own, standby, "/v1/pre-reboot", b.clone(), true).await;
            match a.kind.as_deref() {
                None => break true,
                Some("waiting_slot" | "draining" | "no_leader") => {}
                Some(_) => {
                    failures.push(format!("pre-reboot: {a:?}"));
                    break false;
                }
            }
            if start.elapsed() > CYCLE_TIMEOUT {
                failures.push(format!("pre-reboot not 200: {}", self.describe(node)));
                break false;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        if !granted {
            report.check("24", title("24"), failures, notes);
            return Err(format!("{node}: no FleetLock slot"));
        }
        // The host reboots itself, for 25 s (longer than the 10 s a give-back once waited),
        // and its Zincati gives the slot back a second later.
        let file = self.state.join(format!("reboot-{node}"));
        std::fs::write(&file, "fleetlock seconds=25\n")
            .map_err(|e| format!("{}: {e}", file.display()))?;
        *self.host_reboots.entry(node.into()).or_default() += 1;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let a = post(own, lead, "/v1/steady-state", b.clone(), true).await;
        notes.push(format!(
            "steady-state 1 s into the reboot: {} {:?}",
            a.status, a.kind
        ));
        let before = self
            .obs
            .with(|w| w.node_since(node, t0).first().map(|v| v.boot_id.clone()))
            .unwrap_or_default();
        let done = self
            .obs
            .wait(CYCLE_TIMEOUT, |w| {
                w.node(node)
                    .filter(|v| {
                        v.rollboot.get("rollboot.dev/state").map(String::as_str) == Some("done")
                    })
                    .filter(|v| !v.unschedulable)
                    .map(|v| v.boot_id.clone())
            })
            .await;
        match done {
            Some(boot) if boot != before => {}
            Some(_) => failures.push(format!(
                "{node} ended `done` on the boot it had before its reboot ({before}): released without the reboot it was in"
            )),
            None => failures.push(format!("{node}: {}", self.describe(node))),
        }
        self.obs.with(|w| {
            for v in w.node_since(node, t0) {
                if !v.ready && !v.unschedulable {
                    failures.push(format!("{node} uncordoned while NotReady (rv {})", v.rv));
                    break;
                }
            }
        });
        let rebooted = reboots(&self.state, node) - rebooted_before;
        if rebooted != 1 {
            failures.push(format!("the host rebooted {rebooted} time(s); want 1"));
        }
        let _ = post(own, standby, "/v1/steady-state", b, true).await;
        report.check("24", title("24"), failures, notes);
        Ok(())
    }

    /// Check 25: shutdown requests with no shutdown behind them, written by three agents on
    /// their own Nodes at once.
    pub(crate) async fn shutdown_requests(&mut self, report: &mut Report) -> Result<(), String> {
        let nodes = ["node-3", "node-4", "node-5"];
        let mut failures = Vec::new();
        let mut notes = Vec::new();
        let rebooted: Vec<usize> = nodes.iter().map(|n| reboots(&self.state, n)).collect();
        let t0 = Utc::now();
        let start = Instant::now();
        let request = serde_json::json!({"at": rollboot::time::annotation(t0), "delaySeconds": 1})
            .to_string();
        for n in nodes {
            let kc = self.rb.join(format!("agent-{n}.kubeconfig"));
            let client = super::probe_client(&kc).await?;
            let p = serde_json::json!({"metadata": {"annotations": {"rollboot.dev/shutdown-requested": request}}});
            if let Err(e) = super::patch_node(&client, n, &p).await {
                failures.push(format!(
                    "the agent of {n} could not write its request: {e:?}"
                ));
            }
        }
        let ended = self
            .obs
            .wait(Duration::from_secs(240), |w| {
                // Each ended on its Node, and its slot freed in the lock (written after).
                let freed = w
                    .lease("rollboot-lock")
                    .is_none_or(|l| nodes.iter().all(|n| !l.in_flight.contains_key(*n)));
                (freed
                    && nodes.iter().all(|n| {
                        w.node(n).is_some_and(|v| {
                            !v.rollboot.contains_key("rollboot.dev/shutdown-requested")
                                && !v.unschedulable
                                && v.rollboot.get("rollboot.dev/state").map(String::as_str)
                                    == Some("done")
                        })
                    }))
                .then_some(())
            })
            .await;
        if ended.is_none() {
            for n in nodes {
                failures.push(format!("{n}: {}", self.describe(n)));
            }
        }
        notes.push(format!(
            "three requests to all ended: {:.1} s",
            start.elapsed().as_secs_f64()
        ));
        let most = self.obs.with(|w| max_cordoned_since(w, t0));
        notes.push(format!("most cordoned at once: {most}"));
        if most > 2 {
            failures.push(format!(
                "{most} nodes cordoned at once (maxNodes 1 + maxShutdownDrains 1)"
            ));
        }
        for (n, r) in nodes.iter().zip(rebooted) {
            if reboots(&self.state, n) != r {
                failures.push(format!("{n} rebooted"));
            }
        }
        self.obs.with(|w| {
            for n in nodes {
                if w.node_since(n, t0).iter().any(|v| {
                    v.rollboot.get("rollboot.dev/state").map(String::as_str) == Some("failed")
                }) {
                    failures.push(format!("{n} failed"));
                }
            }
        });
        let ok = failures.is_empty();
        report.check("25", title("25"), failures, notes);
        if ok {
            Ok(())
        } else {
            Err("shutdown requests with no shutdown behind them".into())
        }
    }
}
