//! The parts of `Masterminds/semver/v3` Helm relies on outside templates: `NewVersion`,
//! `StrictNewVersion`, `NewConstraint` and `IsCompatibleRange`. One implementation serves
//! all: Sprig's port ([`flotilla_sprig::semver`]), the one templates use for `semver` and
//! `semverCompare`.

pub use flotilla_sprig::semver::{Constraints, Version};

/// Helm's `IsCompatibleRange(constraint, version)`: false when either does not parse.
pub fn is_compatible_range(constraint: &str, version: &str) -> bool {
    flotilla_sprig::semver::semver_compare(constraint, version).unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_leniently() {
        assert!(Version::parse("1.2").is_ok());
        assert!(Version::parse("v1.2.3-rc.1+b").is_ok());
        // semver v3.4's NewVersion coerces leading zeros (CoerceNewVersion).
        assert!(Version::parse("01.2.3").is_ok());
        assert!(Version::parse("1.2.3.4").is_err());
        assert!(Version::parse("").is_err());
    }

    #[test]
    fn constraints_match_masterminds() {
        let cases = [
            ("~1.2.3", "1.2.9", true),
            ("~1.2.3", "1.3.0", false),
            ("^1.2.3", "1.9.0", true),
            ("^1.2.3", "2.0.0", false),
            ("^0.2.3", "0.2.9", true),
            ("^0.2.3", "0.3.0", false),
            (">=1.0.0 <2.0.0", "1.5.0", true),
            (">=1.0.0, <2.0.0", "2.0.0", false),
            ("1.x", "1.9.9", true),
            ("1.x", "2.0.0", false),
            ("*", "3.4.5", true),
            ("", "3.4.5", false),
            ("1.2.3 - 1.4.5", "1.4.5", true),
            ("1.2.3 - 1.4.5", "1.4.6", false),
            ("<1 || >=3", "3.1.0", true),
            ("<1 || >=3", "2.0.0", false),
            ("1.0.0", "1.0.0", true),
            (">=1.0.0", "1.1.0-rc.1", false),
            (">=1.0.0-0", "1.1.0-rc.1", true),
            ("2.31.x", "2.31.4", true),
            ("garbage", "1.0.0", false),
        ];
        for (c, v, want) in cases {
            assert_eq!(is_compatible_range(c, v), want, "{c} {v}");
        }
    }
}
