//! CEL as Flux uses it (`fluxcd/pkg/runtime/cel`): the custom health checks of
//! `spec.healthCheckExprs`, evaluated by the agent's readiness wait over each object of a
//! matching group and kind, and the `dependsOn[].readyExpr` check the hub runs.
//!
//! **Health checks** are *parsed*, not type-checked (Flux: not every custom resource has the
//! five standard top-level fields): the object's top-level fields are the variables
//! (`status.phase == 'Ready'`). An object whose `status.observedGeneration` (an integer)
//! differs from `metadata.generation` is `InProgress`; otherwise `inProgress`, `failed`,
//! `current` are evaluated in that order (RFC 0009) and the first one true decides; none
//! true: `InProgress`. An evaluation error (a missing field) leaves the object `Unknown`, so
//! the wait goes on. A check names a group through its `apiVersion` (the version is
//! ignored) and a kind, or the whole group when the kind is empty; two checks of one group
//! and kind are an error, as are expressions that do not parse: Flux stalls the HelmRelease
//! with reason `InvalidCELExpression`, and so does the hub ([`HealthChecks::new`]'s message
//! is Flux's).
//!
//! **`readyExpr`** is *compiled* with the variables `self` (the HelmRelease being
//! reconciled) and `dep` (its dependency); a reference to another variable is a compile
//! error (cel-go's "undeclared reference"), as is a result that is certainly not a boolean.
//!
//! Numbers: JSON integers become CEL `int` (`uint` above `i64::MAX`), as in Kubernetes'
//! unstructured objects, so `status.readyReplicas == 1` holds.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use cel::objects::Value as CelValue;
use cel::{Context, Env, Program};
use flotilla_core::spec::CustomHealthCheck;
use serde::ser::{Serialize, SerializeMap as _, SerializeSeq as _, Serializer};
use serde_json::Value;

use crate::kube::status::{Status, StatusResult};

/// Errors of building or evaluating CEL expressions; the texts are Flux's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CelError {
    /// The expression does not parse (or, compiled, refers to an undeclared variable).
    #[error("failed to parse the CEL expression '{expr}': {issues}")]
    Parse {
        /// The expression.
        expr: String,
        /// What the parser found, cel-go's form (`ERROR: <input>:1:8: ...`).
        issues: String,
    },
    /// A compiled expression's result type is not the one wanted.
    #[error("CEL expression output type mismatch: expected bool, got {got}")]
    OutputType {
        /// The type the expression yields.
        got: &'static str,
    },
    /// Evaluating failed (a missing field, a type error).
    #[error("failed to evaluate the CEL expression '{expr}': {message}")]
    Evaluate {
        /// The expression.
        expr: String,
        /// Why.
        message: String,
    },
    /// The result is not a boolean.
    #[error("failed to evaluate CEL expression as boolean: '{expr}'")]
    NotBoolean {
        /// The expression.
        expr: String,
    },
    /// `current` of a health check is empty.
    #[error(
        "failed to create custom status evaluator for healthchecks[{index}]: expression Current not specified"
    )]
    MissingCurrent {
        /// The index in `spec.healthCheckExprs`.
        index: usize,
    },
    /// One of a health check's expressions does not parse.
    #[error(
        "failed to create custom status evaluator for healthchecks[{index}]: failed to parse the expression {which}: {source}"
    )]
    HealthCheck {
        /// The index in `spec.healthCheckExprs`.
        index: usize,
        /// `Current`, `InProgress` or `Failed`.
        which: &'static str,
        /// The parse error.
        source: Box<CelError>,
    },
    /// A dependency's `readyExpr` does not compile.
    #[error("failed to evaluate dependency {name}: {source}")]
    Dependency {
        /// The dependency's name.
        name: String,
        /// The compile error.
        source: Box<CelError>,
    },
    /// Two health checks for one group and kind.
    #[error("duplicate custom health check for GroupKind {group_kind} at healthchecks[{index}]")]
    Duplicate {
        /// `Kind.group` (Kubernetes' `GroupKind.String()`).
        group_kind: String,
        /// The index of the second one.
        index: usize,
    },
}

impl CelError {
    /// A short, bounded name for the failure (a metric label).
    pub fn kind(&self) -> &'static str {
        match self {
            CelError::Parse { .. } | CelError::HealthCheck { .. } | CelError::Dependency { .. } => {
                "parse"
            }
            CelError::OutputType { .. } => "output_type",
            CelError::Evaluate { .. } | CelError::NotBoolean { .. } => "evaluate",
            CelError::MissingCurrent { .. } => "missing_current",
            CelError::Duplicate { .. } => "duplicate",
        }
    }

    /// Whether the expression may succeed later (an evaluation over changing data), as
    /// opposed to an expression that will never compile.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            CelError::Evaluate { .. } | CelError::NotBoolean { .. }
        )
    }
}

/// The environment: the standard library with its macros (`has`, `all`, `exists`,
/// `exists_one`, `map`, `filter`), optional syntax and the strings extension, as Flux's.
fn env() -> Arc<Env> {
    static ENV: std::sync::OnceLock<Arc<Env>> = std::sync::OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = Env::stdlib();
        if let Err(e) = env.add_extension(cel::extensions::strings) {
            tracing::warn!(error = %e, "CEL strings extension not available");
        }
        Arc::new(env)
    })
    .clone()
}

/// A parsed CEL expression.
#[derive(Clone)]
pub struct Expression {
    source: String,
    program: Arc<Program>,
}

impl fmt::Debug for Expression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Expression").field(&self.source).finish()
    }
}

impl Expression {
    /// Parses `source` (no type check: any variable may be referred to).
    pub fn parse(source: &str) -> Result<Expression, CelError> {
        let program = env().compile(source).map_err(|e| CelError::Parse {
            expr: source.to_owned(),
            issues: e.to_string(),
        })?;
        Ok(Expression {
            source: source.to_owned(),
            program: Arc::new(program),
        })
    }

    /// Compiles `source` as a boolean expression over the object variables `vars` (Flux's
    /// `WithCompile`, `WithStructVariables`, `WithOutputType(BoolType)`): a reference to any
    /// other variable, or a literal result that is not a boolean, is an error.
    pub fn compile_bool(source: &str, vars: &[&str]) -> Result<Expression, CelError> {
        let expr = Expression::parse(source)?;
        let mut free = Vec::new();
        free_variables(expr.program.expression(), &mut Vec::new(), &mut free);
        if let Some(first) = free.iter().find(|v| !vars.contains(&v.as_str())) {
            return Err(CelError::Parse {
                expr: source.to_owned(),
                issues: format!("ERROR: <input>:1:1: undeclared reference to '{first}'"),
            });
        }
        if let Some(got) = literal_type(source) {
            return Err(CelError::OutputType { got });
        }
        Ok(expr)
    }

    /// The expression's text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Evaluates to a boolean with `vars` bound.
    pub fn evaluate_bool(&self, vars: &[(&str, &Value)]) -> Result<bool, CelError> {
        let env = env();
        let mut ctx = Context::with_env(env);
        for (name, value) in vars {
            let value = cel::to_value(Json(value)).map_err(|e| CelError::Evaluate {
                expr: self.source.clone(),
                message: e.to_string(),
            })?;
            ctx.add_variable_from_value(*name, value);
        }
        match self.program.execute(&ctx) {
            Ok(CelValue::Bool(b)) => Ok(b),
            Ok(_) => Err(CelError::NotBoolean {
                expr: self.source.clone(),
            }),
            Err(e) => Err(CelError::Evaluate {
                expr: self.source.clone(),
                message: e.to_string(),
            }),
        }
    }

    /// Evaluates with the top-level fields of `object` as the variables.
    pub fn evaluate_bool_over(&self, object: &Value) -> Result<bool, CelError> {
        let vars: Vec<(&str, &Value)> = object
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| (k.as_str(), v))
            .collect();
        self.evaluate_bool(&vars)
    }
}

/// Type names and namespaces an identifier may name besides variables.
const BUILTIN_IDENTS: &[&str] = &[
    "bool",
    "bytes",
    "double",
    "dyn",
    "int",
    "list",
    "map",
    "null_type",
    "optional",
    "string",
    "type",
    "uint",
];

/// The identifiers of `expr` not bound by a comprehension (macro) around them, in order.
fn free_variables(expr: &cel::IdedExpr, bound: &mut Vec<String>, out: &mut Vec<String>) {
    use cel::common::ast::{EntryExpr, Expr};
    let entries = |entries: &[cel::common::ast::IdedEntryExpr],
                   bound: &mut Vec<String>,
                   out: &mut Vec<String>| {
        for entry in entries {
            match &entry.expr {
                EntryExpr::StructField(field) => free_variables(&field.value, bound, out),
                EntryExpr::MapEntry(e) => {
                    free_variables(&e.key, bound, out);
                    free_variables(&e.value, bound, out);
                }
            }
        }
    };
    match &expr.expr {
        Expr::Unspecified | Expr::Literal(_) => {}
        Expr::Ident(name) => {
            if !name.starts_with('@')
                && !bound.contains(name)
                && !BUILTIN_IDENTS.contains(&name.as_str())
                && !out.contains(name)
            {
                out.push(name.clone());
            }
        }
        Expr::Select(select) => free_variables(&select.operand, bound, out),
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                free_variables(target, bound, out);
            }
            for arg in &call.args {
                free_variables(arg, bound, out);
            }
        }
        Expr::List(list) => {
            for e in &list.elements {
                free_variables(e, bound, out);
            }
        }
        Expr::Map(map) => entries(&map.entries, bound, out),
        Expr::Struct(st) => entries(&st.entries, bound, out),
        Expr::Comprehension(c) => {
            free_variables(&c.iter_range, bound, out);
            free_variables(&c.accu_init, bound, out);
            let depth = bound.len();
            bound.push(c.iter_var.clone());
            bound.extend(c.iter_var2.clone());
            bound.push(c.accu_var.clone());
            free_variables(&c.loop_cond, bound, out);
            free_variables(&c.loop_step, bound, out);
            free_variables(&c.result, bound, out);
            bound.truncate(depth);
        }
    }
}

/// The type of an expression that is a plain literal other than a boolean (`'x'`, `1`,
/// `[..]`, `{..}`): cel-go's compile-time output type check catches those; field selections
/// on the object variables are dynamic and checked at evaluation.
fn literal_type(source: &str) -> Option<&'static str> {
    let s = source.trim();
    let first = s.chars().next()?;
    let closes = |open: char, close: char| s.starts_with(open) && s.ends_with(close);
    if (closes('\'', '\'') || closes('"', '"')) && !s[1..s.len() - 1].contains(['\'', '"']) {
        return Some("string");
    }
    if (first.is_ascii_digit() || first == '-') && s.parse::<f64>().is_ok() {
        return Some(if s.contains('.') { "double" } else { "int" });
    }
    None
}

/// Serializes JSON with integers as `i64` where they fit (serde_json gives `u64` for
/// positive numbers, which CEL would hold as `uint`).
struct Json<'a>(&'a Value);

impl Serialize for Json<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            Value::Null => s.serialize_unit(),
            Value::Bool(b) => s.serialize_bool(*b),
            Value::Number(n) => {
                if let Some(i) = n.as_i64() {
                    s.serialize_i64(i)
                } else if let Some(u) = n.as_u64() {
                    s.serialize_u64(u)
                } else {
                    s.serialize_f64(n.as_f64().unwrap_or(f64::NAN))
                }
            }
            Value::String(t) => s.serialize_str(t),
            Value::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(&Json(item))?;
                }
                seq.end()
            }
            Value::Object(map) => {
                let mut m = s.serialize_map(Some(map.len()))?;
                for (k, v) in map {
                    m.serialize_entry(k, &Json(v))?;
                }
                m.end()
            }
        }
    }
}

/// The expressions of one `spec.healthCheckExprs` entry.
#[derive(Clone, Debug)]
struct Evaluator {
    current: Expression,
    in_progress: Option<Expression>,
    failed: Option<Expression>,
}

impl Evaluator {
    fn new(index: usize, check: &CustomHealthCheck) -> Result<Evaluator, CelError> {
        if check.current.is_empty() {
            return Err(CelError::MissingCurrent { index });
        }
        let parse = |which: &'static str, source: &str| {
            Expression::parse(source).map_err(|e| CelError::HealthCheck {
                index,
                which,
                source: Box::new(e),
            })
        };
        let optional = |which: &'static str, source: Option<&String>| {
            source
                .filter(|s| !s.is_empty())
                .map(|s| parse(which, s))
                .transpose()
        };
        Ok(Evaluator {
            current: parse("Current", &check.current)?,
            failed: optional("Failed", check.failed.as_ref())?,
            in_progress: optional("InProgress", check.in_progress.as_ref())?,
        })
    }

    fn evaluate(&self, obj: &Value) -> StatusResult {
        let int = |path: [&str; 2]| obj.get(path[0]).and_then(|v| v.get(path[1]))?.as_i64();
        if let (Some(observed), Some(generation)) = (
            int(["status", "observedGeneration"]),
            int(["metadata", "generation"]),
        ) && observed != generation
        {
            return StatusResult {
                status: Status::InProgress,
                message: format!(
                    "generation is {generation}, but latest observed generation is {observed}"
                ),
            };
        }
        let order = [
            (self.in_progress.as_ref(), Status::InProgress, "inProgress"),
            (self.failed.as_ref(), Status::Failed, "failed"),
            (Some(&self.current), Status::Current, "current"),
        ];
        for (expr, status, name) in order {
            let Some(expr) = expr else { continue };
            match expr.evaluate_bool_over(obj) {
                Ok(true) => {
                    return StatusResult {
                        status,
                        message: format!("healthCheckExprs {name} is true: {}", expr.source()),
                    };
                }
                Ok(false) => {}
                Err(e) => {
                    return StatusResult {
                        status: Status::Unknown,
                        message: e.to_string(),
                    };
                }
            }
        }
        StatusResult {
            status: Status::InProgress,
            message: format!(
                "healthCheckExprs current is not true yet: {}",
                self.current.source()
            ),
        }
    }
}

/// The custom health checks of a release, by group and kind (`None`: every kind of the
/// group).
#[derive(Clone, Debug, Default)]
pub struct HealthChecks {
    by_kind: HashMap<(String, Option<String>), Evaluator>,
}

/// The group of an `apiVersion` (`""` for the core group).
pub fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(g, _)| g)
}

impl HealthChecks {
    /// Parses every check; the first error is Flux's for it.
    pub fn new(checks: &[CustomHealthCheck]) -> Result<HealthChecks, CelError> {
        let mut by_kind = HashMap::new();
        for (index, check) in checks.iter().enumerate() {
            let group = group_of(&check.api_version).to_owned();
            let kind = check.kind.clone().filter(|k| !k.is_empty());
            let key = (group, kind);
            if by_kind.contains_key(&key) {
                let (group, kind) = key;
                let kind = kind.unwrap_or_default();
                let group_kind = if group.is_empty() {
                    kind
                } else {
                    format!("{kind}.{group}")
                };
                return Err(CelError::Duplicate { group_kind, index });
            }
            by_kind.insert(key, Evaluator::new(index, check)?);
        }
        Ok(HealthChecks { by_kind })
    }

    /// Whether there are no checks.
    pub fn is_empty(&self) -> bool {
        self.by_kind.is_empty()
    }

    /// The status of `obj` (its JSON form with `apiVersion` and `kind`) by the check of its
    /// kind, or of its group; `None` when no check covers it.
    pub fn evaluate(&self, obj: &Value) -> Option<StatusResult> {
        let group = group_of(obj.get("apiVersion")?.as_str()?).to_owned();
        let kind = obj.get("kind")?.as_str()?.to_owned();
        let evaluator = self
            .by_kind
            .get(&(group.clone(), Some(kind)))
            .or_else(|| self.by_kind.get(&(group, None)))?;
        Some(evaluator.evaluate(obj))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check(api_version: &str, kind: Option<&str>, current: &str) -> CustomHealthCheck {
        CustomHealthCheck {
            api_version: api_version.to_owned(),
            kind: kind.map(str::to_owned),
            current: current.to_owned(),
            in_progress: None,
            failed: None,
        }
    }

    fn widget(status: Value) -> Value {
        json!({
            "apiVersion": "example.dev/v1",
            "kind": "Widget",
            "metadata": {"name": "w", "generation": 2},
            "status": status,
        })
    }

    #[test]
    fn health_checks_decide_in_progress_then_failed_then_current_and_none_true_is_in_progress() {
        let mut c = check("example.dev/v1", Some("Widget"), "status.phase == 'Ready'");
        c.failed = Some(
            "status.phase == 'Failed' || has(status.retries) && status.retries > 3".to_owned(),
        );
        c.in_progress = Some("has(status.migrating) && status.migrating".to_owned());
        let checks = HealthChecks::new(&[c]).expect("valid");
        let cases = [
            (json!({"phase": "Ready"}), Status::Current),
            (json!({"phase": "Failed"}), Status::Failed),
            (json!({"phase": "Pending", "retries": 4}), Status::Failed),
            (
                json!({"phase": "Pending", "retries": 1}),
                Status::InProgress,
            ),
            (
                json!({"phase": "Ready", "migrating": true}),
                Status::InProgress,
            ),
            (
                json!({"phase": "Ready", "observedGeneration": 1}),
                Status::InProgress,
            ),
            (
                json!({"phase": "Ready", "observedGeneration": 2}),
                Status::Current,
            ),
            (json!({"phase": "Failed", "retries": "x"}), Status::Failed),
        ];
        for (status, want) in cases {
            let got = checks.evaluate(&widget(status.clone())).expect("covered");
            assert_eq!(got.status, want, "{status}: {}", got.message);
        }
    }

    #[test]
    fn a_missing_field_leaves_the_object_unknown_with_flux_evaluation_message() {
        let checks = HealthChecks::new(&[check(
            "example.dev/v1",
            Some("Widget"),
            "status.phase == 'Ready'",
        )])
        .expect("valid");
        let obj = json!({"apiVersion": "example.dev/v1", "kind": "Widget", "metadata": {}});
        let got = checks.evaluate(&obj).expect("covered");
        assert_eq!(got.status, Status::Unknown);
        assert!(
            got.message
                .starts_with("failed to evaluate the CEL expression 'status.phase == 'Ready'': "),
            "{}",
            got.message
        );
    }

    #[test]
    fn a_check_covers_its_kind_or_with_an_empty_kind_its_whole_group_in_any_version() {
        let checks = HealthChecks::new(&[
            check("example.dev/v1", Some("Widget"), "false"),
            check("other.dev/v1beta1", None, "true"),
        ])
        .expect("valid");
        let of = |api: &str, kind: &str| {
            checks
                .evaluate(&json!({"apiVersion": api, "kind": kind, "metadata": {}}))
                .map(|r| r.status)
        };
        assert_eq!(of("example.dev/v2", "Widget"), Some(Status::InProgress));
        assert_eq!(of("example.dev/v1", "Gadget"), None);
        assert_eq!(of("other.dev/v1", "Anything"), Some(Status::Current));
        assert_eq!(of("apps/v1", "Deployment"), None);
    }

    #[test]
    fn invalid_health_checks_fail_with_flux_messages() {
        let bad = check("example.dev/v1", Some("Widget"), "status.phase ==");
        let err = HealthChecks::new(&[bad]).expect_err("does not parse");
        let text = err.to_string();
        assert!(
            text.starts_with(
                "failed to create custom status evaluator for healthchecks[0]: \
                 failed to parse the expression Current: \
                 failed to parse the CEL expression 'status.phase ==': ERROR: <input>:1:"
            ),
            "{text}"
        );
        assert!(!err.is_transient());

        let mut failed = check("example.dev/v1", None, "true");
        failed.failed = Some("status.(".to_owned());
        let text = HealthChecks::new(&[check("apps/v1", Some("Deployment"), "true"), failed])
            .expect_err("does not parse")
            .to_string();
        assert!(
            text.starts_with(
                "failed to create custom status evaluator for healthchecks[1]: \
                 failed to parse the expression Failed: "
            ),
            "{text}"
        );

        let dup = HealthChecks::new(&[
            check("example.dev/v1", Some("Widget"), "true"),
            check("example.dev/v2", Some("Widget"), "true"),
        ])
        .expect_err("duplicate");
        assert_eq!(
            dup.to_string(),
            "duplicate custom health check for GroupKind Widget.example.dev at healthchecks[1]"
        );
        let empty = HealthChecks::new(&[check("v1", Some("Pod"), "")]).expect_err("empty");
        assert_eq!(
            empty.to_string(),
            "failed to create custom status evaluator for healthchecks[0]: expression Current not specified"
        );
    }

    #[test]
    fn ready_expr_compiles_over_self_and_dep_only_and_evaluates_to_a_boolean() {
        let ready = "dep.status.conditions.filter(e, e.type == 'Ready').all(e, e.status == 'True') \
                     && self.metadata.namespace == dep.metadata.namespace";
        let expr = Expression::compile_bool(ready, &["self", "dep"]).expect("compiles");
        let me = json!({"metadata": {"name": "app", "namespace": "apps"}});
        let dep = |status: &str| {
            json!({"metadata": {"name": "db", "namespace": "apps"},
                   "status": {"conditions": [{"type": "Ready", "status": status}]}})
        };
        let eval = |d: Value| expr.evaluate_bool(&[("self", &me), ("dep", &d)]);
        assert_eq!(eval(dep("True")), Ok(true));
        assert_eq!(eval(dep("False")), Ok(false));

        let err =
            Expression::compile_bool("other.ready", &["self", "dep"]).expect_err("undeclared");
        assert_eq!(
            err.to_string(),
            "failed to parse the CEL expression 'other.ready': ERROR: <input>:1:1: undeclared reference to 'other'"
        );
        assert!(Expression::compile_bool("dep.status.(", &["self", "dep"]).is_err());
        assert!(matches!(
            Expression::compile_bool("'yes'", &["self", "dep"]),
            Err(CelError::OutputType { got: "string" })
        ));

        let number = Expression::compile_bool("dep.metadata.name", &["self", "dep"])
            .expect("dynamic: checked at evaluation");
        assert_eq!(
            number.evaluate_bool(&[("self", &me), ("dep", &dep("True"))]),
            Err(CelError::NotBoolean {
                expr: "dep.metadata.name".to_owned()
            })
        );
    }

    #[test]
    fn json_integers_compare_as_cel_ints() {
        let expr =
            Expression::parse("status.readyReplicas == 1 && status.ratio > 0.5").expect("parses");
        let obj = json!({"status": {"readyReplicas": 1, "ratio": 0.75}});
        assert_eq!(expr.evaluate_bool_over(&obj), Ok(true));
    }
}
