//! go-yaml v2's map key order (`sorter.go` `keyList.Less`): numbers and bools first by
//! value, then by Go kind; strings compared rune by rune with letters after non-letters and
//! runs of digits compared as numbers.

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

/// `keyList.Less(a, b)`.
pub(crate) fn key_less(a: &Value, b: &Value) -> bool {
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
    let ar = string_bytes(a);
    let br = string_bytes(b);
    let mut i = 0;
    while i < ar.len() && i < br.len() {
        if ar[i] == br[i] {
            i += 1;
            continue;
        }
        let al = is_letter(ar[i]);
        let bl = is_letter(br[i]);
        if al && bl {
            return ar[i] < br[i];
        }
        if al || bl {
            return bl;
        }
        let (mut an, mut bn): (i64, i64) = (0, 0);
        if ar[i] == '0' || br[i] == '0' {
            let mut j = i;
            while j > 0 && is_digit(ar[j - 1]) {
                j -= 1;
                if ar[j] != '0' {
                    an = 1;
                    bn = 1;
                    break;
                }
            }
        }
        let digit_value = |c: char| i64::from(u32::from(c)) - i64::from(u32::from('0'));
        let mut ai = i;
        while ai < ar.len() && is_digit(ar[ai]) {
            an = an.wrapping_mul(10).wrapping_add(digit_value(ar[ai]));
            ai += 1;
        }
        let mut bi = i;
        while bi < br.len() && is_digit(br[bi]) {
            bn = bn.wrapping_mul(10).wrapping_add(digit_value(br[bi]));
            bi += 1;
        }
        if an != bn {
            return an < bn;
        }
        if ai != bi {
            return ai < bi;
        }
        return ar[i] < br[i];
    }
    ar.len() < br.len()
}

/// Sorts map entries by key the way Go's `sort.Sort(keyList)` does: insertion sort for up to
/// 12 elements (what pdqsort does for short slices), a merge sort above that. Never panics,
/// whatever the comparator does.
pub(crate) fn sort_entries(entries: &mut Vec<(Value, Value)>) {
    if entries.len() <= 12 {
        for i in 1..entries.len() {
            let mut j = i;
            while j > 0 && key_less(&entries[j].0, &entries[j - 1].0) {
                entries.swap(j, j - 1);
                j -= 1;
            }
        }
        return;
    }
    let items = std::mem::take(entries);
    *entries = merge_sort(items);
}

fn merge_sort(mut v: Vec<(Value, Value)>) -> Vec<(Value, Value)> {
    if v.len() <= 1 {
        return v;
    }
    let right = v.split_off(v.len() / 2);
    let left = merge_sort(v);
    let right = merge_sort(right);
    let mut out = Vec::with_capacity(left.len() + right.len());
    let mut l = left.into_iter().peekable();
    let mut r = right.into_iter().peekable();
    loop {
        let take_right = match (l.peek(), r.peek()) {
            (Some(a), Some(b)) => key_less(&b.0, &a.0),
            (Some(_), None) => false,
            (None, Some(_)) => true,
            (None, None) => break,
        };
        let next = if take_right { r.next() } else { l.next() };
        if let Some(e) = next {
            out.push(e);
        }
    }
    out
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
