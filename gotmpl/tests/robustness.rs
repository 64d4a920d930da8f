//! No input may panic the crate: mutated and random templates are parsed and executed; each
//! attempt must end in output or an error. Deterministic (a fixed-seed xorshift generator).

use std::path::Path;

use flotilla_gotmpl::{
    ArgType, ExecOptions, FuncError, FuncMap, Function, Signature, TemplateSet, Value,
};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const PIECES: &[&str] = &[
    "{{", "}}", "{{-", "-}}", " ", "\n", "\t", ".", ".Values", ".a", "$", "$x", ":=", "=", "|",
    "(", ")", "\"", "`", "'", "/*", "*/", "if", "else", "end", "range", "with", "define",
    "template", "block", "break", "continue", "nil", "true", "1", "-1", "1.5", "0x1F", "1e400",
    "'a'", "\"s\"", "printf", "\"%d\"", "len", "index", "eq", "lt", "and", "or", "not", "print",
    "include", "\"x\"", ",", "é", "\u{0}", "\\", "}",
];

fn funcs() -> FuncMap {
    let mut f = FuncMap::new();
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
    f
}

fn attempt(src: &str, funcs: &FuncMap, data: &Value, opts: &ExecOptions) {
    let mut set = TemplateSet::new("gotpl");
    if set.parse("t", src, funcs).is_ok() {
        let _ = set.execute("t", data, funcs, opts);
        for name in set.names() {
            let _ = set.execute(name, data, funcs, opts);
        }
    }
}

fn run_fuzz() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut seeds: Vec<String> = Vec::new();
    for dir in ["ok", "errors"] {
        let Ok(entries) = std::fs::read_dir(fixtures.join(dir)) else {
            continue;
        };
        for e in entries.flatten() {
            if let Ok(text) = std::fs::read_to_string(e.path()) {
                seeds.push(text);
            }
        }
    }
    seeds.sort();
    let data = Value::from_json(&serde_json::json!({
        "Values": {"a": 1, "s": "x", "list": [1, null, {"k": "v"}], "m": {"b": [true]}}
    }));
    let funcs = funcs();
    let opts = ExecOptions {
        max_output_bytes: 1 << 20,
        max_steps: Some(100_000),
        ..ExecOptions::helm()
    };
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for round in 0..rounds() {
        let mut chars: Vec<char> = if round % 4 == 3 || seeds.is_empty() {
            Vec::new()
        } else {
            seeds[rng.below(seeds.len())].chars().collect()
        };
        for _ in 0..(1 + rng.below(6)) {
            let piece: Vec<char> = PIECES[rng.below(PIECES.len())].chars().collect();
            let at = rng.below(chars.len() + 1);
            match rng.below(3) {
                0 => {
                    chars.splice(at..at, piece);
                }
                1 if !chars.is_empty() => {
                    let end = (at + 1 + rng.below(4)).min(chars.len());
                    chars.drain(at.min(chars.len())..end);
                }
                _ => {
                    let end = (at + piece.len()).min(chars.len());
                    chars.splice(at..end, piece);
                }
            }
        }
        let src: String = chars.into_iter().collect();
        attempt(&src, &funcs, &data, &opts);
    }
}

#[test]
fn mutated_and_random_templates_never_panic() {
    std::thread::Builder::new()
        .stack_size(2 << 20)
        .spawn(run_fuzz)
        .expect("spawn")
        .join()
        .expect("no panic and no stack overflow");
}

/// 20000 by default; `GOTMPL_FUZZ_ROUNDS` raises it for longer local runs.
fn rounds() -> usize {
    std::env::var("GOTMPL_FUZZ_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}
