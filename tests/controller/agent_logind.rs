//! Drain before an unplanned shutdown, the agent's side (issue 27): the real agent against a
//! fake logind on a private bus (Debian's `dbus-daemon` with a config of ours on a socket in a
//! temp dir, its address given to the agent as `DBUS_SYSTEM_BUS_ADDRESS` would give it) and the
//! simulated API server for its Node. The fake `org.freedesktop.login1` Manager hands out one
//! end of a socket pair for each `Inhibit` and keeps the other: the agent's end is closed when
//! ours reads end-of-file. The tests play the controller's writes (`state: rebooting` once
//! drained) by hand, except the one about rollboot's own reboot, which runs the real controller.
//! Skipped, with one line, where `dbus-daemon` is not installed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rollboot::agent::logind::{self, SystemLogind};
use rollboot::agent::{AgentError, AgentMetrics, RebootHost, Sentinel, SentinelError};
use rollboot::node::{self as proto, NodeState, NodeView, ShutdownDrain};
use rollboot_sim::sim::Scenario;
use rollboot_sim::simulate::{sim_config, Harness};

use rollboot_testkit::log::log;

use fake_logind::{closed_within, emit, FakeLogind, PrivateBus};
use rollboot_testkit::fake_logind;

/// The host under the agent: on its Node's boot; its reboot method counts, and (when given the
/// fake logind's connection) makes logind announce the shutdown, as `systemctl reboot` does.
struct TestHost {
    boot: String,
    logind: Option<zbus::Connection>,
    reboots: Arc<AtomicUsize>,
}

impl RebootHost for TestHost {
    async fn reboot(&self, _node: &str, _token: &str) -> Result<(), AgentError> {
        self.reboots.fetch_add(1, Ordering::SeqCst);
        if let Some(c) = &self.logind {
            emit(c, true).await;
        }
        Ok(())
    }

    fn boot_id(&self, _node: &str) -> Option<String> {
        Some(self.boot.clone())
    }
}

/// A sentinel whose answer the test sets.
#[derive(Clone, Default)]
struct TestSentinel(Arc<Mutex<Option<String>>>);

impl Sentinel for TestSentinel {
    async fn check(&self) -> Result<Option<String>, SentinelError> {
        Ok(self.0.lock().unwrap().clone())
    }
}

/// A cluster of 3 nodes (2 pods each), nothing of rollboot started.
async fn cluster() -> Harness {
    log();
    let sc = Scenario {
        nodes: 3,
        pods_per_node: 2,
        ..Scenario::default()
    };
    Harness::start(sc, sim_config("").unwrap()).await.unwrap()
}

/// Starts the real agent of `node` with `logind` (connected to `address`, when given) and
/// returns its metrics.
async fn start_agent(
    h: &Harness,
    node: &str,
    address: Option<&str>,
    host: TestHost,
    sentinel: TestSentinel,
) -> (Arc<AgentMetrics>, tokio::task::JoinHandle<()>) {
    let logind = match address {
        Some(a) => logind::connect_system(node, a).await,
        None => None,
    };
    let metrics = Arc::new(AgentMetrics::default());
    let (client, config, name, m) = (
        h.client.clone(),
        h.config.clone(),
        node.to_string(),
        metrics.clone(),
    );
    let task = tokio::spawn(async move {
        rollboot::agent::run_with_host_shutdowns::<_, _, SystemLogind>(
            client,
            config,
            name,
            host,
            sentinel,
            m,
            logind,
            std::future::pending(),
        )
        .await
        .unwrap();
    });
    (metrics, task)
}

fn host_of(v: &NodeView) -> TestHost {
    TestHost {
        boot: v.boot_id.clone(),
        logind: None,
        reboots: Arc::default(),
    }
}

/// A cluster of 3 nodes, a private bus with a fake logind (`delay_max`), and the real agent of
/// the first node on that bus; `None` where `dbus-daemon` is not installed.
struct OnBus {
    bus: PrivateBus,
    logind: FakeLogind,
    h: Harness,
    name: String,
    metrics: Arc<AgentMetrics>,
    agent: tokio::task::JoinHandle<()>,
}

async fn on_bus(delay_max: Duration) -> Option<OnBus> {
    let bus = PrivateBus::start()?;
    let logind = FakeLogind::serve(&bus, delay_max).await;
    let h = cluster().await;
    let name = h.node_names().await.unwrap()[0].clone();
    let v = h.node(&name).await.unwrap();
    let (metrics, agent) = start_agent(
        &h,
        &name,
        Some(&bus.address),
        host_of(&v),
        TestSentinel::default(),
    )
    .await;
    Some(OnBus {
        bus,
        logind,
        h,
        name,
        metrics,
        agent,
    })
}

/// Waits until node `name` satisfies `cond` (at most `within`).
async fn until(
    h: &Harness,
    name: &str,
    within: Duration,
    cond: impl Fn(&NodeView) -> bool,
) -> NodeView {
    let ok = h
        .wait_for(within, |ns| ns.iter().any(|n| n.name == name && cond(n)))
        .await
        .unwrap();
    let v = h.node(name).await.unwrap();
    assert!(ok, "node {name} did not get there within {within:?}: {v:?}");
    v
}

/// Writes `state` with `state-since` now, as the controller does.
async fn set_state(h: &Harness, name: &str, state: NodeState) {
    let p = proto::patch(
        &[
            (proto::STATE, Some(state.as_str().to_string())),
            (
                proto::STATE_SINCE,
                Some(rollboot::time::annotation(chrono::Utc::now())),
            ),
        ],
        None,
    );
    h.patch_node(name, p).await.unwrap();
}

fn releases(m: &AgentMetrics, cause: &str) -> bool {
    m.render().contains(&format!(
        "rollboot_agent_inhibitor_releases_total{{cause=\"{cause}\"}} 1\n"
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unplanned_shutdown_holds_the_inhibitor_until_the_node_says_drained() {
    let Some(bus) = PrivateBus::start() else {
        return;
    };
    let mut logind = FakeLogind::serve(&bus, Duration::from_secs(300)).await;
    let h = cluster().await;
    let name = h.node_names().await.unwrap()[0].clone();
    // A cycle of long ago left `done`: it must not count as drained.
    set_state(&h, &name, NodeState::Done).await;
    let v = h.node(&name).await.unwrap();
    let (metrics, _agent) = start_agent(
        &h,
        &name,
        Some(&bus.address),
        host_of(&v),
        TestSentinel::default(),
    )
    .await;
    let lock = logind.next_lock().await;
    assert_eq!(
        lock.args,
        [
            "shutdown",
            "rollboot",
            "drain the node before the host shuts down",
            "delay"
        ]
    );
    assert!(
        !closed_within(&lock, Duration::from_millis(300)).await,
        "the inhibitor was let go before any shutdown"
    );

    logind.prepare_for_shutdown(true).await;
    let t0 = Instant::now();
    let v = until(&h, &name, Duration::from_secs(10), |n| n.shutdown_requested).await;
    let at = v.shutdown_requested_at.expect("an RFC 3339 instant");
    assert!((chrono::Utc::now() - at).num_seconds().abs() < 10, "{at}");
    // The controller cordons and drains: the lock is held all along.
    set_state(&h, &name, NodeState::Draining).await;
    assert!(
        !closed_within(&lock, Duration::from_secs(2)).await,
        "the inhibitor was let go while the node was draining"
    );
    // Drained: the controller hands the host back.
    set_state(&h, &name, NodeState::Rebooting).await;
    assert!(
        closed_within(&lock, Duration::from_secs(5)).await,
        "the inhibitor was still held 5 s after the node said rebooting"
    );
    println!(
        "PrepareForShutdown to release: {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    assert!(releases(&metrics, "drained"), "{}", metrics.render());
    assert!(metrics
        .render()
        .contains("\nrollboot_agent_shutdowns_total 1\n"));
    // The request stays for the controller: the host is going down.
    assert!(h.node(&name).await.unwrap().shutdown_requested);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inhibitor_is_let_go_before_loginds_limit_when_the_node_never_says_drained() {
    // logind's limit 4 s: let go after 2 s (the margin is at least 2 s).
    let Some(OnBus {
        bus: _bus,
        mut logind,
        h,
        name,
        metrics,
        agent: _agent,
    }) = on_bus(Duration::from_secs(4)).await
    else {
        return;
    };
    let lock = logind.next_lock().await;
    logind.prepare_for_shutdown(true).await;
    let t0 = Instant::now();
    until(&h, &name, Duration::from_secs(5), |n| n.shutdown_requested).await;
    assert!(
        closed_within(&lock, Duration::from_secs(4)).await,
        "the inhibitor was still held at logind's limit"
    );
    let took = t0.elapsed();
    println!(
        "PrepareForShutdown to release at the deadline: {:.2} s",
        took.as_secs_f64()
    );
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(4),
        "released after {took:?}, not 2 s"
    );
    assert!(releases(&metrics, "deadline"), "{}", metrics.render());
    // Said on the Node for the operator, once the lock is let go: a Warning naming logind's
    // limit and the node's state.
    let said = |notes: &[String]| {
        notes
            .iter()
            .any(|n| n.contains("InhibitDelayMaxUSec") && n.contains("not cordoned"))
    };
    let notes = h
        .events_until("ShutdownNotDrained", Duration::from_secs(5), &said)
        .await
        .unwrap();
    assert!(said(&notes), "{notes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_system_bus_restarts_the_agent_holds_a_lock_again_and_hears_shutdowns() {
    let Some(OnBus {
        mut bus,
        mut logind,
        h,
        name,
        metrics,
        agent: _agent,
    }) = on_bus(Duration::from_secs(300)).await
    else {
        return;
    };
    let first = logind.next_lock().await;
    // Held once the agent has logind's answer (the fake has the call before that).
    let held = |m: &AgentMetrics| m.render().contains("rollboot_agent_inhibitor_held 1\n");
    let t = Instant::now();
    while !held(&metrics) {
        assert!(t.elapsed() < Duration::from_secs(5), "{}", metrics.render());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The bus goes away (its daemon restarted): the agent lets its lock go, since it can no
    // longer hear a shutdown, and reaches logind again once it is back.
    drop(logind);
    bus.restart();
    assert!(
        closed_within(&first, Duration::from_secs(5)).await,
        "the lock was kept with the bus gone"
    );
    let mut logind = FakeLogind::serve(&bus, Duration::from_secs(300)).await;
    let t0 = Instant::now();
    let again = logind
        .lock_within(Duration::from_secs(15))
        .await
        .expect("no new lock within 15 s of the bus coming back");
    println!(
        "the bus back to a new lock: {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    assert_eq!(again.args[0], "shutdown");
    // And it hears the next shutdown.
    logind.prepare_for_shutdown(true).await;
    until(&h, &name, Duration::from_secs(5), |n| n.shutdown_requested).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_shutdown_removes_the_request_and_takes_a_new_inhibitor() {
    let Some(OnBus {
        bus: _bus,
        mut logind,
        h,
        name,
        metrics,
        agent: _agent,
    }) = on_bus(Duration::from_secs(300)).await
    else {
        return;
    };
    let first = logind.next_lock().await;
    logind.prepare_for_shutdown(true).await;
    until(&h, &name, Duration::from_secs(10), |n| n.shutdown_requested).await;
    logind.prepare_for_shutdown(false).await;
    until(&h, &name, Duration::from_secs(10), |n| {
        !n.shutdown_requested
    })
    .await;
    let second = logind.next_lock().await;
    assert!(
        closed_within(&first, Duration::from_secs(5)).await,
        "the first lock is still held"
    );
    assert!(
        !closed_within(&second, Duration::from_millis(500)).await,
        "the new lock was let go"
    );
    assert!(releases(&metrics, "cancelled"), "{}", metrics.render());
    assert!(metrics
        .render()
        .contains("\nrollboot_agent_inhibitor_held 1\n"));
    // The next shutdown is held by the new lock.
    logind.prepare_for_shutdown(true).await;
    until(&h, &name, Duration::from_secs(10), |n| n.shutdown_requested).await;
    assert!(!closed_within(&second, Duration::from_secs(1)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollboots_own_reboot_lets_the_inhibitor_go_at_once_and_asks_for_no_drain() {
    let Some(bus) = PrivateBus::start() else {
        return;
    };
    let mut logind = FakeLogind::serve(&bus, Duration::from_secs(300)).await;
    let mut h = cluster().await;
    let names = h.node_names().await.unwrap();
    let name = names[0].clone();
    let v = h.node(&name).await.unwrap();
    let reboots = Arc::new(AtomicUsize::new(0));
    // Its reboot method makes logind announce the shutdown, as `systemctl reboot` does.
    let host = TestHost {
        logind: Some(logind.conn.clone()),
        reboots: reboots.clone(),
        ..host_of(&v)
    };
    let sentinel = TestSentinel::default();
    *sentinel.0.lock().unwrap() = Some("test".into());
    let (metrics, _agent) = start_agent(&h, &name, Some(&bus.address), host, sentinel).await;
    let lock = logind.next_lock().await;
    // The others' agents are the simulator's; the real controller runs the cycle.
    for n in &names[1..] {
        h.start_agent(n);
    }
    h.start_controller(0).await.unwrap();
    let wait = Duration::from_secs(60);
    let t0 = Instant::now();
    assert!(
        closed_within(&lock, wait).await,
        "the inhibitor was still held {wait:?} after the cycle started (reboots: {})",
        reboots.load(Ordering::SeqCst)
    );
    println!(
        "flag to release for rollboot's own reboot: {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    assert_eq!(reboots.load(Ordering::SeqCst), 1);
    let v = h.node(&name).await.unwrap();
    assert_eq!(v.state, Some(NodeState::Rebooting));
    assert!(
        !v.shutdown_requested,
        "the agent asked a drain for its own reboot"
    );
    assert!(releases(&metrics, "ours"), "{}", metrics.render());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_logind_the_agent_goes_on() {
    let Some(bus) = PrivateBus::start() else {
        return;
    };
    let h = cluster().await;
    let names = h.node_names().await.unwrap();
    // A bus with no logind on it, and no bus at all.
    let none = tempfile::tempdir().unwrap();
    let absent = format!(
        "unix:path={}",
        none.path().join("system_bus_socket").display()
    );
    assert!(logind::connect_system(&names[0], &absent).await.is_none());
    for (name, address) in [
        (&names[0], bus.address.as_str()),
        (&names[1], absent.as_str()),
    ] {
        let v = h.node(name).await.unwrap();
        let sentinel = TestSentinel::default();
        *sentinel.0.lock().unwrap() = Some("test".into());
        let (metrics, agent) = start_agent(&h, name, Some(address), host_of(&v), sentinel).await;
        // It flags its node as ever.
        until(&h, name, Duration::from_secs(10), |n| n.reboot_required).await;
        assert!(!agent.is_finished(), "the agent of {name} stopped");
        assert!(
            metrics
                .render()
                .contains("\nrollboot_agent_inhibitor_held 0\n"),
            "{}",
            metrics.render()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_left_from_before_is_removed_at_start_on_the_boot_the_node_reports() {
    let h = cluster().await;
    let names = h.node_names().await.unwrap();
    let flag = || {
        proto::patch(
            &[(
                proto::SHUTDOWN_REQUESTED,
                Some("2026-09-21T14:13:20.000Z".into()),
            )],
            None,
        )
    };
    let (same, rebooted) = (&names[0], &names[1]);
    h.patch_node(same, flag()).await.unwrap();
    h.patch_node(rebooted, flag()).await.unwrap();
    // On the boot its Node reports: cancelled while no agent ran (or the new boot): removed.
    let v = h.node(same).await.unwrap();
    let (_m, _a) = start_agent(&h, same, None, host_of(&v), TestSentinel::default()).await;
    until(&h, same, Duration::from_secs(10), |n| !n.shutdown_requested).await;
    // A host on a boot its Node does not report yet (the kubelet lags a reboot): left for now.
    let v = h.node(rebooted).await.unwrap();
    let elsewhere = TestHost {
        boot: "a-newer-boot".into(),
        ..host_of(&v)
    };
    let (_m, _a) = start_agent(&h, rebooted, None, elsewhere, TestSentinel::default()).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(h.node(rebooted).await.unwrap().shutdown_requested);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_says_how_an_unplanned_shutdown_would_go_and_sees_it_change() {
    let Some(mut on) = on_bus(Duration::from_secs(3600)).await else {
        return;
    };
    let _lock = on.logind.next_lock().await;
    let (h, name, metrics, logind) = (&on.h, on.name.clone(), &on.metrics, &on.logind);
    let drain = |v: &NodeView| v.agent_host.as_ref().map(|a| a.shutdown_drain);
    let gauge = |state: &str| format!("rollboot_agent_shutdown_drain{{state=\"{state}\"}} 1\n");
    // logind waits an hour, no kubelet inhibitor: drained first, said on the Node.
    let v = until(h, &name, Duration::from_secs(10), |n| {
        drain(n) == Some(ShutdownDrain::Ready)
    })
    .await;
    let host = v.agent_host.unwrap();
    assert_eq!(host.boot_id, v.boot_id);
    assert_eq!(host.inhibit_delay_seconds, Some(3600));
    assert!(
        metrics.render().contains(&gauge("ready")),
        "{}",
        metrics.render()
    );
    // The kubelet restarted with graceful node shutdown on: seen on the agent's next look.
    logind.kubelet_inhibits(true);
    until(h, &name, Duration::from_secs(10), |n| {
        drain(n) == Some(ShutdownDrain::Kubelet)
    })
    .await;
    assert!(
        metrics.render().contains(&gauge("kubelet")),
        "{}",
        metrics.render()
    );
    // Off again, and logind's delay lowered below what a 2m drain needs (3min).
    logind.kubelet_inhibits(false);
    logind.set_delay_max(Duration::from_secs(120));
    let v = until(h, &name, Duration::from_secs(10), |n| {
        drain(n) == Some(ShutdownDrain::ShortDelay)
    })
    .await;
    assert_eq!(v.agent_host.unwrap().inhibit_delay_seconds, Some(120));
    logind.set_delay_max(Duration::from_secs(180));
    until(h, &name, Duration::from_secs(10), |n| {
        drain(n) == Some(ShutdownDrain::Ready)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_logind_the_node_says_nothing_is_drained_before_an_unplanned_shutdown() {
    let h = cluster().await;
    let name = h.node_names().await.unwrap()[0].clone();
    let v = h.node(&name).await.unwrap();
    let (metrics, _agent) =
        start_agent(&h, &name, None, host_of(&v), TestSentinel::default()).await;
    let v = until(&h, &name, Duration::from_secs(10), |n| {
        n.agent_host.is_some()
    })
    .await;
    let host = v.agent_host.unwrap();
    assert_eq!(host.shutdown_drain, ShutdownDrain::NoLogind);
    assert_eq!(host.inhibit_delay_seconds, None);
    assert!(metrics
        .render()
        .contains("rollboot_agent_shutdown_drain{state=\"noLogind\"} 1\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_rebooting_on_the_reboot_it_was_handed_is_let_go_at_once() {
    // A FleetLock host given its 200 reboots itself: its shutdown is the one rollboot granted
    // on a drained node. Held, it would wait logind's whole delay (on real nodes: 162 s of
    // 180 before this was fixed).
    let Some(mut on) = on_bus(Duration::from_secs(300)).await else {
        return;
    };
    let lock = on.logind.next_lock().await;
    let now = rollboot::time::annotation(chrono::Utc::now());
    let p = proto::patch(
        &[
            (proto::STATE, Some("rebooting".into())),
            (proto::STATE_SINCE, Some(now.clone())),
            (proto::HANDED_OFF, Some(now)),
        ],
        Some(true),
    );
    on.h.patch_node(&on.name, p).await.unwrap();
    until(&on.h, &on.name, Duration::from_secs(10), |n| {
        n.handed_off_at().is_some()
    })
    .await;
    // The agent sees the Node through its own watch: give it a moment to.
    tokio::time::sleep(Duration::from_millis(300)).await;
    on.logind.prepare_for_shutdown(true).await;
    assert!(
        closed_within(&lock, Duration::from_secs(2)).await,
        "the inhibitor was held for a reboot rollboot handed the host"
    );
    assert!(releases(&on.metrics, "ours"), "{}", on.metrics.render());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !on.h.node(&on.name).await.unwrap().shutdown_requested,
        "the agent asked a drain for a reboot rollboot granted"
    );
}
