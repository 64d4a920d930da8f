//! `.helmignore` rules with the semantics of Helm's `pkg/ignore` (a small gitignore-like
//! subset on top of Go's `filepath.Match`).

/// `filepath.ErrBadPattern`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IgnoreError {
    /// A malformed glob.
    #[error("syntax error in pattern")]
    BadPattern,
    /// `**` is refused.
    #[error("double-star (**) syntax is not supported")]
    DoubleStar,
}

#[derive(Debug, Clone)]
enum Kind {
    /// Leading `/` or containing `/`: matched against the whole relative path.
    Path,
    /// Matched against the base name.
    Base,
}

/// How a glob is matched: the common shapes of `.helmignore` lines (`.git`, `*.swp`) without
/// running the general matcher, with the same result as [`go_match`].
#[derive(Debug, Clone, PartialEq, Eq)]
enum Shape {
    /// No special character: the name must equal the glob.
    Literal,
    /// `*` then no special character: the name must end with the rest, and what the `*`
    /// covers must not contain `/`.
    StarSuffix,
    /// Anything else.
    Glob,
}

impl Shape {
    fn of(glob: &str) -> Shape {
        let special = |s: &str| s.contains(['*', '?', '[', '\\']);
        if !special(glob) {
            Shape::Literal
        } else if glob.strip_prefix('*').is_some_and(|r| !special(r)) {
            Shape::StarSuffix
        } else {
            Shape::Glob
        }
    }

    fn matches(&self, glob: &str, name: &str) -> bool {
        match self {
            Shape::Literal => glob == name,
            Shape::StarSuffix => name
                .strip_suffix(&glob[1..])
                .is_some_and(|covered| !covered.contains('/')),
            // The characters before the first special one must start the name.
            Shape::Glob => {
                let lit = glob.find(['*', '?', '[', '\\']).unwrap_or(glob.len());
                name.starts_with(&glob[..lit]) && go_match(glob, name).unwrap_or(false)
            }
        }
    }
}

#[derive(Debug, Clone)]
struct Pattern {
    glob: String,
    shape: Shape,
    kind: Kind,
    negate: bool,
    must_dir: bool,
}

/// A parsed `.helmignore`.
#[derive(Debug, Clone, Default)]
pub struct Rules {
    patterns: Vec<Pattern>,
}

impl Rules {
    /// No rules.
    pub fn empty() -> Self {
        Rules::default()
    }

    /// Parses a `.helmignore` (one rule a line; `#` comments; a leading BOM is dropped).
    pub fn parse(src: &[u8]) -> Result<Self, IgnoreError> {
        let src = src.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(src);
        let text = String::from_utf8_lossy(src);
        let mut r = Rules::empty();
        for line in text.split('\n') {
            let line = line.strip_suffix('\r').unwrap_or(line);
            r.add(line)?;
        }
        Ok(r)
    }

    /// Adds Helm's default rule `templates/.?*` (dot files under templates/).
    pub fn add_defaults(&mut self) {
        // The default rule is valid by construction.
        let _ = self.add("templates/.?*");
    }

    /// Adds one rule line.
    pub fn add(&mut self, rule: &str) -> Result<(), IgnoreError> {
        let rule = rule.trim();
        if rule.is_empty() || rule.starts_with('#') {
            return Ok(());
        }
        if rule.contains("**") {
            return Err(IgnoreError::DoubleStar);
        }
        go_match(rule, "abc")?;
        let mut rule = rule;
        let negate = if let Some(r) = rule.strip_prefix('!') {
            rule = r;
            true
        } else {
            false
        };
        let must_dir = if let Some(r) = rule.strip_suffix('/') {
            rule = r;
            true
        } else {
            false
        };
        let (glob, kind) = if let Some(r) = rule.strip_prefix('/') {
            (r, Kind::Path)
        } else if rule.contains('/') {
            (rule, Kind::Path)
        } else {
            (rule, Kind::Base)
        };
        self.patterns.push(Pattern {
            glob: glob.to_owned(),
            shape: Shape::of(glob),
            kind,
            negate,
            must_dir,
        });
        Ok(())
    }

    /// `Rules.Ignore(path, fi)`: whether a `/`-separated path relative to the chart root is
    /// ignored (Helm's exact logic, including its unusual handling of `!` rules: a negated
    /// rule that does not match ignores the path).
    pub fn ignore(&self, path: &str, is_dir: bool) -> bool {
        if path.is_empty() || path == "." || path == "./" {
            return false;
        }
        // The base name is the same for every `Base` rule: found once, when first needed.
        let mut base: Option<&str> = None;
        for p in &self.patterns {
            // A directory-only rule skips a file before any matching (the result of a
            // non-negated one would be discarded; a negated one ignores the file).
            if p.must_dir && !is_dir {
                if p.negate {
                    return true;
                }
                continue;
            }
            let target = match p.kind {
                Kind::Path => path,
                Kind::Base => *base.get_or_insert_with(|| go_base(path)),
            };
            let matched = p.shape.matches(&p.glob, target);
            if p.negate {
                if !matched {
                    return true;
                }
                continue;
            }
            if matched {
                return true;
            }
        }
        false
    }
}

fn go_base(p: &str) -> &str {
    let t = p.trim_end_matches('/');
    if t.is_empty() {
        return if p.is_empty() { "." } else { "/" };
    }
    t.rsplit('/').next().unwrap_or(t)
}

/// Go's `path/filepath.Match` on Unix (`/` separates; `*` and `?` do not cross it).
pub fn go_match(pattern: &str, name: &str) -> Result<bool, IgnoreError> {
    let mut pat: &str = pattern;
    let mut name: &str = name;
    'pattern: while !pat.is_empty() {
        let (star, chunk, rest) = scan_chunk(pat);
        pat = rest;
        if star && chunk.is_empty() {
            return Ok(!name.contains('/'));
        }
        let (t, ok) = match_chunk(chunk, name)?;
        if ok && (t.is_empty() || !pat.is_empty()) {
            name = t;
            continue;
        }
        if star {
            let mut i = 0;
            for (idx, c) in name.char_indices() {
                if c == '/' {
                    break;
                }
                i = idx + c.len_utf8();
                let (t, ok) = match_chunk(chunk, &name[i..])?;
                if ok {
                    if pat.is_empty() && !t.is_empty() {
                        continue;
                    }
                    name = t;
                    continue 'pattern;
                }
            }
            let _ = i;
        }
        // Before failing, check the rest of the pattern is well formed.
        while !pat.is_empty() {
            let (_, chunk, rest) = scan_chunk(pat);
            pat = rest;
            match_chunk(chunk, "")?;
        }
        return Ok(false);
    }
    Ok(name.is_empty())
}

fn scan_chunk(pattern: &str) -> (bool, &str, &str) {
    let mut p = pattern;
    let mut star = false;
    while let Some(r) = p.strip_prefix('*') {
        p = r;
        star = true;
    }
    let b = p.as_bytes();
    let mut in_range = false;
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' if i + 1 < b.len() => i += 1,
            b'[' => in_range = true,
            b']' => in_range = false,
            b'*' if !in_range => break,
            _ => {}
        }
        i += 1;
    }
    (star, &p[..i], &p[i..])
}

fn match_chunk<'a>(chunk: &str, s: &'a str) -> Result<(&'a str, bool), IgnoreError> {
    let mut chunk = chunk;
    let mut s = s;
    let mut failed = false;
    while !chunk.is_empty() {
        if !failed && s.is_empty() {
            failed = true;
        }
        let first = chunk.as_bytes()[0];
        match first {
            b'[' => {
                let mut r = '\0';
                if !failed {
                    let c = s.chars().next().unwrap_or('\0');
                    r = c;
                    s = &s[c.len_utf8()..];
                }
                chunk = &chunk[1..];
                let negated = if let Some(rest) = chunk.strip_prefix('^') {
                    chunk = rest;
                    true
                } else {
                    false
                };
                let mut matched = false;
                let mut nrange = 0;
                loop {
                    if !chunk.is_empty() && chunk.as_bytes()[0] == b']' && nrange > 0 {
                        chunk = &chunk[1..];
                        break;
                    }
                    let (lo, rest) = get_esc(chunk)?;
                    chunk = rest;
                    let mut hi = lo;
                    if let Some(rest) = chunk.strip_prefix('-') {
                        let (h, rest) = get_esc(rest)?;
                        hi = h;
                        chunk = rest;
                    }
                    if lo <= r && r <= hi {
                        matched = true;
                    }
                    nrange += 1;
                }
                if matched == negated {
                    failed = true;
                }
            }
            b'?' => {
                if !failed {
                    let c = s.chars().next().unwrap_or('\0');
                    if c == '/' {
                        failed = true;
                    }
                    s = &s[c.len_utf8().min(s.len())..];
                }
                chunk = &chunk[1..];
            }
            b'\\' => {
                chunk = &chunk[1..];
                if chunk.is_empty() {
                    return Err(IgnoreError::BadPattern);
                }
                let c = chunk.chars().next().unwrap_or('\0');
                if !failed {
                    if s.starts_with(c) {
                        s = &s[c.len_utf8()..];
                    } else {
                        failed = true;
                    }
                }
                chunk = &chunk[c.len_utf8()..];
            }
            _ => {
                let c = chunk.chars().next().unwrap_or('\0');
                if !failed {
                    if s.starts_with(c) {
                        s = &s[c.len_utf8()..];
                    } else {
                        failed = true;
                    }
                }
                chunk = &chunk[c.len_utf8()..];
            }
        }
    }
    if failed {
        return Ok(("", false));
    }
    Ok((s, true))
}

fn get_esc(chunk: &str) -> Result<(char, &str), IgnoreError> {
    let b = chunk.as_bytes();
    if b.is_empty() || b[0] == b'-' || b[0] == b']' {
        return Err(IgnoreError::BadPattern);
    }
    let mut chunk = chunk;
    if b[0] == b'\\' {
        chunk = &chunk[1..];
        if chunk.is_empty() {
            return Err(IgnoreError::BadPattern);
        }
    }
    let c = chunk.chars().next().ok_or(IgnoreError::BadPattern)?;
    let rest = &chunk[c.len_utf8()..];
    if rest.is_empty() {
        return Err(IgnoreError::BadPattern);
    }
    Ok((c, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_match_as_go_match_does() {
        let pieces = ["*", "a", ".", "/", "~", "b", "é", "?", "[a]", "\\*", "-"];
        // Every text of up to `n` pieces.
        let texts = |n: usize| {
            let mut level = vec![String::new()];
            let mut all = vec![String::new()];
            for _ in 0..n {
                level = level
                    .iter()
                    .flat_map(|t| pieces.iter().map(move |p| format!("{t}{p}")))
                    .collect();
                all.extend(level.iter().cloned());
            }
            all
        };
        let globs: Vec<String> = texts(3).into_iter().filter(|g| !g.contains("**")).collect();
        let names: Vec<String> = texts(4).into_iter().filter(|n| n.len() <= 5).collect();
        let mut fast = 0;
        for glob in &globs {
            let shape = Shape::of(glob);
            if shape != Shape::Glob {
                fast += 1;
            }
            for name in &names {
                assert_eq!(
                    shape.matches(glob, name),
                    go_match(glob, name).unwrap_or(false),
                    "{glob:?} {name:?}"
                );
            }
        }
        assert!(fast > 300, "{fast}");
    }

    #[test]
    fn go_match_cases() {
        let cases = [
            ("abc", "abc", true),
            ("*", "abc", true),
            ("*c", "abc", true),
            ("a*", "a", true),
            ("a*/b", "abc/b", true),
            ("a*/b", "a/c/b", false),
            ("a*b*c*d*e*/f", "axbxcxdxe/f", true),
            ("ab[c]", "abc", true),
            ("ab[b-d]", "abc", true),
            ("ab[^c]", "abc", false),
            ("a?b", "a/b", false),
            ("*.txt", "dir/x.txt", false),
            ("a\\*b", "a*b", true),
            ("templates/.?*", "templates/.gitkeep", true),
            ("templates/.?*", "templates/x.yaml", false),
        ];
        for (p, n, want) in cases {
            assert_eq!(go_match(p, n), Ok(want), "{p} {n}");
        }
        assert_eq!(go_match("[", "a"), Err(IgnoreError::BadPattern));
        assert_eq!(go_match("a[", "x"), Err(IgnoreError::BadPattern));
    }

    #[test]
    fn rules_follow_helm() {
        let r = Rules::parse(
            b"\xEF\xBB\xBF# c\r\n*.txt\r\ntests/\n/rootonly.md\ncrds/kustomization.yaml\n",
        )
        .unwrap();
        assert!(r.ignore("a/b/file.txt", false));
        assert!(r.ignore("templates/tests", true));
        assert!(!r.ignore("templates/tests", false));
        assert!(r.ignore("rootonly.md", false));
        assert!(!r.ignore("sub/rootonly.md", false));
        assert!(r.ignore("crds/kustomization.yaml", false));
        assert!(!r.ignore("crds/a.yaml", false));
        assert_eq!(
            Rules::parse(b"a/**/b").unwrap_err(),
            IgnoreError::DoubleStar
        );
        assert_eq!(Rules::parse(b"[").unwrap_err(), IgnoreError::BadPattern);
        let mut d = Rules::empty();
        d.add_defaults();
        assert!(d.ignore("templates/.hidden", false));
        // Helm's negation: a `!` rule that does not match ignores the path.
        let n = Rules::parse(b"!keep.txt\n").unwrap();
        assert!(n.ignore("other.txt", false));
        assert!(!n.ignore("keep.txt", false));
    }
}
