//! A plain timing benchmark (no harness dependency): parse and render a values-driven
//! template the way chart templates look. Run with `cargo bench -p flotilla-gotmpl`.

use std::time::Instant;

use flotilla_gotmpl::{ExecOptions, FuncMap, TemplateSet, Value};

const TEMPLATE: &str = r#"{{- define "labels" -}}
app: {{ .name }}
{{- range $k, $v := .labels }}
{{ $k }}: {{ printf "%q" $v }}
{{- end }}
{{- end -}}
{{- range $i, $item := .Values.items }}
---
kind: ConfigMap
metadata:
  name: {{ printf "%s-%d" $item.name $i }}
  labels:
{{ template "labels" $item }}
data:
  {{- if and $item.enabled (gt (len $item.labels) 1) }}
  enabled: "true"
  {{- else }}
  enabled: "false"
  {{- end }}
  {{- with $item.extra }}
  extra: {{ . }}
  {{- end }}
{{- end }}
"#;

fn time<F: FnMut() -> usize>(label: &str, iterations: u32, mut f: F) {
    let start = Instant::now();
    let mut bytes = 0;
    for _ in 0..iterations {
        bytes += f();
    }
    let per = start.elapsed() / iterations;
    println!(
        "{label}: {per:?} per iteration ({} bytes)",
        bytes / iterations as usize
    );
}

fn main() {
    let funcs = FuncMap::new();
    let items: Vec<serde_json::Value> = (0..200)
        .map(|i| {
            serde_json::json!({
                "name": format!("item{i}"),
                "enabled": i % 3 != 0,
                "labels": {"tier": "web", "zone": format!("z{}", i % 4), "team": "a"},
                "extra": if i % 2 == 0 { serde_json::json!(i) } else { serde_json::Value::Null },
            })
        })
        .collect();
    let data = Value::from_json(&serde_json::json!({"Values": {"items": items}}));
    let mut set = TemplateSet::new("gotpl");
    set.parse("bench", TEMPLATE, &funcs)
        .expect("the benchmark template parses");
    let opts = ExecOptions::helm();

    time("parse", 2000, || {
        let mut s = TemplateSet::new("gotpl");
        s.parse("bench", TEMPLATE, &funcs)
            .map(|_| TEMPLATE.len())
            .unwrap_or(0)
    });
    time("render 200 items", 200, || {
        set.execute("bench", &data, &funcs, &opts)
            .map(|s| s.len())
            .unwrap_or(0)
    });
}
