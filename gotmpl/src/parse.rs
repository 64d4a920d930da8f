//! The parser: tokens to trees, following Go's `text/template/parse/parse.go`, with Go's
//! error messages (`template: NAME:LINE: MESSAGE`).

use crate::ast::{
    Arg, Ast, AstBuilder, Branch, Command, MAX_SOURCE_LEN, Node, Number, Pipe, Span, SrcStr,
    TemplateCall,
};
use crate::lex::{Item, ItemType, Lexer, line_at};
use std::sync::Arc;

/// Maximum nesting of control structures (each `else if` link counts), blocks and
/// parenthesised pipelines. Go limits only parentheses (at 10000); a Rust stack needs a bound
/// on every kind of nesting. The parser also stops at [`PARSE_STACK_BUDGET`] bytes of stack.
pub const MAX_PARSE_DEPTH: usize = 1000;

/// Stack the parser may use below its entry point before failing with
/// `max expression depth exceeded`.
pub const PARSE_STACK_BUDGET: usize = 1 << 20;

/// Maximum commands in one pipeline (Go's limit).
const MAX_PIPELINE_CMDS: usize = 100_000;

/// One tree produced by a parse: a name and a body (in the parse's [`Ast`]).
#[derive(Debug)]
pub(crate) struct ParsedTree {
    pub name: String,
    pub root: Span,
    /// Whether the body is empty in Go's `IsEmptyTree` sense.
    pub empty: bool,
}

/// Working memory of the parser, kept from one parse to the next so that a set of sources
/// grows its arrays once rather than once per source.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    ast: AstBuilder,
    field_stack: Vec<SrcStr>,
    node_stack: Vec<Node>,
    cmd_stack: Vec<Command>,
    arg_stack: Vec<Arg>,
}

/// Parses `src` as template `name`; returns the nodes and every tree: the top-level one and
/// each `define`/`block` in the order met. `has_func` tells whether a function name exists
/// (builtins included). The trees' names, literals and text are ranges of `src`, kept in a
/// copy or, when `shared` holds exactly the bytes of `src` and the source is long and mostly
/// plain text, in `shared`. `scratch` is working memory (any earlier parse's, or new).
pub(crate) fn parse(
    name: &str,
    src: &str,
    shared: Option<&Arc<[u8]>>,
    has_func: &dyn Fn(&str) -> bool,
    scratch: &mut Scratch,
) -> Result<(Ast, Vec<ParsedTree>), String> {
    if src.len() > MAX_SOURCE_LEN {
        return Err(format!(
            "template: {name}: source of {} bytes is over the limit of {MAX_SOURCE_LEN}",
            src.len()
        ));
    }
    let lex = Lexer::new(src, !has_func("break"), !has_func("continue"));
    let eof = Item::new(ItemType::Eof, src.len(), 0);
    let mut p = Parser {
        src,
        lex,
        token: [eof; 3],
        peek_count: 0,
        vars: vec!["$"],
        scope: 0,
        has_func,
        parse_name: name,
        action_pos: None,
        range_depth: 0,
        depth: 0,
        trees: Vec::new(),
        stack_base: crate::exec::stack_position(),
        ast: std::mem::take(&mut scratch.ast),
        field_stack: std::mem::take(&mut scratch.field_stack),
        node_stack: std::mem::take(&mut scratch.node_stack),
        cmd_stack: std::mem::take(&mut scratch.cmd_stack),
        arg_stack: std::mem::take(&mut scratch.arg_stack),
    };
    let parsed = p.parse_top().and_then(|root| p.add(name.to_string(), root));
    let result = parsed.map(|()| p.ast.finish(src, shared));
    p.ast.clear();
    p.field_stack.clear();
    p.node_stack.clear();
    p.cmd_stack.clear();
    p.arg_stack.clear();
    *scratch = Scratch {
        ast: p.ast,
        field_stack: p.field_stack,
        node_stack: p.node_stack,
        cmd_stack: p.cmd_stack,
        arg_stack: p.arg_stack,
    };
    Ok((result?, p.trees))
}

struct Parser<'a> {
    src: &'a str,
    lex: Lexer<'a>,
    token: [Item; 3],
    peek_count: usize,
    /// The variables in scope: `vars[scope..]` (a definition starts a fresh scope).
    vars: Vec<&'a str>,
    scope: usize,
    has_func: &'a dyn Fn(&str) -> bool,
    parse_name: &'a str,
    /// The offset of the action being parsed (its left delimiter).
    action_pos: Option<usize>,
    range_depth: usize,
    depth: usize,
    trees: Vec<ParsedTree>,
    stack_base: usize,
    /// The nodes built so far.
    ast: AstBuilder,
    /// The fields of the chain being parsed.
    field_stack: Vec<SrcStr>,
    /// The nodes of the lists being parsed (each list moves its own to `ast` when done).
    node_stack: Vec<Node>,
    /// The commands of the pipelines being parsed.
    cmd_stack: Vec<Command>,
    /// The operands of the commands being parsed.
    arg_stack: Vec<Arg>,
}

type PResult<T> = Result<T, String>;

enum Parsed {
    Node(Node),
    End,
    Else,
}

/// A token position as stored in the tree (sources are shorter than 2^31 bytes).
fn pos32(pos: usize) -> u32 {
    debug_assert!(pos <= MAX_SOURCE_LEN);
    pos as u32
}

impl<'a> Parser<'a> {
    /// The source text of a token, less its first `skip` bytes.
    fn slice(&self, token: &Item, skip: usize) -> SrcStr {
        SrcStr::source(token.pos() + skip, token.end())
    }

    /// The value of a string literal token: a range of the source unless it has escapes
    /// (or, raw, carriage returns).
    fn string_value(&mut self, token: &Item) -> PResult<SrcStr> {
        let val = self.val(token);
        let plain = match token.typ {
            ItemType::RawString => !val.contains('\r'),
            _ => !val.contains('\\'),
        };
        if plain && val.len() >= 2 {
            return Ok(SrcStr::source(token.pos() + 1, token.end() - 1));
        }
        match unquote(val) {
            Ok(s) => Ok(self.ast.owned(&s)),
            Err(e) => self.errorf(e),
        }
    }

    /// The text of a token.
    fn val(&self, token: &Item) -> &'a str {
        token.val(self.src)
    }

    fn lex_next(&mut self) -> Item {
        self.lex.next_item()
    }

    fn next(&mut self) -> Item {
        if self.peek_count > 0 {
            self.peek_count -= 1;
        } else {
            self.token[0] = self.lex_next();
        }
        self.token[self.peek_count]
    }

    fn backup(&mut self) {
        self.peek_count += 1;
    }

    fn backup2(&mut self, t1: Item) {
        self.token[1] = t1;
        self.peek_count = 2;
    }

    fn backup3(&mut self, t2: Item, t1: Item) {
        self.token[1] = t1;
        self.token[2] = t2;
        self.peek_count = 3;
    }

    fn peek(&mut self) -> Item {
        if self.peek_count > 0 {
            return self.token[self.peek_count - 1];
        }
        self.peek_count = 1;
        self.token[0] = self.lex_next();
        self.token[0]
    }

    fn next_non_space(&mut self) -> Item {
        loop {
            if self.peek_count == 0 {
                // The lexer passes spaces without making their tokens.
                self.token[0] = self.lex.next_non_space().0;
                return self.token[0];
            }
            self.peek_count -= 1;
            let t = self.token[self.peek_count];
            if t.typ != ItemType::Space {
                return t;
            }
        }
    }

    /// The next token that is not a space, and whether a space came before it.
    fn next_spaced(&mut self) -> (Item, bool) {
        if self.peek_count == 0 {
            let (t, spaced) = self.lex.next_non_space();
            self.token[0] = t;
            return (t, spaced);
        }
        let t = self.next();
        if t.typ == ItemType::Space {
            return (self.next_non_space(), true);
        }
        (t, false)
    }

    /// Whether the next token is a field (`.x`); a field token starts with `.`, so the
    /// lexer need not make the next token when it does not.
    fn peek_is_field(&mut self) -> bool {
        if self.peek_count == 0 && !self.lex.at_byte(b'.') {
            return false;
        }
        self.peek().typ == ItemType::Field
    }

    fn peek_non_space(&mut self) -> Item {
        let t = self.next_non_space();
        self.backup();
        t
    }

    fn errorf<T>(&self, msg: impl AsRef<str>) -> PResult<T> {
        Err(format!(
            "template: {}:{}: {}",
            self.parse_name,
            line_at(self.src, self.token[0].pos()),
            msg.as_ref()
        ))
    }

    fn unexpected<T>(&self, token: &Item, context: &str) -> PResult<T> {
        if token.typ == ItemType::Error {
            let mut extra = String::new();
            let action_line = self.action_pos.map(|p| line_at(self.src, p));
            if let Some(action_line) = action_line
                && action_line != line_at(self.src, token.pos())
            {
                extra = format!(" in action started at {}:{}", self.parse_name, action_line);
                if self.lex.error().ends_with(" action") {
                    extra = extra[" in action".len()..].to_string();
                }
            }
            return self.errorf(format!("{}{extra}", self.lex.error()));
        }
        let token = token.describe(self.src, self.lex.error());
        self.errorf(format!("unexpected {token} in {context}"))
    }

    fn expect(&mut self, typ: ItemType, context: &str) -> PResult<Item> {
        let t = self.next_non_space();
        if t.typ != typ {
            return self.unexpected(&t, context);
        }
        Ok(t)
    }

    fn enter(&mut self) -> PResult<()> {
        if self.depth >= MAX_PARSE_DEPTH
            || crate::exec::stack_position().abs_diff(self.stack_base) > PARSE_STACK_BUDGET
        {
            return self.errorf("max expression depth exceeded");
        }
        self.depth += 1;
        Ok(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    /// Adds a tree to this parse's set: a second non-empty definition is an error.
    fn add(&mut self, name: String, root: Span) -> PResult<()> {
        let empty = self.ast.is_empty_list(self.src, root);
        if let Some(i) = self.trees.iter().position(|t| t.name == name) {
            if self.trees[i].empty {
                self.trees[i].root = root;
                self.trees[i].empty = empty;
                return Ok(());
            }
            if !empty {
                return self.errorf(format!(
                    "template: multiple definition of template {}",
                    crate::gofmt::quote(&name)
                ));
            }
            return Ok(());
        }
        self.trees.push(ParsedTree { name, root, empty });
        Ok(())
    }

    /// Moves the nodes above `mark` on the node stack to the tree: a finished list.
    fn finish_list(&mut self, mark: usize) -> Span {
        let span = self.ast.push_nodes(&self.node_stack[mark..]);
        self.node_stack.truncate(mark);
        span
    }

    fn parse_top(&mut self) -> PResult<Span> {
        let mark = self.node_stack.len();
        while self.peek().typ != ItemType::Eof {
            if self.peek().typ == ItemType::LeftDelim {
                let delim = self.next();
                if self.next_non_space().typ == ItemType::Define {
                    self.parse_definition()?;
                    continue;
                }
                self.backup2(delim);
            }
            match self.text_or_action()? {
                Parsed::Node(n) => self.node_stack.push(n),
                Parsed::End => return self.errorf("unexpected {{end}}"),
                Parsed::Else => return self.errorf("unexpected {{else}}"),
            }
        }
        Ok(self.finish_list(mark))
    }

    fn parse_definition(&mut self) -> PResult<()> {
        const CONTEXT: &str = "define clause";
        let token = self.next_non_space();
        if token.typ != ItemType::String && token.typ != ItemType::RawString {
            return self.unexpected(&token, CONTEXT);
        }
        let name = match unquote(self.val(&token)) {
            Ok(s) => s,
            Err(e) => return self.errorf(e),
        };
        self.expect(ItemType::RightDelim, CONTEXT)?;
        // A definition is a fresh tree: no outer variables, not inside a range.
        let (saved_scope, saved_range) = self.fresh_scope();
        self.enter()?;
        let (list, end) = self.item_list()?;
        self.leave();
        self.end_scope((saved_scope, saved_range));
        if let Parsed::Else = end {
            return self.errorf(format!("unexpected {{{{else}}}} in {CONTEXT}"));
        }
        self.add(name, list)
    }

    /// Starts the scope of a definition's body (only `$`, outside any range); returns what
    /// [`Parser::end_scope`] restores.
    fn fresh_scope(&mut self) -> (usize, usize) {
        let saved = (self.scope, self.range_depth);
        self.scope = self.vars.len();
        self.vars.push("$");
        self.range_depth = 0;
        saved
    }

    fn end_scope(&mut self, (scope, range_depth): (usize, usize)) {
        self.vars.truncate(self.scope);
        self.scope = scope;
        self.range_depth = range_depth;
    }

    fn item_list(&mut self) -> PResult<(Span, Parsed)> {
        let mark = self.node_stack.len();
        while self.peek_non_space().typ != ItemType::Eof {
            match self.text_or_action()? {
                Parsed::Node(n) => self.node_stack.push(n),
                other => return Ok((self.finish_list(mark), other)),
            }
        }
        self.errorf("unexpected EOF")
    }

    fn text_or_action(&mut self) -> PResult<Parsed> {
        let token = self.next_non_space();
        match token.typ {
            ItemType::Text => Ok(Parsed::Node(Node::Text(self.slice(&token, 0)))),
            ItemType::LeftDelim => {
                self.action_pos = Some(token.pos());
                let r = self.action();
                self.action_pos = None;
                r
            }
            _ => self.unexpected(&token, "input"),
        }
    }

    fn action(&mut self) -> PResult<Parsed> {
        let token = self.next_non_space();
        match token.typ {
            ItemType::Block => return self.block_control().map(Parsed::Node),
            ItemType::Break => {
                self.break_or_continue("{{break}}")?;
                return Ok(Parsed::Node(Node::Break));
            }
            ItemType::Continue => {
                self.break_or_continue("{{continue}}")?;
                return Ok(Parsed::Node(Node::Continue));
            }
            ItemType::Else => return self.else_control(),
            ItemType::End => {
                self.expect(ItemType::RightDelim, "end")?;
                return Ok(Parsed::End);
            }
            ItemType::If => return self.control("if").map(|b| Parsed::Node(Node::If(b))),
            ItemType::Range => return self.control("range").map(|b| Parsed::Node(Node::Range(b))),
            ItemType::Template => return self.template_control().map(Parsed::Node),
            ItemType::With => return self.control("with").map(|b| Parsed::Node(Node::With(b))),
            _ => {}
        }
        self.backup();
        let pipe = self.pipeline("command", ItemType::RightDelim)?;
        Ok(Parsed::Node(Node::Action(self.ast.pipe(pipe))))
    }

    fn break_or_continue(&mut self, what: &str) -> PResult<()> {
        let token = self.next_non_space();
        if token.typ != ItemType::RightDelim {
            return self.unexpected(&token, what);
        }
        if self.range_depth == 0 {
            return self.errorf(format!("{what} outside {{{{range}}}}"));
        }
        Ok(())
    }

    fn else_control(&mut self) -> PResult<Parsed> {
        let peek = self.peek_non_space();
        if peek.typ == ItemType::If || peek.typ == ItemType::With {
            return Ok(Parsed::Else);
        }
        self.expect(ItemType::RightDelim, "else")?;
        Ok(Parsed::Else)
    }

    fn pipeline(&mut self, context: &str, end: ItemType) -> PResult<Pipe> {
        let token = self.peek_non_space();
        let mut is_assign = false;
        // Declarations or assignments (at most two names).
        let mut decl = [SrcStr::source(0, 0); 2];
        let mut decls = 0;
        loop {
            let v = self.peek_non_space();
            if v.typ != ItemType::Variable {
                break;
            }
            self.next();
            let token_after = self.peek();
            let next = self.peek_non_space();
            if next.typ == ItemType::Assign || next.typ == ItemType::Declare {
                is_assign = next.typ == ItemType::Assign;
                self.next_non_space();
                decl[decls] = self.slice(&v, 0);
                decls += 1;
                self.vars.push(self.val(&v));
                break;
            } else if next.typ == ItemType::Char && self.val(&next) == "," {
                self.next_non_space();
                decl[decls] = self.slice(&v, 0);
                decls += 1;
                self.vars.push(self.val(&v));
                if context == "range" && decls < 2 {
                    match self.peek_non_space().typ {
                        ItemType::Variable | ItemType::RightDelim | ItemType::RightParen => {
                            continue;
                        }
                        _ => return self.errorf("range can only initialize variables"),
                    }
                }
                return self.errorf(format!("too many declarations in {context}"));
            } else if token_after.typ == ItemType::Space {
                self.backup3(v, token_after);
                break;
            } else {
                self.backup2(v);
                break;
            }
        }
        let decl = self.ast.push_names(&decl[..decls]);
        let mark = self.cmd_stack.len();
        loop {
            let token_next = self.next_non_space();
            match token_next.typ {
                t if t == end => {
                    self.check_pipeline(mark, context)?;
                    let cmds = self.ast.push_cmds(&self.cmd_stack[mark..]);
                    self.cmd_stack.truncate(mark);
                    return Ok(Pipe {
                        pos: pos32(token.pos()),
                        is_assign,
                        decl,
                        cmds,
                    });
                }
                ItemType::Bool
                | ItemType::CharConstant
                | ItemType::Complex
                | ItemType::Dot
                | ItemType::Field
                | ItemType::Identifier
                | ItemType::Number
                | ItemType::Nil
                | ItemType::RawString
                | ItemType::String
                | ItemType::Variable
                | ItemType::LeftParen => {
                    self.backup();
                    let cmd = self.command()?;
                    self.cmd_stack.push(cmd);
                    if self.cmd_stack.len() - mark > MAX_PIPELINE_CMDS {
                        return self.errorf("pipeline too long");
                    }
                }
                _ => return self.unexpected(&token_next, context),
            }
        }
    }

    /// Checks the commands above `mark` on the command stack: a finished pipeline.
    fn check_pipeline(&self, mark: usize, context: &str) -> PResult<()> {
        let cmds = &self.cmd_stack[mark..];
        if cmds.is_empty() {
            return self.errorf(format!("missing value for {context}"));
        }
        for (i, c) in cmds.iter().enumerate().skip(1) {
            if self.ast.first_arg(c).is_some_and(Arg::is_non_executable) {
                return self.errorf(format!(
                    "non executable command in pipeline stage {}",
                    i + 1
                ));
            }
        }
        Ok(())
    }

    fn control(&mut self, context: &str) -> PResult<u32> {
        self.enter()?;
        let mark = self.vars.len();
        let r = self.control_inner(context);
        self.vars.truncate(mark);
        self.leave();
        r.map(|b| self.ast.branch(b))
    }

    fn control_inner(&mut self, context: &str) -> PResult<Branch> {
        let pipe = self.pipeline(context, ItemType::RightDelim)?;
        let pos = pipe.pos;
        let pipe = self.ast.pipe(pipe);
        if context == "range" {
            self.range_depth += 1;
        }
        let (list, next) = self.item_list()?;
        if context == "range" {
            self.range_depth -= 1;
        }
        let mut else_list = None;
        if let Parsed::Else = next {
            // "{{else if …}}" and "{{else with …}}" nest a new control whose {{end}} also
            // ends this one.
            if context == "if" && self.peek().typ == ItemType::If {
                self.next();
                let inner = self.control("if")?;
                else_list = Some(self.ast.push_nodes(&[Node::If(inner)]));
            } else if context == "with" && self.peek().typ == ItemType::With {
                self.next();
                let inner = self.control("with")?;
                else_list = Some(self.ast.push_nodes(&[Node::With(inner)]));
            } else {
                let (list, next) = self.item_list()?;
                if let Parsed::Else = next {
                    return self.errorf("expected end; found {{else}}");
                }
                else_list = Some(list);
            }
        }
        Ok(Branch {
            pos,
            pipe,
            list,
            else_list,
        })
    }

    fn template_name(&mut self, token: &Item, context: &str) -> PResult<SrcStr> {
        match token.typ {
            ItemType::String | ItemType::RawString => self.string_value(token),
            _ => self.unexpected(token, context),
        }
    }

    fn block_control(&mut self) -> PResult<Node> {
        const CONTEXT: &str = "block clause";
        let token = self.next_non_space();
        let name = self.template_name(&token, CONTEXT)?;
        let pipe = self.pipeline(CONTEXT, ItemType::RightDelim)?;
        let pipe = self.ast.pipe(pipe);
        let (saved_scope, saved_range) = self.fresh_scope();
        self.enter()?;
        let (list, end) = self.item_list()?;
        self.leave();
        self.end_scope((saved_scope, saved_range));
        if let Parsed::Else = end {
            return self.errorf(format!("unexpected {{{{else}}}} in {CONTEXT}"));
        }
        let name_text = self.ast.text(self.src, name).to_string();
        self.add(name_text, list)?;
        Ok(Node::Template(self.ast.call(TemplateCall {
            pos: pos32(token.pos()),
            name,
            pipe: Some(pipe),
        })))
    }

    fn template_control(&mut self) -> PResult<Node> {
        const CONTEXT: &str = "template clause";
        let token = self.next_non_space();
        let name = self.template_name(&token, CONTEXT)?;
        let mut pipe = None;
        if self.next_non_space().typ != ItemType::RightDelim {
            self.backup();
            let p = self.pipeline(CONTEXT, ItemType::RightDelim)?;
            pipe = Some(self.ast.pipe(p));
        }
        Ok(Node::Template(self.ast.call(TemplateCall {
            pos: pos32(token.pos()),
            name,
            pipe,
        })))
    }

    fn command(&mut self) -> PResult<Command> {
        let pos = self.peek_non_space().pos();
        let mark = self.arg_stack.len();
        loop {
            if let Some(op) = self.operand()? {
                self.arg_stack.push(op);
            }
            let (token, spaced) = self.next_spaced();
            if spaced {
                // A space ends the operand; the loop reads what follows it.
                self.backup();
                continue;
            }
            match token.typ {
                ItemType::RightDelim | ItemType::RightParen => self.backup(),
                ItemType::Pipe => {}
                _ => return self.unexpected(&token, "operand"),
            }
            break;
        }
        if self.arg_stack.len() == mark {
            return self.errorf("empty command");
        }
        let args = self.ast.push_args(&self.arg_stack[mark..]);
        self.arg_stack.truncate(mark);
        Ok(Command {
            pos: pos32(pos),
            args,
        })
    }

    fn operand(&mut self) -> PResult<Option<Arg>> {
        if matches!(
            self.peek_non_space().typ,
            ItemType::Field | ItemType::Variable
        ) {
            return self.field_or_variable().map(Some);
        }
        let Some((node, text)) = self.term()? else {
            return Ok(None);
        };
        if !self.peek_is_field() {
            return Ok(Some(node));
        }
        let chain_pos = self.peek().pos();
        match node {
            // These print as their token's text.
            Arg::Bool { .. }
            | Arg::String { .. }
            | Arg::Number(_)
            | Arg::Nil { .. }
            | Arg::Dot { .. } => self.errorf(format!(
                "unexpected . after term {}",
                crate::gofmt::quote(text)
            )),
            other => {
                let node = self.ast.arg(other);
                let fields = self.fields_after(None);
                Ok(Some(Arg::Chain {
                    pos: pos32(chain_pos),
                    node,
                    fields,
                }))
            }
        }
    }

    /// Go's `term` and `operand` for a field or variable and the fields chained to it
    /// (`.a.b`, `$x.a`). As in Go, a chain takes the position of its second field.
    fn field_or_variable(&mut self) -> PResult<Arg> {
        let token = self.next_non_space();
        let is_var = token.typ == ItemType::Variable;
        let first = if is_var {
            let name = self.val(&token);
            if !self.vars[self.scope..].contains(&name) {
                return self.errorf(format!("undefined variable {}", crate::gofmt::quote(name)));
            }
            self.slice(&token, 0)
        } else {
            self.slice(&token, 1)
        };
        let mut pos = token.pos();
        if self.peek_is_field() {
            pos = self.peek().pos();
        }
        let idents = self.fields_after(Some(first));
        let pos = pos32(pos);
        Ok(if is_var {
            Arg::Variable { pos, idents }
        } else {
            Arg::Field { pos, idents }
        })
    }

    /// `first` and the names of the field tokens that follow.
    fn fields_after(&mut self, first: Option<SrcStr>) -> Span {
        self.field_stack.clear();
        self.field_stack.extend(first);
        while self.peek_is_field() {
            let f = self.next();
            let name = self.slice(&f, 1);
            self.field_stack.push(name);
        }
        let span = self.ast.push_names(&self.field_stack);
        self.field_stack.clear();
        span
    }

    /// Go's `term`, except fields and variables ([`Parser::field_or_variable`]): the
    /// operand and its token's text.
    fn term(&mut self) -> PResult<Option<(Arg, &'a str)>> {
        let token = self.next_non_space();
        let pos = pos32(token.pos());
        let arg = match token.typ {
            ItemType::Identifier => {
                let name = self.val(&token);
                if !(self.has_func)(name) {
                    return self.errorf(format!(
                        "function {} not defined",
                        crate::gofmt::quote(name)
                    ));
                }
                Arg::Identifier {
                    pos,
                    name: self.slice(&token, 0),
                }
            }
            ItemType::Dot => Arg::Dot { pos },
            ItemType::Nil => Arg::Nil { pos },
            ItemType::Bool => Arg::Bool {
                pos,
                val: self.val(&token) == "true",
            },
            ItemType::CharConstant | ItemType::Complex | ItemType::Number => {
                match parse_number(pos, self.val(&token), self.slice(&token, 0), token.typ) {
                    Ok(n) => Arg::Number(self.ast.number(n)),
                    Err(e) => return self.errorf(e),
                }
            }
            ItemType::LeftParen => {
                self.enter()?;
                let r = self.pipeline("parenthesized pipeline", ItemType::RightParen);
                self.leave();
                Arg::Pipe(self.ast.pipe(r?))
            }
            ItemType::String | ItemType::RawString => {
                let text = self.string_value(&token)?;
                Arg::String {
                    quoted: self.slice(&token, 0),
                    lit: self.ast.string(text),
                }
            }
            _ => {
                self.backup();
                return Ok(None);
            }
        };
        Ok(Some((arg, self.val(&token))))
    }
}

/// Go's `strconv.Unquote` for double-quoted and raw strings.
pub(crate) fn unquote(s: &str) -> Result<String, String> {
    let err = || "invalid syntax".to_string();
    if s.len() >= 2 && s.starts_with('`') && s.ends_with('`') {
        return Ok(s[1..s.len() - 1].replace('\r', ""));
    }
    if s.len() < 2 || !s.starts_with('"') || !s.ends_with('"') {
        return Err(err());
    }
    let body = &s[1..s.len() - 1];
    let mut out = String::new();
    let mut rest = body;
    while !rest.is_empty() {
        let (c, tail) = unquote_char(rest, '"').ok_or_else(err)?;
        match c {
            Unquoted::Char(c) => out.push(c),
            Unquoted::Byte(_) => return Err("invalid UTF-8 in string literal".to_string()),
        }
        rest = tail;
    }
    Ok(out)
}

pub(crate) enum Unquoted {
    Char(char),
    Byte(u8),
}

/// Go's `strconv.UnquoteChar`: decodes one (possibly escaped) character.
pub(crate) fn unquote_char(s: &str, quote: char) -> Option<(Unquoted, &str)> {
    let mut chars = s.chars();
    let c = chars.next()?;
    if c == quote && (quote == '\'' || quote == '"') {
        return None;
    }
    if c != '\\' {
        return Some((Unquoted::Char(c), chars.as_str()));
    }
    let e = chars.next()?;
    let rest = chars.as_str();
    let simple = match e {
        'a' => Some('\u{7}'),
        'b' => Some('\u{8}'),
        'f' => Some('\u{c}'),
        'n' => Some('\n'),
        'r' => Some('\r'),
        't' => Some('\t'),
        'v' => Some('\u{b}'),
        '\\' => Some('\\'),
        '\'' | '"' if e == quote => Some(e),
        _ => None,
    };
    if let Some(c) = simple {
        return Some((Unquoted::Char(c), rest));
    }
    match e {
        'x' | 'u' | 'U' => {
            let n = match e {
                'x' => 2,
                'u' => 4,
                _ => 8,
            };
            let hex = rest.get(..n)?;
            let v = u32::from_str_radix(hex, 16).ok()?;
            if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            let rest = &rest[n..];
            if e == 'x' {
                if v < 0x80 {
                    return Some((Unquoted::Char(char::from_u32(v)?), rest));
                }
                return Some((Unquoted::Byte(v as u8), rest));
            }
            Some((Unquoted::Char(char::from_u32(v)?), rest))
        }
        '0'..='7' => {
            let oct = s.get(1..4)?;
            if !oct.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
                return None;
            }
            let v = u32::from_str_radix(oct, 8).ok()?;
            if v > 255 {
                return None;
            }
            let rest = &s[4..];
            if v < 0x80 {
                Some((Unquoted::Char(char::from_u32(v)?), rest))
            } else {
                Some((Unquoted::Byte(v as u8), rest))
            }
        }
        _ => None,
    }
}

/// Whether underscores in a Go number literal are well placed (`strconv`'s `underscoreOK`).
fn underscore_ok(s: &str) -> bool {
    let b = s.as_bytes();
    let mut saw = b'^';
    let mut i = 0;
    if !b.is_empty() && (b[0] == b'-' || b[0] == b'+') {
        i = 1;
    }
    let mut hex = false;
    if b.len() - i >= 2 && b[i] == b'0' && matches!(b[i + 1] | 0x20, b'b' | b'o' | b'x') {
        hex = (b[i + 1] | 0x20) == b'x';
        i += 2;
        saw = b'0';
    }
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_digit() || (hex && c.is_ascii_hexdigit()) {
            saw = b'0';
        } else if c == b'_' {
            if saw != b'0' {
                return false;
            }
            saw = b'_';
        } else {
            if saw == b'_' {
                return false;
            }
            saw = b'!';
        }
        i += 1;
    }
    saw != b'_'
}

/// `strconv.ParseUint(s, 0, 64)`.
fn parse_uint_base0(s: &str) -> Option<u64> {
    if s.is_empty() || s.starts_with(['+', '-']) {
        return None;
    }
    let (digits, radix) = if let Some(r) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        (r, 16)
    } else if let Some(r) = s.strip_prefix("0o").or_else(|| s.strip_prefix("0O")) {
        (r, 8)
    } else if let Some(r) = s.strip_prefix("0b").or_else(|| s.strip_prefix("0B")) {
        (r, 2)
    } else if s.len() > 1 && s.starts_with('0') {
        (&s[1..], 8)
    } else {
        (s, 10)
    };
    if !s.contains('_') {
        if digits.is_empty() {
            return None;
        }
        return u64::from_str_radix(digits, radix).ok();
    }
    // Go allows underscores in base-0 parsing, decimal included ("1_000"), where
    // `underscore_ok` accepts their placement.
    if !underscore_ok(s) {
        return None;
    }
    let clean: String = digits.chars().filter(|&c| c != '_').collect();
    if clean.is_empty() {
        return None;
    }
    u64::from_str_radix(&clean, radix).ok()
}

/// `strconv.ParseInt(s, 0, 64)`.
fn parse_int_base0(s: &str) -> Option<i64> {
    let (neg, body) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let u = parse_uint_base0(body)?;
    if neg {
        if u <= (i64::MAX as u64) + 1 {
            Some((u as i128).wrapping_neg() as i64)
        } else {
            None
        }
    } else if u <= i64::MAX as u64 {
        Some(u as i64)
    } else {
        None
    }
}

/// `strconv.ParseFloat(s, 64)` for Go literal syntax (decimal and hexadecimal).
fn parse_float(s: &str) -> Option<f64> {
    if s.contains('_') && !underscore_ok(s) {
        return None;
    }
    let clean: String = s.chars().filter(|&c| c != '_').collect();
    let (neg, body) = match clean.as_bytes().first() {
        Some(b'-') => (true, &clean[1..]),
        Some(b'+') => (false, &clean[1..]),
        _ => (false, clean.as_str()),
    };
    let v = if let Some(hex) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        parse_hex_float(hex)?
    } else {
        if body.is_empty()
            || !body
                .bytes()
                .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'))
        {
            return None;
        }
        body.parse::<f64>().ok()?
    };
    // Out of range is a syntax error for the template parser (strconv's ErrRange).
    if v.is_infinite() {
        return None;
    }
    Some(if neg { -v } else { v })
}

fn parse_hex_float(s: &str) -> Option<f64> {
    // Go requires the binary exponent on hexadecimal floats.
    let i = s.find(['p', 'P'])?;
    let (mant, exp) = (&s[..i], s[i + 1..].parse::<i32>().ok()?);
    let (int, frac) = mant.split_once('.').unwrap_or((mant, ""));
    if int.is_empty() && frac.is_empty() {
        return None;
    }
    let mut v = 0f64;
    for c in int.chars() {
        v = v * 16.0 + f64::from(c.to_digit(16)?);
    }
    let mut scale = 1.0 / 16.0;
    for c in frac.chars() {
        v += f64::from(c.to_digit(16)?) * scale;
        scale /= 16.0;
    }
    Some(v * 2f64.powi(exp))
}

/// Go's `newNumber`: all the representations a numeric constant admits.
fn parse_number(pos: u32, text: &str, source: SrcStr, typ: ItemType) -> Result<Number, String> {
    let mut n = Number {
        pos,
        text: source,
        is_int: false,
        is_uint: false,
        is_float: false,
        int: 0,
        uint: 0,
        float: 0.0,
    };
    if typ == ItemType::CharConstant {
        let inner = &text[1..];
        let (c, tail) = unquote_char(inner, '\'').ok_or_else(|| "invalid syntax".to_string())?;
        if tail != "'" {
            return Err(format!("malformed character constant: {text}"));
        }
        let v = match c {
            Unquoted::Char(c) => c as u32,
            Unquoted::Byte(b) => u32::from(b),
        };
        n.int = i64::from(v);
        n.uint = u64::from(v);
        n.float = f64::from(v);
        n.is_int = true;
        n.is_uint = true;
        n.is_float = true;
        return Ok(n);
    }
    if typ == ItemType::Complex || text.ends_with('i') {
        return Err(format!("complex constants are not supported: {text}"));
    }
    if let Some(u) = parse_uint_base0(text) {
        n.is_uint = true;
        n.uint = u;
    }
    if let Some(i) = parse_int_base0(text) {
        n.is_int = true;
        n.int = i;
        if i == 0 {
            n.is_uint = true;
            n.uint = 0;
        }
    }
    if n.is_int {
        n.is_float = true;
        n.float = n.int as f64;
    } else if n.is_uint {
        n.is_float = true;
        n.float = n.uint as f64;
    } else if let Some(f) = parse_float(text) {
        if !text.contains(['.', 'e', 'E', 'p', 'P']) {
            return Err(format!("integer overflow: {}", crate::gofmt::quote(text)));
        }
        n.is_float = true;
        n.float = f;
        if f.is_finite() && f == f.trunc() {
            if (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&f) {
                n.is_int = true;
                n.int = f as i64;
            }
            if (0.0..1.844_674_407_370_955_2e19).contains(&f) {
                n.is_uint = true;
                n.uint = f as u64;
            }
        }
    }
    if !n.is_int && !n.is_uint && !n.is_float {
        return Err(format!(
            "illegal number syntax: {}",
            crate::gofmt::quote(text)
        ));
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn has(name: &str) -> bool {
        matches!(name, "printf" | "len" | "index" | "eq" | "not")
    }

    fn err(src: &str) -> String {
        parse("t", src, None, &has, &mut Scratch::default())
            .err()
            .unwrap_or_default()
    }

    #[test]
    fn parse_errors_use_go_messages() {
        let cases = [
            ("{{ foo }}", "template: t:1: function \"foo\" not defined"),
            ("{{ .a }", "template: t:1: unexpected \"}\" in operand"),
            ("{{ if true }}", "template: t:1: unexpected EOF"),
            ("\n\n{{ end }}", "template: t:3: unexpected {{end}}"),
            ("{{ else }}", "template: t:1: unexpected {{else}}"),
            ("{{ $x }}", "template: t:1: undefined variable \"$x\""),
            ("{{ break }}", "template: t:1: {{break}} outside {{range}}"),
            (
                "{{ continue }}",
                "template: t:1: {{continue}} outside {{range}}",
            ),
            ("{{ }}", "template: t:1: missing value for command"),
            (
                "{{ 1 | 2 }}",
                "template: t:1: non executable command in pipeline stage 2",
            ),
            (
                "{{ \"a\".b }}",
                "template: t:1: unexpected . after term \"\\\"a\\\"\"",
            ),
            (
                "{{ $a, $b := 1 }}",
                "template: t:1: too many declarations in command",
            ),
            (
                "{{ range $a, 1 }}{{end}}",
                "template: t:1: range can only initialize variables",
            ),
            (
                "{{ template foo }}",
                "template: t:1: unexpected \"foo\" in template clause",
            ),
            (
                "{{ if 1 }}{{ else }}{{ else }}{{ end }}",
                "template: t:1: expected end; found {{else}}",
            ),
            (
                "{{define \"a\"}}x{{end}}{{define \"a\"}}y{{end}}",
                "template: t:1: template: multiple definition of template \"a\"",
            ),
            (
                "{{ 1i }}",
                "template: t:1: complex constants are not supported: 1i",
            ),
        ];
        for (src, want) in cases {
            assert_eq!(err(src), want, "source {src:?}");
        }
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let src = format!(
            "{}1{}",
            "{{(".to_string() + &"(".repeat(10_000),
            ")".repeat(10_001) + "}}"
        );
        assert!(err(&src).ends_with("max expression depth exceeded"));
        let src = "{{if 1}}".repeat(5000);
        assert!(err(&src).ends_with("max expression depth exceeded"));
    }

    fn num(text: &str, typ: ItemType) -> Result<Number, String> {
        parse_number(0, text, SrcStr::source(0, text.len()), typ)
    }

    #[test]
    fn numbers_admit_every_go_representation() {
        let n = num("0x1F", ItemType::Number).expect("hex");
        assert!(n.is_int && n.int == 31);
        let n = num("0777", ItemType::Number).expect("octal");
        assert_eq!(n.int, 511);
        let n = num("1_000", ItemType::Number).expect("underscore");
        assert_eq!(n.int, 1000);
        let n = num("2.0", ItemType::Number).expect("float");
        assert!(n.is_float && n.is_int && n.int == 2);
        let n = num("1e3", ItemType::Number).expect("exp");
        assert!(n.is_float && n.float == 1000.0);
        let n = num("'a'", ItemType::CharConstant).expect("char");
        assert_eq!(n.int, 97);
        let n = num("'\\n'", ItemType::CharConstant).expect("escaped char");
        assert_eq!(n.int, 10);
        let n = num("0x1p-2", ItemType::Number).expect("hex float");
        assert_eq!(n.float, 0.25);
        assert!(num("99999999999999999999", ItemType::Number).is_err());
    }

    #[test]
    fn strings_unquote_with_go_escapes() {
        assert_eq!(
            unquote("\"a\\tb\\x41\\u00e9\\101\"").as_deref(),
            Ok("a\tbAé A".replace(' ', "").as_str())
        );
        assert_eq!(unquote("`a\\n\r`").as_deref(), Ok("a\\n"));
        assert!(unquote("\"\\'\"").is_err());
    }
}
