//! FleetLock end to end on the simulator: a client written from the protocol's document
//! (Zincati's `docs/development/fleetlock/protocol.md`), not from rollboot's server, asks the
//! real controller replicas for a reboot slot for a host, reboots that host itself on 200, and
//! gives the slot back once up.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rollboot::node::{NodeState, NodeView};
use rollboot_sim::sim::scenario::NodeAddresses;
use rollboot_sim::sim::Scenario;
use rollboot_sim::simulate::{rollout, sim_config, Harness, RunOptions};

use rollboot_testkit::log::log;

use fleetlock_client::{body, post, post_with, zincati_id};
use rollboot_testkit::fleetlock_client;

const PRE: &str = "/v1/pre-reboot";
const STEADY: &str = "/v1/steady-state";

async fn harness(nodes: usize, overrides: &str) -> Harness {
    harness_with_logind(nodes, overrides, None).await
}

/// [`harness`], the hosts' logind simulated with `delay` when given (the agents hold an
/// inhibitor from their start).
async fn harness_with_logind(nodes: usize, overrides: &str, delay: Option<Duration>) -> Harness {
    log();
    let sc = Scenario {
        nodes,
        pods_per_node: 4,
        node_addresses: Some(NodeAddresses::Loopback),
        ..Scenario::default()
    };
    let mut h = Harness::start(sc, sim_config(overrides).unwrap())
        .await
        .unwrap();
    if let Some(d) = delay {
        h.enable_shutdowns(d);
    }
    h.start_rollout().await.unwrap();
    h
}

/// The address `node`'s host sends from: its Node's InternalIP (each its own in 127/8).
fn host_ip(h: &Harness, node: &str) -> Option<IpAddr> {
    let ip = h.cluster.world().internal_ip(node);
    assert!(ip.is_some_and(|ip| ip.is_loopback()), "{node}: {ip:?}");
    ip
}

/// Every replica's FleetLock address, once each listens, and the leader's index.
async fn replicas(h: &Harness) -> (Vec<SocketAddr>, usize) {
    let start = Instant::now();
    loop {
        let addrs: Vec<SocketAddr> = h
            .metrics
            .iter()
            .filter_map(|m| m.fleetlock_addr())
            .collect();
        if let (2, Some(l)) = (addrs.len(), h.leader()) {
            return (addrs, l);
        }
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no replica serves FleetLock"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Asks `path` until 200 (at most `within`), returning every non-200 kind seen on the way.
async fn until_ok(
    from: Option<IpAddr>,
    addr: SocketAddr,
    path: &str,
    body: &str,
    within: Duration,
) -> Vec<String> {
    let start = Instant::now();
    let mut kinds = Vec::new();
    loop {
        let a = post(from, addr, path, body.to_string(), true).await;
        assert_ne!(a.status, 400, "{a:?}");
        match a.kind {
            None => return kinds,
            Some(k) => {
                if kinds.last() != Some(&k) {
                    kinds.push(k);
                }
            }
        }
        assert!(
            start.elapsed() < within,
            "no 200 on {path} within {within:?}: {kinds:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `node` is `Done` (fails the test after `within`); the node as then read.
async fn done_within(h: &Harness, node: &str, within: Duration) -> NodeView {
    let (done, n) = h
        .wait_for_state(node, NodeState::Done, within)
        .await
        .unwrap();
    assert!(done, "{node} not Done within {within:?}: {n:?}");
    n
}

/// The pods on `node` a drain evicts (not DaemonSet or mirror pods).
async fn evictable_on(h: &Harness, node: &str) -> Vec<String> {
    use k8s_openapi::api::core::v1::Pod;
    let api: kube::Api<Pod> = kube::Api::all(h.client.clone());
    let lp = kube::api::ListParams::default().fields(&format!("spec.nodeName={node}"));
    api.list(&lp)
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| {
            !p.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.kind == "DaemonSet" || o.kind == "Node")
        })
        .map(|p| p.metadata.name.unwrap_or_default())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fleetlock_host_gets_200_only_once_drained_reboots_itself_and_gives_its_slot_back() {
    let h = harness(3, "fleetlock: {listen: '127.0.0.1:0'}").await;
    let (addrs, leader) = replicas(&h).await;
    let standby = addrs[1 - leader];
    let node = "node-0001";
    let before: NodeView = h.node(node).await.unwrap();
    let id = zincati_id(&before.machine_id);
    let b = body(&id, "default");
    let ip = host_ip(&h, node);
    // Zincati's initialization: nothing held, 200, nothing flagged.
    let a = post(ip, standby, STEADY, b.clone(), true).await;
    assert_eq!(a.status, 200, "{a:?}");
    assert!(!h.node(node).await.unwrap().flagged());
    // The first pre-reboot flags the node and is not 200: it is not drained yet.
    let a = post(ip, standby, PRE, b.clone(), true).await;
    assert_ne!(a.status, 200, "{a:?}");
    assert!(
        matches!(a.kind.as_deref(), Some("waiting_slot" | "draining")),
        "{a:?}"
    );
    let flagged = h.node(node).await.unwrap();
    assert_eq!(
        flagged.reboot_requested_reason.as_deref(),
        Some("fleetlock")
    );
    // 200 once in the lock, cordoned, drained, the reboot handed to the host.
    let kinds = until_ok(ip, standby, PRE, &b, Duration::from_secs(60)).await;
    assert!(
        kinds.iter().all(|k| k == "waiting_slot" || k == "draining"),
        "{kinds:?}"
    );
    let held = h.node(node).await.unwrap();
    assert!(held.unschedulable);
    assert_eq!(held.state, Some(NodeState::Rebooting));
    assert!(held.handed_off.is_some());
    assert_eq!(
        held.reboot_token, None,
        "no token for a host that reboots itself"
    );
    assert_eq!(evictable_on(&h, node).await, Vec::<String>::new());
    // The recursive lock: the holder asks again, on either replica, and gets 200 again.
    for addr in &addrs {
        let a = post(ip, *addr, PRE, b.clone(), true).await;
        assert_eq!(a.status, 200, "{a:?}");
    }
    // Nobody rebooted it: the agent had no token.
    assert_eq!(h.reboots(node), 0);
    // The host reboots itself; its client starts again once it is up on the new boot.
    h.cluster.world().reboot(node, "test-zincati-1");
    let up = h
        .wait_for(Duration::from_secs(30), |ns| {
            ns.iter()
                .any(|n| n.name == node && n.boot_id != before.boot_id && n.ready)
        })
        .await
        .unwrap();
    assert!(up, "the host did not come back");
    // steady-state: not 200 while it is back but not verified; 200 once released.
    let kinds = until_ok(ip, addrs[leader], STEADY, &b, Duration::from_secs(60)).await;
    assert!(kinds.iter().all(|k| k == "verifying"), "{kinds:?}");
    let after = h.node(node).await.unwrap();
    assert_eq!(after.state, Some(NodeState::Done));
    assert!(!after.unschedulable);
    assert!(!after.flagged());
    assert_ne!(after.boot_id, before.boot_id);
    assert_eq!(after.history.count, Some(1));
    let inv = h.cluster.invariants();
    assert!(inv.pdb_violations.is_empty(), "{:?}", inv.pdb_violations);
    assert!(
        inv.repeated_reboots.is_empty(),
        "{:?}",
        inv.repeated_reboots
    );
    // Nothing else was started: only this host asked.
    let others: Vec<NodeView> = h
        .nodes()
        .await
        .unwrap()
        .into_iter()
        .filter(|n| n.name != node)
        .collect();
    assert!(others.iter().all(|n| n.state.is_none()), "{others:?}");
    let text = h.metrics[leader].render();
    assert!(
        text.contains("rollboot_fleetlock_requests_total{endpoint=\"pre-reboot\",outcome=\"ok\"}"),
        "{text}"
    );
    let text = h.metrics[1 - leader].render();
    assert!(
        text.contains(
            "rollboot_fleetlock_requests_total{endpoint=\"pre-reboot\",outcome=\"forwarded\"}"
        ),
        "{text}"
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_requests_get_400_with_a_kind_and_flag_nothing() {
    let h = harness(2, "fleetlock: {listen: '127.0.0.1:0'}").await;
    let (addrs, leader) = replicas(&h).await;
    let n: NodeView = h.node("node-0000").await.unwrap();
    let id = zincati_id(&n.machine_id);
    let ip = host_ip(&h, "node-0000");
    for addr in [addrs[leader], addrs[1 - leader]] {
        let a = post(ip, addr, PRE, body(&id, "default"), false).await;
        assert_eq!(
            (a.status, a.kind.as_deref()),
            (400, Some("missing_header")),
            "{a:?}"
        );
        let a = post(ip, addr, PRE, "{\"id\": 1}".into(), true).await;
        assert_eq!(
            (a.status, a.kind.as_deref()),
            (400, Some("bad_body")),
            "{a:?}"
        );
        let a = post(ip, addr, PRE, body(&id, "no_underscores"), true).await;
        assert_eq!(
            (a.status, a.kind.as_deref()),
            (400, Some("bad_group")),
            "{a:?}"
        );
        assert!(a.value.contains("no_underscores"), "{a:?}");
        // The machine ID itself is not the host's id.
        let a = post(ip, addr, PRE, body(&n.machine_id, "default"), true).await;
        assert_eq!(
            (a.status, a.kind.as_deref()),
            (404, Some("unknown_host")),
            "{a:?}"
        );
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(h.nodes().await.unwrap().iter().all(|n| !n.flagged()));
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_host_that_gives_its_slot_back_before_rebooting_is_released_without_a_reboot() {
    // Released once the node stayed Ready on its boot for reboot.readyWithoutRebootFor after
    // the hand-off (2 s here).
    let h = harness(
        2,
        "{fleetlock: {listen: '127.0.0.1:0'}, reboot: {readyWithoutRebootFor: 2s}}",
    )
    .await;
    let (addrs, leader) = replicas(&h).await;
    let node = "node-0000";
    let before = h.node(node).await.unwrap();
    let b = body(&zincati_id(&before.machine_id), "default");
    let ip = host_ip(&h, node);
    until_ok(ip, addrs[leader], PRE, &b, Duration::from_secs(60)).await;
    assert_eq!(
        h.node(node).await.unwrap().state,
        Some(NodeState::Rebooting)
    );
    // The host decides not to reboot (its Zincati started again): steady-state on the same boot.
    let a = post(ip, addrs[1 - leader], STEADY, b.clone(), true).await;
    assert_eq!(a.status, 200, "{a:?}");
    let n = done_within(&h, node, Duration::from_secs(20)).await;
    assert!(!n.unschedulable, "uncordoned");
    assert!(!n.flagged());
    assert_eq!(n.boot_id, before.boot_id);
    assert_eq!(n.history.count, None, "no reboot is recorded");
    assert_eq!(h.reboots(node), 0);
    // The Event follows the write that released it (a CI run on 2026-11-27 saw it 10 s after the
    // state): waited for, not read once.
    let gave_back = |notes: &[String]| notes.iter().any(|s| s.contains("gave its slot back"));
    let said = h
        .events_until("ReleasedWithoutReboot", Duration::from_secs(30), &gave_back)
        .await
        .unwrap();
    assert!(gave_back(&said), "{said:?}");
    // It holds nothing now: steady-state is 200 and writes nothing new.
    let a = post(ip, addrs[leader], STEADY, b, true).await;
    assert_eq!(a.status, 200, "{a:?}");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rollout_with_fleetlock_hosts_keeps_every_invariant() {
    log();
    let sc = Scenario {
        nodes: 6,
        pods_per_node: 4,
        fleetlock_hosts: 3,
        ..Scenario::default()
    };
    let r = rollout(
        sc,
        sim_config("concurrency: {maxNodes: 2}").unwrap(),
        RunOptions::default(),
    )
    .await
    .unwrap();
    assert!(r.ok, "{}", r.text());
    assert_eq!(r.rebooted_once, 6, "{}", r.text());
    let f = r.fleetlock.expect("fleetlock figures");
    assert_eq!(f.granted, 3, "{f:?}");
    assert!((1..=2).contains(&f.max_held_at_once), "{f:?}");
    assert!(r.max_nodes_out <= 2);
    assert_eq!(r.pdb_violations, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fleetlock_hosts_own_reboot_is_not_held_by_a_stall_meant_for_its_agent() {
    // The chaos campaign's seed 18: a `stallAgent` queued on a FleetLock host, whose agent
    // never reboots it, was taken by the host's own reboot, which then never happened.
    let mut h = harness(2, "fleetlock: {listen: '127.0.0.1:0'}").await;
    replicas(&h).await;
    let node = "node-0001";
    let before = h.node(node).await.unwrap();
    *h.host.stall.lock().unwrap().entry(node.into()).or_default() += 1;
    h.start_zincati(node, Duration::from_millis(50));
    h.fleetlock.pending.lock().unwrap().insert(node.into());
    let n = done_within(&h, node, Duration::from_secs(60)).await;
    assert_ne!(n.boot_id, before.boot_id);
    assert_eq!(h.reboots(node), 1);
    // Still queued for the agent, which was never asked to reboot.
    assert_eq!(h.host.stall.lock().unwrap().get(node), Some(&1));
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fleetlock_host_that_goes_down_while_it_waits_for_a_slot_asks_no_more_from_that_boot() {
    // The chaos campaign's seed 10 (seen once, 2026-11-26): a FleetLock host shut down by
    // itself while its Zincati waited for a slot. The Zincati of the old boot asked on, got
    // 200 once the slot was free, and waited for a reboot that had already happened; the
    // controller failed the node at its reboot timeout.
    let mut h = harness(
        2,
        "{fleetlock: {listen: '127.0.0.1:0'}, reboot: {timeout: 10s, readyWithoutRebootFor: 2s}}",
    )
    .await;
    h.enable_shutdowns(Duration::from_millis(200));
    let (addrs, leader) = replicas(&h).await;
    // node-0000's host takes the only slot (maxNodes 1) and keeps it.
    let holder = h.node("node-0000").await.unwrap();
    let hb = body(&zincati_id(&holder.machine_id), "default");
    let hip = host_ip(&h, "node-0000");
    until_ok(hip, addrs[leader], PRE, &hb, Duration::from_secs(60)).await;
    // node-0001 gets an update staged: its Zincati asks, and waits.
    let node = "node-0001";
    let before = h.node(node).await.unwrap();
    h.start_zincati(node, Duration::from_millis(50));
    h.fleetlock.pending.lock().unwrap().insert(node.into());
    let asked = h
        .wait_for(Duration::from_secs(20), |ns| {
            ns.iter().any(|n| n.name == node && n.flagged())
        })
        .await
        .unwrap();
    assert!(asked, "node-0001's Zincati did not ask");
    // Its host shuts down by itself (nothing holds logind: the agents started before it had
    // one) and comes back on a new boot, with the update in.
    h.host_shutdown(node).unwrap().await.unwrap();
    let back = h
        .wait_for(Duration::from_secs(30), |ns| {
            ns.iter()
                .any(|n| n.name == node && n.ready && n.boot_id != before.boot_id)
        })
        .await
        .unwrap();
    assert!(back, "the host did not come back");
    // The slot is free again: the holder gives it back without a reboot.
    until_ok(hip, addrs[leader], STEADY, &hb, Duration::from_secs(30)).await;
    // The new boot's Zincati withdraws the request; nothing is handed to this host for the
    // update it already has.
    let withdrawn = h
        .wait_for(Duration::from_secs(20), |ns| {
            ns.iter().any(|n| n.name == node && !n.flagged())
        })
        .await
        .unwrap();
    let n = h.node(node).await.unwrap();
    assert!(withdrawn, "{n:?}");
    assert_eq!(n.handed_off, None, "{n:?}");
    assert_eq!(h.fleetlock.granted.load(Ordering::Relaxed), 0);
    // The next update staged on this host is asked for, granted and rebooted for.
    h.fleetlock.pending.lock().unwrap().insert(node.into());
    done_within(&h, node, Duration::from_secs(60)).await;
    assert_eq!(h.fleetlock.granted.load(Ordering::Relaxed), 1);
    assert_eq!(h.reboots(node), 2, "the shutdown and the granted reboot");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_fleetlock_hosts_reboot_goes_through_logind_and_is_not_held_by_the_agent() {
    // Found on real nodes: the host's `systemctl reboot` on its 200 asks logind, which waits
    // for the agent's inhibitor; the agent took it for a shutdown nobody planned, on a Node
    // already `rebooting` and handed off, and held it to logind's limit (162 s of 180).
    // logind waits up to 5 s for inhibitors; the agents hold one.
    let mut h = harness_with_logind(
        2,
        "fleetlock: {listen: '127.0.0.1:0'}",
        Some(Duration::from_secs(5)),
    )
    .await;
    replicas(&h).await;
    let node = "node-0001";
    let before = h.node(node).await.unwrap();
    h.start_zincati(node, Duration::from_millis(50));
    h.fleetlock.pending.lock().unwrap().insert(node.into());
    let n = done_within(&h, node, Duration::from_secs(60)).await;
    assert_ne!(n.boot_id, before.boot_id);
    assert_eq!(h.reboots(node), 1);
    let waits = h.fleetlock.logind_waits.lock().unwrap().clone();
    assert_eq!(waits.len(), 1, "{waits:?}");
    assert!(
        waits[0] < 1.0,
        "logind held the granted reboot {:.1} s for the agent's inhibitor",
        waits[0]
    );
    assert!(!n.shutdown_requested);
    h.shutdown().await;
}

/// What `node` carries of a FleetLock request: its flag, its `fleetlock` record.
async fn asked_anything(h: &Harness, node: &str) -> bool {
    let n = h.node(node).await.unwrap();
    n.flagged() || n.fleetlock.is_some() || n.state.is_some()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_the_host_itself_is_answered_and_a_forward_is_taken_only_from_a_replica() {
    // Found by an attacker on a real control plane: one client on 127.0.0.1 computed each
    // node's id from its machine ID and had all five drained, one after another.
    let h = harness(3, "fleetlock: {listen: '127.0.0.1:0'}").await;
    let (addrs, leader) = replicas(&h).await;
    let node = "node-0001";
    let n = h.node(node).await.unwrap();
    let b = body(&zincati_id(&n.machine_id), "default");
    let own = host_ip(&h, node);
    let other_host = host_ip(&h, "node-0002");
    for from in [None, other_host] {
        for addr in &addrs {
            let a = post(from, *addr, PRE, b.clone(), true).await;
            assert_eq!(
                (a.status, a.kind.as_deref()),
                (403, Some("client_not_host")),
                "from {from:?}: {a:?}"
            );
            assert!(a.value.contains(node), "{a:?}");
        }
    }
    // A forward forged by anyone but a replica: the host's address in the header, no
    // token or another account's.
    let forged = |auth: &str| {
        format!(
            "fleet-lock-protocol: true\r\nrollboot-forwarded: controller-9\r\nrollboot-forwarded-for: {}\r\n{auth}",
            own.unwrap()
        )
    };
    // No token; another account's token for the forward audience; the controller's own API
    // token (the API server's audience: refused, as the real kube-apiserver refuses it).
    for auth in [
        "",
        "authorization: Bearer agent@rollboot.dev/fleetlock-forward\r\n",
        "authorization: Bearer controller-0\r\n",
    ] {
        let a = post_with(None, addrs[leader], PRE, b.clone(), &forged(auth)).await;
        assert_eq!(
            (a.status, a.kind.as_deref()),
            (403, Some("untrusted_forward")),
            "{a:?}"
        );
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!asked_anything(&h, node).await, "{:?}", h.node(node).await);
    // The host itself, through the standby (whose forward carries its proof): flagged.
    let a = post(own, addrs[1 - leader], PRE, b.clone(), true).await;
    assert_ne!(a.kind.as_deref(), Some("untrusted_forward"), "{a:?}");
    assert_ne!(a.kind.as_deref(), Some("client_not_host"), "{a:?}");
    assert!(h.node(node).await.unwrap().flagged());
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_trusted_proxys_last_hop_is_the_client_and_the_check_can_be_turned_off() {
    let h = harness(
        2,
        "fleetlock: {listen: '127.0.0.1:0', trustedProxies: ['127.0.0.1/32']}",
    )
    .await;
    let (addrs, leader) = replicas(&h).await;
    let node = "node-0000";
    let n = h.node(node).await.unwrap();
    let b = body(&zincati_id(&n.machine_id), "default");
    let own = host_ip(&h, node).unwrap();
    let other = host_ip(&h, "node-0001").unwrap();
    // The proxy (127.0.0.1) says the request came from another host last: refused; what the
    // client wrote before the proxy's hop counts for nothing.
    let h1 = format!("fleet-lock-protocol: true\r\nx-forwarded-for: {own}, {other}\r\n");
    let a = post_with(None, addrs[leader], PRE, b.clone(), &h1).await;
    assert_eq!(a.kind.as_deref(), Some("client_not_host"), "{a:?}");
    assert!(!asked_anything(&h, node).await);
    // A header from a peer that is not a trusted proxy is not read.
    let h2 = format!("fleet-lock-protocol: true\r\nx-forwarded-for: {own}\r\n");
    let a = post_with(Some(other), addrs[leader], PRE, b.clone(), &h2).await;
    assert_eq!(a.kind.as_deref(), Some("client_not_host"), "{a:?}");
    // The proxy's last hop is the host: taken.
    let h3 = format!("fleet-lock-protocol: true\r\nx-forwarded-for: {other}, {own}\r\n");
    let a = post_with(None, addrs[leader], PRE, b.clone(), &h3).await;
    assert_ne!(a.kind.as_deref(), Some("client_not_host"), "{a:?}");
    assert!(h.node(node).await.unwrap().flagged());
    h.shutdown().await;

    let h = harness(
        2,
        "fleetlock: {listen: '127.0.0.1:0', verifyClientAddress: false}",
    )
    .await;
    let (addrs, leader) = replicas(&h).await;
    let n = h.node(node).await.unwrap();
    let b = body(&zincati_id(&n.machine_id), "default");
    let a = post(None, addrs[leader], PRE, b, true).await;
    assert_ne!(a.kind.as_deref(), Some("client_not_host"), "{a:?}");
    assert!(h.node(node).await.unwrap().flagged());
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_give_back_during_the_hosts_own_reboot_never_frees_the_node_mid_reboot() {
    // Found by trying rollboot as an attacker would: a `steady-state` one second after a
    // `pre-reboot` 200 ended the cycle "without a reboot" while the host was down in it: the
    // node was uncordoned NotReady, the reboot never recorded, and the next node started.
    log();
    let sc = Scenario {
        nodes: 2,
        pods_per_node: 2,
        node_addresses: Some(NodeAddresses::Loopback),
        // 15 s of real time down, longer than any settling a give-back once got.
        reboot_time: 1500.0,
        ..Scenario::default()
    };
    let mut h = Harness::start(
        sc,
        sim_config("fleetlock: {listen: '127.0.0.1:0'}").unwrap(),
    )
    .await
    .unwrap();
    h.start_rollout().await.unwrap();
    let (addrs, leader) = replicas(&h).await;
    let node = "node-0000";
    let other = "node-0001";
    let before = h.node(node).await.unwrap();
    let b = body(&zincati_id(&before.machine_id), "default");
    let ip = host_ip(&h, node);
    until_ok(ip, addrs[leader], PRE, &b, Duration::from_secs(60)).await;
    // The other node asks too (its agent's sentinel): it must wait for this cycle's end.
    h.flag(&[other.to_string()]);
    h.cluster.world().reboot(node, "test-zincati-give-back");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let a = post(ip, addrs[1 - leader], STEADY, b.clone(), true).await;
    assert_eq!(a.status, 200, "{a:?}");
    let n = done_within(&h, node, Duration::from_secs(60)).await;
    assert_ne!(
        n.boot_id, before.boot_id,
        "done only once back on a new boot"
    );
    assert_eq!(n.history.count, Some(1), "the reboot is recorded");
    let inv = h.cluster.invariants();
    assert!(
        inv.uncordoned_while_not_ready.is_empty(),
        "{:?}",
        inv.uncordoned_while_not_ready
    );
    assert!(inv.max_cordoned_by_rollboot <= 1, "{inv:?}");
    let o = h.node(other).await.unwrap();
    assert!(
        o.state_since.is_none_or(|s| s >= n.state_since.unwrap()),
        "{other} started at {:?}, before {node} was done at {:?}",
        o.state_since,
        n.state_since
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn oversized_requests_are_refused_by_every_replica_before_they_are_read() {
    let h = harness(2, "fleetlock: {listen: '127.0.0.1:0'}").await;
    let (addrs, _) = replicas(&h).await;
    for addr in addrs {
        let a = post(None, addr, PRE, body(&"a".repeat(65), "default"), true).await;
        assert_eq!(
            (a.status, a.kind.as_deref()),
            (400, Some("bad_body")),
            "{a:?}"
        );
        assert!(a.value.contains("over 64"), "{a:?}");
        // A body declared just under axum's 2 MB default, of which only the head is sent:
        // answered 413 without waiting for the rest.
        let answer = tokio::task::spawn_blocking(move || {
            use std::io::{Read, Write};
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            write!(
                s,
                "POST {PRE} HTTP/1.1\r\nhost: {addr}\r\nfleet-lock-protocol: true\r\ncontent-length: 2000000\r\n\r\n{{\"client_params\": "
            )
            .unwrap();
            let mut text = String::new();
            let _ = s.read_to_string(&mut text);
            text
        })
        .await
        .unwrap();
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    }
    assert!(h.nodes().await.unwrap().iter().all(|n| !n.flagged()));
    h.shutdown().await;
}
