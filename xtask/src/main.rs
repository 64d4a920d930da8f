//! `cargo xtask`: the one entry point for the project's chores.
fn main() -> anyhow::Result<()> {
    Ok(())
}
