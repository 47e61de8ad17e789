//! medik8s' NodeMaintenance objects (`nodemaintenance.medik8s.io/v1beta1`), read: the nodes
//! node-maintenance-operator takes out, or is about to.
//!
//! Owns the kind's name, the list of its objects ([`read`]: a 404 means the kind is not
//! installed, so no such actor, never an error), which of them still take their node out
//! ([`maintained`]: a phase other than `Succeeded`, as the operator's own taint covers the
//! node once it is in maintenance), and how often the controller lists them
//! ([`MaintainedCache`]). It must never write one, nor decide what a node under maintenance
//! means for a rollout (the controller's decisions do).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::core::GroupVersionKind;

/// The API group of NodeMaintenance.
pub const GROUP: &str = "nodemaintenance.medik8s.io";
/// Its version.
pub const VERSION: &str = "v1beta1";
/// Its kind.
pub const KIND: &str = "NodeMaintenance";
/// Its resource (plural).
pub const PLURAL: &str = "nodemaintenances";

/// Why the NodeMaintenance objects could not be read.
#[derive(Debug, thiserror::Error)]
#[error("listing {PLURAL}.{GROUP}/{VERSION}: {source}")]
pub struct NodeMaintenanceError {
    /// The API error.
    #[source]
    pub source: kube::Error,
}

/// The resource, for a dynamic client.
fn resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, KIND), PLURAL)
}

/// Lists every NodeMaintenance: the nodes they take out ([`maintained`]), or `None` when the
/// API server does not serve the kind (404: node-maintenance-operator is not installed).
pub async fn read(
    client: &kube::Client,
) -> Result<Option<BTreeMap<String, String>>, NodeMaintenanceError> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource());
    match api.list(&ListParams::default()).await {
        Ok(list) => Ok(Some(maintained(&list.items))),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(None),
        Err(source) => Err(NodeMaintenanceError { source }),
    }
}

/// The nodes `items` take out of service, each with the actor in words: every object whose
/// `spec.nodeName` is set and whose `status.phase` is not `Succeeded` (once it is, the
/// operator's `medik8s.io/drain` taint on the node says the same). Pure.
pub fn maintained(items: &[DynamicObject]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for o in items {
        let Some(node) = o.data["spec"]["nodeName"]
            .as_str()
            .filter(|n| !n.is_empty())
        else {
            continue;
        };
        if o.data["status"]["phase"].as_str() == Some("Succeeded") {
            continue;
        }
        let name = o.metadata.name.as_deref().unwrap_or_default();
        out.entry(node.to_string())
            .or_insert_with(|| format!("node-maintenance-operator (NodeMaintenance {name})"));
    }
    out
}

/// Marks each of `nodes` that a NodeMaintenance takes out with that actor (where its Node
/// says of none already), for a reader outside the controller (`status`, `plan`): what it
/// reads is what the controller decides from. A list it cannot read (no RBAC for the kind) is
/// logged and reads as none: the Node's own taints still say when the operator acts.
pub async fn mark(client: &kube::Client, nodes: &mut [crate::node::NodeView]) {
    let maintained = match read(client).await {
        Ok(found) => found.unwrap_or_default(),
        Err(e) => {
            tracing::warn!(error = %e, "could not read the NodeMaintenance objects; reading the Nodes' own signals only");
            return;
        }
    };
    for n in nodes.iter_mut().filter(|n| n.other_actor.is_none()) {
        n.other_actor = maintained.get(&n.name).cloned();
    }
}

/// How long a list of NodeMaintenance objects is used for a pass's decisions before it is read
/// again (the answer "not installed" too: a CRD may be installed at any time). The nodes a
/// pass starts are checked against a list read right before ([`MaintainedCache::fresh`]).
pub const FRESH_FOR: Duration = Duration::from_secs(5);

/// The controller's latest list of NodeMaintenance objects, read again when older than
/// [`FRESH_FOR`].
#[derive(Default)]
pub struct MaintainedCache {
    last: Mutex<Option<Listed>>,
}

/// One list's answer: when it was read, and the nodes taken out (`None`: not installed).
type Listed = (Instant, Option<BTreeMap<String, String>>);

impl MaintainedCache {
    /// The nodes NodeMaintenance objects take out, as last read, reading again through
    /// `client` when that is stale. A failed read keeps the last answer (logged): a stale list
    /// is safer than none, and the operator's taint covers a node once in maintenance.
    pub async fn current(&self, client: &kube::Client) -> BTreeMap<String, String> {
        let stale = match &*self.last.lock().expect("maintained") {
            Some((at, found)) if at.elapsed() < FRESH_FOR => {
                return found.clone().unwrap_or_default()
            }
            last => last.as_ref().and_then(|(_, m)| m.clone()),
        };
        self.read_again(client, stale).await
    }

    /// The nodes NodeMaintenance objects take out now: read through `client` whatever the age
    /// of the last list (before nodes are started).
    pub async fn fresh(&self, client: &kube::Client) -> BTreeMap<String, String> {
        let last = self
            .last
            .lock()
            .expect("maintained")
            .as_ref()
            .and_then(|(_, m)| m.clone());
        self.read_again(client, last).await
    }

    /// Reads the list again, keeping it; on a failed read, `stale`.
    async fn read_again(
        &self,
        client: &kube::Client,
        stale: Option<BTreeMap<String, String>>,
    ) -> BTreeMap<String, String> {
        match read(client).await {
            Ok(found) => {
                *self.last.lock().expect("maintained") = Some((Instant::now(), found.clone()));
                found.unwrap_or_default()
            }
            Err(e) => {
                tracing::warn!(error = %e, "could not read the NodeMaintenance objects; using the last list");
                stale.unwrap_or_default()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(name: &str, node: &str, phase: Option<&str>) -> DynamicObject {
        let mut o = DynamicObject::new(name, &resource());
        o.data = serde_json::json!({"spec": {"nodeName": node}});
        if let Some(p) = phase {
            o.data["status"] = serde_json::json!({ "phase": p });
        }
        o
    }

    #[test]
    fn an_object_takes_its_node_out_until_it_succeeded() {
        let found = maintained(&[
            object("nm-a", "node-a", None),
            object("nm-b", "node-b", Some("Running")),
            object("nm-c", "node-c", Some("Succeeded")),
            object("nm-d", "node-d", Some("Failed")),
            object("nm-e", "", Some("Running")),
        ]);
        assert_eq!(
            found.keys().map(String::as_str).collect::<Vec<_>>(),
            ["node-a", "node-b", "node-d"]
        );
        assert_eq!(
            found["node-b"],
            "node-maintenance-operator (NodeMaintenance nm-b)"
        );
    }
}
