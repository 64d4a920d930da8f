//! Sprig's certificate functions (`genCA`, `genSelfSignedCert`, `genSignedCert`, their
//! `WithKey` forms and `buildCustomCert`), producing what Go's `x509.CreateCertificate` writes
//! for Sprig's template: a random serial below 2^128, subject `CN` only, validity from now
//! for `days`×24h, critical key usage (digital signature, key encipherment, plus certificate
//! signing for CAs), server+client extended key usage, critical basic constraints, a truncated
//! SHA-256 subject key identifier on CAs, the issuer's key identifier on signed certificates,
//! and DNS then IP subject alternative names (critical when the subject is empty).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use flotilla_gotmpl::{FuncError, GoKind, Object, Value};
use rand_core::{OsRng, RngCore};
use sha2::Digest;

use super::der;
use super::keys::{PrivKey, generate_rsa, parse_private_key_pem};

/// Sprig's `certificate` struct: `{Cert, Key string}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Certificate {
    /// The PEM certificate.
    pub cert: String,
    /// The PEM private key.
    pub key: String,
}

/// The Go type name of certificate values.
pub const CERT_TYPE: &str = "sprig.certificate";

impl Object for Certificate {
    fn type_name(&self) -> String {
        CERT_TYPE.to_string()
    }

    fn kind(&self) -> GoKind {
        GoKind::Struct
    }

    fn field(&self, name: &str) -> Option<Value> {
        match name {
            "Cert" => Some(Value::string(&self.cert)),
            "Key" => Some(Value::string(&self.key)),
            _ => None,
        }
    }

    fn display(&self) -> String {
        format!("{{{} {}}}", self.cert, self.key)
    }

    fn marshal(&self) -> Option<Value> {
        let mut m = std::collections::BTreeMap::new();
        m.insert("Cert".to_string(), Value::string(&self.cert));
        m.insert("Key".to_string(), Value::string(&self.key));
        Some(Value::map(m))
    }
}

/// A certificate argument (checked by the signature) back as a [`Certificate`].
pub(crate) fn cert_arg(v: &Value) -> Certificate {
    let field = |name: &str| match v {
        Value::Object(o) => o
            .field(name)
            .and_then(|f| f.as_str().map(str::to_string))
            .unwrap_or_default(),
        _ => String::new(),
    };
    Certificate {
        cert: field("Cert"),
        key: field("Key"),
    }
}

pub(crate) fn cert_value(c: Certificate) -> Value {
    Value::Object(Arc::new(c))
}

/// What the template asks for.
struct Template {
    cn: String,
    ips: Vec<Vec<u8>>,
    dns: Vec<String>,
    days: i64,
    is_ca: bool,
}

fn net_ips(ips: &Value) -> Result<Vec<Vec<u8>>, String> {
    let Some(list) = ips.as_list() else {
        return Ok(Vec::new());
    };
    list.items()
        .iter()
        .map(|ip| {
            let Some(s) = ip.as_str() else {
                return Err(format!("error parsing ip: {ip} is not a string"));
            };
            match s.parse::<IpAddr>() {
                Ok(IpAddr::V4(a)) => Ok(a.octets().to_vec()),
                Ok(IpAddr::V6(a)) => Ok(match a.to_ipv4_mapped() {
                    Some(v4) => v4.octets().to_vec(),
                    None => a.octets().to_vec(),
                }),
                Err(_) => Err(format!("error parsing ip: {s}")),
            }
        })
        .collect()
}

fn dns_names(dns: &Value) -> Result<Vec<String>, String> {
    let Some(list) = dns.as_list() else {
        return Ok(Vec::new());
    };
    list.items()
        .iter()
        .map(|d| match d.as_str() {
            Some(s) => Ok(s.to_string()),
            None => Err(format!(
                "error processing alternate dns name: {d} is not a string"
            )),
        })
        .collect()
}

fn base_template(cn: &str, ips: &Value, dns: &Value, days: i64) -> Result<Template, String> {
    Ok(Template {
        cn: cn.to_string(),
        ips: net_ips(ips)?,
        dns: dns_names(dns)?,
        days,
        is_ca: false,
    })
}

/// Go's asn1 string choice: PrintableString when every character allows it.
fn directory_string(s: &str) -> Vec<u8> {
    let printable = s.bytes().all(|c| {
        c.is_ascii_alphanumeric()
            || matches!(
                c,
                b' ' | b'\'' | b'(' | b')' | b'+' | b',' | b'-' | b'.' | b'/' | b':' | b'=' | b'?'
            )
    });
    der::tlv(
        if printable {
            der::PRINTABLE_STRING
        } else {
            der::UTF8_STRING
        },
        s.as_bytes(),
    )
}

fn subject(cn: &str) -> Vec<u8> {
    if cn.is_empty() {
        return der::seq(&[]);
    }
    der::seq(&[der::tlv(
        der::SET,
        &der::seq(&[der::oid(&[2, 5, 4, 3]), directory_string(cn)]),
    )])
}

/// Go's asn1 time: UTCTime for 1950..2049, GeneralizedTime otherwise.
fn asn1_time(unix: i64) -> Result<Vec<u8>, String> {
    let days = unix.div_euclid(86_400);
    let sod = unix.rem_euclid(86_400);
    let (y, m, d) = civil(days);
    if !(0..=9999).contains(&y) {
        return Err("x509: certificate validity outside of representable time range".into());
    }
    let hms = format!(
        "{:02}{:02}{:02}{:02}{:02}Z",
        m,
        d,
        sod / 3600,
        sod / 60 % 60,
        sod % 60
    );
    Ok(if (1950..2050).contains(&y) {
        der::tlv(der::UTC_TIME, format!("{:02}{hms}", y % 100).as_bytes())
    } else {
        der::tlv(der::GENERALIZED_TIME, format!("{y:04}{hms}").as_bytes())
    })
}

fn civil(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn extension(oid: &[u64], critical: bool, value: Vec<u8>) -> Vec<u8> {
    let mut parts = vec![der::oid(oid)];
    if critical {
        parts.push(der::tlv(der::BOOLEAN, &[0xff]));
    }
    parts.push(der::tlv(der::OCTET_STRING, &value));
    der::seq(&parts)
}

/// The issuer: its raw subject, SubjectKeyId and SubjectPublicKeyInfo.
struct Issuer {
    subject: Vec<u8>,
    key_id: Option<Vec<u8>>,
    spki: Option<Vec<u8>>,
}

fn create_certificate(
    t: &Template,
    signee: &PrivKey,
    issuer: Option<&Issuer>,
    signer: &PrivKey,
) -> Result<Vec<u8>, String> {
    let sig_alg = signer.signature_algorithm()?;
    let (spki, pub_bits) = signee.spki()?;
    let subject = subject(&t.cn);
    let issuer_subject = issuer.map_or_else(|| subject.clone(), |i| i.subject.clone());
    let authority_key_id = match issuer {
        Some(i) if i.subject != subject => i.key_id.clone(),
        _ => None,
    };
    let subject_key_id = t
        .is_ca
        .then(|| sha2::Sha256::digest(&pub_bits)[..20].to_vec());
    if let Some(i) = issuer {
        let (signer_spki, _) = signer.spki()?;
        if i.spki.as_ref().is_some_and(|s| *s != signer_spki) {
            return Err("x509: provided PrivateKey doesn't match parent's PublicKey".into());
        }
    }
    for name in &t.dns {
        if !name.is_ascii() {
            return Err(format!("x509: {name:?} cannot be encoded as an IA5String"));
        }
    }

    let mut serial = [0u8; 16];
    OsRng.fill_bytes(&mut serial);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    // time.Hour * 24 * time.Duration(days): nanoseconds, wrapping like Go.
    let valid_ns = 86_400_000_000_000i64.wrapping_mul(t.days);
    let not_after = now + valid_ns.div_euclid(1_000_000_000);

    let mut exts = Vec::new();
    let key_usage: u8 = if t.is_ca { 0xa4 } else { 0xa0 };
    let unused = if t.is_ca { 2 } else { 5 };
    exts.push(extension(
        &[2, 5, 29, 15],
        true,
        der::tlv(der::BIT_STRING, &[unused, key_usage]),
    ));
    exts.push(extension(
        &[2, 5, 29, 37],
        false,
        der::seq(&[
            der::oid(&[1, 3, 6, 1, 5, 5, 7, 3, 1]),
            der::oid(&[1, 3, 6, 1, 5, 5, 7, 3, 2]),
        ]),
    ));
    let bc = if t.is_ca {
        der::seq(&[der::tlv(der::BOOLEAN, &[0xff])])
    } else {
        der::seq(&[])
    };
    exts.push(extension(&[2, 5, 29, 19], true, bc));
    if let Some(ski) = &subject_key_id {
        exts.push(extension(
            &[2, 5, 29, 14],
            false,
            der::tlv(der::OCTET_STRING, ski),
        ));
    }
    if let Some(aki) = &authority_key_id {
        exts.push(extension(
            &[2, 5, 29, 35],
            false,
            der::seq(&[der::tlv(0x80, aki)]),
        ));
    }
    if !t.dns.is_empty() || !t.ips.is_empty() {
        let mut names: Vec<Vec<u8>> = t.dns.iter().map(|d| der::tlv(0x82, d.as_bytes())).collect();
        names.extend(t.ips.iter().map(|ip| der::tlv(0x87, ip)));
        exts.push(extension(
            &[2, 5, 29, 17],
            subject == der::seq(&[]),
            der::seq(&names),
        ));
    }

    let tbs = der::seq(&[
        der::tlv(0xa0, &der::small_int(2)),
        der::uint(&serial),
        sig_alg.clone(),
        issuer_subject,
        der::seq(&[asn1_time(now)?, asn1_time(not_after)?]),
        subject,
        spki,
        der::tlv(0xa3, &der::seq(&exts)),
    ]);
    let signature = signer.sign(&tbs)?;
    Ok(der::seq(&[tbs, sig_alg, der::bit_string(&signature)]))
}

fn get_cert_and_key(
    t: &Template,
    signee: &PrivKey,
    issuer: Option<&Issuer>,
    signer: &PrivKey,
) -> Result<Certificate, String> {
    let der_bytes = create_certificate(t, signee, issuer, signer)
        .map_err(|e| format!("error creating certificate: {e}"))?;
    let key = signee
        .to_pem()
        .map_err(|e| format!("error pem-encoding key: {e}"))?;
    Ok(Certificate {
        cert: der::pem_encode("CERTIFICATE", &der_bytes),
        key,
    })
}

fn rsa_2048() -> Result<PrivKey, String> {
    generate_rsa(2048).map_err(|e| format!("error generating rsa key: {e}"))
}

fn pem_key(pem: &str) -> Result<PrivKey, String> {
    parse_private_key_pem(pem).map_err(|e| format!("parsing private key: {e}"))
}

fn ca_with_key(cn: &str, days: i64, key: &PrivKey) -> Result<Certificate, String> {
    let mut t = base_template(cn, &Value::Nil, &Value::Nil, days)?;
    t.is_ca = true;
    get_cert_and_key(&t, key, None, key)
}

/// `genCA`.
pub(crate) fn gen_ca(cn: &str, days: i64) -> Result<Certificate, String> {
    ca_with_key(cn, days, &rsa_2048()?)
}

/// `genCAWithKey`.
pub(crate) fn gen_ca_with_key(cn: &str, days: i64, pem: &str) -> Result<Certificate, String> {
    ca_with_key(cn, days, &pem_key(pem)?)
}

fn self_signed_with_key(
    cn: &str,
    ips: &Value,
    dns: &Value,
    days: i64,
    key: &PrivKey,
) -> Result<Certificate, String> {
    let t = base_template(cn, ips, dns, days)?;
    get_cert_and_key(&t, key, None, key)
}

/// `genSelfSignedCert`.
pub(crate) fn gen_self_signed(
    cn: &str,
    ips: &Value,
    dns: &Value,
    days: i64,
) -> Result<Certificate, String> {
    self_signed_with_key(cn, ips, dns, days, &rsa_2048()?)
}

/// `genSelfSignedCertWithKey`.
pub(crate) fn gen_self_signed_with_key(
    cn: &str,
    ips: &Value,
    dns: &Value,
    days: i64,
    pem: &str,
) -> Result<Certificate, String> {
    self_signed_with_key(cn, ips, dns, days, &pem_key(pem)?)
}

fn parse_issuer(der_bytes: &[u8]) -> Result<Issuer, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der_bytes)
        .map_err(|e| format!("x509: malformed certificate ({e})"))?;
    let tbs = &cert.tbs_certificate;
    let key_id = tbs
        .extensions()
        .iter()
        .find_map(|ext| match ext.parsed_extension() {
            x509_parser::extensions::ParsedExtension::SubjectKeyIdentifier(k) => Some(k.0.to_vec()),
            _ => None,
        });
    Ok(Issuer {
        subject: tbs.subject.as_raw().to_vec(),
        key_id,
        spki: Some(tbs.subject_pki.raw.to_vec()),
    })
}

fn signed_with_key(
    cn: &str,
    ips: &Value,
    dns: &Value,
    days: i64,
    ca: &Certificate,
    key: &PrivKey,
) -> Result<Certificate, String> {
    let Some((_, ca_der)) = der::pem_decode(&ca.cert) else {
        return Err("unable to decode certificate".into());
    };
    let issuer = parse_issuer(&ca_der)
        .map_err(|e| format!("error parsing certificate: decodedSignerCert.Bytes: {e}"))?;
    let signer =
        parse_private_key_pem(&ca.key).map_err(|e| format!("error parsing private key: {e}"))?;
    let t = base_template(cn, ips, dns, days)?;
    get_cert_and_key(&t, key, Some(&issuer), &signer)
}

/// `genSignedCert`.
pub(crate) fn gen_signed(
    cn: &str,
    ips: &Value,
    dns: &Value,
    days: i64,
    ca: &Certificate,
) -> Result<Certificate, String> {
    signed_with_key(cn, ips, dns, days, ca, &rsa_2048()?)
}

/// `genSignedCertWithKey`.
pub(crate) fn gen_signed_with_key(
    cn: &str,
    ips: &Value,
    dns: &Value,
    days: i64,
    ca: &Certificate,
    pem: &str,
) -> Result<Certificate, String> {
    signed_with_key(cn, ips, dns, days, ca, &pem_key(pem)?)
}

/// `buildCustomCert`.
pub(crate) fn build_custom_cert(b64cert: &str, b64key: &str) -> Result<Certificate, String> {
    let strip = |s: &str| -> String { s.chars().filter(|&c| c != '\r' && c != '\n').collect() };
    let cert = STANDARD
        .decode(strip(b64cert))
        .map_err(|_| "unable to decode base64 certificate".to_string())?;
    let key = STANDARD
        .decode(strip(b64key))
        .map_err(|_| "unable to decode base64 private key".to_string())?;
    let cert = String::from_utf8_lossy(&cert).into_owned();
    let key = String::from_utf8_lossy(&key).into_owned();
    let Some((_, der_bytes)) = der::pem_decode(&cert) else {
        return Err("unable to decode certificate".into());
    };
    x509_parser::parse_x509_certificate(&der_bytes).map_err(|e| {
        format!("error parsing certificate: decodedCert.Bytes: x509: malformed certificate ({e})")
    })?;
    parse_private_key_pem(&key).map_err(|e| format!("error parsing private key: {e}"))?;
    Ok(Certificate { cert, key })
}

/// Turns a `Result<Certificate, String>` into a template result.
pub(crate) fn ret(r: Result<Certificate, String>) -> Result<Value, FuncError> {
    r.map(cert_value).map_err(FuncError::new)
}
