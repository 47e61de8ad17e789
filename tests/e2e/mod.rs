//! Helpers of the end-to-end suite `tests/e2e_realcluster.rs`, which runs rollboot against a real
//! Kubernetes control plane built and started by the recipe in `../shared/realcluster/`.
//!
//! - [`setup`]: where the control plane binaries, the recipe and `deploy/` are, from the
//!   environment; the one skip line when there is no control plane.
//! - [`cluster`]: the control plane of one run and every process the suite starts, stopped at
//!   the end whatever happens (a guard, and a reaper process for a test killed outright).
//! - [`observe`]: watches (admin client) that record every version of the Nodes, the Pods, the
//!   budget and the Leases from the start, so the checks judge what really happened.
//! - [`audit`]: the kube-apiserver audit log, read for rollboot's identities.
//! - [`report`]: the checks' outcomes and the phases' timings, printed at the end.
//! - [`faults`]: the phases of issue 22's cases: annotations garbled or written backwards
//!   mid-reboot, the lock and leader Leases deleted, tokens an agent refuses (an unreadable ack,
//!   a wrong host), the kube-apiserver stopped and killed mid-drain.
//! - [`shutdown`]: issue 27's phase: a host's shutdown nobody coordinated, the agent's logind
//!   inhibitor on a fake logind (cancelled mid-drain, then carried through).
//! - [`security`]: issue 47's phases: FleetLock callers that are not the host, bounded servers,
//!   a slot given back mid-reboot, shutdown requests with no shutdown behind them.
//! - [`volumes`]: issue 24's phase: a StatefulSet with ReadWriteOnce CSI volumes, the node of one
//!   of its pods drained and rebooted only once the pod's VolumeAttachment is gone.
//!
//! None of this may talk to anything but the loopback control plane it started, nor change the
//! recipe's files: the suite runs the recipe, except `fake-kubelet.py` and `rollboot-config.sh`,
//! which it carries in `tests/e2e/` as copies with what it needs added (see their headers).

pub mod audit;
pub mod cluster;
pub mod faults;
pub mod observe;
pub mod report;
pub mod security;
pub mod setup;
pub mod shutdown;
pub mod volumes;
