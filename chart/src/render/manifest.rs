//! Helm's manifest post-processing (`pkg/release/v1/util`, Helm v4.1): splitting rendered
//! files into YAML documents, reading each document's head, separating hooks from ordinary
//! manifests, and sorting both by kind in install order.

use std::collections::BTreeMap;

use crate::release::{Hook, HookDeletePolicy, HookEvent, HookOutputLogPolicy};

/// `helm.sh/hook`
pub const HOOK_ANNOTATION: &str = "helm.sh/hook";
/// `helm.sh/hook-weight`
pub const HOOK_WEIGHT_ANNOTATION: &str = "helm.sh/hook-weight";
/// `helm.sh/hook-delete-policy`
pub const HOOK_DELETE_ANNOTATION: &str = "helm.sh/hook-delete-policy";
/// `helm.sh/hook-output-log-policy`
pub const HOOK_OUTPUT_LOG_ANNOTATION: &str = "helm.sh/hook-output-log-policy";

/// Helm's `InstallOrder`: kinds earlier in the list are applied first.
pub const INSTALL_ORDER: &[&str] = &[
    "PriorityClass",
    "Namespace",
    "NetworkPolicy",
    "ResourceQuota",
    "LimitRange",
    "PodSecurityPolicy",
    "PodDisruptionBudget",
    "ServiceAccount",
    "Secret",
    "SecretList",
    "ConfigMap",
    "StorageClass",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "CustomResourceDefinition",
    "ClusterRole",
    "ClusterRoleList",
    "ClusterRoleBinding",
    "ClusterRoleBindingList",
    "Role",
    "RoleList",
    "RoleBinding",
    "RoleBindingList",
    "Service",
    "DaemonSet",
    "Pod",
    "ReplicationController",
    "ReplicaSet",
    "Deployment",
    "HorizontalPodAutoscaler",
    "StatefulSet",
    "Job",
    "CronJob",
    "IngressClass",
    "Ingress",
    "APIService",
    "MutatingWebhookConfiguration",
    "ValidatingWebhookConfiguration",
];

/// Helm's `UninstallOrder`.
pub const UNINSTALL_ORDER: &[&str] = &[
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "APIService",
    "Ingress",
    "IngressClass",
    "Service",
    "CronJob",
    "Job",
    "StatefulSet",
    "HorizontalPodAutoscaler",
    "Deployment",
    "ReplicaSet",
    "ReplicationController",
    "Pod",
    "DaemonSet",
    "RoleBindingList",
    "RoleBinding",
    "RoleList",
    "Role",
    "ClusterRoleBindingList",
    "ClusterRoleBinding",
    "ClusterRoleList",
    "ClusterRole",
    "CustomResourceDefinition",
    "PersistentVolumeClaim",
    "PersistentVolume",
    "StorageClass",
    "ConfigMap",
    "SecretList",
    "Secret",
    "ServiceAccount",
    "PodDisruptionBudget",
    "PodSecurityPolicy",
    "LimitRange",
    "ResourceQuota",
    "NetworkPolicy",
    "Namespace",
    "PriorityClass",
];

/// Go's `\s`.
fn is_go_space(b: u8) -> bool {
    matches!(b, b'\t' | b'\n' | b'\x0c' | b'\r' | b' ')
}

/// The matches of Helm's separator `(?:^|\s*\n)---\s*` (Go, leftmost-first, `^` only at
/// the start of the text), left to right: a `---` at the very start or right after a
/// newline, with the whitespace before that newline and all whitespace after the dashes.
/// A search resumes where the previous match ended, so a `---` whose newline that match
/// consumed is not a separator.
fn separators(text: &str) -> Vec<std::ops::Range<usize>> {
    separators_in(text.as_bytes())
}

/// [`separators`] of bytes (the pattern is ASCII: the same matches whether or not the text
/// is UTF-8).
fn separators_in(b: &[u8]) -> Vec<std::ops::Range<usize>> {
    let ws_after = |mut i: usize| {
        while b.get(i).is_some_and(|&c| is_go_space(c)) {
            i += 1;
        }
        i
    };
    let mut found = Vec::new();
    let mut from = 0;
    if b.starts_with(b"---") {
        from = ws_after(3);
        found.push(0..from);
    }
    let finder = memchr::memmem::Finder::new(b"\n---");
    while let Some(at) = finder.find(&b[from..]) {
        let newline = from + at;
        let mut start = newline;
        while start > from && is_go_space(b[start - 1]) {
            start -= 1;
        }
        from = ws_after(newline + 4);
        found.push(start..from);
    }
    found
}

/// `SplitManifests` (Helm v3 and v4.0–4.1): documents split on `---` lines, the input and
/// every document trimmed, empty pieces dropped. Returned in input order.
pub fn split_manifests(big_file: &str) -> Vec<String> {
    split_manifest_slices(big_file)
        .into_iter()
        .map(str::to_string)
        .collect()
}

/// [`split_manifests`] without copying: the documents as slices of `big_file`.
pub fn split_manifest_slices(big_file: &str) -> Vec<&str> {
    let trimmed = big_file.trim();
    let mut pieces = Vec::new();
    let mut last = 0;
    for m in separators(trimmed) {
        pieces.push(&trimmed[last..m.start]);
        last = m.end;
    }
    pieces.push(&trimmed[last..]);
    // Helm checks for emptiness before trimming, so a blank piece stays (as "").
    pieces
        .into_iter()
        .filter(|p| !p.is_empty())
        .map(str::trim)
        .collect()
}

/// `SimpleHead`: what Helm reads of each document.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SimpleHead {
    /// `apiVersion`
    pub version: String,
    /// `kind`
    pub kind: String,
    /// `metadata`, when present and not null.
    pub metadata: Option<HeadMetadata>,
}

/// `SimpleHead.Metadata`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HeadMetadata {
    /// `metadata.name`
    pub name: String,
    /// `metadata.annotations` (`None` when absent or null).
    pub annotations: Option<BTreeMap<String, String>>,
}

fn json_kind(v: &flotilla_yaml::Value) -> &'static str {
    use flotilla_yaml::Value as Y;
    match v {
        Y::Seq(_) => "array",
        Y::Map(_) => "object",
        Y::String(_) | Y::Bytes(_) => "string",
        Y::Bool(_) => "bool",
        _ => "number",
    }
}

fn unmarshal_error(kind: &str, field: &str, ty: &str) -> String {
    format!(
        "error unmarshaling JSON: while decoding JSON: json: cannot unmarshal {kind} into Go struct field {field} of type {ty}"
    )
}

/// A YAML scalar read into a Go `string` field by `sigs.k8s.io/yaml` (numbers and bools are
/// converted to their text).
fn string_field(v: Option<&flotilla_yaml::Value>, field: &str) -> Result<String, String> {
    use flotilla_yaml::Value as Y;
    Ok(match v {
        None | Some(Y::Null) => String::new(),
        Some(Y::String(s)) => s.clone(),
        Some(Y::Bytes(b)) => String::from_utf8_lossy(b).into_owned(),
        Some(Y::Bool(b)) => b.to_string(),
        Some(Y::Int(i)) => i.to_string(),
        Some(Y::Uint(u)) => u.to_string(),
        Some(Y::Float(f)) => {
            // strconv.FormatFloat(f, 'g', -1, 32): the shortest float32 digits.
            let short: f64 = format!("{:e}", *f as f32).parse().unwrap_or(*f);
            flotilla_gotmpl::gofmt::format_float(short, 'g', None)
        }
        Some(other) => return Err(unmarshal_error(json_kind(other), field, "string")),
    })
}

fn get<'a>(m: &'a flotilla_yaml::Mapping, key: &str) -> Option<&'a flotilla_yaml::Value> {
    m.get_str(key)
}

/// Reads a document's head as `yaml.Unmarshal(doc, &SimpleHead{})` does; the error is
/// Helm's text (without the `YAML parse error on FILE: ` prefix).
pub fn parse_head(doc: &str) -> Result<SimpleHead, String> {
    use flotilla_yaml::Value as Y;
    let v = flotilla_yaml::from_str_keys(doc, &["apiVersion", "kind", "metadata"])
        .map_err(|e| format!("error converting YAML to JSON: {e}"))?;
    let m = match &v {
        Y::Null => return Ok(SimpleHead::default()),
        Y::Map(m) => m,
        other => {
            return Err(format!(
                "error unmarshaling JSON: while decoding JSON: json: cannot unmarshal {} into Go value of type util.SimpleHead",
                json_kind(other)
            ));
        }
    };
    let mut head = SimpleHead {
        version: string_field(get(m, "apiVersion"), "SimpleHead.apiVersion")?,
        kind: string_field(get(m, "kind"), "SimpleHead.kind")?,
        metadata: None,
    };
    let md_type = "struct { Name string \"json:\\\"name\\\"\"; Annotations map[string]string \"json:\\\"annotations\\\"\" }";
    match get(m, "metadata") {
        None | Some(Y::Null) => {}
        Some(Y::Map(md)) => {
            let name = string_field(get(md, "name"), "SimpleHead.metadata.name")?;
            let annotations = match get(md, "annotations") {
                None | Some(Y::Null) => None,
                Some(Y::Map(a)) => {
                    let mut out = BTreeMap::new();
                    for (k, v) in a.iter() {
                        let key = string_field(Some(k), "SimpleHead.metadata.annotations")
                            .unwrap_or_default();
                        out.insert(
                            key,
                            string_field(Some(v), "SimpleHead.metadata.annotations")?,
                        );
                    }
                    Some(out)
                }
                Some(other) => {
                    return Err(unmarshal_error(
                        json_kind(other),
                        "SimpleHead.metadata.annotations",
                        "map[string]string",
                    ));
                }
            };
            head.metadata = Some(HeadMetadata { name, annotations });
        }
        Some(other) => {
            return Err(unmarshal_error(
                json_kind(other),
                "SimpleHead.metadata",
                md_type,
            ));
        }
    }
    Ok(head)
}

/// An ordinary (non-hook) manifest: one document of one rendered file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// The template path it came from.
    pub name: String,
    /// The document text (trimmed).
    pub content: String,
    /// Its head.
    pub head: SimpleHead,
}

/// What [`sort_manifests`] found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SortedManifests {
    /// Hooks, sorted by kind (install order), otherwise in file and document order.
    pub hooks: Vec<Hook>,
    /// Ordinary manifests, sorted by kind (install order), otherwise in file and document
    /// order.
    pub manifests: Vec<Manifest>,
    /// Messages Helm logs while sorting (`skipping unknown hooks`), as `slog` prints them.
    pub warnings: Vec<String>,
}

/// A manifest could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("YAML parse error on {path}: {message}")]
pub struct SortError {
    /// The template path.
    pub path: String,
    /// The parser's message.
    pub message: String,
}

fn hook_event(s: &str) -> Option<HookEvent> {
    let e = match s {
        "pre-install" | "post-install" | "pre-delete" | "post-delete" | "pre-upgrade"
        | "post-upgrade" | "pre-rollback" | "post-rollback" | "test" => HookEvent::parse(s),
        "test-success" => HookEvent::parse("test"),
        _ => return None,
    };
    Some(e)
}

/// `slog`'s text form of a value: quoted when it needs to be.
pub(crate) fn slog_value(s: &str) -> String {
    let needs = s.is_empty()
        || s.chars()
            .any(|c| c == ' ' || c == '=' || c == '"' || !flotilla_gotmpl::gofmt::is_print(c));
    if needs {
        flotilla_gotmpl::gofmt::quote(s)
    } else {
        s.to_string()
    }
}

/// The documents of a rendered file that is not UTF-8, as [`split_manifest_slices`] cuts
/// them.
fn split_manifest_bytes(big_file: &[u8]) -> Vec<&[u8]> {
    let trimmed = big_file.trim_ascii();
    let mut pieces = Vec::new();
    let mut last = 0;
    for m in separators_in(trimmed) {
        pieces.push(&trimmed[last..m.start]);
        last = m.end;
    }
    pieces.push(&trimmed[last..]);
    pieces
        .into_iter()
        .filter(|p| !p.is_empty())
        .map(<[u8]>::trim_ascii)
        .collect()
}

/// The error go-yaml's reader (`yaml_parser_update_buffer`) stops with on this input, if
/// any: malformed UTF-8, or a character YAML does not allow. It reads one character after
/// the other, so the first problem in the input is the one reported.
pub fn yaml_reader_problem(input: &[u8]) -> Option<&'static str> {
    let mut i = 0;
    while i < input.len() {
        let lead = input[i];
        let width = match lead {
            _ if lead & 0x80 == 0 => 1,
            _ if lead & 0xE0 == 0xC0 => 2,
            _ if lead & 0xF0 == 0xE0 => 3,
            _ if lead & 0xF8 == 0xF0 => 4,
            _ => return Some("invalid leading UTF-8 octet"),
        };
        if i + width > input.len() {
            return Some("incomplete UTF-8 octet sequence");
        }
        let mut value = u32::from(match width {
            1 => lead & 0x7F,
            2 => lead & 0x1F,
            3 => lead & 0x0F,
            _ => lead & 0x07,
        });
        for &trailing in &input[i + 1..i + width] {
            if trailing & 0xC0 != 0x80 {
                return Some("invalid trailing UTF-8 octet");
            }
            value = (value << 6) | u32::from(trailing & 0x3F);
        }
        let shortest = match width {
            1 => true,
            2 => value >= 0x80,
            3 => value >= 0x800,
            _ => value >= 0x10000,
        };
        if !shortest {
            return Some("invalid length of a UTF-8 sequence");
        }
        if (0xD800..=0xDFFF).contains(&value) || value > 0x10_FFFF {
            return Some("invalid Unicode character");
        }
        let allowed = matches!(value, 0x09 | 0x0A | 0x0D | 0x20..=0x7E | 0x85 | 0xA0..=0xD7FF | 0xE000..=0xFFFD | 0x10000..=0x10_FFFF);
        if !allowed {
            return Some("control characters are not allowed");
        }
        i += width;
    }
    None
}

/// Helm fails on a rendered manifest that is not UTF-8 when it reads the document's head
/// ([`sort_manifests`]), which here sees the text with U+FFFD instead. `not_utf8` holds the
/// bytes of those files: the error Helm reports, if one of their documents is the first
/// that cannot be read, in [`sort_manifests`]' order (files by path, partials and
/// `NOTES.txt` skipped). A document before it that [`parse_head`] rejects is left for
/// [`sort_manifests`] to report.
pub fn check_not_utf8(
    files: &BTreeMap<String, String>,
    not_utf8: &BTreeMap<String, Vec<u8>>,
) -> Result<(), SortError> {
    let Some(last) = not_utf8.keys().next_back() else {
        return Ok(());
    };
    for (path, content) in files.range::<String, _>(..=last.clone()) {
        let base = path.rsplit('/').next().unwrap_or(path);
        if base.starts_with('_') || base.ends_with("NOTES.txt") || content.trim().is_empty() {
            continue;
        }
        let Some(raw) = not_utf8.get(path) else {
            if split_manifest_slices(content)
                .iter()
                .any(|doc| parse_head(doc).is_err())
            {
                return Ok(());
            }
            continue;
        };
        for doc in split_manifest_bytes(raw) {
            let problem = match std::str::from_utf8(doc) {
                Ok(text) => match parse_head(text) {
                    Ok(_) => continue,
                    Err(_) => return Ok(()),
                },
                Err(_) => yaml_reader_problem(doc).unwrap_or("invalid leading UTF-8 octet"),
            };
            return Err(SortError {
                path: path.clone(),
                message: format!("error converting YAML to JSON: yaml: {problem}"),
            });
        }
    }
    Ok(())
}

/// `SortManifests(files, InstallOrder)`: files in path order, partials and blank files
/// skipped, each split into documents; documents with a `helm.sh/hook` annotation become
/// hooks (documents naming an unknown hook event are dropped), the rest manifests.
pub fn sort_manifests(
    files: &BTreeMap<String, String>,
    order: &[&str],
) -> Result<SortedManifests, SortError> {
    let mut result = SortedManifests::default();
    for (path, content) in files {
        let base = path.rsplit('/').next().unwrap_or(path);
        if base.starts_with('_') || content.trim().is_empty() {
            continue;
        }
        for doc in split_manifests(content) {
            let head = parse_head(&doc).map_err(|message| SortError {
                path: path.clone(),
                message,
            })?;
            let annotations = head
                .metadata
                .as_ref()
                .and_then(|m| m.annotations.as_ref())
                .filter(|a| !a.is_empty());
            let Some(hook_types) = annotations.and_then(|a| a.get(HOOK_ANNOTATION)).cloned() else {
                result.manifests.push(Manifest {
                    name: path.clone(),
                    content: doc,
                    head,
                });
                continue;
            };
            let annotations = annotations.cloned().unwrap_or_default();
            let mut events = Vec::new();
            let mut unknown = false;
            for t in hook_types.split(',') {
                match hook_event(&t.trim().to_lowercase()) {
                    Some(e) => events.push(e),
                    None => {
                        unknown = true;
                        break;
                    }
                }
            }
            if unknown {
                result.warnings.push(format!(
                    "level=INFO msg=\"skipping unknown hooks\" hookTypes={}",
                    slog_value(&hook_types)
                ));
                continue;
            }
            let list = |key: &str| -> Vec<String> {
                annotations
                    .get(key)
                    .map(|v| v.split(',').map(|p| p.trim().to_lowercase()).collect())
                    .unwrap_or_default()
            };
            let metadata = head.metadata.clone().unwrap_or_default();
            result.hooks.push(Hook {
                name: metadata.name,
                kind: head.kind.clone(),
                path: path.clone(),
                manifest: doc,
                events,
                weight: annotations
                    .get(HOOK_WEIGHT_ANNOTATION)
                    .and_then(|w| go_atoi(w))
                    .unwrap_or(0),
                delete_policies: list(HOOK_DELETE_ANNOTATION)
                    .iter()
                    .map(|p| HookDeletePolicy::parse(p))
                    .collect(),
                output_log_policies: list(HOOK_OUTPUT_LOG_ANNOTATION)
                    .iter()
                    .map(|p| HookOutputLogPolicy::parse(p))
                    .collect(),
                ..Hook::default()
            });
        }
    }
    sort_by_kind(&mut result.hooks, |h| &h.kind, order);
    sort_by_kind(&mut result.manifests, |m| &m.head.kind, order);
    Ok(result)
}

/// A stable sort by [`kind_cmp`], each item's place in `order` looked up once.
fn sort_by_kind<T>(items: &mut Vec<T>, kind: impl Fn(&T) -> &str, order: &[&str]) {
    use std::cmp::Ordering;
    let ranks: Vec<Option<usize>> = items
        .iter()
        .map(|t| order.iter().position(|k| *k == kind(t)))
        .collect();
    let mut sorted: Vec<usize> = (0..items.len()).collect();
    sorted.sort_by(|&a, &b| match (ranks[a], ranks[b]) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => kind(&items[a]).cmp(kind(&items[b])),
    });
    let mut slots: Vec<Option<T>> = items.drain(..).map(Some).collect();
    items.extend(
        sorted
            .into_iter()
            .map(|i| slots[i].take().expect("each index comes once")),
    );
}

/// `strconv.Atoi`: optional sign, decimal digits, within `int64`.
fn go_atoi(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// `lessByKind` as an ordering: known kinds by their position, unknown kinds after them in
/// alphabetical order.
pub fn kind_cmp(a: &str, b: &str, order: &[&str]) -> std::cmp::Ordering {
    use std::cmp::Ordering;
    let pa = order.iter().position(|k| *k == a);
    let pb = order.iter().position(|k| *k == b);
    match (pa, pb) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_yaml_reader_reports_the_first_problem_as_go_yaml_does() {
        let cases: [(&[u8], Option<&str>); 9] = [
            (b"a: b\n", None),
            ("a: \u{e9}\u{fffd}\u{1F600}\n".as_bytes(), None),
            (b"a: \xff", Some("invalid leading UTF-8 octet")),
            (b"a: \x80", Some("invalid leading UTF-8 octet")),
            (b"a: \xc3", Some("incomplete UTF-8 octet sequence")),
            (b"a: \xc3x", Some("invalid trailing UTF-8 octet")),
            (b"a: \xc0\x80", Some("invalid length of a UTF-8 sequence")),
            (b"a: \xed\xa0\x80", Some("invalid Unicode character")),
            // In input order: the control character comes before the bad byte.
            (b"\x1f\x8b", Some("control characters are not allowed")),
        ];
        for (input, want) in cases {
            assert_eq!(yaml_reader_problem(input), want, "{input:?}");
        }
    }

    #[test]
    fn a_rendered_file_that_is_not_utf8_fails_where_helm_reads_it() {
        let raw = b"a: 1\n---\nkind: ConfigMap\ndata: \xff\n".to_vec();
        let text = String::from_utf8_lossy(&raw).into_owned();
        let not_utf8 = BTreeMap::from([("c/templates/b.yaml".to_string(), raw)]);
        let mut files = BTreeMap::from([
            ("c/templates/a.yaml".to_string(), "kind: A\n".to_string()),
            ("c/templates/b.yaml".to_string(), text),
        ]);
        let err = check_not_utf8(&files, &not_utf8).expect_err("fails");
        assert_eq!(
            err.to_string(),
            "YAML parse error on c/templates/b.yaml: error converting YAML to JSON: yaml: \
             invalid leading UTF-8 octet"
        );
        // A file before it that helm cannot read either is reported by the sort instead.
        files.insert("c/templates/a.yaml".to_string(), "a: [".to_string());
        assert!(check_not_utf8(&files, &not_utf8).is_ok());
        assert!(sort_manifests(&files, INSTALL_ORDER).is_err());
    }

    /// The hand-written separator search against Helm's pattern (compiled here with the
    /// `regex` crate, leftmost-first as Go's) on texts made of the pieces that matter.
    #[test]
    fn separators_are_the_matches_of_helms_pattern() {
        let sep = regex::Regex::new(r"(?:^|[\t\n\x0C\r ]*\n)---[\t\n\x0C\r ]*")
            .expect("Helm's separator");
        let pieces = [
            "---", "-", "--", "\n", "\n", " ", "\t", "\r", "\x0c", "\x0b", "a", "a: 1", "#",
        ];
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..50_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let len = (state % 12) as usize;
            let mut text = String::new();
            let mut r = state;
            for _ in 0..len {
                r = r.rotate_left(5).wrapping_mul(0x2545_f491_4f6c_dd1d);
                text.push_str(pieces[(r >> 33) as usize % pieces.len()]);
            }
            let want: Vec<_> = sep.find_iter(&text).map(|m| m.range()).collect();
            assert_eq!(separators(&text), want, "{text:?}");
        }
    }

    #[test]
    fn split_trims_documents_and_drops_empty_ones() {
        let docs = split_manifests("\n---\na: 1\n---   \n\nb: 2\n  \n---\n");
        assert_eq!(docs, vec!["a: 1".to_string(), "b: 2".to_string()]);
        // A `---` right after a separator stays in the document, as in Helm.
        assert_eq!(split_manifests("a\n---\n---\nb"), vec!["a", "---\nb"]);
    }

    #[test]
    fn heads_stringify_scalars_and_reject_non_maps() {
        let h = parse_head("apiVersion: v1\nkind: Pod\nmetadata:\n  name: 5\n  annotations:\n    helm.sh/hook-weight: 3\n").expect("head");
        let md = h.metadata.expect("metadata");
        assert_eq!(md.name, "5");
        assert_eq!(
            md.annotations.expect("annotations")["helm.sh/hook-weight"],
            "3"
        );
        assert_eq!(
            parse_head("- a").unwrap_err(),
            "error unmarshaling JSON: while decoding JSON: json: cannot unmarshal array into Go value of type util.SimpleHead"
        );
    }

    #[test]
    fn hooks_are_split_out_and_unknown_hooks_dropped() {
        let mut files = BTreeMap::new();
        files.insert(
            "c/templates/a.yaml".to_string(),
            "kind: Job\nmetadata:\n  name: j\n  annotations:\n    helm.sh/hook: pre-install, Post-Upgrade\n    helm.sh/hook-weight: \"-5\"\n---\nkind: Pod\nmetadata:\n  name: p\n  annotations:\n    helm.sh/hook: bogus\n---\nkind: Deployment\n---\nkind: Service\n".to_string(),
        );
        files.insert("c/templates/_h.tpl".to_string(), "kind: X".to_string());
        let r = sort_manifests(&files, INSTALL_ORDER).expect("sorts");
        assert_eq!(r.hooks.len(), 1);
        assert_eq!(r.hooks[0].weight, -5);
        assert_eq!(r.hooks[0].events.len(), 2);
        let kinds: Vec<_> = r.manifests.iter().map(|m| m.head.kind.as_str()).collect();
        assert_eq!(kinds, vec!["Service", "Deployment"]);
        assert_eq!(
            r.warnings,
            vec!["level=INFO msg=\"skipping unknown hooks\" hookTypes=bogus".to_string()]
        );
    }

    #[test]
    fn sorting_by_kind_is_stable_and_agrees_with_kind_cmp() {
        let kinds = [
            "Zed",
            "Service",
            "Alpha",
            "Namespace",
            "Service",
            "Zed",
            "Job",
            "Alpha",
            "Secret",
        ];
        let mut items: Vec<(usize, &str)> = kinds.iter().copied().enumerate().collect();
        let mut want = items.clone();
        want.sort_by(|a, b| kind_cmp(a.1, b.1, INSTALL_ORDER));
        sort_by_kind(&mut items, |t| t.1, INSTALL_ORDER);
        assert_eq!(items, want);
        assert_eq!(
            items.iter().map(|t| t.0).collect::<Vec<_>>(),
            vec![3, 8, 1, 4, 6, 2, 7, 0, 5]
        );
    }

    #[test]
    fn unknown_kinds_sort_last_alphabetically() {
        let mut kinds = vec!["Zed", "Service", "Alpha", "Namespace"];
        kinds.sort_by(|a, b| kind_cmp(a, b, INSTALL_ORDER));
        assert_eq!(kinds, vec!["Namespace", "Service", "Alpha", "Zed"]);
    }
}
