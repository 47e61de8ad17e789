//! The controller's and the agent's own surfaces on the simulated cluster: leader election,
//! `/readyz`, the Prometheus blocker, an idle controller's requests, the FleetLock server, and
//! the agent's refusals and its logind inhibitor.

mod agent_logind;
mod agent_refusals;
mod alerts;
mod fleetlock;
mod idle;
mod leader;
mod readyz;
