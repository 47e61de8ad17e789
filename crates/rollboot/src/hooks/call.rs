//! The webhooks' HTTP side: one POST of a [`Body`] with a timeout, through kube's own hyper
//! client (as `controller::alerts` and `notify` do: no other HTTP stack), and the bounded
//! fire-and-forget sender.
//!
//! It must never decide anything about a node: it sends what it is given and says what came
//! back. A fire-and-forget send never holds its caller: it runs in its own task, at most
//! [`FIRE_LIMIT`] at once (more are dropped, logged and counted), each bounded by its tries.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tokio::sync::Semaphore;
use tracing::Instrument;

use super::Body;
use crate::config::hooks::Webhook;
use crate::config::Phase;
use crate::metrics::Metrics;

/// Fire-and-forget sends under way at once, at most.
pub const FIRE_LIMIT: usize = 32;

/// What one POST came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// A 2xx answer.
    Yes(u16),
    /// Another status.
    No(u16),
    /// No answer within the request timeout.
    Timeout(Duration),
    /// The request could not be made (connection refused, a bad token file...).
    Error(String),
}

impl Outcome {
    /// A 2xx answer.
    pub fn yes(&self) -> bool {
        matches!(self, Outcome::Yes(_))
    }

    /// What it was, for the Node's record and the logs.
    pub fn detail(&self) -> String {
        match self {
            Outcome::Yes(s) | Outcome::No(s) => format!("HTTP {s}"),
            Outcome::Timeout(d) => format!("no answer within {}ms", d.as_millis()),
            Outcome::Error(e) => {
                let mut e = e.clone();
                if e.len() > 200 {
                    let mut cut = 200;
                    while !e.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    e.truncate(cut);
                }
                format!("request failed: {e}")
            }
        }
    }

    /// The `outcome` label of `rollboot_hook_results_total`.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Outcome::Yes(_) => "allowed",
            Outcome::No(_) => "refused",
            Outcome::Timeout(_) => "timeout",
            Outcome::Error(_) => "error",
        }
    }
}

/// POSTs `body` to `w.url`, bounded by `w.requestTimeout`.
pub async fn post(w: &Webhook, body: &Body) -> Outcome {
    let timeout = w.request_timeout.to_std();
    match tokio::time::timeout(timeout, send(w, body, timeout)).await {
        Ok(o) => o,
        Err(_) => Outcome::Timeout(timeout),
    }
}

async fn send(w: &Webhook, body: &Body, timeout: Duration) -> Outcome {
    let err = |e: String| Outcome::Error(e);
    let (base, path) = match crate::url::configured(&w.url) {
        Ok(parts) => parts,
        Err(e) => return err(format!("URL `{}`: {e}", w.url)),
    };
    let base: http::Uri = match base.parse() {
        Ok(b) => b,
        Err(e) => return err(e.to_string()),
    };
    let client = match crate::client::external(base, timeout) {
        Ok(c) => c,
        Err(e) => return err(e.to_string()),
    };
    let mut req = http::Request::post(path)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(
            http::header::USER_AGENT,
            crate::client::user_agent("controller"),
        );
    if let Some(t) = &w.token_from {
        match crate::notify::read_secret(t) {
            Ok(token) => req = req.header(http::header::AUTHORIZATION, format!("Bearer {token}")),
            Err(e) => return err(format!("reading the token from {t}: {e}")),
        }
    }
    let bytes = serde_json::to_vec(body).expect("a webhook body serializes");
    let req = match req.body(kube::client::Body::from(bytes)) {
        Ok(r) => r,
        Err(e) => return err(e.to_string()),
    };
    match client.send(req).await {
        Ok(res) if res.status().is_success() => Outcome::Yes(res.status().as_u16()),
        Ok(res) => Outcome::No(res.status().as_u16()),
        Err(e) => err(e.to_string()),
    }
}

/// Sends fire-and-forget webhooks in their own tasks: each tried up to `1 + retries` times
/// with backoff, never waited for.
#[derive(Clone)]
pub struct Firer {
    limit: Arc<Semaphore>,
    metrics: Arc<Metrics>,
}

impl Firer {
    /// A sender counting its outcomes in `metrics`.
    pub fn new(metrics: Arc<Metrics>) -> Firer {
        Firer {
            limit: Arc::new(Semaphore::new(FIRE_LIMIT)),
            metrics,
        }
    }

    /// Starts sending `body` to `w`; returns at once. Dropped (logged, counted `dropped`) when
    /// [`FIRE_LIMIT`] sends are already under way. What it logs is in a span naming the node.
    pub fn fire(&self, phase: Phase, w: Webhook, mut body: Body) {
        // The send's logs name the node through its span (a spawned task is in none of its own).
        let span = tracing::error_span!(parent: None, "fire_and_forget", node = body.node.as_str());
        let Ok(permit) = self.limit.clone().try_acquire_owned() else {
            span.in_scope(|| tracing::warn!(phase = %phase, hook = %w.name, "fire-and-forget webhook dropped: {FIRE_LIMIT} sends already under way"));
            self.metrics.hook_result(phase.as_str(), "dropped");
            return;
        };
        let metrics = self.metrics.clone();
        let send = async move {
            let _permit = permit;
            for attempt in 1..=w.retries + 1 {
                body.attempt = attempt;
                body.time = crate::time::annotation(Utc::now());
                let o = post(&w, &body).await;
                metrics.hook_result(phase.as_str(), o.metric_label());
                if o.yes() {
                    tracing::info!(phase = %phase, hook = %w.name, attempt, "webhook sent");
                    return;
                }
                tracing::warn!(phase = %phase, hook = %w.name, attempt, outcome = %o.detail(), "fire-and-forget webhook not accepted; the rollout does not wait for it");
                if attempt <= w.retries {
                    tokio::time::sleep(w.backoff_after(attempt).to_std()).await;
                }
            }
        };
        tokio::spawn(send.instrument(span));
    }
}
