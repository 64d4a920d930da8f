//! Starts one local cluster, prints its process ids (one `name pid` per line), its directory
//! (`dir PATH`), then `ready`,
//! and sleeps until killed. Used by the tests that check no process outlives its owner.

fn main() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new()?;
    let cluster = runtime.block_on(flotilla_tests::Cluster::start(
        flotilla_tests::ClusterOptions::named("probe"),
    ))?;
    for (name, pid) in cluster.pids() {
        println!("{name} {pid}");
    }
    println!("dir {}", cluster.dir().display());
    println!("ready");
    loop {
        std::thread::sleep(std::time::Duration::from_secs(60));
    }
}
