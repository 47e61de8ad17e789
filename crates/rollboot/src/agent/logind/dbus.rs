//! logind on the system bus, through zbus on the agent's own Tokio runtime.
//!
//! Owns the connection to the bus (`DBUS_SYSTEM_BUS_ADDRESS`, else the system bus's standard
//! socket), the calls to `org.freedesktop.login1.Manager` (`Inhibit`, the properties
//! `InhibitDelayMaxUSec` and `PreparingForShutdown`, `ListInhibitors` to see whether the
//! kubelet holds one of its own) and the subscription to its
//! `PrepareForShutdown` signal. It must never decide when a lock is let go ([`super::decide`]
//! does), nor take any inhibitor but the one `delay` lock for `shutdown` the agent asks for.

use std::os::fd::OwnedFd;
use std::time::Duration;

use futures::StreamExt;

use super::{HostShutdowns, Inhibitor, LogindError};

/// logind's bus name.
pub const DESTINATION: &str = "org.freedesktop.login1";
/// logind's manager object.
pub const PATH: &str = "/org/freedesktop/login1";
/// logind's manager interface.
pub const INTERFACE: &str = "org.freedesktop.login1.Manager";
/// The system bus's address when `DBUS_SYSTEM_BUS_ADDRESS` is not set (the D-Bus
/// specification's default).
pub const DEFAULT_SYSTEM_BUS: &str = "unix:path=/var/run/dbus/system_bus_socket";
/// The longest wait for the bus to answer a connection or a call: an agent never hangs on a
/// bus that does not answer.
const BUS_TIMEOUT: Duration = Duration::from_secs(10);

/// What the agent asks logind for: `Inhibit(what, who, why, mode)`.
pub const INHIBIT_WHAT: &str = "shutdown";
/// Who holds the lock, as `systemd-inhibit --list` shows it.
pub const INHIBIT_WHO: &str = "rollboot";
/// Why, as `systemd-inhibit --list` shows it.
pub const INHIBIT_WHY: &str = "drain the node before the host shuts down";
/// A delay lock: logind waits for it, at most `InhibitDelayMaxUSec`.
pub const INHIBIT_MODE: &str = "delay";

#[zbus::proxy(
    interface = "org.freedesktop.login1.Manager",
    default_service = "org.freedesktop.login1",
    default_path = "/org/freedesktop/login1"
)]
trait Manager {
    /// Takes an inhibitor lock; the fd holds it until closed.
    fn inhibit(&self, what: &str, who: &str, why: &str, mode: &str) -> zbus::Result<zbus::OwnedFd>;

    /// The inhibitor locks held now: what, who, why, mode, uid, pid.
    #[allow(clippy::type_complexity)]
    fn list_inhibitors(&self) -> zbus::Result<Vec<(String, String, String, String, u32, u32)>>;

    /// The longest logind waits for a delay lock, in microseconds.
    #[zbus(property(emits_changed_signal = "false"), name = "InhibitDelayMaxUSec")]
    fn inhibit_delay_max_usec(&self) -> zbus::Result<u64>;

    /// Whether a shutdown is under way (between `PrepareForShutdown(true)` and its end).
    #[zbus(
        property(emits_changed_signal = "false"),
        name = "PreparingForShutdown"
    )]
    fn preparing_for_shutdown(&self) -> zbus::Result<bool>;

    /// `true`: a shutdown begins, delay locks are waited for; `false`: it was cancelled.
    #[zbus(signal)]
    fn prepare_for_shutdown(&self, start: bool) -> zbus::Result<()>;
}

/// The system bus's address: `DBUS_SYSTEM_BUS_ADDRESS` as given (`env`), else the standard one.
pub fn system_bus_address(env: Option<String>) -> String {
    env.filter(|a| !a.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_SYSTEM_BUS.to_string())
}

/// logind on a bus, subscribed to `PrepareForShutdown` from the moment it connected.
pub struct SystemLogind {
    address: String,
    manager: ManagerProxy<'static>,
    signals: PrepareForShutdownStream,
    /// The bus connection: kept with the proxy and the stream that run on it.
    _connection: zbus::Connection,
}

/// A logind inhibitor lock: the fd logind handed out. Closing it (dropping this) releases it.
#[derive(Debug)]
pub struct InhibitorFd(pub OwnedFd);

impl SystemLogind {
    /// Connects to the bus at `address` and subscribes to logind's `PrepareForShutdown`
    /// (before any lock is taken, so that no signal is missed). It needs a Tokio runtime. It
    /// does not ask logind anything yet: a bus without logind is found at the first call.
    pub async fn connect(address: &str) -> Result<SystemLogind, LogindError> {
        let err = |source| LogindError::Connect {
            address: address.to_string(),
            source,
        };
        let build = zbus::connection::Builder::address(address)
            .method_timeout(BUS_TIMEOUT)
            .build();
        let connection = tokio::time::timeout(BUS_TIMEOUT, build)
            .await
            .map_err(|_| {
                err(zbus::Error::Failure(format!(
                    "no answer within {BUS_TIMEOUT:?}"
                )))
            })?
            .map_err(err)?;
        let call = |what, source| LogindError::Call {
            address: address.to_string(),
            what,
            source,
        };
        let manager = ManagerProxy::builder(&connection)
            .cache_properties(zbus::proxy::CacheProperties::No)
            .build()
            .await
            .map_err(|e| call("making a proxy of the login manager", e))?;
        let signals = manager
            .receive_prepare_for_shutdown()
            .await
            .map_err(|e| call("subscribing to PrepareForShutdown", e))?;
        Ok(SystemLogind {
            address: address.to_string(),
            manager,
            signals,
            _connection: connection,
        })
    }

    /// The bus's address.
    pub fn address(&self) -> &str {
        &self.address
    }

    fn call_error(&self, what: &'static str) -> impl Fn(zbus::Error) -> LogindError + '_ {
        move |source| LogindError::Call {
            address: self.address.clone(),
            what,
            source,
        }
    }
}

impl HostShutdowns for SystemLogind {
    type Lock = InhibitorFd;

    async fn inhibit(&self) -> Result<InhibitorFd, LogindError> {
        let fd = self
            .manager
            .inhibit(INHIBIT_WHAT, INHIBIT_WHO, INHIBIT_WHY, INHIBIT_MODE)
            .await
            .map_err(self.call_error("taking a delay inhibitor for shutdown (Inhibit)"))?;
        Ok(InhibitorFd(fd.into()))
    }

    async fn delay_max(&self) -> Result<Duration, LogindError> {
        self.manager
            .inhibit_delay_max_usec()
            .await
            .map(Duration::from_micros)
            .map_err(self.call_error("reading InhibitDelayMaxUSec"))
    }

    async fn preparing(&self) -> Result<bool, LogindError> {
        self.manager
            .preparing_for_shutdown()
            .await
            .map_err(self.call_error("reading PreparingForShutdown"))
    }

    async fn inhibitors(&self) -> Result<Vec<Inhibitor>, LogindError> {
        let list = self
            .manager
            .list_inhibitors()
            .await
            .map_err(self.call_error("listing the inhibitors (ListInhibitors)"))?;
        Ok(list
            .into_iter()
            .map(|(what, who, why, mode, _uid, pid)| Inhibitor {
                what,
                who,
                why,
                mode,
                pid,
            })
            .collect())
    }

    async fn next(&mut self) -> Option<bool> {
        loop {
            let signal = self.signals.next().await?;
            match signal.args() {
                Ok(args) => return Some(*args.start()),
                Err(e) => {
                    tracing::warn!(address = %self.address, error = %e, "a PrepareForShutdown signal that does not parse; ignored");
                }
            }
        }
    }

    fn describe(&self) -> String {
        format!("logind on {}", self.address)
    }

    async fn reconnect(&self) -> Result<SystemLogind, LogindError> {
        SystemLogind::connect(&self.address).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_system_bus_is_the_environments_else_the_standard_socket() {
        assert_eq!(
            system_bus_address(Some("unix:path=/run/dbus/system_bus_socket".into())),
            "unix:path=/run/dbus/system_bus_socket"
        );
        assert_eq!(system_bus_address(None), DEFAULT_SYSTEM_BUS);
        assert_eq!(system_bus_address(Some(" ".into())), DEFAULT_SYSTEM_BUS);
    }

    #[tokio::test]
    async fn a_bus_that_is_not_there_is_an_error_naming_its_address() {
        let dir = tempfile::tempdir().unwrap();
        let address = format!("unix:path={}", dir.path().join("absent").display());
        let e = SystemLogind::connect(&address)
            .await
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains(&address) && e.contains("system bus"), "{e}");
    }
}
