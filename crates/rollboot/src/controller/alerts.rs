//! The optional Prometheus blocker: firing (or pending) alerts keep new reboots from starting.
//!
//! Owns the query of `GET {url}/api/v1/alerts` and the choice of which alerts block
//! (`alertFilter` names alerts to ignore, `firingOnly`). It must fail safe: a Prometheus that
//! cannot be reached or answers something unexpected blocks, and says why.
//!
//! The HTTP client is kube's own (hyper 1, hyper-util and rustls, already in the tree), built
//! without credentials for the Prometheus URL: no new dependency.

use std::time::Duration;

use regex::Regex;
use serde::Deserialize;

use crate::config::Prometheus;

/// How long one query may take before it counts as a failure (and so blocks).
const TIMEOUT: Duration = Duration::from_secs(10);

/// The `/api/v1/alerts` answer, the parts rollboot reads.
#[derive(Debug, Deserialize)]
pub struct AlertsResponse {
    /// `success` or `error`.
    pub status: String,
    /// Present on success.
    #[serde(default)]
    pub data: Option<AlertsData>,
    /// Present on error.
    #[serde(default)]
    pub error: Option<String>,
}

/// `data` of [`AlertsResponse`].
#[derive(Debug, Deserialize)]
pub struct AlertsData {
    /// Active alerts.
    #[serde(default)]
    pub alerts: Vec<PrometheusAlert>,
}

/// One active alert.
#[derive(Debug, Deserialize)]
pub struct PrometheusAlert {
    /// Its labels; `alertname` names it.
    #[serde(default)]
    pub labels: std::collections::BTreeMap<String, String>,
    /// `firing` or `pending`.
    #[serde(default)]
    pub state: String,
}

/// The names of the alerts that block, sorted and deduplicated, from a parsed answer; an
/// error when the answer is not a success.
pub fn blocking(
    resp: &AlertsResponse,
    ignore: Option<&Regex>,
    firing_only: bool,
) -> Result<Vec<String>, String> {
    if resp.status != "success" {
        return Err(format!(
            "status `{}`: {}",
            resp.status,
            resp.error.as_deref().unwrap_or("no error given")
        ));
    }
    let Some(data) = &resp.data else {
        return Err("a success without `data`".into());
    };
    let mut names: Vec<String> = data
        .alerts
        .iter()
        .filter(|a| !firing_only || a.state == "firing")
        .map(|a| {
            a.labels
                .get("alertname")
                .cloned()
                .unwrap_or_else(|| "(unnamed)".into())
        })
        .filter(|n| ignore.is_none_or(|re| !re.is_match(n)))
        .collect();
    names.sort();
    names.dedup();
    Ok(names)
}

/// Queries one Prometheus server for the alerts that block.
#[derive(Clone)]
pub struct AlertSource {
    client: kube::Client,
    url: String,
    ignore: Option<Regex>,
    firing_only: bool,
}

impl AlertSource {
    /// A source for `blockers.prometheus`; an error names what is wrong with the URL or filter.
    pub fn new(p: &Prometheus) -> Result<AlertSource, String> {
        let uri: http::Uri = p
            .url
            .parse()
            .map_err(|e| format!("blockers.prometheus.url `{}`: {e}", p.url))?;
        let client = crate::client::external(uri, TIMEOUT)
            .map_err(|e| format!("a client for Prometheus `{}`: {e}", p.url))?;
        // Anchored: the filter names whole alert names.
        let ignore = match &p.alert_filter {
            Some(f) => Some(
                Regex::new(&format!("^(?:{f})$"))
                    .map_err(|e| format!("blockers.prometheus.alertFilter: {e}"))?,
            ),
            None => None,
        };
        Ok(AlertSource {
            client,
            url: p.url.clone(),
            ignore,
            firing_only: p.firing_only,
        })
    }

    /// The URL queried, for messages.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The names of the alerts that block now; an error (which blocks too) when Prometheus
    /// cannot be asked or answers something unexpected.
    pub async fn check(&self) -> Result<Vec<String>, String> {
        let req = http::Request::get("/api/v1/alerts")
            .header("accept", "application/json")
            .body(Vec::new())
            .map_err(|e| e.to_string())?;
        let text = tokio::time::timeout(TIMEOUT, self.client.request_text(req))
            .await
            .map_err(|_| format!("no answer within {}s", TIMEOUT.as_secs()))?
            .map_err(|e| e.to_string())?;
        let resp: AlertsResponse =
            serde_json::from_str(&text).map_err(|e| format!("unexpected answer: {e}"))?;
        blocking(&resp, self.ignore.as_ref(), self.firing_only)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> AlertsResponse {
        serde_json::from_str(s).unwrap()
    }

    const BODY: &str = r#"{"status":"success","data":{"alerts":[
        {"labels":{"alertname":"Watchdog"},"state":"firing"},
        {"labels":{"alertname":"NodeDown"},"state":"firing"},
        {"labels":{"alertname":"DiskFilling"},"state":"pending"}]}}"#;

    #[test]
    fn firing_only_and_filter() {
        let r = parse(BODY);
        let re = Regex::new("^(?:Watchdog)$").unwrap();
        assert_eq!(blocking(&r, Some(&re), true).unwrap(), vec!["NodeDown"]);
        assert_eq!(
            blocking(&r, Some(&re), false).unwrap(),
            vec!["DiskFilling", "NodeDown"]
        );
        assert_eq!(
            blocking(&r, None, true).unwrap(),
            vec!["NodeDown", "Watchdog"]
        );
    }

    #[test]
    fn error_status_blocks() {
        let r = parse(r#"{"status":"error","errorType":"internal","error":"boom"}"#);
        assert!(blocking(&r, None, true).unwrap_err().contains("boom"));
    }
}
