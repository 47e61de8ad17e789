//! PodDisruptionBudgets and the workloads they cover, as every part of rollboot reads them.
//!
//! Owns what rollboot knows of budgets, in one place: whether a budget can ever allow a
//! disruption or only none now ([`judge`]), which disruptions it counts that are not happening
//! ([`phantom`]), how many disruptions it still allows once the nodes in flight are counted
//! ([`headroom`]), and the watches of budgets, ReplicaSets and StatefulSets that the drain, the
//! budget-aware pick and the health gate read ([`watches`]). It must never write, evict or
//! decide a node's step: the drain ([`crate::drain`]) acts on a judgement, the pick and the
//! gate ([`crate::controller`]) decide from a count, and `rollboot plan` ([`crate::plan`])
//! previews a drain with the same rules.
//!
//! Its parts:
//! - [`judge`]: a budget that never allows a disruption told from one at 0 now, pure;
//! - [`phantom`]: a budget's `status.disruptedPods` read for disruptions that are not
//!   happening, pure;
//! - [`headroom`]: the budget-aware pick's counts ([`Headroom`], [`Claims`], [`BudgetHold`]),
//!   pure;
//! - [`watches`]: [`WorkloadWatches`], one watch per namespace and kind shared by its readers,
//!   and the pick's reads of the nodes' budgets ([`HeadroomReader`]); the only part that does
//!   I/O (kube, tokio).

pub mod headroom;
pub mod judge;
pub mod phantom;
pub mod watches;

pub use headroom::{BudgetHold, BudgetNow, Claims, Headroom, NodeBudgets};
pub use judge::{never_allows, never_allows_now};
pub use phantom::{phantom_disruptions, OwnEviction, DISRUPTION_EXPIRY, OWN_EVICTION_SETTLING};
pub use watches::{HeadroomReader, HeadroomSource, WorkloadWatches, FEED_LINGER};
