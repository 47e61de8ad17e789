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
//! and not part of the base, so it is not loaded here. The optional operators' role
//! (`deploy/optional/operator-rbac.yaml`) is checked the same way, with every command an
//! operator runs.

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
        // The controller lists NodeMaintenances while a node waits (list nodemaintenances).
        node_maintenance: Some(rollboot_sim::sim::scenario::NodeMaintenance {
            installed: true,
            operator: false,
        }),
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

/// A process of the binary, killed when the test ends, whatever its outcome: a failed
/// assertion must leave no process running, nor the runtime waiting on a read of its output.
struct Watching(std::process::Child);

impl Drop for Watching {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs the `rollboot` binary against `kubeconfig`: (exit code, stdout, stderr).
async fn rollboot(kubeconfig: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_rollboot"));
    cmd.args(args)
        .env("KUBECONFIG", kubeconfig)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("RUST_LOG");
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// The operators' role, `deploy/optional/operator-rbac.yaml`: every command an operator runs
/// (status, `status --watch`, plan, pause, resume, request, retry), as a member of its group
/// and without a config file (the controller's ConfigMap is read), is (a) never forbidden and
/// (b) uses every grant of the role. The world has volumes (plan lists claims, volumes and CSI
/// drivers) and the config a drain.order rule selecting namespaces (plan lists them); the first
/// pause creates the lock and the resume replaces it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_role_lets_every_command_run_and_each_grant_is_used() {
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use rollboot::node::{REBOOT_REQUESTED, STATE, STATE_SINCE};
    use std::io::{BufRead, Read};
    let sc = Scenario {
        nodes: 3,
        pods_per_node: 2,
        stateful_sets: 1,
        stateful_volumes: true,
        ..Scenario::default()
    };
    let h = Harness::start(sc, sim_config("").unwrap()).await.unwrap();
    let operator = Identity {
        user: "alice".into(),
        groups: vec!["rollboot-operators".into(), "system:authenticated".into()],
        node: None,
    };
    let rbac = Rbac::from_yaml(&[&read("deploy/optional/operator-rbac.yaml")]).unwrap();
    let enforced = h.cluster.enforce(Enforcement {
        identities: HashMap::from([("operator".to_string(), operator.clone())]),
        rbac: Some(rbac),
        admission: None,
    });
    let namespaces: kube::Api<Namespace> = kube::Api::all(h.client.clone());
    if namespaces
        .get_opt("rollboot-system")
        .await
        .unwrap()
        .is_none()
    {
        let ns =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "rollboot-system"}}));
        namespaces
            .create(&Default::default(), &ns.unwrap())
            .await
            .unwrap();
    }
    let config_maps: kube::Api<ConfigMap> =
        kube::Api::namespaced(h.client.clone(), "rollboot-system");
    let cm = serde_json::json!({
        "metadata": {"name": "rollboot-config"},
        "data": {"rollboot.yaml":
            "drain: {order: [{namespaceSelector: 'kubernetes.io/metadata.name=kube-system', order: 5}]}\n"},
    });
    config_maps
        .create(&Default::default(), &serde_json::from_value(cm).unwrap())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    h.cluster.write_kubeconfig(&kc, "operator").unwrap();

    for (args, codes) in [
        (&["status"][..], &[0][..]),
        (&["plan"], &[0, 3]),
        (&["explain", "node-0000"], &[0, 3]),
        (&["pause", "--reason", "drill"], &[0]),
        (&["resume"], &[0]),
        (&["request", "node-0000"], &[0]),
    ] {
        let (code, out, err) = rollboot(&kc, args).await;
        assert!(codes.contains(&code), "{args:?}: {code}\n{out}{err}");
    }
    h.patch_node(
        "node-0001",
        serde_json::json!({"metadata": {"annotations": {
            STATE: "failed", STATE_SINCE: "2026-01-01T00:00:00Z"}}}),
    )
    .await
    .unwrap();
    let (code, out, err) = rollboot(&kc, &["retry", "node-0001"]).await;
    assert_eq!(code, 0, "{out}{err}");

    // status --watch until node-0000, requested, is done (as the controller would write it).
    let mut child = Watching(
        std::process::Command::new(env!("CARGO_BIN_EXE_rollboot"))
            .args(["status", "--watch", "--until-done"])
            .env("KUBECONFIG", &kc)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("RUST_LOG")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let stdout = child.0.stdout.take().unwrap();
    let mut stderr = child.0.stderr.take().unwrap();
    let (reader, first) = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::task::spawn_blocking(move || {
            let mut r = std::io::BufReader::new(stdout);
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            (r, line)
        }),
    )
    .await
    .expect("status --watch said nothing within 30 s")
    .unwrap();
    assert!(first.contains(" node-0000 flagged, waiting"), "{first}");
    // Listed; each watcher then starts its watch: wait for the three before the change, which
    // would otherwise end the watch before a Lease's watch was asked for.
    let watching = |used: &BTreeSet<rollboot_sim::sim::rbac::Grant>| {
        [
            ("nodes", ""),
            ("leases", "rollboot-leader"),
            ("leases", "rollboot-lock"),
        ]
        .iter()
        .all(|(resource, name)| {
            used.iter()
                .any(|g| g.verb == "watch" && g.resource == *resource && g.resource_name == *name)
        })
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !watching(&enforced.rbac.as_ref().unwrap().used()) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "status --watch did not watch the Nodes and both Leases within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    h.patch_node(
        "node-0000",
        serde_json::json!({"metadata": {"annotations": {
            REBOOT_REQUESTED: null, STATE: "done", STATE_SINCE: "2026-01-01T00:00:00Z"}}}),
    )
    .await
    .unwrap();
    let (rest, err) = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::task::spawn_blocking(move || {
            let (mut reader, mut rest, mut err) = (reader, String::new(), String::new());
            reader.read_to_string(&mut rest).unwrap();
            stderr.read_to_string(&mut err).unwrap();
            (rest, err)
        }),
    )
    .await
    .expect("status --watch --until-done did not end")
    .unwrap();
    let code = child.0.wait().unwrap().code();
    assert_eq!(code, Some(0), "{first}{rest}{err}");

    let rbac = enforced.rbac.as_ref().unwrap();
    let denied = rbac.denied();
    assert!(
        denied.is_empty(),
        "forbidden by deploy/optional/operator-rbac.yaml: {denied:#?}"
    );
    let used = rbac.used();
    let unused: Vec<String> = rbac
        .grants_of(&operator)
        .difference(&used)
        .map(|g| g.to_string())
        .collect();
    assert!(
        unused.is_empty(),
        "granted by deploy/optional/operator-rbac.yaml but used by no command: {unused:#?}"
    );
    h.shutdown().await;
}
