//! API errors as kube-apiserver sends them: `Status` objects with `reason`, `code` and `details`.
//!
//! Owns the exact wording of every error the simulated API server answers, copied from the
//! recorded kube-apiserver v1.36 exchanges (`tests/golden/`). It must never decide *whether* a
//! request fails, only how the failure looks on the wire.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Map, Value};

use super::kinds::{DecodeError, Kind};
use super::validation::FieldError;

/// One failed request, rendered as a `Status` body (or, for unknown groups, plain text).
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    /// HTTP status code, also the Status `code`.
    pub code: u16,
    /// Status `reason` (absent for some 500s, as the real server does).
    pub reason: Option<&'static str>,
    /// Status `message`.
    pub message: Option<String>,
    /// Status `details`, when the real server sends one.
    pub details: Option<Value>,
    /// `Retry-After` header in seconds.
    pub retry_after: Option<u32>,
    /// Status `metadata` (a fresh continue token for 85).
    pub metadata: Option<Value>,
    /// Answer `404 page not found` as text/plain instead of a Status (unknown API group).
    pub plain_text: bool,
}

fn kind_details(kind: Kind, name: &str) -> Value {
    let mut d = Map::new();
    d.insert("name".into(), json!(name));
    if !kind.group().is_empty() {
        d.insert("group".into(), json!(kind.group()));
    }
    d.insert("kind".into(), json!(kind.plural()));
    Value::Object(d)
}

impl From<DecodeError> for ApiError {
    fn from(e: DecodeError) -> ApiError {
        ApiError::undecodable(e.kind, e.message)
    }
}

impl ApiError {
    fn new(code: u16, reason: Option<&'static str>, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            reason,
            message: Some(message.into()),
            details: None,
            retry_after: None,
            metadata: None,
            plain_text: false,
        }
    }

    fn with_details(mut self, details: Value) -> ApiError {
        self.details = Some(details);
        self
    }

    /// 404 `<resource> "<name>" not found` (golden 23, 28, 45, 59).
    pub fn not_found(kind: Kind, name: &str) -> ApiError {
        ApiError::new(
            404,
            Some("NotFound"),
            format!("{} \"{name}\" not found", kind.qualified()),
        )
        .with_details(kind_details(kind, name))
    }

    /// 404 for an unknown resource inside a served group/version (golden 89).
    pub fn unknown_resource() -> ApiError {
        ApiError::new(
            404,
            Some("NotFound"),
            "the server could not find the requested resource",
        )
        .with_details(json!({}))
    }

    /// Plain-text 404 for an unknown API group (golden 87).
    pub fn page_not_found() -> ApiError {
        ApiError {
            plain_text: true,
            ..ApiError::new(404, None, "404 page not found\n")
        }
    }

    /// 405 MethodNotAllowed (golden 88).
    pub fn method_not_allowed() -> ApiError {
        ApiError::new(
            405,
            Some("MethodNotAllowed"),
            "the server does not allow this method on the requested resource",
        )
        .with_details(json!({}))
    }

    /// 409 AlreadyExists (golden 21).
    pub fn already_exists(kind: Kind, name: &str) -> ApiError {
        ApiError::new(
            409,
            Some("AlreadyExists"),
            format!("{} \"{name}\" already exists", kind.qualified()),
        )
        .with_details(kind_details(kind, name))
    }

    /// 409 Conflict for a stale resourceVersion (golden 19, 20, 63).
    pub fn conflict(kind: Kind, name: &str) -> ApiError {
        ApiError::new(
            409,
            Some("Conflict"),
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; please apply your changes to the latest version and try again",
                kind.qualified()
            ),
        )
        .with_details(kind_details(kind, name))
    }

    /// 409 Conflict for a PUT of a missing object of a kind that allows create on update
    /// (Leases) whose body carries a uid: the uid is a precondition the missing object fails
    /// (golden 190). The message names the etcd key, as kube-apiserver's storage error does.
    pub fn missing_uid_precondition(kind: Kind, ns: &str, name: &str, uid: &str) -> ApiError {
        let key = if ns.is_empty() {
            format!("/registry/{}/{name}", kind.plural())
        } else {
            format!("/registry/{}/{ns}/{name}", kind.plural())
        };
        ApiError::new(
            409,
            Some("Conflict"),
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": StorageError: invalid object, Code: 4, Key: {key}, ResourceVersion: 0, AdditionalErrorMsg: Precondition failed: UID in precondition: {uid}, UID in object meta: ",
                kind.qualified()
            ),
        )
        .with_details(kind_details(kind, name))
    }

    /// 409 Conflict for a `preconditions.uid` mismatch on delete (golden 56).
    pub fn uid_precondition(kind: Kind, name: &str, wanted: &str, actual: &str) -> ApiError {
        ApiError::new(
            409,
            Some("Conflict"),
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the UID in the precondition ({wanted}) does not match the UID in record ({actual}). The object might have been deleted and then recreated",
                kind.kind_name()
            ),
        )
        .with_details(json!({"name": name, "kind": kind.kind_name()}))
    }

    /// 409 Conflict for a `preconditions.resourceVersion` mismatch on delete.
    pub fn rv_precondition(kind: Kind, name: &str, wanted: &str, actual: &str) -> ApiError {
        ApiError::new(
            409,
            Some("Conflict"),
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the ResourceVersion in the precondition ({wanted}) does not match the ResourceVersion in record ({actual}). The object might have been modified",
                kind.kind_name()
            ),
        )
        .with_details(json!({"name": name, "kind": kind.kind_name()}))
    }

    /// 400 for a body that does not decode as `kind`'s type (golden 65).
    pub fn undecodable(kind: Kind, err: impl std::fmt::Display) -> ApiError {
        let k = kind.kind_name();
        let v = kind.version();
        ApiError::bad_request(format!(
            "{k} in version \"{v}\" cannot be handled as a {k}: {err}"
        ))
    }

    /// 422 Invalid with causes `(reason, message, field)` (golden 22, 66).
    pub fn invalid(kind: Kind, name: &str, causes: &[(&'static str, String, String)]) -> ApiError {
        // The message lists each distinct error once (Go's aggregate drops repeats); the
        // causes keep every one.
        let mut summary: Vec<String> = Vec::new();
        for (_, msg, field) in causes {
            let line = format!("{field}: {msg}");
            if !summary.contains(&line) {
                summary.push(line);
            }
        }
        let joined = if summary.len() == 1 {
            summary[0].clone()
        } else {
            format!("[{}]", summary.join(", "))
        };
        let causes: Vec<Value> = causes
            .iter()
            .map(|(reason, msg, field)| json!({"reason": reason, "message": msg, "field": field}))
            .collect();
        let mut details = json!({"name": name, "kind": kind.kind_name(), "causes": causes});
        if !kind.group().is_empty() {
            details["group"] = json!(kind.group());
        }
        // schema.GroupKind's String(): `Kind.group`, or `Kind` for the core group.
        let qualified = if kind.group().is_empty() {
            kind.kind_name().to_string()
        } else {
            format!("{}.{}", kind.kind_name(), kind.group())
        };
        ApiError::new(
            422,
            Some("Invalid"),
            format!("{qualified} \"{name}\" is invalid: {joined}"),
        )
        .with_details(details)
    }

    /// 422 Invalid with the generic message (a failed JSON-patch `test`, golden 18).
    pub fn invalid_generic() -> ApiError {
        ApiError::new(
            422,
            Some("Invalid"),
            "the server rejected our request due to an error in our request",
        )
        .with_details(json!({}))
    }

    /// 422 for `sendInitialEvents` without `resourceVersionMatch=NotOlderThan` (golden 80).
    pub fn list_options_invalid(field: &str, message: &str) -> ApiError {
        ApiError::new(
            422,
            Some("Invalid"),
            format!("ListOptions.meta.k8s.io \"\" is invalid: {field}: {message}"),
        )
        .with_details(json!({
            "group": "meta.k8s.io",
            "kind": "ListOptions",
            "causes": [{"reason": "FieldValueForbidden", "message": message, "field": field}],
        }))
    }

    /// 400 BadRequest without details (golden 34, 65).
    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, Some("BadRequest"), message)
    }

    /// 415 UnsupportedMediaType (golden 24, 25).
    pub fn unsupported_media_type() -> ApiError {
        ApiError::new(
            415,
            Some("UnsupportedMediaType"),
            "415: Unsupported Media Type",
        )
        .with_details(json!({}))
    }

    /// 415 UnsupportedMediaType for a strategic merge patch of a custom resource (no Go type
    /// declares its lists' merge keys): the patch types its handler takes, without details.
    pub fn unsupported_patch_of_custom_resource() -> ApiError {
        ApiError::new(
            415,
            Some("UnsupportedMediaType"),
            "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
        )
    }

    /// 415 UnsupportedMediaType for a create or update body in a format the server does not
    /// decode, without details (golden 116).
    pub fn unsupported_body_media_type() -> ApiError {
        ApiError::new(
            415,
            Some("UnsupportedMediaType"),
            "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf",
        )
    }

    /// 410 Expired for a list at a resourceVersion no longer kept (golden 84).
    pub fn list_expired() -> ApiError {
        ApiError::new(
            410,
            Some("Expired"),
            "The resourceVersion for the provided list is too old.",
        )
    }

    /// 410 Expired for a continue token too old, carrying a new inconsistent token (golden 85).
    pub fn continue_expired(new_token: String) -> ApiError {
        ApiError {
            metadata: Some(json!({"continue": new_token})),
            ..ApiError::new(
                410,
                Some("Expired"),
                "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
            )
        }
    }

    /// 429 for an eviction refused by a budget (golden 43).
    pub fn budget_exhausted(pdb: &str, desired: i64, current: i64) -> ApiError {
        ApiError::new(
            429,
            Some("TooManyRequests"),
            "Cannot evict pod as it would violate the pod's disruption budget.",
        )
        .with_details(json!({"causes": [{
            "reason": "DisruptionBudget",
            "message": format!("The disruption budget {pdb} needs {desired} healthy pods and has {current} currently"),
        }]}))
    }

    /// 429 with Retry-After 10 for a budget not yet observed by the controller (golden 52).
    pub fn budget_not_observed(pdb: &str) -> ApiError {
        ApiError {
            retry_after: Some(10),
            ..ApiError::new(
                429,
                Some("TooManyRequests"),
                "Cannot evict pod as it would violate the pod's disruption budget.",
            )
            .with_details(json!({
                "causes": [{
                    "reason": "DisruptionBudget",
                    "message": format!("The disruption budget {pdb} is still being processed by the server."),
                }],
                "retryAfterSeconds": 10,
            }))
        }
    }

    /// 500 for a pod under more than one budget: no reason, no details (golden 48).
    pub fn multiple_budgets() -> ApiError {
        ApiError::new(
            500,
            None,
            "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.",
        )
    }

    /// 500 InternalError (also used by fault injection).
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(500, Some("InternalError"), message)
            .with_details(json!({"causes": [{"message": "injected fault"}]}))
    }

    /// 504 Timeout as kube-apiserver's request timeout answers a request it gave up on (the
    /// work it had done is not undone).
    pub fn timeout() -> ApiError {
        ApiError::new(
            504,
            Some("Timeout"),
            "Timeout: request did not complete within requested timeout - context deadline exceeded",
        )
        .with_details(json!({}))
    }

    /// 429 TooManyRequests as the API priority-and-fairness filter answers (fault injection).
    pub fn throttled() -> ApiError {
        ApiError {
            retry_after: Some(1),
            ..ApiError::new(
                429,
                Some("TooManyRequests"),
                "Too many requests, please try again later.",
            )
            .with_details(json!({"retryAfterSeconds": 1}))
        }
    }

    /// The `Status` object of this error.
    pub fn status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": self.metadata.clone().unwrap_or_else(|| json!({})),
            "status": "Failure",
            "code": self.code,
        });
        if let Some(m) = &self.message {
            s["message"] = json!(m);
        }
        if let Some(r) = self.reason {
            s["reason"] = json!(r);
        }
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}: {}",
            self.code,
            self.reason.unwrap_or(""),
            self.message.as_deref().unwrap_or("")
        )
    }
}

impl std::error::Error for ApiError {}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut resp = if self.plain_text {
            let mut r = (code, self.message.clone().unwrap_or_default()).into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; charset=utf-8"),
            );
            r
        } else {
            let body = serde_json::to_vec(&self.status()).unwrap_or_default();
            let mut r = (code, body).into_response();
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            r
        };
        if let Some(s) = self.retry_after {
            resp.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(s));
        }
        resp
    }
}

/// The 422 Invalid answer for `errors` about the object `name` of `kind` (nothing when empty).
pub fn check(kind: Kind, name: &str, errors: &[FieldError]) -> Result<(), ApiError> {
    if errors.is_empty() {
        return Ok(());
    }
    let causes: Vec<(&'static str, String, String)> = errors
        .iter()
        .map(|e| (e.typ.reason(), e.body(), e.field.clone()))
        .collect();
    Err(ApiError::invalid(kind, name, &causes))
}
