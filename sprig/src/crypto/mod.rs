//! Sprig's hash and crypto functions: `sha1sum`, `sha256sum`, `sha512sum`, `adler32sum`,
//! `bcrypt`, `htpasswd`, `randBytes`, `derivePassword`, `genPrivateKey`, the certificate
//! family (`genCA`, `genSelfSignedCert`, `genSignedCert`, their `WithKey` forms,
//! `buildCustomCert`) and `encryptAES`/`decryptAES`.

mod cert;
mod der;
mod keys;
#[cfg(target_arch = "x86_64")]
mod lanes;
mod prime;
mod sign;

use aes::cipher::{BlockDecryptMut, BlockEncryptMut, KeyIvInit};
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use flotilla_gotmpl::{ArgType, FuncError, FuncMap, Function, Signature, Value};
use hmac::Mac;
use rand_core::{OsRng, RngCore};
use sha2::Digest;

use cert::CERT_TYPE;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// See [`crate::expect_rsa_keys`].
pub(crate) fn expect_rsa_2048_keys(count: impl FnOnce() -> usize + Send + 'static) {
    prime::expect_keys_2048(Box::new(count));
}

/// See [`crate::generate_rsa_private_key_pem`].
pub(crate) fn generate_rsa_private_key_pem(bits: usize) -> Result<String, String> {
    keys::generate_rsa(bits)?.to_pem()
}

/// Sprig's `bcrypt`: cost 10, `$2a$` prefix, Go's error text for long passwords.
pub fn bcrypt_hash(input: &str) -> String {
    if input.len() > 72 {
        return "failed to encrypt string with bcrypt: bcrypt: password length exceeds 72 bytes"
            .into();
    }
    match bcrypt::hash_with_result(input, 10) {
        Ok(parts) => parts.format_for_version(bcrypt::Version::TwoA),
        Err(e) => format!("failed to encrypt string with bcrypt: {e}"),
    }
}

/// Sprig's `htpasswd`.
pub fn htpasswd(user: &str, password: &str) -> String {
    if user.contains(':') {
        return format!("invalid username: {user}");
    }
    format!("{user}:{}", bcrypt_hash(password))
}

const PASSWORD_SEED: &str = "com.lyndir.masterpassword";

fn password_templates(kind: &str) -> Option<&'static [&'static str]> {
    Some(match kind {
        "maximum" => &["anoxxxxxxxxxxxxxxxxx", "axxxxxxxxxxxxxxxxxno"],
        "long" => &[
            "CvcvnoCvcvCvcv",
            "CvcvCvcvnoCvcv",
            "CvcvCvcvCvcvno",
            "CvccnoCvcvCvcv",
            "CvccCvcvnoCvcv",
            "CvccCvcvCvcvno",
            "CvcvnoCvccCvcv",
            "CvcvCvccnoCvcv",
            "CvcvCvccCvcvno",
            "CvcvnoCvcvCvcc",
            "CvcvCvcvnoCvcc",
            "CvcvCvcvCvccno",
            "CvccnoCvccCvcv",
            "CvccCvccnoCvcv",
            "CvccCvccCvcvno",
            "CvcvnoCvccCvcc",
            "CvcvCvccnoCvcc",
            "CvcvCvccCvccno",
            "CvccnoCvcvCvcc",
            "CvccCvcvnoCvcc",
            "CvccCvcvCvccno",
        ],
        "medium" => &["CvcnoCvc", "CvcCvcno"],
        "short" => &["Cvcn"],
        "basic" => &["aaanaaan", "aannaaan", "aaannaaa"],
        "pin" => &["nnnn"],
        _ => return None,
    })
}

fn template_chars(c: u8) -> &'static [u8] {
    match c {
        b'V' => b"AEIOU",
        b'C' => b"BCDFGHJKLMNPQRSTVWXYZ",
        b'v' => b"aeiou",
        b'c' => b"bcdfghjklmnpqrstvwxyz",
        b'A' => b"AEIOUBCDFGHJKLMNPQRSTVWXYZ",
        b'a' => b"AEIOUaeiouBCDFGHJKLMNPQRSTVWXYZbcdfghjklmnpqrstvwxyz",
        b'n' => b"0123456789",
        b'o' => b"@&%?,=[]_:-+*$#!'^~;()/.",
        _ => b"AEIOUaeiouBCDFGHJKLMNPQRSTVWXYZbcdfghjklmnpqrstvwxyz0123456789!@#$%^&*()",
    }
}

/// Sprig's `derivePassword` (the Master Password algorithm).
pub fn derive_password(counter: u32, kind: &str, password: &str, user: &str, site: &str) -> String {
    let Some(templates) = password_templates(kind) else {
        return format!("cannot find password template {kind}");
    };
    let mut salt = PASSWORD_SEED.as_bytes().to_vec();
    salt.extend((user.len() as u32).to_be_bytes());
    salt.extend(user.as_bytes());
    let mut key = [0u8; 64];
    let derived = scrypt::Params::new(15, 8, 2, 64)
        .map_err(|e| e.to_string())
        .and_then(|p| {
            scrypt::scrypt(password.as_bytes(), &salt, &p, &mut key).map_err(|e| e.to_string())
        });
    if let Err(e) = derived {
        return format!("failed to derive password: {e}");
    }
    let mut msg = PASSWORD_SEED.as_bytes().to_vec();
    msg.extend((site.len() as u32).to_be_bytes());
    msg.extend(site.as_bytes());
    msg.extend(counter.to_be_bytes());
    let Ok(mut mac) = hmac::Hmac::<sha2::Sha256>::new_from_slice(&key) else {
        return "failed to derive password: hmac".into();
    };
    mac.update(&msg);
    let seed = mac.finalize().into_bytes();
    let template = templates[usize::from(seed[0]) % templates.len()].as_bytes();
    template
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            let chars = template_chars(c);
            char::from(chars[usize::from(seed[i + 1]) % chars.len()])
        })
        .collect()
}

type Aes256CbcEnc = cbc::Encryptor<aes::Aes256>;
type Aes256CbcDec = cbc::Decryptor<aes::Aes256>;

fn aes_key(password: &str) -> [u8; 32] {
    let mut key = [0u8; 32];
    let n = password.len().min(32);
    key[..n].copy_from_slice(&password.as_bytes()[..n]);
    key
}

/// Sprig's `encryptAES`: AES-256-CBC, PKCS#7 padding, random IV, base64(IV || ciphertext).
pub fn encrypt_aes(password: &str, plaintext: &str) -> String {
    if plaintext.is_empty() {
        return String::new();
    }
    let mut data = plaintext.as_bytes().to_vec();
    let pad = 16 - data.len() % 16;
    data.extend(std::iter::repeat_n(pad as u8, pad));
    let mut iv = [0u8; 16];
    OsRng.fill_bytes(&mut iv);
    let mut enc = Aes256CbcEnc::new(&aes_key(password).into(), &iv.into());
    for block in data.chunks_exact_mut(16) {
        enc.encrypt_block_mut(block.into());
    }
    let mut out = iv.to_vec();
    out.extend(data);
    STANDARD.encode(out)
}

/// Go's `base64.StdEncoding.DecodeString` (newlines ignored) with its error text.
fn go_b64_decode(s: &str) -> Result<Vec<u8>, String> {
    let clean: String = s.chars().filter(|&c| c != '\r' && c != '\n').collect();
    STANDARD.decode(clean.as_bytes()).map_err(|e| match e {
        base64::DecodeError::InvalidByte(i, _) => format!("illegal base64 data at input byte {i}"),
        base64::DecodeError::InvalidLastSymbol(i, _) => {
            format!("illegal base64 data at input byte {i}")
        }
        _ => format!("illegal base64 data at input byte {}", clean.len() / 4 * 4),
    })
}

/// Sprig's `decryptAES`, with the runtime panics Go produces on malformed input.
pub fn decrypt_aes(password: &str, crypt64: &str) -> Result<String, String> {
    if crypt64.is_empty() {
        return Ok(String::new());
    }
    let crypt = go_b64_decode(crypt64)?;
    if crypt.len() < 16 {
        let cap = crypt64.len() / 4 * 3;
        return Err(format!(
            "runtime error: slice bounds out of range [:16] with capacity {cap}"
        ));
    }
    let (iv, body) = crypt.split_at(16);
    if body.len() % 16 != 0 {
        return Err("crypto/cipher: input not full blocks".into());
    }
    if body.is_empty() {
        return Err("runtime error: index out of range [-1]".into());
    }
    let mut data = body.to_vec();
    let iv: [u8; 16] = iv.try_into().map_err(|_| "iv".to_string())?;
    let mut dec = Aes256CbcDec::new(&aes_key(password).into(), &iv.into());
    for block in data.chunks_exact_mut(16) {
        dec.decrypt_block_mut(block.into());
    }
    let pad = usize::from(data[data.len() - 1]);
    if pad > data.len() {
        return Err(format!(
            "runtime error: slice bounds out of range [:-{}]",
            pad - data.len()
        ));
    }
    data.truncate(data.len() - pad);
    Ok(String::from_utf8_lossy(&data).into_owned())
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(i) | Value::Int64(i) => *i,
        _ => 0,
    }
}

/// A hash of a Go string's bytes (UTF-8 or not: `.Files.Get "x.gz" | sha256sum`).
fn hash_fn(f: fn(&[u8]) -> String) -> Function {
    Function::new(Signature::fixed([ArgType::GoString]), move |a| {
        Ok(Value::string(f(a[0].as_go_bytes().unwrap_or_default())))
    })
}

pub(crate) fn register(map: &mut FuncMap) {
    use ArgType::{Int, List, Object as Obj, String as Str, Uint32};
    map.insert("sha1sum", hash_fn(|b| hex(&sha1::Sha1::digest(b))));
    map.insert("sha256sum", hash_fn(|b| hex(&sha2::Sha256::digest(b))));
    map.insert("sha512sum", hash_fn(|b| hex(&sha2::Sha512::digest(b))));
    map.insert(
        "adler32sum",
        hash_fn(|b| {
            let mut a = adler2::Adler32::new();
            a.write_slice(b);
            a.checksum().to_string()
        }),
    );
    map.insert(
        "bcrypt",
        Function::new(Signature::fixed([Str]), |a| {
            Ok(Value::string(bcrypt_hash(s(&a[0]))))
        }),
    );
    map.insert(
        "htpasswd",
        Function::new(Signature::fixed([Str, Str]), |a| {
            Ok(Value::string(htpasswd(s(&a[0]), s(&a[1]))))
        }),
    );
    map.insert(
        "randBytes",
        Function::new(Signature::fixed([Int]), |a| {
            let n = int(&a[0]);
            if !(0..=1 << 30).contains(&n) {
                return Err(FuncError::new("runtime error: makeslice: len out of range"));
            }
            let mut buf = vec![0u8; n as usize];
            OsRng.fill_bytes(&mut buf);
            Ok(Value::string(STANDARD.encode(buf)))
        }),
    );
    map.insert(
        "derivePassword",
        Function::new(Signature::fixed([Uint32, Str, Str, Str, Str]), |a| {
            let counter = match &a[0] {
                Value::Uint64(u) => *u as u32,
                other => int(other) as u32,
            };
            Ok(Value::string(derive_password(
                counter,
                s(&a[1]),
                s(&a[2]),
                s(&a[3]),
                s(&a[4]),
            )))
        }),
    );
    map.insert(
        "genPrivateKey",
        Function::new(Signature::fixed([Str]), |a| {
            Ok(Value::string(keys::gen_private_key(s(&a[0]))))
        }),
    );
    map.insert(
        "buildCustomCert",
        Function::new(Signature::fixed([Str, Str]), |a| {
            cert::ret(cert::build_custom_cert(s(&a[0]), s(&a[1])))
        }),
    );
    map.insert(
        "genCA",
        Function::new(Signature::fixed([Str, Int]), |a| {
            cert::ret(cert::gen_ca(s(&a[0]), int(&a[1])))
        }),
    );
    map.insert(
        "genCAWithKey",
        Function::new(Signature::fixed([Str, Int, Str]), |a| {
            cert::ret(cert::gen_ca_with_key(s(&a[0]), int(&a[1]), s(&a[2])))
        }),
    );
    map.insert(
        "genSelfSignedCert",
        Function::new(Signature::fixed([Str, List, List, Int]), |a| {
            cert::ret(cert::gen_self_signed(s(&a[0]), &a[1], &a[2], int(&a[3])))
        }),
    );
    map.insert(
        "genSelfSignedCertWithKey",
        Function::new(Signature::fixed([Str, List, List, Int, Str]), |a| {
            cert::ret(cert::gen_self_signed_with_key(
                s(&a[0]),
                &a[1],
                &a[2],
                int(&a[3]),
                s(&a[4]),
            ))
        }),
    );
    map.insert(
        "genSignedCert",
        Function::new(
            Signature::fixed([Str, List, List, Int, Obj(CERT_TYPE)]),
            |a| {
                let ca = cert::cert_arg(&a[4]);
                cert::ret(cert::gen_signed(s(&a[0]), &a[1], &a[2], int(&a[3]), &ca))
            },
        ),
    );
    map.insert(
        "genSignedCertWithKey",
        Function::new(
            Signature::fixed([Str, List, List, Int, Obj(CERT_TYPE), Str]),
            |a| {
                let ca = cert::cert_arg(&a[4]);
                cert::ret(cert::gen_signed_with_key(
                    s(&a[0]),
                    &a[1],
                    &a[2],
                    int(&a[3]),
                    &ca,
                    s(&a[5]),
                ))
            },
        ),
    );
    map.insert(
        "encryptAES",
        Function::new(Signature::fixed([Str, Str]), |a| {
            Ok(Value::string(encrypt_aes(s(&a[0]), s(&a[1]))))
        }),
    );
    map.insert(
        "decryptAES",
        Function::new(Signature::fixed([Str, Str]), |a| {
            decrypt_aes(s(&a[0]), s(&a[1]))
                .map(Value::string)
                .map_err(FuncError::new)
        }),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aes_round_trip_and_panics() {
        for text in ["x", "exactly sixteen!", "a longer plaintext with ünïcode"] {
            let c = encrypt_aes("secret", text);
            assert_eq!(decrypt_aes("secret", &c).as_deref(), Ok(text));
        }
        assert_eq!(encrypt_aes("k", ""), "");
        assert_eq!(
            decrypt_aes("k", "YWJj"),
            Err("runtime error: slice bounds out of range [:16] with capacity 3".into())
        );
    }

    #[test]
    fn bcrypt_and_htpasswd() {
        let h = htpasswd("admin", "pw");
        let (user, hash) = h.split_once(':').expect("colon");
        assert_eq!(user, "admin");
        assert!(hash.starts_with("$2a$10$"));
        assert!(bcrypt::verify("pw", hash).expect("verify"));
        assert_eq!(htpasswd("a:b", "pw"), "invalid username: a:b");
    }
}
