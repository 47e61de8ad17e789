//! Shared by the test files that run a simulated rollout: one tracing subscriber per test
//! binary, writing through the test harness (shown for failed tests), filtered by `TLOG`.

/// Installs the subscriber, once; later calls do nothing.
pub fn log() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            std::env::var("TLOG").unwrap_or("rollboot=info,rollboot_sim::sim=warn".into()),
        )
        .with_test_writer()
        .try_init();
}
