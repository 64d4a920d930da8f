//! Identities, parsed once and carried as newtypes.
//!
//! Every value here is validated at construction; holding one means the check already
//! passed. Parsing from strings goes through [`std::str::FromStr`] and through serde, so a
//! malformed identity in a plan or a status never reaches the state machine.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

/// Maximum length of a Helm release name (Helm's own limit, also Flux's CRD limit).
pub const RELEASE_NAME_MAX_LEN: usize = 53;
/// Length of the hash suffix Flux appends to shortened release names.
const RELEASE_NAME_HASH_LEN: usize = 12;
/// Maximum length of a DNS-1123 label (namespaces).
pub const DNS1123_LABEL_MAX_LEN: usize = 63;
/// Maximum length of a DNS-1123 subdomain (most object names).
pub const DNS1123_SUBDOMAIN_MAX_LEN: usize = 253;

/// Why an identity was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// The value was empty.
    #[error("{kind} must not be empty")]
    Empty {
        /// What was being parsed.
        kind: &'static str,
    },
    /// The value exceeded its maximum length.
    #[error("{kind} {value:?} must be no more than {max} characters")]
    TooLong {
        /// What was being parsed.
        kind: &'static str,
        /// The offending value.
        value: String,
        /// The maximum length.
        max: usize,
    },
    /// The value is not a DNS-1123 label.
    #[error(
        "{kind} {value:?} must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character"
    )]
    NotDns1123Label {
        /// What was being parsed.
        kind: &'static str,
        /// The offending value.
        value: String,
    },
    /// The value is not a DNS-1123 subdomain.
    #[error(
        "{kind} {value:?} must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
    )]
    NotDns1123Subdomain {
        /// What was being parsed.
        kind: &'static str,
        /// The offending value.
        value: String,
    },
    /// The value is not a content digest of the expected form.
    #[error("{kind} {value:?} must have the form sha256:<64 lower-case hex characters>")]
    NotSha256Digest {
        /// What was being parsed.
        kind: &'static str,
        /// The offending value.
        value: String,
    },
    /// A numeric identity did not parse.
    #[error("{kind} {value:?} is not an unsigned integer")]
    NotUnsigned {
        /// What was being parsed.
        kind: &'static str,
        /// The offending value.
        value: String,
    },
}

fn is_alnum(b: u8) -> bool {
    b.is_ascii_lowercase() || b.is_ascii_digit()
}

/// True when `s` is a DNS-1123 label body (charset and ends), ignoring length.
fn is_dns1123_label_body(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && is_alnum(b[0])
        && is_alnum(b[b.len() - 1])
        && b.iter().all(|&c| is_alnum(c) || c == b'-')
}

/// Checks `value` as a DNS-1123 label (RFC 1123): at most 63 characters of `[a-z0-9-]`,
/// starting and ending with an alphanumeric character.
pub fn check_dns1123_label(kind: &'static str, value: &str) -> Result<(), IdError> {
    if value.is_empty() {
        return Err(IdError::Empty { kind });
    }
    if value.len() > DNS1123_LABEL_MAX_LEN {
        return Err(IdError::TooLong {
            kind,
            value: value.to_owned(),
            max: DNS1123_LABEL_MAX_LEN,
        });
    }
    if !is_dns1123_label_body(value) {
        return Err(IdError::NotDns1123Label {
            kind,
            value: value.to_owned(),
        });
    }
    Ok(())
}

/// Checks `value` as a DNS-1123 subdomain: at most 253 characters, dot-separated labels.
pub fn check_dns1123_subdomain(kind: &'static str, value: &str) -> Result<(), IdError> {
    check_dns1123_subdomain_max(kind, value, DNS1123_SUBDOMAIN_MAX_LEN)
}

fn check_dns1123_subdomain_max(kind: &'static str, value: &str, max: usize) -> Result<(), IdError> {
    if value.is_empty() {
        return Err(IdError::Empty { kind });
    }
    if value.len() > max {
        return Err(IdError::TooLong {
            kind,
            value: value.to_owned(),
            max,
        });
    }
    if !value.split('.').all(is_dns1123_label_body) {
        return Err(IdError::NotDns1123Subdomain {
            kind,
            value: value.to_owned(),
        });
    }
    Ok(())
}

macro_rules! string_newtype {
    ($(#[$doc:meta])* $name:ident, $kind:literal, $check:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// What this identity is called in error messages.
            pub const KIND: &'static str = $kind;

            /// Validates and wraps `value`.
            pub fn new(value: impl Into<String>) -> Result<Self, IdError> {
                let value = value.into();
                let check: fn(&'static str, &str) -> Result<(), IdError> = $check;
                check($kind, &value)?;
                Ok(Self(value))
            }

            /// The validated string.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::new(s)
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(s: String) -> Result<Self, Self::Error> {
                Self::new(s)
            }
        }

        impl From<$name> for String {
            fn from(v: $name) -> String {
                v.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

string_newtype!(
    /// A Kubernetes namespace name (DNS-1123 label, at most 63 characters).
    Namespace,
    "namespace",
    check_dns1123_label
);

string_newtype!(
    /// A Kubernetes object name (DNS-1123 subdomain, at most 253 characters).
    ObjectName,
    "object name",
    check_dns1123_subdomain
);

string_newtype!(
    /// The identity of a workload cluster: the name of its `ManagedCluster` object on the
    /// hub (a DNS-1123 subdomain). It is bound to the agent's client certificate once, at
    /// the edge, and compared as an opaque value afterwards.
    ClusterId,
    "cluster id",
    check_dns1123_subdomain
);

/// A Helm release name, already shortened by Flux's rule.
///
/// Built from a HelmRelease with [`ReleaseName::for_helm_release`] (`spec.releaseName`, or
/// `[targetNamespace-]name`, shortened to 53 bytes with a SHA-256 suffix when longer), or
/// parsed from storage with [`ReleaseName::new`], which refuses names Helm would refuse.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ReleaseName(String);

impl ReleaseName {
    /// What this identity is called in error messages.
    pub const KIND: &'static str = "release name";

    /// Parses a final (already short) release name, as found in Helm storage.
    pub fn new(value: impl Into<String>) -> Result<Self, IdError> {
        let value = value.into();
        check_dns1123_subdomain_max(Self::KIND, &value, RELEASE_NAME_MAX_LEN)?;
        Ok(Self(value))
    }

    /// Derives the release name of a HelmRelease the way Flux does: `spec.releaseName` if
    /// set, else `<targetNamespace>-<name>` if a target namespace is set, else `name`; the
    /// result is then shortened with [`shorten_release_name`].
    pub fn for_helm_release(
        release_name: Option<&str>,
        target_namespace: Option<&str>,
        object_name: &str,
    ) -> Result<Self, IdError> {
        let full = match (release_name, target_namespace) {
            (Some(r), _) if !r.is_empty() => r.to_owned(),
            (_, Some(ns)) if !ns.is_empty() => format!("{ns}-{object_name}"),
            _ => object_name.to_owned(),
        };
        if full.is_empty() {
            return Err(IdError::Empty { kind: Self::KIND });
        }
        // The unshortened name must be made of valid characters; shortening only cuts it.
        check_dns1123_subdomain_max(Self::KIND, &full, usize::MAX)?;
        Self::new(shorten_release_name(&full))
    }

    /// The name as Helm sees it.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Flux's `ShortenName`: names of at most 53 bytes are returned unchanged; longer names are
/// cut to 40 bytes, followed by `-` and the first 12 hex characters of the SHA-256 of the
/// whole name (53 bytes in total).
pub fn shorten_release_name(name: &str) -> String {
    if name.len() <= RELEASE_NAME_MAX_LEN {
        return name.to_owned();
    }
    let sum = Sha256::digest(name.as_bytes());
    let hex = hex_lower(&sum);
    let keep = RELEASE_NAME_MAX_LEN - (RELEASE_NAME_HASH_LEN + 1);
    // Release names are ASCII once validated; cut on a char boundary regardless.
    let mut cut = keep;
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}-{}", &name[..cut], &hex[..RELEASE_NAME_HASH_LEN])
}

impl fmt::Display for ReleaseName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for ReleaseName {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl TryFrom<String> for ReleaseName {
    type Error = IdError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::new(s)
    }
}

impl From<ReleaseName> for String {
    fn from(v: ReleaseName) -> String {
        v.0
    }
}

impl AsRef<str> for ReleaseName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// The revision of a release plan: monotonic per release, assigned by the hub.
///
/// Applying the same revision twice is a no-op; an agent never goes back to a lower one.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct PlanRevision(u64);

impl PlanRevision {
    /// The first revision a hub hands out.
    pub const FIRST: PlanRevision = PlanRevision(1);

    /// Wraps a raw revision number.
    pub const fn new(value: u64) -> Self {
        Self(value)
    }

    /// The raw number.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The revision after this one, or `None` when the counter is exhausted.
    pub fn next(self) -> Option<Self> {
        self.0.checked_add(1).map(Self)
    }

    /// True when a plan of revision `self` supersedes one of revision `held`.
    pub fn supersedes(self, held: PlanRevision) -> bool {
        self > held
    }
}

impl fmt::Display for PlanRevision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl FromStr for PlanRevision {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse::<u64>()
            .map(Self)
            .map_err(|_| IdError::NotUnsigned {
                kind: "plan revision",
                value: s.to_owned(),
            })
    }
}

/// The content address of a chart archive: `sha256:<64 lower-case hex>`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ChartDigest(String);

impl ChartDigest {
    /// What this identity is called in error messages.
    pub const KIND: &'static str = "chart digest";

    /// Parses `sha256:<hex>`.
    pub fn new(value: impl Into<String>) -> Result<Self, IdError> {
        let value = value.into();
        let ok = value.strip_prefix("sha256:").is_some_and(|hex| {
            hex.len() == 64
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        });
        if !ok {
            return Err(IdError::NotSha256Digest {
                kind: Self::KIND,
                value,
            });
        }
        Ok(Self(value))
    }

    /// Computes the digest of chart archive bytes.
    pub fn of_bytes(bytes: &[u8]) -> Self {
        Self(format!("sha256:{}", hex_lower(&Sha256::digest(bytes))))
    }

    /// The full `sha256:<hex>` form.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The hex part, without the algorithm.
    pub fn hex(&self) -> &str {
        &self.0["sha256:".len()..]
    }
}

impl fmt::Display for ChartDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for ChartDigest {
    type Err = IdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::new(s)
    }
}

impl TryFrom<String> for ChartDigest {
    type Error = IdError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Self::new(s)
    }
}

impl From<ChartDigest> for String {
    fn from(v: ChartDigest) -> String {
        v.0
    }
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex_lower(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for &b in bytes {
        s.push(HEX[(b >> 4) as usize] as char);
        s.push(HEX[(b & 0xf) as usize] as char);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_release_names_are_kept_as_they_are() {
        let n = ReleaseName::for_helm_release(None, None, "podinfo").unwrap();
        assert_eq!(n.as_str(), "podinfo");
    }

    #[test]
    fn spec_release_name_wins_over_target_namespace() {
        let n = ReleaseName::for_helm_release(Some("custom"), Some("prod"), "podinfo").unwrap();
        assert_eq!(n.as_str(), "custom");
    }

    #[test]
    fn target_namespace_prefixes_the_object_name() {
        let n = ReleaseName::for_helm_release(None, Some("prod"), "podinfo").unwrap();
        assert_eq!(n.as_str(), "prod-podinfo");
    }

    #[test]
    fn long_release_names_are_shortened_with_the_flux_hash_suffix() {
        let n = ReleaseName::for_helm_release(
            Some("release-name-with-very-long-name-which-is-longer-than-53-characters"),
            None,
            "x",
        )
        .unwrap();
        assert_eq!(
            n.as_str(),
            "release-name-with-very-long-name-which-i-788ca0d0d7b0"
        );
        assert_eq!(n.as_str().len(), 53);
    }

    #[test]
    fn long_target_namespace_composition_is_shortened_like_the_flux_code_not_its_docs() {
        let n = ReleaseName::for_helm_release(
            None,
            Some("a-very-lengthy-target-namespace-with-a"),
            "nice-object-name",
        )
        .unwrap();
        assert_eq!(
            n.as_str(),
            "a-very-lengthy-target-namespace-with-a-n-97af5d7f41f3"
        );
    }

    #[test]
    fn release_names_with_upper_case_are_refused() {
        let err = ReleaseName::new("PodInfo").unwrap_err();
        assert!(matches!(err, IdError::NotDns1123Subdomain { .. }), "{err}");
    }

    #[test]
    fn release_names_over_53_characters_are_refused_when_parsed_from_storage() {
        let err = ReleaseName::new("a".repeat(54)).unwrap_err();
        assert!(matches!(err, IdError::TooLong { max: 53, .. }), "{err}");
    }

    #[test]
    fn namespaces_are_dns1123_labels() {
        assert!(Namespace::new("kube-system").is_ok());
        assert!(matches!(
            Namespace::new("a.b"),
            Err(IdError::NotDns1123Label { .. })
        ));
        assert!(matches!(
            Namespace::new("-a"),
            Err(IdError::NotDns1123Label { .. })
        ));
        assert!(matches!(Namespace::new(""), Err(IdError::Empty { .. })));
        assert!(matches!(
            Namespace::new("a".repeat(64)),
            Err(IdError::TooLong { max: 63, .. })
        ));
    }

    #[test]
    fn object_names_are_dns1123_subdomains() {
        assert!(ObjectName::new("podinfo.example-1").is_ok());
        assert!(matches!(
            ObjectName::new("a..b"),
            Err(IdError::NotDns1123Subdomain { .. })
        ));
        assert!(matches!(
            ObjectName::new("A"),
            Err(IdError::NotDns1123Subdomain { .. })
        ));
    }

    #[test]
    fn chart_digests_must_be_sha256_lower_hex() {
        let d = ChartDigest::of_bytes(b"");
        assert_eq!(
            d.as_str(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(ChartDigest::new(d.as_str()).unwrap(), d);
        assert!(ChartDigest::new("sha256:ABC").is_err());
        assert!(ChartDigest::new(d.as_str().to_uppercase()).is_err());
        assert!(ChartDigest::new("md5:00").is_err());
    }

    #[test]
    fn identities_refuse_bad_values_when_deserialized() {
        let err = serde_json::from_str::<Namespace>("\"Bad_NS\"").unwrap_err();
        assert!(err.to_string().contains("namespace \"Bad_NS\""), "{err}");
    }

    #[test]
    fn plan_revisions_are_monotonic() {
        let r = PlanRevision::FIRST;
        let n = r.next().unwrap();
        assert!(n.supersedes(r));
        assert!(!r.supersedes(r));
        assert_eq!(PlanRevision::new(u64::MAX).next(), None);
        assert_eq!("7".parse::<PlanRevision>().unwrap(), PlanRevision::new(7));
        assert!("x".parse::<PlanRevision>().is_err());
    }
}
