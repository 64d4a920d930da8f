//! A fast hasher for the maps of names the executor looks up on every call: functions,
//! templates, `include`'s recursion counters.
//!
//! std's default SipHash resists collision flooding from untrusted keys, at about five times
//! the cost on short names. The keys here are names written in a chart's templates (or
//! registered by Sprig and Helm), and whoever writes a chart already decides how much work
//! rendering it takes (loops, recursion, `until`), bounded by [`crate::ExecOptions`]; keys
//! that collide on purpose would slow parsing no more than that. Maps keyed by values data
//! (user input) keep std's hasher.
//!
//! The function: each 8-byte word of the input is mixed in with a rotate, an xor and a
//! multiplication by an odd constant; `finish` folds the high bits (where the products put
//! their entropy) into the low bits hashbrown takes its bucket index from.

use std::hash::{BuildHasherDefault, Hasher};

/// 2^64 divided by the golden ratio, made odd: a multiplier that spreads every input bit.
const SEED: u64 = 0x9e37_79b9_7f4a_7c15;

/// The hasher; see the module docs for why it is not SipHash.
#[derive(Clone, Copy, Debug, Default)]
pub struct NameHasher {
    hash: u64,
}

impl NameHasher {
    #[inline]
    fn mix(&mut self, word: u64) {
        self.hash = (self.hash.rotate_left(23) ^ word).wrapping_mul(SEED);
    }
}

impl Hasher for NameHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            self.mix(u64::from_le_bytes(chunk.try_into().expect("chunks of 8")));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut word = [0u8; 8];
            word[..rest.len()].copy_from_slice(rest);
            // The length tells `ab` from `ab\0`.
            self.mix(u64::from_le_bytes(word) ^ ((rest.len() as u64) << 59));
        }
    }

    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.mix(u64::from(i));
    }

    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.mix(i as u64);
    }

    #[inline]
    fn finish(&self) -> u64 {
        self.hash ^ (self.hash >> 29)
    }
}

/// Builds [`NameHasher`]s (all alike: no per-map random seed).
pub type NameHash = BuildHasherDefault<NameHasher>;

/// A `HashMap` keyed by names, hashed with [`NameHasher`].
pub type NameMap<K, V> = std::collections::HashMap<K, V, NameHash>;

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    fn hash(s: &str) -> u64 {
        NameHash::default().hash_one(s)
    }

    #[test]
    fn names_that_differ_hash_differently() {
        let names = [
            "",
            "a",
            "ab",
            "ab\0",
            "include",
            "tpl",
            "toYaml",
            "nindent",
            "indent",
            "quote",
            "default",
            "common.labels",
            "common.labels.standard",
            "argo-cd.fullname",
            "argo-cd.name",
            "12345678",
            "123456780",
        ];
        let mut seen = std::collections::HashSet::new();
        for n in names {
            assert!(seen.insert(hash(n)), "{n:?} collides");
        }
        assert_eq!(hash("include"), hash("include"));
    }

    #[test]
    fn bucket_bits_are_spread_over_similar_names() {
        // Template names differ in a few characters; the low bits (bucket index) and the
        // top 7 (hashbrown's tag) must still vary.
        let mut low = std::collections::HashSet::new();
        let mut top = std::collections::HashSet::new();
        for i in 0..1000 {
            let h = hash(&format!("chart.helper.{i}"));
            low.insert(h & 1023);
            top.insert(h >> 57);
        }
        assert!(
            low.len() > 550,
            "{} distinct low-bit buckets of 1000",
            low.len()
        );
        assert_eq!(top.len(), 128);
    }

    #[test]
    fn a_name_map_finds_what_it_holds() {
        let mut m: NameMap<String, usize> = NameMap::default();
        for i in 0..5000 {
            m.insert(format!("name-{i}"), i);
        }
        assert!((0..5000).all(|i| m.get(format!("name-{i}").as_str()) == Some(&i)));
        assert_eq!(m.get("name-5000"), None);
    }
}
