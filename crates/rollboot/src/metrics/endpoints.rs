//! The controller's HTTP endpoints: `/metrics` (the text exposition), `/healthz` (liveness:
//! the process answers HTTP) and `/readyz` (200 only while the replica can act or stand by
//! correctly, else 503 with a one-line reason; see [`super::Readiness`]).
//!
//! Owns the routes and what each answers. It must never bind (the caller does, so that an
//! address in use is a start-up error it reports) nor serve outside [`crate::serve`]'s limits.

use std::sync::Arc;

use super::exposition::CONTENT_TYPE;
use super::Metrics;

/// Serves `/metrics`, `/healthz` and `/readyz` on a bound listener until the process ends (the
/// caller binds, so that an address in use is a start-up error it reports), within
/// [`crate::serve::Limits::default`].
pub async fn serve_on(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
) -> std::io::Result<()> {
    use axum::http::{header, StatusCode};
    use axum::routing::get;
    let ready = metrics.clone();
    let app = axum::Router::new()
        .route(
            "/metrics",
            get(move || async move { ([(header::CONTENT_TYPE, CONTENT_TYPE)], metrics.render()) }),
        )
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || async move {
                match ready.readiness.check() {
                    Ok(()) => (StatusCode::OK, "ok".to_string()),
                    Err(why) => (
                        StatusCode::SERVICE_UNAVAILABLE,
                        format!("not ready: {why}\n"),
                    ),
                }
            }),
        );
    crate::serve::serve(listener, app, crate::serve::Limits::default()).await
}
