//! The suite's verdicts and timings.
//!
//! Owns how a check's outcome is recorded (pass with notes, fail with one message per finding,
//! or not run with the reason) and the summary printed at the end. A check that could not run
//! is not a pass: the suite fails on it too, so a broken early step can never hide as success.

use std::time::{Duration, Instant};

/// What one check concluded.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Held.
    Pass,
    /// Did not hold; one message per finding, each naming the node, pod or request.
    Fail(Vec<String>),
    /// Could not be judged (an earlier step failed); the reason.
    NotRun(String),
}

/// One numbered check.
#[derive(Debug, Clone)]
pub struct Check {
    /// Its number in the brief ("1" .. "8", "5b", ...).
    pub id: String,
    /// What it promises.
    pub title: String,
    /// The verdict.
    pub outcome: Outcome,
    /// Measurements printed with it whatever the verdict.
    pub notes: Vec<String>,
}

/// Every check and phase of one run.
pub struct Report {
    started: Instant,
    phases: Vec<(String, Duration)>,
    checks: Vec<Check>,
    /// Lines printed before the checks (what was run, where).
    pub header: Vec<String>,
    /// Extra blocks printed after the checks (the audit summary).
    pub appendix: Vec<String>,
}

impl Default for Report {
    fn default() -> Self {
        Report {
            started: Instant::now(),
            phases: Vec::new(),
            checks: Vec::new(),
            header: Vec::new(),
            appendix: Vec::new(),
        }
    }
}

impl Report {
    /// Records a phase's duration and prints it at once (progress for `--nocapture`).
    pub fn phase(&mut self, name: &str, took: Duration) {
        println!(
            "e2e: phase {name} took {:.1}s (total {:.1}s)",
            took.as_secs_f64(),
            self.started.elapsed().as_secs_f64()
        );
        self.phases.push((name.into(), took));
    }

    /// Records a check: passed when `failures` is empty.
    pub fn check(&mut self, id: &str, title: &str, failures: Vec<String>, notes: Vec<String>) {
        let outcome = if failures.is_empty() {
            Outcome::Pass
        } else {
            Outcome::Fail(failures)
        };
        self.push(id, title, outcome, notes);
    }

    /// Records a check that could not be judged.
    pub fn not_run(&mut self, id: &str, title: &str, why: impl Into<String>) {
        self.push(id, title, Outcome::NotRun(why.into()), Vec::new());
    }

    fn push(&mut self, id: &str, title: &str, outcome: Outcome, notes: Vec<String>) {
        let tag = match &outcome {
            Outcome::Pass => "PASS",
            Outcome::Fail(_) => "FAIL",
            Outcome::NotRun(_) => "NOT RUN",
        };
        println!("e2e: check {id} {tag}: {title}");
        self.checks.retain(|c| c.id != id);
        self.checks.push(Check {
            id: id.into(),
            title: title.into(),
            outcome,
            notes,
        });
    }

    /// Whether check `id` was recorded already.
    pub fn has(&self, id: &str) -> bool {
        self.checks.iter().any(|c| c.id == id)
    }

    /// The checks that did not pass.
    pub fn not_passed(&self) -> Vec<&Check> {
        self.checks
            .iter()
            .filter(|c| !matches!(c.outcome, Outcome::Pass))
            .collect()
    }

    /// The whole summary: header, checks in order, appendix, phase timings and total time.
    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str("\n======== rollboot end-to-end on a real control plane ========\n");
        for h in &self.header {
            out.push_str(h);
            out.push('\n');
        }
        let mut checks = self.checks.clone();
        checks.sort_by_key(|c| natural(&c.id));
        for c in &checks {
            let tag = match &c.outcome {
                Outcome::Pass => "PASS   ",
                Outcome::Fail(_) => "FAIL   ",
                Outcome::NotRun(_) => "NOT RUN",
            };
            out.push_str(&format!("{tag} {:<3} {}\n", c.id, c.title));
            match &c.outcome {
                Outcome::Pass => {}
                Outcome::Fail(msgs) => {
                    for m in msgs {
                        out.push_str(&format!("          - {m}\n"));
                    }
                }
                Outcome::NotRun(why) => out.push_str(&format!("          - {why}\n")),
            }
            for n in &c.notes {
                out.push_str(&format!("          . {n}\n"));
            }
        }
        for a in &self.appendix {
            out.push('\n');
            out.push_str(a);
            if !a.ends_with('\n') {
                out.push('\n');
            }
        }
        out.push_str("\nphases:\n");
        for (name, took) in &self.phases {
            out.push_str(&format!("  {:<28} {:>7.1}s\n", name, took.as_secs_f64()));
        }
        out.push_str(&format!(
            "  {:<28} {:>7.1}s\n",
            "total",
            self.started.elapsed().as_secs_f64()
        ));
        let bad = self.not_passed().len();
        out.push_str(&format!(
            "{} of {} checks passed\n",
            self.checks.len() - bad,
            self.checks.len()
        ));
        out
    }
}

/// Sort key for check ids: "2" < "5" < "5b" < "10".
fn natural(id: &str) -> (u32, String) {
    let digits: String = id.chars().take_while(|c| c.is_ascii_digit()).collect();
    (
        digits.parse().unwrap_or(u32::MAX),
        id[digits.len()..].to_string(),
    )
}
