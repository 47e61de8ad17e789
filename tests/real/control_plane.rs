//! End-to-end: rollboot against a real Kubernetes control plane.
//!
//! The control plane is the recipe's (`../shared/realcluster`: etcd, kube-apiserver,
//! kube-controller-manager and kube-scheduler v1.36, loopback only), started for this run on
//! free ports in a temporary directory and stopped at the end, with the suite's copy of
//! `fake-kubelet.py` (`tests/real/control_plane/`) playing five kubelets, each with a fake host whose boot ID and
//! machine ID the agents read. On it: `kubectl apply -k deploy/` exactly as shipped, the recipe's
//! workload (a Deployment of 8 replicas behind a budget of maxUnavailable 1, a DaemonSet), and
//! rollboot as local processes (this test's build of the binary): two controllers with the
//! controller service account's token and one agent per node with a token bound to the agent
//! DaemonSet's pod on that node, configured by the suite's copy of `rollboot-config.sh`. Nodes
//! are flagged through the agents' sentinel files. The processes are started here rather than
//! by the recipe's run-rollboot.sh: the suite must SIGKILL and restart the leader and agents,
//! and its fixed metrics ports could collide with another run.
//!
//! The flow, 20 or so flags over five nodes (about 10 minutes on 2 cores): node-1 and node-2 flagged
//! together; node-1's host rebooting itself over FleetLock; the busier of node-1 and node-2 shut
//! down by its host, cancelled mid-drain then carried through (its agent on a fake logind); the
//! node with the most pods to evict of node-3..5, its leader killed mid-drain;
//! another, its leader killed as soon as it is `rebooting`; issue 22's cases (`faults`):
//! four nodes flagged at once, each struck while its host is down for its acknowledged token,
//! then two tokens the agent must refuse, each node cleared with `rollboot retry`, then the
//! kube-apiserver stopped and killed while two nodes drain; then the lock taken by an operator,
//! the nodes whose last cycle a fault struck flagged again (so every node's last cycle is a
//! clean one for the predictions), held longer than any cycle so far, released; then the predictions and all five nodes flagged at
//! once. A phase that fails stops the flow; the checks that judge the whole run (1 to 5) still
//! run on what happened.
//!
//! It checks what rollboot promises, each check named by its number in the report:
//! 1 every flagged node rebooted exactly once (reboots.log and reboot-requests.log), ends `done`,
//!   nothing left cordoned;
//! 2 a node is uncordoned only once the not-ready/unreachable taints are gone;
//! 3 the budget is never broken (never fewer than 7 of 8 web pods Ready and not terminating);
//! 4 rollboot's Events can be read with `kubectl get events`;
//! 5 the audit log shows no answer >= 400 to rollboot other than 404/409/429, but for what the
//!   suite cut on purpose (5b: rollboot names itself in User-Agent; 5c: no predictable 409, one
//!   that follows the node-lifecycle controller's write or rollboot's own);
//! 6 an agent's token can write only its own node's agent annotations;
//! 7 a leader killed mid-drain (7a) and mid-reboot (7b) is replaced after the lease and the node
//!   still reboots once;
//! 8 an operator holding the lock Lease pauses rollboot; releasing it resumes the rollout;
//! 9 `rollboot status` shows an in-flight node's state as the Node has it.
//! 10 `rollboot plan --all` before the rollout: it would proceed, plans the five nodes, and
//!   previews each drain as the pods on the node say (10b: the audit log shows it only read).
//! 11 at the end, with every node's last cycle recorded: `rollboot simulate --from-cluster`
//!   predicts the makespan of a rollout of all five nodes within 20% of the real one, timed
//!   right after (the plan's prediction beside it; 11b: the snapshot only read).
//! 12, 13 `state` garbled, or written back to `draining`, while the host is down for its
//!   acknowledged token: no second token, one reboot, `done`, a MalformedAnnotation Event;
//! 14 `reboot-ack` garbled after the ack with the host down (14a: verified, one reboot), or
//!   while the node drains (14b: the agent refuses, the node fails within 10 s, no reboot);
//! 15 an agent on another node's host: refused as wrongHost, the node fails within 10 s;
//! 16 the kube-apiserver stopped for 20 s (16a), killed and started again (16b), mid-drain: the
//!   rollout completes, one reboot each, the budget kept, nothing left cordoned;
//! 17 the lock and leader Leases deleted mid-reboot: one reboot, `done`, the rollout goes on;
//! 18 a budget with maxUnavailable 0: the node fails within seconds, naming it;
//! 19 a StatefulSet pod's ReadWriteOnce CSI volume: the reboot asked only once its
//!   VolumeAttachment on the node is gone, the moved pod Ready elsewhere with no Multi-Attach.
//! 20 a FleetLock host: pre-reboot granted only once drained and handed off, steady-state once
//!   verified (the protocol's client of `crates/rollboot-testkit/src/fleetlock_client.rs`, through a standby
//!   replica).
//! 26 another actor's maintenance (`others`): a NodeMaintenance keeps rollboot off its node; the
//!   conditions rollboot writes end False, and none is written over the admin's.
//! 21 a shutdown nobody coordinated, the agent's logind inhibitor on a fake logind
//!   (`shutdown`): cancelled mid-drain, released; carried through, the lock let go once
//!   drained, the node verified after the host's own reboot.
//!
//! Without `ROLLBOOT_REALCLUSTER_BIN` it prints one line and passes (see `setup`).
//! `scripts/e2e-realcluster.sh` runs it; docs/development.md, "End-to-end on a real
//! control plane", says how to build the plane.
//!
//! Its helpers, the modules below:
//! - [`setup`]: where the control plane binaries, the recipe and `deploy/` are, from the
//!   environment; the one skip line when there is no control plane.
//! - [`cluster`]: the control plane of one run and every process the suite starts, stopped at
//!   the end whatever happens (a guard, and a reaper process for a test killed outright).
//! - [`observe`]: watches (admin client) that record every version of the Nodes, the Pods, the
//!   budget and the Leases from the start, so the checks judge what really happened.
//! - [`audit`]: the kube-apiserver audit log, read for rollboot's identities.
//! - [`report`]: the checks' outcomes and the phases' timings, printed at the end.
//! - [`faults`]: the phases of issue 22's cases: annotations garbled or written backwards
//!   mid-reboot, the lock and leader Leases deleted, tokens an agent refuses (an unreadable ack,
//!   a wrong host), the kube-apiserver stopped and killed mid-drain.
//! - [`shutdown`]: issue 27's phase: a host's shutdown nobody coordinated, the agent's logind
//!   inhibitor on a fake logind (cancelled mid-drain, then carried through).
//! - [`security`]: issue 47's phases: FleetLock callers that are not the host, bounded servers,
//!   a slot given back mid-reboot, shutdown requests with no shutdown behind them.
//! - [`volumes`]: issue 24's phase: a StatefulSet with ReadWriteOnce CSI volumes, the node of one
//!   of its pods drained and rebooted only once the pod's VolumeAttachment is gone.
//! - [`others`]: another actor's maintenance (a NodeMaintenance, its CRD from
//!   `nodemaintenance-crd.yaml`) and the maintenance conditions rollboot publishes.
//!
//! None of this may talk to anything but the loopback control plane it started, nor change the
//! recipe's files: the suite runs the recipe, except `fake-kubelet.py` and `rollboot-config.sh`,
//! which it carries in `tests/real/control_plane/` as copies with what it needs added (see their headers).

mod audit;
mod cluster;
mod faults;
mod observe;
mod others;
mod report;
mod security;
mod setup;
mod shutdown;
mod volumes;

use rollboot_testkit::fleetlock_client;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use self::audit::Cut;
use self::cluster::{free_port, kubectl, problems, Cluster};
use self::observe::{At, Observer, World};
use self::report::Report;
use chrono::Utc;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};

const NODES: [&str; 5] = ["node-1", "node-2", "node-3", "node-4", "node-5"];
const CONTROLLERS: [&str; 2] = ["controller-a", "controller-b"];
/// rollboot-config.sh's leader timings (LEASE_DURATION, RETRY_PERIOD defaults).
const LEASE: Duration = Duration::from_secs(8);
const RETRY: Duration = Duration::from_secs(1);
/// The agents check their sentinel every 2 s (rollboot-config.sh).
const FLAG_TIMEOUT: Duration = Duration::from_secs(30);
/// One reboot cycle: drain (budget-paced evictions), an 8 s fake reboot, taints, health gate.
const CYCLE_TIMEOUT: Duration = Duration::from_secs(150);
const WEB_REPLICAS: usize = 8;
/// maxUnavailable 1 of 8.
const WEB_MIN_HEALTHY: usize = 7;
const OPERATOR: &str = "e2e-operator";
/// The reasons of the Events a reboot cycle records about its Node (src/controller/mod.rs,
/// src/agent/mod.rs): check 4 wants at least one of them per rebooted node.
const CYCLE_REASONS: [&str; 4] = ["Cordoned", "RebootRequested", "Rebooting", "RebootDone"];

#[test]
fn rollboot_on_a_real_control_plane() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    // ROLLBOOT_E2E_BIN: a fixed copy (or hard link) of the binary under test, for a target
    // directory shared with other builds, which may replace target/debug/rollboot mid-run.
    let bin = std::env::var_os("ROLLBOOT_E2E_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_rollboot").into());
    let rollboot = bin.as_path();
    let setup = match setup::from_environment(manifest, rollboot) {
        Ok(Some(s)) => s,
        Ok(None) => return,
        Err(e) => panic!("e2e_realcluster: {e}"),
    };
    let mut report = Report::default();
    let t = Instant::now();
    let mut cluster = Cluster::up(setup).unwrap_or_else(|e| panic!("e2e_realcluster: {e}"));
    report.phase("control plane up (up.sh)", t.elapsed());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(Suite::run(&cluster, &mut report));
    drop(rt);
    let t = Instant::now();
    let failed = !report.not_passed().is_empty();
    let kept = cluster.stop(failed);
    report.phase("teardown (down.sh)", t.elapsed());
    if let Some(dir) = kept {
        report.header.push(format!(
            "run directory kept (logs, audit log): {}",
            dir.display()
        ));
    }
    println!("{}", report.render());
    let bad: Vec<String> = report
        .not_passed()
        .iter()
        .map(|c| format!("{} {}", c.id, c.title))
        .collect();
    assert!(
        bad.is_empty(),
        "e2e_realcluster: {} check(s) did not pass (details above): {}",
        bad.len(),
        bad.join("; ")
    );
}

/// Runs `$body` as the named phase unless an earlier phase stopped the flow; a phase that
/// fails stops the ones after it (their checks are reported as not run, with the reason).
macro_rules! phase {
    ($report:expr, $blocked:expr, $name:expr, $body:expr) => {
        if $blocked.is_none() {
            let t = Instant::now();
            let r: Result<(), String> = $body.await;
            $report.phase($name, t.elapsed());
            if let Err(e) = r {
                println!("e2e: phase {} failed: {e}", $name);
                $report
                    .header
                    .push(format!("FLOW STOPPED in phase `{}`: {e}", $name));
                $blocked = Some(format!("phase `{}` failed before it", $name));
            }
        }
    };
}

/// One run of the flow and what it needs to judge it.
struct Suite<'a> {
    cluster: &'a Cluster,
    obs: Observer,
    client: kube::Client,
    /// RUN_DIR/rb: configs, token kubeconfigs, sentinels.
    rb: PathBuf,
    /// The fake kubelet's state directory (reboots.log, reboot-requests.log).
    state: PathBuf,
    /// How many times each node was flagged.
    flags: BTreeMap<String, u32>,
    /// Reboot cycles measured so far (flag seen, or the previous node done, to done).
    cycles: Vec<Duration>,
    /// Nodes used by the leader-kill phases.
    used: Vec<String>,
    /// When the suite cut rollboot's requests on purpose (a process killed, the kube-apiserver
    /// stopped or killed): the audit check does not count the 5xx answers they explain.
    cuts: Vec<Cut>,
    /// The agents read their fake hosts' boot and machine IDs (`reboot.hostBootIdFile` and
    /// `reboot.hostMachineIdFile` in their configs: the binary under test accepts them).
    fake_hosts: bool,
    /// The nodes whose last cycle a fault of the suite struck (a leader or the kube-apiserver
    /// killed, an annotation garbled, the Leases deleted): the pause flags them again, so the
    /// predictions (check 11) read a clean last cycle of every node.
    struck: std::collections::BTreeSet<String>,
    /// Each controller's FleetLock address (its own config names its own port).
    fleetlock: Vec<(String, std::net::SocketAddr)>,
    /// Reboots each host made by itself (over FleetLock, or a shutdown of its own: no reboot
    /// command ran for them).
    host_reboots: BTreeMap<String, usize>,
    /// The system bus each agent is given (`DBUS_SYSTEM_BUS_ADDRESS`): a fake logind's for
    /// check 21; for the others an address where nothing listens, so no agent of the suite
    /// ever asks this machine's own logind for a lock.
    buses: BTreeMap<String, String>,
    /// Each controller's metrics address (`/metrics`, `/healthz`, `/readyz`).
    metrics_addrs: Vec<(String, std::net::SocketAddr)>,
}

impl<'a> Suite<'a> {
    async fn run(cluster: &'a Cluster, report: &mut Report) {
        report.header.push(format!(
            "control plane: {} (recipe {}), API 127.0.0.1:{}, etcd 127.0.0.1:{}, RUN_DIR {}",
            cluster.setup.bin.display(),
            cluster.setup.recipe.display(),
            cluster.ports.api,
            cluster.ports.etcd,
            cluster.run_dir.display()
        ));
        report.header.push(format!(
            "rollboot under test: {}",
            cluster.setup.rollboot.display()
        ));
        if cluster.setup.deploy_overridden {
            report.header.push(format!(
                "!!! deploy/ OVERRIDDEN by {}: {} (not the manifests as shipped)",
                setup::DEPLOY_VAR,
                cluster.setup.deploy.display()
            ));
        } else {
            report.header.push(format!(
                "manifests: {} (as shipped)",
                cluster.setup.deploy.display()
            ));
        }
        let client = match admin_client(&cluster.admin).await {
            Ok(c) => c,
            Err(e) => {
                report.header.push(format!("no admin client: {e}"));
                for (id, title) in CHECKS {
                    report.not_run(id, title, "the admin client could not be built");
                }
                return;
            }
        };
        let version = kubectl(&cluster.admin, &["version", "-o", "json"]).await;
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&version.stdout) {
            report.header.push(format!(
                "kube-apiserver {}",
                v["serverVersion"]["gitVersion"].as_str().unwrap_or("?")
            ));
        }
        let obs = match Observer::start(client.clone()).await {
            Ok(o) => o,
            Err(e) => {
                report.header.push(e.clone());
                for (id, title) in CHECKS {
                    report.not_run(id, title, e.clone());
                }
                return;
            }
        };
        let mut s = Suite {
            cluster,
            obs,
            client,
            rb: cluster.run_dir.join("rb"),
            state: cluster.run_dir.join("fake-kubelet"),
            flags: BTreeMap::new(),
            cycles: Vec::new(),
            used: Vec::new(),
            cuts: Vec::new(),
            fake_hosts: false,
            struck: Default::default(),
            fleetlock: Vec::new(),
            host_reboots: BTreeMap::new(),
            buses: BTreeMap::new(),
            metrics_addrs: Vec::new(),
        };
        let mut blocked: Option<String> = None;
        phase!(
            report,
            blocked,
            "nodes, deploy/, workload",
            s.workload(report)
        );
        phase!(report, blocked, "tokens and agent probes", s.probes(report));
        phase!(
            report,
            blocked,
            "rollboot plan before the rollout",
            s.check_plan(report)
        );
        phase!(report, blocked, "start rollboot", s.start_rollboot());
        phase!(report, blocked, "rollout of two nodes", s.rollout());
        phase!(
            report,
            blocked,
            "FleetLock answers only its host",
            s.fleetlock_callers(report)
        );
        phase!(
            report,
            blocked,
            "a FleetLock host reboots itself",
            s.fleetlock_host(report)
        );
        phase!(
            report,
            blocked,
            "a slot given back mid-reboot",
            s.give_back_mid_reboot(report)
        );
        phase!(
            report,
            blocked,
            "bounded servers",
            s.bounded_servers(report)
        );
        phase!(
            report,
            blocked,
            "a host shuts down by itself",
            s.host_shutdown(report)
        );
        phase!(
            report,
            blocked,
            "leader killed mid-drain",
            s.kill_mid_drain(report)
        );
        phase!(
            report,
            blocked,
            "leader killed mid-reboot",
            s.kill_mid_reboot(report)
        );
        phase!(
            report,
            blocked,
            "annotations and Leases mid-reboot",
            s.mid_reboot(report)
        );
        phase!(
            report,
            blocked,
            "tokens the agent refuses",
            s.refusals(report)
        );
        phase!(
            report,
            blocked,
            "a budget that never allows",
            s.never_allowing_budget(report)
        );
        phase!(
            report,
            blocked,
            "a StatefulSet's volumes detached before the reboot",
            s.volumes(report)
        );
        phase!(
            report,
            blocked,
            "kube-apiserver stopped and killed mid-drain",
            s.apiserver_outages(report)
        );
        phase!(report, blocked, "pause through the lock", s.pause(report));
        phase!(
            report,
            blocked,
            "plan and rehearsal against a real rollout",
            s.predictions(report)
        );
        // Last: its three cycles end without a reboot on node-3..5, whose drains the phases
        // above need, and which the predictions read.
        phase!(
            report,
            blocked,
            "shutdown requests with no shutdown",
            s.shutdown_requests(report)
        );
        phase!(
            report,
            blocked,
            "another actor's maintenance, and the conditions rollboot publishes",
            s.other_actors(report)
        );
        let t = Instant::now();
        let exited = cluster.exited();
        if !exited.is_empty() {
            report.header.push(format!(
                "processes that exited by themselves: {}",
                exited.join("; ")
            ));
        }
        let stopping = Utc::now();
        cluster.stop_processes(Duration::from_secs(5));
        s.cuts.push(Cut {
            user: None,
            from: stopping,
            to: Utc::now(),
            what: "the suite stopped rollboot's processes at the end of the run (SIGTERM)".into(),
            starting: false,
        });
        report.phase("stop rollboot and fake kubelet", t.elapsed());
        let t = Instant::now();
        let entries = audit::read(&cluster.run_dir.join("logs/audit.log"));
        s.check_reboots(report);
        s.check_uncordons(report, &entries);
        s.check_budget(report, &entries);
        s.check_events(report).await;
        s.check_audit(report, &entries);
        let why = blocked.unwrap_or_else(|| "not reached".into());
        for (id, title) in CHECKS {
            if !report.has(id) {
                report.not_run(id, title, why.clone());
            }
        }
        report.phase("final checks", t.elapsed());
    }

    // ---- phases ------------------------------------------------------------------------------

    /// Fake kubelet, five Ready nodes, deploy/ as shipped, the workload fully Ready.
    async fn workload(&mut self, report: &mut Report) -> Result<(), String> {
        let c = self.cluster;
        std::fs::create_dir_all(&self.state).map_err(|e| e.to_string())?;
        c.spawn(
            "fake-kubelet",
            Path::new("python3"),
            &[
                c.setup.suite.join("fake-kubelet.py").display().to_string(),
                "--nodes".into(),
                NODES.len().to_string(),
                "--server".into(),
                format!("https://127.0.0.1:{}", c.ports.api),
                "--state-dir".into(),
                self.state.display().to_string(),
            ],
            &[
                ("RUN_DIR", c.run_dir.display().to_string()),
                ("PYTHONUNBUFFERED", "1".into()),
            ],
        )?;
        let ready = self
            .obs
            .wait(Duration::from_secs(90), |w| {
                NODES
                    .iter()
                    .all(|n| {
                        w.node(n)
                            .is_some_and(|v| v.ready && v.lifecycle_taints().is_empty())
                    })
                    .then_some(())
            })
            .await;
        if ready.is_none() {
            return Err(format!(
                "the {} nodes were not all Ready without not-ready taints within 90 s: {}",
                NODES.len(),
                self.obs.with(|w| NODES
                    .iter()
                    .map(|n| match w.node(n) {
                        Some(v) => format!("{n} ready={} taints={:?}", v.ready, v.taints),
                        None => format!("{n} absent"),
                    })
                    .collect::<Vec<_>>()
                    .join(", "))
            ));
        }
        let deploy = c.setup.deploy.display().to_string();
        let out = kubectl(&c.admin, &["apply", "-k", &deploy]).await;
        if !out.ok {
            return Err(format!(
                "kubectl apply -k {deploy} failed: {}",
                out.stderr.trim()
            ));
        }
        let warnings: Vec<&str> = out
            .stderr
            .lines()
            .filter(|l| l.contains("Warning"))
            .collect();
        report.header.push(format!(
            "kubectl apply -k deploy/: {} object(s){}",
            out.stdout.lines().count(),
            if warnings.is_empty() {
                String::new()
            } else {
                format!("; {}", warnings.join(" | "))
            }
        ));
        // FleetLock's optional objects (checks 20, 22, 24): the Service, the NetworkPolicy and
        // the leader's one grant to review a standby's forward token.
        let optional = c.setup.deploy.join("optional/fleetlock.yaml");
        if optional.exists() {
            let f = optional.display().to_string();
            let out = kubectl(&c.admin, &["apply", "-f", &f]).await;
            if !out.ok {
                return Err(format!(
                    "kubectl apply -f {f} failed: {}",
                    out.stderr.trim()
                ));
            }
        }
        let workload = c.setup.recipe.join("workload.yaml").display().to_string();
        let out = kubectl(&c.admin, &["apply", "-f", &workload]).await;
        if !out.ok {
            return Err(format!(
                "kubectl apply -f {workload} failed: {}",
                out.stderr.trim()
            ));
        }
        let settled = self
            .obs
            .wait(Duration::from_secs(180), |w| {
                workload_missing(w).is_empty().then_some(())
            })
            .await;
        if settled.is_none() {
            return Err(format!(
                "the workload was not Ready within 180 s: {}",
                self.obs.with(workload_missing).join("; ")
            ));
        }
        self.obs.arm_web();
        let spread = self.obs.with(|w| {
            NODES
                .iter()
                .map(|n| format!("{n}: {}", w.evictable_on(n).len()))
                .collect::<Vec<_>>()
                .join(", ")
        });
        report
            .header
            .push(format!("evictable pods per node at the start: {spread}"));
        Ok(())
    }

    /// Configs and tokens (the recipe's scripts), then check 6 with the agent tokens, before
    /// any rollboot process runs (the probes write to Nodes).
    async fn probes(&mut self, report: &mut Report) -> Result<(), String> {
        let c = self.cluster;
        let nodes: Vec<String> = NODES.iter().map(|n| n.to_string()).collect();
        let said = run_script(
            &c.setup.suite.join("rollboot-config.sh"),
            &[
                &[
                    self.rb.display().to_string(),
                    self.state.display().to_string(),
                ][..],
                &nodes,
            ]
            .concat(),
            &[
                ("RECIPE", c.setup.recipe.display().to_string()),
                ("ROLLBOOT", c.setup.rollboot.display().to_string()),
            ],
            &c.log_path("rollboot-config"),
        )
        .await?;
        let agent_config = std::fs::read_to_string(self.rb.join("agent-node-1.yaml"))
            .map_err(|e| format!("reading agent-node-1.yaml: {e}"))?;
        self.fake_hosts =
            agent_config.contains("hostBootIdFile:") && agent_config.contains("hostMachineIdFile:");
        report.header.push(format!(
            "agents' host identity: {}",
            if self.fake_hosts {
                "each reads its fake host's boot-id-NODE and machine-id-NODE (fake kubelet's state dir)"
                    .to_string()
            } else {
                format!(
                    "this rollboot does not accept both reboot.hostBootIdFile and reboot.hostMachineIdFile ({})",
                    said.lines()
                        .find(|l| l.starts_with("host identity keys"))
                        .unwrap_or("?")
                )
            }
        ));
        run_script(
            &c.setup.recipe.join("tokens.sh"),
            &[
                &[c.admin.display().to_string(), self.rb.display().to_string()][..],
                &nodes,
            ]
            .concat(),
            &[],
            &c.log_path("tokens"),
        )
        .await?;
        let own = self.rb.join("agent-node-1.kubeconfig");
        let own2 = self.rb.join("agent-node-2.kubeconfig");
        let now = Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
        // Merge patches, as the agent sends them, with the agent's tokens and the probes' own
        // User-Agent (check 5 leaves them out). kubectl cannot send them: its `patch`,
        // `annotate` and `label` GET the Node first, which the agent's RBAC does not allow.
        let agent1 = probe_client(&own).await?;
        let agent2 = probe_client(&own2).await?;
        let ann = |key: &str, value: Option<&str>| serde_json::json!({"metadata": {"annotations": {key: value}}});
        let denied = [
            (
                "the agent of node-1 writes rollboot.dev/reboot-required on node-2",
                "node-2",
                ann("rollboot.dev/reboot-required", Some(&now)),
                ann("rollboot.dev/reboot-required", None),
            ),
            (
                "the agent of node-1 writes the controller's rollboot.dev/state on its own node",
                "node-1",
                ann("rollboot.dev/state", Some("done")),
                ann("rollboot.dev/state", None),
            ),
            (
                "the agent of node-1 writes the controller's rollboot.dev/reboot token on its own node",
                "node-1",
                ann("rollboot.dev/reboot", Some("1700000000000-e2e")),
                ann("rollboot.dev/reboot", None),
            ),
            (
                "the agent of node-1 adds a label to its own node",
                "node-1",
                serde_json::json!({"metadata": {"labels": {"e2e-probe": "1"}}}),
                serde_json::json!({"metadata": {"labels": {"e2e-probe": null}}}),
            ),
            (
                "the agent of node-1 changes its own node's spec (unschedulable)",
                "node-1",
                serde_json::json!({"spec": {"unschedulable": true}}),
                serde_json::json!({"spec": {"unschedulable": null}}),
            ),
        ];
        let mut failures = Vec::new();
        let mut notes = Vec::new();
        for (what, node, probe, undo) in &denied {
            match patch_node(&agent1, node, probe).await {
                Ok(()) => {
                    failures.push(format!("{what}: ALLOWED (merge patch {probe})"));
                    let _ = patch_node(&self.client, node, undo).await;
                }
                Err((_, msg)) if msg.contains("resulted in error") => failures.push(format!(
                    "{what}: refused only because the admission policy failed to evaluate: {msg}"
                )),
                Err((code, msg))
                    if (msg.contains("ValidatingAdmissionPolicy 'rollboot-agent-own-node'")
                        && msg.contains("denied request"))
                        || (code == 403 && msg.contains("cannot patch resource")) =>
                {
                    notes.push(format!("{what}: refused ({code}): {}", short(&msg, 200)))
                }
                Err((code, msg)) => failures.push(format!(
                    "{what}: failed ({code}), but not refused by the policy or RBAC: {msg}"
                )),
            }
        }
        for (node, client) in [("node-1", &agent1), ("node-2", &agent2)] {
            let t0 = Utc::now();
            if let Err((code, msg)) = patch_node(
                client,
                node,
                &ann("rollboot.dev/reboot-required", Some(&now)),
            )
            .await
            {
                failures.push(format!(
                    "the agent of {node} could not write rollboot.dev/reboot-required on its own node ({code}): {msg}"
                ));
                continue;
            }
            let seen = self
                .obs
                .wait(Duration::from_secs(10), |w| {
                    w.node_since(node, t0)
                        .iter()
                        .any(|v| v.has("reboot-required"))
                        .then_some(())
                })
                .await;
            if seen.is_none() {
                failures.push(format!(
                    "{node}: the agent's write of rollboot.dev/reboot-required was answered 200, but the Node never showed it"
                ));
            }
            let unset = ann("rollboot.dev/reboot-required", None);
            match patch_node(client, node, &unset).await {
                Ok(()) => notes.push(format!(
                    "the agent of {node} wrote and removed rollboot.dev/reboot-required on its own node"
                )),
                Err((code, msg)) => {
                    failures.push(format!(
                        "the agent of {node} could not remove rollboot.dev/reboot-required from its own node ({code}): {msg}"
                    ));
                    let _ = patch_node(&self.client, node, &unset).await;
                }
            }
        }
        report.check("6", title("6"), failures, notes);
        Ok(())
    }

    /// Two controllers and one agent per node, with the deploy/ identities' tokens.
    async fn start_rollboot(&mut self) -> Result<(), String> {
        let c = self.cluster;
        let bin = &c.setup.rollboot;
        // Each replica its own FleetLock port (in a cluster each Pod has its own address).
        let common = std::fs::read_to_string(self.rb.join("controller.yaml"))
            .map_err(|e| format!("controller.yaml: {e}"))?;
        // What the controller's projected volume holds in a cluster: a token of its
        // ServiceAccount for rollboot's forward audience, which a standby presents to the
        // leader (who checks it with a TokenReview).
        let forward = kubectl(
            &c.admin,
            &[
                "-n",
                "rollboot-system",
                "create",
                "token",
                "rollboot-controller",
                "--audience",
                "rollboot.dev/fleetlock-forward",
                "--duration=2h",
            ],
        )
        .await;
        if !forward.ok {
            return Err(format!(
                "kubectl create token (forward audience) failed: {}",
                forward.stderr.trim()
            ));
        }
        let token_file = self.rb.join("fleetlock-forward-token");
        std::fs::write(&token_file, forward.stdout.trim())
            .map_err(|e| format!("{}: {e}", token_file.display()))?;
        for id in CONTROLLERS {
            let addr: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
            let own = self.rb.join(format!("{id}.yaml"));
            std::fs::write(
                &own,
                format!(
                    "{common}\nfleetlock:\n  listen: {addr}\n  forwardTokenFile: {}\n",
                    token_file.display()
                ),
            )
            .map_err(|e| format!("{}: {e}", own.display()))?;
            self.fleetlock.push((id.to_string(), addr));
            let metrics: std::net::SocketAddr =
                format!("127.0.0.1:{}", free_port()).parse().unwrap();
            self.metrics_addrs.push((id.to_string(), metrics));
            c.spawn(
                id,
                bin,
                &[
                    "controller".into(),
                    "--config".into(),
                    own.display().to_string(),
                    "--identity".into(),
                    id.into(),
                    "--metrics-addr".into(),
                    metrics.to_string(),
                ],
                &[
                    (
                        "KUBECONFIG",
                        self.rb.join("controller.kubeconfig").display().to_string(),
                    ),
                    ("NO_COLOR", "1".into()),
                ],
            )?;
        }
        for n in NODES {
            self.spawn_agent(n, &self.rb.join(format!("agent-{n}.yaml")))?;
        }
        self.obs
            .wait(Duration::from_secs(40), |w| {
                w.lease("rollboot-leader")
                    .and_then(|l| l.holder.clone())
                    .filter(|h| CONTROLLERS.contains(&h.as_str()))
            })
            .await
            .map(|_| ())
            .ok_or_else(|| {
                format!(
                    "no controller took the leader Lease rollboot-system/rollboot-leader within 40 s; controller-a: {}",
                    problems(&c.log_path("controller-a"), 3).join(" | ")
                )
            })
    }

    /// Starts (or starts again) the agent of `node` as process `agent-NODE`, with `config` and
    /// the token bound to the agent DaemonSet's pod on that node.
    fn spawn_agent(&self, node: &str, config: &Path) -> Result<u32, String> {
        self.cluster.spawn(
            &format!("agent-{node}"),
            &self.cluster.setup.rollboot,
            &[
                "agent".into(),
                "--config".into(),
                config.display().to_string(),
                "--node-name".into(),
                node.into(),
            ],
            &[
                (
                    "KUBECONFIG",
                    self.rb
                        .join(format!("agent-{node}.kubeconfig"))
                        .display()
                        .to_string(),
                ),
                ("NO_COLOR", "1".into()),
                (
                    "DBUS_SYSTEM_BUS_ADDRESS",
                    self.buses.get(node).cloned().unwrap_or_else(|| {
                        format!("unix:path={}", self.rb.join("no-system-bus").display())
                    }),
                ),
            ],
        )
    }

    /// Two nodes flagged at once: one after the other, each once.
    async fn rollout(&mut self) -> Result<(), String> {
        let a = self.flag("node-1")?;
        let b = self.flag("node-2")?;
        let fa = self.await_flag("node-1", a).await?;
        self.await_flag("node-2", b).await?;
        let da = self.await_cycle("node-1", a, CYCLE_TIMEOUT).await?;
        self.cycles.push((da - fa).to_std().unwrap_or_default());
        let db = self.await_cycle("node-2", b, CYCLE_TIMEOUT).await?;
        self.cycles.push((db - da).to_std().unwrap_or_default());
        Ok(())
    }

    /// Check 20: a FleetLock host (issue 27). A client written from the protocol asks a
    /// standby replica for node-1's host (forwarded to the leader): not 200 until the node is
    /// cordoned, drained and its reboot handed to the host (no token, no reboot command); 200
    /// again from the leader (the recursive lock); the host reboots itself (the fake kubelet's
    /// reboot file); `steady-state` is 200 once the node is verified, uncordoned and done.
    async fn fleetlock_host(&mut self, report: &mut Report) -> Result<(), String> {
        use fleetlock_client::post;
        let node = "node-1";
        let mut failures = Vec::new();
        let mut notes = Vec::new();
        let b = self.zincati_body(node)?;
        // The host's own address: rollboot answers a host only from there (check 22).
        let own = security::host_ip(node);
        let (lead, standby) = self.fleetlock_pair()?;
        let asked_before = reboot_requests(&self.state, node);
        let rebooted_before = reboots(&self.state, node);
        let a = post(own, standby, "/v1/steady-state", b.clone(), true).await;
        if a.status != 200 {
            failures.push(format!("steady-state before anything: {a:?}"));
        }
        let t0 = Utc::now();
        let start = Instant::now();
        let mut kinds: Vec<String> = Vec::new();
        let granted = loop {
            let a = post(own, standby, "/v1/pre-reboot", b.clone(), true).await;
            match a.kind {
                None => break true,
                Some(k) if k == "waiting_slot" || k == "draining" => {
                    if kinds.last() != Some(&k) {
                        kinds.push(k);
                    }
                }
                Some(ref k) => {
                    failures.push(format!("pre-reboot answered {} {k}: {}", a.status, a.value))
                }
            }
            if start.elapsed() > CYCLE_TIMEOUT || failures.len() > 3 {
                break false;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        let waited = start.elapsed();
        if !granted {
            failures.push(format!(
                "pre-reboot not answered 200 within {}s: {}",
                CYCLE_TIMEOUT.as_secs(),
                self.describe(node)
            ));
            report.check("20", title("20"), failures, notes);
            return Err(format!("{node}: no FleetLock slot granted"));
        }
        notes.push(format!(
            "first pre-reboot to 200: {:.1} s ({} before: {})",
            waited.as_secs_f64(),
            kinds.len(),
            kinds.join(", ")
        ));
        self.obs.with(|w| {
            let Some(v) = w.node(node) else {
                failures.push(format!("{node}: not seen"));
                return;
            };
            if !v.unschedulable || v.state() != Some("rebooting") || !v.has("handed-off") {
                failures.push(format!(
                    "at 200: cordoned {}, state {:?}, handed-off {}",
                    v.unschedulable,
                    v.state(),
                    v.has("handed-off")
                ));
            }
            if v.has("reboot") {
                failures.push(
                    "at 200: a reboot token was written for a host that reboots itself".into(),
                );
            }
            let left: Vec<String> = w.evictable_on(node).iter().map(|p| p.key.clone()).collect();
            if !left.is_empty() {
                failures.push(format!("at 200: pods left to evict on {node}: {left:?}"));
            }
            let flagged_by = w.node_since(node, t0).iter().any(|v| {
                v.rollboot
                    .get("rollboot.dev/reboot-requested-reason")
                    .map(String::as_str)
                    == Some("fleetlock")
            });
            if !flagged_by {
                failures.push("the node was never seen flagged with reason fleetlock".into());
            }
        });
        let a = post(own, lead, "/v1/pre-reboot", b.clone(), true).await;
        if a.status != 200 {
            failures.push(format!("the holder asking the leader again: {a:?}"));
        }
        // The host reboots itself.
        let file = self.state.join(format!("reboot-{node}"));
        std::fs::write(&file, "fleetlock\n").map_err(|e| format!("{}: {e}", file.display()))?;
        *self.host_reboots.entry(node.into()).or_default() += 1;
        // Zincati starts again on the new boot, then calls steady-state.
        let before = self
            .obs
            .with(|w| w.node(node).map(|v| v.boot_id.clone()))
            .unwrap_or_default();
        let up = self
            .obs
            .wait(CYCLE_TIMEOUT, |w| {
                w.node(node)
                    .filter(|v| v.boot_id != before && v.ready)
                    .map(|_| ())
            })
            .await;
        if up.is_none() {
            failures.push(format!(
                "the host did not come back on a new boot: {}",
                self.describe(node)
            ));
        }
        let start = Instant::now();
        let released = loop {
            let a = post(own, standby, "/v1/steady-state", b.clone(), true).await;
            match a.kind.as_deref() {
                None => break true,
                Some("verifying") | Some("no_leader") => {}
                Some(_) => failures.push(format!("steady-state answered {a:?}")),
            }
            if start.elapsed() > CYCLE_TIMEOUT || failures.len() > 5 {
                break false;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        };
        if !released {
            failures.push(format!(
                "steady-state not 200 within {}s",
                CYCLE_TIMEOUT.as_secs()
            ));
        }
        notes.push(format!(
            "reboot to steady-state 200: {:.1} s",
            start.elapsed().as_secs_f64()
        ));
        self.obs.with(|w| {
            if let Some(v) = w.node(node) {
                if v.state() != Some("done") || v.unschedulable || v.has("cordoned-by") {
                    failures.push(format!(
                        "after steady-state: state {:?}, cordoned {}",
                        v.state(),
                        v.unschedulable
                    ));
                }
            }
        });
        let asked = reboot_requests(&self.state, node) - asked_before;
        let rebooted = reboots(&self.state, node) - rebooted_before;
        if asked != 0 || rebooted != 1 {
            failures.push(format!(
                "{asked} reboot command(s) ran and the host rebooted {rebooted} time(s); want 0 and 1"
            ));
        }
        let ok = failures.is_empty();
        report.check("20", title("20"), failures, notes);
        if ok {
            Ok(())
        } else {
            Err(format!(
                "{node}: the FleetLock host's cycle did not go as it must"
            ))
        }
    }

    /// Check 7a: the leader SIGKILLed while a node drains (after a first eviction landed).
    async fn kill_mid_drain(&mut self, report: &mut Report) -> Result<(), String> {
        let node = self.busiest(&["node-3", "node-4", "node-5"]);
        if self.obs.with(|w| w.evictable_on(&node).is_empty()) {
            let e = "no node among node-3..5 has a pod to evict, so none drains long enough to kill the leader during it".to_string();
            report.not_run("7a", title("7a"), e.clone());
            return Err(e);
        }
        self.used.push(node.clone());
        let r0 = (
            reboots(&self.state, &node),
            reboot_requests(&self.state, &node),
        );
        let t0 = self.flag(&node)?;
        self.await_flag(&node, t0).await?;
        let n = node.clone();
        let trigger = self
            .obs
            .wait(CYCLE_TIMEOUT, |w| {
                let vs = w.node_since(&n, t0);
                if vs
                    .iter()
                    .any(|v| matches!(v.state(), Some("rebooting" | "verifying" | "done")))
                {
                    return Some(Err(format!(
                        "{n} went past draining before a pod of it was seen terminating"
                    )));
                }
                let latest = vs.last()?;
                let pod = w.evictable_on(&n).into_iter().find(|p| p.deleting)?;
                (latest.state() == Some("draining")).then(|| Ok(pod.key.clone()))
            })
            .await;
        let pod = match trigger {
            Some(Ok(p)) => p,
            Some(Err(e)) => {
                report.check("7a", title("7a"), vec![e.clone()], vec![]);
                return Err(e);
            }
            None => {
                let e = format!(
                    "{node} was never seen draining with a pod terminating within {}s: {}",
                    CYCLE_TIMEOUT.as_secs(),
                    self.describe(&node)
                );
                report.check("7a", title("7a"), vec![e.clone()], vec![]);
                return Err(e);
            }
        };
        // An eviction request cut by the kill can leave a phantom entry in the budget's
        // status.disruptedPods that blocks evictions for 2 minutes (issue 10, point 7). The
        // drain sends its evictions together and retries refused ones every 2 s: kill halfway
        // between, when none is likely in flight.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let still = self
            .obs
            .with(|w| w.node(&node).and_then(|v| v.state().map(String::from)));
        if still.as_deref() != Some("draining") {
            let e = format!("{node} left draining ({still:?}) within 1 s of its first eviction; nothing to kill the leader in");
            report.not_run("7a", title("7a"), e.clone());
            return Err(e);
        }
        let what = format!("while {node} was draining ({pod} terminating)");
        self.failover(report, "7a", title("7a"), &node, t0, r0, &what, false)
            .await
    }

    /// Check 7b (and 9): the leader SIGKILLed as soon as a node is `rebooting`.
    async fn kill_mid_reboot(&mut self, report: &mut Report) -> Result<(), String> {
        let rest: Vec<&str> = ["node-3", "node-4", "node-5"]
            .into_iter()
            .filter(|n| !self.used.iter().any(|u| u == n))
            .collect();
        let node = self.busiest(&rest);
        self.used.push(node.clone());
        let r0 = (
            reboots(&self.state, &node),
            reboot_requests(&self.state, &node),
        );
        let t0 = self.flag(&node)?;
        self.await_flag(&node, t0).await?;
        let n = node.clone();
        let seen = self
            .obs
            .wait(CYCLE_TIMEOUT, |w| {
                let vs = w.node_since(&n, t0);
                if vs
                    .iter()
                    .any(|v| matches!(v.state(), Some("verifying" | "done")))
                {
                    return Some(false);
                }
                (vs.last()?.state() == Some("rebooting")).then_some(true)
            })
            .await;
        if seen != Some(true) {
            let e = format!(
                "{node} was never seen `rebooting` (or went past it unseen): {}",
                self.describe(&node)
            );
            report.check("7b", title("7b"), vec![e.clone()], vec![]);
            report.not_run("9", title("9"), "no node was caught rebooting");
            return Err(e);
        }
        let what = format!("as soon as {node} was `rebooting`");
        self.failover(report, "7b", title("7b"), &node, t0, r0, &what, true)
            .await
    }

    /// Kills the leader, measures the takeover, restarts the killed replica (as its Deployment
    /// would), waits for the node to finish; records check `id`. `(r0, q0)`: the node's lines
    /// in reboots.log and reboot-requests.log before its flag. With `status`, also runs
    /// `rollboot status` while there is no leader (check 9).
    #[allow(clippy::too_many_arguments)]
    async fn failover(
        &mut self,
        report: &mut Report,
        id: &str,
        title: &str,
        node: &str,
        t0: At,
        (r0, q0): (usize, usize),
        what: &str,
        status: bool,
    ) -> Result<(), String> {
        let Some(victim) = self
            .obs
            .with(|w| w.lease("rollboot-leader").and_then(|l| l.holder.clone()))
        else {
            let e = "the leader Lease has no holder".to_string();
            report.check(id, title, vec![e.clone()], vec![]);
            return Err(e);
        };
        let Some(survivor) = CONTROLLERS
            .iter()
            .find(|c| **c != victim)
            .map(|c| c.to_string())
        else {
            let e = format!("the leader Lease is held by `{victim}`, not one of {CONTROLLERS:?}");
            report.check(id, title, vec![e.clone()], vec![]);
            return Err(e);
        };
        self.struck.insert(node.to_string());
        self.cluster.kill(&victim)?;
        let killed = Utc::now();
        self.cuts.push(Cut::at(
            Some(audit::CONTROLLER),
            killed,
            format!("the suite SIGKILLed the leader {victim} {what}"),
        ));
        println!("e2e: SIGKILLed the leader {victim} {what}");
        if status {
            self.check_status(report, node).await;
        }
        let took = self
            .obs
            .wait(LEASE + Duration::from_secs(30), |w| {
                w.leases
                    .iter()
                    .find(|l| {
                        l.name == "rollboot-leader"
                            && l.at > killed
                            && l.holder.as_deref() == Some(survivor.as_str())
                    })
                    .map(|l| (l.at - killed).to_std().unwrap_or_default())
            })
            .await;
        let mut failures = Vec::new();
        let mut notes = Vec::new();
        let Some(took) = took else {
            let e = format!(
                "{survivor} did not take the leader Lease within {}s of killing {victim} {what}; {survivor}: {}",
                (LEASE + Duration::from_secs(30)).as_secs(),
                problems(&self.cluster.log_path(&survivor), 3).join(" | ")
            );
            report.check(id, title, vec![e.clone()], vec![]);
            return Err(e);
        };
        // The dead leader renewed at most one retry period before it died: the Lease may not
        // change hands before it expired, and should soon after.
        let earliest = LEASE.saturating_sub(RETRY + Duration::from_millis(500));
        if took < earliest {
            failures.push(format!(
                "{survivor} took the leader Lease {:.1}s after {victim} was killed, before the {}s lease could have expired",
                took.as_secs_f64(),
                LEASE.as_secs()
            ));
        }
        if took > LEASE + Duration::from_secs(12) {
            failures.push(format!(
                "{survivor} took the leader Lease only {:.1}s after {victim} was killed (lease {}s)",
                took.as_secs_f64(),
                LEASE.as_secs()
            ));
        }
        notes.push(format!(
            "killed {victim} (SIGKILL) {what}; {survivor} took over {:.1}s later (lease {}s)",
            took.as_secs_f64(),
            LEASE.as_secs()
        ));
        self.cluster.restart(&victim)?;
        // A phantom disruption (see kill_mid_drain) holds the drain for 2 minutes.
        let within = CYCLE_TIMEOUT + Duration::from_secs(if status { 0 } else { 120 });
        match self.await_cycle(node, t0, within).await {
            Ok(done) => {
                notes.push(format!(
                    "{node} done {:.1}s after the kill",
                    (done - killed).to_std().unwrap_or_default().as_secs_f64()
                ));
                self.cycles
                    .push((done - killed).to_std().unwrap_or_default());
            }
            Err(e) => {
                failures.push(e.clone());
                report.check(id, title, failures, notes);
                return Err(e);
            }
        }
        let phantoms: Vec<String> = self.obs.with(|w| {
            w.disrupted_pods_since(killed)
                .into_iter()
                .filter(|(_, secs)| *secs >= 30.0)
                .map(|(p, secs)| format!("{p} for {secs:.0}s"))
                .collect()
        });
        if !phantoms.is_empty() {
            notes.push(format!(
                "the budget demo/web kept {} in status.disruptedPods after the kill (a request cut by the kill: issue 10, point 7)",
                phantoms.join(", ")
            ));
        }
        let n = reboots(&self.state, node) - r0;
        let asked = reboot_requests(&self.state, node) - q0;
        if n != 1 {
            failures.push(format!(
                "{node} rebooted {n} time(s) for one flag (fake kubelet's reboots.log)"
            ));
        }
        if asked != 1 {
            failures.push(format!(
                "{node}: reboot.command ran {asked} time(s) for one flag (reboot-requests.log)"
            ));
        }
        if n == 1 && asked == 1 {
            notes.push(format!(
                "{node} rebooted exactly once (reboots.log), reboot.command ran once (reboot-requests.log)"
            ));
        }
        report.check(id, title, failures, notes);
        Ok(())
    }

    /// Check 9: `rollboot status --output json` (admin) while the node's state stands still.
    async fn check_status(&self, report: &mut Report, node: &str) {
        let before = self
            .obs
            .with(|w| w.node(node).and_then(|v| v.state().map(String::from)));
        let out = tokio::process::Command::new(&self.cluster.setup.rollboot)
            .args(["status", "--output", "json", "--config"])
            .arg(self.rb.join("controller.yaml"))
            .env("KUBECONFIG", &self.cluster.admin)
            .env("NO_COLOR", "1")
            .output()
            .await;
        let after = self
            .obs
            .with(|w| w.node(node).and_then(|v| v.state().map(String::from)));
        let title = title("9");
        let out = match out {
            Ok(o) => o,
            Err(e) => {
                return report.check(
                    "9",
                    title,
                    vec![format!("running rollboot status: {e}")],
                    vec![],
                )
            }
        };
        if before != after {
            return report.not_run(
                "9",
                title,
                format!("{node} changed state while status ran ({before:?} -> {after:?})"),
            );
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
            return report.check(
                "9",
                title,
                vec![format!(
                    "rollboot status --output json printed no JSON ({}): {}",
                    out.status,
                    short(&String::from_utf8_lossy(&out.stderr), 300)
                )],
                vec![],
            );
        };
        let want = before.unwrap_or_default();
        let mut failures = Vec::new();
        let in_lock = v["lock"]["inFlight"]
            .as_array()
            .and_then(|a| a.iter().find(|e| e["node"] == node))
            .map(|e| e["state"].as_str().unwrap_or("").to_string());
        match &in_lock {
            Some(s) if *s == want => {}
            Some(s) => failures.push(format!(
                "rollboot status shows {node} in flight as `{s}` while the Node says `{want}`"
            )),
            None => failures.push(format!("rollboot status does not list {node} in flight")),
        }
        let listed = v["nodes"]
            .as_array()
            .and_then(|a| a.iter().find(|e| e["name"] == node))
            .map(|e| e["state"].as_str().unwrap_or("").to_string());
        if listed.as_deref() != Some(want.as_str()) {
            failures.push(format!(
                "rollboot status's node list shows {node} as {listed:?} while the Node says `{want}`"
            ));
        }
        report.check(
            "9",
            title,
            failures,
            vec![format!("{node} was `{want}`, no leader at that moment")],
        );
    }

    /// Check 10: `rollboot plan --all --output json` (admin) on the settled workload, before any
    /// rollboot process runs: what it says each drain evicts against the pods the observer sees.
    async fn check_plan(&mut self, report: &mut Report) -> Result<(), String> {
        let out = self
            .run_rollboot(&["plan", "--all", "--output", "json"])
            .await?;
        let text = String::from_utf8_lossy(&out.stdout);
        let mut failures = Vec::new();
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
            report.check(
                "10",
                title("10"),
                vec![format!(
                    "rollboot plan --output json printed no JSON ({}): {}",
                    out.status,
                    short(&String::from_utf8_lossy(&out.stderr), 300)
                )],
                vec![],
            );
            return Ok(());
        };
        if out.status.code() != Some(0) || v["proceeds"] != true {
            failures.push(format!(
                "exit {:?}, proceeds {}: problems {}",
                out.status.code(),
                v["proceeds"],
                short(&v["problems"].to_string(), 600)
            ));
        }
        let nodes = v["nodes"].as_array().cloned().unwrap_or_default();
        let planned: Vec<&str> = nodes.iter().filter_map(|n| n["name"].as_str()).collect();
        let mut sorted = planned.clone();
        sorted.sort();
        if sorted != NODES {
            failures.push(format!(
                "planned {planned:?}, not the {} nodes",
                NODES.len()
            ));
        }
        let mut notes = Vec::new();
        for n in &nodes {
            let name = n["name"].as_str().unwrap_or_default();
            let evict: Vec<String> = n["evict"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|p| p["pod"].as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default();
            let seen: Vec<String> = self.obs.with(|w| {
                w.evictable_on(name)
                    .iter()
                    .filter(|p| !p.deleting)
                    .map(|p| p.key.clone())
                    .collect()
            });
            if evict != seen {
                failures.push(format!(
                    "{name}: plan evicts {evict:?}, the node has {seen:?}"
                ));
            }
            for p in n["evict"].as_array().into_iter().flatten() {
                let pod = p["pod"].as_str().unwrap_or_default();
                if pod.starts_with("demo/web-") && p["budgets"] != serde_json::json!(["demo/web"]) {
                    failures.push(format!("{name}: {pod} under {} not demo/web", p["budgets"]));
                }
            }
            notes.push(format!(
                "{name}: #{} start {} end {}, evicts {}",
                n["order"],
                n["start"].as_str().unwrap_or("-"),
                n["end"].as_str().unwrap_or("-"),
                evict.len()
            ));
        }
        notes.push(format!(
            "predicted end {} ({} s)",
            v["rollout"]["end"].as_str().unwrap_or("-"),
            v["rollout"]["makespanSeconds"]
        ));
        report.check("10", title("10"), failures, notes);
        Ok(())
    }

    /// Check 11: with every node's last cycle recorded by the flow so far, `rollboot plan
    /// --all` and `rollboot simulate --from-cluster` (the controller's config, no other
    /// option) predict a rollout of all five nodes; then all five are flagged and the real
    /// rollout is timed from its first cordon to its last `done`. The rehearsal's makespan must
    /// be within 20% of the real one; the plan's is reported beside it.
    async fn predictions(&mut self, report: &mut Report) -> Result<(), String> {
        let id = "11";
        let mut failures = Vec::new();
        let mut notes = Vec::new();
        let plan = self
            .rollboot_json(&["plan", "--all", "--output", "json"])
            .await?;
        let predicted_plan = plan["rollout"]["makespanSeconds"].as_f64();
        if plan["estimate"]["measuredNodes"] != serde_json::json!(NODES.len()) {
            failures.push(format!(
                "plan: {} node(s) with a measured last cycle, not {} (every node rebooted in the flow)",
                plan["estimate"]["measuredNodes"],
                NODES.len()
            ));
        }
        let rehearsal = self
            .rollboot_json(&["simulate", "--from-cluster", "--report", "json"])
            .await?;
        let predicted = rehearsal["makespanRealSeconds"].as_f64();
        if rehearsal["outcome"] != "finished" || rehearsal["pdbViolations"] != 0 {
            failures.push(format!(
                "the rehearsal: outcome {}, {} PDB violation(s): {}",
                rehearsal["outcome"], rehearsal["pdbViolations"], rehearsal["outcomeReason"]
            ));
        }
        for t in rehearsal["worldTimings"].as_array().into_iter().flatten() {
            notes.push(format!(
                "rehearsal {} {}: {}",
                t["key"].as_str().unwrap_or("?"),
                t["value"],
                t["source"].as_str().unwrap_or("?")
            ));
            if t["key"] == "rebootTime"
                && !t["source"]
                    .as_str()
                    .is_some_and(|s| s.starts_with("measured"))
            {
                failures.push(format!(
                    "the rehearsal's reboot time was not measured: {}",
                    t["source"]
                ));
            }
        }
        // The real rollout of the same five nodes with the same config.
        let t0 = Utc::now();
        let mut flagged = Vec::new();
        for n in NODES {
            flagged.push(self.flag(n)?);
        }
        let mut last = t0;
        for (n, t) in NODES.iter().zip(&flagged) {
            last = last.max(self.await_cycle(n, *t, CYCLE_TIMEOUT * 2).await?);
        }
        let first = self.obs.with(|w| {
            NODES
                .iter()
                .filter_map(|n| {
                    w.node_since(n, t0)
                        .into_iter()
                        .find(|v| v.state() == Some("cordoning"))
                        .map(|v| v.at)
                })
                .min()
        });
        let Some(first) = first else {
            report.check(
                id,
                title(id),
                vec!["no cordon of the real rollout was seen".into()],
                notes,
            );
            return Ok(());
        };
        let real = (last - first).to_std().unwrap_or_default().as_secs_f64();
        notes.insert(
            0,
            format!(
                "real rollout {real:.1} s (first cordon to last done; {:.1} s from the flags); rehearsal {}; plan {}",
                (last - t0).to_std().unwrap_or_default().as_secs_f64(),
                predicted.map_or("-".into(), |p| format!("{p:.1} s ({:+.0}%)", (p / real - 1.0) * 100.0)),
                predicted_plan.map_or("-".into(), |p| format!("{p:.0} s ({:+.0}%)", (p / real - 1.0) * 100.0)),
            ),
        );
        match predicted {
            Some(p) if (p - real).abs() <= 0.2 * real => {}
            Some(p) => failures.push(format!(
                "the rehearsal predicted {p:.1} s, the real rollout took {real:.1} s: off by more than 20%"
            )),
            None => failures.push("the rehearsal reported no makespanRealSeconds".into()),
        }
        report.check(id, title(id), failures, notes);
        Ok(())
    }

    /// Check 8: an operator holds the lock while two nodes are flagged; then releases it.
    async fn pause(&mut self, report: &mut Report) -> Result<(), String> {
        let title = title("8");
        let idle = self
            .obs
            .wait(Duration::from_secs(60), |w| {
                w.lease("rollboot-lock")
                    .is_some_and(|l| l.holder.is_none() && l.in_flight.is_empty())
                    .then_some(())
            })
            .await;
        if idle.is_none() {
            let e = format!(
                "the maintenance lock never became free: {:?}",
                self.obs.with(|w| w.lease("rollboot-lock").cloned())
            );
            report.check("8", title, vec![e.clone()], vec![]);
            return Err(e);
        }
        // `rollboot pause` (the operator's control, issue 12) takes the lock on the real server:
        // an rv-checked replace of the Lease with its holder and the pause annotations.
        let holder = format!("{}{OPERATOR}", rollboot::lock::PAUSE_HOLDER_PREFIX);
        let paused = self
            .rollboot_cli(&["pause", "--reason", "e2e check 8", "--by", OPERATOR])
            .await?;
        let held = Utc::now();
        let mut failures = Vec::new();
        if !paused.contains(&format!("paused by {OPERATOR}")) {
            failures.push(format!("rollboot pause said: {paused}"));
        }
        let status = self.rollboot_cli(&["status", "--output", "json"]).await?;
        match serde_json::from_str::<serde_json::Value>(&status) {
            Ok(v)
                if v["lock"]["holder"] == holder.as_str()
                    && v["lock"]["pause"]["by"] == OPERATOR
                    && v["lock"]["pause"]["reason"] == "e2e check 8" => {}
            _ => failures.push(format!(
                "rollboot status does not show the pause: {}",
                short(&status, 400)
            )),
        }
        let requests0: Vec<usize> = NODES
            .iter()
            .map(|n| reboot_requests(&self.state, n))
            .collect();
        // The nodes whose last cycle a fault struck, and at least two: the predictions
        // (check 11) read every node's last cycle.
        let mut nodes: Vec<String> = self.struck.iter().cloned().collect();
        for n in ["node-3", "node-4", "node-5", "node-1"] {
            if nodes.len() >= 2 {
                break;
            }
            if !nodes.iter().any(|m| m == n) && !self.used.iter().any(|u| u == n) {
                nodes.push(n.to_string());
            }
        }
        self.struck.clear();
        let mut t = Vec::new();
        for n in &nodes {
            t.push(self.flag(n)?);
        }
        for (n, t0) in nodes.iter().zip(&t) {
            self.await_flag(n, *t0).await?;
        }
        let longest = self
            .cycles
            .iter()
            .max()
            .copied()
            .unwrap_or(Duration::from_secs(20));
        let hold = (longest + Duration::from_secs(5))
            .clamp(Duration::from_secs(20), Duration::from_secs(60));
        tokio::time::sleep(hold).await;
        let until = Utc::now();
        self.obs.with(|w| {
            for n in NODES {
                for v in w.node_since(n, held).into_iter().filter(|v| v.at <= until) {
                    if v.unschedulable || v.state().is_some_and(|s| s != "done") {
                        failures.push(format!(
                            "{n} changed while the lock was held by {OPERATOR}: at {} state {:?}, unschedulable {}",
                            v.at.format("%H:%M:%S%.3f"),
                            v.state(),
                            v.unschedulable
                        ));
                        break;
                    }
                }
            }
            for l in w.leases.iter().filter(|l| l.name == "rollboot-lock" && l.at >= held && l.at <= until) {
                if l.holder.as_deref() != Some(holder.as_str()) || !l.in_flight.is_empty() {
                    failures.push(format!(
                        "the lock changed while {OPERATOR} held it: at {} holder {:?}, in flight {:?}",
                        l.at.format("%H:%M:%S%.3f"),
                        l.holder,
                        l.in_flight
                    ));
                    break;
                }
            }
        });
        for (i, n) in NODES.iter().enumerate() {
            let now = reboot_requests(&self.state, n);
            if now != requests0[i] {
                failures.push(format!(
                    "{n}: reboot.command ran while the lock was held by {OPERATOR}"
                ));
            }
        }
        let mut notes = vec![format!(
            "{OPERATOR} held the lock for {:.1}s with {} flagged (longest cycle so far {:.1}s)",
            (until - held).to_std().unwrap_or_default().as_secs_f64(),
            nodes.join(", "),
            longest.as_secs_f64()
        )];
        let resumed = self.rollboot_cli(&["resume"]).await?;
        if !resumed.contains("resumed") {
            failures.push(format!("rollboot resume said: {resumed}"));
        }
        let released = Utc::now();
        for (n, t0) in nodes.iter().zip(&t) {
            match self.await_cycle(n, *t0, CYCLE_TIMEOUT).await {
                Ok(done) => notes.push(format!(
                    "{n} done {:.1}s after the release",
                    (done - released).to_std().unwrap_or_default().as_secs_f64()
                )),
                Err(e) => {
                    failures.push(format!("after the release: {e}"));
                    report.check("8", title, failures, notes);
                    return Err(e);
                }
            }
        }
        report.check("8", title, failures, notes);
        Ok(())
    }

    // ---- helpers -----------------------------------------------------------------------------

    /// Runs `rollboot ARGS --config controller.yaml` as the admin.
    async fn run_rollboot(&self, args: &[&str]) -> Result<std::process::Output, String> {
        tokio::process::Command::new(&self.cluster.setup.rollboot)
            .args(args)
            .arg("--config")
            .arg(self.rb.join("controller.yaml"))
            .env("KUBECONFIG", &self.cluster.admin)
            .env("NO_COLOR", "1")
            .output()
            .await
            .map_err(|e| format!("running rollboot {args:?}: {e}"))
    }

    /// Runs `rollboot ARGS --config controller.yaml` as the admin; its stdout, or why it failed.
    async fn rollboot_cli(&self, args: &[&str]) -> Result<String, String> {
        let out = self.run_rollboot(args).await?;
        if !out.status.success() {
            return Err(format!(
                "rollboot {args:?} exited {}: {}",
                out.status,
                short(&String::from_utf8_lossy(&out.stderr), 400)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Runs `rollboot ARGS --config controller.yaml` as the admin and parses its JSON output,
    /// whatever its exit code (a plan that would not proceed exits 3 with its JSON).
    async fn rollboot_json(&self, args: &[&str]) -> Result<serde_json::Value, String> {
        let out = self.run_rollboot(args).await?;
        serde_json::from_slice(&out.stdout).map_err(|e| {
            format!(
                "rollboot {args:?} exited {} without JSON ({e}): {}",
                out.status,
                short(&String::from_utf8_lossy(&out.stderr), 400)
            )
        })
    }

    /// Creates `node`'s sentinel file (the agent notices it); returns when.
    fn flag(&mut self, node: &str) -> Result<At, String> {
        let path = self.rb.join("sentinels").join(node);
        let t0 = Utc::now();
        std::fs::write(&path, "e2e\n").map_err(|e| format!("{}: {e}", path.display()))?;
        *self.flags.entry(node.into()).or_default() += 1;
        println!("e2e: flagged {node} (flag {})", self.flags[node]);
        Ok(t0)
    }

    /// Waits for the agent to write `reboot-required` on `node` after `t0`.
    async fn await_flag(&self, node: &str, t0: At) -> Result<At, String> {
        self.obs
            .wait(FLAG_TIMEOUT, |w| {
                w.node_since(node, t0)
                    .iter()
                    .find(|v| v.has("reboot-required"))
                    .map(|v| v.at)
            })
            .await
            .ok_or_else(|| {
                format!(
                    "{node}: the agent never flagged it: no rollboot.dev/reboot-required on the Node {}s after its sentinel file was created; agent-{node} log: {}",
                    FLAG_TIMEOUT.as_secs(),
                    problems(&self.cluster.log_path(&format!("agent-{node}")), 2).join(" | ")
                )
            })
    }

    /// Waits for `node`'s cycle started by the flag at `t0` to end: `rebooting` then `done`
    /// seen, uncordoned, out of the lock, and its reboot in reboots.log. Returns when it was done.
    async fn await_cycle(&self, node: &str, t0: At, timeout: Duration) -> Result<At, String> {
        let want = self.flags.get(node).copied().unwrap_or(0) as usize;
        let state = self.state.clone();
        let r = self
            .obs
            .wait(timeout, |w| {
                let vs = w.node_since(node, t0);
                let rebooting = vs.iter().position(|v| v.state() == Some("rebooting"))?;
                let done = vs[rebooting..].iter().find(|v| v.state() == Some("done"))?;
                let latest = vs.last()?;
                let clean = latest.state() == Some("done")
                    && !latest.unschedulable
                    && !latest.has("cordoned-by");
                let freed = w
                    .lease("rollboot-lock")
                    .is_some_and(|l| !l.in_flight.contains_key(node));
                (clean && freed && reboots(&state, node) >= want).then_some(done.at)
            })
            .await;
        r.ok_or_else(|| {
            format!(
                "{node}: its reboot cycle did not end within {}s: {}",
                timeout.as_secs(),
                self.describe(node)
            )
        })
    }

    /// What is known about `node` now, for a timeout message.
    fn describe(&self, node: &str) -> String {
        let (latest, lock, leader) = self.obs.with(|w| {
            (
                w.node(node).cloned(),
                w.lease("rollboot-lock").cloned(),
                w.lease("rollboot-leader").and_then(|l| l.holder.clone()),
            )
        });
        let mut s = match latest {
            Some(v) => format!(
                "state {:?} since {:?}, unschedulable {}, ready {}, taints {:?}, failure {:?}",
                v.state(),
                v.rollboot.get("rollboot.dev/state-since"),
                v.unschedulable,
                v.ready,
                v.taints,
                v.rollboot.get("rollboot.dev/failure-reason")
            ),
            None => "never seen".into(),
        };
        s.push_str(&format!(
            "; reboots logged {}; lock {:?}; leader {:?}",
            reboots(&self.state, node),
            lock.map(|l| (l.holder, l.in_flight)),
            leader
        ));
        if let Some(l) = leader {
            s.push_str(&format!(
                "; {l}: {}",
                problems(&self.cluster.log_path(&l), 3).join(" | ")
            ));
        }
        s
    }

    /// Of `candidates`, the node with the most pods a drain evicts (ties: by name).
    fn busiest(&self, candidates: &[&str]) -> String {
        self.obs.with(|w| {
            candidates
                .iter()
                .max_by_key(|n| (w.evictable_on(n).len(), std::cmp::Reverse(n.to_string())))
                .map(|n| n.to_string())
                .unwrap_or_else(|| "node-5".into())
        })
    }

    // ---- final checks ------------------------------------------------------------------------

    /// Check 1.
    fn check_reboots(&self, report: &mut Report) {
        let mut failures = Vec::new();
        let mut notes = Vec::new();
        self.obs.with(|w| {
            for n in NODES {
                let flags = self.flags.get(n).copied().unwrap_or(0) as usize;
                let by_host = self.host_reboots.get(n).copied().unwrap_or(0);
                let done = reboots(&self.state, n) - by_host.min(reboots(&self.state, n));
                let asked = reboot_requests(&self.state, n);
                if done != flags {
                    failures.push(format!(
                        "{n}: flagged {flags} time(s), rebooted {done} time(s) (fake kubelet's reboots.log)"
                    ));
                }
                if asked != flags {
                    failures.push(format!(
                        "{n}: flagged {flags} time(s), reboot.command ran {asked} time(s) (reboot-requests.log)"
                    ));
                }
                let Some(v) = w.node(n) else {
                    failures.push(format!("{n}: never seen"));
                    continue;
                };
                if flags > 0 && v.state() != Some("done") {
                    failures.push(format!(
                        "{n}: ends in state {:?}, not done (failure reason {:?})",
                        v.state(),
                        v.rollboot.get("rollboot.dev/failure-reason")
                    ));
                }
                if v.unschedulable {
                    failures.push(format!("{n}: left cordoned (spec.unschedulable)"));
                }
                if v.has("cordoned-by") {
                    failures.push(format!("{n}: still carries rollboot.dev/cordoned-by"));
                }
                if flags + by_host > 0 && v.state() != Some("done") && flags == 0 {
                    failures.push(format!("{n}: ends in state {:?}, not done", v.state()));
                }
                notes.push(format!(
                    "{n}: {flags} flag(s), {done} reboot(s) asked of the agent, {by_host} by the host itself (FleetLock, its own shutdown), ends {}",
                    v.state().unwrap_or("without a state")
                ));
            }
            if let Some(l) = w.lease("rollboot-lock") {
                if l.holder.is_some() || !l.in_flight.is_empty() {
                    failures.push(format!(
                        "the maintenance lock is left held by {:?} with {:?} in flight",
                        l.holder, l.in_flight
                    ));
                }
            }
        });
        report.check("1", title("1"), failures, notes);
    }

    /// Check 2: at every version where a node went from unschedulable to schedulable. A stretch
    /// the Node watch may have missed (the kube-apiserver killed) counts as seen only if the
    /// audit log shows no Node write of rollboot's in it.
    fn check_uncordons(&self, report: &mut Report, entries: &Result<Vec<audit::Entry>, String>) {
        let mut failures = Vec::new();
        let mut notes = Vec::new();
        let mut count = 0;
        let mut retried = 0;
        let mut released = 0;
        let mut closest: Option<(f64, String)> = None;
        self.obs.with(|w| {
            for (name, vs) in &w.nodes {
                for i in 1..vs.len() {
                    let (prev, cur) = (&vs[i - 1], &vs[i]);
                    if !(prev.unschedulable && !cur.unschedulable && !cur.deleted) {
                        continue;
                    }
                    // `rollboot retry` of a failed node (its failure record removed in the
                    // same write): an operator's clearing, not the end of a reboot cycle.
                    if prev.state() == Some("failed") && cur.state().is_none() {
                        retried += 1;
                        continue;
                    }
                    let taints = cur.lifecycle_taints();
                    // The version that cordoned it: the first of the unschedulable run.
                    let cordoned = vs[..i]
                        .iter()
                        .rev()
                        .take_while(|v| v.unschedulable)
                        .last()
                        .expect("prev is unschedulable");
                    // A cycle ended without a reboot, on the boot it was cordoned on, because
                    // its reason went away: the host's shutdown cancelled (the agent removed
                    // its request), or never followed (the controller removed the request with
                    // the uncordon), or a FleetLock host gave its slot back (checks 21, 25 and
                    // 20 judge those).
                    let cancelled = prev.rollboot.get("rollboot.dev/cycle-for").map(String::as_str)
                        == Some("shutdown")
                        && (!prev.has("shutdown-requested") || !cur.has("shutdown-requested"));
                    let given_back = prev
                        .rollboot
                        .get("rollboot.dev/fleetlock")
                        .is_some_and(|f| f.contains("\"returned\""));
                    if cur.state() == Some("done")
                        && cur.boot_id == cordoned.boot_id
                        && (cancelled || given_back)
                    {
                        released += 1;
                        continue;
                    }
                    count += 1;
                    if cur.boot_id == cordoned.boot_id {
                        failures.push(format!(
                            "{name}: uncordoned at resourceVersion {} ({}) with the boot ID it had when cordoned ({}): not rebooted",
                            cur.rv,
                            cur.at.format("%H:%M:%S%.3f"),
                            cur.boot_id
                        ));
                    }
                    if !taints.is_empty() || !cur.ready {
                        let gone = vs[i..]
                            .iter()
                            .find(|v| v.lifecycle_taints().is_empty())
                            .map(|v| format!("{:.1}s later", (v.at - cur.at).num_milliseconds() as f64 / 1000.0))
                            .unwrap_or_else(|| "only after the run ended".into());
                        failures.push(format!(
                            "{name}: uncordoned at resourceVersion {} ({}) while it carried {:?} (Ready {}); the taints went away {gone}",
                            cur.rv,
                            cur.at.format("%H:%M:%S%.3f"),
                            taints,
                            cur.ready
                        ));
                    } else if let Some(last) = vs[..i].iter().rev().find(|v| !v.lifecycle_taints().is_empty()) {
                        let gap = (cur.at - last.at).num_milliseconds() as f64 / 1000.0;
                        if closest.as_ref().is_none_or(|(g, _)| gap < *g) {
                            closest = Some((gap, name.clone()));
                        }
                    }
                }
            }
            let (covered, open) = gaps(w, entries, "nodes", audit::is_node_write);
            notes.extend(covered);
            failures.extend(open);
        });
        if count == 0 {
            return report.not_run(
                "2",
                title("2"),
                "no node was uncordoned: no reboot cycle got that far",
            );
        }
        notes.push(format!(
            "{count} uncordon(s) observed with every Node version from the start; {retried} more by `rollboot retry` of a failed node, {released} more ending a cycle without a reboot (a shutdown cancelled, a FleetLock slot given back) (not judged: no reboot to wait for)"
        ));
        if let Some((gap, node)) = closest {
            notes.push(format!(
                "closest uncordon after a not-ready taint went: {node}, {gap:.1}s"
            ));
        }
        report.check("2", title("2"), failures, notes);
    }

    /// Check 3: the workload's health at every pod change since it was first fully Ready. A
    /// stretch the pod or budget watch may have missed (the kube-apiserver killed) counts as seen
    /// only if the audit log shows nothing of rollboot's in it that can take a pod down.
    fn check_budget(&self, report: &mut Report, entries: &Result<Vec<audit::Entry>, String>) {
        let title = title("3");
        self.obs.with(|w| {
            if !w.web_armed {
                return report.not_run("3", title, "the workload never became fully Ready");
            }
            if w.web_disrupted.is_empty() {
                return report.not_run("3", title, "no web pod was ever evicted: the budget was never tested");
            }
            let mut failures = Vec::new();
            let below: Vec<_> = w.web.iter().filter(|h| h.healthy < WEB_MIN_HEALTHY).collect();
            for h in below.iter().take(5) {
                failures.push(format!(
                    "only {} of {WEB_REPLICAS} web pods healthy at {} (pod change rv {}): {}",
                    h.healthy,
                    h.at.format("%H:%M:%S%.3f"),
                    h.rv,
                    h.not_healthy.join(", ")
                ));
            }
            if below.len() > 5 {
                failures.push(format!("... {} moments below {WEB_MIN_HEALTHY} in all", below.len()));
            }
            let mut gap_notes = Vec::new();
            for what in ["pods", "poddisruptionbudgets"] {
                let (covered, open) = gaps(w, entries, what, audit::is_disruption);
                gap_notes.extend(covered);
                failures.extend(open);
            }
            let min = w.web.iter().map(|h| h.healthy).min().unwrap_or(0);
            let pdb_min = w
                .pdb
                .iter()
                .filter(|p| p.desired_healthy > 0 && w.armed_at.is_some_and(|a| p.at >= a))
                .min_by_key(|p| p.current_healthy)
                .map(|p| format!("{} at {}", p.current_healthy, p.at.format("%H:%M:%S%.3f")));
            let phantom = w.disrupted_pods().len();
            let mut notes = vec![
                "measured: after every change of a demo/web pod seen by the admin watch, healthy = Ready and not terminating (as the disruption controller counts)".to_string(),
                format!(
                    "{} pod changes, minimum {min} of {WEB_REPLICAS} healthy, {} web pods evicted or deleted",
                    w.web.len(),
                    w.web_disrupted.len()
                ),
                format!(
                    "the budget's own status: minimum currentHealthy {} (desired {WEB_MIN_HEALTHY}); {phantom} pod(s) ever in status.disruptedPods; listed 30 s or longer: {:?}",
                    pdb_min.unwrap_or_else(|| "never reported".into()),
                    w.disrupted_pods()
                        .into_iter()
                        .filter(|(_, secs)| *secs >= 30.0)
                        .map(|(p, secs)| format!("{p} {secs:.0}s"))
                        .collect::<Vec<_>>()
                ),
            ];
            notes.extend(gap_notes);
            report.check("3", title, failures, notes);
        });
    }

    /// Check 4: `kubectl get events -A` (admin) shows rollboot's Events about each rebooted Node.
    async fn check_events(&self, report: &mut Report) {
        let title = title("4");
        let rebooted: Vec<&str> = NODES
            .into_iter()
            .filter(|n| reboots(&self.state, n) > 0)
            .collect();
        if rebooted.is_empty() {
            return report.not_run("4", title, "no node rebooted");
        }
        let out = kubectl(&self.cluster.admin, &["get", "events", "-A", "-o", "json"]).await;
        let Ok(v) = serde_json::from_str::<serde_json::Value>(&out.stdout) else {
            return report.check(
                "4",
                title,
                vec![format!(
                    "kubectl get events -A failed: {}",
                    out.stderr.trim()
                )],
                vec![],
            );
        };
        let items = v["items"].as_array().cloned().unwrap_or_default();
        let ours: Vec<&serde_json::Value> = items
            .iter()
            .filter(|e| {
                ["reportingComponent", "source"].iter().any(|k| {
                    let c = if *k == "source" {
                        &e["source"]["component"]
                    } else {
                        &e[*k]
                    };
                    c.as_str().is_some_and(|s| s.contains("rollboot"))
                })
            })
            .collect();
        let mut failures = Vec::new();
        let mut notes = vec![format!(
            "kubectl get events -A: {} Event(s), {} from rollboot",
            items.len(),
            ours.len()
        )];
        for n in &rebooted {
            let about: Vec<String> = ours
                .iter()
                .filter(|e| {
                    e["involvedObject"]["kind"] == "Node" && e["involvedObject"]["name"] == *n
                })
                .map(|e| {
                    format!(
                        "{}/{}",
                        e["metadata"]["namespace"].as_str().unwrap_or(""),
                        e["reason"].as_str().unwrap_or("")
                    )
                })
                .collect();
            if about.is_empty() {
                failures.push(format!(
                    "{n} rebooted but `kubectl get events -A` shows no Event from rollboot about Node/{n}"
                ));
            } else if !about
                .iter()
                .any(|a| CYCLE_REASONS.iter().any(|r| a.ends_with(&format!("/{r}"))))
            {
                failures.push(format!(
                    "{n}: rollboot's Events about it ({}) have none of the reboot cycle's reasons {CYCLE_REASONS:?}",
                    about.join(", ")
                ));
            } else {
                notes.push(format!("{n}: {}", about.join(", ")));
            }
        }
        report.check("4", title, failures, notes);
    }

    /// Checks 5, 5b, 5c, and the audit summary for the report.
    fn check_audit(&self, report: &mut Report, entries: &Result<Vec<audit::Entry>, String>) {
        let entries = match entries {
            Ok(e) => e,
            Err(e) => {
                for id in ["5", "5b", "5c"] {
                    report.check(id, title(id), vec![e.clone()], vec![]);
                }
                return;
            }
        };
        report.appendix.push(audit::summary(entries));
        let plan: Vec<&audit::Entry> = entries
            .iter()
            .filter(|e| e.user_agent.ends_with("(plan)"))
            .collect();
        let writes: Vec<String> = plan
            .iter()
            .filter(|e| e.verb != "get" && e.verb != "list")
            .map(|e| format!("{} {} answered {}", e.verb, e.uri, e.code))
            .collect();
        let mut verbs: BTreeMap<String, usize> = BTreeMap::new();
        for e in &plan {
            *verbs
                .entry(format!("{} {}", e.verb, e.resource))
                .or_default() += 1;
        }
        if plan.is_empty() && !report.has("10") {
            report.not_run("10b", title("10b"), "rollboot plan did not run (check 10)");
        } else {
            let mut failures = writes;
            if plan.is_empty() {
                failures.push("no request of rollboot plan in the audit log".into());
            }
            report.check("10b", title("10b"), failures, vec![format!("{verbs:?}")]);
        }
        let snapshot: Vec<&audit::Entry> = entries
            .iter()
            .filter(|e| e.user_agent.ends_with("(simulate)"))
            .collect();
        if snapshot.is_empty() && !report.has("11") {
            report.not_run("11b", title("11b"), "the rehearsal did not run (check 11)");
        } else {
            let mut failures: Vec<String> = snapshot
                .iter()
                .filter(|e| e.verb != "get" && e.verb != "list")
                .map(|e| format!("{} {} answered {}", e.verb, e.uri, e.code))
                .collect();
            if snapshot.is_empty() {
                failures.push("no request of rollboot simulate in the audit log".into());
            }
            let mut verbs: BTreeMap<String, usize> = BTreeMap::new();
            for e in &snapshot {
                *verbs
                    .entry(format!("{} {}", e.verb, e.resource))
                    .or_default() += 1;
            }
            report.check("11b", title("11b"), failures, vec![format!("{verbs:?}")]);
        }
        let ours = entries
            .iter()
            .filter(|e| e.is_rollboot_identity() && !e.is_probe())
            .count();
        let probes: Vec<&audit::Entry> = entries
            .iter()
            .filter(|e| e.is_rollboot_identity() && e.is_probe())
            .collect();
        // The answers the suite's own cuts explain, grouped by cut, request and code.
        let mut by_cut: BTreeMap<String, (usize, String)> = BTreeMap::new();
        for e in entries.iter().filter(|e| !e.is_probe()) {
            if let Some(c) = e.cut_by(&self.cuts) {
                let what = format!(
                    "{} to the {}'s {} {}, in flight when {}",
                    e.code,
                    e.identity(),
                    e.verb,
                    e.resource,
                    c.what
                );
                by_cut
                    .entry(what)
                    .or_insert((0, e.done.format("%H:%M:%S%.3f").to_string()))
                    .0 += 1;
            }
        }
        let cut: Vec<String> = by_cut
            .into_iter()
            .map(|(what, (n, first))| format!("{n} x {what} (first at {first}): not counted"))
            .collect();
        let mut notes = vec![format!(
            "{ours} requests from rollboot's identities; {} probes of check 6 told apart by their user agent ({})",
            probes.len(),
            audit::PROBE_USER_AGENT
        )];
        notes.extend(cut);
        if ours == 0 {
            report.not_run("5", title("5"), "rollboot sent no request at all");
        } else {
            report.check(
                "5",
                title("5"),
                audit::refused(entries, &self.cuts),
                notes.clone(),
            );
        }
        notes.clear();
        notes.extend(audit::user_agents(entries));
        if ours > 0 {
            report.check("5b", title("5b"), audit::without_user_agent(entries), notes);
        }
        let c = audit::node_conflicts(entries);
        let notes = vec![format!(
            "{} 409(s) on rollboot's Node writes, by cause: {:?}",
            c.total, c.by_cause
        )];
        if ours > 0 {
            report.check("5c", title("5c"), c.predictable, notes);
        }
    }
}

/// Every check, by number, with what it promises.
const CHECKS: [(&str, &str); 33] = [
    ("1", "every flagged node rebooted exactly once and ends `done`; nothing left cordoned"),
    ("2", "a node is uncordoned only after the not-ready/unreachable taints are gone"),
    ("3", "the PodDisruptionBudget is never broken: never fewer than 7 of 8 web pods healthy"),
    ("4", "rollboot's Events about each rebooted Node are readable with `kubectl get events -A`"),
    ("5", "audit log: no answer >= 400 to rollboot's identities other than 404/409/429"),
    ("6", "an agent cannot write another node, nor its own node's controller keys, labels or spec; it can write its own reboot-required"),
    ("7a", "leader SIGKILLed mid-drain: the other replica takes over after the lease; the node reboots once, ends done"),
    ("7b", "leader SIGKILLed mid-reboot: the other replica takes over after the lease; the node reboots once, ends done"),
    ("8", "`rollboot pause` holds rollboot-lock and pauses the rollout (longer than a cycle), `status` shows it; after `rollboot resume` it goes on"),
    ("9", "`rollboot status` shows an in-flight node's state as the Node has it (issue 10, point 5)"),
    ("5b", "audit log: rollboot's requests carry User-Agent rollboot/<version> (issue 10, point 6)"),
    ("5c", "audit log: no predictable 409 on a Node: after the node-lifecycle controller's write or rollboot's own (issue 10, point 4)"),
    ("10", "`rollboot plan --all` before the rollout: proceeds (exit 0), plans every node, and each drain preview evicts exactly the node's non-DaemonSet pods, the web pods under demo/web (issue 11)"),
    ("10b", "audit log: `rollboot plan` sent only get and list requests (issue 11)"),
    ("11", "with each node's last cycle recorded, `rollboot simulate --from-cluster` predicts the makespan of a real rollout of all five nodes within 20% (the plan's prediction reported beside it; issue 11)"),
    ("11b", "audit log: `rollboot simulate --from-cluster` sent only get and list requests (issue 11)"),
    ("12", "`state` garbled (banana) by the admin while the node's host is down for its acknowledged token: no second token, one reboot (reboots.log and reboot-requests.log), ends `done`; a MalformedAnnotation Event names the key and the value (issue 22, item 1)"),
    ("13", "`state: draining` written back over `rebooting` while the host is down for its acknowledged token: the same (issue 22, item 1)"),
    ("14a", "`reboot-ack` garbled after the agent's ack, while the host is down: the node comes back, is verified and ends `done`; one reboot, one token"),
    ("14b", "`reboot-ack` garbled while the node drains (before its token): the agent refuses the token (reboot-refused ackUnreadable), no reboot command runs, the node fails within 10 s with a reason naming rollboot.dev/reboot-ack (issue 22, item 4); after `rollboot retry`, one reboot"),
    ("15", "an agent on the wrong host (reboot.hostBootIdFile another node's): no reboot command runs, reboot-refused with cause wrongHost and a RebootRefused Warning Event, the node fails within 10 s with the agent's reason (issue 22, items 3 and 4); after `rollboot retry` on its own host, one reboot"),
    ("16a", "the kube-apiserver stopped (SIGSTOP) for 20 s mid-drain, then continued: the rollout completes, each flagged node rebooted once (both logs), the budget never broken, nothing left cordoned"),
    ("16b", "the kube-apiserver killed (SIGKILL) mid-drain and started again: the rollout completes, each flagged node rebooted once (both logs), the budget never broken, nothing left cordoned"),
    ("18", "a PodDisruptionBudget with maxUnavailable 0 over a pod of the node: the node fails within 10 s of its drain's start with a reason naming the budget and a BudgetNeverAllows Event, no reboot command (issue 24, drain.whenBlocked.never); once the budget is gone, `rollboot retry`: one reboot"),
    ("19", "a StatefulSet pod with a ReadWriteOnce CSI volume (the real attach-detach controller's VolumeAttachment, the fake kubelet's attacher): its node's reboot is asked only after the VolumeAttachment of the evicted pod's volume on that node is gone; the moved pod is Ready on another node with no FailedAttachVolume Multi-Attach Event, and the cycle's end waited until the volume was attached there (issue 24, drain.volumes.waitForDetach and waitForReattach)"),
    ("20", "a FleetLock host (Zincati's protocol, asked through a standby replica): pre-reboot is 200 only once the node is cordoned, drained and its reboot handed to the host (no token, no reboot command), and again for the holder; the host reboots itself; steady-state is 200 once the node is verified, uncordoned and done (issue 27)"),
    ("21", "a shutdown rollboot did not start (the agent's delay inhibitor on a fake logind): PrepareForShutdown(true) makes the agent write shutdown-requested and the controller cordon and drain the node at once; cancelled mid-drain (PrepareForShutdown(false)), the drain stops and the node is released, uncordoned, with a ReleasedWithoutReboot Event and no reboot; carried through, the agent lets its lock go only once the node is drained and handed to its host (no token, no reboot command), and after the host's own reboot the node is verified, uncordoned and done (issue 27)"),
    ("22", "FleetLock answers only the host a request names: from another address 403 client_not_host; a forward forged without a replica's token, with an agent's token or with the controller's API token (the API's audience) 403 untrusted_forward by the real TokenReview; nothing written; the host's own request through a standby is taken and recorded by the leader (issue 47, hole 1)"),
    ("23", "the controller's servers are bounded: a 64 KiB FleetLock body answered 413, and headers trickled one byte a second disconnected within 30 s on the FleetLock port and on /metrics (issue 47, hole 2)"),
    ("24", "a FleetLock host gives its slot back one second into its own 25 s reboot: the node is never uncordoned while NotReady and ends done on its new boot, one reboot (issue 47, hole 4)"),
    ("25", "three agents write shutdown-requested on their own Nodes with no shutdown behind it: never more than maxNodes + maxShutdownDrains (2) cordoned at once, each ends cancelled (done, uncordoned, request removed), no reboot, none failed (issue 47, hole 4)"),
    ("26", "a NodeMaintenance (its CRD installed from the published schema) names a flagged node: rollboot leaves it alone and `rollboot status` says otherMaintenance; deleted, the node reboots and its DrainInProgress, Drained and MaintenanceInProgress end rollboot's and False; a node whose maintenance conditions are all the admin's reboots with no status write of rollboot's on it (audit log) and its conditions unchanged (issue 49)"),
    ("17", "the lock and leader Leases deleted while a node's host is down for its acknowledged token: the node reboots once and ends `done`; the Leases come back and the nodes after it go on"),
];

/// The title of check `id`.
fn title(id: &str) -> &'static str {
    CHECKS
        .iter()
        .find(|(i, _)| *i == id)
        .map(|(_, t)| *t)
        .expect("a known check")
}

/// The gaps of watch `what` (see [`observe::Gap`]): notes for those the audit log covers
/// (no request of rollboot's that `changes` picks was in flight in them, so nothing of
/// rollboot's a check judges happened unseen), failures for the others.
fn gaps(
    w: &World,
    entries: &Result<Vec<audit::Entry>, String>,
    what: &str,
    changes: fn(&audit::Entry) -> bool,
) -> (Vec<String>, Vec<String>) {
    let mut covered = Vec::new();
    let mut open = Vec::new();
    for g in w.gaps.iter().filter(|g| g.what == what) {
        match entries {
            Ok(entries) => {
                let seen = audit::changes_between(entries, g.from, g.to, changes);
                if seen.is_empty() {
                    covered.push(format!(
                        "{g}; the audit log shows no request of rollboot's in it that the check judges: covered"
                    ));
                } else {
                    open.push(format!(
                        "{g}, and rollboot's requests were answered in it ({}): the evidence is incomplete",
                        seen.iter()
                            .map(|e| format!("{} {} {} {}", e.identity(), e.verb, e.uri, e.code))
                            .collect::<Vec<_>>()
                            .join("; ")
                    ));
                }
            }
            Err(e) => open.push(format!("{g}, and the audit log cannot be read ({e})")),
        }
    }
    (covered, open)
}

/// What keeps the workload from being fully Ready (empty when it is).
fn workload_missing(w: &World) -> Vec<String> {
    let mut missing = Vec::new();
    let ready_on = |prefix: &str, node: &str| {
        w.pods.values().any(|p| {
            p.key.starts_with(prefix) && p.node.as_deref() == Some(node) && p.ready && !p.deleting
        })
    };
    for n in NODES {
        if !ready_on("rollboot-agent/rollboot-agent-", n) {
            missing.push(format!("no Ready rollboot-agent pod on {n}"));
        }
        if !ready_on("demo/node-exporter-", n) {
            missing.push(format!("no Ready node-exporter pod on {n}"));
        }
    }
    let web: Vec<_> = w.pods.values().filter(|p| p.web && !p.deleting).collect();
    let ready = web.iter().filter(|p| p.ready).count();
    if web.len() != WEB_REPLICAS || ready != WEB_REPLICAS {
        missing.push(format!(
            "{ready} of {} web pods Ready (want {WEB_REPLICAS})",
            web.len()
        ));
    }
    let controllers = w
        .pods
        .values()
        .filter(|p| p.key.starts_with("rollboot-system/rollboot-controller-") && p.ready)
        .count();
    if controllers < 2 {
        missing.push(format!("{controllers} of 2 rollboot-controller pods Ready"));
    }
    match w.pdb.last() {
        Some(p) if p.current_healthy == WEB_REPLICAS as i32 && p.disruptions_allowed == 1 => {}
        p => missing.push(format!(
            "the budget demo/web is not settled: {:?}",
            p.map(|p| (p.current_healthy, p.disruptions_allowed))
        )),
    }
    missing
}

/// A client with an agent's token kubeconfig that names itself as the suite's probe and
/// never retries (a refusal must come back as it is).
async fn probe_client(kubeconfig: &Path) -> Result<kube::Client, String> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| e.to_string())?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| e.to_string())?;
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(audit::PROBE_USER_AGENT),
    ));
    config.default_retry = false;
    kube::Client::try_from(config).map_err(|e| e.to_string())
}

/// A JSON merge patch of Node `name`; the API's code and message when refused.
async fn patch_node(
    client: &kube::Client,
    name: &str,
    patch: &serde_json::Value,
) -> Result<(), (u16, String)> {
    let api: Api<Node> = Api::all(client.clone());
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) => Err((s.code, s.message)),
        Err(e) => Err((0, e.to_string())),
    }
}

async fn admin_client(kubeconfig: &Path) -> Result<kube::Client, String> {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).map_err(|e| e.to_string())?;
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .map_err(|e| e.to_string())?;
    kube::Client::try_from(config).map_err(|e| e.to_string())
}

/// Runs one of the recipe's scripts (or the suite's copy of one) with `env` added, its output
/// into `log`; returns the output.
async fn run_script(
    script: &Path,
    argv: &[String],
    env: &[(&str, String)],
    log: &Path,
) -> Result<String, String> {
    let out = tokio::process::Command::new("bash")
        .arg(script)
        .args(argv)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| format!("running {}: {e}", script.display()))?;
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    let _ = std::fs::write(log, &text);
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!(
            "{} failed ({}): {}",
            script.display(),
            out.status,
            short(&text, 600)
        ))
    }
}

/// Lines of the fake kubelet's `reboots.log` for `node` ("time node old-boot-id new-boot-id").
fn reboots(state: &Path, node: &str) -> usize {
    std::fs::read_to_string(state.join("reboots.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split_whitespace().nth(1) == Some(node))
        .count()
}

/// Lines of reboot.sh's `reboot-requests.log` for `node` ("time reboot requested for node").
fn reboot_requests(state: &Path, node: &str) -> usize {
    std::fs::read_to_string(state.join("reboot-requests.log"))
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split_whitespace().last() == Some(node))
        .count()
}

fn short(s: &str, n: usize) -> String {
    let s = s.trim().replace('\n', " | ");
    if s.chars().count() > n {
        format!("{}...", s.chars().take(n).collect::<String>())
    } else {
        s
    }
}
