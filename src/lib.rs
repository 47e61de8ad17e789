//! rollboot reboots the nodes of a Kubernetes cluster one after another, safely and unattended.
//!
//! One module per part of the system (see `DESIGN.md` in the project's shared notes):
//! - [`config`]: the config file, its defaults and its strict validation;
//! - [`windows`]: when maintenance may start (cron windows, time zones, blackouts), pure;
//! - [`selector`]: Kubernetes label selectors, pure;
//! - [`sim`]: the embedded simulated cluster behind `rollboot simulate` and the tests;
//! - [`status`]: `rollboot status`, the operator's read-only view of a rollout;
//! - [`plan`]: `rollboot plan`, what a rollout would do, when, and what would block it;
//! - [`controls`]: the operator's controls (`pause`, `resume`, `retry`, `request`);
//! - [`cli`]: the command line, the only place that prints or picks exit codes;
//! - [`client`]: what every Kubernetes client of rollboot shares (its User-Agent);
//! - [`notify`]: notifications to a webhook, Slack or Teams, off the controller's step path.
//! - [`hooks`]: webhooks, gate annotations, labels and taints at the phases of a node's cycle.

pub mod cli;
pub mod config;
pub mod controls;
pub mod selector;
pub mod sim;
pub mod windows;

pub mod agent;
pub mod client;
pub mod controller;
pub mod drain;
pub mod hooks;
pub mod lease;
pub mod lock;
pub mod metrics;
pub mod node;
pub mod notify;
pub mod plan;
pub mod simulate;
pub mod status;
pub mod time;
