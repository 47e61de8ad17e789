//! The FleetLock server of a replica: `POST /v1/pre-reboot` and `POST /v1/steady-state`.
//!
//! Owns the HTTP side ([`serve`]): a request is parsed ([`crate::fleetlock::protocol`]); the
//! request is answered only when it comes from the host it names (its peer address, or the
//! last hop of a trusted proxy's `X-Forwarded-For`, among the Node's addresses; see
//! [`crate::fleetlock::caller`]), else 403 `client_not_host` with nothing written; the
//! leader answers it ([`answer`], pure) from its caches, after the one Node write
//! the answer needs (the request flag, the slot given back, a request withdrawn), fenced like
//! every write of the leader; any other replica forwards it, unchanged, to the leader's
//! address read from the leader Lease ([`crate::lease::FLEETLOCK_URL`]), so a host is never
//! turned away for reaching a standby. A forward carries the host's address, checked by the
//! standby first, and the standby's proof that it is a replica ([`proof`]); the leader takes
//! that address from nobody else. It must never write unless this replica leads, never
//! answer 200 before the write it depends on is in the cluster, and never forward twice: a
//! request already forwarded that reaches a non-leader gets `no_leader`. It asks the API
//! nothing while no host calls (requests per minute idle: none).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use chrono::Utc;

pub mod answer;
mod proof;

use super::context::Ctx;
use super::error::Error;
use super::writes::patch_node;
use crate::fleetlock::caller;
use crate::fleetlock::id::{self, Found};
use crate::fleetlock::protocol::{self, ClientRequest, Endpoint, ErrorKind};
use crate::lease::{LeaseRef, FLEETLOCK_URL};
use crate::node::{self as proto, NodeView};
use answer::{Ask, Reply};

/// The header a forwarded request carries (the forwarding replica's identity): a replica that
/// does not lead answers it `no_leader` instead of forwarding it again.
pub const FORWARDED: &str = "rollboot-forwarded";

/// The header a forwarded request carries the host's address in (the peer the forwarding
/// replica saw, checked by it): read only from a forward whose proof the leader checked.
pub const FORWARDED_FOR: &str = "rollboot-forwarded-for";

/// How long a forward to the leader may take.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);

/// How many times an answer is decided again when its write meets a newer Node (409).
const WRITE_TRIES: usize = 3;

/// The leader's address as it writes it on the leader Lease.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
pub(super) struct Advertised {
    /// The identity holding the Lease when this was written.
    pub holder: String,
    /// `http://host:port` of its FleetLock server.
    pub url: String,
}

/// What the handlers share.
#[derive(Clone)]
struct Served {
    ctx: Ctx,
    identity: String,
    leader_lease: LeaseRef,
    /// Derived FleetLock ids by machine ID: an HMAC per Node per request is avoidable work.
    ids: Arc<Mutex<HashMap<String, Option<String>>>>,
    /// The leader and its address as last read from the leader Lease, and when: hosts poll,
    /// and a read per forwarded request is a cost for nothing.
    leader: Arc<Mutex<Option<KnownLeader>>>,
    /// This replica's proof to the leader, and the check of other replicas' proofs.
    proof: Arc<proof::Proof>,
    /// `fleetlock.verifyClientAddress` and `fleetlock.trustedProxies`, read once: a replica
    /// runs on one config (a change restarts it).
    verify: bool,
    trusted: Arc<[caller::Cidr]>,
}

/// When the leader Lease was read, its holder, and the address the holder published.
type KnownLeader = (std::time::Instant, String, Option<Advertised>);

/// How long a standby forwards to the leader it read last without reading the Lease again.
const LEADER_FRESH_FOR: Duration = Duration::from_secs(1);

/// Serves FleetLock on `listener` until the future is dropped.
pub(super) async fn serve(
    listener: tokio::net::TcpListener,
    ctx: Ctx,
    identity: String,
    leader_lease: LeaseRef,
) -> std::io::Result<()> {
    let Some(f) = ctx.config.fleetlock.clone() else {
        return Ok(());
    };
    if !f.verify_client_address {
        tracing::warn!("{}", crate::config::FleetLock::UNVERIFIED);
    }
    let served = Served {
        verify: f.verify_client_address,
        trusted: f.trusted_proxies().into(),
        proof: Arc::new(proof::Proof::new(
            ctx.services.client.clone(),
            f.forward_token_file,
        )),
        ctx,
        identity,
        leader_lease,
        ids: Arc::default(),
        leader: Arc::default(),
    };
    let app = Router::new()
        .route(
            Endpoint::PreReboot.path(),
            post(|s, p, h, b| handle(s, Endpoint::PreReboot, p, h, b)),
        )
        .route(
            Endpoint::SteadyState.path(),
            post(|s, p, h, b| handle(s, Endpoint::SteadyState, p, h, b)),
        )
        .with_state(served);
    crate::serve::serve(listener, app, crate::serve::Limits::default()).await
}

/// The address to advertise for `bound`: `POD_IP` (the Pod's address, from the downward API)
/// with the bound port, else the bound address (loopback when bound to every interface).
pub(super) fn advertised_url(bound: SocketAddr, pod_ip: Option<&str>) -> String {
    let host = match pod_ip.map(str::trim).filter(|s| !s.is_empty()) {
        Some(ip) if ip.contains(':') => format!("[{ip}]"),
        Some(ip) => ip.to_string(),
        None if bound.ip().is_unspecified() => "127.0.0.1".into(),
        None => match bound {
            SocketAddr::V6(a) => format!("[{}]", a.ip()),
            SocketAddr::V4(a) => a.ip().to_string(),
        },
    };
    format!("http://{host}:{}", bound.port())
}

fn reply(kind: Option<ErrorKind>, value: &str) -> Response {
    match kind {
        None => (StatusCode::OK, value.to_string()).into_response(),
        Some(k) => (
            StatusCode::from_u16(k.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            protocol::error_body(k, value),
        )
            .into_response(),
    }
}

async fn handle(
    State(s): State<Served>,
    endpoint: Endpoint,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let metrics = &s.ctx.services.metrics;
    let header = headers.get(protocol::HEADER).and_then(|v| v.to_str().ok());
    let request = match protocol::parse(header, &body) {
        Ok(r) => r,
        Err((kind, value)) => {
            // Nothing is flagged by a bad request, and none is forwarded.
            metrics.fleetlock_request(endpoint.as_str(), kind.as_str());
            tracing::info!(endpoint = endpoint.as_str(), kind = kind.as_str(), %value, "FleetLock request refused");
            return reply(Some(kind), &value);
        }
    };
    let refused = |kind: ErrorKind, value: String| {
        metrics.fleetlock_request(endpoint.as_str(), kind.as_str());
        tracing::warn!(endpoint = endpoint.as_str(), kind = kind.as_str(), %peer, id = %request.id, %value, "FleetLock request refused");
        reply(Some(kind), &value)
    };
    let leads = s.ctx.leadership.ensure().is_ok();
    let forwarded = headers.contains_key(FORWARDED);
    let client = if forwarded && leads {
        match forwarded_client(&s, &headers).await {
            Ok(ip) => ip,
            Err(why) => return refused(ErrorKind::UntrustedForward, why),
        }
    } else {
        let xff = headers.get("x-forwarded-for").and_then(|v| v.to_str().ok());
        match caller::client_address(peer.ip(), xff, &s.trusted) {
            Ok(ip) => ip,
            Err(why) => return refused(ErrorKind::ClientNotHost, why),
        }
    };
    if !leads {
        if !forwarded {
            // Checked here first: a request the leader would refuse is not carried to it.
            let name = match find(&s, &request.id) {
                Ok(name) => name,
                Err(value) => return refused(ErrorKind::UnknownHost, value),
            };
            if let Err(why) = from_host(&s, &name, client) {
                return refused(ErrorKind::ClientNotHost, why);
            }
        }
        return forward(&s, endpoint, &headers, client, body).await;
    }
    let r = lead_answer(&s, endpoint, &request, client).await;
    metrics.fleetlock_request(endpoint.as_str(), r.recorded());
    tracing::info!(
        endpoint = endpoint.as_str(),
        id = %request.id,
        group = %request.group,
        answer = r.recorded(),
        value = %r.value,
        "FleetLock request answered"
    );
    reply(r.kind, &r.value)
}

/// The leader's answer to `request`, after its write.
async fn lead_answer(
    s: &Served,
    endpoint: Endpoint,
    request: &ClientRequest,
    client: std::net::IpAddr,
) -> Reply {
    let ctx = &s.ctx;
    let name = match find(s, &request.id) {
        Ok(name) => name,
        Err(value) => {
            return Reply {
                kind: Some(ErrorKind::UnknownHost),
                value,
                write: None,
            }
        }
    };
    // Before anything is written: the id is public, the address is not the caller's choice.
    if let Err(value) = from_host(s, &name, client) {
        return Reply {
            kind: Some(ErrorKind::ClientNotHost),
            value,
            write: None,
        };
    }
    for _ in 0..WRITE_TRIES {
        let Some(view) = ctx.cache.current(&name) else {
            break;
        };
        let record = ctx.cache.lock_now();
        let blockers = ctx.cache.last_blockers.lock().expect("blockers").clone();
        let now = Utc::now();
        let r = answer::answer(&Ask {
            endpoint,
            request,
            node: &view,
            entry: record.entries.get(&name),
            blockers: &blockers,
            in_flight: record.entries.len(),
            config: &ctx.config,
            now,
        });
        let Some(patch) = answer::patch(&view, request, endpoint, &r, now) else {
            return r;
        };
        match patch_node(ctx, &view, "recording a FleetLock request", patch).await {
            Ok(_) => {
                if r.write.is_some() {
                    say_write(ctx, &view, request, &r).await;
                    ctx.wake.notify_one();
                }
                return r;
            }
            // A newer Node: decided again from it once the cache has it.
            Err(Error::Conflict { .. }) => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(e) => {
                tracing::warn!(node = %name, error = %e, "could not record a FleetLock request");
                return Reply {
                    kind: Some(ErrorKind::Internal),
                    value: format!("node {name} could not be written: {e}; ask again"),
                    write: None,
                };
            }
        }
    }
    Reply {
        kind: Some(ErrorKind::Internal),
        value: format!("node {name} kept changing under the request; ask again"),
        write: None,
    }
}

/// Says the write a request led to: an Event on the Node.
async fn say_write(ctx: &Ctx, view: &NodeView, request: &ClientRequest, r: &Reply) {
    use answer::Write;
    let (reason, note) = match r.write {
        Some(Write::Request) => (
            "FleetLockRequested",
            format!(
                "host {} (group {}) asked for a reboot slot over FleetLock: flagged (reason {})",
                request.id,
                request.group,
                proto::FLEETLOCK_REASON
            ),
        ),
        Some(Write::GiveBack) => (
            "FleetLockGivenBack",
            format!(
                "host {} called steady-state before rebooting (boot {} unchanged): its cycle ends without a reboot",
                request.id, view.boot_id
            ),
        ),
        Some(Write::Withdraw) => (
            "FleetLockWithdrawn",
            format!(
                "host {} called steady-state while waiting: its request is withdrawn",
                request.id
            ),
        ),
        None => return,
    };
    ctx.services
        .events
        .publish(&view.name, false, reason, note)
        .await;
}

/// `Ok` when `client` is one of Node `name`'s addresses (or `fleetlock.verifyClientAddress`
/// is off); else why not, naming both.
fn from_host(s: &Served, name: &str, client: std::net::IpAddr) -> Result<(), String> {
    if !s.verify {
        return Ok(());
    }
    let node = s
        .ctx
        .cache
        .nodes
        .get(&kube::runtime::reflector::ObjectRef::new(name));
    let addresses = node
        .as_ref()
        .and_then(|n| n.status.as_ref())
        .and_then(|st| st.addresses.as_deref())
        .unwrap_or_default();
    let pairs = || {
        addresses
            .iter()
            .map(|a| (a.type_.as_str(), a.address.as_str()))
    };
    if caller::is_host(client, pairs()) {
        return Ok(());
    }
    let known: Vec<&str> = pairs()
        .filter(|(t, _)| caller::HOST_ADDRESS_TYPES.contains(t))
        .map(|(_, a)| a)
        .collect();
    Err(format!(
        "the request comes from {client}, which is not an address of node {name} ({}): only the host itself may ask for its slot",
        if known.is_empty() {
            "it has no InternalIP or ExternalIP".to_string()
        } else {
            known.join(", ")
        }
    ))
}

/// The host's address a forward carries, once its proof is checked: `Err` says why the
/// forward is not taken.
async fn forwarded_client(s: &Served, headers: &HeaderMap) -> Result<std::net::IpAddr, String> {
    let token = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .ok_or("a forwarded request without a replica's token is not taken")?;
    s.proof
        .check(token.trim())
        .await
        .map_err(|e| format!("a forwarded request whose token is not a replica's: {e}"))?;
    headers
        .get(FORWARDED_FOR)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<std::net::IpAddr>().ok())
        .map(|a| a.to_canonical())
        .ok_or_else(|| format!("a forwarded request without an address in {FORWARDED_FOR}"))
}

/// The name of the Node whose host has FleetLock id `id`, or why none is taken.
fn find(s: &Served, id: &str) -> Result<String, String> {
    let nodes = s.ctx.cache.nodes.state();
    let mut memo = s.ids.lock().expect("ids");
    let hosts = nodes.iter().map(|n| {
        let name = n.metadata.name.as_deref().unwrap_or_default();
        let given = n
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(proto::FLEETLOCK_ID))
            .map(String::as_str);
        let machine = n
            .status
            .as_ref()
            .and_then(|s| s.node_info.as_ref())
            .map_or("", |i| i.machine_id.as_str());
        // The derived id is memoized: an HMAC per Node per request is avoidable work.
        let id = id::host_id(given, || {
            memo.entry(machine.to_string())
                .or_insert_with(|| id::app_specific(machine, &id::ZINCATI_APP_ID))
                .clone()
        });
        (name, id)
    });
    match id::find(hosts, id) {
        Found::One(name) => Ok(name.to_string()),
        Found::None => Err(format!(
            "no Node has FleetLock id {id} (derived from status.nodeInfo.machineID with Zincati's app ID, or given in {})",
            proto::FLEETLOCK_ID
        )),
        Found::Several(names) => Err(format!(
            "several Nodes have FleetLock id {id} ({}): none is taken on a guess; give each its own {}",
            names.join(", "),
            proto::FLEETLOCK_ID
        )),
    }
}

/// Forwards a request to the leader, as it came; answers `no_leader` when there is none to
/// reach (or the request was forwarded already).
async fn forward(
    s: &Served,
    endpoint: Endpoint,
    headers: &HeaderMap,
    host: std::net::IpAddr,
    body: Bytes,
) -> Response {
    let metrics = &s.ctx.services.metrics;
    let no_leader = |value: String| {
        metrics.fleetlock_request(endpoint.as_str(), ErrorKind::NoLeader.as_str());
        tracing::warn!(endpoint = endpoint.as_str(), %value, "FleetLock request not answered");
        reply(Some(ErrorKind::NoLeader), &value)
    };
    if headers.contains_key(FORWARDED) {
        return no_leader(format!(
            "{} does not lead (any longer) and does not forward a forwarded request; ask again",
            s.identity
        ));
    }
    let (holder, advertised) = match leader_of(s).await {
        Ok(known) => known,
        Err(value) => return no_leader(value),
    };
    let Some(a) = advertised.filter(|a| a.holder == holder && holder != s.identity) else {
        return no_leader(format!(
            "the leader `{holder}` has not published its FleetLock address; ask again"
        ));
    };
    let token = match s.proof.token() {
        Ok(t) => t,
        Err(e) => return no_leader(format!("this replica cannot forward to the leader: {e}")),
    };
    let out = send_to_leader(&a.url, endpoint, &s.identity, host, &token, body);
    match tokio::time::timeout(FORWARD_TIMEOUT, out).await {
        Ok(Ok((status, bytes))) => {
            metrics.fleetlock_request(endpoint.as_str(), "forwarded");
            let mut r = (status, bytes).into_response();
            if status != StatusCode::OK {
                r.headers_mut().insert(
                    axum::http::header::CONTENT_TYPE,
                    axum::http::HeaderValue::from_static("application/json"),
                );
            }
            r
        }
        Ok(Err(e)) => {
            // Read again next time: a new leader may have taken over.
            *s.leader.lock().expect("leader") = None;
            no_leader(format!(
                "the leader `{holder}` at {} could not be reached: {e}",
                a.url
            ))
        }
        Err(_) => no_leader(format!(
            "the leader `{holder}` at {} did not answer within {FORWARD_TIMEOUT:?}",
            a.url
        )),
    }
}

/// The leader's identity and the FleetLock address it published, as known for
/// [`LEADER_FRESH_FOR`], else read from the leader Lease (and kept); `Err`: why none is known.
async fn leader_of(s: &Served) -> Result<(String, Option<Advertised>), String> {
    let known = s
        .leader
        .lock()
        .expect("leader")
        .clone()
        .filter(|(at, _, _)| at.elapsed() < LEADER_FRESH_FOR);
    if let Some((_, holder, advertised)) = known {
        return Ok((holder, advertised));
    }
    let lease = match s.leader_lease.get().await {
        Ok(Some(l)) => l,
        Ok(None) => return Err("no leader yet; ask again".into()),
        Err(e) => return Err(format!("the leader Lease could not be read: {e}")),
    };
    let holder = lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.clone())
        .unwrap_or_default();
    let advertised: Option<Advertised> = lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(FLEETLOCK_URL))
        .and_then(|v| serde_json::from_str(v).ok());
    *s.leader.lock().expect("leader") = Some((
        std::time::Instant::now(),
        holder.clone(),
        advertised.clone(),
    ));
    Ok((holder, advertised))
}

/// Sends the request to the leader at `url` as this replica (`identity`), for `host`, with the
/// forward proof `token`; the leader's status and body.
async fn send_to_leader(
    url: &str,
    endpoint: Endpoint,
    identity: &str,
    host: std::net::IpAddr,
    token: &str,
    body: Bytes,
) -> Result<(StatusCode, Bytes), String> {
    let base: http::Uri = url.parse().map_err(|e| format!("{url}: {e}"))?;
    let client = crate::client::external(base, FORWARD_TIMEOUT).map_err(|e| e.to_string())?;
    let req = http::Request::post(endpoint.path())
        .header(protocol::HEADER, "true")
        .header(FORWARDED, identity)
        .header(FORWARDED_FOR, host.to_string())
        .header(http::header::AUTHORIZATION, format!("Bearer {token}"))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(kube::client::Body::from(body.to_vec()))
        .map_err(|e| e.to_string())?;
    let res = client.send(req).await.map_err(|e| e.to_string())?;
    let status = res.status();
    let bytes = axum::body::to_bytes(axum::body::Body::new(res.into_body()), 64 << 10)
        .await
        .map_err(|e| e.to_string())?;
    Ok((status, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_advertised_address_is_the_pods_else_the_bound_one() {
        let any: SocketAddr = "0.0.0.0:8086".parse().unwrap();
        assert_eq!(
            advertised_url(any, Some("10.1.2.3")),
            "http://10.1.2.3:8086"
        );
        assert_eq!(
            advertised_url(any, Some("fd00::5")),
            "http://[fd00::5]:8086"
        );
        assert_eq!(advertised_url(any, None), "http://127.0.0.1:8086");
        assert_eq!(advertised_url(any, Some(" ")), "http://127.0.0.1:8086");
        let lo: SocketAddr = "127.0.0.2:9000".parse().unwrap();
        assert_eq!(advertised_url(lo, None), "http://127.0.0.2:9000");
    }
}
