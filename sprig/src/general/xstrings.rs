//! huandu/xstrings v1.5.0 case conversions (`snakecase`, `kebabcase`, `camelcase` =
//! `ToPascalCase`) and `Shuffle`, re-implemented from their documented word-splitting rules.
//!
//! Go decodes a literal U+FFFD as `utf8.RuneError` and xstrings skips such runes while
//! classifying words; that is reproduced.

use super::{is_go_space, is_punct, is_upper, to_lower, to_upper};

const RUNE_ERROR: char = '\u{fffd}';

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Word {
    Invalid,
    Number,
    Upper,
    Alphabet,
    Connector,
    Punct,
    Other,
}

fn is_connector(c: char) -> bool {
    c == '-' || c == '_' || is_go_space(c)
}

/// A letter that is not a CJK ideograph.
fn is_alphabet(c: char) -> bool {
    if !c.is_alphabetic() || c.is_numeric() {
        return false;
    }
    let u = c as u32;
    !(u >= 0x3400
        && ((0x4E00..=0x9FCC).contains(&u)
            || (0x3400..=0x4D85).contains(&u)
            || (0x20000..=0x2B81D).contains(&u)))
}

fn is_number(c: char) -> bool {
    c.is_numeric()
}

/// The next rune that is not a decoding error, and the bytes consumed to reach past it;
/// `prev` when only errors remain.
fn next_valid_rune(s: &str, prev: char) -> (char, usize) {
    let mut size = 0;
    for c in s.chars() {
        size += c.len_utf8();
        if c != RUNE_ERROR {
            return (c, size);
        }
    }
    (prev, size)
}

fn next_word(s: &str) -> (Word, &str, &str) {
    if s.is_empty() {
        return (Word::Invalid, "", "");
    }
    let (mut r, mut size) = next_valid_rune(s, RUNE_ERROR);
    let mut offset = size;
    if r == RUNE_ERROR {
        return (Word::Invalid, &s[..offset], &s[offset..]);
    }
    let mut remaining = &s[size..];
    // Extends the word while `keep` holds for the next valid rune.
    let extend =
        |remaining: &mut &str, offset: &mut usize, r: &mut char, keep: &dyn Fn(char) -> bool| {
            while !remaining.is_empty() {
                let (nr, ns) = next_valid_rune(remaining, *r);
                *r = nr;
                if !keep(nr) {
                    break;
                }
                *offset += ns;
                *remaining = &remaining[ns..];
            }
        };
    let wt = if is_connector(r) {
        extend(&mut remaining, &mut offset, &mut r, &is_connector);
        Word::Connector
    } else if is_punct(r) {
        extend(&mut remaining, &mut offset, &mut r, &is_punct);
        Word::Punct
    } else if is_upper(r) {
        if !remaining.is_empty() {
            (r, size) = next_valid_rune(remaining, r);
            if is_upper(r) {
                let mut prev_size = size;
                offset += size;
                remaining = &remaining[size..];
                while !remaining.is_empty() {
                    (r, size) = next_valid_rune(remaining, r);
                    if !is_upper(r) {
                        break;
                    }
                    prev_size = size;
                    offset += size;
                    remaining = &remaining[size..];
                }
                if !remaining.is_empty() && is_alphabet(r) {
                    offset -= prev_size;
                    remaining = &s[offset..];
                }
            } else if is_alphabet(r) {
                offset += size;
                remaining = &remaining[size..];
                extend(&mut remaining, &mut offset, &mut r, &|c| {
                    is_alphabet(c) && !is_upper(c)
                });
            }
        }
        Word::Upper
    } else if is_alphabet(r) {
        extend(&mut remaining, &mut offset, &mut r, &|c| {
            is_alphabet(c) && !is_upper(c)
        });
        Word::Alphabet
    } else if is_number(r) {
        extend(&mut remaining, &mut offset, &mut r, &is_number);
        Word::Number
    } else {
        while !remaining.is_empty() {
            let (nr, ns) = next_valid_rune(remaining, r);
            r = nr;
            if ns == 0 || is_connector(nr) || is_alphabet(nr) || is_number(nr) || is_punct(nr) {
                break;
            }
            offset += ns;
            remaining = &remaining[ns..];
        }
        Word::Other
    };
    (wt, &s[..offset], remaining)
}

fn push_lower(buf: &mut String, wt: Word, word: &str, conn: char) {
    if wt != Word::Upper && wt != Word::Connector {
        buf.push_str(word);
        return;
    }
    for c in word.chars() {
        if is_connector(c) {
            buf.push(conn);
        } else if is_upper(c) {
            buf.push(to_lower(c));
        } else {
            buf.push(c);
        }
    }
}

/// xstrings `ToSnakeCase` (`conn` = `_`) and `ToKebabCase` (`conn` = `-`).
pub(crate) fn to_snake_kebab(s: &str, conn: char) -> String {
    let mut buf = String::with_capacity(s.len() + 8);
    if s.is_empty() {
        return buf;
    }
    let (mut wt, mut word, mut remaining) = next_word(s);
    while !remaining.is_empty() {
        if wt != Word::Connector {
            push_lower(&mut buf, wt, word, conn);
        }
        let prev = wt;
        let last = word;
        (wt, word, remaining) = next_word(remaining);
        match prev {
            Word::Number => {
                while wt == Word::Alphabet || wt == Word::Number {
                    push_lower(&mut buf, wt, word, conn);
                    (wt, word, remaining) = next_word(remaining);
                }
                if wt != Word::Invalid && wt != Word::Punct && wt != Word::Connector {
                    buf.push(conn);
                }
            }
            Word::Connector => push_lower(&mut buf, prev, last, conn),
            Word::Punct => {}
            _ => {
                if wt != Word::Number {
                    if wt != Word::Connector && wt != Word::Punct {
                        buf.push(conn);
                    }
                    continue;
                }
                if remaining.is_empty() {
                    continue;
                }
                let last = word;
                (wt, word, remaining) = next_word(remaining);
                if wt != Word::Alphabet {
                    push_lower(&mut buf, Word::Number, last, conn);
                    if wt != Word::Connector && wt != Word::Punct {
                        buf.push(conn);
                    }
                    continue;
                }
                buf.push(conn);
                push_lower(&mut buf, Word::Number, last, conn);
                while wt == Word::Alphabet || wt == Word::Number {
                    push_lower(&mut buf, wt, word, conn);
                    (wt, word, remaining) = next_word(remaining);
                }
                if wt != Word::Invalid && wt != Word::Connector && wt != Word::Punct {
                    buf.push(conn);
                }
            }
        }
    }
    push_lower(&mut buf, wt, word, conn);
    buf
}

/// xstrings `ToPascalCase`.
pub(crate) fn to_pascal_case(s: &str) -> String {
    let mut buf = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    let mut first_upper = false;
    let mut r0 = '\0';
    let mut consumed_any = false;
    for c in chars.by_ref() {
        consumed_any = true;
        r0 = c;
        if !is_connector(c) {
            first_upper = is_upper(c);
            r0 = to_upper(c);
            break;
        }
        buf.push(c);
    }
    if chars.peek().is_none() {
        if consumed_any {
            buf.push(r0);
        }
        return buf;
    }
    for c in chars {
        let r1 = r0;
        r0 = c;
        if is_connector(r0) && is_connector(r1) {
            buf.push(r1);
            continue;
        }
        if is_connector(r1) {
            first_upper = is_upper(r0);
            r0 = to_upper(r0);
        } else {
            if first_upper {
                if is_upper(r0) {
                    r0 = to_lower(r0);
                } else {
                    first_upper = false;
                }
            }
            buf.push(r1);
        }
    }
    buf.push(r0);
    buf
}

/// xstrings `Shuffle`: a Fisher–Yates shuffle of the runes.
pub(crate) fn shuffle(s: &str) -> String {
    let mut runes: Vec<char> = s.chars().collect();
    for i in (1..runes.len()).rev() {
        let j = super::random_below(i as u64 + 1).unwrap_or(0) as usize;
        runes.swap(i, j);
    }
    runes.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_samples() {
        for (input, snake) in [
            ("FirstName", "first_name"),
            ("HTTPServer", "http_server"),
            ("NoHTTPS", "no_https"),
            ("GO_PATH", "go_path"),
            ("GO PATH", "go_path"),
            ("GO-PATH", "go_path"),
            ("http2xx", "http_2xx"),
            ("HTTP20xOK", "http_20x_ok"),
            ("Duration2m3s", "duration_2m3s"),
            ("Bld4Floor3rd", "bld4_floor_3rd"),
        ] {
            assert_eq!(to_snake_kebab(input, '_'), snake, "{input}");
            assert_eq!(
                to_snake_kebab(input, '-'),
                snake.replace('_', "-"),
                "{input}"
            );
        }
        for (input, pascal) in [
            ("some_words", "SomeWords"),
            ("http_server", "HttpServer"),
            ("no_https", "NoHttps"),
            ("_complex__case_", "_Complex_Case_"),
            ("some words", "SomeWords"),
            ("GOLANG_IS_GREAT", "GolangIsGreat"),
        ] {
            assert_eq!(to_pascal_case(input), pascal, "{input}");
        }
    }
}
