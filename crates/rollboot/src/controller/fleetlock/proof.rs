//! The proof that a forwarded FleetLock request comes from another controller replica.
//!
//! A standby forwards a host's request to the leader with the host's address in a header; that
//! header is worth only what proves the sender is a replica, or any pod could claim any host's
//! address. The proof is a token of the controller's ServiceAccount with an audience of its own
//! ([`crate::config::FleetLock::FORWARD_AUDIENCE`], `fleetlock.forwardTokenFile`: a projected
//! token mounted in the controller's pods only). The leader checks a presented token with a
//! TokenReview for that audience and takes it only when it names the same user as the
//! leader's own token: the controller's account, whoever else can reach the port. A token for
//! that audience is refused by the API server for anything else, so one read off the wire
//! does not open the API.
//!
//! Owns reading the token file (read again on every use: the kubelet rotates it) and the
//! reviews, remembered for a short while. It must never accept a forward without a review
//! that said yes, nor log a token.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use kube::api::{Api, PostParams};
use kube::Client;

use crate::config::FleetLock;

/// How long a token a review accepted is taken again without a new review: a host polls, and
/// a review per forwarded poll is an API request for nothing. Far below a projected token's
/// shortest lifetime (10 minutes).
const REMEMBERED_FOR: Duration = Duration::from_secs(60);

/// How many accepted tokens are remembered at most (there is one per replica, rotated hourly).
const REMEMBERED_AT_MOST: usize = 16;

/// Proves this replica to the leader, and checks the proof of others.
pub(super) struct Proof {
    file: PathBuf,
    client: Client,
    /// The user this replica's own token names, once a review said it.
    own: tokio::sync::OnceCell<String>,
    /// Accepted tokens, by their SHA-256, with when they were reviewed.
    accepted: Mutex<HashMap<Vec<u8>, Instant>>,
}

fn digest(token: &str) -> Vec<u8> {
    ring::digest::digest(&ring::digest::SHA256, token.as_bytes())
        .as_ref()
        .to_vec()
}

impl Proof {
    pub(super) fn new(client: Client, file: PathBuf) -> Proof {
        Proof {
            file,
            client,
            own: tokio::sync::OnceCell::new(),
            accepted: Mutex::default(),
        }
    }

    /// This replica's token, as the file says now.
    pub(super) fn token(&self) -> Result<String, String> {
        let text = std::fs::read_to_string(&self.file).map_err(|e| {
            format!(
                "the replica's forward token {} (fleetlock.forwardTokenFile) cannot be read: {e}",
                self.file.display()
            )
        })?;
        let t = text.trim();
        if t.is_empty() {
            return Err(format!(
                "the replica's forward token {} (fleetlock.forwardTokenFile) is empty",
                self.file.display()
            ));
        }
        Ok(t.to_string())
    }

    /// The user a review says `token` is, for the forward audience; `Err` says why none.
    async fn review(&self, token: &str) -> Result<String, String> {
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let asked = TokenReview {
            spec: TokenReviewSpec {
                token: Some(token.to_string()),
                audiences: Some(vec![FleetLock::FORWARD_AUDIENCE.to_string()]),
            },
            ..TokenReview::default()
        };
        let r = api
            .create(&PostParams::default(), &asked)
            .await
            .map_err(|e| format!("the TokenReview could not be made: {e}"))?;
        let status = r.status.unwrap_or_default();
        if status.authenticated != Some(true) {
            return Err(format!(
                "the token was not authenticated{}",
                status
                    .error
                    .map(|e| format!(": {}", e.chars().take(200).collect::<String>()))
                    .unwrap_or_default()
            ));
        }
        status
            .user
            .and_then(|u| u.username)
            .filter(|u| !u.is_empty())
            .ok_or_else(|| "the review named no user".to_string())
    }

    /// `Ok` when `presented` is a token of the same user as this replica's own.
    pub(super) async fn check(&self, presented: &str) -> Result<(), String> {
        let key = digest(presented);
        {
            let mut seen = self.accepted.lock().expect("accepted");
            seen.retain(|_, at| at.elapsed() < REMEMBERED_FOR);
            if seen.contains_key(&key) {
                return Ok(());
            }
        }
        let own = self
            .own
            .get_or_try_init(|| async {
                let mine = self.token()?;
                self.review(&mine)
                    .await
                    .map_err(|e| format!("this replica's own forward token: {e}"))
            })
            .await?;
        let theirs = self.review(presented).await?;
        if theirs != *own {
            return Err(format!(
                "the token is `{}`'s, not the controller's (`{own}`)",
                theirs.chars().take(200).collect::<String>()
            ));
        }
        let mut seen = self.accepted.lock().expect("accepted");
        if seen.len() >= REMEMBERED_AT_MOST {
            seen.clear();
        }
        seen.insert(key, Instant::now());
        Ok(())
    }
}
