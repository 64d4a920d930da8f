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
        serde_json::from_slice(bytes)
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
        if !v.windows(2).all(|w| w[0].0 < w[1].0) {
            // Sort, keeping the last of equal keys.
            v.reverse();
            v.sort_by(|a, b| a.0.cmp(&b.0));
            v.dedup_by(|later, earlier| later.0 == earlier.0);
        }
        Ok(J::Obj(v))
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
