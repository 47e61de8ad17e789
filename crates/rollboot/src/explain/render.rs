//! The explanation as the lines a person reads (the JSON form is [`Explanation`]'s
//! serialization): the verdict, each reason with its code, and when the node would start.
//!
//! Owns layout only: it must never say anything the JSON does not.

use std::fmt::Write as _;

use super::{Explanation, ReasonCode};
use crate::render::{instant, Render};

impl Render for Explanation {
    fn text(&self) -> String {
        let mut out = String::new();
        let verdict = if self.eligible {
            "ELIGIBLE now: nothing holds it; the controller starts it on its next pass".to_string()
        } else if self.in_flight() {
            "IN FLIGHT: its cycle is under way".to_string()
        } else {
            format!("HELD by {} reason(s)", self.reasons.len())
        };
        let _ = writeln!(out, "node {}: {verdict}", self.node);
        for r in &self.reasons {
            let mut when = Vec::new();
            if let Some(t) = r.since {
                when.push(format!("since {}", instant(t)));
            }
            if let Some(t) = r.until {
                when.push(format!("until {}", instant(t)));
            }
            let when = if when.is_empty() {
                String::new()
            } else {
                format!(" [{}]", when.join(", "))
            };
            let _ = writeln!(out, "  {}: {}{when}", r.code.code(), r.message);
        }
        let _ = writeln!(out, "starts: {}", starts(self));
        for n in &self.not_checked {
            let _ = writeln!(out, "not checked: {n}");
        }
        out
    }
}

/// When the node starts, in words.
fn starts(e: &Explanation) -> String {
    let waits_on_a_change = e.reasons.iter().any(|r| {
        matches!(
            r.code,
            ReasonCode::Paused | ReasonCode::LockHeldByOther | ReasonCode::Blocked
        )
    });
    match e.starts_at {
        Some(t) if e.in_flight() => format!("started {}", instant(t)),
        Some(t) if e.eligible => format!("now ({})", instant(t)),
        Some(t) if waits_on_a_change => format!(
            "{} as `rollboot plan` predicts it, once what blocks every node above clears",
            instant(t)
        ),
        Some(t) => format!("{} as `rollboot plan` predicts it", instant(t)),
        None => {
            "not predicted: it would not start as things stand (see the reasons above)".to_string()
        }
    }
}
