//! `urlParse` and `urlJoin`: Go's `net/url` parsing (`url.Parse`) and printing
//! (`URL.String`) with its escaping rules. A parse error is a Sprig panic
//! (`unable to parse url: parse "…": …`).

use flotilla_gotmpl::gofmt::quote;
use flotilla_gotmpl::{ArgType, FuncError, FuncMap, Map, Signature, Value};

use super::{NIL_DEREF, add, arg_str};

pub(crate) fn register(map: &mut FuncMap) {
    add(map, "urlParse", Signature::fixed([ArgType::String]), |a| {
        let raw = arg_str(a, 0);
        let u = parse(raw).map_err(|e| FuncError::new(format!("unable to parse url: {e}")))?;
        let d = Map::new();
        d.insert("scheme", Value::from(u.scheme.as_str()));
        d.insert("host", Value::from(u.host.as_str()));
        d.insert("hostname", Value::from(hostname(&u.host)));
        d.insert("path", Value::from(u.path.as_str()));
        d.insert("query", Value::from(u.raw_query.as_str()));
        d.insert("opaque", Value::from(u.opaque.as_str()));
        d.insert("fragment", Value::from(u.fragment.as_str()));
        d.insert(
            "userinfo",
            Value::from(u.user.as_ref().map(User::to_go_string).unwrap_or_default()),
        );
        Ok(Value::Map(d))
    });
    add(map, "urlJoin", Signature::fixed([ArgType::Map]), |a| {
        let d = a[0].as_map().cloned().unwrap_or_default();
        let get = |key: &str| -> Result<String, FuncError> {
            match d.get(key) {
                None => Ok(String::new()),
                Some(Value::String(s)) => Ok(s.to_string()),
                Some(Value::Nil) => Err(FuncError::new(NIL_DEREF)),
                Some(other) => Err(FuncError::new(format!(
                    "unable to parse {key} key, must be of type string, but {} found",
                    other.kind().name()
                ))),
            }
        };
        let mut u = Url {
            scheme: get("scheme")?,
            host: get("host")?,
            path: get("path")?,
            raw_query: get("query")?,
            opaque: get("opaque")?,
            fragment: get("fragment")?,
            ..Url::default()
        };
        let userinfo = get("userinfo")?;
        if !userinfo.is_empty() {
            let tmp = parse(&format!("proto://{userinfo}@host"))
                .map_err(|e| FuncError::new(format!("unable to parse userinfo in dict: {e}")))?;
            u.user = tmp.user;
        }
        Ok(Value::from(u.to_go_string()))
    });
}

#[derive(Debug, Default)]
struct User {
    username: String,
    password: Option<String>,
}

impl User {
    fn to_go_string(&self) -> String {
        let mut s = escape(&self.username, Mode::UserPassword);
        if let Some(p) = &self.password {
            s.push(':');
            s.push_str(&escape(p, Mode::UserPassword));
        }
        s
    }
}

#[derive(Debug, Default)]
struct Url {
    scheme: String,
    opaque: String,
    user: Option<User>,
    host: String,
    path: String,
    raw_path: String,
    omit_host: bool,
    force_query: bool,
    raw_query: String,
    fragment: String,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Path,
    Host,
    UserPassword,
    Fragment,
}

fn should_escape(c: u8, mode: Mode) -> bool {
    if c.is_ascii_alphanumeric() {
        return false;
    }
    if mode == Mode::Host
        && matches!(
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
                | b'['
                | b']'
                | b'<'
                | b'>'
                | b'"'
        )
    {
        return false;
    }
    match c {
        b'-' | b'_' | b'.' | b'~' => return false,
        b'$' | b'&' | b'+' | b',' | b'/' | b':' | b';' | b'=' | b'?' | b'@' => {
            return match mode {
                Mode::Fragment => false,
                Mode::Path => c == b'?',
                Mode::UserPassword => matches!(c, b'@' | b'/' | b'?' | b':'),
                Mode::Host => true,
            };
        }
        _ => {}
    }
    if mode == Mode::Fragment && matches!(c, b'!' | b'(' | b')' | b'*') {
        return false;
    }
    true
}

fn escape(s: &str, mode: Mode) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if should_escape(b, mode) {
            out.push_str(&format!("%{b:02X}"));
        } else {
            out.push(char::from(b));
        }
    }
    out
}

fn unescape(s: &str, mode: Mode) -> Result<String, String> {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                if i + 2 >= b.len()
                    || !b[i + 1].is_ascii_hexdigit()
                    || !b[i + 2].is_ascii_hexdigit()
                {
                    let bad = String::from_utf8_lossy(&b[i..(i + 3).min(b.len())]).into_owned();
                    return Err(format!("invalid URL escape {}", quote(&bad)));
                }
                if mode == Mode::Host && hex(b[i + 1]) < 8 && &b[i..i + 3] != b"%25" {
                    let bad = String::from_utf8_lossy(&b[i..i + 3]).into_owned();
                    return Err(format!("invalid URL escape {}", quote(&bad)));
                }
                i += 3;
            }
            c => {
                if mode == Mode::Host && c < 0x80 && should_escape(c, mode) {
                    let bad = char::from(c).to_string();
                    return Err(format!("invalid character {} in host name", quote(&bad)));
                }
                i += 1;
            }
        }
    }
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            out.push(hex(b[i + 1]) << 4 | hex(b[i + 2]));
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

fn hex(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        b'A'..=b'F' => c - b'A' + 10,
        _ => 0,
    }
}

/// `url.Parse`, with its `*url.Error` text on failure.
fn parse(raw: &str) -> Result<Url, String> {
    let (u, frag) = match raw.split_once('#') {
        Some((u, f)) => (u, Some(f)),
        None => (raw, None),
    };
    let mut url = parse_no_fragment(u).map_err(|e| format!("parse {}: {e}", quote(u)))?;
    if let Some(f) = frag.filter(|f| !f.is_empty()) {
        url.fragment =
            unescape(f, Mode::Fragment).map_err(|e| format!("parse {}: {e}", quote(raw)))?;
    }
    Ok(url)
}

fn parse_no_fragment(raw: &str) -> Result<Url, String> {
    if raw.bytes().any(|b| b < b' ' || b == 0x7f) {
        return Err("net/url: invalid control character in URL".to_string());
    }
    let mut url = Url::default();
    if raw == "*" {
        url.path = "*".to_string();
        return Ok(url);
    }
    let (scheme, mut rest) = get_scheme(raw)?;
    url.scheme = scheme.to_ascii_lowercase();
    if rest.ends_with('?') && rest.matches('?').count() == 1 {
        url.force_query = true;
        rest = &rest[..rest.len() - 1];
    } else if let Some((r, q)) = rest.split_once('?') {
        url.raw_query = q.to_string();
        rest = r;
    }
    if !rest.starts_with('/') {
        if !url.scheme.is_empty() {
            url.opaque = rest.to_string();
            return Ok(url);
        }
        let segment = rest.split('/').next().unwrap_or("");
        if segment.contains(':') {
            return Err("first path segment in URL cannot contain colon".to_string());
        }
    }
    if (!url.scheme.is_empty() || !rest.starts_with("///")) && rest.starts_with("//") {
        let authority_and_rest = &rest[2..];
        let (authority, r) = match authority_and_rest.find('/') {
            Some(i) => (&authority_and_rest[..i], &authority_and_rest[i..]),
            None => (authority_and_rest, ""),
        };
        let (user, host) = parse_authority(authority)?;
        url.user = user;
        url.host = host;
        rest = r;
    } else if !url.scheme.is_empty() && rest.starts_with('/') {
        url.omit_host = true;
    }
    url.path = unescape(rest, Mode::Path)?;
    url.raw_path = if escape(&url.path, Mode::Path) == rest {
        String::new()
    } else {
        rest.to_string()
    };
    Ok(url)
}

fn get_scheme(raw: &str) -> Result<(&str, &str), String> {
    for (i, c) in raw.bytes().enumerate() {
        match c {
            b'a'..=b'z' | b'A'..=b'Z' => {}
            b'0'..=b'9' | b'+' | b'-' | b'.' => {
                if i == 0 {
                    return Ok(("", raw));
                }
            }
            b':' => {
                if i == 0 {
                    return Err("missing protocol scheme".to_string());
                }
                return Ok((&raw[..i], &raw[i + 1..]));
            }
            _ => return Ok(("", raw)),
        }
    }
    Ok(("", raw))
}

fn valid_optional_port(port: &str) -> bool {
    port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()))
}

fn parse_authority(authority: &str) -> Result<(Option<User>, String), String> {
    let at = authority.rfind('@');
    let host = parse_host(match at {
        Some(i) => &authority[i + 1..],
        None => authority,
    })?;
    let Some(i) = at else { return Ok((None, host)) };
    let userinfo = &authority[..i];
    let valid = userinfo.bytes().all(|b| {
        b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'.'
                    | b'_'
                    | b':'
                    | b'~'
                    | b'!'
                    | b'$'
                    | b'&'
                    | b'\''
                    | b'('
                    | b')'
                    | b'*'
                    | b'+'
                    | b','
                    | b';'
                    | b'='
                    | b'%'
                    | b'@'
            )
            || b >= 0x80
    });
    if !valid {
        return Err("net/url: invalid userinfo".to_string());
    }
    let user = match userinfo.split_once(':') {
        None => User {
            username: unescape(userinfo, Mode::UserPassword)?,
            password: None,
        },
        Some((u, p)) => User {
            username: unescape(u, Mode::UserPassword)?,
            password: Some(unescape(p, Mode::UserPassword)?),
        },
    };
    Ok((Some(user), host))
}

fn parse_host(host: &str) -> Result<String, String> {
    if host.starts_with('[') {
        let Some(i) = host.rfind(']') else {
            return Err("missing ']' in host".to_string());
        };
        let colon_port = &host[i + 1..];
        if !valid_optional_port(colon_port) {
            return Err(format!("invalid port {} after host", quote(colon_port)));
        }
        // Go 1.25 checks the IP literal with netip.ParseAddr.
        let literal = host[1..i].replacen("%25", "%", 1);
        match parse_addr(&literal) {
            Err(e) => return Err(format!("invalid host: {e}")),
            Ok(true) => return Err("invalid IP-literal".to_string()),
            Ok(false) => {}
        }
    } else if let Some(i) = host.rfind(':') {
        let colon_port = &host[i..];
        if !valid_optional_port(colon_port) {
            return Err(format!("invalid port {} after host", quote(colon_port)));
        }
    }
    unescape(host, Mode::Host)
}

/// `URL.Hostname`.
fn hostname(host: &str) -> String {
    let mut h = host;
    if let Some(colon) = host.rfind(':')
        && valid_optional_port(&host[colon..])
    {
        h = &host[..colon];
    }
    if h.starts_with('[') && h.ends_with(']') && h.len() >= 2 {
        h = &h[1..h.len() - 1];
    }
    h.to_string()
}

impl Url {
    /// `URL.String`.
    fn to_go_string(&self) -> String {
        let mut buf = String::new();
        if !self.scheme.is_empty() {
            buf.push_str(&self.scheme);
            buf.push(':');
        }
        if !self.opaque.is_empty() {
            buf.push_str(&self.opaque);
        } else {
            let authority = !self.scheme.is_empty() || !self.host.is_empty() || self.user.is_some();
            let omit = self.omit_host && self.host.is_empty() && self.user.is_none();
            if authority && !omit {
                if !self.host.is_empty() || !self.path.is_empty() || self.user.is_some() {
                    buf.push_str("//");
                }
                if let Some(u) = &self.user {
                    buf.push_str(&u.to_go_string());
                    buf.push('@');
                }
                if !self.host.is_empty() {
                    buf.push_str(&escape(&self.host, Mode::Host));
                }
            }
            let path = self.escaped_path();
            if !path.is_empty() && !path.starts_with('/') && !self.host.is_empty() {
                buf.push('/');
            }
            if buf.is_empty() && path.split('/').next().unwrap_or("").contains(':') {
                buf.push_str("./");
            }
            buf.push_str(&path);
        }
        if self.force_query || !self.raw_query.is_empty() {
            buf.push('?');
            buf.push_str(&self.raw_query);
        }
        if !self.fragment.is_empty() {
            buf.push('#');
            buf.push_str(&escape(&self.fragment, Mode::Fragment));
        }
        buf
    }

    fn escaped_path(&self) -> String {
        if !self.raw_path.is_empty()
            && unescape(&self.raw_path, Mode::Path).is_ok_and(|p| p == self.path)
        {
            return self.raw_path.clone();
        }
        if self.path == "*" {
            return "*".to_string();
        }
        escape(&self.path, Mode::Path)
    }
}

/// `netip.ParseAddr`: `Ok(true)` for IPv4, `Ok(false)` for IPv6, or Go's error text.
fn parse_addr(s: &str) -> Result<bool, String> {
    let err = |msg: &str, at: Option<&str>| match at {
        Some(at) => format!("ParseAddr({}): {msg} (at {})", quote(s), quote(at)),
        None => format!("ParseAddr({}): {msg}", quote(s)),
    };
    for b in s.bytes() {
        match b {
            b'.' => {
                return parse_ipv4_fields(s, 0, s.len())
                    .map(|()| true)
                    .map_err(|(m, at)| err(m, at));
            }
            b':' => return parse_ipv6(s).map(|()| false).map_err(|(m, at)| err(m, at)),
            b'%' => return Err(err("missing IPv6 address", None)),
            _ => {}
        }
    }
    Err(err("unable to parse IP", None))
}

type AddrErr<'a> = (&'static str, Option<&'a str>);

fn parse_ipv4_fields(input: &str, off: usize, end: usize) -> Result<(), AddrErr<'_>> {
    let s = &input[off..end];
    let b = s.as_bytes();
    let (mut val, mut pos, mut dig) = (0u32, 0, 0);
    for i in 0..b.len() {
        match b[i] {
            b'0'..=b'9' => {
                if dig == 1 && val == 0 {
                    return Err(("IPv4 field has octet with leading zero", None));
                }
                val = val * 10 + u32::from(b[i] - b'0');
                dig += 1;
                if val > 255 {
                    return Err(("IPv4 field has value >255", None));
                }
            }
            b'.' => {
                if i == 0 || i == b.len() - 1 || b[i - 1] == b'.' {
                    return Err(("IPv4 field must have at least one digit", Some(&s[i..])));
                }
                if pos == 3 {
                    return Err(("IPv4 address too long", None));
                }
                pos += 1;
                val = 0;
                dig = 0;
            }
            _ => return Err(("unexpected character", Some(&s[i..]))),
        }
    }
    if pos < 3 {
        return Err(("IPv4 address too short", None));
    }
    Ok(())
}

fn parse_ipv6(input: &str) -> Result<(), AddrErr<'_>> {
    let mut s = input;
    let mut zone = "";
    if let Some(i) = s.find('%') {
        zone = &input[i + 1..];
        s = &input[..i];
        if zone.is_empty() {
            return Err(("zone must be a non-empty string", None));
        }
    }
    let mut ellipsis: i32 = -1;
    if s.starts_with("::") {
        ellipsis = 0;
        s = &s[2..];
        if s.is_empty() {
            return Ok(());
        }
    }
    let mut i = 0;
    while i < 16 {
        let b = s.as_bytes();
        let mut off = 0;
        let mut acc: u32 = 0;
        while off < b.len() {
            let d = match b[off] {
                c @ b'0'..=b'9' => c - b'0',
                c @ b'a'..=b'f' => c - b'a' + 10,
                c @ b'A'..=b'F' => c - b'A' + 10,
                _ => break,
            };
            acc = (acc << 4) + u32::from(d);
            if off > 3 {
                return Err(("each group must have 4 or less digits", Some(s)));
            }
            if acc > 0xffff {
                return Err(("IPv6 field has value >=2^16", Some(s)));
            }
            off += 1;
        }
        if off == 0 {
            return Err((
                "each colon-separated field must have at least one digit",
                Some(s),
            ));
        }
        if off < b.len() && b[off] == b'.' {
            if ellipsis < 0 && i != 12 {
                return Err((
                    "embedded IPv4 address must replace the final 2 fields of the address",
                    Some(s),
                ));
            }
            if i + 4 > 16 {
                return Err((
                    "too many hex fields to fit an embedded IPv4 at the end of the address",
                    Some(s),
                ));
            }
            let mut end = input.len();
            if !zone.is_empty() {
                end -= zone.len() + 1;
            }
            parse_ipv4_fields(input, end - s.len(), end)?;
            s = "";
            i += 4;
            break;
        }
        i += 2;
        s = &s[off..];
        if s.is_empty() {
            break;
        }
        if !s.starts_with(':') {
            return Err(("unexpected character, want colon", Some(s)));
        } else if s.len() == 1 {
            return Err(("colon must be followed by more characters", Some(s)));
        }
        s = &s[1..];
        if s.starts_with(':') {
            if ellipsis >= 0 {
                return Err(("multiple :: in address", Some(s)));
            }
            ellipsis = i;
            s = &s[1..];
            if s.is_empty() {
                break;
            }
        }
    }
    if !s.is_empty() {
        return Err(("trailing garbage after address", Some(s)));
    }
    if i < 16 {
        if ellipsis < 0 {
            return Err(("address string too short", None));
        }
    } else if ellipsis >= 0 {
        return Err(("the :: must expand to at least one field of zeros", None));
    }
    Ok(())
}
