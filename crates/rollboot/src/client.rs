//! What every Kubernetes client rollboot builds has in common: it says who it is.
//!
//! Owns the `User-Agent` rollboot sends, `rollboot/<version> (<component>)`. kube-apiserver
//! writes it into its audit log and takes the part before the first `/` as the field manager of
//! every write, so without it an operator cannot tell rollboot's requests (or fields) from any
//! other client's. Also how a list or watch reads only what its reader keeps of each object
//! ([`Slim`]). And which cluster a command talks to ([`Target`]: `--kubeconfig`, `--context`),
//! and the plain HTTP client rollboot uses for servers that are not Kubernetes ([`external`]).
//! It must never talk to the API itself.

use http::header::{HeaderValue, USER_AGENT};
use serde::Deserialize;

/// The User-Agent of `component` (`controller`, `agent`, `status`, `simulate`...).
pub fn user_agent(component: &str) -> String {
    format!("rollboot/{} ({component})", env!("CARGO_PKG_VERSION"))
}

/// Makes every request of clients built from `config` carry [`user_agent`]`(component)`,
/// replacing any User-Agent set before.
pub fn identify(config: &mut kube::Config, component: &str) {
    config.headers.retain(|(name, _)| name != USER_AGENT);
    let value = HeaderValue::from_str(&user_agent(component))
        .expect("a User-Agent of ASCII letters, digits and punctuation");
    config.headers.push((USER_AGENT, value));
}

/// A client for an HTTP server that is not Kubernetes (a webhook, a notification sink,
/// Prometheus, Alertmanager) at `base` (scheme and authority): kube's own client (hyper, rustls,
/// already in the tree) with no credentials, each of connect, read and write bounded by
/// `timeout`, and no retry of its own (the caller decides what a failure means).
pub fn external(
    base: http::Uri,
    timeout: std::time::Duration,
) -> Result<kube::Client, kube::Error> {
    let mut cfg = kube::Config::new(base);
    cfg.read_timeout = Some(timeout);
    cfg.connect_timeout = Some(timeout);
    cfg.write_timeout = Some(timeout);
    cfg.default_retry = false;
    kube::Client::try_from(cfg)
}

/// Which cluster a command talks to: the kubeconfig file and context the command line names
/// (`--kubeconfig`, `--context`), else kube's usual search (`KUBECONFIG`, `~/.kube/config`,
/// then the in-cluster service account).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Target {
    /// `--kubeconfig`: this file only.
    pub kubeconfig: Option<std::path::PathBuf>,
    /// `--context`: this context of the kubeconfig instead of its current one.
    pub context: Option<String>,
}

/// A [`Target`] that cannot be made into a client config, naming the file or context.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// No kubeconfig and not in a cluster.
    #[error("no Kubernetes API server configured (kubeconfig or in-cluster): {0}")]
    Infer(#[source] kube::config::InferConfigError),
    /// The kubeconfig file (named), or the context in it, does not give a config.
    #[error("kubeconfig {file}{context}: {source}")]
    Kubeconfig {
        /// The file (`KUBECONFIG` or `~/.kube/config` when none was named).
        file: String,
        /// `, context NAME` when one was named.
        context: String,
        /// Why.
        #[source]
        source: kube::config::KubeconfigError,
    },
}

impl Target {
    /// The client config of this target, not yet identified (see [`identify`]).
    pub async fn config(&self) -> Result<kube::Config, TargetError> {
        let options = kube::config::KubeConfigOptions {
            context: self.context.clone(),
            ..Default::default()
        };
        let named = |source| TargetError::Kubeconfig {
            file: match &self.kubeconfig {
                Some(p) => p.display().to_string(),
                None => "(KUBECONFIG or ~/.kube/config)".into(),
            },
            context: match &self.context {
                Some(c) => format!(", context {c}"),
                None => String::new(),
            },
            source,
        };
        match &self.kubeconfig {
            Some(path) => {
                let file = kube::config::Kubeconfig::read_from(path).map_err(named)?;
                kube::Config::from_custom_kubeconfig(file, &options)
                    .await
                    .map_err(named)
            }
            None if self.context.is_some() => {
                kube::Config::from_kubeconfig(&options).await.map_err(named)
            }
            None => kube::Config::infer().await.map_err(TargetError::Infer),
        }
    }
}

/// An object of a list or watch, read for what its reader keeps of it: name, namespace, uid and
/// resourceVersion of its metadata, `spec` and `status` as `S` and `T` (types of the fields
/// kept; `serde::de::IgnoredAny` for none), every other field (a ReplicaSet's pod template, a
/// pod's containers, managedFields) skipped unparsed. The health gates' first list of a
/// namespace (25,000 ReplicaSets in a 5,000-node cluster) parsed as whole objects was most of
/// the controller's CPU for the first gates of a rollout (perf). `K` is the Kubernetes type
/// whose API it reads.
#[derive(Clone, Debug, Deserialize)]
#[serde(bound = "S: Deserialize<'de>, T: Deserialize<'de>")]
pub(crate) struct Slim<K, S, T> {
    #[serde(deserialize_with = "slim_metadata")]
    pub metadata: kube::api::ObjectMeta,
    pub spec: Option<S>,
    pub status: Option<T>,
    #[serde(skip)]
    kind: std::marker::PhantomData<fn() -> K>,
}

/// Of an object's metadata, what a watch needs: name, namespace, uid, resourceVersion and
/// generation (whether a budget's status reads its current spec).
fn slim_metadata<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<kube::api::ObjectMeta, D::Error> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Meta {
        name: Option<String>,
        namespace: Option<String>,
        uid: Option<String>,
        resource_version: Option<String>,
        generation: Option<i64>,
    }
    let m = Meta::deserialize(d)?;
    Ok(kube::api::ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        generation: m.generation,
        ..Default::default()
    })
}

impl<K: k8s_openapi::Resource, S, T> k8s_openapi::Resource for Slim<K, S, T> {
    const API_VERSION: &'static str = K::API_VERSION;
    const GROUP: &'static str = K::GROUP;
    const KIND: &'static str = K::KIND;
    const VERSION: &'static str = K::VERSION;
    const URL_PATH_SEGMENT: &'static str = K::URL_PATH_SEGMENT;
    type Scope = K::Scope;
}

impl<K: k8s_openapi::Resource, S, T> k8s_openapi::Metadata for Slim<K, S, T> {
    type Ty = kube::api::ObjectMeta;

    fn metadata(&self) -> &Self::Ty {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut Self::Ty {
        &mut self.metadata
    }
}

/// Test only: a kube client whose server on 127.0.0.1 keeps every request's method and target
/// as sent (`GET /api/v1/nodes/n-1`), and answers `answer(path)`: the object when `Some`, else
/// a 404 Status.
#[cfg(test)]
pub(crate) async fn recording_server(
    answer: fn(&str) -> Option<serde_json::Value>,
) -> (kube::Client, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = seen.clone();
    let app = axum::Router::new().fallback(move |req: axum::extract::Request| {
        let kept = kept.clone();
        async move {
            kept.lock()
                .unwrap()
                .push(format!("{} {}", req.method(), req.uri()));
            match answer(req.uri().path()) {
                Some(object) => (http::StatusCode::OK, axum::Json(object)),
                None => (
                    http::StatusCode::NOT_FOUND,
                    axum::Json(serde_json::json!({"kind": "Status", "apiVersion": "v1",
                        "status": "Failure", "reason": "NotFound", "code": 404})),
                ),
            }
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let client = kube::Client::try_from(kube::Config::new(url.parse().unwrap())).unwrap();
    (client, seen)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_agent_names_rollboot_its_version_and_the_component() {
        let mut c = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        identify(&mut c, "agent");
        identify(&mut c, "controller");
        let uas: Vec<_> = c.headers.iter().filter(|(n, _)| n == USER_AGENT).collect();
        assert_eq!(uas.len(), 1);
        assert_eq!(
            uas[0].1.to_str().unwrap(),
            format!("rollboot/{} (controller)", env!("CARGO_PKG_VERSION"))
        );
    }
}
