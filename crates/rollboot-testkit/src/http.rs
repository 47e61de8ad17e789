//! A minimal HTTP/1.1 client for tests that must see exactly what a server answers: kube's
//! client retries 429 answers and hides a status the test looks at. It owns one request per
//! connection and nothing else; it must never retry.

use std::fmt::Display;
use std::time::Duration;

/// Sends one request presenting `token` and returns the status code and the (de-chunked) body.
/// A chunked body cut short (a watch the server ends) yields what arrived.
pub async fn http(
    addr: std::net::SocketAddr,
    token: &str,
    method: impl Display,
    path: &str,
    ct: &str,
    body: &str,
) -> (u16, String) {
    request(
        addr,
        token,
        method,
        path,
        &[("Content-Type", ct)],
        body.as_bytes(),
    )
    .await
}

/// [`http`] with any headers and a byte body (a protobuf body, an `Accept`).
pub async fn request(
    addr: std::net::SocketAddr,
    token: &str,
    method: impl Display,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: sim\r\nAuthorization: Bearer {token}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut buf))
        .await
        .expect("the simulator answers")
        .unwrap();
    let text = String::from_utf8_lossy(&buf).to_string();
    let (head, rest) = text.split_once("\r\n\r\n").unwrap();
    let code: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        let mut out = String::new();
        let mut rest = rest;
        while let Some((size, after)) = rest.split_once("\r\n") {
            let size = usize::from_str_radix(size.trim(), 16).unwrap();
            if size == 0 {
                break;
            }
            out.push_str(&after[..size]);
            rest = &after[size + 2..];
        }
        out
    } else {
        rest.to_string()
    };
    (code, body)
}
