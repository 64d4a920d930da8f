//! go-yaml's map key order (`sorter.go` `keyList.Less`): numbers and bools first by value,
//! then by Go kind; strings compared rune by rune with letters after non-letters and runs of
//! digits compared as numbers. go-yaml v3 changed one rule: right after a run of equal
//! digits, a letter sorts before a non-letter (`a1b` before `a1_`), see [`Sorter`].

use crate::Value;
use std::cmp::Ordering;

/// `reflect.Kind` numbers of the Go types the values stand for.
fn kind(v: &Value) -> u8 {
    match v {
        Value::Bool(_) => 1,
        Value::Int(_) => 2,
        Value::Uint(_) => 11,
        Value::Float(_) => 14,
        Value::Null => 20, // a nil interface stays an Interface
        Value::Map(_) => 21,
        Value::Seq(_) => 23,
        Value::String(_) | Value::Bytes(_) => 24,
    }
}

#[allow(clippy::cast_precision_loss)]
fn key_float(v: &Value) -> Option<f64> {
    match v {
        Value::Int(i) => Some(*i as f64),
        Value::Uint(u) => Some(*u as f64),
        Value::Float(f) => Some(*f),
        Value::Bool(b) => Some(if *b { 1.0 } else { 0.0 }),
        _ => None,
    }
}

fn num_less(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Int(x), Value::Int(y)) => x < y,
        (Value::Uint(x), Value::Uint(y)) => x < y,
        (Value::Float(x), Value::Float(y)) => x < y,
        (Value::Bool(x), Value::Bool(y)) => !x && *y,
        _ => false,
    }
}

/// Go's `unicode.IsLetter` (categories L*). Exact for ASCII; elsewhere Rust's alphabetic
/// property minus numerals, which differs only for a few marks.
fn is_letter(c: char) -> bool {
    if c.is_ascii() {
        c.is_ascii_alphabetic()
    } else {
        c.is_alphabetic() && !c.is_numeric()
    }
}

/// Go's `unicode.IsDigit` (category Nd). Exact for ASCII; elsewhere approximated.
fn is_digit(c: char) -> bool {
    if c.is_ascii() {
        c.is_ascii_digit()
    } else {
        c.is_numeric()
    }
}

fn string_bytes(v: &Value) -> Vec<char> {
    match v {
        Value::String(s) => s.chars().collect(),
        // Go's []rune(string) turns each invalid byte into U+FFFD.
        Value::Bytes(b) => crate::json::go_lossy_utf8(b).chars().collect(),
        _ => Vec::new(),
    }
}

/// A rune sequence indexed as chars.
struct Runes<'a, C>(&'a [C]);

impl<C: Copy + Into<char>> Runes<'_, C> {
    fn at(&self, i: usize) -> char {
        self.0.get(i).map_or('\0', |&c| c.into())
    }
}

/// Which go-yaml's `keyList.Less` to follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Sorter {
    /// go-yaml v2: a letter always sorts after a non-letter.
    V2,
    /// go-yaml v3: as v2, except right after equal digits, where the letter comes first.
    V3,
}

/// go-yaml v2's `keyList.Less(a, b)`.
pub(crate) fn key_less(a: &Value, b: &Value) -> bool {
    key_less_as(Sorter::V2, a, b)
}

/// `keyList.Less(a, b)` of the chosen go-yaml version.
pub(crate) fn key_less_as(sorter: Sorter, a: &Value, b: &Value) -> bool {
    let (ak, bk) = (kind(a), kind(b));
    if let (Some(af), Some(bf)) = (key_float(a), key_float(b)) {
        if af != bf {
            return af < bf;
        }
        if ak != bk {
            return ak < bk;
        }
        return num_less(a, b);
    }
    if ak != 24 || bk != 24 {
        return ak < bk;
    }
    if let (Value::String(x), Value::String(y)) = (a, b)
        && x.is_ascii()
        && y.is_ascii()
    {
        return runes_less(sorter, x.as_bytes(), y.as_bytes());
    }
    runes_less(sorter, &string_bytes(a), &string_bytes(b))
}

/// The string part of `keyList.Less` on two rune sequences (bytes for ASCII strings, where
/// bytes and runes are the same).
fn runes_less<C: Copy + Into<char>>(sorter: Sorter, ar: &[C], br: &[C]) -> bool {
    let ar: Runes<'_, C> = Runes(ar);
    let br: Runes<'_, C> = Runes(br);
    let mut i = 0;
    // v3: whether the last equal rune was a digit.
    let mut digits = false;
    while i < ar.0.len() && i < br.0.len() {
        if ar.at(i) == br.at(i) {
            digits = is_digit(ar.at(i));
            i += 1;
            continue;
        }
        let al = is_letter(ar.at(i));
        let bl = is_letter(br.at(i));
        if al && bl {
            return ar.at(i) < br.at(i);
        }
        if al || bl {
            return if sorter == Sorter::V3 && digits {
                al
            } else {
                bl
            };
        }
        let (mut an, mut bn): (i64, i64) = (0, 0);
        if ar.at(i) == '0' || br.at(i) == '0' {
            let mut j = i;
            while j > 0 && is_digit(ar.at(j - 1)) {
                j -= 1;
                if ar.at(j) != '0' {
                    an = 1;
                    bn = 1;
                    break;
                }
            }
        }
        let digit_value = |c: char| i64::from(u32::from(c)) - i64::from(u32::from('0'));
        let mut ai = i;
        while ai < ar.0.len() && is_digit(ar.at(ai)) {
            an = an.wrapping_mul(10).wrapping_add(digit_value(ar.at(ai)));
            ai += 1;
        }
        let mut bi = i;
        while bi < br.0.len() && is_digit(br.at(bi)) {
            bn = bn.wrapping_mul(10).wrapping_add(digit_value(br.at(bi)));
            bi += 1;
        }
        if an != bn {
            return an < bn;
        }
        if ai != bi {
            return ai < bi;
        }
        return ar.at(i) < br.at(i);
    }
    ar.0.len() < br.0.len()
}

/// Sorts map entries by key exactly as Go's `sort.Sort(keyList)` does. go-yaml's `Less` is
/// not transitive for some strings (`"10" < "1b" < "9" < "10"`), so the algorithm itself
/// decides the output: this is Go's pattern-defeating quicksort, step for step. Never panics,
/// whatever the comparator says.
pub(crate) fn sort_entries(entries: &mut [(Value, Value)]) {
    sort_entries_as(Sorter::V2, entries);
}

/// [`sort_entries`] with the chosen go-yaml version's `Less`.
pub(crate) fn sort_entries_as(sorter: Sorter, entries: &mut [(Value, Value)]) {
    let n = entries.len();
    if n <= 1 {
        return;
    }
    let limit = bit_len(n);
    let mut s = GoSort {
        data: entries,
        less: |a: &(Value, Value), b: &(Value, Value)| key_less_as(sorter, &a.0, &b.0),
    };
    s.pdqsort(0, n, limit);
}

/// [`sort_entries_as`] on borrowed entries.
pub(crate) fn sort_refs_as(sorter: Sorter, entries: &mut [(&Value, &Value)]) {
    let n = entries.len();
    if n <= 1 {
        return;
    }
    let limit = bit_len(n);
    let mut s = GoSort {
        data: entries,
        less: |a: &(&Value, &Value), b: &(&Value, &Value)| key_less_as(sorter, a.0, b.0),
    };
    s.pdqsort(0, n, limit);
}

fn bit_len(n: usize) -> usize {
    (usize::BITS - n.leading_zeros()) as usize
}

struct GoSort<'a, T, F: Fn(&T, &T) -> bool> {
    data: &'a mut [T],
    less: F,
}

#[derive(PartialEq, Eq, Clone, Copy)]
enum Hint {
    Unknown,
    Increasing,
    Decreasing,
}

impl<T, F: Fn(&T, &T) -> bool> GoSort<'_, T, F> {
    fn less(&self, i: usize, j: usize) -> bool {
        match (self.data.get(i), self.data.get(j)) {
            (Some(a), Some(b)) => (self.less)(a, b),
            _ => false,
        }
    }

    fn swap(&mut self, i: usize, j: usize) {
        if i < self.data.len() && j < self.data.len() {
            self.data.swap(i, j);
        }
    }

    fn insertion_sort(&mut self, a: usize, b: usize) {
        for i in a + 1..b {
            let mut j = i;
            while j > a && self.less(j, j - 1) {
                self.swap(j, j - 1);
                j -= 1;
            }
        }
    }

    fn sift_down(&mut self, lo: usize, hi: usize, first: usize) {
        let mut root = lo;
        loop {
            let mut child = 2 * root + 1;
            if child >= hi {
                break;
            }
            if child + 1 < hi && self.less(first + child, first + child + 1) {
                child += 1;
            }
            if !self.less(first + root, first + child) {
                return;
            }
            self.swap(first + root, first + child);
            root = child;
        }
    }

    fn heap_sort(&mut self, a: usize, b: usize) {
        let first = a;
        let hi = b - a;
        let mut i = (hi as isize - 1) / 2;
        while i >= 0 {
            self.sift_down(i as usize, hi, first);
            i -= 1;
        }
        let mut i = hi as isize - 1;
        while i >= 0 {
            self.swap(first, first + i as usize);
            self.sift_down(0, i as usize, first);
            i -= 1;
        }
    }

    fn pdqsort(&mut self, mut a: usize, mut b: usize, mut limit: usize) {
        const MAX_INSERTION: usize = 12;
        let mut was_balanced = true;
        let mut was_partitioned = true;
        loop {
            let length = b - a;
            if length <= MAX_INSERTION {
                self.insertion_sort(a, b);
                return;
            }
            if limit == 0 {
                self.heap_sort(a, b);
                return;
            }
            if !was_balanced {
                self.break_patterns(a, b);
                limit -= 1;
            }
            let (mut pivot, mut hint) = self.choose_pivot(a, b);
            if hint == Hint::Decreasing {
                self.reverse_range(a, b);
                pivot = (b - 1) - (pivot - a);
                hint = Hint::Increasing;
            }
            if was_balanced
                && was_partitioned
                && hint == Hint::Increasing
                && self.partial_insertion_sort(a, b)
            {
                return;
            }
            if a > 0 && !self.less(a - 1, pivot) {
                a = self.partition_equal(a, b, pivot);
                continue;
            }
            let (mid, already) = self.partition(a, b, pivot);
            was_partitioned = already;
            let (left_len, right_len) = (mid - a, b - mid);
            let balance_threshold = length / 8;
            if left_len < right_len {
                was_balanced = left_len >= balance_threshold;
                self.pdqsort(a, mid, limit);
                a = mid + 1;
            } else {
                was_balanced = right_len >= balance_threshold;
                self.pdqsort(mid + 1, b, limit);
                b = mid;
            }
        }
    }

    fn partition(&mut self, a: usize, b: usize, pivot: usize) -> (usize, bool) {
        self.swap(a, pivot);
        let (mut i, mut j) = (a as isize + 1, b as isize - 1);
        let l = |s: &Self, x: isize, y: usize| s.less(x as usize, y);
        while i <= j && l(self, i, a) {
            i += 1;
        }
        while i <= j && !l(self, j, a) {
            j -= 1;
        }
        if i > j {
            self.swap(j as usize, a);
            return (j as usize, true);
        }
        self.swap(i as usize, j as usize);
        i += 1;
        j -= 1;
        loop {
            while i <= j && l(self, i, a) {
                i += 1;
            }
            while i <= j && !l(self, j, a) {
                j -= 1;
            }
            if i > j {
                break;
            }
            self.swap(i as usize, j as usize);
            i += 1;
            j -= 1;
        }
        self.swap(j as usize, a);
        (j as usize, false)
    }

    fn partition_equal(&mut self, a: usize, b: usize, pivot: usize) -> usize {
        self.swap(a, pivot);
        let (mut i, mut j) = (a as isize + 1, b as isize - 1);
        loop {
            while i <= j && !self.less(a, i as usize) {
                i += 1;
            }
            while i <= j && self.less(a, j as usize) {
                j -= 1;
            }
            if i > j {
                break;
            }
            self.swap(i as usize, j as usize);
            i += 1;
            j -= 1;
        }
        i as usize
    }

    fn partial_insertion_sort(&mut self, a: usize, b: usize) -> bool {
        const MAX_STEPS: usize = 5;
        const SHORTEST_SHIFTING: usize = 50;
        let mut i = a + 1;
        for _ in 0..MAX_STEPS {
            while i < b && !self.less(i, i - 1) {
                i += 1;
            }
            if i == b {
                return true;
            }
            if b - a < SHORTEST_SHIFTING {
                return false;
            }
            self.swap(i, i - 1);
            if i - a >= 2 {
                let mut j = i - 1;
                while j >= 1 {
                    if !self.less(j, j - 1) {
                        break;
                    }
                    self.swap(j, j - 1);
                    j -= 1;
                }
            }
            if b - i >= 2 {
                let mut j = i + 1;
                while j < b {
                    if !self.less(j, j - 1) {
                        break;
                    }
                    self.swap(j, j - 1);
                    j += 1;
                }
            }
        }
        false
    }

    fn break_patterns(&mut self, a: usize, b: usize) {
        let length = b - a;
        if length >= 8 {
            let mut random = length as u64;
            let modulus = 1usize << bit_len(length);
            let start = a + (length / 4) * 2 - 1;
            for idx in start..=a + (length / 4) * 2 + 1 {
                random ^= random << 13;
                random ^= random >> 7;
                random ^= random << 17;
                let mut other = (random as usize) & (modulus - 1);
                if other >= length {
                    other -= length;
                }
                self.swap(idx, a + other);
            }
        }
    }

    fn choose_pivot(&mut self, a: usize, b: usize) -> (usize, Hint) {
        const SHORTEST_NINTHER: usize = 50;
        const MAX_SWAPS: usize = 4 * 3;
        let l = b - a;
        let mut swaps = 0;
        let mut i = a + l / 4;
        let mut j = a + l / 4 * 2;
        let mut k = a + l / 4 * 3;
        if l >= 8 {
            if l >= SHORTEST_NINTHER {
                i = self.median(i - 1, i, i + 1, &mut swaps);
                j = self.median(j - 1, j, j + 1, &mut swaps);
                k = self.median(k - 1, k, k + 1, &mut swaps);
            }
            j = self.median(i, j, k, &mut swaps);
        }
        match swaps {
            0 => (j, Hint::Increasing),
            MAX_SWAPS => (j, Hint::Decreasing),
            _ => (j, Hint::Unknown),
        }
    }

    fn order2(&self, a: usize, b: usize, swaps: &mut usize) -> (usize, usize) {
        if self.less(b, a) {
            *swaps += 1;
            (b, a)
        } else {
            (a, b)
        }
    }

    fn median(&self, a: usize, b: usize, c: usize, swaps: &mut usize) -> usize {
        let (a, b) = self.order2(a, b, swaps);
        let (b, c) = self.order2(b, c, swaps);
        let _ = c;
        let (_a, b) = self.order2(a, b, swaps);
        b
    }

    fn reverse_range(&mut self, a: usize, b: usize) {
        let (mut i, mut j) = (a, b - 1);
        while i < j {
            self.swap(i, j);
            i += 1;
            j -= 1;
        }
    }
}

/// A total order for callers that want go-yaml's order as an `Ordering`.
pub fn go_yaml_key_cmp(a: &Value, b: &Value) -> Ordering {
    if key_less(a, b) {
        Ordering::Less
    } else if key_less(b, a) {
        Ordering::Greater
    } else {
        Ordering::Equal
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted(keys: &[&str]) -> Vec<String> {
        let mut e: Vec<(Value, Value)> = keys
            .iter()
            .map(|k| (Value::from(*k), Value::Null))
            .collect();
        sort_entries(&mut e);
        e.into_iter()
            .map(|(k, _)| k.as_str().unwrap_or_default().to_owned())
            .collect()
    }

    #[test]
    fn natural_order_of_go_yaml_v2() {
        assert_eq!(sorted(&["a10", "a2", "a1"]), ["a1", "a2", "a10"]);
        assert_eq!(sorted(&["b", "a", "_x", "A"]), ["_x", "A", "a", "b"]);
        assert_eq!(sorted(&["ab", "a", "a_"]), ["a", "a_", "ab"]);
        assert_eq!(sorted(&["a01", "a1", "a001"]), ["a1", "a01", "a001"]);
    }

    #[test]
    fn go_yaml_v3_puts_letters_first_after_equal_digits() {
        let keys = ["a1_", "a1b", "a_", "ab"];
        let order = |sorter| {
            let mut e: Vec<(Value, Value)> = keys
                .iter()
                .map(|k| (Value::from(*k), Value::Null))
                .collect();
            sort_entries_as(sorter, &mut e);
            e.into_iter()
                .map(|(k, _)| k.as_str().unwrap_or_default().to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(order(Sorter::V2), ["a_", "a1_", "a1b", "ab"]);
        assert_eq!(order(Sorter::V3), ["a_", "a1b", "a1_", "ab"]);
    }

    #[test]
    fn numbers_before_strings() {
        let mut e = vec![
            (Value::from("a"), Value::Null),
            (Value::Int(2), Value::Null),
            (Value::Float(1.5), Value::Null),
            (Value::Bool(true), Value::Null),
        ];
        sort_entries(&mut e);
        let keys: Vec<Value> = e.into_iter().map(|(k, _)| k).collect();
        assert_eq!(
            keys,
            vec![
                Value::Bool(true),
                Value::Float(1.5),
                Value::Int(2),
                Value::from("a")
            ]
        );
    }
}
