//! What every Kubernetes client rollboot builds has in common: it says who it is.
//!
//! Owns the `User-Agent` rollboot sends, `rollboot/<version> (<component>)`. kube-apiserver
//! writes it into its audit log and takes the part before the first `/` as the field manager of
//! every write, so without it an operator cannot tell rollboot's requests (or fields) from any
//! other client's. It must never talk to the API itself.

use http::header::{HeaderValue, USER_AGENT};

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
