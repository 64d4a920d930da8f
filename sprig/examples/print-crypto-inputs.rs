//! Prints fresh crypto material made by our Sprig functions, for
//! `tests/fixtures/crypto/values.yaml` (under `ours`): the differential test then checks that
//! the real helm accepts our certificates, keys and ciphertexts.
//!
//! Run: `cargo run -p flotilla-sprig --example print-crypto-inputs`

use flotilla_gotmpl::{ExecOptions, Map, TemplateSet, Value};

fn render_plain(text: &str) -> Result<String, String> {
    let funcs = flotilla_sprig::funcs();
    let mut set = TemplateSet::new("gotpl");
    set.parse("t", text, &funcs).map_err(|e| e.to_string())?;
    set.execute("t", &Value::Map(Map::new()), &funcs, &ExecOptions::helm())
        .map_err(|e| e.to_string())
}

fn main() {
    use base64::Engine;
    let out = render_plain(concat!(
        r#"{{ $ca := genCA "flotilla-ca" 36500 }}"#,
        r#"{{ $leaf := genSignedCert "leaf.flotilla" nil nil 36500 $ca }}"#,
        r#"{{ $ca.Cert }}@@{{ $ca.Key }}@@{{ $leaf.Cert }}@@{{ $leaf.Key }}@@"#,
        r#"{{ genPrivateKey "ecdsa" }}@@{{ genPrivateKey "ed25519" }}@@{{ genPrivateKey "rsa" }}@@"#,
        r#"{{ genPrivateKey "dsa" }}@@{{ encryptAES "pw" "hello world ✓" }}@@"#,
        r#"{{ encryptAES "a-password-longer-than-thirty-two-bytes" "exactly sixteen!" }}"#
    ))
    .expect("render");
    let parts: Vec<&str> = out.split("@@").collect();
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let json = serde_json::json!({
        "caCert64": b64(parts[0]), "caKey64": b64(parts[1]),
        "leafCert64": b64(parts[2]), "leafKey64": b64(parts[3]),
        "ecKey": parts[4], "edKey": parts[5], "rsaKey": parts[6], "dsaKey": parts[7],
        "cipher": parts[8], "cipherLongKey": parts[9],
    });
    println!("{}", serde_json::to_string_pretty(&json).expect("json"));
}
