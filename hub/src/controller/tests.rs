//! Unit tests of the HelmRelease controller's pure parts.

use super::watches::*;
use super::*;

fn key(name: &str) -> ObjectKey {
    ObjectKey {
        namespace: "default".parse().unwrap(),
        name: name.parse().unwrap(),
    }
}

fn hr(extra: serde_json::Value) -> HelmRelease {
    let mut doc = serde_json::json!({
        "apiVersion": "helm.flotilla.dev/v1",
        "kind": "HelmRelease",
        "metadata": {"name": "podinfo", "namespace": "default", "generation": 1},
        "spec": {
            "interval": "10m",
            "chart": {"spec": {"chart": "podinfo", "sourceRef": {"kind": "HelmRepository", "name": "podinfo"}}},
        },
    });
    merge(&mut doc, extra);
    serde_json::from_value(doc).unwrap()
}

fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
    match (a, b) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

#[test]
fn the_reference_index_maps_an_object_to_exactly_the_helm_releases_using_it() {
    let index = RefIndex::default();
    index.set(
        &key("a"),
        vec![
            ref_key("Secret", "default", "s"),
            ref_key("ConfigMap", "default", "c"),
        ],
    );
    index.set(&key("b"), vec![ref_key("Secret", "default", "s")]);
    let mut users = index.users(&ref_key("Secret", "default", "s"));
    users.sort();
    assert_eq!(users, vec![key("a"), key("b")]);
    assert_eq!(
        index.users(&ref_key("ConfigMap", "default", "c")),
        vec![key("a")]
    );
    assert!(index.users(&ref_key("Secret", "other", "s")).is_empty());

    // A new set replaces the old one; an empty set forgets the user.
    index.set(&key("a"), vec![ref_key("ConfigMap", "default", "c")]);
    assert_eq!(
        index.users(&ref_key("Secret", "default", "s")),
        vec![key("b")]
    );
    index.set(&key("b"), Vec::new());
    assert!(index.users(&ref_key("Secret", "default", "s")).is_empty());
}

#[test]
fn a_reconcile_is_triggered_by_generation_deletion_and_request_tokens_not_by_status_or_plan_annotations()
 {
    let base = trigger_hash(&hr(serde_json::json!({})));
    let with_status = hr(serde_json::json!({"status": {"observedGeneration": 1}}));
    assert_eq!(trigger_hash(&with_status), base);
    let with_plan = hr(serde_json::json!({"metadata": {"annotations": {
        PLAN_REVISION_ANNOTATION: "3", PLAN_DIGEST_ANNOTATION: "sha256:00",
    }}}));
    assert_eq!(trigger_hash(&with_plan), base);
    let generation = hr(serde_json::json!({"metadata": {"generation": 2}}));
    assert_ne!(trigger_hash(&generation), base);
    let token = hr(serde_json::json!({"metadata": {"annotations": {
        RECONCILE_REQUEST_ANNOTATION: "now",
    }}}));
    assert_ne!(trigger_hash(&token), base);
    let deleted =
        hr(serde_json::json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}));
    assert_ne!(trigger_hash(&deleted), base);
}

#[test]
fn the_plan_digest_ignores_the_revision_and_sees_the_values() {
    let core = hr(serde_json::json!({})).to_core().unwrap();
    let chart = ChartArtifact {
        name: "podinfo".into(),
        version: "6.5.2".into(),
        app_version: None,
        digest: ChartDigest::of_bytes(b"chart"),
        oci_digest: None,
    };
    let plan = |rev: u64, values: serde_json::Value| {
        ReleasePlan::from_helm_release(&core, PlanRevision::new(rev), chart.clone(), values)
            .unwrap()
    };
    let one = plan_digest(&plan(1, serde_json::json!({"a": 1})));
    assert_eq!(one, plan_digest(&plan(7, serde_json::json!({"a": 1}))));
    assert_ne!(one, plan_digest(&plan(1, serde_json::json!({"a": 2}))));
    assert!(one.starts_with("sha256:"));
}

#[test]
fn the_target_is_the_cluster_ref_or_a_cluster_api_kubeconfig_else_the_kube_config_secret_else_the_hubs_cluster()
 {
    assert_eq!(
        target_of(&hr(serde_json::json!({}))).ok(),
        Some(TargetId::Local)
    );
    let kc = hr(serde_json::json!({"spec": {"kubeConfig": {"secretRef": {"name": "edge"}}}}));
    assert_eq!(
        target_of(&kc).ok(),
        Some(TargetId::KubeConfig {
            namespace: "default".into(),
            name: "edge".into(),
            key: None,
        })
    );
    let keyed = hr(
        serde_json::json!({"spec": {"kubeConfig": {"secretRef": {"name": "edge", "key": "edge.yaml"}}}}),
    );
    assert_eq!(
        target_of(&keyed).ok(),
        Some(TargetId::KubeConfig {
            namespace: "default".into(),
            name: "edge".into(),
            key: Some("edge.yaml".into()),
        })
    );
    let cluster = hr(serde_json::json!({"spec": {"clusterRef": {"name": "edge-1"}}}));
    assert_eq!(
        target_of(&cluster).ok(),
        Some(TargetId::Cluster(
            ClusterId::new("edge-1".to_owned()).unwrap()
        ))
    );
    let capi = hr(serde_json::json!({"spec": {"clusterRef": {"kind": "Cluster", "name": "edge"}}}));
    assert_eq!(
        target_of(&capi).ok(),
        Some(TargetId::KubeConfig {
            namespace: "default".into(),
            name: "edge-kubeconfig".into(),
            key: None,
        }),
        "a Cluster API Cluster is reached through its kubeconfig Secret"
    );
    let cm = hr(serde_json::json!({"spec": {"kubeConfig": {"configMapRef": {"name": "wi"}}}}));
    assert_eq!(
        target_of(&cm).ok(),
        Some(TargetId::KubeConfigMap {
            namespace: "default".into(),
            name: "wi".into(),
        }),
        "a configMapRef is served in push mode through its ConfigMap"
    );
}

fn oci_artifact(revision: &str) -> SourceArtifact {
    SourceArtifact {
        digest: ChartDigest::of_bytes(b"chart"),
        oci_revision: Some(revision.to_owned()),
        what: "OCIRepository 'default/podinfo'".into(),
    }
}

#[test]
fn an_oci_chart_version_gets_the_revision_digest_printed_canonically_as_helm_controller_does() {
    let hex = "9933f58f8bf459eb199d59ebc8a05683f3944e1242d9f5467d99aa2cf08a5370";
    let chart = chart_artifact(
        "podinfo",
        "v1.2",
        "",
        &oci_artifact(&format!("v1.2.0@sha256:{hex}")),
    )
    .expect("a chart");
    assert_eq!(chart.version, "1.2.0+9933f58f8bf4");
    assert_eq!(chart.oci_digest, Some(format!("sha256:{hex}")));
    assert_eq!(chart.app_version, None);
    let plain = chart_artifact(
        "podinfo",
        "6.5.2",
        "6.5.2",
        &SourceArtifact {
            oci_revision: None,
            ..oci_artifact("")
        },
    )
    .expect("a chart");
    assert_eq!(
        (plain.version.as_str(), plain.oci_digest, plain.app_version),
        ("6.5.2", None, Some("6.5.2".to_owned())),
        "a chart that is not from an OCIRepository keeps its version"
    );
}

#[test]
fn an_oci_revision_whose_digest_is_not_ascii_is_a_chart_mutate_error_not_a_panic() {
    // The 12th byte falls inside a two-byte character.
    let revision = "1.2.3@sha256:a\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}";
    let Err(Ok(stop)) = chart_artifact("podinfo", "1.2.3", "", &oci_artifact(revision)) else {
        panic!("a revision with a non-ASCII digest is refused");
    };
    assert_eq!(stop.reason, reason::CHART_MUTATE_ERROR);
    assert!(
        stop.message
            .starts_with("invalid artifact revision sha256:a")
            && stop.message.ends_with("(OCIRepository 'default/podinfo')"),
        "{}",
        stop.message
    );
    let Err(Ok(stop)) = chart_artifact(
        "podinfo",
        "1.2.3",
        "",
        &oci_artifact("1.2.4@sha256:9933f58f8bf459eb"),
    ) else {
        panic!("a tag that is another version is refused");
    };
    assert_eq!(
        stop.message,
        "artifact revision 1.2.4 does not match chart version 1.2.3 (OCIRepository 'default/podinfo')"
    );
}

#[test]
fn the_references_of_a_helm_release_are_all_it_reads_its_chart_values_config_map_and_cluster_api_secret()
 {
    let all = hr(serde_json::json!({"spec": {
        "valuesFrom": [{"kind": "Secret", "name": "s"}, {"kind": "ConfigMap", "name": "c"}],
        "kubeConfig": {"configMapRef": {"name": "wi"}},
    }}));
    assert_eq!(
        references(&all, &key("podinfo")),
        vec![
            ref_key("Secret", "default", "s"),
            ref_key("ConfigMap", "default", "c"),
            ref_key("HelmChart", "default", "default-podinfo"),
            ref_key("ConfigMap", "default", "wi"),
        ]
    );
    let capi = hr(serde_json::json!({"spec": {
        "chart": null,
        "chartRef": {"kind": "OCIRepository", "name": "oci", "namespace": "flux"},
        "clusterRef": {"kind": "Cluster", "name": "edge"},
    }}));
    assert_eq!(
        references(&capi, &key("podinfo")),
        vec![
            ref_key("OCIRepository", "flux", "oci"),
            ref_key("Secret", "default", "edge-kubeconfig"),
        ]
    );
}

#[test]
fn a_source_is_ready_only_with_an_artifact_for_its_generation_not_failed_nor_stalled() {
    let artifact = Artifact {
        path: "p".into(),
        url: "u".into(),
        revision: "1.0.0".into(),
        digest: ChartDigest::of_bytes(b"x").as_str().into(),
        last_update_time: util::now(),
        size: None,
        metadata: Default::default(),
    };
    let now = util::now();
    let mut conditions = Vec::new();
    conditions.set_condition(
        condition::READY,
        flotilla_core::meta::ConditionStatus::False,
        "ChartPullError",
        "boom".into(),
        2,
        &now,
    );
    assert_eq!(source_ready(Some(2), 2, &[], Some(&artifact)), Ok(()));
    assert_eq!(
        source_ready(Some(2), 2, &conditions, Some(&artifact)),
        Err("boom".to_owned()),
        "Ready=False for the observed generation"
    );
    assert_eq!(
        source_ready(Some(3), 2, &conditions, Some(&artifact)),
        Err("boom".to_owned())
    );
    assert_eq!(
        source_ready(Some(2), 2, &conditions, None),
        Err("boom".to_owned())
    );
    conditions.set_condition(
        condition::STALLED,
        flotilla_core::meta::ConditionStatus::True,
        "x",
        "y".into(),
        2,
        &now,
    );
    assert!(source_ready(Some(2), 2, &conditions, Some(&artifact)).is_err());
}
