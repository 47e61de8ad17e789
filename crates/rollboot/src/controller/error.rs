//! What can stop the controller or one of its steps.
//!
//! Owns [`Error`], one variant per failure domain the runtime meets (a Node write, the lock, a
//! Lease, leadership, a drain, a 409 on a fenced write, the client), each naming its object, and
//! the low-cardinality label each is counted under. It must never decide what to do about an
//! error: the pass and the steps do.

use crate::drain::DrainError;
use crate::lease::{LeaseError, NotLeader};
use crate::lock::LockError;

/// What can stop the controller or one of its steps.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A write to a Node failed.
    #[error("node {node}: {what}: {source}")]
    Node {
        /// Node.
        node: String,
        /// What was being written.
        what: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// A Node write the node writer would not send (the controller's own writes never are).
    #[error(transparent)]
    Write(crate::node_writer::NodeWriteError),
    /// The lock could not be read or written.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// A Lease could not be read.
    #[error(transparent)]
    Lease(#[from] LeaseError),
    /// Leadership was lost.
    #[error(transparent)]
    NotLeader(#[from] NotLeader),
    /// A drain failed.
    #[error(transparent)]
    Drain(#[from] DrainError),
    /// A Node write was refused (409) because the Node changed since the view the step was
    /// decided from: someone else (a newer leader, the agent, the kubelet) wrote first. Not a
    /// failure: nothing was written, and the next pass decides again from the newer version,
    /// woken by the watch when the cache has it.
    #[error("node {node}: {what}: the node changed since resourceVersion {rv}; not acting, deciding again")]
    Conflict {
        /// Node.
        node: String,
        /// What was being written.
        what: String,
        /// The resourceVersion the step was decided from.
        rv: String,
    },
    /// The API client could not be built.
    #[error("building the Kubernetes client: {0}")]
    Client(String),
    /// A server could not listen on its configured address.
    #[error("{what}: cannot listen on {addr}: {source}")]
    Listen {
        /// The config key of the address.
        what: &'static str,
        /// The address.
        addr: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// A low-cardinality label for metrics.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Node { .. } | Error::Write(_) => "node_write",
            Error::Lock(_) => "lock",
            Error::Lease(_) => "lease",
            Error::NotLeader(_) => "not_leader",
            Error::Drain(_) => "drain",
            Error::Conflict { .. } => "conflict",
            Error::Client(_) => "client",
            Error::Listen { .. } => "listen",
        }
    }
}
