//! `rollboot status --watch` on standard output: a frame redrawn at each change on a terminal,
//! one line per change elsewhere, one JSON object per line with `-o json`, until Ctrl-C (or,
//! with `--until-done`, until nothing moves without an operator).
//!
//! Owns the terminal: whether standard output is one, clearing it before each frame, writing
//! and flushing. What a frame or a line says is the library's ([`Progress`], [`Board`]), and
//! the reads are its watches ([`rollboot::status::watch::follow`]); this must never poll.

use std::io::{IsTerminal, Write};
use std::ops::ControlFlow;
use std::process::ExitCode;

use chrono::Utc;
use rollboot::config::Config;
use rollboot::render::render;
use rollboot::status::progress::{Board, Progress};

use super::{cluster_error, Output, EXIT_NODE_FAILED};

/// Moves the cursor home and clears the screen (ANSI), before each frame.
const CLEAR: &str = "\x1b[H\x1b[2J";

/// Follows the rollout on `kube_config`'s cluster with `config`'s Leases.
pub(super) async fn status(
    config: Config,
    mut kube_config: kube::Config,
    output: Output,
    until_done: bool,
) -> anyhow::Result<ExitCode> {
    // A watch waits minutes for its next event: not a one-shot read's 30 s (kube's own limit,
    // a little over the watcher's 290 s).
    kube_config.read_timeout = Some(std::time::Duration::from_secs(295));
    let server = kube_config.cluster_url.to_string();
    let client = match kube::Client::try_from(kube_config) {
        Ok(c) => c,
        Err(e) => {
            return Ok(cluster_error(format!(
                "cannot make a client for the API server {server}: {e}"
            )))
        }
    };
    let terminal = output == Output::Text && std::io::stdout().is_terminal();
    let mut progress = Progress::new();
    let mut last: Option<Board> = None;
    let mut written: std::io::Result<()> = Ok(());
    let follow = rollboot::status::watch::follow(&client, &server, &config, |snap| {
        let board = progress.observe(&config, snap, Utc::now());
        let show = !board.changes.is_empty() || !last.as_ref().is_some_and(|l| l.same_as(&board));
        if show {
            let text = match output {
                Output::Json => board.json_line(),
                Output::Text if terminal => {
                    format!("{CLEAR}{}", render(&board, rollboot::render::Output::Text))
                }
                Output::Text => board.lines(),
            };
            let mut out = std::io::stdout().lock();
            written = out.write_all(text.as_bytes()).and_then(|()| out.flush());
        }
        let stop = written.is_err() || (until_done && board.finished);
        last = Some(board);
        if stop {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    });
    let followed = tokio::select! {
        r = follow => r,
        _ = tokio::signal::ctrl_c() => Ok(()),
    };
    if let Err(e) = followed {
        return Ok(cluster_error(e));
    }
    written?;
    let failed = last.is_some_and(|b| b.finished && !b.failed.is_empty());
    Ok(if until_done && failed {
        ExitCode::from(EXIT_NODE_FAILED)
    } else {
        ExitCode::SUCCESS
    })
}
