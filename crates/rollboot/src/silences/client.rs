//! Alertmanager's API v2, the four requests rollboot makes: create a silence (`POST
//! /api/v2/silences`), read one (`GET /api/v2/silence/{id}`), expire it (`DELETE
//! /api/v2/silence/{id}`), and list the active, unsilenced, uninhibited alerts (`GET
//! /api/v2/alerts`).
//!
//! Owns the HTTP of those requests and their errors, each naming the URL. The HTTP client is
//! [`crate::client::external`], with the optional bearer token added per request. A silence
//! ID goes into a path only as a [`SilenceId`] (a UUID), percent-encoded all the same, and each
//! filter matcher into the query percent-encoded ([`crate::url`]); an answer's ID that is no
//! UUID is an error, never recorded. It decides nothing.

use std::time::Duration;

use super::{alert_names, Alert, Existing, Matcher, Silence, SilenceId};

/// How long one request may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// One Alertmanager.
#[derive(Clone)]
pub struct Alertmanager {
    client: kube::Client,
    url: String,
    token: Option<String>,
}

impl Alertmanager {
    /// A client for the Alertmanager at `url` (its base: `http://alertmanager:9093`), with the
    /// bearer `token` when given; an error names what is wrong with the URL.
    pub fn new(url: &str, token: Option<String>, key: &str) -> Result<Alertmanager, String> {
        let uri: http::Uri = url.parse().map_err(|e| format!("{key} `{url}`: {e}"))?;
        let client = crate::client::external(uri, TIMEOUT)
            .map_err(|e| format!("a client for Alertmanager `{url}`: {e}"))?;
        Ok(Alertmanager {
            client,
            url: url.to_string(),
            token,
        })
    }

    /// The base URL, for messages.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn request(
        &self,
        method: http::Method,
        path: &str,
        body: Vec<u8>,
    ) -> Result<http::Request<Vec<u8>>, String> {
        let mut b = http::Request::builder()
            .method(method)
            .uri(path)
            .header("accept", "application/json")
            .header("content-type", "application/json");
        if let Some(t) = &self.token {
            b = b.header("authorization", format!("Bearer {t}"));
        }
        b.body(body).map_err(|e| e.to_string())
    }

    /// Sends `req`: the answer's text; an error with the HTTP status when there was one.
    async fn send(&self, req: http::Request<Vec<u8>>) -> Result<String, (Option<u16>, String)> {
        match tokio::time::timeout(TIMEOUT, self.client.request_text(req)).await {
            Err(_) => Err((
                None,
                format!("{}: no answer within {}s", self.url, TIMEOUT.as_secs()),
            )),
            Ok(Ok(text)) => Ok(text),
            Ok(Err(kube::Error::Api(s))) => Err((
                Some(s.code),
                format!("{}: HTTP {}: {}", self.url, s.code, s.message),
            )),
            Ok(Err(e)) => Err((None, format!("{}: {e}", self.url))),
        }
    }

    /// Creates `silence`; its ID (an answer whose ID is no UUID is an error: the silence then
    /// ends on its own, unrecorded).
    pub async fn create(&self, silence: &Silence) -> Result<SilenceId, String> {
        let body = serde_json::to_vec(silence).map_err(|e| e.to_string())?;
        let text = self
            .send(self.request(http::Method::POST, "/api/v2/silences", body)?)
            .await
            .map_err(|(_, e)| e)?;
        // Alertmanager's API v2 answers `{"silenceID": "..."}`.
        #[derive(serde::Deserialize)]
        struct Created {
            #[serde(rename = "silenceID")]
            silence_id: String,
        }
        let c = serde_json::from_str::<Created>(&text)
            .map_err(|e| format!("{}: unexpected answer to the silence: {e}", self.url))?;
        SilenceId::parse(&c.silence_id).map_err(|why| {
            format!(
                "{}: the new silence's ID {:?} is {why}",
                self.url,
                super::shown(&c.silence_id)
            )
        })
    }

    /// The silence `id` as Alertmanager has it; `None` when it does not know it.
    pub async fn get(&self, id: &SilenceId) -> Result<Option<Existing>, String> {
        let path = silence_path(id)?;
        match self
            .send(self.request(http::Method::GET, &path, Vec::new())?)
            .await
        {
            Ok(text) => serde_json::from_str(&text)
                .map(Some)
                .map_err(|e| format!("{}: unexpected answer to silence {id}: {e}", self.url)),
            Err((Some(404), _)) => Ok(None),
            Err((_, e)) => Err(e),
        }
    }

    /// Expires the silence `id` (one already gone is fine).
    pub async fn expire(&self, id: &SilenceId) -> Result<(), String> {
        let path = silence_path(id)?;
        match self
            .send(self.request(http::Method::DELETE, &path, Vec::new())?)
            .await
        {
            Ok(_) | Err((Some(404), _)) => Ok(()),
            Err((_, e)) => Err(e),
        }
    }

    /// The names of the active alerts that no silence or inhibition covers, among those the
    /// `filter` matchers select.
    pub async fn active_alerts(&self, filter: &[Matcher]) -> Result<Vec<String>, String> {
        let path = alerts_path(filter);
        let text = self
            .send(self.request(http::Method::GET, &path, Vec::new())?)
            .await
            .map_err(|(_, e)| e)?;
        let alerts: Vec<Alert> = serde_json::from_str(&text)
            .map_err(|e| format!("{}: unexpected answer to the alerts: {e}", self.url))?;
        Ok(alert_names(&alerts))
    }
}

/// `/api/v2/alerts?...`: the active, unsilenced, uninhibited alerts, with one `filter`
/// parameter per matcher.
fn alerts_path(filter: &[Matcher]) -> String {
    let mut path =
        String::from("/api/v2/alerts?active=true&silenced=false&inhibited=false&unprocessed=false");
    for m in filter {
        path.push_str("&filter=");
        path.push_str(&crate::url::query_value(&m.filter_text()));
    }
    path
}

/// `/api/v2/silence/{id}`.
fn silence_path(id: &SilenceId) -> Result<String, String> {
    let seg = crate::url::segment(id.as_str())
        .ok_or_else(|| format!("silence ID `{id}` cannot be a path segment"))?;
    Ok(format!("/api/v2/silence/{seg}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_silence_s_path_is_its_uuid_and_nothing_else() {
        let id = SilenceId::parse("0b7c6f1e-aaaa-4bbb-8ccc-000000000001").unwrap();
        assert_eq!(
            silence_path(&id).unwrap(),
            "/api/v2/silence/0b7c6f1e-aaaa-4bbb-8ccc-000000000001"
        );
    }

    #[test]
    fn each_filter_matcher_stays_inside_its_query_value() {
        let m = Matcher::parse(r#"job=~"a/b?c#d%e f&g=h/../..""#).unwrap();
        let path = alerts_path(&[m.clone(), Matcher::parse("severity=critical").unwrap()]);
        let uri: http::Uri = path.parse().unwrap();
        assert_eq!(uri.path(), "/api/v2/alerts");
        // Read back as a server does: the same parameters, the filters as written.
        let pairs: Vec<(String, String)> = form_urlencoded_pairs(uri.query().unwrap());
        let filters: Vec<&str> = pairs
            .iter()
            .filter(|(k, _)| k == "filter")
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(
            filters,
            [m.filter_text().as_str(), r#"severity="critical""#]
        );
        assert_eq!(pairs.len(), 6, "{pairs:?}");
    }

    /// A query's `key=value` pairs, percent-decoded.
    fn form_urlencoded_pairs(query: &str) -> Vec<(String, String)> {
        let decode = |s: &str| {
            let mut out = Vec::new();
            let b = s.as_bytes();
            let mut i = 0;
            while i < b.len() {
                if b[i] == b'%' {
                    out.push(u8::from_str_radix(&s[i + 1..i + 3], 16).unwrap());
                    i += 3;
                } else {
                    out.push(b[i]);
                    i += 1;
                }
            }
            String::from_utf8(out).unwrap()
        };
        query
            .split('&')
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap();
                (decode(k), decode(v))
            })
            .collect()
    }
}
