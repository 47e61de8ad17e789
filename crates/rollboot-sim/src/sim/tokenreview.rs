//! `POST /apis/authentication.k8s.io/v1/tokenreviews`: who a token is, as kube-apiserver's
//! authenticator says it (a controller replica checks another replica's forward with it).
//!
//! Owns the answer: a token of an identity of [`super::Cluster::enforce`] is that identity;
//! any other token but `anonymous` is the unchecked user it names (as every other request of
//! it is served); `anonymous` and an empty token are not authenticated. A token's audience is
//! the API server's (`https://kubernetes.default.svc`) unless it is written `USER@AUDIENCE`
//! (a projected token for that audience); a review asking for audiences the token does not
//! have is refused with the real server's error, as kube-apiserver v1.36 refuses a
//! controller's API token offered as a FleetLock forward proof (real control plane, check 22).
//! Creating a review is authorized like any create when RBAC is enforced. It must never store
//! anything.

use serde_json::{json, Value};

use super::errors::ApiError;
use super::identity::Identity;

/// The audience of a token that names none: the API server's own.
pub const API_AUDIENCE: &str = "https://kubernetes.default.svc";

/// The review's path.
pub const PATH: &str = "/apis/authentication.k8s.io/v1/tokenreviews";

/// The answered review (201) for the request body `body`, `who` being the token's identity
/// when an enforced identity has it.
pub fn review(body: &[u8], who: impl Fn(&str) -> Option<Identity>) -> Result<Value, ApiError> {
    let asked: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("decoding TokenReview: {e}")))?;
    let token = asked["spec"]["token"].as_str().unwrap_or_default();
    if token.is_empty() {
        return Err(ApiError::bad_request(
            "TokenReview.authentication.k8s.io \"\" is invalid: spec.token: Required value",
        ));
    }
    let audiences = asked["spec"]["audiences"].clone();
    let (name, has) = match token.split_once('@') {
        Some((user, aud)) => (user, aud),
        None => (token, API_AUDIENCE),
    };
    if let Some(wanted) = audiences.as_array().filter(|a| !a.is_empty()) {
        if !wanted.iter().any(|a| a.as_str() == Some(has)) {
            let error = format!(
                "[invalid bearer token, token audiences [\"{has}\"] is invalid for the target audiences {}]",
                serde_json::to_string(&wanted).unwrap_or_default()
            );
            return Ok(json!({
                "kind": "TokenReview",
                "apiVersion": "authentication.k8s.io/v1",
                "metadata": {},
                "spec": {"token": token, "audiences": audiences},
                "status": {"user": {}, "error": error},
            }));
        }
    }
    let identity = who(name).or_else(|| (name != "anonymous").then(|| Identity::unchecked(name)));
    let status = match identity {
        Some(i) => {
            let mut user = json!({"username": i.user, "groups": i.groups});
            if let Some(node) = i.node {
                user["extra"] = json!({"authentication.kubernetes.io/node-name": [node]});
            }
            let mut s = json!({"authenticated": true, "user": user});
            if audiences.is_array() {
                s["audiences"] = audiences.clone();
            }
            s
        }
        None => json!({"user": {}, "error": "[invalid bearer token, token lookup failed]"}),
    };
    let mut spec = json!({"token": token});
    if audiences.is_array() {
        spec["audiences"] = audiences;
    }
    Ok(json!({
        "kind": "TokenReview",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": {},
        "spec": spec,
        "status": status,
    }))
}
