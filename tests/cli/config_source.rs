//! The operator's commands without a config file, against the simulated cluster: the config read
//! from the ConfigMap the controller mounts (`rollboot-system/rollboot-config`, key
//! `rollboot.yaml`) or from the one `--config-map` names; `--config FILE` over either; the one
//! line, exit 1, when neither gives a config; and the ConfigMap's invalid config said with its
//! key, line and column, exit 2.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, PostParams};
use rollboot_sim::sim::{Cluster, Scenario};
use serde_json::{json, Value};

use crate::run::rollboot;

const IDENTITY: &str = "config-source-cli";

async fn create_namespace(client: &kube::Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    api.create(&PostParams::default(), &ns).await.unwrap();
}

/// Makes ConfigMap `namespace/name` hold `data` (and nothing else).
async fn put_config_map(client: &kube::Client, namespace: &str, name: &str, data: &[(&str, &str)]) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let data: BTreeMap<String, String> = data
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    if api.get_opt(name).await.unwrap().is_some() {
        api.delete(name, &Default::default()).await.unwrap();
    }
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    };
    api.create(&PostParams::default(), &cm).await.unwrap();
}

/// `status -o json` with `args`: (exit code, the report or Null, stderr).
async fn status(kubeconfig: &Path, args: &[&str]) -> (i32, Value, String) {
    let mut all = vec!["status", "-o", "json"];
    all.extend_from_slice(args);
    let (code, out, err) = rollboot(kubeconfig, &all).await;
    (code, serde_json::from_str(&out).unwrap_or(Value::Null), err)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_file_the_commands_read_the_config_map_and_say_so_in_one_line_when_there_is_none()
{
    let sc = Scenario {
        nodes: 2,
        pods_per_node: 1,
        ..Scenario::default()
    };
    let cluster = Cluster::start(sc).await.unwrap();
    let client = kube::Client::try_from(cluster.kube_config_as("harness").await.unwrap()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    cluster.write_kubeconfig(&kc, IDENTITY).unwrap();

    // Neither a file nor the ConfigMap (nor its namespace, then without the ConfigMap): one
    // line naming both, exit 1, for a read and for a control alike.
    for create_ns in [false, true] {
        if create_ns {
            create_namespace(&client, "rollboot-system").await;
        }
        for args in [
            &["status"][..],
            &["plan"],
            &["pause"],
            &["request", "node-0000"],
        ] {
            let (code, out, err) = rollboot(&kc, args).await;
            assert_eq!(code, 1, "{args:?}: {out}{err}");
            assert_eq!(err.trim_end().lines().count(), 1, "{args:?}: {err}");
            assert!(
                err.starts_with("error: no config: --config not given and ConfigMap rollboot-system/rollboot-config (key rollboot.yaml) not found at the API server ")
                    && err.trim_end().ends_with("; pass --config FILE or --config-map NAMESPACE/NAME"),
                "{args:?}: {err}"
            );
        }
    }

    // The ConfigMap without the key: the same line, saying what keys it has.
    put_config_map(
        &client,
        "rollboot-system",
        "rollboot-config",
        &[("config.yaml", "{}")],
    )
    .await;
    let (code, _, err) = status(&kc, &[]).await;
    assert_eq!(code, 1, "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("no config: --config not given and ConfigMap rollboot-system/rollboot-config")
            && err.contains("has no key rollboot.yaml (its keys: config.yaml)"),
        "{err}"
    );

    // The default ConfigMap: its Lease names and failure limit are the report's.
    put_config_map(
        &client,
        "rollboot-system",
        "rollboot-config",
        &[(
            "rollboot.yaml",
            "lock: {name: ops-lock}\nfailures: {maxFailures: 4}\n",
        )],
    )
    .await;
    let (code, doc, err) = status(&kc, &[]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(doc["lock"]["lease"], "rollboot-system/ops-lock", "{doc}");
    assert_eq!(doc["failures"]["maxFailures"], 4, "{doc}");
    assert_eq!(doc["counts"]["nodes"], 2, "{doc}");

    // `--config-map` names another one.
    create_namespace(&client, "ops").await;
    put_config_map(
        &client,
        "ops",
        "rb",
        &[("rollboot.yaml", "lock: {name: other-lock}\n")],
    )
    .await;
    let (code, doc, err) = status(&kc, &["--config-map", "ops/rb"]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(doc["lock"]["lease"], "rollboot-system/other-lock", "{doc}");
    let (code, _, err) = status(&kc, &["--config-map", "ops/absent"]).await;
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("ConfigMap ops/absent (key rollboot.yaml) not found"),
        "{err}"
    );

    // `--config FILE` over the ConfigMap.
    let file = dir.path().join("rollboot.yaml");
    std::fs::write(&file, "failures: {maxFailures: 7}\n").unwrap();
    let (code, doc, err) = status(&kc, &["--config", file.to_str().unwrap()]).await;
    assert_eq!(code, 0, "{err}");
    assert_eq!(doc["failures"]["maxFailures"], 7, "{doc}");
    assert_eq!(
        doc["lock"]["lease"], "rollboot-system/rollboot-lock",
        "{doc}"
    );

    // A control takes the lock the ConfigMap names.
    let (code, out, err) = rollboot(&kc, &["pause", "--reason", "drill", "-o", "json"]).await;
    assert_eq!(code, 0, "{out}{err}");
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        report["object"], "Lease rollboot-system/ops-lock",
        "{report}"
    );

    let (code, out, err) = rollboot(&kc, &["plan", "-o", "json"]).await;
    assert!(code == 0 || code == 3, "{code}: {err}");
    assert!(serde_json::from_str::<Value>(&out).unwrap().is_object());

    // An invalid config in the ConfigMap: named with its key, line and column; exit 2.
    put_config_map(
        &client,
        "rollboot-system",
        "rollboot-config",
        &[(
            "rollboot.yaml",
            "# the controller's\ndrain:\n  timeout: soon\n",
        )],
    )
    .await;
    for args in [
        &["status"][..],
        &["plan"],
        &["resume"],
        &["retry", "node-0000"],
    ] {
        let (code, _, err) = rollboot(&kc, args).await;
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(
            err.starts_with(
                "ConfigMap rollboot-system/rollboot-config, key rollboot.yaml: invalid config:\n  3:"
            ) && err.contains("drain.timeout"),
            "{args:?}: {err}"
        );
    }

    // What status asked of the cluster: gets and lists only (the ConfigMap by one get).
    let mine: Vec<_> = cluster
        .stats()
        .requests
        .into_iter()
        .filter(|(k, _)| k.identity == IDENTITY && k.resource == "configmaps")
        .map(|(k, _)| k.verb)
        .collect();
    assert!(
        !mine.is_empty() && mine.iter().all(|v| v == "get"),
        "{mine:?}"
    );
    cluster.shutdown().await;
}
