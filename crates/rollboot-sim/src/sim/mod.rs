//! The embedded simulated cluster behind `rollboot simulate`, the tests and the benchmarks.
//!
//! An HTTP server on 127.0.0.1 that speaks the part of the Kubernetes API rollboot and kubectl
//! use, the way kube-apiserver v1.36 does (checked against recorded exchanges in
//! `tests/golden/`), plus a world that plays kubelets, the scheduler, ReplicaSets,
//! StatefulSets, DaemonSets and the disruption controller. Product code never imports this
//! module; it talks to the simulator through an ordinary kubeconfig, or, for the controller
//! replicas and agents `rollboot simulate` runs in its own process, through kube clients that
//! hand the same requests to the same router without a socket ([`transport`]).
//!
//! Known differences from kube-apiserver: no server-side apply (415); no deletecollection;
//! lists at an exact old resourceVersion answer 410 (no history is kept); a continue token
//! serves the current state after its key; core/v1 and events.k8s.io/v1 Events share one
//! storage and are validated as kube-apiserver does (`events.rs`, tests/golden/120-159), but
//! are never expired (the real server drops them after `--event-ttl`, 1 h) and carry no
//! managedFields; object metadata is validated on create (name and generateName by the kind's
//! rule, namespace, labels, annotations; not ownerReferences, finalizers or managedFields), and
//! on update only for Events (other kinds: immutable metadata is silently kept, not refused);
//! spec fields are not validated beyond decoding but for admission policies and the volume
//! kinds; defaulting covers Pods, Deployments, Namespaces, PriorityClasses, role bindings and
//! the volume kinds only, and Pod and Node admission is partial
//! (no service-account volume, no not-ready taint on create); a Deployment created through the
//! API (`kubectl create deployment`) gets no ReplicaSet and no pods: the world runs controllers
//! only for the objects it built itself; the node-lifecycle controller's taints are written
//! (`world.rs`) but its taint-based evictions are not; namespace deletion removes the
//! namespace object only;
//! watch bookmarks carry only metadata; ServiceAccounts, ConfigMaps, Services, RBAC objects and
//! PriorityClasses are stored and served (so `kubectl apply -k deploy/` works) but have no
//! effect; ValidatingAdmissionPolicies and their bindings are enforced on every write through
//! the API (`admission/`: not on the world's own writes; a policy with parameters, or asking
//! the authorizer, or calling a CEL function the evaluator lacks, is refused at creation); `/openapi/v3` has paths and no schemas,
//! `/openapi/v2` is not served; `dryRun` is refused (400); `fieldValidation=Strict` refuses
//! unknown fields, any other value drops them without a warning; protobuf create/update bodies
//! (kubectl's typed generators: `kubectl create namespace/deployment/configmap/pdb/...`) are
//! decoded by the table of `protobuf.rs` (Namespace, Deployment, Pod with the common PodSpec
//! and Container fields, ConfigMap, ServiceAccount, PodDisruptionBudget, Eviction, RBAC roles
//! and bindings, PriorityClass): other kinds (`kubectl create service`) and field numbers
//! outside the table are refused with a 400 naming them, where kube-apiserver decodes them
//! (and skips a field number it does not know); CBOR bodies are answered 415, as by
//! kube-apiserver v1.36 with its alpha CBOR gate off. PersistentVolumes, PersistentVolumeClaims,
//! StorageClasses, CSIDrivers and VolumeAttachments are served with their scheme defaults, the
//! status a create starts from, the protection finalizers of StorageObjectInUseProtection and
//! the validation and immutable fields of `volume_strategy.rs` (tests/golden/200-229; not the
//! parts its docs list), their quantities parsed, rounded up to milli units and served in
//! canonical form (`quantity.rs`; a Pod's or a Node's quantities are kept as written); no
//! protobuf bodies, no kind-specific table columns, no strategy warnings (a claim's fractional
//! byte value). The world runs kube-controller-manager's PV controller and its pv- and
//! pvc-protection controllers (`pv_controller.rs`: binding, Available/Released/Lost, the
//! finalizers held while a volume is Bound or a pod on a node mounts a claim), without their
//! Events; nothing deletes a claim (no StatefulSet retention policy); the world's provisioner
//! deletes its Released volumes, other volumes with the Delete policy stay Released (the real
//! controller tries a deleter plugin and may mark them Failed). The world's attach/detach
//! controller deletes a VolumeAttachment of an attach-required driver that no pod wants even
//! where it did not create it (the real one leaves one made by another after its start).
//!
//! One custom resource, medik8s' NodeMaintenance (`crd.rs`), is served once the scenario (or
//! [`Cluster::install_node_maintenance`]) installs its CRD, checked by its schema and kept as
//! JSON; before, its group answers as an unknown group does. No CustomResourceDefinition
//! objects are served (`apiextensions.k8s.io` is not a group here). The other actors that take
//! nodes out (its operator, an autoscaler) are `actors.rs`'s; the names they write on Nodes,
//! `signals.rs`'s. A nodes/status write stores the metadata it carries with the status, as
//! kube-apiserver's node status strategy does (other kinds' status writes keep only status).

pub mod actors;
pub mod admission;
pub mod api;
pub mod crd;
pub mod errors;
pub mod events;
pub mod fault_schedule;
pub mod faults;
pub mod identity;
pub mod index;
pub mod invariants;
pub mod kinds;
pub mod meta;
pub mod openapi;
pub mod patch;
pub mod pdb;
pub mod protobuf;
pub mod pv_controller;
pub mod quantity;
pub mod rbac;
pub mod scenario;
pub mod serve;
pub mod server;
pub mod signals;
pub mod snapshot;
pub mod stats;
pub mod store;
pub mod strategy;
pub mod table;
pub mod tokenreview;
pub mod transport;
pub mod validation;
pub mod volume_strategy;
pub mod volumes;
pub mod world;

use std::net::SocketAddr;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub use faults::FaultConfig;
pub use invariants::InvariantReport;
pub use scenario::{Placement, Scenario};
pub use stats::StatsReport;
pub use world::World;

use server::Shared;

/// Options of a cluster beyond its scenario.
#[derive(Clone, Debug)]
pub struct Options {
    /// Address to listen on (port 0: a free port).
    pub addr: SocketAddr,
    /// Recent events kept per resource for watch resumption.
    pub watch_window: usize,
    /// Interval of periodic watch bookmarks.
    pub bookmark_interval: Duration,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            watch_window: 20_000,
            bookmark_interval: Duration::from_secs(60),
        }
    }
}

/// A running simulated cluster.
pub struct Cluster {
    shared: Arc<Shared>,
    addr: SocketAddr,
    world: World,
    tasks: Vec<JoinHandle<()>>,
    stop: Option<oneshot::Sender<()>>,
}

struct OutageListener {
    addr: SocketAddr,
    inner: Option<TcpListener>,
    shared: Arc<Shared>,
}

/// An accepted connection that fails while the API server is "down", so that clients holding
/// pooled keep-alive connections (and open watches) see the outage too, not only new ones.
struct OutageStream {
    inner: TcpStream,
    shared: Arc<Shared>,
}

impl OutageStream {
    fn down(&self) -> Option<std::io::Error> {
        self.shared
            .faults
            .down_for()
            .map(|_| std::io::Error::from(std::io::ErrorKind::ConnectionReset))
    }
}

impl AsyncRead for OutageStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if let Some(e) = self.down() {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for OutageStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if let Some(e) = self.down() {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl axum::serve::Listener for OutageListener {
    type Io = OutageStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (OutageStream, SocketAddr) {
        loop {
            if let Some(d) = self.shared.faults.down_for() {
                self.inner = None;
                tokio::time::sleep(d).await;
                continue;
            }
            if self.inner.is_none() {
                match TcpListener::bind(self.addr).await {
                    Ok(l) => self.inner = Some(l),
                    Err(_) => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                }
            }
            let Some(l) = self.inner.as_ref() else {
                continue;
            };
            tokio::select! {
                r = l.accept() => {
                    if let Ok((s, a)) = r {
                        let _ = s.set_nodelay(true);
                        let s = OutageStream {
                            inner: s,
                            shared: self.shared.clone(),
                        };
                        return (s, a);
                    }
                }
                _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        Ok(self.addr)
    }
}

impl Cluster {
    /// Builds the scenario's world and serves it on a free 127.0.0.1 port.
    pub async fn start(scenario: Scenario) -> anyhow::Result<Cluster> {
        Cluster::start_with(scenario, Options::default()).await
    }

    /// Builds and serves with explicit options.
    pub async fn start_with(scenario: Scenario, opts: Options) -> anyhow::Result<Cluster> {
        Cluster::start_built(scenario, opts, None).await
    }

    /// Serves a cluster loaded from `snapshot` instead of the scenario's generated world; the
    /// scenario gives the timings (time factor, reboot, start and taint delays) and the seed.
    pub async fn start_from_snapshot(
        scenario: Scenario,
        opts: Options,
        snapshot: &snapshot::Snapshot,
    ) -> anyhow::Result<Cluster> {
        Cluster::start_built(scenario, opts, Some(snapshot)).await
    }

    async fn start_built(
        scenario: Scenario,
        opts: Options,
        snapshot: Option<&snapshot::Snapshot>,
    ) -> anyhow::Result<Cluster> {
        if snapshot.is_none() {
            scenario
                .validate()
                .map_err(|e| anyhow::anyhow!("scenario: {e}"))?;
        }
        let shared = Arc::new(Shared {
            store: store::Store::new(opts.watch_window),
            stats: stats::Stats::default(),
            faults: faults::Faults::default(),
            invariants: invariants::Invariants::default(),
            bookmark_interval: opts.bookmark_interval,
            enforcement: Default::default(),
            policies: Default::default(),
            crds: Default::default(),
        });
        let rng = match snapshot {
            Some(snap) => snapshot::load(&shared, snap, scenario.seed),
            None => world::build(&shared, &scenario),
        };
        let listener = TcpListener::bind(opts.addr).await?;
        let addr = listener.local_addr()?;
        // A schedule that creates NodeMaintenances gets their CRD, whatever the scenario says.
        let needed = scenario
            .faults
            .as_ref()
            .is_some_and(|f| f.needs_node_maintenance());
        let asked = scenario
            .node_maintenance
            .as_ref()
            .is_some_and(|n| n.installed);
        shared.crds.set_node_maintenance(asked || needed);
        let (world, world_task) = world::start(shared.clone(), scenario.clone(), rng);
        let actors_task = actors::start(shared.clone(), world.clone(), &scenario);
        let (stop, stopped) = oneshot::channel::<()>();
        let app = server::router(shared.clone());
        let ol = OutageListener {
            addr,
            inner: Some(listener),
            shared: shared.clone(),
        };
        let server_task = tokio::spawn(async move {
            let _ = axum::serve(ol, app)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(Cluster {
            shared,
            addr,
            world,
            tasks: vec![world_task, actors_task, server_task],
            stop: Some(stop),
        })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A kubeconfig document for this cluster with a bearer token (the caller's identity).
    pub fn kubeconfig(&self, token: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: rollboot-sim\n  cluster:\n    server: {url}\ncontexts:\n- name: rollboot-sim\n  context:\n    cluster: rollboot-sim\n    user: {token}\n    namespace: default\ncurrent-context: rollboot-sim\nusers:\n- name: {token}\n  user:\n    token: {token}\n",
            url = self.base_url()
        )
    }

    /// Writes the kubeconfig to `path`.
    pub fn write_kubeconfig(&self, path: &Path, token: &str) -> std::io::Result<()> {
        std::fs::write(path, self.kubeconfig(token))
    }

    /// A kube client config for this cluster, identified by `token`.
    pub async fn kube_config_as(&self, token: &str) -> anyhow::Result<kube::Config> {
        let kc: kube::config::Kubeconfig = yaml_serde::from_str(&self.kubeconfig(token))?;
        Ok(
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await?,
        )
    }

    /// A kube client for this cluster, identified by `token`.
    pub async fn kube_client_as(&self, token: &str) -> anyhow::Result<kube::Client> {
        Ok(kube::Client::try_from(self.kube_config_as(token).await?)?)
    }

    /// A kube client for `config` (this cluster's, see [`Cluster::kube_config_as`]) whose
    /// requests reach the API server in this process, without a socket (see [`transport`]).
    pub fn in_process_client(&self, config: &kube::Config) -> anyhow::Result<kube::Client> {
        let router = server::router(self.shared.clone());
        Ok(transport::client(config, router, self.shared.clone())?)
    }

    /// A kube client for this cluster with the token `test`.
    pub async fn kube_client(&self) -> anyhow::Result<kube::Client> {
        self.kube_client_as("test").await
    }

    /// The world handle.
    pub fn world(&self) -> &World {
        &self.world
    }

    /// How the store's lock has been used since the cluster was built.
    pub fn store_lock_use(&self) -> store::LockUse {
        self.shared.store.lock_use()
    }

    /// Request accounting so far.
    pub fn stats(&self) -> StatsReport {
        self.shared.stats.report()
    }

    /// The invariant records so far.
    pub fn invariants(&self) -> InvariantReport {
        self.shared.invariants.report()
    }

    /// How long budgets held evictions so far, one record per pod held.
    pub fn budget_holds(&self) -> Vec<invariants::Hold> {
        self.shared.invariants.holds()
    }

    /// Sets fault injection.
    pub fn set_faults(&self, config: FaultConfig) {
        self.shared.faults.set(config);
    }

    /// Holds every request of the client presenting `identity` for `delay` before serving it
    /// (a paused client or a slow network), from now on or, with `from = Some((verb,
    /// resource))`, from its first such request on. Held requests are served even if the client
    /// gave up on them. [`Cluster::release`] ends it.
    pub fn hold(&self, identity: &str, delay: Duration, from: Option<(&str, &str)>) {
        self.shared.faults.hold(identity, delay, from);
    }

    /// Exempts the client presenting `identity` from the fault rates of [`Cluster::set_faults`]
    /// (a test's or a fault player's own requests).
    pub fn exempt_from_faults(&self, identity: &str) {
        self.shared.faults.exempt(identity);
    }

    /// Answers the next `n` requests `verb resource` (plural) of the client presenting
    /// `identity` with 500.
    pub fn fail_next(&self, identity: &str, verb: &str, resource: &str, n: usize) {
        self.shared.faults.fail_next(identity, verb, resource, n);
    }

    /// Ends a [`Cluster::hold`].
    pub fn release(&self, identity: &str) {
        self.shared.faults.release(identity);
    }

    /// Turns on RBAC and admission enforcement for the tokens of `e` (once per cluster; later
    /// calls are ignored). Returns the shared enforcement state, to read what was used.
    pub fn enforce(&self, e: rbac::Enforcement) -> Arc<rbac::Enforcement> {
        let _ = self.shared.enforcement.set(Arc::new(e));
        self.shared.enforcement.get().expect("set").clone()
    }

    /// Abandons the next `n` admitted evictions half-way (see
    /// [`faults::Faults::abandon_evictions`]): a phantom disruption in the budget.
    pub fn abandon_evictions(&self, n: usize) {
        self.shared.faults.abandon_evictions(n);
    }

    /// Counts nodes out at once per value of the node label `key` as well.
    pub fn watch_groups(&self, key: &str) {
        self.shared.invariants.watch_groups(key);
    }

    /// Judges every planned start against `capacity` from now on
    /// ([`invariants::NodesOut`]).
    pub fn watch_capacity(&self, capacity: invariants::Capacity) {
        self.shared.invariants.watch_capacity(capacity);
    }

    /// Installs (or removes) the NodeMaintenance CRD: its group is served, and listed in
    /// discovery, only while it is installed.
    pub fn install_node_maintenance(&self, installed: bool) {
        self.shared.crds.set_node_maintenance(installed);
    }

    /// Refuses connections for `d` ("API server down").
    pub fn outage(&self, d: Duration) {
        self.shared.faults.outage(d);
    }

    /// Stops serving and the world.
    pub async fn shutdown(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        for t in self.tasks.drain(..) {
            t.abort();
        }
    }
}
