//! The tasks a controller replica starts, and how they end.
//!
//! Owns [`Task`], a spawned task aborted when its handle is dropped (so dropping the replica's
//! future stops everything it started, as a crash would), and [`StepTask`], a node's background
//! step (a drain, a health gate, a blocking webhook's call), run in the span that names its
//! node, that marks itself done before it wakes the leader's loop. It must never hold anything
//! of the cluster: it only runs futures.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tracing::Instrument;

/// Aborts a task when dropped, so killing the controller kills all its work.
pub(super) struct Task(pub(super) JoinHandle<()>);

impl Drop for Task {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A node's background step (drain, health gate). It marks itself done before it wakes the
/// leader's loop: a pass woken by it must not see it still running and skip the node, which
/// would leave the node waiting for the next watch event or the resync.
pub(super) struct StepTask {
    task: Task,
    done: Arc<AtomicBool>,
}

impl StepTask {
    /// Runs `step` in `span` (a spawned task is in no span of its own: the span names its
    /// node), then marks itself done and wakes the loop through `wake`.
    pub(super) fn spawn(
        wake: Arc<Notify>,
        span: tracing::Span,
        step: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> StepTask {
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        let task = Task(tokio::spawn(async move {
            step.instrument(span).await;
            flag.store(true, Ordering::Release);
            wake.notify_one();
        }));
        StepTask { task, done }
    }

    /// Whether its step has ended (the flag it sets before it wakes the loop).
    pub(super) fn ended(&self) -> bool {
        self.done.load(Ordering::SeqCst)
    }

    /// Whether it still runs: not ended, and not finished (nor aborted) either.
    pub(super) fn running(&self) -> bool {
        !self.done.load(Ordering::Acquire) && !self.task.0.is_finished()
    }
}
