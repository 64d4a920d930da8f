//! Differential tests of the post-renderers (`flotilla_chart::postrender`) against the real
//! `kubectl kustomize` (kubectl v1.35.2, kustomize v5.7.1).
//!
//! For each case and each `kustomize` entry, the reference side writes the current manifest as
//! `helm-output.yaml` and a kustomization with it as the only resource, the entry's patches
//! and images, and `sortOptions: {order: fifo}` (helm-controller's build does not reorder),
//! runs `kubectl kustomize`, and feeds the output to the next entry, as helm-controller
//! chains its post-renderers. Our output must be byte-identical to kubectl's. Error cases
//! must fail on both sides, ours with a message naming the entry and the patch.

use std::path::Path;
use std::process::Command;

use flotilla_chart::postrender::{PostRenderer, parse_post_renderers, post_render};
use serde_json::{Value as Json, json};

/// The kustomization equivalent to one entry, over `helm-output.yaml`.
fn kustomization(entry: &PostRenderer) -> Json {
    let k = entry
        .kustomize
        .as_ref()
        .expect("entries under test have kustomize");
    let patches: Vec<Json> = k
        .patches
        .iter()
        .map(|p| {
            let mut o = json!({ "patch": p.patch });
            if let Some(t) = &p.target {
                let mut sel = serde_json::Map::new();
                for (key, v) in [
                    ("group", &t.group),
                    ("version", &t.version),
                    ("kind", &t.kind),
                    ("name", &t.name),
                    ("namespace", &t.namespace),
                    ("labelSelector", &t.label_selector),
                    ("annotationSelector", &t.annotation_selector),
                ] {
                    if !v.is_empty() {
                        sel.insert(key.into(), Json::String(v.clone()));
                    }
                }
                o["target"] = Json::Object(sel);
            }
            o
        })
        .collect();
    let images: Vec<Json> = k
        .images
        .iter()
        .map(|i| {
            let mut o = serde_json::Map::new();
            for (key, v) in [
                ("name", &i.name),
                ("newName", &i.new_name),
                ("newTag", &i.new_tag),
                ("digest", &i.digest),
            ] {
                if !v.is_empty() {
                    o.insert(key.into(), Json::String(v.clone()));
                }
            }
            Json::Object(o)
        })
        .collect();
    json!({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": ["helm-output.yaml"],
        "sortOptions": {"order": "fifo"},
        "patches": patches,
        "images": images,
    })
}

/// kubectl kustomize over one entry; `Err` carries kubectl's stderr.
fn kubectl_kustomize(dir: &Path, manifest: &str, entry: &PostRenderer) -> Result<String, String> {
    std::fs::write(dir.join("helm-output.yaml"), manifest).expect("write resources");
    std::fs::write(
        dir.join("kustomization.yaml"),
        kustomization(entry).to_string(),
    )
    .expect("write kustomization");
    let kubectl = flotilla_tests::tools::kubectl().expect("reference kubectl");
    let out = Command::new(kubectl)
        .arg("kustomize")
        .arg(dir)
        .output()
        .expect("run kubectl kustomize");
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).expect("utf-8 output"))
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// The reference result of all entries, in order.
fn reference(manifest: &str, renderers: &[PostRenderer]) -> Result<String, String> {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut current = manifest.to_owned();
    for entry in renderers {
        if entry.kustomize.is_some() {
            current = kubectl_kustomize(dir.path(), &current, entry)?;
        }
    }
    Ok(current)
}

/// Runs one case: both sides must succeed with the same bytes.
fn same(name: &str, manifest: &str, spec: &str) {
    let renderers = parse_post_renderers(spec).unwrap_or_else(|e| panic!("{name}: spec: {e}"));
    let want = reference(manifest, &renderers)
        .unwrap_or_else(|e| panic!("{name}: kubectl kustomize failed: {e}"));
    let got =
        post_render(manifest, &renderers).unwrap_or_else(|e| panic!("{name}: ours failed: {e}"));
    assert_eq!(got, want, "{name}: output differs from kubectl kustomize");
}

/// Runs an error case: both sides must fail; ours must contain `message`.
fn both_fail(name: &str, manifest: &str, spec: &str, message: &str) {
    let renderers = parse_post_renderers(spec).unwrap_or_else(|e| panic!("{name}: spec: {e}"));
    let want = reference(manifest, &renderers);
    assert!(
        want.is_err(),
        "{name}: kubectl kustomize succeeded: {want:?}"
    );
    let got = post_render(manifest, &renderers).expect_err("ours must fail too");
    let got = got.to_string();
    assert!(
        got.contains(message),
        "{name}: our error {got:?} does not contain {message:?} (kubectl: {})",
        want.expect_err("checked above")
    );
}

const APP: &str = r#"---
# Source: app/templates/sa.yaml
apiVersion: v1
kind: ServiceAccount
metadata:
  name: web
  namespace: prod
  labels:
    app: web
---
# Source: app/templates/ns.yaml
apiVersion: v1
kind: Namespace
metadata:
  name: prod
---
# Source: app/templates/cm.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-config
  labels:
    app: web
    tier: config
  annotations:
    team: a
    example.com/owner: ops
  finalizers: [x.io/a, x.io/b]
data:
  key: "value"
  port: "8080"
---
# Source: app/templates/service.yaml
apiVersion: v1
kind: Service
metadata:
  name: web
  labels:
    app: web
    tier: front
spec:
  type: ClusterIP
  ports:
    - port: 80
      targetPort: http
      protocol: TCP
      name: http
  selector:
    app: web
---
# Source: app/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels:
    app: web
    tier: front
  annotations:
    team: b
spec:
  replicas: 1
  selector:
    matchLabels:
      app: web
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxSurge: 1
  template:
    metadata:
      labels:
        app: web
    spec:
      serviceAccountName: web
      initContainers:
        - name: init
          image: busybox:1.36
          command: ["sh", "-c", "true"]
      containers:
        - name: web
          image: "ghcr.io/acme/web:1.2.3"
          ports:
            - name: http
              containerPort: 8080
              protocol: TCP
            - name: metrics
              containerPort: 9090
          env:
            - name: A
              value: "1"
            - name: B
              valueFrom:
                configMapKeyRef:
                  name: web-config
                  key: key
          volumeMounts:
            - name: data
              mountPath: /data
            - name: cache
              mountPath: /cache
          resources:
            limits:
              cpu: 100m
              memory: 128Mi
        - name: sidecar
          image: docker.io/library/nginx:1.25@sha256:0123456789abcdef
      volumes:
        - name: data
          emptyDir: {}
        - name: cache
          emptyDir:
            medium: Memory
        - name: model
          image:
            reference: quay.io/acme/model:v1
      tolerations:
        - key: a
          operator: Exists
---
# Source: app/templates/api.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web-api
  namespace: prod
  labels:
    app: api
    skip: "yes"
spec:
  template:
    spec:
      containers:
        - name: api
          image: ghcr.io/acme/api:2.0
---
# Source: app/templates/cronjob.yaml
apiVersion: batch/v1
kind: CronJob
metadata:
  name: cleanup
spec:
  schedule: "0 * * * *"
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers:
            - name: cleanup
              image: busybox
---
# Source: app/templates/widget.yaml
apiVersion: example.com/v1
kind: Widget
metadata:
  name: web
spec:
  items:
    - name: a
      size: 1
    - name: b
      size: 2
  containers:
    - name: c
      image: busybox:1.0
---
# Source: app/templates/rbac.yaml
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: web-reader
rules:
  - apiGroups: [""]
    resources: ["pods"]
    verbs: ["get", "list"]
"#;

#[test]
fn selectors_pick_targets_by_every_field() {
    // A strategic merge patch works on every kind (its kind and name are not used with a
    // target), so every selected object shows the label.
    let label = |target: &str| {
        format!(
            "- kustomize:\n    patches:\n    - target: {target}\n      patch: |\n        apiVersion: v1\n        kind: Any\n        metadata:\n          name: any\n          labels:\n            picked: \"yes\"\n"
        )
    };
    for (name, target) in [
        ("kind regex", "{kind: 'Deploy.*'}"),
        ("kind alternation", "{kind: 'Service|ConfigMap'}"),
        ("kind is anchored", "{kind: 'Deploy'}"),
        ("group", "{group: apps}"),
        ("group regex", "{group: 'rbac\\..*'}"),
        ("core group is empty", "{group: '', kind: ServiceAccount}"),
        ("version", "{version: v1}"),
        ("version regex", "{version: 'v1|v2'}"),
        ("name regex", "{name: 'web-.*'}"),
        ("name is anchored", "{name: web}"),
        ("namespace", "{namespace: prod}"),
        ("no namespace is default", "{namespace: default}"),
        (
            "label selector",
            "{labelSelector: 'app=web,tier in (front, config)'}",
        ),
        (
            "label selector not and exists",
            "{labelSelector: '!skip,app'}",
        ),
        (
            "label selector notin",
            "{labelSelector: 'tier notin (front)'}",
        ),
        ("annotation selector", "{annotationSelector: 'team=a'}"),
        (
            "annotation selector with prefix",
            "{annotationSelector: 'example.com/owner'}",
        ),
        (
            "everything together",
            "{group: apps, version: v1, kind: Deployment, name: 'web.*', namespace: prod, labelSelector: app=api}",
        ),
        ("target matching nothing", "{kind: Nothing}"),
    ] {
        same(name, APP, &label(target));
    }
}

#[test]
fn strategic_merge_of_built_in_types() {
    same(
        "containers, env, ports, volumeMounts and volumes merge by their keys",
        APP,
        r#"
- kustomize:
    patches:
    - patch: |
        apiVersion: apps/v1
        kind: Deployment
        metadata:
          name: web
          labels:
            added: "true"
        spec:
          replicas: 3
          template:
            spec:
              containers:
              - name: sidecar
                env:
                - name: S
                  value: s
              - name: new
                image: new:1
              - name: web
                env:
                - name: A
                  value: "2"
                - name: C
                  value: "3"
                ports:
                - containerPort: 8080
                  protocol: UDP
                  name: http-udp
                - containerPort: 9090
                  name: prom
                volumeMounts:
                - mountPath: /cache
                  readOnly: true
                - mountPath: /tmp
                  name: tmp
              volumes:
              - name: tmp
                emptyDir: {}
              - name: cache
                emptyDir:
                  sizeLimit: 1Gi
              tolerations:
              - key: b
                operator: Exists
"#,
    );
    same(
        "several documents in one patch, each naming its target",
        APP,
        r#"
- kustomize:
    patches:
    - patch: |
        apiVersion: v1
        kind: Service
        metadata:
          name: web
        spec:
          ports:
          - port: 80
            targetPort: 8081
          - port: 443
            name: https
        ---
        apiVersion: v1
        kind: ConfigMap
        metadata:
          name: web-config
          finalizers: [x.io/c, x.io/a]
        data:
          extra: "1"
"#,
    );
    same(
        "a targeted patch applies to every match and keeps names",
        APP,
        r#"
- kustomize:
    patches:
    - target: {kind: Deployment}
      patch: |
        apiVersion: apps/v1
        kind: Deployment
        metadata:
          name: not-used
          namespace: elsewhere
          annotations:
            patched: "1"
        spec:
          template:
            spec:
              containers:
              - name: web
                image: patched:1
"#,
    );
    same(
        "custom resources have their lists replaced",
        APP,
        r#"
- kustomize:
    patches:
    - patch: |
        apiVersion: example.com/v1
        kind: Widget
        metadata:
          name: web
        spec:
          items:
          - name: b
            size: 3
"#,
    );
}

#[test]
fn strategic_merge_directives() {
    for (name, body) in [
        (
            "$patch: delete on a list element",
            "spec:\n  template:\n    spec:\n      containers:\n      - name: sidecar\n        $patch: delete\n",
        ),
        (
            "$patch: replace on an existing list element leaves it unchanged",
            "spec:\n  template:\n    spec:\n      containers:\n      - name: sidecar\n        $patch: replace\n        image: other:1\n      - name: extra\n        $patch: replace\n        image: extra:1\n",
        ),
        (
            "$patch: replace on a map",
            "spec:\n  template:\n    spec:\n      containers:\n      - name: web\n        resources:\n          $patch: replace\n          requests:\n            cpu: 1\n",
        ),
        (
            "$patch: replace on a list",
            "spec:\n  template:\n    spec:\n      containers:\n      - name: web\n        env:\n        - $patch: replace\n        - name: ONLY\n          value: x\n",
        ),
        (
            "$patch: delete on a list",
            "spec:\n  template:\n    spec:\n      initContainers:\n      - $patch: delete\n",
        ),
        (
            "$patch: delete on a map",
            "spec:\n  strategy:\n    $patch: delete\n",
        ),
        (
            "null removes a field",
            "  annotations:\n    team: null\nspec:\n  strategy:\n    rollingUpdate: null\n",
        ),
        (
            "$retainKeys is kept as a field",
            "spec:\n  strategy:\n    $retainKeys: [type]\n    type: Recreate\n",
        ),
        (
            "$setElementOrder is kept as a field",
            "spec:\n  template:\n    spec:\n      $setElementOrder/containers:\n      - name: sidecar\n      - name: web\n      containers:\n      - name: web\n        image: x:1\n",
        ),
        (
            "$deleteFromPrimitiveList is kept as a field",
            "spec:\n  template:\n    spec:\n      containers:\n      - name: init\n        $deleteFromPrimitiveList/command: [true]\n",
        ),
    ] {
        let spec = format!(
            "- kustomize:\n    patches:\n    - patch: |\n        apiVersion: apps/v1\n        kind: Deployment\n        metadata:\n          name: web\n{}",
            body.lines()
                .map(|l| format!("        {l}\n"))
                .collect::<String>()
        );
        same(name, APP, &spec);
    }
    same(
        "$patch: delete removes the object",
        APP,
        "- kustomize:\n    patches:\n    - patch: |\n        apiVersion: v1\n        kind: Service\n        metadata:\n          name: web\n        $patch: delete\n",
    );
}

#[test]
fn json6902_operations() {
    same(
        "add, remove, replace, move, copy and test, in YAML",
        APP,
        r#"
- kustomize:
    patches:
    - target: {kind: Deployment, name: web}
      patch: |
        - op: test
          path: /spec/replicas
          value: 1
        - op: replace
          path: /spec/replicas
          value: 2
        - op: add
          path: /metadata/annotations/example.com~1note
          value: a/b
        - op: add
          path: /metadata/annotations/tilde~0key
          value: t
        - op: add
          path: /spec/template/spec/containers/0/env/-
          value: {name: Z, value: z}
        - op: add
          path: /spec/template/spec/containers/0/env/0
          value: {name: FIRST, value: f}
        - op: remove
          path: /spec/template/spec/tolerations
        - op: copy
          from: /metadata/labels/app
          path: /metadata/labels/copied
        - op: move
          from: /metadata/annotations/team
          path: /metadata/labels/team
        - op: remove
          path: /spec/template/spec/containers/-1
"#,
    );
    same(
        "JSON form",
        APP,
        r#"
- kustomize:
    patches:
    - target: {kind: Service}
      patch: '[{"op": "add", "path": "/spec/ports/-", "value": {"port": 443, "name": "https"}}, {"op": "replace", "path": "/spec/type", "value": "NodePort"}]'
"#,
    );
}

#[test]
fn images() {
    for (name, images) in [
        ("new tag", "[{name: busybox, newTag: '1.37'}]"),
        (
            "new name keeps the tag",
            "[{name: ghcr.io/acme/web, newName: registry.local/web}]",
        ),
        (
            "digest replaces the tag",
            "[{name: ghcr.io/acme/api, digest: 'sha256:abcdef'}]",
        ),
        (
            "tag replaces the digest",
            "[{name: docker.io/library/nginx, newTag: '1.27'}]",
        ),
        (
            "tag and digest",
            "[{name: busybox, newTag: '1', digest: 'sha256:0a'}]",
        ),
        (
            "name without registry does not match",
            "[{name: nginx, newTag: x}]",
        ),
        ("image volumes", "[{name: quay.io/acme/model, newTag: v2}]"),
        (
            "several in order",
            "[{name: busybox, newName: busybox2}, {name: busybox2, newTag: '9'}]",
        ),
    ] {
        same(name, APP, &format!("- kustomize:\n    images: {images}\n"));
    }
}

#[test]
fn post_renderers_run_in_order() {
    same(
        "the second entry sees the first's output",
        APP,
        r#"
- kustomize:
    patches:
    - target: {kind: ConfigMap}
      patch: |
        - op: add
          path: /metadata/labels/stage
          value: one
    images:
    - name: busybox
      newName: example/busybox
- kustomize:
    patches:
    - target: {labelSelector: stage=one}
      patch: |
        - op: add
          path: /metadata/labels/stage
          value: two
    images:
    - name: example/busybox
      newTag: "2"
"#,
    );
}

#[test]
fn a_real_chart_output() {
    let golden = std::fs::read_to_string(
        flotilla_tests::cluster::workspace_root()
            .join("../shared/charts/podinfo/golden/default.yaml"),
    )
    .expect("podinfo golden output");
    same(
        "podinfo",
        &golden,
        r#"
- kustomize:
    patches:
    - target: {kind: Deployment}
      patch: |
        apiVersion: apps/v1
        kind: Deployment
        metadata:
          name: any
        spec:
          template:
            spec:
              containers:
              - name: podinfo
                env:
                - name: EXTRA
                  value: "1"
    images:
    - name: ghcr.io/stefanprodan/podinfo
      newTag: 6.0.0
"#,
    );
}

#[test]
fn errors_name_the_post_renderer_and_the_patch() {
    both_fail(
        "bad patch YAML",
        APP,
        "- kustomize:\n    patches:\n    - patch: |\n        apiVersion: v1\n        kind: [unclosed\n",
        "postRenderers[0].kustomize.patches[0]: not a strategic merge patch",
    );
    both_fail(
        "pointer to a missing path",
        APP,
        "- kustomize:\n    patches:\n    - target: {kind: Service}\n      patch: '[{\"op\": \"replace\", \"path\": \"/spec/missing/x\", \"value\": 1}]'\n    - target: {kind: Service}\n      patch: '[{\"op\": \"replace\", \"path\": \"/spec/nothing/x\", \"value\": 1}]'\n",
        "postRenderers[0].kustomize.patches[0]: v1 Service web: operation 0 (replace /spec/missing/x): path \"/spec/missing/x\" does not exist",
    );
    both_fail(
        "a strategic merge patch whose own id matches nothing",
        APP,
        "- kustomize: {}\n- kustomize:\n    patches:\n    - patch: '[]'\n      target: {kind: Service}\n    - patch: |\n        apiVersion: apps/v1\n        kind: Deployment\n        metadata:\n          name: missing\n        spec:\n          replicas: 2\n",
        "postRenderers[1].kustomize.patches[1]: no object matches strategic merge patch apps/v1 Deployment missing",
    );
    both_fail(
        "a JSON patch without a target",
        APP,
        "- kustomize:\n    patches:\n    - patch: '[{\"op\": \"add\", \"path\": \"/x\", \"value\": 1}]'\n",
        "postRenderers[0].kustomize.patches[0]: a JSON 6902 patch needs a target",
    );
    both_fail(
        "a failed test operation",
        APP,
        "- kustomize:\n    patches:\n    - target: {kind: Deployment, name: web}\n      patch: '[{\"op\": \"test\", \"path\": \"/spec/replicas\", \"value\": 5}]'\n",
        "operation 0 (test /spec/replicas): test failed",
    );
    both_fail(
        "a key repeated in an object",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  labels:\n    x: \"1\"\n    x: \"2\"\n",
        "- kustomize:\n    images: [{name: busybox, newTag: '1'}]\n",
        "post-renderer input: document 1: yaml: unmarshal errors:",
    );
    both_fail(
        "an invalid name regex",
        APP,
        "- kustomize:\n    patches:\n    - target: {name: 'web(('}\n      patch: '[]'\n",
        "postRenderers[0].kustomize.patches[0]: target.name \"web((\" is not a valid regular expression",
    );
}

/// `helm template --post-renderer` with a Helm v4 post-renderer plugin that runs `kubectl
/// kustomize` on the equivalent kustomization, against `flotilla template` with the same
/// post-renderer entry: Helm's merge of the files into one stream (filename annotation), the
/// split back and the sorting, hooks included, must give the same output. Random test-pod
/// name suffixes are the only differences allowed.
#[test]
fn template_with_post_renderers_matches_helm_with_a_kustomize_plugin() {
    let spec = r#"
- kustomize:
    patches:
    - target: {kind: Deployment}
      patch: |
        apiVersion: apps/v1
        kind: Deployment
        metadata:
          name: any
          annotations:
            example.com/patched: "true"
    - target: {kind: Pod|Job}
      patch: |
        - op: add
          path: /metadata/labels
          value: {hooked: "yes"}
    images:
    - name: ghcr.io/stefanprodan/podinfo
      newTag: 6.0.0
    - name: curlimages/curl
      newName: registry.local/curl
"#;
    let renderers = parse_post_renderers(spec).expect("spec");
    let plugin = tempfile::tempdir().expect("temp dir");
    let dir = plugin.path().join("krender");
    std::fs::create_dir_all(&dir).expect("plugin dir");
    std::fs::write(
        dir.join("plugin.yaml"),
        "apiVersion: v1\nname: krender\ntype: postrenderer/v1\nruntime: subprocess\nversion: 0.1.0\nruntimeConfig:\n  platformCommand:\n    - command: ${HELM_PLUGIN_DIR}/run.sh\n",
    )
    .expect("plugin.yaml");
    std::fs::write(
        dir.join("run.sh"),
        "#!/bin/sh\nset -e\nd=$(mktemp -d)\ncat > \"$d/helm-output.yaml\"\ncp \"$KRENDER_KUSTOMIZATION\" \"$d/kustomization.yaml\"\n\"$KRENDER_KUBECTL\" kustomize \"$d\"\nrm -rf \"$d\"\n",
    )
    .expect("run.sh");
    {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(dir.join("run.sh"), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
    }
    let kz = plugin.path().join("kustomization.yaml");
    std::fs::write(&kz, kustomization(&renderers[0]).to_string()).expect("kustomization");

    let corpus = flotilla_tests::conformance::default_corpus();
    for (chart, stem) in [
        ("podinfo", "default"),
        ("podinfo", "features"),
        ("ingress-nginx", "default"),
    ] {
        let case_dir = corpus.join(chart);
        let cmd = std::fs::read_to_string(case_dir.join(format!("golden/{stem}.cmd")))
            .expect("golden command");
        let (chart_path, mut opts) =
            flotilla_tests::conformance::parse_command(&cmd).expect("parse command");
        let line = cmd
            .lines()
            .find(|l| l.starts_with("helm template"))
            .expect("a helm template line");
        let helm_args: Vec<&str> = line.split_whitespace().skip(1).collect();
        let out = Command::new(flotilla_tests::tools::helm().expect("reference helm"))
            .current_dir(&case_dir)
            .args(&helm_args)
            .args(["--post-renderer", "krender"])
            .env("HELM_PLUGINS", plugin.path())
            .env("KRENDER_KUSTOMIZATION", &kz)
            .env(
                "KRENDER_KUBECTL",
                flotilla_tests::tools::kubectl().expect("kubectl"),
            )
            .output()
            .expect("run helm");
        opts.post_renderers = renderers.clone();
        for f in &mut opts.value_files {
            *f = case_dir.join(&*f).to_string_lossy().into_owned();
        }
        let chart_dir = case_dir.join(&chart_path);
        let ours = flotilla_chart::render::template(&chart_dir.to_string_lossy(), &opts);
        if !out.status.success() {
            // kustomize refuses this chart's output (podinfo's features values repeat an
            // annotation key); so must we.
            let e = ours.expect_err("helm failed, so must we");
            assert!(
                e.message.contains("already set in map"),
                "{chart}/{stem}: helm: {}, ours: {}",
                String::from_utf8_lossy(&out.stderr),
                e.message
            );
            continue;
        }
        let want = String::from_utf8(out.stdout).expect("utf-8");
        let got = ours
            .unwrap_or_else(|e| panic!("{chart}/{stem}: ours failed: {}", e.message))
            .stdout
            .to_text();
        let (w, g): (Vec<&str>, Vec<&str>) = (want.lines().collect(), got.lines().collect());
        for (i, (a, b)) in w.iter().zip(&g).enumerate() {
            assert!(
                a == b
                    || (random_suffix(a)
                        && random_suffix(b)
                        && a[..a.len() - 5] == b[..b.len() - 5]),
                "{chart}/{stem} line {}: helm {a:?}, ours {b:?}",
                i + 1
            );
        }
        assert_eq!(w.len(), g.len(), "{chart}/{stem}: line counts differ");
    }
}

/// A `name: ...-xxxxx` line ending in a random five-character suffix (test pods).
fn random_suffix(line: &str) -> bool {
    line.trim_start().starts_with("name: ")
        && line.len() > 6
        && line[line.len() - 6..].starts_with('-')
        && line[line.len() - 5..]
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
}
