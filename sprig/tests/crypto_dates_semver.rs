//! Differential tests of the crypto, dates and semver families against goldens rendered by
//! the real helm binary (`tests/fixtures/regenerate-crypto-dates-semver.sh`), plus structural
//! checks of the nondeterministic functions (certificates, keys, bcrypt, AES, `now`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use flotilla_gotmpl::{ExecOptions, Map, MapType, TemplateSet, Value};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The cases of a family: `### name` lines followed by the template text.
fn cases(family: &str) -> Vec<(String, String)> {
    let text = read(&fixtures().join(family).join("cases.txt"));
    let mut out: Vec<(String, Vec<&str>)> = Vec::new();
    for line in text.split('\n') {
        if let Some(name) = line.strip_prefix("### ") {
            out.push((name.trim().to_string(), Vec::new()));
        } else if let Some((_, body)) = out.last_mut() {
            body.push(line);
        }
    }
    out.into_iter()
        .map(|(n, b)| {
            let mut t = b.join("\n");
            if t.ends_with('\n') {
                t.pop();
            }
            (n, t)
        })
        .collect()
}

/// `.` as Helm builds it: `.Values` (a `common.Values`) from the family's values file
/// (written as JSON, which is YAML).
fn root(family: &str) -> Value {
    let path = fixtures().join(family).join("values.yaml");
    let json: serde_json::Value = serde_json::from_str(&read(&path)).expect("values are JSON");
    let values = match Value::from_json(&json) {
        Value::Map(m) => Value::Map(m.with_type(MapType::Named(Arc::from("common.Values")))),
        other => other,
    };
    let root = Map::new().with_type(MapType::Named(Arc::from("common.Values")));
    root.insert("Values", values);
    Value::Map(root)
}

enum Outcome {
    Ok(String),
    Err(String),
    /// The template uses a function this crate does not (yet) provide.
    Missing(String),
}

fn render(family: &str, text: &str) -> Outcome {
    let funcs = funcs_with_shims();
    let mut set = TemplateSet::new("gotpl");
    let src = format!("{{{{ define \"case\" }}}}{text}{{{{ end }}}}");
    if let Err(e) = set.parse("fx/templates/_case.tpl", &src, &funcs) {
        let msg = e.to_string();
        if msg.contains("not defined") {
            return Outcome::Missing(msg);
        }
        return Outcome::Err(msg);
    }
    match set.execute("case", &root(family), &funcs, &ExecOptions::helm()) {
        Ok(out) => Outcome::Ok(out),
        Err(e) => Outcome::Err(e.to_string()),
    }
}

/// Sprig's functions, plus Sprig's trivial `list` when the general family does not provide it
/// yet (`func(v ...interface{}) []interface{}`), so certificate cases can build IP lists.
fn funcs_with_shims() -> flotilla_gotmpl::FuncMap {
    use flotilla_gotmpl::{ArgType, Function, Signature};
    let mut funcs = flotilla_sprig::funcs();
    if !funcs.contains("list") {
        funcs.insert(
            "list",
            Function::new(Signature::variadic([], ArgType::Any), |args| {
                Ok(Value::list(args.to_vec()))
            }),
        );
    }
    funcs
}

/// The innermost message of a helm error (either presentation).
fn helm_message(stderr: &str) -> String {
    let text = stderr.strip_prefix("Error: ").unwrap_or(stderr);
    let text = text
        .split("\n\nUse --debug")
        .next()
        .unwrap_or(text)
        .trim_end_matches('\n');
    if text.contains('\n') {
        return text.lines().last().unwrap_or("").trim_start().to_string();
    }
    let inner = text
        .rsplit("executing \"case\" at <")
        .next()
        .unwrap_or(text);
    match inner.find(">: ") {
        Some(i) => inner[i + 3..].to_string(),
        None => inner.to_string(),
    }
}

fn run_family(family: &str) {
    let golden: BTreeMap<String, serde_json::Value> =
        serde_json::from_str(&read(&fixtures().join(family).join("golden.json")))
            .expect("golden.json");
    let (mut passed, mut missing) = (0, Vec::new());
    let mut failures = Vec::new();
    for (name, text) in cases(family) {
        let want = golden
            .get(&name)
            .unwrap_or_else(|| panic!("{family}/{name}: no golden (run the regenerate script)"));
        let got = render(family, &text);
        match (want.get("ok").and_then(|v| v.as_str()), got) {
            (_, Outcome::Missing(msg)) => missing.push(format!("{name}: {msg}")),
            (Some(w), Outcome::Ok(g)) if g == w => passed += 1,
            (Some(w), Outcome::Ok(g)) => failures.push(format!("{name}: want {w:?}\n  got  {g:?}")),
            (Some(w), Outcome::Err(e)) => failures.push(format!("{name}: want {w:?}\n  error {e}")),
            (None, got) => {
                let msg = helm_message(want.get("err").and_then(|v| v.as_str()).unwrap_or(""));
                match got {
                    Outcome::Err(e) if e.ends_with(&msg) => passed += 1,
                    Outcome::Err(e) => {
                        failures.push(format!("{name}: want error …{msg}\n  got   {e}"))
                    }
                    Outcome::Ok(g) => {
                        failures.push(format!("{name}: want error {msg}\n  got {g:?}"))
                    }
                    Outcome::Missing(_) => {}
                }
            }
        }
    }
    eprintln!(
        "{family}: {passed} passed, {} failed, {} need functions of other families",
        failures.len(),
        missing.len()
    );
    for m in &missing {
        eprintln!("  missing: {m}");
    }
    assert!(failures.is_empty(), "{family}:\n{}", failures.join("\n"));
}

#[test]
fn semver_matches_helm() {
    run_family("semver");
}

#[test]
fn semver_fuzz_matches_helm() {
    run_family("semver-fuzz");
}

#[test]
fn semver_edge_cases_match_helm() {
    run_family("semver-edge");
}

#[test]
fn dates_match_helm() {
    run_family("dates");
}

#[test]
fn dates_fuzz_matches_helm() {
    run_family("dates-fuzz");
}

#[test]
fn crypto_matches_helm() {
    run_family("crypto");
}

/// Renders `text` with the Sprig functions and empty values.
fn render_plain(text: &str) -> Result<String, String> {
    let funcs = flotilla_sprig::funcs();
    let mut set = TemplateSet::new("gotpl");
    set.parse("t", text, &funcs).map_err(|e| e.to_string())?;
    set.execute("t", &Value::Map(Map::new()), &funcs, &ExecOptions::helm())
        .map_err(|e| e.to_string())
}

mod structure {
    //! Nondeterministic outputs: parsed and checked for the properties Sprig guarantees.

    use base64::Engine;
    use rsa::pkcs1::DecodeRsaPublicKey;
    use rsa::signature::Verifier;
    use x509_parser::extensions::{GeneralName, ParsedExtension};
    use x509_parser::prelude::*;

    use super::render_plain;

    fn pem_der(pem: &str, label: &str) -> Vec<u8> {
        let begin = format!("-----BEGIN {label}-----\n");
        let end = format!("-----END {label}-----\n");
        assert!(pem.starts_with(&begin), "{pem}");
        assert!(pem.ends_with(&end), "{pem}");
        let body = &pem[begin.len()..pem.len() - end.len()];
        for line in body.lines() {
            assert!(line.len() <= 64);
        }
        base64::engine::general_purpose::STANDARD
            .decode(body.replace('\n', ""))
            .expect("base64 body")
    }

    struct Parsed {
        der: Vec<u8>,
    }

    impl Parsed {
        fn cert(&self) -> X509Certificate<'_> {
            X509Certificate::from_der(&self.der).expect("certificate").1
        }
    }

    fn render_cert(text: &str) -> (Parsed, String) {
        let out = super::render_with_shims(text).expect("render");
        let (cert, key) = out.split_once("@@").expect("separator");
        (
            Parsed {
                der: pem_der(cert, "CERTIFICATE"),
            },
            key.to_string(),
        )
    }

    fn verify_rsa(cert: &X509Certificate<'_>, issuer: &X509Certificate<'_>) {
        let key = rsa::RsaPublicKey::from_pkcs1_der(&issuer.public_key().subject_public_key.data)
            .expect("issuer RSA key");
        let vk = rsa::pkcs1v15::VerifyingKey::<sha2::Sha256>::new(key);
        let sig = rsa::pkcs1v15::Signature::try_from(cert.signature_value.data.as_ref())
            .expect("signature");
        vk.verify(cert.tbs_certificate.as_ref(), &sig)
            .expect("signature verifies");
    }

    fn cn(cert: &X509Certificate<'_>) -> Vec<String> {
        cert.subject()
            .iter_common_name()
            .map(|a| a.as_str().expect("cn").to_string())
            .collect()
    }

    fn validity_days(cert: &X509Certificate<'_>) -> i64 {
        let v = cert.validity();
        (v.not_after.timestamp() - v.not_before.timestamp()) / 86_400
    }

    #[test]
    fn gen_ca_is_a_self_signed_rsa_2048_ca() {
        let (p, key) = render_cert(r#"{{ $c := genCA "my-ca" 365 }}{{ $c.Cert }}@@{{ $c.Key }}"#);
        let c = p.cert();
        assert_eq!(c.version(), X509Version::V3);
        assert_eq!(cn(&c), ["my-ca"]);
        assert_eq!(c.subject().as_raw(), c.issuer().as_raw());
        assert_eq!(validity_days(&c), 365);
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock")
            .as_secs() as i64;
        assert!((c.validity().not_before.timestamp() - now).abs() < 60);
        assert!(c.is_ca());
        let serial = c.tbs_certificate.raw_serial();
        assert!(serial.len() <= 17 && (serial.len() < 17 || serial[0] == 0));
        let ku = c.key_usage().expect("ku").expect("key usage");
        assert!(ku.critical);
        assert!(ku.value.digital_signature() && ku.value.key_encipherment());
        assert!(ku.value.key_cert_sign());
        let eku = c.extended_key_usage().expect("eku").expect("eku");
        assert!(eku.value.server_auth && eku.value.client_auth);
        let bc = c.basic_constraints().expect("bc").expect("bc");
        assert!(bc.critical && bc.value.ca && bc.value.path_len_constraint.is_none());
        let ski = c
            .extensions()
            .iter()
            .find_map(|e| match e.parsed_extension() {
                ParsedExtension::SubjectKeyIdentifier(k) => Some(k.0.to_vec()),
                _ => None,
            })
            .expect("subject key id");
        use sha2::Digest;
        let bits = &c.public_key().subject_public_key.data;
        assert_eq!(ski, sha2::Sha256::digest(bits.as_ref())[..20].to_vec());
        assert_eq!(c.public_key().parsed().expect("key").key_size(), 2048);
        verify_rsa(&c, &c);
        pem_der(&key, "RSA PRIVATE KEY");
    }

    #[test]
    fn signed_cert_chains_to_its_ca() {
        let text = concat!(
            r#"{{ $ca := genCA "the-ca" 10 }}{{ $ca.Cert }}@@"#,
            r#"{{ $c := genSignedCert "svc.example" (list "10.0.0.1" "::1" "::ffff:1.2.3.4") (list "a.example" "b.example") 30 $ca }}"#,
            r#"{{ $c.Cert }}@@{{ $c.Key }}"#
        );
        let out = super::render_with_shims(text).expect("render");
        let parts: Vec<&str> = out.split("@@").collect();
        let ca_der = pem_der(parts[0], "CERTIFICATE");
        let leaf_der = pem_der(parts[1], "CERTIFICATE");
        let (_, ca) = X509Certificate::from_der(&ca_der).expect("ca");
        let (_, leaf) = X509Certificate::from_der(&leaf_der).expect("leaf");
        assert_eq!(cn(&leaf), ["svc.example"]);
        assert_eq!(leaf.issuer().as_raw(), ca.subject().as_raw());
        assert!(!leaf.is_ca());
        let bc = leaf.basic_constraints().expect("bc").expect("bc");
        assert!(bc.critical && !bc.value.ca);
        assert!(
            !leaf
                .key_usage()
                .expect("ku")
                .expect("ku")
                .value
                .key_cert_sign()
        );
        assert_eq!(validity_days(&leaf), 30);
        let san = leaf.subject_alternative_name().expect("san").expect("san");
        assert!(!san.critical);
        let names: Vec<String> = san
            .value
            .general_names
            .iter()
            .map(|n| match n {
                GeneralName::DNSName(d) => format!("dns:{d}"),
                GeneralName::IPAddress(ip) => format!("ip:{ip:?}"),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(
            names,
            [
                "dns:a.example",
                "dns:b.example",
                "ip:[10, 0, 0, 1]",
                "ip:[0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]",
                "ip:[1, 2, 3, 4]"
            ]
        );
        let aki = leaf
            .extensions()
            .iter()
            .find_map(|e| match e.parsed_extension() {
                ParsedExtension::AuthorityKeyIdentifier(a) => {
                    a.key_identifier.as_ref().map(|k| k.0.to_vec())
                }
                _ => None,
            })
            .expect("authority key id");
        let ski = ca
            .extensions()
            .iter()
            .find_map(|e| match e.parsed_extension() {
                ParsedExtension::SubjectKeyIdentifier(k) => Some(k.0.to_vec()),
                _ => None,
            })
            .expect("ski");
        assert_eq!(aki, ski);
        verify_rsa(&leaf, &ca);
        pem_der(parts[2], "RSA PRIVATE KEY");
    }

    #[test]
    fn self_signed_with_empty_subject_marks_san_critical() {
        let (p, _) = render_cert(
            r#"{{ $c := genSelfSignedCert "" nil (list "x.example") 36500 }}{{ $c.Cert }}@@{{ $c.Key }}"#,
        );
        let c = p.cert();
        assert!(cn(&c).is_empty());
        let san = c.subject_alternative_name().expect("san").expect("san");
        assert!(san.critical);
        // 100 years: NotAfter is past 2049, a GeneralizedTime.
        assert_eq!(validity_days(&c), 36500);
        verify_rsa(&c, &c);
    }

    #[test]
    fn with_key_variants_keep_the_given_key() {
        for typ in ["ecdsa", "ed25519"] {
            let text = format!(
                r#"{{{{ $k := genPrivateKey "{typ}" }}}}{{{{ $c := genSelfSignedCertWithKey "k" nil nil 3 $k }}}}{{{{ $c.Cert }}}}@@{{{{ eq $c.Key $k }}}}"#
            );
            let (p, same) = render_cert(&text);
            assert_eq!(same, "true");
            let c = p.cert();
            assert_eq!(cn(&c), ["k"]);
            let key = &c.public_key().subject_public_key.data;
            let sig = c.signature_value.data.as_ref();
            let tbs = c.tbs_certificate.as_ref();
            if typ == "ecdsa" {
                let vk = p256::ecdsa::VerifyingKey::from_sec1_bytes(key).expect("p256 key");
                let sig = p256::ecdsa::Signature::from_der(sig).expect("der signature");
                vk.verify(tbs, &sig).expect("ecdsa signature verifies");
            } else {
                let bytes: [u8; 32] = key.as_ref().try_into().expect("32 bytes");
                let vk = ed25519_dalek::VerifyingKey::from_bytes(&bytes).expect("ed25519 key");
                let sig = ed25519_dalek::Signature::from_slice(sig).expect("signature");
                vk.verify(tbs, &sig).expect("ed25519 signature verifies");
            }
        }
    }

    #[test]
    fn private_keys_have_go_formats() {
        let ec = render_plain(r#"{{ genPrivateKey "ecdsa" }}"#).expect("ec");
        let der = pem_der(&ec, "EC PRIVATE KEY");
        assert_eq!(der.len(), 121);
        assert_eq!(&der[..7], &[0x30, 0x77, 0x02, 0x01, 0x01, 0x04, 0x20]);
        let ed = render_plain(r#"{{ genPrivateKey "ed25519" }}"#).expect("ed");
        let der = pem_der(&ed, "PRIVATE KEY");
        assert_eq!(der.len(), 48);
        assert_eq!(
            &der[..16],
            &[
                0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22,
                0x04, 0x20
            ]
        );
    }

    #[test]
    fn bcrypt_hashes_verify() {
        let out = render_plain(r#"{{ htpasswd "admin" "s3cret" }}|{{ bcrypt "other" }}"#)
            .expect("render");
        let (h, b) = out.split_once('|').expect("sep");
        let hash = h.strip_prefix("admin:").expect("user");
        assert!(hash.starts_with("$2a$10$") && hash.len() == 60);
        assert!(bcrypt::verify("s3cret", hash).expect("verify"));
        assert!(bcrypt::verify("other", b).expect("verify"));
    }

    #[test]
    fn aes_round_trips_and_rand_bytes_decode() {
        let out = render_plain(
            r#"{{ encryptAES "key" "some text ✓" | decryptAES "key" }}|{{ randBytes 33 }}"#,
        )
        .expect("render");
        let (plain, rand) = out.split_once('|').expect("sep");
        assert_eq!(plain, "some text ✓");
        assert_eq!(
            base64::engine::general_purpose::STANDARD
                .decode(rand)
                .expect("b64")
                .len(),
            33
        );
    }

    #[test]
    fn now_prints_like_go_with_a_monotonic_reading() {
        let out = render_plain(r#"{{ now }}|{{ now | date "2006" }}|{{ dateModify "1h" now }}"#)
            .expect("render");
        let parts: Vec<&str> = out.split('|').collect();
        let re = regex::Regex::new(
            r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(\.\d+)? [+-]\d{4} \S+ m=\+\d+\.\d{9}$",
        )
        .expect("regex");
        assert!(re.is_match(parts[0]), "{}", parts[0]);
        assert!(re.is_match(parts[2]), "{}", parts[2]);
        assert_eq!(parts[1].len(), 4);
    }

    /// The keys and certificates of `genCA` and `genSignedCert` pass OpenSSL's own checks
    /// (`openssl rsa -check` tests both primes and the CRT values; `openssl verify` the chain)
    /// when the `openssl` command is installed; otherwise the key's components are checked
    /// with the `rsa` crate.
    #[test]
    fn generated_rsa_keys_and_certificates_pass_openssl_checks() {
        use rsa::pkcs1::DecodeRsaPrivateKey;
        use rsa::traits::PublicKeyParts;

        let text = concat!(
            r#"{{ $ca := genCA "the-ca" 10 }}{{ $ca.Cert }}@@{{ $ca.Key }}@@"#,
            r#"{{ $c := genSignedCert "svc.example" nil (list "svc.example") 30 $ca }}"#,
            r#"{{ $c.Cert }}@@{{ $c.Key }}"#
        );
        let out = super::render_with_shims(text).expect("render");
        let parts: Vec<&str> = out.split("@@").collect();
        let [ca_cert, ca_key, leaf_cert, leaf_key] = parts[..] else {
            panic!("four PEM blocks expected: {out}");
        };
        for key in [ca_key, leaf_key] {
            let der = pem_der(key, "RSA PRIVATE KEY");
            let key = rsa::RsaPrivateKey::from_pkcs1_der(&der).expect("PKCS#1 key");
            assert_eq!(key.n().bits(), 2048);
            key.validate().expect("consistent key");
        }
        let openssl_present = std::process::Command::new("openssl")
            .arg("version")
            .output()
            .is_ok_and(|o| o.status.success());
        if !openssl_present {
            eprintln!("openssl not installed: checked with the rsa crate only");
            return;
        }
        let dir = std::env::temp_dir().join(format!(
            "flotilla-sprig-openssl-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .expect("clock")
                .as_nanos()
        ));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let files = [
            ("ca.crt", ca_cert),
            ("ca.key", ca_key),
            ("leaf.crt", leaf_cert),
            ("leaf.key", leaf_key),
        ];
        for (name, body) in files {
            std::fs::write(dir.join(name), body).expect("write PEM");
        }
        let openssl = |args: &[&str]| -> String {
            let out = std::process::Command::new("openssl")
                .args(args)
                .current_dir(&dir)
                .output()
                .expect("run openssl");
            let text = String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "openssl {args:?}: {text}");
            text
        };
        for key in ["ca.key", "leaf.key"] {
            let text = openssl(&["rsa", "-check", "-noout", "-in", key]);
            assert!(text.contains("RSA key ok"), "{key}: {text}");
        }
        let text = openssl(&["x509", "-noout", "-text", "-in", "ca.crt"]);
        assert!(text.contains("Public-Key: (2048 bit)"), "{text}");
        assert!(text.contains("Exponent: 65537"), "{text}");
        let text = openssl(&["verify", "-CAfile", "ca.crt", "leaf.crt"]);
        assert!(text.contains("leaf.crt: OK"), "{text}");
        std::fs::remove_dir_all(&dir).expect("remove temp dir");
    }
}

fn render_with_shims(text: &str) -> Result<String, String> {
    let funcs = funcs_with_shims();
    let mut set = TemplateSet::new("gotpl");
    set.parse("t", text, &funcs).map_err(|e| e.to_string())?;
    set.execute("t", &Value::Map(Map::new()), &funcs, &ExecOptions::helm())
        .map_err(|e| e.to_string())
}

/// Hostile inputs: every function returns a value or an error, never panics.
#[test]
fn hostile_inputs_never_panic() {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let alphabet: Vec<char> =
        "0123456789.-+xX*^~=<>!|, vV_:TZMSJanMonPMpm\"\\é\n-----BEGIN PRIVATE KEY"
            .chars()
            .collect();
    let mut random_string = |n: usize| -> String {
        (0..n)
            .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
            .collect()
    };
    let quote = |s: &str| format!("{s:?}");
    let mut texts = Vec::new();
    for _ in 0..300 {
        let (a, b) = (random_string(12), random_string(12));
        texts.push(format!(
            "{{{{ semverCompare {} {} }}}}",
            quote(&a),
            quote(&b)
        ));
        texts.push(format!("{{{{ semver {} }}}}", quote(&a)));
        texts.push(format!("{{{{ mustToDate {} {} }}}}", quote(&a), quote(&b)));
        texts.push(format!(
            "{{{{ mustDateModify {} (toDate \"2006\" \"2024\") }}}}",
            quote(&a)
        ));
        texts.push(format!("{{{{ decryptAES {} {} }}}}", quote(&a), quote(&b)));
        texts.push(format!("{{{{ genCAWithKey \"x\" 1 {} }}}}", quote(&a)));
        texts.push(format!(
            "{{{{ buildCustomCert {} {} }}}}",
            quote(&a),
            quote(&b)
        ));
        texts.push(format!("{{{{ date {} 1700000000 }}}}", quote(&a)));
    }
    for t in [
        i64::MIN,
        i64::MIN + 1,
        -1,
        0,
        i64::MAX - 1,
        i64::MAX,
        253_402_300_800,
    ] {
        for zone in ["UTC", "America/New_York", "Europe/Dublin", "Local"] {
            texts.push(format!(
                "{{{{ dateInZone \"2006-01-02 15:04:05.000 Z07:00 MST Mon __2\" {t} \"{zone}\" }}}}"
            ));
        }
        texts.push(format!("{{{{ ago {t} }}}} {{{{ durationRound {t} }}}}"));
        texts.push(format!(
            "{{{{ duration \"{t}\" }}}} {{{{ durationRound \"{t}ns\" }}}}"
        ));
        texts.push(
            "{{ dateModify \"2562047h\" (toDate \"2006\" \"9999\") | unixEpoch }}".to_string(),
        );
    }
    texts.push("{{ genSelfSignedCert \"x\" nil nil 9223372036854775807 }}".into());
    texts.push("{{ genSelfSignedCert \"x\" nil nil -9223372036854775808 }}".into());
    texts.push("{{ randBytes -9223372036854775808 }}".into());
    for text in texts {
        let _ = render_with_shims(&text);
    }
}
