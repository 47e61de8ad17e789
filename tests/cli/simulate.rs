//! `rollboot simulate` as a new user runs it: bad values named before anything runs, a run
//! that ends as soon as it is decided (a halted rollout does not wait for a timeout), a bound
//! that is a lower bound, the rollout's CPU time, and `--serve --rollout` serving a rollout that
//! kubectl can watch.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn simulate(args: &[&str]) -> (i32, serde_json::Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rollboot"))
        .arg("simulate")
        .args(args)
        .output()
        .expect("rollboot runs");
    (
        out.status.code().unwrap_or(-1),
        serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// Runs `rollboot simulate --report json` on the scenario and config given as YAML; also how
/// long it took.
fn simulate_yaml(scenario: &str, config: &str) -> (i32, serde_json::Value, String, Duration) {
    let dir = tempfile::tempdir().unwrap();
    let (s, c) = (
        dir.path().join("scenario.yaml"),
        dir.path().join("config.yaml"),
    );
    std::fs::write(&s, scenario).unwrap();
    std::fs::write(&c, config).unwrap();
    let started = Instant::now();
    let (code, r, err) = simulate(&[
        "--scenario",
        s.to_str().unwrap(),
        "--config",
        c.to_str().unwrap(),
        "--report",
        "json",
    ]);
    (code, r, err, started.elapsed())
}

#[test]
fn impossible_worlds_are_refused_naming_what_is_wrong() {
    let (code, _, err) = simulate(&["--nodes", "0"]);
    assert_ne!(code, 0);
    assert!(
        err.contains("nodes: a simulated cluster needs at least 1 node")
            && !err.contains("panicked"),
        "{err}"
    );
    let (code, _, err) = simulate(&["--nodes", "3", "--flagged", "5"]);
    assert_ne!(code, 0);
    assert!(
        err.contains("--flagged 5: the simulated cluster has 3 node(s)"),
        "{err}"
    );
    let (code, _, err) = simulate(&["--time-factor", "0"]);
    assert_ne!(code, 0);
    assert!(err.contains("timeFactor"), "{err}");
}

/// Every host hangs for the first 3 s, so the first node's reboot never comes back and it
/// fails at the reboot timeout (3 s as run); with
/// `maxFailures` 0 the rollout halts, and the run ends then, saying why, instead of waiting
/// for a bound of minutes.
#[test]
fn a_halted_rollout_ends_the_run_at_once_and_says_why() {
    let (code, r, err, took) = simulate_yaml(
        "nodes: 3\nfaults:\n  stopAfter: 3\n  faults:\n  - {at: 0, node: node-0000, forSeconds: 3, fault: hostHangs}\n  - {at: 0, node: node-0001, forSeconds: 3, fault: hostHangs}\n  - {at: 0, node: node-0002, forSeconds: 3, fault: hostHangs}\n",
        // Durations as an operator writes them: the rehearsal scales them by the time factor
        // (0.01): the reboot timeout 5m runs as 3 s, the drain's 15m as 9 s.
        "reboot: {timeout: 5m}\ndrain: {evictUnreplicated: true, deleteEmptyDirData: true}\n",
    );
    // Exit 0: the one failure is the hung host's, as the faults say; every invariant held.
    assert_eq!(code, 0, "{err}");
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(r["outcome"], "halted", "{r}");
    let why = r["outcomeReason"].as_str().unwrap_or_default();
    assert!(
        why.starts_with("halted: 1 node(s) failed")
            && why.contains("failures.maxFailures 0")
            && why.contains("2 flagged node(s) not rebooted"),
        "{why}"
    );
    assert_eq!(r["failed"].as_array().map(Vec::len), Some(1), "{r}");
    // The bound of this run (the scaled drain, reboot and health-gate timeouts and more) is
    // far longer: ending well before it shows the run ended on the halt.
    let bound = r["bound"]["seconds"].as_f64().unwrap();
    assert!(bound > 20.0, "{}", r["bound"]);
    assert!(
        took < Duration::from_secs_f64(bound / 2.0),
        "the run took {took:?}, bound {bound} s"
    );
}

/// Every budget is `maxUnavailable: 0`, and the config says to wait for such a budget
/// (`drain.whenBlocked.never: wait`): the first drain can never finish, and its failure at
/// the drain's timeout would halt the rollout. The run ends as soon as a budget holds it,
/// naming the budget, the pod and the node, and the exit code says it failed.
#[test]
fn a_budget_that_can_never_allow_a_disruption_ends_the_run_naming_it() {
    let (code, r, err, took) = simulate_yaml(
        "nodes: 3\npdbShare: 1.0\npdbMaxUnavailable: 0\n",
        // The drain's 15m runs as 9 s at the time factor 0.01.
        "drain: {timeout: 15m, evictUnreplicated: true, deleteEmptyDirData: true, whenBlocked: {never: wait}}\n",
    );
    assert_eq!(code, 1, "{err}");
    assert_eq!(r["outcome"], "blocked", "{r}");
    let why = r["outcomeReason"].as_str().unwrap_or_default();
    assert!(
        why.contains("can never allow a disruption (maxUnavailable is 0) and holds pod ")
            && why.contains("on node node-")
            && why.contains("drain.timeout 9s"),
        "{why}"
    );
    assert_eq!(r["pdbViolations"], 0, "{r}");
    // Against a bound that counts three reboots, an overhead of a run with none means nothing.
    assert!(r["overheadPerNodeMs"].is_null(), "{r}");
    assert!(
        took < Duration::from_secs(9),
        "the run took {took:?}: it waited for the drain's timeout"
    );
}

/// The bound counts each node's own pods: with no pods to evict there is no termination to
/// wait for, and the makespan can never be under it (the overhead was negative).
#[test]
fn the_lower_bound_is_a_lower_bound_with_no_pods_and_there_is_no_median_with_two_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("empty.yaml");
    std::fs::write(
        &scenario,
        "nodes: 4\npodsPerNode: 0\nbarePods: 0\nemptyDirPods: 0\nstatefulSets: 0\nrebootTime: 30\n",
    )
    .unwrap();
    let (code, r, err) = simulate(&["--scenario", scenario.to_str().unwrap(), "--report", "json"]);
    assert_eq!(code, 0, "{err}");
    let (makespan, bound) = (
        r["makespanSeconds"].as_f64().unwrap(),
        r["lowerBoundSeconds"].as_f64().unwrap(),
    );
    // 4 nodes x (reboot delay 2 s + reboot 30 s + taint removal 3 s) x 0.01, no grace.
    assert!((bound - 4.0 * 0.35).abs() < 1e-6, "{bound}");
    assert!(
        makespan >= bound,
        "makespan {makespan} under the bound {bound}"
    );
    assert!(r["overheadPerNodeMs"].as_f64().unwrap() >= 0.0);
    let config = dir.path().join("two.yaml");
    std::fs::write(&config, "concurrency: {maxNodes: 2}\n").unwrap();
    let (code, r, err) = simulate(&[
        "--scenario",
        scenario.to_str().unwrap(),
        "--config",
        config.to_str().unwrap(),
        "--report",
        "json",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(r["overheadPerNodeMedianMs"], serde_json::Value::Null);
    assert!((r["lowerBoundSeconds"].as_f64().unwrap() - 2.0 * 0.35).abs() < 1e-6);
}

/// The report's rollout CPU is the process's CPU time over the rollout: some, never more than
/// the whole process used (its set-up and report included), and never more than every core
/// the test may use for the rollout's length (a unit slip, milliseconds for seconds, fails).
#[test]
fn the_rollout_cpu_is_the_processs_cpu_time_over_the_rollout() {
    let (code, r, err) = simulate(&["--nodes", "4", "--report", "json"]);
    assert_eq!(code, 0, "{err}");
    let cpu = r["rolloutCpuSeconds"].as_f64().expect("rolloutCpuSeconds");
    let makespan = r["makespanSeconds"].as_f64().unwrap();
    // Every child this test binary has waited for, this run included: at least its CPU.
    let children = {
        let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
        // SAFETY: getrusage writes a `rusage` into the pointer, which points to one.
        assert_eq!(
            unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, u.as_mut_ptr()) },
            0
        );
        // SAFETY: the call succeeded and wrote the struct.
        let u = unsafe { u.assume_init() };
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        secs(u.ru_utime) + secs(u.ru_stime)
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    assert!(cpu > 0.0, "{r}");
    assert!(
        cpu <= children,
        "rollout {cpu} s, the process {children} s at most"
    );
    // The decision is seen up to 200 ms after it is made: 1 s of slack.
    assert!(
        cpu <= (makespan + 1.0) * cores,
        "rollout {cpu} s of CPU in {makespan} s on {cores} core(s)"
    );
}

/// The report's store lock is the simulated API server's lock over the rollout: taken, held
/// no longer than the rollout lasted (one holder at a time; a unit slip fails), contended no
/// more often than taken, and its share the held time over the makespan.
#[test]
fn the_store_lock_is_reported_over_the_rollout() {
    let (code, r, err) = simulate(&["--nodes", "4", "--report", "json"]);
    assert_eq!(code, 0, "{err}");
    let lock = &r["storeLock"];
    let makespan = r["makespanSeconds"].as_f64().unwrap();
    let taken = lock["taken"].as_u64().expect("storeLock.taken");
    let held = lock["heldSeconds"].as_f64().expect("storeLock.heldSeconds");
    assert!(taken > 0 && held > 0.0, "{lock}");
    assert!(lock["contended"].as_u64().unwrap() <= taken, "{lock}");
    assert!(lock["waitedSeconds"].as_f64().unwrap() >= 0.0, "{lock}");
    // The decision is seen up to 200 ms after it is made: 1 s of slack.
    assert!(held <= makespan + 1.0, "held {held} s in {makespan} s");
    let share = lock["heldShare"].as_f64().unwrap();
    assert!((share - held / makespan).abs() < 1e-9, "{lock}");
}

/// `--serve --rollout`: the rollout runs behind the served API; a client watching it sees every
/// node rebooted (a new boot ID) and uncordoned, and Ctrl-C ends it with the report.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_rollout_serves_a_rollout_a_client_can_watch() {
    use k8s_openapi::api::core::v1::Node;
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let mut child = Command::new(env!("CARGO_BIN_EXE_rollboot"))
        .args([
            "simulate",
            "--serve",
            "--rollout",
            "--nodes",
            "3",
            "--time-factor",
            "0.02",
            // Each node its own loopback InternalIP, which a local FleetLock client can send from.
            "--node-addresses",
            "loopback",
        ])
        .args(["--kubeconfig-out", kubeconfig.to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while !kubeconfig.exists() {
        assert!(Instant::now() < deadline, "no kubeconfig written");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The config the rollout runs with, beside the kubeconfig: status reads the served
    // cluster with it, and sees the rollout's lock and an open window.
    let config_file = dir.path().join("rollboot-sim.config.yaml");
    let text = std::fs::read_to_string(&config_file).expect("the effective config is written");
    rollboot::config::parse_str(&text).unwrap_or_else(|p| panic!("{p:?}\n{text}"));
    let status = Command::new(env!("CARGO_BIN_EXE_rollboot"))
        .args(["status", "-o", "json", "--kubeconfig"])
        .arg(&kubeconfig)
        .arg("--config")
        .arg(&config_file)
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let st: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(st["maintenance"]["allowedNow"], true, "{st}");
    // The same config is the served cluster's ConfigMap: status needs no --config.
    let from_cluster = Command::new(env!("CARGO_BIN_EXE_rollboot"))
        .args(["status", "-o", "json", "--kubeconfig"])
        .arg(&kubeconfig)
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    assert!(
        from_cluster.status.success(),
        "{}",
        String::from_utf8_lossy(&from_cluster.stderr)
    );
    let again: serde_json::Value = serde_json::from_slice(&from_cluster.stdout).unwrap();
    for key in ["lock", "leader"] {
        assert_eq!(again[key]["lease"], st[key]["lease"], "{again}");
    }
    assert_eq!(again["maintenance"]["allowedNow"], true, "{again}");
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    let api: kube::Api<Node> = kube::Api::all(kube::Client::try_from(config).unwrap());
    let boots = |nodes: &[Node]| -> Vec<String> {
        nodes
            .iter()
            .map(|n| {
                n.status
                    .as_ref()
                    .unwrap()
                    .node_info
                    .as_ref()
                    .unwrap()
                    .boot_id
                    .clone()
            })
            .collect()
    };
    let first = api.list(&Default::default()).await.unwrap().items;
    let before = boots(&first);
    assert_eq!(before.len(), 3);
    let ips: std::collections::BTreeSet<std::net::IpAddr> = first
        .iter()
        .filter_map(|n| {
            n.status
                .as_ref()?
                .addresses
                .as_ref()?
                .iter()
                .find(|a| a.type_ == "InternalIP")?
                .address
                .parse()
                .ok()
        })
        .collect();
    assert_eq!(ips.len(), 3, "{ips:?}");
    assert!(
        ips.iter()
            .all(|ip| ip.is_loopback() && *ip != std::net::IpAddr::from([127, 0, 0, 1])),
        "{ips:?}"
    );
    loop {
        let now = api.list(&Default::default()).await.unwrap().items;
        let all_new = boots(&now).iter().zip(&before).all(|(a, b)| a != b);
        let done = now.iter().all(|n| {
            n.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("rollboot.dev/state"))
                .map(String::as_str)
                == Some("done")
                && !n
                    .spec
                    .as_ref()
                    .and_then(|s| s.unschedulable)
                    .unwrap_or(false)
        });
        if all_new && done {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the served rollout did not finish"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The report once decided, then serving until the signal.
    let decided = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(line) = rx.recv_timeout(Duration::from_millis(200)) {
            if line.contains("serving until Ctrl-C") {
                break;
            }
        }
        assert!(Instant::now() < decided, "no `serving until` line");
    }
    assert!(api.list(&Default::default()).await.is_ok(), "still serving");
    sigint(child.id());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{:?}", out.status);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        report.contains("rollout of 3 flagged node(s) out of 3: OK (finished)"),
        "{report}"
    );
}

fn sigint(pid: u32) {
    let status = Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// The same world with the default `drain.whenBlocked.never: fail`: the drain fails its node at
/// the first refused eviction, naming the budget, instead of waiting out `drain.timeout` (9 s
/// as run); the failure halts the rollout.
#[test]
fn a_budget_that_can_never_allow_a_disruption_fails_its_node_at_once_by_default() {
    let (code, r, err, took) = simulate_yaml(
        "nodes: 3\npdbShare: 1.0\npdbMaxUnavailable: 0\n",
        "drain: {timeout: 15m, evictUnreplicated: true, deleteEmptyDirData: true}\n",
    );
    assert_eq!(r["outcome"], "halted", "code {code}: {err}\n{r}");
    assert_eq!(r["failed"].as_array().map(Vec::len), Some(1), "{r}");
    let why = r.to_string();
    assert!(
        why.contains("can never allow a disruption (maxUnavailable is 0)")
            && why.contains("drain.whenBlocked.never is fail"),
        "{why}"
    );
    assert_eq!(r["pdbViolations"], 0, "{r}");
    assert!(
        took < Duration::from_secs(9),
        "the run took {took:?}: it waited for the drain's timeout"
    );
}

/// `--call-hooks`: a simulated rollout with `--config` calls the config's webhooks (here a
/// fire-and-forget beforeDrain hook on a receiver on 127.0.0.1), which it otherwise drops and
/// names in `configIgnored`.
#[test]
fn call_hooks_lets_a_simulated_rollout_call_the_configured_webhooks() {
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let got = Arc::new(AtomicUsize::new(0));
    let seen = got.clone();
    std::thread::spawn(move || {
        for s in listener.incoming() {
            let Ok(mut s) = s else { continue };
            let mut buf = [0u8; 65536];
            let n = s.read(&mut buf).unwrap_or(0);
            if String::from_utf8_lossy(&buf[..n]).starts_with("POST /done") {
                seen.fetch_add(1, Ordering::SeqCst);
            }
            let _ =
                s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        format!("drain: {{evictUnreplicated: true, deleteEmptyDirData: true}}\nhooks: {{beforeDrain: {{webhooks: [{{name: done, url: 'http://127.0.0.1:{port}/done'}}]}}}}\n"),
    )
    .unwrap();
    let c = config.to_str().unwrap();
    let (code, r, err) = simulate(&["--nodes", "2", "--config", c, "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        got.load(Ordering::SeqCst),
        0,
        "a simulation called a webhook"
    );
    assert!(
        r["configIgnored"].to_string().contains("webhook done"),
        "{r}"
    );
    let (code, r, err) = simulate(&["--nodes", "2", "--config", c, "--call-hooks", "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    // Fire-and-forget: sent off the step path, possibly after the run is decided.
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.load(Ordering::SeqCst) < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(got.load(Ordering::SeqCst), 2, "{r}");
}
