//! The local clusters are real: controllers, scheduler and kwok do their jobs, clusters are
//! isolated from each other, and no process outlives the test that started it.

use std::collections::BTreeSet;
use std::io::{BufRead as _, BufReader};
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::time::Duration;

use flotilla_tests::process::alive;
use flotilla_tests::{Cluster, ClusterOptions, wait};
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Service};
use kube::api::{Api, DeleteParams, PostParams};

const TIMEOUT: Duration = Duration::from_secs(60);

fn deployment(name: &str, replicas: i32, pod_labels: serde_json::Value) -> Deployment {
    let mut labels = serde_json::json!({ "app": name });
    if let (Some(labels), Some(extra)) = (labels.as_object_mut(), pod_labels.as_object()) {
        labels.extend(extra.clone());
    }
    serde_json::from_value(serde_json::json!({
        "metadata": { "name": name },
        "spec": {
            "replicas": replicas,
            "selector": { "matchLabels": { "app": name } },
            "template": {
                "metadata": { "labels": labels },
                "spec": { "containers": [{ "name": "app", "image": "example.com/app:1" }] },
            },
        },
    }))
    .expect("a valid Deployment")
}

async fn available_replicas(api: &Api<Deployment>, name: &str) -> anyhow::Result<i32> {
    let d = api.get(name).await?;
    Ok(d.status.and_then(|s| s.available_replicas).unwrap_or(0))
}

#[tokio::test]
async fn a_deployment_becomes_available_through_the_controllers_scheduler_and_kwok()
-> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("deployment")).await?;
    let api: Api<Deployment> = Api::namespaced(cluster.client().await?, "default");
    api.create(
        &PostParams::default(),
        &deployment("web", 3, serde_json::json!({})),
    )
    .await?;
    wait::until("3 available replicas", TIMEOUT, || async {
        Ok((available_replicas(&api, "web").await? == 3).then_some(()))
    })
    .await?;
    let pods: Api<Pod> = Api::namespaced(cluster.client().await?, "default");
    for pod in pods.list(&Default::default()).await? {
        let spec = pod.spec.expect("pods have a spec");
        assert!(
            spec.node_name.is_some_and(|n| n.starts_with("kwok-node-")),
            "the scheduler bound the pod to a kwok node"
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_never_ready_pod_keeps_its_deployment_unavailable() -> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("never-ready")).await?;
    let client = cluster.client().await?;
    let api: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let labels = serde_json::json!({ "flotilla.dev/never-ready": "true" });
    api.create(&PostParams::default(), &deployment("stuck", 1, labels))
        .await?;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let pod = wait::until("the pod to run", TIMEOUT, || async {
        let list = pods.list(&Default::default()).await?;
        Ok(list
            .items
            .into_iter()
            .find(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")))
    })
    .await?;
    let ready = pod
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .map(|c| c.status);
    assert_eq!(ready.as_deref(), Some("False"));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(available_replicas(&api, "stuck").await?, 0);
    Ok(())
}

#[tokio::test]
async fn a_job_completes_and_a_job_labelled_to_fail_fails() -> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("job")).await?;
    let api: Api<Job> = Api::namespaced(cluster.client().await?, "default");
    for (name, labels) in [
        ("ok", serde_json::json!({})),
        (
            "bad",
            serde_json::json!({ "flotilla.dev/test-outcome": "fail" }),
        ),
    ] {
        let job: Job = serde_json::from_value(serde_json::json!({
            "metadata": { "name": name },
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "metadata": { "labels": labels },
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{ "name": "run", "image": "example.com/job:1" }],
                    },
                },
            },
        }))?;
        api.create(&PostParams::default(), &job).await?;
    }
    let condition = |name: &'static str| {
        let api = api.clone();
        async move {
            let job = api.get(name).await?;
            Ok(job
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .into_iter()
                .find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True")
                .map(|c| c.type_))
        }
    };
    let ok = wait::until("job ok to finish", TIMEOUT, || condition("ok")).await?;
    let bad = wait::until("job bad to finish", TIMEOUT, || condition("bad")).await?;
    assert_eq!((ok.as_str(), bad.as_str()), ("Complete", "Failed"));
    Ok(())
}

#[tokio::test]
async fn a_pod_log_is_served_through_the_api_server_from_kwok_and_a_pod_without_one_has_an_error_instead()
-> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("podlog")).await?;
    let api: Api<Pod> = Api::namespaced(cluster.client().await?, "default");
    for name in ["talks", "silent"] {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": { "name": name },
            "spec": { "containers": [{ "name": "main", "image": "example.com/app:1" }] },
        }))?;
        api.create(&PostParams::default(), &pod).await?;
    }
    cluster
        .serve_pod_log("default", "talks", "first line\nsecond line\n")
        .await?;
    let log = wait::until("the pod's log", TIMEOUT, || async {
        Ok(api.logs("talks", &Default::default()).await.ok())
    })
    .await?;
    assert_eq!(log, "first line\nsecond line\n");
    let err = api
        .logs("silent", &Default::default())
        .await
        .expect_err("a pod without a Logs object has no log");
    assert!(
        err.to_string().contains("no logs found"),
        "kwok's answer for a pod without a log: {err}"
    );
    Ok(())
}

#[tokio::test]
async fn a_namespace_deletion_finishes() -> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("namespace")).await?;
    let client = cluster.client().await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({ "metadata": { "name": "doomed" } }))?;
    namespaces.create(&PostParams::default(), &ns).await?;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), "doomed");
    let cm: ConfigMap = serde_json::from_value(
        serde_json::json!({ "metadata": { "name": "c" }, "data": { "k": "v" } }),
    )?;
    config_maps.create(&PostParams::default(), &cm).await?;
    let deployments: Api<Deployment> = Api::namespaced(client, "doomed");
    deployments
        .create(
            &PostParams::default(),
            &deployment("app", 1, serde_json::json!({})),
        )
        .await?;
    namespaces
        .delete("doomed", &DeleteParams::default())
        .await?;
    wait::until("the namespace to be gone", TIMEOUT, || async {
        Ok(namespaces.get_opt("doomed").await?.is_none().then_some(()))
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn three_hundred_services_all_get_a_cluster_ip_from_the_service_range() -> anyhow::Result<()>
{
    // More Services than a /24 holds (the range was one once, and a chart installed many
    // times over exhausted it): every one gets its own address in 10.0.0.0/16.
    const SERVICES: usize = 300;
    let cluster = Cluster::start(ClusterOptions::named("services")).await?;
    let api: Api<Service> = Api::namespaced(cluster.client().await?, "default");
    let created: Vec<Service> = futures::stream::iter(0..SERVICES)
        .map(|i| {
            let api = api.clone();
            async move {
                let service: Service = serde_json::from_value(serde_json::json!({
                    "metadata": { "name": format!("svc-{i}") },
                    "spec": {
                        "type": "ClusterIP",
                        "selector": { "app": format!("app-{i}") },
                        "ports": [{ "port": 80, "targetPort": 8080 }],
                    },
                }))?;
                anyhow::Ok(api.create(&PostParams::default(), &service).await?)
            }
        })
        .buffer_unordered(16)
        .try_collect()
        .await?;
    let ips: BTreeSet<Ipv4Addr> = created
        .iter()
        .map(|s| {
            let ip = s.spec.as_ref().and_then(|spec| spec.cluster_ip.as_deref());
            ip.unwrap_or_default().parse::<Ipv4Addr>()
        })
        .collect::<Result<_, _>>()?;
    assert_eq!(
        ips.len(),
        SERVICES,
        "every Service has an address of its own"
    );
    for ip in &ips {
        assert_eq!(ip.octets()[..2], [10, 0], "{ip} is in 10.0.0.0/16");
    }
    Ok(())
}

#[tokio::test]
async fn two_clusters_started_at_once_do_not_interfere() -> anyhow::Result<()> {
    let clusters = Cluster::start_many("pair", 2).await?;
    let (a, b) = (&clusters[0], &clusters[1]);
    assert_ne!(a.server(), b.server());
    let a_api: Api<ConfigMap> = Api::namespaced(a.client().await?, "default");
    let b_api: Api<ConfigMap> = Api::namespaced(b.client().await?, "default");
    let cm: ConfigMap =
        serde_json::from_value(serde_json::json!({ "metadata": { "name": "only-in-a" } }))?;
    a_api.create(&PostParams::default(), &cm).await?;
    assert!(a_api.get_opt("only-in-a").await?.is_some());
    assert!(b_api.get_opt("only-in-a").await?.is_none());
    // Each cluster's admin credentials are its own: a's client certificate is not trusted by b.
    let mut crossed = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(a.kubeconfig())?,
        &Default::default(),
    )
    .await?;
    crossed.cluster_url = b.server().parse()?;
    let crossed_api: Api<ConfigMap> = Api::namespaced(kube::Client::try_from(crossed)?, "default");
    assert!(crossed_api.list(&Default::default()).await.is_err());
    Ok(())
}

#[test]
fn dropping_a_cluster_after_a_panic_leaves_no_process_behind() {
    let (pids_tx, pids_rx) = std::sync::mpsc::channel();
    let outcome = std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        let cluster = runtime
            .block_on(Cluster::start(ClusterOptions::named("panic")))
            .expect("the cluster starts");
        pids_tx.send(cluster.pids()).expect("the receiver waits");
        panic!("a test failing while it holds a cluster");
    })
    .join();
    assert!(outcome.is_err(), "the thread panicked");
    let pids = pids_rx.recv().expect("the pids were sent before the panic");
    assert_eq!(
        pids.len(),
        5,
        "etcd, apiserver, controller-manager, scheduler, kwok"
    );
    for (name, pid) in pids {
        assert!(!alive(pid), "{name} ({pid}) is still running");
    }
}

#[test]
fn killing_the_owner_process_kills_its_clusters() -> anyhow::Result<()> {
    let mut probe = Command::new(env!("CARGO_BIN_EXE_cluster-probe"))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let stdout = probe.stdout.take().expect("stdout is piped");
    let mut pids = Vec::new();
    let mut dir = None;
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        if line == "ready" {
            break;
        }
        if let Some(path) = line.strip_prefix("dir ") {
            dir = Some(std::path::PathBuf::from(path));
        } else if let Some((name, pid)) = line.split_once(' ') {
            pids.push((name.to_owned(), pid.parse::<u32>()?));
        }
    }
    assert_eq!(pids.len(), 5, "the probe started a whole cluster");
    probe.kill()?; // SIGKILL: no destructor runs in the probe
    probe.wait()?;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|(_, pid)| alive(*pid)) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    for (name, pid) in pids {
        assert!(!alive(pid), "{name} ({pid}) outlived its owner");
    }
    // The probe died without running destructors, so its directory is ours to remove.
    if let Some(dir) = dir {
        std::fs::remove_dir_all(dir)?;
    }
    Ok(())
}
