//! Alertmanager (issue 25): a silence per node while it is in maintenance
//! (`silences.alertmanager`) and the blocker on active, unsilenced alerts
//! (`blockers.alertmanager`), played on the simulator against an Alertmanager look-alike on
//! 127.0.0.1 that keeps silences as Alertmanager does (`POST /api/v2/silences` answering a
//! UUID, `GET` and `DELETE /api/v2/silence/{id}`), answers `GET /api/v2/alerts` with its active
//! alerts, silenced ones left out when asked for `silenced=false`, and keeps every request it
//! gets (method and target as sent). Its alerts: `NodeRebooting{node}` for every node in
//! `draining`, `rebooting` or `verifying` (an alert the reboot itself causes), and `Noise` while
//! the test keeps it on.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Path, Query, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::{get, post};
use axum::{Json, Router};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use rollboot::node::NodeState;
use rollboot::silences::Matcher;
use rollboot_sim::sim::Scenario;
use rollboot_sim::simulate::{sim_config, Harness};
use serde_json::{json, Value};

use rollboot_testkit::log::log;

/// A silence as the look-alike keeps it, with the silenced node's state when it was made and
/// when it was expired.
#[derive(Clone, Debug)]
struct Kept {
    matchers: Vec<Matcher>,
    created_by: String,
    comment: String,
    expired: bool,
    state_at_create: Option<String>,
    state_at_expire: Option<String>,
}

#[derive(Clone, Default)]
struct Am {
    silences: Arc<Mutex<BTreeMap<String, Kept>>>,
    noise: Arc<Mutex<bool>>,
    /// Every request, `METHOD target` as sent.
    requests: Arc<Mutex<Vec<String>>>,
    /// The Nodes, once the cluster runs (the config names the look-alike's URL first).
    nodes: Arc<Mutex<Option<Api<Node>>>>,
}

impl Am {
    async fn states(&self) -> BTreeMap<String, String> {
        let Some(api) = self.nodes.lock().unwrap().clone() else {
            return BTreeMap::new();
        };
        let list = api.list(&Default::default()).await.unwrap().items;
        list.into_iter()
            .map(|n| {
                let state = n
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("rollboot.dev/state").cloned())
                    .unwrap_or_default();
                (n.metadata.name.unwrap_or_default(), state)
            })
            .collect()
    }

    /// The node a silence is about (its `node="..."` matcher).
    fn node_of(matchers: &[Matcher]) -> Option<String> {
        matchers
            .iter()
            .find(|m| m.name == "node" && !m.is_regex)
            .map(|m| m.value.clone())
    }
}

fn matches(m: &Matcher, labels: &BTreeMap<String, String>) -> bool {
    let v = labels.get(&m.name).cloned().unwrap_or_default();
    let hit = if m.is_regex {
        regex::Regex::new(&format!("^(?:{})$", m.value))
            .unwrap()
            .is_match(&v)
    } else {
        v == m.value
    };
    hit == m.is_equal
}

async fn create(State(am): State<Am>, Json(body): Json<Value>) -> Json<Value> {
    let matchers: Vec<Matcher> = serde_json::from_value(body["matchers"].clone()).unwrap();
    let states = am.states().await;
    let state = Am::node_of(&matchers).and_then(|n| states.get(&n).cloned());
    let mut s = am.silences.lock().unwrap();
    // A UUID, as Alertmanager makes them.
    let id = format!("00000000-0000-4000-8000-{:012x}", s.len() + 1);
    s.insert(
        id.clone(),
        Kept {
            matchers,
            created_by: body["createdBy"].as_str().unwrap_or_default().into(),
            comment: body["comment"].as_str().unwrap_or_default().into(),
            expired: false,
            state_at_create: state,
            state_at_expire: None,
        },
    );
    Json(json!({"silenceID": id}))
}

async fn expire(State(am): State<Am>, Path(id): Path<String>) -> axum::http::StatusCode {
    let states = am.states().await;
    let mut s = am.silences.lock().unwrap();
    match s.get_mut(&id) {
        Some(k) => {
            k.expired = true;
            k.state_at_expire = Am::node_of(&k.matchers).and_then(|n| states.get(&n).cloned());
            axum::http::StatusCode::OK
        }
        None => axum::http::StatusCode::NOT_FOUND,
    }
}

async fn read(
    State(am): State<Am>,
    Path(id): Path<String>,
) -> Result<Json<Value>, axum::http::StatusCode> {
    let s = am.silences.lock().unwrap();
    let k = s.get(&id).ok_or(axum::http::StatusCode::NOT_FOUND)?;
    let state = if k.expired { "expired" } else { "active" };
    Ok(Json(json!({
        "id": id, "createdBy": k.created_by, "comment": k.comment,
        "matchers": k.matchers, "status": {"state": state},
    })))
}

/// Keeps each request's method and target (path and query, as sent) before it is answered.
async fn keep(State(am): State<Am>, req: Request, next: Next) -> Response {
    am.requests
        .lock()
        .unwrap()
        .push(format!("{} {}", req.method(), req.uri()));
    next.run(req).await
}

async fn alerts(State(am): State<Am>, Query(q): Query<Vec<(String, String)>>) -> Json<Value> {
    let mut active: Vec<BTreeMap<String, String>> = Vec::new();
    for (node, state) in am.states().await {
        if matches!(state.as_str(), "draining" | "rebooting" | "verifying") {
            active.push(BTreeMap::from([
                ("alertname".to_string(), "NodeRebooting".to_string()),
                ("node".to_string(), node),
            ]));
        }
    }
    if *am.noise.lock().unwrap() {
        active.push(BTreeMap::from([(
            "alertname".to_string(),
            "Noise".to_string(),
        )]));
    }
    let unsilenced_only = q.iter().any(|(k, v)| k == "silenced" && v == "false");
    let filters: Vec<Matcher> = q
        .iter()
        .filter(|(k, _)| k == "filter")
        .map(|(_, v)| Matcher::parse(v).unwrap())
        .collect();
    let silences = am.silences.lock().unwrap().clone();
    let out: Vec<Value> = active
        .into_iter()
        .filter(|labels| filters.iter().all(|f| matches(f, labels)))
        .filter(|labels| {
            !unsilenced_only
                || !silences
                    .values()
                    .any(|s| !s.expired && s.matchers.iter().all(|m| matches(m, labels)))
        })
        .map(|labels| json!({"labels": labels}))
        .collect();
    Json(Value::Array(out))
}

async fn look_alike() -> (Am, String) {
    let am = Am::default();
    let app = Router::new()
        .route("/api/v2/silences", post(create))
        .route("/api/v2/silence/{id}", get(read).delete(expire))
        .route("/api/v2/alerts", get(alerts))
        .fallback(|| async { axum::http::StatusCode::NOT_FOUND })
        .layer(axum::middleware::from_fn_with_state(am.clone(), keep))
        .with_state(am.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (am, format!("http://{addr}"))
}

/// A cluster of `nodes` whose reboots take 3 s, rollboot with `extra` config (`{url}`: the
/// look-alike's); controllers and agents running, nothing flagged.
async fn cluster(nodes: usize, extra: &str, noise: bool) -> (Harness, Am) {
    log();
    let (am, url) = look_alike().await;
    *am.noise.lock().unwrap() = noise;
    let sc = Scenario {
        nodes,
        pods_per_node: 1,
        reboot_time: 300.0,
        ..Scenario::default()
    };
    let config = sim_config(&format!(
        "nodes: {{order: name}}\n{}",
        extra.replace("{url}", &url)
    ))
    .unwrap();
    let mut h = Harness::start(sc, config).await.unwrap();
    *am.nodes.lock().unwrap() = Some(Api::all(h.client.clone()));
    h.start_rollout().await.unwrap();
    (h, am)
}

async fn until(
    h: &Harness,
    what: &str,
    secs: u64,
    cond: impl Fn(&[rollboot::node::NodeView]) -> bool,
) {
    let done = h
        .wait_for(Duration::from_secs(secs), |ns| cond(ns))
        .await
        .unwrap();
    assert!(
        done,
        "{what} within {secs}s: {:?}",
        h.nodes().await.unwrap()
    );
}

fn state_of(ns: &[rollboot::node::NodeView], name: &str) -> Option<NodeState> {
    ns.iter().find(|n| n.name == name).and_then(|n| n.state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_node_is_silenced_from_before_its_drain_until_its_cycle_ends() {
    let (h, am) = cluster(
        2,
        "silences: {alertmanager: {url: '{url}', matchers: ['node=\"{{node}}\"', 'instance=~\"{{node}}:.*\"']}}",
        false,
    )
    .await;
    let names = h.node_names().await.unwrap();
    h.flag(&names);
    until(&h, "both done", 90, |ns| {
        names
            .iter()
            .all(|n| state_of(ns, n) == Some(NodeState::Done))
    })
    .await;
    let kept = am.silences.lock().unwrap().clone();
    assert_eq!(kept.len(), 2, "{kept:?}");
    for (id, k) in &kept {
        let node = Am::node_of(&k.matchers).unwrap();
        assert!(names.contains(&node), "{id}: {k:?}");
        // Made before the drain (the node cordoned, not yet draining), expired before `done`
        // (while the node was verified), with both matchers, the node's name regex-quoted.
        assert_eq!(
            k.state_at_create.as_deref(),
            Some("cordoning"),
            "{id}: {k:?}"
        );
        assert!(k.expired, "{id} was not expired: {k:?}");
        assert_eq!(
            k.state_at_expire.as_deref(),
            Some("verifying"),
            "{id}: {k:?}"
        );
        let inst = k.matchers.iter().find(|m| m.name == "instance").unwrap();
        assert_eq!(inst.value, format!("{}:.*", regex::escape(&node)));
    }
    // The IDs are not left on the Nodes.
    for n in h.nodes().await.unwrap() {
        assert_eq!(n.silence_id, None, "{}", n.name);
    }
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_blocker_waits_for_unsilenced_alerts_but_not_for_a_rebooting_node_s_silenced_ones() {
    let (h, am) = cluster(
        2,
        "concurrency: {maxNodes: 2}\nsilences: {alertmanager: {url: '{url}'}}\nblockers: {alertmanager: {url: '{url}'}}",
        true,
    )
    .await;
    let names = h.node_names().await.unwrap();
    let (a, b) = (names[0].clone(), names[1].clone());
    h.flag(std::slice::from_ref(&a));
    // An unsilenced alert blocks: nothing starts while it is active.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ns = h.nodes().await.unwrap();
    assert_eq!(
        state_of(&ns, &a),
        None,
        "{a} started while Noise was active"
    );
    *am.noise.lock().unwrap() = false;
    until(&h, "a rebooting", 30, |ns| {
        state_of(ns, &a) == Some(NodeState::Rebooting)
    })
    .await;
    // `a`'s own NodeRebooting alert is active but silenced: `b` starts beside it.
    let started = Instant::now();
    h.flag(std::slice::from_ref(&b));
    until(&h, "b started while a is in maintenance", 30, |ns| {
        state_of(ns, &b).is_some()
    })
    .await;
    let ns = h.nodes().await.unwrap();
    assert_ne!(
        state_of(&ns, &a),
        Some(NodeState::Done),
        "{b} started only after {a} was done ({:?})",
        started.elapsed()
    );
    until(&h, "both done", 90, |ns| {
        [&a, &b]
            .iter()
            .all(|n| state_of(ns, n) == Some(NodeState::Done))
    })
    .await;
    h.shutdown().await;
}

/// The value of `rollboot.dev/silence-id` that once made the controller send `DELETE
/// /api/v2/silence/../../../admin?x=1` with its own Alertmanager token.
const FORGED: &str = "../../../admin?x=1";

async fn write_silence_id(h: &Harness, node: &str, value: &str) {
    let api: Api<Node> = Api::all(h.client.clone());
    let p = json!({"metadata": {"annotations": {"rollboot.dev/silence-id": value}}});
    api.patch(node, &PatchParams::default(), &Patch::Merge(&p))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silence_id_that_is_no_uuid_is_sent_nowhere_and_a_real_one_still_expires() {
    let (h, am) = cluster(3, "silences: {alertmanager: {url: '{url}'}}", false).await;
    let names = h.node_names().await.unwrap();
    let (a, b, c) = (names[0].clone(), names[1].clone(), names[2].clone());
    // `a` carries a forged ID before its cycle (as if left by an earlier one): it is not
    // expired, and `a` still gets its own silence, expired at its cycle's end.
    write_silence_id(&h, &a, FORGED).await;
    h.flag(std::slice::from_ref(&a));
    until(&h, "a done", 90, |ns| {
        state_of(ns, &a) == Some(NodeState::Done)
    })
    .await;
    // `b`'s recorded ID is forged while it is in maintenance: nothing is sent for it, and its
    // silence is left to end on its own.
    h.flag(std::slice::from_ref(&b));
    until(&h, "b's silence recorded", 60, |ns| {
        ns.iter()
            .any(|n| n.name == b && n.silence_id.is_some() && n.state.is_some())
    })
    .await;
    write_silence_id(&h, &b, FORGED).await;
    until(&h, "b done", 90, |ns| {
        state_of(ns, &b) == Some(NodeState::Done)
    })
    .await;
    // `c`'s is rewritten to a real ID of an operator's silence: rollboot never expires a
    // silence it did not make for the node.
    let operator_s = "00000000-0000-4000-8000-0000000000ff".to_string();
    am.silences.lock().unwrap().insert(
        operator_s.clone(),
        Kept {
            matchers: vec![Matcher::parse("team=db").unwrap()],
            created_by: "alice".into(),
            comment: "database migration".into(),
            expired: false,
            state_at_create: None,
            state_at_expire: None,
        },
    );
    h.flag(std::slice::from_ref(&c));
    until(&h, "c's silence recorded", 60, |ns| {
        ns.iter()
            .any(|n| n.name == c && n.silence_id.is_some() && n.state.is_some())
    })
    .await;
    write_silence_id(&h, &c, &operator_s).await;
    until(&h, "c done", 90, |ns| {
        state_of(ns, &c) == Some(NodeState::Done)
    })
    .await;

    let requests = am.requests.lock().unwrap().clone();
    let uuid = regex::Regex::new(
        r"^(POST /api/v2/silences|(GET|DELETE) /api/v2/silence/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$",
    )
    .unwrap();
    for r in &requests {
        assert!(
            uuid.is_match(r),
            "a request that is not a silence's: {r}\nall: {requests:?}"
        );
    }
    let kept = am.silences.lock().unwrap().clone();
    let of = |node: &str| {
        kept.iter()
            .find(|(_, k)| Am::node_of(&k.matchers).as_deref() == Some(node))
            .map(|(id, k)| (id.clone(), k.clone()))
            .unwrap_or_else(|| panic!("no silence of {node}: {kept:?}"))
    };
    let (a_id, a_kept) = of(&a);
    assert!(
        a_kept.expired,
        "{a}'s own silence was not expired: {kept:?}"
    );
    assert!(
        requests.contains(&format!("DELETE /api/v2/silence/{a_id}")),
        "{requests:?}"
    );
    let (b_id, b_kept) = of(&b);
    assert!(
        !b_kept.expired,
        "{b}'s silence was expired though its ID was forged: {kept:?}"
    );
    assert!(
        !requests
            .iter()
            .any(|r| r.contains(&b_id) && r.starts_with("DELETE")),
        "{requests:?}"
    );
    assert!(
        !kept[&operator_s].expired,
        "the operator's silence was expired: {kept:?}"
    );
    assert!(
        !requests.contains(&format!("DELETE /api/v2/silence/{operator_s}")),
        "{requests:?}"
    );
    // Said, with the node's key and the value.
    let notes = h.events("SilenceIdRejected").await.unwrap();
    assert!(
        notes
            .iter()
            .any(|n| n.contains("rollboot.dev/silence-id") && n.contains(FORGED)),
        "{notes:?}"
    );
    for n in h.nodes().await.unwrap() {
        assert_eq!(n.silence_id, None, "{}", n.name);
    }
    h.shutdown().await;
}
