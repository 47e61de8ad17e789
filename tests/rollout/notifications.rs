//! Notifications against a local HTTP receiver (axum on 127.0.0.1): each sink's body and the
//! configured template, the token read from a Secret's file and the URL from the environment,
//! the failure and halt notices, the config errors that name the key; and a hanging or failing
//! endpoint that never delays the rollout, because the sends happen off the controller's step
//! path.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::routing::post;
use axum::Router;
use rollboot::node::NodeState;
use rollboot_sim::sim::Scenario;
use rollboot_sim::simulate::{sim_config, Harness};
use serde_json::Value;

/// One request the receiver got.
#[derive(Clone, Debug)]
struct Got {
    path: String,
    authorization: Option<String>,
    body: Value,
}

#[derive(Clone, Default)]
struct Receiver {
    got: Arc<Mutex<Vec<Got>>>,
    /// Requests answered (a hanging route never answers).
    answered: Arc<Mutex<usize>>,
}

impl Receiver {
    fn got(&self, path_part: &str) -> Vec<Got> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .filter(|g| g.path.contains(path_part))
            .cloned()
            .collect()
    }
}

/// Routes: `/ok/...` answers 204, `/fail/...` 500, `/hang/...` never answers.
async fn receiver() -> (Receiver, String) {
    async fn take(
        State(r): State<Receiver>,
        uri: Uri,
        headers: HeaderMap,
        body: String,
    ) -> StatusCode {
        let path = uri.path_and_query().unwrap().to_string();
        r.got.lock().unwrap().push(Got {
            path: path.clone(),
            authorization: headers
                .get("authorization")
                .map(|v| v.to_str().unwrap().to_string()),
            body: serde_json::from_str(&body).unwrap_or(Value::String(body)),
        });
        if path.starts_with("/hang") {
            std::future::pending::<()>().await;
        }
        *r.answered.lock().unwrap() += 1;
        if path.starts_with("/fail") {
            StatusCode::INTERNAL_SERVER_ERROR
        } else {
            StatusCode::NO_CONTENT
        }
    }
    let r = Receiver::default();
    // A Prometheus stand-in for the `blocked` test: one firing alert.
    async fn alerts() -> String {
        r#"{"status":"success","data":{"alerts":[{"labels":{"alertname":"NodeDown"},"state":"firing"}]}}"#.into()
    }
    let app = Router::new()
        .route("/api/v1/alerts", axum::routing::get(alerts))
        .route("/{*rest}", post(take))
        .with_state(r.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (r, format!("http://{addr}"))
}

fn init_logs() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            std::env::var("TLOG").unwrap_or("rollboot=info,rollboot_sim::sim=warn".into()),
        )
        .with_test_writer()
        .try_init();
}

async fn start(nodes: usize, overrides: &str) -> Harness {
    init_logs();
    let sc = Scenario {
        nodes,
        pods_per_node: 2,
        ..Scenario::default()
    };
    let config = sim_config(&format!("nodes: {{order: name}}\n{overrides}")).unwrap();
    let mut h = Harness::start(sc, config).await.unwrap();
    h.start_controller(0).await.unwrap();
    h.start_all_agents().await.unwrap();
    h
}

/// Flags every node and waits for the rollout to end; returns the names and how long it took.
async fn roll(h: &Harness) -> (Vec<String>, Duration) {
    let names = h.node_names().await.unwrap();
    let set: BTreeSet<String> = names.iter().cloned().collect();
    let t0 = Instant::now();
    h.flag(&names);
    let done = h
        .wait_for(Duration::from_secs(90), |ns| Harness::finished(ns, &set))
        .await
        .unwrap();
    assert!(done, "the rollout did not end");
    (names, t0.elapsed())
}

/// Waits until `cond` holds on the receiver (the sends are asynchronous).
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < Duration::from_secs(15), "never: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn events(got: &[Got]) -> Vec<String> {
    got.iter()
        .map(|g| {
            g.body["event"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_default()
        })
        .collect()
}

/// The value of one sample of the leader's exposition, e.g. `rollboot_x{a="b"}`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_sink_gets_its_body_with_the_template_and_the_secret_read_from_env_and_file() {
    let (rx, base) = receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret\n").unwrap();
    let slack_file = dir.path().join("slack-url");
    std::fs::write(&slack_file, format!("{base}/ok/slack/T0/B0/XYZ")).unwrap();
    // The only environment variable this test binary sets; read by the controller's worker.
    std::env::set_var("ROLLBOOT_TEST_HOOK_URL", format!("{base}/ok/hook?k=v"));
    let overrides = format!(
        "notifications:
  cluster: lab
  templates:
    nodeDone: \"{{node}} is back{{cluster}} after {{duration}} <ok> & {{{{done}}}}\"
  sinks:
    - name: hook
      type: webhook
      urlFrom: {{env: ROLLBOOT_TEST_HOOK_URL}}
      tokenFrom: {{file: {}}}
    - name: slack
      type: slack
      urlFrom: {{file: {}}}
      events: [nodeDone]
    - name: teams
      type: teams
      urlFrom: {{file: {}}}
      events: [rolloutStarted]
",
        token_file.display(),
        slack_file.display(),
        {
            let f = dir.path().join("teams-url");
            std::fs::write(&f, format!("{base}/ok/teams/webhookb2/abc")).unwrap();
            f.display().to_string()
        }
    );
    let h = start(2, &overrides).await;
    let (names, _) = roll(&h).await;
    eventually("2 nodeDone and 1 rolloutStarted at the webhook", || {
        rx.got("/hook").len() >= 3
    })
    .await;
    eventually("2 at slack, 1 at teams", || {
        rx.got("/slack").len() >= 2 && !rx.got("/teams").is_empty()
    })
    .await;

    // The generic webhook: JSON with the event, its fields and the text, and the token.
    let hook = rx.got("/hook");
    assert_eq!(
        events(&hook),
        vec!["rolloutStarted", "nodeDone", "nodeDone"],
        "{hook:?}"
    );
    for g in &hook {
        assert_eq!(g.path, "/ok/hook?k=v", "path and query as configured");
        assert_eq!(g.authorization.as_deref(), Some("Bearer s3cret"));
        assert_eq!(g.body["cluster"], "lab");
        assert!(rollboot::time::parse_annotation(g.body["time"].as_str().unwrap()).is_some());
    }
    // Whichever agent flagged its node first: the order is by name among nodes waiting.
    let first = hook[0].body["node"].as_str().unwrap().to_string();
    assert!(names.contains(&first), "{first}");
    // The agents flag their nodes one by one: the first start may see one or both waiting.
    let pending = hook[0].body["pending"].as_u64().unwrap();
    assert!((1..=2).contains(&pending), "{pending}");
    assert_eq!(
        hook[0].body["text"],
        format!("rollboot (lab): rollout started with node {first} ({pending} node(s) waiting)")
    );
    let done: BTreeSet<String> = hook[1..]
        .iter()
        .map(|g| g.body["node"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(done, names.iter().cloned().collect());
    for g in &hook[1..] {
        let name = g.body["node"].as_str().unwrap();
        let duration = g.body["duration"].as_str().unwrap();
        assert!(duration.ends_with('s'), "{duration}");
        assert_eq!(
            g.body["text"],
            format!("{name} is back (lab) after {duration} <ok> & {{done}}")
        );
    }
    // Slack: only its event, `text` alone, escaped as Slack asks; no token is sent.
    let slack = rx.got("/slack");
    assert_eq!(slack.len(), 2);
    for g in &slack {
        assert_eq!(g.path, "/ok/slack/T0/B0/XYZ");
        assert_eq!(g.authorization, None);
        let text = g.body["text"].as_str().unwrap();
        assert!(text.ends_with(" &lt;ok&gt; &amp; {done}"), "{text}");
        assert_eq!(g.body.as_object().unwrap().len(), 1, "{}", g.body);
    }
    // Teams: one Adaptive Card, the text in its second block.
    let teams = rx.got("/teams");
    assert_eq!(teams.len(), 1);
    let card = &teams[0].body["attachments"][0];
    assert_eq!(teams[0].body["type"], "message");
    assert_eq!(
        card["contentType"],
        "application/vnd.microsoft.card.adaptive"
    );
    assert_eq!(card["content"]["type"], "AdaptiveCard");
    assert_eq!(
        card["content"]["body"][0]["text"],
        "rollboot: rolloutStarted"
    );
    assert!(card["content"]["body"][1]["text"]
        .as_str()
        .unwrap()
        .starts_with("rollboot (lab): rollout started"));

    // Counted, and the phases of both cycles timed.
    let m = h.metrics[0].render();
    assert_eq!(
        sample(
            &m,
            "rollboot_notifications_total{sink=\"hook\",event=\"nodeDone\",outcome=\"sent\"}"
        ),
        Some(2.0)
    );
    assert_eq!(
        sample(
            &m,
            "rollboot_notifications_total{sink=\"slack\",event=\"nodeDone\",outcome=\"sent\"}"
        ),
        Some(2.0)
    );
    for phase in ["drain", "reboot", "health_gate", "cycle"] {
        assert_eq!(
            sample(
                &m,
                &format!("rollboot_phase_duration_seconds_count{{phase=\"{phase}\"}}")
            ),
            Some(2.0),
            "{phase}\n{m}"
        );
    }
    assert_eq!(
        sample(&m, "rollboot_nodes{state=\"done\"}"),
        Some(2.0),
        "{m}"
    );
    assert_eq!(sample(&m, "rollboot_rollout_halted"), Some(0.0));
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_node_is_told_with_its_reason_and_the_rollout_halted() {
    let (rx, base) = receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let url = dir.path().join("url");
    std::fs::write(&url, format!("{base}/ok/hook")).unwrap();
    let overrides = format!(
        "reboot: {{timeout: 3s}}
notifications:
  sinks:
    - name: hook
      type: webhook
      urlFrom: {{file: {}}}
      events: [nodeFailed, rolloutHalted]
",
        url.display()
    );
    let h = start(2, &overrides).await;
    let names = h.node_names().await.unwrap();
    // The first node's host never comes back: its reboot times out.
    h.host.broken.lock().unwrap().insert(names[0].clone());
    h.flag(&names);
    let failed = h
        .wait_for(Duration::from_secs(60), |ns| {
            ns.iter()
                .any(|n| n.name == names[0] && n.state == Some(NodeState::Failed))
        })
        .await
        .unwrap();
    assert!(failed);
    eventually("nodeFailed and rolloutHalted", || {
        rx.got("/hook").len() >= 2
    })
    .await;
    let got = rx.got("/hook");
    assert_eq!(events(&got), vec!["nodeFailed", "rolloutHalted"]);
    for g in &got {
        assert_eq!(g.body["node"], names[0].as_str());
        let reason = g.body["reason"].as_str().unwrap();
        assert!(reason.contains("reboot"), "{reason}");
    }
    assert_eq!(got[1].body["failed"], 1);
    assert_eq!(got[1].body["maxFailures"], 0);
    assert!(got[1].body["text"]
        .as_str()
        .unwrap()
        .contains("rollboot retry NODE"));
    let m = h.metrics[0].render();
    assert_eq!(sample(&m, "rollboot_rollout_halted"), Some(1.0), "{m}");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_or_failing_endpoint_never_delays_a_node() {
    // The baseline: the same world with no notification at all.
    let h = start(3, "").await;
    let (_, baseline) = roll(&h).await;
    h.shutdown().await;

    let (rx, base) = receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, url: String| {
        let p = dir.path().join(name);
        std::fs::write(&p, url).unwrap();
        p.display().to_string()
    };
    let overrides = format!(
        "notifications:
  timeout: 10m
  queueSize: 1
  sinks:
    - name: hangs
      type: webhook
      urlFrom: {{file: {}}}
    - name: fails
      type: slack
      urlFrom: {{file: {}}}
    - name: nosecret
      type: teams
      urlFrom: {{env: ROLLBOOT_TEST_UNSET_VARIABLE}}
",
        write("hang", format!("{base}/hang/hook")),
        write("fail", format!("{base}/fail/slack")),
    );
    let h = start(3, &overrides).await;
    let (names, with_hanging) = roll(&h).await;
    eprintln!(
        "makespan of 3 nodes: {:.1}s without notifications, {:.1}s with a hanging, a failing and an unreadable sink",
        baseline.as_secs_f64(),
        with_hanging.as_secs_f64()
    );
    // Off the step path: the first message (rolloutStarted) reached the hanging endpoint and
    // is still unanswered, yet every node went through its whole cycle.
    let hung = rx.got("/hang");
    assert_eq!(
        hung.len(),
        1,
        "one request in flight, the rest queued or dropped"
    );
    assert_eq!(hung[0].body["event"], "rolloutStarted");
    let nodes = h.nodes().await.unwrap();
    for n in &names {
        let v = nodes.iter().find(|v| v.name == *n).unwrap();
        assert_eq!(v.state, Some(NodeState::Done), "{n}");
        assert_eq!(h.reboots(n), 1, "{n}");
    }
    let m = h.metrics[0].render();
    // queueSize 1: one nodeDone waits behind the hanging send, the other two are dropped.
    assert_eq!(
        sample(
            &m,
            "rollboot_notifications_total{sink=\"hangs\",event=\"nodeDone\",outcome=\"dropped\"}"
        ),
        Some(2.0),
        "{m}"
    );
    eventually("the failing and unreadable sinks' outcomes counted", || {
        let m = h.metrics[0].render();
        sample(&m, "rollboot_notifications_total{sink=\"fails\",event=\"nodeDone\",outcome=\"failed\"}") == Some(3.0)
            && sample(&m, "rollboot_notifications_total{sink=\"nosecret\",event=\"nodeDone\",outcome=\"failed\"}") == Some(3.0)
    })
    .await;
    assert_eq!(
        rx.got("/fail").len(),
        4,
        "rolloutStarted and 3 nodeDone, each once (no retry)"
    );
    assert_eq!(
        *rx.answered.lock().unwrap(),
        4,
        "only the failing endpoint answered"
    );
    // A generous margin: the simulated world's own timing varies from run to run.
    assert!(
        with_hanging < baseline * 2 + Duration::from_secs(10),
        "{with_hanging:?} with a hanging endpoint against {baseline:?} without"
    );
    h.shutdown().await;
}

#[test]
fn a_url_or_token_in_the_config_and_bad_sinks_are_errors_naming_the_key() {
    let text = "notifications:
  sinks:
    - name: a
      type: slack
      url: https://hooks.slack.com/services/T/B/X
      urlFrom: {env: SLACK_URL}
      tokenFrom: {env: TOKEN}
    - name: a
      type: webhook
      urlFrom: {}
      events: []
    - name: c
      type: teams
      urlFrom: {env: OK, file: /x}
    - name: d
      type: webhook
      urlFrom: {file: relative/path}
  templates:
    nodeFailed: \"{node} failed at {windowEnd}\"
    blocked: \"{blockers\"
  blockedAfter: 0s
  queueSize: 0
";
    let problems = rollboot::config::parse_str(text).unwrap_err();
    let said = |path: &str, part: &str| {
        assert!(
            problems
                .iter()
                .any(|p| p.path == path && p.message.contains(part)),
            "no problem at {path} saying {part:?}: {problems:#?}"
        );
    };
    said(
        "notifications.sinks[0].url",
        "must not be written in the config",
    );
    said("notifications.sinks[0].tokenFrom", "only a `webhook` sink");
    said(
        "notifications.sinks[1].name",
        "already the name of notifications.sinks[0]",
    );
    said("notifications.sinks[1].urlFrom", "give `env`");
    said("notifications.sinks[1].events", "empty list");
    said("notifications.sinks[2].urlFrom", "not both");
    said("notifications.sinks[3].urlFrom.file", "absolute path");
    said(
        "notifications.templates.nodeFailed",
        "unknown placeholder `{windowEnd}`",
    );
    said("notifications.templates.blocked", "unclosed");
    said("notifications.blockedAfter", "positive");
    said("notifications.queueSize", "at least 1");
    // Located in the file, as every other problem.
    let url = problems
        .iter()
        .find(|p| p.path == "notifications.sinks[0].url")
        .unwrap();
    assert_eq!(url.line, Some(5));
    // An unknown event name is a structural error naming the key and the known names.
    let e = rollboot::config::parse_str(
        "notifications: {sinks: [{name: a, type: slack, urlFrom: {env: X}, events: [nodeVanished]}]}",
    )
    .unwrap_err();
    assert!(
        e[0].message.contains("nodeVanished") && e[0].message.contains("rolloutHalted"),
        "{e:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_blocked_past_blocked_after_is_told_once_with_its_blockers() {
    let (rx, base) = receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let url = dir.path().join("url");
    std::fs::write(&url, format!("{base}/ok/hook")).unwrap();
    let overrides = format!(
        "blockers: {{prometheus: {{url: {base}}}}}
notifications:
  blockedAfter: 2s
  sinks: [{{name: hook, type: webhook, urlFrom: {{file: {}}}}}]
",
        url.display()
    );
    let h = start(2, &overrides).await;
    let names = h.node_names().await.unwrap();
    h.flag(&names);
    eventually("a blocked notice", || !rx.got("/hook").is_empty()).await;
    // Passes come every 5 s while alerts block: long enough for a repeat to show.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let got = rx.got("/hook");
    assert_eq!(events(&got), vec!["blocked"], "told once per spell");
    let b = &got[0].body;
    assert_eq!(b["pending"], 2);
    assert_eq!(
        b["blockers"],
        serde_json::json!(["1 alert(s) firing in Prometheus: NodeDown"])
    );
    assert!(b["text"].as_str().unwrap().contains("blocked for"), "{b}");
    let m = h.metrics[0].render();
    assert_eq!(
        sample(&m, "rollboot_blockers_active{kind=\"alerts\"}"),
        Some(1.0),
        "{m}"
    );
    assert_eq!(
        sample(&m, "rollboot_nodes{state=\"waiting\"}"),
        Some(2.0),
        "{m}"
    );
    for n in h.nodes().await.unwrap() {
        assert_eq!(n.state, None, "{} started while an alert fired", n.name);
    }
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_window_opening_with_nodes_waiting_is_told() {
    let (rx, base) = receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let url = dir.path().join("url");
    std::fs::write(&url, format!("{base}/ok/hook")).unwrap();
    // Open the first 10 seconds of every minute.
    let overrides = format!(
        "windows: [{{schedule: \"* * * * *\", duration: 10s}}]
notifications:
  sinks: [{{name: hook, type: webhook, urlFrom: {{file: {}}}, events: [windowOpened]}}]
",
        url.display()
    );
    let h = start(2, &overrides).await;
    let schedule = h.config.schedule();
    // Flag the nodes while the window is closed (and not about to open), so the controller
    // sees it closed with work waiting first.
    while schedule.is_allowed(chrono::Utc::now())
        || schedule.next_opening(chrono::Utc::now()).unwrap().start - chrono::Utc::now()
            < chrono::Duration::seconds(5)
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let names = h.node_names().await.unwrap();
    h.flag(&names);
    let opening = schedule.next_opening(chrono::Utc::now()).unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let m = h.metrics[0].render();
    assert_eq!(sample(&m, "rollboot_window_open"), Some(0.0), "{m}");
    assert_eq!(
        sample(&m, "rollboot_window_next_opening_timestamp_seconds"),
        Some(opening.start.timestamp() as f64)
    );
    assert_eq!(
        sample(&m, "rollboot_blockers_active{kind=\"window_closed\"}"),
        Some(1.0),
        "{m}"
    );
    assert!(rx.got("/hook").is_empty(), "nothing opened yet");
    let t0 = Instant::now();
    while rx.got("/hook").is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(70),
            "no windowOpened notice"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let got = rx.got("/hook");
    assert_eq!(events(&got), vec!["windowOpened"]);
    assert!(chrono::Utc::now() >= opening.start);
    assert_eq!(got[0].body["pending"], 2);
    assert_eq!(
        got[0].body["windowEnd"],
        rollboot::time::annotation(opening.end)
    );
    h.shutdown().await;
}

/// Helm wires a notification Secret into the controller as files and variables (skipped where
/// the Helm library of helm-python-sdk is not installed).
#[test]
fn the_helm_chart_gives_the_controller_a_notification_secret_as_files_and_variables() {
    let root = env!("CARGO_MANIFEST_DIR");
    let probe = std::process::Command::new("python3")
        .args(["-c", "import helm_python"])
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        eprintln!("helm-python-sdk not installed; the chart was not rendered");
        return;
    }
    let values = r#"{"controller": {"secretMount": "rollboot-notifications", "extraEnv": [
        {"name": "SLACK_WEBHOOK_URL", "valueFrom": {"secretKeyRef": {"name": "rollboot-notifications", "key": "slack-url"}}}]}}"#;
    let out = std::process::Command::new("python3")
        .args(["deploy/helm/render.py", "--values", values])
        .current_dir(root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let deployment = text
        .split("\n---\n")
        .find(|d| d.contains("kind: Deployment"))
        .unwrap();
    let d: k8s_openapi::api::apps::v1::Deployment = yaml_serde::from_str(deployment).unwrap();
    let pod = d.spec.unwrap().template.spec.unwrap();
    let c = &pod.containers[0];
    let env = c.env.as_ref().unwrap();
    let slack = env.iter().find(|e| e.name == "SLACK_WEBHOOK_URL").unwrap();
    let key = slack
        .value_from
        .as_ref()
        .unwrap()
        .secret_key_ref
        .as_ref()
        .unwrap();
    assert_eq!(
        (key.name.as_str(), key.key.as_str()),
        ("rollboot-notifications", "slack-url")
    );
    let mount = c
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .find(|m| m.mount_path == "/etc/rollboot-secrets")
        .unwrap();
    assert_eq!(mount.read_only, Some(true));
    let vol = pod
        .volumes
        .unwrap()
        .into_iter()
        .find(|v| v.name == mount.name)
        .unwrap();
    assert_eq!(
        vol.secret.unwrap().secret_name.as_deref(),
        Some("rollboot-notifications")
    );
}
