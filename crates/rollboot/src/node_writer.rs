//! The one way a Node is written: a JSON merge patch built by [`crate::node`]'s patches, sent by
//! the controller, the operator's controls, the drain and the agent alike.
//!
//! Owns who may write what, decided in one place (`NodeWriter::may_write`, from the
//! [`Writer`], right before each request leaves): the controller only while it leads; an agent
//! only its own Node, and in it only the agent's keys ([`crate::node::AGENT_KEYS`]); an
//! operator's control any Node its credentials allow; the drain its node's record of volumes.
//! It owns how a write goes: fenced by the resourceVersion it was decided from ([`Fence::At`]:
//! the API server refuses it with 409 if anyone wrote the Node since), a 409 answered as
//! [`NodeWriteError::Conflict`], naming the Node; only the drain's record of volumes and the
//! agent's own keys go unfenced ([`Fence::Unconditional`]), as they always have. And it reads a
//! Node again for a writer that retries after a conflict (an operator's control).
//!
//! It does I/O and nothing else: it must never decide what to write, nor what a conflict
//! means (decide again from the newer version, read again, give up): its callers do, from the
//! view they decided on.

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use serde_json::Value;

use crate::lease::{Leadership, NotLeader};
use crate::node::{self as proto, AGENT_KEYS};

/// Who writes Nodes, and so what it may write.
#[derive(Clone)]
pub enum Writer {
    /// A controller replica: it writes only while it leads.
    Controller(Leadership),
    /// The agent of the Node named: that Node only, the agent's keys only.
    Agent(String),
    /// An operator's control (`rollboot retry`, `rollboot request`): what its credentials allow.
    Operator,
    /// The drain of a node: its record of the volumes it waits for.
    Drain,
}

/// The condition a write is sent on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fence<'a> {
    /// The Node must still be at this resourceVersion, the one the write was decided from
    /// (empty: unknown, the write is unconditional).
    At(&'a str),
    /// None: the write lands whatever was written since. Only what one writer alone writes is
    /// written so: the drain's record of volumes, the agent's own keys.
    Unconditional,
}

/// Why a Node was not written.
#[derive(Debug, thiserror::Error)]
pub enum NodeWriteError {
    /// The Node changed since the version the write was fenced by (409): someone else wrote
    /// first, and nothing was written.
    #[error("node {node}: {what}: the node changed since resourceVersion {resource_version} (409 Conflict); nothing written")]
    Conflict {
        /// The Node.
        node: String,
        /// What was being written.
        what: String,
        /// The resourceVersion the write was fenced by.
        resource_version: String,
    },
    /// The API server could not be asked, or refused the request otherwise.
    #[error("node {node}: {what}: {source}")]
    Api {
        /// The Node.
        node: String,
        /// What was being read or written.
        what: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// The Node does not exist.
    #[error("node {node}: {what}: the node does not exist")]
    NotFound {
        /// The Node.
        node: String,
        /// What was being written.
        what: String,
    },
    /// The controller does not lead: it writes nothing.
    #[error(transparent)]
    NotLeader(#[from] NotLeader),
    /// The writer may not write this (another agent's Node, a key not the agent's, an
    /// unfenced write by other than the drain); nothing was sent.
    #[error("node {node}: {what}: not written: {why}")]
    NotAllowed {
        /// The Node.
        node: String,
        /// What was being written.
        what: String,
        /// Why it may not.
        why: String,
    },
}

/// Writes Nodes as one [`Writer`].
#[derive(Clone)]
pub struct NodeWriter {
    api: Api<Node>,
    writer: Writer,
}

impl NodeWriter {
    /// Writes as `writer` through `client`.
    pub fn new(client: kube::Client, writer: Writer) -> NodeWriter {
        NodeWriter {
            api: Api::all(client),
            writer,
        }
    }

    /// Sends the merge patch `patch` (built by [`crate::node::patch`] and its kin) to Node
    /// `node` on condition `fence`, once; `what` names the write in errors. The Node as
    /// written, or why not: a 409 on a fenced write is [`NodeWriteError::Conflict`].
    pub async fn write(
        &self,
        node: &str,
        fence: Fence<'_>,
        what: &str,
        patch: Value,
    ) -> Result<Node, NodeWriteError> {
        self.may_write(node, fence, what, &patch)?;
        let version = match fence {
            Fence::At(version) => Some(version),
            Fence::Unconditional => None,
        };
        let patch = match version {
            Some(version) => proto::fenced(patch, version),
            None => patch,
        };
        let sent = self
            .api
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await;
        match (sent, version) {
            (Ok(n), _) => Ok(n),
            (Err(kube::Error::Api(e)), Some(version)) if e.code == 409 => {
                Err(NodeWriteError::Conflict {
                    node: node.into(),
                    what: what.into(),
                    resource_version: version.into(),
                })
            }
            (Err(source), _) => Err(NodeWriteError::Api {
                node: node.into(),
                what: what.into(),
                source,
            }),
        }
    }

    /// Sends the strategic merge patch `patch` to Node `node`'s status (`nodes/status`: the
    /// maintenance conditions, merged by type, so no other condition is touched), on condition
    /// `fence`; `what` names the write in errors. Only a controller writes a Node's status.
    pub async fn write_status(
        &self,
        node: &str,
        fence: Fence<'_>,
        what: &str,
        patch: Value,
    ) -> Result<Node, NodeWriteError> {
        let Writer::Controller(leadership) = &self.writer else {
            return Err(NodeWriteError::NotAllowed {
                node: node.into(),
                what: what.into(),
                why: "only the controller writes a Node's status".into(),
            });
        };
        leadership.ensure()?;
        let Fence::At(version) = fence else {
            return Err(NodeWriteError::NotAllowed {
                node: node.into(),
                what: what.into(),
                why: "a Node's status is written fenced".into(),
            });
        };
        let patch = proto::fenced(patch, version);
        let sent = self
            .api
            .patch_status(node, &PatchParams::default(), &Patch::Strategic(&patch))
            .await;
        match sent {
            Ok(n) => Ok(n),
            Err(kube::Error::Api(e)) if e.code == 409 && !version.is_empty() => {
                Err(NodeWriteError::Conflict {
                    node: node.into(),
                    what: what.into(),
                    resource_version: version.into(),
                })
            }
            Err(kube::Error::Api(e)) if e.code == 404 => Err(NodeWriteError::NotFound {
                node: node.into(),
                what: what.into(),
            }),
            Err(source) => Err(NodeWriteError::Api {
                node: node.into(),
                what: what.into(),
                source,
            }),
        }
    }

    /// Reads Node `node` as it is now (`None`: it does not exist).
    pub async fn read(&self, node: &str) -> Result<Option<Node>, NodeWriteError> {
        self.api
            .get_opt(node)
            .await
            .map_err(|source| NodeWriteError::Api {
                node: node.into(),
                what: "reading it".into(),
                source,
            })
    }

    /// Whether this writer may send `patch` (`what`) to Node `node` on condition `fence`: the
    /// one place that decides it, right before the request leaves.
    fn may_write(
        &self,
        node: &str,
        fence: Fence<'_>,
        what: &str,
        patch: &Value,
    ) -> Result<(), NodeWriteError> {
        let alone = matches!(self.writer, Writer::Drain | Writer::Agent(_));
        let why = if fence == Fence::Unconditional && !alone {
            Err(
                "only the drain's record of volumes and the agent's keys are written unfenced"
                    .to_string(),
            )
        } else {
            match &self.writer {
                // Fencing by time, checked as late as can be; the resourceVersion fences the
                // rest (a request that sits in the network longer than the lease).
                Writer::Controller(leadership) => return Ok(leadership.ensure()?),
                Writer::Operator | Writer::Drain => Ok(()),
                Writer::Agent(own) if own != node => Err(format!(
                    "the agent of node {own} writes no other Node than its own"
                )),
                Writer::Agent(_) => agent_keys_only(patch),
            }
        };
        why.map_err(|why| NodeWriteError::NotAllowed {
            node: node.into(),
            what: what.into(),
            why,
        })
    }
}

/// Whether `patch` writes nothing but annotations among [`AGENT_KEYS`].
fn agent_keys_only(patch: &Value) -> Result<(), String> {
    let not_annotations = |k: &str| format!("an agent writes only annotations, not `{k}`");
    let top = patch
        .as_object()
        .ok_or_else(|| not_annotations("a patch that is no object"))?;
    for (k, meta) in top {
        let meta = meta
            .as_object()
            .filter(|_| k == "metadata")
            .ok_or_else(|| not_annotations(k))?;
        for (k, annotations) in meta {
            if k != "annotations" {
                return Err(not_annotations(&format!("metadata.{k}")));
            }
            let keys = annotations
                .as_object()
                .into_iter()
                .flatten()
                .map(|(k, _)| k);
            if let Some(k) = keys.into_iter().find(|k| !AGENT_KEYS.contains(&k.as_str())) {
                return Err(format!("{k} is not one of the agent's keys"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::{patch, with_labels, REBOOT, REBOOT_ACK, REBOOT_REQUIRED};

    #[tokio::test]
    async fn an_agent_writes_only_its_own_nodes_agent_keys_and_only_the_drain_and_the_agent_write_unfenced(
    ) {
        let (client, seen) = crate::client::recording_server(|_| None).await;
        let writer = |w| NodeWriter::new(client.clone(), w);
        let refused = |r: Result<(), NodeWriteError>| match r {
            Err(NodeWriteError::NotAllowed { why, .. }) => why,
            other => panic!("{other:?}"),
        };
        let agent = writer(Writer::Agent("n1".into()));
        let ack = patch(&[(REBOOT_ACK, Some("1-a".into()))], None);
        let at = Fence::At("7");
        assert!(agent.may_write("n1", at, "acking", &ack).is_ok());
        let e = refused(agent.may_write("n2", at, "acking", &ack));
        assert!(e.contains("no other Node"), "{e}");
        let token = patch(&[(REBOOT, Some("1-a".into()))], None);
        let e = refused(agent.may_write("n1", at, "x", &token));
        assert!(
            e.contains(REBOOT) && e.contains("not one of the agent's keys"),
            "{e}"
        );
        let cordon = patch(&[(REBOOT_REQUIRED, Some("x".into()))], Some(true));
        assert!(agent.may_write("n1", at, "x", &cordon).is_err());
        let labelled = with_labels(patch(&[], None), &[("a".into(), None)]);
        assert!(agent.may_write("n1", at, "x", &labelled).is_err());
        // Unfenced, the agent's own keys of its own Node only.
        assert!(agent
            .may_write("n1", Fence::Unconditional, "x", &ack)
            .is_ok());
        assert!(agent
            .may_write("n2", Fence::Unconditional, "x", &ack)
            .is_err());
        assert!(agent
            .may_write("n1", Fence::Unconditional, "x", &token)
            .is_err());
        let operator = writer(Writer::Operator);
        assert!(operator.may_write("n2", at, "x", &token).is_ok());
        assert!(operator
            .may_write("n2", Fence::Unconditional, "x", &token)
            .is_err());
        let drain = writer(Writer::Drain);
        assert!(drain
            .may_write("n2", Fence::Unconditional, "x", &token)
            .is_ok());
        // Refused before anything is sent.
        match agent.write("n2", at, "acking", ack).await {
            Err(NodeWriteError::NotAllowed { node, what, .. }) => {
                assert_eq!((node.as_str(), what.as_str()), ("n2", "acking"))
            }
            other => panic!("{other:?}"),
        }
        assert!(seen.lock().unwrap().is_empty());
        let _ = operator.read("n1").await;
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1, "{seen:?}");
        assert_eq!(seen[0], "GET /api/v1/nodes/n1");
    }
}
