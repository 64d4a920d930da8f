//! Glob patterns as `github.com/gobwas/glob` compiles them with `/` as the separator (what
//! `.Files.Glob` uses): `*` matches within one path segment, `**` across segments, `?` one
//! non-separator character, `[abc]`, `[a-z]`, `[!abc]` classes, `{a,b}` alternatives and `\`
//! escapes.

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Lit(char),
    Any,   // ?
    Star,  // *
    Super, // **
    Class {
        negated: bool,
        items: Vec<(char, char)>,
    },
    Alt(Vec<Vec<Token>>),
}

/// A compiled pattern.
#[derive(Debug, Clone)]
pub(crate) struct Glob {
    tokens: Vec<Token>,
}

const SEP: char = '/';

impl Glob {
    /// Compiles `pattern`; `None` when gobwas/glob would refuse it (unclosed `[` or `{`,
    /// trailing `\`, empty class).
    pub(crate) fn compile(pattern: &str) -> Option<Glob> {
        let chars: Vec<char> = pattern.chars().collect();
        let mut pos = 0;
        let tokens = parse_seq(&chars, &mut pos, false)?;
        if pos != chars.len() {
            return None;
        }
        Some(Glob { tokens })
    }

    /// The pattern Helm falls back to when compiling fails: `**` (everything).
    pub(crate) fn match_all() -> Glob {
        Glob {
            tokens: vec![Token::Super],
        }
    }

    /// Whether `name` matches the whole pattern.
    pub(crate) fn matches(&self, name: &str) -> bool {
        let chars: Vec<char> = name.chars().collect();
        let mut budget = 1_000_000u32;
        match_seq(&self.tokens, &chars, &mut budget)
    }
}

fn parse_seq(chars: &[char], pos: &mut usize, in_alt: bool) -> Option<Vec<Token>> {
    let mut out = Vec::new();
    while *pos < chars.len() {
        let c = chars[*pos];
        match c {
            ',' | '}' if in_alt => return Some(out),
            '\\' => {
                *pos += 1;
                let e = *chars.get(*pos)?;
                out.push(Token::Lit(e));
                *pos += 1;
            }
            '?' => {
                out.push(Token::Any);
                *pos += 1;
            }
            '*' => {
                if chars.get(*pos + 1) == Some(&'*') {
                    out.push(Token::Super);
                    *pos += 2;
                } else {
                    out.push(Token::Star);
                    *pos += 1;
                }
            }
            '[' => {
                *pos += 1;
                let negated = chars.get(*pos) == Some(&'!');
                if negated {
                    *pos += 1;
                }
                let mut items = Vec::new();
                loop {
                    let c = *chars.get(*pos)?;
                    if c == ']' {
                        *pos += 1;
                        break;
                    }
                    let lo = if c == '\\' {
                        *pos += 1;
                        *chars.get(*pos)?
                    } else {
                        c
                    };
                    *pos += 1;
                    if chars.get(*pos) == Some(&'-')
                        && chars.get(*pos + 1).is_some_and(|c| *c != ']')
                    {
                        let hi = chars[*pos + 1];
                        *pos += 2;
                        items.push((lo, hi));
                    } else {
                        items.push((lo, lo));
                    }
                }
                if items.is_empty() {
                    return None;
                }
                out.push(Token::Class { negated, items });
            }
            '{' => {
                *pos += 1;
                let mut alts = Vec::new();
                loop {
                    let seq = parse_seq(chars, pos, true)?;
                    alts.push(seq);
                    match chars.get(*pos)? {
                        ',' => *pos += 1,
                        '}' => {
                            *pos += 1;
                            break;
                        }
                        _ => return None,
                    }
                }
                out.push(Token::Alt(alts));
            }
            c => {
                out.push(Token::Lit(c));
                *pos += 1;
            }
        }
    }
    if in_alt {
        // An alternative must be closed by `}`.
        return None;
    }
    Some(out)
}

fn match_seq(tokens: &[Token], s: &[char], budget: &mut u32) -> bool {
    if *budget == 0 {
        return false;
    }
    *budget -= 1;
    let Some((first, rest)) = tokens.split_first() else {
        return s.is_empty();
    };
    match first {
        Token::Lit(c) => s.first() == Some(c) && match_seq(rest, &s[1..], budget),
        Token::Any => s.first().is_some_and(|c| *c != SEP) && match_seq(rest, &s[1..], budget),
        Token::Class { negated, items } => {
            s.first().is_some_and(|c| {
                let inside = items.iter().any(|(lo, hi)| lo <= c && c <= hi);
                inside != *negated && *c != SEP
            }) && match_seq(rest, &s[1..], budget)
        }
        Token::Star => {
            for i in 0..=s.len() {
                if match_seq(rest, &s[i..], budget) {
                    return true;
                }
                if i < s.len() && s[i] == SEP {
                    break;
                }
            }
            false
        }
        Token::Super => (0..=s.len()).any(|i| match_seq(rest, &s[i..], budget)),
        Token::Alt(alts) => alts.iter().any(|alt| {
            let mut joined = alt.clone();
            joined.extend_from_slice(rest);
            match_seq(&joined, s, budget)
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, s: &str) -> bool {
        Glob::compile(p).expect("compiles").matches(s)
    }

    #[test]
    fn stars_stop_at_separators_double_stars_do_not() {
        assert!(m("files/*", "files/a.txt"));
        assert!(!m("files/*", "files/sub/a.txt"));
        assert!(m("files/**", "files/sub/a.txt"));
        assert!(m("**.yaml", "a/b/c.yaml"));
        assert!(m("*.{json,yaml}", "x.yaml"));
        assert!(m("f[a-c]?.txt", "fb1.txt"));
        assert!(!m("f[!a-c].txt", "fb.txt"));
    }

    #[test]
    fn broken_patterns_do_not_compile() {
        assert!(Glob::compile("[abc").is_none());
        assert!(Glob::compile("{a,b").is_none());
        assert!(Glob::match_all().matches("any/thing"));
    }
}
