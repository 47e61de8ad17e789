//! RBAC drift: a full simulated rollout with the simulator enforcing the committed RBAC of
//! `deploy/` (and the agent admission policy), the controller replicas and the agents each
//! presenting the token of their ServiceAccount. (a) nothing is forbidden and the rollout
//! completes; (b) every grant of the controller's and the agent's roles (verb × resource ×
//! resourceName) allowed at least one call. The world has a StatefulSet with a ReadWriteOnce CSI
//! volume per pod, so the health gate's list and watch of StatefulSets and the drain's reads of
//! claims, volumes, CSI drivers and VolumeAttachments (and the health gate's wait for the moved
//! volumes to be attached again) are among those calls, and its config a
//! `drain.order` rule selecting namespaces (their labels read). An operator pauses twice and one node is
//! rebooted twice, so the Events about the lock and about a Node repeat (kube's recorder then
//! PATCHes them into a series) and the `patch` of Events is among those calls too. `deploy/optional/force-delete-rbac.yaml` is opt-in
//! and not part of the base, so it is not loaded here.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use rollboot_sim::sim::admission::Admission;
use rollboot_sim::sim::rbac::{Enforcement, Identity, Rbac};
use rollboot_sim::sim::Scenario;
use rollboot_sim::simulate::{sim_config, Harness};

fn read(path: &str) -> String {
    std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))).expect(path)
}

fn controller() -> Identity {
    Identity::service_account("rollboot-system", "rollboot-controller")
}

fn agent() -> Identity {
    Identity::service_account("rollboot-agent", "rollboot-agent")
}

/// Has the simulator enforce the RBAC of `files` (and `admission`) on the controller replicas
/// and the agents of `names`, each presenting its ServiceAccount's token.
fn enforce(
    h: &mut Harness,
    names: &[String],
    files: &[&str],
    admission: Option<Admission>,
) -> std::sync::Arc<Enforcement> {
    let mut identities = HashMap::new();
    for i in 0..2 {
        identities.insert(format!("controller-{i}"), controller());
    }
    for n in names {
        identities.insert(format!("agent:{n}"), agent().on_node(n));
    }
    let texts: Vec<String> = files.iter().map(|f| read(f)).collect();
    let rbac = Rbac::from_yaml(&texts.iter().map(String::as_str).collect::<Vec<_>>()).unwrap();
    h.agent_token_prefix = Some("agent:".into());
    h.cluster.enforce(Enforcement {
        identities,
        rbac: Some(rbac),
        admission,
    })
}

/// Sets the lock Lease's holder as an operator would (creating the Lease the first time).
async fn hold_lock(h: &Harness, holder: Option<&str>) {
    use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
    let leases: kube::Api<Lease> =
        kube::Api::namespaced(h.client.clone(), &h.config.lock.namespace);
    let mut l = match leases.get_opt(&h.config.lock.name).await.unwrap() {
        Some(l) => l,
        None => {
            let mut l = Lease::default();
            l.metadata.name = Some(h.config.lock.name.clone());
            l.spec = Some(LeaseSpec::default());
            leases.create(&Default::default(), &l).await.unwrap()
        }
    };
    l.spec.get_or_insert_with(Default::default).holder_identity = holder.map(str::to_string);
    leases
        .replace(&h.config.lock.name, &Default::default(), &l)
        .await
        .unwrap();
}

/// Waits until the Events with `reason` in the lock's namespace add up to `count` occurrences
/// (an Event repeated as a series counts `series.count` times).
async fn wait_event_count(h: &Harness, reason: &str, count: i32) {
    use k8s_openapi::api::events::v1::Event;
    let events: kube::Api<Event> =
        kube::Api::namespaced(h.client.clone(), &h.config.lock.namespace);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let seen: i32 = events
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .map(|e| e.series.as_ref().map_or(1, |s| s.count))
            .sum();
        if seen >= count {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{reason} seen {seen} times, waiting for {count}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_under_the_deploy_rbac_is_never_forbidden_and_uses_every_grant() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(std::env::var("TLOG").unwrap_or("rollboot=warn".into()))
        .with_test_writer()
        .try_init();
    let sc = Scenario {
        nodes: 4,
        pods_per_node: 4,
        stateful_sets: 1,
        stateful_volumes: true,
        ..Scenario::default()
    };
    // A drain.order rule that selects namespaces (get namespaces); the StatefulSet's volumes
    // (get claims, volumes, CSI drivers, VolumeAttachments; the node watched by name), and
    // their reattach (the namespace's pods listed by labels, the replacement's VolumeAttachment).
    let config = sim_config(
        "drain: {order: [{namespaceSelector: 'kubernetes.io/metadata.name=kube-system', order: 5}], volumes: {waitForReattach: true}}",
    )
    .unwrap();
    let mut h = Harness::start(sc, config).await.unwrap();
    let names = h.node_names().await.unwrap();
    let admission = Admission::from_yaml(&read("deploy/admission-policy.yaml")).unwrap();
    let enforced = enforce(
        &mut h,
        &names,
        &["deploy/controller-rbac.yaml", "deploy/agent-rbac.yaml"],
        Some(admission),
    );
    h.start_rollout().await.unwrap();
    // An operator pauses and resumes twice before anything is flagged: the controller's Events
    // about the lock Lease (its namespace), the second of each a repeat (a series PATCH).
    for round in 1..=2 {
        hold_lock(&h, Some("ops-team")).await;
        wait_event_count(&h, "LockHeld", round).await;
        hold_lock(&h, None).await;
        wait_event_count(&h, "LockReleased", round).await;
    }
    h.flag(&names);
    let flagged: BTreeSet<String> = names.iter().cloned().collect();
    let mut done = h
        .wait_for(Duration::from_secs(90), |ns| {
            Harness::finished(ns, &flagged)
        })
        .await
        .unwrap();
    // One node again within minutes: its Events (the controller's and its agent's) repeat.
    let again = names[0].clone();
    h.flag(std::slice::from_ref(&again));
    done &= h
        .wait_for(Duration::from_secs(60), |ns| {
            ns.iter().any(|n| {
                n.name == again && n.state == Some(rollboot::node::NodeState::Done) && !n.flagged()
            }) && h.reboots(&again) == 2
        })
        .await
        .unwrap();
    let rbac = enforced.rbac.as_ref().unwrap();

    // (a) every call allowed, and the rollout went through.
    let denied = rbac.denied();
    assert!(
        denied.is_empty(),
        "forbidden by the deploy RBAC: {denied:#?}"
    );
    assert!(done, "the rollout did not finish under the deploy RBAC");
    for n in &names {
        let want = if *n == again { 2 } else { 1 };
        assert_eq!(h.reboots(n), want, "{n} rebooted {} times", h.reboots(n));
    }

    // (b) no unused grant.
    let used = rbac.used();
    let mut granted = rbac.grants_of(&controller());
    granted.extend(rbac.grants_of(&agent().on_node(&names[0])));
    let unused: Vec<String> = granted.difference(&used).map(|g| g.to_string()).collect();
    assert!(
        unused.is_empty(),
        "granted by deploy/ but never used by a call of the rollout: {unused:#?}"
    );
    assert!(!granted.is_empty());
    for verb in ["list", "watch"] {
        let g = format!("ClusterRole/rollboot-controller: {verb} apps/statefulsets");
        assert!(
            used.iter().any(|u| u.to_string() == g),
            "the health gate never did {g}"
        );
    }
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fleetlock_forwards_are_checked_with_the_one_grant_of_deploy_optional_fleetlock() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(std::env::var("TLOG").unwrap_or("rollboot=warn".into()))
        .with_test_writer()
        .try_init();
    // Two hosts that reboot themselves; their Zincatis ask both replicas in turn, so the
    // standby forwards and the leader reviews the standby's token.
    let sc = Scenario {
        nodes: 3,
        pods_per_node: 2,
        fleetlock_hosts: 2,
        ..Scenario::default()
    };
    let config = sim_config("fleetlock: {listen: '127.0.0.1:0'}").unwrap();
    let mut h = Harness::start(sc, config).await.unwrap();
    let names = h.node_names().await.unwrap();
    let enforced = enforce(
        &mut h,
        &names,
        &[
            "deploy/controller-rbac.yaml",
            "deploy/agent-rbac.yaml",
            "deploy/optional/fleetlock.yaml",
        ],
        None,
    );
    h.fleetlock_hosts = names.iter().take(2).cloned().collect();
    h.start_rollout_flagged(&names).await.unwrap();
    let flagged: BTreeSet<String> = names.iter().cloned().collect();
    let done = h
        .wait_for(Duration::from_secs(90), |ns| {
            Harness::finished(ns, &flagged)
        })
        .await
        .unwrap();
    let rbac = enforced.rbac.as_ref().unwrap();
    let denied = rbac.denied();
    assert!(denied.is_empty(), "forbidden: {denied:#?}");
    assert!(done, "the rollout with FleetLock hosts did not finish");
    assert_eq!(
        h.fleetlock
            .granted
            .load(std::sync::atomic::Ordering::Relaxed),
        2
    );
    let used = rbac.used();
    let optional: Vec<String> = rbac
        .grants_of(&controller())
        .into_iter()
        .filter(|g| g.role == "ClusterRole/rollboot-controller-fleetlock")
        .map(|g| g.to_string())
        .collect();
    assert!(!optional.is_empty());
    for g in &optional {
        assert!(used.iter().any(|u| u.to_string() == *g), "{g} never used");
    }
    h.shutdown().await;
}
