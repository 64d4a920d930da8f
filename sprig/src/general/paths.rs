//! Go's `path` functions (`base`, `dir`, `clean`, `ext`, `isAbs`) and their `filepath`
//! twins (`osBase` …), which behave the same with Unix separators (Helm on Linux).

use flotilla_gotmpl::{ArgType, FuncMap, Signature, Value};

use super::{add, arg_str};

pub(crate) fn register(map: &mut FuncMap) {
    let sig = || Signature::fixed([ArgType::String]);
    type PathFn = fn(&str) -> Value;
    let funcs: [(&str, &str, PathFn); 5] = [
        ("base", "osBase", |p| Value::from(base(p))),
        ("dir", "osDir", |p| Value::from(dir(p))),
        ("clean", "osClean", |p| Value::from(clean(p))),
        ("ext", "osExt", |p| Value::from(ext(p))),
        ("isAbs", "osIsAbs", |p| Value::Bool(p.starts_with('/'))),
    ];
    for (name, os_name, f) in funcs {
        add(map, name, sig(), move |a| Ok(f(arg_str(a, 0))));
        add(map, os_name, sig(), move |a| Ok(f(arg_str(a, 0))));
    }
}

/// `path.Clean`.
pub(crate) fn clean(path: &str) -> String {
    if path.is_empty() {
        return ".".to_string();
    }
    let p = path.as_bytes();
    let n = p.len();
    let rooted = p[0] == b'/';
    let mut out: Vec<u8> = Vec::with_capacity(n);
    let (mut r, mut dotdot) = (0usize, 0usize);
    if rooted {
        out.push(b'/');
        r = 1;
        dotdot = 1;
    }
    while r < n {
        if p[r] == b'/' || p[r] == b'.' && (r + 1 == n || p[r + 1] == b'/') {
            r += 1;
        } else if p[r] == b'.' && p[r + 1] == b'.' && (r + 2 == n || p[r + 2] == b'/') {
            r += 2;
            if out.len() > dotdot {
                let mut w = out.len() - 1;
                while w > dotdot && out[w] != b'/' {
                    w -= 1;
                }
                out.truncate(w);
            } else if !rooted {
                if !out.is_empty() {
                    out.push(b'/');
                }
                out.extend_from_slice(b"..");
                dotdot = out.len();
            }
        } else {
            if rooted && out.len() != 1 || !rooted && !out.is_empty() {
                out.push(b'/');
            }
            while r < n && p[r] != b'/' {
                out.push(p[r]);
                r += 1;
            }
        }
    }
    if out.is_empty() {
        return ".".to_string();
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `path.Base`.
pub(crate) fn base(path: &str) -> String {
    if path.is_empty() {
        return ".".to_string();
    }
    let trimmed = path.trim_end_matches('/');
    let last = match trimmed.rfind('/') {
        Some(i) => &trimmed[i + 1..],
        None => trimmed,
    };
    if last.is_empty() {
        "/".to_string()
    } else {
        last.to_string()
    }
}

/// `path.Dir`.
pub(crate) fn dir(path: &str) -> String {
    let d = match path.rfind('/') {
        Some(i) => &path[..=i],
        None => "",
    };
    clean(d)
}

/// `path.Ext`.
pub(crate) fn ext(path: &str) -> String {
    for (i, b) in path.bytes().enumerate().rev() {
        if b == b'/' {
            break;
        }
        if b == b'.' {
            return path[i..].to_string();
        }
    }
    String::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_matches_go() {
        for (i, o) in [
            ("", "."),
            ("abc", "abc"),
            ("abc/def", "abc/def"),
            ("a/b/c", "a/b/c"),
            (".", "."),
            ("..", ".."),
            ("../..", "../.."),
            ("../../abc", "../../abc"),
            ("/abc", "/abc"),
            ("/", "/"),
            ("abc/", "abc"),
            ("abc/def/", "abc/def"),
            ("/abc/", "/abc"),
            ("abc//def//ghi", "abc/def/ghi"),
            ("//abc", "/abc"),
            ("///abc", "/abc"),
            ("abc/./def", "abc/def"),
            ("/./abc/def", "/abc/def"),
            ("abc/.", "abc"),
            ("abc/def/ghi/../jkl", "abc/def/jkl"),
            ("abc/def/../ghi/../jkl", "abc/jkl"),
            ("abc/def/..", "abc"),
            ("abc/def/../..", "."),
            ("/abc/def/../..", "/"),
            ("abc/def/../../..", ".."),
            ("/abc/def/../../..", "/"),
            ("abc/def/../../../ghi/jkl/../../../mno", "../../mno"),
            ("abc/./../def", "def"),
            ("abc//./../def", "def"),
            ("abc/../../././../def", "../../def"),
        ] {
            assert_eq!(clean(i), o, "{i}");
        }
    }
}
