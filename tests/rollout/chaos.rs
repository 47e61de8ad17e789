//! Chaos on demand: the CI slice of the seeded campaign (the first 20 seeds and those that once
//! broke; `scripts/chaos-campaign.sh` runs the 1,000), and the replay of a schedule from the
//! command line and from a scenario's `faults:`.
//!
//! Each seed runs the real controller (2 replicas) and agents under the faults the seed draws;
//! once the faults stop, the rollout must be decided (finished, or halted by `maxFailures`)
//! with no invariant broken: no budget violated, no node rebooted twice or while schedulable
//! or undrained, never more nodes out than allowed (per group too), no start outside a window,
//! no node left cordoned without a `failed` record, and no node failed but those a host fault
//! acted on.

use std::process::Command;
use std::time::Instant;

use rollboot_sim::sim::fault_schedule::FaultSchedule;
use rollboot_sim::simulate::{chaos, rollout, sim_config, Outcome, RunOptions};

fn log() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(std::env::var("TLOG").unwrap_or("rollboot=error".into()))
        .with_test_writer()
        .try_init();
}

/// Seeds run at once: a run mostly waits on its simulated clock.
const AT_ONCE: usize = 5;

/// Seeds of the 1,000-seed campaign that once broke an invariant, each kept in the slice once
/// its cause was fixed:
/// - 212: a StatefulSet pod made again under the name of one still waiting to start never
///   started (the simulated kubelet's start timer was the name's), and two health gates failed;
/// - 554: the leader killed, a host's own shutdown and a slow API: the shutdown drain's cycle
///   ended as cancelled and uncordoned its node under the not-ready taint (the first
///   break);
/// - 654: a Node deleted in the middle of its cycle was registered again at the instant another
///   host began to shut down: two nodes cordoned by rollboot with `maxNodes: 1`, the shutdown
///   judged as having had room (the second break);
/// - 680: a FleetLock host's `steady-state`, held up 15 s by a paused leader, counted it as
///   holding its slot after rollboot had ended its cycle and granted the next.
const ONCE_BROKEN: [u64; 4] = [212, 554, 654, 680];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ci_slice_of_seeds_keeps_every_invariant_and_is_decided() {
    log();
    let started = Instant::now();
    let seeds: Vec<u64> = (1..=20).chain(ONCE_BROKEN).collect();
    let count = seeds.len();
    let mut rows = Vec::new();
    let mut broken = Vec::new();
    // A window of AT_ONCE runs: a seed starts as soon as one ends, so a slow seed holds one
    // place, not a whole batch.
    let mut pending = seeds.into_iter();
    let mut runs = tokio::task::JoinSet::new();
    let start = |runs: &mut tokio::task::JoinSet<_>, seed: u64| {
        runs.spawn(async move {
            let s = chaos::setup(seed);
            let config = sim_config(&s.config_overrides).expect("drawn config");
            (
                seed,
                rollout(s.scenario, config, RunOptions::default()).await,
            )
        });
    };
    for seed in pending.by_ref().take(AT_ONCE) {
        start(&mut runs, seed);
    }
    while let Some(done) = runs.join_next().await {
        if let Some(seed) = pending.next() {
            start(&mut runs, seed);
        }
        let (seed, r) = done.expect("the run panicked");
        let r = r.unwrap_or_else(|e| panic!("seed {seed}: {e:#}"));
        let played = r
            .faults
            .as_ref()
            .map_or(0, |f| f.played.iter().filter(|p| p.began.is_some()).count());
        rows.push(format!(
            "seed {seed:>3}: {:<8} {played} fault(s) played, {} failed, {:.1} s",
            r.outcome.as_str(),
            r.failed.len(),
            r.makespan_seconds
        ));
        if !r.ok || r.outcome == Outcome::Stuck {
            broken.push(format!(
                "seed {seed} (replay: rollboot simulate --chaos {seed}):\n{}",
                r.text()
            ));
        }
    }
    rows.sort();
    eprintln!(
        "{}\n{count} seeds in {:.0} s",
        rows.join("\n"),
        started.elapsed().as_secs_f64()
    );
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

fn simulate(args: &[&str]) -> (i32, serde_json::Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rollboot"))
        .arg("simulate")
        .args(args)
        .args(["--report", "json"])
        .output()
        .expect("rollboot runs");
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let report = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out.status.code().unwrap_or(-1), report, stderr)
}

/// `--chaos SEED` plays the schedule the seed draws, and that schedule, put in a scenario
/// file's `faults:`, is played again as it is: the replay of a seed from its report.
#[test]
fn a_seed_and_its_schedule_in_a_scenario_file_replay_the_same_faults() {
    let seed = 3;
    // The schedule as the seed's setup draws it (its own faults added to the drawn ones).
    let drawn = chaos::setup(seed)
        .scenario
        .faults
        .expect("a chaos setup has faults");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("replay.yaml");
    let mut sc = chaos::setup(seed).scenario;
    sc.faults = Some(drawn.clone());
    std::fs::write(&file, yaml_serde::to_string(&sc).unwrap()).unwrap();
    let file = file.display().to_string();
    let (by_seed, by_file) = std::thread::scope(|s| {
        let a = s.spawn(|| simulate(&["--chaos", "3"]));
        let b = s.spawn(|| simulate(&["--scenario", &file]));
        (a.join().unwrap(), b.join().unwrap())
    });
    for (what, (code, report, stderr)) in [("--chaos 3", &by_seed), ("--scenario", &by_file)] {
        let schedule: FaultSchedule = serde_json::from_value(report["faults"]["schedule"].clone())
            .unwrap_or_else(|e| panic!("{what}: no schedule in the report ({e}): {stderr}"));
        assert_eq!(schedule, drawn, "{what}");
        assert_eq!(
            report["faults"]["played"].as_array().map(Vec::len),
            Some(drawn.faults.len()),
            "{what}"
        );
        assert!(report["outcome"].is_string(), "{what}: {report}");
        assert_eq!(*code, 0, "{what}: {}", report["invariantBreaks"]);
    }
}

#[test]
fn a_bad_fault_in_a_scenario_file_is_named_with_the_file_and_nothing_runs() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.yaml");
    std::fs::write(
        &file,
        "nodes: 2\nfaults:\n  stopAfter: 5\n  faults:\n  - {at: 1, whenState: asleep, fault: killLeader}\n",
    )
    .unwrap();
    let (code, report, stderr) = simulate(&["--scenario", &file.display().to_string()]);
    assert_ne!(code, 0);
    assert_eq!(report, serde_json::Value::Null, "a report was printed");
    assert!(
        stderr.contains(&file.display().to_string())
            && stderr.contains("faults.faults[0].whenState: `asleep` is not one of"),
        "{stderr}"
    );
    std::fs::write(
        &file,
        "faults: {stopAfter: 5, faults: [{at: 1, fault: meteor}]}\n",
    )
    .unwrap();
    let (code, _, stderr) = simulate(&["--scenario", &file.display().to_string()]);
    assert_ne!(code, 0);
    assert!(
        stderr.contains(&file.display().to_string()) && stderr.contains("meteor"),
        "{stderr}"
    );
}
