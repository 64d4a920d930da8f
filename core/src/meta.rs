//! Object metadata, timestamps and Kubernetes-style conditions.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Why a timestamp was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid timestamp {0:?}: expected RFC 3339, e.g. \"2023-12-04T14:17:47Z\"")]
pub struct TimestampError(pub String);

/// An RFC 3339 timestamp as Kubernetes writes it (`metav1.Time`), kept as text.
///
/// This crate does no clock arithmetic: the caller supplies "now", and timestamps are only
/// compared for equality and carried through.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Timestamp(String);

impl Timestamp {
    /// Validates the shape `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`.
    pub fn new(value: impl Into<String>) -> Result<Self, TimestampError> {
        let value = value.into();
        if is_rfc3339(&value) {
            Ok(Self(value))
        } else {
            Err(TimestampError(value))
        }
    }

    /// The text form.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The form `metav1.Time` writes: UTC, whole seconds (`2006-01-02T15:04:05Z`).
    pub fn to_kubernetes(&self) -> Timestamp {
        Timestamp::from_unix_seconds(self.unix_seconds())
    }

    /// Whole seconds since 1970-01-01T00:00:00Z (the fraction dropped, the offset applied).
    pub fn unix_seconds(&self) -> i64 {
        let b = self.0.as_bytes();
        let num = |r: std::ops::Range<usize>| -> i64 {
            self.0.get(r).and_then(|s| s.parse().ok()).unwrap_or(0)
        };
        let (y, mo, d) = (num(0..4), num(5..7), num(8..10));
        let (h, mi, sec) = (num(11..13), num(14..16), num(17..19));
        // The offset, after the optional fraction.
        let mut i = 19;
        while i < b.len() && !matches!(b[i], b'Z' | b'z' | b'+' | b'-') {
            i += 1;
        }
        let offset_secs = match b.get(i) {
            Some(b'+') | Some(b'-') => {
                let sign = if b[i] == b'-' { -1 } else { 1 };
                sign * (num(i + 1..i + 3) * 3600 + num(i + 4..i + 6) * 60)
            }
            _ => 0,
        };
        let days = days_from_civil(y, mo, d);
        days * 86_400 + h * 3600 + mi * 60 + sec - offset_secs
    }

    /// The timestamp `secs` seconds after 1970-01-01T00:00:00Z, in the form `metav1.Time`
    /// writes (`2006-01-02T15:04:05Z`).
    pub fn from_unix_seconds(secs: i64) -> Timestamp {
        let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
        let (y, mo, d) = civil_from_days(days);
        Timestamp(format!(
            "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}Z",
            rem / 3600,
            rem % 3600 / 60,
            rem % 60
        ))
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day count since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (
        if m <= 2 {
            yoe + era * 400 + 1
        } else {
            yoe + era * 400
        },
        m,
        d,
    )
}

fn is_rfc3339(s: &str) -> bool {
    let b = s.as_bytes();
    let digits =
        |r: std::ops::Range<usize>| b.get(r).is_some_and(|x| x.iter().all(u8::is_ascii_digit));
    if b.len() < 20
        || !digits(0..4)
        || b[4] != b'-'
        || !digits(5..7)
        || b[7] != b'-'
        || !digits(8..10)
        || !(b[10] == b'T' || b[10] == b't')
        || !digits(11..13)
        || b[13] != b':'
        || !digits(14..16)
        || b[16] != b':'
        || !digits(17..19)
    {
        return false;
    }
    let mut i = 19;
    if b[i] == b'.' {
        i += 1;
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return false;
        }
    }
    match b.get(i) {
        Some(b'Z') | Some(b'z') => i + 1 == b.len(),
        Some(b'+') | Some(b'-') => {
            i + 6 == b.len() && digits(i + 1..i + 3) && b[i + 3] == b':' && digits(i + 4..i + 6)
        }
        _ => false,
    }
}

/// An RFC 3339 date-time string, as `metav1.Time` is in every CRD.
#[cfg(feature = "schema")]
impl schemars::JsonSchema for Timestamp {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Timestamp".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({"type": "string", "format": "date-time"})
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for Timestamp {
    type Error = TimestampError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::new(s)
    }
}

impl From<Timestamp> for String {
    fn from(t: Timestamp) -> String {
        t.0
    }
}

/// The subset of `metav1.ObjectMeta` the hub and the state machine read.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    /// Object name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Object namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Object UID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Spec generation, bumped by the API server on every spec change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// Resource version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<String>,
    /// Labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations (carry the `reconcile.fluxcd.io/*` request tokens).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Finalizers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub finalizers: Vec<String>,
    /// Deletion timestamp, set when the object is being deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deletion_timestamp: Option<Timestamp>,
    /// Creation timestamp.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timestamp: Option<Timestamp>,
}

/// The status of a condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ConditionStatus {
    /// `"True"`.
    True,
    /// `"False"`.
    False,
    /// `"Unknown"`.
    Unknown,
}

/// A `metav1.Condition`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// Condition type, e.g. `Ready`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: ConditionStatus,
    /// The generation the condition was set for.
    #[serde(default, skip_serializing_if = "is_zero_i64")]
    pub observed_generation: i64,
    /// When the status last changed.
    pub last_transition_time: Timestamp,
    /// CamelCase reason.
    pub reason: String,
    /// Human-readable message.
    #[serde(default)]
    pub message: String,
}

/// The schema controller-gen writes for `metav1.Condition`, validation included.
#[cfg(feature = "schema")]
impl schemars::JsonSchema for Condition {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Condition".into()
    }

    fn inline_schema() -> bool {
        true
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "Condition contains details for one aspect of the current state of this API Resource.",
            "type": "object",
            "properties": {
                "lastTransitionTime": {
                    "description": "lastTransitionTime is the last time the condition transitioned from one status to another.",
                    "type": "string",
                    "format": "date-time"
                },
                "message": {
                    "description": "message is a human readable message indicating details about the transition.",
                    "type": "string",
                    "maxLength": MAX_CONDITION_MESSAGE_LEN
                },
                "observedGeneration": {
                    "description": "observedGeneration is the .metadata.generation that the condition was set based upon.",
                    "type": "integer",
                    "format": "int64",
                    "minimum": 0
                },
                "reason": {
                    "description": "reason contains a programmatic identifier indicating the reason for the condition's last transition.",
                    "type": "string",
                    "maxLength": 1024,
                    "minLength": 1,
                    "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"
                },
                "status": {
                    "description": "status of the condition, one of True, False, Unknown.",
                    "type": "string",
                    "enum": ["True", "False", "Unknown"]
                },
                "type": {
                    "description": "type of condition in CamelCase or in foo.example.com/CamelCase.",
                    "type": "string",
                    "maxLength": 316,
                    "pattern": "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
                }
            },
            "required": ["lastTransitionTime", "message", "reason", "status", "type"]
        })
    }
}

pub(crate) fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}

/// Condition types and reasons used by the HelmRelease API (Flux names).
pub mod condition {
    /// `Ready`.
    pub const READY: &str = "Ready";
    /// `Reconciling` (kstatus, abnormal-true).
    pub const RECONCILING: &str = "Reconciling";
    /// `Stalled` (kstatus, abnormal-true).
    pub const STALLED: &str = "Stalled";
    /// `Released`.
    pub const RELEASED: &str = "Released";
    /// `TestSuccess`.
    pub const TEST_SUCCESS: &str = "TestSuccess";
    /// `Remediated`.
    pub const REMEDIATED: &str = "Remediated";
    /// `Drifted`: a condition Flux writes since helm-controller v1.6.0 (the reference,
    /// v1.6.3: `api/v2/condition_types.go` `DriftedCondition`, set in
    /// `internal/reconcile/atomic_release.go` — `MarkTrue(DriftDetected)` in
    /// `actionForState`'s Drifted case, `MarkFalse(NoDriftDetected)` when in sync with drift
    /// detection on), beside its `DriftDetected`/`DriftCorrected` Events; not one of the
    /// patcher's owned conditions, and never deleted when detection is turned off.
    pub const DRIFTED: &str = "Drifted";

    /// The conditions the controller owns on a HelmRelease.
    pub const OWNED: [&str; 6] = [
        RELEASED,
        REMEDIATED,
        TEST_SUCCESS,
        RECONCILING,
        READY,
        STALLED,
    ];
}

/// Condition reasons (Flux names).
pub mod reason {
    #![allow(missing_docs)]
    pub const INSTALL_SUCCEEDED: &str = "InstallSucceeded";
    pub const INSTALL_FAILED: &str = "InstallFailed";
    pub const UPGRADE_SUCCEEDED: &str = "UpgradeSucceeded";
    pub const UPGRADE_FAILED: &str = "UpgradeFailed";
    pub const TEST_SUCCEEDED: &str = "TestSucceeded";
    pub const TEST_FAILED: &str = "TestFailed";
    pub const ROLLBACK_SUCCEEDED: &str = "RollbackSucceeded";
    pub const ROLLBACK_FAILED: &str = "RollbackFailed";
    pub const UNINSTALL_SUCCEEDED: &str = "UninstallSucceeded";
    pub const UNINSTALL_FAILED: &str = "UninstallFailed";
    pub const PENDING_RELEASE: &str = "PendingRelease";
    pub const AWAITING_TESTS: &str = "AwaitingTests";
    pub const RETRIES_EXCEEDED: &str = "RetriesExceeded";
    pub const MISSING_ROLLBACK_TARGET: &str = "MissingRollbackTarget";
    pub const PROGRESSING: &str = "Progressing";
    pub const PROGRESSING_WITH_RETRY: &str = "ProgressingWithRetry";
    pub const DRIFT_DETECTED: &str = "DriftDetected";
    pub const NO_DRIFT_DETECTED: &str = "NoDriftDetected";
    pub const STATE_ERROR: &str = "StateError";
    pub const RECONCILE_ERROR: &str = "ReconcileError";
    /// `RESTClientError`: the client of the release's actions could not be built
    /// (impersonation, kubeconfig).
    pub const REST_CLIENT_ERROR: &str = "RESTClientError";
    pub const ARTIFACT_FAILED: &str = "ArtifactFailed";
    pub const DEPENDENCY_NOT_READY: &str = "DependencyNotReady";
    pub const SOURCE_NOT_READY: &str = "SourceNotReady";
    pub const VALUES_ERROR: &str = "ValuesError";
    pub const CHART_MUTATE_ERROR: &str = "ChartMutateError";
    pub const ACCESS_DENIED: &str = "AccessDenied";
    pub const INVALID_CEL_EXPRESSION: &str = "InvalidCELExpression";
    pub const HEALTH_CHECK_CANCELED: &str = "HealthCheckCanceled";
}

/// Longest condition message kept; longer ones are cut and end in `...` (Flux's limit).
pub const MAX_CONDITION_MESSAGE_LEN: usize = 32768;

fn trim_message(mut msg: String) -> String {
    if msg.len() <= MAX_CONDITION_MESSAGE_LEN {
        return msg;
    }
    let mut cut = MAX_CONDITION_MESSAGE_LEN - 3;
    while !msg.is_char_boundary(cut) {
        cut -= 1;
    }
    msg.truncate(cut);
    msg.push_str("...");
    msg
}

fn weight(type_: &str) -> Option<u8> {
    match type_ {
        condition::STALLED => Some(0),
        condition::RECONCILING => Some(1),
        condition::READY => Some(2),
        _ => None,
    }
}

/// Flux's condition order: Stalled, Reconciling, Ready, then the others by highest
/// observed generation, then by type.
fn order(a: &Condition, b: &Condition) -> std::cmp::Ordering {
    match (weight(&a.type_), weight(&b.type_)) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => b
            .observed_generation
            .cmp(&a.observed_generation)
            .then_with(|| a.type_.cmp(&b.type_)),
    }
}

/// Operations on a list of conditions, with the semantics of Flux's condition setter.
pub trait Conditions {
    /// The condition of `type_`, if present.
    fn get_condition(&self, type_: &str) -> Option<&Condition>;
    /// Sets a condition for `generation`. The transition time changes when the status,
    /// reason or message changes (Flux's "same state"); a new condition keeps
    /// `transition_time` if given, else gets `now`. The list stays sorted in Flux's order.
    #[allow(clippy::too_many_arguments)]
    fn set_condition_at(
        &mut self,
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: String,
        generation: i64,
        now: &Timestamp,
        transition_time: Option<Timestamp>,
    );
    /// [`Conditions::set_condition_at`] without a preset transition time.
    fn set_condition(
        &mut self,
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: String,
        generation: i64,
        now: &Timestamp,
    ) {
        self.set_condition_at(type_, status, reason, message, generation, now, None);
    }
    /// Removes the condition of `type_`.
    fn delete_condition(&mut self, type_: &str);
    /// True when the condition of `type_` is present with status `True`.
    fn is_true(&self, type_: &str) -> bool {
        self.get_condition(type_)
            .is_some_and(|c| c.status == ConditionStatus::True)
    }
    /// The reason of the condition of `type_`, `""` when absent.
    fn reason_of(&self, type_: &str) -> &str {
        self.get_condition(type_).map_or("", |c| c.reason.as_str())
    }
    /// The message of the condition of `type_`, `""` when absent.
    fn message_of(&self, type_: &str) -> &str {
        self.get_condition(type_).map_or("", |c| c.message.as_str())
    }
}

impl Conditions for Vec<Condition> {
    fn get_condition(&self, type_: &str) -> Option<&Condition> {
        self.iter().find(|c| c.type_ == type_)
    }

    #[allow(clippy::too_many_arguments)]
    fn set_condition_at(
        &mut self,
        type_: &str,
        status: ConditionStatus,
        reason: &str,
        message: String,
        generation: i64,
        now: &Timestamp,
        transition_time: Option<Timestamp>,
    ) {
        let message = trim_message(message);
        if let Some(c) = self.iter_mut().find(|c| c.type_ == type_) {
            let same = c.status == status && c.reason == reason && c.message == message;
            if !same {
                c.last_transition_time = now.clone();
            }
            c.status = status;
            c.reason = reason.to_owned();
            c.message = message;
            c.observed_generation = generation;
        } else {
            self.push(Condition {
                type_: type_.to_owned(),
                status,
                observed_generation: generation,
                last_transition_time: transition_time.unwrap_or_else(|| now.clone()),
                reason: reason.to_owned(),
                message,
            });
        }
        self.sort_by(order);
    }

    fn delete_condition(&mut self, type_: &str) {
        self.retain(|c| c.type_ != type_);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        Timestamp::new(s).unwrap()
    }

    #[test]
    fn timestamps_convert_to_the_kubernetes_form() {
        for (input, k8s) in [
            (
                "2024-05-07T04:54:21.123456789+02:00",
                "2024-05-07T02:54:21Z",
            ),
            ("2024-01-01T00:30:00+01:00", "2023-12-31T23:30:00Z"),
            ("2024-02-28T23:00:00-01:30", "2024-02-29T00:30:00Z"),
            ("2023-12-04T14:17:47Z", "2023-12-04T14:17:47Z"),
        ] {
            assert_eq!(ts(input).to_kubernetes().as_str(), k8s, "{input}");
        }
    }

    #[test]
    fn timestamps_must_be_rfc3339() {
        for ok in [
            "2023-12-04T14:17:47Z",
            "2023-12-04T14:17:47.123456789Z",
            "2023-12-04T14:17:47+02:00",
        ] {
            assert!(Timestamp::new(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "2023-12-04",
            "2023-12-04 14:17:47Z",
            "2023-12-04T14:17:47",
            "yesterday",
        ] {
            assert!(Timestamp::new(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn transition_time_moves_only_when_the_state_changes() {
        let mut c: Vec<Condition> = Vec::new();
        let t1 = ts("2024-01-01T00:00:00Z");
        let t2 = ts("2024-01-02T00:00:00Z");
        c.set_condition("Ready", ConditionStatus::True, "A", "a".into(), 1, &t1);
        c.set_condition("Ready", ConditionStatus::True, "A", "a".into(), 2, &t2);
        assert_eq!(c[0].last_transition_time, t1);
        assert_eq!(c[0].observed_generation, 2);
        c.set_condition("Ready", ConditionStatus::True, "B", "b".into(), 2, &t2);
        assert_eq!(
            c[0].last_transition_time, t2,
            "a new reason is a new state for Flux"
        );
        c.set_condition("Ready", ConditionStatus::False, "C", "c".into(), 2, &t2);
        assert_eq!(c[0].last_transition_time, t2);
        assert!(!c.is_true("Ready"));
        c.delete_condition("Ready");
        assert!(c.is_empty());
    }

    #[test]
    fn conditions_are_kept_in_flux_order() {
        let mut c: Vec<Condition> = Vec::new();
        let t = ts("2024-01-01T00:00:00Z");
        for ty in ["Released", "Ready", "TestSuccess", "Stalled", "Reconciling"] {
            c.set_condition(ty, ConditionStatus::True, "R", String::new(), 1, &t);
        }
        let types: Vec<&str> = c.iter().map(|c| c.type_.as_str()).collect();
        assert_eq!(
            types,
            ["Stalled", "Reconciling", "Ready", "Released", "TestSuccess"]
        );
    }

    #[test]
    fn overlong_condition_messages_are_trimmed() {
        let mut c: Vec<Condition> = Vec::new();
        let t = ts("2024-01-01T00:00:00Z");
        c.set_condition(
            "Ready",
            ConditionStatus::False,
            "R",
            "x".repeat(40000),
            1,
            &t,
        );
        assert_eq!(c[0].message.len(), MAX_CONDITION_MESSAGE_LEN);
        assert!(c[0].message.ends_with("..."));
    }
}
