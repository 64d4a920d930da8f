//! Sprig v3.3.0 as Helm exposes it (`sprig.TxtFuncMap()` minus `env` and `expandenv`), written
//! for `flotilla-gotmpl`'s function registry. Helm's own functions (`include`, `tpl`,
//! `toYaml`, `lookup`, ...) live in `flotilla-chart`.
//!
//! Start at [`funcs`]: it returns every Sprig function in a [`flotilla_gotmpl::FuncMap`].
//! Each module holds one family, as Sprig's documentation groups them.

pub mod cpu;
mod crypto;
mod dates;
mod general;
pub mod semver;

pub use general::regex::Pattern;

use flotilla_gotmpl::FuncMap;

/// Every Sprig function Helm exposes.
pub fn funcs() -> FuncMap {
    let mut map = FuncMap::new();
    general::register(&mut map);
    crypto::register(&mut map);
    dates::register(&mut map);
    semver::register(&mut map);
    map
}

/// Tells how to count the 2048-bit RSA keys (those `genCA`, `genSelfSignedCert` and
/// `genSignedCert` make) templates are expected to make. When the first is asked for, `count`
/// runs and a background thread starts finding the primes of all of them, so that the later
/// keys are partly made while the templates do other work; keys take those primes first.
/// Without a call, each key is made when asked for.
pub fn expect_rsa_keys(count: impl FnOnce() -> usize + Send + 'static) {
    crypto::expect_rsa_2048_keys(count);
}

/// One RSA private key of `bits` bits, made as `genPrivateKey` and `genCA` make theirs, as
/// PEM (`RSA PRIVATE KEY`); for timing key generation alone
/// (`cargo run --release -p flotilla-sprig --example rsa-keygen-times`).
pub fn generate_rsa_private_key_pem(bits: usize) -> Result<String, String> {
    crypto::generate_rsa_private_key_pem(bits)
}
