//! The parse tree, after Go's `text/template/parse/node.go`. `Display` (through
//! [`Ast::show`]) re-prints nodes the way Go's `Node.String()` does; execution errors quote
//! that text (`at <.Values.x>`).
//!
//! The tree of one parsed source is stored flat in an [`Ast`]: one array per node kind, with
//! nodes naming their children by index ([`Span`]s of consecutive children, or single
//! indices), and texts as byte ranges of the source ([`SrcStr`]). A source of any size is a
//! dozen allocations, and a node takes 12 to 28 bytes: the tree of a chart is the biggest
//! thing a render keeps, and every fresh heap page costs a page fault.

use std::fmt;
use std::sync::{Arc, OnceLock};

/// Marks a [`SrcStr`] of the decoded literals ([`Ast`]'s `extra`) rather than the source.
const EXTRA: u32 = 1 << 31;

/// Largest source the parser accepts (offsets are 31-bit).
pub(crate) const MAX_SOURCE_LEN: usize = (EXTRA - 1) as usize;

/// A piece of text: a byte range of the parsed source, or of the decoded string literals
/// (a literal with escapes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SrcStr {
    start: u32,
    end: u32,
}

impl SrcStr {
    /// `src[start..end]`; the range must lie on character boundaries.
    pub fn source(start: usize, end: usize) -> Self {
        debug_assert!(start <= end && end <= MAX_SOURCE_LEN);
        SrcStr {
            start: start as u32,
            end: end as u32,
        }
    }
}

/// Consecutive children in one of [`Ast`]'s arrays.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Span {
    start: u32,
    len: u32,
}

impl Span {
    pub fn len(self) -> usize {
        self.len as usize
    }

    pub fn is_empty(self) -> bool {
        self.len == 0
    }

    fn range(self) -> std::ops::Range<usize> {
        self.start as usize..(self.start + self.len) as usize
    }
}

/// A statement-level node. Lists of nodes (a template body, a branch) are [`Span`]s of
/// [`Ast::nodes`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum Node {
    Text(SrcStr),
    /// A pipeline ([`Ast::pipe`]).
    Action(u32),
    /// A branch ([`Ast::branch`]).
    If(u32),
    With(u32),
    Range(u32),
    /// A `{{template}}` call ([`Ast::call`]).
    Template(u32),
    Break,
    Continue,
}

/// The shared shape of `if`, `with` and `range`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Branch {
    pub pos: u32,
    pub pipe: u32,
    pub list: Span,
    pub else_list: Option<Span>,
}

/// `{{template "name" pipeline}}` (or a `block`).
#[derive(Clone, Copy, Debug)]
pub(crate) struct TemplateCall {
    pub pos: u32,
    pub name: SrcStr,
    pub pipe: Option<u32>,
}

/// A pipeline with optional declarations (`decl` in [`Ast::names`], `cmds` in
/// [`Ast::cmds`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pipe {
    pub pos: u32,
    pub is_assign: bool,
    pub decl: Span,
    pub cmds: Span,
}

/// One stage of a pipeline (`args` in [`Ast::args`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Command {
    pub pos: u32,
    pub args: Span,
}

/// An operand. Name lists are [`Span`]s of [`Ast::names`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum Arg {
    /// `.a.b`
    Field {
        pos: u32,
        idents: Span,
    },
    /// `$x.a.b` (the first ident is the variable name).
    Variable {
        pos: u32,
        idents: Span,
    },
    /// `(pipe).a.b`, `fn.a` (the term, in [`Ast::arg`], is a pipeline or an identifier).
    Chain {
        pos: u32,
        node: u32,
        fields: Span,
    },
    /// A function name.
    Identifier {
        pos: u32,
        name: SrcStr,
    },
    /// `( pipeline )` ([`Ast::pipe`]).
    Pipe(u32),
    Dot {
        pos: u32,
    },
    Nil {
        pos: u32,
    },
    Bool {
        pos: u32,
        val: bool,
    },
    /// A number ([`Ast::number`]).
    Number(u32),
    /// A string literal: its source text (with quotes, starting at its position) and its
    /// value ([`Ast::string`]).
    String {
        quoted: SrcStr,
        lit: u32,
    },
}

/// A numeric constant, with every Go representation it admits.
#[derive(Clone, Debug)]
pub(crate) struct Number {
    pub pos: u32,
    pub text: SrcStr,
    pub is_int: bool,
    pub is_uint: bool,
    pub is_float: bool,
    pub int: i64,
    pub uint: u64,
    pub float: f64,
}

impl Arg {
    /// Whether the node is a constant or dot (not executable after a `|`).
    pub fn is_non_executable(&self) -> bool {
        matches!(
            self,
            Arg::Bool { .. }
                | Arg::Dot { .. }
                | Arg::Nil { .. }
                | Arg::Number(_)
                | Arg::String { .. }
        )
    }
}

/// Sources at least this long may be shared with the caller rather than copied.
const SHARE_MIN_LEN: usize = 16 << 10;

/// Bytes of source per pipeline from which a source is shared: reading a shared text checks
/// it is UTF-8 each time, so only sources that are mostly plain text (a CRD with a few
/// actions) are worth it; a copy costs a fresh page (a page fault) per 4 KiB.
const SHARE_MIN_BYTES_PER_PIPE: usize = 1 << 10;

/// The text a tree's ranges point into.
enum Source {
    /// A copy of the parsed text.
    Owned(Box<str>),
    /// The caller's bytes (a chart file), shared rather than copied: exactly the bytes of
    /// the parsed text, so UTF-8, and every range of the tree lies on character boundaries.
    Shared(Arc<[u8]>),
}

impl Default for Source {
    fn default() -> Self {
        Source::Owned(Box::default())
    }
}

impl fmt::Debug for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Owned(text) => fmt::Debug::fmt(&**text, f),
            Source::Shared(bytes) => fmt::Debug::fmt(&String::from_utf8_lossy(bytes), f),
        }
    }
}

/// The trees parsed from one source: its text, the decoded literals, and the nodes.
#[derive(Debug, Default)]
pub(crate) struct Ast {
    src: Source,
    extra: Box<str>,
    nodes: Box<[Node]>,
    branches: Box<[Branch]>,
    calls: Box<[TemplateCall]>,
    pipes: Box<[Pipe]>,
    cmds: Box<[Command]>,
    args: Box<[Arg]>,
    names: Box<[SrcStr]>,
    numbers: Box<[Number]>,
    /// The values of the string literals, by [`Arg::String`]'s `lit`.
    strings: Box<[SrcStr]>,
    /// The same as Go strings, made on first use: a literal executed again (a helper's
    /// `include "name.of.it"`, included from every template) shares it instead of copying
    /// its text into a new allocation each time.
    string_values: Box<[OnceLock<Arc<str>>]>,
}

impl Ast {
    /// The source text (for error positions).
    pub fn src(&self) -> &str {
        match &self.src {
            Source::Owned(text) => text,
            Source::Shared(bytes) => {
                std::str::from_utf8(bytes).expect("a shared source is the bytes of a str")
            }
        }
    }

    pub fn str(&self, s: SrcStr) -> &str {
        if s.start & EXTRA != 0 {
            return &self.extra[(s.start & !EXTRA) as usize..(s.end & !EXTRA) as usize];
        }
        let range = s.start as usize..s.end as usize;
        match &self.src {
            Source::Owned(text) => &text[range],
            Source::Shared(bytes) => std::str::from_utf8(&bytes[range])
                .expect("tree ranges of a shared source lie on character boundaries"),
        }
    }

    /// Whether the tree keeps its caller's bytes rather than a copy.
    #[cfg(test)]
    pub fn is_shared(&self) -> bool {
        matches!(self.src, Source::Shared(_))
    }

    pub fn nodes(&self, s: Span) -> &[Node] {
        &self.nodes[s.range()]
    }

    pub fn cmds(&self, s: Span) -> &[Command] {
        &self.cmds[s.range()]
    }

    pub fn args(&self, s: Span) -> &[Arg] {
        &self.args[s.range()]
    }

    pub fn names(&self, s: Span) -> &[SrcStr] {
        &self.names[s.range()]
    }

    pub fn branch(&self, i: u32) -> &Branch {
        &self.branches[i as usize]
    }

    pub fn call(&self, i: u32) -> &TemplateCall {
        &self.calls[i as usize]
    }

    pub fn pipe(&self, i: u32) -> &Pipe {
        &self.pipes[i as usize]
    }

    pub fn arg(&self, i: u32) -> &Arg {
        &self.args[i as usize]
    }

    pub fn number(&self, i: u32) -> &Number {
        &self.numbers[i as usize]
    }

    /// The value of string literal `lit`.
    pub fn string(&self, lit: u32) -> &str {
        self.str(self.strings[lit as usize])
    }

    /// The value of string literal `lit` as a Go string (shared by every execution of it).
    pub fn string_value(&self, lit: u32) -> Arc<str> {
        Arc::clone(self.string_values[lit as usize].get_or_init(|| Arc::from(self.string(lit))))
    }

    /// The position of an operand.
    pub fn arg_pos(&self, arg: &Arg) -> usize {
        (match arg {
            Arg::Field { pos, .. }
            | Arg::Variable { pos, .. }
            | Arg::Chain { pos, .. }
            | Arg::Identifier { pos, .. }
            | Arg::Dot { pos }
            | Arg::Nil { pos }
            | Arg::Bool { pos, .. } => *pos,
            Arg::String { quoted, .. } => quoted.start,
            Arg::Pipe(p) => self.pipe(*p).pos,
            Arg::Number(n) => self.number(*n).pos,
        }) as usize
    }

    /// `node` printed as Go's `Node.String()` prints it.
    pub fn show<'a, T: ?Sized>(&'a self, node: &'a T) -> Show<'a, T> {
        Show { ast: self, node }
    }
}

/// Whether a list holds nothing but whitespace text and comments (Go's `IsEmptyTree`): an
/// empty redefinition does not replace an existing template.
fn is_empty_list<'s>(nodes: &[Node], text: impl Fn(SrcStr) -> &'s str) -> bool {
    nodes.iter().all(|n| match n {
        Node::Text(t) => text(*t)
            .trim_matches(|c: char| c.is_whitespace())
            .is_empty(),
        _ => false,
    })
}

/// The arrays of an [`Ast`] being built by the parser. Children are complete before their
/// parent, so a parent's children are moved from the parser's stacks to the end of an array
/// in one piece ([`AstBuilder::push_nodes`] and the like).
#[derive(Debug, Default)]
pub(crate) struct AstBuilder {
    extra: String,
    nodes: Vec<Node>,
    branches: Vec<Branch>,
    calls: Vec<TemplateCall>,
    pipes: Vec<Pipe>,
    cmds: Vec<Command>,
    args: Vec<Arg>,
    names: Vec<SrcStr>,
    numbers: Vec<Number>,
    strings: Vec<SrcStr>,
}

/// Appends `items` to `array`, returning their span.
fn push_all<T: Copy>(array: &mut Vec<T>, items: &[T]) -> Span {
    let start = array.len() as u32;
    let len = items.len() as u32;
    array.extend_from_slice(items);
    Span { start, len }
}

/// Appends `item` to `array`, returning its index.
fn push_one<T>(array: &mut Vec<T>, item: T) -> u32 {
    array.push(item);
    (array.len() - 1) as u32
}

impl AstBuilder {
    /// A decoded literal, kept beside the source.
    pub fn owned(&mut self, s: &str) -> SrcStr {
        let start = self.extra.len();
        self.extra.push_str(s);
        SrcStr {
            start: start as u32 | EXTRA,
            end: self.extra.len() as u32 | EXTRA,
        }
    }

    pub fn push_nodes(&mut self, nodes: &[Node]) -> Span {
        push_all(&mut self.nodes, nodes)
    }

    pub fn push_cmds(&mut self, cmds: &[Command]) -> Span {
        push_all(&mut self.cmds, cmds)
    }

    pub fn push_args(&mut self, args: &[Arg]) -> Span {
        push_all(&mut self.args, args)
    }

    pub fn push_names(&mut self, names: &[SrcStr]) -> Span {
        push_all(&mut self.names, names)
    }

    pub fn branch(&mut self, b: Branch) -> u32 {
        push_one(&mut self.branches, b)
    }

    pub fn call(&mut self, c: TemplateCall) -> u32 {
        push_one(&mut self.calls, c)
    }

    pub fn pipe(&mut self, p: Pipe) -> u32 {
        push_one(&mut self.pipes, p)
    }

    pub fn arg(&mut self, a: Arg) -> u32 {
        push_one(&mut self.args, a)
    }

    pub fn number(&mut self, n: Number) -> u32 {
        push_one(&mut self.numbers, n)
    }

    /// A string literal's value, by index.
    pub fn string(&mut self, text: SrcStr) -> u32 {
        push_one(&mut self.strings, text)
    }

    /// The first operand of a command already built.
    pub fn first_arg(&self, cmd: &Command) -> Option<&Arg> {
        self.args[cmd.args.range()].first()
    }

    /// The text of `s`; `src` is the source.
    pub fn text<'s>(&'s self, src: &'s str, s: SrcStr) -> &'s str {
        if s.start & EXTRA == 0 {
            &src[s.start as usize..s.end as usize]
        } else {
            &self.extra[(s.start & !EXTRA) as usize..(s.end & !EXTRA) as usize]
        }
    }

    /// Whether a built list is empty in Go's `IsEmptyTree` sense; `src` is the source.
    pub fn is_empty_list(&self, src: &str, list: Span) -> bool {
        is_empty_list(&self.nodes[list.range()], |s| self.text(src, s))
    }

    /// The finished tree, each array a copy sized exactly (the builder keeps its memory for
    /// the next source: [`AstBuilder::clear`]). `src` is the source; `shared`, when given,
    /// holds exactly its bytes, which a long and mostly plain source keeps instead of a copy.
    pub fn finish(&self, src: &str, shared: Option<&Arc<[u8]>>) -> Ast {
        let src = match shared {
            Some(bytes)
                if bytes.as_ptr() == src.as_ptr()
                    && bytes.len() == src.len()
                    && src.len() >= SHARE_MIN_LEN
                    && self.pipes.len() * SHARE_MIN_BYTES_PER_PIPE <= src.len() =>
            {
                Source::Shared(Arc::clone(bytes))
            }
            _ => Source::Owned(Box::from(src)),
        };
        Ast {
            src,
            extra: Box::from(self.extra.as_str()),
            nodes: Box::from(self.nodes.as_slice()),
            branches: Box::from(self.branches.as_slice()),
            calls: Box::from(self.calls.as_slice()),
            pipes: Box::from(self.pipes.as_slice()),
            cmds: Box::from(self.cmds.as_slice()),
            args: Box::from(self.args.as_slice()),
            names: Box::from(self.names.as_slice()),
            numbers: Box::from(self.numbers.as_slice()),
            strings: Box::from(self.strings.as_slice()),
            string_values: self.strings.iter().map(|_| OnceLock::new()).collect(),
        }
    }

    /// Empties the arrays, keeping their memory.
    pub fn clear(&mut self) {
        self.extra.clear();
        self.nodes.clear();
        self.branches.clear();
        self.calls.clear();
        self.pipes.clear();
        self.cmds.clear();
        self.args.clear();
        self.names.clear();
        self.numbers.clear();
        self.strings.clear();
    }
}

/// A node with the tree it belongs to, printed as Go's `Node.String()`.
pub(crate) struct Show<'a, T: ?Sized> {
    ast: &'a Ast,
    node: &'a T,
}

impl fmt::Display for Show<'_, Arg> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ast = self.ast;
        match self.node {
            Arg::Field { idents, .. } => {
                for i in ast.names(*idents) {
                    write!(f, ".{}", ast.str(*i))?;
                }
                Ok(())
            }
            Arg::Variable { idents, .. } => {
                for (i, ident) in ast.names(*idents).iter().enumerate() {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    f.write_str(ast.str(*ident))?;
                }
                Ok(())
            }
            Arg::Chain { node, fields, .. } => {
                let node = ast.arg(*node);
                if let Arg::Pipe(p) = node {
                    write!(f, "({})", ast.show(ast.pipe(*p)))?;
                } else {
                    write!(f, "{}", ast.show(node))?;
                }
                for field in ast.names(*fields) {
                    write!(f, ".{}", ast.str(*field))?;
                }
                Ok(())
            }
            Arg::Identifier { name, .. } => f.write_str(ast.str(*name)),
            Arg::Pipe(p) => write!(f, "{}", ast.show(ast.pipe(*p))),
            Arg::Dot { .. } => f.write_str("."),
            Arg::Nil { .. } => f.write_str("nil"),
            Arg::Bool { val, .. } => write!(f, "{val}"),
            Arg::Number(n) => f.write_str(ast.str(ast.number(*n).text)),
            Arg::String { quoted, .. } => f.write_str(ast.str(*quoted)),
        }
    }
}

impl fmt::Display for Show<'_, Command> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ast = self.ast;
        for (i, a) in ast.args(self.node.args).iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            if let Arg::Pipe(p) = a {
                write!(f, "({})", ast.show(ast.pipe(*p)))?;
            } else {
                write!(f, "{}", ast.show(a))?;
            }
        }
        Ok(())
    }
}

impl fmt::Display for Show<'_, Pipe> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ast = self.ast;
        let pipe = self.node;
        if !pipe.decl.is_empty() {
            for (i, d) in ast.names(pipe.decl).iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                f.write_str(ast.str(*d))?;
            }
            f.write_str(if pipe.is_assign { " = " } else { " := " })?;
        }
        for (i, c) in ast.cmds(pipe.cmds).iter().enumerate() {
            if i > 0 {
                f.write_str(" | ")?;
            }
            write!(f, "{}", ast.show(c))?;
        }
        Ok(())
    }
}

impl fmt::Display for Show<'_, [Node]> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for n in self.node {
            write!(f, "{}", self.ast.show(n))?;
        }
        Ok(())
    }
}

fn write_branch(f: &mut fmt::Formatter<'_>, ast: &Ast, kw: &str, b: u32) -> fmt::Result {
    let b = ast.branch(b);
    write!(
        f,
        "{{{{{kw} {}}}}}{}",
        ast.show(ast.pipe(b.pipe)),
        ast.show(ast.nodes(b.list))
    )?;
    if let Some(e) = b.else_list {
        write!(f, "{{{{else}}}}{}", ast.show(ast.nodes(e)))?;
    }
    f.write_str("{{end}}")
}

impl fmt::Display for Show<'_, Node> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ast = self.ast;
        match self.node {
            Node::Text(t) => f.write_str(ast.str(*t)),
            Node::Action(p) => write!(f, "{{{{{}}}}}", ast.show(ast.pipe(*p))),
            Node::If(b) => write_branch(f, ast, "if", *b),
            Node::With(b) => write_branch(f, ast, "with", *b),
            Node::Range(b) => write_branch(f, ast, "range", *b),
            Node::Template(c) => {
                let c = ast.call(*c);
                let name = crate::gofmt::quote(ast.str(c.name));
                match c.pipe {
                    Some(p) => write!(f, "{{{{template {name} {}}}}}", ast.show(ast.pipe(p))),
                    None => write!(f, "{{{{template {name}}}}}"),
                }
            }
            Node::Break => f.write_str("{{break}}"),
            Node::Continue => f.write_str("{{continue}}"),
        }
    }
}
