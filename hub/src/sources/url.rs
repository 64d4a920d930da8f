//! The URL handling of Helm and Flux around a chart repository, as Go's `net/url` does it:
//! where the index is (`index.yaml` under the repository URL) and where a chart is (an
//! index entry's URL resolved against the repository URL, Helm's `ResolveReferenceURL`).
//!
//! Go parses a URL, resolves paths on their escaped form and prints the escaped form back:
//! a path stays as written when it is validly escaped, and is re-escaped otherwise (a space
//! becomes `%20`). Host and user info are kept as written (Go checks and re-escapes them; a
//! repository URL the API server accepted is fine either way).

use std::fmt::Write as _;

/// A URL that did not parse (Go's message: `parse "<url>": <reason>`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("parse {}: {reason}", go_quote(.url))]
pub struct UrlError {
    /// The URL as given.
    pub url: String,
    /// Why (`net/url: invalid control character in URL`, `missing protocol scheme`, ...).
    pub reason: String,
}

/// A URL split as Go's `url.Parse` splits it (only what the callers here use).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Url {
    /// Lower-cased scheme, empty when relative.
    scheme: String,
    /// `user@host:port` as written, `None` without `//`.
    authority: Option<String>,
    /// Opaque data after `scheme:` when it does not start with `/`.
    opaque: String,
    /// The path, escaped as Go prints it ([`escaped_path`]).
    path: String,
    /// The query, without `?`.
    query: Option<String>,
    /// The fragment, without `#`.
    fragment: Option<String>,
}

impl Url {
    fn parse(raw: &str) -> Result<Url, UrlError> {
        let err = |reason: &str| UrlError {
            url: raw.to_owned(),
            reason: reason.to_owned(),
        };
        let (rest, fragment) = match raw.split_once('#') {
            Some((r, f)) => (r, Some(f.to_owned())),
            None => (raw, None),
        };
        if rest.bytes().any(|b| b < 0x20 || b == 0x7f) {
            return Err(err("net/url: invalid control character in URL"));
        }
        if rest.is_empty() {
            return Ok(Url {
                fragment,
                ..Url::default()
            });
        }
        let (scheme, rest) = scheme(rest).map_err(&err)?;
        let (rest, query) = if rest.ends_with('?') && rest.matches('?').count() == 1 {
            (&rest[..rest.len() - 1], Some(String::new()))
        } else {
            match rest.split_once('?') {
                Some((r, q)) => (r, Some(q.to_owned())),
                None => (rest, None),
            }
        };
        let mut url = Url {
            scheme: scheme.to_ascii_lowercase(),
            query,
            fragment,
            ..Url::default()
        };
        if !rest.starts_with('/') {
            if !url.scheme.is_empty() {
                url.opaque = rest.to_owned();
                return Ok(url);
            }
            let first = rest.split('/').next().unwrap_or_default();
            if first.contains(':') {
                return Err(err("first path segment in URL cannot contain colon"));
            }
        }
        let mut rest = rest;
        if rest.starts_with("//") && (!url.scheme.is_empty() || !rest.starts_with("///")) {
            let after = &rest[2..];
            let end = after.find('/').unwrap_or(after.len());
            url.authority = Some(after[..end].to_owned());
            rest = &after[end..];
        }
        url.path = escaped_path(rest).map_err(|r| err(&r))?;
        Ok(url)
    }

    fn is_abs(&self) -> bool {
        !self.scheme.is_empty()
    }

    /// Go's `URL.String` for the forms used here.
    fn to_go_string(&self) -> String {
        let mut out = String::new();
        if !self.scheme.is_empty() {
            out.push_str(&self.scheme);
            out.push(':');
        }
        if !self.opaque.is_empty() {
            out.push_str(&self.opaque);
        } else {
            if let Some(authority) = &self.authority {
                if !authority.is_empty() || !self.path.is_empty() {
                    out.push_str("//");
                }
                out.push_str(authority);
            }
            let host = self.authority.as_deref().is_some_and(|a| !a.is_empty());
            if !self.path.is_empty() && !self.path.starts_with('/') && host {
                out.push('/');
            }
            if out.is_empty()
                && let Some(first) = self.path.split('/').next()
                && first.contains(':')
            {
                out.push_str("./");
            }
            out.push_str(&self.path);
        }
        if let Some(q) = &self.query {
            out.push('?');
            out.push_str(q);
        }
        if let Some(f) = self.fragment.as_deref().filter(|f| !f.is_empty()) {
            out.push('#');
            out.push_str(f);
        }
        out
    }
}

/// Go's `getScheme`: the scheme and the rest (no scheme when a character not allowed in one
/// comes before the first `:`).
fn scheme(raw: &str) -> Result<(&str, &str), &'static str> {
    for (i, c) in raw.bytes().enumerate() {
        match c {
            b'a'..=b'z' | b'A'..=b'Z' => {}
            b'0'..=b'9' | b'+' | b'-' | b'.' if i > 0 => {}
            b'0'..=b'9' | b'+' | b'-' | b'.' => return Ok(("", raw)),
            b':' if i == 0 => return Err("missing protocol scheme"),
            b':' => return Ok((&raw[..i], &raw[i + 1..])),
            _ => return Ok(("", raw)),
        }
    }
    Ok(("", raw))
}

/// Go's `shouldEscape(c, encodePath)`.
fn should_escape_path(c: u8) -> bool {
    !(c.is_ascii_alphanumeric()
        || matches!(
            c,
            b'-' | b'_'
                | b'.'
                | b'~'
                | b'$'
                | b'&'
                | b'+'
                | b','
                | b'/'
                | b':'
                | b';'
                | b'='
                | b'@'
        ))
}

/// Go's `validEncoded(s, encodePath)`.
fn valid_encoded_path(s: &str) -> bool {
    s.bytes().all(|c| {
        matches!(
            c,
            b'!' | b'$'
                | b'&'
                | b'\''
                | b'('
                | b')'
                | b'*'
                | b'+'
                | b','
                | b';'
                | b'='
                | b':'
                | b'@'
                | b'['
                | b']'
                | b'%'
        ) || !should_escape_path(c)
    })
}

/// Go's `unescape(s, encodePath)` (the bytes; `%` must start two hex digits).
fn unescape(s: &str) -> Result<Vec<u8>, String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b
                .get(i + 1..i + 3)
                .filter(|h| h.iter().all(u8::is_ascii_hexdigit));
            let Some(hex) = hex else {
                let bad: String = s[i..].chars().take(3).collect();
                return Err(format!("invalid URL escape {}", go_quote(&bad)));
            };
            let text = std::str::from_utf8(hex).unwrap_or("00");
            out.push(u8::from_str_radix(text, 16).unwrap_or(0));
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(out)
}

/// Go's `escape(s, encodePath)` of raw bytes.
fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for &c in bytes {
        if should_escape_path(c) {
            let _ = write!(out, "%{c:02X}");
        } else {
            out.push(char::from(c));
        }
    }
    out
}

/// What Go prints for a path written as `raw` (`setPath` then `EscapedPath`): `raw` when
/// it is validly escaped, else the unescaped path escaped again.
fn escaped_path(raw: &str) -> Result<String, String> {
    let unescaped = unescape(raw)?;
    if valid_encoded_path(raw) {
        Ok(raw.to_owned())
    } else {
        Ok(escape(&unescaped))
    }
}

/// Go's `resolvePath(base, ref)` (RFC 3986 merge and dot-segment removal).
fn resolve_path(base: &str, reference: &str) -> String {
    let full = if reference.is_empty() {
        base.to_owned()
    } else if !reference.starts_with('/') {
        let i = base.rfind('/').map_or(0, |i| i + 1);
        format!("{}{reference}", &base[..i])
    } else {
        reference.to_owned()
    };
    if full.is_empty() {
        return String::new();
    }
    let mut dst = String::from("/");
    let mut first = true;
    let mut last = "";
    for elem in full.split('/') {
        last = elem;
        if elem == "." {
            first = false;
            continue;
        }
        if elem == ".." {
            let kept = dst[1..].to_owned();
            dst = String::from("/");
            match kept.rfind('/') {
                None => first = true,
                Some(i) => dst.push_str(&kept[..i]),
            }
        } else {
            if !first {
                dst.push('/');
            }
            dst.push_str(elem);
            first = false;
        }
    }
    if last == "." || last == ".." {
        dst.push('/');
    }
    if dst.len() > 1 && dst.as_bytes()[1] == b'/' {
        dst.remove(0);
    }
    dst
}

/// Go's `path.Clean`.
fn clean(path: &str) -> String {
    if path.is_empty() {
        return ".".to_owned();
    }
    let rooted = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for elem in path.split('/') {
        match elem {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|p| *p != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            other => parts.push(other),
        }
    }
    let joined = parts.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_owned(),
        (false, false) => joined,
    }
}

/// The repository URL as source-controller keeps it (`NormalizeURL`): trailing slashes of
/// the path trimmed, then one added (`oci://` URLs only lose theirs).
pub fn normalize_repository_url(repository_url: &str) -> Result<String, UrlError> {
    if repository_url.is_empty() {
        return Ok(String::new());
    }
    let mut url = Url::parse(repository_url)?;
    let trimmed = url.path.trim_end_matches('/').to_owned();
    url.path = if url.scheme == "oci" {
        trimmed
    } else {
        format!("{trimmed}/")
    };
    Ok(url.to_go_string())
}

/// Where a repository's index is: `index.yaml` joined to the URL's path (`path.Join`, which
/// also cleans it), as source-controller downloads it.
pub fn index_url(repository_url: &str) -> Result<String, UrlError> {
    let mut url = Url::parse(repository_url)?;
    url.path = clean(&format!("{}/index.yaml", url.path));
    Ok(url.to_go_string())
}

/// Helm's `ResolveReferenceURL(baseURL, refURL)`: `reference` as it is when absolute (it
/// has a scheme); otherwise resolved against `base` taken as a directory, with `base`'s
/// query (the reference's own query is dropped, as Helm does).
pub fn resolve_reference_url(base: &str, reference: &str) -> Result<String, UrlError> {
    let r = Url::parse(reference)?;
    if r.is_abs() {
        return Ok(reference.to_owned());
    }
    let mut b = Url::parse(base)?;
    b.path = format!("{}/", b.path.strip_suffix('/').unwrap_or(&b.path));
    let mut out = r.clone();
    out.scheme = b.scheme.clone();
    if r.authority.is_some() {
        out.path = resolve_path(&r.path, "");
    } else {
        if r.path.is_empty() && r.query.is_none() && r.fragment.as_deref().unwrap_or("").is_empty()
        {
            out.fragment = b.fragment.clone();
        }
        out.authority = b.authority.clone();
        out.path = resolve_path(&b.path, &r.path);
    }
    // `RawQuery = base.RawQuery`; a reference's bare `?` (ForceQuery) still prints one.
    out.query = match (&b.query, &r.query) {
        (Some(q), _) if !q.is_empty() => Some(q.clone()),
        (_, Some(q)) if q.is_empty() => Some(String::new()),
        _ => None,
    };
    Ok(out.to_go_string())
}

/// Go's `%q` of a URL (printable ASCII is all that matters here; others are escaped).
fn go_quote(s: &str) -> String {
    flotilla_gotmpl::gofmt::quote(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Every expectation below was printed by Go 1.26's net/url through the same steps
    // (Helm v4's ResolveReferenceURL, source-controller's NormalizeURL and index URL).

    #[test]
    fn chart_urls_resolve_against_the_repository_url_as_helm_does() {
        let cases = [
            (
                "https://charts.example.com",
                "podinfo-6.5.0.tgz",
                "https://charts.example.com/podinfo-6.5.0.tgz",
            ),
            (
                "https://charts.example.com/",
                "podinfo-6.5.0.tgz",
                "https://charts.example.com/podinfo-6.5.0.tgz",
            ),
            (
                "https://example.com/charts",
                "podinfo-6.5.0.tgz",
                "https://example.com/charts/podinfo-6.5.0.tgz",
            ),
            (
                "https://example.com/charts/",
                "sub/podinfo-6.5.0.tgz",
                "https://example.com/charts/sub/podinfo-6.5.0.tgz",
            ),
            (
                "https://example.com/charts/",
                "/abs/podinfo.tgz",
                "https://example.com/abs/podinfo.tgz",
            ),
            (
                "https://example.com/charts/",
                "../podinfo.tgz",
                "https://example.com/podinfo.tgz",
            ),
            (
                "https://example.com/a/b/",
                "./../../../x.tgz",
                "https://example.com/x.tgz",
            ),
            (
                "https://example.com/charts/",
                "https://cdn.example.com/p.tgz",
                "https://cdn.example.com/p.tgz",
            ),
            (
                "https://example.com/charts/",
                "HTTPS://CDN.example.com/p.tgz",
                "HTTPS://CDN.example.com/p.tgz",
            ),
            (
                "https://example.com/charts/",
                "//cdn.example.com/p.tgz",
                "https://cdn.example.com/p.tgz",
            ),
            (
                "https://example.com/charts?token=1",
                "p.tgz",
                "https://example.com/charts/p.tgz?token=1",
            ),
            (
                "https://example.com/charts?token=1",
                "p.tgz?x=2",
                "https://example.com/charts/p.tgz?token=1",
            ),
            (
                "https://example.com/charts",
                "p.tgz?x=2",
                "https://example.com/charts/p.tgz",
            ),
            (
                "https://example.com/charts",
                "p.tgz#frag",
                "https://example.com/charts/p.tgz#frag",
            ),
            (
                "https://example.com/charts",
                "a b.tgz",
                "https://example.com/charts/a%20b.tgz",
            ),
            (
                "https://example.com/charts",
                "a%20b.tgz",
                "https://example.com/charts/a%20b.tgz",
            ),
            (
                "https://example.com/my%2Fcharts/",
                "p.tgz",
                "https://example.com/my%2Fcharts/p.tgz",
            ),
            (
                "https://user:pw@example.com:8443/c",
                "p.tgz",
                "https://user:pw@example.com:8443/c/p.tgz",
            ),
            (
                "http://127.0.0.1:8080",
                "charts/p.tgz",
                "http://127.0.0.1:8080/charts/p.tgz",
            ),
            (
                "https://example.com/charts",
                "p.tgz?",
                "https://example.com/charts/p.tgz?",
            ),
            (
                "https://example.com/charts?t=1",
                "",
                "https://example.com/charts/?t=1",
            ),
            (
                "https://example.com/a%7Eb",
                "p(1).tgz",
                "https://example.com/a%7Eb/p(1).tgz",
            ),
            (
                "https://example.com/c",
                "x/./y/../p.tgz",
                "https://example.com/c/x/p.tgz",
            ),
        ];
        for (base, reference, want) in cases {
            assert_eq!(
                resolve_reference_url(base, reference).as_deref(),
                Ok(want),
                "{base} + {reference}"
            );
        }
    }

    #[test]
    fn bad_urls_fail_with_go_messages() {
        assert_eq!(
            resolve_reference_url("https://example.com", "a\nb")
                .unwrap_err()
                .to_string(),
            "parse \"a\\nb\": net/url: invalid control character in URL"
        );
        assert_eq!(
            resolve_reference_url("https://example.com", "1a:b.tgz")
                .unwrap_err()
                .to_string(),
            "parse \"1a:b.tgz\": first path segment in URL cannot contain colon"
        );
        assert_eq!(
            resolve_reference_url("https://example.com", "a%zz.tgz")
                .unwrap_err()
                .to_string(),
            "parse \"a%zz.tgz\": invalid URL escape \"%zz\""
        );
        assert_eq!(
            resolve_reference_url(":bad", "p.tgz")
                .unwrap_err()
                .to_string(),
            "parse \":bad\": missing protocol scheme"
        );
    }

    #[test]
    fn repository_urls_normalize_and_locate_their_index() {
        let cases = [
            (
                "https://example.com",
                "https://example.com/",
                "https://example.com/index.yaml",
            ),
            (
                "https://example.com/charts",
                "https://example.com/charts/",
                "https://example.com/charts/index.yaml",
            ),
            (
                "https://example.com/charts//",
                "https://example.com/charts/",
                "https://example.com/charts/index.yaml",
            ),
            (
                "https://example.com/a/../charts/",
                "https://example.com/a/../charts/",
                "https://example.com/charts/index.yaml",
            ),
            (
                "https://example.com/charts?token=1",
                "https://example.com/charts/?token=1",
                "https://example.com/charts/index.yaml?token=1",
            ),
        ];
        for (url, normalized, index) in cases {
            assert_eq!(
                normalize_repository_url(url).as_deref(),
                Ok(normalized),
                "{url}"
            );
            assert_eq!(index_url(url).as_deref(), Ok(index), "{url}");
        }
        assert_eq!(
            normalize_repository_url("oci://ghcr.io/org/charts/").as_deref(),
            Ok("oci://ghcr.io/org/charts")
        );
    }
}
