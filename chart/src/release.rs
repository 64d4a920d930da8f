//! The Helm release record (`pkg/release/v1`, Helm v4 JSON shape) and its storage encoding:
//! `base64(gzip(json))` in the `release` key of a `sh.helm.release.v1.<name>.v<N>` Secret of
//! type `helm.sh/release.v1`.
//!
//! JSON is written like Go's `encoding/json` (field order, omitempty/omitzero, HTML escaping,
//! float format). Decoding accepts records written by Helm v3 (`""` times) and v4, gzipped or
//! plain JSON. The gzip stream is valid and uses Go's header fields (no name, mtime 0, best
//! compression), but its deflate bytes are not Go's: readers do not care.

use std::collections::BTreeMap;
use std::io::{Read, Write};

use base64::Engine;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::chart::{Chart, File};
use crate::metadata::{Lock, Metadata};
use crate::time::GoTime;
use crate::values::Values;

macro_rules! string_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $variant:ident = $text:literal),* $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $($(#[$vm])* $variant,)*
            /// A value this version does not know (kept as written).
            Other(String),
        }
        impl $name {
            /// The string Helm stores.
            pub fn as_str(&self) -> &str {
                match self {
                    $($name::$variant => $text,)*
                    $name::Other(s) => s,
                }
            }
            /// Parses the stored string.
            pub fn parse(s: &str) -> Self {
                match s {
                    $($text => $name::$variant,)*
                    other => $name::Other(other.to_owned()),
                }
            }
        }
        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }
        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                Ok($name::parse(&String::deserialize(d)?))
            }
        }
    };
}

string_enum!(
    /// Release status (`pkg/release/common/status.go`).
    Status {
        /// unknown
        Unknown = "unknown",
        /// deployed
        Deployed = "deployed",
        /// uninstalled
        Uninstalled = "uninstalled",
        /// superseded
        Superseded = "superseded",
        /// failed
        Failed = "failed",
        /// uninstalling
        Uninstalling = "uninstalling",
        /// pending-install
        PendingInstall = "pending-install",
        /// pending-upgrade
        PendingUpgrade = "pending-upgrade",
        /// pending-rollback
        PendingRollback = "pending-rollback",
    }
);

impl Status {
    /// `IsPending`: one of the three pending states.
    pub fn is_pending(&self) -> bool {
        matches!(
            self,
            Status::PendingInstall | Status::PendingUpgrade | Status::PendingRollback
        )
    }
}

string_enum!(
    /// Hook events (`helm.sh/hook`).
    HookEvent {
        /// pre-install
        PreInstall = "pre-install",
        /// post-install
        PostInstall = "post-install",
        /// pre-delete
        PreDelete = "pre-delete",
        /// post-delete
        PostDelete = "post-delete",
        /// pre-upgrade
        PreUpgrade = "pre-upgrade",
        /// post-upgrade
        PostUpgrade = "post-upgrade",
        /// pre-rollback
        PreRollback = "pre-rollback",
        /// post-rollback
        PostRollback = "post-rollback",
        /// test
        Test = "test",
    }
);

string_enum!(
    /// Hook delete policies (`helm.sh/hook-delete-policy`).
    HookDeletePolicy {
        /// hook-succeeded
        HookSucceeded = "hook-succeeded",
        /// hook-failed
        HookFailed = "hook-failed",
        /// before-hook-creation
        BeforeHookCreation = "before-hook-creation",
    }
);

string_enum!(
    /// Hook output log policies (`helm.sh/hook-output-log-policy`).
    HookOutputLogPolicy {
        /// hook-succeeded
        OnSucceeded = "hook-succeeded",
        /// hook-failed
        OnFailed = "hook-failed",
    }
);

string_enum!(
    /// Phase of a hook's last run.
    HookPhase {
        /// Unknown
        Unknown = "Unknown",
        /// Running
        Running = "Running",
        /// Succeeded
        Succeeded = "Succeeded",
        /// Failed
        Failed = "Failed",
    }
);

/// Annotation naming hook events.
pub const HOOK_ANNOTATION: &str = "helm.sh/hook";
/// Annotation with the hook weight.
pub const HOOK_WEIGHT_ANNOTATION: &str = "helm.sh/hook-weight";
/// Annotation with delete policies.
pub const HOOK_DELETE_ANNOTATION: &str = "helm.sh/hook-delete-policy";
/// Annotation with output log policies.
pub const HOOK_OUTPUT_LOG_ANNOTATION: &str = "helm.sh/hook-output-log-policy";

fn is_zero_time(t: &GoTime) -> bool {
    t.is_zero()
}

fn zero_time() -> GoTime {
    GoTime::ZERO
}

/// Accepts a time, `""` (Helm v3's zero) or `null`.
fn de_time<'de, D: Deserializer<'de>>(d: D) -> Result<GoTime, D::Error> {
    let s: Option<String> = Option::deserialize(d)?;
    match s.as_deref() {
        None | Some("") => Ok(GoTime::ZERO),
        Some(s) => GoTime::parse_rfc3339(s).map_err(serde::de::Error::custom),
    }
}

/// Values decoded as Go decodes JSON into `map[string]interface{}`: every number a float64.
fn de_values<'de, D: Deserializer<'de>>(d: D) -> Result<Values, D::Error> {
    Ok(de_values_opt(d)?.unwrap_or_default())
}

fn de_values_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Values>, D::Error> {
    let v: Option<Values> = Option::deserialize(d)?;
    Ok(v.map(
        |m| match crate::strvals::json_numbers_as_floats(serde_json::Value::Object(m)) {
            serde_json::Value::Object(m) => m,
            _ => Values::new(),
        },
    ))
}

fn de_null_default<'de, D: Deserializer<'de>, T: Default + Deserialize<'de>>(
    d: D,
) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// `Info`: times omitted when zero (Helm v4).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Info {
    /// First deployment.
    #[serde(
        default = "zero_time",
        deserialize_with = "de_time",
        skip_serializing_if = "is_zero_time"
    )]
    pub first_deployed: GoTime,
    /// Last deployment.
    #[serde(
        default = "zero_time",
        deserialize_with = "de_time",
        skip_serializing_if = "is_zero_time"
    )]
    pub last_deployed: GoTime,
    /// Deletion time.
    #[serde(
        default = "zero_time",
        deserialize_with = "de_time",
        skip_serializing_if = "is_zero_time"
    )]
    pub deleted: GoTime,
    /// Description.
    #[serde(
        default,
        deserialize_with = "de_null_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub description: String,
    /// Status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Status>,
    /// Rendered NOTES.txt.
    #[serde(
        default,
        deserialize_with = "de_null_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub notes: String,
    /// Resources (not persisted by Helm's actions; kept as JSON when present).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<serde_json::Value>,
}

/// `HookExecution`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HookExecution {
    /// When the hook started.
    #[serde(
        default = "zero_time",
        deserialize_with = "de_time",
        skip_serializing_if = "is_zero_time"
    )]
    pub started_at: GoTime,
    /// When it completed.
    #[serde(
        default = "zero_time",
        deserialize_with = "de_time",
        skip_serializing_if = "is_zero_time"
    )]
    pub completed_at: GoTime,
    /// Phase (always written, `""` when unset).
    #[serde(default, with = "phase_or_empty")]
    pub phase: Option<HookPhase>,
}

mod phase_or_empty {
    use super::HookPhase;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(p: &Option<HookPhase>, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(p.as_ref().map_or("", HookPhase::as_str))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<HookPhase>, D::Error> {
        let s: Option<String> = Option::deserialize(d)?;
        Ok(s.filter(|s| !s.is_empty()).map(|s| HookPhase::parse(&s)))
    }
}

/// A hook.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Hook {
    /// metadata.name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Kind.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kind: String,
    /// Template path (`chart/templates/x.yaml`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub path: String,
    /// The manifest.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub manifest: String,
    /// Events.
    #[serde(
        default,
        deserialize_with = "de_null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub events: Vec<HookEvent>,
    /// Last run (always written).
    #[serde(default)]
    pub last_run: HookExecution,
    /// Weight.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub weight: i64,
    /// Delete policies.
    #[serde(
        default,
        deserialize_with = "de_null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub delete_policies: Vec<HookDeletePolicy>,
    /// Output log policies.
    #[serde(
        default,
        deserialize_with = "de_null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub output_log_policies: Vec<HookOutputLogPolicy>,
}

#[allow(clippy::trivially_copy_pass_by_ref)]
fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}

mod b64 {
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s: Option<String> = Option::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(s.unwrap_or_default())
            .map_err(serde::de::Error::custom)
    }

    pub mod opt {
        use super::*;

        pub fn serialize<S: Serializer>(v: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
            match v {
                Some(b) => super::serialize(b, s),
                None => s.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
            let s: Option<String> = Option::deserialize(d)?;
            s.map(|s| base64::engine::general_purpose::STANDARD.decode(s))
                .transpose()
                .map_err(serde::de::Error::custom)
        }
    }
}

/// A chart file in the record (`common.File`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordFile {
    /// Path in the chart.
    #[serde(default)]
    pub name: String,
    /// Contents (base64 in JSON).
    #[serde(default, with = "b64")]
    pub data: Vec<u8>,
    /// Modification time (omitted when zero).
    #[serde(
        default = "zero_time",
        deserialize_with = "de_time",
        skip_serializing_if = "is_zero_time"
    )]
    pub modtime: GoTime,
}

/// The chart stored in a release (`chart.Chart` without subcharts, which Helm does not
/// serialize).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RecordChart {
    /// Chart.yaml.
    #[serde(default)]
    pub metadata: Option<Metadata>,
    /// Chart.lock.
    #[serde(default)]
    pub lock: Option<Lock>,
    /// Templates (`null` when the chart has none).
    #[serde(default)]
    pub templates: Option<Vec<RecordFile>>,
    /// Chart default values after dependency processing.
    #[serde(default, deserialize_with = "de_values_opt")]
    pub values: Option<Values>,
    /// values.schema.json.
    #[serde(default, with = "b64::opt")]
    pub schema: Option<Vec<u8>>,
    /// Schema modification time (always written, zero when unknown).
    #[serde(default = "zero_time", deserialize_with = "de_time")]
    pub schemamodtime: GoTime,
    /// Other files.
    #[serde(default)]
    pub files: Option<Vec<RecordFile>>,
    /// Chart modification time (omitted when zero).
    #[serde(
        default = "zero_time",
        deserialize_with = "de_time",
        skip_serializing_if = "is_zero_time"
    )]
    pub modtime: GoTime,
}

fn record_files(files: &[File]) -> Option<Vec<RecordFile>> {
    if files.is_empty() {
        return None;
    }
    Some(
        files
            .iter()
            .map(|f| RecordFile {
                name: f.name.clone(),
                data: f.data.to_vec(),
                modtime: f.mod_time.unwrap_or(GoTime::ZERO),
            })
            .collect(),
    )
}

impl From<&Chart> for RecordChart {
    /// The record form of a (dependency-processed) chart, as Helm serializes `*chart.Chart`.
    fn from(c: &Chart) -> Self {
        RecordChart {
            metadata: Some(c.metadata.clone()),
            lock: c.lock.clone(),
            templates: record_files(&c.templates),
            values: c.values.clone(),
            schema: c.schema.clone(),
            schemamodtime: c.schema_mod_time.unwrap_or(GoTime::ZERO),
            files: record_files(&c.files),
            modtime: c.mod_time.unwrap_or(GoTime::ZERO),
        }
    }
}

fn chart_files(files: Option<&Vec<RecordFile>>) -> Vec<File> {
    files
        .into_iter()
        .flatten()
        .map(|f| File {
            name: f.name.clone(),
            data: f.data.as_slice().into(),
            mod_time: (!f.modtime.is_zero()).then_some(f.modtime),
        })
        .collect()
}

impl From<&RecordChart> for Chart {
    /// The chart a stored release describes (what rollback and `helm get` work from): no
    /// subcharts, since Helm does not store them; their defaults are in `values`.
    fn from(r: &RecordChart) -> Self {
        let mut c = Chart::new(r.metadata.clone().unwrap_or_default());
        c.lock = r.lock.clone();
        c.templates = chart_files(r.templates.as_ref());
        c.values = r.values.clone();
        c.schema = r.schema.clone();
        c.schema_mod_time = (!r.schemamodtime.is_zero()).then_some(r.schemamodtime);
        c.files = chart_files(r.files.as_ref());
        c.mod_time = (!r.modtime.is_zero()).then_some(r.modtime);
        c
    }
}

/// A release.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Release {
    /// Release name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Info.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info: Option<Info>,
    /// The chart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chart: Option<RecordChart>,
    /// User-supplied values (not coalesced).
    #[serde(
        default,
        deserialize_with = "de_values",
        skip_serializing_if = "serde_json::Map::is_empty"
    )]
    pub config: Values,
    /// Rendered non-hook manifests.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub manifest: String,
    /// Hooks.
    #[serde(
        default,
        deserialize_with = "de_null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub hooks: Vec<Hook>,
    /// Revision.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub version: i64,
    /// Namespace.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    /// User labels (stored only as Secret labels).
    #[serde(skip)]
    pub labels: BTreeMap<String, String>,
    /// `ssa` or `csa` (Helm v4; absent means client-side apply).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub apply_method: String,
}

/// A codec error.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// Not base64.
    #[error("illegal base64 data: {0}")]
    Base64(#[from] base64::DecodeError),
    /// gzip stream broken.
    #[error("gzip: {0}")]
    Gzip(std::io::Error),
    /// JSON does not fit a release.
    #[error("{0}")]
    Json(#[from] serde_json::Error),
    /// The record gunzips to more than [`MAX_DECODED_RELEASE`].
    #[error("the release record decompresses to more than {MAX_DECODED_RELEASE} bytes")]
    TooLarge,
}

/// The largest JSON a storage record may gunzip to (64 MiB). A record is at most a Secret's
/// 1 MiB of base64; Helm's own compress about ten to one, a gzip bomb a thousand to one.
pub const MAX_DECODED_RELEASE: u64 = 64 << 20;

/// The Secret `type` Helm uses.
pub const SECRET_TYPE: &str = "helm.sh/release.v1";
/// Labels Helm owns on storage objects.
pub const SYSTEM_LABELS: [&str; 6] = [
    "name",
    "owner",
    "status",
    "version",
    "createdAt",
    "modifiedAt",
];

/// `makeKey`: `sh.helm.release.v1.<name>.v<version>`.
pub fn secret_name(release: &str, version: i64) -> String {
    format!("sh.helm.release.v1.{release}.v{version}")
}

/// Whether a label key is one of Helm's system labels.
pub fn is_system_label(key: &str) -> bool {
    SYSTEM_LABELS.contains(&key)
}

/// User labels with Helm's system labels removed (what `Get` puts in `Release.labels`).
pub fn filter_system_labels(labels: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    labels
        .iter()
        .filter(|(k, _)| !is_system_label(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// When the storage object is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StorageOp {
    /// `Create`: adds `createdAt=<unix seconds>`.
    Create {
        /// Unix seconds.
        at: i64,
    },
    /// `Update`: adds `modifiedAt=<unix seconds>`.
    Update {
        /// Unix seconds.
        at: i64,
    },
}

/// A storage Secret's parts, ready for a Kubernetes client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseSecret {
    /// `sh.helm.release.v1.<name>.v<N>`.
    pub name: String,
    /// Labels: the release's user labels, then the system labels.
    pub labels: BTreeMap<String, String>,
    /// `helm.sh/release.v1`.
    pub secret_type: &'static str,
    /// The value of `data.release` before Kubernetes' own base64: `base64(gzip(json))`.
    pub release: String,
}

/// Helm's `newSecretsObject` plus the `createdAt`/`modifiedAt` label of Create/Update.
pub fn secret_for(rls: &Release, op: StorageOp) -> Result<ReleaseSecret, CodecError> {
    let mut labels = rls.labels.clone();
    labels.insert("name".into(), rls.name.clone());
    labels.insert("owner".into(), "helm".into());
    labels.insert(
        "status".into(),
        rls.info
            .as_ref()
            .and_then(|i| i.status.as_ref())
            .map_or("", Status::as_str)
            .to_owned(),
    );
    labels.insert("version".into(), rls.version.to_string());
    match op {
        StorageOp::Create { at } => labels.insert("createdAt".into(), at.to_string()),
        StorageOp::Update { at } => labels.insert("modifiedAt".into(), at.to_string()),
    };
    Ok(ReleaseSecret {
        name: secret_name(&rls.name, rls.version),
        labels,
        secret_type: SECRET_TYPE,
        release: encode_release(rls)?,
    })
}

/// `json.Marshal(release)`.
pub fn to_json(rls: &Release) -> Result<Vec<u8>, CodecError> {
    Ok(flotilla_yaml::gojson::to_vec(rls)?)
}

/// `encodeRelease`: `base64(gzip(json))`, gzip at best compression with Go's header
/// (no name, mtime 0).
pub fn encode_release(rls: &Release) -> Result<String, CodecError> {
    let json = to_json(rls)?;
    let mut gz = flate2::GzBuilder::new()
        .mtime(0)
        .operating_system(255)
        .write(Vec::new(), flate2::Compression::best());
    gz.write_all(&json).map_err(CodecError::Gzip)?;
    let bytes = gz.finish().map_err(CodecError::Gzip)?;
    Ok(base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// `decodeRelease`: base64, gunzip when the gzip magic is there, JSON.
pub fn decode_release(data: &str) -> Result<Release, CodecError> {
    let json = decode_to_json_bytes(data)?;
    Ok(serde_json::from_slice(&json)?)
}

/// The JSON bytes inside a storage value (base64, gunzipped when gzipped, at most
/// [`MAX_DECODED_RELEASE`] bytes).
pub fn decode_to_json_bytes(data: &str) -> Result<Vec<u8>, CodecError> {
    let b = base64::engine::general_purpose::STANDARD.decode(data.trim())?;
    if b.len() > 3 && b.starts_with(&[0x1f, 0x8b, 0x08]) {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&b[..])
            .take(MAX_DECODED_RELEASE + 1)
            .read_to_end(&mut out)
            .map_err(CodecError::Gzip)?;
        if out.len() as u64 > MAX_DECODED_RELEASE {
            return Err(CodecError::TooLarge);
        }
        return Ok(out);
    }
    if b.len() as u64 > MAX_DECODED_RELEASE {
        return Err(CodecError::TooLarge);
    }
    Ok(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimal_release_json_matches_go_shape() {
        let r = Release {
            name: "r".into(),
            info: Some(Info {
                first_deployed: GoTime::parse_rfc3339("2026-01-02T03:04:05.1Z").unwrap(),
                status: Some(Status::Deployed),
                ..Info::default()
            }),
            hooks: vec![Hook {
                name: "h".into(),
                events: vec![HookEvent::Test],
                ..Hook::default()
            }],
            version: 1,
            namespace: "default".into(),
            ..Release::default()
        };
        let json = String::from_utf8(to_json(&r).unwrap()).unwrap();
        assert_eq!(
            json,
            r#"{"name":"r","info":{"first_deployed":"2026-01-02T03:04:05.1Z","status":"deployed"},"hooks":[{"name":"h","events":["test"],"last_run":{"phase":""}}],"version":1,"namespace":"default"}"#
        );
        let enc = encode_release(&r).unwrap();
        let raw = base64::engine::general_purpose::STANDARD
            .decode(&enc)
            .unwrap();
        assert_eq!(&raw[..10], &[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 2, 255]);
        assert_eq!(decode_release(&enc).unwrap(), r);
        let plain = base64::engine::general_purpose::STANDARD.encode(json.as_bytes());
        assert_eq!(decode_release(&plain).unwrap(), r);
    }

    #[test]
    fn a_record_that_gunzips_past_the_bound_is_refused_without_reading_it_all() {
        // A gzip bomb: 1 GiB of JSON-ish spaces in about a megabyte of base64.
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        gz.write_all(b"{\"name\":\"r\"").unwrap();
        let block = vec![b' '; 1 << 20];
        for _ in 0..(MAX_DECODED_RELEASE >> 20) + 8 {
            gz.write_all(&block).unwrap();
        }
        gz.write_all(b"}").unwrap();
        let bytes = gz.finish().unwrap();
        let record = base64::engine::general_purpose::STANDARD.encode(bytes);
        assert!(record.len() < 1 << 20, "{} bytes", record.len());
        let err = decode_release(&record).expect_err("refused");
        assert!(matches!(err, CodecError::TooLarge), "{err}");
        // One just within the bound decodes.
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(b"{\"name\":\"r\"").unwrap();
        gz.write_all(&vec![b' '; 1 << 20]).unwrap();
        gz.write_all(b"}").unwrap();
        let record = base64::engine::general_purpose::STANDARD.encode(gz.finish().unwrap());
        assert_eq!(decode_release(&record).unwrap().name, "r");
    }

    #[test]
    fn nulls_written_by_go_decode() {
        let r: Release = serde_json::from_str(
            r#"{"name":"x","chart":{"metadata":{"name":"c","version":"1.0.0","maintainers":null,"sources":null,"annotations":null,"dependencies":null},"lock":null,"templates":null,"values":null,"schema":null,"files":null},"config":null,"hooks":null,"version":1}"#,
        )
        .unwrap();
        let c = r.chart.as_ref().unwrap();
        assert_eq!(c.metadata.as_ref().unwrap().name, "c");
        assert!(c.templates.is_none() && c.values.is_none() && c.schema.is_none());
        assert_eq!(
            String::from_utf8(to_json(&r).unwrap()).unwrap(),
            r#"{"name":"x","chart":{"metadata":{"name":"c","version":"1.0.0"},"lock":null,"templates":null,"values":null,"schema":null,"schemamodtime":"0001-01-01T00:00:00Z","files":null},"version":1}"#
        );
    }

    #[test]
    fn v3_empty_times_decode_as_zero() {
        let r: Release = serde_json::from_str(
            r#"{"name":"x","info":{"first_deployed":"","last_deployed":"2020-01-01T00:00:00Z","deleted":"","status":"superseded"},"hooks":[{"last_run":{"started_at":"","completed_at":"","phase":""}}]}"#,
        )
        .unwrap();
        let info = r.info.unwrap();
        assert!(info.first_deployed.is_zero());
        assert_eq!(info.status, Some(Status::Superseded));
        assert!(r.hooks[0].last_run.started_at.is_zero());
    }

    #[test]
    fn secret_helpers() {
        let mut r = Release {
            name: "myrel".into(),
            version: 3,
            info: Some(Info {
                status: Some(Status::Deployed),
                ..Info::default()
            }),
            ..Release::default()
        };
        r.labels.insert("team".into(), "payments".into());
        r.labels.insert("owner".into(), "me".into());
        let s = secret_for(&r, StorageOp::Update { at: 1_763_700_000 }).unwrap();
        assert_eq!(s.name, "sh.helm.release.v1.myrel.v3");
        assert_eq!(s.secret_type, "helm.sh/release.v1");
        let want: BTreeMap<String, String> = [
            ("modifiedAt", "1763700000"),
            ("name", "myrel"),
            ("owner", "helm"),
            ("status", "deployed"),
            ("team", "payments"),
            ("version", "3"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(s.labels, want);
        assert_eq!(
            filter_system_labels(&s.labels).keys().collect::<Vec<_>>(),
            vec!["team"]
        );
        assert!(Status::PendingUpgrade.is_pending());
        assert_eq!(Status::parse("weird"), Status::Other("weird".into()));
    }
}
