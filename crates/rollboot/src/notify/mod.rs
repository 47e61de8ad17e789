//! Notifications: what the rollout does, told to a webhook, Slack or Microsoft Teams.
//!
//! Owns the sending side: one bounded queue and one worker task per configured sink, the
//! reading of each sink's URL and token from where the config points (an environment
//! variable or a file, both filled from a Secret), the HTTP POST (kube's own hyper client, as
//! `controller::alerts` uses: no other HTTP stack) with a timeout, and the outcome of each
//! send, logged and counted in `rollboot_notifications_total`. Which notices are due and what
//! they say is decided purely in [`decide`].
//!
//! It must never hold the controller: [`Notifier::send`] only renders and enqueues
//! (`try_send`), a full queue drops the message (logged and counted `dropped`), and a hanging
//! or failing endpoint only ever delays its own sink's worker. It never retries a message
//! (a notice is worth less than the order it arrives in), and it never reads a secret before
//! a message is due, so a rotated Secret is picked up without a restart.

pub mod decide;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::config::notifications::{NotifyEvent, SecretRef, Sink};
use crate::config::Notifications;
use crate::metrics::Metrics;
pub use decide::{End, Notice, Pass, Tracker};

/// Why one message was not delivered.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The secret holding the URL or token could not be read.
    #[error("sink {sink}: reading its {what} from {from}: {cause}")]
    Secret {
        /// The sink's name.
        sink: String,
        /// `URL` or `token`.
        what: &'static str,
        /// Where it was looked for.
        from: String,
        /// What went wrong.
        cause: String,
    },
    /// The URL read is not an http(s) URL.
    #[error("sink {sink}: the URL read from {from} is not an http:// or https:// URL: {cause}")]
    Url {
        /// The sink's name.
        sink: String,
        /// Where it was read from (never the URL itself: it is a credential).
        from: String,
        /// What is wrong.
        cause: String,
    },
    /// The endpoint could not be reached or the request failed.
    #[error("sink {sink}: sending: {source}")]
    Http {
        /// The sink's name.
        sink: String,
        /// The client's error.
        #[source]
        source: kube::Error,
    },
    /// The endpoint answered with a status that is not 2xx.
    #[error("sink {sink}: the endpoint answered HTTP {status}")]
    Status {
        /// The sink's name.
        sink: String,
        /// The status code.
        status: u16,
    },
    /// No answer within `notifications.timeout`.
    #[error("sink {sink}: no answer within {timeout:?}")]
    Timeout {
        /// The sink's name.
        sink: String,
        /// The timeout.
        timeout: Duration,
    },
}

impl SendError {
    /// The `outcome` label of a failed send.
    pub fn outcome(&self) -> &'static str {
        match self {
            SendError::Timeout { .. } => "timeout",
            _ => "failed",
        }
    }
}

/// One message waiting for its sink.
struct Outgoing {
    event: NotifyEvent,
    body: Vec<u8>,
}

/// A sink's queue and worker.
struct Queue {
    name: String,
    tx: mpsc::Sender<Outgoing>,
    worker: tokio::task::JoinHandle<()>,
}

/// The sending side of the configured sinks. Dropping it stops the workers (queued messages
/// are lost, as they would be in a crash).
pub struct Notifier {
    queues: Vec<Queue>,
    config: Notifications,
    metrics: Arc<Metrics>,
}

impl Drop for Notifier {
    fn drop(&mut self) {
        for q in &self.queues {
            q.worker.abort();
        }
    }
}

impl Notifier {
    /// Starts one worker per sink (none without sinks). Must run inside a Tokio runtime.
    pub fn start(config: &Notifications, metrics: Arc<Metrics>) -> Notifier {
        let timeout = config.timeout.to_std();
        let queues = config
            .sinks
            .iter()
            .map(|sink| {
                let (tx, rx) = mpsc::channel(config.queue_size.max(1) as usize);
                let worker = tokio::spawn(work(sink.clone(), rx, timeout, metrics.clone()));
                Queue {
                    name: sink.name.clone(),
                    tx,
                    worker,
                }
            })
            .collect();
        Notifier {
            queues,
            config: config.clone(),
            metrics,
        }
    }

    /// Renders each notice for each sink that wants it and enqueues it; never waits.
    pub fn send(&self, notices: Vec<Notice>) {
        for m in decide::messages(&self.config, &notices) {
            let q = &self.queues[m.sink];
            let msg = Outgoing {
                event: m.event,
                body: serde_json::to_vec(&m.body).expect("a JSON value"),
            };
            if let Err(e) = q.tx.try_send(msg) {
                let why = match e {
                    mpsc::error::TrySendError::Full(_) => "its queue is full",
                    mpsc::error::TrySendError::Closed(_) => "its worker stopped",
                };
                tracing::warn!(sink = %q.name, event = m.event.as_str(), "notification dropped: {why} (notifications.queueSize {})", self.config.queue_size);
                self.metrics
                    .notification(&q.name, m.event.as_str(), "dropped");
            }
        }
    }
}

/// A sink's worker: sends its queue's messages one after another, each bounded by `timeout`.
async fn work(
    sink: Sink,
    mut rx: mpsc::Receiver<Outgoing>,
    timeout: Duration,
    metrics: Arc<Metrics>,
) {
    // The client is kept while the URL read stays the same.
    let mut client: Option<(String, kube::Client)> = None;
    while let Some(msg) = rx.recv().await {
        let event = msg.event.as_str();
        let r = match tokio::time::timeout(timeout, deliver(&sink, &msg.body, &mut client, timeout))
            .await
        {
            Ok(r) => r,
            Err(_) => Err(SendError::Timeout {
                sink: sink.name.clone(),
                timeout,
            }),
        };
        match r {
            Ok(()) => {
                tracing::debug!(sink = %sink.name, event, "notification sent");
                metrics.notification(&sink.name, event, "sent");
            }
            Err(e) => {
                tracing::warn!(sink = %sink.name, event, error = %e, "notification not delivered; the rollout goes on");
                metrics.notification(&sink.name, event, e.outcome());
            }
        }
    }
}

/// Reads a secret value: the environment variable or the file's content, trimmed.
pub fn read_secret(r: &SecretRef) -> Result<String, String> {
    let v = match (&r.env, &r.file) {
        (Some(e), _) => std::env::var(e).map_err(|e| e.to_string())?,
        (None, Some(f)) => std::fs::read_to_string(f).map_err(|e| e.to_string())?,
        (None, None) => return Err("no source configured".into()),
    };
    let v = v.trim().to_string();
    if v.is_empty() {
        return Err("it is empty".into());
    }
    Ok(v)
}

async fn deliver(
    sink: &Sink,
    body: &[u8],
    client: &mut Option<(String, kube::Client)>,
    timeout: Duration,
) -> Result<(), SendError> {
    let secret = |what: &'static str, r: &SecretRef| {
        read_secret(r).map_err(|cause| SendError::Secret {
            sink: sink.name.clone(),
            what,
            from: r.to_string(),
            cause,
        })
    };
    let url = secret("URL", &sink.url_from)?;
    let token = match &sink.token_from {
        Some(t) => Some(secret("token", t)?),
        None => None,
    };
    let bad = |cause: String| SendError::Url {
        sink: sink.name.clone(),
        from: sink.url_from.to_string(),
        cause,
    };
    let (base, path) = crate::url::configured(&url).map_err(bad)?;
    let c = match client {
        Some((b, c)) if *b == base => c.clone(),
        _ => {
            let base_uri: http::Uri = base
                .parse()
                .map_err(|e: http::uri::InvalidUri| bad(e.to_string()))?;
            let c =
                crate::client::external(base_uri, timeout).map_err(|source| SendError::Http {
                    sink: sink.name.clone(),
                    source,
                })?;
            *client = Some((base, c.clone()));
            c
        }
    };
    let mut req = http::Request::post(path)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(
            http::header::USER_AGENT,
            crate::client::user_agent("controller"),
        );
    if let Some(t) = token {
        req = req.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
    }
    let req = req
        .body(kube::client::Body::from(body.to_vec()))
        .map_err(|e| bad(e.to_string()))?;
    let res = c.send(req).await.map_err(|source| SendError::Http {
        sink: sink.name.clone(),
        source,
    })?;
    let status = res.status();
    if !status.is_success() {
        return Err(SendError::Status {
            sink: sink.name.clone(),
            status: status.as_u16(),
        });
    }
    Ok(())
}
