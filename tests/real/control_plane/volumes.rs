//! The phase of issue 24's volumes, judged as check 19 of the report (`CHECKS` in
//! `tests/real/control_plane.rs`): a StatefulSet with a ReadWriteOnce CSI claim per pod
//! (`tests/real/control_plane/volumes.yaml`; the fake kubelet plays the CSI driver's attacher and provisioner,
//! the real kube-controller-manager's attach-detach controller creates and deletes the
//! VolumeAttachments), the node of its pod `db-0` flagged, and a watch of the VolumeAttachment
//! of `db-0`'s volume on that node from before the flag.
//!
//! Owns the phase's workload (applied, then deleted at the end with its claims, so that the
//! phases after it see the cluster they knew) and the judgement: no reboot request while the
//! VolumeAttachment of the evicted pod's volume is on the node, the moved pod Ready on another
//! node, no `FailedAttachVolume` Multi-Attach Event.

use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::TryStreamExt;
use k8s_openapi::api::storage::v1::VolumeAttachment;

use super::cluster::kubectl;
use super::report::Report;
use super::{title, Suite, CYCLE_TIMEOUT};

/// The StatefulSet's namespace and its first pod, in `tests/real/control_plane/volumes.yaml`.
const NS: &str = "stateful";
const POD: &str = "db-0";

impl Suite<'_> {
    /// Check 19: see the module's doc.
    pub(crate) async fn volumes(&mut self, report: &mut Report) -> Result<(), String> {
        let id = "19";
        let admin = self.cluster.admin.clone();
        let manifest =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/real/control_plane/volumes.yaml");
        let path = manifest.to_string_lossy().into_owned();
        let out = kubectl(&admin, &["apply", "-f", &path]).await;
        if !out.ok {
            return Err(format!("kubectl apply {path}: {}", out.stderr));
        }
        let ready = kubectl(
            &admin,
            &[
                "-n",
                NS,
                "rollout",
                "status",
                "statefulset/db",
                "--timeout=120s",
            ],
        )
        .await;
        if !ready.ok {
            return Err(format!("statefulset {NS}/db not ready: {}", ready.stderr));
        }
        let (node, pv) = self.pod_node_and_volume().await?;
        let vas: kube::Api<VolumeAttachment> = kube::Api::all(self.client.clone());
        let attachment = vas
            .list(&Default::default())
            .await
            .map_err(|e| format!("listing VolumeAttachments: {e}"))?
            .items
            .into_iter()
            .find(|va| {
                va.spec.node_name == node
                    && va.spec.source.persistent_volume_name.as_deref() == Some(pv.as_str())
            })
            .and_then(|va| va.metadata.name)
            .ok_or_else(|| format!("no VolumeAttachment of {pv} on {node}"))?;
        // Every version of the VolumeAttachment from now on, and when it went.
        let watch = tokio::spawn(watch_attachment(vas.clone(), attachment.clone()));
        let t0 = self.flag(&node)?;
        self.await_flag(&node, t0).await?;
        let end = self.await_cycle(&node, t0, CYCLE_TIMEOUT).await;
        // When the watch saw the VolumeAttachment go (it ends then); `None` while it has not.
        let deleted_at = if watch.is_finished() {
            watch.await.ok().flatten()
        } else {
            watch.abort();
            None
        };
        let gone = vas
            .get_opt(&attachment)
            .await
            .map_err(|e| format!("reading VolumeAttachment {attachment}: {e}"))?
            .is_none();
        let mut failures = Vec::new();
        let mut notes = vec![format!(
            "{NS}/{POD} on {node}, volume {pv}, VolumeAttachment {attachment}"
        )];
        let requested = self.obs.with(|w| {
            w.node_since(&node, t0)
                .iter()
                .find(|v| {
                    v.rollboot.get("rollboot.dev/state").map(String::as_str) == Some("rebooting")
                })
                .map(|v| v.at)
        });
        match (&end, requested, deleted_at) {
            (Err(e), _, _) => failures.push(format!("{node}'s cycle: {e}")),
            (Ok(_), None, _) => failures.push(format!("{node} was never seen `rebooting`")),
            (Ok(_), Some(_), None) if !gone => failures.push(format!(
                "VolumeAttachment {attachment} of the evicted pod's volume is still there after the cycle"
            )),
            (Ok(_), Some(req), Some(went)) => {
                let margin = (req - went).num_milliseconds() as f64 / 1000.0;
                notes.push(format!(
                    "VolumeAttachment gone at {}, reboot asked ({node} `rebooting`) {margin:.2}s later",
                    went.format("%H:%M:%S%.3f")
                ));
                report.header.push(format!(
                    "check 19: the evicted pod's VolumeAttachment went {margin:.2}s before the reboot request (drain.volumes.waitForDetach)"
                ));
                if went > req {
                    failures.push(format!(
                        "the reboot was asked at {} while VolumeAttachment {attachment} was still on {node} (gone at {})",
                        req.format("%H:%M:%S%.3f"),
                        went.format("%H:%M:%S%.3f")
                    ));
                }
            }
            (Ok(_), Some(_), None) => failures.push(format!(
                "VolumeAttachment {attachment} went, but its deletion was not seen by the watch"
            )),
        }
        // The moved pod: Ready on another node, and no Multi-Attach on the way.
        match self.pod_ready_elsewhere(&node).await {
            Ok(on) => notes.push(format!("{NS}/{POD} Ready again on {on}")),
            Err(e) => failures.push(e),
        }
        // drain.volumes.waitForReattach: the cycle's end waited until the volume was attached
        // where the moved pod runs (the VolumeAttachment the real attach-detach controller
        // named for that node), and says so in the node's last cycle.
        let cycle = self.obs.with(|w| {
            w.node_since(&node, t0)
                .iter()
                .rev()
                .find(|v| v.rollboot.get("rollboot.dev/state").map(String::as_str) == Some("done"))
                .and_then(|v| v.rollboot.get("rollboot.dev/last-cycle").cloned())
        });
        match cycle.as_deref().map(serde_json::from_str::<serde_json::Value>) {
            Some(Ok(c)) if c["reattachSeconds"].is_number() && c.get("notReattached").is_none() => {
                notes.push(format!(
                    "volume attached where the moved pod runs {}s after the health gate began (drain.volumes.waitForReattach)",
                    c["reattachSeconds"]
                ))
            }
            other => failures.push(format!(
                "{node}'s last cycle does not say its moved volume was attached again: {other:?}"
            )),
        }
        let multi = kubectl(
            &admin,
            &[
                "-n",
                NS,
                "get",
                "events",
                "--field-selector=reason=FailedAttachVolume",
                "-o",
                "json",
            ],
        )
        .await;
        match serde_json::from_str::<serde_json::Value>(&multi.stdout) {
            Ok(v) => {
                let msgs: Vec<String> = v["items"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|e| e["message"].as_str().unwrap_or_default().to_string())
                    .filter(|m| m.contains("Multi-Attach"))
                    .collect();
                if !msgs.is_empty() {
                    failures.push(format!("Multi-Attach Events in {NS}: {}", msgs.join("; ")));
                }
            }
            Err(e) => failures.push(format!("events of {NS}: {e}: {}", multi.stderr)),
        }
        // Its last cycle drained a pod the later phases do not have: cycled again there.
        self.struck.insert(node.clone());
        // The workload goes, with its claims, so the phases after this one see what they knew.
        let _ = kubectl(
            &admin,
            &["delete", "-f", &path, "--wait=true", "--timeout=120s"],
        )
        .await;
        let _ = kubectl(
            &admin,
            &["-n", NS, "delete", "pvc", "--all", "--wait=false"],
        )
        .await;
        report.check(id, title(id), failures, notes);
        Ok(())
    }

    /// The node of `db-0` and the PersistentVolume of its claim.
    async fn pod_node_and_volume(&self) -> Result<(String, String), String> {
        let admin = &self.cluster.admin;
        let pod = kubectl(admin, &["-n", NS, "get", "pod", POD, "-o", "json"]).await;
        let pod: serde_json::Value =
            serde_json::from_str(&pod.stdout).map_err(|e| format!("pod {NS}/{POD}: {e}"))?;
        let node = pod["spec"]["nodeName"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let claim = kubectl(admin, &["-n", NS, "get", "pvc", "data-db-0", "-o", "json"]).await;
        let claim: serde_json::Value =
            serde_json::from_str(&claim.stdout).map_err(|e| format!("claim data-db-0: {e}"))?;
        let pv = claim["spec"]["volumeName"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if node.is_empty() || pv.is_empty() {
            return Err(format!(
                "{NS}/{POD} has no node ({node:?}) or its claim no volume ({pv:?})"
            ));
        }
        Ok((node, pv))
    }

    /// Waits up to two minutes for `db-0` to be Ready on a node other than `old`.
    async fn pod_ready_elsewhere(&self, old: &str) -> Result<String, String> {
        let t = std::time::Instant::now();
        let mut last = String::new();
        while t.elapsed() < Duration::from_secs(120) {
            let out = kubectl(
                &self.cluster.admin,
                &["-n", NS, "get", "pod", POD, "-o", "json"],
            )
            .await;
            if let Ok(p) = serde_json::from_str::<serde_json::Value>(&out.stdout) {
                let on = p["spec"]["nodeName"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
                let ready = p["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True");
                if ready && !on.is_empty() && on != old {
                    return Ok(on);
                }
                last = format!("on {on:?}, ready {ready}");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        Err(format!(
            "{NS}/{POD} not Ready on another node than {old} within 120s (last: {last})"
        ))
    }
}

/// Watches VolumeAttachment `name` (admin) until it is deleted, and says when.
async fn watch_attachment(api: kube::Api<VolumeAttachment>, name: String) -> Option<DateTime<Utc>> {
    use kube::runtime::watcher;
    let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let stream = watcher(api, cfg);
    futures::pin_mut!(stream);
    let mut seen = false;
    while let Ok(Some(ev)) = stream.try_next().await {
        match ev {
            watcher::Event::InitApply(_) | watcher::Event::Apply(_) => seen = true,
            watcher::Event::Delete(_) if seen => return Some(Utc::now()),
            _ => {}
        }
    }
    None
}
