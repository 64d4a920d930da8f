//! Runs the chart corpus through the renderer and compares with helm's goldens.
//! Usage: `conformance [CORPUS_DIR]` (default `../shared/charts` beside the repository).
//! Prints one line per case and `N passed, M failed`; exits non-zero when any case failed.
//! Every case is rendered twice: with the templates executed one after the other, then on
//! two threads (`render_on_two_threads`, whatever the chart's size).

use flotilla_tests::conformance::{Outcome, cases, default_corpus, run_case};

fn main() -> anyhow::Result<()> {
    let corpus = std::env::args_os()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(default_corpus);
    let all = cases(&corpus)
        .map_err(|e| anyhow::anyhow!("reading the corpus at {}: {e}", corpus.display()))?;
    let (mut passed, mut failed) = (0usize, 0usize);
    for (threads, mode) in [(usize::MAX, ""), (2, " (two threads)")] {
        flotilla_chart::render::render_on_two_threads(threads);
        for case in &all {
            match run_case(case) {
                Outcome::Pass => {
                    passed += 1;
                    println!("ok   {}/{}{mode}", case.chart, case.stem);
                }
                Outcome::Fail(why) => {
                    failed += 1;
                    println!("FAIL {}/{}{mode}: {why}", case.chart, case.stem);
                }
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    if failed > 0 || passed == 0 {
        std::process::exit(1);
    }
    Ok(())
}
