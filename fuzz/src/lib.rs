//! Shared drivers of the fuzz targets in `fuzz_targets/`: each target is one line calling a
//! function here, so the same code can be replayed outside libFuzzer.
//!
//! Every driver feeds arbitrary bytes to the public APIs of the pure crates (and, for
//! [`agent_messages`], to the hub's pure session handling) and checks only what must hold
//! for any input: no panic, no hang (execution is bounded by steps and output size, as an
//! agent rendering untrusted charts would bound it), no unbounded growth, and errors in the
//! form Helm gives them.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use flotilla_chart::chart::{Chart, File};
use flotilla_chart::coalesce::{coalesce_values, merge_values};
use flotilla_chart::load::{BufferedFile, load_archive, load_files};
use flotilla_chart::metadata::Metadata;
use flotilla_chart::postrender::{
    Image, Kustomize, Patch, PostRenderer, Selector, parse_post_renderers, post_render,
    post_render_files,
};
use flotilla_chart::render::manifest::{INSTALL_ORDER, sort_manifests};
use flotilla_chart::render::{Capabilities, Engine, ReleaseOptions};
use flotilla_chart::strvals::{self, ValueOptions};
use flotilla_chart::values::{Values, load_values_bytes};
use flotilla_gotmpl::{ArgType, FuncMap, Function, Signature, TemplateSet, Value};
use serde_json::json;

/// Steps one template execution may take in the fuzzers: far more than any template of the
/// shared chart corpus needs, few enough that one input runs in well under a second.
pub const MAX_STEPS: u64 = 200_000;
/// Bytes one template execution may write in the fuzzers.
pub const MAX_OUTPUT_BYTES: usize = 4 << 20;

/// Splits an input into NUL-separated parts (at most `max`; the last keeps the rest).
fn parts(data: &[u8], max: usize) -> Vec<&[u8]> {
    data.splitn(max, |&b| b == 0).collect()
}

/// Sprig plus Helm's function names (with permissive signatures), for parsing only: a parse
/// checks that every function a template names exists.
static PARSE_FUNCS: LazyLock<FuncMap> = LazyLock::new(|| {
    let mut f = flotilla_sprig::funcs();
    for name in [
        "include",
        "tpl",
        "required",
        "fail",
        "lookup",
        "toYaml",
        "mustToYaml",
        "toYamlPretty",
        "fromYaml",
        "fromYamlArray",
        "toJson",
        "mustToJson",
        "fromJson",
        "fromJsonArray",
        "toToml",
        "fromToml",
    ] {
        f.insert(
            name,
            Function::new(Signature::variadic([], ArgType::Any), |_| Ok(Value::Nil)),
        );
    }
    f
});

/// Parses every NUL-separated part of `data` as one source of a template set, as Helm parses
/// a chart's files into one set. A parse error must be Go's `template: NAME:LINE: ...`.
pub fn template_parse(data: &[u8]) {
    let mut set = TemplateSet::new("gotpl");
    for (i, part) in parts(data, 8).into_iter().enumerate() {
        let name = format!("fuzz/templates/t{i}.yaml");
        let text = String::from_utf8_lossy(part);
        if let Err(e) = set.parse(&name, &text, &PARSE_FUNCS) {
            let msg = e.to_string();
            assert!(
                msg.starts_with("template: "),
                "parse error not in Go's form: {msg:?}"
            );
        }
    }
    for name in set.names() {
        let t = set.get(name).expect("a listed template exists");
        assert_eq!(t.name(), name);
    }
}

fn file(name: &str, data: &[u8]) -> File {
    File {
        name: name.to_string(),
        data: data.into(),
        mod_time: None,
    }
}

fn metadata(name: &str) -> Metadata {
    let mut md = Metadata::default();
    md.name = name.to_string();
    md.version = "1.2.3".to_string();
    md.api_version = "v2".to_string();
    md.app_version = "4.5.6".to_string();
    md
}

fn as_values(v: serde_json::Value) -> Values {
    match v {
        serde_json::Value::Object(m) => m,
        _ => Values::new(),
    }
}

/// The fixed values the template execution target renders with: every value shape.
fn fixed_values() -> Values {
    as_values(json!({
        "replicaCount": 3.0,
        "name": "demo",
        "empty": "",
        "enabled": true,
        "nothing": null,
        "ratio": 0.25,
        "image": {"repository": "nginx", "tag": "1.27", "pullPolicy": "IfNotPresent"},
        "ports": [80.0, 443.0],
        "labels": {"app": "demo", "tier": "web"},
        "list": [{"name": "a", "value": "1"}, {"name": "b", "value": "2"}],
        "multiline": "line one\nline two\n",
        "template": "{{ .Values.name }}-{{ .Release.Name }}",
        "yaml": "a: 1\nb: [x, y]\n",
        "json": "{\"k\": [1, 2, {\"z\": null}]}",
        "global": {"env": "prod", "registry": "example.com"},
        "sub": {"enabled": true, "port": 8080.0}
    }))
}

fn release() -> ReleaseOptions {
    ReleaseOptions {
        name: "fuzz".to_string(),
        namespace: "default".to_string(),
        revision: 1,
        is_install: true,
        is_upgrade: false,
    }
}

/// The engine the fuzzers render with: Helm's, with the step and output bounds.
fn engine() -> Engine {
    Engine {
        max_steps: Some(MAX_STEPS),
        max_output_bytes: Some(MAX_OUTPUT_BYTES),
        ..Engine::default()
    }
}

/// Renders a chart as an install does after loading (dependencies, coalescing, schema,
/// kubeVersion, engine, manifest sorting), with the fuzzers' bounds. Errors are fine; they
/// must not be empty.
pub fn render_chart(mut chart: Chart, user: &Values) {
    let mut warnings = Vec::new();
    if let Err(e) = flotilla_chart::dependencies::check_dependencies(&chart) {
        assert!(!e.to_string().is_empty());
    }
    if let Err(e) =
        flotilla_chart::dependencies::process_dependencies(&mut chart, user, &mut warnings)
    {
        assert!(!e.to_string().is_empty());
        return;
    }
    let values = match coalesce_values(&chart, user, &mut warnings) {
        Ok(v) => v,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    if let Err(e) = flotilla_chart::schema::validate_against_schema(&chart, &values) {
        assert!(!e.to_string().is_empty());
    }
    let caps = Capabilities::helm_template_default();
    let kv = &chart.metadata.kube_version;
    if !kv.is_empty() {
        let _ = flotilla_chart::semver::is_compatible_range(kv, caps.kube_version.string());
    }
    match engine().render(&chart, &values, &release(), &caps) {
        Ok(files) => sort_rendered(&files),
        Err(e) => assert!(!e.0.is_empty(), "empty render error"),
    }
}

fn sort_rendered(files: &BTreeMap<String, String>) {
    match sort_manifests(files, INSTALL_ORDER) {
        Ok(sorted) => {
            for m in &sorted.manifests {
                assert!(!m.name.is_empty());
            }
        }
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}

/// Parses and executes the NUL-separated parts of `data` as templates of a chart (the first
/// as `templates/t0.yaml`, then `templates/_helpers.tpl`, `templates/NOTES.txt`, a
/// subchart's template and more templates), with fixed values, `.Files` and a subchart,
/// through the render engine with Sprig and Helm's functions.
pub fn template_exec(data: &[u8]) {
    let mut chart = Chart::new(metadata("fuzz"));
    chart.values = Some(fixed_values());
    chart.files = vec![
        file("config/app.yaml", b"key: value\nlist: [1, 2]\n"),
        file("config/extra.properties", b"a=1\nb=2\n"),
        file("README.md", b"# fuzz\n"),
    ];
    let mut sub = Chart::new(metadata("sub"));
    sub.values = Some(as_values(json!({"port": 80.0, "name": "sub"})));
    for (i, part) in parts(data, 6).into_iter().enumerate() {
        match i {
            0 => chart.templates.push(file("templates/t0.yaml", part)),
            1 => chart.templates.push(file("templates/_helpers.tpl", part)),
            2 => chart.templates.push(file("templates/NOTES.txt", part)),
            3 => sub.templates.push(file("templates/s.yaml", part)),
            n => chart
                .templates
                .push(file(&format!("templates/t{n}.yaml"), part)),
        }
    }
    chart.dependencies.push(sub);
    render_chart(chart, &Values::new());
}

/// Fixed defaults of the chart the values target coalesces into.
fn chart_defaults() -> Values {
    as_values(json!({
        "a": {"b": 1.0, "c": [1.0, 2.0], "d": {"e": "f"}},
        "name": "x",
        "global": {"g": true},
        "sub": {"enabled": false, "x": {"y": 1.0}}
    }))
}

/// The head reader (`from_str_keys`, Helm's `SimpleHead`, with its fast path for plain
/// block-style documents) must agree with the full decoder: the same error, or the same
/// values for the keys it reads.
fn head_matches_full_parse(text: &str) {
    const KEYS: [&str; 3] = ["apiVersion", "kind", "metadata"];
    let full = flotilla_yaml::from_str(text);
    let head = flotilla_yaml::from_str_keys(text, &KEYS);
    match (&full, &head) {
        (Err(f), Err(h)) => assert_eq!(f.to_string(), h.to_string(), "head error differs"),
        (Ok(flotilla_yaml::Value::Map(f)), Ok(flotilla_yaml::Value::Map(h))) => {
            for k in KEYS {
                assert_eq!(
                    format!("{:?}", h.get_str(k)),
                    format!("{:?}", f.get_str(k)),
                    "head differs at {k}"
                );
            }
        }
        (Ok(f), Ok(h)) => assert_eq!(format!("{h:?}"), format!("{f:?}"), "head differs"),
        _ => panic!("head reader and full decoder disagree: {head:?} against {full:?}"),
    }
}

/// The block-style fast path of the decoder must agree with the full parser wherever it
/// answers: same value, and never a document the parser refuses.
fn fast_path_matches_full_parse(text: &str) {
    if let Some(fast) = flotilla_yaml::testing::fast_path(text) {
        match flotilla_yaml::testing::full_parser(text) {
            Ok(full) => assert_eq!(
                format!("{fast:?}"),
                format!("{full:?}"),
                "fast path differs"
            ),
            Err(e) => panic!("the fast path accepted a document the parser refuses: {e}"),
        }
    }
}

/// Decodes `data` as YAML every way Helm does (go-yaml v2, the head reader and the block-style fast path against it,
/// strict, every document, `sigs.k8s.io/yaml`, `fromYaml`), emits what decodes, then reads it
/// as a values file and coalesces it with a chart's defaults, both ways round, and validates
/// it against a schema made of the same bytes.
pub fn yaml_values(data: &[u8]) {
    if let Ok(v) = flotilla_yaml::from_slice(data) {
        let _ = flotilla_yaml::to_string(&v);
        let _ = flotilla_yaml::helm::must_to_yaml(&v);
    }
    let text = String::from_utf8_lossy(data);
    head_matches_full_parse(&text);
    fast_path_matches_full_parse(&text);
    let _ = flotilla_yaml::from_str_strict(&text);
    if let Ok(docs) = flotilla_yaml::from_str_all(&text) {
        for (i, d) in docs.iter().take(8).enumerate() {
            let _ = flotilla_yaml::to_string_with(d, flotilla_yaml::KeyOrder::Insertion);
            // go-yaml v3 (toYamlPretty, kyaml) with an indent and sequence style per document.
            let opts = flotilla_yaml::V3Options {
                indent: i as u8 + 1,
                compact_seq_indent: i % 2 == 1,
                ..flotilla_yaml::V3Options::default()
            };
            let _ = flotilla_yaml::to_string_v3(d, opts);
        }
    }
    if let Ok(v) = flotilla_yaml::sigs::unmarshal(&text) {
        let _ = flotilla_yaml::sigs::marshal(&v);
        let _ = flotilla_yaml::sigs::yaml_to_json(&text);
    }
    let m = flotilla_yaml::helm::from_yaml(&text);
    let m = flotilla_yaml::Value::Map(m);
    let _ = flotilla_yaml::helm::to_yaml(&m);
    let _ = flotilla_yaml::helm::to_yaml_pretty(&m);
    let _ = flotilla_yaml::helm::from_yaml_array(&text);

    let user = match load_values_bytes(data) {
        Ok(v) => v,
        Err(e) => {
            assert!(!e.to_string().is_empty());
            return;
        }
    };
    let mut warnings = Vec::new();
    let mut chart = Chart::new(metadata("values"));
    chart.values = Some(chart_defaults());
    let mut sub = Chart::new(metadata("sub"));
    sub.values = Some(as_values(json!({"enabled": true, "x": {"z": 2.0}})));
    chart.dependencies.push(sub);
    let _ = coalesce_values(&chart, &user, &mut warnings);
    let _ = merge_values(&chart, &user, &mut warnings);
    chart.values = Some(user);
    let defaults = chart_defaults();
    let _ = coalesce_values(&chart, &defaults, &mut warnings);
    for w in &warnings {
        let _ = w.to_string();
    }
    chart.schema = Some(data.to_vec());
    if let Err(e) = flotilla_chart::schema::validate_against_schema(&chart, &defaults) {
        assert!(!e.to_string().is_empty());
    }
}

/// Parses `--set`-style arguments, one per line, the line's first character choosing the
/// flag (`s`: `--set`, `S`: `--set-string`, `j`: `--set-json`, `f`: `--set-file`, `l`:
/// `--set-literal`, any other by its code point modulo 5); then assembles
/// the same arguments as the CLI does.
pub fn set_values(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut dest = Values::new();
    let mut opts = ValueOptions::default();
    let mut read = |path: &str| -> Result<serde_json::Value, String> {
        if path.ends_with(".missing") {
            Err(format!("open {path}: no such file or directory"))
        } else {
            Ok(serde_json::Value::String(format!("contents of {path}")))
        }
    };
    for line in text.split('\n').take(16) {
        let mut chars = line.chars();
        let Some(mode) = chars.next() else { continue };
        let arg = chars.as_str();
        let flag = match mode {
            's' => 0,
            'S' => 1,
            'j' => 2,
            'f' => 3,
            'l' => 4,
            other => u32::from(other) % 5,
        };
        let r = match flag {
            0 => {
                opts.values.push(arg.to_string());
                strvals::parse_into(arg, &mut dest)
            }
            1 => {
                opts.string_values.push(arg.to_string());
                strvals::parse_into_string(arg, &mut dest)
            }
            2 => {
                opts.json_values.push(arg.to_string());
                strvals::parse_json(arg, &mut dest)
            }
            3 => {
                opts.file_values.push(arg.to_string());
                strvals::parse_into_file(arg, &mut dest, &mut read)
            }
            _ => {
                opts.literal_values.push(arg.to_string());
                strvals::parse_literal_into(arg, &mut dest)
            }
        };
        if let Err(e) = r {
            assert!(!e.to_string().is_empty());
        }
    }
    if let Err(e) = opts.merge(&mut read) {
        assert!(!e.to_string().is_empty());
    }
    let _ = strvals::parse(&text);
}

/// Builds a `.tgz` from NUL-separated name and content pairs, below a `fuzz/` directory.
fn archive_of(data: &[u8]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    let mut it = data.split(|&b| b == 0);
    while let Some(name) = it.next() {
        let content = it.next().unwrap_or_default();
        let name = String::from_utf8_lossy(name);
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        // Names the tar crate refuses (`..`, absolute) are written raw into the header.
        if header.set_path(format!("fuzz/{name}")).is_err() {
            let raw = format!("fuzz/{name}");
            let bytes = raw.as_bytes();
            let n = bytes.len().min(100);
            header.as_old_mut().name[..n].copy_from_slice(&bytes[..n]);
        }
        header.set_cksum();
        if builder.append(&header, content).is_err() {
            break;
        }
    }
    gzip(&builder.into_inner().unwrap_or_default())
}

fn gzip(data: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(data).expect("writing to a Vec cannot fail");
    gz.finish().expect("writing to a Vec cannot fail")
}

/// Loads a chart from archive bytes and, when it loads, renders it. The first byte chooses
/// what the rest is: a `.tgz` as is, a tar stream (gzipped here), or NUL-separated file
/// names and contents (archived here), so mutations reach the loader's and the chart's
/// logic rather than stopping at the gzip checksum.
pub fn chart_archive(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let tgz = match mode % 3 {
        0 => rest.to_vec(),
        1 => gzip(rest),
        _ => archive_of(rest),
    };
    match load_archive(&tgz) {
        Ok(chart) => render_chart(chart, &Values::new()),
        Err(e) => assert!(!e.to_string().is_empty(), "empty load error"),
    }
    if mode % 3 == 2 {
        // The same files through the loader's classification alone.
        let mut files = Vec::new();
        let mut it = rest.split(|&b| b == 0);
        while let Some(name) = it.next() {
            files.push(BufferedFile {
                name: String::from_utf8_lossy(name).into_owned(),
                data: it.next().unwrap_or_default().to_vec(),
                mod_time: None,
            });
        }
        if let Err(e) = load_files(files) {
            assert!(!e.to_string().is_empty());
        }
    }
}

/// The post-renderers of the `postrender` target, read from its structured input.
struct PostRenderInput<'a> {
    /// Run as Helm v4 does over template files rather than over one stream.
    by_files: bool,
    manifest: &'a str,
    renderers: Vec<PostRenderer>,
}

/// A `|`-separated field list, missing fields empty.
fn fields<const N: usize>(line: &str) -> [String; N] {
    let mut out: [String; N] = std::array::from_fn(|_| String::new());
    for (slot, value) in out.iter_mut().zip(line.splitn(N, '|')) {
        *slot = value.to_string();
    }
    out
}

/// Reads the `postrender` input; see [`postrender`] for its layout.
fn postrender_input(text: &str) -> PostRenderInput<'_> {
    let mut chars = text.chars();
    let flags = chars.next().map_or(0, u32::from);
    let mut parts = chars.as_str().splitn(32, '\0');
    let manifest = parts.next().unwrap_or_default();
    let mut renderers = vec![PostRenderer {
        kustomize: Some(Kustomize::default()),
    }];
    for part in parts {
        let mut chars = part.chars();
        let kind = chars.next();
        let rest = chars.as_str();
        if matches!(kind, Some('R' | 'N' | 'S')) {
            match kind {
                Some('R') => renderers.push(PostRenderer {
                    kustomize: Some(Kustomize::default()),
                }),
                Some('N') => renderers.push(PostRenderer::default()),
                _ => match parse_post_renderers(rest) {
                    Ok(list) => renderers.extend(list),
                    Err(e) => assert!(!e.to_string().is_empty(), "empty spec error"),
                },
            }
            continue;
        }
        if renderers.last().is_none_or(|r| r.kustomize.is_none()) {
            renderers.push(PostRenderer {
                kustomize: Some(Kustomize::default()),
            });
        }
        let Some(k) = renderers.last_mut().and_then(|r| r.kustomize.as_mut()) else {
            continue;
        };
        match kind {
            Some('I') => {
                let [name, new_name, new_tag, digest] = fields::<4>(rest);
                k.images.push(Image {
                    name,
                    new_name,
                    new_tag,
                    digest,
                });
            }
            Some('P') => {
                let (line, patch) = rest.split_once('\n').unwrap_or((rest, ""));
                let target = (!line.is_empty()).then(|| {
                    let [
                        group,
                        version,
                        kind,
                        name,
                        namespace,
                        label_selector,
                        annotation_selector,
                    ] = fields::<7>(line);
                    Selector {
                        group,
                        version,
                        kind,
                        name,
                        namespace,
                        label_selector,
                        annotation_selector,
                    }
                });
                k.patches.push(Patch {
                    patch: patch.to_string(),
                    target,
                });
            }
            _ => k.patches.push(Patch {
                patch: rest.to_string(),
                target: None,
            }),
        }
    }
    PostRenderInput {
        by_files: flags & 1 == 1,
        manifest,
        renderers,
    }
}

/// Runs HelmRelease post-renderers (kustomize strategic merge and JSON 6902 patches with
/// target selectors, and images) over a manifest stream. The input is one flags character,
/// then NUL-separated parts: the manifest stream, then up to 30 entries, each chosen by its
/// first character:
/// - `R` starts another `kustomize` post-renderer (a first one is always there), `N` adds an
///   entry without `kustomize`;
/// - `P`: a patch; the rest of the line is its target
///   (`group|version|kind|name|namespace|labelSelector|annotationSelector`, none when empty),
///   the following lines the patch (strategic merge or JSON 6902, YAML or JSON);
/// - `I`: an image, `name|newName|newTag|digest`;
/// - `S`: a YAML list of `postRenderers` entries as in a HelmRelease, appended;
/// - anything else: a patch without target, the rest of the part.
///
/// With flag bit 0 the manifest is cut into template files at `\x01` characters and run as
/// Helm v4 runs post-renderers over a chart's files. Errors are fine; a success must be read
/// back as YAML, and the output of a build must not change through another empty build (it
/// is kustomize's canonical form).
pub fn postrender(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let input = postrender_input(&text);
    if input.by_files {
        let files: BTreeMap<String, String> = input
            .manifest
            .split('\x01')
            .enumerate()
            .map(|(i, f)| (format!("fuzz/templates/f{i}.yaml"), f.to_string()))
            .collect();
        match post_render_files(&files, &input.renderers) {
            Ok(out) => {
                for (name, content) in &out {
                    if let Err(e) = flotilla_yaml::from_str_all(content) {
                        panic!("post-rendered file {name} does not read back: {e}\n{content}");
                    }
                }
            }
            Err(e) => assert!(!e.to_string().is_empty(), "empty post-render error"),
        }
        return;
    }
    match post_render(input.manifest, &input.renderers) {
        Ok(out) => {
            if let Err(e) = flotilla_yaml::from_str_all(&out) {
                panic!("post-rendered output does not read back: {e}\n{out}");
            }
            let empty = [PostRenderer {
                kustomize: Some(Kustomize::default()),
            }];
            if input.renderers.iter().any(|r| r.kustomize.is_some())
                && let Ok(again) = post_render(&out, &empty)
            {
                assert_eq!(again, out, "an empty build changed a build's output");
            }
        }
        Err(e) => assert!(!e.to_string().is_empty(), "empty post-render error"),
    }
}

/// The plans the hub gave the fuzzed cluster: `a` and `b` sent, `c` not yet.
fn session_plans() -> Vec<flotilla_core::plan::ReleasePlan> {
    use flotilla_core::ids::{ChartDigest, PlanRevision};
    use flotilla_core::plan::{ChartArtifact, ReleasePlan};
    use flotilla_core::spec::HelmRelease;
    ["a", "b", "c"]
        .iter()
        .enumerate()
        .map(|(i, name)| {
            let hr = HelmRelease::from_value(json!({
                "apiVersion": "helm.toolkit.fluxcd.io/v2",
                "kind": "HelmRelease",
                "metadata": {"name": name, "namespace": "apps", "generation": 1},
                "spec": {"interval": "5m", "chartRef": {"kind": "OCIRepository", "name": "podinfo"}}
            }))
            .expect("a valid HelmRelease");
            let chart = ChartArtifact {
                name: "podinfo".into(),
                version: "6.5.3".into(),
                app_version: None,
                digest: ChartDigest::of_bytes(b"podinfo"),
                oci_digest: None,
            };
            ReleasePlan::from_helm_release(&hr, PlanRevision::new(i as u64 + 1), chart, json!({}))
                .expect("a plan")
        })
        .collect()
}

/// The hub's session handling of arbitrary agent messages: the input is a sequence of
/// length-delimited `AgentMessage`s, the first taken as the Hello (as the session reads
/// it), the rest applied to the cluster's mailbox as the session loop applies them
/// ([`flotilla_hub::session::inbound`]), with the status writer taking a report now and
/// then. What must hold: no panic, the session ends on a message it refuses, and nothing
/// grows past its bound (the report queue by the plans given, the plans held by the plans
/// given and the Hello's).
pub fn agent_messages(data: &[u8]) {
    use flotilla_core::agent::Command;
    use flotilla_hub::link::AgentLink as _;
    use flotilla_hub::reports::MAX_QUEUED_PER_OBJECT;
    use flotilla_hub::session::Mailbox;
    use flotilla_hub::session::inbound::{self, Inbound};
    use flotilla_proto::v1::{self, agent_message};
    use prost::Message as _;

    let (sink, mut reports) = flotilla_hub::link::report_channel();
    let cluster = flotilla_core::ids::ClusterId::new("fuzz").expect("a valid cluster name");
    let mailbox = Mailbox::new(cluster, sink.clone());
    let plans = session_plans();
    for plan in &plans {
        mailbox
            .send(Command::Upsert(Box::new(plan.clone())))
            .expect("an open mailbox");
    }
    mailbox.next_outgoing();
    mailbox.next_outgoing();
    let mut input = data;
    let mut hello_held = 0;
    let mut first = true;
    while !input.is_empty() {
        let Ok(message) = v1::AgentMessage::decode_length_delimited(&mut input) else {
            break;
        };
        if std::mem::take(&mut first) {
            let Some(agent_message::Kind::Hello(mut hello)) = message.kind else {
                // The session ends: the first message must be a Hello.
                return;
            };
            match inbound::hello(&mut hello) {
                Ok(state) => {
                    hello_held = state.held.len();
                    mailbox.resync(state.held, state.cached);
                    while mailbox.next_outgoing().is_some() {}
                }
                Err(e) => {
                    assert!(!e.to_string().is_empty());
                    return;
                }
            }
            continue;
        }
        match inbound::accept(&mailbox, message) {
            Ok(Inbound::Done | Inbound::Pong(_) | Inbound::Renew(_)) => {}
            Err(e) => {
                // The session ends with one sentence naming the field.
                assert!(!e.to_string().is_empty());
                break;
            }
        }
        assert!(
            sink.len() <= plans.len() * MAX_QUEUED_PER_OBJECT,
            "the report queue grew to {}",
            sink.len()
        );
        if input.len() % 3 == 0 {
            let _ = reports.try_recv();
        }
    }
    assert!(mailbox.held_count() <= plans.len() + hello_held);
}
