//! The executor: walks a parsed template with data, following Go's `text/template/exec.go`
//! and the builtins of `funcs.go`.
//!
//! Internally a value carries whether it sits in an `interface {}` slot (a map or slice
//! element, a function result): Go's messages name that static type
//! (`nil pointer evaluating interface {}.x`, `can't evaluate field x in type interface {}`),
//! and a nil interface differs from "no value" (a missing key under `missingkey=default`, an
//! unset `$x`): `.a.b` on a nil `.a` fails, `$x.b` on an invalid `$x` gives no value.

use std::sync::Arc;

use crate::ast::{Arg, Ast, Branch, Command, Node, Number, Pipe, Span, SrcStr};
use crate::gofmt;
use crate::signature::{ArgType, FuncMap, Function, Signature};
use crate::template::{Template, TemplateSet};
use crate::value::{ElemType, MapType, Object, Value};
use crate::{Error, ExecOptions, MissingKey};

/// A value during execution.
#[derive(Clone, Debug)]
pub(crate) enum Ev {
    /// Go's invalid `reflect.Value`: no value at all (prints `<no value>`).
    Invalid,
    /// A concrete value of its own dynamic type.
    Val(Value),
    /// A value held in an `interface {}` slot; `Iface(Value::Nil)` is the nil interface.
    Iface(Value),
}

impl Ev {
    /// `indirectInterface`: the concrete value, or `None` for nil/invalid.
    fn concrete(&self) -> Option<&Value> {
        match self {
            Ev::Invalid | Ev::Iface(Value::Nil) | Ev::Val(Value::Nil) => None,
            Ev::Val(v) | Ev::Iface(v) => Some(v),
        }
    }

    /// Pipeline-end unwrapping of `interface {}` values.
    fn unwrap_iface(self) -> Ev {
        match self {
            Ev::Iface(Value::Nil) | Ev::Val(Value::Nil) => Ev::Invalid,
            Ev::Iface(v) => Ev::Val(v),
            other => other,
        }
    }

    /// The static Go type name (`interface {}` for interface slots).
    fn static_type(&self) -> String {
        match self {
            Ev::Invalid => "<invalid>".to_string(),
            Ev::Iface(_) => "interface {}".to_string(),
            Ev::Val(v) => v.type_name(),
        }
    }

    fn truth(&self) -> bool {
        self.concrete().is_some_and(Value::is_true)
    }

    /// The value as a Go `interface {}` argument (nil for no value).
    pub(crate) fn into_value(self) -> Value {
        match self {
            Ev::Invalid => Value::Nil,
            Ev::Val(v) | Ev::Iface(v) => v,
        }
    }
}

fn elem_ev(list_elem: ElemType, v: Value) -> Ev {
    if list_elem == ElemType::Interface {
        Ev::Iface(v)
    } else {
        Ev::Val(v)
    }
}

fn map_elem_ev(m: &MapType, v: Value) -> Ev {
    if *m == MapType::StringValues {
        Ev::Val(v)
    } else {
        Ev::Iface(v)
    }
}

fn map_zero(m: &MapType) -> Ev {
    if *m == MapType::StringValues {
        Ev::Val(Value::string(""))
    } else {
        Ev::Iface(Value::Nil)
    }
}

/// Control flow out of a walk.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Flow {
    Normal,
    Break,
    Continue,
}

/// The node errors are reported at (Go's `state.node`).
#[derive(Clone, Copy)]
enum Cur<'t> {
    None,
    Node(&'t Node, usize),
    Pipe(&'t Pipe),
    Cmd(&'t Command),
    Arg(&'t Arg),
}

impl Cur<'_> {
    fn pos(&self, ast: &Ast) -> usize {
        match self {
            Cur::None => 0,
            Cur::Node(_, pos) => *pos,
            Cur::Pipe(p) => p.pos as usize,
            Cur::Cmd(c) => c.pos as usize,
            Cur::Arg(a) => ast.arg_pos(a),
        }
    }

    fn context(&self, ast: &Ast) -> String {
        match self {
            Cur::None => String::new(),
            Cur::Node(n, _) => ast.show(*n).to_string(),
            Cur::Pipe(p) => ast.show(*p).to_string(),
            Cur::Cmd(c) => ast.show(*c).to_string(),
            Cur::Arg(a) => ast.show(*a).to_string(),
        }
    }
}

/// State shared by every template invocation of one execution.
pub(crate) struct Shared<'f> {
    pub funcs: &'f FuncMap,
    pub opts: &'f ExecOptions,
    /// Nested template invocations (Go's `state.depth`).
    pub depth: usize,
    pub out_bytes: usize,
    pub steps: u64,
    /// Stack position when the execution started.
    pub stack_base: usize,
    /// Per-execution state of functions, by type (see [`CallCtx::state`]).
    pub states: Vec<Box<dyn std::any::Any + Send>>,
    /// Emptied argument vectors of finished calls, reused by the next ones (a call would
    /// otherwise allocate one).
    argv_pool: Vec<Vec<Ev>>,
    /// Emptied output buffers of [`CallCtx::execute_template_value`], reused likewise.
    out_pool: Vec<String>,
}

impl<'f> Shared<'f> {
    pub(crate) fn new(funcs: &'f FuncMap, opts: &'f ExecOptions) -> Self {
        Shared {
            funcs,
            opts,
            depth: 0,
            out_bytes: 0,
            steps: 0,
            stack_base: stack_position(),
            states: Vec::new(),
            argv_pool: Vec::new(),
            out_pool: Vec::new(),
        }
    }
}

/// The address of a local: how deep the stack currently is (compared, never dereferenced).
#[inline(never)]
pub(crate) fn stack_position() -> usize {
    let probe = 0u8;
    std::hint::black_box(std::ptr::addr_of!(probe)) as usize
}

/// What a function implementation can reach of the running execution: the template set (to
/// execute named templates, like Helm's `include`, or to parse new text into a copy of the
/// set, like `tpl`), the function map and the execution options.
pub struct CallCtx<'a, 'f> {
    shared: &'a mut Shared<'f>,
    set: &'a TemplateSet,
}

impl std::fmt::Debug for CallCtx<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallCtx")
            .field("depth", &self.shared.depth)
            .finish_non_exhaustive()
    }
}

impl<'f> CallCtx<'_, 'f> {
    /// The template set being executed.
    pub fn templates(&self) -> &TemplateSet {
        self.set
    }

    /// The function map of this execution.
    pub fn funcs(&self) -> &'f FuncMap {
        self.shared.funcs
    }

    /// The execution options.
    pub fn options(&self) -> &'f ExecOptions {
        self.shared.opts
    }

    /// State of type `T` private to this execution and shared by every function call in it,
    /// nested `include`s and `tpl`s included (created with `T::default()` on first use).
    /// Helm's `include` keeps its per-name recursion counter here.
    pub fn state<T: Default + Send + 'static>(&mut self) -> &mut T {
        let states = &mut self.shared.states;
        let i = match states.iter().position(|s| s.is::<T>()) {
            Some(i) => i,
            None => {
                states.push(Box::new(T::default()));
                states.len() - 1
            }
        };
        states[i]
            .downcast_mut::<T>()
            .expect("the state at this index has type T")
    }

    /// Executes the named template of the current set with `data` as dot and `$`
    /// (Go's `ExecuteTemplate`), sharing this execution's depth and output limits.
    /// The output is text: bytes that are not UTF-8 (printed Go strings holding binary data)
    /// become U+FFFD; [`CallCtx::execute_template_value`] keeps them.
    pub fn execute_template(&mut self, name: &str, data: Value) -> Result<String, Error> {
        let set = self.set;
        self.execute_template_in(set, name, data)
    }

    /// Executes the named template of another set (e.g. a clone holding text parsed by
    /// `tpl`), sharing this execution's depth and output limits.
    pub fn execute_template_in(
        &mut self,
        set: &TemplateSet,
        name: &str,
        data: Value,
    ) -> Result<String, Error> {
        let (tmpl, dot) = invocation(set, name, data)?;
        run_template(self.shared, set, tmpl, dot).map(Output::into_text)
    }

    /// [`CallCtx::execute_template`] with the output as a Go string: rendered into a buffer
    /// kept for the next invocation, then copied once into the string (instead of a fresh
    /// buffer each time, grown, copied and freed).
    pub fn execute_template_value(&mut self, name: &str, data: Value) -> Result<Value, Error> {
        /// Buffers that grew past this are freed rather than kept.
        const KEEP_CAPACITY: usize = 64 << 10;
        let set = self.set;
        let (tmpl, dot) = invocation(set, name, data)?;
        let buf = self
            .shared
            .out_pool
            .pop()
            .unwrap_or_else(|| String::with_capacity(FIRST_CAPACITY));
        let out = run_template_into(self.shared, set, tmpl, dot, Output::Text(buf))?;
        let value = out.to_value();
        if let Output::Text(mut text) = out
            && text.capacity() <= KEEP_CAPACITY
        {
            text.clear();
            self.shared.out_pool.push(text);
        }
        Ok(value)
    }
}

/// The named template of `set` and the dot of its invocation with `data`.
fn invocation<'s>(
    set: &'s TemplateSet,
    name: &str,
    data: Value,
) -> Result<(&'s Template, Ev), Error> {
    let Some(tmpl) = set.get(name) else {
        return Err(Error::Exec(format!(
            "template: no template {} associated with template {}",
            gofmt::quote(name),
            gofmt::quote(set.name())
        )));
    };
    let dot = if data.is_nil() {
        Ev::Invalid
    } else {
        Ev::Val(data)
    };
    Ok((tmpl, dot))
}

/// Most invocations (`include`s of names, labels, small blocks) write a few hundred bytes:
/// one allocation of this size instead of doubling up to it from eight.
const FIRST_CAPACITY: usize = 256;

/// What a template wrote. Text until it prints a Go string that is not UTF-8
/// ([`Value::RawString`]): bytes from then on. Text, nearly always, is never validated
/// again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Valid UTF-8.
    Text(String),
    /// Bytes that are not valid UTF-8.
    Bytes(Vec<u8>),
}

impl Output {
    pub(crate) fn push_str(&mut self, s: &str) {
        match self {
            Output::Text(t) => t.push_str(s),
            Output::Bytes(b) => b.extend_from_slice(s.as_bytes()),
        }
    }

    pub(crate) fn push_bytes(&mut self, bytes: &[u8]) {
        if let Output::Text(t) = self {
            *self = Output::Bytes(std::mem::take(t).into_bytes());
        }
        if let Output::Bytes(b) = self {
            b.extend_from_slice(bytes);
        }
    }

    /// The output as text: each invalid UTF-8 sequence a U+FFFD.
    pub fn into_text(self) -> String {
        match self {
            Output::Text(t) => t,
            Output::Bytes(b) => match String::from_utf8(b) {
                Ok(t) => t,
                Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
            },
        }
    }

    /// The output's bytes.
    pub fn into_bytes(self) -> Vec<u8> {
        match self {
            Output::Text(t) => t.into_bytes(),
            Output::Bytes(b) => b,
        }
    }

    /// The output as a Go string.
    pub fn to_value(&self) -> Value {
        match self {
            Output::Text(t) => Value::string(t),
            Output::Bytes(b) => Value::go_string(b),
        }
    }
}

impl Default for Output {
    fn default() -> Self {
        Output::Text(String::new())
    }
}

/// Runs one template invocation to bytes (Go strings may hold any).
pub(crate) fn run_template(
    shared: &mut Shared<'_>,
    set: &TemplateSet,
    tmpl: &Template,
    dot: Ev,
) -> Result<Output, Error> {
    run_template_into(
        shared,
        set,
        tmpl,
        dot,
        Output::Text(String::with_capacity(FIRST_CAPACITY)),
    )
}

/// Runs one template invocation, appending to `out` (nested `{{template}}` calls write into
/// their caller's buffer instead of copying it at every level).
fn run_template_into(
    shared: &mut Shared<'_>,
    set: &TemplateSet,
    tmpl: &Template,
    dot: Ev,
    out: Output,
) -> Result<Output, Error> {
    let mut frame = Frame {
        shared,
        set,
        tmpl,
        ast: &tmpl.ast,
        cur: Cur::None,
        dollar: dot.clone(),
        vars: Vec::new(),
        out,
    };
    frame.enter_template()?;
    let r = frame.walk_list(&dot, tmpl.root);
    frame.shared.depth -= 1;
    r?;
    Ok(frame.out)
}

/// One template invocation.
struct Frame<'t, 's, 'f> {
    shared: &'s mut Shared<'f>,
    set: &'t TemplateSet,
    tmpl: &'t Template,
    /// The tree `tmpl` is part of.
    ast: &'t Ast,
    cur: Cur<'t>,
    /// `$`, the outermost variable (kept out of `vars`, which most invocations then never
    /// allocate).
    dollar: Ev,
    /// The variables declared so far, innermost last.
    vars: Vec<(&'t str, Ev)>,
    out: Output,
}

type R<T> = Result<T, Error>;

/// A callable: a registered function, a builtin or an object method.
enum Callable<'t> {
    Func(&'t Function),
    Builtin(Builtin),
    Method(Arc<dyn Object>, Signature),
    /// A method registered for a named map type; the receiver is passed first.
    MapMethod(&'t Function, Value),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Builtin {
    And,
    Or,
    Not,
    Len,
    Index,
    Slice,
    Print,
    Printf,
    Println,
    Html,
    Js,
    Urlquery,
    Call,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

/// The names of Go's builtin template functions.
pub const BUILTIN_NAMES: &[&str] = &[
    "and", "call", "html", "index", "slice", "js", "len", "not", "or", "print", "printf",
    "println", "urlquery", "eq", "ge", "gt", "le", "lt", "ne",
];

fn builtin(name: &str) -> Option<Builtin> {
    Some(match name {
        "and" => Builtin::And,
        "or" => Builtin::Or,
        "not" => Builtin::Not,
        "len" => Builtin::Len,
        "index" => Builtin::Index,
        "slice" => Builtin::Slice,
        "print" => Builtin::Print,
        "printf" => Builtin::Printf,
        "println" => Builtin::Println,
        "html" => Builtin::Html,
        "js" => Builtin::Js,
        "urlquery" => Builtin::Urlquery,
        "call" => Builtin::Call,
        "eq" => Builtin::Eq,
        "ne" => Builtin::Ne,
        "lt" => Builtin::Lt,
        "le" => Builtin::Le,
        "gt" => Builtin::Gt,
        "ge" => Builtin::Ge,
        _ => return None,
    })
}

/// Parameter kinds of builtins: Go's `reflect.Value` (raw), `interface {}` and `string`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum BParam {
    Raw,
    Any,
    Str,
}

impl Builtin {
    /// (fixed parameters, variadic element)
    fn signature(self) -> (&'static [BParam], Option<BParam>) {
        use BParam::*;
        match self {
            Builtin::And
            | Builtin::Or
            | Builtin::Index
            | Builtin::Slice
            | Builtin::Call
            | Builtin::Eq => (&[Raw], Some(Raw)),
            Builtin::Not | Builtin::Len => (&[Raw], None),
            Builtin::Print | Builtin::Println | Builtin::Html | Builtin::Js | Builtin::Urlquery => {
                (&[], Some(Any))
            }
            Builtin::Printf => (&[Str], Some(Any)),
            Builtin::Ne | Builtin::Lt | Builtin::Le | Builtin::Gt | Builtin::Ge => {
                (&[Raw, Raw], None)
            }
        }
    }
}

/// A parameter type: a builtin's or a registered function's.
#[derive(Clone, Copy)]
enum PType<'a> {
    B(BParam),
    T(&'a ArgType),
}

/// Fixed parameter types, borrowed (no allocation per call).
#[derive(Clone, Copy)]
enum Params<'a> {
    B(&'static [BParam]),
    T(&'a [ArgType]),
}

impl<'a> Params<'a> {
    fn len(&self) -> usize {
        match self {
            Params::B(p) => p.len(),
            Params::T(p) => p.len(),
        }
    }

    fn get(&self, i: usize) -> Option<PType<'a>> {
        match self {
            Params::B(p) => p.get(i).map(|b| PType::B(*b)),
            Params::T(p) => p.get(i).map(PType::T),
        }
    }
}

impl PType<'_> {
    fn go_name(&self) -> &'static str {
        match self {
            PType::B(BParam::Raw) => "reflect.Value",
            PType::B(BParam::Any) => "interface {}",
            PType::B(BParam::Str) => "string",
            PType::T(t) => t.go_name(),
        }
    }
}

impl<'t, 'f> Frame<'t, '_, 'f> {
    fn errorf<T>(&self, msg: impl AsRef<str>) -> R<T> {
        let name = &self.tmpl.name;
        if let Cur::None = self.cur {
            return Err(Error::Exec(format!("template: {name}: {}", msg.as_ref())));
        }
        let src = self.ast.src();
        let pos = self.cur.pos(self.ast).min(src.len());
        let text = &src[..floor_char_boundary(src, pos)];
        let (line, col) = match text.rfind('\n') {
            Some(i) => (1 + text.matches('\n').count(), text.len() - (i + 1)),
            None => (1, text.len()),
        };
        Err(Error::Exec(format!(
            "template: {}:{line}:{col}: executing {} at <{}>: {}",
            self.tmpl.parse_name,
            gofmt::quote(name),
            self.cur.context(self.ast),
            msg.as_ref()
        )))
    }

    fn enter_template(&mut self) -> R<()> {
        self.check_depth()?;
        self.shared.depth += 1;
        Ok(())
    }

    /// Go's template nesting limit, plus the stack budget that keeps deep (recursive)
    /// templates from overflowing the Rust stack.
    fn check_depth(&self) -> R<()> {
        if self.shared.depth >= self.shared.opts.max_depth {
            return self.errorf(format!(
                "exceeded maximum template depth ({})",
                self.shared.opts.max_depth
            ));
        }
        self.check_stack()
    }

    fn check_stack(&self) -> R<()> {
        if stack_position().abs_diff(self.shared.stack_base) > self.shared.opts.max_stack_bytes {
            return self.errorf(format!(
                "exceeded maximum template depth (stack budget of {} bytes)",
                self.shared.opts.max_stack_bytes
            ));
        }
        Ok(())
    }

    fn step(&mut self) -> R<()> {
        self.shared.steps += 1;
        if let Some(max) = self.shared.opts.max_steps
            && self.shared.steps > max
        {
            return self.errorf(format!(
                "exceeded maximum number of execution steps ({max})"
            ));
        }
        Ok(())
    }

    fn write(&mut self, s: &str) -> R<()> {
        self.count_output(s.len())?;
        self.out.push_str(s);
        Ok(())
    }

    /// Writes the bytes of a Go string that is not UTF-8.
    fn write_bytes(&mut self, s: &[u8]) -> R<()> {
        self.count_output(s.len())?;
        self.out.push_bytes(s);
        Ok(())
    }

    fn count_output(&mut self, n: usize) -> R<()> {
        self.shared.out_bytes = self.shared.out_bytes.saturating_add(n);
        if self.shared.out_bytes > self.shared.opts.max_output_bytes {
            return self.errorf(format!(
                "output exceeds the limit of {} bytes",
                self.shared.opts.max_output_bytes
            ));
        }
        Ok(())
    }

    fn var_value(&self, name: &str) -> R<Ev> {
        for (n, v) in self.vars.iter().rev() {
            if *n == name {
                return Ok(v.clone());
            }
        }
        if name == "$" {
            return Ok(self.dollar.clone());
        }
        self.errorf(format!("undefined variable: {name}"))
    }

    fn set_var(&mut self, name: &str, value: Ev) -> R<()> {
        for (n, v) in self.vars.iter_mut().rev() {
            if *n == name {
                *v = value;
                return Ok(());
            }
        }
        if name == "$" {
            self.dollar = value;
            return Ok(());
        }
        self.errorf(format!("undefined variable: {name}"))
    }

    fn set_top_var(&mut self, n: usize, value: Ev) {
        let len = self.vars.len();
        if let Some(slot) = len.checked_sub(n).and_then(|i| self.vars.get_mut(i)) {
            slot.1 = value;
        }
    }

    // ---- walking ----

    fn walk_list(&mut self, dot: &Ev, list: Span) -> R<Flow> {
        for node in self.ast.nodes(list) {
            let flow = self.walk(dot, node)?;
            if flow != Flow::Normal {
                return Ok(flow);
            }
        }
        Ok(Flow::Normal)
    }

    fn walk(&mut self, dot: &Ev, node: &'t Node) -> R<Flow> {
        self.step()?;
        let ast = self.ast;
        match node {
            Node::Text(t) => {
                self.write(ast.str(*t))?;
            }
            Node::Action(pipe) => {
                let pipe = ast.pipe(*pipe);
                let pos = pipe.pos as usize;
                self.cur = Cur::Node(node, pos);
                let val = self.eval_pipeline(dot, pipe)?;
                if pipe.decl.is_empty() {
                    self.cur = Cur::Node(node, pos);
                    match val {
                        Ev::Invalid => self.write("<no value>")?,
                        Ev::Val(Value::String(s)) | Ev::Iface(Value::String(s)) => {
                            self.write(&s)?
                        }
                        Ev::Val(Value::RawString(b)) | Ev::Iface(Value::RawString(b)) => {
                            self.write_bytes(&b)?
                        }
                        other => {
                            let s = gofmt::sprint_value(&other.into_value());
                            self.write(&s)?;
                        }
                    }
                }
            }
            Node::If(b) => {
                let b = ast.branch(*b);
                return self.nested(|f| f.walk_if_or_with(false, dot, node, b));
            }
            Node::With(b) => {
                let b = ast.branch(*b);
                return self.nested(|f| f.walk_if_or_with(true, dot, node, b));
            }
            Node::Range(b) => {
                let b = ast.branch(*b);
                return self.nested(|f| f.walk_range(dot, node, b));
            }
            Node::Template(c) => {
                let c = ast.call(*c);
                let pos = c.pos as usize;
                self.cur = Cur::Node(node, pos);
                let pipe = c.pipe.map(|p| ast.pipe(p));
                self.walk_template(dot, node, pos, ast.str(c.name), pipe)?;
            }
            Node::Break => return Ok(Flow::Break),
            Node::Continue => return Ok(Flow::Continue),
        }
        Ok(Flow::Normal)
    }

    /// Runs `f` one nesting level deeper (bounded to keep the Rust stack safe).
    fn nested<T>(&mut self, f: impl FnOnce(&mut Self) -> R<T>) -> R<T> {
        self.check_stack()?;
        f(self)
    }

    fn walk_if_or_with(&mut self, with: bool, dot: &Ev, node: &'t Node, b: &'t Branch) -> R<Flow> {
        self.cur = Cur::Node(node, b.pos as usize);
        let mark = self.vars.len();
        let r = (|| {
            let val = self.eval_pipeline(dot, self.ast.pipe(b.pipe))?;
            if val.truth() {
                if with {
                    self.walk_list(&val, b.list)
                } else {
                    self.walk_list(dot, b.list)
                }
            } else if let Some(e) = b.else_list {
                self.walk_list(dot, e)
            } else {
                Ok(Flow::Normal)
            }
        })();
        self.vars.truncate(mark);
        r
    }

    fn walk_range(&mut self, dot: &Ev, node: &'t Node, r: &'t Branch) -> R<Flow> {
        self.cur = Cur::Node(node, r.pos as usize);
        let outer_mark = self.vars.len();
        let result = self.walk_range_inner(dot, r);
        self.vars.truncate(outer_mark);
        result.map(|_| Flow::Normal)
    }

    fn range_iteration(&mut self, r: &'t Branch, mark: usize, index: Ev, elem: Ev) -> R<Flow> {
        let ast = self.ast;
        let pipe = ast.pipe(r.pipe);
        let decl = ast.names(pipe.decl);
        if !decl.is_empty() {
            if pipe.is_assign {
                if decl.len() > 1 {
                    self.set_var(ast.str(decl[0]), index.clone())?;
                } else {
                    self.set_var(ast.str(decl[0]), elem.clone())?;
                }
            } else {
                self.set_top_var(1, elem.clone());
            }
        }
        if decl.len() > 1 {
            if pipe.is_assign {
                self.set_var(ast.str(decl[1]), elem.clone())?;
            } else {
                self.set_top_var(2, index);
            }
        }
        self.step()?;
        let flow = self.walk_list(&elem, r.list);
        self.vars.truncate(mark);
        flow
    }

    fn walk_range_inner(&mut self, dot: &Ev, r: &'t Branch) -> R<()> {
        let pipe = self.ast.pipe(r.pipe);
        let val = self.eval_pipeline(dot, pipe)?;
        let mark = self.vars.len();
        let mut ran = false;
        match val.concrete().cloned() {
            Some(Value::List(l)) => {
                for (i, item) in l.items().iter().enumerate() {
                    ran = true;
                    let elem = elem_ev(l.elem(), item.clone());
                    if self.range_iteration(r, mark, Ev::Val(Value::Int(i as i64)), elem)?
                        == Flow::Break
                    {
                        break;
                    }
                }
            }
            Some(Value::Bytes(b)) => {
                for (i, x) in b.iter().enumerate() {
                    ran = true;
                    let elem = Ev::Val(Value::Uint8(*x));
                    if self.range_iteration(r, mark, Ev::Val(Value::Int(i as i64)), elem)?
                        == Flow::Break
                    {
                        break;
                    }
                }
            }
            Some(Value::Map(m)) => {
                let ty = m.map_type().clone();
                for (k, v) in m.entries() {
                    ran = true;
                    if self.range_iteration(
                        r,
                        mark,
                        Ev::Val(Value::string(&k)),
                        map_elem_ev(&ty, v),
                    )? == Flow::Break
                    {
                        break;
                    }
                }
            }
            Some(v @ (Value::Int(_) | Value::Int64(_) | Value::Uint64(_) | Value::Uint8(_))) => {
                if pipe.decl.len() > 1 {
                    return self.errorf(format!(
                        "can't use {} to iterate over more than one variable",
                        gofmt::sprint_value(&v)
                    ));
                }
                let n: u64 = match v {
                    Value::Int(i) | Value::Int64(i) => u64::try_from(i).unwrap_or(0),
                    Value::Uint64(u) => u,
                    Value::Uint8(u) => u64::from(u),
                    _ => 0,
                };
                for i in 0..n {
                    ran = true;
                    let elem = match v {
                        Value::Int(_) => Value::Int(i as i64),
                        Value::Int64(_) => Value::Int64(i as i64),
                        Value::Uint8(_) => Value::Uint8(i as u8),
                        _ => Value::Uint64(i),
                    };
                    if self.range_iteration(r, mark, Ev::Invalid, Ev::Val(elem))? == Flow::Break {
                        break;
                    }
                }
            }
            Some(Value::Object(o)) => match (o.map_entries(), o.list_items()) {
                (Some(entries), _) => {
                    for (k, v) in entries {
                        ran = true;
                        if self.range_iteration(r, mark, Ev::Val(Value::string(&k)), Ev::Val(v))?
                            == Flow::Break
                        {
                            break;
                        }
                    }
                }
                (None, Some(items)) => {
                    for (i, v) in items.into_iter().enumerate() {
                        ran = true;
                        if self.range_iteration(
                            r,
                            mark,
                            Ev::Val(Value::Int(i as i64)),
                            Ev::Val(v),
                        )? == Flow::Break
                        {
                            break;
                        }
                    }
                }
                (None, None) => {
                    return self.errorf(format!("range can't iterate over {}", o.display()));
                }
            },
            None => {}
            Some(other) => {
                return self.errorf(format!(
                    "range can't iterate over {}",
                    gofmt::sprint_value(&other)
                ));
            }
        }
        if !ran && let Some(e) = r.else_list {
            self.walk_list(dot, e)?;
        }
        Ok(())
    }

    fn walk_template(
        &mut self,
        dot: &Ev,
        node: &'t Node,
        pos: usize,
        name: &str,
        pipe: Option<&'t Pipe>,
    ) -> R<()> {
        let Some(tmpl) = self.set.get(name) else {
            return self.errorf(format!("template {} not defined", gofmt::quote(name)));
        };
        self.check_depth()?;
        let new_dot = match pipe {
            Some(p) => self.eval_pipeline(dot, p)?,
            None => Ev::Invalid,
        };
        self.cur = Cur::Node(node, pos);
        let set = self.set;
        let buffer = std::mem::take(&mut self.out);
        self.out = run_template_into(self.shared, set, tmpl, new_dot, buffer)?;
        Ok(())
    }

    // ---- evaluation ----

    fn eval_pipeline(&mut self, dot: &Ev, pipe: &'t Pipe) -> R<Ev> {
        self.cur = Cur::Pipe(pipe);
        let ast = self.ast;
        let mut value: Option<Ev> = None;
        for cmd in ast.cmds(pipe.cmds) {
            let v = self.eval_command(dot, cmd, value.take())?;
            value = Some(v.unwrap_iface());
        }
        let value = value.unwrap_or(Ev::Invalid);
        for name in ast.names(pipe.decl) {
            let name = ast.str(*name);
            if pipe.is_assign {
                self.set_var(name, value.clone())?;
            } else {
                self.vars.push((name, value.clone()));
            }
        }
        Ok(value)
    }

    fn not_a_function(&self, args: &'t [Arg], fin: &Option<Ev>) -> R<()> {
        if args.len() > 1 || fin.is_some() {
            return self.errorf(format!(
                "can't give argument to non-function {}",
                self.ast.show(&args[0])
            ));
        }
        Ok(())
    }

    fn eval_command(&mut self, dot: &Ev, cmd: &'t Command, fin: Option<Ev>) -> R<Ev> {
        let ast = self.ast;
        let args = ast.args(cmd.args);
        let Some(first) = args.first() else {
            return self.errorf("empty command");
        };
        match first {
            Arg::Field { .. } => return self.eval_field_node(dot, first, args, fin),
            Arg::Chain { .. } => return self.eval_chain_node(dot, first, args, fin),
            Arg::Identifier { name, .. } => {
                return self.eval_function(dot, first, ast.str(*name), Cur::Cmd(cmd), args, fin);
            }
            Arg::Pipe(p) => {
                self.not_a_function(args, &fin)?;
                return self.nested(|f| f.eval_pipeline(dot, ast.pipe(*p)));
            }
            Arg::Variable { .. } => return self.eval_variable_node(dot, first, args, fin),
            _ => {}
        }
        self.cur = Cur::Arg(first);
        self.not_a_function(args, &fin)?;
        match first {
            Arg::Bool { val, .. } => Ok(Ev::Val(Value::Bool(*val))),
            Arg::Dot { .. } => Ok(dot.clone()),
            Arg::Nil { .. } => self.errorf("nil is not a command"),
            Arg::Number(n) => self.ideal_constant(first, ast.number(*n)),
            Arg::String { lit, .. } => Ok(Ev::Val(Value::String(ast.string_value(*lit)))),
            _ => self.errorf(format!(
                "can't evaluate command {}",
                gofmt::quote(&ast.show(first).to_string())
            )),
        }
    }

    fn ideal_constant(&mut self, node: &'t Arg, n: &Number) -> R<Ev> {
        self.cur = Cur::Arg(node);
        let t = self.ast.str(n.text);
        let is_hex_int = t.len() > 2
            && t.starts_with('0')
            && matches!(t.as_bytes()[1], b'x' | b'X')
            && !t.contains(['p', 'P']);
        let is_rune = t.starts_with('\'');
        if n.is_float && !is_hex_int && !is_rune && t.contains(['.', 'e', 'E', 'p', 'P']) {
            return Ok(Ev::Val(Value::Float(n.float)));
        }
        if n.is_int {
            return Ok(Ev::Val(Value::Int(n.int)));
        }
        if n.is_uint {
            return self.errorf(format!("{t} overflows int"));
        }
        Ok(Ev::Invalid)
    }

    fn eval_field_node(
        &mut self,
        dot: &Ev,
        field: &'t Arg,
        args: &'t [Arg],
        fin: Option<Ev>,
    ) -> R<Ev> {
        self.cur = Cur::Arg(field);
        let Arg::Field { idents, .. } = field else {
            return self.errorf("internal error: not a field");
        };
        let idents = self.ast.names(*idents);
        self.eval_field_chain(dot, dot.clone(), field, idents, args, fin)
    }

    fn eval_chain_node(
        &mut self,
        dot: &Ev,
        chain: &'t Arg,
        args: &'t [Arg],
        fin: Option<Ev>,
    ) -> R<Ev> {
        self.cur = Cur::Arg(chain);
        let ast = self.ast;
        let Arg::Chain { node, fields, .. } = chain else {
            return self.errorf("internal error: not a chain");
        };
        let (node, fields) = (ast.arg(*node), ast.names(*fields));
        if fields.is_empty() {
            return self.errorf("internal error: no fields in evalChainNode");
        }
        if let Arg::Nil { .. } = node {
            return self.errorf(format!(
                "indirection through explicit nil in {}",
                ast.show(chain)
            ));
        }
        let pipe = self.nested(|f| f.eval_arg_raw(dot, node))?;
        self.eval_field_chain(dot, pipe, chain, fields, args, fin)
    }

    fn eval_variable_node(
        &mut self,
        dot: &Ev,
        var: &'t Arg,
        args: &'t [Arg],
        fin: Option<Ev>,
    ) -> R<Ev> {
        self.cur = Cur::Arg(var);
        let ast = self.ast;
        let Arg::Variable { idents, .. } = var else {
            return self.errorf("internal error: not a variable");
        };
        let idents = ast.names(*idents);
        let value = self.var_value(ast.str(idents[0]))?;
        if idents.len() == 1 {
            if !args.is_empty() {
                self.not_a_function(args, &fin)?;
            } else if fin.is_some() {
                return self.errorf(format!(
                    "can't give argument to non-function {}",
                    ast.show(var)
                ));
            }
            return Ok(value);
        }
        self.eval_field_chain(dot, value, var, &idents[1..], args, fin)
    }

    fn eval_field_chain(
        &mut self,
        dot: &Ev,
        mut receiver: Ev,
        node: &'t Arg,
        idents: &'t [SrcStr],
        args: &'t [Arg],
        fin: Option<Ev>,
    ) -> R<Ev> {
        let ast = self.ast;
        let n = idents.len();
        for ident in &idents[..n.saturating_sub(1)] {
            receiver = self.eval_field(dot, ast.str(*ident), node, &[], None, receiver)?;
        }
        match idents.last() {
            Some(last) => self.eval_field(dot, ast.str(*last), node, args, fin, receiver),
            None => Ok(receiver),
        }
    }

    fn eval_function(
        &mut self,
        dot: &Ev,
        ident: &'t Arg,
        name: &str,
        cmd: Cur<'t>,
        args: &'t [Arg],
        fin: Option<Ev>,
    ) -> R<Ev> {
        self.cur = Cur::Arg(ident);
        let funcs = self.shared.funcs;
        let callable = if let Some(f) = funcs.get(name) {
            Callable::Func(f)
        } else if let Some(b) = builtin(name) {
            Callable::Builtin(b)
        } else {
            return self.errorf(format!("{} is not a defined function", gofmt::quote(name)));
        };
        self.eval_call(dot, callable, cmd, name, args, fin)
    }

    fn eval_field(
        &mut self,
        dot: &Ev,
        name: &str,
        node: &'t Arg,
        args: &'t [Arg],
        fin: Option<Ev>,
        receiver: Ev,
    ) -> R<Ev> {
        if let Ev::Invalid = receiver {
            if self.shared.opts.missing_key == MissingKey::Error {
                return self.errorf(format!("nil data; no entry for key {}", gofmt::quote(name)));
            }
            return Ok(Ev::Invalid);
        }
        let Some(value) = receiver.concrete() else {
            let typ = receiver.static_type();
            return self.errorf(format!("nil pointer evaluating {typ}.{name}"));
        };
        if let Value::Object(o) = value
            && let Some(sig) = o.method(name)
        {
            return self.eval_call(
                dot,
                Callable::Method(Arc::clone(o), sig),
                Cur::Arg(node),
                name,
                args,
                fin,
            );
        }
        if let Value::Map(m) = value
            && let MapType::Named(type_name) = m.map_type()
            && let Some(f) = self.shared.funcs.method(type_name, name)
        {
            return self.eval_call(
                dot,
                Callable::MapMethod(f, value.clone()),
                Cur::Arg(node),
                name,
                args,
                fin,
            );
        }
        let has_args = args.len() > 1 || fin.is_some();
        match value {
            Value::Map(m) => {
                if has_args {
                    return self.errorf(format!("{name} is not a method but has arguments"));
                }
                return match m.get(name) {
                    Some(v) => Ok(map_elem_ev(m.map_type(), v)),
                    None => self.missing_key(name, map_zero(m.map_type())),
                };
            }
            Value::Object(o) => {
                if let Some(v) = o.field(name) {
                    if has_args {
                        return self.errorf(format!(
                            "{name} has arguments but cannot be invoked as function"
                        ));
                    }
                    return Ok(if v.is_nil() {
                        Ev::Iface(Value::Nil)
                    } else {
                        Ev::Val(v)
                    });
                }
                if let Some(entries) = o.map_entries() {
                    if has_args {
                        return self.errorf(format!("{name} is not a method but has arguments"));
                    }
                    return match entries.into_iter().find(|(k, _)| k == name) {
                        Some((_, v)) => Ok(Ev::Val(v)),
                        None => self.missing_key(name, Ev::Val(Value::Bytes(Arc::from(&[][..])))),
                    };
                }
            }
            _ => {}
        }
        let typ = receiver.static_type();
        self.errorf(format!("can't evaluate field {name} in type {typ}"))
    }

    fn missing_key(&self, name: &str, zero: Ev) -> R<Ev> {
        match self.shared.opts.missing_key {
            MissingKey::Default => Ok(Ev::Invalid),
            MissingKey::Zero => Ok(zero),
            MissingKey::Error => {
                self.errorf(format!("map has no entry for key {}", gofmt::quote(name)))
            }
        }
    }

    fn eval_call(
        &mut self,
        dot: &Ev,
        fun: Callable<'_>,
        node: Cur<'t>,
        name: &str,
        args: &'t [Arg],
        fin: Option<Ev>,
    ) -> R<Ev> {
        let args: &'t [Arg] = if args.is_empty() { args } else { &args[1..] };
        let num_in = args.len() + usize::from(fin.is_some());
        // Parameter types.
        let (fixed, variadic): (Params<'_>, Option<PType<'_>>) = match &fun {
            Callable::Func(f) => {
                let s = f.signature();
                (Params::T(&s.params), s.variadic.as_ref().map(PType::T))
            }
            Callable::Method(_, s) => (Params::T(&s.params), s.variadic.as_ref().map(PType::T)),
            Callable::MapMethod(f, _) => {
                let s = f.signature();
                (Params::T(&s.params), s.variadic.as_ref().map(PType::T))
            }
            Callable::Builtin(b) => {
                let (f, v) = b.signature();
                (Params::B(f), v.map(PType::B))
            }
        };
        let num_fixed = if variadic.is_some() {
            fixed.len()
        } else {
            args.len()
        };
        if variadic.is_some() {
            if num_in < fixed.len() {
                return self.errorf(format!(
                    "wrong number of args for {name}: want at least {} got {}",
                    fixed.len(),
                    args.len()
                ));
            }
        } else if num_in != fixed.len() {
            return self.errorf(format!(
                "wrong number of args for {name}: want {} got {num_in}",
                fixed.len()
            ));
        }

        // and/or short-circuit and return the deciding value.
        if let Callable::Builtin(b @ (Builtin::And | Builtin::Or)) = fun {
            let want = b == Builtin::Or;
            let mut v = Ev::Invalid;
            for arg in args {
                v = self.eval_arg(dot, PType::B(BParam::Raw), arg)?;
                if v.truth() == want {
                    return Ok(v);
                }
            }
            if let Some(f) = fin {
                v = f;
            }
            return Ok(v);
        }

        let mut argv = self.shared.argv_pool.pop().unwrap_or_default();
        argv.reserve(num_in);
        let mut i = 0;
        while i < num_fixed && i < args.len() {
            let t = fixed.get(i).unwrap_or(PType::B(BParam::Raw));
            argv.push(self.eval_arg(dot, t, &args[i])?);
            i += 1;
        }
        if let Some(vt) = variadic {
            while i < args.len() {
                argv.push(self.eval_arg(dot, vt, &args[i])?);
                i += 1;
            }
        }
        if let Some(f) = fin {
            let t = match variadic {
                Some(vt) if num_in > fixed.len() => vt,
                _ => fixed.get(num_in - 1).unwrap_or(PType::B(BParam::Raw)),
            };
            argv.push(self.validate_type(f, t)?);
        }

        let result = match fun {
            Callable::Builtin(b) => {
                let callee = match b {
                    Builtin::Call => args
                        .first()
                        .map(|a| self.ast.show(a).to_string())
                        .unwrap_or_default(),
                    _ => String::new(),
                };
                call_builtin(b, &mut argv, &callee)
            }
            Callable::Func(f) => {
                let set = self.set;
                let mut ctx = CallCtx {
                    shared: &mut *self.shared,
                    set,
                };
                with_values(None, &mut argv, |values| f.call(&mut ctx, values))
                    .map(Ev::Iface)
                    .map_err(|e| e.message().to_string())
            }
            Callable::MapMethod(f, receiver) => {
                let set = self.set;
                let mut ctx = CallCtx {
                    shared: &mut *self.shared,
                    set,
                };
                with_values(Some(receiver), &mut argv, |values| f.call(&mut ctx, values))
                    .map(Ev::Iface)
                    .map_err(|e| e.message().to_string())
            }
            Callable::Method(o, _) => {
                with_values(None, &mut argv, |values| o.call_method(name, values))
                    .map(Ev::Iface)
                    .map_err(|e| e.message().to_string())
            }
        };
        argv.clear();
        self.shared.argv_pool.push(argv);
        match result {
            Ok(v) => Ok(v),
            Err(e) => {
                self.cur = node;
                self.errorf(format!("error calling {name}: {e}"))
            }
        }
    }

    /// `validateType`: checks a computed value against a parameter type.
    fn validate_type(&self, value: Ev, t: PType<'_>) -> R<Ev> {
        match t {
            PType::B(BParam::Raw) => Ok(value),
            PType::B(BParam::Any) | PType::T(ArgType::Any) => Ok(match value {
                Ev::Invalid => Ev::Iface(Value::Nil),
                other => other,
            }),
            PType::B(BParam::Str) => self.validate_typed(value, &ArgType::String),
            PType::T(at) => self.validate_typed(value, at),
        }
    }

    fn validate_typed(&self, value: Ev, at: &ArgType) -> R<Ev> {
        match value {
            Ev::Invalid => {
                if at.can_be_nil() {
                    Ok(Ev::Iface(Value::Nil))
                } else {
                    self.errorf(format!("invalid value; expected {}", at.go_name()))
                }
            }
            Ev::Iface(Value::Nil) | Ev::Val(Value::Nil) => self.errorf(format!(
                "wrong type for value; expected {}; got interface {{}}",
                at.go_name()
            )),
            Ev::Val(v) | Ev::Iface(v) => {
                if at.accepts(&v) {
                    if let Value::RawString(b) = &v
                        && *at == ArgType::String
                    {
                        // A function reading text: the bytes as text, each invalid
                        // sequence a U+FFFD.
                        return Ok(Ev::Val(Value::string(String::from_utf8_lossy(b))));
                    }
                    Ok(Ev::Val(v))
                } else {
                    self.errorf(format!(
                        "wrong type for value; expected {}; got {}",
                        at.go_name(),
                        v.type_name()
                    ))
                }
            }
        }
    }

    /// `evalArg` with no declared type (the head of a chain).
    fn eval_arg_raw(&mut self, dot: &Ev, arg: &'t Arg) -> R<Ev> {
        self.eval_arg(dot, PType::B(BParam::Raw), arg)
    }

    fn eval_arg(&mut self, dot: &Ev, t: PType<'_>, arg: &'t Arg) -> R<Ev> {
        self.cur = Cur::Arg(arg);
        match arg {
            Arg::Dot { .. } => return self.validate_type(dot.clone(), t),
            Arg::Nil { .. } => {
                let can = match t {
                    PType::B(BParam::Raw) => return Ok(Ev::Invalid),
                    PType::B(BParam::Any) => true,
                    PType::B(BParam::Str) => false,
                    PType::T(at) => at.can_be_nil(),
                };
                if can {
                    return Ok(Ev::Iface(Value::Nil));
                }
                return self.errorf(format!("cannot assign nil to {}", t.go_name()));
            }
            Arg::Field { .. } => {
                let v = self.eval_field_node(dot, arg, std::slice::from_ref(arg), None)?;
                return self.validate_type(v, t);
            }
            Arg::Variable { .. } => {
                let v = self.eval_variable_node(dot, arg, &[], None)?;
                return self.validate_type(v, t);
            }
            Arg::Pipe(p) => {
                let p = self.ast.pipe(*p);
                let v = self.nested(|f| f.eval_pipeline(dot, p))?;
                return self.validate_type(v, t);
            }
            Arg::Identifier { name, .. } => {
                let name = self.ast.str(*name);
                let v = self.eval_function(dot, arg, name, Cur::Arg(arg), &[], None)?;
                return self.validate_type(v, t);
            }
            Arg::Chain { .. } => {
                let v = self.eval_chain_node(dot, arg, &[], None)?;
                return self.validate_type(v, t);
            }
            _ => {}
        }
        let at = match t {
            PType::B(BParam::Raw | BParam::Any) | PType::T(ArgType::Any) => {
                return self.eval_empty_interface(arg);
            }
            PType::B(BParam::Str) => &ArgType::String,
            PType::T(at) => at,
        };
        let ast = self.ast;
        let shown = ast.show(arg);
        let number = match arg {
            Arg::Number(n) => Some(ast.number(*n)),
            _ => None,
        };
        match (at, arg, number) {
            (ArgType::Bool, Arg::Bool { val, .. }, _) => Ok(Ev::Val(Value::Bool(*val))),
            (ArgType::Bool, ..) => self.errorf(format!("expected bool; found {shown}")),
            (ArgType::Float64, _, Some(n)) if n.is_float => Ok(Ev::Val(Value::Float(n.float))),
            (ArgType::Float64, ..) => self.errorf(format!("expected float; found {shown}")),
            (ArgType::Int, _, Some(n)) if n.is_int => Ok(Ev::Val(Value::Int(n.int))),
            (ArgType::Int64, _, Some(n)) if n.is_int => Ok(Ev::Val(Value::Int64(n.int))),
            (ArgType::Int | ArgType::Int64, ..) => {
                self.errorf(format!("expected integer; found {shown}"))
            }
            (ArgType::Uint32, _, Some(n)) if n.is_uint => {
                Ok(Ev::Val(Value::Uint64(n.uint & 0xFFFF_FFFF)))
            }
            (ArgType::Uint32, ..) => {
                self.errorf(format!("expected unsigned integer; found {shown}"))
            }
            (ArgType::String | ArgType::GoString, Arg::String { lit, .. }, _) => {
                Ok(Ev::Val(Value::String(ast.string_value(*lit))))
            }
            (ArgType::String | ArgType::GoString, ..) => {
                self.errorf(format!("expected string; found {shown}"))
            }
            _ => self.errorf(format!(
                "can't handle {shown} for arg of type {}",
                at.go_name()
            )),
        }
    }

    fn eval_empty_interface(&mut self, arg: &'t Arg) -> R<Ev> {
        let ast = self.ast;
        match arg {
            Arg::Bool { val, .. } => Ok(Ev::Val(Value::Bool(*val))),
            Arg::Number(n) => self.ideal_constant(arg, ast.number(*n)),
            Arg::String { lit, .. } => Ok(Ev::Val(Value::String(ast.string_value(*lit)))),
            _ => self.errorf(format!(
                "can't handle assignment of {} to empty interface argument",
                ast.show(arg)
            )),
        }
    }
}

/// Hands a call's arguments (after an optional receiver) to `f` as plain values: on the
/// stack for the usual few, in one exact allocation otherwise.
fn with_values<T>(receiver: Option<Value>, argv: &mut Vec<Ev>, f: impl FnOnce(&[Value]) -> T) -> T {
    const INLINE: usize = 4;
    let n = argv.len() + usize::from(receiver.is_some());
    let mut values = receiver
        .into_iter()
        .chain(argv.drain(..).map(Ev::into_value));
    if n <= INLINE {
        let inline: [Value; INLINE] = std::array::from_fn(|_| values.next().unwrap_or_default());
        f(&inline[..n])
    } else {
        f(&values.collect::<Vec<_>>())
    }
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

// ---- builtins ----

fn call_builtin(b: Builtin, argv: &mut Vec<Ev>, callee: &str) -> Result<Ev, String> {
    match b {
        Builtin::And | Builtin::Or => Err("unreachable: and/or are evaluated lazily".to_string()),
        Builtin::Not => Ok(Ev::Val(Value::Bool(!argv.first().is_some_and(Ev::truth)))),
        Builtin::Len => length(argv.drain(..).next().unwrap_or(Ev::Invalid)),
        Builtin::Index => {
            let mut it = argv.drain(..);
            let item = it.next().unwrap_or(Ev::Invalid);
            index(item, it.collect())
        }
        Builtin::Slice => {
            let mut it = argv.drain(..);
            let item = it.next().unwrap_or(Ev::Invalid);
            slice(item, it.collect())
        }
        // The arguments are handed over on the stack when few (see `with_values`).
        Builtin::Print => Ok(Ev::Val(with_values(None, argv, gofmt::sprint_go))),
        Builtin::Println => Ok(Ev::Val(Value::string(with_values(
            None,
            argv,
            gofmt::sprintln,
        )))),
        Builtin::Printf => Ok(Ev::Val(with_values(None, argv, |vals| {
            match vals.split_first() {
                Some((format, rest)) => gofmt::sprintf_go(format.as_str().unwrap_or(""), rest),
                None => gofmt::sprintf_go("", &[]),
            }
        }))),
        Builtin::Html => Ok(Ev::Val(Value::string(html_escape(&eval_args(argv))))),
        Builtin::Js => Ok(Ev::Val(Value::string(js_escape(&eval_args(argv))))),
        Builtin::Urlquery => Ok(Ev::Val(Value::string(query_escape(&eval_args(argv))))),
        Builtin::Call => {
            let f = argv.drain(..).next().unwrap_or(Ev::Invalid);
            match f.concrete() {
                None => Err("call of nil".to_string()),
                Some(v) => Err(format!("non-function {callee} of type {}", v.type_name())),
            }
        }
        Builtin::Eq => match argv.split_first() {
            Some((a, rest)) => eq(a, rest),
            None => eq(&Ev::Invalid, &[]),
        }
        .map(|t| Ev::Val(Value::Bool(t))),
        Builtin::Ne | Builtin::Lt | Builtin::Le | Builtin::Gt | Builtin::Ge => {
            let mut it = argv.drain(..);
            let a = it.next().unwrap_or(Ev::Invalid);
            let c = it.next().unwrap_or(Ev::Invalid);
            let r = match b {
                Builtin::Ne => eq(&a, std::slice::from_ref(&c)).map(|t| !t),
                Builtin::Lt => lt(&a, &c),
                Builtin::Le => le(&a, &c),
                Builtin::Gt => le(&a, &c).map(|t| !t),
                _ => lt(&a, &c).map(|t| !t),
            };
            r.map(|t| Ev::Val(Value::Bool(t)))
        }
    }
}

/// `evalArgs`: `fmt.Sprint` of the arguments, with no-value/nil printed as `<no value>`.
fn eval_args(argv: &[Ev]) -> String {
    if let [Ev::Val(Value::String(s)) | Ev::Iface(Value::String(s))] = argv {
        return s.to_string();
    }
    let mut out = String::new();
    let mut prev_string = false;
    for (i, a) in argv.iter().enumerate() {
        let (s, is_string) = match a.concrete() {
            None => ("<no value>".to_string(), true),
            Some(v) => (gofmt::sprint_value(v), matches!(v, Value::String(_))),
        };
        if i > 0 && !is_string && !prev_string {
            out.push(' ');
        }
        out.push_str(&s);
        prev_string = is_string;
    }
    out
}

fn length(item: Ev) -> Result<Ev, String> {
    let n = match item {
        Ev::Invalid => return Err("reflect: call of reflect.Value.Type on zero Value".to_string()),
        Ev::Iface(Value::Nil) | Ev::Val(Value::Nil) => return Err("len of nil pointer".to_string()),
        Ev::Val(v) | Ev::Iface(v) => match &v {
            Value::String(s) => s.len(),
            Value::Bytes(b) | Value::RawString(b) => b.len(),
            Value::List(l) => l.len(),
            Value::Map(m) => m.len(),
            Value::Object(o) => match (o.map_entries(), o.list_items()) {
                (Some(e), _) => e.len(),
                (None, Some(items)) => items.len(),
                (None, None) => return Err(format!("len of type {}", v.type_name())),
            },
            other => return Err(format!("len of type {}", other.type_name())),
        },
    };
    Ok(Ev::Val(Value::Int(n as i64)))
}

fn index_arg(index: &Ev, cap: usize) -> Result<usize, String> {
    let x: i128 = match index.concrete() {
        None => return Err("cannot index slice/array with nil".to_string()),
        Some(Value::Int(i) | Value::Int64(i)) => i128::from(*i),
        Some(Value::Uint64(u)) => i128::from(*u),
        Some(Value::Uint8(u)) => i128::from(*u),
        Some(other) => {
            return Err(format!(
                "cannot index slice/array with type {}",
                other.type_name()
            ));
        }
    };
    if x < 0 || x > cap as i128 {
        return Err(format!("index out of range: {x}"));
    }
    Ok(x as usize)
}

fn index(item: Ev, indexes: Vec<Ev>) -> Result<Ev, String> {
    let mut item = match item.concrete() {
        None => return Err("index of untyped nil".to_string()),
        Some(v) => Ev::Val(v.clone()),
    };
    for idx in indexes {
        let Some(v) = item.concrete().cloned() else {
            return Err("index of nil pointer".to_string());
        };
        item = match &v {
            Value::List(l) => {
                let x = index_arg(&idx, l.len())?;
                match l.items().get(x) {
                    Some(e) => elem_ev(l.elem(), e.clone()),
                    None => return Err("reflect: slice index out of range".to_string()),
                }
            }
            Value::Bytes(b) => {
                let x = index_arg(&idx, b.len())?;
                match b.get(x) {
                    Some(e) => Ev::Val(Value::Uint8(*e)),
                    None => return Err("reflect: slice index out of range".to_string()),
                }
            }
            Value::String(_) | Value::RawString(_) => {
                let s = v.as_go_bytes().unwrap_or_default();
                let x = index_arg(&idx, s.len())?;
                match s.get(x) {
                    Some(e) => Ev::Val(Value::Uint8(*e)),
                    None => return Err("reflect: string index out of range".to_string()),
                }
            }
            Value::Map(m) => {
                let key = map_key(&idx)?;
                match m.get(&key) {
                    Some(e) => map_elem_ev(m.map_type(), e),
                    None => map_zero(m.map_type()),
                }
            }
            Value::Object(o) => match (o.map_entries(), o.list_items()) {
                (Some(entries), _) => {
                    let key = map_key(&idx)?;
                    match entries.into_iter().find(|(k, _)| *k == key) {
                        Some((_, e)) => Ev::Val(e),
                        None => Ev::Val(Value::Bytes(Arc::from(&[][..]))),
                    }
                }
                (None, Some(items)) => {
                    let x = index_arg(&idx, items.len())?;
                    match items.into_iter().nth(x) {
                        Some(e) => Ev::Val(e),
                        None => return Err("reflect: slice index out of range".to_string()),
                    }
                }
                (None, None) => return Err(format!("can't index item of type {}", v.type_name())),
            },
            other => return Err(format!("can't index item of type {}", other.type_name())),
        };
    }
    Ok(item)
}

fn map_key(idx: &Ev) -> Result<String, String> {
    match idx.concrete() {
        None => Err("value is nil; should be of type string".to_string()),
        Some(Value::String(s)) => Ok(s.to_string()),
        Some(other) => Err(format!(
            "value has type {}; should be string",
            other.type_name()
        )),
    }
}

fn slice(item: Ev, indexes: Vec<Ev>) -> Result<Ev, String> {
    let Some(v) = item.concrete().cloned() else {
        return Err("slice of untyped nil".to_string());
    };
    if indexes.len() > 3 {
        return Err(format!("too many slice indexes: {}", indexes.len()));
    }
    let len = match &v {
        Value::String(_) | Value::RawString(_) => {
            if indexes.len() == 3 {
                return Err("cannot 3-index slice a string".to_string());
            }
            v.as_go_bytes().map_or(0, <[u8]>::len)
        }
        Value::List(l) => l.len(),
        Value::Bytes(b) => b.len(),
        other => return Err(format!("can't slice item of type {}", other.type_name())),
    };
    let mut idx = [0usize, len, len];
    for (i, x) in indexes.iter().enumerate() {
        idx[i] = index_arg(x, len)?;
    }
    if idx[0] > idx[1] {
        return Err(format!("invalid slice index: {} > {}", idx[0], idx[1]));
    }
    if indexes.len() == 3 && idx[1] > idx[2] {
        return Err(format!("invalid slice index: {} > {}", idx[1], idx[2]));
    }
    Ok(Ev::Val(match &v {
        Value::String(s) => match s.get(idx[0]..idx[1]) {
            Some(sub) => Value::string(sub),
            None => Value::go_string(&s.as_bytes()[idx[0]..idx[1]]),
        },
        Value::RawString(b) => Value::go_string(&b[idx[0]..idx[1]]),
        Value::List(l) => Value::List(crate::value::List::typed(
            l.items()[idx[0]..idx[1]].to_vec(),
            l.elem(),
        )),
        Value::Bytes(b) => Value::Bytes(Arc::from(&b[idx[0]..idx[1]])),
        _ => return Err("unreachable".to_string()),
    }))
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum BasicKind {
    Invalid,
    Bool,
    Int,
    Uint,
    Float,
    String,
}

fn basic_kind(v: Option<&Value>) -> BasicKind {
    match v {
        Some(Value::Bool(_)) => BasicKind::Bool,
        Some(Value::Int(_) | Value::Int64(_)) => BasicKind::Int,
        Some(Value::Uint64(_) | Value::Uint8(_)) => BasicKind::Uint,
        Some(Value::Float(_)) => BasicKind::Float,
        Some(Value::String(_) | Value::RawString(_)) => BasicKind::String,
        _ => BasicKind::Invalid,
    }
}

fn int_of(v: Option<&Value>) -> i64 {
    match v {
        Some(Value::Int(i) | Value::Int64(i)) => *i,
        _ => 0,
    }
}

fn uint_of(v: Option<&Value>) -> u64 {
    match v {
        Some(Value::Uint64(u)) => *u,
        Some(Value::Uint8(u)) => u64::from(*u),
        _ => 0,
    }
}

fn reflect_kind(v: &Value) -> &'static str {
    match v {
        Value::Map(_) => "map",
        Value::List(_) | Value::Bytes(_) => "slice",
        Value::Object(o) => o.kind().name(),
        _ => "basic",
    }
}

fn eq(a: &Ev, rest: &[Ev]) -> Result<bool, String> {
    let a1 = a.concrete();
    if rest.is_empty() {
        return Err("missing argument for comparison".to_string());
    }
    let k1 = basic_kind(a1);
    for arg in rest {
        let a2 = arg.concrete();
        let k2 = basic_kind(a2);
        let truth = if k1 != k2 {
            match (k1, k2) {
                (BasicKind::Int, BasicKind::Uint) => {
                    int_of(a1) >= 0 && int_of(a1) as u64 == uint_of(a2)
                }
                (BasicKind::Uint, BasicKind::Int) => {
                    int_of(a2) >= 0 && uint_of(a1) == int_of(a2) as u64
                }
                _ => {
                    if let (Some(x), Some(y)) = (a1, a2) {
                        return Err(format!(
                            "incompatible types for comparison: {} and {}",
                            x.type_name(),
                            y.type_name()
                        ));
                    }
                    false
                }
            }
        } else {
            match (a1, a2) {
                (Some(Value::Bool(x)), Some(Value::Bool(y))) => x == y,
                (Some(Value::Float(x)), Some(Value::Float(y))) => x == y,
                (Some(Value::String(x)), Some(Value::String(y))) => x == y,
                (Some(x @ Value::RawString(_)), Some(y))
                | (Some(y), Some(x @ Value::RawString(_))) => x.as_go_bytes() == y.as_go_bytes(),
                (
                    Some(x @ (Value::Uint64(_) | Value::Uint8(_))),
                    Some(y @ (Value::Uint64(_) | Value::Uint8(_))),
                ) => uint_of(Some(x)) == uint_of(Some(y)),
                (
                    Some(x @ (Value::Int(_) | Value::Int64(_))),
                    Some(y @ (Value::Int(_) | Value::Int64(_))),
                ) => int_of(Some(x)) == int_of(Some(y)),
                (None, None) => true,
                (None, Some(_)) | (Some(_), None) => false,
                (Some(x), Some(y)) => {
                    if reflect_kind(x) != reflect_kind(y) {
                        return Err(format!(
                            "non-comparable types {}: {}, {}: {}",
                            gofmt::sprint_verb(x, 's'),
                            x.type_name(),
                            y.type_name(),
                            gofmt::sprint_value(y)
                        ));
                    }
                    match (x, y) {
                        (Value::Object(p), Value::Object(q)) => Arc::ptr_eq(p, q),
                        _ => {
                            return Err(format!(
                                "non-comparable type {}: {}",
                                gofmt::sprint_verb(y, 's'),
                                y.type_name()
                            ));
                        }
                    }
                }
            }
        };
        if truth {
            return Ok(true);
        }
    }
    Ok(false)
}

fn lt(a: &Ev, b: &Ev) -> Result<bool, String> {
    let a1 = a.concrete();
    let k1 = basic_kind(a1);
    if k1 == BasicKind::Invalid {
        return Err("invalid type for comparison".to_string());
    }
    let a2 = b.concrete();
    let k2 = basic_kind(a2);
    if k2 == BasicKind::Invalid {
        return Err("invalid type for comparison".to_string());
    }
    if k1 != k2 {
        return match (k1, k2) {
            (BasicKind::Int, BasicKind::Uint) => {
                Ok(int_of(a1) < 0 || (int_of(a1) as u64) < uint_of(a2))
            }
            (BasicKind::Uint, BasicKind::Int) => {
                Ok(int_of(a2) >= 0 && uint_of(a1) < int_of(a2) as u64)
            }
            _ => Err(format!(
                "incompatible types for comparison: {} and {}",
                a1.map(Value::type_name).unwrap_or_default(),
                a2.map(Value::type_name).unwrap_or_default()
            )),
        };
    }
    Ok(match (a1, a2) {
        (Some(Value::Float(x)), Some(Value::Float(y))) => x < y,
        (Some(Value::String(x)), Some(Value::String(y))) => x < y,
        (Some(x @ (Value::String(_) | Value::RawString(_))), Some(y)) => {
            x.as_go_bytes() < y.as_go_bytes()
        }
        (
            Some(x @ (Value::Uint64(_) | Value::Uint8(_))),
            Some(y @ (Value::Uint64(_) | Value::Uint8(_))),
        ) => uint_of(Some(x)) < uint_of(Some(y)),
        (Some(Value::Bool(_)), _) => return Err("invalid type for comparison".to_string()),
        _ => int_of(a1) < int_of(a2),
    })
}

fn le(a: &Ev, b: &Ev) -> Result<bool, String> {
    if lt(a, b)? {
        return Ok(true);
    }
    eq(a, std::slice::from_ref(b))
}

/// Go's `template.HTMLEscapeString`.
pub fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\0' => out.push('\u{FFFD}'),
            '"' => out.push_str("&#34;"),
            '\'' => out.push_str("&#39;"),
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
    out
}

/// Go's `template.JSEscapeString`.
pub fn js_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\'' => out.push_str("\\'"),
            '"' => out.push_str("\\\""),
            '<' => out.push_str("\\u003C"),
            '>' => out.push_str("\\u003E"),
            '&' => out.push_str("\\u0026"),
            '=' => out.push_str("\\u003D"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u00{:02X}", c as u32)),
            c if (c as u32) < 0x80 => out.push(c),
            c if gofmt::is_print(c) => out.push(c),
            c => out.push_str(&format!("\\u{:04X}", c as u32)),
        }
    }
    out
}

/// Go's `url.QueryEscape`.
pub fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(char::from(b))
            }
            b' ' => out.push('+'),
            b => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}
