//! The client every simulated agent of one process shares, and the cap on its requests in
//! flight.
//!
//! Owns only how that shared client reaches the simulator. It must never change what an agent
//! sends or how an answer reads: the agents stay the production code, and a request is held back
//! only while the cap is reached.
//!
//! Why a cap: the client's pool opens a connection per request in flight, and both ends of each
//! connection are file descriptors of this one process. Thousands of agents starting at once
//! (a list, a watch and a patch each) ran a 5,000-node simulation out of descriptors: "Too many
//! open files", and neither controller could build its client. Real agents are processes of their
//! own and never meet this.
//!
//! Why not `tower::limit::ConcurrencyLimit`: its place is given back when the caller polls the
//! answer. An agent waiting for a place for its patch does not poll its own watch's answer, so
//! the watches of agents that wait held every place: no agent wrote its flag (2,000 nodes, 936
//! watches, no patch). Here each request runs in a task of its own that gives its place back as
//! soon as the answer starts, whoever polls it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::sync::Semaphore;
use tower::{BoxError, Layer, Service, ServiceExt};

/// How many requests the agents' shared client has in flight at most; beyond it they queue. A
/// watch holds its place only until its answer starts.
pub const REQUESTS_IN_FLIGHT: usize = 256;

/// Caps the requests (of type `Req`) in flight of the service it wraps (see the module doc).
pub struct InFlightLimit<Req> {
    places: Arc<Semaphore>,
    requests: std::marker::PhantomData<fn(Req)>,
}

impl<Req> InFlightLimit<Req> {
    /// At most `n` requests in flight.
    pub fn new(n: usize) -> Self {
        InFlightLimit {
            places: Arc::new(Semaphore::new(n)),
            requests: std::marker::PhantomData,
        }
    }
}

/// The service [`InFlightLimit`] makes; the wrapped service is shared through a buffer so each
/// request can run in its own task.
pub struct InFlight<Req, S: Service<Req>> {
    inner: tower::buffer::Buffer<Req, S::Future>,
    places: Arc<Semaphore>,
}

impl<Req, S> Layer<S> for InFlightLimit<Req>
where
    S: Service<Req> + Send + 'static,
    S::Future: Send,
    S::Error: Into<BoxError> + Send + Sync,
    Req: Send + 'static,
{
    type Service = InFlight<Req, S>;

    fn layer(&self, inner: S) -> Self::Service {
        InFlight {
            // The buffer only makes the service shareable: the hyper client under it is always
            // ready, so requests do not wait in it.
            inner: tower::buffer::Buffer::new(inner, REQUESTS_IN_FLIGHT),
            places: self.places.clone(),
        }
    }
}

/// Aborts the request's task when its caller gives up on it.
struct Running<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for Running<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<Req, S> Service<Req> for InFlight<Req, S>
where
    S: Service<Req> + Send + 'static,
    S::Future: Send,
    S::Response: Send + 'static,
    S::Error: Into<BoxError> + Send + Sync,
    Req: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // Readiness is waited for in each request's task, with its place.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Req) -> Self::Future {
        let (inner, places) = (self.inner.clone(), self.places.clone());
        let task = Running(tokio::spawn(async move {
            let _place = places.acquire_owned().await.map_err(BoxError::from)?;
            inner.oneshot(req).await
        }));
        Box::pin(async move {
            let mut task = task;
            match (&mut task.0).await {
                Ok(answer) => answer,
                Err(e) => Err(BoxError::from(e)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A service whose answers come only when the test lets them.
    #[derive(Clone)]
    struct Held(
        Arc<tokio::sync::Notify>,
        Arc<std::sync::atomic::AtomicUsize>,
    );

    impl Service<&'static str> for Held {
        type Response = &'static str;
        type Error = BoxError;
        type Future = Pin<Box<dyn Future<Output = Result<&'static str, BoxError>> + Send>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, req: &'static str) -> Self::Future {
            let (gate, started) = (self.0.clone(), self.1.clone());
            Box::pin(async move {
                started.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                if req == "held" {
                    gate.notified().await;
                }
                Ok(req)
            })
        }
    }

    #[tokio::test]
    async fn a_place_is_given_back_when_the_answer_comes_even_if_nobody_polls_it() {
        let started = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let gate = Arc::new(tokio::sync::Notify::new());
        let mut svc = InFlightLimit::new(1).layer(Held(gate.clone(), started.clone()));
        // The first request takes the only place and is never polled by its caller.
        let unpolled = svc.call("first");
        // The second waits for the place; it gets it once the first answered, unpolled.
        let second = tokio::time::timeout(std::time::Duration::from_secs(5), svc.call("second"))
            .await
            .expect("the place of an answered request came back")
            .unwrap();
        assert_eq!(second, "second");
        assert_eq!(unpolled.await.unwrap(), "first");
    }

    #[tokio::test]
    async fn requests_beyond_the_cap_wait_until_a_place_is_free() {
        let started = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let gate = Arc::new(tokio::sync::Notify::new());
        let mut svc = InFlightLimit::new(2).layer(Held(gate.clone(), started.clone()));
        let a = svc.call("held");
        let b = svc.call("held");
        let c = svc.call("third");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        assert_eq!(
            started.load(std::sync::atomic::Ordering::SeqCst),
            2,
            "two in flight"
        );
        gate.notify_one();
        let c = tokio::time::timeout(std::time::Duration::from_secs(5), c)
            .await
            .expect("a place came free")
            .unwrap();
        assert_eq!(c, "third");
        assert_eq!(started.load(std::sync::atomic::Ordering::SeqCst), 3);
        gate.notify_one();
        assert_eq!((a.await.unwrap(), b.await.unwrap()), ("held", "held"));
    }
}
