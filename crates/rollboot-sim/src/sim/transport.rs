//! The in-process transport: kube clients that hand their requests to the simulated API
//! server's router directly, without a socket.
//!
//! Owns only how a request travels from a client of this process to the router and how the
//! answer travels back. It must never change what a client sends or what the server answers:
//! the same request (method, path, query, headers, body) reaches the same handler as over
//! HTTP, and the client's own layers that shape a request are kept (its base URI, kube's 429
//! retry where the config asks for it, the bearer token, the extra headers such as the
//! User-Agent). What it leaves out is the HTTP/1 framing, the loopback socket and hyper's
//! connection pool: a 5,000-node rollout spent an eighth of its CPU there (perf), with the
//! controller and 5,000 agents in one process with the server.
//!
//! An outage ([`super::faults::Faults::outage`]) reaches these clients as it reaches a socket's:
//! a request made while the server is down fails as a refused connection would, and an
//! answer still streaming (a watch) fails at its next chunk, as a reset connection does.
//!
//! kubectl and every client built from the cluster's kubeconfig still go through the listener.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::body::Body;
use futures::StreamExt;
use http::{Request, Response};
use kube::client::ConfigExt;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt};

use super::server::Shared;

/// A kube client for `config` whose requests reach `router` in this process (see the module
/// doc). Errors where kube would refuse the config (its token source or headers).
pub fn client(
    config: &kube::Config,
    router: axum::Router,
    shared: Arc<Shared>,
) -> Result<kube::Client, kube::Error> {
    let retry = config
        .default_retry
        .then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry()));
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .service(InProcess { router, shared });
    Ok(kube::Client::new(service, config.default_namespace.clone()))
}

/// The service at the bottom of an in-process client's stack.
#[derive(Clone)]
struct InProcess {
    router: axum::Router,
    shared: Arc<Shared>,
}

impl Service<Request<kube::client::Body>> for InProcess {
    type Response = Response<Body>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<kube::client::Body>) -> Self::Future {
        let (router, shared) = (self.router.clone(), self.shared.clone());
        Box::pin(async move {
            if shared.faults.down_for().is_some() {
                return Err(std::io::Error::from(std::io::ErrorKind::ConnectionRefused).into());
            }
            let answer = router
                .oneshot(req)
                .await
                .unwrap_or_else(|e: Infallible| match e {});
            Ok(answer.map(|body| cut_by_outage(body, shared)))
        })
    }
}

/// `body`, failing at its first chunk read while the server is down (a reset connection).
fn cut_by_outage(body: Body, shared: Arc<Shared>) -> Body {
    let mut down = false;
    let chunks = body.into_data_stream().map(move |chunk| {
        if down || shared.faults.down_for().is_some() {
            down = true;
            return Err(axum::Error::new(std::io::Error::from(
                std::io::ErrorKind::ConnectionReset,
            )));
        }
        chunk
    });
    Body::from_stream(chunks)
}
