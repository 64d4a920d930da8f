//! The template set: named templates parsed from many sources, sharing one namespace
//! (Helm parses every chart file into one set, so every `define` is global).

use std::sync::Arc;

use crate::ast::{Ast, Span};
use crate::exec::{BUILTIN_NAMES, Ev, Shared, run_template};
use crate::names::NameMap;
use crate::signature::FuncMap;
use crate::value::Value;
use crate::{Error, ExecOptions};

/// Sorts template file names into the order Helm parses (and renders) them
/// (`pkg/engine/engine.go` `sortTemplates`): more `/` first, so subcharts come before their
/// parents, then reverse lexical order. Parsing in this order makes the root chart's
/// definitions win, and `_a.tpl` win over `_b.tpl`.
pub fn sort_in_helm_parse_order<S: AsRef<str>>(names: &mut [S]) {
    names.sort_by(|a, b| {
        let (a, b) = (a.as_ref(), b.as_ref());
        let (sa, sb) = (a.matches('/').count(), b.matches('/').count());
        sb.cmp(&sa).then_with(|| b.cmp(a))
    });
}

/// One named template: its body, in the tree of the source it was parsed from (which also
/// gives error positions).
#[derive(Debug)]
pub struct Template {
    pub(crate) name: String,
    pub(crate) parse_name: String,
    pub(crate) ast: Arc<Ast>,
    pub(crate) root: Span,
}

impl Template {
    /// The template's name (a file name, or the name given to `define`/`block`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name of the source the template was parsed from.
    pub fn parse_name(&self) -> &str {
        &self.parse_name
    }
}

/// A set of named templates. Cloning is cheap (templates are shared) and gives an
/// independent namespace, as Go's `Template.Clone` does for Helm's `tpl`.
#[derive(Clone, Debug)]
pub struct TemplateSet {
    name: String,
    templates: NameMap<String, Arc<Template>>,
}

impl TemplateSet {
    /// An empty set. `name` is the set's own name, quoted by
    /// `template: no template "x" associated with template "NAME"` (Helm uses `gotpl`).
    pub fn new(name: impl Into<String>) -> Self {
        TemplateSet {
            name: name.into(),
            templates: NameMap::default(),
        }
    }

    /// The set's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Parses `text` as the template `name`, adding it and every template it defines to the
    /// set. A later definition replaces an earlier one of the same name unless its body is
    /// empty (whitespace and comments only); two non-empty definitions in the same text are
    /// an error. Every function a template names must exist in `funcs` or the builtins.
    /// On error the set is unchanged.
    pub fn parse(&mut self, name: &str, text: &str, funcs: &FuncMap) -> Result<(), Error> {
        let has = |n: &str| funcs.contains(n) || BUILTIN_NAMES.contains(&n);
        let (ast, trees) = crate::parse::parse(name, text, &has).map_err(Error::Parse)?;
        let ast = Arc::new(ast);
        for tree in trees {
            if tree.empty && self.templates.contains_key(&tree.name) {
                continue;
            }
            let t = Template {
                name: tree.name.clone(),
                parse_name: name.to_string(),
                ast: Arc::clone(&ast),
                root: tree.root,
            };
            self.templates.insert(tree.name, Arc::new(t));
        }
        Ok(())
    }

    /// The template named `name`.
    pub fn get(&self, name: &str) -> Option<&Template> {
        self.templates.get(name).map(Arc::as_ref)
    }

    /// Whether a template named `name` exists.
    pub fn contains(&self, name: &str) -> bool {
        self.templates.contains_key(name)
    }

    /// The template names, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.templates.keys().map(String::as_str).collect();
        v.sort_unstable();
        v
    }

    /// Executes the template `name` with `data` as dot and `$` (Go's `ExecuteTemplate`).
    /// A [`Value::Nil`] data is Go's nil: dot has no value.
    pub fn execute(
        &self,
        name: &str,
        data: &Value,
        funcs: &FuncMap,
        opts: &ExecOptions,
    ) -> Result<String, Error> {
        let Some(tmpl) = self.get(name) else {
            return Err(Error::Exec(format!(
                "template: no template {} associated with template {}",
                crate::gofmt::quote(name),
                crate::gofmt::quote(&self.name)
            )));
        };
        let mut shared = Shared::new(funcs, opts);
        let dot = if data.is_nil() {
            Ev::Invalid
        } else {
            Ev::Val(data.clone())
        };
        run_template(&mut shared, self, tmpl, dot)
    }
}
