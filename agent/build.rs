//! Links `flotilla-agent` as a position-dependent executable, as `cli/build.rs` does for
//! `flotilla`. Linked as PIE, the agent carries 1.4 MB of dynamic relocations (`.rela.dyn`)
//! that the loader reads and applies at start-up, which makes all 1.5 MB of `.data.rel.ro`
//! (vtables, tables of `&'static str`) dirty private pages for the process's whole life;
//! linked at a fixed address they are resolved at link time (`.rela.dyn` is 3.5 KB) and
//! only the pages used are read. `cargo xtask bench-agent` measured the agent binary's
//! resident pages at idle going from 17.2 to 13.9 MiB (see the README).
fn main() {
    let target = std::env::var("TARGET").unwrap_or_default();
    if target.contains("linux") {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}
