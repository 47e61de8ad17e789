//! The agent's host: how it is rebooted ([`RebootMethod`]), who it is (its boot ID and machine
//! ID, read on the host itself), and how a command is run inside its mount namespace.
//!
//! Owns the reboot methods (a command, a signal to PID 1; the simulator brings its own), the
//! files the host's identity is read from (`reboot.hostBootIdFile`, `reboot.hostMachineIdFile`)
//! and entering a mount namespace with setns(2) before a command starts. It must never decide
//! whether to reboot: [`super::refusal`] does, from what this module reads.

use std::future::Future;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use super::AgentError;

/// How the host is rebooted. Command, signal, and (in the simulator) a simulated reboot.
pub trait RebootMethod: Send + Sync {
    /// Reboots the host of `node`, acting on `token`. Returns once the reboot is under way.
    fn reboot(
        &self,
        node: &str,
        token: &str,
    ) -> impl Future<Output = Result<(), AgentError>> + Send;

    /// The host's current boot ID (what the kubelet reports as `status.nodeInfo.bootID`), read
    /// from the host itself rather than from the Node, which the kubelet may not have updated
    /// yet after a reboot; `None` when it cannot be read.
    fn boot_id(&self, node: &str) -> Option<String>;

    /// The host's machine ID (what the kubelet reports as `status.nodeInfo.machineID`), read
    /// from the host itself; `None` when unknown (then it is not compared).
    fn machine_id(&self, _node: &str) -> Option<String> {
        None
    }
}

/// The kernel's boot ID, which the kubelet reports as the node's bootID. Not namespaced: a
/// container reads its host's.
pub const KERNEL_BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// The first line of `path`, trimmed; `None` when it cannot be read or is empty.
fn first_line(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let id = text.lines().next()?.trim();
    (!id.is_empty()).then(|| id.to_string())
}

/// Reboots by running an argv (by default `nsenter` into PID 1's mount namespace, `systemctl reboot`).
pub struct CommandReboot(pub Vec<String>);

impl RebootMethod for CommandReboot {
    async fn reboot(&self, node: &str, _token: &str) -> Result<(), AgentError> {
        let err = |reason: String| AgentError::Reboot {
            node: node.into(),
            reason,
        };
        let (prog, args) = self
            .0
            .split_first()
            .ok_or_else(|| err("reboot.command is empty".into()))?;
        let status = tokio::process::Command::new(prog)
            .args(args)
            .status()
            .await
            .map_err(|e| err(format!("running `{}`: {e}", self.0.join(" "))))?;
        if status.success() {
            Ok(())
        } else {
            Err(err(format!("`{}` exited with {status}", self.0.join(" "))))
        }
    }

    fn boot_id(&self, _node: &str) -> Option<String> {
        first_line(Path::new(KERNEL_BOOT_ID))
    }
}

/// Reboots by sending a signal to PID 1 (39, SIGRTMIN+5, is systemd's "reboot").
#[derive(Debug, PartialEq, Eq)]
pub struct SignalReboot {
    /// The signal number.
    pub signal: i32,
    /// The process signalled: 1 on a host (the agent runs with hostPID); another in tests.
    pub pid: i32,
}

impl SignalReboot {
    /// `signal` to PID 1.
    pub fn pid1(signal: i32) -> SignalReboot {
        SignalReboot { signal, pid: 1 }
    }
}

impl RebootMethod for SignalReboot {
    async fn reboot(&self, node: &str, _token: &str) -> Result<(), AgentError> {
        // kill(2) directly: the agent image need not carry a `kill` binary, and the error is
        // the kernel's (EPERM without the capability, ESRCH without hostPID).
        // SAFETY: kill has no memory-safety preconditions.
        let r = unsafe { libc::kill(self.pid, self.signal) };
        if r == 0 {
            Ok(())
        } else {
            Err(AgentError::Reboot {
                node: node.into(),
                reason: format!(
                    "sending signal {} to PID {}: {}",
                    self.signal,
                    self.pid,
                    std::io::Error::last_os_error()
                ),
            })
        }
    }

    fn boot_id(&self, _node: &str) -> Option<String> {
        first_line(Path::new(KERNEL_BOOT_ID))
    }
}

/// How the config reboots the host (`reboot.method`).
pub enum HostMethod {
    /// `method: command`.
    Command(CommandReboot),
    /// `method: signal`.
    Signal(SignalReboot),
}

/// The host reboot method the config asks for, with the files the host's identity is read
/// from, chosen at start-up.
pub struct HostReboot {
    /// How it reboots.
    pub method: HostMethod,
    /// `reboot.hostBootIdFile`.
    pub boot_id_file: PathBuf,
    /// `reboot.hostMachineIdFile`; `None` when empty (not compared).
    pub machine_id_file: Option<PathBuf>,
}

impl HostReboot {
    /// The method and host files `reboot` configures.
    pub fn from_config(r: &crate::config::Reboot) -> HostReboot {
        let method = match r.method {
            crate::config::RebootMethod::Command => {
                HostMethod::Command(CommandReboot(r.command.clone()))
            }
            crate::config::RebootMethod::Signal => HostMethod::Signal(SignalReboot::pid1(r.signal)),
        };
        HostReboot {
            method,
            boot_id_file: r.host_boot_id_file.clone().into(),
            machine_id_file: Some(&r.host_machine_id_file)
                .filter(|p| !p.is_empty())
                .map(PathBuf::from),
        }
    }

    /// One phrase for the start-up line: the method and where the host's identity is read.
    pub fn describe(&self) -> String {
        let method = match &self.method {
            HostMethod::Command(c) => format!("command `{}`", c.0.join(" ")),
            HostMethod::Signal(s) => format!("signal {} to PID {}", s.signal, s.pid),
        };
        format!(
            "{method}; host boot ID from {}, machine ID from {}",
            self.boot_id_file.display(),
            self.machine_id_file
                .as_deref()
                .map_or("nowhere (not compared)".into(), |p| p.display().to_string())
        )
    }
}

impl RebootMethod for HostReboot {
    async fn reboot(&self, node: &str, token: &str) -> Result<(), AgentError> {
        match &self.method {
            HostMethod::Command(m) => m.reboot(node, token).await,
            HostMethod::Signal(m) => m.reboot(node, token).await,
        }
    }

    fn boot_id(&self, _node: &str) -> Option<String> {
        first_line(&self.boot_id_file)
    }

    fn machine_id(&self, _node: &str) -> Option<String> {
        first_line(self.machine_id_file.as_deref()?)
    }
}

/// Makes `cmd` start inside the mount namespace at `ns` (a `/proc/PID/ns/mnt` file), as
/// `nsenter -m` does: the namespace is opened here, and entered with setns(2) in the child,
/// between fork and exec, so the program is looked up in that namespace's file tree. An error
/// names the namespace file and why it cannot be opened.
pub fn enter_mount_namespace(cmd: &mut tokio::process::Command, ns: &Path) -> Result<(), String> {
    let file = std::fs::File::open(ns)
        .map_err(|e| format!("cannot open mount namespace {}: {e}", ns.display()))?;
    let fd = file.as_raw_fd();
    // SAFETY: the closure runs in the forked child before exec and calls only setns(2) and
    // chdir(2), which are async-signal-safe; `file` stays open in the parent (moved into the
    // closure, which `cmd` keeps) until the command is spawned, so `fd` is valid in the child.
    unsafe {
        cmd.pre_exec(move || {
            let _keep = &file;
            if libc::setns(fd, libc::CLONE_NEWNS) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::chdir(c"/".as_ptr()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_command_method_runs_the_argv_and_reports_its_failure() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("rebooted");
        let argv = |script: &str| -> Vec<String> {
            vec!["sh".into(), "-c".into(), script.into(), "sh".into()]
        };
        let m = CommandReboot(argv(&format!("echo asked > {}", out.display())));
        m.reboot("n1", "t1").await.unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "asked\n");
        let e = CommandReboot(argv("exit 3"))
            .reboot("n1", "t1")
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("n1") && e.contains("exit 3") && e.contains("exit status: 3"),
            "{e}"
        );
        let e = CommandReboot(vec!["/nonexistent/reboot".into()])
            .reboot("n1", "t1")
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/reboot"), "{e}");
        assert!(CommandReboot(vec![]).reboot("n1", "t1").await.is_err());
    }

    #[tokio::test]
    async fn the_signal_method_signals_the_process() {
        use std::os::unix::process::ExitStatusExt;
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let m = SignalReboot {
            signal: libc::SIGTERM,
            pid: child.id() as i32,
        };
        m.reboot("n1", "t1").await.unwrap();
        assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGTERM));
        // The child is reaped: its PID names no process now.
        let e = m.reboot("n1", "t1").await.unwrap_err().to_string();
        assert!(
            e.contains(&format!("signal 15 to PID {}", child.id())),
            "{e}"
        );
    }

    #[test]
    fn the_configured_reboot_method_and_host_files_are_the_ones_used() {
        let mut r = crate::config::Reboot::default();
        let h = HostReboot::from_config(&r);
        assert!(matches!(
            &h.method,
            HostMethod::Command(CommandReboot(argv)) if *argv == r.command
        ));
        assert_eq!(h.boot_id_file, Path::new(KERNEL_BOOT_ID));
        assert_eq!(
            h.machine_id_file.as_deref(),
            Some(Path::new("/proc/1/root/etc/machine-id"))
        );
        r.method = crate::config::RebootMethod::Signal;
        r.host_machine_id_file = String::new();
        let h = HostReboot::from_config(&r);
        assert!(matches!(
            h.method,
            HostMethod::Signal(SignalReboot { signal: 39, pid: 1 })
        ));
        assert_eq!(h.machine_id_file, None);
        assert_eq!(h.machine_id("n1"), None);
    }

    #[test]
    fn the_host_identity_is_read_from_the_configured_files() {
        let dir = tempfile::tempdir().unwrap();
        let (boot, machine) = (dir.path().join("boot_id"), dir.path().join("machine-id"));
        std::fs::write(&boot, "0b7c6f1e-aaaa-4bbb-8ccc-000000000001\n").unwrap();
        std::fs::write(&machine, "5f0e1d2c3b4a59687766554433221100\n").unwrap();
        let h = HostReboot {
            method: HostMethod::Signal(SignalReboot::pid1(39)),
            boot_id_file: boot.clone(),
            machine_id_file: Some(machine),
        };
        assert_eq!(
            h.boot_id("n1").as_deref(),
            Some("0b7c6f1e-aaaa-4bbb-8ccc-000000000001")
        );
        assert_eq!(
            h.machine_id("n1").as_deref(),
            Some("5f0e1d2c3b4a59687766554433221100")
        );
        let gone = HostReboot {
            boot_id_file: dir.path().join("absent"),
            ..h
        };
        assert_eq!(gone.boot_id("n1"), None);
        // The kernel's own, where it exists (Linux).
        if Path::new(KERNEL_BOOT_ID).exists() {
            assert!(CommandReboot(vec![]).boot_id("n1").is_some());
        }
    }
}
