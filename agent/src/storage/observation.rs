//! Flux's observation of a stored record: [`observation_of`] turns Helm's release record
//! ([`flotilla_chart::release::Release`]) into core's observation
//! ([`flotilla_core::observation::Observation`]), whose digest is `status.history[].digest`.
//!
//! The conversion is field by field and gives what decoding the record's JSON (`info`,
//! `chart.metadata`, `config`, `manifest`, `hooks`) into the observation types would give:
//! zero times are absent, an absent status is `""`, a missing `info` or chart metadata is
//! the empty one, `config` and `hooks` are always present (possibly empty), a `null`
//! `info.resources` is absent. The digests Flux-compatible status fields carry depend on
//! every one of these.

use flotilla_chart::Metadata;
use flotilla_chart::release::{Hook, HookExecution, Info, Release};
use flotilla_chart::time::GoTime;
use flotilla_core::observation::{self as obs, Observation};

/// Why a stored record cannot be summarized for core.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The revision is not a positive 32-bit number (core's revision type).
    #[error("release {name:?} has an invalid version {version}")]
    InvalidVersion {
        /// Release name.
        name: String,
        /// The revision.
        version: i64,
    },
    /// Core refused the observation (its name, namespace, status or a time).
    #[error("{0}")]
    Summary(flotilla_core::plan::RecordError),
}

/// Flux's (unfiltered) observation of `rls`, without an OCI digest.
pub fn observation_of(rls: &Release) -> Result<Observation, RecordError> {
    let version = u32::try_from(rls.version).map_err(|_| RecordError::InvalidVersion {
        name: rls.name.clone(),
        version: rls.version,
    })?;
    Ok(Observation {
        name: rls.name.clone(),
        version,
        info: rls.info.as_ref().map(info).unwrap_or_default(),
        chart_metadata: rls
            .chart
            .as_ref()
            .and_then(|c| c.metadata.as_ref())
            .map(chart_metadata)
            .unwrap_or_default(),
        config: Some(serde_json::Value::Object(rls.config.clone())),
        manifest: rls.manifest.clone(),
        hooks: Some(rls.hooks.iter().map(hook).collect()),
        namespace: rls.namespace.clone(),
        oci_digest: String::new(),
    })
}

/// A time as the record's JSON holds it: absent when zero.
fn time(t: &GoTime) -> Option<String> {
    (!t.is_zero()).then(|| t.to_rfc3339_nano())
}

fn info(i: &Info) -> obs::ReleaseInfo {
    obs::ReleaseInfo {
        first_deployed: time(&i.first_deployed),
        last_deployed: time(&i.last_deployed),
        deleted: time(&i.deleted),
        description: i.description.clone(),
        status: i
            .status
            .as_ref()
            .map(|s| s.as_str().to_owned())
            .unwrap_or_default(),
        notes: i.notes.clone(),
        resources: i.resources.clone().filter(|v| !v.is_null()),
    }
}

fn hook(h: &Hook) -> obs::Hook {
    let strings = |items: &mut dyn Iterator<Item = &str>| items.map(str::to_owned).collect();
    obs::Hook {
        name: h.name.clone(),
        kind: h.kind.clone(),
        path: h.path.clone(),
        manifest: h.manifest.clone(),
        events: strings(&mut h.events.iter().map(|e| e.as_str())),
        last_run: hook_execution(&h.last_run),
        weight: h.weight,
        delete_policies: strings(&mut h.delete_policies.iter().map(|p| p.as_str())),
        output_log_policies: strings(&mut h.output_log_policies.iter().map(|p| p.as_str())),
    }
}

fn hook_execution(e: &HookExecution) -> obs::HookExecution {
    obs::HookExecution {
        started_at: time(&e.started_at),
        completed_at: time(&e.completed_at),
        phase: e
            .phase
            .as_ref()
            .map(|p| p.as_str().to_owned())
            .unwrap_or_default(),
    }
}

fn chart_metadata(m: &Metadata) -> obs::ChartMetadata {
    obs::ChartMetadata {
        name: m.name.clone(),
        home: m.home.clone(),
        sources: m.sources.clone(),
        version: m.version.clone(),
        description: m.description.clone(),
        keywords: m.keywords.clone(),
        maintainers: m
            .maintainers
            .iter()
            .map(|x| obs::Maintainer {
                name: x.name.clone(),
                email: x.email.clone(),
                url: x.url.clone(),
            })
            .collect(),
        icon: m.icon.clone(),
        api_version: m.api_version.clone(),
        condition: m.condition.clone(),
        tags: m.tags.clone(),
        app_version: m.app_version.clone(),
        deprecated: m.deprecated,
        annotations: m.annotations.clone(),
        kube_version: m.kube_version.clone(),
        dependencies: m
            .dependencies
            .iter()
            .flatten()
            .map(|d| obs::Dependency {
                name: d.name.clone(),
                version: d.version.clone(),
                repository: d.repository.clone(),
                condition: d.condition.clone(),
                tags: d.tags.clone(),
                enabled: d.enabled,
                import_values: d.import_values.clone(),
                alias: d.alias.clone(),
            })
            .collect(),
        type_: m.chart_type.clone(),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use flotilla_chart::release::{
        HookDeletePolicy, HookEvent, HookOutputLogPolicy, HookPhase, RecordChart, Status,
    };
    use flotilla_chart::{Dependency, Maintainer};
    use serde_json::json;

    use super::*;

    /// The observation as the agent built it before [`observation_of`]: the record's JSON,
    /// decoded into the observation types.
    fn through_json(rls: &Release) -> Observation {
        let value = json!({
            "name": rls.name,
            "version": u32::try_from(rls.version).unwrap(),
            "namespace": rls.namespace,
            "info": rls.info.clone().unwrap_or_default(),
            "chartMetadata": rls.chart.as_ref().and_then(|c| c.metadata.clone()).unwrap_or_default(),
            "config": serde_json::Value::Object(rls.config.clone()),
            "manifest": rls.manifest,
            "hooks": rls.hooks,
        });
        serde_json::from_value(value).unwrap()
    }

    fn t(secs: i64, nanos: u32) -> GoTime {
        GoTime::from_unix(secs, nanos)
    }

    fn values(v: serde_json::Value) -> flotilla_chart::Values {
        match v {
            serde_json::Value::Object(m) => m,
            _ => unreachable!("an object"),
        }
    }

    fn releases() -> Vec<(&'static str, Release)> {
        // `Metadata` has a crate-private field: built by assignment.
        let mut full_metadata = Metadata::default();
        full_metadata.name = "podinfo".into();
        full_metadata.home = "https://example.com".into();
        full_metadata.sources = vec!["https://example.com/src".into()];
        full_metadata.version = "6.5.0".into();
        full_metadata.description = "A <small> \"web\" app & more".into();
        full_metadata.keywords = vec!["web".into(), "demo".into()];
        full_metadata.maintainers = vec![
            Maintainer {
                name: "Ann".into(),
                email: "ann@example.com".into(),
                url: String::new(),
            },
            Maintainer::default(),
        ];
        full_metadata.icon = "https://example.com/icon.png".into();
        full_metadata.api_version = "v2".into();
        full_metadata.condition = "podinfo.enabled".into();
        full_metadata.tags = "web".into();
        full_metadata.app_version = "6.5.0".into();
        full_metadata.deprecated = true;
        full_metadata.annotations = BTreeMap::from([("category".into(), "demo".into())]);
        full_metadata.kube_version = ">=1.25.0-0".into();
        full_metadata.dependencies = Some(vec![
            Dependency {
                name: "redis".into(),
                version: "~17".into(),
                repository: "oci://registry/charts".into(),
                condition: "redis.enabled".into(),
                tags: vec!["cache".into()],
                enabled: true,
                import_values: vec![json!("data"), json!({"child": "a", "parent": "b"})],
                alias: "cache".into(),
            },
            Dependency::default(),
        ]);
        full_metadata.chart_type = "application".into();
        let mut hello_metadata = Metadata::default();
        hello_metadata.name = "hello".into();
        hello_metadata.version = "0.1.0".into();
        hello_metadata.dependencies = Some(Vec::new());
        let hooks = vec![
            Hook {
                name: "podinfo-migrate".into(),
                kind: "Job".into(),
                path: "podinfo/templates/migrate.yaml".into(),
                manifest: "apiVersion: batch/v1\nkind: Job\n".into(),
                events: vec![HookEvent::PreInstall, HookEvent::PreUpgrade],
                last_run: HookExecution {
                    started_at: t(1_700_000_000, 123_456_789),
                    completed_at: t(1_700_000_060, 0),
                    phase: Some(HookPhase::Succeeded),
                },
                weight: -5,
                delete_policies: vec![
                    HookDeletePolicy::BeforeHookCreation,
                    HookDeletePolicy::HookSucceeded,
                ],
                output_log_policies: vec![HookOutputLogPolicy::OnFailed],
            },
            Hook {
                name: "podinfo-test".into(),
                kind: "Pod".into(),
                events: vec![HookEvent::Test],
                last_run: HookExecution {
                    started_at: t(1_700_000_100, 500),
                    completed_at: GoTime::ZERO,
                    phase: Some(HookPhase::Other("Custom".into())),
                },
                ..Hook::default()
            },
            Hook {
                name: "never-ran".into(),
                events: vec![HookEvent::PostDelete],
                ..Hook::default()
            },
        ];
        let full = Release {
            name: "podinfo".into(),
            info: Some(Info {
                first_deployed: t(1_600_000_000, 0),
                last_deployed: t(1_700_000_000, 10),
                deleted: GoTime::ZERO,
                description: "Upgrade complete".into(),
                status: Some(Status::Deployed),
                notes: "Visit <http://localhost>".into(),
                resources: Some(json!({"v1/Pod": [{"b": 1, "a": 2.5}]})),
            }),
            chart: Some(RecordChart {
                metadata: Some(full_metadata),
                ..RecordChart::default()
            }),
            config: values(json!({
                "replicaCount": 2.0,
                "image": {"tag": "6.5.0", "pullPolicy": null},
                "list": [1.5, "x", true, {"z": 1.0, "a": 0.1}],
                "empty": {},
            })),
            manifest: "---\napiVersion: v1\nkind: ConfigMap\n".into(),
            hooks,
            version: 7,
            namespace: "apps".into(),
            labels: BTreeMap::from([("team".into(), "payments".into())]),
            apply_method: "ssa".into(),
        };
        let bare = Release {
            name: "bare".into(),
            version: 1,
            ..Release::default()
        };
        let no_metadata = Release {
            name: "no-metadata".into(),
            version: 2,
            namespace: "default".into(),
            chart: Some(RecordChart::default()),
            info: Some(Info {
                status: Some(Status::Other("custom-status".into())),
                resources: Some(serde_json::Value::Null),
                deleted: t(1_700_000_000, 999_999_999),
                ..Info::default()
            }),
            ..Release::default()
        };
        let no_status = Release {
            name: "no-status".into(),
            version: 3,
            info: Some(Info {
                description: "Initial install underway".into(),
                ..Info::default()
            }),
            chart: Some(RecordChart {
                metadata: Some(hello_metadata),
                ..RecordChart::default()
            }),
            hooks: vec![Hook::default()],
            ..Release::default()
        };
        vec![
            ("full", full),
            ("bare", bare),
            ("no metadata", no_metadata),
            ("no status", no_status),
        ]
    }

    #[test]
    fn the_direct_observation_equals_the_json_one_and_so_do_their_digests() {
        for (what, rls) in releases() {
            let direct = observation_of(&rls).unwrap();
            let decoded = through_json(&rls);
            assert_eq!(direct, decoded, "{what}");
            assert_eq!(direct.digest(), decoded.digest(), "{what}");
            assert_eq!(
                direct.clone().observed().digest(),
                decoded.clone().observed().digest(),
                "{what}: the digest status.history carries"
            );
        }
    }

    #[test]
    fn a_revision_core_cannot_hold_is_an_error_naming_the_release() {
        for version in [-1, i64::from(u32::MAX) + 1] {
            let rls = Release {
                name: "web".into(),
                version,
                ..Release::default()
            };
            assert_eq!(
                observation_of(&rls).unwrap_err().to_string(),
                format!("release \"web\" has an invalid version {version}")
            );
        }
    }
}
