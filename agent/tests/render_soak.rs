//! The agent's render path holds nothing back: the same releases rendered a thousand times
//! in one process leave its resident memory flat. (The CLI's speed tricks, leaving
//! allocations to process exit and two-thread rendering with frozen maps, are process-wide
//! switches only `flotilla template` turns on; the agent never does.)

use std::path::Path;

use flotilla_agent::reconcile::render::{ChartRenderer, RenderOptions, Renderer as _};
use flotilla_chart::Values;

/// Resident set size of this process in KiB (`/proc/self/statm`).
fn rss_kib() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("procfs is mounted");
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("statm has a resident field");
    pages * 4
}

#[test]
fn rendering_the_same_releases_a_thousand_times_leaves_resident_memory_flat() {
    let charts = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/charts");
    let releases: Vec<(String, flotilla_chart::Chart, Values)> = ["podinfo-like", "ok", "drift"]
        .iter()
        .map(|name| {
            let chart = flotilla_chart::load(&charts.join(name)).expect("a test chart");
            let values: Values =
                serde_json::from_value(serde_json::json!({"replicaCount": 2})).expect("values");
            ((*name).to_owned(), chart, values)
        })
        .collect();
    let renderer = ChartRenderer::default();
    let render_all = |round: usize| {
        for (name, chart, values) in &releases {
            let options = RenderOptions {
                release_name: format!("{name}-{}", round % 7),
                namespace: "default".into(),
                revision: 1 + (round % 3) as i64,
                is_install: round.is_multiple_of(2),
                is_upgrade: !round.is_multiple_of(2),
                ..RenderOptions::default()
            };
            let rendered = renderer
                .render(chart, values, &options)
                .expect("the test charts render");
            assert!(!rendered.manifest.is_empty());
        }
    };
    // Warm up: first-use allocations (function maps, caches) are not growth.
    for round in 0..50 {
        render_all(round);
    }
    flotilla_agent::memory::release_free_memory();
    let before = rss_kib();
    for round in 0..1000 {
        render_all(round);
    }
    flotilla_agent::memory::release_free_memory();
    let after = rss_kib();
    let growth = after.saturating_sub(before);
    // 3,000 renders: a leak of even one parsed template set per render would be tens of MiB.
    assert!(
        growth < 4 * 1024,
        "resident memory grew by {growth} KiB over 3000 renders ({before} -> {after} KiB)"
    );
}
