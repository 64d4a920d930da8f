//! Parses every template of the shared chart corpus (`/work/shared/charts`, real public
//! charts) one chart at a time into one set, as Helm does. Parse-only: the Sprig and Helm
//! functions live in other crates, so every function name the parser asks for is registered
//! as a function that fails when called. Skipped when the corpus is not present.

use std::path::{Path, PathBuf};

use flotilla_gotmpl::{ArgType, FuncError, FuncMap, Function, Signature, TemplateSet};

const CORPUS: &str = "/work/shared/charts";

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

#[test]
fn every_corpus_template_parses() {
    let corpus = Path::new(CORPUS);
    if !corpus.is_dir() {
        eprintln!("corpus {CORPUS} not present; skipped");
        return;
    }
    let mut funcs = FuncMap::new();
    let mut parsed = 0;
    let mut failures = Vec::new();
    let Ok(charts) = std::fs::read_dir(corpus) else {
        return;
    };
    for chart in charts.flatten() {
        let mut files = Vec::new();
        files_under(&chart.path().join("chart"), &mut files);
        files.retain(|p| p.components().any(|c| c.as_os_str() == "templates"));
        files.sort();
        let mut set = TemplateSet::new("gotpl");
        for file in files {
            let Ok(text) = std::fs::read_to_string(&file) else {
                continue;
            };
            let name = file.to_string_lossy().to_string();
            loop {
                match set.parse(&name, &text, &funcs) {
                    Ok(()) => {
                        parsed += 1;
                        break;
                    }
                    Err(e) => match unknown_function(&e.to_string()) {
                        Some(f) => {
                            funcs.insert(
                                f,
                                Function::new(Signature::variadic([], ArgType::Any), |_| {
                                    Err(FuncError::new("not available in a parse-only test"))
                                }),
                            );
                        }
                        None => {
                            failures.push(e.to_string());
                            break;
                        }
                    },
                }
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
    assert!(parsed > 500, "only {parsed} templates found");
}
