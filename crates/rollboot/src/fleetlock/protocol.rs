//! The wire side of FleetLock: the two endpoints, the `fleet-lock-protocol: true` header, the
//! body `{"client_params": {"id", "group"}}`, and the error body `{"kind", "value"}` of every
//! answer but 200.
//!
//! Owns parsing a request into a [`ClientRequest`] or the 400 that says what is wrong with it (an id
//! or group over [`MAX_ID_CHARS`], [`MAX_GROUP_CHARS`] is one, refused before anything logs
//! it; the sentence is cut for the log), and the bounded set of error kinds ([`ErrorKind`]). It
//! must never decide anything about a node.

use serde::Deserialize;

/// The header every FleetLock request carries, with the value `true`: a request redirected
/// by accident does not carry it.
pub const HEADER: &str = "fleet-lock-protocol";

/// The two operations of the protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Endpoint {
    /// `POST /v1/pre-reboot`: take (or keep) a reboot slot.
    PreReboot,
    /// `POST /v1/steady-state`: give the slot back, if held.
    SteadyState,
}

impl Endpoint {
    /// The endpoint's name, as in its path and in the metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::PreReboot => "pre-reboot",
            Endpoint::SteadyState => "steady-state",
        }
    }

    /// Its path on the server.
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::PreReboot => "/v1/pre-reboot",
            Endpoint::SteadyState => "/v1/steady-state",
        }
    }
}

/// A well-formed request: the client's id and group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientRequest {
    /// The client's id (for Zincati, the host's app-specific machine ID in lower-case hex).
    pub id: String,
    /// The client's reboot group.
    pub group: String,
}

/// Every kind an answer other than 200 carries: a small, bounded set, as the protocol asks
/// (Zincati counts them in its metrics).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The `fleet-lock-protocol: true` header is missing.
    MissingHeader,
    /// The body is not the protocol's JSON.
    BadBody,
    /// The group is not `^[a-zA-Z0-9.-]+$`.
    BadGroup,
    /// No Node has this host's id.
    UnknownHost,
    /// The request does not come from one of the named host's addresses.
    ClientNotHost,
    /// A request forwarded by a replica could not be proven to come from one.
    UntrustedForward,
    /// The group is not the Node's (or not configured).
    GroupMismatch,
    /// The Node is excluded from reboots, or outside `nodes.selector`.
    Excluded,
    /// Waiting for a maintenance window.
    WaitingWindow,
    /// Waiting for a free slot (`maxNodes`, a group's limit, or passed over for a budget).
    WaitingSlot,
    /// Something blocks new reboots (named in the value).
    Blocked,
    /// The node is being cordoned or drained.
    Draining,
    /// A hook holds the node.
    Hook,
    /// This node's cycle reboots it through rollboot's agent, not the host's client.
    Rebooting,
    /// The node is back and being verified; `steady-state` is answered 200 once it is done.
    Verifying,
    /// The node's cycle failed; `rollboot retry` clears it.
    Failed,
    /// This replica could not reach the leader to forward the request.
    NoLeader,
    /// The cluster could not be written or read.
    Internal,
}

impl ErrorKind {
    /// The `kind` string.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::MissingHeader => "missing_header",
            ErrorKind::BadBody => "bad_body",
            ErrorKind::BadGroup => "bad_group",
            ErrorKind::UnknownHost => "unknown_host",
            ErrorKind::ClientNotHost => "client_not_host",
            ErrorKind::UntrustedForward => "untrusted_forward",
            ErrorKind::GroupMismatch => "group_mismatch",
            ErrorKind::Excluded => "excluded",
            ErrorKind::WaitingWindow => "waiting_window",
            ErrorKind::WaitingSlot => "waiting_slot",
            ErrorKind::Blocked => "blocked",
            ErrorKind::Draining => "draining",
            ErrorKind::Hook => "hook",
            ErrorKind::Rebooting => "rebooting",
            ErrorKind::Verifying => "verifying",
            ErrorKind::Failed => "failed",
            ErrorKind::NoLeader => "no_leader",
            ErrorKind::Internal => "internal",
        }
    }

    /// The HTTP status it is answered with: 400 for a bad request, 404 for an unknown host,
    /// 409 for a group that is not the node's, 403 for an excluded node or a caller that is
    /// not the host (or a forward not proven to come from a replica), 503 when no leader
    /// or cluster answers, 423 (Locked) while the host waits.
    pub fn status(self) -> u16 {
        match self {
            ErrorKind::MissingHeader | ErrorKind::BadBody | ErrorKind::BadGroup => 400,
            ErrorKind::UnknownHost => 404,
            ErrorKind::GroupMismatch => 409,
            ErrorKind::Excluded | ErrorKind::ClientNotHost | ErrorKind::UntrustedForward => 403,
            ErrorKind::NoLeader | ErrorKind::Internal => 503,
            _ => 423,
        }
    }
}

/// The body of an answer other than 200.
pub fn error_body(kind: ErrorKind, value: &str) -> String {
    serde_json::json!({ "kind": kind.as_str(), "value": value }).to_string()
}

/// Whether `group` is a FleetLock group: `^[a-zA-Z0-9.-]+$`.
pub fn group_ok(group: &str) -> bool {
    !group.is_empty()
        && group
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'-')
}

#[derive(Deserialize)]
struct RequestBody {
    client_params: ClientParams,
}

#[derive(Deserialize)]
struct ClientParams {
    id: String,
    group: String,
}

/// The longest id taken, in characters: Zincati's is 32 hex digits, and an id goes into log
/// lines and Events.
pub const MAX_ID_CHARS: usize = 64;

/// The longest group taken, in characters: a group goes into log lines, Events and the Node's
/// FleetLock record, and one longer than a label value (63) cannot name one.
pub const MAX_GROUP_CHARS: usize = 64;

/// Parses a request from its `fleet-lock-protocol` header's value (if any) and its body: the
/// request, or the kind and the sentence of its 400. Nothing else in the body is looked at.
/// The sentence is cut for the log ([`crate::serve::for_log`]): it may quote the client.
pub fn parse(header: Option<&str>, body: &[u8]) -> Result<ClientRequest, (ErrorKind, String)> {
    read(header, body).map_err(|(kind, value)| (kind, crate::serve::for_log(&value).into_owned()))
}

fn read(header: Option<&str>, body: &[u8]) -> Result<ClientRequest, (ErrorKind, String)> {
    if header.map(str::trim) != Some("true") {
        return Err((
            ErrorKind::MissingHeader,
            format!("the `{HEADER}: true` header is missing"),
        ));
    }
    let b: RequestBody = serde_json::from_slice(body).map_err(|e| {
        (
            ErrorKind::BadBody,
            format!(
                "the body is not FleetLock JSON {{\"client_params\": {{\"id\", \"group\"}}}}: {e}"
            ),
        )
    })?;
    let ClientParams { id, group } = b.client_params;
    if id.is_empty() {
        return Err((ErrorKind::BadBody, "client_params.id is empty".into()));
    }
    let chars = id.chars().count();
    if chars > MAX_ID_CHARS {
        return Err((
            ErrorKind::BadBody,
            format!("client_params.id is {chars} characters, over {MAX_ID_CHARS}"),
        ));
    }
    let chars = group.chars().count();
    if chars > MAX_GROUP_CHARS {
        return Err((
            ErrorKind::BadGroup,
            format!("group is {chars} characters, over {MAX_GROUP_CHARS}"),
        ));
    }
    if !group_ok(&group) {
        return Err((
            ErrorKind::BadGroup,
            format!("group `{group}` is not letters, digits, `.` and `-` (^[a-zA-Z0-9.-]+$)"),
        ));
    }
    Ok(ClientRequest { id, group })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_needs_the_header_the_json_and_a_good_group() {
        let body = br#"{"client_params": {"id": "abc", "group": "workers.a-1"}}"#;
        assert_eq!(
            parse(Some("true"), body),
            Ok(ClientRequest {
                id: "abc".into(),
                group: "workers.a-1".into()
            })
        );
        assert_eq!(parse(None, body).unwrap_err().0, ErrorKind::MissingHeader);
        assert_eq!(
            parse(Some("false"), body).unwrap_err().0,
            ErrorKind::MissingHeader
        );
        assert_eq!(
            parse(Some("true"), b"{}").unwrap_err().0,
            ErrorKind::BadBody
        );
        assert_eq!(
            parse(Some("true"), b"not json").unwrap_err().0,
            ErrorKind::BadBody
        );
        let empty_id = br#"{"client_params": {"id": "", "group": "default"}}"#;
        assert_eq!(
            parse(Some("true"), empty_id).unwrap_err().0,
            ErrorKind::BadBody
        );
        for bad in ["", "a b", "a_b", "zone/1", "ü"] {
            let body = format!(r#"{{"client_params": {{"id": "x", "group": "{bad}"}}}}"#);
            let (kind, value) = parse(Some("true"), body.as_bytes()).unwrap_err();
            assert_eq!(kind, ErrorKind::BadGroup, "{bad}");
            assert_eq!(kind.status(), 400);
            assert!(value.contains(bad), "{value}");
        }
    }

    #[test]
    fn an_id_over_64_characters_is_refused_and_one_of_64_taken() {
        let with = |id: &str, group: &str| {
            let body = format!(r#"{{"client_params": {{"id": "{id}", "group": "{group}"}}}}"#);
            parse(Some("true"), body.as_bytes())
        };
        let id = "a".repeat(64);
        assert_eq!(with(&id, "default").unwrap().id, id);
        let (kind, value) = with(&"a".repeat(65), "default").unwrap_err();
        assert_eq!((kind, kind.status()), (ErrorKind::BadBody, 400));
        assert!(value.contains("65 characters"), "{value}");
        // Characters, not bytes.
        assert!(with(&"é".repeat(64), "default").is_ok());
        let group = "g".repeat(64);
        assert_eq!(with("abc", &group).unwrap().group, group);
        let (kind, value) = with("abc", &"g".repeat(65)).unwrap_err();
        assert_eq!((kind, kind.status()), (ErrorKind::BadGroup, 400));
        assert!(!value.contains("ggg"), "{value}");
    }

    #[test]
    fn a_refusal_quoting_the_client_is_cut_for_the_log() {
        // serde quotes a string of the wrong type whole.
        let huge = "A".repeat(2 << 20);
        let body = format!(r#"{{"client_params": "{huge}"}}"#);
        let (kind, value) = parse(Some("true"), body.as_bytes()).unwrap_err();
        assert_eq!(kind, ErrorKind::BadBody);
        assert!(value.len() < 1000, "{} bytes", value.len());
        assert!(value.contains("AAAA"), "{value}");
    }

    #[test]
    fn an_error_body_has_kind_and_value() {
        let v: serde_json::Value =
            serde_json::from_str(&error_body(ErrorKind::WaitingSlot, "2 of 2 slots taken"))
                .unwrap();
        assert_eq!(v["kind"], "waiting_slot");
        assert_eq!(v["value"], "2 of 2 slots taken");
    }
}
