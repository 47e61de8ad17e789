//! The config as the cluster holds it: the ConfigMap the controller mounts (`deploy/config.yaml`
//! and the Helm chart install `rollboot-system/rollboot-config`, key `rollboot.yaml`), read by
//! the operator's commands when no config file is given.
//!
//! Owns the ConfigMap's reference ([`ConfigMapRef`], written `NAMESPACE/NAME`), its one get
//! ([`load`]), and what can go wrong, each naming the ConfigMap and its key: absent, without
//! the key, unreadable, or holding an invalid config (every problem with its line and column in
//! the key's text, as for a file). It must never write, and never judge a config itself: that
//! is [`crate::config::parse_str`]'s.

use std::fmt;
use std::str::FromStr;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;

use crate::config::{Config, Problem};

/// The key of the ConfigMap that holds the config (the file name the pods mount it as).
pub const KEY: &str = "rollboot.yaml";

/// The ConfigMap the controller mounts, as `deploy/` installs it.
pub const DEFAULT_NAMESPACE: &str = "rollboot-system";
/// See [`DEFAULT_NAMESPACE`].
pub const DEFAULT_NAME: &str = "rollboot-config";

/// A ConfigMap, by namespace and name (`--config-map NAMESPACE/NAME`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigMapRef {
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl Default for ConfigMapRef {
    /// The controller's: `rollboot-system/rollboot-config`.
    fn default() -> Self {
        ConfigMapRef {
            namespace: DEFAULT_NAMESPACE.into(),
            name: DEFAULT_NAME.into(),
        }
    }
}

impl fmt::Display for ConfigMapRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A `NAMESPACE/NAME` that names no ConfigMap.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not NAMESPACE/NAME (such as {DEFAULT_NAMESPACE}/{DEFAULT_NAME}): {1}")]
pub struct ConfigMapRefError(String, &'static str);

impl FromStr for ConfigMapRef {
    type Err = ConfigMapRefError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = |why| ConfigMapRefError(s.to_string(), why);
        let (namespace, name) = s.split_once('/').ok_or_else(|| bad("no `/`"))?;
        if !crate::url::is_dns_label(namespace) {
            return Err(bad("the namespace is not a DNS label"));
        }
        // Also keeps the name out of a request path unencoded (kube-rs does not encode it).
        if !crate::url::is_dns_subdomain(name) {
            return Err(bad("the name is not a DNS subdomain"));
        }
        Ok(ConfigMapRef {
            namespace: namespace.into(),
            name: name.into(),
        })
    }
}

/// Why the cluster's config could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ClusterConfigError {
    /// No such ConfigMap (nor, perhaps, its namespace).
    #[error("ConfigMap {at} (key {KEY}) not found at the API server {server}")]
    Absent {
        /// The API server's URL.
        server: String,
        /// The ConfigMap.
        at: ConfigMapRef,
    },
    /// The ConfigMap is there, without the key.
    #[error("ConfigMap {at} at the API server {server} has no key {KEY} (its keys: {keys})")]
    NoKey {
        /// The API server's URL.
        server: String,
        /// The ConfigMap.
        at: ConfigMapRef,
        /// The keys it has, comma-separated (`none` when it has none).
        keys: String,
    },
    /// The API server could not be asked, or refused (403: the caller may not read it).
    #[error("cannot read ConfigMap {at} (key {KEY}) from the API server {server}: {source}")]
    Api {
        /// The API server's URL.
        server: String,
        /// The ConfigMap.
        at: ConfigMapRef,
        /// The API error.
        #[source]
        source: Box<kube::Error>,
    },
    /// The key's text is not a valid config.
    #[error("{}", crate::config::invalid(format_args!("ConfigMap {at}, key {KEY}"), problems))]
    Invalid {
        /// The ConfigMap.
        at: ConfigMapRef,
        /// Every problem, located in the key's text.
        problems: Vec<Problem>,
    },
}

impl ClusterConfigError {
    /// There is no config where the ConfigMap was looked for (no ConfigMap, or no key in it),
    /// as opposed to one that could not be read or is invalid.
    pub fn is_absent(&self) -> bool {
        matches!(
            self,
            ClusterConfigError::Absent { .. } | ClusterConfigError::NoKey { .. }
        )
    }

    /// The config's problems, when its text was at fault.
    pub fn problems(&self) -> &[Problem] {
        match self {
            ClusterConfigError::Invalid { problems, .. } => problems,
            _ => &[],
        }
    }
}

/// The config a ConfigMap holds under [`KEY`] (`server` names the API server in errors).
pub fn from_config_map(
    cm: &ConfigMap,
    server: &str,
    at: &ConfigMapRef,
) -> Result<Config, ClusterConfigError> {
    let Some(text) = cm.data.as_ref().and_then(|d| d.get(KEY)) else {
        let mut keys: Vec<&str> = cm.data.iter().flatten().map(|(k, _)| k.as_str()).collect();
        keys.extend(cm.binary_data.iter().flatten().map(|(k, _)| k.as_str()));
        keys.sort();
        return Err(ClusterConfigError::NoKey {
            server: server.into(),
            at: at.clone(),
            keys: if keys.is_empty() {
                "none".into()
            } else {
                keys.join(", ")
            },
        });
    };
    crate::config::parse_str(text).map_err(|problems| ClusterConfigError::Invalid {
        at: at.clone(),
        problems,
    })
}

/// Reads the config of ConfigMap `at` (one get).
pub async fn load(
    client: &kube::Client,
    server: &str,
    at: &ConfigMapRef,
) -> Result<Config, ClusterConfigError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), &at.namespace);
    let cm = match api.get_opt(&at.name).await {
        Ok(Some(cm)) => cm,
        // kube's get_opt answers a missing object with None; a missing namespace too.
        Ok(None) => {
            return Err(ClusterConfigError::Absent {
                server: server.into(),
                at: at.clone(),
            })
        }
        Err(source) => {
            return Err(ClusterConfigError::Api {
                server: server.into(),
                at: at.clone(),
                source: Box::new(source),
            })
        }
    };
    from_config_map(&cm, server, at)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn cm(data: &[(&str, &str)]) -> ConfigMap {
        ConfigMap {
            data: Some(
                data.iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<BTreeMap<_, _>>(),
            ),
            ..Default::default()
        }
    }

    #[test]
    fn a_reference_is_namespace_slash_name() {
        let r: ConfigMapRef = "ops/rollboot".parse().unwrap();
        assert_eq!((r.namespace.as_str(), r.name.as_str()), ("ops", "rollboot"));
        assert_eq!(r.to_string(), "ops/rollboot");
        assert_eq!(
            ConfigMapRef::default().to_string(),
            "rollboot-system/rollboot-config"
        );
        for bad in ["rollboot-config", "/x", "x/", "Ops/x", "a/b/c", "a/b c"] {
            let e = bad.parse::<ConfigMapRef>().unwrap_err().to_string();
            assert!(e.contains(bad) && e.contains("NAMESPACE/NAME"), "{e}");
        }
    }

    #[test]
    fn the_key_holds_the_config_and_its_problems_name_the_config_map_and_key() {
        let at = ConfigMapRef::default();
        let c = from_config_map(&cm(&[(KEY, "concurrency: {maxNodes: 3}\n")]), "s", &at).unwrap();
        assert_eq!(c.concurrency.max_nodes, 3);

        let e = from_config_map(&cm(&[(KEY, "drain:\n  timeout: soon\n")]), "s", &at).unwrap_err();
        assert!(!e.is_absent());
        assert_eq!(e.problems()[0].line, Some(2));
        let said = e.to_string();
        assert!(
            said.starts_with(
                "ConfigMap rollboot-system/rollboot-config, key rollboot.yaml: invalid config:\n  2:"
            ) && said.contains("drain.timeout"),
            "{said}"
        );

        let e = from_config_map(&cm(&[("other.yaml", "{}")]), "https://api", &at).unwrap_err();
        assert!(e.is_absent());
        assert_eq!(
            e.to_string(),
            "ConfigMap rollboot-system/rollboot-config at the API server https://api has no key \
             rollboot.yaml (its keys: other.yaml)"
        );
        let e = from_config_map(&ConfigMap::default(), "s", &at).unwrap_err();
        assert!(e.to_string().ends_with("(its keys: none)"), "{e}");
    }
}
