//! RSA PKCS#1 v1.5 signatures with SHA-256 (what Go's `x509.CreateCertificate` makes for an
//! RSA issuer), the private-key operation computed by the Chinese remainder theorem on
//! [`super::prime::Modulus`]'s Montgomery arithmetic. The `rsa` crate's signing spent ~21 M
//! instructions on one 2048-bit signature (three `num-bigint-dig` exponentiations: the two CRT
//! halves and its check with `e`); here the two halves cost ~4.4 M each and the check with `e`,
//! kept, ~0.4 M. A PKCS#1 v1.5 signature is a function of the key and the message alone, so
//! the bytes are the same as the `rsa` crate's (a unit test compares them).

use rsa::traits::{PrivateKeyParts, PublicKeyParts};
use rsa::{BigUint, RsaPrivateKey};
use sha2::{Digest, Sha256};

use super::prime::{Modulus, from_biguint, to_biguint};

/// The PKCS#1 v1.5 signature of `msg`'s SHA-256 digest, `None` when the key is not one the
/// fast path covers (two primes of at most 2048 bits whose CRT values are precomputed) or
/// the result fails its check, so that the caller falls back to the `rsa` crate.
pub(crate) fn sign_sha256(key: &RsaPrivateKey, msg: &[u8]) -> Option<Vec<u8>> {
    let k = key.size();
    let digest = Sha256::digest(msg);
    let prefix = rsa::Pkcs1v15Sign::new::<Sha256>().prefix;
    let t_len = prefix.len() + digest.len();
    if k < t_len + 11 {
        return None;
    }
    // EM = 0x00 0x01 FF..FF 0x00 DigestInfo(digest)
    let mut em = vec![0xff; k];
    em[0] = 0;
    em[1] = 1;
    em[k - t_len - 1] = 0;
    em[k - t_len..k - digest.len()].copy_from_slice(&prefix);
    em[k - digest.len()..].copy_from_slice(&digest);
    let s = private_op(key, &BigUint::from_bytes_be(&em))?;
    let bytes = s.to_bytes_be();
    let mut sig = vec![0u8; k.checked_sub(bytes.len())?];
    sig.extend_from_slice(&bytes);
    Some(sig)
}

/// `m^d mod n` by the CRT, for a two-prime key, checked as the `rsa` crate checks it:
/// `s^e = m (mod n)`.
fn private_op(key: &RsaPrivateKey, m: &BigUint) -> Option<BigUint> {
    let [p, q] = key.primes() else {
        return None;
    };
    match p.bits().max(q.bits()).div_ceil(64) {
        ..=8 => crt::<8, 16>(key, p, q, m),
        9..=16 => crt::<16, 32>(key, p, q, m),
        17..=24 => crt::<24, 48>(key, p, q, m),
        25..=32 => crt::<32, 64>(key, p, q, m),
        _ => None,
    }
}

/// The CRT for primes of at most `64N` bits and a modulus of at most `64M` (= `128N`).
fn crt<const N: usize, const M: usize>(
    key: &RsaPrivateKey,
    p: &BigUint,
    q: &BigUint,
    m: &BigUint,
) -> Option<BigUint> {
    let s1 = pow_mod::<N>(&(m % p), key.dp()?, p)?;
    let s2 = pow_mod::<N>(&(m % q), key.dq()?, q)?;
    let qinv = key.qinv()?.to_biguint()?;
    // s = s2 + q (qinv (s1 - s2) mod p)
    let diff = (s1 + p - (&s2 % p)) % p;
    let h = (qinv * diff) % p;
    let s = s2 + h * q;
    (pow_mod::<M>(&s, key.e(), key.n())? == *m).then_some(s)
}

/// `x^e mod m` for an odd `m` of at most `64N` bits, `x < m` and `e < 2^(64N)`.
fn pow_mod<const N: usize>(x: &BigUint, e: &BigUint, m: &BigUint) -> Option<BigUint> {
    if x >= m {
        return None;
    }
    let md = Modulus::<N>::new(from_biguint::<N>(m)?)?;
    let base = md.enter(&from_biguint::<N>(x)?);
    let r = md.leave(&md.pow(&base, &from_biguint::<N>(e)?));
    Some(to_biguint(&r))
}

#[cfg(test)]
mod tests {
    use rand_core::OsRng;
    use rsa::signature::{SignatureEncoding, Signer};

    use super::*;

    fn rsa_crate_signature(key: &RsaPrivateKey, msg: &[u8]) -> Vec<u8> {
        rsa::pkcs1v15::SigningKey::<Sha256>::new(key.clone())
            .sign(msg)
            .to_vec()
    }

    /// Same bytes as the `rsa` crate's signature, for keys from our generation and from its
    /// own (odd sizes, primes of unequal length).
    #[test]
    fn signatures_equal_the_rsa_crates() {
        let msgs: [&[u8]; 3] = [b"", b"tbsCertificate", &[0xa5; 1000]];
        for bits in [1024, 2048] {
            let Ok(super::super::keys::PrivKey::Rsa(key)) = super::super::keys::generate_rsa(bits)
            else {
                panic!("an RSA key of {bits} bits");
            };
            for msg in msgs {
                assert_eq!(
                    sign_sha256(&key, msg),
                    Some(rsa_crate_signature(&key, msg)),
                    "{bits}-bit key"
                );
            }
        }
        for bits in [768, 1000, 1538] {
            let key = RsaPrivateKey::new(&mut OsRng, bits).expect("rsa crate key");
            for msg in msgs {
                assert_eq!(
                    sign_sha256(&key, msg),
                    Some(rsa_crate_signature(&key, msg)),
                    "{bits}-bit key from the rsa crate"
                );
            }
        }
    }

    #[test]
    fn keys_too_small_for_the_padding_are_left_to_the_rsa_crate() {
        let key = RsaPrivateKey::new(&mut OsRng, 256).expect("rsa crate key");
        assert_eq!(sign_sha256(&key, b"x"), None);
    }
}
