//! `cargo xtask gen-patch-schema`: extracts, from the Kubernetes OpenAPI v2 document
//! (`api/openapi-spec/swagger.json` of the pinned `k8s.io/kubernetes` module), the only parts of
//! the schema strategic merge needs: which list fields merge and by which keys, the types on
//! the way to them, the root type of each built-in apiVersion/kind, and the kinds that are
//! cluster-scoped. The result is the committed `chart/src/postrender/schema_table.rs`;
//! `gen-check` fails when it is stale.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};
use serde_json::Value;

/// Where the generated table is committed.
pub const GENERATED: &str = "chart/src/postrender/schema_table.rs";

/// The go.mod that pins `k8s.io/kubernetes`.
const PIN: &str = "tests/upstream/kubernetes/go.mod";

/// The swagger document of the pinned Kubernetes version, in the Go module cache.
fn swagger_path(root: &Path) -> anyhow::Result<(PathBuf, String)> {
    let gomod =
        std::fs::read_to_string(root.join(PIN)).with_context(|| format!("reading {PIN}"))?;
    let version = gomod
        .lines()
        .find_map(|l| l.trim().strip_prefix("require k8s.io/kubernetes "))
        .map(|v| v.trim().to_owned())
        .with_context(|| format!("{PIN}: no `require k8s.io/kubernetes` line"))?;
    let modcache = match Command::new("go").args(["env", "GOMODCACHE"]).output() {
        Ok(out) if out.status.success() => String::from_utf8(out.stdout)?.trim().to_owned(),
        _ => format!("{}/go/pkg/mod", std::env::var("HOME").unwrap_or_default()),
    };
    let path = PathBuf::from(modcache)
        .join(format!("k8s.io/kubernetes@{version}"))
        .join("api/openapi-spec/swagger.json");
    if !path.exists() {
        bail!(
            "{} is missing; run tools/build-upstream first (it downloads the Go modules)",
            path.display()
        );
    }
    Ok((path, version))
}

/// A schema position, as the generated table describes it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Node {
    /// An object type (index into the type list).
    Object(String),
    /// A map whose values all have this shape.
    Map(Box<Node>),
    /// A list; `merge` holds the merge keys when its patch strategy includes `merge`.
    List {
        items: Box<Node>,
        merge: Option<Vec<String>>,
    },
    /// Anything else (scalars, free-form objects).
    Leaf,
}

fn ref_name(v: &Value) -> Option<String> {
    v.get("$ref")?
        .as_str()?
        .strip_prefix("#/definitions/")
        .map(str::to_owned)
}

fn node_of(prop: &Value) -> Node {
    if let Some(name) = ref_name(prop) {
        return Node::Object(name);
    }
    match prop.get("type").and_then(Value::as_str) {
        Some("array") => {
            let items = prop.get("items").map(node_of).unwrap_or(Node::Leaf);
            let strategy = prop
                .get("x-kubernetes-patch-strategy")
                .and_then(Value::as_str)
                .unwrap_or("");
            let merge = strategy.split(',').any(|s| s == "merge").then(|| {
                if let Some(keys) = prop
                    .get("x-kubernetes-list-map-keys")
                    .and_then(Value::as_array)
                {
                    keys.iter()
                        .filter_map(|k| k.as_str().map(str::to_owned))
                        .collect()
                } else if let Some(key) = prop
                    .get("x-kubernetes-patch-merge-key")
                    .and_then(Value::as_str)
                {
                    vec![key.to_owned()]
                } else {
                    Vec::new()
                }
            });
            Node::List {
                items: Box::new(items),
                merge,
            }
        }
        Some("object") => match prop.get("additionalProperties") {
            Some(ap) if ap.is_object() => Node::Map(Box::new(node_of(ap))),
            _ => Node::Leaf,
        },
        _ => Node::Leaf,
    }
}

struct Schema {
    /// Type name -> (field -> node, additionalProperties node).
    types: BTreeMap<String, (BTreeMap<String, Node>, Option<Node>)>,
}

impl Schema {
    fn interesting(&self, node: &Node, known: &BTreeSet<String>) -> bool {
        match node {
            Node::Object(name) => known.contains(name),
            Node::Map(inner) => self.interesting(inner, known),
            Node::List { items, merge } => merge.is_some() || self.interesting(items, known),
            Node::Leaf => false,
        }
    }
}

/// Builds the generated file's text (not yet rustfmt'd).
fn render(swagger: &Value, version: &str) -> anyhow::Result<String> {
    let defs = swagger
        .get("definitions")
        .and_then(Value::as_object)
        .context("swagger.json has no definitions")?;
    let mut schema = Schema {
        types: BTreeMap::new(),
    };
    let mut roots: BTreeSet<(String, String, String)> = BTreeSet::new();
    for (name, def) in defs {
        let mut fields = BTreeMap::new();
        if let Some(props) = def.get("properties").and_then(Value::as_object) {
            for (field, prop) in props {
                fields.insert(field.clone(), node_of(prop));
            }
        }
        let extra = match def.get("additionalProperties") {
            Some(ap) if ap.is_object() => Some(node_of(ap)),
            _ => None,
        };
        schema.types.insert(name.clone(), (fields, extra));
        for gvk in def
            .get("x-kubernetes-group-version-kind")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let group = gvk.get("group").and_then(Value::as_str).unwrap_or("");
            let version = gvk.get("version").and_then(Value::as_str).unwrap_or("");
            let kind = gvk.get("kind").and_then(Value::as_str).unwrap_or("");
            let api_version = if group.is_empty() {
                version.to_owned()
            } else {
                format!("{group}/{version}")
            };
            roots.insert((api_version, kind.to_owned(), name.clone()));
        }
    }

    // Types that lead to a merging list, to a fixed point.
    let mut known: BTreeSet<String> = BTreeSet::new();
    loop {
        let mut grew = false;
        for (name, (fields, extra)) in &schema.types {
            if known.contains(name) {
                continue;
            }
            let hit = fields.values().any(|n| schema.interesting(n, &known))
                || extra
                    .as_ref()
                    .is_some_and(|n| schema.interesting(n, &known));
            if hit {
                known.insert(name.clone());
                grew = true;
            }
        }
        if !grew {
            break;
        }
    }
    let index: BTreeMap<&str, usize> = known
        .iter()
        .enumerate()
        .map(|(i, n)| (n.as_str(), i))
        .collect();

    // Scope of each kind, from the API paths.
    let mut namespaced: BTreeSet<(String, String)> = BTreeSet::new();
    let mut seen: BTreeSet<(String, String)> = BTreeSet::new();
    for (path, item) in swagger
        .get("paths")
        .and_then(Value::as_object)
        .context("swagger.json has no paths")?
    {
        let Some(ops) = item.as_object() else {
            continue;
        };
        for op in ops.values() {
            let Some(gvk) = op.get("x-kubernetes-group-version-kind") else {
                continue;
            };
            let group = gvk.get("group").and_then(Value::as_str).unwrap_or("");
            let version = gvk.get("version").and_then(Value::as_str).unwrap_or("");
            let kind = gvk.get("kind").and_then(Value::as_str).unwrap_or("");
            let api_version = if group.is_empty() {
                version.to_owned()
            } else {
                format!("{group}/{version}")
            };
            let key = (api_version, kind.to_owned());
            if path.contains("/namespaces/{namespace}/") {
                namespaced.insert(key.clone());
            }
            seen.insert(key);
        }
    }
    let cluster_scoped: Vec<&(String, String)> = seen.difference(&namespaced).collect();

    let mut out = String::new();
    writeln!(
        out,
        "//! @generated by `cargo xtask gen-patch-schema` from the OpenAPI document of Kubernetes \
         {version}\n//! (`k8s.io/kubernetes/api/openapi-spec/swagger.json`). Do not edit; \
         `cargo xtask gen-check` fails when it is stale.\n"
    )?;
    writeln!(out, "use super::schema::{{FieldDef, Node, TypeDef}};\n")?;
    writeln!(
        out,
        "/// Object types on the way to a merging list, by index.\npub(super) static TYPES: &[TypeDef] = &["
    )?;
    for name in &known {
        let (fields, extra) = &schema.types[name];
        write!(out, "// {name}\nTypeDef {{ fields: &[")?;
        for (field, node) in fields {
            if schema.interesting(node, &known) {
                write!(
                    out,
                    "FieldDef {{ name: {field:?}, node: {} }},",
                    node_code(node, &index)
                )?;
            }
        }
        write!(out, "], values: ")?;
        match extra {
            Some(n) if schema.interesting(n, &known) => {
                write!(out, "Some({})", node_code(n, &index))?;
            }
            _ => write!(out, "None")?,
        }
        writeln!(out, " }},")?;
    }
    writeln!(out, "];\n")?;
    writeln!(
        out,
        "/// (apiVersion, kind) -> index of its type in [`TYPES`], sorted.\npub(super) static ROOTS: &[(&str, &str, u16)] = &["
    )?;
    let mut root_rows: Vec<(&str, &str, usize)> = roots
        .iter()
        .filter_map(|(av, k, n)| index.get(n.as_str()).map(|i| (av.as_str(), k.as_str(), *i)))
        .collect();
    root_rows.sort();
    root_rows.dedup_by(|a, b| a.0 == b.0 && a.1 == b.1);
    for (av, k, i) in root_rows {
        writeln!(out, "({av:?}, {k:?}, {i}),")?;
    }
    writeln!(out, "];\n")?;
    writeln!(
        out,
        "/// (apiVersion, kind) of the cluster-scoped kinds, sorted.\npub(super) static CLUSTER_SCOPED: &[(&str, &str)] = &["
    )?;
    for (av, k) in cluster_scoped {
        writeln!(out, "({av:?}, {k:?}),")?;
    }
    writeln!(out, "];")?;
    Ok(out)
}

fn node_code(node: &Node, index: &BTreeMap<&str, usize>) -> String {
    match node {
        Node::Object(name) => match index.get(name.as_str()) {
            Some(i) => format!("Node::Object({i})"),
            None => "Node::Leaf".to_owned(),
        },
        Node::Map(inner) => format!("Node::Map(&{})", node_code(inner, index)),
        Node::List { items, merge } => {
            let merge = match merge {
                Some(keys) => format!("Some(&{keys:?})"),
                None => "None".to_owned(),
            };
            format!(
                "Node::List {{ items: &{}, merge: {merge} }}",
                node_code(items, index)
            )
        }
        Node::Leaf => "Node::Leaf".to_owned(),
    }
}

/// The generated file, rustfmt'd, as it should be committed.
fn fresh(root: &Path) -> anyhow::Result<String> {
    let (path, version) = swagger_path(root)?;
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let swagger: Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let code = render(&swagger, &version)?;
    let mut child = Command::new("rustfmt")
        .args(["--edition", "2024", "--emit", "stdout"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("running rustfmt")?;
    {
        use std::io::Write as _;
        let mut stdin = child.stdin.take().context("rustfmt stdin")?;
        stdin.write_all(code.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!("rustfmt failed on the generated schema table");
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// `cargo xtask gen-patch-schema`: writes the table.
pub fn generate(root: &Path) -> anyhow::Result<()> {
    let code = fresh(root)?;
    std::fs::write(root.join(GENERATED), code)?;
    eprintln!("xtask: wrote {GENERATED}");
    Ok(())
}

/// Fails when the committed table differs from a fresh one.
pub fn check(root: &Path) -> anyhow::Result<()> {
    let code = fresh(root)?;
    let committed = std::fs::read_to_string(root.join(GENERATED)).unwrap_or_default();
    if code != committed {
        bail!("{GENERATED} is stale; run `cargo xtask gen-patch-schema` and commit");
    }
    eprintln!("xtask: {GENERATED} is up to date");
    Ok(())
}
