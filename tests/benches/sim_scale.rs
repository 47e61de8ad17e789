//! Scale figures of the simulated cluster (a report, not a timed test):
//! world build time and peak RSS, LIST of every pod over HTTP, a Node update fanned out to
//! 100 watchers, and mixed get/patch throughput over HTTP.
//!
//! `cargo bench --bench sim_scale` (release). Sizes via env: SIM_NODES (5000),
//! SIM_PODS_PER_NODE (29, plus one DaemonSet pod per node), SIM_NAMESPACES (50),
//! SIM_SECONDS (10), SIM_CLIENTS (16).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rollboot_sim::sim::{Cluster, Scenario};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn vm_hwm_mib() -> f64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(f64::NAN, |kb| kb / 1024.0)
}

/// CPU seconds (user + system) used by this process so far, from /proc/self/stat (100 Hz
/// ticks): on a shared machine wall time also counts other processes' turns.
fn cpu_seconds() -> f64 {
    let s = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = s.rsplit_once(')').map_or("", |(_, a)| a);
    let f: Vec<&str> = after.split_whitespace().collect();
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    // Fields 14 and 15 (utime, stime) are at 11 and 12 after the command name.
    (tick(11) + tick(12)) / 100.0
}

/// A keep-alive HTTP/1.1 connection that reads Content-Length and chunked bodies.
struct Conn {
    r: BufReader<TcpStream>,
}

impl Conn {
    async fn open(addr: SocketAddr) -> Conn {
        let s = TcpStream::connect(addr).await.unwrap();
        s.set_nodelay(true).unwrap();
        Conn {
            r: BufReader::new(s),
        }
    }

    async fn send(&mut self, method: &str, path: &str, ct: &str, body: &str) {
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: sim\r\nAuthorization: Bearer bench\r\nAccept: application/json\r\nContent-Type: {ct}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        self.r.get_mut().write_all(req.as_bytes()).await.unwrap();
    }

    /// Reads the status line and headers; returns (status, content-length or None if chunked).
    async fn head(&mut self) -> (u16, Option<usize>) {
        let mut line = String::new();
        self.r.read_line(&mut line).await.unwrap();
        let code: u16 = line
            .split(' ')
            .nth(1)
            .expect("status line")
            .parse()
            .unwrap();
        let mut len = None;
        loop {
            line.clear();
            self.r.read_line(&mut line).await.unwrap();
            if line == "\r\n" || line.is_empty() {
                break;
            }
            let l = line.to_ascii_lowercase();
            if let Some(v) = l.strip_prefix("content-length:") {
                len = v.trim().parse().ok();
            }
        }
        (code, len)
    }

    /// A whole response; returns (status, body bytes).
    async fn response(&mut self) -> (u16, Vec<u8>) {
        let (code, len) = self.head().await;
        let mut body = Vec::new();
        match len {
            Some(n) => {
                body.resize(n, 0);
                self.r.read_exact(&mut body).await.unwrap();
            }
            None => loop {
                let mut size = String::new();
                self.r.read_line(&mut size).await.unwrap();
                let n = usize::from_str_radix(size.trim(), 16).unwrap();
                let mut chunk = vec![0; n + 2];
                self.r.read_exact(&mut chunk).await.unwrap();
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..n]);
            },
        }
        (code, body)
    }
}

#[tokio::main]
async fn main() {
    let nodes = env("SIM_NODES", 5000);
    let ppn = env("SIM_PODS_PER_NODE", 29);
    let namespaces = env("SIM_NAMESPACES", 50);
    let seconds = env("SIM_SECONDS", 10);
    let clients = env("SIM_CLIENTS", 16);
    let sc = Scenario {
        nodes,
        zones: 3,
        pods_per_node: ppn,
        replicas: 10,
        pdb_share: 0.5,
        daemon_sets: 1,
        bare_pods: 0,
        empty_dir_pods: 0,
        mirror_pods: 0,
        namespaces,
        time_factor: 0.01,
        ..Scenario::default()
    };
    println!(
        "sim_scale: {nodes} nodes, {ppn}+1 pods per node, {namespaces} namespaces, 2 cores shared"
    );

    // 1. Build.
    let (t0, c0) = (Instant::now(), cpu_seconds());
    let cluster = Cluster::start(sc).await.unwrap();
    let build = t0.elapsed();
    let cpu = cpu_seconds() - c0;
    let pods = cluster.world().pod_count();
    println!(
        "build: {} nodes, {pods} pods in {:.2} s wall, {cpu:.2} s CPU; peak RSS (VmHWM) {:.0} MiB (target < 10 s, < 1536 MiB)",
        cluster.world().node_count(),
        build.as_secs_f64(),
        vm_hwm_mib()
    );
    let addr = cluster.addr();
    // Let the world task finish its start-up resync before measuring the API.
    tokio::time::sleep(Duration::from_secs(2)).await;

    // 2. LIST of all pods.
    for round in 0..2 {
        let mut c = Conn::open(addr).await;
        let t = Instant::now();
        c.send("GET", "/api/v1/pods", "application/json", "").await;
        let (code, body) = c.response().await;
        let took = t.elapsed();
        assert_eq!(code, 200);
        // Counted without building the items (the client's memory would swamp the figure).
        #[derive(serde::Deserialize)]
        struct Items {
            items: Vec<serde::de::IgnoredAny>,
        }
        let n = serde_json::from_slice::<Items>(&body).unwrap().items.len();
        println!(
            "list pods (round {round}): {n} items, {:.1} MiB in {:.3} s (target < 2 s); peak RSS {:.0} MiB (incl. the client's copy of the body)",
            body.len() as f64 / 1048576.0,
            took.as_secs_f64(),
            vm_hwm_mib()
        );
        drop(body);
    }

    // 3. A Node update fanned out to 100 watchers.
    let (_, body) = {
        let mut c = Conn::open(addr).await;
        c.send("GET", "/api/v1/nodes?limit=1", "application/json", "")
            .await;
        c.response().await
    };
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let rv = v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let marker = format!("fanout-{}", rand_marker());
    let mut watchers = Vec::new();
    for _ in 0..100 {
        let mut c = Conn::open(addr).await;
        c.send(
            "GET",
            &format!("/api/v1/nodes?watch=1&resourceVersion={rv}&timeoutSeconds=60"),
            "",
            "",
        )
        .await;
        let (code, _) = c.head().await;
        assert_eq!(code, 200);
        let marker = marker.clone();
        watchers.push(tokio::spawn(async move {
            let mut line = String::new();
            loop {
                line.clear();
                if c.r.read_line(&mut line).await.unwrap() == 0 {
                    panic!("watch ended");
                }
                if line.contains(&marker) {
                    return Instant::now();
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut c = Conn::open(addr).await;
    let patch = format!(r#"{{"metadata":{{"annotations":{{"bench":"{marker}"}}}}}}"#);
    let t = Instant::now();
    c.send(
        "PATCH",
        "/api/v1/nodes/node-0000",
        "application/merge-patch+json",
        &patch,
    )
    .await;
    let mut last = t;
    for w in watchers {
        last = last.max(w.await.unwrap());
    }
    let (code, _) = c.response().await;
    assert_eq!(code, 200);
    println!(
        "fan-out: node patch seen by 100 watchers {:.1} ms after the request was sent (target < 50 ms)",
        (last - t).as_secs_f64() * 1000.0
    );

    // 4. Mixed get/patch throughput.
    let done = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let stop = Instant::now() + Duration::from_secs(seconds as u64);
    let (_, body) = {
        let mut c = Conn::open(addr).await;
        c.send("GET", "/api/v1/namespaces/apps-0/pods?limit=500", "", "")
            .await;
        c.response().await
    };
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let pod_names: Arc<Vec<String>> = Arc::new(
        v["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["metadata"]["name"].as_str().unwrap().to_string())
            .collect(),
    );
    let t = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..clients {
        let (done, errors, pod_names) = (done.clone(), errors.clone(), pod_names.clone());
        tasks.push(tokio::spawn(async move {
            let mut c = Conn::open(addr).await;
            let mut k = i;
            while Instant::now() < stop {
                k += clients;
                if k % 2 == 0 {
                    let p = &pod_names[k % pod_names.len()];
                    c.send(
                        "GET",
                        &format!("/api/v1/namespaces/apps-0/pods/{p}"),
                        "",
                        "",
                    )
                    .await;
                } else {
                    let body = format!(r#"{{"metadata":{{"annotations":{{"bench/n":"{k}"}}}}}}"#);
                    c.send(
                        "PATCH",
                        &format!("/api/v1/nodes/node-{:04}", k % nodes),
                        "application/merge-patch+json",
                        &body,
                    )
                    .await;
                }
                let (code, _) = c.response().await;
                if code != 200 {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let took = t.elapsed().as_secs_f64();
    let n = done.load(Ordering::Relaxed);
    println!(
        "mixed get/patch: {n} requests ({} errors) by {clients} keep-alive clients in {took:.1} s = {:.0} req/s (target 2000 req/s)",
        errors.load(Ordering::Relaxed),
        n as f64 / took
    );
    println!("peak RSS at end: {:.0} MiB", vm_hwm_mib());
    cluster.shutdown().await;
}

fn rand_marker() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}
