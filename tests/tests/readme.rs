//! The README is for users: at most 500 lines, and every command in its shell blocks is one
//! that a test or `cargo xtask up` really runs (issue 35).
//!
//! Pure: no cluster. The commands are taken from the README's ```sh, ```bash, ```shell and
//! ```console blocks (in a console block only the `$ ` lines), split as a shell splits them
//! (quotes, `#` comments, `;`, `&&`, `||` and `|` between commands), and from its inline code
//! spans that start with one of the programs below (in every section before "Measurements",
//! and in "Development"). Each is checked against the string literals of the test sources
//! (`tests/tests`, `tests/src`, `hub/tests`, `agent/tests`, `cli/tests`) and of `up`
//! (`xtask/src/main.rs`'s `up`, `xtask/src/up_capi.rs`):
//!
//! - `flotilla ...` (in a shell block) must parse with the CLI's own clap definition; its
//!   subcommand path (`get hr`, `rollout status`; aliases resolved) must appear as consecutive
//!   literals in one source file, and each flag it uses as a literal somewhere;
//! - `kubectl ...` and `helm ...`: the verb and (kubectl) the resource kinds (`hr/NAME` is
//!   `helmrelease`), as literals of one source file, and each flag somewhere;
//! - `flotilla-agent ...` and `flotilla-hub ...`: the subcommand and each flag as literals;
//! - `cargo run -p flotilla-cli -- ARGS` is `flotilla ARGS` (and likewise for the agent);
//! - `cargo xtask TASK`: `up` with flags of its `UpArgs`, a task `.ci/run` runs, one `up`
//!   itself calls (`down`), or a step of `cargo xtask test` (`check-deps`); `cargo fmt`,
//!   `cargo clippy` and `cargo test` are what `cargo xtask test` runs.
//!
//! The "Measurements" section gives each benchmark's own command, run by whoever measures: its
//! `cargo xtask` spans are only checked to name a task that exists. "Design" names commands in
//! its reasons for a dependency and is not checked. Anything else is reported as a command this
//! test cannot vouch for.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use clap::{CommandFactory as _, Parser as _};
use flotilla_tests::cluster::workspace_root;

/// The README's length limit, in lines.
const MAX_LINES: usize = 500;

/// Where the tests and `up` live, relative to the workspace root.
const SOURCE_DIRS: &[&str] = &[
    "tests/tests",
    "tests/src",
    "hub/tests",
    "agent/tests",
    "cli/tests",
];

/// Flags of kubectl and helm that take a value as the next word.
const VALUE_FLAGS: &[&str] = &[
    "--kubeconfig",
    "-n",
    "--namespace",
    "--context",
    "-l",
    "--selector",
    "-o",
    "--output",
    "--type",
    "-p",
    "--patch",
    "-f",
    "--filename",
    "--for",
    "--timeout",
    "--set",
    "--values",
];

/// kubectl verbs whose next word names the resource kinds.
const KUBECTL_RESOURCE_VERBS: &[&str] = &[
    "get", "patch", "delete", "edit", "describe", "label", "annotate", "scale", "wait",
];

#[test]
fn the_readme_is_short_and_its_commands_are_exercised() {
    let root = workspace_root();
    let readme = read(&root.join("README.md"));
    let lines = readme.lines().count();
    assert!(
        lines <= MAX_LINES,
        "README.md has {lines} lines; a user's README keeps to {MAX_LINES} (issue 35): move the detail to a page under docs/"
    );
    let sources = Sources::load(&root);
    let mut commands = shell_commands(&readme);
    commands.extend(inline_commands(&readme));
    // The README's quick start, tour and CLI overview hold a few dozen commands; finding
    // none would mean the extraction broke, not that all is well.
    assert!(
        commands.len() >= 20,
        "found only {} commands in README.md: the extraction missed them",
        commands.len()
    );
    let failures: Vec<String> = commands
        .iter()
        .filter_map(|c| check(c, &sources).err())
        .collect();
    assert!(
        failures.is_empty(),
        "{} of the README's {} commands are not run by any test or by `cargo xtask up`:\n{}",
        failures.len(),
        commands.len(),
        failures.join("\n")
    );
}

/// The checker itself: commands no test runs, or that do not parse, are reported with the
/// README line they are on.
#[test]
fn commands_no_test_runs_are_reported_with_their_line() {
    let sources = Sources::load(&workspace_root());
    let text = "Intro.\n\n```sh\nflotilla get hr -A   # covered\n\nkubectl frobnicate widget\nflotilla get nonsense\n```\n\n```console\n$ flotilla get clusters\noutput, not a command\n$ frobnicate --all\n```\n\n```yaml\nkubectl frobnicate ignored\n```\n";
    let commands = shell_commands(text);
    let shown: Vec<(usize, String)> = commands
        .iter()
        .map(|c| (c.line, c.words.join(" ")))
        .collect();
    assert_eq!(
        shown,
        [
            (4, "flotilla get hr -A".to_owned()),
            (6, "kubectl frobnicate widget".to_owned()),
            (7, "flotilla get nonsense".to_owned()),
            (11, "flotilla get clusters".to_owned()),
            (13, "frobnicate --all".to_owned()),
        ]
    );
    let results: Vec<Result<(), String>> = commands.iter().map(|c| check(c, &sources)).collect();
    for covered in [&results[0], &results[3]] {
        if let Err(e) = covered {
            panic!("a covered command was reported: {e}");
        }
    }
    let kubectl = results[1].as_ref().unwrap_err();
    assert!(
        kubectl.starts_with("README.md line 6: `kubectl frobnicate widget`")
            && kubectl.contains("\"frobnicate\""),
        "{kubectl}"
    );
    let parse = results[2].as_ref().unwrap_err();
    assert!(
        parse.starts_with("README.md line 7: `flotilla get nonsense` does not parse"),
        "{parse}"
    );
    let unknown = results[4].as_ref().unwrap_err();
    assert!(
        unknown.starts_with("README.md line 13: `frobnicate --all`")
            && unknown.contains("no test or `up` runs the program"),
        "{unknown}"
    );
}

/// Inline spans: prose commands are checked without parsing, a benchmark's only for its task,
/// and "Design" not at all.
#[test]
fn inline_commands_are_checked_by_section() {
    let sources = Sources::load(&workspace_root());
    let text = "## Operating it\n\nWait with `kubectl wait --for=condition=ready hr/NAME`, or\n`kubectl\nfrobnicate hr`; `helm.flotilla.dev/v1` is no command.\n\n## Measurements\n\n`cargo xtask bench-rollout --clusters 1000` and `cargo xtask bench-nothing`, `hyperfine -N`.\n\n## Design\n\n| `flotilla completion bash\\|zsh` | clap |\n";
    let commands = inline_commands(text);
    let shown: Vec<(usize, &str, Place)> = commands
        .iter()
        .map(|c| (c.line, c.words[1].as_str(), c.place))
        .collect();
    assert_eq!(
        shown,
        [
            (3, "wait", Place::Inline),
            (4, "frobnicate", Place::Inline),
            (9, "xtask", Place::Benchmark),
            (9, "xtask", Place::Benchmark),
        ]
    );
    let results: Vec<Result<(), String>> = commands.iter().map(|c| check(c, &sources)).collect();
    if let Err(e) = &results[0] {
        panic!("`kubectl wait` on a HelmRelease is run by hub/tests/controller.rs: {e}");
    }
    let frobnicate = results[1].as_ref().unwrap_err();
    assert!(
        frobnicate.starts_with("README.md line 4: `kubectl frobnicate hr`"),
        "{frobnicate}"
    );
    if let Err(e) = &results[2] {
        panic!("bench-rollout is a task: {e}");
    }
    let nothing = results[3].as_ref().unwrap_err();
    assert!(
        nothing.contains("the xtask task `bench-nothing`"),
        "{nothing}"
    );
}

#[test]
fn shell_words_are_split_as_a_shell_splits_them() {
    assert_eq!(
        split_shell(r#"kubectl patch hr a -p '{"x": "y z"}' # comment"#),
        [vec!["kubectl", "patch", "hr", "a", "-p", r#"{"x": "y z"}"#]]
    );
    assert_eq!(
        split_shell(r#"a "b c" d\ e; f && g | h"#),
        [vec!["a", "b c", "d e"], vec!["f"], vec!["g"], vec!["h"]]
    );
    assert_eq!(
        string_literals(
            r##"f(&["get", "hr"]); // "not" this
            let r = r#"raw "one""#; let c = '"'; let l: &'static str = "x\"y"; /* "nor" */"##
        ),
        ["get", "hr", r#"raw "one""#, "x\"y"]
    );
}

/// One command of the README.
#[derive(Debug)]
struct ReadmeCommand {
    /// 1-based line in the README.
    line: usize,
    words: Vec<String>,
    /// Where it was found, which says how much is checked.
    place: Place,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// A shell block: a command to run, whole.
    Block,
    /// An inline code span of prose: a command named, checked but not parsed.
    Inline,
    /// An inline span of "Measurements": a benchmark's command.
    Benchmark,
}

/// The programs an inline code span is a command of.
const PROGRAMS: &[&str] = &[
    "flotilla",
    "flotilla-agent",
    "flotilla-hub",
    "kubectl",
    "helm",
    "cargo",
];

/// The commands of the inline code spans of `text` outside fenced blocks, in the sections
/// this test checks (see the module's comment).
fn inline_commands(text: &str) -> Vec<ReadmeCommand> {
    let mut commands = Vec::new();
    let mut section = String::new();
    let mut fenced = false;
    // The prose of the current paragraph with the line each character is on.
    let mut prose: Vec<(usize, char)> = Vec::new();
    let flush = |prose: &mut Vec<(usize, char)>, section: &str, out: &mut Vec<ReadmeCommand>| {
        let place = match section {
            "Measurements" => Place::Benchmark,
            "Design" => return prose.clear(),
            _ => Place::Inline,
        };
        let mut spans = Vec::new();
        let mut open: Option<(usize, String)> = None;
        for &(line, c) in prose.iter() {
            match (&mut open, c) {
                (None, '`') => open = Some((line, String::new())),
                (Some(_), '`') => spans.extend(open.take()),
                (Some((_, span)), c) => span.push(if c == '\n' { ' ' } else { c }),
                (None, _) => {}
            }
        }
        prose.clear();
        for (line, span) in spans {
            let span = span.trim();
            let Some((program, _)) = span.split_once(' ') else {
                continue;
            };
            if !PROGRAMS.contains(&program) {
                continue;
            }
            for words in split_shell(span) {
                out.push(ReadmeCommand { line, words, place });
            }
        }
    };
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") {
            fenced = !fenced;
            flush(&mut prose, &section, &mut commands);
            continue;
        }
        if fenced {
            continue;
        }
        if let Some(title) = trimmed.strip_prefix("## ") {
            flush(&mut prose, &section, &mut commands);
            section = title.trim().to_owned();
            continue;
        }
        if trimmed.is_empty() {
            flush(&mut prose, &section, &mut commands);
            continue;
        }
        prose.extend(line.chars().map(|c| (index + 1, c)));
        prose.push((index + 1, '\n'));
    }
    flush(&mut prose, &section, &mut commands);
    commands
}

/// The commands of every shell block of `text`.
fn shell_commands(text: &str) -> Vec<ReadmeCommand> {
    let mut commands = Vec::new();
    let mut block: Option<bool> = None; // Some(console?) inside a shell block
    let mut in_other_block = false;
    let mut pending: Option<(usize, String)> = None;
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let trimmed = raw.trim();
        if let Some(info) = trimmed.strip_prefix("```") {
            if block.is_some() || in_other_block {
                block = None;
                in_other_block = false;
            } else {
                match info.trim() {
                    "sh" | "bash" | "shell" => block = Some(false),
                    "console" => block = Some(true),
                    _ => in_other_block = true,
                }
            }
            continue;
        }
        let Some(console) = block else { continue };
        let text = match pending.take() {
            Some((start, mut joined)) => {
                joined.push(' ');
                joined.push_str(trimmed);
                (start, joined)
            }
            None => {
                let command = if console {
                    match trimmed.strip_prefix("$ ") {
                        Some(c) => c,
                        None => continue,
                    }
                } else {
                    trimmed
                };
                (line, command.to_owned())
            }
        };
        if let Some(head) = text.1.strip_suffix('\\') {
            pending = Some((text.0, head.trim_end().to_owned()));
            continue;
        }
        for words in split_shell(&text.1) {
            commands.push(ReadmeCommand {
                line: text.0,
                words,
                place: Place::Block,
            });
        }
    }
    commands
}

/// Splits a command line into commands of words: quotes, backslashes, `#` comments and the
/// separators `;`, `&&`, `||`, `|`. Leading `NAME=value` assignments are dropped.
fn split_shell(line: &str) -> Vec<Vec<String>> {
    let mut commands = vec![Vec::new()];
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    word.push(q);
                }
            }
            '"' => {
                in_word = true;
                while let Some(q) = chars.next() {
                    match q {
                        '"' => break,
                        '\\' => {
                            if let Some(e) = chars.next() {
                                word.push(e);
                            }
                        }
                        _ => word.push(q),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(e) = chars.next() {
                    word.push(e);
                }
            }
            '#' if !in_word => break,
            ' ' | '\t' | ';' | '|' | '&' => {
                if in_word {
                    commands
                        .last_mut()
                        .expect("one command")
                        .push(std::mem::take(&mut word));
                    in_word = false;
                }
                if c != ' ' && c != '\t' {
                    if (c == '|' || c == '&') && chars.peek() == Some(&c) {
                        chars.next();
                    }
                    commands.push(Vec::new());
                }
            }
            _ => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        commands.last_mut().expect("one command").push(word);
    }
    commands
        .into_iter()
        .map(|words| {
            words
                .into_iter()
                .skip_while(|w| {
                    w.split_once('=').is_some_and(|(name, _)| {
                        !name.is_empty()
                            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    })
                })
                .collect::<Vec<_>>()
        })
        .filter(|words| !words.is_empty())
        .collect()
}

/// The string literals of the tests and of `up`.
#[derive(Debug)]
struct Sources {
    /// Each file (relative path) with its literals in order.
    files: Vec<(String, Vec<String>)>,
    /// Every literal of every file.
    all: HashSet<String>,
    /// `.ci/run`, what CI runs.
    ci: String,
    /// The body of xtask's `fn up`.
    up_body: String,
    /// The fields of xtask's `UpArgs`.
    up_flags: Vec<String>,
    /// xtask/src/main.rs.
    xtask_main: String,
    /// The literals of what `cargo xtask test` runs: `fn test`, `fn fmt`, `fn clippy`.
    xtask_test: HashSet<String>,
    /// The CLI's clap definition.
    cli: clap::Command,
    /// Every `flotilla` subcommand path some source file passes as consecutive literals.
    cli_paths: HashSet<Vec<String>>,
}

impl Sources {
    fn load(root: &Path) -> Self {
        let mut paths = Vec::new();
        for dir in SOURCE_DIRS {
            rust_files(&root.join(dir), &mut paths);
        }
        paths.push(root.join("xtask/src/up_capi.rs"));
        let this = root.join("tests/tests/readme.rs");
        let main = read(&root.join("xtask/src/main.rs"));
        let up_body = item(&main, "fn up(");
        let up_args = item(&main, "struct UpArgs");
        let up_flags = up_args
            .lines()
            .filter_map(|l| {
                let l = l.trim();
                let (name, _) = l.split_once(':')?;
                (!l.starts_with("//") && !l.starts_with('#') && !name.contains(' '))
                    .then(|| format!("--{}", name.replace('_', "-")))
            })
            .collect();
        let mut files: Vec<(String, Vec<String>)> = paths
            .iter()
            .filter(|p| **p != this)
            .map(|p| {
                let name = p.strip_prefix(root).unwrap_or(p).display().to_string();
                (name, string_literals(&read(p)))
            })
            .collect();
        files.push((
            "xtask/src/main.rs (fn up)".to_owned(),
            string_literals(&up_body),
        ));
        let all = files.iter().flat_map(|(_, l)| l.iter().cloned()).collect();
        let xtask_test = ["fn test(", "fn fmt(", "fn clippy("]
            .iter()
            .flat_map(|f| string_literals(&item(&main, f)))
            .collect();
        let cli = flotilla_cli::Cli::command();
        let cli_paths = files
            .iter()
            .flat_map(|(_, literals)| {
                (0..literals.len()).map(|i| subcommand_path(&cli, &literals[i..]))
            })
            .filter(|path| !path.is_empty())
            .collect();
        Sources {
            files,
            all,
            cli,
            cli_paths,
            ci: read(&root.join(".ci/run")),
            up_body,
            up_flags,
            xtask_main: main,
            xtask_test,
        }
    }

    /// Whether some literal is `flag` or `flag=...`.
    fn has_flag(&self, flag: &str) -> bool {
        self.all.contains(flag)
            || self.all.iter().any(|l| {
                l.strip_prefix(flag)
                    .is_some_and(|rest| rest.starts_with('='))
            })
    }

    /// The first file holding every one of `words` as a literal.
    fn file_with_all(&self, words: &[String]) -> Option<&str> {
        self.files
            .iter()
            .find(|(_, literals)| words.iter().all(|w| literals.contains(w)))
            .map(|(name, _)| name.as_str())
    }
}

/// Checks one README command; the error is a sentence naming the line and the command.
fn check(command: &ReadmeCommand, sources: &Sources) -> Result<(), String> {
    let shown = command.words.join(" ");
    let fail = |why: String| format!("README.md line {}: `{shown}` {why}", command.line);
    let words = &command.words;
    if command.place == Place::Benchmark {
        // A benchmark's command: run by whoever measures; an xtask one must exist.
        if words[0] == "cargo" && words.get(1).map(String::as_str) == Some("xtask") {
            let task = words.get(2).map(String::as_str).unwrap_or_default();
            let variant: String = task
                .split('-')
                .map(|part| {
                    let mut chars = part.chars();
                    chars
                        .next()
                        .map(|first| first.to_uppercase().chain(chars).collect::<String>())
                        .unwrap_or_default()
                })
                .collect();
            if !sources.xtask_main.contains(&format!("Task::{variant}")) {
                return Err(fail(format!(
                    "names the xtask task `{task}`, which xtask/src/main.rs does not have"
                )));
            }
        }
        return Ok(());
    }
    match words[0].as_str() {
        "cargo" if words.get(1).map(String::as_str) == Some("xtask") => {
            check_xtask(&words[2..], sources).map_err(fail)
        }
        "cargo"
            if matches!(
                words.get(1).map(String::as_str),
                Some("fmt" | "clippy" | "test")
            ) =>
        {
            // What `cargo xtask test` runs (its `fn test`, `fn fmt`, `fn clippy`).
            let flags = words[2..]
                .iter()
                .filter(|w| w.starts_with('-') && *w != "--");
            match flags
                .chain(std::iter::once(&words[1]))
                .find(|w| !sources.xtask_test.contains(*w))
            {
                None => Ok(()),
                Some(missing) => Err(fail(format!(
                    "is not what `cargo xtask test` runs: its `fn test`, `fn fmt` and `fn clippy` pass no {missing:?}"
                ))),
            }
        }
        "cargo" if words.get(1).map(String::as_str) == Some("run") => {
            let package = words
                .windows(2)
                .find(|w| w[0] == "-p" || w[0] == "--package")
                .map(|w| w[1].as_str());
            let rest = words
                .iter()
                .position(|w| w == "--")
                .map(|i| &words[i + 1..]);
            let program = match package {
                Some("flotilla-cli") => "flotilla",
                Some("flotilla-agent") => "flotilla-agent",
                Some("flotilla-hub") => "flotilla-hub",
                _ => return Err(fail("runs a package this test does not know".to_owned())),
            };
            let mut as_program = vec![program.to_owned()];
            as_program.extend(rest.unwrap_or_default().iter().cloned());
            check(
                &ReadmeCommand {
                    line: command.line,
                    words: as_program,
                    place: command.place,
                },
                sources,
            )
        }
        "flotilla" => check_flotilla(words, command.place, sources).map_err(fail),
        "kubectl" | "helm" => check_reference_tool(words, sources).map_err(fail),
        "flotilla-agent" | "flotilla-hub" => {
            let needed: Vec<String> = words[1..]
                .iter()
                .take_while(|w| !w.starts_with('-'))
                .take(1)
                .cloned()
                .collect();
            if let Some(sub) = needed.first()
                && sources.file_with_all(&needed).is_none()
            {
                return Err(fail(format!(
                    "is not run by any test: no test source has the literal {sub:?}"
                )));
            }
            check_flags(words, sources).map_err(fail)
        }
        program => Err(fail(format!(
            "is a command no test or `up` runs the program of (`{program}`): show only flotilla, flotilla-agent, flotilla-hub, kubectl, helm and cargo xtask commands, or extend tests/tests/readme.rs"
        ))),
    }
}

fn check_xtask(args: &[String], sources: &Sources) -> Result<(), String> {
    let Some(task) = args.first() else {
        return Err("names no xtask task".to_owned());
    };
    if task == "up" {
        // The README's first command; its variants are the flags of `UpArgs`.
        for flag in args[1..].iter().filter(|a| a.starts_with('-')) {
            let name = flag.split('=').next().unwrap_or(flag);
            if !sources.up_flags.iter().any(|f| f == name) {
                return Err(format!(
                    "uses {name}, which is not a flag of `cargo xtask up` (its flags: {})",
                    sources.up_flags.join(", ")
                ));
            }
        }
        return Ok(());
    }
    if sources.ci.contains(&format!("cargo xtask {task}")) {
        return Ok(());
    }
    let function = task.replace('-', "_");
    if sources.up_body.contains(&format!("{function}(root")) || sources.xtask_test.contains(task) {
        return Ok(());
    }
    Err(format!(
        "is neither run by CI (.ci/run), by `cargo xtask up` nor by `cargo xtask test`: task `{task}`"
    ))
}

fn check_flotilla(words: &[String], place: Place, sources: &Sources) -> Result<(), String> {
    if place == Place::Block
        && let Err(e) = flotilla_cli::Cli::try_parse_from(words)
    {
        let message = e.to_string();
        let first = message.lines().next().unwrap_or_default().trim();
        return Err(format!("does not parse as a flotilla command: {first}"));
    }
    let path = subcommand_path(&sources.cli, &words[1..]);
    if path.is_empty() {
        return Err("names no flotilla subcommand".to_owned());
    }
    let covered = sources.cli_paths.contains(&path);
    if !covered {
        return Err(format!(
            "is not run by any test or by `up`: no source under {} or xtask's `up` passes the subcommand `{}` as consecutive literals",
            SOURCE_DIRS.join(", "),
            path.join(" ")
        ));
    }
    check_flags(words, sources)
}

/// The canonical subcommand names `words` start with, aliases resolved through the CLI's
/// clap definition; stops at the first word that is not a subcommand.
fn subcommand_path(cli: &clap::Command, words: &[String]) -> Vec<String> {
    let mut command = cli;
    let mut path = Vec::new();
    for word in words {
        let Some(sub) = command
            .get_subcommands()
            .find(|s| s.get_name() == word || s.get_all_aliases().any(|a| a == word))
        else {
            break;
        };
        path.push(sub.get_name().to_owned());
        command = sub;
    }
    path
}

fn check_reference_tool(words: &[String], sources: &Sources) -> Result<(), String> {
    let mut positional = Vec::new();
    let mut rest = words[1..].iter();
    while let Some(word) = rest.next() {
        if word.starts_with('-') {
            if !word.contains('=') && VALUE_FLAGS.contains(&word.as_str()) {
                rest.next();
            }
        } else {
            positional.push(word.clone());
        }
    }
    let Some(verb) = positional.first() else {
        return Err("names no subcommand".to_owned());
    };
    let mut needed = vec![verb.clone()];
    let mut kinds = Vec::new();
    if words[0] == "kubectl" && KUBECTL_RESOURCE_VERBS.contains(&verb.as_str()) {
        if let Some(resources) = positional.get(1) {
            let named = resources.split('/').next().unwrap_or(resources);
            kinds.extend(named.split(',').map(kind));
        }
    } else if words[0] == "helm" && verb == "get" {
        needed.extend(positional.get(1).cloned());
    }
    let covered = sources.files.iter().any(|(_, literals)| {
        needed.iter().all(|w| literals.contains(w))
            && kinds.iter().all(|k| {
                literals
                    .iter()
                    .any(|l| kind(l.split('/').next().unwrap_or(l)) == *k)
            })
    });
    if !covered {
        let quoted: Vec<String> = needed
            .iter()
            .chain(kinds.iter())
            .map(|w| format!("{w:?}"))
            .collect();
        return Err(format!(
            "is not run by any test or by `up`: no source under {} or xtask's `up` holds the literals {} together",
            SOURCE_DIRS.join(", "),
            quoted.join(", ")
        ));
    }
    check_flags(words, sources)
}

/// A resource kind as kubectl reads it, singular, short names expanded: `hr`, `helmreleases`
/// and `helmrelease` are one kind.
fn kind(name: &str) -> String {
    let name = name.to_ascii_lowercase();
    let long = match name.as_str() {
        "hr" => "helmrelease",
        "hrs" => "helmreleaseset",
        "hrp" => "helmreleasepreview",
        "mcl" => "managedcluster",
        "mcb" => "managedclusterbinding",
        "cm" => "configmap",
        "deploy" => "deployment",
        "ns" => "namespace",
        "sa" => "serviceaccount",
        other => other,
    };
    long.strip_suffix('s').unwrap_or(long).to_owned()
}

/// Every flag of the command appears as a literal in some test or in `up`.
fn check_flags(words: &[String], sources: &Sources) -> Result<(), String> {
    for word in words.iter().skip(1) {
        if !word.starts_with('-') || word == "-" || word == "--" {
            continue;
        }
        let flag = word.split('=').next().unwrap_or(word);
        if !sources.has_flag(flag) {
            return Err(format!(
                "uses the flag {flag}, which no test or `up` passes"
            ));
        }
    }
    Ok(())
}

/// The string literals of Rust source `text`, in order, escapes decoded; comments skipped.
fn string_literals(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '/' && chars.get(i + 1) == Some(&'/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && chars.get(i + 1) == Some(&'*') {
            i += 2;
            while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                i += 1;
            }
            i += 2;
        } else if c == '\'' {
            // A char literal ('x', '\n', '"') or a lifetime ('static).
            if chars.get(i + 1) == Some(&'\\') {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if chars.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
            }
        } else if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            let ident: String = chars[start..i].iter().collect();
            if (ident == "r" || ident == "br") && matches!(chars.get(i), Some('"') | Some('#')) {
                let mut hashes = 0;
                while chars.get(i) == Some(&'#') {
                    hashes += 1;
                    i += 1;
                }
                if chars.get(i) != Some(&'"') {
                    continue;
                }
                i += 1;
                let start = i;
                loop {
                    if i >= chars.len() {
                        break;
                    }
                    if chars[i] == '"' && (1..=hashes).all(|h| chars.get(i + h) == Some(&'#')) {
                        break;
                    }
                    i += 1;
                }
                out.push(chars[start..i.min(chars.len())].iter().collect());
                i += 1 + hashes;
            } else if ident == "b" && chars.get(i) == Some(&'"') {
                let (literal, next) = quoted(&chars, i);
                out.push(literal);
                i = next;
            }
        } else if c == '"' {
            let (literal, next) = quoted(&chars, i);
            out.push(literal);
            i = next;
        } else {
            i += 1;
        }
    }
    out
}

/// The `"..."` literal starting at `chars[start]`, decoded, and the index after it.
fn quoted(chars: &[char], start: usize) -> (String, usize) {
    let mut literal = String::new();
    let mut i = start + 1;
    while i < chars.len() {
        match chars[i] {
            '"' => return (literal, i + 1),
            '\\' => {
                i += 1;
                match chars.get(i) {
                    Some('n') => literal.push('\n'),
                    Some('t') => literal.push('\t'),
                    Some('\n') => {
                        // A line continuation: the next line's leading blanks are skipped.
                        while chars.get(i + 1).is_some_and(|c| c.is_whitespace()) {
                            i += 1;
                        }
                    }
                    Some(&e) => literal.push(e),
                    None => {}
                }
            }
            c => literal.push(c),
        }
        i += 1;
    }
    (literal, i)
}

/// The text of the item starting at `start` (e.g. `fn up(`) up to its closing brace at
/// column 0.
fn item(text: &str, start: &str) -> String {
    let at = text
        .find(start)
        .unwrap_or_else(|| panic!("xtask/src/main.rs has no `{start}`: the README check needs it"));
    let body = &text[at..];
    let end = body.find("\n}\n").map_or(body.len(), |e| e + 3);
    body[..end].to_owned()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let entries = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading the directory {}: {e}", dir.display()));
    for entry in entries {
        let path = entry
            .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
            .path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}
