//! `flotilla get helmreleasesets` and `flotilla rollout status|pause|resume|approve|abort`:
//! the fleet rollout of a HelmReleaseSet, as the flux CLI shows and drives its objects.
//!
//! What each verb writes (the hub's set controller reads it at its next reconcile, which
//! the write itself triggers):
//!
//! - `pause` / `resume`: `spec.rollout.paused` (a merge patch). Paused, nothing more is
//!   promoted; clusters in flight finish.
//! - `approve`: `spec.rollout.waves[i].approvedRevision = status.updateRevision` for the
//!   wave waiting at its manual gate (else the current wave, approving ahead of time),
//!   with a JSON-patch `test` of the wave's name so a concurrent edit of the waves fails
//!   rather than approving another wave. Refused while the hub has not observed the set's
//!   generation (the update revision in the status could be an older spec's).
//! - `abort`: `status.abortedRevision = status.updateRevision` (a merge patch of the status
//!   subresource): the same field the controller itself writes on a breach under
//!   `onFailure: AbortAndRollback`, so a manual abort and an automatic one behave alike:
//!   the clusters already at the update revision are put back on `status.currentRevision`,
//!   newest wave first, and the revision is never promoted again; a new spec revision
//!   starts a new rollout. The user needs `patch` on `helmreleasesets/status` (an
//!   operator's right, as `kubectl rollout undo` needs write access to the object).

use std::io::Write;

use clap::{Args, Subcommand};
use flotilla_api::HelmReleaseSet;
use flotilla_core::meta::{Conditions as _, condition};
use flotilla_core::rollout::conditions as set_conditions;
use flotilla_core::set::{HelmReleaseSetStatus, WaveState};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt as _};
use serde_json::json;

use crate::fleet::{Failed, Scope, object_error, table};

/// A HelmReleaseSet named on the command line.
#[derive(Debug, Clone, Args)]
pub struct SetNamed {
    /// The HelmReleaseSet's name.
    pub name: String,
    /// Its namespace.
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
}

/// `flotilla rollout ...`
#[derive(Debug, Subcommand)]
pub enum Rollout {
    /// The rollout of a HelmReleaseSet: waves, progress, failed clusters, what it waits for.
    Status(SetNamed),
    /// Stop promoting (`spec.rollout.paused: true`); clusters in flight finish.
    Pause(SetNamed),
    /// Promote again (`spec.rollout.paused: false`).
    Resume(SetNamed),
    /// Let the rollout past the manual gate of the wave waiting for it.
    Approve(SetNamed),
    /// Abort the rollout of the update revision and roll the promoted clusters back.
    Abort(SetNamed),
}

const KIND: &str = "HelmReleaseSet";

fn sets(client: &Client, namespace: &str) -> Api<HelmReleaseSet> {
    Api::namespaced(client.clone(), namespace)
}

fn status_of(set: &HelmReleaseSet) -> HelmReleaseSetStatus {
    set.status.clone().unwrap_or_default()
}

/// An enum's value as the API shows it (`kubectl get -o yaml`): its serialized name.
fn api_name(value: &impl serde::Serialize) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default()
}

fn ready_of(status: &HelmReleaseSetStatus) -> (String, String) {
    match status.conditions.get_condition(condition::READY) {
        Some(c) => (api_name(&c.status), c.message.clone()),
        None => ("Unknown".to_owned(), "waiting to be reconciled".to_owned()),
    }
}

/// `flotilla get helmreleasesets [-A]`.
pub async fn get_sets(client: Client, scope: &Scope, out: &mut dyn Write) -> Result<(), Failed> {
    let api: Api<HelmReleaseSet> = if scope.all_namespaces {
        Api::all(client)
    } else {
        Api::namespaced(client, &scope.namespace)
    };
    let list = api.list(&scope.list_params()).await?;
    if let Some(format) = scope.output {
        return crate::fleet::print_list(out, &list.items, format);
    }
    if list.items.is_empty() {
        let place = if scope.all_namespaces {
            "any namespace".to_owned()
        } else {
            format!("{} namespace", scope.namespace)
        };
        writeln!(out, "no HelmReleaseSet objects found in {place}")?;
        return Ok(());
    }
    let mut header = Vec::new();
    if scope.all_namespaces {
        header.push("NAMESPACE");
    }
    header.extend([
        "NAME", "REVISION", "WAVE", "UPDATED", "PAUSED", "READY", "MESSAGE",
    ]);
    let rows: Vec<Vec<String>> = list
        .items
        .iter()
        .map(|s| {
            let status = status_of(s);
            let (ready, message) = ready_of(&status);
            let mut row = Vec::new();
            if scope.all_namespaces {
                row.push(s.namespace().unwrap_or_default());
            }
            row.extend([
                s.name_any(),
                status
                    .update_revision
                    .as_ref()
                    .map(ToString::to_string)
                    .unwrap_or_default(),
                status.current_wave.clone().unwrap_or_else(|| "-".into()),
                format!("{}/{}", status.summary.updated, status.summary.desired),
                s.spec.rollout().paused.to_string(),
                ready,
                message,
            ]);
            row
        })
        .collect();
    table(out, &header, &rows)
}

/// The text of `rollout status` (pure).
pub fn status_text(set: &HelmReleaseSet) -> String {
    let status = status_of(set);
    let mut t = String::new();
    let rev = |r: &Option<flotilla_core::set::SetRevision>| {
        r.as_ref().map_or("(none)".to_owned(), ToString::to_string)
    };
    t.push_str(&format!(
        "HelmReleaseSet {}/{}: revision {} (current {})\n",
        set.namespace().unwrap_or_default(),
        set.name_any(),
        rev(&status.update_revision),
        rev(&status.current_revision),
    ));
    let (ready, message) = ready_of(&status);
    t.push_str(&format!("Ready: {ready}: {message}\n"));
    let s = status.summary;
    t.push_str(&format!(
        "Clusters: {} desired, {} updated, {} ready, {} failed, {} timed out, {} pending, {} paused, {} unreachable\n",
        s.desired, s.updated, s.ready, s.failed, s.timed_out, s.pending, s.paused, s.unreachable
    ));
    if !status.waves.is_empty() {
        t.push('\n');
        let rows: Vec<Vec<String>> = status
            .waves
            .iter()
            .map(|w| {
                vec![
                    w.name.clone(),
                    api_name(&w.state),
                    w.clusters.to_string(),
                    w.updated.to_string(),
                    w.ready.to_string(),
                    w.failed.to_string(),
                    w.in_flight.to_string(),
                ]
            })
            .collect();
        let mut buf = Vec::new();
        let _ = table(
            &mut buf,
            &[
                "WAVE",
                "STATE",
                "CLUSTERS",
                "UPDATED",
                "READY",
                "FAILED",
                "IN-FLIGHT",
            ],
            &rows,
        );
        t.push_str(&String::from_utf8_lossy(&buf));
    }
    if !status.failed_clusters.is_empty() {
        t.push('\n');
        let rows: Vec<Vec<String>> = status
            .failed_clusters
            .iter()
            .map(|f| {
                vec![
                    f.cluster.clone(),
                    f.wave.clone(),
                    api_name(&f.reason),
                    f.message.clone(),
                ]
            })
            .collect();
        let mut buf = Vec::new();
        let _ = table(
            &mut buf,
            &["FAILED CLUSTER", "WAVE", "REASON", "MESSAGE"],
            &rows,
        );
        t.push_str(&String::from_utf8_lossy(&buf));
    }
    if let Some(waiting) = waiting_for(set) {
        t.push_str(&format!("\nWaiting for: {waiting}\n"));
    }
    t
}

/// What the rollout waits for, in a sentence with the command that moves it on.
fn waiting_for(set: &HelmReleaseSet) -> Option<String> {
    let status = status_of(set);
    let (ns, name) = (set.namespace().unwrap_or_default(), set.name_any());
    if set.spec.rollout().paused {
        return Some(format!(
            "resume: the rollout is paused (flotilla rollout resume {name} -n {ns})"
        ));
    }
    if let Some(w) = status
        .waves
        .iter()
        .find(|w| w.state == WaveState::AwaitingApproval)
    {
        return Some(format!(
            "approval of revision {} at wave {} (flotilla rollout approve {name} -n {ns})",
            status
                .update_revision
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
            w.name
        ));
    }
    if let Some(w) = status.waves.iter().find(|w| w.state == WaveState::Soaking) {
        return Some(format!(
            "wave {} to soak until {}",
            w.name,
            w.soak_until.as_ref().map_or("", |t| t.as_str())
        ));
    }
    let degraded = status
        .conditions
        .get_condition(set_conditions::ROLLOUT_PAUSED)
        .filter(|c| c.reason == flotilla_core::rollout::reason::MAX_FAILURES_EXCEEDED);
    if let Some(c) = degraded {
        return Some(format!(
            "{}; fix the failed clusters or the spec, or abort (flotilla rollout abort {name} -n {ns})",
            c.message
        ));
    }
    status
        .current_wave
        .as_ref()
        .map(|w| format!("the clusters of wave {w} to be Ready"))
}

/// The index (in `spec.rollout.waves`) and name of the wave `approve` approves.
pub fn wave_to_approve(set: &HelmReleaseSet) -> Result<(usize, String), Failed> {
    let status = status_of(set);
    let target = status
        .waves
        .iter()
        .find(|w| w.state == WaveState::AwaitingApproval)
        .map(|w| w.name.clone())
        .or(status.current_wave.clone())
        .ok_or_else(|| {
            Failed(format!(
                "{KIND} {}/{} has no wave to approve: its rollout is not under way",
                set.namespace().unwrap_or_default(),
                set.name_any()
            ))
        })?;
    let waves = set.spec.rollout().waves;
    let i = waves.iter().position(|w| w.name == target).ok_or_else(|| {
        Failed(format!(
            "{KIND} {}/{}: wave {target} is the final wave of unmatched clusters, which has no gate",
            set.namespace().unwrap_or_default(),
            set.name_any()
        ))
    })?;
    Ok((i, target))
}

async fn get(client: &Client, named: &SetNamed) -> Result<HelmReleaseSet, Failed> {
    sets(client, &named.namespace)
        .get(&named.name)
        .await
        .map_err(|e| object_error(KIND, &named.namespace, &named.name, e))
}

/// `flotilla rollout ...`.
pub async fn execute(client: Client, command: Rollout, out: &mut dyn Write) -> Result<(), Failed> {
    match command {
        Rollout::Status(named) => {
            let set = get(&client, &named).await?;
            out.write_all(status_text(&set).as_bytes())?;
            Ok(())
        }
        Rollout::Pause(named) => set_paused(&client, &named, true, out).await,
        Rollout::Resume(named) => set_paused(&client, &named, false, out).await,
        Rollout::Approve(named) => {
            let set = get(&client, &named).await?;
            let status = status_of(&set);
            if status.observed_generation != set.metadata.generation.unwrap_or_default() {
                return Err(Failed(format!(
                    "{KIND} {}/{}: the hub has not yet observed generation {}; try again",
                    named.namespace,
                    named.name,
                    set.metadata.generation.unwrap_or_default()
                )));
            }
            let revision = status.update_revision.clone().ok_or_else(|| {
                Failed(format!(
                    "{KIND} {}/{} has no update revision yet",
                    named.namespace, named.name
                ))
            })?;
            let (i, wave) = wave_to_approve(&set)?;
            writeln!(
                out,
                "► approving revision {revision} at wave {wave} of {KIND} {} in {} namespace",
                named.name, named.namespace
            )?;
            let patch = json!([
                {"op": "test", "path": format!("/spec/rollout/waves/{i}/name"), "value": wave},
                {"op": "add", "path": format!("/spec/rollout/waves/{i}/approvedRevision"), "value": revision.to_string()},
            ]);
            sets(&client, &named.namespace)
                .patch(
                    &named.name,
                    &PatchParams::default(),
                    &Patch::<()>::Json(serde_json::from_value(patch)?),
                )
                .await
                .map_err(|e| object_error(KIND, &named.namespace, &named.name, e))?;
            writeln!(out, "✔ wave {wave} approved")?;
            Ok(())
        }
        Rollout::Abort(named) => {
            let set = get(&client, &named).await?;
            let revision = status_of(&set).update_revision.ok_or_else(|| {
                Failed(format!(
                    "{KIND} {}/{} has no rollout to abort",
                    named.namespace, named.name
                ))
            })?;
            writeln!(
                out,
                "► aborting the rollout of revision {revision} of {KIND} {} in {} namespace",
                named.name, named.namespace
            )?;
            sets(&client, &named.namespace)
                .patch_status(
                    &named.name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"abortedRevision": revision.to_string()}})),
                )
                .await
                .map_err(|e| object_error(KIND, &named.namespace, &named.name, e))?;
            writeln!(
                out,
                "✔ rollout aborted; the promoted clusters roll back to the current revision"
            )?;
            Ok(())
        }
    }
}

async fn set_paused(
    client: &Client,
    named: &SetNamed,
    paused: bool,
    out: &mut dyn Write,
) -> Result<(), Failed> {
    let verb = if paused { "pausing" } else { "resuming" };
    writeln!(
        out,
        "► {verb} the rollout of {KIND} {} in {} namespace",
        named.name, named.namespace
    )?;
    sets(client, &named.namespace)
        .patch(
            &named.name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"rollout": {"paused": paused}}})),
        )
        .await
        .map_err(|e| object_error(KIND, &named.namespace, &named.name, e))?;
    writeln!(
        out,
        "✔ rollout {}",
        if paused { "paused" } else { "resumed" }
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(status: serde_json::Value) -> HelmReleaseSet {
        serde_json::from_value(json!({
            "apiVersion": "helm.flotilla.dev/v1alpha1", "kind": "HelmReleaseSet",
            "metadata": {"name": "web", "namespace": "apps", "generation": 2},
            "spec": {"clusterSelector": {}, "template": {"spec": {"interval": "5m"}},
                "rollout": {"waves": [
                    {"name": "canary", "gate": "Manual"},
                    {"name": "main"},
                ]}},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn approve_takes_the_wave_at_its_gate_else_the_current_one_never_the_final_wave() {
        let waiting = set(
            json!({"observedGeneration": 2, "updateRevision": "0123456789",
            "currentWave": "canary",
            "waves": [
                {"name": "canary", "state": "AwaitingApproval", "clusters": 1, "updated": 1, "ready": 1, "failed": 0, "inFlight": 0},
                {"name": "main", "state": "Pending", "clusters": 1, "updated": 0, "ready": 0, "failed": 0, "inFlight": 0},
            ]}),
        );
        assert_eq!(wave_to_approve(&waiting).unwrap(), (0, "canary".to_owned()));
        let text = status_text(&waiting);
        assert!(text.contains("Waiting for: approval of revision 0123456789 at wave canary (flotilla rollout approve web -n apps)"), "{text}");
        assert!(text.contains("canary\tAwaitingApproval"), "{text}");
        let main = set(
            json!({"observedGeneration": 2, "updateRevision": "0123456789", "currentWave": "main"}),
        );
        assert_eq!(wave_to_approve(&main).unwrap(), (1, "main".to_owned()));
        let last = set(
            json!({"observedGeneration": 2, "updateRevision": "0123456789", "currentWave": "unmatched"}),
        );
        assert!(
            wave_to_approve(&last)
                .unwrap_err()
                .0
                .contains("has no gate")
        );
        let done = set(json!({"observedGeneration": 2, "updateRevision": "0123456789"}));
        assert!(
            wave_to_approve(&done)
                .unwrap_err()
                .0
                .contains("not under way")
        );
    }
}
