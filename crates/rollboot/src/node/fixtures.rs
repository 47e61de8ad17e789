//! Builders for test Nodes.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::core::v1::{NodeCondition, NodeSpec, NodeStatus, NodeSystemInfo};

/// A Ready, schedulable node with boot ID `boot-1` and the given labels.
pub fn node(name: &str, labels: &[(&str, &str)]) -> Node {
    let mut n = Node::default();
    n.metadata.name = Some(name.into());
    n.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    );
    n.metadata.annotations = Some(BTreeMap::new());
    n.spec = Some(NodeSpec::default());
    n.status = Some(NodeStatus {
        conditions: Some(vec![NodeCondition {
            type_: "Ready".into(),
            status: "True".into(),
            ..Default::default()
        }]),
        node_info: Some(NodeSystemInfo {
            boot_id: "boot-1".into(),
            ..Default::default()
        }),
        ..Default::default()
    });
    n
}

/// Adds a taint.
pub fn taint(mut n: Node, key: &str, effect: &str) -> Node {
    n.spec
        .get_or_insert_with(Default::default)
        .taints
        .get_or_insert_with(Vec::new)
        .push(k8s_openapi::api::core::v1::Taint {
            key: key.into(),
            effect: effect.into(),
            ..Default::default()
        });
    n
}

/// Sets an annotation.
pub fn annotate(mut n: Node, k: &str, v: &str) -> Node {
    n.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(k.into(), v.into());
    n
}
