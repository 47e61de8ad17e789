//! Simulated FleetLock hosts: each runs a Zincati of its own that asks rollboot's FleetLock
//! server before it reboots, reboots itself on 200, and gives its slot back once up.
//!
//! Owns the simulated client's loop ([`run`]): at start, `steady-state` until 200 (Zincati's
//! initialization); while an update is staged ([`FleetLockHosts::pending`]), `pre-reboot` on a
//! poll until 200, or until the host goes down by itself, which ends that boot's Zincati (the
//! update went in with that boot); then the host's reboot (the world's, as the agent's
//! simulated reboot does, with a token of its own per grant so the exactly-once invariant
//! covers it), the wait until it is up on a new boot, and `steady-state` until 200. Requests go
//! to the controller replicas in turn (a standby forwards to the leader). It must never reboot
//! without a 200, and never decide anything for rollboot: it is the host's side only.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rollboot::agent::RebootHost;
use rollboot::fleetlock::id::{app_specific, ZINCATI_APP_ID};
use rollboot::fleetlock::protocol::{Endpoint, HEADER};
use rollboot::metrics::Metrics;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::SimReboot;

/// What the simulated FleetLock hosts share with the harness and the report.
#[derive(Clone, Default)]
pub struct FleetLockHosts {
    /// Hosts with an update staged: they ask for a slot until they rebooted.
    pub pending: Arc<Mutex<BTreeSet<String>>>,
    /// Requests sent (each try, whatever the answer).
    pub requests: Arc<AtomicU64>,
    /// `pre-reboot` answered 200 for a host that did not hold a slot yet.
    pub granted: Arc<AtomicU64>,
    /// Hosts holding a slot now, with the instant of their grant: from their first 200 to
    /// `pre-reboot` until rollboot takes the slot back, by its 200 to `steady-state` or by
    /// ending the node's cycle (a `steady-state` held up by a paused leader may reach a
    /// replica seconds after the slot went to the next host).
    pub held: Arc<Mutex<BTreeMap<String, chrono::DateTime<chrono::Utc>>>>,
    /// The most hosts that held a slot at once.
    pub max_held: Arc<AtomicU64>,
    /// Per grant, real seconds from the host's first `pre-reboot` to its 200.
    pub waits: Arc<Mutex<Vec<f64>>>,
    /// Per reboot, real seconds logind held it for inhibitor locks (the hosts' logind being
    /// simulated: [`super::Harness::enable_shutdowns`]); a reboot rollboot granted is never
    /// held by rollboot's own agent.
    pub logind_waits: Arc<Mutex<Vec<f64>>>,
}

impl FleetLockHosts {
    /// `node` takes a slot (`on`), counted against the others that still hold theirs
    /// (`method` reads their cycles), or gives it back.
    fn hold(&self, node: &str, on: bool, method: &SimReboot) {
        let mut held = self.held.lock().expect("held");
        if on {
            held.retain(|h, at| !method.cycle_ended_since(h, *at));
            held.insert(node.into(), chrono::Utc::now());
            self.max_held
                .fetch_max(held.len() as u64, Ordering::Relaxed);
        } else {
            held.remove(node);
        }
    }
}

/// One request, to the replicas in turn from `turn`, sent from the host's own address
/// `from` (a FleetLock server answers a host only from there); the HTTP status (0 when no
/// replica answered).
async fn post(
    replicas: &[Arc<Metrics>],
    turn: usize,
    from: Option<IpAddr>,
    endpoint: Endpoint,
    body: &str,
) -> u16 {
    for i in 0..replicas.len() {
        let Some(addr) = replicas
            .get((turn + i) % replicas.len())
            .and_then(|m| m.fleetlock_addr())
        else {
            continue;
        };
        // A replica killed by a fault refuses the connection: the next one is asked.
        let sent = tokio::time::timeout(
            Duration::from_secs(15),
            send(from, addr, endpoint.path(), body),
        )
        .await;
        if let Ok(Ok(status)) = sent {
            return status;
        }
    }
    0
}

/// `POST path` with `body` to `to` over one connection from `from` (any local address when
/// `None`): the answer's status.
pub async fn send(
    from: Option<IpAddr>,
    to: SocketAddr,
    path: &str,
    body: &str,
) -> std::io::Result<u16> {
    let socket = if to.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    if let Some(ip) = from {
        socket.bind(SocketAddr::new(ip, 0))?;
    }
    let mut s = socket.connect(to).await?;
    let req = format!(
        "POST {path} HTTP/1.1\r\nhost: {to}\r\n{HEADER}: true\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).await?;
    let text = String::from_utf8_lossy(&answer);
    text.get(9..12)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP answer: {text:.80}")))
}

/// Runs the simulated Zincati of `node` until aborted; `poll` is its retry period.
pub async fn run(
    node: String,
    method: SimReboot,
    hosts: FleetLockHosts,
    replicas: Vec<Arc<Metrics>>,
    poll: Duration,
    logind: Option<super::shutdowns::Shutdowns>,
) {
    let Some(machine) = method.machine_id(&node) else {
        tracing::warn!(
            node,
            "simulated FleetLock host has no machine ID; not running"
        );
        return;
    };
    let id = app_specific(&machine, &ZINCATI_APP_ID).expect("a simulated machine ID is 128 bits");
    let body = serde_json::json!({"client_params": {"id": id, "group": "default"}}).to_string();
    let mut grants = 0u64;
    let ask = |endpoint: Endpoint| {
        let turn = hosts.requests.fetch_add(1, Ordering::Relaxed) as usize;
        let body = body.clone();
        let replicas = replicas.clone();
        let from = method.address();
        async move { post(&replicas, turn, from, endpoint, &body).await }
    };
    loop {
        // Initialization, and after each reboot: the slot given back, whatever it held.
        while ask(Endpoint::SteadyState).await != 200 {
            tokio::time::sleep(poll).await;
        }
        hosts.hold(&node, false, &method);
        while !hosts.pending.lock().expect("pending").contains(&node) {
            tokio::time::sleep(poll).await;
        }
        let asked = std::time::Instant::now();
        let mut first = true;
        // The host knows its own boot; the simulation reads it from the kubelet's Node, which
        // a fault may delete for a moment: the last one read stands in then.
        let mut known = method.boot_id(&node);
        let downs = method.downs();
        // The boot the host leaves, where known: its own reboot's; none after a shutdown, which
        // left its boot already.
        let left = loop {
            // The Zincati of a boot the host left asks nothing more: a host that went down
            // meanwhile (a shutdown of its own) took it along, and the staged update went in
            // with that boot. Asking on would take a slot for a reboot that already happened
            // (the chaos campaign's seed 10: a 200 twenty seconds after the host was back, for
            // a reboot nobody made, and the node failed at its reboot timeout).
            let granted = loop {
                if method.downs() != downs {
                    break false;
                }
                // Down while the 200 was on its way: that boot's Zincati never saw it.
                if ask(Endpoint::PreReboot).await == 200 {
                    break method.downs() == downs;
                }
                if let Some(b) = method.boot_id(&node) {
                    known = Some(b);
                }
                tokio::time::sleep(poll).await;
            };
            if !granted {
                break None;
            }
            if first {
                first = false;
                hosts
                    .waits
                    .lock()
                    .expect("waits")
                    .push(asked.elapsed().as_secs_f64());
                hosts.granted.fetch_add(1, Ordering::Relaxed);
                hosts.hold(&node, true, &method);
            }
            grants += 1;
            // It reboots at once on 200, as a real host does: waiting for its Node to be
            // there again would reboot it later, on whatever the Node says then (a Node
            // registered again is not cordoned).
            let left = method.boot_id(&node).or_else(|| known.clone());
            let token = format!("fleetlock-{node}-{grants}");
            // `systemctl reboot` goes through logind, which asks the inhibitors first (the
            // agent's among them) as for any shutdown.
            if let Some(l) = &logind {
                let held = l.announce_reboot(&node).await;
                hosts
                    .logind_waits
                    .lock()
                    .expect("logind waits")
                    .push(held.as_secs_f64());
            }
            // The host's own reboot: not the agent's, so not held by a stall of the agent.
            match method.reboot_itself(&token) {
                Ok(()) => break left,
                // Zincati keeps its slot and tries again once it is still allowed to (a node
                // failed meanwhile is not 200 any more).
                Err(e) => {
                    tracing::warn!(node, error = %e, "simulated FleetLock host: reboot failed; asking again");
                    tokio::time::sleep(poll).await;
                }
            }
        };
        hosts.pending.lock().expect("pending").remove(&node);
        // Up again on a boot other than the one it left (a host that hangs stays down until
        // fixed); after a shutdown, on whatever boot it reports (none while it is down).
        while method
            .boot_id(&node)
            .is_none_or(|b| Some(&b) == left.as_ref())
        {
            tokio::time::sleep(poll).await;
        }
    }
}
