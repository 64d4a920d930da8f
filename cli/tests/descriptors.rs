//! `flotilla template` on a chart with more files than the process may have open at once:
//! the loader opens files in batches to start reading them together, and when descriptors
//! run out it reads what it has open and goes on, with the same output.

#![cfg(unix)]

use std::process::Command;

/// A chart with `n` templates, each a ConfigMap, in a fresh directory.
fn chart_with_templates(n: usize) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path();
    std::fs::write(
        root.join("Chart.yaml"),
        "apiVersion: v2\nname: many\nversion: 1.0.0\n",
    )
    .expect("Chart.yaml");
    std::fs::write(root.join("values.yaml"), "greeting: hello\n").expect("values.yaml");
    std::fs::create_dir(root.join("templates")).expect("templates/");
    for i in 0..n {
        std::fs::write(
            root.join(format!("templates/cm-{i:03}.yaml")),
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i:03}\ndata:\n  \
                 greeting: {{{{ .Values.greeting }}}}-{i}\n"
            ),
        )
        .expect("template");
    }
    dir
}

fn template(chart: &std::path::Path, max_open: Option<u32>) -> std::process::Output {
    let bin = env!("CARGO_BIN_EXE_flotilla");
    let mut cmd = Command::new("sh");
    let limit = max_open.map_or(String::new(), |n| format!("ulimit -n {n} && "));
    cmd.arg("-c")
        .arg(format!("{limit}exec \"$0\" template many \"$1\""))
        .arg(bin)
        .arg(chart);
    cmd.output().expect("sh runs")
}

#[test]
fn running_out_of_descriptors_while_reading_a_chart_changes_nothing() {
    // 50 templates: read on this thread; 80: on two (`flotilla template` reads 64 files or
    // more on two threads).
    for n in [50, 80] {
        let chart = chart_with_templates(n);
        let free = template(chart.path(), None);
        assert!(
            free.status.success(),
            "{n}: {}",
            String::from_utf8_lossy(&free.stderr)
        );
        let stdout = String::from_utf8_lossy(&free.stdout);
        assert_eq!(stdout.matches("kind: ConfigMap").count(), n, "{stdout}");
        assert!(
            stdout.contains(&format!("greeting: hello-{}", n - 1)),
            "{stdout}"
        );
        // 24 descriptors: the three standard ones, a few of the runtime's, ~15 for the chart.
        let limited = template(chart.path(), Some(24));
        assert!(
            limited.status.success(),
            "{n}: {}",
            String::from_utf8_lossy(&limited.stderr)
        );
        assert_eq!(limited.stdout, free.stdout, "{n}");
        assert_eq!(limited.stderr, free.stderr, "{n}");
    }
}
