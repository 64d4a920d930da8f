//! Drift detection and correction, as Flux's helm-controller does them.
//!
//! [`detect`] compares the objects of the current release's stored manifest with the
//! cluster:
//!
//! 1. the manifest's objects are resolved (namespaces defaulted to the release namespace),
//!    normalized ([`normalize::desired`]) and given the release metadata an apply adds
//!    (Helm's `managed-by` label and release annotations, Flotilla's owner labels);
//! 2. an object whose desired or live labels or annotations carry
//!    `helm.flotilla.dev/driftDetection` or `helm.toolkit.fluxcd.io/driftDetection` set to
//!    `disabled` (any case), or matched by an ignore rule with the root pointer `""`, is
//!    **excluded**;
//! 3. otherwise it is server-side applied as a dry run (conflicts forced, Flotilla's field
//!    manager): no resource version in the answer means the object is gone (**create**);
//! 4. else the ignore rules' JSON pointers that target the object are removed from the
//!    dry-run result and from the live object, and the two are diffed ([`jsondiff`]): the
//!    labels and annotations (only additions and changes: labels other controllers add are
//!    no drift) and everything but `metadata` and `status`. A non-empty patch is an
//!    **update** (live → desired).
//!
//! Per-object errors are collected and the other objects still diffed; when nothing
//! changed they make detection fail. The result is a [`DriftSet`], summarized one line per
//! object (`Deployment/default/web changed (0 additions, 1 changes, 0 removals)`,
//! `ConfigMap/default/cfg removed`, `Secret/default/s excluded`).
//!
//! [`correct`] recreates removed objects (sorted by kind order, namespace, name) and
//! applies each update's JSON patch to the live object, reporting `created` and
//! `configured` objects and the errors, for core's `DriftCorrected` and
//! `DriftCorrectionFailed` events. No release revision is made.
//!
//! Differences from Flux, on purpose: removed objects are recreated with server-side apply
//! (as installs apply them, so later upgrades prune their fields) rather than a plain create;
//! an ignore path that is not a JSON pointer is an error naming the field rather than a
//! silent no-op. Kept from Flux: only the last ignore rule without a `target` takes effect
//! (Flux keys its rules by selector, and every untargeted rule has the same key).

pub mod jsondiff;
pub mod normalize;
pub mod selector;

use std::collections::BTreeMap;
use std::time::Duration;

use flotilla_chart::release::Release;
use flotilla_core::plan::{DriftObservation, ReleasePlan};
use flotilla_core::release::Outcome;
use flotilla_core::spec::{DRIFT_DETECTION_METADATA_KEY, IgnoreRule};
use futures::StreamExt as _;
use kube::api::{Patch, PatchParams};
use serde_json::Value;
use tokio::time::Instant;

use crate::kube::apply::{ApplyOptions, HelmReleaseRef, ReleaseRef, with_release_metadata};
use crate::kube::manifest::parse_manifest;
use crate::kube::{ApiFailure, ClusterApi, FIELD_MANAGER, Resource, error_chain};
use jsondiff::{OpKind, Operation};
use selector::{CompiledSelector, Target};

/// Flotilla's label or annotation excluding an object from drift detection (value
/// `disabled`). Flux's `helm.toolkit.fluxcd.io/driftDetection` works too.
pub const DRIFT_DETECTION_KEY: &str = "helm.flotilla.dev/driftDetection";

/// How many objects are diffed at once.
const DIFF_CONCURRENCY: usize = 8;

/// What detection found for one object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiffType {
    /// The object is gone from the cluster.
    Create,
    /// The object differs; the patch turns it back.
    Update,
    /// Excluded by metadata or a root ignore path.
    Exclude,
    /// No difference.
    None,
}

/// One object's diff.
#[derive(Clone, Debug)]
pub struct ObjectDiff {
    /// What was found.
    pub diff_type: DiffType,
    /// The desired object, resolved and normalized (release metadata not yet added).
    pub resource: Resource,
    /// For updates, the JSON patch from the live object to the desired one.
    pub patch: Vec<Operation>,
}

impl ObjectDiff {
    /// `Kind/namespace/name` (`Kind/name` when cluster-scoped), as Flux names objects.
    pub fn subject(&self) -> String {
        subject(&self.resource)
    }

    /// The patch as logs may show it: Secret values masked.
    pub fn masked_patch(&self) -> Value {
        let secret =
            self.resource.api_resource.group.is_empty() && self.resource.kind() == "Secret";
        if !secret {
            return jsondiff::patch_json(&self.patch);
        }
        let mut ops = self.patch.clone();
        for op in &mut ops {
            mask_secret_op(op);
        }
        jsondiff::patch_json(&ops)
    }
}

pub(crate) fn subject(resource: &Resource) -> String {
    match resource.namespace() {
        Some(ns) if !ns.is_empty() => format!("{}/{ns}/{}", resource.kind(), resource.name()),
        _ => format!("{}/{}", resource.kind(), resource.name()),
    }
}

fn mask_secret_op(op: &mut Operation) {
    let both = op.old_value.is_some() && op.value.is_some();
    let (before, after) = if both {
        ("*** (before)", "*** (after)")
    } else {
        ("***", "***")
    };
    let whole = op.path == "/data" || op.path == "/stringData";
    let key = op.path.starts_with("/data/") || op.path.starts_with("/stringData/");
    if whole {
        let old_keys: Vec<String> = op
            .old_value
            .as_ref()
            .and_then(Value::as_object)
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        if let Some(Value::Object(m)) = &mut op.value {
            for (k, v) in m.iter_mut() {
                let changed = old_keys.contains(k);
                *v = Value::String(if changed { "*** (after)" } else { "***" }.into());
            }
        }
    } else if key {
        if op.value.is_some() {
            op.value = Some(Value::String(after.into()));
        }
        if op.old_value.is_some() {
            op.old_value = Some(Value::String(before.into()));
        }
    }
}

/// The result of drift detection: one diff per object diffed, and the per-object errors.
#[derive(Clone, Debug)]
pub struct DriftSet {
    /// The diffs, in manifest order.
    pub diffs: Vec<ObjectDiff>,
    /// Objects that could not be diffed, one message each.
    pub errors: Vec<String>,
    /// How the objects are applied (release and owner), for the correction.
    pub options: ApplyOptions,
}

impl DriftSet {
    /// Whether any object is gone or changed.
    pub fn has_changes(&self) -> bool {
        self.diffs
            .iter()
            .any(|d| matches!(d.diff_type, DiffType::Create | DiffType::Update))
    }

    /// One line per removed, changed or excluded object (Flux's `SummarizeDiffSet`).
    pub fn summary(&self) -> String {
        let mut lines = Vec::new();
        for d in &self.diffs {
            let what = match d.diff_type {
                DiffType::Create => "removed".to_owned(),
                DiffType::Exclude => "excluded".to_owned(),
                DiffType::Update => {
                    let count = |k| d.patch.iter().filter(|o| o.op == k).count();
                    format!(
                        "changed ({} additions, {} changes, {} removals)",
                        count(OpKind::Add),
                        count(OpKind::Replace),
                        count(OpKind::Remove)
                    )
                }
                DiffType::None => continue,
            };
            lines.push(format!("{} {what}", d.subject()));
        }
        lines.join("\n")
    }

    /// `removed: R, changed: C, excluded: E` (Flux's brief summary, for logs).
    pub fn brief(&self) -> String {
        let n = |t| self.diffs.iter().filter(|d| d.diff_type == t).count();
        format!(
            "removed: {}, changed: {}, excluded: {}",
            n(DiffType::Create),
            n(DiffType::Update),
            n(DiffType::Exclude)
        )
    }

    /// The errors as one message (one error as is, several as `[a, b]`, as Go aggregates
    /// them).
    pub fn error(&self) -> Option<String> {
        aggregate(&self.errors)
    }

    /// What core's state machine is told: drift when anything changed (errors are then
    /// logged), else the error, else no drift.
    pub fn observation(&self) -> DriftObservation {
        if self.has_changes() {
            if let Some(e) = self.error() {
                tracing::error!(error = %e, "diff of release against cluster state completed with error");
            }
            DriftObservation::Drifted {
                summary: self.summary(),
            }
        } else if let Some(message) = self.error() {
            DriftObservation::Error { message }
        } else {
            DriftObservation::NoDrift
        }
    }
}

fn aggregate(errors: &[String]) -> Option<String> {
    match errors {
        [] => None,
        [one] => Some(one.clone()),
        many => Some(format!("[{}]", many.join(", "))),
    }
}

/// Ignore rules compiled: targeted rules, then the one untargeted rule that takes effect.
#[derive(Clone, Debug, Default)]
pub struct IgnoreRules {
    rules: Vec<(Option<CompiledSelector>, Vec<String>)>,
}

impl IgnoreRules {
    /// Compiles `spec.driftDetection.ignore`; errors name the field
    /// (`spec.driftDetection.ignore[1].target.kind: invalid regular expression ...`).
    pub fn compile(rules: &[IgnoreRule]) -> Result<IgnoreRules, String> {
        let mut targeted = Vec::new();
        let mut untargeted = None;
        for (i, rule) in rules.iter().enumerate() {
            for (j, p) in rule.paths.iter().enumerate() {
                if let Some(problem) = jsondiff::pointer_problem(p) {
                    return Err(format!(
                        "spec.driftDetection.ignore[{i}].paths[{j}]: {problem}"
                    ));
                }
            }
            match &rule.target {
                Some(t) => {
                    let sel = CompiledSelector::new(t)
                        .map_err(|e| format!("spec.driftDetection.ignore[{i}].target.{e}"))?;
                    targeted.push((Some(sel), rule.paths.clone()));
                }
                None => untargeted = Some(rule.paths.clone()),
            }
        }
        let mut compiled = IgnoreRules { rules: targeted };
        if let Some(paths) = untargeted {
            compiled.rules.push((None, paths));
        }
        Ok(compiled)
    }

    /// The paths to ignore for an object (its desired form).
    pub fn paths_for(&self, obj: &kube::api::DynamicObject, resource: &Resource) -> Vec<String> {
        let empty = BTreeMap::new();
        let target = Target {
            group: &resource.api_resource.group,
            version: &resource.api_resource.version,
            kind: resource.kind(),
            name: obj.metadata.name.as_deref().unwrap_or(""),
            namespace: obj.metadata.namespace.as_deref().unwrap_or(""),
            labels: obj.metadata.labels.as_ref().unwrap_or(&empty),
            annotations: obj.metadata.annotations.as_ref().unwrap_or(&empty),
        };
        self.rules
            .iter()
            .filter(|(sel, _)| sel.as_ref().is_none_or(|s| s.matches(&target)))
            .flat_map(|(_, paths)| paths.iter().cloned())
            .collect()
    }
}

/// Whether labels or annotations switch drift detection off for the object.
pub fn excluded(obj: &kube::api::DynamicObject) -> bool {
    let off = |m: &Option<BTreeMap<String, String>>| {
        m.as_ref().is_some_and(|m| {
            [DRIFT_DETECTION_KEY, DRIFT_DETECTION_METADATA_KEY]
                .iter()
                .any(|k| {
                    m.get(*k)
                        .is_some_and(|v| v.eq_ignore_ascii_case("disabled"))
                })
        })
    };
    off(&obj.metadata.labels) || off(&obj.metadata.annotations)
}

/// The apply options drift detection and correction use for a release and plan.
pub fn apply_options(rls: &Release, plan: &ReleasePlan) -> ApplyOptions {
    ApplyOptions::new(ReleaseRef {
        name: rls.name.clone(),
        namespace: rls.namespace.clone(),
    })
    .owned_by(HelmReleaseRef {
        name: plan.object.name.to_string(),
        namespace: plan.object.namespace.to_string(),
    })
}

/// Detects drift of `rls` (the current release) for `plan`. `Err` is a failure of the
/// whole detection (unreadable manifest, bad ignore rules); per-object failures are in
/// [`DriftSet::errors`].
#[tracing::instrument(skip_all, fields(release = %rls.name, version = rls.version))]
pub async fn detect(
    cluster: &ClusterApi,
    plan: &ReleasePlan,
    rls: &Release,
) -> Result<DriftSet, String> {
    let ignore = IgnoreRules::compile(&plan.options.drift_detection.ignore)?;
    let objects = parse_manifest(&rls.manifest)
        .map_err(|e| format!("failed to read objects from release manifest: {e}"))?;
    let options = apply_options(rls, plan);
    let mut errors = Vec::new();
    let mut resources = Vec::new();
    for obj in &objects {
        match cluster.resolve(obj, &rls.namespace).await {
            Ok(mut r) => {
                normalize_resource(&mut r);
                resources.push(r);
            }
            Err(e) => errors.push(format!(
                "failed to determine if {} is namespace scoped: {}",
                obj.gvk.kind,
                error_chain(&e)
            )),
        }
    }
    let results: Vec<Result<ObjectDiff, String>> =
        futures::stream::iter(resources.into_iter().map(|r| {
            let options = &options;
            let ignore = &ignore;
            async move { diff_object(cluster, r, options, ignore).await }
        }))
        .buffered(DIFF_CONCURRENCY)
        .collect()
        .await;
    let mut diffs = Vec::new();
    for r in results {
        match r {
            Ok(d) => diffs.push(d),
            Err(e) => errors.push(e),
        }
    }
    let set = DriftSet {
        diffs,
        errors,
        options,
    };
    if set.has_changes() {
        tracing::info!(summary = %set.brief(), "detected changes in cluster state");
        for d in &set.diffs {
            match d.diff_type {
                DiffType::Create => {
                    tracing::debug!(resource = %d.subject(), "resource deleted");
                }
                DiffType::Update => {
                    tracing::debug!(resource = %d.subject(), patch = %d.masked_patch(), "resource modified");
                }
                DiffType::Exclude | DiffType::None => {}
            }
        }
    }
    Ok(set)
}

pub(crate) fn normalize_resource(r: &mut Resource) {
    let Ok(mut v) = serde_json::to_value(&r.object) else {
        return;
    };
    normalize::desired(&mut v);
    if let Ok(obj) = serde_json::from_value(v) {
        r.object = obj;
    }
}

/// The object as JSON, with `apiVersion` and `kind` taken from the resource when the
/// answer lacks them.
pub(crate) fn to_json(
    obj: &kube::api::DynamicObject,
    resource: &Resource,
) -> Result<Value, String> {
    let mut v = serde_json::to_value(obj)
        .map_err(|e| format!("{}: encoding the object: {e}", subject(resource)))?;
    if let Some(m) = v.as_object_mut() {
        m.entry("apiVersion")
            .or_insert_with(|| Value::String(resource.api_resource.api_version.clone()));
        m.entry("kind")
            .or_insert_with(|| Value::String(resource.api_resource.kind.clone()));
    }
    Ok(v)
}

/// How many times [`diff_object`] reads an object and dry-runs it to see one version.
const SAME_VERSION_ATTEMPTS: u32 = 3;

async fn diff_object(
    cluster: &ClusterApi,
    resource: Resource,
    options: &ApplyOptions,
    ignore: &IgnoreRules,
) -> Result<ObjectDiff, String> {
    let desired = with_release_metadata(&resource.object, options);
    let result = |diff_type, patch| ObjectDiff {
        diff_type,
        resource: resource.clone(),
        patch,
    };
    if excluded(&desired) {
        return Ok(result(DiffType::Exclude, Vec::new()));
    }
    let paths = ignore.paths_for(&desired, &resource);
    if paths.iter().any(String::is_empty) {
        return Ok(result(DiffType::Exclude, Vec::new()));
    }
    // The live read and the dry run are two requests: when a controller writes the object
    // between them (a Deployment's revision annotation after a rollout), the dry run saw a
    // newer version than the read and their difference is that write, not drift. The pair is
    // read again until both saw the same resourceVersion, a few times at most.
    let mut attempts = 0;
    let (live, dry) = loop {
        attempts += 1;
        let live = cluster.get(&resource).await.map_err(|e| error_chain(&e))?;
        if live.as_ref().is_some_and(excluded) {
            return Ok(result(DiffType::Exclude, Vec::new()));
        }
        let dry = match cluster.dry_run_apply(&resource, options).await {
            Ok(d) => d,
            Err(crate::kube::apply::ApplyError::Apply { source, .. }) => {
                return Err(dry_run_error(&resource, &source));
            }
            Err(e) => return Err(error_chain(&e)),
        };
        let same_version = live
            .as_ref()
            .is_none_or(|l| l.metadata.resource_version == dry.metadata.resource_version);
        if same_version || attempts >= SAME_VERSION_ATTEMPTS {
            break (live, dry);
        }
    };
    if dry
        .metadata
        .resource_version
        .as_deref()
        .is_none_or(str::is_empty)
    {
        return Ok(result(DiffType::Create, Vec::new()));
    }
    let Some(live) = live else {
        // Created between the read and the dry run: compare with what the dry run saw.
        return Ok(result(DiffType::None, Vec::new()));
    };
    let mut dry = to_json(&dry, &resource)?;
    normalize::dry_run(&mut dry);
    let mut live = to_json(&live, &resource)?;
    for p in &paths {
        jsondiff::remove_pointer(&mut dry, p);
        jsondiff::remove_pointer(&mut live, p);
    }
    let mut patch: Vec<Operation> = jsondiff::compare(&metadata_of(&live), &metadata_of(&dry))
        .into_iter()
        .filter(|o| matches!(o.op, OpKind::Add | OpKind::Replace))
        .collect();
    patch.extend(jsondiff::compare(
        &without_metadata(&live),
        &without_metadata(&dry),
    ));
    if patch.is_empty() {
        Ok(result(DiffType::None, patch))
    } else {
        Ok(result(DiffType::Update, patch))
    }
}

/// `{"metadata": {name, annotations, labels}}` of an object (what the metadata diff sees).
fn metadata_of(obj: &Value) -> Value {
    let mut meta = serde_json::Map::new();
    if let Some(m) = obj.get("metadata").and_then(Value::as_object) {
        for k in ["name", "annotations", "labels"] {
            if let Some(v) = m.get(k) {
                meta.insert(k.to_owned(), v.clone());
            }
        }
    }
    let mut out = serde_json::Map::new();
    if !meta.is_empty() {
        out.insert("metadata".to_owned(), Value::Object(meta));
    }
    Value::Object(out)
}

fn without_metadata(obj: &Value) -> Value {
    let mut v = obj.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
    }
    v
}

/// Flux's dry-run error text: `Kind/ns/name dry-run failed (Reason): message`.
pub(crate) fn dry_run_error(resource: &Resource, source: &ApiFailure) -> String {
    let name = subject(resource);
    if source.is_not_found() {
        if resource.namespace().is_none_or(str::is_empty) {
            return format!("{name} namespace not specified: {source}");
        }
        return format!("{name} not found: {source}");
    }
    match source.reason().filter(|r| !r.is_empty()) {
        Some(reason) => format!("{name} dry-run failed ({reason}): {source}"),
        None => format!("{name} dry-run failed: {source}"),
    }
}

/// Flux's reconcile order of kinds (`fluxcd/pkg/ssa`): these first, in this order...
const FIRST_KINDS: &[&str] = &[
    "CustomResourceDefinition",
    "Namespace",
    "ClusterRole",
    "ClusterClass",
    "RuntimeClass",
    "PriorityClass",
    "StorageClass",
    "VolumeSnapshotClass",
    "IngressClass",
    "GatewayClass",
    "ClusterRoleBinding",
    "ResourceQuota",
    "ServiceAccount",
    "Role",
    "RoleBinding",
    "ConfigMap",
    "Secret",
    "Service",
    "LimitRange",
    "Deployment",
    "StatefulSet",
    "CronJob",
    "PodDisruptionBudget",
];
/// ...and these last.
const LAST_KINDS: &[&str] = &[
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
];

fn kind_rank(kind: &str) -> i64 {
    if let Some(i) = FIRST_KINDS.iter().position(|k| *k == kind) {
        return i as i64 - FIRST_KINDS.len() as i64;
    }
    if let Some(i) = LAST_KINDS.iter().position(|k| *k == kind) {
        return 1 + i as i64;
    }
    0
}

fn order_key(d: &ObjectDiff) -> (i64, String, String, String, String) {
    let r = &d.resource;
    (
        kind_rank(r.kind()),
        r.api_resource.group.clone(),
        r.kind().to_owned(),
        r.namespace().unwrap_or("").to_owned(),
        r.name(),
    )
}

/// Corrects the drift of a [`DriftSet`]: recreates removed objects, then patches changed
/// ones, within `timeout`. The outcome carries the change set (`Kind/ns/name created`,
/// `... configured`) and the errors, one per line; it never fails the reconcile.
#[tracing::instrument(skip_all)]
pub async fn correct(cluster: &ClusterApi, set: &DriftSet, timeout: Duration) -> Outcome {
    let started = Instant::now();
    let deadline = started + timeout;
    let mut creates: Vec<&ObjectDiff> = set
        .diffs
        .iter()
        .filter(|d| d.diff_type == DiffType::Create)
        .collect();
    let mut patches: Vec<&ObjectDiff> = set
        .diffs
        .iter()
        .filter(|d| d.diff_type == DiffType::Update)
        .collect();
    creates.sort_by_key(|d| order_key(d));
    patches.sort_by_key(|d| order_key(d));
    let mut changes = Vec::new();
    let mut errors = Vec::new();
    for d in creates {
        let name = d.subject();
        match tokio::time::timeout_at(deadline, cluster.apply_one(&d.resource, &set.options)).await
        {
            Ok(Ok(_)) => changes.push(format!("{name} created")),
            Ok(Err(e)) => errors.push(format!("{name} creation failure: {}", error_chain(&e))),
            Err(_) => errors.push(format!(
                "{name} creation failure: context deadline exceeded"
            )),
        }
    }
    for d in patches {
        let name = d.subject();
        // The patch type is kube's (`json_patch::Patch`), inferred from `Patch::Json`.
        let patch = match serde_json::from_value(jsondiff::patch_json(&d.patch)) {
            Ok(p) => Patch::<()>::Json(p),
            Err(e) => {
                errors.push(format!("{name} patch failure: {e}"));
                continue;
            }
        };
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        let api = d.resource.api(cluster.client());
        let object_name = d.resource.name();
        let request = api.patch(&object_name, &params, &patch);
        match tokio::time::timeout_at(deadline, request).await {
            Ok(Ok(_)) => changes.push(format!("{name} configured")),
            Ok(Err(e)) => {
                let failure = ApiFailure(e);
                let mut message = failure.to_string();
                if d.resource.kind() == "Secret" && failure.reason() == Some("Invalid") {
                    // The API server's message may quote Secret data: keep its last part.
                    if let Some(i) = message.rfind(':') {
                        message = message[i + 1..].trim().to_owned();
                    }
                }
                errors.push(format!("{name} patch failure: {message}"));
            }
            Err(_) => errors.push(format!("{name} patch failure: context deadline exceeded")),
        }
    }
    Outcome {
        error: (!errors.is_empty()).then(|| errors.join("\n")),
        changes: (!changes.is_empty()).then(|| changes.join("\n")),
        duration: Some(flotilla_core::duration::GoDuration::new(started.elapsed())),
        ..Outcome::default()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn op(kind: OpKind, path: &str, old: Option<Value>, new: Option<Value>) -> Operation {
        let mut o = Operation::remove(path);
        o.op = kind;
        o.old_value = old;
        o.value = new;
        o
    }

    #[test]
    fn secret_values_are_masked_before_and_after() {
        let mut changed = op(
            OpKind::Replace,
            "/data/password",
            Some(json!("b2xk")),
            Some(json!("bmV3")),
        );
        mask_secret_op(&mut changed);
        assert_eq!(changed.value, Some(json!("*** (after)")));
        assert_eq!(changed.old_value, Some(json!("*** (before)")));
        let mut added = op(OpKind::Add, "/data/token", None, Some(json!("c2VjcmV0")));
        mask_secret_op(&mut added);
        assert_eq!(added.value, Some(json!("***")));
        let mut whole = op(
            OpKind::Replace,
            "/data",
            Some(json!({"a": "x"})),
            Some(json!({"a": "y", "b": "z"})),
        );
        mask_secret_op(&mut whole);
        assert_eq!(whole.value, Some(json!({"a": "*** (after)", "b": "***"})));
        let mut other = op(OpKind::Replace, "/type", Some(json!("a")), Some(json!("b")));
        mask_secret_op(&mut other);
        assert_eq!(other.value, Some(json!("b")), "only data is masked");
    }

    #[test]
    fn errors_aggregate_as_go_prints_them() {
        assert_eq!(aggregate(&[]), None);
        assert_eq!(aggregate(&["a".into()]).as_deref(), Some("a"));
        assert_eq!(
            aggregate(&["a".into(), "b".into()]).as_deref(),
            Some("[a, b]")
        );
    }

    #[test]
    fn only_the_last_untargeted_ignore_rule_counts_as_in_flux() {
        let rules: Vec<IgnoreRule> = serde_json::from_value(json!([
            {"paths": ["/a"]},
            {"paths": ["/b"], "target": {"kind": "ConfigMap"}},
            {"paths": ["/c"]},
        ]))
        .unwrap();
        let compiled = IgnoreRules::compile(&rules).unwrap();
        assert_eq!(compiled.rules.len(), 2);
        assert_eq!(compiled.rules[1].1, ["/c"]);
    }

    #[test]
    fn kinds_are_corrected_in_fluxs_order() {
        assert!(kind_rank("Namespace") < kind_rank("ConfigMap"));
        assert!(kind_rank("ConfigMap") < kind_rank("Deployment"));
        assert!(kind_rank("Deployment") < kind_rank("Ingress"));
        assert!(kind_rank("Ingress") < kind_rank("ValidatingWebhookConfiguration"));
    }
}
