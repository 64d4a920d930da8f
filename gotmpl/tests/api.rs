//! The public API: the function registry and its Go-style checks, the call context used by
//! `include`/`tpl`-like functions, objects with fields and methods, `missingkey` modes and
//! template set semantics.

use std::collections::BTreeMap;
use std::sync::Arc;

use flotilla_gotmpl::{
    ArgType, Error, ExecOptions, FuncError, FuncMap, Function, GoKind, Map, MissingKey, Object,
    Signature, TemplateSet, Value,
};

fn data() -> Value {
    Value::from_json(&serde_json::json!({
        "n": 2, "s": "x", "m": {"k": "v"}, "list": [1, 2], "nul": null
    }))
}

fn funcs() -> FuncMap {
    let mut f = FuncMap::new();
    f.insert(
        "repeat",
        Function::new(Signature::fixed([ArgType::Int, ArgType::String]), |args| {
            let n = match args[0] {
                Value::Int(n) => n.max(0) as usize,
                _ => 0,
            };
            Ok(Value::string(
                args[1].as_str().unwrap_or_default().repeat(n),
            ))
        }),
    );
    f.insert(
        "cat",
        Function::new(Signature::variadic([], ArgType::Any), |args| {
            let parts: Vec<String> = args
                .iter()
                .filter(|a| !a.is_nil())
                .map(|a| a.to_string())
                .collect();
            Ok(Value::string(parts.join(" ")))
        }),
    );
    f.insert(
        "half",
        Function::new(Signature::fixed([ArgType::Float64]), |args| match args[0] {
            Value::Float(x) => Ok(Value::Float(x / 2.0)),
            _ => Err(FuncError::new("not a float")),
        }),
    );
    f.insert(
        "fail",
        Function::new(Signature::fixed([ArgType::String]), |args| {
            Err(FuncError::new(args[0].as_str().unwrap_or_default()))
        }),
    );
    f.insert(
        "nothing",
        Function::new(Signature::fixed([]), |_| Ok(Value::Nil)),
    );
    f.insert(
        "set",
        Function::new(
            Signature::fixed([ArgType::Map, ArgType::String, ArgType::Any]),
            |args| {
                let Value::Map(m) = &args[0] else {
                    return Err(FuncError::new("nil map"));
                };
                m.insert(args[1].as_str().unwrap_or_default(), args[2].clone());
                Ok(args[0].clone())
            },
        ),
    );
    f.insert(
        "include",
        Function::with_ctx(
            Signature::fixed([ArgType::String, ArgType::Any]),
            |ctx, args| {
                let name = args[0].as_str().unwrap_or_default().to_string();
                ctx.execute_template(&name, args[1].clone())
                    .map(Value::from)
                    .map_err(FuncError::from)
            },
        ),
    );
    f.insert(
        "tpl",
        Function::with_ctx(
            Signature::fixed([ArgType::String, ArgType::Any]),
            |ctx, args| {
                let text = args[0].as_str().unwrap_or_default();
                let mut clone = ctx.templates().clone();
                let name = clone.name().to_string();
                clone
                    .parse(&name, text, ctx.funcs())
                    .map_err(FuncError::from)?;
                ctx.execute_template_in(&clone, &name, args[1].clone())
                    .map(Value::from)
                    .map_err(FuncError::from)
            },
        ),
    );
    f
}

fn render_with(src: &str, funcs: &FuncMap, opts: &ExecOptions) -> Result<String, String> {
    let mut set = TemplateSet::new("gotpl");
    set.parse("t", src, funcs).map_err(|e| e.to_string())?;
    set.execute("t", &data(), funcs, opts)
        .map_err(|e| e.to_string())
}

fn render(src: &str) -> Result<String, String> {
    render_with(src, &funcs(), &ExecOptions::helm())
}

#[test]
fn typed_parameters_accept_matching_values_and_literals() {
    assert_eq!(
        render(r#"{{ repeat 2 "ab" }}|{{ "x" | repeat 3 }}|{{ half 3 }}|{{ half 1.5 }}"#)
            .as_deref(),
        Ok("abab|xxx|1.5|0.75")
    );
}

#[test]
fn wrong_arity_gives_gos_message() {
    assert_eq!(
        render("{{ repeat 1 }}").unwrap_err(),
        r#"template: t:1:3: executing "t" at <repeat>: wrong number of args for repeat: want 2 got 1"#
    );
    assert_eq!(
        render("{{ nothing 1 }}").unwrap_err(),
        r#"template: t:1:3: executing "t" at <nothing>: wrong number of args for nothing: want 0 got 1"#
    );
}

#[test]
fn float64_values_are_rejected_by_int_parameters() {
    assert_eq!(
        render(r#"{{ repeat .n "x" }}"#).unwrap_err(),
        r#"template: t:1:10: executing "t" at <.n>: wrong type for value; expected int; got float64"#
    );
}

#[test]
fn literal_constants_are_typed_by_the_parameter() {
    assert_eq!(
        render(r#"{{ repeat 2.5 "x" }}"#).unwrap_err(),
        r#"template: t:1:10: executing "t" at <2.5>: expected integer; found 2.5"#
    );
    assert_eq!(
        render(r#"{{ repeat 2 3 }}"#).unwrap_err(),
        r#"template: t:1:12: executing "t" at <3>: expected string; found 3"#
    );
    assert_eq!(
        render(r#"{{ repeat nil "x" }}"#).unwrap_err(),
        r#"template: t:1:10: executing "t" at <nil>: cannot assign nil to int"#
    );
    assert_eq!(
        render(r#"{{ half "x" }}"#).unwrap_err(),
        r#"template: t:1:8: executing "t" at <"x">: expected float; found "x""#
    );
}

#[test]
fn missing_values_passed_to_typed_parameters_are_interface_typed() {
    assert_eq!(
        render(r#"{{ repeat 1 .missing }}"#).unwrap_err(),
        r#"template: t:1:12: executing "t" at <.missing>: wrong type for value; expected string; got interface {}"#
    );
    assert_eq!(
        render(r#"{{ cat .missing "a" nil 1 }}"#).as_deref(),
        Ok("a 1")
    );
}

#[test]
fn function_errors_are_wrapped_with_error_calling() {
    assert_eq!(
        render(r#"{{ fail "boom" }}"#).unwrap_err(),
        r#"template: t:1:3: executing "t" at <fail "boom">: error calling fail: boom"#
    );
}

#[test]
fn a_nil_function_result_prints_no_value() {
    assert_eq!(render("{{ nothing }}").as_deref(), Ok("<no value>"));
}

#[test]
fn registered_functions_shadow_builtins() {
    let mut f = funcs();
    f.insert(
        "slice",
        Function::new(Signature::variadic([ArgType::Any], ArgType::Any), |_| {
            Ok(Value::string("sprig"))
        }),
    );
    f.insert(
        "len",
        Function::new(Signature::fixed([ArgType::Any]), |_| Ok(Value::Int(42))),
    );
    assert_eq!(
        render_with(
            r#"{{ slice "abc" 1 }} {{ len "abc" }}"#,
            &f,
            &ExecOptions::helm()
        )
        .as_deref(),
        Ok("sprig 42")
    );
    assert_eq!(
        render(r#"{{ slice "abc" 1 }} {{ slice .list 1 }} {{ len "abc" }}"#).as_deref(),
        Ok("bc [2] 3")
    );
}

#[test]
fn a_function_named_break_turns_the_keyword_into_a_call() {
    let mut f = funcs();
    f.insert(
        "break",
        Function::new(Signature::fixed([]), |_| Ok(Value::string("called"))),
    );
    assert_eq!(
        render_with("{{ break }}", &f, &ExecOptions::helm()).as_deref(),
        Ok("called")
    );
}

#[test]
fn functions_mutate_shared_maps_in_place() {
    assert_eq!(
        render(r#"{{ $_ := set .m "new" 1 }}{{ .m.new }} {{ .m }}"#).as_deref(),
        Ok("1 map[k:v new:1]")
    );
}

#[test]
fn include_executes_named_templates_with_fresh_variables() {
    let src = r#"{{ define "inner" }}[{{ . }}|{{ $ }}]{{ end }}{{ $x := 1 }}{{ include "inner" .s }}{{ include "inner" .s | len }}"#;
    assert_eq!(render(src).as_deref(), Ok("[x|x]5"));
    assert_eq!(
        render(r#"{{ include "nope" . }}"#).unwrap_err(),
        r#"template: t:1:3: executing "t" at <include "nope" .>: error calling include: template: no template "nope" associated with template "gotpl""#
    );
}

#[test]
fn errors_inside_included_templates_are_chained() {
    let src = "{{ define \"inner\" }}\n  {{ .k.z }}{{ end }}{{ include \"inner\" .m }}";
    assert_eq!(
        render(src).unwrap_err(),
        r#"template: t:2:24: executing "t" at <include "inner" .m>: error calling include: template: t:2:7: executing "inner" at <.k.z>: can't evaluate field z in type interface {}"#
    );
}

#[test]
fn tpl_parses_into_a_clone_so_definitions_do_not_leak() {
    let src = r#"{{ tpl "{{ define \"d\" }}D{{ end }}{{ template \"d\" }}{{ .s }}" . }}|{{ tpl "{{ include \"outer\" . }}" .s }}{{ define "outer" }}O{{ . }}{{ end }}"#;
    assert_eq!(render(src).as_deref(), Ok("Dx|Ox"));
    let leak = r#"{{ tpl "{{ define \"d\" }}D{{ end }}" . }}{{ template "d" }}"#;
    assert!(
        render(leak)
            .unwrap_err()
            .contains(r#"template "d" not defined"#)
    );
}

#[derive(Debug)]
struct Files {
    files: BTreeMap<String, String>,
}

impl Object for Files {
    fn type_name(&self) -> String {
        "engine.files".to_string()
    }
    fn kind(&self) -> GoKind {
        GoKind::Map
    }
    fn method(&self, name: &str) -> Option<Signature> {
        match name {
            "Get" => Some(Signature::fixed([ArgType::String])),
            "Glob" => Some(Signature::fixed([ArgType::String])),
            _ => None,
        }
    }
    fn call_method(&self, name: &str, args: &[Value]) -> Result<Value, FuncError> {
        let arg = args[0].as_str().unwrap_or_default();
        match name {
            "Get" => Ok(Value::string(
                self.files.get(arg).cloned().unwrap_or_default(),
            )),
            _ => Ok(Value::Object(Arc::new(Files {
                files: self
                    .files
                    .iter()
                    .filter(|(k, _)| k.starts_with(arg))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            }))),
        }
    }
    fn map_entries(&self) -> Option<Vec<(String, Value)>> {
        Some(
            self.files
                .iter()
                .map(|(k, v)| (k.clone(), Value::Bytes(Arc::from(v.as_bytes()))))
                .collect(),
        )
    }
    fn display(&self) -> String {
        "files".to_string()
    }
}

#[derive(Debug)]
struct Version;

impl Object for Version {
    fn type_name(&self) -> String {
        "*semver.Version".to_string()
    }
    fn field(&self, name: &str) -> Option<Value> {
        (name == "Major").then_some(Value::Uint64(1))
    }
    fn display(&self) -> String {
        "1.2.3".to_string()
    }
}

#[derive(Debug)]
struct VersionSet(Vec<&'static str>);

impl Object for VersionSet {
    fn type_name(&self) -> String {
        "common.VersionSet".to_string()
    }
    fn kind(&self) -> GoKind {
        GoKind::Slice
    }
    fn method(&self, name: &str) -> Option<Signature> {
        (name == "Has").then(|| Signature::fixed([ArgType::String]))
    }
    fn call_method(&self, _: &str, args: &[Value]) -> Result<Value, FuncError> {
        Ok(Value::Bool(
            self.0.iter().any(|v| Some(*v) == args[0].as_str()),
        ))
    }
    fn list_items(&self) -> Option<Vec<Value>> {
        Some(self.0.iter().map(Value::string).collect())
    }
    fn display(&self) -> String {
        format!("{:?}", self.0)
    }
}

fn object_root() -> Value {
    let files = Files {
        files: [("a.txt", "A"), ("conf/b.yaml", "B"), ("conf/c.yaml", "C")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    };
    let root = Map::new();
    root.insert("Files", Value::Object(Arc::new(files)));
    root.insert("V", Value::Object(Arc::new(Version)));
    root.insert(
        "APIVersions",
        Value::Object(Arc::new(VersionSet(vec!["v1", "apps/v1"]))),
    );
    Value::Map(root)
}

fn render_objects(src: &str) -> Result<String, String> {
    let funcs = funcs();
    let mut set = TemplateSet::new("gotpl");
    set.parse("t", src, &funcs).map_err(|e| e.to_string())?;
    set.execute("t", &object_root(), &funcs, &ExecOptions::helm())
        .map_err(|e| e.to_string())
}

#[test]
fn object_methods_take_arguments_and_chain() {
    let src = r#"{{ .Files.Get "a.txt" }}|{{ range $k, $v := .Files.Glob "conf/" }}{{ $k }}={{ printf "%s" $v }};{{ end }}|{{ len .Files }}|{{ index .Files "a.txt" }}"#;
    assert_eq!(
        render_objects(src).as_deref(),
        Ok("A|conf/b.yaml=B;conf/c.yaml=C;|3|[65]")
    );
}

#[test]
fn slice_objects_range_index_and_print_like_slices() {
    let src = r#"{{ .APIVersions.Has "apps/v1" }} {{ .APIVersions.Has "x" }} {{ len .APIVersions }} {{ index .APIVersions 1 }} {{ .APIVersions }} {{ range $i, $v := .APIVersions }}{{ $i }}={{ $v }};{{ end }}"#;
    assert_eq!(
        render_objects(src).as_deref(),
        Ok("true false 2 apps/v1 [v1 apps/v1] 0=v1;1=apps/v1;")
    );
}

#[test]
fn object_parameters_accept_only_their_go_type() {
    let mut f = funcs();
    f.insert(
        "major",
        Function::new(
            Signature::fixed([ArgType::Object("*semver.Version")]),
            |args| match &args[0] {
                Value::Object(o) => Ok(o.field("Major").unwrap_or(Value::Nil)),
                _ => Ok(Value::string("nil version")),
            },
        ),
    );
    let mut set = TemplateSet::new("gotpl");
    set.parse("t", "{{ major .V }} {{ major nil }}", &f)
        .expect("parses");
    assert_eq!(
        set.execute("t", &object_root(), &f, &ExecOptions::helm())
            .as_deref(),
        Ok("1 nil version")
    );
    set.parse("u", "{{ major .Files }}", &f).expect("parses");
    assert_eq!(
        set.execute("u", &object_root(), &f, &ExecOptions::helm())
            .unwrap_err()
            .to_string(),
        r#"template: u:1:9: executing "u" at <.Files>: wrong type for value; expected *semver.Version; got engine.files"#
    );
}

#[test]
fn named_map_parameters_accept_unnamed_maps_and_name_their_type_in_errors() {
    let mut f = funcs();
    f.insert(
        "keys",
        Function::new(
            Signature::fixed([ArgType::NamedMap("common.Values")]),
            |args| {
                Ok(Value::string(
                    args[0]
                        .as_map()
                        .map(|m| m.keys().join(","))
                        .unwrap_or_default(),
                ))
            },
        ),
    );
    assert_eq!(
        render_with("{{ keys .m }}|{{ keys nil }}", &f, &ExecOptions::helm()).as_deref(),
        Ok("k|")
    );
    assert_eq!(
        render_with("{{ keys .s }}", &f, &ExecOptions::helm()).unwrap_err(),
        r#"template: t:1:8: executing "t" at <.s>: wrong type for value; expected common.Values; got string"#
    );
}

#[test]
fn named_map_types_have_methods_that_win_over_keys() {
    let mut f = funcs();
    f.insert_method(
        "common.Values",
        "Table",
        Function::new(Signature::fixed([ArgType::String]), |args| {
            let key = args[1].as_str().unwrap_or_default();
            Ok(args[0]
                .as_map()
                .and_then(|m| m.get(key))
                .unwrap_or(Value::Nil))
        }),
    );
    f.insert_method(
        "common.Values",
        "Keys",
        Function::new(Signature::fixed([]), |args| {
            Ok(Value::string(
                args[0]
                    .as_map()
                    .map(|m| m.keys().join(","))
                    .unwrap_or_default(),
            ))
        }),
    );
    let values = Map::new().with_type(flotilla_gotmpl::MapType::Named(Arc::from("common.Values")));
    values.insert("m", Value::from_json(&serde_json::json!({"b": 2})));
    values.insert("Keys", Value::string("shadowed by the method"));
    let root = Map::new();
    root.insert("Values", Value::Map(values));
    let mut set = TemplateSet::new("gotpl");
    set.parse(
        "t",
        r#"{{ (.Values.Table "m").b }} {{ .Values.Keys }} {{ .Values.m.b }}"#,
        &f,
    )
    .expect("parses");
    assert_eq!(
        set.execute("t", &Value::Map(root.clone()), &f, &ExecOptions::helm())
            .as_deref(),
        Ok("2 Keys,m 2")
    );
    set.parse("u", "{{ .Values.Table }}", &f).expect("parses");
    assert_eq!(
        set.execute("u", &Value::Map(root), &f, &ExecOptions::helm())
            .unwrap_err()
            .to_string(),
        r#"template: u:1:10: executing "u" at <.Values.Table>: wrong number of args for Table: want 1 got 0"#
    );
}

#[test]
fn object_methods_are_checked_like_functions() {
    assert_eq!(
        render_objects("{{ .Files.Get }}").unwrap_err(),
        r#"template: t:1:9: executing "t" at <.Files.Get>: wrong number of args for Get: want 1 got 0"#
    );
}

#[test]
fn object_fields_and_string_forms() {
    assert_eq!(
        render_objects("{{ .V.Major }} {{ .V }} {{ printf \"%T\" .V }}").as_deref(),
        Ok("1 1.2.3 *semver.Version")
    );
    assert_eq!(
        render_objects("{{ .V.Major 1 }}").unwrap_err(),
        r#"template: t:1:5: executing "t" at <.V.Major>: Major has arguments but cannot be invoked as function"#
    );
    assert_eq!(
        render_objects("{{ .V.Minor }}").unwrap_err(),
        r#"template: t:1:5: executing "t" at <.V.Minor>: can't evaluate field Minor in type interface {}"#
    );
    assert_eq!(
        render_objects("{{ $v := .V }}{{ $v.Minor }}").unwrap_err(),
        r#"template: t:1:19: executing "t" at <$v.Minor>: can't evaluate field Minor in type *semver.Version"#
    );
}

#[test]
fn missingkey_default_gives_no_value_even_through_chains() {
    let opts = ExecOptions::default();
    assert_eq!(
        render_with("{{ .a.b.c }}|{{ .a }}", &funcs(), &opts).as_deref(),
        Ok("<no value>|<no value>")
    );
}

#[test]
fn missingkey_zero_fails_on_fields_of_a_missing_value() {
    assert_eq!(
        render("{{ .a.b }}").unwrap_err(),
        r#"template: t:1:5: executing "t" at <.a.b>: nil pointer evaluating interface {}.b"#
    );
}

#[test]
fn missingkey_error_reports_the_missing_key() {
    let opts = ExecOptions {
        missing_key: MissingKey::Error,
        ..ExecOptions::default()
    };
    assert_eq!(
        render_with("{{ .m.nope }}", &funcs(), &opts).unwrap_err(),
        r#"template: t:1:5: executing "t" at <.m.nope>: map has no entry for key "nope""#
    );
}

#[test]
fn later_definitions_replace_earlier_ones_unless_empty() {
    let f = funcs();
    let mut set = TemplateSet::new("gotpl");
    set.parse("b.tpl", r#"{{ define "x" }}from b{{ end }}"#, &f)
        .expect("parses");
    set.parse("a.tpl", r#"{{ define "x" }}from a{{ end }}"#, &f)
        .expect("parses");
    set.parse("c.tpl", "{{ define \"x\" }} {{/* empty */}}\n{{ end }}", &f)
        .expect("parses");
    set.parse("main", r#"{{ template "x" }}"#, &f)
        .expect("parses");
    assert_eq!(
        set.execute("main", &Value::Nil, &f, &ExecOptions::helm())
            .as_deref(),
        Ok("from a")
    );
    assert_eq!(set.names(), ["a.tpl", "b.tpl", "c.tpl", "main", "x"]);
}

#[test]
fn helm_parse_order_puts_subcharts_first_and_reverses_names() {
    let mut names = vec![
        "fx/templates/_a.tpl",
        "fx/templates/out.yaml",
        "fx/charts/sub/templates/_h.tpl",
        "fx/templates/_b.tpl",
        "fx/charts/sub/charts/deep/templates/x.yaml",
    ];
    flotilla_gotmpl::sort_in_helm_parse_order(&mut names);
    assert_eq!(
        names,
        [
            "fx/charts/sub/charts/deep/templates/x.yaml",
            "fx/charts/sub/templates/_h.tpl",
            "fx/templates/out.yaml",
            "fx/templates/_b.tpl",
            "fx/templates/_a.tpl",
        ]
    );
}

/// `fixtures/set-chart` redefines templates across files and a subchart; parsed in Helm's
/// order, the winners must be the ones helm picked (`fixtures/golden/set-chart.yaml`).
#[test]
fn redefinitions_across_files_resolve_like_helm() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/set-chart");
    let files = [
        "templates/_a.tpl",
        "templates/_b.tpl",
        "templates/_empty.tpl",
        "templates/out.yaml",
        "charts/sub/templates/_h.tpl",
    ];
    let mut names: Vec<String> = files.iter().map(|f| format!("fx/{f}")).collect();
    flotilla_gotmpl::sort_in_helm_parse_order(&mut names);
    let f = funcs();
    let mut set = TemplateSet::new("gotpl");
    for name in &names {
        let text = std::fs::read_to_string(root.join(&name["fx/".len()..])).expect("fixture");
        set.parse(name, &text, &f).expect("parses");
    }
    let out = set
        .execute(
            "fx/templates/out.yaml",
            &Value::Nil,
            &f,
            &ExecOptions::helm(),
        )
        .expect("renders");
    let golden = std::fs::read_to_string(root.join("../golden/set-chart.yaml")).expect("golden");
    let want = golden
        .split_once("# Source: fx/templates/out.yaml\n")
        .map(|(_, rest)| rest)
        .expect("source line");
    assert_eq!(out, want);
}

#[test]
fn a_failed_parse_leaves_the_set_unchanged() {
    let f = funcs();
    let mut set = TemplateSet::new("gotpl");
    set.parse("ok", r#"{{ define "x" }}1{{ end }}"#, &f)
        .expect("parses");
    let err = set
        .parse("bad", r#"{{ define "x" }}2{{ end }}{{ nope }}"#, &f)
        .unwrap_err();
    assert!(
        matches!(err, Error::Parse(ref m) if m == r#"template: bad:1: function "nope" not defined"#),
        "{err}"
    );
    assert!(!set.contains("bad"));
    assert_eq!(
        set.execute("x", &Value::Nil, &f, &ExecOptions::helm())
            .as_deref(),
        Ok("1")
    );
}

#[test]
fn errors_in_defined_templates_name_the_template_and_its_file() {
    let f = funcs();
    let mut set = TemplateSet::new("gotpl");
    set.parse(
        "chart/templates/_helpers.tpl",
        "{{ define \"h\" }}\n{{ .x.y }}{{ end }}",
        &f,
    )
    .expect("parses");
    set.parse("chart/templates/cm.yaml", "{{ template \"h\" .m }}", &f)
        .expect("parses");
    assert_eq!(
        set.execute("chart/templates/cm.yaml", &data(), &f, &ExecOptions::helm())
            .unwrap_err()
            .to_string(),
        r#"template: chart/templates/_helpers.tpl:2:5: executing "h" at <.x.y>: nil pointer evaluating interface {}.y"#
    );
}

#[test]
fn executing_an_unknown_template_names_the_set() {
    let set = TemplateSet::new("gotpl");
    assert_eq!(
        set.execute("x", &Value::Nil, &funcs(), &ExecOptions::helm())
            .unwrap_err()
            .to_string(),
        r#"template: no template "x" associated with template "gotpl""#
    );
}

#[test]
fn sets_and_function_maps_can_be_shared_with_worker_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<TemplateSet>();
    assert_send_sync::<FuncMap>();
    assert_send_sync::<ExecOptions>();
    let f = Arc::new(funcs());
    let mut set = TemplateSet::new("gotpl");
    set.parse("t", "{{ .s }}", &f).expect("parses");
    let set = Arc::new(set);
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let (set, f) = (Arc::clone(&set), Arc::clone(&f));
            std::thread::spawn(move || set.execute("t", &data(), &f, &ExecOptions::helm()))
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().expect("thread").as_deref(), Ok("x"));
    }
}

#[test]
fn json_round_trips_through_values() {
    let json = serde_json::json!({"a": [1.5, true, null, "s"], "b": {"c": 2}});
    let v = Value::from_json(&json);
    assert_eq!(
        v.to_json().expect("encodable"),
        serde_json::json!({"a": [1.5, true, null, "s"], "b": {"c": 2.0}})
    );
}

#[test]
fn functions_keep_per_execution_state_across_nested_calls() {
    #[derive(Default)]
    struct Depth {
        current: usize,
        max: usize,
    }
    let mut f = FuncMap::new();
    f.insert(
        "include",
        Function::with_ctx(
            Signature::fixed([ArgType::String, ArgType::Any]),
            |ctx, args| {
                let name = args[0].as_str().unwrap_or_default().to_string();
                {
                    let d = ctx.state::<Depth>();
                    d.current += 1;
                    d.max = d.max.max(d.current);
                    if d.current > 3 {
                        return Err(FuncError::new(format!(
                            "rendering template has a nested reference name: {name}"
                        )));
                    }
                }
                let r = ctx.execute_template(&name, args[1].clone());
                ctx.state::<Depth>().current -= 1;
                r.map(Value::from).map_err(FuncError::from)
            },
        ),
    );
    f.insert(
        "maxdepth",
        Function::with_ctx(Signature::fixed([]), |ctx, _| {
            Ok(Value::Int(ctx.state::<Depth>().max as i64))
        }),
    );
    let mut set = TemplateSet::new("gotpl");
    set.parse("t", r#"{{ define "a" }}{{ include "b" . }}{{ end }}{{ define "b" }}B{{ end }}{{ include "a" . }}{{ include "b" . }}{{ maxdepth }}"#, &f)
        .expect("parses");
    assert_eq!(
        set.execute("t", &Value::Nil, &f, &ExecOptions::helm())
            .as_deref(),
        Ok("BB2")
    );
    set.parse(
        "r",
        r#"{{ define "loop" }}{{ include "loop" . }}{{ end }}{{ include "loop" . }}"#,
        &f,
    )
    .expect("parses");
    let err = set
        .execute("r", &Value::Nil, &f, &ExecOptions::helm())
        .unwrap_err()
        .to_string();
    assert!(
        err.ends_with(
            "error calling include: rendering template has a nested reference name: loop"
        ),
        "{err}"
    );
}

#[test]
fn go_builtin_slice_handles_strings_lists_and_three_indexes() {
    assert_eq!(
        render(r#"{{ slice "abcd" 1 3 }}|{{ slice "abcd" 2 }}|{{ slice .list 1 }}|{{ slice .list 0 1 2 }}|{{ slice .list }}"#).as_deref(),
        Ok("bc|cd|[2]|[1]|[1 2]")
    );
    let err = |src: &str| render(src).unwrap_err();
    assert!(
        err(r#"{{ slice "abc" 0 1 2 }}"#)
            .ends_with("error calling slice: cannot 3-index slice a string")
    );
    assert!(
        err(r#"{{ slice "abc" 2 1 }}"#)
            .ends_with("error calling slice: invalid slice index: 2 > 1")
    );
    assert!(
        err(r#"{{ slice .missing 1 }}"#).ends_with("error calling slice: slice of untyped nil")
    );
    assert!(
        err(r#"{{ slice 3 1 }}"#).ends_with("error calling slice: can't slice item of type int")
    );
    assert!(
        err(r#"{{ slice .list 0 1 1 1 }}"#)
            .ends_with("error calling slice: too many slice indexes: 4")
    );
    assert!(
        err(r#"{{ slice .list 0 5 }}"#).ends_with("error calling slice: index out of range: 5")
    );
}
