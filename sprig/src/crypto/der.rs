//! A small DER writer and reader (just what certificates and Go's key formats need) and
//! Go's PEM encoding and decoding.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

pub(crate) const SEQUENCE: u8 = 0x30;
pub(crate) const SET: u8 = 0x31;
pub(crate) const INTEGER: u8 = 0x02;
pub(crate) const BIT_STRING: u8 = 0x03;
pub(crate) const OCTET_STRING: u8 = 0x04;
pub(crate) const NULL: u8 = 0x05;
pub(crate) const OID: u8 = 0x06;
pub(crate) const BOOLEAN: u8 = 0x01;
pub(crate) const UTF8_STRING: u8 = 0x0c;
pub(crate) const PRINTABLE_STRING: u8 = 0x13;
pub(crate) const UTC_TIME: u8 = 0x17;
pub(crate) const GENERALIZED_TIME: u8 = 0x18;

/// A TLV with the given tag.
pub(crate) fn tlv(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![tag];
    let n = content.len();
    if n < 0x80 {
        out.push(n as u8);
    } else {
        let bytes: Vec<u8> = n
            .to_be_bytes()
            .iter()
            .copied()
            .skip_while(|&b| b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend(bytes);
    }
    out.extend_from_slice(content);
    out
}

/// A SEQUENCE of already encoded parts.
pub(crate) fn seq(parts: &[Vec<u8>]) -> Vec<u8> {
    tlv(SEQUENCE, &parts.concat())
}

/// A non-negative INTEGER from big-endian magnitude bytes.
pub(crate) fn uint(be: &[u8]) -> Vec<u8> {
    let trimmed: Vec<u8> = be.iter().copied().skip_while(|&b| b == 0).collect();
    let mut body = Vec::with_capacity(trimmed.len() + 1);
    if trimmed.first().is_none_or(|&b| b & 0x80 != 0) {
        body.push(0);
    }
    body.extend(trimmed);
    tlv(INTEGER, &body)
}

/// A small INTEGER.
pub(crate) fn small_int(v: u8) -> Vec<u8> {
    uint(&[v])
}

/// An OBJECT IDENTIFIER from its arcs.
pub(crate) fn oid(arcs: &[u64]) -> Vec<u8> {
    let mut body = Vec::new();
    let first = arcs.first().copied().unwrap_or(0) * 40 + arcs.get(1).copied().unwrap_or(0);
    let mut push = |mut v: u64| {
        let mut tmp = vec![(v & 0x7f) as u8];
        v >>= 7;
        while v > 0 {
            tmp.push(0x80 | (v & 0x7f) as u8);
            v >>= 7;
        }
        tmp.reverse();
        body.extend(tmp);
    };
    push(first);
    for &a in arcs.iter().skip(2) {
        push(a);
    }
    tlv(OID, &body)
}

/// A BIT STRING with no unused bits.
pub(crate) fn bit_string(bytes: &[u8]) -> Vec<u8> {
    let mut body = vec![0];
    body.extend_from_slice(bytes);
    tlv(BIT_STRING, &body)
}

/// A parsed TLV.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tlv<'a> {
    pub(crate) tag: u8,
    pub(crate) content: &'a [u8],
}

/// Reads one TLV from the front of `input`, returning it and the rest.
pub(crate) fn read_tlv(input: &[u8]) -> Option<(Tlv<'_>, &[u8])> {
    let (&tag, rest) = input.split_first()?;
    let (&len0, rest) = rest.split_first()?;
    let (len, rest) = if len0 < 0x80 {
        (usize::from(len0), rest)
    } else {
        let n = usize::from(len0 & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return None;
    }
    Some((
        Tlv {
            tag,
            content: &rest[..len],
        },
        &rest[len..],
    ))
}

/// The TLVs inside a constructed value.
pub(crate) fn children(mut content: &[u8]) -> Option<Vec<Tlv<'_>>> {
    let mut out = Vec::new();
    while !content.is_empty() {
        let (t, rest) = read_tlv(content)?;
        out.push(t);
        content = rest;
    }
    Some(out)
}

/// Go's `pem.EncodeToMemory`: 64-column base64 lines.
pub(crate) fn pem_encode(label: &str, der: &[u8]) -> String {
    let b64 = STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(chunk));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

/// The first PEM block in `input` (Go's `pem.Decode`, without header support): its type
/// and decoded bytes.
pub(crate) fn pem_decode(input: &str) -> Option<(String, Vec<u8>)> {
    let mut rest = input;
    loop {
        let start = rest.find("-----BEGIN ")?;
        let after = &rest[start + 11..];
        let end_label = after.find("-----")?;
        let label = &after[..end_label];
        let body_start = &after[end_label + 5..];
        let end_marker = format!("-----END {label}-----");
        if label.contains('\n') {
            rest = after;
            continue;
        }
        let Some(end) = body_start.find(&end_marker) else {
            rest = after;
            continue;
        };
        let body: String = body_start[..end]
            .lines()
            .filter(|l| !l.contains(':'))
            .flat_map(|l| l.chars())
            .filter(|c| !c.is_whitespace())
            .collect();
        match STANDARD.decode(body.as_bytes()) {
            Ok(bytes) => return Some((label.to_string(), bytes)),
            Err(_) => {
                rest = after;
                continue;
            }
        }
    }
}
