//! The agent's writes of its own Node, through the one node writer ([`crate::node_writer`], as
//! the agent: its own Node only, its own keys only).
//!
//! Owns which of them are fenced. A write decided from one version of the Node (the ack of a
//! token, the report of a lost one) is sent once, fenced by that version
//! ([`OwnNodeWriter::write_decided`]): a conflict (409) is its caller's, to decide again from
//! the newer version. Everything else the agent says of itself (its flag, its refusals, what it
//! reads of its host, its request for a drain before a shutdown) holds whatever was written
//! since, and only the agent writes those keys (the admission policy): it is a merge patch of
//! those keys alone, unfenced ([`OwnNodeWriter::write`]). Fenced, it would meet a 409 after
//! every write of the node-lifecycle controller's and the kubelet's, which the real control
//! plane's suite counts as predictable conflicts (check 5c). It must never decide what to
//! write: the agent does.

use k8s_openapi::api::core::v1::Node;
use serde_json::Value;

use crate::node_writer::{Fence, NodeWriteError, NodeWriter, Writer};

/// The agent's writer of its own Node.
#[derive(Clone)]
pub struct OwnNodeWriter {
    writer: NodeWriter,
    node: String,
}

impl OwnNodeWriter {
    /// The writer of the agent of Node `node`, through `client`.
    pub fn new(client: kube::Client, node: &str) -> OwnNodeWriter {
        OwnNodeWriter {
            writer: NodeWriter::new(client, Writer::Agent(node.to_string())),
            node: node.to_string(),
        }
    }

    /// Sends `patch` once, fenced by `version` (the Node the write was decided from): a
    /// conflict is [`NodeWriteError::Conflict`], to decide again. The Node as written.
    pub async fn write_decided(
        &self,
        version: &str,
        what: &str,
        patch: Value,
    ) -> Result<Node, NodeWriteError> {
        self.writer
            .write(&self.node, Fence::At(version), what, patch)
            .await
    }

    /// Sends `patch`, a merge patch of the agent's own keys, whatever was written since.
    pub async fn write(&self, what: &str, patch: Value) -> Result<(), NodeWriteError> {
        self.writer
            .write(&self.node, Fence::Unconditional, what, patch)
            .await
            .map(|_| ())
    }
}
