//! The Helm actions the state machine asks for, run against one workload cluster: install,
//! upgrade, test, rollback, uninstall (plain and as remediation) and unlock.
//!
//! Every action writes release records with Helm's statuses and descriptions and reports
//! an [`Outcome`] listing each record it wrote, for `flotilla_core::release::apply_outcome`.
//! A failure before any record was written comes back with no writes (core then returns
//! the error and backs off); a failure after marks the new record `failed`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use flotilla_chart::coalesce::{Warnings, coalesce_tables, coalesce_values};
use flotilla_chart::release::{
    Hook, HookDeletePolicy as RecordDeletePolicy, HookEvent, HookExecution,
    HookPhase as RecordPhase, Release, Status,
};
use flotilla_chart::time::GoTime;
use flotilla_chart::{Chart, Values};
use flotilla_core::duration::GoDuration;
use flotilla_core::observation::Observation;
use flotilla_core::plan::{ReleasePlan, ReleaseRecord};
use flotilla_core::release::{Action, Outcome, observation_oci_digest};
use flotilla_core::spec::{CommonMetadata, CrdsPolicy, DeletionPropagation, PostRenderStrategy};
use flotilla_core::status::HelmReleaseStatus;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::time::Instant;

use super::render::{RenderOptions, Rendered, Renderer};
use crate::kube::apply::{ApplyOptions, HelmReleaseRef, ReleaseRef};
use crate::kube::delete::{DeleteOptions, Propagation, removed_objects};
use crate::kube::hook::{HookOptions, HookPhase};
use crate::kube::manifest::{ManifestObject, parse_manifest};
use crate::kube::wait::WaitOptions;
use crate::kube::{ClusterApi, ClusterLookup, Resource, error_chain};
use crate::storage::transitions::set_status;
use crate::storage::{SecretStorage, status_of};

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
}

/// The records an action wrote, by version (the last write of each wins).
#[derive(Debug, Default)]
struct Writes(BTreeMap<i64, Release>);

impl Writes {
    fn push(&mut self, rls: &Release) {
        self.0.insert(rls.version, rls.clone());
    }
}

/// The summary core wants of a stored release, with the OCI digest its observation takes.
pub fn record_of(rls: &Release, status: &HelmReleaseStatus) -> Result<ReleaseRecord, String> {
    let version = u32::try_from(rls.version).map_err(|_| {
        format!(
            "release {:?} has an invalid version {}",
            rls.name, rls.version
        )
    })?;
    let value = serde_json::json!({
        "name": rls.name,
        "version": version,
        "namespace": rls.namespace,
        "info": rls.info.clone().unwrap_or_default(),
        "chartMetadata": rls.chart.as_ref().and_then(|c| c.metadata.clone()).unwrap_or_default(),
        "config": serde_json::Value::Object(rls.config.clone()),
        "manifest": rls.manifest,
        "hooks": rls.hooks,
    });
    let observation: Observation = serde_json::from_value(value)
        .map_err(|e| format!("release {:?} v{}: {e}", rls.name, rls.version))?;
    ReleaseRecord::from_observation(&observation, observation_oci_digest(status, version))
        .map_err(|e| e.to_string())
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
        let started = Instant::now();
        let mut writes = Writes::default();
        let result = match action {
            Action::Install => self.install(timeout, &mut writes).await,
            Action::Upgrade { .. } => self.upgrade(timeout, &mut writes).await,
            Action::Test => self.test(timeout, &mut writes).await,
            Action::Rollback { target } => {
                self.rollback(i64::from(target.version), timeout, &mut writes)
                    .await
            }
            Action::UninstallRemediation => {
                let records = self.records.clone();
                let name = self.release_name().to_owned();
                self.uninstall(&records, &name, timeout, &mut writes).await
            }
            Action::Uninstall {
                name,
                storage_namespace,
                ..
            } => {
                let records = SecretStorage::new(self.cluster.client().clone(), storage_namespace);
                self.uninstall(&records, name, timeout, &mut writes).await
            }
            Action::Unlock { .. } => self.unlock(&mut writes).await,
            Action::CorrectDrift { .. } => Err(
                "drift correction applies the diffs detection found: run it with crate::drift::correct"
                    .to_owned(),
            ),
            Action::DetectDrift | Action::None(_) | Action::Stalled(_) | Action::Error(_) => Ok(()),
        };
        let mut outcome = Outcome {
            duration: Some(GoDuration::new(started.elapsed())),
            ..Outcome::default()
        };
        let mut errors: Vec<String> = Vec::new();
        if let Err(e) = result {
            if e == NOT_FOUND {
                outcome.release_not_found = true;
            } else {
                errors.push(e);
            }
        }
        for rls in writes.0.values() {
            match record_of(rls, status) {
                Ok(r) => outcome.writes.push(r),
                Err(e) => errors.push(e),
            }
        }
        if !errors.is_empty() {
            outcome.error = Some(errors.join("; "));
        }
        outcome
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
    ) -> Result<Rendered, String> {
        let capabilities = self.cluster.capabilities().await.map_err(|e| {
            format!(
                "discovering the cluster's capabilities: {}",
                error_chain(&e)
            )
        })?;
        let options = RenderOptions {
            release_name: self.release_name().to_owned(),
            namespace: self.plan.release.namespace.to_string(),
            revision,
            is_install,
            is_upgrade: !is_install,
            capabilities: Some(capabilities),
            lookup: Some(Arc::new(ClusterLookup::new(self.cluster.clone()))),
            skip_schema_validation,
            post_renderers: self
                .plan
                .options
                .post_renderers
                .iter()
                .flatten()
                .map(post_renderer)
                .collect(),
            post_render_hooks: self.plan.options.post_render_strategy
                != Some(PostRenderStrategy::Nohooks),
        };
        let renderer = self.renderer.clone();
        let chart = chart.clone();
        let values = values.clone();
        let mut rendered =
            tokio::task::spawn_blocking(move || renderer.render(&chart, &values, &options))
                .await
                .map_err(|e| format!("rendering stopped: {e}"))?
                .map_err(|e| error_chain(&e))?;
        if let Some(metadata) = &self.plan.options.common_metadata {
            let hooks_too =
                self.plan.options.post_render_strategy != Some(PostRenderStrategy::Nohooks);
            apply_common_metadata(&mut rendered, metadata, hooks_too)?;
        }
        Ok(rendered)
    }

    /// The plan's values as a table.
    fn plan_values(&self) -> Values {
        match &self.plan.values {
            serde_json::Value::Object(m) => m.clone(),
            _ => Values::new(),
        }
    }

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
            apply_method: "ssa".to_owned(),
        }
    }

    async fn create(&self, rls: &Release, writes: &mut Writes) -> Result<(), String> {
        self.records
            .create_with_max_history(rls, self.max_history())
            .await
            .map_err(|e| error_chain(&e))?;
        writes.push(rls);
        Ok(())
    }

    async fn update(
        &self,
        records: &SecretStorage,
        rls: &Release,
        writes: &mut Writes,
    ) -> Result<(), String> {
        records.update(rls).await.map_err(|e| error_chain(&e))?;
        writes.push(rls);
        Ok(())
    }

    async fn resolve(&self, manifest: &str) -> Result<Vec<Resource>, String> {
        let objects = parse_manifest(manifest).map_err(|e| error_chain(&e))?;
        self.resolve_objects(&objects).await
    }

    async fn resolve_objects(&self, objects: &[ManifestObject]) -> Result<Vec<Resource>, String> {
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
                Err(e) => return Err(error_chain(&e)),
            }
        }
        Ok(out)
    }

    async fn ensure_namespace(&self) -> Result<(), String> {
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
            Err(e) => Err(format!("creating namespace {ns}: {e}")),
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
    ) -> Result<(), String> {
        if policy == CrdsPolicy::Skip {
            return Ok(());
        }
        let crds = self
            .renderer
            .crds(chart, values)
            .map_err(|e| error_chain(&e))?;
        if crds.is_empty() {
            return Ok(());
        }
        let mut objects = Vec::new();
        for f in &crds {
            let parsed = parse_manifest(&f.text).map_err(|e| error_chain(&e))?;
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
                .map_err(|e| error_chain(&e))?
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
        let report = self
            .cluster
            .apply(&wanted, &options)
            .await
            .map_err(|e| error_chain(&e))?;
        let timeout = Duration::from_secs(60);
        self.cluster
            .wait_ready(&report.applied, &WaitOptions::new(timeout))
            .await
            .map_err(|e| error_chain(&e))?;
        self.cluster.wait_discovered(&report.applied, timeout).await
    }

    /// Runs the hooks of `event` in weight order, persisting each hook's `last_run`.
    async fn run_hooks(
        &self,
        records: &SecretStorage,
        rls: &mut Release,
        event: HookEvent,
        timeout: Duration,
        selected: &(dyn Fn(&Hook) -> bool + Sync),
        writes: &mut Writes,
    ) -> Result<(), String> {
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
            self.update(records, rls, writes).await?;
            let options = HookOptions {
                owner: Some(self.owner()),
                defer_succeeded_deletion: true,
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
                            failure = Some(format!(
                                "{}: {}",
                                run.object,
                                run.failure.unwrap_or_else(|| "failed".to_owned())
                            ));
                            break;
                        }
                        ran.push(res.clone());
                    }
                    Err(e) => {
                        failure = Some(error_chain(&e));
                        break;
                    }
                }
            }
            if let Some(f) = failure {
                rls.hooks[i].last_run.phase = Some(RecordPhase::Failed);
                if rls.hooks[i].last_run.completed_at.is_zero() {
                    rls.hooks[i].last_run.completed_at = now();
                }
                self.update(records, rls, writes).await?;
                self.delete_succeeded(rls, &succeeded).await;
                return Err(format!("failed {event}: {f}"));
            }
            rls.hooks[i].last_run.phase = Some(RecordPhase::Succeeded);
            self.update(records, rls, writes).await?;
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
    ) -> Result<(), (String, Vec<Resource>)> {
        let objects = parse_manifest(manifest).map_err(|e| (error_chain(&e), Vec::new()))?;
        let mut options = ApplyOptions::new(self.release_ref()).owned_by(self.owner());
        options.take_ownership = take_ownership;
        let report = match self.cluster.apply(&objects, &options).await {
            Ok(r) => r,
            Err(failure) => {
                let created = created_resources(&failure.report);
                return Err((error_chain(&failure), created));
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
                    .map_err(|e| (error_chain(&e), created.clone()))?;
            }
        }
        if let Some(wait) = wait {
            self.cluster
                .wait_ready(&report.applied, &wait)
                .await
                .map_err(|e| (error_chain(&e), created.clone()))?;
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
        writes: &mut Writes,
    ) -> Result<(), String> {
        if let Some((pre, _)) = &rollout.hooks {
            self.run_hooks(&self.records, rls, pre.clone(), timeout, &|_| true, writes)
                .await?;
        }
        if let Err((e, created)) = self
            .apply_and_wait(
                &rls.manifest,
                rollout.previous,
                rollout.take_ownership,
                rollout.wait,
            )
            .await
        {
            if rollout.cleanup_on_fail {
                self.cleanup(&created).await;
            }
            return Err(e);
        }
        if let Some((_, post)) = rollout.hooks {
            self.run_hooks(&self.records, rls, post, timeout, &|_| true, writes)
                .await?;
        }
        Ok(())
    }

    async fn install(&self, timeout: Duration, writes: &mut Writes) -> Result<(), String> {
        let o = &self.plan.options.install;
        let name = self.release_name().to_owned();
        let last = self
            .records
            .last(&name)
            .await
            .map_err(|e| error_chain(&e))?;
        // Helm's `availableName`: a name with history is taken, unless `replace` is set
        // and the newest record is uninstalled or failed.
        if let Some(last) = &last
            && !(o.replace && matches!(status_of(last), Status::Uninstalled | Status::Failed))
        {
            return Err(
                "release name check failed: cannot reuse a name that is still in use".to_owned(),
            );
        }
        let version = last.as_ref().map_or(1, |r| r.version + 1);
        let values = self.plan_values();
        self.apply_crds(self.chart, &values, o.crds()).await?;
        let rendered = self
            .render(
                self.chart,
                &values,
                version,
                true,
                o.disable_schema_validation,
            )
            .await?;
        parse_manifest(&rendered.manifest).map_err(|e| error_chain(&e))?;
        if o.create_namespace {
            self.ensure_namespace().await?;
        }
        let mut rls = self.new_release(
            self.chart,
            values,
            rendered,
            version,
            Status::PendingInstall,
            "Initial install underway",
        );
        // `replace`: the record replaced is superseded, unless it failed.
        if let Some(mut last) = last
            && status_of(&last) != Status::Failed
        {
            set_status(&mut last, Status::Superseded, "superseded by new release");
            self.update(&self.records, &last, writes).await?;
        }
        self.create(&rls, writes).await?;
        let wait = (!o.disable_wait).then_some(WaitOptions {
            timeout,
            wait_for_jobs: !o.disable_wait_for_jobs,
        });
        let rollout = Rollout {
            hooks: (!o.disable_hooks).then_some((HookEvent::PreInstall, HookEvent::PostInstall)),
            previous: None,
            take_ownership: !o.disable_take_ownership,
            wait,
            cleanup_on_fail: false,
        };
        let result = self.roll_out(&mut rls, timeout, rollout, writes).await;
        match result {
            Ok(()) => {
                set_status(&mut rls, Status::Deployed, "Install complete");
                self.update(&self.records, &rls, writes).await
            }
            Err(e) => {
                set_status(
                    &mut rls,
                    Status::Failed,
                    format!("Release \"{name}\" failed: {e}"),
                );
                self.update(&self.records, &rls, writes).await?;
                Err(e)
            }
        }
    }

    async fn upgrade(&self, timeout: Duration, writes: &mut Writes) -> Result<(), String> {
        let o = &self.plan.options.upgrade;
        let name = self.release_name().to_owned();
        let history = self
            .records
            .history(&name)
            .await
            .map_err(|e| error_chain(&e))?;
        let Some(last) = history.last() else {
            return Err(format!("\"{name}\" has no deployed releases"));
        };
        if status_of(last).is_pending() {
            return Err("another operation (install/upgrade/rollback) is in progress".to_owned());
        }
        // Helm's current release: the newest deployed one; without one, the newest record
        // when it failed or was superseded.
        let deployed = history
            .iter()
            .rev()
            .find(|r| status_of(r) == Status::Deployed);
        let mut current = match deployed {
            Some(d) => d.clone(),
            None if matches!(status_of(last), Status::Failed | Status::Superseded) => last.clone(),
            None => return Err(format!("\"{name}\" has no deployed releases")),
        };
        let version = last.version + 1;
        let mut chart = self.chart.clone();
        let values = if o.preserve_values {
            reuse_values(&current, self.plan_values(), &mut chart)?
        } else {
            self.plan_values()
        };
        self.apply_crds(&chart, &values, o.crds()).await?;
        let rendered = self
            .render(&chart, &values, version, false, o.disable_schema_validation)
            .await?;
        parse_manifest(&rendered.manifest).map_err(|e| error_chain(&e))?;
        let mut rls = self.new_release(
            &chart,
            values,
            rendered,
            version,
            Status::PendingUpgrade,
            "Preparing upgrade",
        );
        if let Some(first) = current.info.as_ref().map(|i| i.first_deployed)
            && let Some(info) = rls.info.as_mut()
        {
            info.first_deployed = first;
        }
        self.create(&rls, writes).await?;
        let wait = (!o.disable_wait).then_some(WaitOptions {
            timeout,
            wait_for_jobs: !o.disable_wait_for_jobs,
        });
        let rollout = Rollout {
            hooks: (!o.disable_hooks).then_some((HookEvent::PreUpgrade, HookEvent::PostUpgrade)),
            previous: Some(&current.manifest),
            take_ownership: !o.disable_take_ownership,
            wait,
            cleanup_on_fail: o.cleanup_on_fail,
        };
        let result = self.roll_out(&mut rls, timeout, rollout, writes).await;
        match result {
            Ok(()) => {
                if status_of(&current) == Status::Deployed {
                    set_superseded(&mut current);
                    self.update(&self.records, &current, writes).await?;
                }
                set_status(&mut rls, Status::Deployed, "Upgrade complete");
                self.update(&self.records, &rls, writes).await
            }
            Err(e) => {
                set_status(
                    &mut rls,
                    Status::Failed,
                    format!("Upgrade \"{name}\" failed: {e}"),
                );
                self.update(&self.records, &rls, writes).await?;
                Err(e)
            }
        }
    }

    async fn test(&self, timeout: Duration, writes: &mut Writes) -> Result<(), String> {
        let name = self.release_name().to_owned();
        let Some(mut rls) = self
            .records
            .last(&name)
            .await
            .map_err(|e| error_chain(&e))?
        else {
            return Err(format!("release: not found: {name}"));
        };
        let test = &self.plan.options.test;
        let selected = |h: &Hook| test.selects(&h.name);
        self.run_hooks(
            &self.records,
            &mut rls,
            HookEvent::Test,
            timeout,
            &selected,
            writes,
        )
        .await
    }

    async fn rollback(
        &self,
        target_version: i64,
        timeout: Duration,
        writes: &mut Writes,
    ) -> Result<(), String> {
        let o = &self.plan.options.rollback;
        let name = self.release_name().to_owned();
        let history = self
            .records
            .history(&name)
            .await
            .map_err(|e| error_chain(&e))?;
        let Some(mut current) = history.last().cloned() else {
            return Err(format!("\"{name}\" has no deployed releases"));
        };
        let Some(target) = history.iter().find(|r| r.version == target_version) else {
            return Err(format!("release has no {target_version} version"));
        };
        let mut rls = target.clone();
        rls.version = current.version + 1;
        for h in &mut rls.hooks {
            h.last_run = HookExecution::default();
        }
        let t = now();
        let info = rls.info.get_or_insert_with(Default::default);
        info.first_deployed = current.info.as_ref().map_or(t, |i| i.first_deployed);
        info.last_deployed = t;
        info.deleted = GoTime::ZERO;
        set_status(
            &mut rls,
            Status::PendingRollback,
            format!("Rollback to {target_version}"),
        );
        self.create(&rls, writes).await?;
        let wait = (!o.disable_wait).then_some(WaitOptions {
            timeout,
            wait_for_jobs: !o.disable_wait_for_jobs,
        });
        let rollout = Rollout {
            hooks: (!o.disable_hooks).then_some((HookEvent::PreRollback, HookEvent::PostRollback)),
            previous: Some(&current.manifest),
            take_ownership: true,
            wait,
            cleanup_on_fail: o.cleanup_on_fail,
        };
        let result = self.roll_out(&mut rls, timeout, rollout, writes).await;
        match result {
            Ok(()) => {
                for mut r in history
                    .into_iter()
                    .filter(|r| status_of(r) == Status::Deployed)
                {
                    set_superseded(&mut r);
                    self.update(&self.records, &r, writes).await?;
                }
                set_status(
                    &mut rls,
                    Status::Deployed,
                    format!("Rollback to {target_version}"),
                );
                self.update(&self.records, &rls, writes).await
            }
            Err(e) => {
                if status_of(&current) == Status::Deployed {
                    set_superseded(&mut current);
                    self.update(&self.records, &current, writes).await?;
                }
                set_status(
                    &mut rls,
                    Status::Failed,
                    format!("Rollback \"{name}\" failed: {e}"),
                );
                self.update(&self.records, &rls, writes).await?;
                Err(e)
            }
        }
    }

    async fn uninstall(
        &self,
        records: &SecretStorage,
        name: &str,
        timeout: Duration,
        writes: &mut Writes,
    ) -> Result<(), String> {
        let o = &self.plan.options.uninstall;
        let history = records.history(name).await.map_err(|e| error_chain(&e))?;
        let Some(mut rls) = history.last().cloned() else {
            return Err(NOT_FOUND.to_owned());
        };
        let purge = async |records: &SecretStorage| -> Result<(), String> {
            for r in &history {
                match records.delete(&r.name, r.version).await {
                    Ok(_) => {}
                    Err(e) if e.is_not_found() => {}
                    Err(e) => return Err(error_chain(&e)),
                }
            }
            Ok(())
        };
        if status_of(&rls) == Status::Uninstalled {
            if o.keep_history {
                return Err(format!("the release named \"{name}\" is already deleted"));
            }
            purge(records).await?;
            writes.push(&rls);
            return Ok(());
        }
        set_status(
            &mut rls,
            Status::Uninstalling,
            "Deletion in progress (or silently failed)",
        );
        if let Some(info) = rls.info.as_mut() {
            info.deleted = now();
        }
        self.update(records, &rls, writes).await?;
        let mut errors = Vec::new();
        if !o.disable_hooks
            && let Err(e) = self
                .run_hooks(
                    records,
                    &mut rls,
                    HookEvent::PreDelete,
                    timeout,
                    &|_| true,
                    writes,
                )
                .await
        {
            return Err(e);
        }
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
                if let Err(e) = self
                    .cluster
                    .delete(&objects, &rls.namespace, &options)
                    .await
                {
                    errors.push(error_chain(&e));
                }
            }
            Err(e) => errors.push(error_chain(&e)),
        }
        if !o.disable_hooks
            && let Err(e) = self
                .run_hooks(
                    records,
                    &mut rls,
                    HookEvent::PostDelete,
                    timeout,
                    &|_| true,
                    writes,
                )
                .await
        {
            errors.push(e);
        }
        set_status(&mut rls, Status::Uninstalled, "Uninstallation complete");
        if o.keep_history {
            for mut r in history
                .iter()
                .filter(|r| r.version != rls.version && status_of(r) == Status::Deployed)
                .cloned()
            {
                set_superseded(&mut r);
                self.update(records, &r, writes).await?;
            }
            self.update(records, &rls, writes).await?;
        } else {
            purge(records).await?;
            writes.push(&rls);
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(format!(
                "uninstallation completed with {} error(s): {}",
                errors.len(),
                errors.join("; ")
            ))
        }
    }

    async fn unlock(&self, writes: &mut Writes) -> Result<(), String> {
        let name = self.release_name().to_owned();
        let Some(mut rls) = self
            .records
            .last(&name)
            .await
            .map_err(|e| error_chain(&e))?
        else {
            return Err(NOT_FOUND.to_owned());
        };
        let pending = status_of(&rls);
        if !pending.is_pending() {
            return Ok(());
        }
        set_status(
            &mut rls,
            Status::Failed,
            format!("Release unlocked from stale '{pending}' state"),
        );
        self.update(&self.records, &rls, writes).await
    }
}

/// Helm's `ReuseValues` (Flux's `upgrade.preserveValues`): the values given are laid over
/// the current release's user values, and the chart's defaults become the current
/// release's coalesced values.
fn reuse_values(current: &Release, given: Values, chart: &mut Chart) -> Result<Values, String> {
    let mut warnings = Warnings::new();
    let old_chart = current
        .chart
        .as_ref()
        .map(Chart::from)
        .unwrap_or_else(|| Chart::new(flotilla_chart::Metadata::default()));
    let old_values = coalesce_values(&old_chart, &current.config, &mut warnings)
        .map_err(|e| format!("failed to rebuild old values: {e}"))?;
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
) -> Result<(), String> {
    if metadata.labels.is_empty() && metadata.annotations.is_empty() {
        return Ok(());
    }
    rendered.manifest =
        super::render::map_manifest(&rendered.manifest, |doc| set_common_metadata(doc, metadata))
            .map_err(|e| format!("post-render commonMetadata: {e}"))?;
    if hooks_too {
        for hook in &mut rendered.hooks {
            hook.manifest = super::render::map_document(&hook.manifest, |doc| {
                set_common_metadata(doc, metadata)
            })
            .map_err(|e| format!("post-render commonMetadata: hook {}: {e}", hook.name))?;
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
}

/// Marker error: the release is not in storage (uninstall, unlock).
const NOT_FOUND: &str = "release: not found";

fn set_superseded(rls: &mut Release) {
    if let Some(info) = rls.info.as_mut() {
        info.status = Some(Status::Superseded);
    }
}

fn created_resources(report: &crate::kube::ApplyReport) -> Vec<Resource> {
    report
        .applied
        .iter()
        .filter(|r| report.created.contains(&r.object_ref()))
        .cloned()
        .collect()
}
