//! `b64enc`/`b64dec`/`b32enc`/`b32dec` with Go's standard encodings. Decoding errors are not
//! template errors: Sprig returns the error text (`illegal base64 data at input byte N`)
//! as the result, with Go's offsets.

use flotilla_gotmpl::{ArgType, FuncMap, Signature, Value};

use super::{add, arg_bytes, bytes_value};

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
const B32: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

pub(crate) fn register(map: &mut FuncMap) {
    // Go strings in and out: binary data (`.Files.Get "x.gz" | b64enc`) keeps its bytes.
    let sig = || Signature::fixed([ArgType::GoString]);
    add(map, "b64enc", sig(), |a| {
        Ok(Value::from(b64_encode(arg_bytes(a, 0))))
    });
    add(map, "b64dec", sig(), |a| {
        Ok(match b64_decode(arg_bytes(a, 0)) {
            Ok(b) => bytes_value(&b),
            Err(at) => Value::from(format!("illegal base64 data at input byte {at}")),
        })
    });
    add(map, "b32enc", sig(), |a| {
        Ok(Value::from(b32_encode(arg_bytes(a, 0))))
    });
    add(map, "b32dec", sig(), |a| {
        Ok(match b32_decode(arg_bytes(a, 0)) {
            Ok(b) => bytes_value(&b),
            Err(at) => Value::from(format!("illegal base32 data at input byte {at}")),
        })
    });
}

pub(crate) fn b64_encode(src: &[u8]) -> String {
    let mut out = String::with_capacity(src.len().div_ceil(3) * 4);
    for chunk in src.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let v = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(B64[(v >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn b64_value(c: u8) -> Option<u8> {
    B64.iter().position(|&x| x == c).map(|p| p as u8)
}

/// Go's `base64.StdEncoding.DecodeString`; the error is the input offset Go reports.
fn b64_decode(src: &[u8]) -> Result<Vec<u8>, usize> {
    let mut out = Vec::with_capacity(src.len() / 4 * 3);
    let mut si = 0usize;
    while si < src.len() {
        let mut dbuf = [0u8; 4];
        let mut dlen = 4;
        let mut j = 0usize;
        let mut trailing_err = None;
        while j < 4 {
            if si == src.len() {
                if j == 0 {
                    return Ok(out);
                }
                return Err(si - j);
            }
            let c = src[si];
            si += 1;
            if let Some(v) = b64_value(c) {
                dbuf[j] = v;
                j += 1;
                continue;
            }
            if c == b'\n' || c == b'\r' {
                continue;
            }
            if c != b'=' {
                return Err(si - 1);
            }
            // Padding.
            match j {
                0 | 1 => return Err(si - 1),
                2 => {
                    while si < src.len() && (src[si] == b'\n' || src[si] == b'\r') {
                        si += 1;
                    }
                    if si == src.len() {
                        return Err(src.len());
                    }
                    if src[si] != b'=' {
                        return Err(si - 1);
                    }
                    si += 1;
                }
                _ => {}
            }
            while si < src.len() && (src[si] == b'\n' || src[si] == b'\r') {
                si += 1;
            }
            if si < src.len() {
                trailing_err = Some(si);
            }
            dlen = j;
            break;
        }
        let val = u32::from(dbuf[0]) << 18
            | u32::from(dbuf[1]) << 12
            | u32::from(dbuf[2]) << 6
            | u32::from(dbuf[3]);
        let bytes = [(val >> 16) as u8, (val >> 8) as u8, val as u8];
        out.extend_from_slice(&bytes[..dlen - 1]);
        if let Some(at) = trailing_err {
            return Err(at);
        }
    }
    Ok(out)
}

pub(crate) fn b32_encode(src: &[u8]) -> String {
    let mut out = String::with_capacity(src.len().div_ceil(5) * 8);
    for chunk in src.chunks(5) {
        let mut b = [0u8; 5];
        b[..chunk.len()].copy_from_slice(chunk);
        let v = b.iter().fold(0u64, |acc, &x| acc << 8 | u64::from(x));
        let used = match chunk.len() {
            1 => 2,
            2 => 4,
            3 => 5,
            4 => 7,
            _ => 8,
        };
        for i in 0..8 {
            if i < used {
                out.push(char::from(B32[(v >> (35 - 5 * i) & 31) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Go's `base32.StdEncoding.DecodeString` (newlines are stripped first).
fn b32_decode(input: &[u8]) -> Result<Vec<u8>, usize> {
    let src: Vec<u8> = input
        .iter()
        .copied()
        .filter(|&c| c != b'\n' && c != b'\r')
        .collect();
    let olen = src.len();
    let mut rest: &[u8] = &src;
    let mut out = Vec::with_capacity(olen / 8 * 5);
    let mut end = false;
    while !rest.is_empty() && !end {
        let mut dbuf = [0u8; 8];
        let mut dlen = 8;
        let mut j = 0usize;
        while j < 8 {
            if rest.is_empty() {
                return Err(olen - rest.len() - j);
            }
            let c = rest[0];
            rest = &rest[1..];
            if c == b'=' && j >= 2 && rest.len() < 8 {
                if rest.len() + j < 7 {
                    return Err(olen);
                }
                for k in 0..7 - j {
                    if rest.len() > k && rest[k] != b'=' {
                        return Err(olen - rest.len() + k - 1);
                    }
                }
                dlen = j;
                end = true;
                if matches!(dlen, 1 | 3 | 6) {
                    return Err(olen - rest.len() - 1);
                }
                break;
            }
            match B32.iter().position(|&x| x == c) {
                Some(v) => dbuf[j] = v as u8,
                None => return Err(olen - rest.len() - 1),
            }
            j += 1;
        }
        let d = dbuf;
        let bytes = [
            d[0] << 3 | d[1] >> 2,
            d[1] << 6 | d[2] << 1 | d[3] >> 4,
            d[3] << 4 | d[4] >> 1,
            d[4] << 7 | d[5] << 2 | d[6] >> 3,
            d[6] << 5 | d[7],
        ];
        let n = match dlen {
            8 => 5,
            7 => 4,
            5 => 3,
            4 => 2,
            2 => 1,
            _ => 0,
        };
        out.extend_from_slice(&bytes[..n]);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        for s in ["", "f", "fo", "foo", "foob", "fooba", "foobar"] {
            assert_eq!(
                b64_decode(b64_encode(s.as_bytes()).as_bytes()).unwrap(),
                s.as_bytes()
            );
            assert_eq!(
                b32_decode(b32_encode(s.as_bytes()).as_bytes()).unwrap(),
                s.as_bytes()
            );
        }
        assert_eq!(b64_encode(b"foobar"), "Zm9vYmFy");
        assert_eq!(b32_encode(b"foobar"), "MZXW6YTBOI======");
        assert_eq!(b64_decode(b"Zm9v!"), Err(4));
    }
}
