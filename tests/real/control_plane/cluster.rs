//! One run's control plane and every process the suite starts.
//!
//! Owns the run directory (a temporary directory), the loopback ports (free ones, never the
//! recipe's defaults 6443/2379/10257/10259, which another control plane may hold), starting the
//! control plane with the recipe's up.sh and stopping it with its down.sh, and the processes of
//! the run (fake kubelet, controllers, agents). They are stopped when [`Cluster`] is dropped,
//! also on a panic; a reaper process in its own process group does the same if the test process
//! dies without unwinding (Ctrl-C, SIGKILL). It also stops (SIGSTOP), continues, and kills and
//! starts again a process of up.sh's control plane (the kube-apiserver), found by up.sh's pid
//! file and only when its command line is that binary's for this run's directory. It must never
//! stop a process it did not start, nor bind or connect to anything but 127.0.0.1.

use std::fs::OpenOptions;
use std::io::Write;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::setup::Setup;

/// The loopback ports of one run.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    /// kube-apiserver's secure port.
    pub api: u16,
    /// etcd's client port (its peer port is the next one).
    pub etcd: u16,
    /// kube-controller-manager's secure port.
    pub kcm: u16,
    /// kube-scheduler's secure port.
    pub scheduler: u16,
}

/// A free loopback port (bound and released: free a moment ago).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("binding a free loopback port")
}

/// A free port whose successor is free too (etcd's client and peer ports).
fn free_pair() -> u16 {
    for _ in 0..100 {
        let p = free_port();
        if p < 65535
            && TcpListener::bind(("127.0.0.1", p)).is_ok()
            && TcpListener::bind(("127.0.0.1", p + 1)).is_ok()
        {
            return p;
        }
    }
    panic!("no two consecutive free loopback ports found for etcd");
}

impl Ports {
    /// Free ports, all different.
    pub fn pick() -> Ports {
        loop {
            let p = Ports {
                etcd: free_pair(),
                api: free_port(),
                kcm: free_port(),
                scheduler: free_port(),
            };
            let all = [p.etcd, p.etcd + 1, p.api, p.kcm, p.scheduler];
            if all.iter().enumerate().all(|(i, a)| !all[..i].contains(a)) {
                return p;
            }
        }
    }
}

/// The result of a command.
#[derive(Debug, Clone)]
pub struct Out {
    /// Exited 0.
    pub ok: bool,
    /// stdout.
    pub stdout: String,
    /// stderr.
    pub stderr: String,
}

/// Runs kubectl with `kubeconfig`.
pub async fn kubectl(kubeconfig: &Path, args: &[&str]) -> Out {
    let out = tokio::process::Command::new("kubectl")
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("running kubectl");
    Out {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// A process of the run, as started (so it can be started again the same way).
struct Proc {
    name: String,
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    child: Option<Child>,
}

/// The control plane of one run and the processes around it.
pub struct Cluster {
    /// What the run uses.
    pub setup: Setup,
    /// The run directory (RUN_DIR of the recipe).
    pub run_dir: PathBuf,
    /// Its ports.
    pub ports: Ports,
    /// `RUN_DIR/admin.kubeconfig` (client certificate of system:masters).
    pub admin: PathBuf,
    tmp: Option<tempfile::TempDir>,
    procs: Mutex<Vec<Proc>>,
    /// Control plane processes the suite started again itself (up.sh started the first ones).
    planes: Mutex<Vec<(String, Child)>>,
    reaper: Option<Child>,
    stopped: bool,
    keep: bool,
}

impl Cluster {
    /// Makes the run directory, starts the reaper, then the control plane (up.sh). Logs of
    /// every process go to `RUN_DIR/logs/`.
    pub fn up(setup: Setup) -> Result<Cluster, String> {
        let tmp = tempfile::Builder::new()
            .prefix("rollboot-e2e-")
            .tempdir()
            .map_err(|e| format!("making the run directory: {e}"))?;
        let run_dir = tmp.path().to_path_buf();
        std::fs::create_dir_all(run_dir.join("logs")).map_err(|e| e.to_string())?;
        let ports = Ports::pick();
        let mut cluster = Cluster {
            admin: run_dir.join("admin.kubeconfig"),
            setup,
            run_dir,
            ports,
            tmp: Some(tmp),
            procs: Mutex::new(Vec::new()),
            planes: Mutex::new(Vec::new()),
            reaper: None,
            stopped: false,
            keep: false,
        };
        cluster.reaper = Some(cluster.start_reaper()?);
        let log = cluster.log_file("up")?;
        let status = Command::new("bash")
            .arg(cluster.setup.recipe.join("up.sh"))
            .env("BIN_DIR", &cluster.setup.bin)
            .env("RUN_DIR", &cluster.run_dir)
            .env("API_PORT", ports.api.to_string())
            .env("ETCD_PORT", ports.etcd.to_string())
            .env("CM_FLAGS", format!("--secure-port={}", ports.kcm))
            .env("SCHED_FLAGS", format!("--secure-port={}", ports.scheduler))
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .status()
            .map_err(|e| format!("running up.sh: {e}"))?;
        if !status.success() || !cluster.admin.is_file() {
            cluster.keep = true;
            return Err(format!(
                "up.sh failed ({status}); its output:\n{}",
                tail(&cluster.run_dir.join("logs/up.log"), 30)
            ));
        }
        Ok(cluster)
    }

    /// A reaper in its own process group: when this test process is gone it kills the
    /// processes listed in RUN_DIR/e2e-pids (only those whose command line names RUN_DIR) and
    /// runs down.sh. A guard cannot run after SIGKILL or an interrupt; this can.
    fn start_reaper(&self) -> Result<Child, String> {
        let script = r#"
            while kill -0 "$1" 2>/dev/null; do sleep 1; done
            if [ -f "$2/e2e-pids" ]; then
              while read -r pid; do
                if grep -aqF "$2" "/proc/$pid/cmdline" 2>/dev/null; then kill -9 "$pid" 2>/dev/null; fi
              done < "$2/e2e-pids"
            fi
            RUN_DIR="$2" bash "$3/down.sh" >> "$2/logs/down.log" 2>&1
        "#;
        Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("e2e-reaper")
            .arg(std::process::id().to_string())
            .arg(&self.run_dir)
            .arg(&self.setup.recipe)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(|e| format!("starting the reaper: {e}"))
    }

    fn log_file(&self, name: &str) -> Result<std::fs::File, String> {
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path(name))
            .map_err(|e| format!("opening the log of {name}: {e}"))
    }

    /// `RUN_DIR/logs/NAME.log`.
    pub fn log_path(&self, name: &str) -> PathBuf {
        self.run_dir.join("logs").join(format!("{name}.log"))
    }

    /// Starts a process named `name` (its output appended to its log).
    pub fn spawn(
        &self,
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(&str, String)],
    ) -> Result<u32, String> {
        let mut p = Proc {
            name: name.into(),
            program: program.into(),
            args: args.to_vec(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
            child: None,
        };
        let pid = self.start(&mut p)?;
        let mut procs = self.procs.lock().unwrap();
        procs.retain(|q| q.name != name);
        procs.push(p);
        Ok(pid)
    }

    fn start(&self, p: &mut Proc) -> Result<u32, String> {
        let log = self.log_file(&p.name)?;
        let mut cmd = Command::new(&p.program);
        cmd.args(&p.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log);
        for (k, v) in &p.env {
            cmd.env(k, v);
        }
        let child = cmd
            .spawn()
            .map_err(|e| format!("starting {}: {e}", p.name))?;
        let pid = child.id();
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.run_dir.join("e2e-pids"))
            .map_err(|e| e.to_string())?;
        let _ = writeln!(f, "{pid}");
        p.child = Some(child);
        Ok(pid)
    }

    /// SIGKILLs process `name` (as a crash would) and reaps it.
    pub fn kill(&self, name: &str) -> Result<(), String> {
        let mut procs = self.procs.lock().unwrap();
        let p = procs
            .iter_mut()
            .find(|p| p.name == name)
            .ok_or_else(|| format!("no process named {name}"))?;
        let mut child = p
            .child
            .take()
            .ok_or_else(|| format!("{name} is not running"))?;
        child.kill().map_err(|e| format!("killing {name}: {e}"))?;
        let _ = child.wait();
        Ok(())
    }

    /// Starts process `name` again exactly as it was started before.
    pub fn restart(&self, name: &str) -> Result<u32, String> {
        let mut procs = self.procs.lock().unwrap();
        let p = procs
            .iter_mut()
            .find(|p| p.name == name)
            .ok_or_else(|| format!("no process named {name}"))?;
        if p.child.is_some() {
            return Err(format!("{name} is still running"));
        }
        self.start(p)
    }

    /// Names of the processes that exited on their own (not killed by the suite).
    pub fn exited(&self) -> Vec<String> {
        let mut procs = self.procs.lock().unwrap();
        procs
            .iter_mut()
            .filter_map(|p| {
                let st = p.child.as_mut()?.try_wait().ok()??;
                Some(format!("{} exited: {st}", p.name))
            })
            .collect()
    }

    /// Stops every process of the run: SIGTERM, then SIGKILL for what is left after `grace`.
    pub fn stop_processes(&self, grace: Duration) {
        let mut procs = self.procs.lock().unwrap();
        for p in procs.iter_mut() {
            if let Some(c) = &p.child {
                // SAFETY: kill(2) has no memory-safety preconditions; the pid is our own child,
                // not yet reaped, so it cannot have been reused.
                unsafe {
                    libc::kill(c.id() as i32, libc::SIGTERM);
                }
            }
        }
        let deadline = Instant::now() + grace;
        for p in procs.iter_mut() {
            if let Some(mut c) = p.child.take() {
                loop {
                    match c.try_wait() {
                        Ok(Some(_)) => break,
                        Ok(None) if Instant::now() < deadline => {
                            std::thread::sleep(Duration::from_millis(50))
                        }
                        _ => {
                            let _ = c.kill();
                            let _ = c.wait();
                            break;
                        }
                    }
                }
            }
        }
    }

    /// The pid of up.sh's control plane process `name` (`kube-apiserver`, ...), from its pid
    /// file, checked to be that binary (`rc-NAME`) running for this run's directory.
    pub fn plane_pid(&self, name: &str) -> Result<i32, String> {
        let file = self.run_dir.join(format!("{name}.pid"));
        let pid: i32 = std::fs::read_to_string(&file)
            .map_err(|e| format!("{}: {e}", file.display()))?
            .trim()
            .parse()
            .map_err(|e| format!("{}: {e}", file.display()))?;
        let argv = cmdline(pid).ok_or_else(|| format!("{name} (pid {pid}) is not running"))?;
        let run_dir = self.run_dir.display().to_string();
        let binary = format!("rc-{name}");
        if !argv.first().is_some_and(|a| a.ends_with(&binary))
            || !argv.iter().any(|a| a.contains(&run_dir))
        {
            return Err(format!(
                "pid {pid} of {} is not this run's {binary}: {argv:?}",
                file.display()
            ));
        }
        Ok(pid)
    }

    /// Sends `signal` (SIGSTOP, SIGCONT) to up.sh's control plane process `name`. A stopped
    /// process is listed for the reaper, so it is killed even if the suite dies before
    /// continuing it.
    pub fn signal_plane(&self, name: &str, signal: i32) -> Result<(), String> {
        let pid = self.plane_pid(name)?;
        self.list_for_reaper(pid as u32)?;
        // SAFETY: kill(2) has no memory-safety preconditions; the pid was just checked to be
        // this run's process.
        if unsafe { libc::kill(pid, signal) } != 0 {
            return Err(format!(
                "signal {signal} to {name} (pid {pid}): {}",
                std::io::Error::last_os_error()
            ));
        }
        Ok(())
    }

    /// SIGKILLs up.sh's control plane process `name` (as a crash would), waits until it is
    /// gone, and starts it again with the same command line, its output appended to its log
    /// and its pid written to its pid file (down.sh stops it). Returns the new pid.
    pub fn restart_plane(&self, name: &str) -> Result<u32, String> {
        let pid = self.plane_pid(name)?;
        let argv = cmdline(pid).ok_or_else(|| format!("{name} (pid {pid}) is gone"))?;
        let mut planes = self.planes.lock().unwrap();
        // One the suite started itself is its child: killed and reaped here.
        if let Some(i) = planes
            .iter()
            .position(|(n, c)| n == name && c.id() == pid as u32)
        {
            let (_, mut c) = planes.remove(i);
            let _ = c.kill();
            let _ = c.wait();
        } else {
            // SAFETY: as in signal_plane.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while cmdline(pid).is_some() {
                if Instant::now() > deadline {
                    return Err(format!("{name} (pid {pid}) still there 10 s after SIGKILL"));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let log = self.log_file(name)?;
        let child = Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting {name} again: {e}"))?;
        let new = child.id();
        std::fs::write(self.run_dir.join(format!("{name}.pid")), format!("{new}\n"))
            .map_err(|e| e.to_string())?;
        self.list_for_reaper(new)?;
        planes.push((name.to_string(), child));
        Ok(new)
    }

    fn list_for_reaper(&self, pid: u32) -> Result<(), String> {
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.run_dir.join("e2e-pids"))
            .map_err(|e| e.to_string())?;
        writeln!(f, "{pid}").map_err(|e| e.to_string())
    }

    /// Stops everything (processes, then the control plane with down.sh) and removes the run
    /// directory unless it is to be kept. Returns where it was kept, if it was.
    pub fn stop(&mut self, keep: bool) -> Option<PathBuf> {
        if self.stopped {
            return None;
        }
        self.stopped = true;
        self.stop_processes(Duration::from_secs(5));
        // A kube-apiserver left stopped (a panic mid-outage) would not act on down.sh's SIGTERM.
        let _ = self.signal_plane("kube-apiserver", libc::SIGCONT);
        // The control plane processes the suite started again are its children: stopped and
        // reaped here (down.sh waits for a pid to vanish, which a zombie never does).
        for (_, mut c) in self.planes.lock().unwrap().drain(..) {
            // SAFETY: our own child, not yet reaped.
            unsafe {
                libc::kill(c.id() as i32, libc::SIGTERM);
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while matches!(c.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        let log = self.log_file("down").ok();
        let mut down = Command::new("bash");
        down.arg(self.setup.recipe.join("down.sh"))
            .env("RUN_DIR", &self.run_dir)
            .stdin(Stdio::null());
        if let Some(l) = log {
            if let Ok(l2) = l.try_clone() {
                down.stdout(l2);
            }
            down.stderr(l);
        }
        let _ = down.status();
        if let Some(mut r) = self.reaper.take() {
            let _ = r.kill();
            let _ = r.wait();
        }
        let tmp = self.tmp.take()?;
        if keep || self.keep || self.setup.keep {
            Some(tmp.keep())
        } else {
            drop(tmp);
            None
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Reached on a panic: keep the evidence.
        if let Some(dir) = self.stop(true) {
            eprintln!("e2e: run directory kept at {}", dir.display());
        }
    }
}

/// The command line of process `pid`, `None` when there is none (gone, or a zombie).
fn cmdline(pid: i32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let argv: Vec<String> = raw
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    (!argv.is_empty()).then_some(argv)
}

/// The last `n` lines of a file ("" when it cannot be read).
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// The last `n` lines of a log that look like problems (WARN/ERROR, or "error"/"denied").
pub fn problems(path: &Path, n: usize) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let hits: Vec<String> = text
        .lines()
        .filter(|l| {
            l.contains("WARN")
                || l.contains("ERROR")
                || l.contains("\"level\":\"WARN\"")
                || l.contains("\"level\":\"ERROR\"")
        })
        .map(|l| l.chars().take(400).collect())
        .collect();
    hits[hits.len().saturating_sub(n)..].to_vec()
}
