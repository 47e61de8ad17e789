//! One running workload watch: a kind in a namespace, followed with kube's watcher and told to
//! everyone following it.
//!
//! Owns [`Feed`] (a running watch; dropping the last handle stops it), [`FeedShared`] (its
//! [`FeedState`] and the channels that tell its followers each event, in order, and wake those
//! waiting for its first list) and the watch loop itself (its initial list paged by kube's
//! watcher, each object reduced by a [`Keep`]). It only reads: it must never write, nor decide
//! anything from what it sees.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use kube::api::Api;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use super::keep::{keep_budget, keep_scale, Keep};
use super::state::{FeedEvent, FeedState, Obj, Stream, Wanted, WorkloadKind};
use super::BudgetWake;

/// A namespace's watch of one kind, shared by everyone who follows it.
pub(super) struct FeedShared {
    pub(super) state: std::sync::Mutex<FeedState>,
    pub(super) tx: broadcast::Sender<FeedEvent>,
    /// `FeedState::listed` as of the last event, for those who wait for the first list.
    listed: tokio::sync::watch::Sender<bool>,
}

impl FeedShared {
    /// Nothing listed yet.
    pub(super) fn new() -> FeedShared {
        FeedShared {
            state: Default::default(),
            tx: broadcast::channel(4096).0,
            listed: tokio::sync::watch::channel(false).0,
        }
    }

    /// Waits until a list completed, at most `wait`; `false` when none did.
    ///
    /// Woken by the list's end rather than polled: a pass that meets a namespace for the
    /// first time (every pass of a new leader) waited up to a poll period more than the list
    /// took (50 ms polls made a 1,000-node leader's first start 120 ms late).
    pub(super) async fn first_list(&self, wait: Duration) -> bool {
        let mut listed = self.listed.subscribe();
        let done = tokio::time::timeout(wait, listed.wait_for(|l| *l)).await;
        matches!(done, Ok(Ok(_)))
    }

    pub(super) fn publish(&self, ev: FeedEvent) {
        let mut st = self.state.lock().expect("gate feed");
        st.apply(&ev);
        // Mirrors the state (which says what completes a list): waiters woken on a change only.
        self.listed
            .send_if_modified(|l| std::mem::replace(l, st.listed) != st.listed);
        // Sent under the lock: a gate that subscribes under it gets every later event.
        let _ = self.tx.send(ev);
    }
}

/// A running namespace watch; dropping the last handle stops it.
pub(crate) struct Feed {
    pub(super) shared: Arc<FeedShared>,
    /// The watch's task, aborted when the feed is dropped.
    task: JoinHandle<()>,
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Feed {
    /// Starts the watch of `stream` (`wake`, for budgets: woken on each change).
    pub(super) fn start(client: Client, stream: &Stream, wake: BudgetWake) -> Feed {
        let shared = Arc::new(FeedShared::new());
        let (s, sh) = (stream.clone(), shared.clone());
        let task = tokio::spawn(async move {
            let (kind, ns) = s.clone();
            match kind {
                WorkloadKind::Budget => follow(client, s, sh, keep_budget(), Some(wake)).await,
                WorkloadKind::ReplicaSet => {
                    follow(client, s, sh, keep_scale::<ReplicaSet>(), None).await
                }
                WorkloadKind::StatefulSet => {
                    follow(client, s, sh, keep_scale::<StatefulSet>(), None).await
                }
            }
            tracing::debug!(namespace = %ns, kind = kind.name(), "health gate watch ended");
        });
        Feed { shared, task }
    }

    /// Joins the watch: what a follower that starts now must be told first to know what the
    /// watch knows, only the objects `wanted` keeps ([`FeedState::replay`]), and the receiver
    /// of every later event (subscribed under the same lock, so nothing falls between).
    pub(crate) fn join(&self, wanted: &Wanted) -> (Vec<FeedEvent>, broadcast::Receiver<FeedEvent>) {
        let st = self.shared.state.lock().expect("gate feed");
        (st.replay(wanted), self.shared.tx.subscribe())
    }
}

/// Watches one kind in one namespace for everyone following `feed`, keeping of each object
/// only what `keep` reads; a change wakes `wake`'s waiter, if any.
async fn follow<K>(
    client: Client,
    stream: Stream,
    feed: Arc<FeedShared>,
    keep: Keep<K>,
    wake: Option<BudgetWake>,
) where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
    K::DynamicType: Default,
{
    let api: Api<K> = Api::namespaced(client, &stream.1);
    let events = watcher(api, watcher::Config::default()).default_backoff();
    futures::pin_mut!(events);
    let obj = |o: &K| {
        Arc::new(Obj {
            name: o.name_any(),
            health: (keep.health)(o),
            selector: (keep.selector)(o).cloned(),
            disrupted: (keep.disrupted)(o),
            never: (keep.never)(o),
            allowed: (keep.allowed)(o),
        })
    };
    while let Some(ev) = events.next().await {
        let ev = match ev {
            Ok(watcher::Event::Init) => FeedEvent::Init,
            Ok(watcher::Event::InitDone) => FeedEvent::InitDone,
            Ok(watcher::Event::InitApply(o) | watcher::Event::Apply(o)) => {
                FeedEvent::Apply(obj(&o))
            }
            Ok(watcher::Event::Delete(o)) => FeedEvent::Delete(o.name_any()),
            Err(e) => {
                tracing::warn!(namespace = %stream.1, kind = stream.0.name(), error = %e, "health gate watch");
                continue;
            }
        };
        let changed = matches!(ev, FeedEvent::Apply(_) | FeedEvent::Delete(_));
        feed.publish(ev);
        if let Some(w) = wake.as_ref().filter(|_| changed) {
            if let Some(n) = w.lock().expect("budget wake").as_ref() {
                n.notify_one();
            }
        }
    }
}
