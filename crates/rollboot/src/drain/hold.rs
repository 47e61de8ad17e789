//! What holds a pod's eviction, by cause, and what the config says to do about each.
//!
//! Owns [`HeldEviction`] (a refused eviction's cause, the budget and why, in a sentence), the
//! cause of a refusal by a budget ([`cause_of`]: `never` when a covering budget can never allow
//! a disruption, as [`crate::budgets::never_allows_now`] judges it, else `budget`, one at 0 now),
//! how many denials in a row make one `denied` ([`DENIED_AFTER`]), and the choice between waiting
//! and failing (`drain.whenBlocked`, [`WhenBlocked::policy`]). Pure: it must never do I/O; the
//! drain reads the budgets ([`super::run`]) and acts on the answer.

pub use crate::config::{BlockCause as Cause, BlockPolicy as Policy, WhenBlocked};

/// A held eviction: its cause, the budget, and why, in words.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeldEviction {
    /// Why it is held.
    pub cause: Cause,
    /// The budget holding it, `namespace/name`.
    pub budget: String,
    /// Why that budget holds it (for `never`, why it never allows; for `budget`, the
    /// server's refusal).
    pub why: String,
}

/// How many denials in a row with the same answer make an eviction `denied`: one could be a
/// webhook's passing state, three a rule.
pub const DENIED_AFTER: u32 = 3;

impl HeldEviction {
    /// What holds the eviction, in words: "PodDisruptionBudget ns/b can never allow a
    /// disruption (maxUnavailable is 0)".
    pub fn sentence(&self) -> String {
        let budget = if self.budget.is_empty() {
            "a PodDisruptionBudget".to_string()
        } else {
            format!("PodDisruptionBudget {}", self.budget)
        };
        match self.cause {
            Cause::Never => format!("{budget} can never allow a disruption ({})", self.why),
            Cause::Budget => format!("{budget} allows no disruption now ({})", self.why),
            Cause::Stuck => format!("it is still terminating {}", self.why),
            Cause::Denied => format!(
                "the Eviction API denied it {DENIED_AFTER} times in a row with the same answer ({})",
                self.why
            ),
        }
    }
}

/// The cause of a refused eviction (429) of a pod covered by `budgets` (each with its name and
/// the reason it never allows a disruption, if it cannot; see [`crate::budgets::never_allows_now`]): `never`
/// when one of them never allows one, else `budget` (the first named, or none known). The
/// server's `message` says why for a budget at 0.
pub fn cause_of(budgets: &[(String, Option<String>)], message: &str) -> HeldEviction {
    if let Some((name, Some(why))) = budgets.iter().find(|(_, never)| never.is_some()) {
        return HeldEviction {
            cause: Cause::Never,
            budget: name.clone(),
            why: why.clone(),
        };
    }
    HeldEviction {
        cause: Cause::Budget,
        budget: budgets.first().map(|(n, _)| n.clone()).unwrap_or_default(),
        why: message.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cause_is_never_when_one_covering_budget_never_allows() {
        let b = [
            ("ns/a".to_string(), None),
            ("ns/b".to_string(), Some("maxUnavailable is 0".to_string())),
        ];
        let held = cause_of(&b, "The disruption budget a needs 2 healthy pods");
        assert_eq!(held.cause, Cause::Never);
        assert_eq!(held.budget, "ns/b");
        let slow = cause_of(&b[..1], "needs 2 healthy pods and has 2 currently");
        assert_eq!(
            (slow.cause, slow.budget.as_str(), slow.why.as_str()),
            (
                Cause::Budget,
                "ns/a",
                "needs 2 healthy pods and has 2 currently"
            )
        );
    }

    #[test]
    fn each_cause_has_its_policy_never_fails_by_default_and_waits_when_force_delete_is_set() {
        let d = WhenBlocked::default();
        assert_eq!(d.policy(Cause::Never, false), Policy::Fail);
        assert_eq!(d.policy(Cause::Never, true), Policy::Wait);
        assert_eq!(d.policy(Cause::Budget, false), Policy::Wait);
        assert_eq!(d.policy(Cause::Denied, true), Policy::Fail);
        assert_eq!(d.policy(Cause::Stuck, false), Policy::Wait);
        let explicit = WhenBlocked {
            budget: Policy::Fail,
            never: Some(Policy::Fail),
            denied: Policy::Wait,
            stuck: Policy::Fail,
        };
        assert_eq!(explicit.policy(Cause::Never, true), Policy::Fail);
        assert_eq!(explicit.policy(Cause::Budget, false), Policy::Fail);
        assert_eq!(explicit.policy(Cause::Denied, false), Policy::Wait);
        assert_eq!(explicit.policy(Cause::Stuck, false), Policy::Fail);
    }
}
