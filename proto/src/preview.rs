//! Conversions of the preview messages (`PreviewRequest` down, `PreviewResult` up) between
//! the wire and `flotilla_core::preview`, at the edge. What comes off the wire is checked
//! against the contract's bounds (`MAX_OBJECTS`, `MAX_VALUE_PATHS`, `MAX_DIFF_BYTES`, a
//! 32-byte key, an id of at most 64 characters) and refused naming the field.

use flotilla_core::diff::{Change, ObjectDiff, ObjectRef, PathChange};
use flotilla_core::plan::ReleasePlan;
use flotilla_core::preview::{
    ChartChange, ChartVersion, HookRef, MAX_DIFF_BYTES, MAX_ID_LEN, MAX_OBJECTS, MAX_VALUE_PATHS,
    PreviewError, PreviewReport, PreviewRequest, ReleaseDiff, ValueChange,
};

use crate::convert::InvalidMessage;
use crate::session::{key_ref, object_key};
use crate::v1::{self, preview_result};

/// Bytes of text a kind, name or path of a preview may have.
const MAX_NAME: usize = 1024;

fn id(field: &str, id: String) -> Result<String, InvalidMessage> {
    if id.is_empty() || id.chars().count() > MAX_ID_LEN {
        return Err(InvalidMessage::new(
            field,
            format!("must have 1 to {MAX_ID_LEN} characters"),
        ));
    }
    Ok(id)
}

impl From<PreviewRequest> for v1::PreviewRequest {
    fn from(r: PreviewRequest) -> Self {
        Self {
            id: r.id,
            plan: Some((*r.plan).into()),
            mask_key: r.mask_key.to_vec(),
        }
    }
}

impl TryFrom<v1::PreviewRequest> for PreviewRequest {
    type Error = InvalidMessage;

    fn try_from(r: v1::PreviewRequest) -> Result<Self, Self::Error> {
        let id = id("preview.id", r.id)?;
        let mask_key: [u8; 32] = r
            .mask_key
            .as_slice()
            .try_into()
            .map_err(|_| InvalidMessage::new("preview.maskKey", "must be 32 bytes"))?;
        let plan = ReleasePlan::try_from(
            r.plan
                .ok_or_else(|| InvalidMessage::missing("preview.plan"))?,
        )?;
        Ok(Self {
            id,
            plan: Box::new(plan),
            mask_key,
        })
    }
}

fn object_to(o: ObjectRef) -> v1::KubeObjectRef {
    v1::KubeObjectRef {
        api_version: o.api_version,
        kind: o.kind,
        namespace: o.namespace.unwrap_or_default(),
        name: o.name,
    }
}

fn object_from(field: &str, o: Option<v1::KubeObjectRef>) -> Result<ObjectRef, InvalidMessage> {
    let o = o.ok_or_else(|| InvalidMessage::missing(field))?;
    for (name, text) in [
        ("apiVersion", &o.api_version),
        ("kind", &o.kind),
        ("namespace", &o.namespace),
        ("name", &o.name),
    ] {
        if text.len() > MAX_NAME {
            return Err(InvalidMessage::new(
                format!("{field}.{name}"),
                format!("longer than {MAX_NAME} bytes"),
            ));
        }
    }
    if o.kind.is_empty() || o.name.is_empty() {
        return Err(InvalidMessage::new(field, "needs a kind and a name"));
    }
    Ok(ObjectRef {
        api_version: o.api_version,
        kind: o.kind,
        namespace: (!o.namespace.is_empty()).then_some(o.namespace),
        name: o.name,
    })
}

fn change_to(c: Change) -> v1::Change {
    match c {
        Change::Create => v1::Change::Create,
        Change::Update => v1::Change::Update,
        Change::Delete => v1::Change::Delete,
        Change::Unchanged => v1::Change::Unchanged,
    }
}

fn change_from(field: &str, c: i32) -> Result<Change, InvalidMessage> {
    match v1::Change::try_from(c) {
        Ok(v1::Change::Create) => Ok(Change::Create),
        Ok(v1::Change::Update) => Ok(Change::Update),
        Ok(v1::Change::Delete) => Ok(Change::Delete),
        Ok(v1::Change::Unchanged) => Ok(Change::Unchanged),
        _ => Err(InvalidMessage::new(field, format!("unknown change {c}"))),
    }
}

fn path_change_to(c: PathChange) -> v1::PathChange {
    match c {
        PathChange::Added => v1::PathChange::Added,
        PathChange::Removed => v1::PathChange::Removed,
        PathChange::Changed => v1::PathChange::Changed,
    }
}

fn path_change_from(field: &str, c: i32) -> Result<PathChange, InvalidMessage> {
    match v1::PathChange::try_from(c) {
        Ok(v1::PathChange::Added) => Ok(PathChange::Added),
        Ok(v1::PathChange::Removed) => Ok(PathChange::Removed),
        Ok(v1::PathChange::Changed) => Ok(PathChange::Changed),
        _ => Err(InvalidMessage::new(
            field,
            format!("unknown path change {c}"),
        )),
    }
}

fn hook_to(h: HookRef) -> v1::HookRef {
    v1::HookRef {
        object: Some(object_to(h.object)),
        events: h.events,
    }
}

fn hook_from(field: &str, h: v1::HookRef) -> Result<HookRef, InvalidMessage> {
    if h.events.len() > 16 || h.events.iter().any(|e| e.len() > MAX_NAME) {
        return Err(InvalidMessage::new(
            format!("{field}.events"),
            "more than 16 events or an event too long",
        ));
    }
    Ok(HookRef {
        object: object_from(&format!("{field}.object"), h.object)?,
        events: h.events,
    })
}

fn chart_to(c: ChartVersion) -> v1::ChartVersion {
    v1::ChartVersion {
        name: c.name,
        version: c.version,
    }
}

fn chart_from(c: v1::ChartVersion) -> ChartVersion {
    ChartVersion {
        name: c.name,
        version: c.version,
    }
}

impl From<ReleaseDiff> for v1::ReleaseDiff {
    fn from(d: ReleaseDiff) -> Self {
        Self {
            objects: d
                .objects
                .into_iter()
                .map(|o| v1::ObjectDiff {
                    object: Some(object_to(o.object)),
                    change: change_to(o.change).into(),
                    diff: o.diff,
                })
                .collect(),
            hooks: d.hooks.into_iter().map(hook_to).collect(),
            tests: d.tests.into_iter().map(hook_to).collect(),
            values: d
                .values
                .into_iter()
                .map(|v| v1::ValueChange {
                    path: v.path,
                    change: path_change_to(v.change).into(),
                })
                .collect(),
            chart_from: d.chart.from.map(chart_to),
            chart_to: Some(chart_to(d.chart.to)),
            truncated: d.truncated,
            digest: d.digest,
        }
    }
}

impl TryFrom<v1::ReleaseDiff> for ReleaseDiff {
    type Error = InvalidMessage;

    fn try_from(d: v1::ReleaseDiff) -> Result<Self, Self::Error> {
        if d.objects.len() + d.hooks.len() + d.tests.len() > MAX_OBJECTS {
            return Err(InvalidMessage::new(
                "preview.diff.objects",
                format!("more than {MAX_OBJECTS} objects and hooks"),
            ));
        }
        if d.values.len() > MAX_VALUE_PATHS {
            return Err(InvalidMessage::new(
                "preview.diff.values",
                format!("more than {MAX_VALUE_PATHS} paths"),
            ));
        }
        let text: usize = d.objects.iter().map(|o| o.diff.len()).sum();
        if text > MAX_DIFF_BYTES {
            return Err(InvalidMessage::new(
                "preview.diff.objects",
                format!("more than {MAX_DIFF_BYTES} bytes of diff text"),
            ));
        }
        let mut objects = Vec::with_capacity(d.objects.len());
        for (i, o) in d.objects.into_iter().enumerate() {
            let field = format!("preview.diff.objects[{i}]");
            objects.push(ObjectDiff {
                object: object_from(&format!("{field}.object"), o.object)?,
                change: change_from(&format!("{field}.change"), o.change)?,
                diff: o.diff,
            });
        }
        let hooks = d
            .hooks
            .into_iter()
            .enumerate()
            .map(|(i, h)| hook_from(&format!("preview.diff.hooks[{i}]"), h))
            .collect::<Result<_, _>>()?;
        let tests = d
            .tests
            .into_iter()
            .enumerate()
            .map(|(i, h)| hook_from(&format!("preview.diff.tests[{i}]"), h))
            .collect::<Result<_, _>>()?;
        let mut values = Vec::with_capacity(d.values.len());
        for (i, v) in d.values.into_iter().enumerate() {
            let field = format!("preview.diff.values[{i}]");
            if v.path.len() > MAX_NAME {
                return Err(InvalidMessage::new(
                    format!("{field}.path"),
                    format!("longer than {MAX_NAME} bytes"),
                ));
            }
            values.push(ValueChange {
                path: v.path,
                change: path_change_from(&format!("{field}.change"), v.change)?,
            });
        }
        Ok(Self {
            objects,
            hooks,
            tests,
            values,
            chart: ChartChange {
                from: d.chart_from.map(chart_from),
                to: chart_from(
                    d.chart_to
                        .ok_or_else(|| InvalidMessage::missing("preview.diff.chartTo"))?,
                ),
            },
            truncated: d.truncated,
            digest: d.digest,
        })
    }
}

impl From<PreviewReport> for v1::PreviewResult {
    fn from(r: PreviewReport) -> Self {
        let result = match r.result {
            Ok(diff) => preview_result::Result::Diff(diff.into()),
            Err(PreviewError::Unsupported(m)) => preview_result::Result::Unsupported(m),
            Err(PreviewError::Failed(m)) => preview_result::Result::Failed(m),
        };
        Self {
            id: r.id,
            object: Some(key_ref(&r.object)),
            result: Some(result),
        }
    }
}

/// Bytes of an error sentence kept from the wire.
const MAX_SENTENCE: usize = 4096;

fn sentence(mut m: String) -> String {
    if m.len() > MAX_SENTENCE {
        let mut cut = MAX_SENTENCE;
        while !m.is_char_boundary(cut) {
            cut -= 1;
        }
        m.truncate(cut);
        m.push('…');
    }
    m
}

impl TryFrom<v1::PreviewResult> for PreviewReport {
    type Error = InvalidMessage;

    fn try_from(r: v1::PreviewResult) -> Result<Self, Self::Error> {
        let result = match r
            .result
            .ok_or_else(|| InvalidMessage::missing("preview.result"))?
        {
            preview_result::Result::Diff(d) => Ok(ReleaseDiff::try_from(d)?),
            preview_result::Result::Unsupported(m) => Err(PreviewError::Unsupported(sentence(m))),
            preview_result::Result::Failed(m) => Err(PreviewError::Failed(sentence(m))),
        };
        Ok(Self {
            id: id("preview.id", r.id)?,
            object: object_key("preview.object", r.object)?,
            result,
        })
    }
}

#[cfg(test)]
mod tests {
    use flotilla_core::agent::ObjectKey;
    use flotilla_core::ids::{Namespace, ObjectName};

    use super::*;

    fn over_the_wire<M: prost::Message + Default>(m: M) -> M {
        M::decode(m.encode_to_vec().as_slice()).expect("decodes")
    }

    fn report(result: Result<ReleaseDiff, PreviewError>) -> PreviewReport {
        PreviewReport {
            id: "p-1".into(),
            object: ObjectKey {
                namespace: Namespace::new("apps").unwrap(),
                name: ObjectName::new("web").unwrap(),
            },
            result,
        }
    }

    fn diff() -> ReleaseDiff {
        let object = |kind: &str, ns: Option<&str>| ObjectRef {
            api_version: "v1".into(),
            kind: kind.into(),
            namespace: ns.map(str::to_owned),
            name: "web".into(),
        };
        ReleaseDiff::bounded(
            vec![
                ObjectDiff {
                    object: object("ConfigMap", Some("apps")),
                    change: Change::Update,
                    diff: "--- live\n+++ desired\n-a\n+b\n".into(),
                },
                ObjectDiff {
                    object: object("Namespace", None),
                    change: Change::Delete,
                    diff: String::new(),
                },
            ],
            vec![HookRef {
                object: object("Job", Some("apps")),
                events: vec!["pre-upgrade".into()],
            }],
            vec![HookRef {
                object: object("Pod", Some("apps")),
                events: vec!["test".into()],
            }],
            vec![ValueChange {
                path: "image.tag".into(),
                change: PathChange::Changed,
            }],
            ChartChange {
                from: Some(ChartVersion {
                    name: "web".into(),
                    version: "1.0.0".into(),
                }),
                to: ChartVersion {
                    name: "web".into(),
                    version: "1.1.0".into(),
                },
            },
        )
    }

    #[test]
    fn a_preview_result_survives_the_wire_field_for_field() {
        for result in [
            Ok(diff()),
            Ok(ReleaseDiff {
                chart: ChartChange::default(),
                ..ReleaseDiff::default()
            }),
            Err(PreviewError::Unsupported("no previews here.".into())),
            Err(PreviewError::Failed(
                "ConfigMap/apps/web: dry-run failed.".into(),
            )),
        ] {
            let r = report(result);
            let wire: v1::PreviewResult = r.clone().into();
            assert_eq!(PreviewReport::try_from(over_the_wire(wire)), Ok(r));
        }
    }

    #[test]
    fn bad_preview_results_are_refused_naming_the_field() {
        let good: v1::PreviewResult = report(Ok(diff())).into();
        let refused = |edit: &dyn Fn(&mut v1::PreviewResult)| {
            let mut m = good.clone();
            edit(&mut m);
            PreviewReport::try_from(m).expect_err("refused").field
        };
        fn d(m: &mut v1::PreviewResult) -> &mut v1::ReleaseDiff {
            match m.result.as_mut() {
                Some(preview_result::Result::Diff(d)) => d,
                _ => unreachable!("the result is a diff"),
            }
        }
        assert_eq!(refused(&|m| m.id = String::new()), "preview.id");
        assert_eq!(refused(&|m| m.id = "x".repeat(65)), "preview.id");
        assert_eq!(refused(&|m| m.result = None), "preview.result");
        assert_eq!(
            refused(&|m| d(m).objects[0].change = 9),
            "preview.diff.objects[0].change"
        );
        assert_eq!(
            refused(&|m| d(m).objects[1].object = None),
            "preview.diff.objects[1].object"
        );
        assert_eq!(
            refused(&|m| d(m).objects[0].diff = "x".repeat(MAX_DIFF_BYTES + 1)),
            "preview.diff.objects"
        );
        assert_eq!(refused(&|m| d(m).chart_to = None), "preview.diff.chartTo");
        assert_eq!(
            refused(&|m| d(m).values[0].path = "p".repeat(2000)),
            "preview.diff.values[0].path"
        );
    }

    #[test]
    fn a_request_needs_a_32_byte_key_and_a_plan() {
        let bad = v1::PreviewRequest {
            id: "p-1".into(),
            plan: None,
            mask_key: vec![1; 31],
        };
        assert_eq!(
            PreviewRequest::try_from(bad.clone()).unwrap_err().field,
            "preview.maskKey"
        );
        let no_plan = v1::PreviewRequest {
            mask_key: vec![1; 32],
            ..bad
        };
        assert_eq!(
            PreviewRequest::try_from(no_plan).unwrap_err().field,
            "preview.plan"
        );
    }
}
