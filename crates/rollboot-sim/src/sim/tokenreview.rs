//! `POST /apis/authentication.k8s.io/v1/tokenreviews`: who a token is, as kube-apiserver's
//! authenticator says it (a controller replica checks another replica's forward with it).
//!
//! Owns the answer: a token of an identity of [`super::Cluster::enforce`] is that identity;
//! any other token but `anonymous` is the unchecked user it names (as every other request of
//! it is served); `anonymous` and an empty token are not authenticated. The simulator's tokens
//! carry no audience: the audiences asked are the audiences answered. Creating a review is
//! authorized like any create when RBAC is enforced. It must never store anything.

use serde_json::{json, Value};

use super::errors::ApiError;
use super::identity::Identity;

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
    let identity =
        who(token).or_else(|| (token != "anonymous").then(|| Identity::unchecked(token)));
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
