//! Kubernetes Events (events.k8s.io/v1) about Nodes and the maintenance lock, for people.
//!
//! A shared service: the controller, the agent and the drain each write their Events through
//! one [`Recorder`]. Owns what rollboot says in Events and about which object. The writing is
//! kube's own recorder ([`kube::runtime::events::Recorder`]), because it follows
//! kube-apiserver's rules that a hand-made Event broke on a real server: an Event about a
//! cluster-scoped Node lives in namespace `default` and one about the lock Lease in the Lease's
//! namespace; its name is `<object>.<hex nanoseconds>` (a `generateName` ending in a dot is
//! invalid); and an Event that repeats within minutes becomes a series (a PATCH of the first
//! one, `series.count`) instead of a new object each time. It must never fail or hold up the
//! caller: an Event that cannot be written is logged and dropped, because Events are not part
//! of correctness.
//!
//! kube's recorder keeps what it wrote for its series window (6 minutes) and, on every write,
//! walks all of it to forget what is older: one recorder for all of a controller's Events made
//! each write cost every Event of the last 6 minutes (issue 14: 6% of a 5,000-node rehearsal's
//! CPU). So each object an Event is about gets its own kube recorder, dropped once idle past
//! that window: a series only ever joins Events about one object, so what is written is the
//! same, and a write costs that object's recent Events only.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder as KubeRecorder, Reporter};
use kube::Client;

/// kube-apiserver refuses an Event whose note is longer than this many bytes.
const NOTE_LIMIT: usize = 1024;
/// kube-apiserver refuses a reportingInstance longer than this many bytes.
const INSTANCE_LIMIT: usize = 128;
/// kube-apiserver refuses an action longer than this many bytes.
const ACTION_LIMIT: usize = 128;
/// Longer than kube's recorder keeps an Event to join repeats into a series (6 minutes): an
/// object's recorder idle this long holds nothing a later Event could join.
const SERIES_WINDOW: Duration = Duration::from_secs(7 * 60);
/// How often the idle recorders are looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// Writes Events on behalf of one rollboot component (a controller replica or an agent).
#[derive(Clone)]
pub struct Recorder {
    client: Client,
    reporter: Reporter,
    /// One kube recorder per object an Event is about (see the module's docs).
    by_object: Arc<Mutex<PerObject>>,
    /// The namespace of the lock Lease, where Events about it go.
    lease_namespace: String,
}

/// An object an Event is about: kind, namespace, name.
type ObjectKey = (Option<String>, Option<String>, Option<String>);

/// The kube recorders of the objects written about lately, each with its last use.
struct PerObject {
    recorders: HashMap<ObjectKey, (KubeRecorder, Instant)>,
    swept: Instant,
}

impl PerObject {
    /// The recorder for `regarding` (made on first use), forgetting those idle past the
    /// series window at most once a minute.
    fn recorder(
        &mut self,
        regarding: &ObjectReference,
        make: impl FnOnce() -> KubeRecorder,
    ) -> KubeRecorder {
        let now = Instant::now();
        if now.duration_since(self.swept) >= SWEEP_EVERY {
            self.swept = now;
            self.recorders
                .retain(|_, (_, used)| now.duration_since(*used) < SERIES_WINDOW);
        }
        let key = (
            regarding.kind.clone(),
            regarding.namespace.clone(),
            regarding.name.clone(),
        );
        let (recorder, used) = self.recorders.entry(key).or_insert_with(|| (make(), now));
        *used = now;
        recorder.clone()
    }
}

/// `s` cut to at most `max` bytes at a character boundary.
fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// The reference to a Node that an Event is about. Its `uid` is the node's name, as the kubelet
/// writes it: `kubectl describe node` looks Events up by the Node's uid and by its name.
pub fn node_reference(node: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(node.into()),
        uid: Some(node.into()),
        ..Default::default()
    }
}

impl Recorder {
    /// A recorder reporting as `controller` (a qualified name such as `rollboot.dev/controller`),
    /// instance `instance` (the replica or the node); Events about the lock Lease go to
    /// `lease_namespace`.
    pub fn new(
        client: Client,
        lease_namespace: &str,
        controller: &str,
        instance: &str,
    ) -> Recorder {
        let reporter = Reporter {
            controller: controller.into(),
            instance: Some(cut(instance, INSTANCE_LIMIT)),
        };
        Recorder {
            client,
            reporter,
            by_object: Arc::new(Mutex::new(PerObject {
                recorders: HashMap::new(),
                swept: Instant::now(),
            })),
            lease_namespace: lease_namespace.into(),
        }
    }

    /// Records an Event about Node `node`, in the background: the caller never waits for it.
    /// Its action is its reason: a second one with that reason within kube's cache period
    /// (minutes) is counted as a repeat of the first (a series), keeping the first's note.
    pub async fn publish(&self, node: &str, warning: bool, reason: &str, note: String) {
        self.emit(node_reference(node), None, warning, reason, reason, note);
    }

    /// Records an Event about Node `node` whose `action` tells it apart from others with the
    /// same reason: only an Event with the same reason and action is counted as a repeat, so
    /// different things said under one reason (two malformed keys, two tokens) each keep
    /// their note.
    pub async fn publish_action(
        &self,
        node: &str,
        warning: bool,
        reason: &str,
        action: &str,
        note: String,
    ) {
        self.emit(node_reference(node), None, warning, reason, action, note);
    }

    /// Records an Event about Node `node` that concerns one of its pods (an eviction refused,
    /// failed, a pod deleted): the pod is the Event's `related` object, so each pod has an
    /// Event of its own (kube's recorder counts only an Event with the same related object
    /// as a repeat) and `kubectl describe` links the two.
    pub async fn publish_about_pod(
        &self,
        node: &str,
        pod: ObjectReference,
        warning: bool,
        reason: &str,
        note: String,
    ) {
        self.emit(
            node_reference(node),
            Some(pod),
            warning,
            reason,
            reason,
            note,
        );
    }

    /// Records an Event about the Lease `name` (the maintenance lock), in the background.
    pub fn publish_lease(&self, name: &str, warning: bool, reason: &str, note: String) {
        let regarding = ObjectReference {
            api_version: Some("coordination.k8s.io/v1".into()),
            kind: Some("Lease".into()),
            name: Some(name.into()),
            namespace: Some(self.lease_namespace.clone()),
            ..Default::default()
        };
        self.emit(regarding, None, warning, reason, reason, note);
    }

    fn emit(
        &self,
        regarding: ObjectReference,
        related: Option<ObjectReference>,
        warning: bool,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            note: Some(cut(&note, NOTE_LIMIT)),
            action: cut(action, ACTION_LIMIT),
            secondary: related,
        };
        let recorder = self
            .by_object
            .lock()
            .expect("event recorders")
            .recorder(&regarding, || {
                KubeRecorder::new(self.client.clone(), self.reporter.clone())
            });
        let reason = reason.to_string();
        tokio::spawn(async move {
            if let Err(e) = recorder.publish(&event, &regarding).await {
                let object = format!(
                    "{}/{}",
                    regarding.kind.as_deref().unwrap_or(""),
                    regarding.name.as_deref().unwrap_or("")
                );
                tracing::warn!(object, reason, error = %e, "could not record an Event");
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_note_is_cut_to_the_byte_limit_at_a_character_boundary() {
        let long = "é".repeat(700); // 1,400 bytes
        let c = cut(&long, NOTE_LIMIT);
        assert!(
            c.len() <= NOTE_LIMIT && c.len() >= NOTE_LIMIT - 1,
            "{}",
            c.len()
        );
        assert!(long.starts_with(&c));
        assert_eq!(cut("short", NOTE_LIMIT), "short");
    }

    #[tokio::test]
    async fn each_object_has_its_own_kube_recorder_forgotten_once_idle_past_the_series_window() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = Client::try_from(config).unwrap();
        let recorder = Recorder::new(client, "rollboot-system", "rollboot.dev/controller", "a");
        let made = std::cell::Cell::new(0);
        let make = || {
            made.set(made.get() + 1);
            KubeRecorder::new(recorder.client.clone(), recorder.reporter.clone())
        };
        let mut per = recorder.by_object.lock().unwrap();
        per.recorder(&node_reference("node-1"), make);
        per.recorder(&node_reference("node-1"), make);
        per.recorder(&node_reference("node-2"), make);
        assert_eq!(made.get(), 2, "one recorder per object, reused");
        assert_eq!(per.recorders.len(), 2);
        // node-1 idle past the window, node-2 used just now; a sweep is due.
        let Some(long_ago) = Instant::now().checked_sub(SERIES_WINDOW + SWEEP_EVERY) else {
            return; // a clock this young cannot hold such an old instant
        };
        per.swept = long_ago;
        for ((_, _, name), (_, used)) in per.recorders.iter_mut() {
            if name.as_deref() == Some("node-1") {
                *used = long_ago;
            }
        }
        per.recorder(&node_reference("node-3"), make);
        let mut left: Vec<_> = per.recorders.keys().map(|k| k.2.clone().unwrap()).collect();
        left.sort();
        assert_eq!(left, ["node-2", "node-3"]);
        // A sweep again only a minute later.
        per.recorders
            .values_mut()
            .for_each(|(_, used)| *used = long_ago);
        per.recorder(&node_reference("node-2"), make);
        assert_eq!(
            per.recorders.len(),
            2,
            "no sweep within a minute of the last"
        );
    }

    #[test]
    fn a_node_reference_is_cluster_scoped_and_named_as_the_kubelet_does() {
        let r = node_reference("node-2");
        assert_eq!(r.namespace, None);
        assert_eq!(r.uid.as_deref(), Some("node-2"));
        assert_eq!(r.kind.as_deref(), Some("Node"));
    }
}
