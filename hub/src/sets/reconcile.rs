//! One reconcile of a HelmReleaseSet: observe, [`rollout::decide`], act (see the module
//! docs of [`super`] for the steps).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use flotilla_api::{HelmRelease, HelmReleaseSet};
use flotilla_chart::values_template::{Budget, ClusterContext, TextTemplate, ValuesTemplate};
use flotilla_core::rollout::{
    self, ChildObservation, ClusterObservation, PromotionKind, RolloutPlan,
};
use flotilla_core::set::{
    CLUSTER_LABEL, ClusterInfo, HelmReleaseSetSpec, PROMOTED_AT_ANNOTATION, SET_LABEL, SetRevision,
    TargetCustomization, child_name, child_spec, select_clusters,
};
use futures::StreamExt as _;
use k8s_openapi::api::apps::v1::ControllerRevision;
use kube::ResourceExt as _;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;

use super::children::{self, child_object};
use super::decide::{self, ChildFate, ClusterFacts};
use super::{Context, SetError};
use crate::util;

/// Child writes of one reconcile's promotions in flight at once: as many as the default
/// `maxNewPerReconcile`, so a decision's promotions go out together and the next decision
/// is not held up by a queue of them (16 in flight made the last wave of bench-rollout's
/// 1,000 clusters wait 5 s beyond what the API server needed for its writes).
const PROMOTION_WRITES_IN_FLIGHT: usize =
    flotilla_core::set::DEFAULT_MAX_NEW_PER_RECONCILE as usize;

/// The templates of one revision: its `valuesTemplate`, and the names in its template's
/// `valuesFrom` that are templates themselves (by index; `None`: a plain name).
#[derive(Debug, Clone, Default)]
pub(super) struct Templates {
    values: Option<ValuesTemplate>,
    names: Vec<Option<TextTemplate>>,
}

/// What one cluster gets from its revision's templates.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct ClusterValues {
    /// The `valuesTemplate`'s output; `None` without one.
    values: Option<serde_json::Map<String, serde_json::Value>>,
    /// The rendered `valuesFrom` names, by index (`None`: the name as written).
    names: Vec<Option<String>>,
}

/// A cluster's values, or why they cannot be made (naming the field and the cluster).
type Rendered = Result<ClusterValues, String>;

/// The field of `valuesFrom` entry `i` of a set's template.
fn values_from_field(i: usize) -> String {
    format!("spec.template.spec.valuesFrom[{i}].name")
}

/// The checks a set must pass before any child is touched: the spec's own
/// ([`HelmReleaseSetSpec::validate`]) and the parse of its templates. The message names
/// the object and the field.
pub(super) fn validate(set: &HelmReleaseSet) -> Result<Templates, String> {
    set.validate().map_err(|e| e.to_string())?;
    parse_templates(&set.spec).map_err(|e| format!("HelmReleaseSet {}: {e}", set.key()))
}

/// The templates of `spec`, or the parse error after its field.
fn parse_templates(spec: &HelmReleaseSetSpec) -> Result<Templates, String> {
    let values = spec
        .values_template
        .as_deref()
        .filter(|t| !t.trim().is_empty())
        .map(ValuesTemplate::parse)
        .transpose()
        .map_err(|e| format!("spec.valuesTemplate: {e}"))?;
    let names = spec
        .template
        .spec
        .values_from
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let field = values_from_field(i);
            TextTemplate::is_template(&v.name)
                .then(|| TextTemplate::parse(&field, &v.name))
                .transpose()
                .map_err(|e| format!("{field}: {e}"))
        })
        .collect::<Result<_, _>>()?;
    Ok(Templates { values, names })
}

/// What the templates see of a cluster: its ManagedCluster, and the Cluster API `Cluster`
/// it was imported from, when there is one.
fn cluster_context(f: &ClusterFacts, cluster_api: Option<serde_json::Value>) -> ClusterContext {
    ClusterContext {
        name: f.name.clone(),
        labels: f.labels.clone(),
        annotations: f.annotations.clone(),
        cluster_api,
    }
}

/// The values and `valuesFrom` names of `cluster` from `templates`, the error naming the
/// field and the cluster. A rendered name must be a valid object name.
fn render(templates: &Templates, cluster: &ClusterContext, budget: Budget) -> Rendered {
    let values = templates
        .values
        .as_ref()
        .map(|t| t.render(cluster, budget))
        .transpose()
        .map_err(|e| format!("spec.valuesTemplate for cluster {}: {e}", cluster.name))?;
    let names = templates
        .names
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let Some(t) = t else { return Ok(None) };
            let at = || format!("{} for cluster {}", values_from_field(i), cluster.name);
            let name = t
                .render(cluster, budget)
                .map_err(|e| format!("{}: {e}", at()))?;
            flotilla_core::ids::check_dns1123_subdomain("ConfigMap or Secret name", &name)
                .map_err(|e| format!("{}: {e}", at()))?;
            Ok(Some(name))
        })
        .collect::<Result<_, String>>()?;
    Ok(ClusterValues { values, names })
}

/// A targeted cluster and what its templates see.
struct Target<'a> {
    facts: &'a ClusterFacts,
    context: ClusterContext,
}

/// The specs of the revisions a reconcile writes: the update revision's from the set, the
/// others from their ControllerRevisions (parsed once each).
struct Revisions<'a> {
    update: SetRevision,
    spec: &'a HelmReleaseSetSpec,
    templates: Templates,
    stored: &'a [ControllerRevision],
    set_name: String,
    others: HashMap<SetRevision, Option<(HelmReleaseSetSpec, Templates)>>,
}

impl Revisions<'_> {
    /// The spec and template of `rev`; `None` when no readable ControllerRevision holds it.
    fn get(&mut self, rev: &SetRevision, key: &str) -> Option<(&HelmReleaseSetSpec, &Templates)> {
        if *rev == self.update {
            return Some((self.spec, &self.templates));
        }
        let (stored, set_name) = (self.stored, &self.set_name);
        let entry = self.others.entry(rev.clone()).or_insert_with(|| {
            let name = rev.controller_revision_name(set_name);
            let cr = stored.iter().find(|r| r.name_any() == name)?;
            match children::revision_spec(cr, rev)
                .and_then(|s| parse_templates(&s).map(|t| (s, t)))
            {
                Ok(pair) => Some(pair),
                Err(message) => {
                    tracing::warn!(object = %key, revision = %name, %message, "ControllerRevision unusable");
                    None
                }
            }
        });
        entry.as_ref().map(|(s, t)| (s, t))
    }
}

/// The child spec of `cluster` at `rev` as JSON, or why it cannot be made.
fn desired_spec(
    revisions: &mut Revisions<'_>,
    rev: &SetRevision,
    cluster: &ClusterContext,
    rendered_update: Option<&Rendered>,
    key: &str,
    set_name: &str,
    budget: Budget,
) -> Result<flotilla_core::spec::HelmReleaseSpec, String> {
    let is_update = *rev == revisions.update;
    let Some((spec, templates)) = revisions.get(rev, key) else {
        return Err(format!("no ControllerRevision holds revision {rev}"));
    };
    let rendered = match rendered_update.filter(|_| is_update) {
        Some(r) => r.clone()?,
        None => render(templates, cluster, budget)?,
    };
    let customization =
        TargetCustomization::first_match(&spec.target_customizations, &cluster.labels);
    let mut child = child_spec(
        spec,
        set_name,
        &cluster.name,
        customization,
        rendered.values.as_ref(),
    );
    for (entry, name) in child.values_from.iter_mut().zip(&rendered.names) {
        if let Some(name) = name {
            entry.name.clone_from(name);
        }
    }
    Ok(child)
}

/// A promotion's write as it ends: the cluster, kind, wave and revision, and the result.
type WriteOutcome = (
    String,
    PromotionKind,
    String,
    SetRevision,
    Result<(), SetError>,
);

/// Takes in a promotion's write as it ends: logged and `written` on success, the first
/// failure kept in `failed`.
fn note_written(
    key: &str,
    (cluster, kind, wave, revision, result): WriteOutcome,
    written: &mut std::collections::BTreeSet<String>,
    failed: &mut Option<SetError>,
) {
    match result {
        Ok(()) => {
            tracing::info!(object = %key, %cluster, %wave, %revision, ?kind, "child promoted");
            if kind == PromotionKind::Rollback {
                tracing::info!(object = %key, %cluster, "rolled back");
            }
            written.insert(cluster);
        }
        Err(e) => {
            failed.get_or_insert(e);
        }
    }
}

/// Decisions one reconcile makes at most before it ends and requeues at once (its status
/// and Events are written at the end).
const DECISIONS_PER_RECONCILE: usize = 64;

/// How long one reconcile goes on deciding before it ends and requeues at once.
const DECISION_TIME: std::time::Duration = std::time::Duration::from_secs(15);

/// The set's children in `store`: by label and owner; one per cluster (the one of the
/// deterministic name first), and the strays (a second child for a cluster, or one
/// without the cluster label).
fn children_of(
    store: &kube::runtime::reflector::Store<HelmRelease>,
    namespace: &str,
    set_name: &str,
    uid: Option<&str>,
) -> (BTreeMap<String, Arc<HelmRelease>>, Vec<Arc<HelmRelease>>) {
    let mut kids: BTreeMap<String, Arc<HelmRelease>> = BTreeMap::new();
    let mut strays: Vec<Arc<HelmRelease>> = Vec::new();
    for child in store.state().into_iter().filter(|c| {
        c.namespace().as_deref() == Some(namespace)
            && c.labels().get(SET_LABEL).map(String::as_str) == Some(set_name)
            && c.owner_references()
                .iter()
                .any(|o| Some(o.uid.as_str()) == uid)
    }) {
        let Some(cluster) = child.labels().get(CLUSTER_LABEL).cloned() else {
            strays.push(child);
            continue;
        };
        let preferred = child.name_any() == child_name(set_name, &cluster);
        if kids.contains_key(&cluster) && !preferred {
            strays.push(child);
        } else if let Some(old) = kids.insert(cluster, child) {
            strays.push(old);
        }
    }
    (kids, strays)
}

/// The engine's view of the targets: each with its render error and its child, where a
/// child this reconcile promoted counts at its promotion (in flight at the revision) until
/// the watched child shows that revision.
fn observations(
    set: &HelmReleaseSet,
    targets: &[Target<'_>],
    rendered: &BTreeMap<&str, Rendered>,
    kids: &BTreeMap<String, Arc<HelmRelease>>,
    promoted: &HashMap<String, ChildObservation>,
) -> Vec<ClusterObservation> {
    targets
        .iter()
        .map(|t| {
            let name = t.facts.name.as_str();
            let customization =
                TargetCustomization::first_match(&set.spec.target_customizations, &t.facts.labels);
            let watched = kids.get(name).map(|c| decide::child_observation(c));
            let child = match (promoted.get(name), watched) {
                (Some(p), Some(w)) if w.revision == p.revision => Some(w),
                (Some(p), _) => Some(p.clone()),
                (None, w) => w,
            };
            ClusterObservation {
                name: t.facts.name.clone(),
                labels: t.facts.labels.clone(),
                availability: decide::availability(t.facts, customization),
                reachable: t.facts.connected,
                render_error: rendered.get(name).and_then(|r| r.as_ref().err().cloned()),
                child,
            }
        })
        .collect()
}

pub(super) async fn reconcile(
    set: Arc<HelmReleaseSet>,
    ctx: Arc<Context>,
) -> Result<Action, SetError> {
    if set.metadata.deletion_timestamp.is_some() {
        // The children go with their owner (garbage collection); their finalizers uninstall.
        return Ok(Action::await_change());
    }
    let key = set.key();
    let started = std::time::Instant::now();
    let namespace = set.namespace().unwrap_or_default();
    let set_name = set.name_any();
    let generation = set.metadata.generation.unwrap_or_default();
    let now = util::now();
    let before = set.status.clone().unwrap_or_default();
    let mut status = before.clone();

    // Validate: a refused spec touches no child.
    let templates = match validate(&set) {
        Ok(t) => t,
        Err(message) => {
            tracing::info!(object = %key, %message, "HelmReleaseSet refused");
            decide::invalid_spec_status(&mut status, &message, generation, &now);
            if status != before {
                children::write_status(&ctx, &set, &status).await?;
                let e = decide::SetEvent {
                    warning: true,
                    reason: decide::event_reason::INVALID_SPEC,
                    message,
                };
                children::event(&ctx, &set, &e).await;
            }
            return Ok(Action::await_change());
        }
    };
    let update = set.spec.revision();
    status.update_revision = Some(update.clone());
    status.observed_generation = generation;

    // The update revision's ControllerRevision.
    let mut stored = children::list_revisions(&ctx, &set).await?;
    let update_name = update.controller_revision_name(&set_name);
    if !stored.iter().any(|r| r.name_any() == update_name) {
        let numbers: Vec<_> = stored.iter().map(children::stored).collect();
        let created =
            children::create_revision(&ctx, &set, &update, decide::next_revision_number(&numbers))
                .await?;
        stored.push(created);
    }

    // Observe the clusters (never on a view not listed yet: an empty one would take every
    // cluster for gone and drop its child).
    let (children_store, clusters_store) = ctx.synced(&key).await?;
    let facts: Vec<ClusterFacts> = clusters_store
        .state()
        .iter()
        .map(|mc| ClusterFacts::of(mc))
        .collect();
    let by_name: BTreeMap<&str, &ClusterFacts> =
        facts.iter().map(|f| (f.name.as_str(), f)).collect();
    let infos: Vec<ClusterInfo> = facts
        .iter()
        .map(|f| ClusterInfo {
            name: f.name.clone(),
            labels: f.labels.clone(),
        })
        .collect();
    let mut targets: Vec<Target<'_>> = Vec::new();
    let mut denied = Vec::new();
    for info in select_clusters(&set.spec, &infos) {
        let Some(f) = by_name.get(info.name.as_str()) else {
            continue;
        };
        match ctx.tenancy.permits_cluster(&namespace, &f.name).await {
            Ok(()) => {}
            Err(d) if !d.is_terminal() => {
                return Err(SetError::Tenancy {
                    object: key,
                    source: d,
                });
            }
            Err(_) => {
                denied.push(f.name.clone());
                continue;
            }
        }
        let customization =
            TargetCustomization::first_match(&set.spec.target_customizations, &f.labels);
        if customization.is_some_and(|c| c.do_not_deploy) {
            continue;
        }
        let cluster_api = clusters_store
            .get(&ObjectRef::new(&f.name))
            .and_then(|mc| ctx.imported.cluster_of(&mc));
        targets.push(Target {
            facts: f,
            context: cluster_context(f, cluster_api),
        });
    }
    if !denied.is_empty() {
        tracing::info!(object = %key, clusters = ?denied, "clusters left out: no ManagedClusterBinding gives them to the set's namespace");
    }

    // Observe the children: by label and owner; one per cluster (the one of the
    // deterministic name first).
    let uid = set.uid();
    let (kids, strays) = children_of(children_store, &namespace, &set_name, uid.as_deref());

    // Render the update revision for each target, once: the reconcile's decisions share it.
    let budget = ctx.options.budget;
    let rendered: BTreeMap<&str, Rendered> = targets
        .iter()
        .map(|t| {
            (
                t.facts.name.as_str(),
                render(&templates, &t.context, budget),
            )
        })
        .collect();
    let mut promoted: HashMap<String, ChildObservation> = HashMap::new();
    let observed = observations(&set, &targets, &rendered, &kids, &promoted);

    let observed_in = started.elapsed();

    // Decide.
    let plan = RolloutPlan::new(&set.spec, &status);
    let mut d = rollout::decide(&plan, &observed, &now);
    let aborted_now = d.abort;

    // Act: the abort first, so a restart never promotes the aborted revision again.
    if d.abort {
        tracing::warn!(object = %key, revision = %update, "rollout aborted; rolling back");
        status.aborted_revision = Some(update.clone());
        children::write_status(&ctx, &set, &status).await?;
    }
    let mut revisions = Revisions {
        update: update.clone(),
        spec: &set.spec,
        templates,
        stored: &stored,
        set_name: set_name.clone(),
        others: HashMap::new(),
    };
    let mut written: std::collections::BTreeSet<String> = Default::default();
    let contexts: BTreeMap<&str, &ClusterContext> = targets
        .iter()
        .map(|t| (t.facts.name.as_str(), &t.context))
        .collect();

    // Promote, decision after decision: while one decision's children are being written
    // (PROMOTION_WRITES_IN_FLIGHT at once), the next decides on the live view of the
    // children with those promotions in it (as in flight at their revision), so the writes
    // flow without a pause between decisions. Each decision stays bounded by
    // `maxNewPerReconcile` and sees every report that arrived before it (a breach stops the
    // promotions of the next one); the reconcile ends with the first decision that promotes
    // nothing new, or at DECISIONS_PER_RECONCILE / DECISION_TIME.
    let mut in_flight = futures::stream::FuturesUnordered::new();
    let mut failed: Option<SetError> = None;
    let mut decisions = 1usize;
    let mut cut_short = false;
    loop {
        let at = util::now();
        let mut queued = 0usize;
        for p in &d.promotions {
            if failed.is_some() {
                break;
            }
            if promoted.contains_key(&p.cluster) {
                continue;
            }
            let Some(c) = contexts.get(p.cluster.as_str()) else {
                continue;
            };
            let name = child_name(&set_name, &p.cluster);
            if kids
                .get(&p.cluster)
                .is_some_and(|c| c.metadata.deletion_timestamp.is_some())
            {
                tracing::debug!(object = %key, cluster = %p.cluster, "child is being deleted; promoted once it is gone");
                continue;
            }
            let spec = match desired_spec(
                &mut revisions,
                &p.revision,
                c,
                rendered.get(p.cluster.as_str()),
                &key,
                &set_name,
                budget,
            ) {
                Ok(s) => s,
                Err(message) => {
                    tracing::warn!(object = %key, cluster = %p.cluster, revision = %p.revision, %message, "child not written");
                    continue;
                }
            };
            let object = child_object(&set, &name, &p.cluster, &p.revision, at.as_str(), &spec);
            while in_flight.len() >= PROMOTION_WRITES_IN_FLIGHT {
                if let Some(outcome) = in_flight.next().await {
                    note_written(&key, outcome, &mut written, &mut failed);
                }
            }
            promoted.insert(
                p.cluster.clone(),
                ChildObservation {
                    revision: Some(p.revision.clone()),
                    promoted_at: Some(at.clone()),
                    health: flotilla_core::rollout::ChildHealth::Progressing,
                },
            );
            let (ctx, set) = (ctx.clone(), set.clone());
            let (cluster, kind, wave, revision) = (
                p.cluster.clone(),
                p.kind,
                p.wave.clone(),
                p.revision.clone(),
            );
            in_flight.push(async move {
                let result = children::apply_child(&ctx, &set, &name, &object).await;
                (cluster, kind, wave, revision, result)
            });
            queued += 1;
        }
        if queued == 0 || failed.is_some() || aborted_now {
            break;
        }
        if decisions >= DECISIONS_PER_RECONCILE || started.elapsed() >= DECISION_TIME {
            cut_short = true;
            break;
        }
        // The next decision, on the live view.
        let (live, _) = children_of(children_store, &namespace, &set_name, uid.as_deref());
        let observed = observations(&set, &targets, &rendered, &live, &promoted);
        let next = rollout::decide(&plan, &observed, &util::now());
        if next.abort {
            // The next reconcile records the abort before it rolls back.
            cut_short = true;
            break;
        }
        d = next;
        decisions += 1;
    }
    while let Some(outcome) = in_flight.next().await {
        note_written(&key, outcome, &mut written, &mut failed);
    }
    drop(in_flight);
    if let Some(e) = failed {
        return Err(e);
    }

    let promoted_in = started.elapsed();

    // Put back hand edits, and settle the children of clusters no longer targeted.
    let targeted: std::collections::BTreeSet<&str> =
        targets.iter().map(|t| t.facts.name.as_str()).collect();
    let policy = set.spec.stop_matching_policy();
    for (cluster, child) in &kids {
        if child.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let facts = by_name.get(cluster.as_str()).copied();
        match decide::child_fate(targeted.contains(cluster.as_str()), facts, policy) {
            ChildFate::Keep => {
                if written.contains(cluster) {
                    continue;
                }
                let (Some(c), Some(rev)) = (
                    contexts.get(cluster.as_str()),
                    decide::child_revision(child),
                ) else {
                    continue;
                };
                let Ok(spec) = desired_spec(
                    &mut revisions,
                    &rev,
                    c,
                    rendered.get(cluster.as_str()),
                    &key,
                    &set_name,
                    budget,
                ) else {
                    continue;
                };
                let desired = serde_json::to_value(&spec).unwrap_or_default();
                let actual = serde_json::to_value(&child.spec).unwrap_or_default();
                if decide::spec_differs(&desired, &actual) {
                    let promoted_at = child
                        .annotations()
                        .get(PROMOTED_AT_ANNOTATION)
                        .cloned()
                        .unwrap_or_else(|| now.as_str().to_owned());
                    let name = child.name_any();
                    let object = child_object(&set, &name, cluster, &rev, &promoted_at, &spec);
                    tracing::info!(object = %key, child = %name, "child spec differs from its revision; put back");
                    children::apply_child(&ctx, &set, &name, &object).await?;
                }
            }
            ChildFate::Uninstall => {
                tracing::info!(object = %key, %cluster, "cluster no longer targeted; child deleted (uninstall)");
                children::delete_child(&ctx, &set, child).await?;
            }
            ChildFate::Orphan => {
                tracing::info!(object = %key, %cluster, "cluster no longer targeted; child orphaned");
                children::orphan_child(&ctx, &set, child).await?;
            }
            ChildFate::Drop => {
                tracing::info!(object = %key, %cluster, "ManagedCluster deleted; child dropped without uninstall");
                children::drop_child(&ctx, &set, child).await?;
            }
        }
    }
    for stray in &strays {
        if stray.metadata.deletion_timestamp.is_none() {
            // Dropped, not uninstalled: the release is the other child's.
            tracing::info!(object = %key, child = %stray.name_any(), "a second child for one cluster; dropped without uninstall");
            children::drop_child(&ctx, &set, stray).await?;
        }
    }

    let settled_in = started.elapsed();

    // Status: revisions, history, the report, Events.
    if d.completed {
        status.current_revision = Some(update.clone());
    }
    let keep: Vec<String> = [status.current_revision.as_ref(), Some(&update)]
        .into_iter()
        .flatten()
        .map(|r| r.controller_revision_name(&set_name))
        .collect();
    let numbers: Vec<_> = stored.iter().map(children::stored).collect();
    let trim =
        decide::revisions_to_trim(&numbers, &keep, set.spec.rollout().revision_history_limit());
    if !trim.is_empty() {
        children::delete_revisions(&ctx, &set, &trim).await;
    }
    d.report.write_to(&mut status, generation, &now);
    decide::denied_condition(&mut status, &namespace, &denied, generation, &now);
    let events = decide::set_events(&before, &status, aborted_now);
    if status != before {
        children::write_status(&ctx, &set, &status).await?;
    }
    for e in &events {
        children::event(&ctx, &set, e).await;
    }
    tracing::debug!(
        object = %key,
        clusters = observed.len(),
        decisions,
        promotions = written.len(),
        observe_ms = observed_in.as_millis() as u64,
        promote_ms = (promoted_in - observed_in).as_millis() as u64,
        settle_ms = (settled_in - promoted_in).as_millis() as u64,
        status_ms = (started.elapsed() - settled_in).as_millis() as u64,
        "HelmReleaseSet reconciled"
    );
    if cut_short {
        // More to promote than one reconcile's decisions took: the next one at once.
        return Ok(Action::requeue(std::time::Duration::ZERO));
    }
    let after = d
        .requeue_after
        .map_or(ctx.options.resync, |r| r.min(ctx.options.resync))
        .max(std::time::Duration::from_secs(1));
    Ok(Action::requeue(after))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn set(spec: serde_json::Value) -> HelmReleaseSet {
        serde_json::from_value(json!({
            "apiVersion": "helm.flotilla.dev/v1alpha1", "kind": "HelmReleaseSet",
            "metadata": {"name": "web", "namespace": "apps"},
            "spec": spec,
        }))
        .unwrap()
    }

    #[test]
    fn a_refused_set_is_named_with_the_field_that_is_wrong() {
        let template = json!({"spec": {"interval": "5m"}});
        let cases = [
            (
                json!({"clusterSelector": {"matchExpressions": [{"key": "ring", "operator": "In", "values": []}]}, "template": template}),
                "HelmReleaseSet apps/web: spec.clusterSelector.",
            ),
            (
                json!({"clusterSelector": {}, "template": template, "valuesTemplate": "a: {{ .ClusterName"}),
                "HelmReleaseSet apps/web: spec.valuesTemplate: template: valuesTemplate:1:",
            ),
            (
                json!({"clusterSelector": {}, "template": template,
                    "rollout": {"waves": [{"name": "a"}, {"name": "a"}]}}),
                "HelmReleaseSet apps/web: spec.rollout.waves[1].name: wave \"a\" is declared twice",
            ),
        ];
        for (spec, want) in cases {
            let err = validate(&set(spec.clone())).err().unwrap_or_default();
            assert!(err.starts_with(want), "{spec}: {err}");
        }
        let good = set(
            json!({"clusterSelector": {}, "template": template, "valuesTemplate": "a: {{ .ClusterName }}"}),
        );
        assert!(validate(&good).unwrap().values.is_some());
        let blank =
            set(json!({"clusterSelector": {}, "template": template, "valuesTemplate": "  \n"}));
        assert!(validate(&blank).unwrap().values.is_none());
    }

    fn context(name: &str, labels: &[(&str, &str)]) -> ClusterContext {
        let facts = ClusterFacts {
            name: name.into(),
            labels: labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..Default::default()
        };
        cluster_context(&facts, None)
    }

    fn templates(spec: serde_json::Value) -> Templates {
        validate(&set(spec)).unwrap()
    }

    #[test]
    fn a_render_error_names_the_cluster_and_keeps_the_line_and_column() {
        let t = templates(
            json!({"clusterSelector": {}, "template": {"spec": {"interval": "5m"}},
            "valuesTemplate": "a: {{ .ClusterLabels.region }}\n"}),
        );
        let err = render(&t, &context("edge-1", &[]), Default::default()).unwrap_err();
        assert!(
            err.starts_with("spec.valuesTemplate for cluster edge-1: template: valuesTemplate:1:"),
            "{err}"
        );
        let eu = context("edge-2", &[("region", "eu")]);
        let rendered = render(&t, &eu, Default::default()).unwrap();
        assert_eq!(rendered.values.unwrap()["a"], "eu");
        assert_eq!(
            render(&Templates::default(), &eu, Default::default()),
            Ok(ClusterValues::default())
        );
    }

    #[test]
    fn values_from_names_may_name_each_clusters_own_config_map() {
        let t = templates(json!({"clusterSelector": {}, "template": {"spec": {
            "interval": "5m",
            "valuesFrom": [
                {"kind": "ConfigMap", "name": "common"},
                {"kind": "ConfigMap", "name": "values-{{ .ClusterName }}"},
                {"kind": "Secret", "name": "{{ .ClusterLabels.region }}-creds", "optional": true},
            ],
        }}}));
        let rendered = render(
            &t,
            &context("edge-1", &[("region", "eu")]),
            Default::default(),
        )
        .unwrap();
        assert_eq!(
            rendered.names,
            [
                None,
                Some("values-edge-1".to_owned()),
                Some("eu-creds".to_owned())
            ]
        );
        // A label the cluster lacks fails that cluster, naming the entry.
        let err = render(&t, &context("edge-2", &[]), Default::default()).unwrap_err();
        assert!(
            err.starts_with("spec.template.spec.valuesFrom[2].name for cluster edge-2: template: spec.template.spec.valuesFrom[2].name:1:"),
            "{err}"
        );
        // A rendered name that is no object name fails too.
        let err = render(
            &t,
            &context("edge-3", &[("region", "EU West")]),
            Default::default(),
        )
        .unwrap_err();
        assert!(
            err.starts_with("spec.template.spec.valuesFrom[2].name for cluster edge-3: "),
            "{err}"
        );
        // A name that does not parse refuses the set, naming the field.
        let err = validate(&set(json!({"clusterSelector": {}, "template": {"spec": {
            "interval": "5m",
            "valuesFrom": [{"kind": "ConfigMap", "name": "v-{{ .ClusterName"}],
        }}})))
        .unwrap_err();
        assert!(
            err.starts_with("HelmReleaseSet apps/web: spec.template.spec.valuesFrom[0].name: template: spec.template.spec.valuesFrom[0].name:1:"),
            "{err}"
        );
    }

    #[test]
    fn the_example_set_of_xtask_up_is_accepted_and_renders_each_rings_values() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/fleet/rollout.yaml"
        );
        let text = std::fs::read_to_string(path).unwrap();
        let doc = flotilla_chart::values::parse_yaml_map(&text).unwrap();
        let example: HelmReleaseSet =
            serde_json::from_value(serde_json::Value::Object(doc)).unwrap();
        let t = validate(&example).unwrap();
        let canary = context("workload-a", &[("ring", "canary"), ("region", "eu")]);
        let values = render(&t, &canary, Default::default())
            .unwrap()
            .values
            .unwrap();
        assert_eq!(
            values["message"],
            "Hello from the canary ring, workload-a in eu"
        );
        let waves = &example.spec.rollout.as_ref().unwrap().waves;
        assert_eq!(
            waves.iter().map(|w| w.name.as_str()).collect::<Vec<_>>(),
            ["canary", "main"]
        );
    }
}
