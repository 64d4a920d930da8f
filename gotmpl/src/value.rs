//! Go dynamic values as Helm feeds them to templates.
//!
//! [`Value`] models the Go types that reach a Helm template: the untyped nil interface, `bool`,
//! `int`, `int64`, `uint64`, `uint8`, `float64`, `string`, `[]byte`, slices and maps, plus
//! opaque objects (Helm's `.Files`, `.Capabilities`, semver versions, certificates, times)
//! behind the [`Object`] trait.
//!
//! Go maps are reference types: Sprig's `set`, `unset` and `merge` mutate a map in place and
//! every holder sees the change. [`Map`] is therefore a shared, lockable handle; cloning a
//! `Map` clones the handle, not the entries. Keys iterate in byte order, which is Go's sorted
//! order for string keys (`range` and `fmt` both sort map keys).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::signature::{FuncError, Signature};

/// Nesting depth after which recursive walks over values (printing, comparison, conversion)
/// stop descending. Values built by templates can be cyclic (`set $m "self" $m`); Go would
/// overflow its stack on them, we stop instead.
pub const MAX_VALUE_DEPTH: usize = 200;

/// A Go value as seen by a template.
#[derive(Clone, Debug, Default)]
pub enum Value {
    /// The untyped nil interface (`interface{}(nil)`): YAML `null`, a missing key under
    /// `missingkey=zero`, Sprig results such as `first (list)`.
    #[default]
    Nil,
    /// Go `bool`.
    Bool(bool),
    /// Go `int` (64-bit): template integer literals, `len`, `.Release.Revision`, `atoi`.
    Int(i64),
    /// Go `int64`: Sprig arithmetic (`add`, `sub` …), `--set` integers.
    Int64(i64),
    /// Go `uint64`.
    Uint64(u64),
    /// Go `uint8` (`byte`): indexing a string or a `[]byte`.
    Uint8(u8),
    /// Go `float64`: every number decoded from YAML or JSON.
    Float(f64),
    /// Go `string` holding valid UTF-8: nearly every string, and the only form functions
    /// that read text see.
    String(Arc<str>),
    /// Go `string` holding bytes that are not valid UTF-8 (a binary file read with
    /// `.Files.Get`, `b64dec` of binary data). Never holds valid UTF-8: build Go strings
    /// from bytes with [`Value::go_string`], which picks [`Value::String`] then. The
    /// functions on the path of binary data (`b64enc`, `sha256sum`, `len`, `eq`, `printf`
    /// …) carry the bytes; a function that reads text sees them with invalid sequences
    /// replaced by U+FFFD.
    RawString(Arc<[u8]>),
    /// Go `[]byte` (`.Files.GetBytes`); prints as `[104 105]` with `%v`.
    Bytes(Arc<[u8]>),
    /// A Go slice.
    List(List),
    /// A Go map with string keys, shared by reference.
    Map(Map),
    /// An opaque Go object with fields and methods.
    Object(Arc<dyn Object>),
}

/// The element type of a Go slice, for `typeOf` and parameter type checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElemType {
    /// `[]interface {}`
    Interface,
    /// `[]string`
    String,
    /// `[]int`
    Int,
    /// `[]int64`
    Int64,
    /// `[]float64`
    Float64,
    /// `[]bool`
    Bool,
}

impl ElemType {
    /// The Go name of the element type.
    pub fn go_name(self) -> &'static str {
        match self {
            ElemType::Interface => "interface {}",
            ElemType::String => "string",
            ElemType::Int => "int",
            ElemType::Int64 => "int64",
            ElemType::Float64 => "float64",
            ElemType::Bool => "bool",
        }
    }
}

/// An immutable Go slice. Templates cannot mutate slices in place (Sprig's `append` returns a
/// copy), so the items are shared without a lock.
#[derive(Clone)]
pub struct List {
    items: Arc<ListCell>,
    elem: ElemType,
}

impl List {
    /// A `[]interface {}`.
    pub fn new(items: Vec<Value>) -> Self {
        List {
            items: Arc::new(ListCell(items)),
            elem: ElemType::Interface,
        }
    }

    /// A slice with the given element type. The caller keeps the items consistent with it.
    pub fn typed(items: Vec<Value>, elem: ElemType) -> Self {
        List {
            items: Arc::new(ListCell(items)),
            elem,
        }
    }

    /// The element type.
    pub fn elem(&self) -> ElemType {
        self.elem
    }

    /// The items.
    pub fn items(&self) -> &[Value] {
        &self.items.0
    }

    /// The number of items.
    pub fn len(&self) -> usize {
        self.items.0.len()
    }

    /// Whether the slice is empty.
    pub fn is_empty(&self) -> bool {
        self.items.0.is_empty()
    }

    /// A copy of the items.
    pub fn to_vec(&self) -> Vec<Value> {
        self.items.0.clone()
    }

    /// Whether two handles share the same backing array.
    pub fn ptr_eq(&self, other: &List) -> bool {
        Arc::ptr_eq(&self.items, &other.items)
    }
}

impl fmt::Debug for List {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Do not recurse: lists may be nested arbitrarily deep.
        write!(f, "List([]{}, {} items)", self.elem.go_name(), self.len())
    }
}

/// The items of a [`List`]. Dropping it releases nested values iteratively.
struct ListCell(Vec<Value>);

/// The entries of a [`Map`], the freeze epoch current when it was made (see
/// [`freeze_maps`]) and whether its reads are watched ([`Map::watch_reads`]). Dropping it
/// releases nested values iteratively.
struct MapCell(RwLock<BTreeMap<String, Value>>, u32, AtomicBool);

/// Freeze epochs handed out so far; a map records the one current when it is made.
static EPOCH: AtomicU32 = AtomicU32::new(0);

/// A write to a frozen map: the map, and the copy of its entries the write went to.
type Diverted = (Map, &'static RwLock<BTreeMap<String, Value>>);

thread_local! {
    /// Maps made before this epoch may not be written on this thread (0: no freeze).
    static FROZEN_BELOW: Cell<u32> = const { Cell::new(0) };
    /// Whether this thread read a watched map since it entered the freeze.
    static CONFLICT: Cell<bool> = const { Cell::new(false) };
    /// The key of a watched map that a `get` may not read during the freeze.
    static WATCHED_KEY: Cell<&'static str> = const { Cell::new("") };
    /// Writes to frozen maps on this thread not yet checked ([`FreezeScope::conflicted`]).
    static DIVERTED: RefCell<Vec<Diverted>> = const { RefCell::new(Vec::new()) };
}

/// Starts a freeze epoch: every map that exists now becomes frozen on the threads that
/// [`enter_freeze`] it (maps made from now on are not). Returns the epoch.
///
/// This is what lets a chart's templates run on several threads with Go's semantics: a
/// template that writes a map that existed before the run (`set $ ...`, `set .Values ...`,
/// `merge .Values.x ...`), which a later template might read, leaves the map unchanged; if
/// the write would have changed it, a conflict is recorded, and the caller then throws the
/// run away and executes the templates again one after the other.
pub fn freeze_maps() -> u32 {
    EPOCH.fetch_add(1, Ordering::Relaxed) + 1
}

/// While the returned scope lives, maps made before `epoch` ([`freeze_maps`]) are frozen
/// on this thread: a write to one goes to a copy of its entries instead, and counts as a
/// conflict if the copy then differs ([`FreezeScope::conflicted`]); reading a map whose
/// reads are watched ([`Map::watch_reads`]) counts as one too, except a `get` of another
/// key than `watched_key`.
pub fn enter_freeze(epoch: u32, watched_key: &'static str) -> FreezeScope {
    FROZEN_BELOW.with(|f| f.set(epoch));
    CONFLICT.with(|c| c.set(false));
    WATCHED_KEY.with(|k| k.set(watched_key));
    DIVERTED.with(|d| d.borrow_mut().clear());
    FreezeScope(std::marker::PhantomData)
}

/// This thread's part of a freeze ([`enter_freeze`]); dropping it lifts the freeze here.
#[derive(Debug)]
pub struct FreezeScope(std::marker::PhantomData<*const ()>);

impl FreezeScope {
    /// Whether, since the freeze began, this thread read a watched map or wrote a frozen
    /// one so that its entries would differ (a write that leaves the same entries, such as
    /// `merge` adding nothing, changes nothing a later reader could see).
    pub fn conflicted(&self) -> bool {
        let diverted = DIVERTED.with(|d| std::mem::take(&mut *d.borrow_mut()));
        for (map, copy) in diverted {
            let copy = copy.read().unwrap_or_else(|poisoned| poisoned.into_inner());
            if !same_entries(&map.lock_read(), &copy) {
                CONFLICT.with(|c| c.set(true));
            }
        }
        CONFLICT.with(Cell::get)
    }
}

impl Drop for FreezeScope {
    fn drop(&mut self) {
        FROZEN_BELOW.with(|f| f.set(0));
        WATCHED_KEY.with(|k| k.set(""));
        DIVERTED.with(|d| d.borrow_mut().clear());
    }
}

/// Whether two entry tables are indistinguishable to a template: same keys, and values
/// that are the same maps, lists and objects (not only equal ones: those can be written
/// apart later) and equal scalars of the same type.
fn same_entries(a: &BTreeMap<String, Value>, b: &BTreeMap<String, Value>) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|((ka, va), (kb, vb))| {
            ka == kb
                && match (va, vb) {
                    (Value::Nil, Value::Nil) => true,
                    (Value::Bool(x), Value::Bool(y)) => x == y,
                    (Value::Int(x), Value::Int(y)) | (Value::Int64(x), Value::Int64(y)) => x == y,
                    (Value::Uint64(x), Value::Uint64(y)) => x == y,
                    (Value::Uint8(x), Value::Uint8(y)) => x == y,
                    (Value::Float(x), Value::Float(y)) => x.to_bits() == y.to_bits(),
                    (Value::String(x), Value::String(y)) => x == y,
                    (Value::Bytes(x), Value::Bytes(y))
                    | (Value::RawString(x), Value::RawString(y)) => x == y,
                    (Value::List(x), Value::List(y)) => x.elem() == y.elem() && x.ptr_eq(y),
                    (Value::Map(x), Value::Map(y)) => x.map_type() == y.map_type() && x.ptr_eq(y),
                    (Value::Object(x), Value::Object(y)) => Arc::ptr_eq(x, y),
                    _ => false,
                }
        })
}

/// A read of a watched map: a conflict while this thread is in a freeze.
#[cold]
fn watched_read() {
    if FROZEN_BELOW.with(Cell::get) != 0 {
        CONFLICT.with(|c| c.set(true));
    }
}

impl Drop for ListCell {
    fn drop(&mut self) {
        release_iteratively(std::mem::take(&mut self.0));
    }
}

impl Drop for MapCell {
    fn drop(&mut self) {
        let entries = std::mem::take(self.0.get_mut().unwrap_or_else(|p| p.into_inner()));
        release_iteratively(entries.into_values().collect());
    }
}

/// Drops values without recursion: templates can build maps nested far deeper than the
/// stack allows (`$m = dict "a" $m` in a loop), and a recursive drop would overflow.
fn release_iteratively(mut pending: Vec<Value>) {
    while let Some(v) = pending.pop() {
        match v {
            Value::Map(m) => {
                if let Ok(mut cell) = Arc::try_unwrap(m.inner) {
                    let entries =
                        std::mem::take(cell.0.get_mut().unwrap_or_else(|p| p.into_inner()));
                    pending.extend(entries.into_values());
                }
            }
            Value::List(l) => {
                if let Ok(mut cell) = Arc::try_unwrap(l.items) {
                    pending.append(&mut cell.0);
                }
            }
            other => drop(other),
        }
    }
}

/// The Go type of a map, for `typeOf` and parameter checks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MapType {
    /// `map[string]interface {}`
    Interface,
    /// A named type whose underlying type is `map[string]interface {}`, such as Helm's
    /// `common.Values`. Assignable to `map[string]interface {}` parameters.
    Named(Arc<str>),
    /// `map[string]string` (e.g. chart annotations).
    StringValues,
}

/// A Go map with string keys: a shared, mutable handle. Cloning shares the entries.
#[derive(Clone)]
pub struct Map {
    inner: Arc<MapCell>,
    ty: MapType,
}

impl fmt::Debug for Map {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Do not recurse: maps may be cyclic.
        write!(f, "Map({:?}, {} entries)", self.ty, self.len())
    }
}

impl Default for Map {
    fn default() -> Self {
        Map::new()
    }
}

impl Map {
    /// A new empty `map[string]interface {}`.
    pub fn new() -> Self {
        Map::from_entries(BTreeMap::new())
    }

    /// A `map[string]interface {}` holding these entries.
    pub fn from_entries(entries: BTreeMap<String, Value>) -> Self {
        Map {
            inner: Arc::new(MapCell(
                RwLock::new(entries),
                EPOCH.load(Ordering::Relaxed),
                AtomicBool::new(false),
            )),
            ty: MapType::Interface,
        }
    }

    /// A map of the given Go type holding these entries.
    pub fn typed(entries: BTreeMap<String, Value>, ty: MapType) -> Self {
        Map {
            inner: Arc::new(MapCell(
                RwLock::new(entries),
                EPOCH.load(Ordering::Relaxed),
                AtomicBool::new(false),
            )),
            ty,
        }
    }

    /// The same entries seen through another Go type (the handle stays shared).
    pub fn with_type(&self, ty: MapType) -> Self {
        Map {
            inner: Arc::clone(&self.inner),
            ty,
        }
    }

    /// The Go type of the map.
    pub fn map_type(&self) -> &MapType {
        &self.ty
    }

    /// Read access to the entries. Do not call back into templates while holding it.
    pub fn read(&self) -> RwLockReadGuard<'_, BTreeMap<String, Value>> {
        if self.inner.2.load(Ordering::Relaxed) {
            watched_read();
        }
        self.lock_read()
    }

    fn lock_read(&self) -> RwLockReadGuard<'_, BTreeMap<String, Value>> {
        self.inner
            .0
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Write access to the entries. Do not call back into templates while holding it.
    /// A map frozen on this thread ([`enter_freeze`]) is not changed: the access is to a
    /// copy of its entries, checked against them later.
    pub fn write(&self) -> RwLockWriteGuard<'_, BTreeMap<String, Value>> {
        if self.inner.1 < FROZEN_BELOW.with(Cell::get) {
            return self.diverted_write();
        }
        self.inner
            .0
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The write access given for a frozen map: a copy of its entries nobody else sees,
    /// kept to the end of the process (the guard must borrow it).
    #[cold]
    fn diverted_write<'a>(&self) -> RwLockWriteGuard<'a, BTreeMap<String, Value>> {
        let copy: &'static RwLock<BTreeMap<String, Value>> =
            Box::leak(Box::new(RwLock::new(self.lock_read().clone())));
        DIVERTED.with(|d| d.borrow_mut().push((self.clone(), copy)));
        copy.write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// While a freeze is on ([`enter_freeze`]), reading this map counts as a conflict,
    /// except a `get` or `contains_key` of another key than the freeze's watched key.
    pub fn watch_reads(&self, on: bool) {
        self.inner.2.store(on, Ordering::Relaxed);
    }

    /// Whether a read of `key` on this map is watched.
    #[inline]
    fn watch_key(&self, key: &str) {
        if self.inner.2.load(Ordering::Relaxed) && WATCHED_KEY.with(Cell::get) == key {
            watched_read();
        }
    }

    /// The value under `key`, if present.
    pub fn get(&self, key: &str) -> Option<Value> {
        self.watch_key(key);
        self.lock_read().get(&Probe(key) as &dyn LookupKey).cloned()
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.watch_key(key);
        self.lock_read().contains_key(&Probe(key) as &dyn LookupKey)
    }

    /// Sets `key` (visible to every holder of the map).
    pub fn insert(&self, key: impl Into<String>, value: Value) {
        self.write().insert(key.into(), value);
    }

    /// Removes `key` (visible to every holder of the map).
    pub fn remove(&self, key: &str) -> Option<Value> {
        self.write().remove(key)
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    /// Whether the map is empty.
    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }

    /// The keys in sorted order.
    pub fn keys(&self) -> Vec<String> {
        self.read().keys().cloned().collect()
    }

    /// A snapshot of the entries in sorted key order (the lock is released on return).
    pub fn entries(&self) -> Vec<(String, Value)> {
        self.read()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// A new map with a shallow copy of the entries (same Go type).
    pub fn shallow_copy(&self) -> Map {
        Map::typed(self.read().clone(), self.ty.clone())
    }

    /// Whether two handles share the same entries.
    pub fn ptr_eq(&self, other: &Map) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

/// A map key as [`Map::get`] compares it. `str`'s own order compares keys with a call to
/// `memcmp`, about fifty instructions a step of a search through a node of up to eleven
/// keys; keys of one map mostly differ in their first byte, which this order compares
/// inline before falling back to the whole key. The order is the same (byte-wise), as
/// `Borrow` requires.
trait LookupKey {
    fn key_bytes(&self) -> &[u8];
}

impl LookupKey for String {
    #[inline]
    fn key_bytes(&self) -> &[u8] {
        self.as_bytes()
    }
}

/// The key being looked up.
struct Probe<'a>(&'a str);

impl LookupKey for Probe<'_> {
    #[inline]
    fn key_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

impl<'a> std::borrow::Borrow<dyn LookupKey + 'a> for String {
    #[inline]
    fn borrow(&self) -> &(dyn LookupKey + 'a) {
        self
    }
}

impl PartialEq for dyn LookupKey + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.key_bytes() == other.key_bytes()
    }
}

impl Eq for dyn LookupKey + '_ {}

impl PartialOrd for dyn LookupKey + '_ {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for dyn LookupKey + '_ {
    #[inline]
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        let (a, b) = (self.key_bytes(), other.key_bytes());
        match (a.first(), b.first()) {
            (Some(x), Some(y)) if x != y => x.cmp(y),
            _ => a.cmp(b),
        }
    }
}

/// The `reflect.Kind` of a Go value, as `kindOf` prints it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GoKind {
    /// No value (`kindOf nil` prints `invalid`).
    Invalid,
    /// `bool`
    Bool,
    /// `int`
    Int,
    /// `int64`
    Int64,
    /// `uint64`
    Uint64,
    /// `uint8`
    Uint8,
    /// `float64`
    Float64,
    /// `string`
    String,
    /// `slice`
    Slice,
    /// `map`
    Map,
    /// `ptr`
    Ptr,
    /// `struct`
    Struct,
    /// `func`
    Func,
}

impl GoKind {
    /// The name `reflect.Kind.String()` gives.
    pub fn name(self) -> &'static str {
        match self {
            GoKind::Invalid => "invalid",
            GoKind::Bool => "bool",
            GoKind::Int => "int",
            GoKind::Int64 => "int64",
            GoKind::Uint64 => "uint64",
            GoKind::Uint8 => "uint8",
            GoKind::Float64 => "float64",
            GoKind::String => "string",
            GoKind::Slice => "slice",
            GoKind::Map => "map",
            GoKind::Ptr => "ptr",
            GoKind::Struct => "struct",
            GoKind::Func => "func",
        }
    }
}

/// An opaque Go object reachable from templates: a struct, a pointer to a struct, or a named
/// map type with methods. Implementations live with the functions that create them (Helm's
/// `.Files`, `.Capabilities`, Sprig's semver and certificates …).
///
/// Field and method resolution follows text/template: a method named like the field wins over
/// a field or map key; a method is called with the arguments of the command.
pub trait Object: Send + Sync + fmt::Debug {
    /// The Go type name printed by `%T` / `typeOf`, e.g. `*semver.Version`.
    fn type_name(&self) -> String;

    /// The Go kind (`kindOf`). Defaults to `ptr`.
    fn kind(&self) -> GoKind {
        GoKind::Ptr
    }

    /// The signature of the method `name`, if the object has one. Methods take precedence
    /// over fields and map keys.
    fn method(&self, name: &str) -> Option<Signature> {
        let _ = name;
        None
    }

    /// Calls the method `name` (only called when [`Object::method`] returned a signature;
    /// the arguments were checked against it).
    fn call_method(&self, name: &str, args: &[Value]) -> Result<Value, FuncError> {
        let _ = args;
        Err(FuncError::new(format!("method {name} not implemented")))
    }

    /// The exported struct field `name`, if any.
    fn field(&self, name: &str) -> Option<Value> {
        let _ = name;
        None
    }

    /// For map-kinded objects (such as Helm's `files`), the entries in sorted key order:
    /// used by `range`, `index`, `len` and `.key` lookups.
    fn map_entries(&self) -> Option<Vec<(String, Value)>> {
        None
    }

    /// For slice-kinded objects (such as Helm's `VersionSet`), the elements: used by `range`,
    /// `index`, `len` and printing (`[a b]`).
    fn list_items(&self) -> Option<Vec<Value>> {
        None
    }

    /// How `fmt` prints the object with `%v` / `%s` / `print` (its `String()` method if it
    /// has one, otherwise Go's struct notation such as `{a b}`).
    fn display(&self) -> String;

    /// The value JSON/YAML encoders see for this object (exported fields as a map, or the
    /// string form), if it is encodable.
    fn marshal(&self) -> Option<Value> {
        None
    }
}

impl Value {
    /// A Go string.
    pub fn string(s: impl AsRef<str>) -> Value {
        Value::String(Arc::from(s.as_ref()))
    }

    /// A `[]interface {}`.
    pub fn list(items: Vec<Value>) -> Value {
        Value::List(List::new(items))
    }

    /// A `map[string]interface {}` holding these entries.
    pub fn map(entries: BTreeMap<String, Value>) -> Value {
        Value::Map(Map::from_entries(entries))
    }

    /// Whether this is the nil interface.
    pub fn is_nil(&self) -> bool {
        matches!(self, Value::Nil)
    }

    /// A Go string made of these bytes: [`Value::String`] when they are valid UTF-8 (the
    /// fast path), else [`Value::RawString`].
    pub fn go_string(bytes: impl AsRef<[u8]>) -> Value {
        let bytes = bytes.as_ref();
        match std::str::from_utf8(bytes) {
            Ok(s) => Value::String(Arc::from(s)),
            Err(_) => Value::RawString(Arc::from(bytes)),
        }
    }

    /// [`Value::go_string`] taking ownership of the buffer (no copy of valid UTF-8 beyond
    /// the one into the shared allocation).
    pub fn go_string_owned(bytes: Vec<u8>) -> Value {
        match String::from_utf8(bytes) {
            Ok(s) => Value::String(Arc::from(s)),
            Err(e) => Value::RawString(Arc::from(e.into_bytes())),
        }
    }

    /// The string if this is a Go string holding valid UTF-8.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The bytes of a Go string, valid UTF-8 or not.
    pub fn as_go_bytes(&self) -> Option<&[u8]> {
        match self {
            Value::String(s) => Some(s.as_bytes()),
            Value::RawString(b) => Some(b),
            _ => None,
        }
    }

    /// The text of a Go string, invalid UTF-8 sequences replaced by U+FFFD (what a function
    /// that reads text sees).
    pub fn as_lossy_str(&self) -> Option<std::borrow::Cow<'_, str>> {
        match self {
            Value::String(s) => Some(std::borrow::Cow::Borrowed(s)),
            Value::RawString(b) => Some(String::from_utf8_lossy(b)),
            _ => None,
        }
    }

    /// The map handle if this is a map.
    pub fn as_map(&self) -> Option<&Map> {
        match self {
            Value::Map(m) => Some(m),
            _ => None,
        }
    }

    /// The slice if this is a slice.
    pub fn as_list(&self) -> Option<&List> {
        match self {
            Value::List(l) => Some(l),
            _ => None,
        }
    }

    /// The Go type name `%T` prints (`typeOf`): `float64`, `map[string]interface {}`,
    /// `[]interface {}`, `<nil>` …
    pub fn type_name(&self) -> String {
        match self {
            Value::Nil => "<nil>".to_string(),
            Value::Bool(_) => "bool".to_string(),
            Value::Int(_) => "int".to_string(),
            Value::Int64(_) => "int64".to_string(),
            Value::Uint64(_) => "uint64".to_string(),
            Value::Uint8(_) => "uint8".to_string(),
            Value::Float(_) => "float64".to_string(),
            Value::String(_) | Value::RawString(_) => "string".to_string(),
            Value::Bytes(_) => "[]uint8".to_string(),
            Value::List(l) => format!("[]{}", l.elem.go_name()),
            Value::Map(m) => match &m.ty {
                MapType::Interface => "map[string]interface {}".to_string(),
                MapType::Named(n) => n.to_string(),
                MapType::StringValues => "map[string]string".to_string(),
            },
            Value::Object(o) => o.type_name(),
        }
    }

    /// The `reflect.Kind` (`kindOf`).
    pub fn kind(&self) -> GoKind {
        match self {
            Value::Nil => GoKind::Invalid,
            Value::Bool(_) => GoKind::Bool,
            Value::Int(_) => GoKind::Int,
            Value::Int64(_) => GoKind::Int64,
            Value::Uint64(_) => GoKind::Uint64,
            Value::Uint8(_) => GoKind::Uint8,
            Value::Float(_) => GoKind::Float64,
            Value::String(_) | Value::RawString(_) => GoKind::String,
            Value::Bytes(_) | Value::List(_) => GoKind::Slice,
            Value::Map(_) => GoKind::Map,
            Value::Object(o) => o.kind(),
        }
    }

    /// Go template truth (`if`, `with`, `and`, `or`, `not`): false for nil, `false`, zero
    /// numbers and empty strings, slices and maps; structs and non-nil pointers are true.
    pub fn is_true(&self) -> bool {
        match self {
            Value::Nil => false,
            Value::Bool(b) => *b,
            Value::Int(i) | Value::Int64(i) => *i != 0,
            Value::Uint64(u) => *u != 0,
            Value::Uint8(u) => *u != 0,
            Value::Float(f) => *f != 0.0,
            Value::String(s) => !s.is_empty(),
            Value::Bytes(b) | Value::RawString(b) => !b.is_empty(),
            Value::List(l) => !l.is_empty(),
            Value::Map(m) => !m.is_empty(),
            Value::Object(o) => match (o.map_entries(), o.list_items()) {
                (Some(entries), _) => !entries.is_empty(),
                (None, Some(items)) => !items.is_empty(),
                (None, None) => true,
            },
        }
    }

    /// Go's `reflect.DeepEqual`: same dynamic types (an `int` never equals an `int64` or a
    /// `float64`), equal scalars, element-wise equal slices, key-wise equal maps; the same map
    /// or slice object is equal to itself; objects are equal when they are the same object.
    /// Nesting deeper than [`MAX_VALUE_DEPTH`] compares unequal.
    pub fn deep_equal(&self, other: &Value) -> bool {
        self.deep_equal_at(other, 0)
    }

    fn deep_equal_at(&self, other: &Value, depth: usize) -> bool {
        if depth > MAX_VALUE_DEPTH {
            return false;
        }
        match (self, other) {
            (Value::Nil, Value::Nil) => true,
            (Value::Bool(a), Value::Bool(b)) => a == b,
            (Value::Int(a), Value::Int(b)) | (Value::Int64(a), Value::Int64(b)) => a == b,
            (Value::Uint64(a), Value::Uint64(b)) => a == b,
            (Value::Uint8(a), Value::Uint8(b)) => a == b,
            (Value::Float(a), Value::Float(b)) => a == b,
            (Value::String(a), Value::String(b)) => a == b,
            (Value::Bytes(a), Value::Bytes(b)) | (Value::RawString(a), Value::RawString(b)) => {
                a == b
            }
            (Value::List(a), Value::List(b)) => {
                a.elem() == b.elem()
                    && (a.ptr_eq(b)
                        || (a.len() == b.len()
                            && a.items()
                                .iter()
                                .zip(b.items())
                                .all(|(x, y)| x.deep_equal_at(y, depth + 1))))
            }
            (Value::Map(a), Value::Map(b)) => {
                if a.map_type() != b.map_type() {
                    return false;
                }
                if a.ptr_eq(b) {
                    return true;
                }
                let (ea, eb) = (a.entries(), b.entries());
                ea.len() == eb.len()
                    && ea
                        .iter()
                        .zip(&eb)
                        .all(|((ka, va), (kb, vb))| ka == kb && va.deep_equal_at(vb, depth + 1))
            }
            (Value::Object(a), Value::Object(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }

    /// Converts JSON into Go values the way `encoding/json` decodes into `interface{}`:
    /// every number becomes `float64`.
    pub fn from_json(json: &serde_json::Value) -> Value {
        match json {
            serde_json::Value::Null => Value::Nil,
            serde_json::Value::Bool(b) => Value::Bool(*b),
            serde_json::Value::Number(n) => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
            serde_json::Value::String(s) => Value::string(s),
            serde_json::Value::Array(items) => {
                Value::list(items.iter().map(Value::from_json).collect())
            }
            serde_json::Value::Object(entries) => Value::map(
                entries
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::from_json(v)))
                    .collect(),
            ),
        }
    }

    /// Converts to JSON: integers stay integers, floats become JSON numbers, `[]byte` an
    /// array of numbers, objects their [`Object::marshal`] form. This is a data conversion,
    /// not Go's `encoding/json` output (that is the serialisation functions' job). Fails on
    /// non-finite floats, unencodable objects and nesting deeper than [`MAX_VALUE_DEPTH`]
    /// (cyclic maps).
    pub fn to_json(&self) -> Result<serde_json::Value, ValueError> {
        self.to_json_at(0)
    }

    fn to_json_at(&self, depth: usize) -> Result<serde_json::Value, ValueError> {
        if depth > MAX_VALUE_DEPTH {
            return Err(ValueError::TooDeep);
        }
        Ok(match self {
            Value::Nil => serde_json::Value::Null,
            Value::Bool(b) => serde_json::Value::Bool(*b),
            Value::Int(i) | Value::Int64(i) => serde_json::Value::from(*i),
            Value::Uint64(u) => serde_json::Value::from(*u),
            Value::Uint8(u) => serde_json::Value::from(*u),
            Value::Float(f) => serde_json::Number::from_f64(*f)
                .map(serde_json::Value::Number)
                .ok_or(ValueError::NonFinite(*f))?,
            Value::String(s) => serde_json::Value::String(s.to_string()),
            // encoding/json writes each invalid byte as U+FFFD.
            Value::RawString(b) => {
                serde_json::Value::String(String::from_utf8_lossy(b).into_owned())
            }
            Value::Bytes(b) => {
                serde_json::Value::Array(b.iter().map(|x| serde_json::Value::from(*x)).collect())
            }
            Value::List(l) => serde_json::Value::Array(
                l.items()
                    .iter()
                    .map(|v| v.to_json_at(depth + 1))
                    .collect::<Result<_, _>>()?,
            ),
            Value::Map(m) => {
                let mut out = serde_json::Map::new();
                for (k, v) in m.entries() {
                    out.insert(k, v.to_json_at(depth + 1)?);
                }
                serde_json::Value::Object(out)
            }
            Value::Object(o) => match o.marshal() {
                Some(v) => v.to_json_at(depth + 1)?,
                None => return Err(ValueError::Unencodable(o.type_name())),
            },
        })
    }
}

/// Why a value could not be converted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ValueError {
    /// JSON has no NaN or infinities.
    #[error("unsupported value: {0}")]
    NonFinite(f64),
    /// The object does not expose an encodable form.
    #[error("unsupported type: {0}")]
    Unencodable(String),
    /// Nesting deeper than [`MAX_VALUE_DEPTH`], usually a cyclic map.
    #[error("value nested too deeply (cyclic?)")]
    TooDeep,
}

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::string(s)
    }
}

impl From<String> for Value {
    fn from(s: String) -> Self {
        Value::String(Arc::from(s))
    }
}

impl From<bool> for Value {
    fn from(b: bool) -> Self {
        Value::Bool(b)
    }
}

impl From<f64> for Value {
    fn from(f: f64) -> Self {
        Value::Float(f)
    }
}

impl From<Vec<Value>> for Value {
    fn from(items: Vec<Value>) -> Self {
        Value::list(items)
    }
}

impl From<Map> for Value {
    fn from(m: Map) -> Self {
        Value::Map(m)
    }
}

impl From<&serde_json::Value> for Value {
    fn from(json: &serde_json::Value) -> Self {
        Value::from_json(json)
    }
}

impl fmt::Display for Value {
    /// Go's `%v`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&crate::gofmt::sprint_value(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_keys_order_as_str_does_and_every_key_is_found() {
        let mut keys: Vec<String> = ["", "a", "a\0", "ab", "abc", "b", "B", "Values", "Value"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        // Keys sharing first bytes and lengths, ASCII and not, in a map deep enough for
        // several levels of nodes.
        let mut x: u32 = 7;
        for _ in 0..600 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let len = (x % 6) as usize;
            let k: String = (0..len)
                .map(|i| ['a', 'b', 'é', 'z', '0', '\u{10348}'][((x >> (3 * i)) % 6) as usize])
                .collect();
            keys.push(k);
        }
        for a in &keys {
            for b in keys.iter().take(60) {
                let (pa, pb) = (Probe(a), Probe(b));
                let (da, db): (&dyn LookupKey, &dyn LookupKey) = (&pa, &pb);
                assert_eq!(da.cmp(db), a.as_str().cmp(b.as_str()), "{a:?} vs {b:?}");
            }
        }
        let m = Map::new();
        for (i, k) in keys.iter().enumerate().step_by(2) {
            m.insert(k.clone(), Value::Int(i as i64));
        }
        let stored = m.read().clone();
        for k in &keys {
            let int = |v: Option<Value>| match v {
                Some(Value::Int(i)) => Some(i),
                _ => None,
            };
            assert_eq!(int(m.get(k)), int(stored.get(k.as_str()).cloned()), "{k:?}");
            assert_eq!(m.contains_key(k), stored.contains_key(k.as_str()));
        }
    }

    #[test]
    fn json_numbers_become_float64() {
        let v = Value::from_json(&serde_json::json!({"a": 1, "b": [true, null, "x"]}));
        let m = v.as_map().expect("map");
        assert!(matches!(m.get("a"), Some(Value::Float(f)) if f == 1.0));
        assert_eq!(v.type_name(), "map[string]interface {}");
        assert_eq!(
            m.get("b").map(|b| b.type_name()).as_deref(),
            Some("[]interface {}")
        );
    }

    #[test]
    fn maps_are_shared_by_reference() {
        let a = Map::new();
        let b = a.clone();
        b.insert("k", Value::Bool(true));
        assert!(a.contains_key("k"));
        let c = a.shallow_copy();
        c.insert("other", Value::Nil);
        assert!(!a.contains_key("other"));
    }

    #[test]
    fn type_and_kind_names_follow_go() {
        assert_eq!(Value::Nil.type_name(), "<nil>");
        assert_eq!(Value::Nil.kind().name(), "invalid");
        assert_eq!(Value::Int(1).type_name(), "int");
        assert_eq!(Value::Int64(1).type_name(), "int64");
        assert_eq!(Value::Float(1.0).kind().name(), "float64");
        let named = Map::new().with_type(MapType::Named(Arc::from("common.Values")));
        assert_eq!(Value::Map(named).type_name(), "common.Values");
        assert_eq!(
            Value::List(List::typed(vec![], ElemType::String)).type_name(),
            "[]string"
        );
    }

    #[test]
    fn to_json_rejects_cycles_instead_of_overflowing() {
        let m = Map::new();
        m.insert("self", Value::Map(m.clone()));
        assert_eq!(Value::Map(m.clone()).to_json(), Err(ValueError::TooDeep));
        // Break the cycle so the test does not leak.
        m.remove("self");
    }

    #[test]
    fn dropping_deeply_nested_values_does_not_overflow_the_stack() {
        let mut v = Value::Nil;
        for i in 0..200_000 {
            v = if i % 2 == 0 {
                let m = Map::new();
                m.insert("a", v);
                Value::Map(m)
            } else {
                Value::list(vec![v])
            };
        }
        let handle = std::thread::Builder::new()
            .stack_size(256 << 10)
            .spawn(move || drop(v))
            .expect("spawn");
        handle.join().expect("no stack overflow");
    }

    #[test]
    fn deep_equal_follows_reflect_deep_equal() {
        let a = Value::from_json(&serde_json::json!({"a": [1, {"b": null}], "c": "x"}));
        let b = Value::from_json(&serde_json::json!({"a": [1, {"b": null}], "c": "x"}));
        assert!(a.deep_equal(&b));
        assert!(!Value::Int(1).deep_equal(&Value::Int64(1)));
        assert!(!Value::Int(1).deep_equal(&Value::Float(1.0)));
        assert!(!Value::Float(f64::NAN).deep_equal(&Value::Float(f64::NAN)));
        assert!(
            !Value::list(vec![]).deep_equal(&Value::List(List::typed(vec![], ElemType::String)))
        );
        let named = Map::new().with_type(MapType::Named(Arc::from("common.Values")));
        assert!(!Value::Map(named).deep_equal(&Value::Map(Map::new())));
    }

    #[test]
    fn values_are_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<Value>();
    }

    #[test]
    fn a_frozen_map_is_not_written_and_a_change_is_a_conflict() {
        let shared = Map::new();
        shared.insert("a", Value::Int(1));
        let epoch = freeze_maps();
        let fresh = Map::new();
        let freeze = enter_freeze(epoch, "Template");
        // A map made during the freeze is written as usual.
        fresh.insert("x", Value::Int(2));
        assert_eq!(
            fresh.get("x").map(|v| v.deep_equal(&Value::Int(2))),
            Some(true)
        );
        // Writing the same entries back changes nothing: no conflict.
        shared.insert("a", Value::Int(1));
        assert!(!freeze.conflicted());
        shared.insert("b", Value::Int(3));
        assert!(shared.get("b").is_none(), "the frozen map kept its entries");
        assert!(freeze.conflicted());
        drop(freeze);
        // Out of the freeze, the map is written again.
        shared.insert("b", Value::Int(3));
        assert!(shared.get("b").is_some());
    }

    #[test]
    fn a_watched_map_is_a_conflict_when_its_key_or_whole_is_read() {
        let scope = Map::new();
        scope.insert("Template", Value::string("t"));
        scope.insert("Values", Value::Map(Map::new()));
        scope.watch_reads(true);
        let epoch = freeze_maps();
        let freeze = enter_freeze(epoch, "Template");
        assert!(scope.get("Values").is_some());
        assert!(!freeze.conflicted());
        let _ = scope.get("Template");
        assert!(freeze.conflicted());
        let freeze = enter_freeze(epoch, "Template");
        let _ = scope.keys();
        assert!(freeze.conflicted());
        drop(freeze);
        scope.watch_reads(false);
    }
}
