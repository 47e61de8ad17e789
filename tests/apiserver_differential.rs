//! The simulator against a real kube-apiserver, request by request.
//!
//! Each recording `tests/golden/1NN-*.json` with a `compare` key (160-199 here) is a request
//! that matters to rollboot (an agent's Node write under the admission policy, a probe of the
//! admission `request` variable...) with the answer a real kube-apiserver v1.36.2 gave. Every
//! test run sends the same requests, in file order, to the simulator enforcing the same RBAC
//! and admission policies, as the same identities, and checks the status code and each field
//! listed in `compare`.
//!
//! The recordings come from this file too. With a control plane of `../shared/realcluster/`
//! running (its `up.sh` and `fake-kubelet.py`, nodes `node-1` and `node-2`) and `kubectl apply
//! -k deploy/` applied:
//!
//! ```sh
//! ROLLBOOT_RECORD_GOLDEN=$RUN_DIR cargo test --test apiserver_differential -- --ignored --nocapture
//! ```
//!
//! rewrites the `response` of recordings 160-199 (`ROLLBOOT_RECORD_ONLY=190,191`: of those only)
//! with what that server answers (after a set-up that writes admission policies, 3 s later:
//! the server enforces them once its informers have them; it also
//! applies `tests/golden/probe/vap-probe.yaml`, the probe policy of 170-179, and makes the
//! ServiceAccount tokens with kubectl).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use rollboot::sim::admission::Admission;
use rollboot::sim::rbac::{Enforcement, Identity, Rbac};
use rollboot::sim::{Cluster, Scenario};
use serde::{Deserialize, Serialize};
use serde_json::Value;

const RECORDED_BY_THIS_FILE: std::ops::RangeInclusive<u32> = 160..=199;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
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

#[derive(Clone, Debug, Deserialize, Serialize)]
struct Recording {
    case: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    setup: Vec<Step>,
    request: Request,
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
        .filter(|p| number(p).is_some_and(|n| RECORDED_BY_THIS_FILE.contains(&n)))
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
    assert!(!recs.is_empty(), "no recordings 160-199 in tests/golden");
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
                &read("deploy/controller-rbac.yaml"),
                &read("deploy/agent-rbac.yaml"),
                &probe,
            ])
            .unwrap(),
        ),
        admission: Some(
            Admission::from_yaml_docs(&[&read("deploy/admission-policy.yaml"), &probe]).unwrap(),
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
        let got = send(&clients[&r.request.identity], &r.request).await;
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
    // ROLLBOOT_RECORD_ONLY=190,191: those recordings only (the others keep their answers).
    let only: Vec<u32> = std::env::var("ROLLBOOT_RECORD_ONLY")
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
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
        r.response = send(&clients[&r.request.identity], &r.request).await;
        println!("{}: {}", path.display(), r.response.status);
        r.recorded = stamp.clone();
        std::fs::write(&path, serde_json::to_string_pretty(&r).unwrap() + "\n").unwrap();
    }
}
