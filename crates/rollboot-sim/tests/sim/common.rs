//! Shared by the simulator's test modules: the small slow world most of them start, and the
//! raw HTTP client (`rollboot_testkit::http`), because kube's client retries 429 answers, which
//! would hide exactly what these tests look at.

pub use rollboot_testkit::http::{http, request};

use rollboot_sim::sim::Scenario;

/// Three nodes of two pods, in Deployments of three (half under budgets), no bare, mirror or
/// emptyDir pods, in a slow world: nothing changes on its own during a test.
pub fn small_and_slow() -> Scenario {
    Scenario {
        nodes: 3,
        pods_per_node: 2,
        replicas: 3,
        pdb_share: 0.5,
        bare_pods: 0,
        mirror_pods: 0,
        empty_dir_pods: 0,
        time_factor: 100.0,
        ..Scenario::default()
    }
}
