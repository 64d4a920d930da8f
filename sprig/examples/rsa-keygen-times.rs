//! Times RSA key generation: ours (`genCA`'s and `genPrivateKey`'s) and, for comparison, the
//! `rsa` crate's `RsaPrivateKey::new` that it replaced. Key generation time is random, so it
//! prints the median, p90, mean and extremes over many keys.
//!
//! Run: `cargo run --release -p flotilla-sprig --example rsa-keygen-times -- [KEYS] [BITS] [--rsa-crate]`
//! (default 200 keys of 2048 bits; `--rsa-crate` also times the `rsa` crate).

use std::time::Instant;

fn summary(name: &str, bits: usize, mut ms: Vec<f64>) {
    ms.sort_by(f64::total_cmp);
    let n = ms.len();
    let mean = ms.iter().sum::<f64>() / n as f64;
    println!(
        "{name}: {n} keys of {bits} bits: median {:.1} ms, p90 {:.1} ms, mean {mean:.1} ms, min {:.1} ms, max {:.1} ms",
        ms[n / 2],
        ms[n * 9 / 10],
        ms[0],
        ms[n - 1]
    );
}

fn time_keys(keys: usize, mut generate: impl FnMut()) -> Vec<f64> {
    (0..keys)
        .map(|_| {
            let start = Instant::now();
            generate();
            start.elapsed().as_secs_f64() * 1000.0
        })
        .collect()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let numbers: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let keys = numbers.first().copied().unwrap_or(200).max(1);
    let bits = numbers.get(1).copied().unwrap_or(2048);
    let ours = time_keys(keys, || {
        if let Err(e) = flotilla_sprig::generate_rsa_private_key_pem(bits) {
            eprintln!("key generation failed: {e}");
            std::process::exit(1);
        }
    });
    summary("flotilla", bits, ours);
    if args.iter().any(|a| a == "--rsa-crate") {
        let theirs = time_keys(keys, || {
            if let Err(e) = rsa::RsaPrivateKey::new(&mut rand_core::OsRng, bits) {
                eprintln!("key generation failed: {e}");
                std::process::exit(1);
            }
        });
        summary("rsa crate", bits, theirs);
    }
}
