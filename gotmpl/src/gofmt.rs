//! Go's `fmt` and `strconv` printing rules for [`Value`]s: `%v` of maps (`map[a:1 b:2]`),
//! slices (`[1 2 3]`), nil (`<nil>`), floats in `strconv`'s shortest `'g'` form (`1e+06`),
//! `Sprint`'s spacing rule, `Sprintln`, and `Sprintf` with flags, width, precision, argument
//! indexes and Go's error forms (`%!d(string=x)`, `%!d(MISSING)`, `%!(EXTRA int=1)`).
//!
//! Not implemented: `%p` (no pointers here) and complex numbers; `%p` prints Go's bad-verb
//! form. Struct printing (`{a b}`, `%+v` field names) is the [`crate::Object`]'s `display`.

use crate::value::{ElemType, GoKind, MAX_VALUE_DEPTH, MapType, Value};

/// Decimal digits of a float: `0.d1d2d3… × 10^dp`, with trailing zeros removed.
struct Digits {
    d: Vec<u8>,
    dp: i32,
}

/// Shortest digits that round-trip (strconv's shortest mode). `f` must be finite and ≥ 0.
fn shortest_digits(f: f64) -> Digits {
    if f == 0.0 {
        return Digits { d: vec![], dp: 0 };
    }
    // Rust's `{:e}` prints the shortest round-trip digits, e.g. "1.2345e-7".
    parse_exp_repr(&format!("{f:e}"))
}

/// Digits rounded to `n` (≥ 1) significant digits. `f` must be finite and ≥ 0.
fn rounded_digits(f: f64, n: usize) -> Digits {
    if f == 0.0 {
        return Digits { d: vec![], dp: 0 };
    }
    let prec = n.saturating_sub(1).min(1100);
    parse_exp_repr(&format!("{f:.prec$e}"))
}

fn parse_exp_repr(s: &str) -> Digits {
    let (mant, exp) = s.split_once('e').unwrap_or((s, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let mut d: Vec<u8> = mant
        .bytes()
        .filter(u8::is_ascii_digit)
        .map(|b| b - b'0')
        .collect();
    while d.last() == Some(&0) {
        d.pop();
    }
    if d.is_empty() {
        return Digits { d, dp: 0 };
    }
    Digits { d, dp: exp + 1 }
}

/// Digits rounded to `prec` places after the decimal point. `f` finite and ≥ 0.
fn fixed_digits(f: f64, prec: usize) -> Digits {
    let prec = prec.min(1100);
    let s = format!("{f:.prec$}");
    let (int, frac) = s.split_once('.').unwrap_or((&s, ""));
    let int = int.trim_start_matches('0');
    let mut d: Vec<u8> = int.bytes().chain(frac.bytes()).map(|b| b - b'0').collect();
    let mut dp = int.len() as i32;
    // Strip leading zeros of the fraction when there is no integer part.
    if int.is_empty() {
        let lead = d.iter().take_while(|&&x| x == 0).count();
        d.drain(..lead);
        dp = -(lead as i32);
    }
    while d.last() == Some(&0) {
        d.pop();
    }
    if d.is_empty() {
        dp = 0;
    }
    Digits { d, dp }
}

fn digit_at(d: &Digits, i: i32) -> u8 {
    if i >= 0 && (i as usize) < d.d.len() {
        b'0' + d.d[i as usize]
    } else {
        b'0'
    }
}

fn fmt_e(d: &Digits, prec: usize, e: char) -> String {
    let mut out = String::new();
    out.push(if d.d.is_empty() {
        '0'
    } else {
        char::from(b'0' + d.d[0])
    });
    if prec > 0 {
        out.push('.');
        for i in 1..=prec {
            out.push(char::from(digit_at(d, i as i32)));
        }
    }
    out.push(e);
    let exp = if d.d.is_empty() { 0 } else { d.dp - 1 };
    out.push(if exp < 0 { '-' } else { '+' });
    let exp = exp.unsigned_abs();
    if exp < 10 {
        out.push('0');
    }
    out.push_str(&exp.to_string());
    out
}

fn fmt_f(d: &Digits, prec: usize) -> String {
    let mut out = String::new();
    if d.dp > 0 {
        for i in 0..d.dp {
            out.push(char::from(digit_at(d, i)));
        }
    } else {
        out.push('0');
    }
    if prec > 0 {
        out.push('.');
        for i in 0..prec {
            out.push(char::from(digit_at(d, d.dp + i as i32)));
        }
    }
    out
}

/// `strconv.FormatFloat(f, fmt, prec, 64)` for `fmt` in `e E f F g G`; `prec` `None` means
/// the shortest representation (-1).
pub fn format_float(f: f64, fmt: char, prec: Option<usize>) -> String {
    if f.is_nan() {
        return "NaN".to_string();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "+Inf".to_string()
        } else {
            "-Inf".to_string()
        };
    }
    let neg = f.is_sign_negative();
    let a = f.abs();
    let body = match fmt {
        'e' | 'E' => match prec {
            None => {
                let d = shortest_digits(a);
                fmt_e(&d, d.d.len().saturating_sub(1), fmt)
            }
            Some(p) => fmt_e(&rounded_digits(a, p + 1), p, fmt),
        },
        'f' | 'F' => match prec {
            None => {
                let d = shortest_digits(a);
                let p = (d.d.len() as i32 - d.dp).max(0) as usize;
                fmt_f(&d, p)
            }
            Some(p) => fmt_f(&fixed_digits(a, p), p),
        },
        _ => {
            let e = if fmt == 'G' { 'E' } else { 'e' };
            let (d, mut p, shortest) = match prec {
                None => {
                    let d = shortest_digits(a);
                    let n = d.d.len();
                    (d, n, true)
                }
                Some(p) => {
                    let p = p.max(1);
                    (rounded_digits(a, p), p, false)
                }
            };
            let nd = d.d.len() as i32;
            let mut eprec = p as i32;
            if eprec > nd && nd >= d.dp {
                eprec = nd;
            }
            if shortest {
                eprec = 6;
            }
            let exp = d.dp - 1;
            if exp < -4 || exp >= eprec {
                if p as i32 > nd {
                    p = nd.max(0) as usize;
                }
                fmt_e(&d, p.saturating_sub(1), e)
            } else {
                if p as i32 > d.dp {
                    p = nd.max(0) as usize;
                }
                fmt_f(&d, (p as i32 - d.dp).max(0) as usize)
            }
        }
    };
    if neg { format!("-{body}") } else { body }
}

/// `strconv.Quote`: a double-quoted Go string literal; printable runes are kept.
pub fn quote(s: &str) -> String {
    quote_with(s, '"', false)
}

/// `strconv.QuoteRune`: a single-quoted Go rune literal (what `%q` prints for a rune).
pub fn quote_rune(c: char) -> String {
    let mut buf = [0u8; 4];
    quote_with(c.encode_utf8(&mut buf), '\'', false)
}

/// `strconv.QuoteToASCII`.
pub fn quote_ascii(s: &str) -> String {
    quote_with(s, '"', true)
}

fn quote_with(s: &str, q: char, ascii: bool) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push(q);
    for c in s.chars() {
        push_escaped(&mut out, c, q, ascii);
    }
    out.push(q);
    out
}

/// Quotes raw bytes (invalid UTF-8 becomes `\x..`).
pub fn quote_bytes(b: &[u8]) -> String {
    let mut out = String::from("\"");
    let mut rest = b;
    while !rest.is_empty() {
        match std::str::from_utf8(rest) {
            Ok(s) => {
                for c in s.chars() {
                    push_escaped(&mut out, c, '"', false);
                }
                break;
            }
            Err(e) => {
                let (good, bad) = rest.split_at(e.valid_up_to());
                for c in String::from_utf8_lossy(good).chars() {
                    push_escaped(&mut out, c, '"', false);
                }
                let n = e.error_len().unwrap_or(bad.len()).max(1);
                for byte in &bad[..n.min(bad.len())] {
                    out.push_str(&format!("\\x{byte:02x}"));
                }
                rest = &bad[n.min(bad.len())..];
            }
        }
    }
    out.push('"');
    out
}

fn push_escaped(out: &mut String, c: char, q: char, ascii: bool) {
    if c == q || c == '\\' {
        out.push('\\');
        out.push(c);
        return;
    }
    if ascii {
        if (c as u32) < 0x80 && is_print(c) {
            out.push(c);
            return;
        }
    } else if is_print(c) {
        out.push(c);
        return;
    }
    match c {
        '\u{7}' => out.push_str("\\a"),
        '\u{8}' => out.push_str("\\b"),
        '\u{c}' => out.push_str("\\f"),
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        '\u{b}' => out.push_str("\\v"),
        c if (c as u32) < 0x20 || c as u32 == 0x7f => {
            out.push_str(&format!("\\x{:02x}", c as u32));
        }
        c if (c as u32) < 0x10000 => out.push_str(&format!("\\u{:04x}", c as u32)),
        c => out.push_str(&format!("\\U{:08x}", c as u32)),
    }
}

/// An approximation of Go's `unicode.IsPrint`: letters, marks, numbers, punctuation, symbols
/// and the ASCII space. Without Unicode category tables, unassigned code points count as
/// printable; control, format, separator, surrogate and private-use characters do not.
pub fn is_print(c: char) -> bool {
    let u = c as u32;
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    !matches!(u,
        0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x890..=0x891 | 0x8E2 | 0x180E
        | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x2064 | 0x2066..=0x206F
        | 0xFEFF | 0xFFF9..=0xFFFB | 0xE000..=0xF8FF | 0xFFFE | 0xFFFF
        | 0x110BD | 0x110CD | 0x13430..=0x1343F | 0x1BCA0..=0x1BCA3
        | 0x1D173..=0x1D17A | 0xE0001 | 0xE0020..=0xE007F | 0xF0000..=0x10FFFF)
}

/// One value formatted with a single verb and no flags (`fmt.Sprintf("%s", v)` …).
pub fn sprint_verb(v: &Value, verb: char) -> String {
    let mut p = Printer::default();
    p.print_value(v, verb, 0);
    p.buf.into_string()
}

/// `strconv.FormatFloat(f, 'x', prec, 64)`: hexadecimal mantissa and binary exponent
/// (`0x1.8p+00`); `prec` `None` gives the shortest mantissa.
pub fn format_float_hex(f: f64, prec: Option<usize>, upper: bool) -> String {
    if !f.is_finite() {
        return format_float(f, 'g', None);
    }
    let neg = f.is_sign_negative();
    let a = f.abs();
    let (mut full, mut exp): (u64, i32) = if a == 0.0 {
        (0, 0)
    } else {
        let bits = a.to_bits();
        let e = ((bits >> 52) & 0x7ff) as i32;
        let m = bits & ((1u64 << 52) - 1);
        if e == 0 {
            // Subnormal: shift until the implicit bit is set.
            let mut m = m;
            let mut e = -1022;
            while m & (1u64 << 52) == 0 {
                m <<= 1;
                e -= 1;
            }
            (m, e)
        } else {
            ((1u64 << 52) | m, e - 1023)
        }
    };
    let digits = match prec {
        Some(p) if p < 13 => {
            let shift = (13 - p) * 4;
            let rem = full & ((1u64 << shift) - 1);
            let half = 1u64 << (shift - 1);
            full >>= shift;
            if rem > half || (rem == half && full & 1 == 1) {
                full += 1;
            }
            if full >> (p * 4) >= 2 {
                full >>= 1;
                exp += 1;
            }
            if p == 0 {
                String::new()
            } else {
                format!("{:0w$x}", full & ((1u64 << (p * 4)) - 1), w = p)
            }
        }
        _ => {
            let mut d = format!("{:013x}", full & ((1u64 << 52) - 1));
            match prec {
                Some(p) => d.extend(std::iter::repeat_n('0', p - 13)),
                None => {
                    while d.ends_with('0') {
                        d.pop();
                    }
                }
            }
            d
        }
    };
    let lead = if a == 0.0 { '0' } else { '1' };
    let mut s = String::new();
    if neg {
        s.push('-');
    }
    s.push_str("0x");
    s.push(lead);
    if !digits.is_empty() {
        s.push('.');
        s.push_str(&digits);
    }
    s.push('p');
    s.push(if exp < 0 { '-' } else { '+' });
    let e = exp.unsigned_abs();
    if e < 10 {
        s.push('0');
    }
    s.push_str(&e.to_string());
    if upper { s.to_uppercase() } else { s }
}

/// `%v` of a value, as `fmt.Sprint(v)` prints it.
pub fn sprint_value(v: &Value) -> String {
    let mut p = Printer::default();
    p.print_value(v, 'v', 0);
    p.buf.into_string()
}

/// `fmt.Sprint(args...)`: operands are separated by a space when neither side is a string.
pub fn sprint(args: &[Value]) -> String {
    sprint_buf(args).into_string()
}

/// [`sprint`] as a Go string: the bytes of strings that are not UTF-8 are kept.
pub fn sprint_go(args: &[Value]) -> Value {
    sprint_buf(args).into_value()
}

fn sprint_buf(args: &[Value]) -> Buf {
    // One buffer for every operand (each is printed with fresh, default flags).
    let mut p = Printer::default();
    let mut prev_string = false;
    for (i, a) in args.iter().enumerate() {
        let is_string = matches!(a, Value::String(_) | Value::RawString(_));
        if i > 0 && !is_string && !prev_string {
            p.buf.push(' ');
        }
        p.f = Flags::default();
        p.print_value(a, 'v', 0);
        prev_string = is_string;
    }
    p.buf
}

/// `fmt.Sprintln(args...)`: always space-separated, with a trailing newline.
pub fn sprintln(args: &[Value]) -> String {
    let mut out = String::new();
    for (i, a) in args.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(&sprint_value(a));
    }
    out.push('\n');
    out
}

#[derive(Default, Clone, Copy)]
struct Flags {
    plus: bool,
    minus: bool,
    sharp: bool,
    space: bool,
    zero: bool,
    /// `%+v` (struct field names; no effect on the values modelled here).
    plus_v: bool,
    /// `%#v`: Go syntax.
    sharp_v: bool,
    width: Option<usize>,
    prec: Option<usize>,
}

/// Go's `pp`/`fmt` pair: flags plus an output buffer.
#[derive(Default)]
struct Printer {
    buf: Buf,
    f: Flags,
}

/// What a [`Printer`] writes: text, until it prints a Go string that is not UTF-8 (then
/// bytes; text is never validated again).
struct Buf(crate::exec::Output);

impl Default for Buf {
    fn default() -> Self {
        Buf(crate::exec::Output::Text(String::new()))
    }
}

impl Buf {
    fn push(&mut self, c: char) {
        match &mut self.0 {
            crate::exec::Output::Text(t) => t.push(c),
            crate::exec::Output::Bytes(b) => {
                let mut utf8 = [0u8; 4];
                b.extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
            }
        }
    }

    fn push_str(&mut self, s: &str) {
        self.0.push_str(s);
    }

    fn push_bytes(&mut self, b: &[u8]) {
        self.0.push_bytes(b);
    }

    fn extend<C: std::borrow::Borrow<char>>(&mut self, chars: impl IntoIterator<Item = C>) {
        match &mut self.0 {
            crate::exec::Output::Text(t) => t.extend(chars.into_iter().map(|c| *c.borrow())),
            crate::exec::Output::Bytes(_) => {
                for c in chars {
                    self.push(*c.borrow());
                }
            }
        }
    }

    /// The output as text (invalid UTF-8, only ever from a [`Value::RawString`], becomes
    /// U+FFFD).
    fn into_string(self) -> String {
        self.0.into_text()
    }

    /// The output as a Go string, its bytes kept.
    fn into_value(self) -> Value {
        self.0.to_value()
    }
}

/// `utf8.RuneCount`: each byte of an invalid sequence counts as one rune.
fn go_rune_count(mut b: &[u8]) -> usize {
    let mut n = 0;
    loop {
        match std::str::from_utf8(b) {
            Ok(s) => return n + s.chars().count(),
            Err(e) => {
                let (good, bad) = b.split_at(e.valid_up_to());
                n += std::str::from_utf8(good).map_or(0, |s| s.chars().count());
                let skip = e.error_len().unwrap_or(bad.len());
                n += skip;
                b = &bad[skip..];
            }
        }
    }
}

const LDIGITS: &[u8; 16] = b"0123456789abcdef";
const UDIGITS: &[u8; 16] = b"0123456789ABCDEF";

impl Printer {
    fn write_padding(&mut self, n: usize) {
        let c = if self.f.zero && !self.f.minus {
            '0'
        } else {
            ' '
        };
        self.buf.extend(std::iter::repeat_n(c, n));
    }

    /// `fmt.pad`: pads to the width (in runes), zeros only on the left.
    fn pad(&mut self, s: &str) {
        // No width (the usual case): nothing to count.
        let Some(w) = self.f.width else {
            self.buf.push_str(s);
            return;
        };
        let n = s.chars().count();
        if w <= n {
            self.buf.push_str(s);
        } else if self.f.minus {
            self.buf.push_str(s);
            self.write_padding(w - n);
        } else {
            self.write_padding(w - n);
            self.buf.push_str(s);
        }
    }

    /// [`Printer::pad`] of a Go string that is not UTF-8.
    fn pad_bytes(&mut self, b: &[u8]) {
        let n = match self.f.width {
            None => 0,
            Some(_) => go_rune_count(b),
        };
        let w = self.f.width.unwrap_or(0);
        if w <= n {
            self.buf.push_bytes(b);
        } else if self.f.minus {
            self.buf.push_bytes(b);
            self.write_padding(w - n);
        } else {
            self.write_padding(w - n);
            self.buf.push_bytes(b);
        }
    }

    fn pad_no_zero(&mut self, s: &str) {
        let zero = self.f.zero;
        self.f.zero = false;
        self.pad(s);
        self.f.zero = zero;
    }

    fn truncate(&self, s: &str) -> String {
        match self.f.prec {
            Some(p) => s.chars().take(p).collect(),
            None => s.to_string(),
        }
    }

    /// `fmtS`
    fn fmt_s(&mut self, s: &str) {
        // Without a precision the text is not truncated: padded as it is, not copied.
        if self.f.prec.is_none() {
            self.pad(s);
            return;
        }
        let s = self.truncate(s);
        self.pad(&s);
    }

    /// `fmtQ`
    fn fmt_q(&mut self, s: &str) {
        let s = self.truncate(s);
        if self.f.sharp && can_backquote(&s) {
            self.pad(&format!("`{s}`"));
        } else if self.f.plus {
            self.pad(&quote_ascii(&s));
        } else {
            self.pad(&quote(&s));
        }
    }

    /// `fmtSbx`: hexadecimal encoding of bytes.
    fn fmt_sbx(&mut self, b: &[u8], upper: bool) {
        let digits = if upper { UDIGITS } else { LDIGITS };
        let length = match self.f.prec {
            Some(p) if p < b.len() => p,
            _ => b.len(),
        };
        let mut width = 2 * length;
        if width > 0 {
            if self.f.space {
                if self.f.sharp {
                    width *= 2;
                }
                width += length - 1;
            } else if self.f.sharp {
                width += 2;
            }
        } else {
            if let Some(w) = self.f.width {
                self.write_padding(w);
            }
            return;
        }
        let w = self.f.width.unwrap_or(0);
        if w > width && !self.f.minus {
            self.write_padding(w - width);
        }
        if self.f.sharp {
            self.buf.push('0');
            self.buf.push(char::from(digits_x(upper)));
        }
        for (i, c) in b[..length].iter().enumerate() {
            if self.f.space && i > 0 {
                self.buf.push(' ');
                if self.f.sharp {
                    self.buf.push('0');
                    self.buf.push(char::from(digits_x(upper)));
                }
            }
            self.buf.push(char::from(digits[usize::from(c >> 4)]));
            self.buf.push(char::from(digits[usize::from(c & 0xF)]));
        }
        if w > width && self.f.minus {
            self.write_padding(w - width);
        }
    }

    fn bad_verb(&mut self, verb: char, v: &Value) {
        // Go prints the operand with the same flags, as %v (sharp is not Go syntax here).
        self.buf.push_str("%!");
        self.buf.push(verb);
        self.buf.push('(');
        if v.is_nil() {
            self.buf.push_str("<nil>");
        } else {
            self.buf.push_str(&v.type_name());
            self.buf.push('=');
            let sharp_v = self.f.sharp_v;
            self.f.sharp_v = false;
            self.print_value(v, 'v', 1);
            self.f.sharp_v = sharp_v;
        }
        self.buf.push(')');
    }

    /// `pp.fmtInteger`: `u` is the two's complement bit pattern when `signed`.
    fn fmt_integer(&mut self, u: u64, signed: bool, verb: char, v: &Value) {
        match verb {
            'v' if self.f.sharp_v && !signed => {
                let sharp = self.f.sharp;
                self.f.sharp = true;
                self.fmt_int_base(u, 16, signed, verb, LDIGITS);
                self.f.sharp = sharp;
            }
            'v' | 'd' => self.fmt_int_base(u, 10, signed, verb, LDIGITS),
            'b' => self.fmt_int_base(u, 2, signed, verb, LDIGITS),
            'o' | 'O' => self.fmt_int_base(u, 8, signed, verb, LDIGITS),
            'x' => self.fmt_int_base(u, 16, signed, verb, LDIGITS),
            'X' => self.fmt_int_base(u, 16, signed, verb, UDIGITS),
            'c' => {
                let c = u32::try_from(u)
                    .ok()
                    .and_then(char::from_u32)
                    .unwrap_or('\u{FFFD}');
                self.pad(&c.to_string());
            }
            'q' => {
                let c = u32::try_from(u)
                    .ok()
                    .and_then(char::from_u32)
                    .unwrap_or('\u{FFFD}');
                let s = quote_with(&c.to_string(), '\'', self.f.plus);
                self.pad(&s);
            }
            'U' => self.fmt_unicode(u),
            _ => self.bad_verb(verb, v),
        }
    }

    /// `fmt.fmtInteger`
    fn fmt_int_base(&mut self, u: u64, base: u64, signed: bool, verb: char, digits: &[u8; 16]) {
        let negative = signed && (u as i64) < 0;
        let mut u = if negative {
            (u as i64).unsigned_abs()
        } else {
            u
        };
        let mut prec = 0usize;
        if let Some(p) = self.f.prec {
            prec = p;
            if p == 0 && u == 0 {
                let zero = self.f.zero;
                self.f.zero = false;
                self.write_padding(self.f.width.unwrap_or(0));
                self.f.zero = zero;
                return;
            }
        } else if self.f.zero && !self.f.minus && self.f.width.is_some() {
            prec = self.f.width.unwrap_or(0);
            if negative || self.f.plus || self.f.space {
                prec = prec.saturating_sub(1);
            }
        }
        let mut out: Vec<u8> = Vec::new();
        loop {
            out.push(digits[(u % base) as usize]);
            u /= base;
            if u == 0 {
                break;
            }
        }
        while out.len() < prec {
            out.push(b'0');
        }
        if self.f.sharp {
            match base {
                2 => out.extend_from_slice(b"b0"),
                8 if out.last() != Some(&b'0') => out.push(b'0'),
                16 => {
                    out.push(digits_x(digits[10] == b'A'));
                    out.push(b'0');
                }
                _ => {}
            }
        }
        if verb == 'O' {
            out.extend_from_slice(b"o0");
        }
        if negative {
            out.push(b'-');
        } else if self.f.plus {
            out.push(b'+');
        } else if self.f.space {
            out.push(b' ');
        }
        out.reverse();
        let s = String::from_utf8_lossy(&out).into_owned();
        self.pad_no_zero(&s);
    }

    /// `fmtUnicode`: `U+0041`, `%#U` adds the quoted character.
    fn fmt_unicode(&mut self, u: u64) {
        let mut prec = 4;
        if let Some(p) = self.f.prec
            && p > 4
        {
            prec = p.min(1 << 16);
        }
        let mut hex = format!("{u:X}");
        while hex.len() < prec {
            hex.insert(0, '0');
        }
        let mut s = format!("U+{hex}");
        if self.f.sharp
            && let Some(c) = u32::try_from(u).ok().and_then(char::from_u32)
            && is_print(c)
        {
            s.push_str(&format!(" '{c}'"));
        }
        self.pad_no_zero(&s);
    }

    /// `pp.fmtFloat` + `fmt.fmtFloat`.
    fn fmt_float(&mut self, x: f64, verb: char, v: &Value) {
        let (fc, default_prec) = match verb {
            'v' => ('g', None),
            'b' | 'g' | 'G' | 'x' | 'X' => (verb, None),
            'f' | 'e' | 'E' | 'F' => (verb, Some(6)),
            _ => {
                self.bad_verb(verb, v);
                return;
            }
        };
        let prec = if self.f.prec.is_some() {
            self.f.prec
        } else {
            default_prec
        };
        let body = match fc {
            'b' => format_float_b(x),
            'x' | 'X' => format_float_hex(x, prec, fc == 'X'),
            _ => format_float(x, fc, prec),
        };
        // num[0] is the sign slot.
        let mut num: Vec<char> = Vec::new();
        if body.starts_with('-') || body.starts_with('+') {
            num.extend(body.chars());
        } else {
            num.push('+');
            num.extend(body.chars());
        }
        if self.f.space && num[0] == '+' && !self.f.plus {
            num[0] = ' ';
        }
        if num.get(1).is_some_and(|&c| c == 'I' || c == 'N') {
            if num[1] == 'N' && !self.f.space && !self.f.plus {
                num.remove(0);
            }
            let s: String = num.into_iter().collect();
            self.pad_no_zero(&s);
            return;
        }
        if self.f.sharp && fc != 'b' {
            let mut digits: i64 = match fc {
                'g' | 'G' | 'x' => prec.map(|p| p as i64).unwrap_or(6),
                _ => 0,
            };
            if verb == 'v' {
                digits = prec.map(|p| p as i64).unwrap_or(6);
            }
            let mut tail: Vec<char> = Vec::new();
            let mut has_point = false;
            let mut saw_nonzero = false;
            let mut i = 1;
            while i < num.len() {
                match num[i] {
                    '.' => has_point = true,
                    'p' | 'P' => {
                        tail.extend(num.drain(i..));
                        break;
                    }
                    'e' | 'E' if fc != 'x' && fc != 'X' => {
                        tail.extend(num.drain(i..));
                        break;
                    }
                    c => {
                        if c != '0' {
                            saw_nonzero = true;
                        }
                        if saw_nonzero {
                            digits -= 1;
                        }
                    }
                }
                i += 1;
            }
            if !has_point {
                if num.len() == 2 && num[1] == '0' {
                    digits -= 1;
                }
                num.push('.');
            }
            while digits > 0 {
                num.push('0');
                digits -= 1;
            }
            num.extend(tail);
        }
        if self.f.plus || num[0] != '+' {
            let w = self.f.width.unwrap_or(0);
            if self.f.zero && !self.f.minus && w > num.len() {
                self.buf.push(num[0]);
                self.write_padding(w - num.len());
                self.buf.extend(&num[1..]);
                return;
            }
            let s: String = num.into_iter().collect();
            self.pad(&s);
            return;
        }
        let s: String = num[1..].iter().collect();
        self.pad(&s);
    }

    fn print_value(&mut self, v: &Value, verb: char, depth: usize) {
        if depth > MAX_VALUE_DEPTH {
            self.buf.push_str("...");
            return;
        }
        if verb == 'T' {
            if v.is_nil() {
                self.pad("<nil>");
            } else {
                let t = v.type_name();
                self.fmt_s(&t);
            }
            return;
        }
        if verb == 'v'
            && self.f.sharp_v
            && matches!(
                v,
                Value::List(_) | Value::Map(_) | Value::Bytes(_) | Value::Object(_)
            )
        {
            let s = go_syntax(v, depth);
            self.pad(&s);
            return;
        }
        match v {
            // A nil inside a collection is an interface element, printed bare for any verb.
            Value::Nil if depth > 0 => {
                self.buf.push_str(if self.f.sharp_v {
                    "interface {}(nil)"
                } else {
                    "<nil>"
                });
            }
            Value::Nil if verb == 'v' => self.pad("<nil>"),
            Value::Nil => self.bad_verb(verb, v),
            Value::Bool(b) => match verb {
                't' | 'v' => self.pad(if *b { "true" } else { "false" }),
                _ => self.bad_verb(verb, v),
            },
            Value::Int(i) | Value::Int64(i) => self.fmt_integer(*i as u64, true, verb, v),
            Value::Uint64(u) => self.fmt_integer(*u, false, verb, v),
            Value::Uint8(u) => self.fmt_integer(u64::from(*u), false, verb, v),
            Value::Float(f) => self.fmt_float(*f, verb, v),
            Value::String(s) => match verb {
                'v' if self.f.sharp_v => self.fmt_q(s),
                'v' | 's' => self.fmt_s(s),
                'x' | 'X' => self.fmt_sbx(s.as_bytes(), verb == 'X'),
                'q' => self.fmt_q(s),
                _ => self.bad_verb(verb, v),
            },
            Value::RawString(b) => match verb {
                'v' if self.f.sharp_v => self.pad(&quote_bytes(b)),
                'v' | 's' if self.f.prec.is_none() => self.pad_bytes(b),
                'v' | 's' => self.fmt_s(&String::from_utf8_lossy(b)),
                'x' | 'X' => self.fmt_sbx(b, verb == 'X'),
                'q' if self.f.prec.is_none() && !self.f.plus && !self.f.sharp => {
                    self.pad(&quote_bytes(b))
                }
                'q' => self.fmt_q(&String::from_utf8_lossy(b)),
                _ => self.bad_verb(verb, v),
            },
            Value::Bytes(b) => match verb {
                's' => {
                    let s = String::from_utf8_lossy(b).into_owned();
                    self.fmt_s(&s);
                }
                'q' => {
                    let s = String::from_utf8_lossy(b).into_owned();
                    self.fmt_q(&s);
                }
                'x' | 'X' => self.fmt_sbx(b, verb == 'X'),
                _ => {
                    self.buf.push('[');
                    for (i, x) in b.iter().enumerate() {
                        if i > 0 {
                            self.buf.push(' ');
                        }
                        self.fmt_integer(u64::from(*x), false, verb, &Value::Uint8(*x));
                    }
                    self.buf.push(']');
                }
            },
            Value::List(l) => {
                self.buf.push('[');
                for (i, x) in l.items().iter().enumerate() {
                    if i > 0 {
                        self.buf.push(' ');
                    }
                    self.print_value(x, verb, depth + 1);
                }
                self.buf.push(']');
            }
            Value::Map(m) => {
                self.buf.push_str("map[");
                for (i, (k, x)) in m.entries().iter().enumerate() {
                    if i > 0 {
                        self.buf.push(' ');
                    }
                    self.print_value(&Value::string(k), verb, depth + 1);
                    self.buf.push(':');
                    self.print_value(x, verb, depth + 1);
                }
                self.buf.push(']');
            }
            Value::Object(o) => {
                if let Some(entries) = o.map_entries()
                    && o.kind() == GoKind::Map
                {
                    self.buf.push_str("map[");
                    for (i, (k, x)) in entries.iter().enumerate() {
                        if i > 0 {
                            self.buf.push(' ');
                        }
                        self.print_value(&Value::string(k), verb, depth + 1);
                        self.buf.push(':');
                        self.print_value(x, verb, depth + 1);
                    }
                    self.buf.push(']');
                    return;
                }
                if let Some(items) = o.list_items()
                    && o.kind() == GoKind::Slice
                {
                    self.buf.push('[');
                    for (i, x) in items.iter().enumerate() {
                        if i > 0 {
                            self.buf.push(' ');
                        }
                        self.print_value(x, verb, depth + 1);
                    }
                    self.buf.push(']');
                    return;
                }
                // Objects print through their String() method for string verbs.
                let s = o.display();
                match verb {
                    'v' | 's' => self.fmt_s(&s),
                    'q' => self.fmt_q(&s),
                    'x' | 'X' => self.fmt_sbx(s.as_bytes(), verb == 'X'),
                    _ => self.bad_verb(verb, v),
                }
            }
        }
    }
}

fn digits_x(upper: bool) -> u8 {
    if upper { b'X' } else { b'x' }
}

/// `strconv.CanBackquote`.
fn can_backquote(s: &str) -> bool {
    s.chars()
        .all(|c| c == '\t' || (c != '`' && c != '\u{FEFF}' && c >= ' ' && c != '\u{7f}'))
}

/// `strconv.FormatFloat(f, 'b', -1, 64)`: decimal mantissa and binary exponent.
pub fn format_float_b(f: f64) -> String {
    let bits = f.to_bits();
    let neg = bits >> 63 != 0;
    let exp = ((bits >> 52) & 0x7ff) as i64;
    let mut mant = bits & ((1u64 << 52) - 1);
    let e = if exp == 0 {
        -1074
    } else {
        mant |= 1u64 << 52;
        exp - 1075
    };
    format!(
        "{}{mant}p{}{}",
        if neg { "-" } else { "" },
        if e >= 0 { "+" } else { "" },
        e
    )
}

/// `%#v`: Go-syntax representation.
fn go_syntax(v: &Value, depth: usize) -> String {
    if depth > MAX_VALUE_DEPTH {
        return "...".to_string();
    }
    match v {
        Value::Nil if depth > 0 => "interface {}(nil)".to_string(),
        Value::Nil => "<nil>".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) | Value::Int64(i) => i.to_string(),
        Value::Uint64(u) => format!("0x{u:x}"),
        Value::Uint8(u) => format!("0x{u:x}"),
        Value::Float(f) => format_float(*f, 'g', None),
        Value::String(s) => quote(s),
        Value::RawString(b) => quote_bytes(b),
        Value::Bytes(b) => {
            let items: Vec<String> = b.iter().map(|x| format!("0x{x:x}")).collect();
            format!("[]byte{{{}}}", items.join(", "))
        }
        Value::List(l) => {
            let items: Vec<String> = l.items().iter().map(|x| go_syntax(x, depth + 1)).collect();
            format!("[]{}{{{}}}", l.elem().go_name(), items.join(", "))
        }
        Value::Map(m) => {
            let ty = match m.map_type() {
                MapType::Interface => "map[string]interface {}".to_string(),
                MapType::Named(n) => n.to_string(),
                MapType::StringValues => "map[string]string".to_string(),
            };
            let items: Vec<String> = m
                .entries()
                .iter()
                .map(|(k, x)| format!("{}:{}", quote(k), go_syntax(x, depth + 1)))
                .collect();
            format!("{ty}{{{}}}", items.join(", "))
        }
        Value::Object(o) => o.display(),
    }
}

/// `fmt.Sprintf(format, args...)`.
pub fn sprintf(format: &str, args: &[Value]) -> String {
    sprintf_buf(format, args).into_string()
}

/// [`sprintf`] as a Go string: the bytes of strings that are not UTF-8 are kept
/// (`printf "%s" (.Files.Get "x.gz")`).
pub fn sprintf_go(format: &str, args: &[Value]) -> Value {
    sprintf_buf(format, args).into_value()
}

fn sprintf_buf(format: &str, args: &[Value]) -> Buf {
    let mut p = Printer::default();
    let bytes = format.as_bytes();
    let mut i = 0;
    let mut argn = 0usize;
    let mut reordered = false;
    let mut good_argnum = true;
    while i < bytes.len() {
        // Copy literal text up to the next '%'.
        let start = i;
        while i < bytes.len() && bytes[i] != b'%' {
            i += 1;
        }
        p.buf.push_str(&format[start..i]);
        if i >= bytes.len() {
            break;
        }
        i += 1; // skip '%'
        p.f = Flags::default();
        // Flags.
        while i < bytes.len() {
            match bytes[i] {
                b'#' => p.f.sharp = true,
                b'0' => p.f.zero = true,
                b'+' => p.f.plus = true,
                b'-' => p.f.minus = true,
                b' ' => p.f.space = true,
                _ => break,
            }
            i += 1;
        }
        // Argument index, width.
        parse_arg_index(
            bytes,
            &mut i,
            &mut argn,
            &mut reordered,
            &mut good_argnum,
            args.len(),
        );
        if i < bytes.len() && bytes[i] == b'*' {
            i += 1;
            match args.get(argn) {
                Some(Value::Int(n) | Value::Int64(n)) => {
                    argn += 1;
                    if *n < 0 {
                        p.f.minus = true;
                        p.f.width = Some(n.unsigned_abs().min(1 << 20) as usize);
                    } else {
                        p.f.width = Some((*n as u64).min(1 << 20) as usize);
                    }
                }
                Some(_) => {
                    argn += 1;
                    p.buf.push_str("%!(BADWIDTH)");
                }
                None => p.buf.push_str("%!(BADWIDTH)"),
            }
        } else {
            let (n, ni) = parse_num(bytes, i);
            if ni > i {
                p.f.width = Some(n);
                i = ni;
            }
        }
        // Precision.
        if i < bytes.len() && bytes[i] == b'.' {
            i += 1;
            parse_arg_index(
                bytes,
                &mut i,
                &mut argn,
                &mut reordered,
                &mut good_argnum,
                args.len(),
            );
            if i < bytes.len() && bytes[i] == b'*' {
                i += 1;
                match args.get(argn) {
                    Some(Value::Int(n) | Value::Int64(n)) => {
                        argn += 1;
                        if *n < 0 {
                            p.f.prec = None;
                        } else {
                            p.f.prec = Some((*n as u64).min(1 << 20) as usize);
                        }
                    }
                    Some(_) => {
                        argn += 1;
                        p.buf.push_str("%!(BADPREC)");
                    }
                    None => p.buf.push_str("%!(BADPREC)"),
                }
            } else {
                let (n, ni) = parse_num(bytes, i);
                p.f.prec = Some(n);
                i = ni;
            }
        }
        if !p.f.minus && p.f.zero {
            // ok: zero padding
        } else if p.f.minus {
            p.f.zero = false;
        }
        parse_arg_index(
            bytes,
            &mut i,
            &mut argn,
            &mut reordered,
            &mut good_argnum,
            args.len(),
        );
        if i >= bytes.len() {
            p.buf.push_str("%!(NOVERB)");
            break;
        }
        let verb = match format[i..].chars().next() {
            Some(c) => c,
            None => break,
        };
        if verb == 'v' {
            // %#v is Go syntax and %+v asks for field names: neither is a number flag.
            p.f.sharp_v = p.f.sharp;
            p.f.sharp = false;
            p.f.plus_v = p.f.plus;
            p.f.plus = false;
        }
        i += verb.len_utf8();
        if verb == '%' {
            p.buf.push('%');
            continue;
        }
        if !good_argnum {
            p.buf.push_str("%!");
            p.buf.push(verb);
            p.buf.push_str("(BADINDEX)");
            good_argnum = true;
            continue;
        }
        let Some(arg) = args.get(argn) else {
            p.buf.push_str("%!");
            p.buf.push(verb);
            p.buf.push_str("(MISSING)");
            continue;
        };
        argn += 1;
        if verb == 'w' {
            p.bad_verb(verb, arg);
            continue;
        }
        p.print_value(arg, verb, 0);
    }
    if !reordered && argn < args.len() {
        p.buf.push_str("%!(EXTRA ");
        for (k, a) in args[argn..].iter().enumerate() {
            if k > 0 {
                p.buf.push_str(", ");
            }
            if a.is_nil() {
                p.buf.push_str("<nil>");
            } else {
                p.buf.push_str(&a.type_name());
                p.buf.push('=');
                p.f = Flags::default();
                p.print_value(a, 'v', 0);
            }
        }
        p.buf.push(')');
    }
    p.buf
}

fn parse_num(b: &[u8], mut i: usize) -> (usize, usize) {
    let mut n: usize = 0;
    while i < b.len() && b[i].is_ascii_digit() {
        n = n
            .saturating_mul(10)
            .saturating_add(usize::from(b[i] - b'0'))
            .min(1 << 20);
        i += 1;
    }
    (n, i)
}

fn parse_arg_index(
    b: &[u8],
    i: &mut usize,
    argn: &mut usize,
    reordered: &mut bool,
    good: &mut bool,
    nargs: usize,
) {
    if *i >= b.len() || b[*i] != b'[' {
        return;
    }
    *reordered = true;
    let mut j = *i + 1;
    let (n, nj) = parse_num(b, j);
    j = nj;
    if j < b.len() && b[j] == b']' && nj > *i + 1 && n >= 1 && n <= nargs {
        *argn = n - 1;
        *i = j + 1;
    } else {
        *good = false;
        // Skip to the closing bracket if any.
        while j < b.len() && b[j] != b']' {
            j += 1;
        }
        *i = (j + 1).min(b.len());
    }
}

/// Whether the kind is one `fmt` prints as a number.
pub fn is_numeric(v: &Value) -> bool {
    matches!(
        v,
        Value::Int(_) | Value::Int64(_) | Value::Uint64(_) | Value::Uint8(_) | Value::Float(_)
    )
}

/// The element type name of a slice value, for diagnostics.
pub fn elem_name(e: ElemType) -> &'static str {
    e.go_name()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn f(x: f64) -> String {
        format_float(x, 'g', None)
    }

    #[test]
    fn shortest_floats_switch_to_exponent_form_like_strconv() {
        let cases = [
            (1_000_000.0, "1e+06"),
            (1_234_567.0, "1.234567e+06"),
            (123_456.0, "123456"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (3.0, "3"),
            (3.5, "3.5"),
            (1e-7, "1e-07"),
            (0.1 + 0.2, "0.30000000000000004"),
            (-0.0, "-0"),
            (0.0, "0"),
            (1e21, "1e+21"),
            (1e100, "1e+100"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
            (f64::NAN, "NaN"),
        ];
        for (x, want) in cases {
            assert_eq!(f(x), want, "{x}");
        }
    }

    #[test]
    fn precision_float_formats_follow_strconv() {
        assert_eq!(format_float(3.25159, 'f', Some(2)), "3.25");
        assert_eq!(format_float(1234.5678, 'e', Some(3)), "1.235e+03");
        assert_eq!(format_float(0.000123, 'g', Some(2)), "0.00012");
        assert_eq!(format_float(123456789.0, 'g', Some(3)), "1.23e+08");
        assert_eq!(format_float(100.0, 'g', Some(3)), "100");
        assert_eq!(format_float(1.0, 'e', None), "1e+00");
        assert_eq!(format_float(0.5, 'f', Some(0)), "0");
        assert_eq!(format_float(2.5, 'f', Some(0)), "2");
        assert_eq!(format_float(1.5, 'f', Some(0)), "2");
    }

    #[test]
    fn printf_verbs_and_error_forms_match_go() {
        let s = |x: &str| Value::string(x);
        let cases: Vec<(&str, Vec<Value>, &str)> = vec![
            ("%d", vec![Value::Int(42)], "42"),
            (
                "%5d|%-5d|%05d",
                vec![Value::Int(42), Value::Int(42), Value::Int(-42)],
                "   42|42   |-0042",
            ),
            (
                "%x %X %o %b",
                vec![
                    Value::Int(255),
                    Value::Int(255),
                    Value::Int(8),
                    Value::Int(5),
                ],
                "ff FF 10 101",
            ),
            ("%#x %#o", vec![Value::Int(255), Value::Int(8)], "0xff 010"),
            ("%d", vec![s("x")], "%!d(string=x)"),
            ("%d", vec![Value::Float(3.0)], "%!d(float64=3)"),
            ("%s", vec![Value::Nil], "%!s(<nil>)"),
            ("%s", vec![Value::Int(1)], "%!s(int=1)"),
            ("%d %d", vec![Value::Int(1)], "1 %!d(MISSING)"),
            ("%d", vec![Value::Int(1), s("a")], "1%!(EXTRA string=a)"),
            ("%q", vec![s("a\"b\n")], "\"a\\\"b\\n\""),
            ("%q", vec![Value::Int(97)], "'a'"),
            ("%t", vec![Value::Bool(true)], "true"),
            ("%v", vec![Value::Nil], "<nil>"),
            (
                "%T %T",
                vec![Value::Float(1.0), Value::Nil],
                "float64 <nil>",
            ),
            (
                "%5.2f|%-8.3f|%+.1e",
                vec![
                    Value::Float(3.25159),
                    Value::Float(2.0),
                    Value::Float(12345.0),
                ],
                " 3.25|2.000   |+1.2e+04",
            ),
            ("%f", vec![Value::Int(1)], "%!f(int=1)"),
            ("%x", vec![s("hi")], "6869"),
            ("%s", vec![Value::list(vec![s("a"), s("b")])], "[a b]"),
            (
                "%d",
                vec![Value::list(vec![Value::Int(1), s("b")])],
                "[1 %!d(string=b)]",
            ),
            ("%%", vec![], "%"),
            ("%", vec![], "%!(NOVERB)"),
            ("%z", vec![Value::Int(1)], "%!z(int=1)"),
            ("%[2]d %[1]d", vec![Value::Int(1), Value::Int(2)], "2 1"),
            ("%*d", vec![Value::Int(4), Value::Int(7)], "   7"),
            ("%.2s", vec![s("hello")], "he"),
            ("%6.2v", vec![Value::Float(3.25159)], "   3.3"),
            ("%g", vec![Value::Float(1e6)], "1e+06"),
            ("%v", vec![Value::Float(1e6)], "1e+06"),
            ("%c", vec![Value::Int(65)], "A"),
            ("%U", vec![Value::Int(65)], "U+0041"),
            ("%+d % d", vec![Value::Int(5), Value::Int(5)], "+5  5"),
        ];
        for (fmt, args, want) in cases {
            assert_eq!(sprintf(fmt, &args), want, "format {fmt:?}");
        }
    }

    #[test]
    fn v_of_collections_prints_go_notation() {
        let mut m = BTreeMap::new();
        m.insert("b".to_string(), Value::Float(2.0));
        m.insert("a".to_string(), Value::Int(1));
        m.insert(
            "c".to_string(),
            Value::list(vec![Value::Nil, Value::Bool(true), Value::string("x")]),
        );
        assert_eq!(
            sprint_value(&Value::map(m)),
            "map[a:1 b:2 c:[<nil> true x]]"
        );
        assert_eq!(
            sprint_value(&Value::Bytes(std::sync::Arc::from(&b"hi"[..]))),
            "[104 105]"
        );
        assert_eq!(sprint_value(&Value::list(vec![])), "[]");
    }

    #[test]
    fn sprint_adds_spaces_only_between_non_strings() {
        let args = [
            Value::Int(1),
            Value::Int(2),
            Value::string("a"),
            Value::Int(3),
            Value::string("b"),
            Value::string("c"),
        ];
        assert_eq!(sprint(&args), "1 2a3bc");
        assert_eq!(sprintln(&args), "1 2 a 3 b c\n");
        assert_eq!(sprint(&[Value::Nil, Value::Nil]), "<nil> <nil>");
    }

    #[test]
    fn quote_escapes_like_strconv() {
        assert_eq!(quote("héllo\t\u{7f}\u{200b}"), "\"héllo\\t\\x7f\\u200b\"");
        assert_eq!(quote_bytes(b"a\xffb"), "\"a\\xffb\"");
    }
}
