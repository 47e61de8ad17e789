//! The sentinel: whether the host needs a reboot, from a file that exists or a command's exit
//! code.
//!
//! Owns reading `reboot.sentinelFile` and running `reboot.sentinelCommand` in the host's mount
//! namespace (`reboot.hostMountNamespace`), and the meaning of its exit codes
//! (`sentinelRebootExitCodes`, `sentinelNoRebootExitCodes`). A command that cannot start, is
//! killed, overruns its time or exits with any other code is an error, never a quiet "no
//! reboot": the caller leaves the flag as it was and says so. It must never write anything.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

/// Why the sentinel could not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("sentinel command `{command}`: {reason}")]
pub struct SentinelError {
    /// The command, as written.
    pub command: String,
    /// What went wrong.
    pub reason: String,
}

/// Whether the host needs a reboot: `Some(reason)` when it does.
pub trait Sentinel: Send + Sync {
    /// Checks once.
    fn check(&self) -> impl Future<Output = Result<Option<String>, SentinelError>> + Send;

    /// One phrase for the log: what is checked, and where.
    fn describe(&self) -> String {
        "a sentinel".into()
    }

    /// Takes the reboot settings of a config reloaded while the agent runs. The sentinels
    /// built from the config ([`HostSentinel`]) rebuild themselves; others keep what they are.
    fn reconfigure(&mut self, _reboot: &crate::config::Reboot) {}
}

/// A file whose existence means "reboot needed".
pub struct FileSentinel(pub PathBuf);

impl Sentinel for FileSentinel {
    async fn check(&self) -> Result<Option<String>, SentinelError> {
        // One stat of a local file: done inline rather than through `tokio::fs`, which would
        // start a blocking-pool thread (and a malloc arena with it) every check period.
        Ok(self
            .0
            .try_exists()
            .unwrap_or(false)
            .then(|| format!("sentinel file {} exists", self.0.display())))
    }
}

/// A command whose exit code says whether a reboot is needed.
pub struct CommandSentinel {
    /// The argv.
    pub argv: Vec<String>,
    /// Exit codes that mean "reboot needed".
    pub reboot_codes: Vec<i32>,
    /// Exit codes that mean "no reboot needed".
    pub no_reboot_codes: Vec<i32>,
    /// The mount namespace to run it in; `None`: the agent's own.
    pub mount_namespace: Option<PathBuf>,
    /// How long it may run before it is killed.
    pub timeout: Duration,
    /// The environment it gets: the host's PID 1's (see [`super::host::host_environment`])
    /// where it runs in the host's mount namespace; `None`: the agent's own.
    pub environ: Option<PathBuf>,
}

impl CommandSentinel {
    /// The command with the config's default meaning (0: reboot, 1: no reboot), in the agent's
    /// own namespace, for `timeout`.
    pub fn plain(argv: Vec<String>, timeout: Duration) -> CommandSentinel {
        CommandSentinel {
            argv,
            reboot_codes: vec![0],
            no_reboot_codes: vec![1],
            mount_namespace: None,
            timeout,
            environ: None,
        }
    }

    fn error(&self, reason: String) -> SentinelError {
        SentinelError {
            command: self.argv.join(" "),
            reason,
        }
    }
}

impl Sentinel for CommandSentinel {
    async fn check(&self) -> Result<Option<String>, SentinelError> {
        let (prog, args) = self
            .argv
            .split_first()
            .ok_or_else(|| self.error("is empty".into()))?;
        let mut cmd = tokio::process::Command::new(prog);
        cmd.args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true);
        if let Some(ns) = &self.mount_namespace {
            super::host::enter_mount_namespace(&mut cmd, ns).map_err(|e| self.error(e))?;
        }
        if let Some(environ) = &self.environ {
            super::host::host_environment(&mut cmd, environ);
        }
        let within = match &self.mount_namespace {
            Some(ns) => format!(" in the mount namespace {}", ns.display()),
            None => String::new(),
        };
        let mut child = cmd
            .spawn()
            .map_err(|e| self.error(format!("cannot be started{within}: {e}")))?;
        let status = match tokio::time::timeout(self.timeout, child.wait()).await {
            Ok(status) => status.map_err(|e| self.error(format!("waiting for it: {e}")))?,
            Err(_) => {
                let _ = child.kill().await;
                return Err(self.error(format!(
                    "did not finish within {:?} and was killed",
                    self.timeout
                )));
            }
        };
        let Some(code) = status.code() else {
            use std::os::unix::process::ExitStatusExt;
            return Err(self.error(format!(
                "was killed by signal {}",
                status.signal().unwrap_or_default()
            )));
        };
        if self.reboot_codes.contains(&code) {
            Ok(Some(format!(
                "sentinel command `{}` exited {code} (reboot needed)",
                self.argv.join(" ")
            )))
        } else if self.no_reboot_codes.contains(&code) {
            Ok(None)
        } else {
            Err(self.error(format!(
                "exited {code}, which means neither \"reboot needed\" \
                 (sentinelRebootExitCodes {:?}) nor \"no reboot\" (sentinelNoRebootExitCodes {:?})",
                self.reboot_codes, self.no_reboot_codes
            )))
        }
    }
}

/// The sentinel the config asks for: `reboot.sentinelCommand` when set, else `reboot.sentinelFile`.
pub enum HostSentinel {
    /// `sentinelFile`.
    File(FileSentinel),
    /// `sentinelCommand`.
    Command(CommandSentinel),
}

impl HostSentinel {
    /// The sentinel `reboot` configures. A command may run for the check period, at most a
    /// minute: a hung one must not keep the agent from its Node.
    pub fn from_config(r: &crate::config::Reboot) -> HostSentinel {
        match &r.sentinel_command {
            Some(argv) => {
                let mount_namespace = Some(&r.host_mount_namespace)
                    .filter(|p| !p.is_empty())
                    .map(PathBuf::from);
                HostSentinel::Command(CommandSentinel {
                    argv: argv.clone(),
                    reboot_codes: r.sentinel_reboot_exit_codes.clone(),
                    no_reboot_codes: r.sentinel_no_reboot_codes(),
                    // In the host's mount namespace, the host's environment too.
                    environ: mount_namespace
                        .is_some()
                        .then(|| super::host::HOST_ENVIRON.into()),
                    mount_namespace,
                    timeout: r.check_period.to_std().min(Duration::from_secs(60)),
                })
            }
            None => HostSentinel::File(FileSentinel(r.sentinel_file.clone().into())),
        }
    }
}

impl Sentinel for HostSentinel {
    async fn check(&self) -> Result<Option<String>, SentinelError> {
        match self {
            HostSentinel::File(s) => s.check().await,
            HostSentinel::Command(s) => s.check().await,
        }
    }

    fn reconfigure(&mut self, reboot: &crate::config::Reboot) {
        *self = HostSentinel::from_config(reboot);
    }

    /// One phrase for the start-up line.
    fn describe(&self) -> String {
        match self {
            HostSentinel::File(f) => format!("file {}", f.0.display()),
            HostSentinel::Command(c) => format!(
                "command `{}` (reboot on exit {:?}, none on {:?}) in {}",
                c.argv.join(" "),
                c.reboot_codes,
                c.no_reboot_codes,
                c.mount_namespace.as_deref().map_or(
                    "the agent's own mount namespace".into(),
                    |p| format!("the mount namespace {}", p.display())
                )
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Vec<String> {
        vec!["sh".into(), "-c".into(), script.into()]
    }

    #[tokio::test]
    async fn the_configured_sentinel_is_the_one_checked() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("reboot-required");
        let mut r = crate::config::Reboot {
            sentinel_file: file.display().to_string(),
            ..Default::default()
        };
        let s = HostSentinel::from_config(&r);
        assert!(matches!(s, HostSentinel::File(_)));
        assert_eq!(s.check().await, Ok(None));
        std::fs::write(&file, "").unwrap();
        assert!(s
            .check()
            .await
            .unwrap()
            .unwrap()
            .contains("reboot-required"));
        // A sentinel command replaces the file, whatever the file says; it runs in the
        // host's mount namespace unless told otherwise.
        r.sentinel_command = Some(vec!["false".into()]);
        let s = HostSentinel::from_config(&r);
        match &s {
            HostSentinel::Command(c) => {
                assert_eq!(
                    c.mount_namespace.as_deref(),
                    Some(std::path::Path::new("/proc/1/ns/mnt"))
                );
                assert_eq!(
                    (c.reboot_codes.clone(), c.no_reboot_codes.clone()),
                    (vec![0], vec![1])
                );
                // Run in the host, with the host's environment.
                assert_eq!(
                    c.environ.as_deref(),
                    Some(std::path::Path::new("/proc/1/environ"))
                );
            }
            HostSentinel::File(_) => panic!("the command is the sentinel"),
        }
        r.host_mount_namespace = String::new();
        assert_eq!(HostSentinel::from_config(&r).check().await, Ok(None));
    }

    #[tokio::test]
    async fn exit_codes_mean_what_the_config_says_and_any_other_is_an_error() {
        let t = Duration::from_secs(10);
        let s = |script: &str| CommandSentinel::plain(sh(script), t);
        assert!(s("exit 0")
            .check()
            .await
            .unwrap()
            .unwrap()
            .contains("exited 0"));
        assert_eq!(s("exit 1").check().await, Ok(None));
        // needs-restarting -r: 1 means a reboot is needed, 0 none.
        let rhel = |script: &str| CommandSentinel {
            reboot_codes: vec![1],
            no_reboot_codes: vec![0],
            ..s(script)
        };
        assert!(rhel("exit 1").check().await.unwrap().is_some());
        assert_eq!(rhel("exit 0").check().await, Ok(None));
        let e = s("exit 2").check().await.unwrap_err();
        assert!(
            e.to_string().contains("exited 2, which means neither"),
            "{e}"
        );
        let e = s("kill -9 $$").check().await.unwrap_err();
        assert!(e.reason.contains("killed by signal 9"), "{e}");
        let e = CommandSentinel::plain(vec!["/nonexistent/needs-restarting".into()], t)
            .check()
            .await
            .unwrap_err();
        assert!(
            e.reason.contains("cannot be started") && e.command.contains("/nonexistent"),
            "{e}"
        );
        let e = CommandSentinel::plain(sh("sleep 5"), Duration::from_millis(200))
            .check()
            .await
            .unwrap_err();
        assert!(e.reason.contains("killed"), "{e}");
    }

    #[tokio::test]
    async fn a_command_runs_inside_the_mount_namespace_it_is_given() {
        // Our own mount namespace, entered as the host's is: the command runs and sees the
        // same files (setns into one's own namespace needs the same privileges, so where this
        // process may not, the error must say which namespace could not be entered).
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("marker");
        std::fs::write(&marker, "").unwrap();
        let s = CommandSentinel {
            mount_namespace: Some("/proc/self/ns/mnt".into()),
            ..CommandSentinel::plain(
                sh(&format!(
                    "test -e {} && test \"$PWD\" = /",
                    marker.display()
                )),
                Duration::from_secs(10),
            )
        };
        match s.check().await {
            Ok(found) => assert!(found.is_some(), "ran elsewhere than / or without the file"),
            Err(e) => assert!(
                e.reason.contains("mount namespace /proc/self/ns/mnt"),
                "{e}"
            ),
        }
        let e = CommandSentinel {
            mount_namespace: Some("/nonexistent/ns/mnt".into()),
            ..CommandSentinel::plain(sh("exit 0"), Duration::from_secs(10))
        }
        .check()
        .await
        .unwrap_err();
        assert!(
            e.reason
                .contains("cannot open mount namespace /nonexistent/ns/mnt"),
            "{e}"
        );
    }
}
