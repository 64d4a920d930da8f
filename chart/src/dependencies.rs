//! Helm's `ProcessDependencies` (`pkg/chart/v2/util/dependencies.go`, v4.1): enabling and
//! disabling subcharts (tags, then conditions), aliases, and `import-values`. It rewrites the
//! chart: disabled subcharts are dropped, aliased ones renamed, and the `values` of every
//! chart with dependencies become the merged defaults of its tree plus imports.

use serde_json::Value;

use crate::chart::Chart;
use crate::coalesce::{
    CoalesceError, Warning, Warnings, coalesce_tables, coalesce_values, coalesce_values_keeping,
    coalesce_values_with_defaults, merge_tables, merge_values_with_defaults,
};
use crate::metadata::Dependency;
use crate::semver::is_compatible_range;
use crate::values::{PathError, Values, path_value, table};

/// `ProcessDependencies(chart, vals)`: [`process_dependency_enabled`] then import-values
/// (merge mode). `vals` are the user-supplied values.
pub fn process_dependencies(
    chart: &mut Chart,
    vals: &Values,
    warnings: &mut Warnings,
) -> Result<(), CoalesceError> {
    process_dependency_enabled(chart, vals, "", warnings)?;
    process_dependency_import_values(chart, true, warnings)
}

fn find_alias_dependency(charts: &[Chart], dep: &Dependency) -> Option<usize> {
    charts.iter().position(|c| {
        c.name() == dep.name && is_compatible_range(&dep.version, &c.metadata.version)
    })
}

fn process_tags(reqs: &mut [Dependency], cvals: &Values, w: &mut Warnings) {
    let Ok(tags) = table(cvals, "tags") else {
        return;
    };
    for r in reqs {
        let (mut has_true, mut has_false) = (false, false);
        for k in &r.tags {
            if let Some(b) = tags.get(k) {
                match b {
                    Value::Bool(true) => has_true = true,
                    Value::Bool(false) => has_false = true,
                    _ => w.push(Warning::warn(
                        "returned non-bool value",
                        vec![("tag", k.clone()), ("chart", r.name.clone())],
                    )),
                }
            }
        }
        if !has_true && has_false {
            r.enabled = false;
        } else if has_true || !has_false {
            r.enabled = true;
        }
    }
}

fn process_conditions(reqs: &mut [Dependency], cvals: &Values, cpath: &str, w: &mut Warnings) {
    for r in reqs {
        for c in r.condition.trim().split(',') {
            if c.is_empty() {
                continue;
            }
            match path_value(cvals, &format!("{cpath}{c}")) {
                Ok(Value::Bool(b)) => {
                    r.enabled = *b;
                    break;
                }
                Ok(_) => w.push(Warning::warn(
                    "returned non-bool value",
                    vec![("path", c.to_owned()), ("chart", r.name.clone())],
                )),
                Err(PathError::NoValue(_)) => {}
                Err(e) => w.push(Warning::warn(
                    "the method PathValue returned error",
                    vec![("error", e.to_string())],
                )),
            }
        }
    }
}

/// `processDependencyEnabled(chart, vals, path)`: keeps the subcharts whose tags and
/// conditions (resolved against the coalesced values of the whole tree) enable them.
pub fn process_dependency_enabled(
    c: &mut Chart,
    v: &Values,
    path: &str,
    w: &mut Warnings,
) -> Result<(), CoalesceError> {
    let Some(mut reqs) = c.metadata.dependencies.take() else {
        return Ok(());
    };
    // Which loaded chart each requirement takes (the first of its name in a compatible
    // version); a chart no requirement takes is kept as it is. Charts are moved, and copied
    // only when several requirements (aliases) take the same one.
    let found: Vec<Option<usize>> = reqs
        .iter()
        .map(|req| find_alias_dependency(&c.dependencies, req))
        .collect();
    let mut uses = vec![0usize; c.dependencies.len()];
    for i in found.iter().flatten() {
        uses[*i] += 1;
    }
    let mut loaded: Vec<Option<Chart>> = std::mem::take(&mut c.dependencies)
        .into_iter()
        .map(Some)
        .collect();
    let mut chart_deps: Vec<Chart> = Vec::with_capacity(loaded.len());
    for (i, slot) in loaded.iter_mut().enumerate() {
        let taken = reqs.iter().any(|req| {
            slot.as_ref().is_some_and(|existing| {
                existing.name() == req.name
                    && is_compatible_range(&req.version, &existing.metadata.version)
            })
        });
        if !taken && uses[i] == 0 {
            chart_deps.extend(slot.take());
        }
    }
    for (req, i) in reqs.iter_mut().zip(found) {
        if let Some(i) = i {
            uses[i] -= 1;
            let cd = if uses[i] == 0 {
                loaded[i].take()
            } else {
                loaded[i].clone()
            };
            if let Some(mut cd) = cd {
                if !req.alias.is_empty() {
                    cd.metadata.name = req.alias.clone();
                }
                chart_deps.push(cd);
            }
        }
        if !req.alias.is_empty() {
            req.name = req.alias.clone();
        }
    }
    c.dependencies = chart_deps;
    for r in &mut reqs {
        r.enabled = true;
    }
    // The coalesced values serve the tags and conditions below and, when a subchart has
    // requirements of its own, that subchart's processing (which reads all of them). Without
    // such a subchart, only `tags`, the conditions' paths and what coalescing reads itself
    // (`global`, the subcharts' sections) are read: the other defaults are not copied.
    let cvals = if c
        .dependencies
        .iter()
        .any(|d| d.metadata.dependencies.is_some())
    {
        coalesce_values(c, v, w)?
    } else {
        let mut read: Vec<String> = vec!["tags".to_owned(), "global".to_owned()];
        read.extend(c.dependencies.iter().map(|d| d.name().to_owned()));
        // In a subchart's section: `global`, its own subcharts' sections, and the second keys
        // of the conditions that go through it.
        let mut read_sub: Vec<(String, String)> = Vec::new();
        for d in &c.dependencies {
            read_sub.push((d.name().to_owned(), "global".to_owned()));
            for dd in &d.dependencies {
                read_sub.push((d.name().to_owned(), dd.name().to_owned()));
            }
        }
        for r in &reqs {
            for cond in r.condition.trim().split(',').filter(|s| !s.is_empty()) {
                let full = format!("{path}{cond}");
                let mut keys = full.split('.');
                if let Some(first) = keys.next() {
                    read.push(first.to_owned());
                    if let Some(second) = keys.next() {
                        read_sub.push((first.to_owned(), second.to_owned()));
                    }
                }
            }
        }
        coalesce_values_keeping(
            c,
            v,
            &|k| read.iter().any(|r| r == k),
            &|s, k| read_sub.iter().any(|(rs, rk)| rs == s && rk == k),
            w,
        )?
    };
    process_tags(&mut reqs, &cvals, w);
    process_conditions(&mut reqs, &cvals, path, w);
    let rm: std::collections::BTreeSet<String> = reqs
        .iter()
        .filter(|r| !r.enabled)
        .map(|r| r.name.clone())
        .collect();
    let mut cd: Vec<Chart> = std::mem::take(&mut c.dependencies)
        .into_iter()
        .filter(|n| !rm.contains(n.name()))
        .collect();
    let cd_metadata: Vec<Dependency> = reqs.into_iter().filter(|n| !rm.contains(&n.name)).collect();
    for t in &mut cd {
        let subpath = format!("{path}{}.", t.name());
        process_dependency_enabled(t, &cvals, &subpath, w)?;
    }
    c.metadata.dependencies = if cd_metadata.is_empty() {
        None
    } else {
        Some(cd_metadata)
    };
    c.dependencies = cd;
    Ok(())
}

fn path_to_map(path: &str, data: Values) -> Values {
    if path == "." {
        return data;
    }
    let mut cur = data;
    for part in path.split('.').rev() {
        let mut m = Values::new();
        m.insert(part.to_owned(), Value::Object(cur));
        cur = m;
    }
    cur
}

fn import_field(v: Option<&Value>) -> String {
    match v {
        None => "<nil>".to_owned(),
        Some(v) => crate::gofmt::go_v(v),
    }
}

fn process_import_values(
    c: &mut Chart,
    merge: bool,
    w: &mut Warnings,
) -> Result<(), CoalesceError> {
    let Some(mut reqs) = c.metadata.dependencies.take() else {
        return Ok(());
    };
    // The chart's defaults are replaced by the result: they are moved into it, not copied.
    let defaults = c.values.take().unwrap_or_default();
    let result = (|| {
        let cvals = if merge {
            merge_values_with_defaults(c, defaults, &Values::new(), w)?
        } else {
            coalesce_values_with_defaults(c, defaults, &Values::new(), w)?
        };
        let mut b = Values::new();
        for r in &mut reqs {
            let mut outiv = Vec::new();
            for riv in &r.import_values {
                let (child, parent) = match riv {
                    Value::Object(iv) => (
                        import_field(iv.get("child")),
                        import_field(iv.get("parent")),
                    ),
                    Value::String(s) => (format!("exports.{s}"), ".".to_owned()),
                    _ => continue,
                };
                let mut out = serde_json::Map::new();
                out.insert("child".into(), Value::String(child.clone()));
                out.insert("parent".into(), Value::String(parent.clone()));
                outiv.push(Value::Object(out));
                let vv = match table(&cvals, &format!("{}.{child}", r.name)) {
                    Ok(t) => t.clone(),
                    Err(e) => {
                        let (msg, mut attrs) = if riv.is_string() {
                            ("ImportValues missing table", Vec::new())
                        } else {
                            (
                                "ImportValues missing table from chart",
                                vec![("chart", r.name.clone())],
                            )
                        };
                        attrs.push(("error", e.to_string()));
                        w.push(Warning::warn(msg, attrs));
                        continue;
                    }
                };
                let src = if riv.is_string() {
                    vv
                } else {
                    path_to_map(&parent, vv)
                };
                if merge {
                    merge_tables(&mut b, src, w);
                } else {
                    coalesce_tables(&mut b, src, w);
                }
            }
            r.import_values = outiv;
        }
        let mut vals = cvals;
        if merge {
            merge_tables(&mut vals, b, w);
        } else {
            vals = trim_nil_values(vals);
            coalesce_tables(&mut vals, b, w);
        }
        Ok(vals)
    })();
    c.metadata.dependencies = Some(reqs);
    c.values = Some(result?);
    Ok(())
}

fn trim_nil_values(vals: Values) -> Values {
    vals.into_iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| match v {
            Value::Object(m) => (k, Value::Object(trim_nil_values(m))),
            v => (k, v),
        })
        .collect()
}

/// `processDependencyImportValues`: bottom-up over the tree.
pub fn process_dependency_import_values(
    c: &mut Chart,
    merge: bool,
    w: &mut Warnings,
) -> Result<(), CoalesceError> {
    for d in &mut c.dependencies {
        process_dependency_import_values(d, merge, w)?;
    }
    process_import_values(c, merge, w)
}

/// A dependency declared in Chart.yaml that has no chart in `charts/`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "an error occurred while checking for chart dependencies. You may need to run `helm dependency build` to fetch missing dependencies: found in Chart.yaml, but missing in charts/ directory: {}",
    .0.join(", ")
)]
pub struct MissingDependencies(pub Vec<String>);

/// `action.CheckDependencies` as install/upgrade/template run it before processing: every
/// declared dependency must have a loaded chart of that name.
pub fn check_dependencies(chart: &Chart) -> Result<(), MissingDependencies> {
    let missing: Vec<String> = chart
        .metadata
        .dependencies
        .iter()
        .flatten()
        .filter(|r| !chart.dependencies.iter().any(|d| d.name() == r.name))
        .map(|r| r.name.clone())
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(MissingDependencies(missing))
    }
}

/// A chart that cannot be installed or rendered as the top-level chart.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("library charts are not installable")]
pub struct NotInstallable;

/// `IsChartInstallable`: library charts are refused (`helm install`/`template` of one).
pub fn check_installable(chart: &Chart) -> Result<(), NotInstallable> {
    if chart.is_library() {
        Err(NotInstallable)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::Metadata;

    #[test]
    fn library_charts_are_not_installable() {
        let mut c = Chart::new(Metadata {
            name: "l".into(),
            ..Metadata::default()
        });
        assert!(check_installable(&c).is_ok());
        c.metadata.chart_type = "library".into();
        assert_eq!(
            check_installable(&c).unwrap_err().to_string(),
            "library charts are not installable"
        );
    }

    #[test]
    fn missing_dependencies_are_reported_in_helms_words() {
        let mut c = Chart::new(Metadata {
            name: "p".into(),
            dependencies: Some(vec![
                Dependency {
                    name: "a".into(),
                    ..Dependency::default()
                },
                Dependency {
                    name: "b".into(),
                    ..Dependency::default()
                },
            ]),
            ..Metadata::default()
        });
        c.dependencies.push(Chart::new(Metadata {
            name: "a".into(),
            ..Metadata::default()
        }));
        assert_eq!(
            check_dependencies(&c).unwrap_err().to_string(),
            "an error occurred while checking for chart dependencies. You may need to run `helm dependency build` to fetch missing dependencies: found in Chart.yaml, but missing in charts/ directory: b"
        );
        c.metadata.dependencies.as_mut().unwrap().pop();
        assert!(check_dependencies(&c).is_ok());
    }
}
