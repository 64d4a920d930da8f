//! A `values.schema.json` document read for validation: strings and keys borrow the file's
//! bytes where they hold no escapes, objects are vectors sorted by key (binary search, and the
//! same order as `serde_json::Map`), so reading a large schema costs few allocations.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Number, Value};

/// One JSON value of a schema document.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum J<'a> {
    Null,
    Bool(bool),
    Num(Number),
    Str(Cow<'a, str>),
    Arr(Vec<J<'a>>),
    /// Sorted by key, keys unique (the last of duplicates wins, as in Go and serde_json).
    Obj(Vec<(Cow<'a, str>, J<'a>)>),
}

impl<'a> J<'a> {
    pub(crate) fn parse(bytes: &'a [u8]) -> Result<J<'a>, serde_json::Error> {
        // The common document goes through the direct reader; anything it does not take
        // (errors first) is read by serde_json, which gives the same tree or the error.
        match Fast::read(bytes) {
            Some(j) => Ok(j),
            None => serde_json::from_slice(bytes),
        }
    }

    pub(crate) fn get(&self, key: &str) -> Option<&J<'a>> {
        match self {
            J::Obj(m) => obj_get(m, key),
            _ => None,
        }
    }

    pub(crate) fn as_str(&self) -> Option<&str> {
        match self {
            J::Str(s) => Some(s),
            _ => None,
        }
    }

    pub(crate) fn as_f64(&self) -> Option<f64> {
        match self {
            J::Num(n) => n.as_f64(),
            _ => None,
        }
    }

    pub(crate) fn as_array(&self) -> Option<&[J<'a>]> {
        match self {
            J::Arr(a) => Some(a),
            _ => None,
        }
    }

    pub(crate) fn as_object(&self) -> Option<&[(Cow<'a, str>, J<'a>)]> {
        match self {
            J::Obj(m) => Some(m),
            _ => None,
        }
    }

    /// The same value as a `serde_json::Value` (for messages and the fallback validator).
    pub(crate) fn to_value(&self) -> Value {
        match self {
            J::Null => Value::Null,
            J::Bool(b) => Value::Bool(*b),
            J::Num(n) => Value::Number(n.clone()),
            J::Str(s) => Value::String(s.to_string()),
            J::Arr(a) => Value::Array(a.iter().map(J::to_value).collect()),
            J::Obj(m) => Value::Object(
                m.iter()
                    .map(|(k, v)| (k.to_string(), v.to_value()))
                    .collect(),
            ),
        }
    }
}

pub(crate) fn obj_get<'m, 'a>(m: &'m [(Cow<'a, str>, J<'a>)], key: &str) -> Option<&'m J<'a>> {
    m.binary_search_by(|(k, _)| k.as_ref().cmp(key))
        .ok()
        .map(|i| &m[i].1)
}

/// A direct reader of the JSON that schemas are made of, building the same tree as the
/// serde_json visitor below in one pass over the bytes: strings without escapes, integers
/// up to 19 digits, nesting up to 100 levels. It answers `None` on anything else (escaped
/// strings and other numbers are handed to serde_json one at a time; syntax errors, control
/// characters, invalid UTF-8 and deeper nesting make the whole document go to serde_json).
struct Fast<'a> {
    s: &'a str,
    b: &'a [u8],
    i: usize,
    depth: usize,
}

/// Deepest nesting the direct reader follows (serde_json's own limit is 128).
const FAST_MAX_DEPTH: usize = 100;

impl<'a> Fast<'a> {
    fn read(b: &'a [u8]) -> Option<J<'a>> {
        let s = std::str::from_utf8(b).ok()?;
        let mut p = Fast {
            s,
            b,
            i: 0,
            depth: 0,
        };
        p.ws();
        let v = p.value()?;
        p.ws();
        (p.i == b.len()).then_some(v)
    }

    fn ws(&mut self) {
        loop {
            // Indentation eight spaces at a time.
            if self.b.get(self.i..self.i + 8) == Some(b"        ") {
                self.i += 8;
            } else if matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
                self.i += 1;
            } else {
                break;
            }
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn value(&mut self) -> Option<J<'a>> {
        match self.peek()? {
            b'{' => self.object(),
            b'[' => self.array(),
            b'"' => Some(J::Str(self.string()?)),
            b't' => self.word(b"true", J::Bool(true)),
            b'f' => self.word(b"false", J::Bool(false)),
            b'n' => self.word(b"null", J::Null),
            b'-' | b'0'..=b'9' => self.number(),
            _ => None,
        }
    }

    fn word(&mut self, w: &[u8], v: J<'a>) -> Option<J<'a>> {
        (self.b.get(self.i..self.i + w.len())? == w).then(|| {
            self.i += w.len();
            v
        })
    }

    fn digits(&mut self) -> usize {
        let n = self
            .b
            .get(self.i..)
            .unwrap_or_default()
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        self.i += n;
        n
    }

    fn number(&mut self) -> Option<J<'a>> {
        let start = self.i;
        let negative = self.peek() == Some(b'-');
        if negative {
            self.i += 1;
        }
        let int_start = self.i;
        let n = self.digits();
        if n == 0 || (n > 1 && self.b[int_start] == b'0') {
            return None;
        }
        let mut plain = !negative && n <= 19;
        if self.peek() == Some(b'.') {
            self.i += 1;
            if self.digits() == 0 {
                return None;
            }
            plain = false;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if self.digits() == 0 {
                return None;
            }
            plain = false;
        }
        if plain {
            // A non-negative integer of at most 19 digits fits a u64, as serde_json reads it.
            let v = self.b[int_start..self.i]
                .iter()
                .fold(0u64, |acc, d| acc * 10 + u64::from(d - b'0'));
            return Some(J::Num(v.into()));
        }
        // Other numbers are read by serde_json itself (negative zero, floats, overflow).
        let n: Number = serde_json::from_slice(&self.b[start..self.i]).ok()?;
        Some(J::Num(n))
    }

    fn string(&mut self) -> Option<Cow<'a, str>> {
        const ONES: u64 = u64::from_ne_bytes([1; 8]);
        const HIGH: u64 = u64::from_ne_bytes([0x80; 8]);
        let open = self.i;
        let mut j = open + 1;
        let mut escaped = false;
        // Eight bytes at a time while none is a quote, a backslash or a control character
        // (the test may also flag a neighbour of one: those bytes are then taken one by one).
        while let Some(chunk) = self.b.get(j..j + 8) {
            let x = u64::from_ne_bytes(chunk.try_into().expect("8 bytes"));
            let zero_at = |y: u64| y.wrapping_sub(ONES) & !y;
            let special = zero_at(x ^ (ONES * u64::from(b'"')))
                | zero_at(x ^ (ONES * u64::from(b'\\')))
                | (x.wrapping_sub(ONES * 0x20) & !x);
            if special & HIGH != 0 {
                break;
            }
            j += 8;
        }
        loop {
            match *self.b.get(j)? {
                b'"' => break,
                b'\\' => {
                    escaped = true;
                    j += 2;
                }
                c if c < 0x20 => return None,
                _ => j += 1,
            }
        }
        self.i = j + 1;
        if escaped {
            let s: String = serde_json::from_slice(&self.b[open..=j]).ok()?;
            Some(Cow::Owned(s))
        } else {
            // Both ends are at ASCII quotes of a document known to be UTF-8.
            Some(Cow::Borrowed(self.s.get(open + 1..j)?))
        }
    }

    fn enter(&mut self) -> Option<()> {
        self.depth += 1;
        self.i += 1;
        self.ws();
        (self.depth <= FAST_MAX_DEPTH).then_some(())
    }

    fn array(&mut self) -> Option<J<'a>> {
        self.enter()?;
        let mut v = Vec::new();
        if self.peek()? == b']' {
            self.i += 1;
        } else {
            loop {
                v.push(self.value()?);
                self.ws();
                match self.peek()? {
                    b',' => {
                        self.i += 1;
                        self.ws();
                    }
                    b']' => {
                        self.i += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        self.depth -= 1;
        Some(J::Arr(v))
    }

    fn object(&mut self) -> Option<J<'a>> {
        self.enter()?;
        let mut v: Vec<(Cow<'a, str>, J<'a>)> = Vec::new();
        if self.peek()? == b'}' {
            self.i += 1;
        } else {
            loop {
                if self.peek()? != b'"' {
                    return None;
                }
                let k = self.string()?;
                self.ws();
                if self.peek()? != b':' {
                    return None;
                }
                self.i += 1;
                self.ws();
                let x = self.value()?;
                v.push((k, x));
                self.ws();
                match self.peek()? {
                    b',' => {
                        self.i += 1;
                        self.ws();
                    }
                    b'}' => {
                        self.i += 1;
                        break;
                    }
                    _ => return None,
                }
            }
        }
        self.depth -= 1;
        Some(J::Obj(sorted(v)))
    }
}

/// Entries sorted by key, the last of equal keys kept.
fn sorted<'a>(mut v: Vec<(Cow<'a, str>, J<'a>)>) -> Vec<(Cow<'a, str>, J<'a>)> {
    if !v.windows(2).all(|w| w[0].0 < w[1].0) {
        v.reverse();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v.dedup_by(|later, earlier| later.0 == earlier.0);
    }
    v
}

struct JVisitor;

impl<'de> Visitor<'de> for JVisitor {
    type Value = J<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, b: bool) -> Result<J<'de>, E> {
        Ok(J::Bool(b))
    }

    fn visit_i64<E>(self, n: i64) -> Result<J<'de>, E> {
        Ok(J::Num(n.into()))
    }

    fn visit_u64<E>(self, n: u64) -> Result<J<'de>, E> {
        Ok(J::Num(n.into()))
    }

    fn visit_f64<E>(self, f: f64) -> Result<J<'de>, E> {
        Ok(Number::from_f64(f).map_or(J::Null, J::Num))
    }

    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<J<'de>, E> {
        Ok(J::Str(Cow::Borrowed(s)))
    }

    fn visit_str<E>(self, s: &str) -> Result<J<'de>, E> {
        Ok(J::Str(Cow::Owned(s.to_owned())))
    }

    fn visit_string<E>(self, s: String) -> Result<J<'de>, E> {
        Ok(J::Str(Cow::Owned(s)))
    }

    fn visit_unit<E>(self) -> Result<J<'de>, E> {
        Ok(J::Null)
    }

    fn visit_none<E>(self) -> Result<J<'de>, E> {
        Ok(J::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<J<'de>, A::Error> {
        let mut v = Vec::new();
        while let Some(x) = seq.next_element()? {
            v.push(x);
        }
        Ok(J::Arr(v))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<J<'de>, A::Error> {
        let mut v: Vec<(Cow<'de, str>, J<'de>)> = Vec::new();
        while let Some(Key(k)) = map.next_key()? {
            let x = map.next_value()?;
            v.push((k, x));
        }
        Ok(J::Obj(sorted(v)))
    }
}

impl<'de> Deserialize<'de> for J<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<J<'de>, D::Error> {
        d.deserialize_any(JVisitor)
    }
}

struct Key<'a>(Cow<'a, str>);

struct KeyVisitor;

impl<'de> Visitor<'de> for KeyVisitor {
    type Value = Key<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_borrowed_str<E>(self, s: &'de str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Borrowed(s)))
    }

    fn visit_str<E>(self, s: &str) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(s.to_owned())))
    }

    fn visit_string<E>(self, s: String) -> Result<Key<'de>, E> {
        Ok(Key(Cow::Owned(s)))
    }
}

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Key<'de>, D::Error> {
        d.deserialize_str(KeyVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every schema of the chart corpus, when it is there.
    fn corpus_schemas() -> Vec<Vec<u8>> {
        fn walk(dir: &std::path::Path, out: &mut Vec<Vec<u8>>) {
            let Ok(entries) = std::fs::read_dir(dir) else {
                return;
            };
            for e in entries.flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, out);
                } else if p.file_name().is_some_and(|n| n == "values.schema.json") {
                    out.push(std::fs::read(&p).expect("readable schema"));
                }
            }
        }
        let mut out = Vec::new();
        walk(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/charts"),
            &mut out,
        );
        out
    }

    #[test]
    fn direct_reader_builds_serde_json_tree_or_declines() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        let mut texts: Vec<Vec<u8>> = [
            "0",
            "-0",
            "01",
            "-01",
            "1.0",
            "1e5",
            "1E+2",
            "-5",
            "-9223372036854775808",
            "-9223372036854775809",
            "9999999999999999999",
            "18446744073709551615",
            "18446744073709551616",
            "1.",
            ".5",
            "1e",
            "1e+",
            "-",
            "[-]",
            "[1e400]",
            "2.5e-3",
            "\"a\\u00e9\\n\"",
            "\"\\ud800\"",
            "\"\\ud83d\\ude00\"",
            "\"\\x\"",
            "\"é\"",
            "\"a\tb\"",
            "[1,]",
            "{\"a\":1,}",
            " {\"b\":1 , \"a\" : [true,false,null] } ",
            "{\"a\":1,\"a\":2,\"b\":{},\"a\":3}",
            "",
            "  ",
            "[1 2]",
            "tru",
            "nul",
            "[true]x",
            "{\"a\" 1}",
            "{1:2}",
            "[\"unterminated]",
            "{\"\\\"q\":[{}]}",
            "\t\r\n[]\n",
        ]
        .iter()
        .map(|t| t.as_bytes().to_vec())
        .collect();
        texts.push(b"\"\xff\"".to_vec());
        texts.push(b"[\"ok\", \"\xc3\"]".to_vec());
        texts.push(deep(100).into_bytes());
        texts.push(deep(101).into_bytes());
        texts.push(deep(128).into_bytes());
        texts.push(deep(129).into_bytes());
        let corpus = corpus_schemas();
        let from_corpus = corpus.len();
        texts.extend(corpus);
        let mut taken = 0;
        for (n, text) in texts.iter().enumerate() {
            let serde: Option<J<'_>> = serde_json::from_slice(text).ok();
            match Fast::read(text) {
                Some(j) => {
                    assert_eq!(
                        Some(&j),
                        serde.as_ref(),
                        "{}",
                        String::from_utf8_lossy(text)
                    );
                    if n + from_corpus >= texts.len() {
                        taken += 1;
                    }
                }
                // Declining is always allowed; the corpus documents must not be declined.
                None => assert!(
                    n + from_corpus < texts.len(),
                    "corpus schema declined: {}",
                    String::from_utf8_lossy(&text[..text.len().min(200)])
                ),
            }
        }
        assert_eq!(taken, from_corpus);
        // What serde_json refuses, the parse refuses too.
        assert!(J::parse(b"[1,]").is_err());
        assert!(J::parse(b"{\"a\":01}").is_err());
    }

    #[test]
    fn reads_as_serde_json_does() {
        let text = br#"{"b": [1, -2, 2.5, 1e400, "x\u0041", null, true], "a": {"z": 1, "y": {}}, "b": 3, "": ""}"#;
        // 1e400 is out of range for both.
        assert!(J::parse(text).is_err());
        assert!(serde_json::from_slice::<Value>(text).is_err());
        let text = br#"{"b": [1, -2, 2.5, 18446744073709551615, "x\u0041", null, true], "a": {"z": 1, "y": {}}, "b": 3, "": "", "c": {"b": 1, "b": 2, "a": 0}}"#;
        let j = J::parse(text).unwrap();
        let v: Value = serde_json::from_slice(text).unwrap();
        assert_eq!(j.to_value(), v);
        let keys: Vec<&str> = j
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, _)| k.as_ref())
            .collect();
        assert_eq!(keys, ["", "a", "b", "c"]);
        assert_eq!(j.get("b"), Some(&J::Num(3.into())));
        assert_eq!(j.get("c").and_then(|c| c.get("b")), Some(&J::Num(2.into())));
        assert!(matches!(
            j.get("a").and_then(|a| a.get("z")),
            Some(J::Num(_))
        ));
        assert_eq!(j.get("nope"), None);
    }
}
