//! The Helm actions the state machine asks for, run against one workload cluster: install,
//! upgrade, test, rollback, uninstall (plain and as remediation) and unlock.
//!
//! Every action writes release records with Helm's statuses and descriptions, through
//! [`crate::storage::transitions`], and reports an [`Outcome`] listing each record it wrote
//! (the storage's [`Journal`]), for `flotilla_core::release::apply_outcome`. A failure
//! before any record was written comes back with no writes (core then returns the error and
//! backs off); a failure after marks the new record `failed`. Failures are
//! [`ActionError`]s; the outcome carries their message and whether they are transient.

mod error;

pub use error::ActionError;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use flotilla_chart::coalesce::{Warnings, coalesce_tables, coalesce_values};
use flotilla_chart::release::{
    Hook, HookDeletePolicy as RecordDeletePolicy, HookEvent, HookExecution,
    HookPhase as RecordPhase, Release, Status,
};
use flotilla_chart::render::PostRenderHooks;
use flotilla_chart::time::GoTime;
use flotilla_chart::{Chart, Values};
use flotilla_core::duration::GoDuration;
use flotilla_core::plan::{DriftObservation, ReleasePlan, ReleaseRecord};
use flotilla_core::release::{Action, Outcome, observation_oci_digest};
use flotilla_core::spec::{CommonMetadata, CrdsPolicy, DeletionPropagation, PostRenderStrategy};
use flotilla_core::status::{HelmReleaseStatus, ResourceInventory};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::time::Instant;

use super::inventory;
use super::render::{RenderOptions, Rendered, Renderer};
use crate::kube::apply::{ApplyMethod, ApplyOptions, ClientSideApply, HelmReleaseRef, ReleaseRef};
use crate::kube::delete::{DeleteOptions, Propagation, removed_objects};
use crate::kube::hook::{HookOptions, HookPhase};
use crate::kube::manifest::{ManifestObject, parse_manifest};
use crate::kube::wait::{WaitError, WaitOptions};
use crate::kube::{
    ApiFailure, ClusterApi, ClusterLookup, OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL, Resource,
    error_chain,
};
use crate::storage::observation::{RecordError, observation_of};
use crate::storage::transitions::{
    INSTALL_COMPLETE, INSTALL_UNDERWAY, PREPARING_UPGRADE, Rollback, SUPERSEDED_BY_NEW_RELEASE,
    UPGRADE_COMPLETE, Unlock, next_version, release_failed, rollback_failed, rollback_from_history,
    rollback_to, set_status, superseded_by, upgrade_base, upgrade_failed,
};
use crate::storage::{Journal, SecretStorage, status_of};

/// Runs actions for one plan.
#[derive(Debug)]
pub struct Executor<'a> {
    /// The workload cluster.
    pub cluster: &'a ClusterApi,
    /// Helm storage in the plan's storage namespace.
    pub records: SecretStorage,
    /// The renderer.
    pub renderer: Arc<dyn Renderer>,
    /// The plan.
    pub plan: &'a ReleasePlan,
    /// The plan's chart.
    pub chart: &'a Chart,
    /// What the last drift detection found: the diffs a correction applies.
    pub drift: std::sync::Mutex<Option<crate::drift::DriftSet>>,
}

/// The summary core wants of a stored release, with the OCI digest its observation takes.
pub fn record_of(rls: &Release, status: &HelmReleaseStatus) -> Result<ReleaseRecord, RecordError> {
    let observation = observation_of(rls)?;
    let oci_digest = observation_oci_digest(status, observation.version);
    ReleaseRecord::from_observation(&observation, oci_digest).map_err(RecordError::Summary)
}

fn now() -> GoTime {
    GoTime::now()
}

fn go_time(t: k8s_openapi::jiff::Timestamp) -> GoTime {
    GoTime::from_unix(t.as_second(), t.subsec_nanosecond().max(0) as u32)
}

fn propagation(p: DeletionPropagation) -> Propagation {
    match p {
        DeletionPropagation::Background => Propagation::Background,
        DeletionPropagation::Foreground => Propagation::Foreground,
        DeletionPropagation::Orphan => Propagation::Orphan,
    }
}

/// Whether core reads "no release in storage" from `Outcome::release_not_found` for this
/// action (uninstall and unlock); for the others it is an error.
fn reports_not_found(action: &Action) -> bool {
    matches!(
        action,
        Action::Uninstall { .. } | Action::UninstallRemediation | Action::Unlock { .. }
    )
}

impl Executor<'_> {
    fn release_name(&self) -> &str {
        self.plan.release.name.as_str()
    }

    fn release_ref(&self) -> ReleaseRef {
        ReleaseRef {
            name: self.release_name().to_owned(),
            namespace: self.plan.release.namespace.to_string(),
        }
    }

    fn owner(&self) -> HelmReleaseRef {
        HelmReleaseRef {
            name: self.plan.object.name.to_string(),
            namespace: self.plan.object.namespace.to_string(),
        }
    }

    /// Whether hooks go through the post-renderers (`postRenderStrategy` other than
    /// `nohooks`).
    fn post_render_hooks(&self) -> bool {
        self.plan.options.post_render_strategy != Some(PostRenderStrategy::Nohooks)
    }

    /// `spec.maxHistory` (default 5; 0 or less keeps every record).
    fn max_history(&self) -> usize {
        usize::try_from(self.plan.options.max_history.unwrap_or(5)).unwrap_or(0)
    }

    /// Runs one action and reports what it did. `status` is the controller state before
    /// the action (it selects the OCI digests of the records reported).
    pub async fn run(
        &self,
        action: &Action,
        timeout: Duration,
        status: &HelmReleaseStatus,
    ) -> Outcome {
        if let Action::CorrectDrift { .. } = action {
            return self.correct_drift(timeout).await;
        }
        let started = Instant::now();
        let journal = Journal::default();
        let exec = Executor {
            cluster: self.cluster,
            records: self.records.with_journal(&journal),
            renderer: self.renderer.clone(),
            plan: self.plan,
            chart: self.chart,
            drift: Default::default(),
        };
        let result = match action {
            Action::Install => exec.install(timeout).await,
            Action::Upgrade { .. } => exec.upgrade(timeout).await,
            Action::Test => exec.test(timeout).await,
            Action::Rollback { target } => exec.rollback(i64::from(target.version), timeout).await,
            Action::UninstallRemediation => {
                let name = exec.release_name().to_owned();
                exec.uninstall(&exec.records, &name, timeout, &journal)
                    .await
            }
            Action::Uninstall {
                name,
                storage_namespace,
                ..
            } => {
                let records = SecretStorage::new(self.cluster.client().clone(), storage_namespace)
                    .with_journal(&journal);
                exec.uninstall(&records, name, timeout, &journal).await
            }
            Action::Unlock { .. } => exec.unlock().await,
            Action::CorrectDrift { .. }
            | Action::DetectDrift
            | Action::None(_)
            | Action::Stalled(_)
            | Action::Error(_) => Ok(()),
        };
        let mut outcome = Outcome {
            duration: Some(GoDuration::new(started.elapsed())),
            ..Outcome::default()
        };
        let mut errors: Vec<ActionError> = Vec::new();
        match result {
            Ok(()) => {}
            Err(ActionError::ReleaseNotFound { .. }) if reports_not_found(action) => {
                outcome.release_not_found = true;
            }
            Err(e) => errors.push(e),
        }
        for rls in journal.last_by_version().values() {
            match record_of(rls, status) {
                Ok(r) => outcome.writes.push(r),
                Err(e) => errors.push(e.into()),
            }
        }
        if matches!(
            action,
            Action::Install | Action::Upgrade { .. } | Action::Rollback { .. }
        ) && let Some(last) = journal.last()
        {
            outcome.inventory = exec.inventory(&last).await;
        }
        if !errors.is_empty() {
            // A failed hook's pod logs follow the message (status and Event), as `helm test
            // --logs` prints them after the result; the release record's description
            // (`Display`) holds no log, as Helm's.
            let mut message = error::join(&errors);
            for logs in errors.iter().filter_map(ActionError::pod_logs) {
                message.push_str("\n\n");
                message.push_str(logs);
            }
            outcome.error = Some(message);
            outcome.error_is_transient = errors.iter().all(ActionError::is_transient);
        }
        outcome
    }

    /// The inventory of a record this action wrote, with the plan's chart's CRDs (Flux's
    /// inventory observer uses the chart of the reconcile, for rollbacks too). `None` when
    /// it cannot be built: Flux then keeps the previous one.
    async fn inventory(&self, written: &Release) -> Option<ResourceInventory> {
        let crds = match self.renderer.crds(self.chart, &self.plan_values()) {
            Ok(crds) => crds,
            Err(e) => {
                tracing::warn!(error = %e, "inventory not rebuilt: the chart's CRDs");
                return None;
            }
        };
        match inventory::of_release(self.cluster, &written.manifest, &written.namespace, &crds)
            .await
        {
            Ok(inv) => Some(inv),
            Err(e) => {
                tracing::warn!(error = %e, "inventory not rebuilt: the release manifest");
                None
            }
        }
    }

    /// Drift detection of the release's newest record ([`crate::drift::detect`]), as the
    /// plan's actions' identity: what core is told; the diffs found are kept for
    /// [`Action::CorrectDrift`].
    pub async fn detect_drift(&self) -> DriftObservation {
        let set = match self.records.last(self.release_name()).await {
            Ok(Some(rls)) => crate::drift::detect(self.cluster, self.plan, &rls).await,
            Ok(None) => Err("no release in storage".to_owned()),
            Err(e) => Err(error_chain(&e)),
        };
        let (observation, set) = match set {
            Ok(set) => (set.observation(), Some(set)),
            Err(message) => (DriftObservation::Error { message }, None),
        };
        *self.drift.lock().unwrap_or_else(|p| p.into_inner()) = set;
        observation
    }

    /// Applies the diffs the last detection found ([`crate::drift::correct`]).
    async fn correct_drift(&self, timeout: Duration) -> Outcome {
        let set = self.drift.lock().unwrap_or_else(|p| p.into_inner()).take();
        match set {
            Some(set) => crate::drift::correct(self.cluster, &set, timeout).await,
            None => Outcome {
                error: Some(ActionError::DriftNotDetected.to_string()),
                ..Outcome::default()
            },
        }
    }

    /// Renders `chart` with `values` as Helm's install and upgrade do: `.Capabilities` from
    /// the cluster's discovery and `lookup` answered by the cluster, both with the action's
    /// identity, then `spec.commonMetadata`. Rendering is synchronous and its lookups block,
    /// so it runs on a blocking thread.
    async fn render(
        &self,
        chart: &Chart,
        values: &Values,
        revision: i64,
        is_install: bool,
        skip_schema_validation: bool,
    ) -> Result<Rendered, ActionError> {
        let capabilities = self
            .cluster
            .capabilities()
            .await
            .map_err(|error| ActionError::Capabilities { error })?;
        // Helm loads the documents a schema `$ref`s while validating; here they are
        // fetched first (the chart crate does no IO).
        let remote_schemas = if skip_schema_validation {
            Default::default()
        } else {
            crate::schema_refs::shared().fetch_for(chart).await
        };
        let options = RenderOptions {
            release_name: self.release_name().to_owned(),
            namespace: self.plan.release.namespace.to_string(),
            revision,
            is_install,
            is_upgrade: !is_install,
            capabilities: Some(capabilities),
            lookup: Some(Arc::new(ClusterLookup::new(self.cluster.clone()))),
            skip_schema_validation,
            remote_schemas,
            post_renderers: self
                .plan
                .options
                .post_renderers
                .iter()
                .flatten()
                .map(post_renderer)
                .collect(),
            post_render_hooks: match self.plan.options.post_render_strategy {
                None | Some(PostRenderStrategy::Combined) => PostRenderHooks::Combined,
                Some(PostRenderStrategy::Separate) => PostRenderHooks::Separate,
                Some(PostRenderStrategy::Nohooks) => PostRenderHooks::Excluded,
            },
        };
        let renderer = self.renderer.clone();
        let chart = chart.clone();
        let values = values.clone();
        let mut rendered =
            tokio::task::spawn_blocking(move || renderer.render(&chart, &values, &options))
                .await
                .map_err(|error| ActionError::RenderStopped { error })?
                .map_err(|error| ActionError::Render { error })?;
        let hooks_too = self.post_render_hooks();
        if let Some(metadata) = &self.plan.options.common_metadata {
            apply_common_metadata(&mut rendered, metadata, hooks_too)?;
        }
        apply_origin_labels(&mut rendered, &self.owner(), hooks_too)?;
        Ok(rendered)
    }

    /// What the next install (no `current` release) or upgrade of `current` would render,
    /// as [`Executor::install`] and [`Executor::upgrade`] render it (values reused per
    /// `upgrade.preserveValues`, schema validation per the action's option, post-renderers,
    /// `spec.commonMetadata` and the origin labels), with the CRDs the action's policy would
    /// apply, and nothing written: the preview's render.
    pub async fn render_next(&self, current: Option<&Release>) -> Result<NextRender, ActionError> {
        let (chart, values, version, policy, skip_schema) = match current {
            None => (
                self.chart.clone(),
                self.plan_values(),
                1,
                self.plan.options.install.crds(),
                self.plan.options.install.disable_schema_validation,
            ),
            Some(current) => {
                let o = &self.plan.options.upgrade;
                let mut chart = self.chart.clone();
                let values = if o.preserve_values {
                    reuse_values(current, self.plan_values(), &mut chart)?
                } else {
                    self.plan_values()
                };
                (
                    chart,
                    values,
                    current.version + 1,
                    o.crds(),
                    o.disable_schema_validation,
                )
            }
        };
        let mut crds = Vec::new();
        if policy != CrdsPolicy::Skip {
            let files = self
                .renderer
                .crds(&chart, &values)
                .map_err(|error| ActionError::Render { error })?;
            for f in &files {
                crds.extend(
                    parse_manifest(&f.text)?
                        .into_iter()
                        .filter(|o| o.gvk.kind == "CustomResourceDefinition"),
                );
            }
        }
        let rendered = self
            .render(&chart, &values, version, current.is_none(), skip_schema)
            .await?;
        parse_manifest(&rendered.manifest)?;
        Ok(NextRender {
            chart,
            values,
            rendered,
            crds,
            crd_policy: policy,
        })
    }

    /// The plan's values as a table.
    fn plan_values(&self) -> Values {
        match &self.plan.values {
            serde_json::Value::Object(m) => m.clone(),
            _ => Values::new(),
        }
    }

    /// A new record of this release; the caller sets its `apply_method`.
    fn new_release(
        &self,
        chart: &Chart,
        config: Values,
        rendered: Rendered,
        version: i64,
        status: Status,
        desc: &str,
    ) -> Release {
        let t = now();
        Release {
            name: self.release_name().to_owned(),
            info: Some(flotilla_chart::release::Info {
                first_deployed: t,
                last_deployed: t,
                description: desc.to_owned(),
                status: Some(status),
                notes: rendered.notes,
                ..Default::default()
            }),
            chart: Some(chart.into()),
            config,
            manifest: rendered.manifest,
            hooks: rendered.hooks,
            version,
            namespace: self.plan.release.namespace.to_string(),
            labels: BTreeMap::new(),
            apply_method: String::new(),
        }
    }

    /// Stores a new record of an upgrade or a rollback, pruning the history to
    /// `spec.maxHistory` first.
    async fn create(&self, rls: &Release) -> Result<(), ActionError> {
        self.records
            .create_with_max_history(rls, self.max_history())
            .await?;
        Ok(())
    }

    async fn resolve(&self, manifest: &str) -> Result<Vec<Resource>, ActionError> {
        let objects = parse_manifest(manifest)?;
        self.resolve_objects(&objects).await
    }

    async fn resolve_objects(
        &self,
        objects: &[ManifestObject],
    ) -> Result<Vec<Resource>, ActionError> {
        let mut out = Vec::new();
        for obj in objects {
            match self
                .cluster
                .resolve(obj, self.plan.release.namespace.as_str())
                .await
            {
                Ok(r) => out.push(r),
                // A kind no longer served has nothing left to delete or compare.
                Err(crate::kube::discovery::DiscoveryError::NoMatch { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(out)
    }

    async fn ensure_namespace(&self) -> Result<(), ActionError> {
        let api: Api<Namespace> = Api::all(self.cluster.client().clone());
        let ns = self.plan.release.namespace.to_string();
        let object = Namespace {
            metadata: ObjectMeta {
                name: Some(ns.clone()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(ActionError::CreateNamespace {
                namespace: ns,
                error: ApiFailure(e),
            }),
        }
    }

    /// Applies the chart's CRDs per policy (Flux's `crds`), then waits for them. This runs
    /// before rendering, as Helm's install and Flux's install and upgrade do, so the
    /// templates' `.Capabilities` see the API versions the CRDs add (applying a CRD makes
    /// the next render discover them again).
    async fn apply_crds(
        &self,
        chart: &Chart,
        values: &Values,
        policy: CrdsPolicy,
        server_side: bool,
    ) -> Result<(), ActionError> {
        if policy == CrdsPolicy::Skip {
            return Ok(());
        }
        let crds = self
            .renderer
            .crds(chart, values)
            .map_err(|error| ActionError::Render { error })?;
        if crds.is_empty() {
            return Ok(());
        }
        let mut objects = Vec::new();
        for f in &crds {
            let parsed = parse_manifest(&f.text)?;
            objects.extend(
                parsed
                    .into_iter()
                    .filter(|o| o.gvk.kind == "CustomResourceDefinition"),
            );
        }
        let resolved = self.resolve_objects(&objects).await?;
        let mut wanted = Vec::new();
        for (obj, res) in objects.into_iter().zip(&resolved) {
            let exists = self
                .cluster
                .get(res)
                .await
                .map_err(|error| ActionError::CrdApply { error })?
                .is_some();
            if policy == CrdsPolicy::CreateReplace || !exists {
                wanted.push(obj);
            }
        }
        if wanted.is_empty() {
            return Ok(());
        }
        let mut options = ApplyOptions::new(self.release_ref()).owned_by(self.owner());
        options.take_ownership = true;
        // Flux's `applyCRDs`: without server-side apply, missing CRDs are created and
        // existing ones replaced.
        options.method = ApplyMethod::of(
            server_side,
            ClientSideApply {
                force_replace: true,
                ..ClientSideApply::default()
            },
        );
        // As Flux's `setOriginVisitor`: the origin labels and nothing of Helm's.
        options.release_metadata = false;
        let report = self
            .cluster
            .apply(&wanted, &options)
            .await
            .map_err(|failure| ActionError::CrdApply {
                error: failure.error,
            })?;
        let timeout = Duration::from_secs(60);
        self.cluster
            .wait_ready(&report.applied, &WaitOptions::new(timeout))
            .await
            .map_err(|error| ActionError::CrdWait { error })?;
        self.cluster
            .wait_discovered(&report.applied, timeout)
            .await
            .map_err(|message| ActionError::CrdNotServed { message })
    }

    /// Runs the hooks of `event` in weight order, persisting each hook's `last_run`.
    async fn run_hooks(
        &self,
        records: &SecretStorage,
        rls: &mut Release,
        event: HookEvent,
        timeout: Duration,
        selected: &(dyn Fn(&Hook) -> bool + Sync),
        server_side: bool,
    ) -> Result<(), ActionError> {
        let mut order: Vec<usize> = (0..rls.hooks.len())
            .filter(|&i| rls.hooks[i].events.contains(&event) && selected(&rls.hooks[i]))
            .collect();
        order.sort_by(|&a, &b| {
            let (a, b) = (&rls.hooks[a], &rls.hooks[b]);
            a.weight.cmp(&b.weight).then_with(|| a.name.cmp(&b.name))
        });
        let mut succeeded: Vec<(usize, Vec<Resource>)> = Vec::new();
        for &i in &order {
            let resources = self.resolve(&rls.hooks[i].manifest).await?;
            rls.hooks[i].last_run = HookExecution {
                started_at: now(),
                completed_at: GoTime::ZERO,
                phase: Some(RecordPhase::Running),
            };
            records.update(rls).await?;
            let options = HookOptions {
                // Flux's origin labels reach hooks through its post-renderer, which
                // `nohooks` keeps them from.
                owner: self.post_render_hooks().then(|| self.owner()),
                defer_succeeded_deletion: true,
                server_side,
                ..HookOptions::new(timeout)
            };
            let mut failure = None;
            let mut ran = Vec::new();
            for res in &resources {
                match self.cluster.run_hook(res, &options).await {
                    Ok(run) => {
                        rls.hooks[i].last_run.started_at = go_time(run.started_at);
                        if let Some(t) = run.completed_at {
                            rls.hooks[i].last_run.completed_at = go_time(t);
                        }
                        if run.phase == HookPhase::Failed {
                            let reason = run.failure.unwrap_or_else(|| "failed".to_owned());
                            // Flux's message names the hook and its status only; why it
                            // failed goes to the log.
                            tracing::info!(hook = %run.object, event = %event, reason = %reason, "hook failed");
                            failure = Some(ActionError::HookFailed {
                                event: event.clone(),
                                object: run.object,
                                reason,
                                timed_out: run.timed_out,
                                logs: run.logs,
                            });
                            break;
                        }
                        ran.push(res.clone());
                    }
                    Err(error) => {
                        failure = Some(ActionError::Hook {
                            event: event.clone(),
                            error,
                        });
                        break;
                    }
                }
            }
            if let Some(f) = failure {
                rls.hooks[i].last_run.phase = Some(RecordPhase::Failed);
                if rls.hooks[i].last_run.completed_at.is_zero() {
                    rls.hooks[i].last_run.completed_at = now();
                }
                records.update(rls).await?;
                self.delete_succeeded(rls, &succeeded).await;
                return Err(f);
            }
            rls.hooks[i].last_run.phase = Some(RecordPhase::Succeeded);
            records.update(rls).await?;
            succeeded.push((i, ran));
        }
        succeeded.reverse();
        self.delete_succeeded(rls, &succeeded).await;
        Ok(())
    }

    /// Deletes succeeded hooks with the `hook-succeeded` policy (best effort, as Helm).
    async fn delete_succeeded(&self, rls: &Release, succeeded: &[(usize, Vec<Resource>)]) {
        for (i, resources) in succeeded {
            if !rls.hooks[*i]
                .delete_policies
                .contains(&RecordDeletePolicy::HookSucceeded)
            {
                continue;
            }
            for res in resources {
                if let Err(e) = self.cluster.delete_hook(res).await {
                    tracing::warn!(hook = %res.object_ref(), error = %error_chain(&e), "hook not deleted");
                }
            }
        }
    }

    /// Applies `manifest`, deletes what `previous` held and `manifest` does not, waits.
    /// On failure returns the error and the objects created (for `cleanupOnFail`).
    async fn apply_and_wait(
        &self,
        manifest: &str,
        previous: Option<&str>,
        take_ownership: bool,
        wait: Option<WaitOptions>,
        method: ApplyMethod,
    ) -> Result<(), (ActionError, Vec<Resource>)> {
        let objects = parse_manifest(manifest).map_err(|e| (ActionError::from(e), Vec::new()))?;
        let mut options = ApplyOptions::new(self.release_ref()).owned_by(self.owner());
        options.take_ownership = take_ownership;
        options.method = method;
        let report = match self.cluster.apply(&objects, &options).await {
            Ok(r) => r,
            Err(failure) => {
                let created = created_resources(&failure.report);
                return Err((
                    ActionError::Apply {
                        error: failure.error,
                    },
                    created,
                ));
            }
        };
        let created = created_resources(&report);
        if let Some(prev) = previous {
            let prev = self.resolve(prev).await.map_err(|e| (e, created.clone()))?;
            let removed = removed_objects(&prev, &report.applied);
            if !removed.is_empty() {
                let options = DeleteOptions {
                    release: Some(self.release_ref()),
                    owner: Some(self.owner()),
                    ..DeleteOptions::default()
                };
                self.cluster
                    .delete_resources(&removed, &options)
                    .await
                    .map_err(|error| (ActionError::Delete { error }, created.clone()))?;
            }
        }
        if let Some(wait) = wait {
            let options = &self.plan.options;
            let wait = wait
                .with_strategy(options.wait_strategy, &options.health_check_exprs)
                .map_err(|e| {
                    (
                        ActionError::Wait {
                            error: WaitError::from(e),
                        },
                        created.clone(),
                    )
                })?;
            self.cluster
                .wait_ready(&report.applied, &wait)
                .await
                .map_err(|error| (ActionError::Wait { error }, created.clone()))?;
        }
        Ok(())
    }

    async fn cleanup(&self, created: &[Resource]) {
        if created.is_empty() {
            return;
        }
        let options = DeleteOptions {
            release: Some(self.release_ref()),
            owner: Some(self.owner()),
            ..DeleteOptions::default()
        };
        if let Err(e) = self.cluster.delete_resources(created, &options).await {
            tracing::warn!(error = %error_chain(&e), "cleanup of created objects failed");
        }
    }

    /// The part install, upgrade and rollback share once their pending record is stored:
    /// pre hooks, apply (deleting what `previous` held and the new manifest does not) and
    /// wait, `cleanupOnFail`, post hooks.
    async fn roll_out(
        &self,
        rls: &mut Release,
        timeout: Duration,
        rollout: Rollout<'_>,
    ) -> Result<(), ActionError> {
        let server_side = matches!(rollout.method, ApplyMethod::ServerSide);
        if let Some((pre, _)) = &rollout.hooks {
            self.run_hooks(
                &self.records,
                rls,
                pre.clone(),
                timeout,
                &|_| true,
                server_side,
            )
            .await?;
        }
        if let Err((e, created)) = self
            .apply_and_wait(
                &rls.manifest,
                rollout.previous,
                rollout.take_ownership,
                rollout.wait,
                rollout.method,
            )
            .await
        {
            if rollout.cleanup_on_fail {
                self.cleanup(&created).await;
            }
            return Err(e);
        }
        if let Some((_, post)) = rollout.hooks {
            self.run_hooks(&self.records, rls, post, timeout, &|_| true, server_side)
                .await?;
        }
        Ok(())
    }

    async fn install(&self, timeout: Duration) -> Result<(), ActionError> {
        let o = &self.plan.options.install;
        let name = self.release_name().to_owned();
        let history = self.records.history(&name).await?;
        let last = history.last();
        // Helm's `availableName`: a name with history is taken, unless `replace` is set
        // and the newest record is uninstalled or failed.
        if let Some(last) = last
            && !(o.replace && matches!(status_of(last), Status::Uninstalled | Status::Failed))
        {
            return Err(ActionError::NameInUse { name });
        }
        let version = next_version(&history);
        let values = self.plan_values();
        self.apply_crds(self.chart, &values, o.crds(), o.server_side_apply())
            .await?;
        let rendered = self
            .render(
                self.chart,
                &values,
                version,
                true,
                o.disable_schema_validation,
            )
            .await?;
        let objects = parse_manifest(&rendered.manifest)?;
        let method = ApplyMethod::of(
            o.server_side_apply(),
            ClientSideApply {
                // Helm's install updates the objects it adopts with themselves as the
                // originals: only what differs from the live object is patched, and custom
                // resources get a three-way merge when it takes ownership.
                originals: objects,
                force_replace: false,
                three_way_for_custom_resources: !o.disable_take_ownership,
            },
        );
        if o.create_namespace {
            self.ensure_namespace().await?;
        }
        let mut rls = self.new_release(
            self.chart,
            values,
            rendered,
            version,
            Status::PendingInstall,
            INSTALL_UNDERWAY,
        );
        rls.apply_method = method.record_value().to_owned();
        // `replace`: the record replaced is superseded, unless it failed.
        if let Some(last) = last
            && status_of(last) != Status::Failed
        {
            let mut last = last.clone();
            set_status(&mut last, Status::Superseded, SUPERSEDED_BY_NEW_RELEASE);
            self.records.update(&last).await?;
        }
        // Install prunes nothing: Helm's install leaves `MaxHistory` unset and Flux sets it
        // on upgrade and rollback only, so the records of a replaced release all stay.
        self.records.create(&rls).await?;
        let wait = (!o.disable_wait).then_some(WaitOptions {
            timeout,
            wait_for_jobs: !o.disable_wait_for_jobs,
            ..WaitOptions::new(timeout)
        });
        let rollout = Rollout {
            hooks: (!o.disable_hooks).then_some((HookEvent::PreInstall, HookEvent::PostInstall)),
            previous: None,
            take_ownership: !o.disable_take_ownership,
            wait,
            cleanup_on_fail: false,
            method,
        };
        match self.roll_out(&mut rls, timeout, rollout).await {
            Ok(()) => {
                self.records
                    .mark_deployed(&mut rls, INSTALL_COMPLETE)
                    .await?;
                Ok(())
            }
            Err(e) => {
                let description = release_failed(&name, &e.to_string());
                self.records.mark_failed(&mut rls, description).await?;
                Err(e)
            }
        }
    }

    async fn upgrade(&self, timeout: Duration) -> Result<(), ActionError> {
        let o = &self.plan.options.upgrade;
        let name = self.release_name().to_owned();
        let history = self.records.history(&name).await?;
        let current = upgrade_base(&name, &history)?;
        let version = next_version(&history);
        // Helm 4 and Flux resolve `auto` against the newest record, whatever its status.
        let recorded = history
            .iter()
            .max_by_key(|r| r.version)
            .map_or("", |r| r.apply_method.as_str());
        let server_side = o.server_side_apply().server_side(recorded);
        let method = ApplyMethod::of(
            server_side,
            ClientSideApply {
                originals: parse_manifest(&current.manifest)?,
                // Flux: `upgrade.force` is Helm's ForceReplace, without server-side apply.
                force_replace: o.force,
                three_way_for_custom_resources: false,
            },
        );
        let mut chart = self.chart.clone();
        let values = if o.preserve_values {
            reuse_values(current, self.plan_values(), &mut chart)?
        } else {
            self.plan_values()
        };
        self.apply_crds(&chart, &values, o.crds(), server_side)
            .await?;
        let rendered = self
            .render(&chart, &values, version, false, o.disable_schema_validation)
            .await?;
        parse_manifest(&rendered.manifest)?;
        let mut rls = self.new_release(
            &chart,
            values,
            rendered,
            version,
            Status::PendingUpgrade,
            PREPARING_UPGRADE,
        );
        rls.apply_method = method.record_value().to_owned();
        if let Some(first) = current.info.as_ref().map(|i| i.first_deployed)
            && let Some(info) = rls.info.as_mut()
        {
            info.first_deployed = first;
        }
        self.create(&rls).await?;
        let wait = (!o.disable_wait).then_some(WaitOptions {
            timeout,
            wait_for_jobs: !o.disable_wait_for_jobs,
            ..WaitOptions::new(timeout)
        });
        let rollout = Rollout {
            hooks: (!o.disable_hooks).then_some((HookEvent::PreUpgrade, HookEvent::PostUpgrade)),
            previous: Some(&current.manifest),
            take_ownership: !o.disable_take_ownership,
            wait,
            cleanup_on_fail: o.cleanup_on_fail,
            method,
        };
        match self.roll_out(&mut rls, timeout, rollout).await {
            Ok(()) => {
                self.records
                    .mark_deployed(&mut rls, UPGRADE_COMPLETE)
                    .await?;
                Ok(())
            }
            Err(e) => {
                let description = upgrade_failed(&name, &e.to_string());
                self.records.mark_failed(&mut rls, description).await?;
                Err(e)
            }
        }
    }

    async fn test(&self, timeout: Duration) -> Result<(), ActionError> {
        let name = self.release_name().to_owned();
        let Some(mut rls) = self.records.last(&name).await? else {
            return Err(ActionError::ReleaseNotFound { name });
        };
        let test = &self.plan.options.test;
        let selected = |h: &Hook| test.selects(&h.name);
        // Helm 4's test action: server-side when the release was.
        let server_side = rls.apply_method == "ssa";
        self.run_hooks(
            &self.records,
            &mut rls,
            HookEvent::Test,
            timeout,
            &selected,
            server_side,
        )
        .await
    }

    async fn rollback(&self, target_version: i64, timeout: Duration) -> Result<(), ActionError> {
        let o = &self.plan.options.rollback;
        let name = self.release_name().to_owned();
        let history = self.records.history(&name).await?;
        let Rollback {
            last,
            target,
            record: mut rls,
        } = rollback_from_history(&name, &history, target_version, now())?;
        // Helm 4 and Flux resolve `auto` against the revision rolled back to.
        let server_side = o.server_side_apply().server_side(&target.apply_method);
        let method = ApplyMethod::of(
            server_side,
            ClientSideApply {
                originals: parse_manifest(&last.manifest)?,
                // Flux: `rollback.force` is Helm's ForceReplace, without server-side apply.
                force_replace: o.force,
                three_way_for_custom_resources: false,
            },
        );
        rls.apply_method = method.record_value().to_owned();
        self.create(&rls).await?;
        let wait = (!o.disable_wait).then_some(WaitOptions {
            timeout,
            wait_for_jobs: !o.disable_wait_for_jobs,
            ..WaitOptions::new(timeout)
        });
        let rollout = Rollout {
            hooks: (!o.disable_hooks).then_some((HookEvent::PreRollback, HookEvent::PostRollback)),
            previous: Some(&last.manifest),
            take_ownership: true,
            wait,
            cleanup_on_fail: o.cleanup_on_fail,
            method,
        };
        match self.roll_out(&mut rls, timeout, rollout).await {
            Ok(()) => {
                self.records
                    .mark_deployed(&mut rls, rollback_to(target.version))
                    .await?;
                Ok(())
            }
            Err(e) => {
                for superseded in superseded_by(std::slice::from_ref(last), rls.version) {
                    self.records.update(&superseded).await?;
                }
                let description = rollback_failed(&name, &e.to_string());
                self.records.mark_failed(&mut rls, description).await?;
                Err(e)
            }
        }
    }

    /// Helm's uninstall of `name` from `records` (the plan's storage, or the one a release
    /// target change left behind). A record purged with the history is added to `journal`
    /// as Helm's uninstall returns it (`uninstalled`): it is what core records.
    async fn uninstall(
        &self,
        records: &SecretStorage,
        name: &str,
        timeout: Duration,
        journal: &Journal,
    ) -> Result<(), ActionError> {
        let o = &self.plan.options.uninstall;
        let Some(mut rls) = records.last(name).await? else {
            return Err(ActionError::ReleaseNotFound {
                name: name.to_owned(),
            });
        };
        if status_of(&rls) == Status::Uninstalled {
            if o.keep_history {
                return Err(ActionError::AlreadyDeleted {
                    name: name.to_owned(),
                });
            }
            records.purge(name).await?;
            journal.push(&rls);
            return Ok(());
        }
        records.mark_uninstalling(&mut rls, now()).await?;
        if !o.disable_hooks {
            // Helm 4's uninstall runs its hooks server-side, whatever the release's method.
            self.run_hooks(
                records,
                &mut rls,
                HookEvent::PreDelete,
                timeout,
                &|_| true,
                true,
            )
            .await?;
        }
        let mut errors = Vec::new();
        match parse_manifest(&rls.manifest) {
            Ok(objects) => {
                let options = DeleteOptions {
                    propagation: propagation(o.deletion_propagation()),
                    wait: (!o.disable_wait).then_some(timeout),
                    release: Some(ReleaseRef {
                        name: name.to_owned(),
                        namespace: rls.namespace.clone(),
                    }),
                    owner: Some(self.owner()),
                };
                if let Err(error) = self
                    .cluster
                    .delete(&objects, &rls.namespace, &options)
                    .await
                {
                    errors.push(ActionError::Delete { error });
                }
            }
            Err(e) => errors.push(e.into()),
        }
        if !o.disable_hooks
            && let Err(e) = self
                .run_hooks(
                    records,
                    &mut rls,
                    HookEvent::PostDelete,
                    timeout,
                    &|_| true,
                    true,
                )
                .await
        {
            errors.push(e);
        }
        records.finish_uninstall(&mut rls, o.keep_history).await?;
        if !o.keep_history {
            journal.push(&rls);
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(ActionError::Uninstall { errors })
        }
    }

    async fn unlock(&self) -> Result<(), ActionError> {
        let name = self.release_name().to_owned();
        match self.records.unlock(&name).await? {
            Unlock::NotFound => Err(ActionError::ReleaseNotFound { name }),
            Unlock::NotPending | Unlock::Unlocked { .. } => Ok(()),
        }
    }
}

/// Helm's `ReuseValues` (Flux's `upgrade.preserveValues`): the values given are laid over
/// the current release's user values, and the chart's defaults become the current
/// release's coalesced values.
fn reuse_values(
    current: &Release,
    given: Values,
    chart: &mut Chart,
) -> Result<Values, ActionError> {
    let mut warnings = Warnings::new();
    let old_chart = current
        .chart
        .as_ref()
        .map(Chart::from)
        .unwrap_or_else(|| Chart::new(flotilla_chart::Metadata::default()));
    let old_values = coalesce_values(&old_chart, &current.config, &mut warnings)
        .map_err(|error| ActionError::ReuseValues { error })?;
    let mut values = given;
    coalesce_tables(&mut values, current.config.clone(), &mut warnings);
    chart.values = Some(old_values);
    Ok(values)
}

/// A `spec.postRenderers` entry as the chart crate's post-renderer runs it.
fn post_renderer(
    renderer: &flotilla_core::spec::PostRenderer,
) -> flotilla_chart::postrender::PostRenderer {
    use flotilla_chart::postrender::{Image, Kustomize, Patch, PostRenderer, Selector};
    let text = |s: &Option<String>| s.clone().unwrap_or_default();
    PostRenderer {
        kustomize: renderer.kustomize.as_ref().map(|k| Kustomize {
            patches: k
                .patches
                .iter()
                .map(|p| Patch {
                    patch: p.patch.clone(),
                    target: p.target.as_ref().map(|t| Selector {
                        group: text(&t.group),
                        version: text(&t.version),
                        kind: text(&t.kind),
                        name: text(&t.name),
                        namespace: text(&t.namespace),
                        label_selector: text(&t.label_selector),
                        annotation_selector: text(&t.annotation_selector),
                    }),
                })
                .collect(),
            images: k
                .images
                .iter()
                .map(|i| Image {
                    name: i.name.clone(),
                    new_name: text(&i.new_name),
                    new_tag: text(&i.new_tag),
                    digest: text(&i.digest),
                })
                .collect(),
        }),
    }
}

/// Flux's `CommonMetadata` post-renderer: `spec.commonMetadata` labels and annotations
/// set on every rendered object (overwriting the chart's), hooks included unless the
/// post-render strategy is `nohooks`.
fn apply_common_metadata(
    rendered: &mut Rendered,
    metadata: &CommonMetadata,
    hooks_too: bool,
) -> Result<(), ActionError> {
    if metadata.labels.is_empty() && metadata.annotations.is_empty() {
        return Ok(());
    }
    rendered.manifest =
        super::render::map_manifest(&rendered.manifest, |doc| set_common_metadata(doc, metadata))
            .map_err(|message| ActionError::CommonMetadata {
            hook: None,
            message,
        })?;
    if hooks_too {
        for hook in &mut rendered.hooks {
            hook.manifest = super::render::map_document(&hook.manifest, |doc| {
                set_common_metadata(doc, metadata)
            })
            .map_err(|message| ActionError::CommonMetadata {
                hook: Some(hook.name.clone()),
                message,
            })?;
        }
    }
    Ok(())
}

/// Flux's `OriginLabels` post-renderer, run last (after `spec.postRenderers` and
/// `spec.commonMetadata`, so it wins a label key they share): the owner labels
/// ([`OWNER_NAME_LABEL`], [`OWNER_NAMESPACE_LABEL`]: Flux's `helm.toolkit.fluxcd.io/name`
/// and `/namespace` under Flotilla's group) set on every rendered object, hooks included
/// unless the post-render strategy is `nohooks`. The stored manifest carries them, so
/// `helm get manifest` shows them and a plain `helm rollback` to the revision keeps them.
fn apply_origin_labels(
    rendered: &mut Rendered,
    owner: &HelmReleaseRef,
    hooks_too: bool,
) -> Result<(), ActionError> {
    let origin = CommonMetadata {
        labels: BTreeMap::from([
            (OWNER_NAME_LABEL.to_owned(), owner.name.clone()),
            (OWNER_NAMESPACE_LABEL.to_owned(), owner.namespace.clone()),
        ]),
        annotations: BTreeMap::new(),
    };
    rendered.manifest =
        super::render::map_manifest(&rendered.manifest, |doc| set_common_metadata(doc, &origin))
            .map_err(|message| ActionError::OriginLabels {
                hook: None,
                message,
            })?;
    if hooks_too {
        for hook in &mut rendered.hooks {
            hook.manifest = super::render::map_document(&hook.manifest, |doc| {
                set_common_metadata(doc, &origin)
            })
            .map_err(|message| ActionError::OriginLabels {
                hook: Some(hook.name.clone()),
                message,
            })?;
        }
    }
    Ok(())
}

fn set_common_metadata(doc: &mut serde_json::Value, metadata: &CommonMetadata) {
    let Some(object) = doc.as_object_mut() else {
        return;
    };
    let meta = object
        .entry("metadata")
        .or_insert_with(|| serde_json::Value::Object(Default::default()));
    if !meta.is_object() {
        *meta = serde_json::Value::Object(Default::default());
    }
    let meta = meta.as_object_mut().expect("made an object above");
    for (field, entries) in [
        ("labels", &metadata.labels),
        ("annotations", &metadata.annotations),
    ] {
        if entries.is_empty() {
            continue;
        }
        let map = meta
            .entry(field)
            .or_insert_with(|| serde_json::Value::Object(Default::default()));
        if !map.is_object() {
            *map = serde_json::Value::Object(Default::default());
        }
        let map = map.as_object_mut().expect("made an object above");
        for (k, v) in entries {
            map.insert(k.clone(), serde_json::Value::String(v.clone()));
        }
    }
}

/// What [`Executor::render_next`] rendered.
#[derive(Debug)]
pub struct NextRender {
    /// The chart rendered (its default values replaced when values are reused).
    pub chart: Chart,
    /// The user values the release would record.
    pub values: Values,
    /// The manifest and hooks.
    pub rendered: Rendered,
    /// The CRDs the action would apply (none when its policy is `Skip`).
    pub crds: Vec<ManifestObject>,
    /// The action's CRD policy.
    pub crd_policy: CrdsPolicy,
}

/// How [`Executor::roll_out`] runs a new release.
struct Rollout<'a> {
    /// The pre and post hook events; `None` when hooks are disabled.
    hooks: Option<(HookEvent, HookEvent)>,
    /// The manifest of the release being replaced.
    previous: Option<&'a str>,
    /// Adopt objects that exist without Helm's ownership metadata.
    take_ownership: bool,
    /// How to wait for the applied objects; `None`: no wait.
    wait: Option<WaitOptions>,
    /// Delete the objects this release created when it fails (`cleanupOnFail`).
    cleanup_on_fail: bool,
    /// Server-side or client-side apply.
    method: ApplyMethod,
}

fn created_resources(report: &crate::kube::ApplyReport) -> Vec<Resource> {
    report
        .applied
        .iter()
        .filter(|r| report.created.contains(&r.object_ref()))
        .cloned()
        .collect()
}
