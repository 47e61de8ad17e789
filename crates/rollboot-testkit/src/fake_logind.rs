//! A fake systemd-logind on a private message bus, for the tests of the agent's shutdown
//! inhibitor (`agent_logind.rs`, and the real-control-plane suite's shutdown cycle).
//!
//! [`PrivateBus`] is Debian's `dbus-daemon` with a config of ours on a socket in a temp dir;
//! [`FakeLogind`] serves `org.freedesktop.login1`'s Manager on it: it hands out one end of a
//! socket pair for each `Inhibit` and keeps the other, so a test sees the agent's lock closed
//! when its end reads end-of-file, and it sends `PrepareForShutdown` as logind does. It lists a
//! kubelet's shutdown inhibitor when a test says one is held, and its `InhibitDelayMaxUSec` can
//! change, as a reloaded logind's does.

use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;

pub const DBUS_DAEMON: &str = "/usr/bin/dbus-daemon";

/// A private message bus: `dbus-daemon` on a socket in a temp dir, killed when dropped.
pub struct PrivateBus {
    child: std::process::Child,
    pub address: String,
    dir: tempfile::TempDir,
}

impl PrivateBus {
    /// Starts one, or `None` (said in one line) where `dbus-daemon` is not installed.
    pub fn start() -> Option<PrivateBus> {
        if !Path::new(DBUS_DAEMON).exists() {
            println!("skipped: {DBUS_DAEMON} is not installed (Debian package dbus-daemon)");
            return None;
        }
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("system_bus_socket");
        let child = Self::daemon(dir.path());
        Some(PrivateBus {
            child,
            address: format!("unix:path={}", socket.display()),
            dir,
        })
    }

    /// Stops the daemon (every connection on it ends) and starts a new one at the same
    /// address, as a restarted system bus.
    pub fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(self.dir.path().join("system_bus_socket"));
        self.child = Self::daemon(self.dir.path());
    }

    /// `dbus-daemon` listening on `dir/system_bus_socket`, once it listens.
    fn daemon(dir: &Path) -> std::process::Child {
        let socket = dir.join("system_bus_socket");
        let config = dir.join("bus.conf");
        std::fs::write(
            &config,
            format!(
                r#"<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>custom</type>
  <listen>unix:path={}</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/>
    <allow own="*"/>
    <allow send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
  </policy>
</busconfig>
"#,
                socket.display()
            ),
        )
        .unwrap();
        let mut child = std::process::Command::new(DBUS_DAEMON)
            .arg(format!("--config-file={}", config.display()))
            .args(["--nofork", "--nopidfile", "--print-address"])
            .stdout(std::process::Stdio::piped())
            // As root it says it cannot raise its fd limit, every time: noise.
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // It prints its address once it listens.
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        assert!(line.starts_with("unix:"), "dbus-daemon printed {line:?}");
        child
    }
}

impl Drop for PrivateBus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One `Inhibit` call as the fake logind got it, with the fake's end of the lock.
pub struct Inhibited {
    pub args: [String; 4],
    pub ours: OwnedFd,
}

/// A fake `org.freedesktop.login1.Manager`.
pub struct FakeManager {
    /// `InhibitDelayMaxUSec`, which a test may change (logind's config reloaded).
    delay_max_usec: Arc<AtomicU64>,
    /// A kubelet holds a delay inhibitor for shutdown (its graceful node shutdown is on).
    kubelet: Arc<AtomicBool>,
    inhibits: mpsc::UnboundedSender<Inhibited>,
}

#[zbus::interface(name = "org.freedesktop.login1.Manager")]
impl FakeManager {
    fn inhibit(
        &self,
        what: &str,
        who: &str,
        why: &str,
        mode: &str,
    ) -> zbus::fdo::Result<zbus::OwnedFd> {
        let (theirs, ours) = std::os::unix::net::UnixStream::pair()
            .map_err(|e| zbus::fdo::Error::Failed(e.to_string()))?;
        let _ = self.inhibits.send(Inhibited {
            args: [what.into(), who.into(), why.into(), mode.into()],
            ours: ours.into(),
        });
        Ok(OwnedFd::from(theirs).into())
    }

    /// The kubelet's lock, when it holds one (the agent's own are not listed: the agent only
    /// looks for others').
    #[allow(clippy::type_complexity)]
    fn list_inhibitors(&self) -> Vec<(String, String, String, String, u32, u32)> {
        if self.kubelet.load(Ordering::Relaxed) {
            vec![(
                "shutdown".into(),
                "kubelet".into(),
                "Kubelet needs time to handle node shutdown".into(),
                "delay".into(),
                0,
                4242,
            )]
        } else {
            Vec::new()
        }
    }

    #[zbus(property, name = "InhibitDelayMaxUSec")]
    fn inhibit_delay_max_usec(&self) -> u64 {
        self.delay_max_usec.load(Ordering::Relaxed)
    }

    #[zbus(property, name = "PreparingForShutdown")]
    fn preparing_for_shutdown(&self) -> bool {
        false
    }
}

/// The fake logind, serving on a private bus.
pub struct FakeLogind {
    pub conn: zbus::Connection,
    pub inhibits: mpsc::UnboundedReceiver<Inhibited>,
    delay_max_usec: Arc<AtomicU64>,
    kubelet: Arc<AtomicBool>,
}

impl FakeLogind {
    pub async fn serve(bus: &PrivateBus, delay_max: Duration) -> FakeLogind {
        let (tx, rx) = mpsc::unbounded_channel();
        let delay_max_usec = Arc::new(AtomicU64::new(delay_max.as_micros() as u64));
        let kubelet = Arc::new(AtomicBool::new(false));
        let fake = FakeManager {
            delay_max_usec: delay_max_usec.clone(),
            kubelet: kubelet.clone(),
            inhibits: tx,
        };
        let conn = zbus::connection::Builder::address(bus.address.as_str())
            .name("org.freedesktop.login1")
            .serve_at("/org/freedesktop/login1", fake)
            .build()
            .await
            .unwrap();
        FakeLogind {
            conn,
            inhibits: rx,
            delay_max_usec,
            kubelet,
        }
    }

    /// A kubelet takes (or lets go) its delay inhibitor for shutdown.
    pub fn kubelet_inhibits(&self, holds: bool) {
        self.kubelet.store(holds, Ordering::Relaxed);
    }

    /// logind's `InhibitDelayMaxUSec` changes (its config reloaded).
    pub fn set_delay_max(&self, delay_max: Duration) {
        self.delay_max_usec
            .store(delay_max.as_micros() as u64, Ordering::Relaxed);
    }

    /// Sends `PrepareForShutdown(start)`, as logind does to every listener.
    pub async fn prepare_for_shutdown(&self, start: bool) {
        emit(&self.conn, start).await;
    }

    /// The next lock the agent takes (within 10 s).
    pub async fn next_lock(&mut self) -> Inhibited {
        self.lock_within(Duration::from_secs(10))
            .await
            .expect("the agent took no inhibitor within 10 s")
    }

    /// The next lock the agent takes, if it takes one within `within`.
    pub async fn lock_within(&mut self, within: Duration) -> Option<Inhibited> {
        tokio::time::timeout(within, self.inhibits.recv())
            .await
            .ok()
            .flatten()
    }
}

pub async fn emit(conn: &zbus::Connection, start: bool) {
    conn.emit_signal(
        None::<&str>,
        "/org/freedesktop/login1",
        "org.freedesktop.login1.Manager",
        "PrepareForShutdown",
        &(start,),
    )
    .await
    .unwrap();
}

/// Whether the agent's end of `lock` is closed: our end reads end-of-file (waiting at most
/// `within`).
pub async fn closed_within(lock: &Inhibited, within: Duration) -> bool {
    let ours = std::os::unix::net::UnixStream::from(lock.ours.try_clone().unwrap());
    ours.set_nonblocking(true).unwrap();
    let mut ours = tokio::net::UnixStream::from_std(ours).unwrap();
    let mut buf = [0u8; 1];
    matches!(
        tokio::time::timeout(within, ours.read(&mut buf)).await,
        Ok(Ok(0))
    )
}
