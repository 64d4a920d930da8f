//! `--set`, `--set-string`, `--set-json` and `--set-file` parsing, as Helm's `pkg/strvals`
//! (typed values, `[N]` list indices, `\`-escapes, `{a,b}` lists, error texts), and the
//! Helm CLI's assembly of user values (`values.Options.MergeValues`).
//!
//! The parser writes into a [`Tree`]: [`Values`] for the public `parse_*` functions, or a
//! caller's own tree through [`parse_into_tree`]. Helm parses into Go maps and slices, which
//! are references: a map already in the destination is changed in place, and so is a list
//! when the index is inside it (a longer list is a new one). A caller whose destination
//! shares nodes with other values (Flux's `valuesFrom` `targetPath`) implements [`Tree`] with
//! shared nodes to see those changes where Go would.

use serde_json::{Map, Value};

use crate::gofmt::go_type;
use crate::values::{Values, ValuesError, merge_maps};
use flotilla_gotmpl::gofmt::{quote as go_quote, quote_rune as go_quote_rune};

/// Largest list index accepted.
pub const MAX_INDEX: usize = 65536;
/// Deepest `a.b.c` nesting accepted.
pub const MAX_NESTED_NAME_LEVEL: usize = 30;

/// A `--set`-style parse error, with Helm's text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct StrvalsError(pub String);

/// What reads a value: typed, string, JSON or file.
enum Mode<'r> {
    Typed,
    String,
    Json,
    File(&'r mut dyn FnMut(&str) -> Result<Value, String>),
    Literal,
}

#[derive(Debug)]
enum Stop {
    Eof,
    Err(StrvalsError),
}

impl From<StrvalsError> for Stop {
    fn from(e: StrvalsError) -> Self {
        Stop::Err(e)
    }
}

fn err(s: impl Into<String>) -> Stop {
    Stop::Err(StrvalsError(s.into()))
}

struct Parser<'s, 'r> {
    chars: Vec<char>,
    pos: usize,
    mode: Mode<'r>,
    _src: &'s str,
}

/// `strvals.ParseInto` (`--set`): typed values.
pub fn parse_into(s: &str, dest: &mut Values) -> Result<(), StrvalsError> {
    run::<JsonTree>(s, dest, Mode::Typed)
}

/// `strvals.ParseIntoString` (`--set-string`).
pub fn parse_into_string(s: &str, dest: &mut Values) -> Result<(), StrvalsError> {
    run::<JsonTree>(s, dest, Mode::String)
}

/// `strvals.ParseJSON` (`--set-json` in `key=json` form).
pub fn parse_json(s: &str, dest: &mut Values) -> Result<(), StrvalsError> {
    run::<JsonTree>(s, dest, Mode::Json)
}

/// `strvals.ParseIntoFile` (`--set-file`): `reader` turns the path into the value (the CLI
/// reads the file as a string).
pub fn parse_into_file(
    s: &str,
    dest: &mut Values,
    reader: &mut dyn FnMut(&str) -> Result<Value, String>,
) -> Result<(), StrvalsError> {
    run::<JsonTree>(s, dest, Mode::File(reader))
}

/// `strvals.ParseLiteralInto` (`--set-literal`): no escapes, no lists, the value is the
/// rest of the string.
pub fn parse_literal_into(s: &str, dest: &mut Values) -> Result<(), StrvalsError> {
    run::<JsonTree>(s, dest, Mode::Literal)
}

/// `strvals.Parse`: a fresh map from one `--set` string.
pub fn parse(s: &str) -> Result<Values, StrvalsError> {
    let mut m = Values::new();
    parse_into(s, &mut m)?;
    Ok(m)
}

/// What the parser finds at a key or an index of a [`Tree`].
#[derive(Debug)]
pub enum Node<M, L> {
    /// Nothing there (a key not set, an index past the end).
    Absent,
    /// A map (for a tree with shared nodes, a handle to the same map).
    Map(M),
    /// A list (likewise).
    List(L),
    /// Anything else: `null`, a boolean, a number or a string (Go's type of it names it in
    /// errors).
    Scalar(Value),
}

/// The destination of a `--set` string: maps and lists the parser looks into and writes.
///
/// The parser takes a node out of its parent ([`Tree::get`], [`Tree::list_get`]), works on it
/// and puts it back ([`Tree::set`], [`Tree::list_set`]). With owned nodes ([`Values`]) that is
/// a copy; with shared nodes (handles) it is Go's in-place change of the same map or list.
pub trait Tree {
    /// A map node.
    type Map;
    /// A list node.
    type List;
    /// Any node.
    type Value;
    /// The node at `key`.
    fn get(map: &Self::Map, key: &str) -> Node<Self::Map, Self::List>;
    /// Sets `key` (never empty).
    fn set(map: &mut Self::Map, key: &str, value: Self::Value);
    /// Whether the map has no keys.
    fn is_empty(map: &Self::Map) -> bool;
    /// A new empty map.
    fn new_map() -> Self::Map;
    /// A new empty list.
    fn new_list() -> Self::List;
    /// The node at index `i`.
    fn list_get(list: &Self::List, i: usize) -> Node<Self::Map, Self::List>;
    /// Go's `setIndex` once the index is checked: `list[i] = value` in place when `i` is
    /// inside the list; otherwise `list` becomes a new list of `i + 1` elements (the old ones,
    /// then nulls) with `value` last.
    fn list_set(list: &mut Self::List, i: usize, value: Self::Value);
    /// A map as a node.
    fn from_map(map: Self::Map) -> Self::Value;
    /// A list as a node.
    fn from_list(list: Self::List) -> Self::Value;
    /// A parsed value (a scalar, a `{a,b}` list, a `--set-json` value or a file's value) as
    /// a new node.
    fn from_json(value: Value) -> Self::Value;
}

/// [`Values`] as a [`Tree`]: owned nodes.
#[derive(Debug, Clone, Copy)]
pub enum JsonTree {}

impl Tree for JsonTree {
    type Map = Values;
    type List = Vec<Value>;
    type Value = Value;

    fn get(map: &Values, key: &str) -> Node<Values, Vec<Value>> {
        json_node(map.get(key))
    }

    fn set(map: &mut Values, key: &str, value: Value) {
        map.insert(key.to_owned(), value);
    }

    fn is_empty(map: &Values) -> bool {
        map.is_empty()
    }

    fn new_map() -> Values {
        Values::new()
    }

    fn new_list() -> Vec<Value> {
        Vec::new()
    }

    fn list_get(list: &Vec<Value>, i: usize) -> Node<Values, Vec<Value>> {
        json_node(list.get(i))
    }

    fn list_set(list: &mut Vec<Value>, i: usize, value: Value) {
        if list.len() <= i {
            list.resize(i + 1, Value::Null);
        }
        list[i] = value;
    }

    fn from_map(map: Values) -> Value {
        Value::Object(map)
    }

    fn from_list(list: Vec<Value>) -> Value {
        Value::Array(list)
    }

    fn from_json(value: Value) -> Value {
        value
    }
}

fn json_node(v: Option<&Value>) -> Node<Values, Vec<Value>> {
    match v {
        None => Node::Absent,
        Some(Value::Object(m)) => Node::Map(m.clone()),
        Some(Value::Array(l)) => Node::List(l.clone()),
        Some(other) => Node::Scalar(other.clone()),
    }
}

/// [`parse_into`] (`as_string` false) or [`parse_into_string`] (true) into any [`Tree`].
pub fn parse_into_tree<T: Tree>(
    s: &str,
    dest: &mut T::Map,
    as_string: bool,
) -> Result<(), StrvalsError> {
    run::<T>(s, dest, if as_string { Mode::String } else { Mode::Typed })
}

fn run<T: Tree>(s: &str, dest: &mut T::Map, mode: Mode<'_>) -> Result<(), StrvalsError> {
    let mut p = Parser {
        chars: s.chars().collect(),
        pos: 0,
        mode,
        _src: s,
    };
    loop {
        match p.key::<T>(dest, 0) {
            Ok(()) => {}
            Err(Stop::Eof) => return Ok(()),
            Err(Stop::Err(e)) => return Err(e),
        }
    }
}

fn eq_fold(a: &str, b: &str) -> bool {
    a.eq_ignore_ascii_case(b)
}

/// `typedVal`: `true`/`false`/`null` (any case), `0`, base-10 int64 without a leading zero;
/// everything else a string.
pub fn typed_val(v: &str, as_string: bool) -> Value {
    if as_string {
        return Value::String(v.to_owned());
    }
    if eq_fold(v, "true") {
        return Value::Bool(true);
    }
    if eq_fold(v, "false") {
        return Value::Bool(false);
    }
    if eq_fold(v, "null") {
        return Value::Null;
    }
    if v == "0" {
        return Value::from(0i64);
    }
    if !v.is_empty()
        && !v.starts_with('0')
        && let Ok(i) = v.parse::<i64>()
    {
        return Value::from(i);
    }
    Value::String(v.to_owned())
}

fn set<T: Tree>(data: &mut T::Map, key: &str, val: T::Value) {
    if key.is_empty() {
        return;
    }
    T::set(data, key, val);
}

/// Go's name of the type of a node that is not the one wanted.
fn go_type_of<M, L>(n: &Node<M, L>) -> &'static str {
    match n {
        Node::Absent => "nil",
        Node::Map(_) => "map[string]interface {}",
        Node::List(_) => "[]interface {}",
        Node::Scalar(v) => go_type(v),
    }
}

fn set_index<T: Tree>(list: &mut T::List, index: i64, val: T::Value) -> Result<(), Stop> {
    if index < 0 {
        return Err(err(format!("negative {index} index not allowed")));
    }
    let i = usize::try_from(index).unwrap_or(usize::MAX);
    if i > MAX_INDEX {
        return Err(err(format!(
            "index of {index} is greater than maximum supported index of {MAX_INDEX}"
        )));
    }
    T::list_set(list, i, val);
    Ok(())
}

impl Parser<'_, '_> {
    fn read(&mut self) -> Option<char> {
        let c = self.chars.get(self.pos).copied();
        if c.is_some() {
            self.pos += 1;
        }
        c
    }

    fn unread(&mut self) {
        self.pos = self.pos.saturating_sub(1);
    }

    /// `runesUntil`: reads up to a stop rune, honouring `\` escapes.
    fn until(&mut self, stop: &[char]) -> (String, Option<char>) {
        let mut v = String::new();
        loop {
            match self.read() {
                None => return (v, None),
                Some(c) if stop.contains(&c) => return (v, Some(c)),
                Some('\\') if !matches!(self.mode, Mode::Literal) => match self.read() {
                    None => return (v, None),
                    Some(n) => v.push(n),
                },
                Some(c) => v.push(c),
            }
        }
    }

    fn reader(&mut self, rs: &str) -> Result<Value, Stop> {
        match &mut self.mode {
            Mode::Typed => Ok(typed_val(rs, false)),
            Mode::String => Ok(typed_val(rs, true)),
            Mode::Json => Ok(typed_val(rs, false)),
            Mode::Literal => Ok(Value::String(rs.to_owned())),
            Mode::File(f) => f(rs).map_err(err),
        }
    }

    /// The rest of the input (a `--set-literal` value).
    fn rest(&mut self) -> String {
        let v: String = self.chars[self.pos..].iter().collect();
        self.pos = self.chars.len();
        v
    }

    fn key<T: Tree>(&mut self, data: &mut T::Map, nested: usize) -> Result<(), Stop> {
        let literal = matches!(self.mode, Mode::Literal);
        let stop: &[char] = if literal {
            &['=', '[', '.']
        } else {
            &['=', '[', ',', '.']
        };
        let (k, last) = self.until(stop);
        match last {
            None => {
                if k.is_empty() {
                    return Err(Stop::Eof);
                }
                Err(err(format!("key {} has no value", go_quote(&k))))
            }
            Some('[') => {
                let i = self
                    .key_index()
                    .map_err(|e| err(format!("error parsing index: {e}")))?;
                let mut list = match T::get(data, &k) {
                    Node::Absent => T::new_list(),
                    Node::List(l) => l,
                    other => {
                        return Err(err(format!(
                            "unable to parse key: interface conversion: interface {{}} is {}, not []interface {{}}",
                            go_type_of(&other)
                        )));
                    }
                };
                let r = self.list_item::<T>(&mut list, i, nested);
                set::<T>(data, &k, T::from_list(list));
                r
            }
            Some('=') => {
                if literal {
                    let v = self.rest();
                    set::<T>(data, &k, T::from_json(Value::String(v)));
                    return Ok(());
                }
                if matches!(self.mode, Mode::Json) {
                    if self.empty_val() {
                        set::<T>(data, &k, T::from_json(Value::Null));
                        return Ok(());
                    }
                    let v = self.json_value()?;
                    set::<T>(data, &k, T::from_json(v));
                    self.empty_val();
                    return Ok(());
                }
                match self.val_list() {
                    Ok(vl) => {
                        set::<T>(data, &k, T::from_json(Value::Array(vl)));
                        Ok(())
                    }
                    Err(ListErr::Eof) => {
                        set::<T>(data, &k, T::from_json(Value::String(String::new())));
                        Err(Stop::Eof)
                    }
                    Err(ListErr::NotList) => {
                        let (rs, _) = self.until(&[',']);
                        let v = self.reader(&rs);
                        match v {
                            Ok(v) => {
                                set::<T>(data, &k, T::from_json(v));
                                Ok(())
                            }
                            Err(e) => {
                                set::<T>(data, &k, T::from_json(Value::Null));
                                Err(e)
                            }
                        }
                    }
                    Err(ListErr::Other(e)) => Err(e),
                }
            }
            Some(',') => {
                set::<T>(data, &k, T::from_json(Value::String(String::new())));
                Err(err(format!(
                    "key {} has no value (cannot end with ,)",
                    go_quote(&k)
                )))
            }
            _ => {
                let nested = nested + 1;
                if nested > MAX_NESTED_NAME_LEVEL {
                    return Err(err(format!(
                        "value name nested level is greater than maximum supported nested level of {MAX_NESTED_NAME_LEVEL}"
                    )));
                }
                let mut inner = match T::get(data, &k) {
                    Node::Absent => T::new_map(),
                    Node::Map(m) => m,
                    other => {
                        return Err(err(format!(
                            "unable to parse key: interface conversion: interface {{}} is {}, not map[string]interface {{}}",
                            go_type_of(&other)
                        )));
                    }
                };
                let e = self.key::<T>(&mut inner, nested);
                if e.is_ok() && T::is_empty(&inner) {
                    return Err(err(format!("key map {} has no value", go_quote(&k))));
                }
                if !T::is_empty(&inner) {
                    set::<T>(data, &k, T::from_map(inner));
                }
                e
            }
        }
    }

    fn key_index(&mut self) -> Result<i64, String> {
        let (v, last) = self.until(&[']']);
        if last.is_none() {
            return Err("EOF".to_owned());
        }
        go_atoi(&v)
    }

    fn json_value(&mut self) -> Result<Value, Stop> {
        let rest: String = self.chars[self.pos..].iter().collect();
        let mut stream = serde_json::Deserializer::from_str(&rest).into_iter::<Value>();
        match stream.next() {
            Some(Ok(v)) => {
                let used = stream.byte_offset();
                self.pos += rest[..used].chars().count();
                Ok(json_numbers_as_floats(v))
            }
            Some(Err(e)) => Err(err(e.to_string())),
            None => Err(err("EOF")),
        }
    }

    fn list_item<T: Tree>(
        &mut self,
        list: &mut T::List,
        i: i64,
        nested: usize,
    ) -> Result<(), Stop> {
        if i < 0 {
            return Err(err(format!("negative {i} index not allowed")));
        }
        let (k, last) = self.until(&['[', '.', '=']);
        if !k.is_empty() {
            let runes: Vec<String> = k.chars().map(go_quote_rune).collect();
            return Err(err(format!(
                "unexpected data at end of array index: [{}]",
                runes.join(" ")
            )));
        }
        let iu = usize::try_from(i).unwrap_or(usize::MAX);
        match last {
            None => Err(Stop::Eof),
            Some('=') => {
                if matches!(self.mode, Mode::Literal) {
                    let v = self.rest();
                    return set_index::<T>(list, i, T::from_json(Value::String(v)));
                }
                if matches!(self.mode, Mode::Json) {
                    if self.empty_val() {
                        return set_index::<T>(list, i, T::from_json(Value::Null));
                    }
                    let v = self.json_value()?;
                    set_index::<T>(list, i, T::from_json(v))?;
                    self.empty_val();
                    return Ok(());
                }
                match self.val_list() {
                    Ok(vl) => set_index::<T>(list, i, T::from_json(Value::Array(vl))),
                    Err(ListErr::Eof) => {
                        set_index::<T>(list, i, T::from_json(Value::String(String::new())))
                    }
                    Err(ListErr::NotList) => {
                        let (rs, _) = self.until(&[',']);
                        let v = self.reader(&rs)?;
                        set_index::<T>(list, i, T::from_json(v))
                    }
                    Err(ListErr::Other(e)) => Err(e),
                }
            }
            Some('[') => {
                let next = self
                    .key_index()
                    .map_err(|e| err(format!("error parsing index: {e}")))?;
                let mut crt = match T::list_get(list, iu) {
                    Node::Absent | Node::Scalar(Value::Null) => T::new_list(),
                    Node::List(l) => l,
                    other => {
                        return Err(err(format!(
                            "unable to parse key: interface conversion: interface {{}} is {}, not []interface {{}}",
                            go_type_of(&other)
                        )));
                    }
                };
                self.list_item::<T>(&mut crt, next, nested)?;
                set_index::<T>(list, i, T::from_list(crt))
            }
            _ => {
                let mut inner = match T::list_get(list, iu) {
                    Node::Map(m) => m,
                    _ => T::new_map(),
                };
                self.key::<T>(&mut inner, nested)?;
                set_index::<T>(list, i, T::from_map(inner))
            }
        }
    }

    /// `emptyVal`: skips spaces; true at the end or at a `,`.
    fn empty_val(&mut self) -> bool {
        loop {
            match self.read() {
                None | Some(',') => return true,
                Some(c) if c.is_whitespace() => {}
                Some(_) => {
                    self.unread();
                    return false;
                }
            }
        }
    }

    fn val_list(&mut self) -> Result<Vec<Value>, ListErr> {
        match self.read() {
            None => return Err(ListErr::Eof),
            Some('{') => {}
            Some(_) => {
                self.unread();
                return Err(ListErr::NotList);
            }
        }
        let mut list = Vec::new();
        loop {
            let (rs, last) = self.until(&[',', '}']);
            match last {
                None => return Err(ListErr::Other(err("list must terminate with '}'"))),
                Some('}') => {
                    match self.read() {
                        Some(',') | None => {}
                        Some(_) => self.unread(),
                    }
                    let v = self.reader(&rs).map_err(ListErr::Other)?;
                    list.push(v);
                    return Ok(list);
                }
                _ => {
                    let v = self.reader(&rs).map_err(ListErr::Other)?;
                    list.push(v);
                }
            }
        }
    }
}

enum ListErr {
    Eof,
    NotList,
    Other(Stop),
}

/// Go's `strconv.Atoi` with its error text.
fn go_atoi(s: &str) -> Result<i64, String> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "strconv.Atoi: parsing {}: invalid syntax",
            go_quote(s)
        ));
    }
    s.parse::<i64>()
        .map_err(|_| format!("strconv.Atoi: parsing {}: value out of range", go_quote(s)))
}

/// encoding/json decodes every number as float64.
pub(crate) fn json_numbers_as_floats(v: Value) -> Value {
    match v {
        Value::Number(n) => crate::values::float(n.as_f64().unwrap_or(0.0)),
        Value::Array(a) => Value::Array(a.into_iter().map(json_numbers_as_floats).collect()),
        Value::Object(m) => Value::Object(
            m.into_iter()
                .map(|(k, v)| (k, json_numbers_as_floats(v)))
                .collect(),
        ),
        other => other,
    }
}

/// The user-supplied values inputs of a Helm command, in the order Helm applies them.
#[derive(Debug, Clone, Default)]
pub struct ValueOptions {
    /// `-f` files (already read: name and contents).
    pub value_files: Vec<(String, Vec<u8>)>,
    /// `--set-json`.
    pub json_values: Vec<String>,
    /// `--set`.
    pub values: Vec<String>,
    /// `--set-string`.
    pub string_values: Vec<String>,
    /// `--set-file` (`key=path`); paths are read by the reader given to [`ValueOptions::merge`].
    pub file_values: Vec<String>,
    /// `--set-literal`.
    pub literal_values: Vec<String>,
}

/// An error assembling user values, in the Helm CLI's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionsError {
    /// A `-f` file.
    #[error(transparent)]
    File(#[from] ValuesError),
    /// `--set-json` whole-object form.
    #[error("failed parsing --set-json data JSON: {0}")]
    JsonObject(String),
    /// `--set-json` key=value form.
    #[error("failed parsing --set-json data {0}")]
    Json(String),
    /// `--set`.
    #[error("failed parsing --set data: {0}")]
    Set(StrvalsError),
    /// `--set-string`.
    #[error("failed parsing --set-string data: {0}")]
    SetString(StrvalsError),
    /// `--set-file`.
    #[error("failed parsing --set-file data: {0}")]
    SetFile(StrvalsError),
    /// `--set-literal`.
    #[error("failed parsing --set-literal data: {0}")]
    SetLiteral(StrvalsError),
}

impl ValueOptions {
    /// `values.Options.MergeValues`: `-f` files merged in order (later wins, maps merged
    /// deeply), then `--set-json`, `--set`, `--set-string`, `--set-file`, `--set-literal`.
    pub fn merge(
        &self,
        read_file: &mut dyn FnMut(&str) -> Result<Value, String>,
    ) -> Result<Values, OptionsError> {
        let mut base = Values::new();
        for (name, data) in &self.value_files {
            let cur = crate::values::load_values_bytes(data).map_err(|e| ValuesError::File {
                path: name.clone(),
                source: Box::new(e),
            })?;
            base = merge_maps(base, cur);
        }
        for value in &self.json_values {
            let t = value.trim();
            if t.starts_with('{') {
                let m: Map<String, Value> =
                    serde_json::from_str(t).map_err(|_| OptionsError::JsonObject(value.clone()))?;
                let m = match json_numbers_as_floats(Value::Object(m)) {
                    Value::Object(m) => m,
                    _ => Map::new(),
                };
                base = merge_maps(base, m);
            } else {
                parse_json(value, &mut base).map_err(|_| OptionsError::Json(value.clone()))?;
            }
        }
        for value in &self.values {
            parse_into(value, &mut base).map_err(OptionsError::Set)?;
        }
        for value in &self.string_values {
            parse_into_string(value, &mut base).map_err(OptionsError::SetString)?;
        }
        for value in &self.file_values {
            parse_into_file(value, &mut base, read_file).map_err(OptionsError::SetFile)?;
        }
        for value in &self.literal_values {
            parse_literal_into(value, &mut base).map_err(OptionsError::SetLiteral)?;
        }
        Ok(base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p(s: &str) -> Value {
        Value::Object(parse(s).unwrap())
    }

    #[test]
    fn typed_values() {
        assert_eq!(
            p("a=1,b=true,c=FALSE,d=null,e=0,f=01,g=-5,h=1.5,i=+3"),
            json!({"a": 1, "b": true, "c": false, "d": null, "e": 0, "f": "01", "g": -5, "h": "1.5", "i": 3})
        );
        assert!(p("a=1")["a"].is_i64());
        assert_eq!(
            p("a=99999999999999999999"),
            json!({"a": "99999999999999999999"})
        );
    }

    #[test]
    fn nesting_lists_and_escapes() {
        assert_eq!(p("a.b.c=1"), json!({"a": {"b": {"c": 1}}}));
        assert_eq!(p("a[1]=x"), json!({"a": [null, "x"]}));
        assert_eq!(p("a[0].b=1,a[0].c=2"), json!({"a": [{"b": 1, "c": 2}]}));
        assert_eq!(p("a[0][1]=1"), json!({"a": [[null, 1]]}));
        assert_eq!(p("a={1,b,true}"), json!({"a": [1, "b", true]}));
        assert_eq!(p(r"a=x\,y,b\.c=1"), json!({"a": "x,y", "b.c": 1}));
        assert_eq!(p("a="), json!({"a": ""}));
        assert_eq!(p("a=b=c"), json!({"a": "b=c"}));
    }

    #[test]
    fn error_texts() {
        let e = |s: &str| parse(s).unwrap_err().to_string();
        assert_eq!(e("a"), "key \"a\" has no value");
        assert_eq!(e("a,b=1"), "key \"a\" has no value (cannot end with ,)");
        assert_eq!(
            e("a[x]=1"),
            "error parsing index: strconv.Atoi: parsing \"x\": invalid syntax"
        );
        assert_eq!(e("a[-1]=1"), "negative -1 index not allowed");
        assert_eq!(
            e("a[70000]=1"),
            "index of 70000 is greater than maximum supported index of 65536"
        );
        assert_eq!(e("a={1,2"), "list must terminate with '}'");
        assert_eq!(e("a[0]x=1"), "unexpected data at end of array index: ['x']");
        assert_eq!(
            e("a=1,a.b=2"),
            "unable to parse key: interface conversion: interface {} is int64, not map[string]interface {}"
        );
        assert_eq!(
            e("a=1,a[0]=2"),
            "unable to parse key: interface conversion: interface {} is int64, not []interface {}"
        );
        assert_eq!(e("a.=1"), "key map \"a\" has no value");
        assert_eq!(e("a=1,b"), "key \"b\" has no value");
        // Checked against helm v4.1.4.
        assert_eq!(p("a."), json!({}));
        assert_eq!(p(".a=1"), json!({}));
        assert_eq!(p("a[0]"), json!({"a": []}));
        assert_eq!(p("a=\u{17f}alse"), json!({"a": "\u{17f}alse"}));
    }

    #[test]
    fn literal_form_keeps_the_rest_verbatim() {
        let mut m = Values::new();
        parse_literal_into(r"a.b=x,y=\1{2}", &mut m).unwrap();
        parse_literal_into("l[1]=z=z", &mut m).unwrap();
        assert_eq!(
            Value::Object(m),
            json!({"a": {"b": r"x,y=\1{2}"}, "l": [null, "z=z"]})
        );
        assert_eq!(
            parse_literal_into("a", &mut Values::new())
                .unwrap_err()
                .to_string(),
            "key \"a\" has no value"
        );
    }

    #[test]
    fn string_and_json_forms() {
        let mut m = Values::new();
        parse_into_string("a=1,b=true", &mut m).unwrap();
        assert_eq!(Value::Object(m), json!({"a": "1", "b": "true"}));
        let mut m = Values::new();
        parse_json(r#"a={"x":[1,2]},b=null,c="s""#, &mut m).unwrap();
        assert_eq!(
            Value::Object(m.clone()),
            json!({"a": {"x": [1.0, 2.0]}, "b": null, "c": "s"})
        );
        assert!(m["a"]["x"][0].is_f64());
    }

    #[test]
    fn options_merge_in_helm_order() {
        let o = ValueOptions {
            value_files: vec![
                ("a.yaml".into(), b"a: {x: 1, z: 1}\nl: [1]\n".to_vec()),
                ("b.yaml".into(), b"a: {x: 2}\n".to_vec()),
            ],
            json_values: vec![r#"{"j": {"k": 1}}"#.into()],
            values: vec!["a.z=5".into()],
            string_values: vec!["s=1".into()],
            file_values: vec!["f=path".into()],
            literal_values: vec!["lit=a,b".into()],
        };
        let v = o
            .merge(&mut |p| Ok(Value::String(format!("contents of {p}"))))
            .unwrap();
        assert_eq!(
            Value::Object(v),
            json!({"a": {"x": 2.0, "z": 5}, "l": [1.0], "j": {"k": 1.0}, "s": "1", "f": "contents of path", "lit": "a,b"})
        );
        let bad = ValueOptions {
            value_files: vec![("bad.yaml".into(), b"- 1\n".to_vec())],
            ..Default::default()
        };
        assert!(
            bad.merge(&mut |_| Ok(Value::Null))
                .unwrap_err()
                .to_string()
                .starts_with("failed to parse bad.yaml: cannot unmarshal yaml document:")
        );
    }
}
