//! rollboot's simulator: the simulated cluster and `rollboot simulate`.
//!
//! - [`sim`]: an HTTP server on loopback that answers the part of the Kubernetes API rollboot
//!   and kubectl use as kube-apiserver v1.36 does, and a world that plays kubelets, the
//!   scheduler, the workload and disruption controllers and the node-lifecycle controller's
//!   taints; its invariant watch records what a safe rollout must never do.
//! - [`simulate`]: the real controller and agents of the `rollboot` crate run against it, with
//!   exactly the code they run in production, talking HTTP: the harness the tests drive, the
//!   rehearsal of a cluster snapshot, chaos, and the report.
//!
//! The product crate never depends on this one: the shipped images are built without it.

pub mod sim;
pub mod simulate;
