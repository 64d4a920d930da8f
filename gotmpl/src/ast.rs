//! The parse tree, after Go's `text/template/parse/node.go`. `Display` re-prints nodes the
//! way Go's `Node.String()` does; execution errors quote that text (`at <.Values.x>`).

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// A piece of a template's source text. Names, literals and text are ranges of the shared
/// source rather than copies (a literal with escapes owns its decoded text), so parsing
/// allocates no string per token.
#[derive(Clone)]
pub(crate) struct SrcStr {
    src: Arc<str>,
    start: usize,
    end: usize,
}

impl SrcStr {
    /// `src[start..end]`; the range must lie on character boundaries.
    pub fn new(src: &Arc<str>, start: usize, end: usize) -> Self {
        debug_assert!(src.get(start..end).is_some());
        SrcStr {
            src: Arc::clone(src),
            start,
            end,
        }
    }

    /// A string of its own (a decoded literal).
    pub fn owned(s: String) -> Self {
        let end = s.len();
        SrcStr {
            src: Arc::from(s),
            start: 0,
            end,
        }
    }

    pub fn as_str(&self) -> &str {
        &self.src[self.start..self.end]
    }
}

impl Deref for SrcStr {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl AsRef<str> for SrcStr {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl fmt::Display for SrcStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for SrcStr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

/// A list of nodes (a template body or a branch).
#[derive(Clone, Debug, Default)]
pub(crate) struct ListNode {
    pub nodes: Vec<Node>,
}

/// A statement-level node.
#[derive(Clone, Debug)]
pub(crate) enum Node {
    Text(SrcStr),
    Action(Pipe),
    If(Branch),
    With(Branch),
    Range(Branch),
    Template {
        pos: usize,
        name: SrcStr,
        pipe: Option<Pipe>,
    },
    Break,
    Continue,
}

/// The shared shape of `if`, `with` and `range`.
#[derive(Clone, Debug)]
pub(crate) struct Branch {
    pub pos: usize,
    pub pipe: Pipe,
    pub list: ListNode,
    pub else_list: Option<ListNode>,
}

/// A pipeline with optional declarations.
#[derive(Clone, Debug)]
pub(crate) struct Pipe {
    pub pos: usize,
    pub is_assign: bool,
    pub decl: Vec<SrcStr>,
    pub cmds: Vec<Command>,
}

/// One stage of a pipeline.
#[derive(Clone, Debug)]
pub(crate) struct Command {
    pub pos: usize,
    pub args: Vec<Arg>,
}

/// An operand.
#[derive(Clone, Debug)]
pub(crate) enum Arg {
    /// `.a.b`
    Field {
        pos: usize,
        idents: Vec<SrcStr>,
    },
    /// `$x.a.b` (`idents[0]` is the variable name).
    Variable {
        pos: usize,
        idents: Vec<SrcStr>,
    },
    /// `(pipe).a.b`, `fn.a` (the term is a pipeline or an identifier).
    Chain {
        pos: usize,
        node: Box<Arg>,
        fields: Vec<SrcStr>,
    },
    /// A function name.
    Identifier {
        pos: usize,
        name: SrcStr,
    },
    /// `( pipeline )`
    Pipe(Box<Pipe>),
    Dot {
        pos: usize,
    },
    Nil {
        pos: usize,
    },
    Bool {
        pos: usize,
        val: bool,
    },
    Number(Box<Number>),
    /// A string literal: its source text (with quotes) and its value.
    String {
        pos: usize,
        quoted: SrcStr,
        text: SrcStr,
    },
}

/// A numeric constant, with every Go representation it admits.
#[derive(Clone, Debug)]
pub(crate) struct Number {
    pub pos: usize,
    pub text: SrcStr,
    pub is_int: bool,
    pub is_uint: bool,
    pub is_float: bool,
    pub int: i64,
    pub uint: u64,
    pub float: f64,
}

impl Arg {
    pub fn pos(&self) -> usize {
        match self {
            Arg::Field { pos, .. }
            | Arg::Variable { pos, .. }
            | Arg::Chain { pos, .. }
            | Arg::Identifier { pos, .. }
            | Arg::Dot { pos }
            | Arg::Nil { pos }
            | Arg::Bool { pos, .. }
            | Arg::String { pos, .. } => *pos,
            Arg::Pipe(p) => p.pos,
            Arg::Number(n) => n.pos,
        }
    }

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

impl fmt::Display for Arg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Arg::Field { idents, .. } => {
                for i in idents {
                    write!(f, ".{i}")?;
                }
                Ok(())
            }
            Arg::Variable { idents, .. } => {
                for (i, ident) in idents.iter().enumerate() {
                    if i > 0 {
                        f.write_str(".")?;
                    }
                    f.write_str(ident)?;
                }
                Ok(())
            }
            Arg::Chain { node, fields, .. } => {
                if let Arg::Pipe(p) = node.as_ref() {
                    write!(f, "({p})")?;
                } else {
                    write!(f, "{node}")?;
                }
                for field in fields {
                    write!(f, ".{field}")?;
                }
                Ok(())
            }
            Arg::Identifier { name, .. } => f.write_str(name),
            Arg::Pipe(p) => write!(f, "{p}"),
            Arg::Dot { .. } => f.write_str("."),
            Arg::Nil { .. } => f.write_str("nil"),
            Arg::Bool { val, .. } => write!(f, "{val}"),
            Arg::Number(n) => f.write_str(&n.text),
            Arg::String { quoted, .. } => f.write_str(quoted),
        }
    }
}

impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, a) in self.args.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            if let Arg::Pipe(p) = a {
                write!(f, "({p})")?;
            } else {
                write!(f, "{a}")?;
            }
        }
        Ok(())
    }
}

impl fmt::Display for Pipe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.decl.is_empty() {
            for (i, d) in self.decl.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                f.write_str(d)?;
            }
            f.write_str(if self.is_assign { " = " } else { " := " })?;
        }
        for (i, c) in self.cmds.iter().enumerate() {
            if i > 0 {
                f.write_str(" | ")?;
            }
            write!(f, "{c}")?;
        }
        Ok(())
    }
}

impl fmt::Display for ListNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for n in &self.nodes {
            write!(f, "{n}")?;
        }
        Ok(())
    }
}

fn write_branch(f: &mut fmt::Formatter<'_>, kw: &str, b: &Branch) -> fmt::Result {
    write!(f, "{{{{{kw} {}}}}}{}", b.pipe, b.list)?;
    if let Some(e) = &b.else_list {
        write!(f, "{{{{else}}}}{e}")?;
    }
    f.write_str("{{end}}")
}

impl fmt::Display for Node {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Node::Text(t) => f.write_str(t),
            Node::Action(p) => write!(f, "{{{{{p}}}}}"),
            Node::If(b) => write_branch(f, "if", b),
            Node::With(b) => write_branch(f, "with", b),
            Node::Range(b) => write_branch(f, "range", b),
            Node::Template { name, pipe, .. } => match pipe {
                Some(p) => write!(f, "{{{{template {} {p}}}}}", crate::gofmt::quote(name)),
                None => write!(f, "{{{{template {}}}}}", crate::gofmt::quote(name)),
            },
            Node::Break => f.write_str("{{break}}"),
            Node::Continue => f.write_str("{{continue}}"),
        }
    }
}

/// Whether a tree holds nothing but whitespace text and comments (Go's `IsEmptyTree`): an
/// empty redefinition does not replace an existing template.
pub(crate) fn is_empty_tree(list: &ListNode) -> bool {
    list.nodes.iter().all(|n| match n {
        Node::Text(t) => t.trim_matches(|c: char| c.is_whitespace()).is_empty(),
        _ => false,
    })
}
