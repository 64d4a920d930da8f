//! Resource limits: hostile templates must end in an error, never a stack overflow, a hang or
//! unbounded memory. These tests run on threads with a 2 MiB stack (Rust's default for
//! spawned threads), in debug builds where frames are largest.

use flotilla_gotmpl::{
    ArgType, ExecOptions, FuncError, FuncMap, Function, Signature, TemplateSet, Value,
};

const STACK: usize = 2 << 20;

fn on_small_stack<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    std::thread::Builder::new()
        .stack_size(STACK)
        .spawn(f)
        .expect("spawn")
        .join()
        .expect("no stack overflow")
}

fn include_funcs() -> FuncMap {
    let mut funcs = FuncMap::new();
    funcs.insert(
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
    funcs
}

fn run(src: &str, funcs: FuncMap) -> Result<String, String> {
    let mut set = TemplateSet::new("gotpl");
    set.parse("t", src, &funcs).map_err(|e| e.to_string())?;
    set.execute("t", &Value::Nil, &funcs, &ExecOptions::helm())
        .map_err(|e| e.to_string())
}

#[test]
fn infinite_template_recursion_is_an_error() {
    let err = on_small_stack(|| {
        run(r#"{{define "r"}}{{if true}}{{with 1}}{{range 1}}{{template "r" .}}{{end}}{{end}}{{end}}{{end}}{{template "r" 1}}"#, FuncMap::new())
    })
    .expect_err("recursion must fail");
    assert!(
        err.contains("exceeded maximum template depth (stack budget of 1048576 bytes)"),
        "{err}"
    );
}

#[test]
fn infinite_include_recursion_is_an_error() {
    let err = on_small_stack(|| {
        run(
            r#"{{define "r"}}{{if true}}{{with 1}}{{range 1}}{{ include "r" . | print }}{{end}}{{end}}{{end}}{{end}}{{ include "r" 1 }}"#,
            include_funcs(),
        )
    })
    .expect_err("recursion must fail");
    assert!(
        err.contains("exceeded maximum template depth (stack budget of 1048576 bytes)"),
        "{err}"
    );
}

#[test]
fn deeply_nested_parentheses_inside_recursion_are_an_error() {
    let parens = format!("{}1{}", "(".repeat(90), ")".repeat(90));
    let src = format!(
        r#"{{{{define "r"}}}}{{{{ {parens} }}}}{{{{template "r" .}}}}{{{{end}}}}{{{{template "r" 1}}}}"#
    );
    let err = on_small_stack(move || run(&src, FuncMap::new())).expect_err("must fail");
    assert!(err.contains("exceeded maximum template depth"), "{err}");
}

#[test]
fn deep_control_nesting_is_a_parse_error() {
    let src = "{{if 1}}".repeat(100_000);
    let err = on_small_stack(move || run(&src, FuncMap::new())).expect_err("must fail");
    assert!(err.ends_with("max expression depth exceeded"), "{err}");
}

#[test]
fn a_hundred_nested_controls_execute() {
    let depth = 50;
    let src = format!(
        "{}x{}",
        "{{if 1}}{{with 2}}".repeat(depth),
        "{{end}}{{end}}".repeat(depth)
    );
    let out = on_small_stack(move || run(&src, FuncMap::new())).expect("executes");
    assert_eq!(out, "x");
}

#[test]
fn long_else_if_chains_parse_and_execute() {
    let n = 150;
    let mut src = String::from("{{ if eq 0 1 }}0");
    for i in 1..n {
        src.push_str(&format!("{{{{ else if eq {i} {last} }}}}{i}", last = n - 1));
    }
    src.push_str("{{ end }}");
    let out = on_small_stack(move || run(&src, FuncMap::new()));
    // Either it renders, or it stops at the stack budget: never an overflow.
    match out {
        Ok(out) => assert_eq!(out, (n - 1).to_string()),
        Err(e) => assert!(e.contains("exceeded maximum template depth"), "{e}"),
    }
}

#[test]
fn nesting_at_the_parse_limit_ends_in_an_error_or_output_never_an_overflow() {
    let depth = flotilla_gotmpl::MAX_PARSE_DEPTH - 1;
    let src = format!("{}x{}", "{{if 1}}".repeat(depth), "{{end}}".repeat(depth));
    match on_small_stack(move || run(&src, FuncMap::new())) {
        Ok(out) => assert_eq!(out, "x"),
        Err(e) => assert!(e.contains("depth"), "{e}"),
    }
}

#[test]
fn template_depth_limit_gives_gos_message() {
    let funcs = FuncMap::new();
    let mut set = TemplateSet::new("gotpl");
    set.parse(
        "t",
        r#"{{define "r"}}{{template "r" .}}{{end}}{{template "r" 1}}"#,
        &funcs,
    )
    .expect("parses");
    let opts = ExecOptions {
        max_depth: 50,
        ..ExecOptions::helm()
    };
    let err = set
        .execute("t", &Value::Nil, &funcs, &opts)
        .expect_err("too deep");
    assert_eq!(
        err.to_string(),
        r#"template: t:1:25: executing "r" at <{{template "r" .}}>: exceeded maximum template depth (50)"#
    );
}

#[test]
fn output_is_bounded() {
    let funcs = FuncMap::new();
    let mut set = TemplateSet::new("gotpl");
    set.parse("t", "{{range 1000000}}0123456789{{end}}", &funcs)
        .expect("parses");
    let opts = ExecOptions {
        max_output_bytes: 1000,
        ..ExecOptions::helm()
    };
    let err = set
        .execute("t", &Value::Nil, &funcs, &opts)
        .expect_err("too much output");
    assert!(
        err.to_string()
            .ends_with("output exceeds the limit of 1000 bytes"),
        "{err}"
    );
}

#[test]
fn execution_steps_can_be_bounded() {
    let funcs = FuncMap::new();
    let mut set = TemplateSet::new("gotpl");
    set.parse("t", "{{range 1000000000}}{{end}}", &funcs)
        .expect("parses");
    let opts = ExecOptions {
        max_steps: Some(10_000),
        ..ExecOptions::helm()
    };
    let err = set
        .execute("t", &Value::Nil, &funcs, &opts)
        .expect_err("too many steps");
    assert!(
        err.to_string()
            .contains("exceeded maximum number of execution steps (10000)"),
        "{err}"
    );
}

#[test]
fn printing_a_cyclic_map_terminates() {
    let m = flotilla_gotmpl::Map::new();
    m.insert("self", Value::Map(m.clone()));
    let s = on_small_stack(move || {
        let s = flotilla_gotmpl::gofmt::sprint_value(&Value::Map(m.clone()));
        m.remove("self");
        s
    });
    assert!(s.starts_with("map[self:map[self:"), "{s}");
}
