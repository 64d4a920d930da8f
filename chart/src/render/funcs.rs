//! Helm's template functions (`pkg/engine/funcs.go`, `engine.go initFunMap`) on top of Sprig:
//! `include`, `tpl`, `required`, `fail`, `lookup`, `getHostByName`, and the serialisation
//! functions `toYaml`, `mustToYaml`, `toYamlPretty`, `fromYaml`, `fromYamlArray`, `toJson`,
//! `mustToJson`, `fromJson`, `fromJsonArray`, `toToml`, `fromToml`.

use std::fmt;
use std::sync::{Arc, LazyLock};

use flotilla_gotmpl::{ArgType, FuncError, FuncMap, Function, Map, Signature, Value};

use super::convert::{go_json, go_json_decode, value_to_go_yaml, value_to_yaml};

/// Nesting of one template name through `include`/`tpl` beyond which Helm stops
/// (`recursionMaxNums`).
pub const MAX_INCLUDE_NESTING: usize = 1000;

pub(crate) const ERR_START: &str = "HELM_ERR_START";
pub(crate) const ERR_END: &str = "HELM_ERR_END";

/// The cluster behind the `lookup` template function. `helm template` has none: without a
/// `Lookup` every call returns an empty map, as Helm's stub does.
pub trait Lookup: Send + Sync + fmt::Debug {
    /// Gets the object `name` (or lists the kind when `name` is empty) of `kind` in
    /// `api_version`, in `namespace` (empty: all namespaces or cluster scope). A missing
    /// object is an empty map, not an error; an error aborts rendering with its message.
    fn lookup(
        &self,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<serde_json::Map<String, serde_json::Value>, String>;
}

/// Engine settings that shape the function map.
#[derive(Clone, Debug, Default)]
pub(crate) struct FuncOptions {
    pub(crate) lint_mode: bool,
    pub(crate) enable_dns: bool,
    pub(crate) lookup: Option<Arc<dyn Lookup>>,
}

/// Sprig (without `env`/`expandenv`) plus Helm's context-free functions.
static BASE: LazyLock<FuncMap> = LazyLock::new(|| {
    let mut f = flotilla_sprig::funcs();
    f.remove("env");
    f.remove("expandenv");
    add_serialisation(&mut f);
    f
});

/// The full function map for one render.
pub(crate) fn helm_funcs(opts: &FuncOptions) -> FuncMap {
    let mut f = BASE.clone();
    f.insert(
        "include",
        Function::with_ctx(Signature::fixed([ArgType::String, ArgType::Any]), include),
    );
    f.insert(
        "tpl",
        Function::with_ctx(Signature::fixed([ArgType::String, ArgType::Any]), tpl),
    );
    let lint = opts.lint_mode;
    f.insert(
        "required",
        Function::new(
            Signature::fixed([ArgType::String, ArgType::Any]),
            move |a| {
                let empty = match &a[1] {
                    Value::Nil => true,
                    Value::String(s) => s.is_empty(),
                    _ => false,
                };
                if !empty {
                    return Ok(a[1].clone());
                }
                if lint {
                    return Ok(Value::string(""));
                }
                Err(FuncError::new(wrap(str_arg(&a[0]))))
            },
        ),
    );
    f.insert(
        "fail",
        Function::new(Signature::fixed([ArgType::String]), move |a| {
            if lint {
                return Ok(Value::string(""));
            }
            Err(FuncError::new(wrap(str_arg(&a[0]))))
        }),
    );
    let lookup = if opts.lint_mode {
        None
    } else {
        opts.lookup.clone()
    };
    f.insert(
        "lookup",
        Function::new(
            Signature::fixed([
                ArgType::String,
                ArgType::String,
                ArgType::String,
                ArgType::String,
            ]),
            move |a| {
                let Some(l) = &lookup else {
                    return Ok(Value::Map(Map::new()));
                };
                let obj = l
                    .lookup(
                        str_arg(&a[0]),
                        str_arg(&a[1]),
                        str_arg(&a[2]),
                        str_arg(&a[3]),
                    )
                    .map_err(FuncError::new)?;
                Ok(Value::Map(super::convert::json_map_to_map(&obj)))
            },
        ),
    );
    if !opts.enable_dns {
        f.insert(
            "getHostByName",
            Function::new(Signature::fixed([ArgType::String]), |_| {
                Ok(Value::string(""))
            }),
        );
    }
    f
}

fn wrap(msg: &str) -> String {
    format!("{ERR_START}{msg}{ERR_END}")
}

fn str_arg(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

/// Per-render nesting counters shared by `include` and `tpl` (Helm's `includedNames`).
#[derive(Default)]
struct IncludedNames(flotilla_gotmpl::names::NameMap<Arc<str>, usize>);

fn include(ctx: &mut flotilla_gotmpl::CallCtx<'_, '_>, a: &[Value]) -> Result<Value, FuncError> {
    let name = str_arg(&a[0]);
    {
        let counts = &mut ctx.state::<IncludedNames>().0;
        // The key shares the name's string (a literal's, kept by the template).
        if !counts.contains_key(name) {
            let key = match &a[0] {
                Value::String(s) => Arc::clone(s),
                _ => Arc::from(name),
            };
            counts.insert(key, 0);
        }
        let n = counts.get_mut(name).expect("inserted above");
        if *n > MAX_INCLUDE_NESTING {
            return Err(FuncError::new(format!(
                "rendering template has a nested reference name: {name}: unable to execute template"
            )));
        }
        *n += 1;
    }
    let out = ctx.execute_template_value(name, a[1].clone());
    if let Some(n) = ctx.state::<IncludedNames>().0.get_mut(name) {
        *n = n.saturating_sub(1);
    }
    Ok(out?)
}

fn tpl(ctx: &mut flotilla_gotmpl::CallCtx<'_, '_>, a: &[Value]) -> Result<Value, FuncError> {
    let text = str_arg(&a[0]);
    let quoted = || flotilla_gotmpl::gofmt::quote(text);
    let mut set = ctx.templates().clone();
    if let Err(e) = set.parse("gotpl", text, ctx.funcs()) {
        return Err(FuncError::new(format!(
            "cannot parse template {}: {e}",
            quoted()
        )));
    }
    match ctx.execute_template_in(&set, "gotpl", a[1].clone()) {
        Ok(out) => Ok(Value::string(out.replace("<no value>", ""))),
        Err(e) => Err(FuncError::new(format!(
            "error during tpl function execution for {}: {e}",
            quoted()
        ))),
    }
}

pub(crate) fn add_serialisation(f: &mut FuncMap) {
    let any = || Signature::fixed([ArgType::Any]);
    let string = || Signature::fixed([ArgType::String]);
    f.insert(
        "toYaml",
        Function::new(any(), |a| {
            Ok(Value::string(to_yaml(&a[0]).unwrap_or_default()))
        }),
    );
    f.insert(
        "mustToYaml",
        Function::new(any(), |a| {
            to_yaml(&a[0]).map(Value::string).map_err(FuncError::new)
        }),
    );
    f.insert(
        "toYamlPretty",
        Function::new(any(), |a| {
            Ok(Value::string(to_yaml_pretty(&a[0]).unwrap_or_default()))
        }),
    );
    f.insert(
        "fromYaml",
        Function::new(string(), |a| Ok(Value::Map(from_yaml(str_arg(&a[0]))))),
    );
    f.insert(
        "fromYamlArray",
        Function::new(string(), |a| {
            Ok(Value::list(from_yaml_array(str_arg(&a[0]))))
        }),
    );
    f.insert(
        "toJson",
        Function::new(any(), |a| {
            Ok(Value::string(go_json(&a[0]).unwrap_or_default()))
        }),
    );
    f.insert(
        "mustToJson",
        Function::new(any(), |a| {
            go_json(&a[0]).map(Value::string).map_err(FuncError::new)
        }),
    );
    f.insert(
        "fromJson",
        Function::new(string(), |a| Ok(Value::Map(from_json(str_arg(&a[0]))))),
    );
    f.insert(
        "fromJsonArray",
        Function::new(string(), |a| {
            Ok(Value::list(from_json_array(str_arg(&a[0]))))
        }),
    );
    f.insert(
        "toToml",
        Function::new(any(), |a| {
            Ok(Value::string(match super::toml::encode(&a[0]) {
                Ok(s) | Err(s) => s,
            }))
        }),
    );
    f.insert(
        "fromToml",
        Function::new(string(), |a| {
            Ok(Value::Map(super::toml::decode(str_arg(&a[0]))))
        }),
    );
}

/// Helm's `toYaml` without the error swallowing: `sigs.k8s.io/yaml.Marshal`, final newline
/// trimmed.
pub(crate) fn to_yaml(v: &Value) -> Result<String, String> {
    let y = value_to_yaml(v).map_err(|e| format!("error marshaling into JSON: {}", e.0))?;
    flotilla_yaml::sigs::helm_to_yaml_owned(y).map_err(|e| e.to_string())
}

/// Helm 4's `toYamlPretty` without the error swallowing: a go-yaml v3 encoder with
/// `SetIndent(2)` over the Go value, final newline trimmed.
pub(crate) fn to_yaml_pretty(v: &Value) -> Result<String, String> {
    let y = value_to_go_yaml(v).map_err(|e| e.0)?;
    flotilla_yaml::helm::must_to_yaml_pretty(&y).map_err(|e| e.to_string())
}

/// A decoded YAML value (`sigs.k8s.io/yaml` output: string keys, float64 numbers) as a
/// template value.
pub(crate) fn yaml_to_value(v: &flotilla_yaml::Value) -> Value {
    use flotilla_yaml::Value as Y;
    match v {
        Y::Null => Value::Nil,
        Y::Bool(b) => Value::Bool(*b),
        Y::Int(i) => Value::Float(*i as f64),
        Y::Uint(u) => Value::Float(*u as f64),
        Y::Float(f) => Value::Float(*f),
        Y::String(s) => Value::string(s),
        Y::Bytes(b) => Value::string(String::from_utf8_lossy(b)),
        Y::Seq(items) => Value::list(items.iter().map(yaml_to_value).collect()),
        Y::Map(m) => Value::Map(yaml_mapping_to_map(m)),
    }
}

fn yaml_mapping_to_map(m: &flotilla_yaml::Mapping) -> Map {
    let out = Map::new();
    {
        let mut w = out.write();
        for (k, v) in m.iter() {
            let key = match k {
                flotilla_yaml::Value::String(s) => s.clone(),
                other => flotilla_gotmpl::gofmt::sprint_value(&yaml_to_value(other)),
            };
            w.insert(key, yaml_to_value(v));
        }
    }
    out
}

fn error_map(msg: String) -> Map {
    let m = Map::new();
    m.insert("Error", Value::string(msg));
    m
}

fn from_yaml(s: &str) -> Map {
    match flotilla_yaml::sigs::unmarshal_map(s) {
        Ok(m) => yaml_mapping_to_map(&m),
        Err(e) => error_map(e.to_string()),
    }
}

fn from_yaml_array(s: &str) -> Vec<Value> {
    match flotilla_yaml::sigs::unmarshal_seq(s) {
        Ok(items) => items.iter().map(yaml_to_value).collect(),
        Err(e) => vec![Value::string(e.to_string())],
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::List(_) => "array",
        Value::Map(_) => "object",
        Value::String(_) => "string",
        Value::Bool(_) => "bool",
        _ => "number",
    }
}

fn from_json(s: &str) -> Map {
    match go_json_decode(s) {
        Ok(Value::Map(m)) => m,
        Ok(Value::Nil) => Map::new(),
        Ok(other) => error_map(format!(
            "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
            json_kind(&other)
        )),
        Err(e) => error_map(e),
    }
}

fn from_json_array(s: &str) -> Vec<Value> {
    match go_json_decode(s) {
        Ok(Value::List(l)) => l.to_vec(),
        Ok(Value::Nil) => Vec::new(),
        Ok(other) => vec![Value::string(format!(
            "json: cannot unmarshal {} into Go value of type []interface {{}}",
            json_kind(&other)
        ))],
        Err(e) => vec![Value::string(e)],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_gotmpl::{ExecOptions, TemplateSet};

    fn render(src: &str, data: serde_json::Value) -> Result<String, flotilla_gotmpl::Error> {
        let funcs = helm_funcs(&FuncOptions::default());
        let mut set = TemplateSet::new("gotpl");
        set.parse("t", src, &funcs)?;
        set.execute(
            "t",
            &super::super::convert::json_to_value(&data),
            &funcs,
            &ExecOptions::helm(),
        )
    }

    #[test]
    fn to_yaml_prints_sorted_block_yaml_without_final_newline() {
        let out = render("{{ toYaml . }}", serde_json::json!({"b": [1, 2], "a": "x"}));
        assert_eq!(out.expect("renders"), "a: x\nb:\n- 1\n- 2");
    }

    #[test]
    fn from_yaml_errors_are_values() {
        let out = render(r#"{{ (fromYaml "a: [") | toJson }}"#, serde_json::json!({}));
        assert!(
            out.expect("renders")
                .starts_with(r#"{"Error":"error converting YAML to JSON"#)
        );
        let out = render(r#"{{ fromJson "[1]" | toJson }}"#, serde_json::json!({}));
        assert_eq!(
            out.expect("renders"),
            r#"{"Error":"json: cannot unmarshal array into Go value of type map[string]interface {}"}"#
        );
    }

    #[test]
    fn required_and_fail_wrap_their_message() {
        let err = render(r#"{{ required "need x" .x }}"#, serde_json::json!({})).unwrap_err();
        assert!(
            err.to_string()
                .ends_with("HELM_ERR_STARTneed xHELM_ERR_END"),
            "{err}"
        );
        let ok = render(
            r#"{{ required "need x" .x }}"#,
            serde_json::json!({"x": false}),
        );
        assert_eq!(ok.expect("false passes"), "false");
    }

    #[test]
    fn include_and_tpl_see_shared_definitions() {
        let out = render(
            r#"{{ define "n" }}[{{ . }}]{{ end }}{{ include "n" "a" }}{{ tpl "{{ define \"m\" }}<{{ . }}>{{ end }}{{ include \"m\" .x }}{{ include \"n\" .x }}" . }}"#,
            serde_json::json!({"x": "b"}),
        );
        assert_eq!(out.expect("renders"), "[a]<b>[b]");
    }

    #[test]
    fn include_recursion_is_bounded() {
        let out = render(
            r#"{{ define "r" }}{{ include "r" . }}{{ end }}{{ include "r" . }}"#,
            serde_json::json!({}),
        );
        let err = out.unwrap_err().to_string();
        assert!(
            err.contains("nested reference name: r")
                || err.contains("exceeded maximum template depth"),
            "{err}"
        );
    }
}
