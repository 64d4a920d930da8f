//! Go's `text/template`, exactly as Helm uses it, in pure Rust (no IO, no async, no unsafe).
//!
//! Start with [`TemplateSet`]: parse sources by name into one set (every `define` is global,
//! the last non-empty definition of a name wins), then execute a named template with a root
//! [`Value`] and a [`FuncMap`]:
//!
//! ```
//! use flotilla_gotmpl::{ExecOptions, FuncMap, TemplateSet, Value};
//!
//! let funcs = FuncMap::new();
//! let mut set = TemplateSet::new("gotpl");
//! set.parse("chart/templates/cm.yaml", r#"{{ define "x" }}[{{ . }}]{{ end }}name: {{ template "x" .name }}"#, &funcs)?;
//! let data = Value::from_json(&serde_json::json!({"name": "demo"}));
//! let out = set.execute("chart/templates/cm.yaml", &data, &funcs, &ExecOptions::helm())?;
//! assert_eq!(out, "name: [demo]");
//! # Ok::<(), flotilla_gotmpl::Error>(())
//! ```
//!
//! Module map:
//! * [`value`]: the Go value model ([`Value`], shared mutable [`Map`]s, typed [`List`]s,
//!   opaque [`Object`]s with fields and methods, Go type names for `typeOf`/`kindOf`).
//! * [`gofmt`]: Go's `fmt`/`strconv` printing (`%v` of maps and slices, shortest floats,
//!   `Sprintf` verbs and error forms).
//! * `lex`, `parse`, `ast`: template text to trees, with Go's exact parse errors
//!   (`template: NAME:LINE: MESSAGE`).
//! * `exec`: Go's execution semantics (truth, `missingkey`, field chains, `range` over
//!   lists, maps in key order and integers, `break`/`continue`, `template`) and the builtins
//!   (`and or not len index slice print printf println html js urlquery call eq ne lt le gt
//!   ge`), with Go's exact execution errors
//!   (`template: NAME:LINE:COL: executing "NAME" at <NODE>: MESSAGE`).
//! * [`signature`]: the function registry. A [`Function`] declares a Go-like [`Signature`]
//!   so calls get Go's arity and type errors; it receives a [`CallCtx`] through which it can
//!   execute named templates (Helm's `include`) or parse text into a clone of the set and
//!   run it (`tpl`). Registered functions shadow builtins of the same name (Sprig's `slice`).
//!
//! # Writing template functions (Sprig, Helm)
//!
//! ```
//! use flotilla_gotmpl::{ArgType, FuncError, FuncMap, Function, Signature, Value};
//!
//! let mut funcs = FuncMap::new();
//! // Go: func(count int, str string) string
//! funcs.insert("repeat", Function::new(Signature::fixed([ArgType::Int, ArgType::String]), |args| {
//!     let (Value::Int(n), Some(s)) = (&args[0], args[1].as_str()) else {
//!         return Err(FuncError::new("unreachable: arguments are checked against the signature"));
//!     };
//!     Ok(Value::string(s.repeat((*n).max(0) as usize)))
//! }));
//! // Go: func(name string, data interface{}) (string, error), reaching the template set.
//! funcs.insert("include", Function::with_ctx(Signature::fixed([ArgType::String, ArgType::Any]), |ctx, args| {
//!     let name = args[0].as_str().unwrap_or_default().to_string();
//!     Ok(Value::from(ctx.execute_template(&name, args[1].clone())?))
//! }));
//! ```
//!
//! * Arguments arrive already checked and converted as Go would: a parameter of type
//!   [`ArgType::Int`] receives a [`Value::Int`] (a `float64` from values fails the call with
//!   `wrong type for value; expected int; got float64`; a literal `3` is accepted);
//!   [`ArgType::Any`] receives anything, Go's nil as [`Value::Nil`]; nillable parameters
//!   (`List`, `StringList`, `Map`) may receive [`Value::Nil`].
//! * Returning [`Value::Nil`] is returning a nil `interface{}`: printed at the end of a
//!   pipeline it gives `<no value>`. Helm deletes `<no value>` from every rendered file; that
//!   is the caller's job, this crate prints what Go prints.
//! * An `Err(FuncError)` becomes `error calling NAME: MESSAGE`. Where Sprig panics, return
//!   the panic message as the error, as text/template recovers panics that way.
//! * [`CallCtx`] reaches the execution: [`CallCtx::execute_template`] (Helm's `include`),
//!   [`CallCtx::templates`] + [`TemplateSet::parse`] on a clone +
//!   [`CallCtx::execute_template_in`] (Helm's `tpl`), [`CallCtx::state`] for per-execution
//!   state such as `include`'s recursion counter, [`CallCtx::options`] for `missingkey`.
//! * Maps are shared by reference ([`Map`]): mutating one (Sprig's `set`, `merge`) is seen by
//!   every holder, including later templates rendered with the same values.
//! * Objects with methods and fields (`.Files.Get`, `.Capabilities.APIVersions.Has`,
//!   semver versions, certificates) implement [`Object`]. Named map types keep being
//!   [`Map`]s ([`MapType::Named`], e.g. `common.Values`); their methods (`.Values.YAML`,
//!   `.Values.Table "x"`) are registered with [`FuncMap::insert_method`].
//!
//! # Limits
//!
//! Parsing bounds nesting ([`MAX_PARSE_DEPTH`]); execution bounds template nesting, stack use,
//! output size and optionally steps ([`ExecOptions`]). Hostile input gets an error, never a
//! stack overflow or a panic.
//!
//! Not modelled: complex numbers (a complex literal is a parse error), function values (so
//! `call` can only fail, as it does in Go for every non-function), channels, custom
//! delimiters, the `%p` verb.

mod ast;
mod exec;
pub mod gofmt;
mod lex;
pub mod names;
mod parse;
pub mod signature;
mod template;
pub mod value;

pub use exec::{CallCtx, Output, html_escape, js_escape, query_escape};
pub use parse::{MAX_PARSE_DEPTH, PARSE_STACK_BUDGET};
pub use signature::{ArgType, FuncError, FuncMap, Function, Signature};
pub use template::{
    HelperThreadHooks, ParsedSource, SharedText, Template, TemplateSet, TemplateSource,
    set_helper_thread_hooks, sort_in_helm_parse_order,
};
pub use value::{ElemType, GoKind, List, Map, MapType, Object, Value};

/// A parse or execution error, with Go's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// `template: NAME:LINE: MESSAGE`
    #[error("{0}")]
    Parse(String),
    /// `template: NAME:LINE:COL: executing "NAME" at <NODE>: MESSAGE`, or
    /// `template: no template "x" associated with template "y"`.
    #[error("{0}")]
    Exec(String),
}

/// What a missing map key evaluates to (Go's `missingkey` option).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissingKey {
    /// `missingkey=default`: no value (prints `<no value>`; field access on it gives no
    /// value).
    Default,
    /// `missingkey=zero` (Helm): the zero value of the element type, for
    /// `map[string]interface {}` the nil interface (prints `<no value>`; field access on it
    /// fails with `nil pointer evaluating interface {}.x`).
    Zero,
    /// `missingkey=error` (Helm's strict mode): `map has no entry for key "x"`.
    Error,
}

/// Execution options and resource limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecOptions {
    /// The `missingkey` behaviour.
    pub missing_key: MissingKey,
    /// Maximum nesting of template invocations (`template`, and `include`-like functions
    /// through [`CallCtx`]); exceeding it gives Go's `exceeded maximum template depth (N)`.
    pub max_depth: usize,
    /// Stack the executor may use below its entry point. Go allows 100000 nested templates,
    /// which a Rust stack cannot hold: deeper nesting (recursive templates, nested control
    /// structures and parentheses) fails with
    /// `exceeded maximum template depth (stack budget of N bytes)` instead of overflowing.
    /// Run executions on threads with at least twice this much stack.
    pub max_stack_bytes: usize,
    /// Maximum bytes written by one execution, counted at every level: text an `include`d
    /// template produces counts once when produced and again when its caller prints it.
    pub max_output_bytes: usize,
    /// Maximum execution steps (nodes walked plus loop iterations), or unlimited.
    pub max_steps: Option<u64>,
}

/// Default for [`ExecOptions::max_depth`]: Go's `maxExecDepth`.
pub const DEFAULT_MAX_DEPTH: usize = 100_000;

/// Default for [`ExecOptions::max_stack_bytes`]: half of the 2 MiB stack Rust gives spawned
/// threads (and tokio its workers).
pub const DEFAULT_MAX_STACK_BYTES: usize = 1 << 20;

impl ExecOptions {
    /// Helm's options: `missingkey=zero`, default limits.
    pub fn helm() -> Self {
        ExecOptions {
            missing_key: MissingKey::Zero,
            ..ExecOptions::default()
        }
    }
}

impl Default for ExecOptions {
    /// Go's defaults (`missingkey=default`) with this crate's limits.
    fn default() -> Self {
        ExecOptions {
            missing_key: MissingKey::Default,
            max_depth: DEFAULT_MAX_DEPTH,
            max_stack_bytes: DEFAULT_MAX_STACK_BYTES,
            max_output_bytes: 256 << 20,
            max_steps: None,
        }
    }
}
