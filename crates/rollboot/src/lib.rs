//! rollboot reboots the nodes of a Kubernetes cluster one after another, safely and unattended.
//!
//! The product: everything that runs in a cluster or talks to one. One module per part of the
//! system (see `DESIGN.md` in the project's shared notes):
//! - [`config`]: the config file, its defaults and its strict validation;
//! - [`reload`]: the config file watched while a process runs on it;
//! - [`cluster_config`]: the config read from the cluster's ConfigMap (the operator's commands
//!   without a config file);
//! - [`windows`]: when maintenance may start (cron windows, time zones, blackouts), pure;
//! - [`selector`]: Kubernetes label selectors, pure;
//! - [`node`]: the Node annotation protocol and a pure view of a Node;
//! - [`node_writer`]: the one way a Node is written (who may write what, fenced, conflicts);
//! - [`node_maintenance`]: medik8s' NodeMaintenance objects, read (another actor's maintenance);
//! - [`lease`], [`lock`]: Leases with fencing by time; the maintenance lock's record;
//! - [`fleetlock`]: the FleetLock protocol (hosts with their own update agent ask before they
//!   reboot), pure; the controller serves it;
//! - [`controller`]: the leader-elected controller (pure decisions in `controller::decide`);
//! - [`drain`]: `kubectl drain` semantics over the Eviction API;
//! - [`budgets`]: PodDisruptionBudgets and the workloads they cover (never or now, phantom
//!   disruptions, headroom, the shared watches the drain, the pick and the health gate read);
//! - [`events`]: the Events rollboot writes (controller, agent, drain), with kube's recorder;
//! - [`agent`]: the per-node agent;
//! - [`hooks`]: webhooks, gate annotations, labels and taints at the phases of a node's cycle;
//! - [`notify`]: notifications to a webhook, Slack or Teams, off the controller's step path;
//! - [`silences`]: Alertmanager silences for nodes in maintenance, and the alerts that block
//!   new starts;
//! - [`migrate`]: `rollboot migrate`, another tool's settings (kured's) as a rollboot config;
//! - [`status`]: `rollboot status`, the operator's read-only view of a rollout;
//! - [`plan`]: `rollboot plan`, what a rollout would do, when, and what would block it;
//! - [`explain`]: `rollboot explain NODE`, why a node is not rebooting now and when it will, as
//!   the controller's own decisions say;
//! - [`controls`]: the operator's controls (`pause`, `resume`, `retry`, `request`);
//! - [`metrics`]: the controller's Prometheus metrics and health endpoints;
//! - [`serve`]: bounded HTTP serving (body size, deadlines, a cap on connections) for every
//!   server above;
//! - [`render`]: the one way reports are written out (text and JSON from the same value);
//! - [`client`]: what every Kubernetes client of rollboot shares (its User-Agent);
//! - [`url`]: what a value from outside may become in a URL (percent-encoding, Kubernetes names);
//! - [`time`]: the one jiff-to-chrono conversion.
//!
//! It depends on no simulator code: the simulated cluster (`rollboot-sim`) depends on it, and
//! the images are built without it.

pub mod agent;
pub mod budgets;
pub mod client;
pub mod cluster_config;
pub mod config;
pub mod controller;
pub mod controls;
pub mod drain;
pub mod events;
pub mod explain;
pub mod fleetlock;
pub mod hooks;
pub mod lease;
pub mod lock;
pub mod metrics;
pub mod migrate;
pub mod node;
pub mod node_maintenance;
pub mod node_writer;
pub mod notify;
pub mod plan;
pub mod reload;
pub mod render;
pub mod selector;
pub mod serve;
pub mod silences;
pub mod status;
pub mod time;
pub mod url;
pub mod windows;
