//! Rollouts on the simulated cluster: the real controller (2 replicas, leader election) and one
//! real agent per node against the simulated kube-apiserver, one module per concern (the reboot
//! cycle, budgets, blocked drains, capacity, windows, hooks, silences, volumes, notifications,
//! shutdowns nobody coordinated, the leader killed or paused mid-node, chaos seeds, snapshots).
//! One test binary for all of them: each of the former files linked the whole graph on its own.

mod blocked;
mod budgets;
mod capacity;
mod chaos;
mod cycle;
mod failover;
mod fencing;
mod holes;
mod hooks;
mod notifications;
mod on_kube;
mod others;
mod shutdown;
mod silences;
mod slow_rollout;
mod snapshot;
mod volumes;
mod windows;
