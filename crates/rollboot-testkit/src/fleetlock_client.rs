//! A FleetLock client written from the protocol's document (Zincati's
//! `docs/development/fleetlock/protocol.md`), not from rollboot's server: the host's id as
//! Zincati computes it, and one request over a plain TCP connection. Shared by the simulator's
//! FleetLock tests and the real-control-plane suite.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Zincati's application ID.
const ZINCATI_APP: &str = "de35106b6ec24688b63afddaa156679b";

fn bytes16(hex: &str) -> [u8; 16] {
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    }
    out
}

/// The host's id as Zincati sends it: systemd's app-specific machine ID, HMAC-SHA256 keyed by
/// the machine ID over the app ID, cut to 16 bytes, marked as a v4 UUID, lower-case hex.
pub fn zincati_id(machine_id: &str) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &bytes16(machine_id));
    let tag = ring::hmac::sign(&key, &bytes16(ZINCATI_APP));
    let mut id: Vec<u8> = tag.as_ref()[..16].to_vec();
    id[6] = (id[6] & 0x0f) | 0x40;
    id[8] = (id[8] & 0x3f) | 0x80;
    id.iter().map(|b| format!("{b:02x}")).collect()
}

/// One answer: the status and, for anything but 200, the error's `kind`.
#[derive(Debug)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The error's `kind`, for anything but 200.
    pub kind: Option<String>,
    /// The error's `value`, or the body of a 200.
    pub value: String,
}

/// `POST {addr}{path}` with `body`, the protocol header unless `header` is false, from the
/// local address `from` (the host's own: a FleetLock server answers a host only from its
/// addresses), or any local address when `None`.
pub async fn post(
    from: Option<IpAddr>,
    addr: SocketAddr,
    path: &str,
    body: String,
    header: bool,
) -> Answer {
    let h = if header {
        "fleet-lock-protocol: true\r\n"
    } else {
        ""
    };
    post_with(from, addr, path, body, h).await
}

/// [`post`] with `headers` (each line ending in CRLF) as the only headers beyond the host, the
/// content's type and length.
pub async fn post_with(
    from: Option<IpAddr>,
    addr: SocketAddr,
    path: &str,
    body: String,
    h: &str,
) -> Answer {
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\n{h}content-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let text = tokio::time::timeout(Duration::from_secs(20), async {
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4().unwrap()
        } else {
            tokio::net::TcpSocket::new_v6().unwrap()
        };
        if let Some(ip) = from {
            socket.bind(SocketAddr::new(ip, 0)).unwrap();
        }
        let mut s = socket.connect(addr).await.unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        let mut text = String::new();
        s.read_to_string(&mut text).await.unwrap();
        text
    })
    .await
    .expect("an answer within 20 s");
    let status: u16 = text[9..12].parse().unwrap();
    let payload = text
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    let (kind, value) = if status == 200 {
        (None, payload)
    } else {
        let v: serde_json::Value = serde_json::from_str(&payload)
            .unwrap_or_else(|e| panic!("error body {payload:?} is not JSON: {e}"));
        (
            Some(v["kind"].as_str().expect("a kind").to_string()),
            v["value"].as_str().expect("a value").to_string(),
        )
    };
    Answer {
        status,
        kind,
        value,
    }
}

pub fn body(id: &str, group: &str) -> String {
    serde_json::json!({"client_params": {"id": id, "group": group}}).to_string()
}
