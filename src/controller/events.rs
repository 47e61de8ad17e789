//! Kubernetes Events (events.k8s.io/v1) on Nodes, for each transition and each blocked eviction.
//!
//! Owns the shape of the Events rollboot writes. It must never fail the caller: an Event that
//! cannot be written is logged and dropped, because Events are for people, not for correctness.

use chrono::Utc;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, PostParams};
use kube::Client;

use crate::time;

/// Writes Events on Nodes on behalf of one rollboot component.
#[derive(Clone)]
pub struct Recorder {
    client: Client,
    namespace: String,
    controller: String,
    instance: String,
}

impl Recorder {
    /// A recorder writing into `namespace` as `controller` (e.g. `rollboot.dev/controller`),
    /// instance `instance` (the replica or node).
    pub fn new(client: Client, namespace: &str, controller: &str, instance: &str) -> Recorder {
        Recorder {
            client,
            namespace: namespace.into(),
            controller: controller.into(),
            instance: instance.into(),
        }
    }

    /// Records an Event about Node `node`, in the background: the caller never waits for it.
    pub async fn publish(&self, node: &str, warning: bool, reason: &str, note: String) {
        let regarding = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.into()),
            uid: Some(node.into()),
            ..Default::default()
        };
        self.emit(node, regarding, warning, reason, note);
    }

    /// Records an Event about the Lease `name` in the recorder's namespace (the maintenance
    /// lock), in the background.
    pub fn publish_lease(&self, name: &str, warning: bool, reason: &str, note: String) {
        let regarding = ObjectReference {
            api_version: Some("coordination.k8s.io/v1".into()),
            kind: Some("Lease".into()),
            name: Some(name.into()),
            namespace: Some(self.namespace.clone()),
            ..Default::default()
        };
        self.emit(name, regarding, warning, reason, note);
    }

    fn emit(
        &self,
        node: &str,
        regarding: ObjectReference,
        warning: bool,
        reason: &str,
        note: String,
    ) {
        let now = Utc::now();
        let mut ev = Event {
            event_time: Some(time::micro(now)),
            action: Some(reason.into()),
            reason: Some(reason.into()),
            note: Some(note.chars().take(1024).collect()),
            type_: Some(if warning { "Warning" } else { "Normal" }.into()),
            reporting_controller: Some(self.controller.clone()),
            reporting_instance: Some(self.instance.chars().take(128).collect()),
            regarding: Some(regarding),
            ..Default::default()
        };
        ev.metadata.generate_name = Some(format!("{node}."));
        ev.metadata.namespace = Some(self.namespace.clone());
        let api: Api<Event> = Api::namespaced(self.client.clone(), &self.namespace);
        let (node, reason) = (node.to_string(), reason.to_string());
        tokio::spawn(async move {
            if let Err(e) = api.create(&PostParams::default(), &ev).await {
                tracing::warn!(node, reason, error = %e, "could not record an Event");
            }
        });
    }
}
