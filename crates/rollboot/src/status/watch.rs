//! `rollboot status --watch`'s reads: every Node, the leader Lease and the lock Lease followed
//! through kube's watchers (a list, then a watch from its resourceVersion; listed again after an
//! error, with kube's backoff), kept as the [`ClusterState`] `rollboot status` reads at once.
//!
//! Owns only I/O, and only lists and watches: it must never write, nor decide what is shown
//! (that is [`super::progress`]). Each change is handed over once all three have been listed;
//! an error before that ends the watch (the cluster cannot be read), as does a refusal (401,
//! 403) at any time; another error after it is logged and the watcher lists again.

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use futures::stream::{self, BoxStream, StreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::{watcher, WatchStreamExt};

use super::ClusterState;
use crate::config::Config;
use crate::node::NodeView;

/// A watch that failed before it had listed what it follows.
#[derive(Debug, thiserror::Error)]
#[error("cannot watch {object} at the API server {server}: {source}")]
pub struct FollowError {
    /// The API server's URL.
    pub server: String,
    /// What was being watched.
    pub object: String,
    /// The watcher's error.
    #[source]
    pub source: watcher::Error,
}

/// Which of the three watches an event comes from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Watched {
    Nodes,
    Leader,
    Lock,
}

enum WatchItem {
    Node(Box<watcher::Event<Node>>),
    Lease(Box<watcher::Event<Lease>>),
}

/// What the watches know, and what each is listing again.
#[derive(Default)]
struct WatchedState {
    nodes: BTreeMap<String, NodeView>,
    listing_nodes: Option<BTreeMap<String, NodeView>>,
    leader: Option<Lease>,
    lock: Option<Lease>,
    listing_lease: [Option<Option<Lease>>; 2],
    listed: [bool; 3],
}

impl WatchedState {
    fn lease(&mut self, from: Watched) -> (&mut Option<Lease>, &mut Option<Option<Lease>>) {
        match from {
            Watched::Lock => (&mut self.lock, &mut self.listing_lease[1]),
            _ => (&mut self.leader, &mut self.listing_lease[0]),
        }
    }

    /// Takes `item` in; whether what is known changed.
    fn apply(&mut self, from: Watched, item: WatchItem) -> bool {
        match item {
            WatchItem::Node(ev) => self.node_event(*ev),
            WatchItem::Lease(ev) => {
                let (kept, listing) = self.lease(from);
                match *ev {
                    watcher::Event::Init => *listing = Some(None),
                    watcher::Event::InitApply(l) => *listing = Some(Some(l)),
                    watcher::Event::InitDone => {
                        *kept = listing.take().flatten();
                        self.listed[from as usize] = true;
                    }
                    watcher::Event::Apply(l) => *kept = Some(l),
                    watcher::Event::Delete(_) => *kept = None,
                }
                true
            }
        }
    }

    fn node_event(&mut self, ev: watcher::Event<Node>) -> bool {
        match ev {
            watcher::Event::Init => self.listing_nodes = Some(BTreeMap::new()),
            watcher::Event::InitApply(n) => {
                let v = NodeView::from_node(&n);
                self.listing_nodes
                    .get_or_insert_with(BTreeMap::new)
                    .insert(v.name.clone(), v);
            }
            watcher::Event::InitDone => {
                self.nodes = self.listing_nodes.take().unwrap_or_default();
                self.listed[Watched::Nodes as usize] = true;
            }
            watcher::Event::Apply(n) => {
                let v = NodeView::from_node(&n);
                // A write rollboot does not read (the kubelet's status) is no change.
                let same = self.nodes.get(&v.name).is_some_and(|old| {
                    NodeView {
                        resource_version: v.resource_version.clone(),
                        ..old.clone()
                    } == v
                });
                self.nodes.insert(v.name.clone(), v);
                return !same;
            }
            watcher::Event::Delete(n) => {
                return self
                    .nodes
                    .remove(n.metadata.name.as_deref().unwrap_or_default())
                    .is_some();
            }
        }
        true
    }

    fn state(&self) -> ClusterState {
        ClusterState {
            leader: self.leader.clone(),
            lock: self.lock.clone(),
            nodes: self.nodes.values().cloned().collect(),
        }
    }
}

/// The API server refuses who asks (401, 403): asking again changes nothing.
fn refused(e: &watcher::Error) -> bool {
    let code = match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.code,
        watcher::Error::WatchError(s) => s.code,
        _ => return false,
    };
    matches!(code, 401 | 403)
}

/// Follows the cluster: calls `on_change` with what is known once everything has been listed,
/// then after each change, until it breaks. `server` names the API server in errors.
pub async fn follow(
    client: &kube::Client,
    server: &str,
    config: &Config,
    mut on_change: impl FnMut(&ClusterState) -> ControlFlow<()>,
) -> Result<(), FollowError> {
    let nodes: BoxStream<'static, _> =
        watcher(Api::<Node>::all(client.clone()), watcher::Config::default())
            .default_backoff()
            .map(|r| (Watched::Nodes, r.map(|e| WatchItem::Node(Box::new(e)))))
            .boxed();
    let lease = |from: Watched, namespace: &str, name: &str| -> BoxStream<'static, _> {
        let by_name = watcher::Config::default().fields(&format!("metadata.name={name}"));
        watcher(Api::<Lease>::namespaced(client.clone(), namespace), by_name)
            .default_backoff()
            .map(move |r| (from, r.map(|e| WatchItem::Lease(Box::new(e)))))
            .boxed()
    };
    let mut events = stream::select_all([
        nodes,
        lease(
            Watched::Leader,
            &config.leader.namespace,
            &config.leader.name,
        ),
        lease(Watched::Lock, &config.lock.namespace, &config.lock.name),
    ]);
    let mut kept = WatchedState::default();
    while let Some((from, r)) = events.next().await {
        let all_listed = kept.listed.iter().all(|l| *l);
        let changed = match r {
            Ok(item) => kept.apply(from, item),
            Err(source) if !all_listed || refused(&source) => {
                let object = match from {
                    Watched::Nodes => "the Nodes".to_string(),
                    Watched::Leader => {
                        format!("Lease {}/{}", config.leader.namespace, config.leader.name)
                    }
                    Watched::Lock => {
                        format!("Lease {}/{}", config.lock.namespace, config.lock.name)
                    }
                };
                return Err(FollowError {
                    server: server.into(),
                    object,
                    source,
                });
            }
            Err(e) => {
                tracing::warn!(error = %e, "status --watch: a watch failed; listing again");
                false
            }
        };
        if changed && kept.listed.iter().all(|l| *l) && on_change(&kept.state()).is_break() {
            return Ok(());
        }
    }
    Ok(())
}
