//! Check 26: another actor's maintenance, and the conditions rollboot publishes, on the real
//! control plane. The suite installs the NodeMaintenance kind (its own CRD manifest, from the
//! published schema) and plays node-maintenance-operator: a NodeMaintenance names one flagged
//! node, which rollboot leaves alone (`rollboot status` says `otherMaintenance`) until the
//! object is deleted; then it reboots it, writing KEP-5683's conditions on its status and
//! setting them False at the end. Another flagged node carries maintenance conditions of every
//! type written by the admin: it reboots, and the audit log shows no status write of rollboot's
//! on it, its conditions as the admin left them.

use std::time::Duration;

use chrono::Utc;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use serde_json::json;

use super::audit;
use super::cluster::kubectl;
use super::report::Report;
use super::{title, Suite, CYCLE_TIMEOUT};

/// The NodeMaintenance kind, for the admin's dynamic client.
fn node_maintenance() -> ApiResource {
    use rollboot::node_maintenance::{GROUP, KIND, PLURAL, VERSION};
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, KIND), PLURAL)
}

/// The admin's maintenance conditions on the node rollboot must not touch: every type, so
/// any status write of rollboot's on that node is a write of one it does not own.
fn admin_conditions() -> serde_json::Value {
    let at = rollboot::time::annotation(Utc::now());
    let c = |kind: &str, status: &str, reason: &str| {
        json!({"type": kind, "status": status, "reason": reason,
               "message": format!("set by the admin: {kind}"),
               "lastTransitionTime": at, "lastHeartbeatTime": at})
    };
    json!({"status": {"conditions": [
        c("MaintenancePlanned", "False", "AdminPlan"),
        c("DrainInProgress", "False", "AdminDrain"),
        c("Drained", "True", "AdminDrained"),
        c("MaintenanceInProgress", "False", "AdminWork"),
    ]}})
}

/// `node`'s maintenance conditions as (type, status, reason, message, lastTransitionTime).
async fn conditions(
    client: &kube::Client,
    node: &str,
) -> Result<Vec<(String, String, String, String, String)>, String> {
    let api: Api<Node> = Api::all(client.clone());
    let n = api
        .get(node)
        .await
        .map_err(|e| format!("reading {node}: {e}"))?;
    let mut out: Vec<_> = n
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .filter(|c| rollboot::node::MAINTENANCE_CONDITIONS.contains(&c.type_.as_str()))
        .map(|c| {
            (
                c.type_,
                c.status,
                c.reason.unwrap_or_default(),
                c.message.unwrap_or_default(),
                c.last_transition_time
                    .map(|t| t.0.to_string())
                    .unwrap_or_default(),
            )
        })
        .collect();
    out.sort();
    Ok(out)
}

impl Suite<'_> {
    /// Check 26 (see the module).
    pub(super) async fn other_actors(&mut self, report: &mut Report) -> Result<(), String> {
        let (held, admin) = ("node-4", "node-5");
        let mut failures = Vec::new();
        let mut notes = Vec::new();
        let crd = self.cluster.setup.suite.join("nodemaintenance-crd.yaml");
        let out = kubectl(
            &self.cluster.admin,
            &["apply", "-f", &crd.to_string_lossy()],
        )
        .await;
        if !out.ok {
            return Err(format!(
                "kubectl apply -f {}: {}",
                crd.display(),
                out.stderr
            ));
        }
        // Served once established: the list answers (a 404 before).
        let mut served = false;
        for _ in 0..60 {
            if let Ok(Some(_)) = rollboot::node_maintenance::read(&self.client).await {
                served = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        if !served {
            return Err("the NodeMaintenance kind was not served 30 s after its CRD".into());
        }
        let nms: Api<DynamicObject> = Api::all_with(self.client.clone(), &node_maintenance());
        let mut nm = DynamicObject::new(&format!("e2e-{held}"), &node_maintenance());
        nm.data = json!({"spec": {"nodeName": held, "reason": "e2e: another actor's maintenance"}});
        nms.create(&PostParams::default(), &nm)
            .await
            .map_err(|e| format!("creating NodeMaintenance e2e-{held}: {e}"))?;
        let nodes: Api<Node> = Api::all(self.client.clone());
        nodes
            .patch_status(
                admin,
                &PatchParams::default(),
                &Patch::Strategic(&admin_conditions()),
            )
            .await
            .map_err(|e| format!("the admin's conditions on {admin}: {e}"))?;
        let before = conditions(&self.client, admin).await?;
        let t0 = Utc::now();
        let a = self.flag(held)?;
        let b = self.flag(admin)?;
        self.await_flag(held, a).await?;
        self.await_flag(admin, b).await?;
        self.await_cycle(admin, b, CYCLE_TIMEOUT).await?;
        // The held node never started while its NodeMaintenance was there.
        let started = self.obs.with(|w| {
            w.node_since(held, t0)
                .iter()
                .any(|v| v.state().is_some_and(|s| s != "done"))
        });
        if started {
            failures.push(format!(
                "{held} was started while NodeMaintenance e2e-{held} named it"
            ));
        }
        let status = self.rollboot_json(&["status", "--output", "json"]).await?;
        let said = status["nodes"]
            .as_array()
            .and_then(|a| a.iter().find(|n| n["name"] == held))
            .and_then(|n| n["otherMaintenance"].as_str().map(str::to_string));
        match &said {
            Some(s) if s.contains(&format!("NodeMaintenance e2e-{held}")) => {
                notes.push(format!("status: {held}: otherMaintenance: {s}"))
            }
            other => failures.push(format!(
                "rollboot status does not say {held}'s otherMaintenance: {other:?}"
            )),
        }
        // The operator is done: the node takes its turn.
        nms.delete(&format!("e2e-{held}"), &DeleteParams::default())
            .await
            .map_err(|e| format!("deleting NodeMaintenance e2e-{held}: {e}"))?;
        self.await_cycle(held, a, CYCLE_TIMEOUT).await?;
        // A pass after `done` sets the conditions False: give it a moment.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let after = conditions(&self.client, admin).await?;
        if after != before {
            failures.push(format!(
                "{admin}'s conditions, the admin's, changed: {before:?} -> {after:?}"
            ));
        }
        let ours = conditions(&self.client, held).await?;
        for kind in ["DrainInProgress", "Drained", "MaintenanceInProgress"] {
            match ours.iter().find(|c| c.0 == kind) {
                Some(c) if c.1 == "False" && c.3.starts_with("rollboot: ") => {}
                other => failures.push(format!(
                    "{held}: {kind} is not rollboot's and False after the cycle: {other:?}"
                )),
            }
        }
        notes.push(format!("{held}'s conditions at the end: {ours:?}"));
        // The audit log: rollboot's status writes, by node, since t0.
        let entries = audit::read(&self.cluster.run_dir.join("logs/audit.log"))?;
        let writes = |node: &str| -> Vec<u16> {
            entries
                .iter()
                .filter(|e| {
                    e.user == audit::CONTROLLER
                        && e.resource == "nodes/status"
                        && e.name == node
                        && e.verb == "patch"
                        && e.received >= t0
                })
                .map(|e| e.code)
                .collect()
        };
        let on_admin = writes(admin);
        if !on_admin.is_empty() {
            failures.push(format!(
                "audit: rollboot wrote the status of {admin}, whose maintenance conditions are all the admin's: {on_admin:?}"
            ));
        }
        let on_held = writes(held);
        if !on_held.contains(&200) {
            failures.push(format!(
                "audit: no status write of rollboot's on {held} answered 200: {on_held:?}"
            ));
        }
        notes.push(format!(
            "audit: rollboot's nodes/status patches since the phase began: {held} {on_held:?}, {admin} {on_admin:?}"
        ));
        report.check("26", title("26"), failures, notes);
        Ok(())
    }
}
