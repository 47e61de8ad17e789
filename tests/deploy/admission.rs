//! The agent admission policy of `deploy/admission-policy.yaml`, evaluated by the simulator the
//! way the real admission chain does (CEL on the request, the agent token's node-name claim):
//! an agent may change only its own Node's `reboot-required*`, `reboot-ack`, `reboot-lost`,
//! `reboot-refused` and `shutdown-requested` annotations, and `reboot-lost` only to the token
//! it acknowledged; never the reboot history the controller keeps on the Node.

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use rollboot_sim::sim::admission::Admission;
use rollboot_sim::sim::rbac::{Enforcement, Identity, Rbac};
use rollboot_sim::sim::{Cluster, Scenario};
use serde_json::json;

fn read(path: &str) -> String {
    std::fs::read_to_string(format!("{}/{path}", env!("CARGO_MANIFEST_DIR"))).expect(path)
}

/// A cluster enforcing the deploy RBAC and admission policy, with the agent of `node-0000`
/// (token `agent`) and the controller (token `controller`).
async fn enforced_cluster() -> Cluster {
    let cluster = Cluster::start(Scenario {
        nodes: 2,
        pods_per_node: 1,
        ..Scenario::default()
    })
    .await
    .unwrap();
    let identities = [
        (
            "agent".to_string(),
            Identity::service_account("rollboot-agent", "rollboot-agent").on_node("node-0000"),
        ),
        (
            "controller".to_string(),
            Identity::service_account("rollboot-system", "rollboot-controller"),
        ),
    ]
    .into_iter()
    .collect();
    cluster.enforce(Enforcement {
        identities,
        rbac: Some(
            Rbac::from_yaml(&[
                &read("deploy/controller-rbac.yaml"),
                &read("deploy/agent-rbac.yaml"),
            ])
            .unwrap(),
        ),
        admission: Some(Admission::from_yaml(&read("deploy/admission-policy.yaml")).unwrap()),
    });
    cluster
}

fn nodes_as(cluster: &Cluster, token: &str) -> Api<Node> {
    let mut c = kube::Config::new(cluster.base_url().parse().unwrap());
    c.auth_info.token = Some(token.to_string().into());
    Api::all(kube::Client::try_from(c).unwrap())
}

async fn merge(
    api: &Api<Node>,
    node: &str,
    patch: serde_json::Value,
) -> Result<(), Box<kube::core::Status>> {
    match api
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) => Err(s),
        Err(e) => panic!("unexpected client error: {e}"),
    }
}

fn annotation(key: &str, value: &str) -> serde_json::Value {
    json!({"metadata": {"annotations": {key: value}}})
}

/// Asserts the policy (not RBAC) refused the request, as kube-apiserver reports it: 422 Invalid
/// naming the policy and its binding.
fn assert_denied_by_policy(r: Result<(), Box<kube::core::Status>>, what: &str) {
    let s = r.expect_err(what);
    assert_eq!(s.code, 422, "{what}: {s:?}");
    assert_eq!(s.reason, "Invalid", "{what}: {s:?}");
    assert!(
        s.message
            .contains("ValidatingAdmissionPolicy 'rollboot-agent-own-node'"),
        "{what}: {}",
        s.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_may_flag_and_acknowledge_its_own_node() {
    let cluster = enforced_cluster().await;
    let agent = nodes_as(&cluster, "agent");
    merge(
        &agent,
        "node-0000",
        annotation("rollboot.dev/reboot-required", "true"),
    )
    .await
    .unwrap();
    merge(
        &agent,
        "node-0000",
        annotation(
            "rollboot.dev/reboot-required-reason",
            "sentinel file exists",
        ),
    )
    .await
    .unwrap();
    merge(
        &agent,
        "node-0000",
        annotation("rollboot.dev/reboot-ack", "123-abc"),
    )
    .await
    .unwrap();
    // The agent may not read Nodes by `get`; read back through a token the simulator does not check.
    let any = nodes_as(&cluster, "harness");
    let ann = any
        .get("node-0000")
        .await
        .unwrap()
        .metadata
        .annotations
        .unwrap();
    assert_eq!(ann["rollboot.dev/reboot-required"], "true");
    assert_eq!(ann["rollboot.dev/reboot-ack"], "123-abc");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_may_report_lost_only_the_token_it_acknowledged() {
    let cluster = enforced_cluster().await;
    let agent = nodes_as(&cluster, "agent");
    let controller = nodes_as(&cluster, "controller");
    let token = "1790000000000-00000000000000ab";
    merge(
        &controller,
        "node-0000",
        annotation("rollboot.dev/reboot", token),
    )
    .await
    .unwrap();
    // Not acknowledged yet: nothing to report lost.
    assert_denied_by_policy(
        merge(
            &agent,
            "node-0000",
            annotation("rollboot.dev/reboot-lost", token),
        )
        .await,
        "reporting lost a token it did not acknowledge",
    );
    merge(
        &agent,
        "node-0000",
        annotation("rollboot.dev/reboot-ack", token),
    )
    .await
    .unwrap();
    assert_denied_by_policy(
        merge(
            &agent,
            "node-0000",
            annotation("rollboot.dev/reboot-lost", "1790000000000-00000000000000cd"),
        )
        .await,
        "reporting lost another token",
    );
    merge(
        &agent,
        "node-0000",
        annotation("rollboot.dev/reboot-lost", token),
    )
    .await
    .unwrap();
    // The controller answers with a new token; the agent may still acknowledge it, its old
    // report left as it is.
    let next = "1790000000100-00000000000000ef";
    merge(
        &controller,
        "node-0000",
        annotation("rollboot.dev/reboot", next),
    )
    .await
    .unwrap();
    merge(
        &agent,
        "node-0000",
        annotation("rollboot.dev/reboot-ack", next),
    )
    .await
    .unwrap();
    assert_denied_by_policy(
        merge(
            &agent,
            "node-0001",
            annotation("rollboot.dev/reboot-lost", token),
        )
        .await,
        "reporting lost on another node",
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_may_ask_for_a_drain_of_its_own_node_before_a_shutdown_and_withdraw_it() {
    let cluster = enforced_cluster().await;
    let agent = nodes_as(&cluster, "agent");
    let key = rollboot::node::SHUTDOWN_REQUESTED;
    merge(
        &agent,
        "node-0000",
        annotation(key, "2026-09-21T14:13:20.123Z"),
    )
    .await
    .unwrap();
    // Withdrawn when the shutdown is cancelled (a merge patch's null removes it).
    merge(
        &agent,
        "node-0000",
        json!({"metadata": {"annotations": {key: null}}}),
    )
    .await
    .unwrap();
    let any = nodes_as(&cluster, "harness");
    let ann = any.get("node-0000").await.unwrap().metadata.annotations;
    assert!(!ann.unwrap_or_default().contains_key(key));
    assert_denied_by_policy(
        merge(
            &agent,
            "node-0001",
            annotation(key, "2026-09-21T14:13:20.123Z"),
        )
        .await,
        "asking for a drain of another node",
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_cannot_touch_another_node() {
    let cluster = enforced_cluster().await;
    let agent = nodes_as(&cluster, "agent");
    assert_denied_by_policy(
        merge(
            &agent,
            "node-0001",
            annotation("rollboot.dev/reboot-required", "true"),
        )
        .await,
        "flagging another node",
    );
    assert_denied_by_policy(
        merge(
            &agent,
            "node-0001",
            annotation("rollboot.dev/reboot-ack", "1-a"),
        )
        .await,
        "acknowledging for another node",
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_cannot_change_other_keys_labels_or_spec_of_its_own_node() {
    let cluster = enforced_cluster().await;
    let agent = nodes_as(&cluster, "agent");
    assert_denied_by_policy(
        merge(
            &agent,
            "node-0000",
            annotation("rollboot.dev/state", "done"),
        )
        .await,
        "writing the controller's state",
    );
    assert_denied_by_policy(
        merge(
            &agent,
            "node-0000",
            annotation("rollboot.dev/reboot", "1-a"),
        )
        .await,
        "writing a reboot token",
    );
    assert_denied_by_policy(
        merge(&agent, "node-0000", annotation("example.com/other", "x")).await,
        "writing a foreign annotation",
    );
    assert_denied_by_policy(
        merge(
            &agent,
            "node-0000",
            json!({"metadata": {"labels": {"rollboot.dev/exclude": "true"}}}),
        )
        .await,
        "labelling its node",
    );
    assert_denied_by_policy(
        merge(
            &agent,
            "node-0000",
            json!({"spec": {"unschedulable": true}}),
        )
        .await,
        "cordoning its node",
    );
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_can_neither_forge_nor_erase_its_nodes_reboot_history() {
    use rollboot::node::{
        LAST_BOOT_ID_AFTER, LAST_BOOT_ID_BEFORE, LAST_CYCLE, LAST_REBOOT, REBOOT_COUNT,
    };
    let cluster = enforced_cluster().await;
    let agent = nodes_as(&cluster, "agent");
    let controller = nodes_as(&cluster, "controller");
    for (key, value) in [
        (REBOOT_COUNT, "7"),
        (LAST_REBOOT, "2026-01-01T00:00:00.000Z"),
        (LAST_BOOT_ID_BEFORE, "boot-0"),
        (LAST_BOOT_ID_AFTER, "boot-1"),
        // Forged timings would mislead `rollboot plan` and a rehearsal.
        (LAST_CYCLE, r#"{"rebootSeconds":1}"#),
    ] {
        assert_denied_by_policy(
            merge(&agent, "node-0000", annotation(key, value)).await,
            &format!("forging {key}"),
        );
    }
    // The controller records it (as at the end of a cycle); the agent may not change or erase it.
    merge(
        &controller,
        "node-0000",
        json!({"metadata": {"annotations": {REBOOT_COUNT: "1", LAST_REBOOT: "2026-01-01T00:00:00.000Z"}}}),
    )
    .await
    .unwrap();
    assert_denied_by_policy(
        merge(&agent, "node-0000", annotation(REBOOT_COUNT, "2")).await,
        "changing the count",
    );
    assert_denied_by_policy(
        merge(
            &agent,
            "node-0000",
            json!({"metadata": {"annotations": {REBOOT_COUNT: null}}}),
        )
        .await,
        "erasing the count",
    );
    // Its own keys still go through with the history on the node.
    merge(
        &agent,
        "node-0000",
        annotation("rollboot.dev/reboot-required", "2026-01-01T01:00:00.000Z"),
    )
    .await
    .unwrap();
    // (The controller may list Nodes, not get one.)
    let n = controller
        .list(&kube::api::ListParams::default().fields("metadata.name=node-0000"))
        .await
        .unwrap()
        .items
        .remove(0);
    assert_eq!(n.metadata.annotations.unwrap()[REBOOT_COUNT], "1");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_leaves_the_controller_alone() {
    let cluster = enforced_cluster().await;
    let controller = nodes_as(&cluster, "controller");
    merge(
        &controller,
        "node-0001",
        annotation("rollboot.dev/state", "cordoning"),
    )
    .await
    .unwrap();
    merge(
        &controller,
        "node-0001",
        json!({"spec": {"unschedulable": true}}),
    )
    .await
    .unwrap();
    cluster.shutdown().await;
}
