//! The committed CRDs (`deploy/crds/`) on a real API server: they install and become
//! Established, a Flux manifest with only its `apiVersion` changed is accepted and reads back
//! into the flotilla-api types, `kubectl get` prints Flux's columns, and the server refuses
//! invalid objects with the schema's own messages (CEL rules, patterns, lengths, enums).
//!
//! Objects are sent as `kubectl apply --server-side` sends them: server-side apply with
//! strict field validation, from the manifest's JSON (not re-serialized by our types).

use std::time::Duration;

use flotilla_api::{HelmChart, HelmRelease, HelmRepository, ManagedCluster, OCIRepository};
use flotilla_core::meta::ConditionStatus;
use flotilla_core::spec::ReconcileStrategy;
use flotilla_tests::{Cluster, ClusterOptions, wait};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use kube::{Client, Resource};
use serde_json::{Value, json};

const TIMEOUT: Duration = Duration::from_secs(60);
const MANAGER: &str = "flotilla-api-tests";

/// Applies every committed CRD and waits until each is Established; returns their names.
async fn install_crds(client: &Client) -> anyhow::Result<Vec<String>> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/crds");
    let mut files: Vec<_> = std::fs::read_dir(&dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    files.sort();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut names = Vec::new();
    for file in files {
        let crd: CustomResourceDefinition =
            serde_norway::from_str(&std::fs::read_to_string(&file)?)?;
        let name = crd.metadata.name.clone().expect("generated CRDs are named");
        crds.patch(
            &name,
            &PatchParams::apply(MANAGER).validation_strict(),
            &Patch::Apply(&crd),
        )
        .await?;
        names.push(name);
    }
    for name in &names {
        wait::until(&format!("{name} to be Established"), TIMEOUT, || async {
            let crd = crds.get(name).await?;
            let established = crd
                .status
                .and_then(|s| s.conditions)
                .into_iter()
                .flatten()
                .any(|c| c.type_ == "Established" && c.status == "True");
            Ok(established.then_some(()))
        })
        .await?;
    }
    Ok(names)
}

/// `kubectl apply --server-side` of a manifest of kind `K`.
async fn apply<K: Resource<DynamicType = ()>>(
    client: &Client,
    manifest: &Value,
) -> Result<DynamicObject, kube::Error> {
    let resource = ApiResource::erase::<K>(&());
    let name = manifest["metadata"]["name"]
        .as_str()
        .expect("test manifests are named");
    let api: Api<DynamicObject> = match manifest["metadata"]["namespace"].as_str() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    api.patch(
        name,
        &PatchParams::apply(MANAGER).validation_strict(),
        &Patch::Apply(manifest),
    )
    .await
}

/// The seed's podinfo HelmRelease, `apiVersion` changed.
fn podinfo() -> Value {
    json!({
        "apiVersion": "helm.flotilla.dev/v1",
        "kind": "HelmRelease",
        "metadata": {"name": "podinfo", "namespace": "default"},
        "spec": {
            "interval": "10m",
            "timeout": "5m",
            "chart": {"spec": {
                "chart": "podinfo",
                "version": "6.5.*",
                "sourceRef": {"kind": "HelmRepository", "name": "podinfo"},
                "interval": "5m",
            }},
            "releaseName": "podinfo",
            "install": {"remediation": {"retries": 3}},
            "upgrade": {"remediation": {"retries": 3}},
            "test": {"enable": true},
            "driftDetection": {
                "mode": "enabled",
                "ignore": [{"paths": ["/spec/replicas"], "target": {"kind": "Deployment"}}],
            },
            "values": {"replicaCount": 2},
        },
    })
}

/// `kubectl get <plural>`: the server-side table of a namespaced list.
async fn table(client: &Client, group: &str, plural: &str) -> anyhow::Result<Value> {
    let request = http::Request::get(format!("/apis/{group}/v1/namespaces/default/{plural}"))
        .header(
            "Accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .body(Vec::new())?;
    Ok(serde_json::from_str(&client.request_text(request).await?)?)
}

#[tokio::test]
async fn the_crds_are_established_and_serve_fluxs_manifests_with_only_the_api_version_changed()
-> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("api-crds")).await?;
    let client = cluster.client().await?;
    let mut names = install_crds(&client).await?;
    names.sort();
    assert_eq!(
        names,
        [
            "helmcharts.source.flotilla.dev",
            "helmreleasepreviews.helm.flotilla.dev",
            "helmreleases.helm.flotilla.dev",
            "helmreleasesets.helm.flotilla.dev",
            "helmrepositories.source.flotilla.dev",
            "managedclusterbindings.fleet.flotilla.dev",
            "managedclusters.fleet.flotilla.dev",
            "ocirepositories.source.flotilla.dev",
        ]
    );

    // The seed's examples, with their apiVersions changed.
    apply::<HelmRepository>(
        &client,
        &json!({
            "apiVersion": "source.flotilla.dev/v1",
            "kind": "HelmRepository",
            "metadata": {"name": "podinfo", "namespace": "default"},
            "spec": {"interval": "5m", "url": "https://stefanprodan.github.io/podinfo"},
        }),
    )
    .await?;
    apply::<OCIRepository>(
        &client,
        &json!({
            "apiVersion": "source.flotilla.dev/v1",
            "kind": "OCIRepository",
            "metadata": {"name": "podinfo", "namespace": "default"},
            "spec": {
                "interval": "10m",
                "layerSelector": {
                    "mediaType": "application/vnd.cncf.helm.chart.content.v1.tar+gzip",
                    "operation": "copy",
                },
                "url": "oci://ghcr.io/stefanprodan/charts/podinfo",
                "ref": {"semver": ">= 6.0.0"},
            },
        }),
    )
    .await?;
    apply::<HelmChart>(
        &client,
        &json!({
            "apiVersion": "source.flotilla.dev/v1",
            "kind": "HelmChart",
            "metadata": {"name": "podinfo", "namespace": "default"},
            "spec": {
                "interval": "10m",
                "chart": "podinfo",
                "sourceRef": {"kind": "HelmRepository", "name": "podinfo"},
                "version": "6.x",
                "valuesFiles": ["values-prod.yaml"],
            },
        }),
    )
    .await?;
    apply::<ManagedCluster>(
        &client,
        &json!({
            "apiVersion": "fleet.flotilla.dev/v1",
            "kind": "ManagedCluster",
            "metadata": {"name": "edge-1", "labels": {"region": "eu"}},
            "spec": {"accepted": true},
        }),
    )
    .await?;
    apply::<HelmRelease>(&client, &podinfo()).await?;

    // The stored objects read back into the typed API, with the CRDs' defaults applied.
    let releases: Api<HelmRelease> = Api::namespaced(client.clone(), "default");
    let hr = releases.get("podinfo").await?;
    let chart = hr.spec.chart.as_ref().expect("the chart template was kept");
    assert_eq!(chart.spec.version(), "6.5.*");
    assert_eq!(
        chart.spec.reconcile_strategy,
        Some(ReconcileStrategy::ChartVersion),
        "the CRD defaults reconcileStrategy as Flux's does"
    );
    assert_eq!(hr.spec.values_object()["replicaCount"], 2);
    assert_eq!(
        hr.status.as_ref().map(|s| s.observed_generation),
        Some(-1),
        "the CRD defaults status.observedGeneration to -1 (kstatus: in progress)"
    );
    let core = hr.to_core()?;
    assert_eq!(core.release_name()?.as_str(), "podinfo");
    let charts: Api<HelmChart> = Api::namespaced(client.clone(), "default");
    assert_eq!(charts.get("podinfo").await?.spec.chart, "podinfo");
    let ocis: Api<OCIRepository> = Api::namespaced(client.clone(), "default");
    assert_eq!(
        ocis.get("podinfo")
            .await?
            .spec
            .timeout
            .map(|t| t.to_string()),
        Some("1m0s".to_owned()),
        "the CRD defaults the OCIRepository timeout to 60s"
    );
    let clusters: Api<ManagedCluster> = Api::all(client.clone());
    assert!(clusters.get("edge-1").await?.spec.accepted);
    let repos: Api<HelmRepository> = Api::namespaced(client.clone(), "default");
    assert_eq!(
        repos.get("podinfo").await?.spec.url,
        "https://stefanprodan.github.io/podinfo"
    );

    // `kubectl get hr`: Flux's columns, filled from the Ready condition written through the
    // status subresource.
    let mut status = hr.status.clone().unwrap_or_default();
    status.conditions.push(serde_json::from_value(json!({
        "type": "Ready",
        "status": "True",
        "reason": "InstallSucceeded",
        "message": "Helm install succeeded for release default/podinfo.v1 with chart podinfo@6.5.3",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
        "observedGeneration": 1,
    }))?);
    assert_eq!(status.conditions[0].status, ConditionStatus::True);
    releases
        .patch_status(
            "podinfo",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await?;
    let table = table(&client, "helm.flotilla.dev", "helmreleases").await?;
    let columns: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .expect("a Table has column definitions")
        .iter()
        .map(|c| c["name"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(columns, ["Name", "Age", "Ready", "Status"]);
    let cells = &table["rows"][0]["cells"];
    assert_eq!(cells[0], "podinfo");
    assert_eq!(cells[2], "True");
    assert_eq!(
        cells[3],
        "Helm install succeeded for release default/podinfo.v1 with chart podinfo@6.5.3"
    );

    // The printer columns as installed, read back from the server.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let installed = crds.get("helmreleases.helm.flotilla.dev").await?;
    assert_eq!(
        installed.spec.names.short_names,
        Some(vec!["hr".to_owned()])
    );
    let paths: Vec<String> = installed.spec.versions[0]
        .additional_printer_columns
        .iter()
        .flatten()
        .map(|c| c.json_path.clone())
        .collect();
    assert_eq!(
        paths,
        [
            ".metadata.creationTimestamp",
            r#".status.conditions[?(@.type=="Ready")].status"#,
            r#".status.conditions[?(@.type=="Ready")].message"#,
        ]
    );
    Ok(())
}

/// What the server answers to an invalid object: its status code and message.
async fn refusal<K: Resource<DynamicType = ()>>(
    client: &Client,
    manifest: &Value,
) -> anyhow::Result<(u16, String)> {
    match apply::<K>(client, manifest).await {
        Ok(_) => anyhow::bail!("the server accepted {manifest}"),
        Err(kube::Error::Api(status)) => Ok((status.code, status.message)),
        Err(e) => Err(e.into()),
    }
}

/// 422 Unprocessable Entity: the object breaks the schema.
const INVALID: u16 = 422;
/// What server-side apply answers for a field the schema does not declare (its typed patch
/// cannot be built), as `kubectl apply --server-side` shows it.
const UNDECLARED: u16 = 500;

#[tokio::test]
async fn the_api_server_refuses_invalid_objects_with_the_schemas_messages() -> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("api-invalid")).await?;
    let client = cluster.client().await?;
    install_crds(&client).await?;

    let with = |edit: &dyn Fn(&mut Value)| {
        let mut hr = podinfo();
        edit(&mut hr);
        hr
    };
    let cases: Vec<(&str, Value, u16, &[&str])> = vec![
        (
            "chart and chartRef",
            with(&|hr| hr["spec"]["chartRef"] = json!({"kind": "OCIRepository", "name": "p"})),
            INVALID,
            &[
                "spec: Invalid value",
                "either chart or chartRef must be set",
            ],
        ),
        (
            "neither chart nor chartRef",
            with(&|hr| {
                hr["spec"].as_object_mut().map(|s| s.remove("chart"));
            }),
            INVALID,
            &["either chart or chartRef must be set"],
        ),
        (
            "an explicit null (the fields are not nullable, as in Flux's CRD)",
            with(&|hr| {
                hr["spec"]["chart"] = Value::Null;
                hr["spec"]["chartRef"] = json!({"kind": "OCIRepository", "name": "p"});
            }),
            INVALID,
            &["spec.chart", "must be of type object"],
        ),
        (
            "a duration Go cannot parse",
            with(&|hr| hr["spec"]["interval"] = json!("10 minutes")),
            INVALID,
            &[
                "spec.interval",
                "should match",
                r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$",
            ],
        ),
        (
            "a release name over 53 characters",
            with(&|hr| hr["spec"]["releaseName"] = json!("r".repeat(54))),
            INVALID,
            &["spec.releaseName", "Too long", "53"],
        ),
        (
            "an unknown remediation strategy",
            with(&|hr| hr["spec"]["upgrade"]["remediation"]["strategy"] = json!("reinstall")),
            INVALID,
            &[
                "spec.upgrade.remediation.strategy",
                "Unsupported value",
                "\"rollback\", \"uninstall\"",
            ],
        ),
        (
            "a values key outside the pattern",
            with(&|hr| {
                hr["spec"]["valuesFrom"] =
                    json!([{"kind": "ConfigMap", "name": "v", "valuesKey": "a b"}])
            }),
            INVALID,
            &["spec.valuesFrom[0].valuesKey", "should match"],
        ),
        (
            "a retry interval with the remediation strategy",
            with(&|hr| {
                hr["spec"]["install"]["strategy"] =
                    json!({"name": "RemediateOnFailure", "retryInterval": "1m"})
            }),
            INVALID,
            &[".retryInterval cannot be set when .name is 'RemediateOnFailure'"],
        ),
        (
            "both clusterRef and kubeConfig",
            with(&|hr| {
                hr["spec"]["clusterRef"] = json!({"name": "edge-1"});
                hr["spec"]["kubeConfig"] = json!({"secretRef": {"name": "kc"}});
            }),
            INVALID,
            &["clusterRef and kubeConfig are mutually exclusive"],
        ),
        (
            "a kubeConfig with neither reference",
            with(&|hr| hr["spec"]["kubeConfig"] = json!({})),
            INVALID,
            &["exactly one of spec.kubeConfig.configMapRef or spec.kubeConfig.secretRef"],
        ),
        (
            "a field Flux's HelmRelease does not have",
            with(&|hr| hr["spec"]["chartVersion"] = json!("1.0.0")),
            UNDECLARED,
            &[".spec.chartVersion: field not declared in schema"],
        ),
    ];
    let mut failures = Vec::new();
    for (what, manifest, code, wanted) in &cases {
        let (got, message) = refusal::<HelmRelease>(&client, manifest).await?;
        if got != *code {
            failures.push(format!("{what}: code {got}, not {code}: {message:?}"));
        }
        if let Some(missing) = wanted.iter().find(|w| !message.contains(**w)) {
            failures.push(format!("{what}: {missing:?} not in {message:?}"));
        }
    }
    let (code, message) = refusal::<HelmRepository>(
        &client,
        &json!({
            "apiVersion": "source.flotilla.dev/v1",
            "kind": "HelmRepository",
            "metadata": {"name": "ftp", "namespace": "default"},
            "spec": {"url": "ftp://example.com/charts"},
        }),
    )
    .await?;
    if code != INVALID || !message.contains("spec.url") || !message.contains("should match") {
        failures.push(format!("an ftp:// HelmRepository: {message:?}"));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));

    let releases: Api<HelmRelease> = Api::namespaced(client, "default");
    assert!(
        releases.list(&Default::default()).await?.items.is_empty(),
        "no invalid HelmRelease was stored"
    );
    Ok(())
}
