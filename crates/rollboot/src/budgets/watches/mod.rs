//! The workload watches: one per namespace and kind (PodDisruptionBudgets, ReplicaSets,
//! StatefulSets), shared by everyone who reads them and kept a while after.
//!
//! Owns [`WorkloadWatches`], the one set of watches the controller keeps, and what its
//! readers ask of it: the health gate follows a namespace's budgets and controllers
//! ([`crate::controller::gate`]); the drain names the budgets that refuse its evictions from
//! them and asks again when one has headroom ([`WorkloadWatches::budgets`],
//! [`WorkloadWatches::until_headroom`]); the budget-aware pick finds the budgets of a node's pods and
//! their headroom now ([`HeadroomReader`]). A rollout lists each namespace once rather than
//! once per node. It only reads: it must never write, nor decide whether a gate passes, a
//! drain fails or a node is picked.
//!
//! Its parts:
//! - [`state`]: what a watch knows (its objects, the budget index, what a follower wants),
//!   pure;
//! - [`keep`]: what a watch keeps of each object it receives, pure;
//! - [`follow`]: one running watch and those following it;
//! - [`headroom_reader`]: the budget-aware pick's reads of the nodes' pods and the budgets'
//!   headroom.
//!
//! This module and [`follow`] and [`headroom_reader`] are the only parts of
//! [`crate::budgets`] that do I/O (kube, tokio).

mod follow;
mod headroom_reader;
mod keep;
mod state;

#[cfg(test)]
pub(crate) mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Client;

use super::headroom::BudgetNow;
pub(crate) use follow::Feed;
pub use headroom_reader::{HeadroomReader, HeadroomSource};
pub(crate) use state::{pair_hash, FeedEvent, FeedState, Obj};
pub use state::{Health, Stream, Wanted, WorkloadKind};

/// How long a namespace's watch is kept after the last gate using it ended: the next node's
/// gate starts after that node's cordon and drain, and a watch kept across them spares a
/// relist of the whole namespace per node (with 25,000 ReplicaSets in a namespace, those
/// relists were most of the controller's time per node in a 5,000-node cluster).
pub const FEED_LINGER: Duration = Duration::from_secs(600);

/// The workload watches: one per namespace and kind, shared by every gate, drain and pass that
/// needs it, and kept [`FEED_LINGER`] after the last one let go of it, so consecutive nodes'
/// gates do not each list the namespace again (kube-apiserver's shared-informer pattern). It
/// only reads.
pub struct WorkloadWatches {
    client: Client,
    feeds: std::sync::Mutex<BTreeMap<Stream, (Arc<Feed>, std::time::Instant)>>,
    /// Woken on each change of a watched budget while the budget-aware pick passes nodes
    /// over: a budget that gets headroom again is the only change that lets such a node start,
    /// and it changes no Node.
    budget_wake: BudgetWake,
}

/// What a budget's change wakes, when anything.
type BudgetWake = Arc<std::sync::Mutex<Option<Arc<tokio::sync::Notify>>>>;

impl WorkloadWatches {
    /// No watch running yet.
    pub fn new(client: Client) -> WorkloadWatches {
        WorkloadWatches {
            client,
            feeds: Default::default(),
            budget_wake: Default::default(),
        }
    }

    /// The feed of `stream`, started when none runs.
    pub(crate) fn feed(&self, stream: &Stream) -> Arc<Feed> {
        let mut feeds = self.feeds.lock().expect("gate feeds");
        let now = std::time::Instant::now();
        if let Some((f, used)) = feeds.get_mut(stream) {
            *used = now;
            return f.clone();
        }
        let feed = Arc::new(Feed::start(
            self.client.clone(),
            stream,
            self.budget_wake.clone(),
        ));
        feeds.insert(stream.clone(), (feed.clone(), now));
        feed
    }

    /// Stops the watches no gate has used for [`FEED_LINGER`].
    pub fn sweep(&self) {
        let now = std::time::Instant::now();
        let mut feeds = self.feeds.lock().expect("gate feeds");
        for (f, used) in feeds.values_mut() {
            if Arc::strong_count(f) > 1 {
                *used = now;
            }
        }
        feeds.retain(|_, (_, used)| now.duration_since(*used) < FEED_LINGER);
    }

    /// The budgets of `namespace` that may select a pod with one of `pods`' labels, reduced to
    /// name, selector and `status.disruptedPods`, from the shared watch (started when none
    /// runs): the drain names them in the Events of refused evictions. A list of the
    /// namespace's budgets per refusing drain was a third of the controller's time per node
    /// in a 5,000-node cluster. `None` when the watch has not listed within `wait`.
    pub async fn budgets(
        &self,
        namespace: &str,
        pods: &[BTreeMap<String, String>],
        wait: Duration,
    ) -> Option<Vec<PodDisruptionBudget>> {
        use k8s_openapi::api::policy::v1::{PodDisruptionBudgetSpec, PodDisruptionBudgetStatus};
        self.when_listed(namespace, wait, |st| {
            let wanted = Wanted {
                names: BTreeSet::new(),
                selecting: pods.to_vec(),
            };
            st.kept(&wanted)
                .into_iter()
                .map(|o| {
                    let mut b = PodDisruptionBudget {
                        metadata: kube::api::ObjectMeta {
                            name: Some(o.name.clone()),
                            namespace: Some(namespace.to_string()),
                            ..Default::default()
                        },
                        spec: Some(PodDisruptionBudgetSpec {
                            selector: o.selector.clone(),
                            ..Default::default()
                        }),
                        status: (!o.disrupted.is_empty()).then(|| PodDisruptionBudgetStatus {
                            disrupted_pods: Some(o.disrupted.clone()),
                            ..Default::default()
                        }),
                    };
                    if let Some(never) = &o.never {
                        never.apply(&mut b);
                    }
                    b
                })
                .collect()
        })
        .await
    }

    /// `read` of the budgets of `namespace` as the shared watch (started when none runs) knows
    /// them, once it has listed; `None` when it has not within `wait`.
    async fn when_listed<T>(
        &self,
        namespace: &str,
        wait: Duration,
        read: impl Fn(&FeedState) -> T,
    ) -> Option<T> {
        let feed = self.feed(&(WorkloadKind::Budget, namespace.to_string()));
        if !feed.shared.first_list(wait).await {
            return None;
        }
        let st = feed.shared.state.lock().expect("gate feed");
        Some(read(&st))
    }

    /// For each of `pods` (name, labels) of `namespace`, the budgets that select it (by name,
    /// a budget whose selector cannot be evaluated counted as selecting it), from the shared
    /// watch (started when none runs); `None` when the watch has not listed within `wait`.
    pub async fn budgets_of_pods(
        &self,
        namespace: &str,
        pods: &[&BTreeMap<String, String>],
        wait: Duration,
    ) -> Option<Vec<Vec<String>>> {
        self.when_listed(namespace, wait, |st| {
            pods.iter()
                .map(|labels| {
                    let wanted = Wanted {
                        names: BTreeSet::new(),
                        selecting: vec![(*labels).clone()],
                    };
                    st.kept(&wanted).iter().map(|o| o.name.clone()).collect()
                })
                .collect()
        })
        .await
    }

    /// The budget `namespace/name` as its watch knows it now (without starting a watch):
    /// `status.disruptionsAllowed` and `status.disruptedPods`.
    pub fn budget_now(&self, namespace: &str, name: &str) -> Option<BudgetNow> {
        let feeds = self.feeds.lock().expect("gate feeds");
        let (feed, _) = feeds.get(&(WorkloadKind::Budget, namespace.to_string()))?;
        let st = feed.shared.state.lock().expect("gate feed");
        let o = st.objects.get(name)?;
        Some(BudgetNow {
            allowed: o.allowed,
            disrupted: o.disrupted.keys().cloned().collect(),
        })
    }

    /// Resolves when budget `namespace/name` allows a disruption in a change its watch sees
    /// after this call (a relist included); never when the namespace's budgets are not
    /// watched. Only a change counts, not the state now: a drain just refused by the server
    /// while this watch still shows the budget's headroom from before must not ask again at
    /// once.
    pub async fn until_headroom(&self, namespace: &str, name: &str) {
        let feed = {
            let feeds = self.feeds.lock().expect("gate feeds");
            feeds
                .get(&(WorkloadKind::Budget, namespace.to_string()))
                .map(|(f, _)| f.clone())
        };
        let Some(feed) = feed else {
            return std::future::pending().await;
        };
        let mut rx = feed.shared.tx.subscribe();
        let has_headroom = || {
            let st = feed.shared.state.lock().expect("gate feed");
            st.objects.get(name).is_some_and(|o| o.allowed > 0)
        };
        loop {
            match rx.recv().await {
                Ok(FeedEvent::Apply(o)) if o.name == name && o.allowed > 0 => return,
                Ok(FeedEvent::InitDone) if has_headroom() => return,
                Ok(_) => {}
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) if has_headroom() => {
                    return
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                    return std::future::pending().await
                }
            }
        }
    }

    /// Wakes `wake` on every later change of a watched budget (`None`: no longer).
    pub fn wake_on_budget_change(&self, wake: Option<Arc<tokio::sync::Notify>>) {
        *self.budget_wake.lock().expect("budget wake") = wake;
    }

    /// Stops every watch (gates still following one keep it until they end).
    pub fn stop_all(&self) {
        self.feeds.lock().expect("gate feeds").clear();
    }

    /// The namespaces and kinds watched now.
    pub fn watching(&self) -> Vec<Stream> {
        self.feeds
            .lock()
            .expect("gate feeds")
            .keys()
            .cloned()
            .collect()
    }
}
