//! The HelmRelease API as users write it: the seed document's manifests parse, round-trip
//! through serde unchanged, and bad manifests are refused with the field named.

use flotilla_core::duration::GoDuration;
use flotilla_core::ids::PlanRevision;
use flotilla_core::plan::{ChartArtifact, ReleasePlan};
use flotilla_core::spec::{
    ChartRefKind, CrdsPolicy, DeletionPropagation, DriftDetectionMode, HelmRelease,
    PostRenderStrategy, RemediationStrategy, ServerSideApplyMode, SpecError, ValuesReferenceKind,
};
use flotilla_core::status::{HelmReleaseStatus, HookPhase, StorageStatus};
use serde_json::Value;

fn yaml(text: &str) -> Value {
    serde_norway::from_str(text).expect("test YAML parses")
}

fn parse(text: &str) -> HelmRelease {
    HelmRelease::from_value(yaml(text)).unwrap_or_else(|e| panic!("{e}"))
}

fn round_trips(hr: &HelmRelease) {
    let v = serde_json::to_value(hr).unwrap();
    let again = HelmRelease::from_value(v.clone()).unwrap();
    assert_eq!(&again, hr);
    assert_eq!(serde_json::to_value(&again).unwrap(), v);
}

/// Every field of the API, in canonical form (Go duration strings), so that the document
/// survives a round trip byte for byte as a JSON value.
const FULL: &str = r#"
apiVersion: helm.flotilla.dev/v1
kind: HelmRelease
metadata:
  name: podinfo
  namespace: default
  generation: 3
  annotations:
    reconcile.fluxcd.io/requestedAt: "2024-05-07T05:00:00Z"
    reconcile.fluxcd.io/forceAt: "2024-05-07T05:00:00Z"
  labels:
    team: web
spec:
  chart:
    metadata:
      labels:
        tier: frontend
      annotations:
        note: x
    spec:
      chart: podinfo
      version: 6.5.*
      sourceRef:
        apiVersion: source.toolkit.fluxcd.io/v1
        kind: HelmRepository
        name: podinfo
        namespace: flux-system
      interval: 5m0s
      reconcileStrategy: ChartVersion
      valuesFiles:
      - values.yaml
      - values-prod.yaml
      ignoreMissingValuesFiles: true
      verify:
        provider: cosign
        secretRef:
          name: cosign-pub
  interval: 10m0s
  kubeConfig:
    secretRef:
      name: prod-kubeconfig
      key: value.yaml
  suspend: true
  releaseName: podinfo-prod
  targetNamespace: prod
  storageNamespace: helm-storage
  dependsOn:
  - name: backend
  - name: database
    namespace: data
    readyExpr: dep.status.conditions.filter(e, e.type == 'Ready').all(e, e.status == 'True')
  timeout: 5m30s
  maxHistory: 10
  serviceAccountName: webapp-reconciler
  persistentClient: false
  driftDetection:
    mode: enabled
    ignore:
    - paths:
      - /spec/replicas
      target:
        kind: Deployment
    - paths:
      - ""
      target:
        group: apps
        version: v1
        name: podinfo.*
        namespace: .*-system
        labelSelector: environment = production
        annotationSelector: environment notin (staging)
  install:
    timeout: 10m0s
    strategy:
      name: RetryOnFailure
      retryInterval: 2m0s
    remediation:
      retries: 3
      ignoreTestFailures: true
      remediateLastFailure: true
    disableTakeOwnership: true
    disableWait: true
    disableWaitForJobs: true
    disableHooks: true
    disableOpenAPIValidation: true
    disableSchemaValidation: true
    replace: true
    skipCRDs: true
    crds: CreateReplace
    createNamespace: true
    serverSideApply: false
  upgrade:
    timeout: 15m0s
    strategy:
      name: RemediateOnFailure
    remediation:
      retries: -1
      ignoreTestFailures: false
      remediateLastFailure: false
      strategy: uninstall
    disableTakeOwnership: true
    disableWait: true
    disableWaitForJobs: true
    disableHooks: true
    disableOpenAPIValidation: true
    disableSchemaValidation: true
    force: true
    preserveValues: true
    cleanupOnFail: true
    crds: Skip
    serverSideApply: disabled
    chartNameChangeStrategy: InPlaceUpdate
  test:
    enable: true
    timeout: 3m0s
    ignoreFailures: true
    filters:
    - name: my-release-test-connection
    - name: my-release-test-migration
      exclude: true
  rollback:
    timeout: 4m0s
    disableWait: true
    disableWaitForJobs: true
    disableHooks: true
    recreate: true
    force: true
    cleanupOnFail: true
    serverSideApply: auto
  uninstall:
    timeout: 6m0s
    disableHooks: true
    keepHistory: true
    disableWait: true
    deletionPropagation: foreground
  valuesFrom:
  - kind: ConfigMap
    name: prod-env-values
    valuesKey: values-prod.yaml
  - kind: Secret
    name: prod-tls-values
    valuesKey: crt
    targetPath: tls.crt
    optional: true
    literal: true
  values:
    replicaCount: 2
    image:
      tag: 6.5.3
    ingress:
      hosts:
      - podinfo.example.com
  commonMetadata:
    annotations:
      owner: web
    labels:
      env: prod
  postRenderers:
  - kustomize:
      patches:
      - target:
          version: v1
          kind: Deployment
          name: metrics-server
        patch: |
          - op: add
            path: /metadata/labels/environment
            value: production
      images:
      - name: docker.io/bitnami/metrics-server
        newName: docker.io/bitnami/metrics-server
        newTag: 0.4.1-debian-10-r54
      - name: nginx
        digest: sha256:24a0c4b4a4c0eb97a1aabb8e29f18e917d05abfe1b7a7c07857230879ce7d3d3
  postRenderStrategy: separate
  waitStrategy:
    name: legacy
  healthCheckExprs:
  - apiVersion: example.com/v1
    kind: Widget
    current: status.ready == true
    inProgress: status.phase == 'Pending'
    failed: status.phase == 'Failed'
  clusterRef:
    name: eu-west-1
"#;

#[test]
fn every_field_of_the_api_round_trips_unchanged() {
    let original = yaml(FULL);
    // kubeConfig and clusterRef are exclusive: check the document without kubeConfig.
    let mut without_kubeconfig = original.clone();
    without_kubeconfig["spec"]
        .as_object_mut()
        .unwrap()
        .remove("kubeConfig");
    let hr = HelmRelease::from_value(without_kubeconfig.clone()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(serde_json::to_value(&hr).unwrap(), without_kubeconfig);

    let s = &hr.spec;
    assert_eq!(s.interval, GoDuration::from_mins(10));
    assert_eq!(s.timeout().to_string(), "5m30s");
    assert_eq!(s.max_history(), 10);
    assert!(!s.persistent_client());
    assert_eq!(s.drift_detection().mode(), DriftDetectionMode::Enabled);
    let install = s.install();
    assert_eq!(install.crds(), CrdsPolicy::CreateReplace);
    assert_eq!(install.retry(), Some(GoDuration::from_secs(120)));
    assert_eq!(install.remediation().retries, 3);
    let upgrade = s.upgrade();
    assert_eq!(
        upgrade.remediation().strategy(),
        RemediationStrategy::Uninstall
    );
    assert_eq!(upgrade.retry(), None);
    assert_eq!(upgrade.server_side_apply(), ServerSideApplyMode::Disabled);
    assert_eq!(
        s.uninstall().deletion_propagation(),
        DeletionPropagation::Foreground
    );
    assert_eq!(s.values_from[1].kind, ValuesReferenceKind::Secret);
    assert_eq!(s.values_from[0].values_key(), "values-prod.yaml");
    assert_eq!(s.post_render_strategy(), PostRenderStrategy::Separate);
    let test = s.test();
    assert!(test.selects("my-release-test-connection"));
    assert!(!test.selects("my-release-test-migration"));
    assert!(
        !test.selects("other"),
        "an include filter keeps only included tests"
    );
    assert_eq!(hr.release_name().unwrap().as_str(), "podinfo-prod");
    assert_eq!(hr.release_namespace(), "prod");
    assert_eq!(hr.storage_namespace(), "helm-storage");
    assert_eq!(hr.helm_chart_name(), "default-podinfo");
    round_trips(&hr);
}

#[test]
fn kubeconfig_and_cluster_ref_are_mutually_exclusive() {
    let err = HelmRelease::from_value(yaml(FULL)).unwrap_err();
    assert!(
        err.to_string()
            .contains("spec.clusterRef: clusterRef and kubeConfig are mutually exclusive"),
        "{err}"
    );
}

#[test]
fn defaults_apply_when_fields_are_omitted() {
    let hr = parse(
        r#"
metadata: {name: podinfo, namespace: default}
spec:
  interval: 10m
  chartRef: {kind: OCIRepository, name: podinfo}
"#,
    );
    let s = &hr.spec;
    assert_eq!(s.timeout().to_string(), "5m0s");
    assert_eq!(s.max_history(), 5);
    assert!(s.persistent_client());
    assert_eq!(s.drift_detection().mode(), DriftDetectionMode::Disabled);
    assert_eq!(s.install().crds(), CrdsPolicy::Create);
    assert_eq!(
        s.upgrade().crds(),
        CrdsPolicy::Create,
        "Flux's code, not its docs"
    );
    assert_eq!(s.install().remediation().retries, 0);
    assert!(!s.install().remediation().remediate_last_failure());
    assert!(!s.upgrade().remediation().remediate_last_failure());
    assert_eq!(
        s.upgrade().remediation().strategy(),
        RemediationStrategy::Rollback
    );
    assert_eq!(s.upgrade().server_side_apply(), ServerSideApplyMode::Auto);
    assert_eq!(
        s.uninstall().deletion_propagation(),
        DeletionPropagation::Background
    );
    assert_eq!(s.post_render_strategy(), PostRenderStrategy::Combined);
    assert_eq!(
        s.chart_ref.as_ref().map(|r| r.kind),
        Some(ChartRefKind::OCIRepository)
    );
    assert_eq!(hr.release_name().unwrap().as_str(), "podinfo");
    // Omitted fields stay omitted.
    let v = serde_json::to_value(&hr).unwrap();
    assert_eq!(
        v["spec"],
        serde_json::json!({"interval": "10m0s", "chartRef": {"kind": "OCIRepository", "name": "podinfo"}})
    );
}

#[test]
fn upgrade_remediation_retries_imply_remediating_the_last_failure() {
    let hr = parse(
        r#"
metadata: {name: podinfo, namespace: default}
spec:
  interval: 10m
  chartRef: {kind: HelmChart, name: podinfo}
  upgrade: {remediation: {retries: 2}}
"#,
    );
    assert!(hr.spec.upgrade().remediation().remediate_last_failure());
}

/// The manifests of the HelmRelease v2 API document, as written there.
const SEED_MANIFESTS: &[&str] = &[
    // The introduction example.
    r#"
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata:
  name: podinfo
  namespace: default
spec:
  interval: 10m
  timeout: 5m
  chart:
    spec:
      chart: podinfo
      version: '6.5.*'
      sourceRef:
        kind: HelmRepository
        name: podinfo
      interval: 5m
  releaseName: podinfo
  install:
    remediation:
      retries: 3
  upgrade:
    remediation:
      retries: 3
  test:
    enable: true
  driftDetection:
    mode: enabled
    ignore:
    - paths: ["/spec/replicas"]
      target:
        kind: Deployment
  values:
    replicaCount: 2
"#,
    // OCIRepository reference.
    r#"
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata:
  name: podinfo
  namespace: default
spec:
  interval: 10m
  chartRef:
    kind: OCIRepository
    name: podinfo
    namespace: default
  values:
    replicaCount: 2
"#,
    // HelmChart reference.
    r#"
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata:
  name: podinfo
  namespace: default
spec:
  interval: 10m
  chartRef:
    kind: HelmChart
    name: podinfo
    namespace: default
  values:
    replicaCount: 2
"#,
    // CRD lifecycle.
    r#"
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata:
  name: my-operator
  namespace: default
spec:
  interval: 10m
  chart:
    spec:
      chart: my-operator
      version: "1.0.1"
      sourceRef:
        kind: HelmRepository
        name: my-operator-repo
      interval: 5m
  install:
    crds: CreateReplace
  upgrade:
    crds: CreateReplace
"#,
    // Remote cluster through Cluster API.
    r#"
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata:
  name: kube-prometheus-stack
  namespace: capi-stage
spec:
  interval: 10m
  kubeConfig:
    secretRef:
      name: stage-kubeconfig
  chart:
    spec:
      chart: prometheus
      version: ">=4.0.0 <5.0.0"
      sourceRef:
        kind: HelmRepository
        name: prometheus-community
  install:
    remediation:
      retries: -1
"#,
    // Service account impersonation.
    r#"
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata:
 name: podinfo
 namespace: webapp
spec:
 serviceAccountName: webapp-reconciler
 interval: 5m
 chart:
   spec:
     chart: podinfo
     sourceRef:
       kind: HelmRepository
       name: podinfo
"#,
    // Uninstall without hooks, dependencies, values references, filters, post renderers.
    r#"
apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata:
  name: frontend
  namespace: default
spec:
  interval: 5m
  chart:
    spec:
      chart: frontend
      sourceRef: {kind: HelmRepository, name: charts}
  uninstall:
    disableHooks: true
  dependsOn:
    - name: backend
  valuesFrom:
    - kind: ConfigMap
      name: prod-env-values
      valuesKey: values-prod.yaml
    - kind: Secret
      name: prod-tls-values
      valuesKey: crt
      targetPath: tls.crt
      optional: true
  test:
    enable: true
    filters:
      - name: my-release-test-connection
        exclude: false
      - name: my-release-test-migration
        exclude: true
  postRenderers:
    - kustomize:
        patches:
          - target:
              version: v1
              kind: Deployment
              name: metrics-server
            patch: |
              - op: add
                path: /metadata/labels/environment
                value: production
        images:
          - name: docker.io/bitnami/metrics-server
            newName: docker.io/bitnami/metrics-server
            newTag: 0.4.1-debian-10-r54
"#,
];

#[test]
fn the_seed_documents_manifests_parse_and_round_trip() {
    for (i, m) in SEED_MANIFESTS.iter().enumerate() {
        let hr = HelmRelease::from_value(yaml(m)).unwrap_or_else(|e| panic!("manifest {i}: {e}"));
        round_trips(&hr);
    }
    let intro = parse(SEED_MANIFESTS[0]);
    assert_eq!(intro.spec.install().remediation().retries, 3);
    assert!(intro.spec.test().enable);
    assert_eq!(intro.spec.values_object()["replicaCount"], 2);
    assert_eq!(
        parse(SEED_MANIFESTS[4])
            .spec
            .install()
            .remediation()
            .retries,
        -1
    );
}

#[test]
fn a_seed_manifest_becomes_a_release_plan() {
    let hr = parse(SEED_MANIFESTS[0]);
    let chart = ChartArtifact {
        name: "podinfo".into(),
        version: "6.5.3".into(),
        app_version: Some("6.5.3".into()),
        digest: flotilla_core::ids::ChartDigest::of_bytes(b"podinfo-6.5.3.tgz"),
        oci_digest: None,
    };
    let values = hr.spec.values.clone().unwrap();
    let plan = ReleasePlan::from_helm_release(&hr, PlanRevision::FIRST, chart, values).unwrap();
    assert_eq!(plan.release.name.as_str(), "podinfo");
    assert_eq!(plan.release.namespace.as_str(), "default");
    assert_eq!(plan.release.storage_namespace.as_str(), "default");
    assert_eq!(
        plan.config_digest,
        flotilla_core::digest::config_digest(&plan.values)
    );
    assert_eq!(plan.options.install.remediation().retries, 3);
    let wire = serde_json::to_value(&plan).unwrap();
    let back: ReleasePlan = serde_json::from_value(wire).unwrap();
    assert_eq!(back, plan);
}

#[test]
fn the_seed_documents_status_parses_with_history_and_test_hooks() {
    let status: HelmReleaseStatus = serde_norway::from_str(
        r#"
conditions:
- lastTransitionTime: "2023-12-06T18:23:21Z"
  message: Failed to install after 1 attempt(s)
  observedGeneration: 1
  reason: RetriesExceeded
  status: "True"
  type: Stalled
history:
- appVersion: 6.6.1
  chartName: podinfo
  chartVersion: 6.6.1+0cc9a8446c95
  configDigest: sha256:e15c415d62760896bd8bec192a44c5716dc224db9e0fc609b9ac14718f8f9e56
  digest: sha256:e59349a6d8cf01d625de9fe73efd94b5e2a8cc8453d1b893ec367cfa2105bae9
  firstDeployed: "2024-05-07T04:54:21Z"
  lastDeployed: "2024-05-07T04:54:55Z"
  name: podinfo
  namespace: podinfo
  ociDigest: sha256:0cc9a8446c95009ef382f5eade883a67c257f77d50f84e78ecef2aac9428d1e5
  status: deployed
  testHooks:
    podinfo-grpc-test-goyey:
      lastCompleted: "2024-05-07T04:55:11Z"
      lastStarted: "2024-05-07T04:55:09Z"
      phase: Succeeded
    podinfo-jwt-test-7k1hv:
  version: 2
- appVersion: 6.6.0
  chartName: podinfo
  chartVersion: 6.6.0+cdd538a0167e
  configDigest: sha256:e15c415d62760896bd8bec192a44c5716dc224db9e0fc609b9ac14718f8f9e56
  digest: sha256:9be0d34ced6b890a72026749bc0f1f9e3c1a89673e17921bbcc0f27774f31c3a
  firstDeployed: "2024-05-07T04:54:21Z"
  lastDeployed: "2024-05-07T04:54:21Z"
  name: podinfo
  namespace: podinfo
  status: superseded
  version: 1
lastAttemptedConfigDigest: sha256:e15c415d62760896bd8bec192a44c5716dc224db9e0fc609b9ac14718f8f9e56
lastAttemptedGeneration: 1
lastAttemptedReleaseAction: install
lastAttemptedRevision: 6.5.3
observedGeneration: 1
storageNamespace: default
failures: 1
installFailures: 1
lastHandledForceAt: "x"
lastHandledResetAt: "y"
lastHandledReconcileAt: "x"
"#,
    )
    .unwrap();
    let latest = status.latest().unwrap();
    assert_eq!(latest.version, 2);
    assert_eq!(latest.full_release_name(), "podinfo/podinfo.v2");
    assert_eq!(latest.versioned_chart_name(), "podinfo@6.6.1+0cc9a8446c95");
    let hooks = latest.test_hooks.as_ref().unwrap();
    assert_eq!(
        hooks["podinfo-grpc-test-goyey"].phase,
        Some(HookPhase::Succeeded)
    );
    assert_eq!(
        hooks["podinfo-jwt-test-7k1hv"].phase, None,
        "a null hook never ran"
    );
    assert!(!latest.has_been_tested());
    assert_eq!(status.previous(false).map(|s| s.version), Some(1));
    assert_eq!(
        StorageStatus::parse(&latest.status),
        Some(StorageStatus::Deployed)
    );
    let v = serde_json::to_value(&status).unwrap();
    let back: HelmReleaseStatus = serde_json::from_value(v).unwrap();
    assert_eq!(back, status);
}

fn decode_error(text: &str) -> (String, String) {
    match HelmRelease::from_value(yaml(text)) {
        Err(SpecError::Decode { field, message, .. }) => (field, message),
        other => panic!("expected a decode error, got {other:?}"),
    }
}

fn invalid_fields(text: &str) -> Vec<String> {
    match HelmRelease::from_value(yaml(text)) {
        Err(SpecError::Invalid { errors, .. }) => errors.into_iter().map(|e| e.field).collect(),
        other => panic!("expected validation errors, got {other:?}"),
    }
}

const HEAD: &str = "metadata: {name: podinfo, namespace: default}\n";

#[test]
fn decode_errors_name_the_field() {
    let cases = [
        (
            "spec: {interval: 10m, chartRef: {kind: HelmChart, name: x}, install: {remediation: {retries: three}}}",
            "spec.install.remediation.retries",
        ),
        (
            "spec: {interval: 10m, chartRef: {kind: HelmChart, name: x}, driftDetection: {mode: sometimes}}",
            "spec.driftDetection.mode",
        ),
        (
            "spec: {interval: 10 minutes, chartRef: {kind: HelmChart, name: x}}",
            "spec.interval",
        ),
        (
            "spec: {interval: 10m, chartRef: {kind: GitRepository, name: x}}",
            "spec.chartRef.kind",
        ),
        (
            "spec: {interval: 10m, chartRef: {kind: HelmChart, name: x}, valuesFrom: [{kind: ConfigMap, name: a}, {kind: Bucket, name: b}]}",
            "spec.valuesFrom[1].kind",
        ),
        (
            "spec: {interval: 10m, chartRef: {kind: HelmChart, name: x}, upgrade: {timeout: 5}}",
            "spec.upgrade.timeout",
        ),
        (
            "spec: {interval: 10m, chartRef: {kind: HelmChart, name: x}, uninstall: {deletionPropagation: cascade}}",
            "spec.uninstall.deletionPropagation",
        ),
        ("spec: {chartRef: {kind: HelmChart, name: x}}", "spec"),
    ];
    for (spec, field) in cases {
        let (got, message) = decode_error(&format!("{HEAD}{spec}"));
        assert_eq!(got, field, "{spec}: {message}");
    }
    let (_, message) = decode_error(&format!(
        "{HEAD}spec: {{chartRef: {{kind: HelmChart, name: x}}}}"
    ));
    assert!(message.contains("interval"), "{message}");
}

#[test]
fn decode_errors_say_which_object_is_bad() {
    let err = HelmRelease::from_json_str(
        r#"{"metadata": {"name": "podinfo", "namespace": "default"},
            "spec": {"interval": "10m", "chartRef": {"kind": "HelmChart", "name": "x"},
                     "install": {"remediation": {"retries": "3"}}}}"#,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "HelmRelease default/podinfo: spec.install.remediation.retries: invalid type: string \"3\", expected i64"
    );
}

#[test]
fn validation_errors_name_every_bad_field() {
    let fields = invalid_fields(&format!(
        "{HEAD}{}",
        r#"
spec:
  interval: 10m
  chart: {spec: {chart: podinfo, sourceRef: {kind: HelmRepository, name: podinfo}}}
  chartRef: {kind: HelmChart, name: podinfo}
  releaseName: a-release-name-that-is-much-longer-than-fifty-three-characters
  targetNamespace: Not_A_Namespace
  valuesFrom:
  - {kind: ConfigMap, name: ok}
  - {kind: Secret, name: tls, valuesKey: "bad key!", targetPath: "a b"}
  install: {strategy: {name: RemediateOnFailure, retryInterval: 1m}}
  driftDetection: {ignore: [{paths: [spec/replicas]}]}
  values: [1, 2]
"#
    ));
    assert_eq!(
        fields,
        [
            "spec",
            "spec.releaseName",
            "spec.targetNamespace",
            "spec.valuesFrom[1].valuesKey",
            "spec.valuesFrom[1].targetPath",
            "spec.values",
            "spec.install.strategy.retryInterval",
            "spec.driftDetection.ignore[0].paths[0]",
        ]
    );
}

#[test]
fn validation_errors_say_which_object_is_bad() {
    let err = HelmRelease::from_value(yaml(&format!(
        "{HEAD}spec: {{interval: 10m, chartRef: {{kind: HelmChart, name: x}}, storageNamespace: -bad}}"
    )))
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "HelmRelease default/podinfo: spec.storageNamespace: namespace \"-bad\" must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"
    );
}

#[test]
fn long_composed_release_names_are_shortened_not_refused() {
    let hr = parse(
        r#"
metadata: {name: nice-object-name, namespace: default}
spec:
  interval: 10m
  chartRef: {kind: HelmChart, name: x}
  targetNamespace: a-very-lengthy-target-namespace-with-a
"#,
    );
    assert_eq!(
        hr.release_name().unwrap().as_str(),
        "a-very-lengthy-target-namespace-with-a-n-97af5d7f41f3"
    );
}

#[test]
fn dependencies_are_ready_when_their_generation_is_observed_and_ready() {
    let mut hr = parse(
        r#"
metadata: {name: backend, namespace: default, generation: 2}
spec: {interval: 10m, chartRef: {kind: HelmChart, name: x}}
status:
  observedGeneration: 2
  conditions:
  - {type: Ready, status: "True", reason: UpgradeSucceeded, message: ok, lastTransitionTime: "2024-01-01T00:00:00Z"}
"#,
    );
    assert!(hr.is_ready());
    hr.metadata.generation = Some(3);
    assert!(!hr.is_ready(), "a new generation is not observed yet");
}
