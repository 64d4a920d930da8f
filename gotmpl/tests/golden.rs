//! Differential tests against goldens produced by the real helm binary
//! (`tests/fixtures/regenerate.sh`). Every `fixtures/ok/<case>.tpl` must render exactly like
//! helm rendered it, and every `fixtures/errors/<case>.tpl` must fail with the error helm
//! printed (converted back from Helm's presentation to Go's error string).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use flotilla_gotmpl::{Error, ExecOptions, FuncMap, MapType, TemplateSet, Value};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The root Helm passes to a chart template: it and `.Values` are `common.Values` (Helm 4).
fn root() -> Value {
    let json: serde_json::Value =
        serde_json::from_str(&read(&fixtures().join("values.json"))).expect("values.json is JSON");
    let values = Value::from_json(&json);
    let values = match values {
        Value::Map(m) => Value::Map(m.with_type(MapType::Named(Arc::from("common.Values")))),
        other => other,
    };
    let root = flotilla_gotmpl::Map::new().with_type(MapType::Named(Arc::from("common.Values")));
    root.insert("Values", values);
    Value::Map(root)
}

fn render(name: &str, text: &str) -> Result<String, Error> {
    let funcs = FuncMap::new();
    let mut set = TemplateSet::new("gotpl");
    set.parse(name, text, &funcs)?;
    set.execute(name, &root(), &funcs, &ExecOptions::helm())
}

fn check_ok(case: &str) {
    let text = read(&fixtures().join(format!("ok/{case}.tpl")));
    let want = read(&fixtures().join(format!("golden/ok/{case}.out")));
    match render("fx/templates/_case.tpl", &text) {
        Ok(got) => assert_eq!(got, want, "case {case}"),
        Err(e) => panic!("case {case}: unexpected error: {e}"),
    }
}

/// Turns Helm's presentation of a template error back into what must hold for Go's error.
fn compare_error(stderr: &str, got: &Error) -> Result<(), String> {
    let helm = stderr.strip_prefix("Error: ").unwrap_or(stderr);
    let helm = helm
        .split("\n\nUse --debug")
        .next()
        .unwrap_or(helm)
        .trim_end();
    let (ours, want) = if let Some(rest) = helm.strip_prefix("parse error at (") {
        // Helm's cleanupParseError keeps the location and the last ": "-separated part.
        let Error::Parse(msg) = got else {
            return Err(format!("expected a parse error, got {got}"));
        };
        let tokens: Vec<&str> = msg.split(": ").collect();
        let ours = format!(
            "{}): {}",
            tokens.get(1).copied().unwrap_or(""),
            tokens.last().copied().unwrap_or("")
        );
        (ours, rest.to_string())
    } else if helm.starts_with("template: ") {
        (got.to_string(), helm.to_string())
    } else {
        // LOC\n  executing "NAME" at <CTX>:\n    MSG
        let mut lines = helm.lines();
        let loc = lines.next().unwrap_or("");
        let exec = lines.next().unwrap_or("").trim().trim_end_matches(':');
        let msg: Vec<&str> = lines.map(str::trim).collect();
        (
            got.to_string(),
            format!("template: {loc}: {exec}: {}", msg.join(" ")),
        )
    };
    // Helm's multi-line form loses trailing spaces of the message.
    if ours.trim_end() == want.trim_end() {
        Ok(())
    } else {
        Err(format!("ours {ours:?}\n  helm {want:?}"))
    }
}

fn check_error(case: &str) {
    let text = read(&fixtures().join(format!("errors/{case}.tpl")));
    let stderr = read(&fixtures().join(format!("golden/errors/{case}.err")));
    match render("fx/templates/case.yaml", &text) {
        Ok(out) => panic!("case {case}: expected an error, rendered {out:?}"),
        Err(e) => {
            if let Err(diff) = compare_error(&stderr, &e) {
                panic!("case {case}: {diff}");
            }
        }
    }
}

macro_rules! ok_cases {
    ($($name:ident),* $(,)?) => {
        mod renders_like_helm { $( #[test] fn $name() { super::check_ok(stringify!($name)); } )* }
        const OK_CASES: &[&str] = &[$(stringify!($name)),*];
    };
}

macro_rules! error_cases {
    ($($name:ident),* $(,)?) => {
        mod fails_like_helm { $( #[test] fn $name() { super::check_error(stringify!($name)); } )* }
        const ERROR_CASES: &[&str] = &[$(stringify!($name)),*];
    };
}

ok_cases!(
    actions_may_span_lines,
    and_or_short_circuit_and_return_the_deciding_value,
    break_and_continue,
    break_inside_nested_with_and_if,
    bytes_of_strings_are_uint8,
    chained_index_results,
    comments_produce_nothing,
    comparisons,
    crlf_text_and_trim_markers,
    deep_field_chains,
    define_template_and_block,
    defines_between_text,
    dollar_is_the_root_inside_range,
    else_branches_keep_control_variables,
    else_branches_see_the_outer_dot,
    eq_with_many_arguments,
    float_printing_uses_shortest_g_form,
    html_js_urlquery_escape,
    if_else_chains,
    index_with_variables_and_nested_lists,
    js_html_urlquery_of_non_strings,
    len_and_index,
    len_of_various_values,
    literals,
    missing_values_print_no_value,
    nil_list_elements_print_no_value,
    not_and_or_in_pipelines,
    number_literal_syntaxes,
    numbers_compare_within_their_kind,
    parenthesized_pipelines_and_chains,
    pipelines_pass_the_previous_value_last,
    print_and_println,
    print_spacing_with_nil_and_numbers,
    printf_argument_indexes_and_star_width,
    printf_error_forms,
    printf_float_verbs,
    printf_integer_and_string_verbs,
    printf_quoting_and_percent,
    printf_type_and_bool_verbs,
    printf_v_variants,
    printf_width_unicode_and_padding,
    quoting_special_unicode,
    range_assign_updates_outer_variables,
    range_else_runs_for_empty_and_missing,
    range_over_int,
    range_over_lists,
    range_over_map_iterates_in_sorted_key_order,
    range_over_nested_maps,
    range_variables_shadow_outer_ones,
    string_escapes_in_literals,
    template_calls_with_variables_and_parens,
    template_invocations_see_only_their_data,
    template_pipeline_declarations_persist,
    text_and_trim_markers,
    trim_markers_accept_any_ascii_space,
    unicode_text,
    values_have_helms_named_map_type,
    values_print_in_go_notation,
    variables_are_scoped_to_their_block,
    variables_in_nested_ranges,
    whitespace_trim_around_control,
    with_and_else_with,
    with_and_if_declarations,
);

error_cases!(
    and_without_arguments,
    argument_to_non_function,
    assign_to_undeclared_variable,
    bad_character_after_field,
    bad_number_syntax,
    binary_literal_with_bad_digit,
    break_outside_range,
    break_with_argument,
    call_of_nil,
    call_of_non_function,
    cant_evaluate_field_of_float,
    comment_ends_before_delimiter,
    comment_newlines_count_toward_line_numbers,
    define_inside_if,
    dot_given_an_argument,
    doubled_underscore_in_number,
    else_outside_control,
    eq_float_with_int_is_incompatible,
    eq_map_and_list_are_non_comparable,
    eq_on_maps_is_non_comparable,
    eq_string_with_bool,
    eq_with_one_argument,
    error_after_crlf_lines,
    error_in_and_argument,
    error_in_else_if_condition,
    error_inside_template_names_the_inner_template,
    error_line_of_later_action,
    exec_error_column_after_multibyte_text,
    exec_error_line_and_column_in_multiline_template,
    expected_colon_equals,
    expected_end_found_else,
    field_of_int_variable,
    field_of_list,
    field_of_parenthesized_int,
    field_of_parenthesized_nil,
    field_of_string_value,
    float_literal_out_of_range,
    function_not_defined,
    function_not_defined_in_multiline_action,
    hex_float_without_exponent,
    index_float,
    index_into_float_element,
    index_list_with_string,
    index_map_with_int,
    index_of_nil_pointer,
    index_of_untyped_nil,
    index_out_of_range,
    index_past_the_end,
    index_with_nil_index,
    integer_overflow_literal,
    integer_overflows_int,
    len_of_missing_value,
    len_with_no_arguments,
    lone_minus_is_not_a_number,
    lt_int_with_string_is_incompatible,
    lt_on_bools,
    lt_on_map,
    lt_on_missing_value,
    malformed_character_constant,
    map_key_with_arguments,
    missing_value_for_if,
    multiline_bad_number_after_newlines,
    multiline_break_outside_range,
    multiline_expected_end_found_else,
    multiline_function_not_defined_inside_action,
    multiline_non_executable_stage,
    multiline_unclosed_paren,
    multiline_undefined_variable,
    multiline_unexpected_brace,
    multiline_unexpected_end_after_range,
    multiline_unexpected_eof_in_define,
    multiple_definition_in_one_file,
    nil_data_chain_through_variable_in_range,
    nil_is_not_a_command,
    nil_pointer_evaluating_missing_map,
    non_executable_pipeline_stage,
    not_with_two_arguments,
    not_without_arguments,
    parenthesized_pipeline_given_an_argument,
    parse_error_line_after_multiline_text_and_trim,
    parse_error_line_in_multiline_template,
    printf_format_must_be_a_string,
    printf_literal_format_must_be_a_string,
    printf_without_arguments,
    range_cant_iterate_over_float,
    range_int_with_two_variables,
    range_over_bool_literal,
    range_over_string,
    raw_string_newlines_count_toward_line_numbers,
    string_index_past_the_end,
    template_name_must_be_a_string,
    template_not_defined,
    too_many_range_declarations,
    trailing_underscore_in_number,
    trimmed_newlines_count_toward_line_numbers,
    unclosed_action,
    unclosed_action_in_multiline,
    unclosed_comment,
    unclosed_left_paren,
    undefined_variable,
    undefined_variable_after_scope_end,
    unexpected_brace_in_operand,
    unexpected_dot_after_literal,
    unexpected_end,
    unexpected_eof_in_define,
    unexpected_eof_in_nested_controls,
    unexpected_right_paren,
    unrecognized_character,
    unterminated_character_constant,
    unterminated_quoted_string,
    unterminated_raw_string,
    variable_given_an_argument,
    with_on_nil_pointer,
    wrong_type_for_typed_parameter_missing_value,
);

#[test]
fn every_fixture_is_listed_in_a_test() {
    for (dir, listed) in [("ok", OK_CASES), ("errors", ERROR_CASES)] {
        let mut found: Vec<String> = std::fs::read_dir(fixtures().join(dir))
            .expect("fixture directory")
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                e.file_name()
                    .to_str()
                    .and_then(|n| n.strip_suffix(".tpl"))
                    .map(String::from)
            })
            .collect();
        found.sort();
        let mut listed: Vec<String> = listed.iter().map(|s| s.to_string()).collect();
        listed.sort();
        assert_eq!(found, listed, "fixtures/{dir} and the case list differ");
    }
}

/// `fixtures/fuzz_cases.json` (generated by `fuzz_cases.py`): hundreds of printf, print and
/// comparison templates; `golden/fuzz_outputs.json` holds helm's output for each.
#[test]
fn generated_printf_print_and_comparison_cases_render_like_helm() {
    let cases: Vec<String> =
        serde_json::from_str(&read(&fixtures().join("fuzz_cases.json"))).expect("cases are JSON");
    let outputs: Vec<String> =
        serde_json::from_str(&read(&fixtures().join("golden/fuzz_outputs.json")))
            .expect("outputs are JSON");
    assert_eq!(cases.len(), outputs.len());
    let mut failures = Vec::new();
    for (i, (case, want)) in cases.iter().zip(&outputs).enumerate() {
        match render(&format!("c{i}"), case) {
            Ok(got) if &got == want => {}
            Ok(got) => failures.push(format!("c{i} {case}\n   got {got:?}\n  want {want:?}")),
            Err(e) => failures.push(format!("c{i} {case}\n   error {e}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

/// `fixtures/struct_cases.json` (generated by `struct_cases.py`): random templates of control
/// structures, variables, field chains and builtins; `golden/struct_outputs.json` holds helm's
/// output or error for each.
#[test]
fn generated_control_structure_cases_render_or_fail_like_helm() {
    let cases: Vec<String> =
        serde_json::from_str(&read(&fixtures().join("struct_cases.json"))).expect("cases are JSON");
    let results: Vec<serde_json::Value> =
        serde_json::from_str(&read(&fixtures().join("golden/struct_outputs.json")))
            .expect("results are JSON");
    assert_eq!(cases.len(), results.len());
    let mut failures = Vec::new();
    for (i, (case, want)) in cases.iter().zip(&results).enumerate() {
        if let Some(out) = want.get("ok").and_then(|v| v.as_str()) {
            match render("fx/templates/_case.tpl", case) {
                Ok(got) if got == out => {}
                Ok(got) => failures.push(format!("#{i} {case:?}\n   got {got:?}\n  want {out:?}")),
                Err(e) => failures.push(format!("#{i} {case:?}\n   error {e}\n  want {out:?}")),
            }
        } else {
            let stderr = want.get("err").and_then(|v| v.as_str()).unwrap_or_default();
            match render("fx/templates/case.yaml", case) {
                Ok(got) => failures.push(format!(
                    "#{i} {case:?}\n   rendered {got:?}\n  want {stderr:?}"
                )),
                Err(e) => {
                    if let Err(diff) = compare_error(stderr, &e) {
                        failures.push(format!("#{i} {case:?}\n  {diff}"));
                    }
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases differ:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
