//! End-to-end on real nodes: rollboot as shipped, on real kubelets, containerd and systemd.
//!
//! The nodes are the suite's copy of the real-node recipe (`tests/realnodes/`, copied from
//! `../shared/realnodes`; its README says what the copy adds): three systemd-nspawn nodes with
//! systemd as PID 1, containerd and runc, the real kubelet v1.36, joined to the recipe's real
//! control plane in network namespaces of their own. `systemctl reboot` in a node really
//! reboots it; the power loop counts every boot in `nodes/nodeN/power.log`. node3 is kind-like:
//! it sees the kernel's boot ID on every boot (as kind's nodes do), so its Node's bootID never
//! changes and only its PID 1's start tells one boot from the next.
//!
//! rollboot runs as a user installs it: the images built by `scripts/build-image.sh` (imported
//! into every node's containerd at its first boot, as `ctr images import` would), then
//! `kubectl apply -k` of a directory of the user's own that takes `deploy/` and replaces its
//! config (deploy/INSTALL.md, step 1 and "Choose your maintenance window"), and at the end
//! once more with the Helm chart (rendered by `deploy/helm/render.py`, applied with kubectl).
//! The nodes run the kubelet as the docs recommend for drains before unplanned shutdowns
//! (graceful node shutdown off, logind's InhibitDelayMaxSec at what the agent asks for); one
//! phase turns the kubelet's graceful node shutdown on for one node.
//!
//! What it plays, each a check in the report:
//! - install: every agent and controller pod Ready (pull-free start to Ready measured), each
//!   agent reading its own host (`agent-host` matches the Node; none refuses);
//! - 1 sentinel: all three nodes flagged at once under `maxNodes: 1`: each done, exactly one
//!   real reboot per node, never two nodes out at once, the budget held throughout (polled),
//!   the controller's leader itself on a drained node (the leader changes, nothing breaks),
//!   the kind-like node verified by its PID 1's start;
//! - 2 agent killed: the agent process of the kind-like node killed as soon as its token is
//!   on the Node: one reboot, done (an agent restart is never taken for a reboot);
//! - 3 power cut mid-drain and mid-reboot: the cycle ends done, nothing left cordoned, one
//!   token per cycle;
//! - 4 `systemctl reboot` typed on a node, kubelet as recommended: drained first under the
//!   budget, the cycle done and not undrained;
//! - 5 the kubelet's graceful node shutdown turned on for a node: the agent says so (`status`,
//!   Event, `agent-host`), and a `systemctl reboot` there ends recorded undrained;
//! - 6 a Zincati-like client in a node's systemd asks FleetLock, reboots on 200, says
//!   steady-state: one reboot, done;
//! - 7 a config change: every agent reloads it (its new sentinel file flags a node), and a
//!   change of logind's delay is seen;
//! - 8 the Helm chart: the same objects, agents Ready, one reboot through to done.
//!
//! Without `ROLLBOOT_REALNODES_BIN` it prints one line and passes. `scripts/e2e-realnodes.sh`
//! runs it; docs/development.md, "End-to-end on real nodes", says how to build the recipe.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The directory with rc-etcd, rc-kube-apiserver, rc-kube-controller-manager,
/// rc-kube-scheduler (../shared/realcluster/build.sh) and kubelet (build-kubelet.sh).
const BIN_VAR: &str = "ROLLBOOT_REALNODES_BIN";
/// The node rootfs built by `tests/realnodes/build-node-rootfs.sh`.
const ROOTFS_VAR: &str = "ROLLBOOT_REALNODES_ROOTFS";
/// Optional: a directory with rollboot-controller.tar and rollboot-agent.tar already built
/// by scripts/build-image.sh (else the suite builds them, profile `image-test`).
const IMAGES_VAR: &str = "ROLLBOOT_REALNODES_IMAGES";
/// The control-plane recipe (its down.sh stops what lib/cp-up.sh started).
const RC_VAR: &str = "ROLLBOOT_REALCLUSTER_RECIPE";
/// `1`: keep the run directory after a pass too.
const KEEP_VAR: &str = "ROLLBOOT_E2E_KEEP";

const NODES: usize = 3;
/// The kind-like node.
const KIND_LIKE: usize = 3;
/// The node whose kubelet gets graceful node shutdown in phase 5.
const KUBELET_FIRST: usize = 2;
/// The FleetLock host.
const FLEETLOCK_HOST: usize = 1;
const WEB: usize = 3;
/// logind's InhibitDelayMaxSec on every node: what the agent asks for with drain.timeout 2m.
const INHIBIT_DELAY: &str = "3min";
/// One cycle of a node: drain, reboot, back, gate.
const CYCLE: Duration = Duration::from_secs(150);

/// The config the suite installs: no window (start at once), one node at a time, short
/// timeouts and leases, FleetLock on.
const CONFIG: &str = "\
concurrency:
  maxNodes: 1
nodes:
  order: name
drain:
  timeout: 2m
  evictionRetryInterval: 2s
reboot:
  timeout: 3m
  checkPeriod: 3s
healthGate:
  timeout: 2m
fleetlock:
  listen: 0.0.0.0:8086
leader:
  namespace: rollboot-system
  name: rollboot-leader
  leaseDuration: 8s
  renewDeadline: 5s
  retryPeriod: 1s
lock:
  namespace: rollboot-system
  name: rollboot-lock
";

/// The user's own Kustomize directory: deploy/ with its config replaced (INSTALL.md).
const KUSTOMIZATION: &str = "\
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - DEPLOY
configMapGenerator:
  - name: rollboot-config
    namespace: rollboot-system
    behavior: replace
    files: [rollboot.yaml]
    options: {disableNameSuffixHash: true}
  - name: rollboot-config
    namespace: rollboot-agent
    behavior: replace
    files: [rollboot.yaml]
    options: {disableNameSuffixHash: true}
";

/// A Deployment of busybox pods spread over the nodes under a budget of maxUnavailable 1, and
/// one pod pinned to node2 that takes 20 s to stop (a drain long enough to cut its power).
const WORKLOAD: &str = "\
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      terminationGracePeriodSeconds: 5
      topologySpreadConstraints:
        - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: ScheduleAnyway, labelSelector: {matchLabels: {app: web}}}
      containers:
        - name: web
          image: docker.io/library/busybox:probe
          imagePullPolicy: Never
          command: [/bin/sh, -c, \"trap 'exit 0' TERM; touch /tmp/ready; while :; do sleep 1; done\"]
          readinessProbe: {exec: {command: [/bin/sh, -c, test -e /tmp/ready]}, periodSeconds: 1}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web, namespace: default}
spec:
  maxUnavailable: 1
  selector: {matchLabels: {app: web}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: slow, namespace: default}
spec:
  replicas: 1
  selector: {matchLabels: {app: slow}}
  template:
    metadata: {labels: {app: slow}}
    spec:
      terminationGracePeriodSeconds: 40
      nodeSelector: {kubernetes.io/hostname: node2}
      containers:
        - name: slow
          image: docker.io/library/busybox:probe
          imagePullPolicy: Never
          command: [/bin/sh, -c, \"trap 'sleep 20; exit 0' TERM; while :; do sleep 1; done\"]
";

/// A Zincati-like FleetLock client, as a systemd service on the host: at every boot it says
/// steady-state until answered 200; then, whenever /var/lib/fleet/want-reboot exists, it asks
/// pre-reboot until answered 200 and reboots the host. It tries each URL of
/// /etc/fleet/urls (the controller replicas' addresses, kept current by the suite: no
/// Service works on these nodes), with the FleetLock id of /etc/fleet/id. Every request and
/// answer goes to /var/log/fleet.log.
const FLEET_CLIENT: &str = r#"#!/bin/bash
# HTTP by hand over bash's /dev/tcp: the rootfs has no curl, and busybox-static's wget
# crashes resolving even a numeric address.
post() { # URL ENDPOINT BODY: whether the answer is 200
  local hp=${1#http://}
  exec 3<>"/dev/tcp/${hp%:*}/${hp#*:}" || return 1
  printf 'POST /v1/%s HTTP/1.1\r\nHost: %s\r\nfleet-lock-protocol: true\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' \
    "$2" "$hp" "${#3}" "$3" >&3
  local status; read -r -t 10 status <&3; exec 3<&-
  [[ $status == "HTTP/1.1 200"* ]]
}
id=$(cat /etc/fleet/id)
body='{"client_params":{"id":"'"$id"'","group":"default"}}'
ask() {
  for url in $(cat /etc/fleet/urls); do
    if timeout 10 bash -c "$(declare -f post); post \"\$@\"" post "$url" "$1" "$body"; then
      echo "$(date +%s.%N) $1 200 $url" >> /var/log/fleet.log; return 0
    fi
  done
  echo "$(date +%s.%N) $1 refused" >> /var/log/fleet.log; return 1
}
until ask steady-state; do sleep 1; done
while :; do
  if [ -e /var/lib/fleet/want-reboot ]; then
    if ask pre-reboot; then rm -f /var/lib/fleet/want-reboot; sync; systemctl reboot; exit 0; fi
  fi
  sleep 1
done
"#;

const FLEET_UNIT: &str = "\
[Unit]
Description=a Zincati-like FleetLock client (rollboot's real-node suite)
After=network-online.target
[Service]
ExecStart=/bin/bash /usr/local/bin/fleet-client
[Install]
WantedBy=multi-user.target
";

fn var(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// What a run needs.
struct Setup {
    bin: PathBuf,
    rootfs: PathBuf,
    rc: PathBuf,
    images: Option<PathBuf>,
    keep: bool,
}

/// The setup from the environment; `None` (said in one line) without `ROLLBOOT_REALNODES_BIN`.
/// Once that is set, anything missing is an error naming it.
fn setup() -> Result<Option<Setup>, String> {
    let Some(bin) = var(BIN_VAR) else {
        println!(
            "e2e_realnodes: skipped, no real nodes: set {BIN_VAR} to the directory of the control \
             plane's binaries and the kubelet, and {ROOTFS_VAR} to the node rootfs \
             (tests/realnodes/README.md), then run scripts/e2e-realnodes.sh"
        );
        return Ok(None);
    };
    for b in [
        "rc-etcd",
        "rc-kube-apiserver",
        "rc-kube-controller-manager",
        "rc-kube-scheduler",
        "kubelet",
    ] {
        if !bin.join(b).is_file() {
            return Err(format!("{BIN_VAR}: no {b} in {}", bin.display()));
        }
    }
    let rootfs = var(ROOTFS_VAR).ok_or(format!("{ROOTFS_VAR} is not set"))?;
    if !rootfs.join("lib/systemd/systemd").exists() {
        return Err(format!(
            "{ROOTFS_VAR}: {} is not a node rootfs (tests/realnodes/build-node-rootfs.sh)",
            rootfs.display()
        ));
    }
    let rc = var(RC_VAR)
        .or_else(|| {
            repo()
                .ancestors()
                .map(|a| a.join("shared/realcluster"))
                .find(|p| p.join("down.sh").is_file())
        })
        .ok_or(format!("no realcluster recipe: set {RC_VAR}"))?;
    let uid = String::from_utf8_lossy(&run("id", &["-u"]).stdout)
        .trim()
        .to_string();
    if uid != "0" {
        return Err("the real nodes need root".into());
    }
    Ok(Some(Setup {
        bin,
        rootfs,
        rc,
        images: var(IMAGES_VAR),
        keep: std::env::var(KEEP_VAR).is_ok_and(|v| v == "1"),
    }))
}

fn run(cmd: &str, args: &[&str]) -> Output {
    Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {cmd}: {e}"))
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Builds the two images with scripts/build-image.sh into `out` (profile `image-test`, or
/// ROLLBOOT_REALNODES_PROFILE), or takes them from ROLLBOOT_REALNODES_IMAGES.
fn images(setup: &Setup, out: &Path) -> Result<[PathBuf; 2], String> {
    let dir = match &setup.images {
        Some(d) => d.clone(),
        None => {
            let profile =
                std::env::var("ROLLBOOT_REALNODES_PROFILE").unwrap_or("image-test".into());
            let o = Command::new(repo().join("scripts/build-image.sh"))
                .env("PROFILE", profile)
                .env("OUT", out)
                .current_dir(repo())
                .output()
                .map_err(|e| format!("build-image.sh: {e}"))?;
            if !o.status.success() {
                return Err(format!("build-image.sh failed: {}", text(&o)));
            }
            out.to_path_buf()
        }
    };
    let c = dir.join("rollboot-controller.tar");
    let a = dir.join("rollboot-agent.tar");
    for p in [&c, &a] {
        if !p.is_file() {
            return Err(format!("no image archive {}", p.display()));
        }
    }
    Ok([c, a])
}

/// The cluster of one run: its run directory, stopped (and wiped, unless kept) when dropped.
struct Cluster {
    dir: PathBuf,
    recipe: PathBuf,
    rc: PathBuf,
    keep: Arc<AtomicBool>,
}

impl Cluster {
    fn up(setup: &Setup, dir: &Path, images: &[PathBuf; 2]) -> Result<Cluster, String> {
        let recipe = repo().join("tests/realnodes");
        let c = Cluster {
            dir: dir.to_path_buf(),
            recipe: recipe.clone(),
            rc: setup.rc.clone(),
            keep: Arc::new(AtomicBool::new(setup.keep)),
        };
        let imgs = format!("{} {}", images[0].display(), images[1].display());
        let o = Command::new(recipe.join("up-nodes.sh"))
            .arg(NODES.to_string())
            .env("RUN_DIR", dir)
            .env("BIN_DIR", &setup.bin)
            .env("KUBELET", setup.bin.join("kubelet"))
            .env("ROOTFS_DIR", &setup.rootfs)
            .env_remove("ROOTFS_TAR")
            .env("RC_DIR", &setup.rc)
            .env("IMAGES", imgs)
            .env("KIND_LIKE", KIND_LIKE.to_string())
            .env("KUBELET_SHUTDOWN_GRACE", "0s")
            .env("LOGIND_INHIBIT_DELAY", INHIBIT_DELAY)
            .output()
            .map_err(|e| format!("up-nodes.sh: {e}"))?;
        if !o.status.success() {
            c.keep.store(true, Ordering::Relaxed);
            return Err(format!("up-nodes.sh failed: {}", text(&o)));
        }
        Ok(c)
    }

    fn script(&self, name: &str, args: &[&str]) -> Output {
        Command::new(self.recipe.join(name))
            .args(args)
            .env("RUN_DIR", &self.dir)
            .env("RC_DIR", &self.rc)
            .output()
            .unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    /// kubectl in the control plane's network namespace, as admin.
    fn kubectl(&self, args: &[&str]) -> Result<String, String> {
        self.kubectl_in(args, None)
    }

    fn kubectl_in(&self, args: &[&str], stdin: Option<&str>) -> Result<String, String> {
        use std::io::Write;
        let mut cmd = Command::new(self.dir.join("kubectl"));
        cmd.args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        if stdin.is_some() {
            cmd.stdin(std::process::Stdio::piped());
        }
        let mut child = cmd.spawn().map_err(|e| format!("kubectl: {e}"))?;
        if let Some(input) = stdin {
            child
                .stdin
                .take()
                .unwrap()
                .write_all(input.as_bytes())
                .map_err(|e| e.to_string())?;
        }
        let o = child.wait_with_output().map_err(|e| e.to_string())?;
        if o.status.success() {
            Ok(String::from_utf8_lossy(&o.stdout).into_owned())
        } else {
            Err(format!("kubectl {}: {}", args.join(" "), text(&o)))
        }
    }

    fn json(&self, args: &[&str]) -> Result<Value, String> {
        let mut a = args.to_vec();
        a.extend(["-o", "json"]);
        let out = self.kubectl(&a)?;
        serde_json::from_str(&out).map_err(|e| format!("kubectl {}: {e}", args.join(" ")))
    }

    fn node_exec(&self, n: usize, args: &[&str]) -> Output {
        let mut a = vec![n.to_string()];
        a.extend(args.iter().map(|s| s.to_string()));
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        self.script("node-exec.sh", &a)
    }

    fn node_root(&self, n: usize) -> PathBuf {
        self.dir.join(format!("nodes/node{n}/root"))
    }

    /// The boots of node `n` so far (the power loop's log).
    fn boots(&self, n: usize) -> usize {
        std::fs::read_to_string(self.dir.join(format!("nodes/node{n}/power.log")))
            .unwrap_or_default()
            .lines()
            .filter(|l| l.ends_with("boot start"))
            .count()
    }

    /// Runs `rollboot ARGS` in the control plane's network namespace, as admin.
    fn rollboot(&self, args: &[&str]) -> Output {
        let kc = self.dir.join("cp/admin.kubeconfig");
        let mut a: Vec<String> = ["netns", "exec", "rn-cp", env!("CARGO_BIN_EXE_rollboot")]
            .map(String::from)
            .to_vec();
        a.extend(args.iter().map(|s| s.to_string()));
        a.extend(["--kubeconfig".into(), kc.display().to_string()]);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        run("ip", &a)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let keep = self.keep.load(Ordering::Relaxed);
        let o = Command::new(self.recipe.join("down-nodes.sh"))
            .env("RUN_DIR", &self.dir)
            .env("RC_DIR", &self.rc)
            .env("WIPE", if keep { "0" } else { "1" })
            .output();
        if let Ok(o) = o {
            if !o.status.success() {
                eprintln!("down-nodes.sh: {}", text(&o));
            }
        }
        if keep {
            eprintln!("e2e_realnodes: run directory kept: {}", self.dir.display());
        }
    }
}

/// What the suite's watcher saw while it watched: the fewest web pods Ready (while the budget
/// is watched), the most nodes in a cycle at once, and the leaders.
#[derive(Default)]
struct Seen {
    web_min: Option<usize>,
    web_low: Vec<String>,
    most_in_cycle: usize,
    leaders: Vec<String>,
}

/// Samples the cluster every 300 ms on a thread of its own; keeps node1's FleetLock client's
/// URLs current (the controller replicas' pod IPs).
struct Watcher {
    seen: Arc<Mutex<Seen>>,
    budget: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    samples: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn ready(pod: &Value) -> bool {
    pod["metadata"]["deletionTimestamp"].is_null()
        && pod["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

impl Watcher {
    fn start(c: &Cluster) -> Watcher {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let budget = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(AtomicUsize::new(0));
        let kubectl = c.dir.join("kubectl");
        let urls = c.node_root(FLEETLOCK_HOST).join("etc/fleet/urls");
        let (s2, b2, st2, n2) = (seen.clone(), budget.clone(), stop.clone(), samples.clone());
        let thread = std::thread::spawn(move || {
            let get = |args: &[&str]| -> Option<Value> {
                let o = Command::new(&kubectl)
                    .args(args)
                    .args(["-o", "json"])
                    .output()
                    .ok()?;
                serde_json::from_slice(&o.stdout).ok()
            };
            while !st2.load(Ordering::Relaxed) {
                let t = Instant::now();
                if let Some(pods) = get(&["get", "pods", "-A"]) {
                    let items = pods["items"].as_array().cloned().unwrap_or_default();
                    let web = items
                        .iter()
                        .filter(|p| p["metadata"]["labels"]["app"] == "web" && ready(p))
                        .count();
                    let mut s = s2.lock().unwrap();
                    if b2.load(Ordering::Relaxed) {
                        s.web_min = Some(s.web_min.map_or(web, |m| m.min(web)));
                        if web < WEB - 1 {
                            s.web_low
                                .push(format!("{web} Ready at {}", chrono::Utc::now()));
                        }
                    }
                    let ips: Vec<String> = items
                        .iter()
                        .filter(|p| {
                            p["metadata"]["labels"]["app.kubernetes.io/component"] == "controller"
                                && ready(p)
                        })
                        .filter_map(|p| p["status"]["podIP"].as_str())
                        .map(|ip| format!("http://{ip}:8086"))
                        .collect();
                    drop(s);
                    if !ips.is_empty() {
                        let _ = std::fs::write(&urls, ips.join("\n") + "\n");
                    }
                }
                if let Some(nodes) = get(&["get", "nodes"]) {
                    let in_cycle = nodes["items"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter(|n| {
                            matches!(
                                n["metadata"]["annotations"]["rollboot.dev/state"].as_str(),
                                Some("cordoning" | "draining" | "rebooting" | "verifying")
                            )
                        })
                        .count();
                    let mut s = s2.lock().unwrap();
                    s.most_in_cycle = s.most_in_cycle.max(in_cycle);
                }
                if let Some(l) = get(&["-n", "rollboot-system", "get", "lease", "rollboot-leader"])
                {
                    if let Some(h) = l["spec"]["holderIdentity"].as_str() {
                        let mut s = s2.lock().unwrap();
                        if s.leaders.last().map(String::as_str) != Some(h) {
                            s.leaders.push(h.to_string());
                        }
                    }
                }
                n2.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(300).saturating_sub(t.elapsed()));
            }
        });
        Watcher {
            seen,
            budget,
            stop,
            samples,
            thread: Some(thread),
        }
    }

    /// Watches the budget (true) or not (a power cut breaks it, not rollboot).
    fn budget(&self, on: bool) {
        self.budget.store(on, Ordering::Relaxed);
    }

    /// What was seen since the last call, reset.
    fn take(&self) -> Seen {
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The outcome of each check, and the figures measured, printed at the end.
#[derive(Default)]
struct Report {
    checks: Vec<(String, Result<String, String>)>,
    figures: Vec<String>,
}

impl Report {
    fn check(&mut self, name: &str, r: Result<String, String>) {
        let line = match &r {
            Ok(m) => format!("PASS {name}: {m}"),
            Err(m) => format!("FAIL {name}: {m}"),
        };
        println!("{line}");
        self.checks.push((name.into(), r));
    }

    fn figure(&mut self, f: String) {
        println!("FIGURE {f}");
        self.figures.push(f);
    }

    fn failed(&self) -> Vec<&str> {
        self.checks
            .iter()
            .filter(|(_, r)| r.is_err())
            .map(|(n, _)| n.as_str())
            .collect()
    }
}

/// Polls `f` every 300 ms until it gives a value or `within` passes.
fn wait<T>(what: &str, within: Duration, mut f: impl FnMut() -> Option<T>) -> Result<T, String> {
    let t = Instant::now();
    loop {
        if let Some(v) = f() {
            return Ok(v);
        }
        if t.elapsed() > within {
            return Err(format!("{what}: not within {within:?}"));
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn annotations(node: &Value) -> BTreeMap<String, String> {
    node["metadata"]["annotations"]
        .as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

fn parse_time(s: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::DateTime::parse_from_rfc3339(s)
        .ok()
        .map(|t| t.with_timezone(&chrono::Utc))
}

struct Suite<'a> {
    c: &'a Cluster,
    w: Watcher,
    r: Report,
    dir: PathBuf,
}

impl Suite<'_> {
    fn node(&self, n: usize) -> Result<Value, String> {
        self.c.json(&["get", "node", &format!("node{n}")])
    }

    fn ann(&self, n: usize) -> BTreeMap<String, String> {
        self.node(n).map(|v| annotations(&v)).unwrap_or_default()
    }

    /// Waits for node `n` to end a cycle `done` (state-since after `since`) and be uncordoned;
    /// a failed cycle is an error with its reason.
    fn done(
        &self,
        n: usize,
        since: chrono::DateTime<chrono::Utc>,
        within: Duration,
    ) -> Result<chrono::DateTime<chrono::Utc>, String> {
        let mut last = String::new();
        wait(&format!("node{n} done"), within, || {
            let v = self.node(n).ok()?;
            let a = annotations(&v);
            let at = a
                .get("rollboot.dev/state-since")
                .and_then(|t| parse_time(t))?;
            last = format!("{:?} since {at}", a.get("rollboot.dev/state"));
            if at < since {
                return None;
            }
            match a.get("rollboot.dev/state").map(String::as_str) {
                Some("done") if v["spec"]["unschedulable"] != true => Some(Ok(at)),
                Some("failed") => Some(Err(format!(
                    "node{n} failed: {}",
                    a.get("rollboot.dev/failure-reason")
                        .cloned()
                        .unwrap_or_default()
                ))),
                _ => None,
            }
        })
        .map_err(|e| format!("{e} (last: {last})"))?
    }

    /// Flags node `n` through its sentinel file, as apt would.
    fn flag(&self, n: usize, file: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
        let now = chrono::Utc::now();
        let o = self.c.node_exec(n, &["touch", file]);
        if !o.status.success() {
            return Err(format!("touch {file} on node{n}: {}", text(&o)));
        }
        Ok(now)
    }

    /// The reasons of the Events about node `n` since `since`.
    fn events(&self, n: usize, since: chrono::DateTime<chrono::Utc>) -> Vec<(String, String)> {
        let Ok(v) = self.c.json(&[
            "get",
            "events",
            "-n",
            "default",
            "--field-selector",
            &format!("involvedObject.name=node{n}"),
        ]) else {
            return Vec::new();
        };
        v["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| {
                // The last time it was seen: a repeated Event is one series, its first
                // occurrence's eventTime kept.
                let t = [
                    &e["series"]["lastObservedTime"],
                    &e["eventTime"],
                    &e["lastTimestamp"],
                    &e["metadata"]["creationTimestamp"],
                ]
                .into_iter()
                .filter_map(|v| v.as_str().and_then(parse_time))
                .max();
                t.is_some_and(|t| t >= since - chrono::TimeDelta::seconds(1))
            })
            .map(|e| {
                (
                    e["reason"].as_str().unwrap_or_default().to_string(),
                    e["message"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect()
    }

    /// The budget and the one-at-a-time rule over what the watcher saw since its last take.
    fn held(&self) -> Result<String, String> {
        let s = self.w.take();
        let min = s.web_min.unwrap_or(WEB);
        let mut bad = Vec::new();
        if min < WEB - 1 {
            bad.push(format!(
                "the budget was broken: {} (first: {:?})",
                s.web_low.len(),
                s.web_low.first()
            ));
        }
        if s.most_in_cycle > 1 {
            bad.push(format!("{} nodes in a cycle at once", s.most_in_cycle));
        }
        if bad.is_empty() {
            Ok(format!(
                "at least {min} of {WEB} web pods Ready, at most {} node in a cycle, leaders {:?}",
                s.most_in_cycle, s.leaders
            ))
        } else {
            Err(bad.join("; "))
        }
    }

    fn install(&mut self) -> Result<String, String> {
        let own = self.dir.join("install");
        std::fs::create_dir_all(&own).map_err(|e| e.to_string())?;
        std::fs::write(own.join("rollboot.yaml"), CONFIG).map_err(|e| e.to_string())?;
        let deploy = repo().join("deploy");
        std::fs::write(
            own.join("kustomization.yaml"),
            KUSTOMIZATION.replace("DEPLOY", &deploy.display().to_string()),
        )
        .map_err(|e| e.to_string())?;
        // kustomize takes a base only by a relative path.
        let rel = relative(&own, &deploy);
        std::fs::write(
            own.join("kustomization.yaml"),
            KUSTOMIZATION.replace("DEPLOY", &rel),
        )
        .map_err(|e| e.to_string())?;
        self.c
            .kubectl(&["apply", "-k", &own.display().to_string()])?;
        // FleetLock is on (node1's host asks over it): its optional objects, as INSTALL.md's
        // step says, with the one grant a leader needs to check a standby's forward.
        self.c.kubectl(&[
            "apply",
            "-f",
            &deploy.join("optional/fleetlock.yaml").display().to_string(),
        ])?;
        self.wait_rollboot_ready("kubectl apply -k")
    }

    /// Waits for every agent and controller pod Ready and each agent's reading of its host;
    /// measures pull-free start to Ready per pod.
    fn wait_rollboot_ready(&mut self, how: &str) -> Result<String, String> {
        let pods = wait("rollboot's pods Ready", Duration::from_secs(120), || {
            let v = self
                .c
                .json(&[
                    "get",
                    "pods",
                    "-A",
                    "-l",
                    "app.kubernetes.io/part-of=rollboot",
                ])
                .ok()?;
            let items = v["items"].as_array()?.clone();
            let agents = items
                .iter()
                .filter(|p| p["metadata"]["namespace"] == "rollboot-agent" && ready(p))
                .count();
            let ctrl = items
                .iter()
                .filter(|p| p["metadata"]["namespace"] == "rollboot-system" && ready(p))
                .count();
            (agents == NODES && ctrl == 2 && items.len() == NODES + 2).then_some(items)
        })?;
        let mut starts = Vec::new();
        for p in &pods {
            let created = p["metadata"]["creationTimestamp"]
                .as_str()
                .and_then(parse_time);
            let ready_at = p["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["type"] == "Ready")
                .and_then(|c| c["lastTransitionTime"].as_str())
                .and_then(parse_time);
            if let (Some(a), Some(b)) = (created, ready_at) {
                starts.push(format!(
                    "{} {}s",
                    p["metadata"]["name"].as_str().unwrap_or_default(),
                    (b - a).num_seconds()
                ));
            }
        }
        self.r.figure(format!(
            "start to Ready per pod ({how}, images preloaded, 1 s grain): {}",
            starts.join(", ")
        ));
        // Each agent read its own host and wrote it: it matches its Node.
        let hosts = wait("every agent's agent-host", Duration::from_secs(60), || {
            let mut out = Vec::new();
            for n in 1..=NODES {
                let v = self.node(n).ok()?;
                let h: Value =
                    serde_json::from_str(annotations(&v).get("rollboot.dev/agent-host")?).ok()?;
                if h["bootId"] != v["status"]["nodeInfo"]["bootID"]
                    || h["machineId"] != v["status"]["nodeInfo"]["machineID"]
                {
                    return None;
                }
                out.push(format!(
                    "node{n} {}",
                    h["shutdownDrain"].as_str().unwrap_or("?")
                ));
            }
            Some(out)
        })?;
        Ok(format!(
            "{NODES} agents and 2 controllers Ready; hosts read: {}",
            hosts.join(", ")
        ))
    }

    /// 1: all three nodes flagged at once under maxNodes 1.
    fn sentinel_all(&mut self) -> Result<String, String> {
        let before: Vec<usize> = (1..=NODES).map(|n| self.c.boots(n)).collect();
        let leaders_before = self.leader();
        let mut flagged = Vec::new();
        for n in 1..=NODES {
            flagged.push(self.flag(n, "/run/reboot-required")?);
        }
        let mut took = Vec::new();
        for n in 1..=NODES {
            let at = self.done(n, flagged[n - 1], CYCLE * NODES as u32)?;
            took.push((n, at));
        }
        let mut bad = Vec::new();
        for n in 1..=NODES {
            let boots = self.c.boots(n) - before[n - 1];
            if boots != 1 {
                bad.push(format!("node{n} booted {boots} times"));
            }
        }
        let held = self.held();
        if let Err(e) = &held {
            bad.push(e.clone());
        }
        let figures: Vec<String> = took
            .iter()
            .map(|(n, at)| {
                let a = self.ann(*n);
                format!(
                    "node{n} {:.1}s (last-cycle {})",
                    (*at - flagged[n - 1]).num_milliseconds() as f64 / 1000.0,
                    a.get("rollboot.dev/last-cycle")
                        .cloned()
                        .unwrap_or_default()
                )
            })
            .collect();
        self.r.figure(format!(
            "flag to done per node, three flagged at once, maxNodes 1: {}",
            figures.join("; ")
        ));
        // The kind-like node: its boot ID did not change; its PID 1's start did.
        let k = self.node(KIND_LIKE)?;
        let a = annotations(&k);
        let kind = format!(
            "node{KIND_LIKE} (kind-like) boot {} -> {}",
            a.get("rollboot.dev/last-boot-id-before")
                .cloned()
                .unwrap_or_default(),
            a.get("rollboot.dev/last-boot-id-after")
                .cloned()
                .unwrap_or_default()
        );
        if a.get("rollboot.dev/last-boot-id-before") != a.get("rollboot.dev/last-boot-id-after") {
            bad.push(format!("{kind}: not kind-like"));
        }
        let leaders_after = self.leader();
        if !bad.is_empty() {
            return Err(bad.join("; "));
        }
        Ok(format!(
            "one reboot each, {kind}, leader {leaders_before} -> {leaders_after}; {}",
            held.unwrap_or_default()
        ))
    }

    /// Waits for a reboot token of node `n` other than `old` (one still on the Node; a cycle's
    /// end takes its token off), acknowledged by the agent when `acked`.
    fn new_token(&self, n: usize, old: Option<&String>, acked: bool) -> Result<String, String> {
        wait(&format!("a new reboot token on node{n}"), CYCLE, || {
            let a = self.ann(n);
            let t = a.get("rollboot.dev/reboot")?;
            let fresh = Some(t) != old;
            let ok = !acked || a.get("rollboot.dev/reboot-ack") == Some(t);
            (fresh && ok).then(|| t.clone())
        })
    }

    /// The last cycle's record of node `n` (`rollboot.dev/last-cycle`): its token and how
    /// many tokens it issued stay there once the cycle's end took them off the Node.
    fn last_cycle(&self, n: usize) -> Value {
        self.ann(n)
            .get("rollboot.dev/last-cycle")
            .and_then(|t| serde_json::from_str(t).ok())
            .unwrap_or_default()
    }

    fn leader(&self) -> String {
        self.c
            .json(&["-n", "rollboot-system", "get", "lease", "rollboot-leader"])
            .ok()
            .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string))
            .unwrap_or_default()
    }

    /// 2: the kind-like node's agent stopped (SIGSTOP), the node asked for by an operator
    /// (`rollboot.dev/reboot-requested`), and the agent killed once the token is on the Node:
    /// the kubelet starts it again on the same boot, and that agent must take the token once,
    /// never the restart for a reboot (on this node only PID 1's start tells a boot).
    fn agent_killed(&mut self) -> Result<String, String> {
        let n = KIND_LIKE;
        let agent = "^/usr/local/bin/rollboot agent";
        let before = self.c.boots(n);
        let old = self.ann(n).get("rollboot.dev/reboot").cloned();
        let o = self.c.node_exec(n, &["pkill", "-STOP", "-f", agent]);
        if !o.status.success() {
            return Err(format!("stopping the agent: {}", text(&o)));
        }
        let asked = chrono::Utc::now();
        self.c.kubectl(&[
            "annotate",
            "node",
            &format!("node{n}"),
            "rollboot.dev/reboot-requested=now",
        ])?;
        let token = self.new_token(n, old.as_ref(), false);
        let acked_early = token
            .as_ref()
            .is_ok_and(|t| self.ann(n).get("rollboot.dev/reboot-ack") == Some(t));
        // Killed whatever happened (a stopped agent left behind would stop the phases after).
        let o = self.c.node_exec(n, &["pkill", "-KILL", "-f", agent]);
        let token = token?;
        if !o.status.success() || acked_early {
            return Err(format!(
                "killing the agent: {} (acknowledged before: {acked_early})",
                text(&o)
            ));
        }
        self.done(n, asked, CYCLE)?;
        let boots = self.c.boots(n) - before;
        let last = self.last_cycle(n);
        let attempt = last["attempts"]
            .as_u64()
            .map(|a| a.to_string())
            .unwrap_or_default();
        if boots != 1 || attempt != "1" {
            return Err(format!(
                "node{n} booted {boots} times (token {token}, attempt {attempt})"
            ));
        }
        self.held()?;
        Ok(format!(
            "agent stopped, then killed with token {token} unacknowledged; the restarted agent took it: one reboot, attempt {attempt}"
        ))
    }

    /// 3a: node2's power cut while its slow pod is being drained.
    fn power_cut_mid_drain(&mut self) -> Result<String, String> {
        let n = 2;
        self.w.budget(false);
        let before = self.c.boots(n);
        let flagged = self.flag(n, "/run/reboot-required")?;
        wait("the slow pod terminating on a draining node", CYCLE, || {
            let a = self.ann(n);
            let slow = self.c.json(&["get", "pods", "-l", "app=slow"]).ok()?;
            let terminating = slow["items"]
                .as_array()?
                .iter()
                .any(|p| !p["metadata"]["deletionTimestamp"].is_null());
            (a.get("rollboot.dev/state").map(String::as_str) == Some("draining") && terminating)
                .then_some(())
        })?;
        let cut = self.c.script("power-cut.sh", &[&n.to_string()]);
        if !cut.status.success() {
            return Err(format!("power-cut.sh: {}", text(&cut)));
        }
        self.done(n, flagged, CYCLE * 2)?;
        let boots = self.c.boots(n) - before;
        let last = self.last_cycle(n);
        let attempt = last["attempts"]
            .as_u64()
            .map(|a| a.to_string())
            .unwrap_or_default();
        self.w.take();
        self.w.budget(true);
        // The cycle's token, if one was issued after the flag (its instant is its prefix).
        let asked = last["token"]
            .as_str()
            .and_then(|t| t.split('-').next()?.parse::<i64>().ok())
            .is_some_and(|ms| ms >= flagged.timestamp_millis());
        if boots > 2 || (asked && attempt != "1") {
            return Err(format!("{boots} boots, attempt {attempt}"));
        }
        Ok(format!(
            "done; {boots} boot(s): the power cut's{}, one token",
            match (boots, asked) {
                (2, _) => " and the reboot asked after the drain",
                (_, true) => " (the reboot asked from the boot before it was taken as done: no second reboot)",
                _ => " (the host's boot changed under the drain: no reboot asked)",
            }
        ))
    }

    /// 3b: node1's power cut as soon as its agent acknowledged the token.
    fn power_cut_mid_reboot(&mut self) -> Result<String, String> {
        let n = 1;
        self.w.budget(false);
        let before = self.c.boots(n);
        let old = self.ann(n).get("rollboot.dev/reboot").cloned();
        let flagged = self.flag(n, "/run/reboot-required")?;
        self.new_token(n, old.as_ref(), true)?;
        // The reboot asked for: its power is cut as the host boots again, before its kubelet
        // says so.
        wait("the host's reboot", CYCLE, || {
            (self.c.boots(n) > before).then_some(())
        })?;
        let cut = wait(
            "the power cut while it boots",
            Duration::from_secs(10),
            || {
                let o = self.c.script("power-cut.sh", &[&n.to_string()]);
                o.status.success().then_some(())
            },
        );
        self.done(n, flagged, CYCLE * 2)?;
        let boots = self.c.boots(n) - before;
        let attempt = self.last_cycle(n)["attempts"]
            .as_u64()
            .map(|a| a.to_string())
            .unwrap_or_default();
        self.w.take();
        self.w.budget(true);
        cut?;
        if boots != 2 || attempt != "1" {
            return Err(format!("{boots} boots, attempt {attempt}"));
        }
        Ok("the power cut as the host booted from its reboot: done after the boot that followed, 2 boots, one token".into())
    }

    /// 4: `systemctl reboot` typed on node1, the kubelet as recommended.
    fn typed_reboot_recommended(&mut self) -> Result<String, String> {
        let n = 1;
        let before = self.c.boots(n);
        let count_before = self.ann(n).get("rollboot.dev/reboot-count").cloned();
        self.inhibiting(n)?;
        let t = chrono::Utc::now();
        let o = self.c.node_exec(n, &["systemctl", "reboot"]);
        if !o.status.success() {
            return Err(format!("systemctl reboot: {}", text(&o)));
        }
        self.done(n, t, CYCLE)?;
        let boots = self.c.boots(n) - before;
        let a = self.ann(n);
        let reasons: Vec<String> = self.events(n, t).into_iter().map(|(r, _)| r).collect();
        let mut bad = Vec::new();
        if boots != 1 {
            bad.push(format!("{boots} boots"));
        }
        if a.contains_key("rollboot.dev/undrained-count")
            && a.get("rollboot.dev/last-cycle")
                .is_some_and(|c| c.contains("undrained"))
        {
            bad.push(format!(
                "recorded undrained: {:?}",
                a.get("rollboot.dev/last-cycle")
            ));
        }
        if !reasons.iter().any(|r| r == "ShutdownDrained") {
            bad.push(format!("no ShutdownDrained Event ({reasons:?})"));
        }
        if a.get("rollboot.dev/reboot-count") == count_before.as_ref() {
            bad.push("reboot-count not counted".into());
        }
        if let Err(e) = self.held() {
            bad.push(e);
        }
        if !bad.is_empty() {
            return Err(bad.join("; "));
        }
        Ok(format!(
            "drained first, handed back, one reboot, done; events {reasons:?}"
        ))
    }

    /// Rewrites node `n`'s kubelet config for graceful node shutdown `grace`/`critical` and
    /// restarts it, as an operator would.
    fn kubelet_grace(&self, n: usize, grace: &str, critical: &str) -> Result<(), String> {
        let f = self.c.node_root(n).join("etc/kubernetes/kubelet.yaml");
        let s = std::fs::read_to_string(&f).map_err(|e| e.to_string())?;
        let s: Vec<String> = s
            .lines()
            .map(|l| {
                if l.starts_with("shutdownGracePeriod:") {
                    format!("shutdownGracePeriod: {grace}")
                } else if l.starts_with("shutdownGracePeriodCriticalPods:") {
                    format!("shutdownGracePeriodCriticalPods: {critical}")
                } else {
                    l.to_string()
                }
            })
            .collect();
        std::fs::write(&f, s.join("\n") + "\n").map_err(|e| e.to_string())?;
        let o = self.c.node_exec(n, &["systemctl", "restart", "kubelet"]);
        if !o.status.success() {
            return Err(format!("restarting the kubelet: {}", text(&o)));
        }
        Ok(())
    }

    /// Waits until node `n`'s agent holds its logind inhibitor (it starts a moment after its
    /// host: a shutdown typed before that is not its to drain).
    fn inhibiting(&self, n: usize) -> Result<(), String> {
        wait(
            &format!("node{n}'s agent holding its inhibitor"),
            Duration::from_secs(60),
            || {
                let o = self
                    .c
                    .node_exec(n, &["systemd-inhibit", "--list", "--no-pager"]);
                String::from_utf8_lossy(&o.stdout)
                    .contains("rollboot")
                    .then_some(())
            },
        )
    }

    fn shutdown_drain(&self, n: usize) -> Option<String> {
        let h: Value = serde_json::from_str(self.ann(n).get("rollboot.dev/agent-host")?).ok()?;
        h["shutdownDrain"].as_str().map(str::to_string)
    }

    /// 5: node2's kubelet with graceful node shutdown on, then `systemctl reboot` typed there.
    fn typed_reboot_kubelet_first(&mut self) -> Result<String, String> {
        let n = KUBELET_FIRST;
        let t = chrono::Utc::now();
        self.kubelet_grace(n, "20s", "5s")?;
        wait(
            "the agent to see the kubelet's inhibitor",
            Duration::from_secs(60),
            || (self.shutdown_drain(n).as_deref() == Some("kubelet")).then_some(()),
        )?;
        let config = self.dir.join("install/rollboot.yaml").display().to_string();
        let status = self
            .c
            .rollboot(&["status", "--config", &config, "--output", "json"]);
        let s: Value = serde_json::from_slice(&status.stdout)
            .map_err(|e| format!("rollboot status: {e}: {}", text(&status)))?;
        let named = s["hosts"]["notDrainable"]
            .as_array()
            .is_some_and(|v| v.iter().any(|x| x == &json!(format!("node{n}"))));
        let said = self.events(n, t).iter().any(|(r, _)| r == "ShutdownDrain");
        let before = self.c.boots(n);
        let undrained_before: u32 = self
            .ann(n)
            .get("rollboot.dev/undrained-count")
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        self.inhibiting(n)?;
        self.w.take();
        let t2 = chrono::Utc::now();
        let o = self.c.node_exec(n, &["systemctl", "reboot"]);
        if !o.status.success() {
            return Err(format!("systemctl reboot: {}", text(&o)));
        }
        self.done(n, t2, CYCLE)?;
        // What the kubelet's kill did to the budget is reported, not judged: rollboot's part
        // is to say it honestly.
        let seen = self.w.take();
        let a = self.ann(n);
        let undrained: u32 = a
            .get("rollboot.dev/undrained-count")
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let reasons: Vec<String> = self.events(n, t2).into_iter().map(|(r, _)| r).collect();
        let boots = self.c.boots(n) - before;
        // Back to the recommended configuration for the phases after.
        self.kubelet_grace(n, "0s", "0s")?;
        let mut bad = Vec::new();
        if !named {
            bad.push("status does not name the node as not drained first".to_string());
        }
        if !said {
            bad.push("no ShutdownDrain Event".into());
        }
        if undrained != undrained_before + 1 {
            bad.push(format!("undrained-count {undrained_before} -> {undrained}"));
        }
        if !reasons.iter().any(|r| r == "ShutdownNotDrained") {
            bad.push(format!("no ShutdownNotDrained Event ({reasons:?})"));
        }
        if boots != 1 {
            bad.push(format!("{boots} boots"));
        }
        if !bad.is_empty() {
            return Err(bad.join("; "));
        }
        Ok(format!(
            "the agent said the kubelet goes first (status, Event, agent-host); the cycle is recorded undrained (at the least {} of {WEB} web pods Ready meanwhile); events {reasons:?}",
            seen.web_min.unwrap_or(WEB)
        ))
    }

    /// 6: a Zincati-like client on node1 asks FleetLock and reboots on 200.
    fn fleetlock(&mut self) -> Result<String, String> {
        let n = FLEETLOCK_HOST;
        let root = self.c.node_root(n);
        let machine = self.node(n)?["status"]["nodeInfo"]["machineID"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let view = rollboot::node::NodeView {
            machine_id: machine,
            ..Default::default()
        };
        let id = rollboot::fleetlock::id::of_node(&view).ok_or("no FleetLock id")?;
        for (path, content, mode) in [
            ("etc/fleet/id", format!("{id}\n"), 0o644),
            (
                "usr/local/bin/fleet-client",
                FLEET_CLIENT.to_string(),
                0o755,
            ),
            (
                "etc/systemd/system/fleet-client.service",
                FLEET_UNIT.to_string(),
                0o644,
            ),
        ] {
            let p = root.join(path);
            std::fs::create_dir_all(p.parent().unwrap()).map_err(|e| e.to_string())?;
            std::fs::write(&p, content).map_err(|e| e.to_string())?;
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode))
                .map_err(|e| e.to_string())?;
        }
        std::fs::create_dir_all(root.join("var/lib/fleet")).map_err(|e| e.to_string())?;
        wait("the client's URLs", Duration::from_secs(30), || {
            root.join("etc/fleet/urls").exists().then_some(())
        })?;
        let o = self
            .c
            .node_exec(n, &["systemctl", "enable", "--now", "fleet-client"]);
        if !o.status.success() {
            return Err(format!("starting the client: {}", text(&o)));
        }
        wait(
            "the client's first steady-state",
            Duration::from_secs(60),
            || {
                std::fs::read_to_string(root.join("var/log/fleet.log"))
                    .ok()?
                    .contains("steady-state 200")
                    .then_some(())
            },
        )?;
        let before = self.c.boots(n);
        let t = chrono::Utc::now();
        std::fs::write(root.join("var/lib/fleet/want-reboot"), "").map_err(|e| e.to_string())?;
        self.done(n, t, CYCLE)?;
        let boots = self.c.boots(n) - before;
        let log = std::fs::read_to_string(root.join("var/log/fleet.log")).unwrap_or_default();
        let granted = log.lines().filter(|l| l.contains("pre-reboot 200")).count();
        let refused = log
            .lines()
            .filter(|l| l.contains("pre-reboot refused"))
            .count();
        let a = self.ann(n);
        let _ = self
            .c
            .node_exec(n, &["systemctl", "disable", "--now", "fleet-client"]);
        if boots != 1 || granted != 1 {
            return Err(format!(
                "{boots} boots, {granted} pre-reboot granted; log:\n{log}"
            ));
        }
        self.held()?;
        Ok(format!(
            "pre-reboot refused {refused} times then granted once drained, one reboot, steady-state after, done; fleetlock {}",
            a.get("rollboot.dev/fleetlock").cloned().unwrap_or_default()
        ))
    }

    /// 7: a config change: every agent takes it; then logind's delay changed on one node.
    fn config_change(&mut self) -> Result<String, String> {
        let t = chrono::Utc::now();
        let changed = CONFIG.replace(
            "  checkPeriod: 3s\n",
            "  checkPeriod: 2s\n  sentinelFile: /host/var/run/rollboot-please\n",
        );
        for ns in ["rollboot-agent", "rollboot-system"] {
            let cm = json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "rollboot-config", "namespace": ns},
                "data": {"rollboot.yaml": changed},
            });
            self.c
                .kubectl_in(&["apply", "-f", "-"], Some(&cm.to_string()))?;
        }
        // Every agent says it took it (the kubelet refreshes a ConfigMap volume within about a
        // minute; the agent looks every 10 s).
        let pods = self.c.json(&["-n", "rollboot-agent", "get", "pods"])?;
        let names: Vec<String> = pods["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_string))
            .collect();
        let took = Instant::now();
        for p in &names {
            wait(&format!("{p} to reload"), Duration::from_secs(150), || {
                // Reloaded in place, or (a container started again since, with its host's
                // reboot) started on the new file.
                let logs = self.c.kubectl(&["-n", "rollboot-agent", "logs", p]).ok()?;
                (logs.contains("config reloaded")
                    || logs.contains("\"sentinel\":\"file /host/var/run/rollboot-please\""))
                .then_some(())
            })?;
        }
        let reload_s = took.elapsed().as_secs();
        let n = 2;
        let before = self.c.boots(n);
        let flagged = self.flag(n, "/run/rollboot-please")?;
        self.done(n, flagged, CYCLE)?;
        let boots = self.c.boots(n) - before;
        // logind's delay lowered on node3 (reloaded by SIGHUP, as the kubelet does it): its
        // agent sees it on its next look.
        let root = self.c.node_root(3);
        let dropin = root.join("etc/systemd/logind.conf.d/rollboot.conf");
        std::fs::write(&dropin, "[Login]\nInhibitDelayMaxSec=10s\n").map_err(|e| e.to_string())?;
        let _ = self
            .c
            .node_exec(3, &["systemctl", "kill", "-s", "HUP", "systemd-logind"]);
        let short = wait(
            "node3's agent to see logind's new delay",
            Duration::from_secs(60),
            || (self.shutdown_drain(3).as_deref() == Some("shortDelay")).then_some(()),
        );
        std::fs::write(
            &dropin,
            format!("[Login]\nInhibitDelayMaxSec={INHIBIT_DELAY}\n"),
        )
        .map_err(|e| e.to_string())?;
        let _ = self
            .c
            .node_exec(3, &["systemctl", "kill", "-s", "HUP", "systemd-logind"]);
        let back = wait(
            "node3's agent to see logind's delay restored",
            Duration::from_secs(60),
            || (self.shutdown_drain(3).as_deref() == Some("ready")).then_some(()),
        );
        // The original config again.
        for ns in ["rollboot-agent", "rollboot-system"] {
            let cm = json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "rollboot-config", "namespace": ns},
                "data": {"rollboot.yaml": CONFIG},
            });
            self.c
                .kubectl_in(&["apply", "-f", "-"], Some(&cm.to_string()))?;
        }
        let _ = t;
        short?;
        back?;
        if boots != 1 {
            return Err(format!("node{n}: {boots} boots"));
        }
        self.r.figure(format!("config change to every agent reloaded: {reload_s}s (the kubelet's ConfigMap refresh included)"));
        Ok(format!("{} agents reloaded within {reload_s}s; the new sentinel file flagged node{n}: one reboot, done; logind's delay 10s seen as shortDelay, restored", names.len()))
    }

    /// The agent's and the controllers' resident memory, read in the nodes.
    fn memory(&mut self) {
        let mut out = Vec::new();
        for n in 1..=NODES {
            for (what, pattern) in [
                ("agent", "rollboot agent"),
                ("controller", "rollboot controller"),
            ] {
                let o = self.c.node_exec(n, &["sh", "-c", &format!("for p in $(pgrep -f '^/usr/local/bin/{pattern}'); do grep -E 'VmRSS|VmHWM' /proc/$p/status | tr -s ' \\t' ' ' | tr '\\n' ' '; echo; done")]);
                for l in String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                {
                    out.push(format!("node{n} {what}: {}", l.trim()));
                }
            }
        }
        self.r
            .figure(format!("resident memory: {}", out.join("; ")));
    }

    /// 8: the same install through the Helm chart.
    fn helm(&mut self) -> Result<String, String> {
        let own = self.dir.join("install");
        self.c
            .kubectl(&["delete", "-k", &own.display().to_string(), "--wait=true"])?;
        wait("rollboot's pods gone", Duration::from_secs(120), || {
            let v = self
                .c
                .json(&[
                    "get",
                    "pods",
                    "-A",
                    "-l",
                    "app.kubernetes.io/part-of=rollboot",
                ])
                .ok()?;
            v["items"].as_array()?.is_empty().then_some(())
        })?;
        // The chart's `config` is the file's text but for the Leases, which the chart writes
        // itself (with the leader's timings from values of their own).
        let body = &CONFIG[..CONFIG.find("leader:").expect("CONFIG has leader:")];
        let values = json!({
            "config": body,
            "leader": {"leaseDuration": "8s", "renewDeadline": "5s", "retryPeriod": "1s"},
        });
        let o = Command::new("python3")
            .arg(repo().join("deploy/helm/render.py"))
            .args(["--values", &values.to_string()])
            .output()
            .map_err(|e| format!("render.py: {e}"))?;
        if !o.status.success() {
            return Err(format!("deploy/helm/render.py: {}", text(&o)));
        }
        // As `helm install` does: the Namespaces first (the render lists them by file name).
        let manifests = String::from_utf8_lossy(&o.stdout).into_owned();
        let (namespaces, rest): (Vec<&str>, Vec<&str>) = manifests
            .split("\n---\n")
            .partition(|d| d.lines().any(|l| l == "kind: Namespace"));
        self.c
            .kubectl_in(&["apply", "-f", "-"], Some(&namespaces.join("\n---\n")))?;
        self.c
            .kubectl_in(&["apply", "-f", "-"], Some(&rest.join("\n---\n")))?;
        let ready = self.wait_rollboot_ready("Helm chart")?;
        let n = 1;
        let before = self.c.boots(n);
        let flagged = self.flag(n, "/run/reboot-required")?;
        self.done(n, flagged, CYCLE)?;
        let boots = self.c.boots(n) - before;
        if boots != 1 {
            return Err(format!("{boots} boots"));
        }
        self.held()?;
        Ok(format!("{ready}; node{n} flagged: one reboot, done"))
    }
}

/// `to` relative to the directory `from` (both absolute).
fn relative(from: &Path, to: &Path) -> String {
    let f: Vec<_> = from.components().collect();
    let t: Vec<_> = to.components().collect();
    let common = f.iter().zip(&t).take_while(|(a, b)| a == b).count();
    let mut out = PathBuf::new();
    for _ in common..f.len() {
        out.push("..");
    }
    for c in &t[common..] {
        out.push(c);
    }
    out.display().to_string()
}

#[test]
fn rollboot_on_real_nodes() {
    let setup = match setup() {
        Ok(Some(s)) => s,
        Ok(None) => return,
        Err(e) => panic!("e2e_realnodes: {e}"),
    };
    let dir = tempfile::Builder::new()
        .prefix("rollboot-realnodes-")
        .tempdir_in(
            std::env::var_os("ROLLBOOT_REALNODES_RUN")
                .map(PathBuf::from)
                .unwrap_or_else(std::env::temp_dir),
        )
        .expect("run directory")
        .keep();
    let t = Instant::now();
    let imgs = images(&setup, &dir.join("images")).unwrap_or_else(|e| panic!("e2e_realnodes: {e}"));
    println!("images: {:?} ({:.0}s)", imgs, t.elapsed().as_secs_f64());
    let t = Instant::now();
    let cluster = Cluster::up(&setup, &dir.join("run"), &imgs)
        .unwrap_or_else(|e| panic!("e2e_realnodes: {e}"));
    println!("nodes up ({:.0}s)", t.elapsed().as_secs_f64());
    let mut s = Suite {
        c: &cluster,
        w: Watcher::start(&cluster),
        r: Report::default(),
        dir: dir.clone(),
    };
    type Phase<'a> = (&'static str, fn(&mut Suite<'a>) -> Result<String, String>);
    let phases: Vec<Phase> = vec![
        ("install (kubectl apply -k)", Suite::install),
        ("1 sentinel on all nodes, maxNodes 1", Suite::sentinel_all),
        (
            "2 agent killed mid-reboot, kind-like node",
            Suite::agent_killed,
        ),
        ("3a power cut mid-drain", Suite::power_cut_mid_drain),
        ("3b power cut mid-reboot", Suite::power_cut_mid_reboot),
        (
            "4 systemctl reboot, kubelet as recommended",
            Suite::typed_reboot_recommended,
        ),
        (
            "5 systemctl reboot, kubelet's graceful shutdown on",
            Suite::typed_reboot_kubelet_first,
        ),
        ("6 FleetLock client in a node's systemd", Suite::fleetlock),
        ("7 config change", Suite::config_change),
        ("8 Helm chart", Suite::helm),
    ];
    for (i, (name, phase)) in phases.into_iter().enumerate() {
        let t = Instant::now();
        if i == 1 {
            if let Err(e) = s.c.kubectl_in(&["apply", "-f", "-"], Some(WORKLOAD)) {
                s.r.check("workload", Err(e));
                break;
            }
            let up = wait("the workload Ready", Duration::from_secs(90), || {
                let v = s.c.json(&["get", "pods", "-l", "app=web"]).ok()?;
                (v["items"].as_array()?.iter().filter(|p| ready(p)).count() == WEB).then_some(())
            });
            if let Err(e) = up {
                s.r.check("workload", Err(e));
                break;
            }
            s.w.take();
            s.w.budget(true);
        }
        let r = phase(&mut s).map(|m| format!("{m} ({:.0}s)", t.elapsed().as_secs_f64()));
        let stop = r.is_err() && i == 0;
        s.r.check(name, r);
        if i == 1 {
            s.memory();
        }
        if stop {
            break;
        }
    }
    println!("watcher samples: {}", s.w.samples.load(Ordering::Relaxed));
    let failed: Vec<String> = s.r.failed().into_iter().map(str::to_string).collect();
    println!("\n== e2e_realnodes report ==");
    for (n, r) in &s.r.checks {
        match r {
            Ok(m) => println!("PASS {n}: {m}"),
            Err(m) => println!("FAIL {n}: {m}"),
        }
    }
    for f in &s.r.figures {
        println!("FIGURE {f}");
    }
    if !failed.is_empty() {
        cluster.keep.store(true, Ordering::Relaxed);
    }
    drop(s);
    drop(cluster);
    if failed.is_empty() && !setup.keep {
        let _ = std::fs::remove_dir_all(&dir);
    }
    assert!(failed.is_empty(), "failed: {failed:?}");
}
