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
    Ed(ed25519_dalek::SigningKey),
    /// DSA components `p q g y x` as big-endian magnitudes (Go cannot sign certificates
    /// with DSA, so nothing else is needed).
    Dsa(Box<[Vec<u8>; 5]>),
}

const OID_RSA: &[u64] = &[1, 2, 840, 113_549, 1, 1, 1];
const OID_SHA256_RSA: &[u64] = &[1, 2, 840, 113_549, 1, 1, 11];
const OID_EC_PUBLIC_KEY: &[u64] = &[1, 2, 840, 10045, 2, 1];
const OID_P256: &[u64] = &[1, 2, 840, 10045, 3, 1, 7];
const OID_ECDSA_SHA256: &[u64] = &[1, 2, 840, 10045, 4, 3, 2];
const OID_ED25519: &[u64] = &[1, 3, 101, 112];

/// `rsa.GenerateKey(rand.Reader, bits)`.
pub(crate) fn generate_rsa(bits: usize) -> Result<PrivKey, String> {
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
            PrivKey::Ed(k) => (
                der::seq(&[der::oid(OID_ED25519)]),
                k.verifying_key().to_bytes().to_vec(),
            ),
            PrivKey::Dsa(_) => {
                return Err("x509: unsupported public key type: *dsa.PublicKey".into());
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
            PrivKey::Ed(_) => Ok(der::seq(&[der::oid(OID_ED25519)])),
            PrivKey::Dsa(_) => {
                Err("x509: certificate private key does not implement crypto.Signer".into())
            }
        }
    }

    /// Signs `msg` with the algorithm of [`PrivKey::signature_algorithm`].
    pub(crate) fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, String> {
        match self {
            PrivKey::Rsa(k) => {
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
            PrivKey::Ed(k) => Ok(k.sign(msg).to_bytes().to_vec()),
            PrivKey::Dsa(_) => {
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

fn parse_pkcs8(bytes: &[u8]) -> Result<PrivKey, String> {
    let malformed = || "x509: failed to parse private key".to_string();
    let (outer, _) = der::read_tlv(bytes).ok_or_else(malformed)?;
    let items = der::children(outer.content).ok_or_else(malformed)?;
    let alg = items.get(1).ok_or_else(malformed)?;
    let alg_items = der::children(alg.content).ok_or_else(malformed)?;
    let alg_oid = alg_items.first().ok_or_else(malformed)?;
    let oid_of = |arcs: &[u64]| der::oid(arcs)[2..].to_vec();
    if alg_oid.content == oid_of(OID_RSA).as_slice() {
        use rsa::pkcs8::DecodePrivateKey;
        return rsa::RsaPrivateKey::from_pkcs8_der(bytes)
            .map(|k| PrivKey::Rsa(Box::new(k)))
            .map_err(|e| format!("x509: failed to parse RSA private key embedded in PKCS#8: {e}"));
    }
    if alg_oid.content == oid_of(OID_EC_PUBLIC_KEY).as_slice() {
        use p256::pkcs8::DecodePrivateKey;
        return p256::SecretKey::from_pkcs8_der(bytes)
            .map(PrivKey::Ec)
            .map_err(|e| format!("x509: failed to parse EC private key embedded in PKCS#8: {e}"));
    }
    if alg_oid.content == oid_of(OID_ED25519).as_slice() {
        let inner = items.get(2).ok_or_else(malformed)?;
        let (seed, _) = der::read_tlv(inner.content).ok_or_else(malformed)?;
        let seed: [u8; 32] = seed.content.try_into().map_err(|_| {
            format!(
                "x509: invalid Ed25519 private key: ed25519: bad private key length: {}",
                seed.content.len()
            )
        })?;
        return Ok(PrivKey::Ed(ed25519_dalek::SigningKey::from_bytes(&seed)));
    }
    Err("x509: PKCS#8 wrapping contained private key with unknown algorithm".into())
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
    match kind {
        "RSA" => rsa::RsaPrivateKey::from_pkcs1_der(&bytes)
            .map(|k| PrivKey::Rsa(Box::new(k)))
            .map_err(|e| format!("parsing RSA private key from PEM: x509: {e}")),
        "EC" => p256::SecretKey::from_sec1_der(&bytes)
            .map(PrivKey::Ec)
            .map_err(|e| format!("parsing EC private key from PEM: x509: {e}")),
        "DSA" => {
            let bad = || "parsing DSA private key from PEM: asn1: structure error".to_string();
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
