//! Bounded HTTP serving, for every server rollboot runs: the controller's FleetLock server and
//! its `/metrics`, `/healthz`, `/readyz`, and the agent's `/metrics`, `/healthz`.
//!
//! Owns what a client can make a server hold, in memory, in time and in the logs: the body
//! (read here, whole, before the routes see it; 413 past [`Limits::body_bytes`], at once when
//! the `Content-Length` says so), the size of a request's head, the time to send a request's head (and the time a kept-alive
//! connection may sit idle), the time from a request's head to its answer, the number of
//! connections open at once (the next one is answered 503 and closed, never queued), and how
//! much of a client's string goes into a log line ([`for_log`]). Every request carries the TCP
//! peer's address as `axum::extract::ConnectInfo<SocketAddr>`. It must never queue a
//! connection, read a body without a bound, or keep a connection whose client is too slow;
//! and it decides nothing about what is served: the routes are the caller's.

use std::borrow::Cow;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use axum::http::{header, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper::body::{Body as _, Incoming};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tower::ServiceExt;

/// What one server lets a client hold. [`Limits::default`] is production's; tests shorten it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The largest request body read, in bytes; a larger one is answered 413. FleetLock's
    /// bodies are about 100 bytes; the metrics and health endpoints take none.
    pub body_bytes: usize,
    /// How long a client has to send a request's head, from the connection's accept or from
    /// the previous answer on a kept-alive connection (so also the longest idle keep-alive);
    /// past it the connection is closed.
    pub header_timeout: Duration,
    /// How long a request may take from its head to its answer (reading its body and
    /// handling it); past it the connection is closed, with no answer.
    pub request_timeout: Duration,
    /// Connections open at once; past it a new connection is answered 503 and closed.
    pub max_connections: usize,
}

impl Default for Limits {
    /// Production's limits.
    ///
    /// A connection holds at most [`HEAD_BYTES`] of read buffer, a body of `body_bytes` (copied
    /// out of that buffer as it comes) and a small answer: about 40 KiB at worst with its task
    /// and handler, so 128 of them are about
    /// 5 MiB, well within the controller's budget (deploy/controller.yaml: 66 MiB peak at
    /// 5,000 nodes, a 192 MiB limit); the agent, with a 32 MiB limit, takes a smaller cap
    /// ([`crate::agent::metrics::serve_on`]). Legitimate clients are few:
    /// a Prometheus or two, the kubelet's probes, and FleetLock hosts that poll every few
    /// minutes with one short request (a host turned away with 503 asks again).
    ///
    /// The request timeout is longer than a standby's forward to the leader (10 s,
    /// `controller::fleetlock`), so that a forward that fails is answered `no_leader` by the
    /// standby rather than cut.
    fn default() -> Self {
        Limits {
            body_bytes: 8 << 10,
            header_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(20),
            max_connections: 128,
        }
    }
}

/// The largest request head (request line and headers), in bytes: hyper's read buffer for a
/// connection, at its minimum of 8 KiB plus room. A larger head is answered 431.
pub const HEAD_BYTES: usize = 16 << 10;

/// How many characters of a client's string [`for_log`] keeps.
pub const LOG_CHARS: usize = 200;

/// `value` as it may go into a log line (or back to its client): its first [`LOG_CHARS`]
/// characters, and when it is longer, an ellipsis and its whole length in bytes.
pub fn for_log(value: &str) -> Cow<'_, str> {
    match value.char_indices().nth(LOG_CHARS) {
        None => Cow::Borrowed(value),
        Some((cut, _)) => Cow::Owned(format!("{}… ({} bytes in all)", &value[..cut], value.len())),
    }
}

/// What a connection refused past [`Limits::max_connections`] is answered.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nconnection: close\r\nretry-after: 1\r\ncontent-length: 0\r\n\r\n";

/// Serves `app` on `listener` within `limits` until the future is dropped (which closes every
/// connection it serves). An error to accept a connection is logged and waited out, never
/// returned: the `Result` is that of `axum::serve`, whose place this takes.
pub async fn serve(listener: TcpListener, app: Router, limits: Limits) -> std::io::Result<()> {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let mut open = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => match permits.clone().try_acquire_owned() {
                    Ok(permit) => {
                        open.spawn(connection(stream, peer, app.clone(), limits, permit));
                    }
                    Err(_) => refuse(stream, peer),
                },
                Err(e) => accept_failed(e).await,
            },
            Some(_) = open.join_next() => {}
        }
    }
}

/// Answers 503 without waiting (what the socket's buffer takes now) and closes.
fn refuse(stream: TcpStream, peer: SocketAddr) {
    tracing::debug!(%peer, "connection refused: too many open");
    let _ = stream.try_write(BUSY);
}

/// Waits out a failed accept: a connection reset before it was taken is nothing, anything else
/// (out of file descriptors) is said and given a moment.
async fn accept_failed(e: std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        return;
    }
    tracing::warn!(error = %e, "could not accept a connection");
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// Serves one connection until it ends or its client misses a deadline, holding `_permit`.
///
/// The deadline: the request's head within `header_timeout` of the accept or of the previous
/// answer; the answer within `request_timeout` of the head. Missed, the connection is
/// dropped: closed, and its handler (if one runs) dropped as when a client goes away.
async fn connection(
    stream: TcpStream,
    peer: SocketAddr,
    app: Router,
    limits: Limits,
    _permit: OwnedSemaphorePermit,
) {
    let (deadline, mut due) = watch::channel(Instant::now() + limits.header_timeout);
    let service = Bounded {
        app,
        peer,
        limits,
        deadline: Arc::new(deadline),
    };
    let conn = hyper::server::conn::http1::Builder::new()
        .max_buf_size(HEAD_BYTES)
        .serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    loop {
        let at = *due.borrow_and_update();
        tokio::select! {
            done = conn.as_mut() => {
                if let Err(e) = done {
                    tracing::debug!(%peer, error = %e, "connection ended");
                }
                return;
            }
            Ok(()) = due.changed() => {}
            () = tokio::time::sleep_until(at) => {
                tracing::debug!(%peer, "connection closed: its client is too slow");
                return;
            }
        }
    }
}

/// The service of one connection: the app, with the peer's address in every request and the
/// connection's deadline moved as each request comes and is answered.
#[derive(Clone)]
struct Bounded {
    app: Router,
    peer: SocketAddr,
    limits: Limits,
    deadline: Arc<watch::Sender<Instant>>,
}

impl hyper::service::Service<Request<Incoming>> for Bounded {
    type Response = Response;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response, Infallible>> + Send>>;

    fn call(&self, mut req: Request<Incoming>) -> Self::Future {
        self.deadline
            .send_replace(Instant::now() + self.limits.request_timeout);
        req.extensions_mut().insert(ConnectInfo(self.peer));
        let (app, deadline, limits) = (self.app.clone(), self.deadline.clone(), self.limits);
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            let answer = match read_body(&parts.headers, body, limits.body_bytes).await {
                Ok(body) => match app.oneshot(Request::from_parts(parts, body)).await {
                    Ok(answer) => answer,
                    Err(never) => match never {},
                },
                Err(refused) => refused,
            };
            deadline.send_replace(Instant::now() + limits.header_timeout);
            Ok(answer)
        })
    }
}

/// The whole body of a request, read here, up to `limit` bytes, and copied out of hyper's
/// buffers as it comes: a body sent a few bytes at a time would otherwise hold a buffer of
/// hyper's per piece until the handler is done with it. Past `limit`, 413 (at once when the
/// `Content-Length` says so); a body cut short, 400. Both close the connection.
async fn read_body(
    headers: &header::HeaderMap,
    mut body: Incoming,
    limit: usize,
) -> Result<Body, Response> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let too_large = || {
        closing(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("a request body is at most {limit} bytes\n"),
        )
    };
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let mut read = Vec::with_capacity(declared.unwrap_or(0) as usize);
    while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        let Ok(frame) = frame else {
            return Err(closing(
                StatusCode::BAD_REQUEST,
                "the request body was cut short\n".into(),
            ));
        };
        if let Some(data) = frame.data_ref() {
            if read.len() + data.len() > limit {
                return Err(too_large());
            }
            read.extend_from_slice(data);
        }
    }
    Ok(Body::from(Bytes::from(read)))
}

/// An answer that closes the connection after it.
fn closing(status: StatusCode, why: String) -> Response {
    (status, [(header::CONNECTION, "close")], why).into_response()
}

/// What the servers' tests of other modules share.
#[cfg(test)]
pub(crate) mod test_client {
    use std::net::SocketAddr;

    /// Sends `raw` over one connection to `addr` and returns what came back within 5 s.
    pub(crate) async fn answer(addr: SocketAddr, raw: &[u8]) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(raw).await.unwrap();
        let mut answer = String::new();
        let read = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            s.read_to_string(&mut answer),
        );
        let _ = read.await;
        answer
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::{get, post};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A bound for "at once": generous, the limits under test are a fraction of it.
    const WITHIN: Duration = Duration::from_secs(5);

    fn short() -> Limits {
        Limits {
            body_bytes: 8 << 10,
            header_timeout: Duration::from_millis(200),
            request_timeout: Duration::from_millis(500),
            max_connections: 8,
        }
    }

    /// Serves a small app within `limits` on a loopback port: `POST /echo` answers the body's
    /// length, `GET /peer` the caller's address, `GET /` ok.
    async fn start(limits: Limits) -> SocketAddr {
        let app = Router::new()
            .route("/", get(|| async { "ok" }))
            .route("/echo", post(|b: Bytes| async move { b.len().to_string() }))
            .route(
                "/peer",
                get(|ConnectInfo(p): ConnectInfo<SocketAddr>| async move { p.to_string() }),
            );
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve(listener, app, limits));
        addr
    }

    /// Everything the server sends until it closes (a reset counts as closed), or `None` when
    /// it is still open after [`WITHIN`].
    async fn until_closed(s: &mut TcpStream) -> Option<String> {
        let mut got = Vec::new();
        let read = tokio::time::timeout(WITHIN, async {
            let mut buf = [0u8; 4096];
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
        })
        .await;
        read.ok()
            .map(|()| String::from_utf8_lossy(&got).into_owned())
    }

    /// One request on a fresh connection, closed after the answer: its whole text.
    async fn request(addr: SocketAddr, text: &str) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(text.as_bytes()).await.unwrap();
        until_closed(&mut s).await.expect("answered and closed")
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_answered_413() {
        let addr = start(Limits::default()).await;
        let post = |len: usize, chunked: bool| {
            let body = "x".repeat(len);
            if chunked {
                format!("POST /echo HTTP/1.1\r\nhost: a\r\nconnection: close\r\ntransfer-encoding: chunked\r\n\r\n{len:x}\r\n{body}\r\n0\r\n\r\n")
            } else {
                format!("POST /echo HTTP/1.1\r\nhost: a\r\nconnection: close\r\ncontent-length: {len}\r\n\r\n{body}")
            }
        };
        let fits = request(addr, &post(8 << 10, false)).await;
        assert!(fits.starts_with("HTTP/1.1 200"), "{fits}");
        assert!(fits.ends_with("8192"), "{fits}");
        for chunked in [false, true] {
            let over = request(addr, &post((8 << 10) + 1, chunked)).await;
            assert!(
                over.starts_with("HTTP/1.1 413"),
                "chunked {chunked}: {over}"
            );
        }
        // Declared over the limit, sent slowly: 413 at once, nothing waited for.
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"POST /echo HTTP/1.1\r\nhost: a\r\ncontent-length: 2000000\r\n\r\nxx")
            .await
            .unwrap();
        let answer = until_closed(&mut s).await.expect("answered and closed");
        assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    }

    #[tokio::test]
    async fn a_head_over_its_limit_is_answered_431() {
        let addr = start(short()).await;
        let head = |pad: usize| {
            format!(
                "GET / HTTP/1.1\r\nhost: a\r\nconnection: close\r\nx-pad: {}\r\n\r\n",
                "p".repeat(pad)
            )
        };
        let fits = request(addr, &head(4 << 10)).await;
        assert!(fits.starts_with("HTTP/1.1 200"), "{fits}");
        let over = request(addr, &head(HEAD_BYTES)).await;
        assert!(over.starts_with("HTTP/1.1 431"), "{over}");
    }

    /// Sends `head`, then `piece` every 20 ms, until the server closes the connection or
    /// [`WITHIN`] passes; what the read that waited for it saw.
    async fn trickled(
        addr: SocketAddr,
        head: &'static [u8],
        piece: &'static [u8],
    ) -> Result<std::io::Result<usize>, tokio::time::error::Elapsed> {
        let s = TcpStream::connect(addr).await.unwrap();
        let (mut read, mut write) = s.into_split();
        let trickle = tokio::spawn(async move {
            write.write_all(head).await?;
            loop {
                write.write_all(piece).await?;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            #[allow(unreachable_code)]
            Ok::<(), std::io::Error>(())
        });
        let mut buf = [0u8; 1024];
        let closed = tokio::time::timeout(WITHIN, read.read(&mut buf)).await;
        trickle.abort();
        closed
    }

    #[tokio::test]
    async fn a_client_that_trickles_its_headers_is_disconnected_after_the_header_timeout() {
        let addr = start(short()).await;
        let closed = trickled(addr, b"GET / HTTP/1.1\r\nhost: a\r\n", b"x-slow: 1\r\n").await;
        assert!(
            matches!(closed, Ok(Ok(0) | Err(_))),
            "still open after {WITHIN:?} with a header timeout of 200ms: {closed:?}"
        );
    }

    #[tokio::test]
    async fn a_client_that_trickles_a_body_under_the_limit_is_disconnected_after_the_request_timeout(
    ) {
        let addr = start(short()).await;
        let closed = trickled(
            addr,
            b"POST /echo HTTP/1.1\r\nhost: a\r\ncontent-length: 4000\r\n\r\n",
            b"x",
        )
        .await;
        assert!(
            matches!(closed, Ok(Ok(0) | Err(_))),
            "still open after {WITHIN:?} with a request timeout of 500ms: {closed:?}"
        );
    }

    #[tokio::test]
    async fn a_kept_alive_connection_idle_past_the_header_timeout_is_closed() {
        let addr = start(short()).await;
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET / HTTP/1.1\r\nhost: a\r\n\r\n")
            .await
            .unwrap();
        let answer = until_closed(&mut s).await.expect("closed while idle");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    }

    #[tokio::test]
    async fn past_the_connection_cap_a_new_connection_is_refused_at_once() {
        let limits = Limits {
            header_timeout: Duration::from_secs(60),
            max_connections: 2,
            ..short()
        };
        let addr = start(limits).await;
        let mut held = Vec::new();
        for _ in 0..2 {
            let mut s = TcpStream::connect(addr).await.unwrap();
            // Kept alive: answered, and then held open.
            s.write_all(b"GET / HTTP/1.1\r\nhost: a\r\n\r\n")
                .await
                .unwrap();
            let mut buf = [0u8; 1024];
            let n = s.read(&mut buf).await.unwrap();
            assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
            held.push(s);
        }
        let mut next = TcpStream::connect(addr).await.unwrap();
        let _ = next
            .write_all(b"GET / HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n")
            .await;
        let answer = until_closed(&mut next)
            .await
            .expect("refused, not left hanging");
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 503"),
            "{answer}"
        );
        // A connection closed gives its place back.
        drop(held.pop());
        let start = std::time::Instant::now();
        loop {
            let answer = request(
                addr,
                "GET / HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n",
            )
            .await;
            if answer.starts_with("HTTP/1.1 200") {
                break;
            }
            assert!(start.elapsed() < WITHIN, "no place given back: {answer}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn every_request_carries_the_peers_address() {
        let addr = start(short()).await;
        let mut s = TcpStream::connect(addr).await.unwrap();
        let me = s.local_addr().unwrap();
        s.write_all(b"GET /peer HTTP/1.1\r\nhost: a\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let answer = until_closed(&mut s).await.expect("answered");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with(&me.to_string()), "{answer}");
    }

    #[test]
    fn a_value_for_the_log_is_cut_to_its_first_characters() {
        assert_eq!(for_log("short"), "short");
        let exact = "é".repeat(LOG_CHARS);
        assert_eq!(for_log(&exact), exact);
        let long = "é".repeat(1_000_000);
        let cut = for_log(&long);
        assert!(cut.starts_with(&"é".repeat(LOG_CHARS)), "{cut}");
        assert!(cut.ends_with("… (2000000 bytes in all)"), "{cut}");
        assert!(cut.chars().count() < LOG_CHARS + 30, "{cut}");
    }
}
