//! The HTTP face of the simulated kube-apiserver: routing, discovery, list, watch and the
//! mapping of verbs onto `api.rs`.
//!
//! One catch-all handler parses `/api/v1/...` and `/apis/{group}/{version}/...` (namespaced
//! and cluster-scoped, with subresources), so unknown paths answer 404 and wrong verbs 405 with
//! a Status, as kube-apiserver does. Lists are streamed from a snapshot of the stored bytes
//! taken under the lock (no reserialization); watches stream `{"type","object"}` lines. It must
//! never hold the store lock across an await.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use bytes::{BufMut, Bytes, BytesMut};
use futures::channel::mpsc;
use futures::SinkExt;
use serde_json::{json, Value};
use tokio::sync::broadcast::error::RecvError;

use super::api::{self, DeleteOptions, Deleted, Target};
use super::errors::ApiError;
use super::events;
use super::faults::{Fault, Faults};
use super::index::{key_of, Index};
use super::invariants::Invariants;
use super::kinds::Kind;
use super::patch::PatchType;
use super::stats::{RequestKey, Stats};
use super::store::{EventType, Narrow, Store, StoreEvent};
use rollboot::selector::Selector;

/// Everything the server and the world share.
pub struct Shared {
    /// The objects.
    pub store: Store,
    /// Request accounting.
    pub stats: Stats,
    /// Fault injection.
    pub faults: Faults,
    /// The invariant watch.
    pub invariants: Invariants,
    /// Interval of periodic watch bookmarks.
    pub bookmark_interval: Duration,
    /// Opt-in RBAC and admission enforcement (unset: every request is allowed).
    pub enforcement: std::sync::OnceLock<Arc<super::rbac::Enforcement>>,
    /// The admission policies and bindings of the store, compiled.
    pub policies: super::admission::Stored,
    /// The CustomResourceDefinitions installed (their kinds are served only then).
    pub crds: super::crd::Crds,
}

/// The router serving the API.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new().fallback(handle).with_state(shared)
}

fn json_response(code: StatusCode, body: impl Into<Body>) -> Response {
    let mut r = (code, body.into()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    r
}

fn text(body: &'static str) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn discovery(path: &str) -> Option<&'static str> {
    Some(match path {
        "/api" => {
            r#"{"kind":"APIVersions","versions":["v1"],"serverAddressByClientCIDRs":[{"clientCIDR":"0.0.0.0/0","serverAddress":"127.0.0.1:6443"}]}"#
        }
        "/api/v1" => include_str!("discovery/api-v1.json"),
        "/apis" => include_str!("discovery/apis.json"),
        "/apis/apps/v1" => include_str!("discovery/apps-v1.json"),
        "/apis/policy/v1" => include_str!("discovery/policy-v1.json"),
        "/apis/coordination.k8s.io/v1" => include_str!("discovery/coordination-v1.json"),
        "/apis/events.k8s.io/v1" => include_str!("discovery/events-v1.json"),
        "/apis/rbac.authorization.k8s.io/v1" => include_str!("discovery/rbac-v1.json"),
        "/apis/scheduling.k8s.io/v1" => include_str!("discovery/scheduling-v1.json"),
        "/apis/storage.k8s.io/v1" => include_str!("discovery/storage-v1.json"),
        "/apis/admissionregistration.k8s.io/v1" => {
            include_str!("discovery/admissionregistration-v1.json")
        }
        "/version" => include_str!("discovery/version.json"),
        _ => return None,
    })
}

/// The discovery documents an installed CRD changes or adds.
fn crd_discovery(sh: &Shared, path: &str) -> Option<String> {
    if !sh.crds.node_maintenance() {
        return None;
    }
    let version = format!("/apis/{}", super::crd::API_VERSION);
    match path {
        "/apis" => Some(super::crd::with_group(include_str!("discovery/apis.json"))),
        p if p == version => Some(super::crd::resource_list()),
        p if p.strip_prefix("/apis/") == Some(super::crd::GROUP) => {
            Some(super::crd::group_document())
        }
        _ => None,
    }
}

/// A parsed resource path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// The resource.
    pub kind: Kind,
    /// Namespace in the path, if any.
    pub namespace: Option<String>,
    /// Object name, if any.
    pub name: Option<String>,
    /// Subresource, if any.
    pub sub: Option<String>,
}

/// Parses a resource path; errors are the real server's 404s (golden 87, 89).
pub fn parse_path(path: &str) -> Result<Route, ApiError> {
    let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match segs.as_slice() {
        ["api", "v1", rest @ ..] => ("", rest),
        ["apis", g, v, rest @ ..] if !g.is_empty() && Kind::serves(g, v) => (*g, rest),
        _ => return Err(ApiError::page_not_found()),
    };
    let find = |plural: &str| Kind::from_path(group, plural).ok_or_else(ApiError::unknown_resource);
    let s = |x: &&str| Some(x.to_string());
    let route = match rest {
        [res] => Route {
            kind: find(res)?,
            namespace: None,
            name: None,
            sub: None,
        },
        ["namespaces", ns, res] => {
            let kind = find(res)?;
            if !kind.namespaced() {
                return Err(ApiError::unknown_resource());
            }
            Route {
                kind,
                namespace: s(ns),
                name: None,
                sub: None,
            }
        }
        ["namespaces", ns, res, name, sub @ ..] if sub.len() <= 1 => {
            let kind = find(res)?;
            if !kind.namespaced() {
                return Err(ApiError::unknown_resource());
            }
            Route {
                kind,
                namespace: s(ns),
                name: s(name),
                sub: sub.first().map(|x| x.to_string()),
            }
        }
        [res, name, sub @ ..] if sub.len() <= 1 => {
            let kind = find(res)?;
            if kind.namespaced() {
                return Err(ApiError::unknown_resource());
            }
            Route {
                kind,
                namespace: None,
                name: s(name),
                sub: sub.first().map(|x| x.to_string()),
            }
        }
        _ => return Err(ApiError::unknown_resource()),
    };
    if let Some(sub) = &route.sub {
        if !route.kind.subresources().contains(&sub.as_str()) {
            return Err(ApiError::unknown_resource());
        }
    }
    Ok(route)
}

async fn handle(State(sh): State<Arc<Shared>>, req: Request) -> Response {
    let identity = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.strip_prefix("Bearer "))
        .unwrap_or("anonymous")
        .to_string();
    let path = req.uri().path().to_string();
    let crd_path = path
        .strip_prefix("/apis/")
        .and_then(|p| p.split('/').next())
        == Some(super::crd::GROUP);
    if crd_path && !sh.crds.node_maintenance() {
        // No such group until its CRD is installed (golden 87).
        return ApiError::page_not_found().into_response();
    }
    if req.method() == Method::GET {
        if let Some(doc) = crd_discovery(&sh, &path) {
            return json_response(StatusCode::OK, doc);
        }
        if let Some(doc) = discovery(&path) {
            return json_response(StatusCode::OK, doc);
        }
        match path.as_str() {
            "/healthz" | "/livez" | "/readyz" => return text("ok"),
            _ => {}
        }
    }
    if path.starts_with("/openapi/") {
        return match super::openapi::document(&path, sh.crds.node_maintenance()) {
            Some(doc) if req.method() == Method::GET => json_response(StatusCode::OK, doc),
            _ => ApiError::unknown_resource().into_response(),
        };
    }
    if path == super::tokenreview::PATH && req.method() == Method::POST {
        return token_review(&sh, &identity, req).await;
    }
    let route = match parse_path(&path) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let query: HashMap<String, String> = Query::try_from_uri(req.uri())
        .map(|Query(q)| q)
        .unwrap_or_default();
    let watch = matches!(query.get("watch").map(String::as_str), Some("1" | "true"));
    let verb = match (req.method().clone(), &route.name, route.sub.as_deref()) {
        (Method::GET, None, _) if watch => "watch",
        (Method::GET, None, _) => "list",
        (Method::POST, None, _) => "create",
        (Method::POST, Some(_), Some("eviction")) => "create",
        (Method::GET, Some(_), s) if s != Some("eviction") => "get",
        (Method::PUT, Some(_), s) if s != Some("eviction") => "update",
        (Method::PATCH, Some(_), s) if s != Some("eviction") => "patch",
        (Method::DELETE, Some(_), None) => "delete",
        _ => return ApiError::method_not_allowed().into_response(),
    };
    let who = sh
        .enforcement
        .get()
        .and_then(|e| e.identities.get(&identity).map(|w| (e.clone(), w.clone())));
    let key = RequestKey {
        identity,
        verb: verb.into(),
        group: route.kind.group().into(),
        resource: route.kind.plural().into(),
        subresource: route.sub.clone().unwrap_or_default(),
        namespace: route.namespace.clone().unwrap_or_default(),
    };
    sh.stats.request(key.clone());
    let user_agent = req
        .headers()
        .get(header::USER_AGENT)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    sh.stats.user_agent(&key.identity, user_agent);
    let r = serve(&sh, &key, who, verb, route, query, req).await;
    if r.extensions().get::<Answered>().is_none() {
        sh.stats.answer(&key, r.status().as_u16());
    }
    r
}

/// A TokenReview (see [`super::tokenreview`]), authorized as a cluster-scoped create.
async fn token_review(sh: &Arc<Shared>, identity: &str, req: Request) -> Response {
    let key = RequestKey {
        identity: identity.to_string(),
        verb: "create".into(),
        group: "authentication.k8s.io".into(),
        resource: "tokenreviews".into(),
        subresource: String::new(),
        namespace: String::new(),
    };
    sh.stats.request(key.clone());
    let enforcement = sh.enforcement.get().cloned();
    if let Some(e) = &enforcement {
        if let (Some(w), Some(rbac)) = (e.identities.get(identity), &e.rbac) {
            let attrs = super::rbac::Attributes {
                verb: "create".into(),
                group: "authentication.k8s.io".into(),
                resource: "tokenreviews".into(),
                ..Default::default()
            };
            if let Err(err) = rbac.authorize(w, &attrs) {
                sh.stats.answer(&key, err.code);
                return err.into_response();
            }
        }
    }
    let body = match axum::body::to_bytes(req.into_body(), 1 << 20).await {
        Ok(b) => b,
        Err(e) => return ApiError::bad_request(format!("reading body: {e}")).into_response(),
    };
    let who = |t: &str| enforcement.as_ref()?.identities.get(t).cloned();
    match super::tokenreview::review(&body, who) {
        Ok(v) => {
            sh.stats.answer(&key, 201);
            json_response(StatusCode::CREATED, v.to_string())
        }
        Err(e) => {
            sh.stats.answer(&key, e.code);
            e.into_response()
        }
    }
}

/// Marks a response already counted in [`super::stats::Stats::answer`].
#[derive(Clone, Copy)]
struct Answered;

/// Serves one authenticated, routed and counted request: authorization, injected faults and
/// holds, admission, then the operation itself.
#[allow(clippy::too_many_arguments)]
async fn serve(
    sh: &Arc<Shared>,
    key: &RequestKey,
    who: Option<(Arc<super::rbac::Enforcement>, super::identity::Identity)>,
    verb: &'static str,
    route: Route,
    query: HashMap<String, String>,
    req: Request,
) -> Response {
    if let Some((e, w)) = &who {
        if let Some(rbac) = &e.rbac {
            let name = match verb {
                "list" | "watch" => super::rbac::selector_name(
                    query.get("fieldSelector").map_or("", String::as_str),
                ),
                _ => route.name.clone().unwrap_or_default(),
            };
            let attrs = super::rbac::Attributes {
                verb: verb.into(),
                group: route.kind.group().into(),
                resource: route.kind.plural().into(),
                subresource: route.sub.clone().unwrap_or_default(),
                namespace: route.namespace.clone().unwrap_or_default(),
                name,
            };
            if let Err(err) = rbac.authorize(w, &attrs) {
                return err.into_response();
            }
        }
    }
    if sh
        .faults
        .take_failure(&key.identity, verb, route.kind.plural())
    {
        sh.stats.fault();
        return ApiError::internal("injected fault: internal error").into_response();
    }
    match sh.faults.draw(&key.identity) {
        Fault::None => {}
        Fault::Error => {
            sh.stats.fault();
            return ApiError::internal("injected fault: internal error").into_response();
        }
        Fault::Throttle => {
            sh.stats.fault();
            return ApiError::throttled().into_response();
        }
        Fault::Delay(d) => {
            sh.stats.fault();
            sh.invariants.api_delayed(d);
            tokio::time::sleep(d).await;
        }
    }
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("")
        .to_string();
    let accept = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = match axum::body::to_bytes(req.into_body(), 64 << 20).await {
        Ok(b) => b,
        Err(e) => return ApiError::bad_request(format!("reading body: {e}")).into_response(),
    };
    if let Some(d) = sh.faults.held(&key.identity, verb, route.kind.plural()) {
        // Served by a task of its own: a client that gives up meanwhile does not cancel it.
        sh.stats.fault();
        let (sh, key) = (sh.clone(), key.clone());
        let late = tokio::spawn(async move {
            tokio::time::sleep(d).await;
            let mut r = operate(
                &sh,
                who,
                &key.identity,
                verb,
                route,
                query,
                content_type,
                accept,
                body,
            )
            .await;
            // Counted here: the client may be gone by now, and the handler with it.
            sh.stats.answer(&key, r.status().as_u16());
            r.extensions_mut().insert(Answered);
            r
        });
        return late
            .await
            .unwrap_or_else(|e| ApiError::internal(format!("held request: {e}")).into_response());
    }
    operate(
        sh,
        who,
        &key.identity,
        verb,
        route,
        query,
        content_type,
        accept,
        body,
    )
    .await
}

/// Admission and the operation, once the request is read.
#[allow(clippy::too_many_arguments)]
async fn operate(
    sh: &Arc<Shared>,
    who: Option<(Arc<super::rbac::Enforcement>, super::identity::Identity)>,
    token: &str,
    verb: &'static str,
    route: Route,
    query: HashMap<String, String>,
    content_type: String,
    accept: String,
    body: Bytes,
) -> Response {
    let mut query = query;
    if verb == "watch" && super::table::wanted(&accept, route.kind) {
        // Watch events then carry one-row Tables, as kube-apiserver sends them to kubectl -w.
        query.insert(TABLE_WATCH.into(), String::new());
    }
    let (r, warnings) = dispatch_admitted(
        sh,
        who.as_ref(),
        token,
        verb,
        &route,
        &query,
        &content_type,
        &body,
    );
    let mut r = match r {
        Ok(r) => r,
        Err(e) => e.into_response(),
    };
    for w in super::admission::warning_headers(&warnings) {
        if let Ok(v) = HeaderValue::from_bytes(w.as_bytes()) {
            r.headers_mut().append(header::WARNING, v);
        }
    }
    if r.status().is_client_error() || r.status().is_server_error() {
        return r;
    }
    if matches!(verb, "list" | "get") && super::table::wanted(&accept, route.kind) {
        let bytes = match axum::body::to_bytes(r.into_body(), usize::MAX).await {
            Ok(b) => b,
            Err(e) => return ApiError::internal(format!("printing: {e}")).into_response(),
        };
        let include = query.get("includeObject").map(String::as_str);
        return match super::table::to_table(route.kind, &bytes, include) {
            Some(t) => json_response(StatusCode::OK, t.to_string()),
            None => json_response(StatusCode::OK, bytes),
        };
    }
    r
}

/// [`dispatch`] with the request's validating admission: the result, and the warnings the
/// policies added.
#[allow(clippy::too_many_arguments)]
fn dispatch_admitted(
    sh: &Arc<Shared>,
    who: Option<&(Arc<super::rbac::Enforcement>, super::identity::Identity)>,
    token: &str,
    verb: &str,
    route: &Route,
    query: &HashMap<String, String>,
    content_type: &str,
    body: &Bytes,
) -> (Result<Response, ApiError>, Vec<String>) {
    let admitter = Admitter {
        stored: &sh.policies,
        enforced: who.and_then(|(e, _)| e.admission.as_ref()),
        checked: who.map(|(_, w)| w),
        token,
        unchecked: Default::default(),
        kind: route.kind,
        subresource: route.sub.as_deref().unwrap_or(""),
        namespace: route.namespace.as_deref().unwrap_or(""),
        warnings: Default::default(),
    };
    let r = dispatch(sh, verb, route, query, content_type, body, &admitter);
    (r, admitter.warnings.into_inner())
}

/// The validating admission of one request (`api::Admit`): the store's policies, for every
/// caller, and those of [`Cluster::enforce`](super::Cluster::enforce) for its identities; the
/// warnings they add, for the response's headers. Writes of policies and bindings themselves
/// are not admitted (kube-apiserver exempts them, so that a policy cannot lock itself in).
struct Admitter<'a> {
    stored: &'a super::admission::Stored,
    enforced: Option<&'a super::admission::Admission>,
    /// The caller, when its token has an identity of `Cluster::enforce`.
    checked: Option<&'a super::identity::Identity>,
    /// The caller's token, else.
    token: &'a str,
    /// Its identity, made when a policy first asks (most requests never do).
    unchecked: std::cell::OnceCell<super::identity::Identity>,
    kind: Kind,
    subresource: &'a str,
    namespace: &'a str,
    warnings: std::cell::RefCell<Vec<String>>,
}

impl Admitter<'_> {
    fn user(&self) -> &super::identity::Identity {
        match self.checked {
            Some(w) => w,
            None => self
                .unchecked
                .get_or_init(|| super::identity::Identity::unchecked(self.token)),
        }
    }
}

impl api::Admit for Admitter<'_> {
    fn admit(
        &self,
        inner: &super::store::Inner,
        operation: super::admission::Operation,
        name: &str,
        object: &Value,
        old_object: &Value,
    ) -> Result<(), ApiError> {
        use super::admission::{Outcome, Request};
        if matches!(
            self.kind,
            Kind::ValidatingAdmissionPolicy | Kind::ValidatingAdmissionPolicyBinding
        ) {
            return Ok(());
        }
        let (kind, sub) = (self.kind, self.subresource);
        let stored = self.stored.current(inner);
        let stored = (!stored.ignores(kind, sub, operation)).then_some(&*stored);
        let enforced = self.enforced.filter(|a| !a.ignores(kind, sub, operation));
        if stored.is_none() && enforced.is_none() {
            return Ok(());
        }
        // kube-apiserver's request info gives a Namespace its own name as its namespace.
        let namespace = if kind == Kind::Namespace {
            name
        } else {
            self.namespace
        };
        let namespace_object = || {
            inner
                .get(Kind::Namespace, namespace)
                .map(super::store::Entry::value)
        };
        let r = Request {
            operation,
            kind,
            subresource: sub,
            namespace,
            name,
            user: self.user(),
            object,
            old_object,
            namespace_object: &namespace_object,
        };
        let mut out = Outcome::default();
        for policies in enforced.into_iter().chain(stored) {
            policies.admit(&r, &mut out)?;
        }
        self.warnings
            .borrow_mut()
            .extend(out.warnings().iter().cloned());
        match out.denied(&r) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

fn parse_json(kind: Kind, body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::undecodable(kind, e))
}

/// The object of a create or update body: JSON, or protobuf decoded into the JSON a JSON
/// client would have sent.
fn body_object(kind: Kind, content_type: &str, body: &[u8]) -> Result<Value, ApiError> {
    if super::protobuf::is_protobuf(content_type) {
        super::protobuf::decode_object(kind, body)
    } else {
        parse_json(kind, body)
    }
}

fn dispatch(
    sh: &Arc<Shared>,
    verb: &str,
    route: &Route,
    query: &HashMap<String, String>,
    content_type: &str,
    body: &Bytes,
    admit: &dyn api::Admit,
) -> Result<Response, ApiError> {
    let kind = route.kind;
    let ns = route.namespace.as_deref().unwrap_or("");
    let name = route.name.as_deref().unwrap_or("");
    let writes = matches!(verb, "create" | "update" | "patch" | "delete");
    if writes && query.contains_key("dryRun") {
        // Not implemented: refused rather than persisted.
        return Err(ApiError::bad_request(
            "dryRun is not supported by the simulated API server",
        ));
    }
    if matches!(verb, "create" | "update") && content_type.starts_with("application/cbor") {
        // kube-apiserver v1.36 serves CBOR only behind an alpha feature gate: 415 (golden 116),
        // not a JSON syntax error about a binary body.
        return Err(ApiError::unsupported_body_media_type());
    }
    let protobuf = super::protobuf::is_protobuf(content_type);
    // kube-apiserver's protobuf decoder has no strict mode: fieldValidation does not apply.
    let strict = writes
        && !protobuf
        && route.sub.as_deref() != Some("eviction")
        && query.get("fieldValidation").map(String::as_str) == Some("Strict");
    let target = if route.sub.as_deref() == Some("status") {
        Target::Status
    } else {
        Target::Main
    };
    match verb {
        "list" => list(sh, route, query),
        "watch" => watch(sh, route, query),
        "get" => {
            let e = sh
                .store
                .get(kind, &key_of(ns, name))
                .ok_or_else(|| ApiError::not_found(kind, name))?;
            Ok(json_response(
                StatusCode::OK,
                events::present(kind, &e.bytes),
            ))
        }
        "create" if route.sub.as_deref() == Some("eviction") => {
            let body = if protobuf {
                Bytes::from(super::protobuf::decode_eviction(body)?.to_string())
            } else {
                body.clone()
            };
            api::evict(
                &sh.store,
                ns,
                name,
                &body,
                &sh.invariants,
                || sh.faults.take_abandoned_eviction(),
                Some(admit),
            )?;
            Ok(json_response(
                StatusCode::CREATED,
                r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","code":201}"#,
            ))
        }
        "create" => {
            let v = body_object(kind, content_type, body)?;
            if strict {
                kind.check_strict(&v)?;
            }
            let e = api::create(&sh.store, kind, ns, v, Some(admit))?;
            Ok(json_response(
                StatusCode::CREATED,
                events::present(kind, &e.bytes),
            ))
        }
        "update" => {
            let mut v = body_object(kind, content_type, body)?;
            if strict {
                kind.check_strict(&v)?;
            }
            let missing = sh.store.get(kind, &key_of(ns, name)).is_none();
            if kind == Kind::Lease && missing {
                // Leases allow create on update too, but a uid in the body is a precondition
                // the missing object fails (golden 190); without one it is created, whatever
                // its resourceVersion (191, 192).
                if let Some(uid) = v["metadata"]["uid"].as_str().filter(|u| !u.is_empty()) {
                    return Err(ApiError::missing_uid_precondition(kind, ns, name, uid));
                }
            }
            if (kind.is_event() || kind == Kind::Lease) && missing {
                // The Event and Lease strategies allow create on update: a PUT of a missing
                // object makes it.
                if v["metadata"]["name"].as_str() != Some(name) {
                    return Err(ApiError::bad_request(format!(
                        "the name of the object ({}) does not match the name on the request ({name})",
                        v["metadata"]["name"].as_str().unwrap_or("")
                    )));
                }
                if let Some(md) = v["metadata"].as_object_mut() {
                    md.remove("resourceVersion");
                }
                let e = api::create(&sh.store, kind, ns, v, Some(admit))?;
                return Ok(json_response(
                    StatusCode::CREATED,
                    events::present(kind, &e.bytes),
                ));
            }
            let e = api::update(&sh.store, kind, ns, name, target, v, Some(admit))?;
            Ok(json_response(
                StatusCode::OK,
                events::present(kind, &e.bytes),
            ))
        }
        "patch" => {
            let typ = PatchType::from_content_type(content_type)?;
            if typ == PatchType::Strategic && kind == Kind::NodeMaintenance {
                return Err(ApiError::unsupported_patch_of_custom_resource());
            }
            if strict {
                if let Some(old) = sh.store.get(kind, &key_of(ns, name)) {
                    kind.check_strict(&super::patch::apply(
                        kind.kind_name(),
                        typ,
                        &old.value(),
                        body,
                    )?)?;
                }
            }
            let e = api::patch(&sh.store, kind, ns, name, target, typ, body, Some(admit))?;
            Ok(json_response(
                StatusCode::OK,
                events::present(kind, &e.bytes),
            ))
        }
        "delete" => {
            let grace = query.get("gracePeriodSeconds").and_then(|g| g.parse().ok());
            let opts = DeleteOptions::parse(body, grace)?;
            let mut inner = sh.store.lock();
            let out = api::delete(
                &mut inner,
                kind,
                ns,
                name,
                &opts,
                Some(&sh.invariants),
                Some(admit),
            )?;
            drop(inner);
            match out {
                Deleted::Gone(e) if kind != Kind::Pod => {
                    let mut details =
                        json!({"name": name, "kind": kind.plural(), "uid": e.idx.uid});
                    if !kind.group().is_empty() {
                        details["group"] = json!(kind.group());
                    }
                    let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                        "status": "Success", "details": details});
                    Ok(json_response(StatusCode::OK, status.to_string()))
                }
                Deleted::Gone(e) | Deleted::Marked(e) => Ok(json_response(
                    StatusCode::OK,
                    events::present(kind, &e.bytes),
                )),
            }
        }
        _ => Err(ApiError::method_not_allowed()),
    }
}

/// A parsed `fieldSelector`.
#[derive(Clone, Debug, Default)]
pub struct FieldSelector {
    terms: Vec<(String, bool, String)>,
}

/// `fields.UnescapeValue`.
fn unescape_field_value(v: &str) -> Result<String, String> {
    let mut out = String::with_capacity(v.len());
    let mut in_slash = false;
    for c in v.chars() {
        if in_slash {
            if !matches!(c, '\\' | ',' | '=') {
                return Err(format!(
                    "invalid field selector: invalid escape sequence: \\{c}"
                ));
            }
            out.push(c);
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            ',' | '=' => {
                // Go prints the rune with %v: its code point.
                return Err(format!(
                    "invalid field selector: unescaped character in value: {}",
                    c as u32
                ));
            }
            c => out.push(c),
        }
    }
    if in_slash {
        return Err("invalid field selector: invalid escape sequence: \\".into());
    }
    Ok(out)
}

impl FieldSelector {
    /// Parses `a=b,c!=d` as `fields.ParseSelector` does (terms split at unescaped commas and
    /// sorted, the first operator of a term splits it, `\\`, `\,` and `\=` unescaped in
    /// values) and checks every field is supported for `kind` (400 otherwise).
    pub fn parse(kind: Kind, s: &str) -> Result<FieldSelector, ApiError> {
        let mut parts = Vec::new();
        let (mut start, mut in_slash) = (0, false);
        for (i, c) in s.char_indices() {
            match c {
                _ if in_slash => in_slash = false,
                '\\' => in_slash = true,
                ',' => {
                    parts.push(&s[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        if !s.is_empty() {
            parts.push(&s[start..]);
        }
        parts.sort_unstable();
        let mut terms = Vec::new();
        for t in parts.into_iter().filter(|t| !t.is_empty()) {
            let split = t.char_indices().find_map(|(i, _)| {
                let rest = &t[i..];
                ["!=", "==", "="]
                    .into_iter()
                    .find(|op| rest.starts_with(op))
                    .map(|op| (&t[..i], op != "!=", &t[i + op.len()..]))
            });
            let Some((f, eq, v)) = split else {
                return Err(ApiError::bad_request(format!(
                    "invalid selector: '{s}'; can't understand '{t}'"
                )));
            };
            let v = unescape_field_value(v).map_err(ApiError::bad_request)?;
            Index::default().field_value(kind, f)?;
            terms.push((f.to_string(), eq, v));
        }
        Ok(FieldSelector { terms })
    }

    /// True when every term holds.
    pub fn matches(&self, kind: Kind, idx: &Index) -> bool {
        self.terms
            .iter()
            .all(|(f, eq, v)| idx.field_value(kind, f).is_ok_and(|x| (x == v) == *eq))
    }
}

struct Filter {
    kind: Kind,
    namespace: Option<String>,
    labels: Selector,
    fields: FieldSelector,
}

impl Filter {
    fn from_query(route: &Route, q: &HashMap<String, String>) -> Result<Filter, ApiError> {
        let labels = Selector::parse(q.get("labelSelector").map_or("", String::as_str))
            .map_err(|e| ApiError::bad_request(format!("unable to parse requirement: {e}")))?;
        let fields = FieldSelector::parse(
            route.kind,
            q.get("fieldSelector").map_or("", String::as_str),
        )?;
        Ok(Filter {
            kind: route.kind,
            namespace: route.namespace.clone(),
            labels,
            fields,
        })
    }

    fn matches(&self, idx: &Index) -> bool {
        self.namespace
            .as_ref()
            .is_none_or(|ns| *ns == idx.namespace)
            && self.labels.matches(&idx.labels)
            && self.fields.matches(self.kind, idx)
    }

    /// What the objects this filter can match are narrowed to: the one object it selects by
    /// name (`metadata.name=X`) in a namespace (or of a kind without one), else a node's pods
    /// (`spec.nodeName=X`).
    fn narrow(&self) -> Option<Narrow> {
        let term = |field: &str| {
            self.fields
                .terms
                .iter()
                .find(|(f, eq, v)| f == field && *eq && !v.is_empty())
                .map(|(_, _, v)| v)
        };
        let by_name = term("metadata.name").and_then(|name| {
            match (&self.namespace, self.kind.namespaced()) {
                (Some(ns), true) => Some(Narrow::Key(key_of(ns, name))),
                (None, false) => Some(Narrow::Key(name.clone())),
                _ => None,
            }
        });
        let on_node = || {
            (self.kind == Kind::Pod)
                .then(|| term("spec.nodeName"))
                .flatten()
                .map(|node| Narrow::PodsOn(node.clone()))
        };
        by_name.or_else(on_node)
    }

    fn is_everything(&self) -> bool {
        self.labels.is_empty() && self.fields.terms.is_empty()
    }
}

fn b64url(data: &[u8]) -> String {
    const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, b)| acc | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

fn b64url_decode(s: &str) -> Option<Vec<u8>> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' | b'+' => 62,
            b'_' | b'/' => 63,
            _ => return None,
        } as u32)
    };
    let bytes: Vec<u8> = s.bytes().filter(|c| *c != b'=').collect();
    let mut out = Vec::new();
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            n |= val(*c)? << (18 - 6 * i);
        }
        for i in 0..chunk.len().saturating_sub(1) {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    Some(out)
}

/// Encodes a continue token as kube-apiserver does (golden 29).
pub fn continue_token(rv: i64, key: &str, namespaced: bool) -> String {
    let start = if namespaced {
        format!("/{key}\u{0}")
    } else {
        format!("{key}\u{0}")
    };
    b64url(
        json!({"v": "meta.k8s.io/v1", "rv": rv, "start": start})
            .to_string()
            .as_bytes(),
    )
}

fn decode_continue(token: &str) -> Result<(i64, String), ApiError> {
    let bad = || ApiError::bad_request("continue key is not valid: illegal base64 data");
    let raw = b64url_decode(token).ok_or_else(bad)?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    let rv = v["rv"].as_i64().ok_or_else(bad)?;
    let start = v["start"].as_str().ok_or_else(bad)?;
    let key = start
        .trim_start_matches('/')
        .trim_end_matches('\u{0}')
        .to_string();
    Ok((rv, key))
}

fn list(
    sh: &Arc<Shared>,
    route: &Route,
    q: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let kind = route.kind;
    let filter = Filter::from_query(route, q)?;
    let rv_param = q.get("resourceVersion").map(String::as_str).unwrap_or("");
    let rv_match = q
        .get("resourceVersionMatch")
        .map(String::as_str)
        .unwrap_or("");
    let mut limit: usize = q.get("limit").and_then(|l| l.parse().ok()).unwrap_or(0);
    if rv_param == "0" {
        limit = 0;
    }
    let inner = sh.store.lock();
    let current = inner.revision();
    if rv_match == "Exact" && rv_param != current.to_string() {
        return Err(ApiError::list_expired());
    }
    let (list_rv, after) = match q.get("continue").filter(|c| !c.is_empty()) {
        Some(token) => {
            let (rv, key) = decode_continue(token)?;
            if rv >= 0 && (rv as u64) < inner.compacted(kind) {
                return Err(ApiError::continue_expired(continue_token(
                    -1,
                    &key,
                    kind.namespaced(),
                )));
            }
            (if rv < 0 { current } else { rv as u64 }, Some(key))
        }
        None => (current, None),
    };
    let mut items = Vec::new();
    let mut remaining = 0;
    let candidates = match filter.narrow() {
        Some(n) => inner.narrowed(kind, &n, after.as_deref()),
        None => inner.range(kind, route.namespace.as_deref(), after.as_deref()),
    };
    let mut iter = candidates.filter(|e| filter.matches(&e.idx));
    let mut more = false;
    #[allow(clippy::while_let_on_iterator)]
    while let Some(e) = iter.next() {
        if limit > 0 && items.len() == limit {
            more = true;
            break;
        }
        items.push(events::present(kind, &e.bytes));
    }
    let rest = iter.count();
    let rest = if more && filter.is_everything() {
        1 + rest
    } else {
        0
    };
    let mut metadata = json!({"resourceVersion": list_rv.to_string()});
    if more {
        let last_key = {
            let v: Value = serde_json::from_slice(items.last().expect("item")).unwrap_or_default();
            key_of(
                v["metadata"]["namespace"].as_str().unwrap_or(""),
                v["metadata"]["name"].as_str().unwrap_or(""),
            )
        };
        metadata["continue"] = json!(continue_token(list_rv as i64, &last_key, kind.namespaced()));
        remaining = rest;
    }
    if remaining > 0 {
        metadata["remainingItemCount"] = json!(remaining);
    }
    drop(inner);
    let head = format!(
        r#"{{"kind":"{}List","apiVersion":"{}","metadata":{},"items":["#,
        kind.kind_name(),
        kind.api_version(),
        metadata
    );
    let mut chunks: Vec<Bytes> = Vec::with_capacity(items.len() / 256 + 2);
    let mut buf = BytesMut::from(head.as_bytes());
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            buf.put_u8(b',');
        }
        buf.put_slice(item);
        if buf.len() > 256 * 1024 {
            chunks.push(buf.split().freeze());
        }
    }
    buf.put_slice(b"]}");
    chunks.push(buf.freeze());
    let stream = futures::stream::iter(chunks.into_iter().map(Ok::<_, Infallible>));
    Ok(json_response(StatusCode::OK, Body::from_stream(stream)))
}

/// Internal query key marking a watch whose events are printed as Tables.
const TABLE_WATCH: &str = "\u{0}table";

/// The event object as sent: the stored bytes (as the watched version reads them), or a
/// one-row Table for kubectl.
fn printed(kind: Kind, table: Option<(Kind, Option<&str>)>, bytes: &Bytes) -> Bytes {
    let bytes = events::present(kind, bytes);
    match table.and_then(|(k, inc)| super::table::to_table(k, &bytes, inc)) {
        Some(t) => Bytes::from(t.to_string()),
        None => bytes,
    }
}

fn event_line(typ: &str, object: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(object.len() + 32);
    b.put_slice(br#"{"type":""#);
    b.put_slice(typ.as_bytes());
    b.put_slice(br#"","object":"#);
    b.put_slice(object);
    b.put_slice(b"}\n");
    b.freeze()
}

fn bookmark(kind: Kind, rv: u64, initial_end: bool) -> Bytes {
    let mut md = json!({"resourceVersion": rv.to_string()});
    if initial_end {
        md["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    let obj = json!({"kind": kind.kind_name(), "apiVersion": kind.api_version(), "metadata": md});
    event_line("BOOKMARK", obj.to_string().as_bytes())
}

fn expired_line(message: String) -> Bytes {
    let st = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": "Expired", "code": 410});
    event_line("ERROR", st.to_string().as_bytes())
}

/// What a filtered watch sends for a store event (selector transitions as the watch cache).
fn translate(filter: &Filter, ev: &StoreEvent) -> Option<&'static str> {
    let now = filter.matches(&ev.entry.idx);
    let before = ev.prev.as_ref().is_some_and(|p| filter.matches(p));
    match ev.typ {
        EventType::Added => now.then_some("ADDED"),
        EventType::Deleted => (before || now).then_some("DELETED"),
        EventType::Modified => match (before, now) {
            (true, true) => Some("MODIFIED"),
            (false, true) => Some("ADDED"),
            (true, false) => Some("DELETED"),
            (false, false) => None,
        },
    }
}

fn watch(
    sh: &Arc<Shared>,
    route: &Route,
    q: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let kind = route.kind;
    let filter = Filter::from_query(route, q)?;
    let flag = |k: &str| matches!(q.get(k).map(String::as_str), Some("true" | "1"));
    let bookmarks = flag("allowWatchBookmarks");
    let send_initial = flag("sendInitialEvents");
    let table: Option<(Kind, Option<String>)> = q
        .contains_key(TABLE_WATCH)
        .then(|| (kind, q.get("includeObject").cloned()));
    let rv_param = q.get("resourceVersion").map(String::as_str).unwrap_or("");
    if send_initial && q.get("resourceVersionMatch").map(String::as_str) != Some("NotOlderThan") {
        return Err(ApiError::list_options_invalid(
            "resourceVersionMatch",
            "Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
        ));
    }
    let since =
        if send_initial || rv_param.is_empty() || rv_param == "0" {
            None
        } else {
            Some(rv_param.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!("invalid resource version: {rv_param}"))
            })?)
        };
    let timeout = q
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map_or(Duration::from_secs(1800), Duration::from_secs);
    let only = filter.narrow();
    let start = sh.store.lock().watch(kind, since, only.as_ref());
    let (mut tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(256);
    let sh2 = sh.clone();
    let cut = sh.faults.watch_cut();
    tokio::spawn(async move {
        let mut start = match start {
            Ok(s) => s,
            Err(oldest) => {
                let _ = tx
                    .send(Ok(expired_line(format!(
                        "too old resource version: {rv_param_owned} ({oldest})",
                        rv_param_owned = since.unwrap_or(0)
                    ))))
                    .await;
                return;
            }
        };
        let deadline = tokio::time::Instant::now() + timeout;
        let cut_at = cut.map(|c| tokio::time::Instant::now() + c);
        let mut sent_rv = start.rv;
        let mut n = 0u64;
        for ev in &start.initial {
            if let Some(t) = translate(&filter, ev) {
                if tx
                    .send(Ok(event_line(
                        t,
                        &printed(
                            kind,
                            table.as_ref().map(|(k, i)| (*k, i.as_deref())),
                            &ev.entry.bytes,
                        ),
                    )))
                    .await
                    .is_err()
                {
                    return;
                }
                n += 1;
            }
        }
        if send_initial && bookmarks && tx.send(Ok(bookmark(kind, start.rv, true))).await.is_err() {
            return;
        }
        sh2.stats.watch_events(n);
        let pre_timeout = deadline.checked_sub(Duration::from_secs(2));
        let mut pre_timeout_done = pre_timeout.is_none();
        let mut tick = tokio::time::interval_at(
            tokio::time::Instant::now() + sh2.bookmark_interval,
            sh2.bookmark_interval,
        );
        loop {
            let stop = match cut_at {
                Some(c) if c < deadline => c,
                _ => deadline,
            };
            let pre = pre_timeout
                .filter(|_| !pre_timeout_done && bookmarks)
                .unwrap_or(stop);
            tokio::select! {
                r = start.rx.recv() => match r {
                    Ok(ev) => {
                        sent_rv = ev.rv;
                        if let Some(t) = translate(&filter, &ev) {
                            if tx.send(Ok(event_line(t, &printed(kind, table.as_ref().map(|(k, i)| (*k, i.as_deref())), &ev.entry.bytes)))).await.is_err() {
                                return;
                            }
                            sh2.stats.watch_events(1);
                        }
                    }
                    Err(RecvError::Lagged(_)) => {
                        let _ = tx.send(Ok(expired_line(format!("too old resource version: {sent_rv} ({})", sent_rv + 1)))).await;
                        return;
                    }
                    Err(RecvError::Closed) => return,
                },
                _ = tick.tick(), if bookmarks => {
                    let rv = sh2.store.revision();
                    if rv > sent_rv {
                        sent_rv = rv;
                        if tx.send(Ok(bookmark(kind, rv, false))).await.is_err() {
                            return;
                        }
                    }
                }
                _ = tokio::time::sleep_until(pre), if !pre_timeout_done && bookmarks => {
                    pre_timeout_done = true;
                    let rv = sh2.store.revision();
                    if rv > sent_rv {
                        sent_rv = rv;
                        if tx.send(Ok(bookmark(kind, rv, false))).await.is_err() {
                            return;
                        }
                    }
                }
                _ = tokio::time::sleep_until(stop) => return,
            }
        }
    });
    Ok(json_response(StatusCode::OK, Body::from_stream(rx)))
}
