//! The agent's writes of its own Node, through the one node writer ([`crate::node_writer`], as
//! the agent: its own Node only, its own keys only, every write fenced).
//!
//! Owns what a conflict (409) means for each write. A write decided from one version of the
//! Node (the ack of a token, the report of a lost one) is sent once, fenced by that version
//! ([`OwnNodeWriter::write_decided`]): a conflict is its caller's, to decide again from the
//! newer version. Everything else the agent says of itself (its flag, its refusals, what it
//! reads of its host, its request for a drain before a shutdown) holds whatever was written
//! since: fenced by the version the agent last saw, a conflict reads the Node again and sends
//! the same keys at the newer version, up to [`ATTEMPTS`] times ([`OwnNodeWriter::write`]), so
//! a concurrent write (the controller's, an operator's) loses nothing the agent says. It must
//! never decide what to write: the agent does.

use k8s_openapi::api::core::v1::Node;
use serde_json::Value;

use crate::node_writer::{Fence, NodeWriteError, NodeWriter, Writer};

/// How many times a write the agent says of itself is sent before a run of conflicts gives up
/// (it is tried again on the next check), as many as an operator's control.
pub const ATTEMPTS: usize = 5;

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

    /// Sends `patch` fenced by `seen` (the version of the Node the agent last saw; `None`: the
    /// Node is read first); after a conflict, reads the Node again and sends the same patch
    /// fenced by the newer version, [`ATTEMPTS`] times in all.
    pub async fn write(
        &self,
        seen: Option<&str>,
        what: &str,
        patch: Value,
    ) -> Result<(), NodeWriteError> {
        let mut version = match seen {
            Some(v) => v.to_string(),
            None => self.version(what).await?,
        };
        let mut attempt = 1;
        loop {
            match self.write_decided(&version, what, patch.clone()).await {
                Ok(_) => return Ok(()),
                Err(NodeWriteError::Conflict { .. }) if attempt < ATTEMPTS => {
                    tracing::debug!(what, resource_version = %version, "the node changed since the agent saw it; writing again at the newer version");
                    attempt += 1;
                    version = self.version(what).await?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// The resourceVersion of the Node as it is now.
    async fn version(&self, what: &str) -> Result<String, NodeWriteError> {
        match self.writer.read(&self.node).await? {
            Some(n) => Ok(n.metadata.resource_version.unwrap_or_default()),
            None => Err(NodeWriteError::NotFound {
                node: self.node.clone(),
                what: what.into(),
            }),
        }
    }
}
