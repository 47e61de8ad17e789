//! The agent's host: how it is rebooted ([`RebootHost`]), who it is (its boot ID, machine
//! ID and PID 1's start, read as the host's PID 1 sees them), and how a command is run there
//! (inside its mount namespace, with its environment).
//!
//! Owns the reboot methods (a command, a signal to PID 1; the simulator brings its own), the
//! files the host's identity is read from (`reboot.hostBootIdFile`, `reboot.hostMachineIdFile`,
//! `/proc/1/stat`), the host's environment a command gets (`/proc/1/environ`) and entering a
//! mount namespace with setns(2) before a command starts. It must never decide whether to
//! reboot: [`super::refusal`] does, from what this module reads.

use std::future::Future;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use super::AgentError;

/// How the host is rebooted. Command, signal, and (in the simulator) a simulated reboot.
pub trait RebootHost: Send + Sync {
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

    /// When the host's PID 1 started, in clock ticks after the kernel's boot: a new value is a
    /// new boot of the node even where the boot ID stays (nodes that share one kernel, such as
    /// kind's); an agent's restart never changes it. `None` when unknown.
    fn init_start(&self, _node: &str) -> Option<u64> {
        None
    }

    /// Takes the reboot settings of a config reloaded while the agent runs. The methods built
    /// from the config ([`HostReboot`]) rebuild themselves; others keep what they were given.
    fn reconfigure(&mut self, _reboot: &crate::config::Reboot) {}
}

/// The kernel's boot ID. Not namespaced: in a pod, it is the boot ID of the kernel the pod
/// runs on, which is not the node's where nodes are containers (kind, k3d, minikube's docker
/// driver, systemd-nspawn): there every node reads the same one, whatever its own boots.
pub const KERNEL_BOOT_ID: &str = "/proc/sys/kernel/random/boot_id";

/// The host's boot ID as its PID 1 sees it (the agent runs with hostPID): the ID the kubelet
/// reports, on a host and on a node that is a container alike. The default
/// `reboot.hostBootIdFile`.
pub const HOST_BOOT_ID: &str = "/proc/1/root/proc/sys/kernel/random/boot_id";

/// The host's PID 1, whose start time tells one boot of a node from the next.
pub const HOST_INIT_STAT: &str = "/proc/1/stat";

/// The environment of the host's PID 1, which the commands run in the host get.
pub const HOST_ENVIRON: &str = "/proc/1/environ";

/// The `PATH` a command gets when the host's PID 1 has none (systemd's own default).
pub const HOST_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The first line of `path`, trimmed; `None` when it cannot be read or is empty.
fn first_line(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let id = text.lines().next()?.trim();
    (!id.is_empty()).then(|| id.to_string())
}

/// The start time (field 22, clock ticks after boot) of the process whose `/proc/PID/stat`
/// text is `stat`: read after the last `)`, as the command name may hold spaces and brackets.
pub fn start_time(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    // Fields from the third (state) on: the start time is the 22nd field, the 20th here.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// The start time of the host's PID 1 from `stat` (its `/proc/1/stat`), when PID 1 is the
/// host's and not the agent's own container's: without hostPID, PID 1 is the agent itself or
/// its pod's pause process, whose start changes when the pod restarts and would be taken for
/// a new boot of the host.
fn host_init_start(stat: &Path) -> Option<u64> {
    if std::process::id() == 1 {
        return None;
    }
    let comm = stat.with_file_name("comm");
    if first_line(&comm).is_some_and(|c| c == "pause") {
        return None;
    }
    start_time(&std::fs::read_to_string(stat).ok()?)
}

/// Gives `cmd` the host's environment in place of the agent's: the variables of the host's
/// PID 1 (`environ`, its `/proc/1/environ`), and [`HOST_PATH`] where it has no `PATH`. The
/// agent's own are the container's (`DBUS_SYSTEM_BUS_ADDRESS` naming the bus where the pod
/// mounts it, the API's address, the node's name) and mean nothing on the host: a
/// `systemctl reboot` that cannot reach the system bus at the pod's path goes around logind,
/// so neither its inhibitors nor the kubelet's graceful shutdown see the reboot. Unreadable,
/// the host's environment is taken as empty.
pub fn host_environment(cmd: &mut tokio::process::Command, environ: &Path) {
    cmd.env_clear();
    let vars = std::fs::read(environ).unwrap_or_default();
    let mut path = false;
    for var in vars.split(|b| *b == 0) {
        let text = String::from_utf8_lossy(var);
        let Some((k, v)) = text.split_once('=') else {
            continue;
        };
        if k.is_empty() {
            continue;
        }
        path |= k == "PATH";
        cmd.env(k, v);
    }
    if !path {
        cmd.env("PATH", HOST_PATH);
    }
}

/// Reboots by running an argv (by default `nsenter` into PID 1's mount namespace,
/// `systemctl reboot`), with the host's environment read from `environ` (see
/// [`host_environment`]).
pub struct CommandReboot {
    /// The argv.
    pub argv: Vec<String>,
    /// The host's environment (its PID 1's, [`HOST_ENVIRON`]).
    pub environ: PathBuf,
}

impl CommandReboot {
    /// `argv`, run with the host's PID 1's environment.
    pub fn new(argv: Vec<String>) -> CommandReboot {
        CommandReboot {
            argv,
            environ: HOST_ENVIRON.into(),
        }
    }
}

impl RebootHost for CommandReboot {
    async fn reboot(&self, node: &str, _token: &str) -> Result<(), AgentError> {
        let err = |reason: String| AgentError::Reboot {
            node: node.into(),
            reason,
        };
        let (prog, args) = self
            .argv
            .split_first()
            .ok_or_else(|| err("reboot.command is empty".into()))?;
        let mut cmd = tokio::process::Command::new(prog);
        cmd.args(args);
        host_environment(&mut cmd, &self.environ);
        let status = cmd
            .status()
            .await
            .map_err(|e| err(format!("running `{}`: {e}", self.argv.join(" "))))?;
        if status.success() {
            Ok(())
        } else {
            Err(err(format!(
                "`{}` exited with {status}",
                self.argv.join(" ")
            )))
        }
    }

    fn boot_id(&self, _node: &str) -> Option<String> {
        first_line(Path::new(HOST_BOOT_ID))
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

impl RebootHost for SignalReboot {
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
        first_line(Path::new(HOST_BOOT_ID))
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
    /// The host's PID 1's `stat` ([`HOST_INIT_STAT`]); `None`: not read.
    pub init_stat_file: Option<PathBuf>,
}

impl HostReboot {
    /// The method and host files `reboot` configures.
    pub fn from_config(r: &crate::config::Reboot) -> HostReboot {
        let method = match r.method {
            crate::config::RebootMethod::Command => {
                HostMethod::Command(CommandReboot::new(r.command.clone()))
            }
            crate::config::RebootMethod::Signal => HostMethod::Signal(SignalReboot::pid1(r.signal)),
        };
        HostReboot {
            method,
            boot_id_file: r.host_boot_id_file.clone().into(),
            machine_id_file: Some(&r.host_machine_id_file)
                .filter(|p| !p.is_empty())
                .map(PathBuf::from),
            init_stat_file: Some(HOST_INIT_STAT.into()),
        }
    }

    /// One phrase for the start-up line: the method and where the host's identity is read.
    pub fn describe(&self) -> String {
        let method = match &self.method {
            HostMethod::Command(c) => format!(
                "command `{}` with the host's environment ({})",
                c.argv.join(" "),
                c.environ.display()
            ),
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

impl RebootHost for HostReboot {
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

    fn init_start(&self, _node: &str) -> Option<u64> {
        host_init_start(self.init_stat_file.as_deref()?)
    }

    fn reconfigure(&mut self, reboot: &crate::config::Reboot) {
        let init = self.init_stat_file.take();
        *self = HostReboot {
            init_stat_file: init,
            ..HostReboot::from_config(reboot)
        };
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
        let m = CommandReboot::new(argv(&format!("echo asked > {}", out.display())));
        m.reboot("n1", "t1").await.unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "asked\n");
        let e = CommandReboot::new(argv("exit 3"))
            .reboot("n1", "t1")
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("n1") && e.contains("exit 3") && e.contains("exit status: 3"),
            "{e}"
        );
        let e = CommandReboot::new(vec!["/nonexistent/reboot".into()])
            .reboot("n1", "t1")
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("/nonexistent/reboot"), "{e}");
        assert!(CommandReboot::new(vec![]).reboot("n1", "t1").await.is_err());
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
            HostMethod::Command(CommandReboot { argv, environ }) if *argv == r.command && environ == Path::new(HOST_ENVIRON)
        ));
        // PID 1's view: in a pod on a node that is a container, the kernel's own is not the
        // node's.
        assert_eq!(h.boot_id_file, Path::new(HOST_BOOT_ID));
        assert_eq!(h.init_stat_file.as_deref(), Some(Path::new(HOST_INIT_STAT)));
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
            init_stat_file: None,
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
        assert_eq!(gone.init_start("n1"), None);
    }

    #[tokio::test]
    async fn a_command_runs_with_the_hosts_environment_not_the_agents() {
        let dir = tempfile::tempdir().unwrap();
        let (environ, out) = (dir.path().join("environ"), dir.path().join("env"));
        // The host's PID 1 has no PATH of its own here: the command gets systemd's default.
        std::fs::write(&environ, b"LANG=C.UTF-8\0container=test\0=junk\0noequals\0").unwrap();
        let m = CommandReboot {
            argv: vec![
                "/bin/sh".into(),
                "-c".into(),
                format!("env > {}", out.display()),
            ],
            environ: environ.clone(),
        };
        m.reboot("n1", "t1").await.unwrap();
        let env = std::fs::read_to_string(&out).unwrap();
        let vars: std::collections::BTreeSet<&str> = env
            .lines()
            .filter_map(|l| l.split_once('=').map(|(k, _)| k))
            .collect();
        assert!(
            env.contains("LANG=C.UTF-8") && env.contains("container=test"),
            "{env}"
        );
        assert!(env.contains(&format!("PATH={HOST_PATH}")), "{env}");
        // Nothing of the agent's own (HOME is every test process's).
        assert!(std::env::var_os("HOME").is_some());
        assert!(!vars.contains("HOME"), "{env}");
        // An unreadable environment is an empty one: the agent's is still not passed on.
        let m = CommandReboot {
            environ: dir.path().join("absent"),
            ..m
        };
        m.reboot("n1", "t1").await.unwrap();
        let env = std::fs::read_to_string(&out).unwrap();
        assert!(!env.contains("HOME=") && env.contains("PATH="), "{env}");
    }

    #[test]
    fn pid_1s_start_is_read_past_a_command_name_with_spaces_and_brackets() {
        // /proc/PID/stat of systemd: field 22 is the start time.
        let stat = "1 (systemd) S 0 1 1 0 -1 4194560 4593 1166 51 4 12 34 0 3 20 0 1 0 57 \
                    171118592 3018 18446744073709551615 1 1 0 0 0 0 671173123 4096 1260";
        assert_eq!(start_time(stat), Some(57));
        let odd = "1 (my (odd) init) S 0 1 1 0 -1 4194560 1 1 1 1 1 1 1 1 20 0 1 0 4242 1 1";
        assert_eq!(start_time(odd), Some(4242));
        assert_eq!(start_time("1 (short) S 0"), None);
        assert_eq!(start_time("garbage"), None);
        // This machine's PID 1, where it is not this process.
        if std::process::id() != 1 && Path::new(HOST_INIT_STAT).exists() {
            let read = std::fs::read_to_string(HOST_INIT_STAT).unwrap();
            assert!(start_time(&read).is_some(), "{read}");
        }
    }

    #[test]
    fn pid_1_of_the_agents_own_pod_is_never_taken_for_the_hosts() {
        let dir = tempfile::tempdir().unwrap();
        let stat = dir.path().join("stat");
        std::fs::write(
            &stat,
            "1 (pause) S 0 1 1 0 -1 4194560 1 1 1 1 1 1 1 1 20 0 1 0 99 1 1",
        )
        .unwrap();
        std::fs::write(dir.path().join("comm"), "pause\n").unwrap();
        assert_eq!(host_init_start(&stat), None);
        std::fs::write(dir.path().join("comm"), "systemd\n").unwrap();
        assert_eq!(host_init_start(&stat), Some(99));
    }

    #[test]
    fn a_reloaded_config_rebuilds_the_method_and_its_host_files() {
        let mut h = HostReboot::from_config(&crate::config::Reboot::default());
        let r = crate::config::Reboot {
            method: crate::config::RebootMethod::Signal,
            host_boot_id_file: "/elsewhere/boot_id".into(),
            ..Default::default()
        };
        h.reconfigure(&r);
        assert!(matches!(
            h.method,
            HostMethod::Signal(SignalReboot { pid: 1, .. })
        ));
        assert_eq!(h.boot_id_file, Path::new("/elsewhere/boot_id"));
        assert_eq!(h.init_stat_file.as_deref(), Some(Path::new(HOST_INIT_STAT)));
    }
}
