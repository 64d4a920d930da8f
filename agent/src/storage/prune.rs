//! History pruning (`maxHistory`): which revisions Helm's `removeLeastRecent` deletes.

use flotilla_chart::release::Release;

/// The revisions to delete so that at most `maximum` records of `history` remain: the oldest
/// first, skipping `deployed` (the latest deployed revision, which is never pruned).
///
/// `Storage.Create` calls this with `maximum = MaxHistory - 1` before writing a new
/// revision. When the deployed revision is among the oldest, fewer than needed may be
/// chosen only if nothing else is left; the result is in ascending order.
pub fn least_recent(history: &[Release], deployed: Option<i64>, maximum: usize) -> Vec<i64> {
    if history.len() <= maximum {
        return Vec::new();
    }
    let mut versions: Vec<i64> = history.iter().map(|r| r.version).collect();
    versions.sort_unstable();
    let mut doomed = Vec::new();
    for version in versions {
        if history.len() - doomed.len() == maximum {
            break;
        }
        if Some(version) != deployed {
            doomed.push(version);
        }
    }
    doomed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(versions: &[i64]) -> Vec<Release> {
        versions
            .iter()
            .map(|&version| Release {
                name: "r".to_owned(),
                version,
                ..Release::default()
            })
            .collect()
    }

    #[test]
    fn pruning_matches_helms_remove_least_recent() {
        // (history, latest deployed, maximum, deleted)
        type Case<'a> = (&'a [i64], Option<i64>, usize, &'a [i64]);
        let cases: &[Case<'_>] = &[
            (&[1, 2, 3], Some(3), 5, &[]),
            (&[1, 2, 3], Some(3), 3, &[]),
            (&[1, 2, 3, 4, 5], Some(5), 2, &[1, 2, 3]),
            // unordered input, the deployed one is the oldest: it stays
            (&[4, 2, 1, 3, 5], Some(1), 2, &[2, 3, 4]),
            // deployed in the middle
            (&[1, 2, 3, 4, 5], Some(2), 2, &[1, 3, 4]),
            // no deployed record (all failed or superseded)
            (&[1, 2, 3, 4], None, 1, &[1, 2, 3]),
            // maximum 0 (MaxHistory 1): everything but the deployed one
            (&[1, 2, 3], Some(3), 0, &[1, 2]),
            (&[1, 2, 3], Some(1), 0, &[2, 3]),
            (&[1, 2, 3], None, 0, &[1, 2, 3]),
            (&[], None, 0, &[]),
        ];
        for (versions, deployed, maximum, want) in cases {
            assert_eq!(
                least_recent(&history(versions), *deployed, *maximum),
                *want,
                "history {versions:?} deployed {deployed:?} maximum {maximum}"
            );
        }
    }

    #[test]
    fn the_deployed_revision_is_never_chosen_and_the_oldest_others_go_first() {
        for n in 0..12_i64 {
            let versions: Vec<i64> = (1..=n).collect();
            for deployed in std::iter::once(None).chain((1..=n).map(Some)) {
                for maximum in 0..14_usize {
                    let doomed = least_recent(&history(&versions), deployed, maximum);
                    let left = versions.len() - doomed.len();
                    let want_left = if versions.len() <= maximum {
                        versions.len()
                    } else if maximum == 0 && deployed.is_some() {
                        1
                    } else {
                        maximum
                    };
                    assert_eq!(left, want_left, "n {n} deployed {deployed:?} max {maximum}");
                    let others: Vec<i64> = versions
                        .iter()
                        .copied()
                        .filter(|v| Some(*v) != deployed)
                        .take(doomed.len())
                        .collect();
                    assert_eq!(doomed, others);
                }
            }
        }
    }
}
