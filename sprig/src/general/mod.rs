//! Sprig's general-purpose families (everything but crypto, dates and semver), one module per
//! family. Each follows Sprig v3.3.0 as Helm exposes it: Go's typed parameters (declared in
//! each [`Signature`]), `spf13/cast` conversions for `interface{}` parameters, and Sprig's
//! panics reported as the errors text/template makes of them.
//!
//! Choices where Go is not deterministic or not representable:
//! * `keys` and `values` iterate Go maps in random order; here each map contributes its keys
//!   (or values) in sorted key order.
//! * Go strings may hold invalid UTF-8 (binary chart files, `b64dec` of binary data): such a
//!   string is a [`Value::RawString`]. The functions on the path of binary data keep its
//!   bytes (`b64enc`/`b64dec`, `b32enc`/`b32dec`, the hashes, `toString`, `quote`, `squote`,
//!   `cat`, `indent`/`nindent`, JSON encoding with `\ufffd` as Go writes it); the others
//!   read text and see each invalid sequence as U+FFFD (so do `substr`/`trunc` cutting a
//!   rune).
//! * `chunk` returns a `[]interface {}` of lists (Go: `[][]interface {}`, which only `typeOf`
//!   can tell apart).
//! * Where Go would allocate without bound (`repeat`, `indent`, `replace`, random strings:
//!   256 MiB; `until`/`untilStep`/`seq`: 10 million items) the call fails instead.
//! * `merge`/`deepCopy`/JSON encoding stop at `MAX_VALUE_DEPTH` nesting (Go overflows its
//!   stack on cyclic maps).
//! * Unicode classes (`unicode.IsUpper`, `IsPunct`, …) come from Rust's `char` properties,
//!   adjusted to Go's categories where they differ; exact for ASCII.
//! * Regular expressions are Go RE2 patterns translated for the `regex` crate; Go's parse
//!   errors are reproduced for the common mistakes, other invalid patterns report the `regex`
//!   crate's reason in Go's `error parsing regexp: …: `…`` frame.
//! * `getHostByName` returns `""` (Helm without `--enable-dns`).
//!
//! Not here: `env`/`expandenv` (Helm removes them), and the functions Helm replaces with its
//! own (`fail`, `toJson`, `fromJson`, `mustToJson`, `required`, …) which live in
//! `flotilla-chart`.

mod conv;
mod defaults;
mod dicts;
mod encoding;
mod json;
mod lists;
mod math;
mod network;
mod paths;
mod reflection;
pub(crate) mod regex;
mod strings;
mod url;
mod xstrings;

pub(crate) use conv::*;

use flotilla_gotmpl::{FuncError, FuncMap, Function, Signature, Value};

pub(crate) fn register(map: &mut FuncMap) {
    strings::register(map);
    defaults::register(map);
    dicts::register(map);
    encoding::register(map);
    json::register(map);
    json::register_decode(map);
    lists::register(map);
    math::register(map);
    network::register(map);
    paths::register(map);
    reflection::register(map);
    regex::register(map);
    url::register(map);
}

/// Registers a plain function.
fn add(
    map: &mut FuncMap,
    name: &str,
    sig: Signature,
    f: impl Fn(&[Value]) -> Result<Value, FuncError> + Send + Sync + 'static,
) {
    map.insert(name, Function::new(sig, f));
}
