//! Parses every template of some charts into one set per chart, as Helm does, and prints
//! how long it took: the workload for measuring the lexer and parser alone
//! (`valgrind --tool=callgrind`, then the inclusive count of `parse_all`).
//!
//! `cargo run --release -p flotilla-gotmpl --example parse-corpus -- [--reps N] CHART_DIR...`
//! (for instance `/work/shared/charts/grafana/chart`). Function names are registered as
//! they are met (a first, unmeasured pass), as functions that fail when called.

use std::path::{Path, PathBuf};
use std::time::Instant;

use flotilla_gotmpl::{
    ArgType, FuncError, FuncMap, Function, Signature, TemplateSet, sort_in_helm_parse_order,
};

fn files_under(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files_under(&path, out);
        } else {
            out.push(path);
        }
    }
}

fn unknown_function(err: &str) -> Option<String> {
    let rest = &err[err.find("function \"")? + "function \"".len()..];
    Some(rest[..rest.find('"')?].to_string())
}

/// The measured work: one set per chart, every template parsed in Helm's order.
#[inline(never)]
fn parse_all(charts: &[Vec<(String, String)>], funcs: &FuncMap) -> usize {
    let mut count = 0;
    for templates in charts {
        let mut set = TemplateSet::new("gotpl");
        for (name, text) in templates {
            if set.parse(name, text, funcs).is_ok() {
                count += 1;
            }
        }
        count += set.names().len();
        // Leave the set to the exit, as `flotilla template` does.
        std::mem::forget(set);
    }
    count
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut reps = 1;
    if args.first().map(String::as_str) == Some("--reps") && args.len() > 1 {
        reps = args[1].parse().unwrap_or(1);
        args.drain(..2);
    }
    let mut funcs = FuncMap::new();
    let mut charts = Vec::new();
    let mut bytes = 0;
    for dir in &args {
        let mut files = Vec::new();
        files_under(Path::new(dir), &mut files);
        files.retain(|p| p.components().any(|c| c.as_os_str() == "templates"));
        let mut templates: Vec<(String, String)> = files
            .iter()
            .filter_map(|f| {
                Some((
                    f.to_string_lossy().to_string(),
                    std::fs::read_to_string(f).ok()?,
                ))
            })
            .collect();
        let mut names: Vec<String> = templates.iter().map(|t| t.0.clone()).collect();
        sort_in_helm_parse_order(&mut names);
        templates.sort_by_key(|t| names.iter().position(|n| *n == t.0));
        let mut set = TemplateSet::new("gotpl");
        for (name, text) in &templates {
            bytes += text.len();
            while let Err(e) = set.parse(name, text, &funcs) {
                let Some(f) = unknown_function(&e.to_string()) else {
                    eprintln!("{e}");
                    break;
                };
                funcs.insert(
                    f,
                    Function::new(Signature::variadic([], ArgType::Any), |_| {
                        Err(FuncError::new("not available when only parsing"))
                    }),
                );
            }
        }
        charts.push(templates);
    }
    let start = Instant::now();
    let mut count = 0;
    for _ in 0..reps {
        count += parse_all(&charts, &funcs);
    }
    let per = start.elapsed() / reps;
    println!("{bytes} bytes of templates, {count} parses+templates, {per:?} per pass");
}
