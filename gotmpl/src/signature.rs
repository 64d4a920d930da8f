//! The function registry: [`FuncMap`], [`Function`] and their Go-style [`Signature`]s.
//!
//! text/template checks every call against the function's Go signature with reflection. A
//! Rust function declares the same information as a [`Signature`] (parameter types, optional
//! variadic tail); the executor then produces Go's exact errors
//! (`wrong number of args for X: want N got M`, `wrong type for value; expected int; got
//! float64`, `expected integer; found 3.5`) before the function runs, and hands it arguments
//! that already have the declared types.

use std::fmt;
use std::sync::Arc;

use crate::exec::CallCtx;
use crate::names::NameMap;
use crate::value::{ElemType, MapType, Value};

/// The Go type of a function parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ArgType {
    /// `interface {}`: anything, nil included.
    Any,
    /// `string`, for a function that reads text: a [`Value::RawString`] argument reaches it
    /// as a [`Value::String`] with each invalid UTF-8 sequence replaced by U+FFFD.
    String,
    /// `string`, for a function that handles bytes (`b64enc`, `sha256sum`): it receives a
    /// [`Value::String`] or a [`Value::RawString`] (see [`Value::as_go_bytes`]).
    GoString,
    /// `bool`
    Bool,
    /// `int`
    Int,
    /// `int64`
    Int64,
    /// `uint32` (Sprig's `derivePassword`); literals only, no Go value has this type here.
    Uint32,
    /// `float64`
    Float64,
    /// `[]interface {}`; nil is accepted (passed as [`Value::Nil`]).
    List,
    /// `[]string`; nil is accepted (passed as [`Value::Nil`]).
    StringList,
    /// `map[string]interface {}` (named map types with that underlying type are assignable);
    /// nil is accepted (passed as [`Value::Nil`]).
    Map,
    /// A named map type whose underlying type is `map[string]interface {}`, e.g. Helm's
    /// `common.Values` (`tpl`'s second parameter): any such map is assignable (Go allows a
    /// named and an unnamed type with the same underlying type); errors name this type; nil
    /// is accepted (passed as [`Value::Nil`]).
    NamedMap(&'static str),
    /// An [`Object`](crate::Object) whose [`type_name`](crate::Object::type_name) is exactly
    /// this Go type, e.g. `time.Time`, `*semver.Version`, `sprig.certificate`. Pointer types
    /// (starting with `*`) also accept nil, passed as [`Value::Nil`].
    Object(&'static str),
}

impl ArgType {
    /// The Go spelling used in error messages.
    pub fn go_name(&self) -> &'static str {
        match self {
            ArgType::Any => "interface {}",
            ArgType::String | ArgType::GoString => "string",
            ArgType::Bool => "bool",
            ArgType::Int => "int",
            ArgType::Int64 => "int64",
            ArgType::Uint32 => "uint32",
            ArgType::Float64 => "float64",
            ArgType::List => "[]interface {}",
            ArgType::StringList => "[]string",
            ArgType::Map => "map[string]interface {}",
            ArgType::Object(name) | ArgType::NamedMap(name) => name,
        }
    }

    /// Whether Go's untyped nil can be assigned to the type.
    pub fn can_be_nil(&self) -> bool {
        match self {
            ArgType::Any
            | ArgType::List
            | ArgType::StringList
            | ArgType::Map
            | ArgType::NamedMap(_) => true,
            ArgType::Object(name) => name.starts_with('*'),
            _ => false,
        }
    }

    /// Whether a (non-nil) value of this dynamic type is assignable to the parameter.
    pub fn accepts(&self, v: &Value) -> bool {
        match self {
            ArgType::Any => true,
            ArgType::String | ArgType::GoString => {
                matches!(v, Value::String(_) | Value::RawString(_))
            }
            ArgType::Bool => matches!(v, Value::Bool(_)),
            ArgType::Int => matches!(v, Value::Int(_)),
            ArgType::Int64 => matches!(v, Value::Int64(_)),
            ArgType::Uint32 => false,
            ArgType::Float64 => matches!(v, Value::Float(_)),
            ArgType::List => matches!(v, Value::List(l) if l.elem() == ElemType::Interface),
            ArgType::StringList => matches!(v, Value::List(l) if l.elem() == ElemType::String),
            ArgType::Map => {
                matches!(v, Value::Map(m) if !matches!(m.map_type(), MapType::StringValues))
            }
            ArgType::Object(name) => matches!(v, Value::Object(o) if o.type_name() == *name),
            ArgType::NamedMap(name) => match v {
                Value::Map(m) => match m.map_type() {
                    MapType::Interface => true,
                    MapType::Named(n) => **n == **name,
                    MapType::StringValues => false,
                },
                _ => false,
            },
        }
    }
}

/// The Go signature of a template function or method.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signature {
    /// Fixed parameters.
    pub params: Vec<ArgType>,
    /// The element type of a trailing `...T` parameter.
    pub variadic: Option<ArgType>,
}

impl Signature {
    /// A function with exactly these parameters.
    pub fn fixed(params: impl Into<Vec<ArgType>>) -> Self {
        Signature {
            params: params.into(),
            variadic: None,
        }
    }

    /// A function with these fixed parameters followed by `...rest`.
    pub fn variadic(params: impl Into<Vec<ArgType>>, rest: ArgType) -> Self {
        Signature {
            params: params.into(),
            variadic: Some(rest),
        }
    }

    /// The declared type of argument `i` (0-based), if the function takes that many.
    pub fn param(&self, i: usize) -> Option<&ArgType> {
        self.params.get(i).or(self.variadic.as_ref())
    }
}

/// An error returned by a template function. The executor reports it as
/// `error calling NAME: MESSAGE`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct FuncError {
    message: String,
}

impl FuncError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        FuncError {
            message: message.into(),
        }
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }
}

impl From<crate::Error> for FuncError {
    fn from(err: crate::Error) -> Self {
        FuncError::new(err.to_string())
    }
}

/// The Rust side of a template function: receives the context and the already type-checked
/// arguments.
pub type NativeFn =
    dyn Fn(&mut CallCtx<'_, '_>, &[Value]) -> Result<Value, FuncError> + Send + Sync;

/// A template function: a signature plus an implementation.
#[derive(Clone)]
pub struct Function {
    sig: Signature,
    imp: Arc<NativeFn>,
}

impl fmt::Debug for Function {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Function")
            .field("sig", &self.sig)
            .finish_non_exhaustive()
    }
}

impl Function {
    /// A function that needs the execution context (to run templates, like `include`).
    pub fn with_ctx<F>(sig: Signature, f: F) -> Self
    where
        F: Fn(&mut CallCtx<'_, '_>, &[Value]) -> Result<Value, FuncError> + Send + Sync + 'static,
    {
        Function {
            sig,
            imp: Arc::new(f),
        }
    }

    /// A plain function of its arguments.
    pub fn new<F>(sig: Signature, f: F) -> Self
    where
        F: Fn(&[Value]) -> Result<Value, FuncError> + Send + Sync + 'static,
    {
        Function {
            sig,
            imp: Arc::new(move |_: &mut CallCtx<'_, '_>, args: &[Value]| f(args)),
        }
    }

    /// The signature.
    pub fn signature(&self) -> &Signature {
        &self.sig
    }

    pub(crate) fn call(
        &self,
        ctx: &mut CallCtx<'_, '_>,
        args: &[Value],
    ) -> Result<Value, FuncError> {
        (self.imp)(ctx, args)
    }
}

/// A map from function name to [`Function`], consulted before the builtins (so an entry named
/// like a builtin, e.g. Sprig's `slice`, overrides it).
#[derive(Clone, Debug, Default)]
pub struct FuncMap {
    funcs: NameMap<String, Function>,
    /// Methods of named map types, by type name then method name.
    methods: NameMap<String, NameMap<String, Function>>,
}

impl FuncMap {
    /// An empty map (templates still see the builtins).
    pub fn new() -> Self {
        FuncMap::default()
    }

    /// Adds or replaces a function.
    pub fn insert(&mut self, name: impl Into<String>, f: Function) -> &mut Self {
        self.funcs.insert(name.into(), f);
        self
    }

    /// Removes a function.
    pub fn remove(&mut self, name: &str) -> Option<Function> {
        self.funcs.remove(name)
    }

    /// The function registered under `name`.
    pub fn get(&self, name: &str) -> Option<&Function> {
        self.funcs.get(name)
    }

    /// Whether a function is registered under `name`.
    pub fn contains(&self, name: &str) -> bool {
        self.funcs.contains_key(name)
    }

    /// Copies every function and method of `other` into this map (overriding same names).
    pub fn extend(&mut self, other: &FuncMap) {
        for (k, v) in &other.funcs {
            self.funcs.insert(k.clone(), v.clone());
        }
        for (t, methods) in &other.methods {
            let mine = self.methods.entry(t.clone()).or_default();
            for (k, v) in methods {
                mine.insert(k.clone(), v.clone());
            }
        }
    }

    /// Registers a method of a named map type (a [`Value::Map`] whose type is
    /// [`MapType::Named`]), such as Helm's `common.Values.YAML` or `.Table "name"`. As in Go,
    /// the method takes precedence over a map key of the same name. The function receives
    /// the receiver map as its first argument, then the call's arguments; its signature
    /// declares the call's parameters only.
    pub fn insert_method(
        &mut self,
        type_name: impl Into<String>,
        name: impl Into<String>,
        f: Function,
    ) -> &mut Self {
        self.methods
            .entry(type_name.into())
            .or_default()
            .insert(name.into(), f);
        self
    }

    /// The method `name` of the named map type `type_name`.
    pub fn method(&self, type_name: &str, name: &str) -> Option<&Function> {
        self.methods.get(type_name).and_then(|m| m.get(name))
    }

    /// The registered names (unordered).
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.funcs.keys().map(String::as_str)
    }
}
