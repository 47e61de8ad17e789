//! The simulator against a real kube-apiserver, request by request.
//!
//! Each recording `tests/golden/NNN-*.json` of the ranges of this file (160-199: rollboot's own
//! requests under the RBAC and admission policies of `deploy/`, an agent's Node writes, probes
//! of the admission `request` variable...; 200-229: CSIDrivers, PersistentVolumes, their claims
//! and VolumeAttachments, with what kube-controller-manager's PV controller and its
//! pv-/pvc-protection controllers make of them) is a request with the answer a real
//! kube-apiserver v1.36.2 gave. Every test run sends the same requests, in file order, to the
//! simulator enforcing the same RBAC and admission policies, as the same identities, and checks
//! the status code and each field listed in `compare`. A recording with `after_seconds` is sent
//! that long after the one before it; one with `until` is sent again (each second on the real
//! server, every 50 ms here) until its answer has that status and those fields, for at most
//! `until.seconds`: the controllers of either cluster act a moment after a write, and the last
//! answer is the one recorded and compared.
//!
//! The recordings come from this file too. With a control plane of `../shared/realcluster/`
//! running (its `up.sh`; for 160-199 also `fake-kubelet.py` with nodes `node-1` and `node-2`
//! and `kubectl apply -k deploy/`):
//!
//! ```sh
//! ROLLBOOT_RECORD_GOLDEN=$RUN_DIR cargo test --test sim apiserver_differential:: -- --ignored --nocapture
//! ```
//!
//! rewrites the `response` of recordings 160-229 (`ROLLBOOT_RECORD_ONLY=190,191` or
//! `ROLLBOOT_RECORD_ONLY=200-229`: of those only) with what that server answers (after a set-up
//! that writes admission policies, 3 s later: the server enforces them once its informers have
//! them; it also applies `tests/golden/probe/vap-probe.yaml`, the probe policy of 170-179, and
//! makes the ServiceAccount tokens with kubectl). The volume recordings 200-229 create what
//! they use (namespace `golden-volumes`, CSIDriver `golden.csi.rollboot.dev`, Node
//! `golden-volumes-node`) and expect not to find it: record them on a control plane they have
//! not run on (a new `RUN_DIR`).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use rollboot_sim::sim::admission::Admission;
use rollboot_sim::sim::rbac::{Enforcement, Identity, Rbac};
use rollboot_sim::sim::{Cluster, Scenario};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The recordings of this file: rollboot's requests under its policies, then the volume kinds.
const RECORDED_BY_THIS_FILE: [std::ops::RangeInclusive<u32>; 2] = [160..=199, 200..=229];

fn recorded_by_this_file(n: u32) -> bool {
    RECORDED_BY_THIS_FILE.iter().any(|r| r.contains(&n))
}

/// This crate's directory (the recordings are in its `tests/golden/`).
fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The repository's top (`deploy/`).
fn repo() -> PathBuf {
    root().join("../..")
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn read_repo(path: &str) -> String {
    std::fs::read_to_string(repo().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// One request as sent.
#[derive(Clone, Debug, Deserialize, Serialize)]
struct Request {
    /// `admin` (the cluster-admin client certificate), `controller`, `agent:NODE` (the agent's
    /// token bound to its pod on NODE: carries the node-name claim), `agent` (an unbound agent
    /// token: no claim), `probe:NODE`, `probe`.
    #[serde(default = "admin", skip_serializing_if = "is_admin")]
    identity: String,
    method: String,
    path: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    content_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    body: Option<Value>,
    /// A binary body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    body_base64: Option<String>,
}

fn admin() -> String {
    "admin".into()
}

fn is_admin(s: &String) -> bool {
    s == "admin"
}

/// A set-up request: its answer must be one of `status`.
#[derive(Clone, Debug, Deserialize, Serialize)]
struct Step {
    #[serde(flatten)]
    request: Request,
    status: Vec<u16>,
}

#[derive(Clone, Debug, Default, Deserialize, Serialize)]
struct Response {
    status: u16,
    #[serde(default)]
    body: Value,
    /// The `Warning` headers, compared when `compare` lists `header:Warning`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<String>,
}

/// The `compare` entry that compares the `Warning` headers rather than a field of the body.
const WARNING_HEADERS: &str = "header:Warning";

/// What a recording's request is sent again until: the answer's status and fields.
#[derive(Clone, Debug, Deserialize, Serialize)]
struct Until {
    status: u16,
    /// JSON pointers into the body, and the value each must have.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    fields: BTreeMap<String, Value>,
    /// Given up after this long: the last answer stands.
    seconds: u64,
}

impl Until {
    fn met(&self, r: &Response) -> bool {
        r.status == self.status
            && self
                .fields
                .iter()
                .all(|(p, v)| r.body.pointer(p) == Some(v))
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
struct Recording {
    case: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    setup: Vec<Step>,
    request: Request,
    /// Sent this long after what came before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    after_seconds: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    until: Option<Until>,
    #[serde(default)]
    response: Response,
    compare: Vec<String>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    notes: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    recorded: String,
}

fn number(path: &Path) -> Option<u32> {
    let name = path.file_name()?.to_str()?;
    name.split('-').next()?.parse().ok()
}

/// The recordings of this file, in order.
fn recordings() -> Vec<(PathBuf, Recording)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("tests/golden"))
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| number(p).is_some_and(recorded_by_this_file))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let r: Recording = serde_json::from_str(&std::fs::read_to_string(&p).unwrap())
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, r)
        })
        .collect()
}

/// Sends `r` with `client`; the status, the body (JSON, or a string when it is not JSON) and the
/// `Warning` headers.
async fn send(client: &kube::Client, r: &Request) -> Response {
    use base64::Engine as _;
    let body: Vec<u8> = match (&r.body, &r.body_base64) {
        (_, Some(b)) => base64::engine::general_purpose::STANDARD
            .decode(b)
            .expect("body_base64"),
        (Some(Value::String(s)), None) => s.clone().into_bytes(),
        (Some(v), None) => serde_json::to_vec(v).unwrap(),
        (None, None) => Vec::new(),
    };
    let mut req = http::Request::builder()
        .method(r.method.as_str())
        .uri(&r.path)
        .header(http::header::ACCEPT, "application/json");
    if let Some(ct) = &r.content_type {
        req = req.header(http::header::CONTENT_TYPE, ct);
    }
    let req = req.body(kube::client::Body::from(body)).unwrap();
    let resp = client.send(req).await.expect("the API server answers");
    let status = resp.status().as_u16();
    let warnings = resp
        .headers()
        .get_all(http::header::WARNING)
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .collect();
    let bytes = resp.into_body().collect_bytes().await.unwrap();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into()));
    Response {
        status,
        body,
        warnings,
    }
}

/// Sends the request of `r` as the recording says: `after_seconds` later, and again every
/// `every` until its `until` is met or its time is up. The last answer.
async fn ask(client: &kube::Client, r: &Recording, every: std::time::Duration) -> Response {
    if let Some(s) = r.after_seconds {
        tokio::time::sleep(std::time::Duration::from_secs_f64(s)).await;
    }
    let Some(until) = &r.until else {
        return send(client, &r.request).await;
    };
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(until.seconds);
    loop {
        let got = send(client, &r.request).await;
        if until.met(&got) || tokio::time::Instant::now() >= deadline {
            return got;
        }
        tokio::time::sleep(every).await;
    }
}

/// Whether a set-up step writes an admission policy or binding: kube-apiserver enforces it
/// only once its informers have it, a moment later.
fn writes_a_policy(s: &Step) -> bool {
    s.request.method != "GET" && s.request.path.contains("/validatingadmissionpolic")
}

/// The simulator's identity for a recording's `identity` (`None`: unchecked, as the admin).
fn sim_identity(name: &str) -> Option<Identity> {
    let agent = || Identity::service_account("rollboot-agent", "rollboot-agent");
    let probe = || Identity::service_account("rollboot-golden", "probe");
    match name.split_once(':') {
        None if name == "admin" => None,
        None if name == "controller" => Some(Identity::service_account(
            "rollboot-system",
            "rollboot-controller",
        )),
        None if name == "agent" => Some(agent()),
        None if name == "probe" => Some(probe()),
        Some(("agent", node)) => Some(agent().on_node(node)),
        Some(("probe", node)) => Some(probe().on_node(node)),
        _ => panic!("unknown identity {name}"),
    }
}

fn identities<'a>(recs: impl Iterator<Item = &'a Recording>) -> Vec<String> {
    let mut out: Vec<String> = recs
        .flat_map(|r| {
            r.setup
                .iter()
                .map(|s| s.request.identity.clone())
                .chain([r.request.identity.clone()])
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_simulator_answers_as_the_recorded_kube_apiserver() {
    let recs = recordings();
    assert!(!recs.is_empty(), "no recordings 160-229 in tests/golden");
    let cluster = Cluster::start(Scenario {
        nodes: 1,
        ..Scenario::default()
    })
    .await
    .unwrap();
    let names = identities(recs.iter().map(|(_, r)| r));
    let enforced: HashMap<String, Identity> = names
        .iter()
        .filter_map(|n| Some((n.clone(), sim_identity(n)?)))
        .collect();
    let probe = read("tests/golden/probe/vap-probe.yaml");
    cluster.enforce(Enforcement {
        identities: enforced,
        rbac: Some(
            Rbac::from_yaml(&[
                &read_repo("deploy/controller-rbac.yaml"),
                &read_repo("deploy/agent-rbac.yaml"),
                &probe,
            ])
            .unwrap(),
        ),
        admission: Some(
            Admission::from_yaml_docs(&[&read_repo("deploy/admission-policy.yaml"), &probe])
                .unwrap(),
        ),
    });
    let mut clients = HashMap::new();
    for n in &names {
        let mut c = cluster.kube_config_as(n).await.unwrap();
        c.default_retry = false;
        clients.insert(n.clone(), kube::Client::try_from(c).unwrap());
    }
    let mut problems = Vec::new();
    for (path, r) in &recs {
        let file = path.file_name().unwrap().to_string_lossy();
        for s in &r.setup {
            let a = send(&clients[&s.request.identity], &s.request).await;
            if !s.status.contains(&a.status) {
                problems.push(format!(
                    "{file}: set-up {} {} answered {}, expected one of {:?}: {}",
                    s.request.method, s.request.path, a.status, s.status, a.body
                ));
            }
        }
        let got = ask(
            &clients[&r.request.identity],
            r,
            std::time::Duration::from_millis(50),
        )
        .await;
        let (code, body) = (got.status, &got.body);
        if code != r.response.status {
            problems.push(format!(
                "{file} ({}): status {code}, the real server answered {}\n  simulator: {body}",
                r.case, r.response.status
            ));
            continue;
        }
        for p in &r.compare {
            if p == WARNING_HEADERS {
                if got.warnings != r.response.warnings {
                    problems.push(format!(
                        "{file} ({}): Warning headers\n  real:      {:?}\n  simulator: {:?}",
                        r.case, r.response.warnings, got.warnings
                    ));
                }
                continue;
            }
            let want = r.response.body.pointer(p);
            let got = body.pointer(p);
            if want != got {
                problems.push(format!(
                    "{file} ({}): {p}\n  real:      {}\n  simulator: {}",
                    r.case,
                    want.map_or("(absent)".into(), Value::to_string),
                    got.map_or("(absent)".into(), Value::to_string)
                ));
            }
        }
    }
    cluster.shutdown().await;
    assert!(
        problems.is_empty(),
        "{} difference(s) from kube-apiserver:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// `kubectl --kubeconfig ADMIN ARGS...`, its standard output.
fn kubectl(admin: &Path, args: &[&str]) -> String {
    let out = std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(admin)
        .args(args)
        .output()
        .expect("kubectl");
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The numbers `N` or `N-M` names (none when it is neither).
fn numbers(item: &str) -> Vec<u32> {
    let item = item.trim();
    let (a, b) = item.split_once('-').unwrap_or((item, item));
    match (a.trim().parse::<u32>(), b.trim().parse::<u32>()) {
        (Ok(a), Ok(b)) => (a..=b).collect(),
        _ => Vec::new(),
    }
}

/// A token for `identity` on the recorded cluster.
fn token(admin: &Path, identity: &str) -> String {
    let (ns, sa, pod_of) = match identity.split_once(':') {
        None if identity == "controller" => ("rollboot-system", "rollboot-controller", None),
        None if identity == "agent" => ("rollboot-agent", "rollboot-agent", None),
        None if identity == "probe" => ("rollboot-golden", "probe", None),
        Some(("agent", node)) => ("rollboot-agent", "rollboot-agent", Some(node)),
        Some(("probe", node)) => ("rollboot-golden", "probe", Some(node)),
        _ => panic!("unknown identity {identity}"),
    };
    let mut args = vec!["-n", ns, "create", "token", sa, "--duration=1h"];
    let pod;
    if let Some(node) = pod_of {
        let selector = format!("spec.nodeName={node}");
        let names = kubectl(
            admin,
            &[
                "-n",
                ns,
                "get",
                "pods",
                "--field-selector",
                &selector,
                "-o",
                "jsonpath={range .items[*]}{.metadata.name} {.spec.serviceAccountName}{\"\\n\"}{end}",
            ],
        );
        pod = names
            .lines()
            .find_map(|l| l.strip_suffix(&format!(" {sa}")).map(str::to_string))
            .unwrap_or_else(|| panic!("no pod of {ns}/{sa} on {node}"));
        args.extend(["--bound-object-kind=Pod", "--bound-object-name", &pod]);
    }
    kubectl(admin, &args).trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "records from a real control plane: set ROLLBOOT_RECORD_GOLDEN to its RUN_DIR"]
async fn record() {
    let Some(run_dir) = std::env::var_os("ROLLBOOT_RECORD_GOLDEN") else {
        println!("skipped: set ROLLBOOT_RECORD_GOLDEN to the RUN_DIR of a ../shared/realcluster control plane");
        return;
    };
    let admin = PathBuf::from(run_dir).join("admin.kubeconfig");
    kubectl(
        &admin,
        &[
            "apply",
            "-f",
            root()
                .join("tests/golden/probe/vap-probe.yaml")
                .to_str()
                .unwrap(),
        ],
    );
    // The policy takes effect once the API server's informers have it.
    std::thread::sleep(std::time::Duration::from_secs(3));
    let version: Value =
        serde_json::from_str(&kubectl(&admin, &["get", "--raw", "/version"])).unwrap();
    let stamp = format!(
        "kube-apiserver {} (../shared/realcluster), {}",
        version["gitVersion"].as_str().unwrap_or("?"),
        chrono::Utc::now().format("%Y-%m-%d")
    );
    let kc = kube::config::Kubeconfig::read_from(&admin).unwrap();
    let mut clients = HashMap::new();
    // ROLLBOOT_RECORD_ONLY=190,191 or 200-229: those recordings only (the others keep their
    // answers).
    let only: Vec<u32> = std::env::var("ROLLBOOT_RECORD_ONLY")
        .map(|v| v.split(',').flat_map(numbers).collect())
        .unwrap_or_default();
    let recs: Vec<(PathBuf, Recording)> = recordings()
        .into_iter()
        .filter(|(path, _)| only.is_empty() || number(path).is_some_and(|n| only.contains(&n)))
        .collect();
    // Tokens only for the identities of what is recorded (an admin-only recording needs no
    // agent pod).
    for n in identities(recs.iter().map(|(_, r)| r)) {
        let mut kc = kc.clone();
        if n != "admin" {
            let user = &mut kc.auth_infos[0].auth_info.as_mut().unwrap();
            user.client_certificate_data = None;
            user.client_key_data = None;
            user.token = Some(token(&admin, &n).into());
        }
        let mut c = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .unwrap();
        c.default_retry = false;
        clients.insert(n.clone(), kube::Client::try_from(c).unwrap());
    }
    for (path, mut r) in recs {
        for s in &r.setup {
            let a = send(&clients[&s.request.identity], &s.request).await;
            assert!(
                s.status.contains(&a.status),
                "{}: set-up answered {}: {}",
                path.display(),
                a.status,
                a.body
            );
        }
        if r.setup.iter().any(writes_a_policy) {
            std::thread::sleep(std::time::Duration::from_secs(3));
        }
        r.response = ask(
            &clients[&r.request.identity],
            &r,
            std::time::Duration::from_secs(1),
        )
        .await;
        if let Some(u) = r.until.as_ref().filter(|u| !u.met(&r.response)) {
            panic!(
                "{}: not as awaited within {} s: {} {}",
                path.display(),
                u.seconds,
                r.response.status,
                r.response.body
            );
        }
        println!("{}: {}", path.display(), r.response.status);
        r.recorded = stamp.clone();
        std::fs::write(&path, serde_json::to_string_pretty(&r).unwrap() + "\n").unwrap();
    }
}
