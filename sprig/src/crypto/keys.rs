//! Private keys as Sprig handles them: generation (`genPrivateKey`), PEM output in the formats
//! Go writes (PKCS#1 `RSA PRIVATE KEY`, SEC 1 `EC PRIVATE KEY`, Sprig's ASN.1
//! `DSA PRIVATE KEY`, PKCS#8 `PRIVATE KEY` for Ed25519), parsing (`parsePrivateKeyPEM`),
//! public keys as SubjectPublicKeyInfo and signatures for certificates.

use p256::elliptic_curve::sec1::ToEncodedPoint;
use rand_core::OsRng;
use rsa::pkcs1::{DecodeRsaPrivateKey, EncodeRsaPrivateKey, EncodeRsaPublicKey};
use rsa::signature::{SignatureEncoding, Signer};

use super::der;

/// A private key of one of the types Sprig produces or accepts.
#[derive(Debug, Clone)]
pub(crate) enum PrivKey {
    Rsa(Box<rsa::RsaPrivateKey>),
    Ec(p256::SecretKey),
    /// A P-384 key (accepted from PEM; Go signs with ECDSA-SHA384).
    Ec384(p384::SecretKey),
    Ed(ed25519_dalek::SigningKey),
    /// An X25519 key (PKCS#8): Go parses it, but it cannot sign.
    X25519([u8; 32]),
    /// DSA components `p q g y x` as big-endian magnitudes (Go cannot sign certificates
    /// with DSA, so nothing else is needed).
    Dsa(Box<[Vec<u8>; 5]>),
}

const OID_RSA: &[u64] = &[1, 2, 840, 113_549, 1, 1, 1];
const OID_SHA256_RSA: &[u64] = &[1, 2, 840, 113_549, 1, 1, 11];
const OID_EC_PUBLIC_KEY: &[u64] = &[1, 2, 840, 10045, 2, 1];
const OID_P256: &[u64] = &[1, 2, 840, 10045, 3, 1, 7];
const OID_ECDSA_SHA256: &[u64] = &[1, 2, 840, 10045, 4, 3, 2];
const OID_P384: &[u64] = &[1, 3, 132, 0, 34];
const OID_ECDSA_SHA384: &[u64] = &[1, 2, 840, 10045, 4, 3, 3];
const OID_ED25519: &[u64] = &[1, 3, 101, 112];
const OID_X25519: &[u64] = &[1, 3, 101, 110];

/// `rsa.GenerateKey(rand.Reader, bits)`: two primes of `bits / 2` bits with their top two
/// bits set, e = 65537, d = e^-1 mod lcm(p - 1, q - 1). Sizes the fast prime search does not
/// cover go through the `rsa` crate's own generation.
pub(crate) fn generate_rsa(bits: usize) -> Result<PrivKey, String> {
    if bits.is_multiple_of(2) {
        // A pair whose λ(n) is a multiple of e (one in ~65537) is thrown away, as Go does.
        for _ in 0..64 {
            let Some(mut primes) = super::prime::random_primes(bits / 2, 2) else {
                break;
            };
            let q = primes.pop().expect("two primes");
            let p = primes.pop().expect("two primes");
            match rsa::RsaPrivateKey::from_p_q(p, q, rsa::BigUint::from(65_537u32)) {
                Ok(key) => return Ok(PrivKey::Rsa(Box::new(key))),
                Err(rsa::Error::InvalidPrime) => continue,
                Err(e) => return Err(e.to_string()),
            }
        }
    }
    rsa::RsaPrivateKey::new(&mut OsRng, bits)
        .map(|k| PrivKey::Rsa(Box::new(k)))
        .map_err(|e| e.to_string())
}

/// Sprig's `genPrivateKey`.
pub(crate) fn gen_private_key(typ: &str) -> String {
    let key = match typ {
        "" | "rsa" => generate_rsa(4096),
        "dsa" => {
            let components = dsa::Components::generate(&mut OsRng, dsa::KeySize::DSA_2048_256);
            let key = dsa::SigningKey::generate(&mut OsRng, components);
            let vk = key.verifying_key();
            let c = vk.components();
            Ok(PrivKey::Dsa(Box::new([
                c.p().to_bytes_be(),
                c.q().to_bytes_be(),
                c.g().to_bytes_be(),
                vk.y().to_bytes_be(),
                key.x().to_bytes_be(),
            ])))
        }
        "ecdsa" => Ok(PrivKey::Ec(p256::SecretKey::random(&mut OsRng))),
        "ed25519" => Ok(PrivKey::Ed(ed25519_dalek::SigningKey::generate(&mut OsRng))),
        _ => return format!("Unknown type {typ}"),
    };
    match key.and_then(|k| k.to_pem()) {
        Ok(pem) => pem,
        Err(e) => format!("failed to generate private key: {e}"),
    }
}

impl PrivKey {
    /// Sprig's `pemBlockForKey`, encoded.
    pub(crate) fn to_pem(&self) -> Result<String, String> {
        Ok(match self {
            PrivKey::Rsa(k) => {
                let doc = k.to_pkcs1_der().map_err(|e| e.to_string())?;
                der::pem_encode("RSA PRIVATE KEY", doc.as_bytes())
            }
            PrivKey::Ec(k) => der::pem_encode("EC PRIVATE KEY", &ec_private_der(k)),
            PrivKey::Ec384(k) => {
                let point = k.public_key().to_encoded_point(false);
                let body = der::seq(&[
                    der::small_int(1),
                    der::tlv(der::OCTET_STRING, &k.to_bytes()),
                    der::tlv(0xa0, &der::oid(OID_P384)),
                    der::tlv(0xa1, &der::bit_string(point.as_bytes())),
                ]);
                der::pem_encode("EC PRIVATE KEY", &body)
            }
            PrivKey::Ed(k) => {
                let body = der::seq(&[
                    der::small_int(0),
                    der::seq(&[der::oid(OID_ED25519)]),
                    der::tlv(
                        der::OCTET_STRING,
                        &der::tlv(der::OCTET_STRING, &k.to_bytes()),
                    ),
                ]);
                der::pem_encode("PRIVATE KEY", &body)
            }
            PrivKey::X25519(seed) => {
                let body = der::seq(&[
                    der::small_int(0),
                    der::seq(&[der::oid(OID_X25519)]),
                    der::tlv(der::OCTET_STRING, &der::tlv(der::OCTET_STRING, seed)),
                ]);
                der::pem_encode("PRIVATE KEY", &body)
            }
            PrivKey::Dsa(parts) => {
                let mut items = vec![der::small_int(0)];
                items.extend(parts.iter().map(|p| der::uint(p)));
                der::pem_encode("DSA PRIVATE KEY", &der::seq(&items))
            }
        })
    }

    /// The SubjectPublicKeyInfo and the raw public key bits (hashed for key identifiers).
    pub(crate) fn spki(&self) -> Result<(Vec<u8>, Vec<u8>), String> {
        let (alg, bits) = match self {
            PrivKey::Rsa(k) => {
                let pubkey = k.to_public_key();
                let bits = pubkey.to_pkcs1_der().map_err(|e| e.to_string())?;
                (
                    der::seq(&[der::oid(OID_RSA), der::tlv(der::NULL, &[])]),
                    bits.as_bytes().to_vec(),
                )
            }
            PrivKey::Ec(k) => (
                der::seq(&[der::oid(OID_EC_PUBLIC_KEY), der::oid(OID_P256)]),
                k.public_key().to_encoded_point(false).as_bytes().to_vec(),
            ),
            PrivKey::Ec384(k) => (
                der::seq(&[der::oid(OID_EC_PUBLIC_KEY), der::oid(OID_P384)]),
                k.public_key().to_encoded_point(false).as_bytes().to_vec(),
            ),
            PrivKey::Ed(k) => (
                der::seq(&[der::oid(OID_ED25519)]),
                k.verifying_key().to_bytes().to_vec(),
            ),
            PrivKey::Dsa(_) => {
                return Err("x509: unsupported public key type: *dsa.PublicKey".into());
            }
            PrivKey::X25519(_) => {
                return Err("x509: unsupported public key type: *ecdh.PublicKey".into());
            }
        };
        Ok((der::seq(&[alg, der::bit_string(&bits)]), bits))
    }

    /// The signature AlgorithmIdentifier Go picks for this key.
    pub(crate) fn signature_algorithm(&self) -> Result<Vec<u8>, String> {
        match self {
            PrivKey::Rsa(_) => Ok(der::seq(&[
                der::oid(OID_SHA256_RSA),
                der::tlv(der::NULL, &[]),
            ])),
            PrivKey::Ec(_) => Ok(der::seq(&[der::oid(OID_ECDSA_SHA256)])),
            PrivKey::Ec384(_) => Ok(der::seq(&[der::oid(OID_ECDSA_SHA384)])),
            PrivKey::Ed(_) => Ok(der::seq(&[der::oid(OID_ED25519)])),
            PrivKey::Dsa(_) | PrivKey::X25519(_) => {
                Err("x509: certificate private key does not implement crypto.Signer".into())
            }
        }
    }

    /// Signs `msg` with the algorithm of [`PrivKey::signature_algorithm`].
    pub(crate) fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, String> {
        match self {
            PrivKey::Rsa(k) => {
                if let Some(sig) = super::sign::sign_sha256(k, msg) {
                    return Ok(sig);
                }
                let signer = rsa::pkcs1v15::SigningKey::<sha2::Sha256>::new(k.as_ref().clone());
                let sig = signer.try_sign(msg).map_err(|e| e.to_string())?;
                Ok(sig.to_vec())
            }
            PrivKey::Ec(k) => {
                let signer = p256::ecdsa::SigningKey::from(k);
                let sig: p256::ecdsa::Signature =
                    signer.try_sign(msg).map_err(|e| e.to_string())?;
                Ok(sig.to_der().as_bytes().to_vec())
            }
            PrivKey::Ec384(k) => {
                let signer = p384::ecdsa::SigningKey::from(k);
                let sig: p384::ecdsa::Signature =
                    signer.try_sign(msg).map_err(|e| e.to_string())?;
                Ok(sig.to_der().as_bytes().to_vec())
            }
            PrivKey::Ed(k) => Ok(k.sign(msg).to_bytes().to_vec()),
            PrivKey::Dsa(_) | PrivKey::X25519(_) => {
                Err("x509: certificate private key does not implement crypto.Signer".into())
            }
        }
    }
}

/// Go's `x509.MarshalECPrivateKey` for P-256.
fn ec_private_der(k: &p256::SecretKey) -> Vec<u8> {
    let point = k.public_key().to_encoded_point(false);
    der::seq(&[
        der::small_int(1),
        der::tlv(der::OCTET_STRING, &k.to_bytes()),
        der::tlv(0xa0, &der::oid(OID_P256)),
        der::tlv(0xa1, &der::bit_string(point.as_bytes())),
    ])
}

/// Go's `encoding/asn1` error for a top-level value that is not the expected SEQUENCE (or
/// is cut short), naming the Go type being decoded.
fn asn1_error(bytes: &[u8], type_name: &str) -> String {
    const TRUNCATED: &str = "asn1: syntax error: data truncated";
    let (Some(&b), Some(&l)) = (bytes.first(), bytes.get(1)) else {
        return TRUNCATED.into();
    };
    let (class, compound, tag) = (b >> 6, b & 0x20 != 0, b & 0x1f);
    let (len, offset) = if l < 0x80 {
        (usize::from(l), 2)
    } else {
        let n = usize::from(l & 0x7f);
        if n == 0 || n > 4 || bytes.len() < 2 + n {
            return TRUNCATED.into();
        }
        let len = bytes[2..2 + n]
            .iter()
            .fold(0usize, |acc, &x| (acc << 8) | usize::from(x));
        (len, 2 + n)
    };
    if tag == 0x1f || bytes.len() < offset + len {
        return TRUNCATED.into();
    }
    if class == 0 && tag == 16 && compound {
        return format!("asn1: structure error: malformed {type_name}");
    }
    format!(
        "asn1: structure error: tags don't match (16 vs {{class:{class} tag:{tag} length:{len} isCompound:{compound}}}) {{optional:false explicit:false application:false private:false defaultValue:<nil> tag:<nil> stringType:0 timeType:0 set:false omitEmpty:false}} {type_name} @{offset}"
    )
}

/// The algorithm OID of a PKCS#8 structure, if `bytes` is one.
fn pkcs8_algorithm(bytes: &[u8]) -> Option<Vec<u8>> {
    let (outer, _) = der::read_tlv(bytes)?;
    let items = der::children(outer.content)?;
    if items.len() < 3 || items[0].tag != der::INTEGER || items[1].tag != der::SEQUENCE {
        return None;
    }
    let alg_items = der::children(items[1].content)?;
    let oid = alg_items.first().filter(|t| t.tag == der::OID)?;
    Some(oid.content.to_vec())
}

fn oid_body(arcs: &[u64]) -> Vec<u8> {
    der::oid(arcs)[2..].to_vec()
}

fn dotted_oid(body: &[u8]) -> String {
    let mut arcs = Vec::new();
    let mut v: u64 = 0;
    for &b in body {
        v = (v << 7) | u64::from(b & 0x7f);
        if b & 0x80 == 0 {
            if arcs.is_empty() {
                let first = (v / 40).min(2);
                arcs.push(first);
                arcs.push(v - first * 40);
            } else {
                arcs.push(v);
            }
            v = 0;
        }
    }
    arcs.iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(".")
}

fn parse_pkcs1(bytes: &[u8]) -> Option<PrivKey> {
    rsa::RsaPrivateKey::from_pkcs1_der(bytes)
        .ok()
        .map(|k| PrivKey::Rsa(Box::new(k)))
}

/// A SEC 1 `ECPrivateKey` on a curve this crate supports.
fn parse_sec1(bytes: &[u8]) -> Option<PrivKey> {
    if let Ok(k) = p256::SecretKey::from_sec1_der(bytes) {
        return Some(PrivKey::Ec(k));
    }
    p384::SecretKey::from_sec1_der(bytes)
        .ok()
        .map(PrivKey::Ec384)
}

fn parse_pkcs8(bytes: &[u8]) -> Result<PrivKey, String> {
    let Some(alg) = pkcs8_algorithm(bytes) else {
        if parse_pkcs1(bytes).is_some() {
            return Err(
                "x509: failed to parse private key (use ParsePKCS1PrivateKey instead for this key format)"
                    .into(),
            );
        }
        if parse_sec1(bytes).is_some() {
            return Err(
                "x509: failed to parse private key (use ParseECPrivateKey instead for this key format)"
                    .into(),
            );
        }
        return Err(asn1_error(bytes, "pkcs8"));
    };
    if alg == oid_body(OID_RSA) {
        use rsa::pkcs8::DecodePrivateKey;
        return rsa::RsaPrivateKey::from_pkcs8_der(bytes)
            .map(|k| PrivKey::Rsa(Box::new(k)))
            .map_err(|e| format!("x509: failed to parse RSA private key embedded in PKCS#8: {e}"));
    }
    if alg == oid_body(OID_EC_PUBLIC_KEY) {
        if let Ok(k) = p256::SecretKey::from_pkcs8_der(bytes) {
            return Ok(PrivKey::Ec(k));
        }
        use p384::pkcs8::DecodePrivateKey;
        return p384::SecretKey::from_pkcs8_der(bytes)
            .map(PrivKey::Ec384)
            .map_err(|_| "x509: failed to parse EC private key embedded in PKCS#8: x509: unknown elliptic curve".to_string());
    }
    if alg == oid_body(OID_ED25519) || alg == oid_body(OID_X25519) {
        let x25519 = alg == oid_body(OID_X25519);
        let malformed = || "x509: invalid Ed25519 private key".to_string();
        let (outer, _) = der::read_tlv(bytes).ok_or_else(malformed)?;
        let items = der::children(outer.content).ok_or_else(malformed)?;
        let inner = items.get(2).ok_or_else(malformed)?;
        let (seed, _) = der::read_tlv(inner.content).ok_or_else(malformed)?;
        let seed: [u8; 32] = seed.content.try_into().map_err(|_| {
            format!(
                "x509: invalid Ed25519 private key length: {}",
                seed.content.len()
            )
        })?;
        if x25519 {
            return Ok(PrivKey::X25519(seed));
        }
        return Ok(PrivKey::Ed(ed25519_dalek::SigningKey::from_bytes(&seed)));
    }
    Err(format!(
        "x509: PKCS#8 wrapping contained private key with unknown algorithm: {}",
        dotted_oid(&alg)
    ))
}

/// Sprig's `parsePrivateKeyPEM`.
pub(crate) fn parse_private_key_pem(pem: &str) -> Result<PrivKey, String> {
    let Some((label, bytes)) = der::pem_decode(pem) else {
        return Err("no PEM data in input".into());
    };
    if label == "PRIVATE KEY" {
        return parse_pkcs8(&bytes).map_err(|e| format!("decoding PEM as PKCS#8: {e}"));
    }
    let Some(kind) = label.strip_suffix(" PRIVATE KEY") else {
        return Err(format!("no private key data in PEM block of type {label}"));
    };
    let use_instead = |other: &str| {
        format!("x509: failed to parse private key (use {other} instead for this key format)")
    };
    match kind {
        "RSA" => parse_pkcs1(&bytes).ok_or_else(|| {
            let e = if pkcs8_algorithm(&bytes).is_some() {
                use_instead("ParsePKCS8PrivateKey")
            } else if parse_sec1(&bytes).is_some() {
                use_instead("ParseECPrivateKey")
            } else {
                asn1_error(&bytes, "pkcs1PrivateKey")
            };
            format!("parsing RSA private key from PEM: {e}")
        }),
        "EC" => parse_sec1(&bytes).ok_or_else(|| {
            let e = if pkcs8_algorithm(&bytes).is_some() {
                use_instead("ParsePKCS8PrivateKey")
            } else if parse_pkcs1(&bytes).is_some() {
                use_instead("ParsePKCS1PrivateKey")
            } else {
                format!(
                    "x509: failed to parse EC private key: {}",
                    asn1_error(&bytes, "ecPrivateKey")
                )
            };
            format!("parsing EC private key from PEM: {e}")
        }),
        "DSA" => {
            let bad = || {
                format!(
                    "parsing DSA private key from PEM: {}",
                    asn1_error(&bytes, "DSAKeyFormat")
                )
            };
            let (outer, _) = der::read_tlv(&bytes).ok_or_else(bad)?;
            let items = der::children(outer.content).ok_or_else(bad)?;
            if items.len() < 6 || items.iter().any(|t| t.tag != der::INTEGER) {
                return Err(bad());
            }
            let num = |i: usize| items[i].content.to_vec();
            Ok(PrivKey::Dsa(Box::new([
                num(1),
                num(2),
                num(3),
                num(4),
                num(5),
            ])))
        }
        _ => Err(format!("invalid private key type {label}")),
    }
}

#[cfg(test)]
mod tests {
    use rsa::traits::{PrivateKeyParts, PublicKeyParts};

    use super::*;

    fn rsa_key(bits: usize) -> rsa::RsaPrivateKey {
        match generate_rsa(bits).expect("key generation") {
            PrivKey::Rsa(k) => *k,
            other => panic!("not an RSA key: {other:?}"),
        }
    }

    /// The key is what Go's `rsa.GenerateKey` makes: n = pq of exactly `bits` bits, both
    /// primes of half the size with their top two bits set, e = 65537 and
    /// d = e^-1 mod lcm(p - 1, q - 1), CRT values consistent, and it survives PKCS#1 encoding.
    fn check_key(bits: usize) {
        let key = rsa_key(bits);
        let one = rsa::BigUint::from(1u8);
        let [p, q] = key.primes() else {
            panic!("two primes expected, got {}", key.primes().len());
        };
        assert_ne!(p, q);
        assert_eq!(p * q, *key.n());
        assert_eq!(key.n().bits(), bits);
        for prime in [p, q] {
            assert_eq!(prime.bits(), bits / 2);
            assert_eq!(
                prime >> (bits / 2 - 2),
                rsa::BigUint::from(3u8),
                "top two bits set"
            );
            assert!(num_bigint_dig::prime::probably_prime(prime, 20), "{prime}");
        }
        assert_eq!(*key.e(), rsa::BigUint::from(65_537u32));
        let (p1, q1) = (p - &one, q - &one);
        let gcd = {
            let (mut a, mut b) = (p1.clone(), q1.clone());
            while b != rsa::BigUint::from(0u8) {
                let r = &a % &b;
                a = b;
                b = r;
            }
            a
        };
        let lambda = &p1 * &q1 / gcd;
        assert!(*key.d() < lambda, "d reduced modulo λ(n), as Go does");
        assert_eq!((key.e() * key.d()) % &lambda, one, "e d ≡ 1 (mod λ(n))");
        assert_eq!(*key.dp().expect("precomputed"), key.d() % &p1);
        assert_eq!(*key.dq().expect("precomputed"), key.d() % &q1);
        let qinv = key.crt_coefficient().expect("q invertible mod p");
        assert_eq!((qinv * q) % p, one);
        key.validate().expect("valid key");
        let der = key.to_pkcs1_der().expect("PKCS#1");
        let back = rsa::RsaPrivateKey::from_pkcs1_der(der.as_bytes()).expect("parses back");
        assert_eq!(back, key);
    }

    #[test]
    fn rsa_2048_keys_are_made_as_go_makes_them() {
        for _ in 0..3 {
            check_key(2048);
        }
    }

    #[test]
    fn rsa_4096_and_other_sizes_are_made_as_go_makes_them() {
        check_key(4096);
        // 1024 bits: 512-bit primes, the smallest size of the fast search.
        check_key(1024);
    }

    #[test]
    fn sizes_outside_the_fast_search_still_make_valid_keys() {
        // Through the `rsa` crate (d modulo φ(n) there; Sprig never asks for these sizes).
        let key = rsa_key(1040);
        assert_eq!(key.n().bits(), 1040);
        key.validate().expect("valid key");
    }
}
