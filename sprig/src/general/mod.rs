//! Sprig's general-purpose families (everything but crypto, dates and semver), one module per
//! family. Each follows Sprig v3.3.0 as Helm exposes it: Go's typed parameters (declared in
//! each [`Signature`]), `spf13/cast` conversions for `interface{}` parameters, and Sprig's
//! panics reported as the errors text/template makes of them.
//!
//! Choices where Go is not deterministic or not representable:
//! * `keys` and `values` iterate Go maps in random order; here each map contributes its keys
//!   (or values) in sorted key order.
//! * Go strings may hold invalid UTF-8 (`substr`/`trunc` in the middle of a rune, `b64dec` of
//!   binary data); [`Value::String`] cannot, so such bytes become U+FFFD.

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
mod regex;
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
