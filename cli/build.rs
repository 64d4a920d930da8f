//! Links `flotilla` as a position-dependent executable. A PIE binary of this size starts
//! with ~47,000 dynamic relocations (vtables, tables of `&'static str` in the embedded time
//! zone and Unicode data) that the loader applies on every run, dirtying ~330 pages; linked
//! at a fixed address they are resolved once, at link time, which shortens every
//! `flotilla template` by that start-up work (measured with callgrind and page-fault counts,
//! see the README's measurements).
fn main() {
    let target = std::env::var("TARGET").unwrap_or_default();
    if target.contains("linux") {
        println!("cargo:rustc-link-arg-bins=-no-pie");
    }
}
