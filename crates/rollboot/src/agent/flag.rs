//! The agent's flag: `reboot-required` (and its reason) on its Node, written from its
//! sentinel's answer.
//!
//! Owns when the flag is written (only when the sentinel's answer differs from the Node's, so a
//! Node registered again, or whose flag was lost, is flagged again) and what a sentinel that
//! gives no answer means (the flag is left as it was, said once per spell). It must never
//! write anything but the flag and its reason.

use chrono::Utc;

use super::process::Agent;
use super::{RebootHost, Sentinel};
use crate::node::{self as proto, NodeView};

impl<R: RebootHost> Agent<'_, R> {
    /// Checks the sentinel and writes `reboot-required` when its answer differs from the Node's
    /// (`v`, as it is: a Node registered again, or whose flag was lost, is flagged again). A
    /// sentinel that gives no answer leaves the flag as it was: logged each time, an Event and
    /// the metric once per spell.
    pub(super) async fn check_sentinel<S: Sentinel>(&mut self, sentinel: &S, v: &NodeView) {
        let node = self.node;
        let answer = match sentinel.check().await {
            Ok(answer) => {
                if self.sentinel_failing {
                    tracing::info!("the sentinel answers again");
                }
                self.sentinel_failing = false;
                answer
            }
            Err(e) => {
                self.metrics.sentinel_error();
                tracing::warn!(error = %e, flagged = v.reboot_required, "the sentinel gave no answer; the node's reboot-required flag is left as it is");
                if !self.sentinel_failing {
                    self.sentinel_failing = true;
                    self.events
                        .publish(
                            node,
                            true,
                            "SentinelFailed",
                            format!(
                                "{e}; rollboot.dev/reboot-required is left as it is ({}) until the sentinel answers",
                                if v.reboot_required { "flagged" } else { "not flagged" }
                            ),
                        )
                        .await;
                }
                return;
            }
        };
        let needed = answer.is_some();
        if needed == v.reboot_required {
            return;
        }
        let p = if needed {
            proto::patch(
                &[
                    (
                        proto::REBOOT_REQUIRED,
                        Some(crate::time::annotation(Utc::now())),
                    ),
                    (proto::REBOOT_REQUIRED_REASON, answer.clone()),
                ],
                None,
            )
        } else {
            proto::patch(
                &[
                    (proto::REBOOT_REQUIRED, None),
                    (proto::REBOOT_REQUIRED_REASON, None),
                ],
                None,
            )
        };
        match self.writer.write("writing reboot-required", p).await {
            Ok(()) => tracing::info!(
                needed,
                reason = answer.as_deref().unwrap_or(""),
                "reboot-required changed",
            ),
            Err(e) => {
                tracing::warn!(error = %e, "could not write reboot-required; trying again on the next check")
            }
        }
    }
}
