//! The data model: what go-yaml v2 produces when it decodes into `interface{}`.

use std::fmt;

/// A YAML value as go-yaml v2 sees it.
///
/// `Int` is Go's `int` (64-bit), `Uint` is the `uint64` go-yaml v2 produces for integers above
/// `i64::MAX`, `Float` is `float64`. `Bytes` is a Go string that is not valid UTF-8 (what a
/// `!!binary` scalar decodes to when its payload is not text); the emitter writes it back as
/// `!!binary`.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Value {
    /// `null`, `~`, an empty node.
    #[default]
    Null,
    /// A YAML 1.1 boolean.
    Bool(bool),
    /// An integer that fits Go's `int`.
    Int(i64),
    /// An integer above `i64::MAX` (Go `uint64`).
    Uint(u64),
    /// A float (Go `float64`), including `.inf` and `.nan`.
    Float(f64),
    /// A string.
    String(String),
    /// A Go string holding bytes that are not valid UTF-8.
    Bytes(Vec<u8>),
    /// A sequence.
    Seq(Vec<Value>),
    /// A mapping, in insertion order (callers decide sorting).
    Map(Mapping),
}

impl Value {
    /// Go's name for the dynamic type, as `%T` prints it for decoded values.
    pub fn go_type_name(&self) -> &'static str {
        match self {
            Value::Null => "<nil>",
            Value::Bool(_) => "bool",
            Value::Int(_) => "int",
            Value::Uint(_) => "uint64",
            Value::Float(_) => "float64",
            Value::String(_) | Value::Bytes(_) => "string",
            Value::Seq(_) => "[]interface {}",
            Value::Map(_) => "map[interface {}]interface {}",
        }
    }

    /// The string, when this is a `String`.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The mapping, when this is a `Map`.
    pub fn as_map(&self) -> Option<&Mapping> {
        match self {
            Value::Map(m) => Some(m),
            _ => None,
        }
    }

    /// The sequence, when this is a `Seq`.
    pub fn as_seq(&self) -> Option<&[Value]> {
        match self {
            Value::Seq(s) => Some(s),
            _ => None,
        }
    }

    /// Looks a string key up in a mapping.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.as_map().and_then(|m| m.get_str(key))
    }

    /// Whether two values are equal as Go map keys (`==` on interface values): same dynamic
    /// type and same value. `NaN` never equals itself, as in Go.
    pub fn key_eq(&self, other: &Value) -> bool {
        match (self, other) {
            (Value::Null, Value::Null) => true,
            (Value::Bool(a), Value::Bool(b)) => a == b,
            (Value::Int(a), Value::Int(b)) => a == b,
            (Value::Uint(a), Value::Uint(b)) => a == b,
            (Value::Float(a), Value::Float(b)) => a == b,
            (Value::String(a), Value::String(b)) => a == b,
            (Value::Bytes(a), Value::Bytes(b)) => a == b,
            _ => false,
        }
    }
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::String(s.to_owned())
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::String(s)
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::Bool(b)
    }
}

impl From<i64> for Value {
    fn from(i: i64) -> Self {
        Value::Int(i)
    }
}

impl From<f64> for Value {
    fn from(f: f64) -> Self {
        Value::Float(f)
    }
}

impl From<Vec<Value>> for Value {
    fn from(v: Vec<Value>) -> Self {
        Value::Seq(v)
    }
}

impl From<Mapping> for Value {
    fn from(m: Mapping) -> Self {
        Value::Map(m)
    }
}

/// An insertion-ordered mapping whose keys are any scalar [`Value`].
///
/// Setting a key that is already present replaces its value in place (Go map semantics, with
/// the first position kept).
#[derive(Clone, PartialEq, Default)]
pub struct Mapping {
    entries: Vec<(Value, Value)>,
}

impl fmt::Debug for Mapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.entries.iter().map(|(k, v)| (k, v)))
            .finish()
    }
}

impl Mapping {
    /// An empty mapping.
    pub fn new() -> Self {
        Mapping::default()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the mapping has no entries.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Sets `key` to `value`, replacing the value of an equal key in place.
    pub fn insert(&mut self, key: Value, value: Value) {
        if let Some(slot) = self.entries.iter_mut().find(|(k, _)| k.key_eq(&key)) {
            slot.1 = value;
        } else {
            self.entries.push((key, value));
        }
    }

    /// Appends without looking for an equal key (the caller knows it is new).
    pub(crate) fn push_unchecked(&mut self, key: Value, value: Value) {
        self.entries.push((key, value));
    }

    /// A mapping of entries whose keys the caller knows to be distinct.
    pub(crate) fn from_entries_unchecked(entries: Vec<(Value, Value)>) -> Self {
        Mapping { entries }
    }

    /// The position of a key equal to `key` (Go's `==`).
    pub(crate) fn position(&self, key: &Value) -> Option<usize> {
        self.entries.iter().position(|(k, _)| k.key_eq(key))
    }

    /// Replaces the value at `index`.
    pub(crate) fn set_at(&mut self, index: usize, value: Value) {
        if let Some(slot) = self.entries.get_mut(index) {
            slot.1 = value;
        }
    }

    /// The value of an equal key.
    pub fn get(&self, key: &Value) -> Option<&Value> {
        self.entries
            .iter()
            .find(|(k, _)| k.key_eq(key))
            .map(|(_, v)| v)
    }

    /// The value of a string key.
    pub fn get_str(&self, key: &str) -> Option<&Value> {
        self.entries
            .iter()
            .find(|(k, _)| k.as_str() == Some(key))
            .map(|(_, v)| v)
    }

    /// Entries in order.
    pub fn iter(&self) -> impl Iterator<Item = (&Value, &Value)> {
        self.entries.iter().map(|(k, v)| (k, v))
    }

    /// Keys in order.
    pub fn keys(&self) -> impl Iterator<Item = &Value> {
        self.entries.iter().map(|(k, _)| k)
    }

    /// Sorts the entries with go-yaml v2's key order (what `yaml.Marshal` of a Go map does).
    pub fn sort_go_yaml(&mut self) {
        crate::sort::sort_entries(&mut self.entries);
    }

    /// Consumes the mapping into its entries.
    pub fn into_entries(self) -> Vec<(Value, Value)> {
        self.entries
    }
}

impl FromIterator<(Value, Value)> for Mapping {
    fn from_iter<T: IntoIterator<Item = (Value, Value)>>(iter: T) -> Self {
        let mut m = Mapping::new();
        for (k, v) in iter {
            m.insert(k, v);
        }
        m
    }
}

impl IntoIterator for Mapping {
    type Item = (Value, Value);
    type IntoIter = std::vec::IntoIter<(Value, Value)>;
    fn into_iter(self) -> Self::IntoIter {
        self.entries.into_iter()
    }
}
