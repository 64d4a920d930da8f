//! Integer and float math (`add` … `round`), conversions (`int`, `int64`, `float64`, `atoi`,
//! `toDecimal`), sequences (`until`, `untilStep`, `seq`) and `randInt`. The `*f` functions
//! use shopspring/decimal semantics: operands become exact decimals of their shortest
//! representation, results are rounded once to the nearest float64 (`divf` rounds the
//! quotient to 16 decimal places first).

use flotilla_gotmpl::gofmt::sprint_value;
use flotilla_gotmpl::{ArgType, ElemType, FuncError, FuncMap, List, Signature, Value};

use super::{add, arg_int, arg_str, parse_int, random_below, to_float64, to_int64};

use ArgType::{Any, Int};

/// Longest list `until`/`untilStep`/`seq` build (Go would allocate any size).
const MAX_LIST: usize = 10_000_000;

const DIV_ZERO: &str = "runtime error: integer divide by zero";

pub(crate) fn register(map: &mut FuncMap) {
    add(map, "add1", Signature::fixed([Any]), |a| {
        Ok(Value::Int64(to_int64(&a[0]).wrapping_add(1)))
    });
    add(map, "add", Signature::variadic([], Any), |a| {
        Ok(Value::Int64(
            a.iter().fold(0i64, |acc, v| acc.wrapping_add(to_int64(v))),
        ))
    });
    add(map, "sub", Signature::fixed([Any, Any]), |a| {
        Ok(Value::Int64(to_int64(&a[0]).wrapping_sub(to_int64(&a[1]))))
    });
    add(map, "div", Signature::fixed([Any, Any]), |a| {
        let (x, y) = (to_int64(&a[0]), to_int64(&a[1]));
        if y == 0 {
            return Err(FuncError::new(DIV_ZERO));
        }
        Ok(Value::Int64(x.wrapping_div(y)))
    });
    add(map, "mod", Signature::fixed([Any, Any]), |a| {
        let (x, y) = (to_int64(&a[0]), to_int64(&a[1]));
        if y == 0 {
            return Err(FuncError::new(DIV_ZERO));
        }
        Ok(Value::Int64(x.wrapping_rem(y)))
    });
    add(map, "mul", Signature::variadic([Any], Any), |a| {
        Ok(Value::Int64(
            a[1..]
                .iter()
                .fold(to_int64(&a[0]), |acc, v| acc.wrapping_mul(to_int64(v))),
        ))
    });
    for name in ["max", "biggest"] {
        add(map, name, Signature::variadic([Any], Any), |a| {
            Ok(Value::Int64(
                a[1..].iter().map(to_int64).fold(to_int64(&a[0]), i64::max),
            ))
        });
    }
    add(map, "min", Signature::variadic([Any], Any), |a| {
        Ok(Value::Int64(
            a[1..].iter().map(to_int64).fold(to_int64(&a[0]), i64::min),
        ))
    });
    add(map, "maxf", Signature::variadic([Any], Any), |a| {
        Ok(Value::Float(
            a[1..]
                .iter()
                .map(to_float64)
                .fold(to_float64(&a[0]), go_max),
        ))
    });
    add(map, "minf", Signature::variadic([Any], Any), |a| {
        Ok(Value::Float(
            a[1..]
                .iter()
                .map(to_float64)
                .fold(to_float64(&a[0]), go_min),
        ))
    });
    add(map, "floor", Signature::fixed([Any]), |a| {
        Ok(Value::Float(to_float64(&a[0]).floor()))
    });
    add(map, "ceil", Signature::fixed([Any]), |a| {
        Ok(Value::Float(to_float64(&a[0]).ceil()))
    });
    add(
        map,
        "round",
        Signature::variadic([Any, Int], ArgType::Float64),
        |a| {
            let round_on = match a.get(2) {
                Some(Value::Float(f)) => *f,
                _ => 0.5,
            };
            let val = to_float64(&a[0]);
            let pow = 10f64.powf(arg_int(a, 1) as f64);
            let digit = pow * val;
            let frac = if digit.is_infinite() {
                0.0
            } else {
                digit - digit.trunc()
            };
            let r = if frac >= round_on {
                digit.ceil()
            } else {
                digit.floor()
            };
            Ok(Value::Float(r / pow))
        },
    );
    add(map, "int64", Signature::fixed([Any]), |a| {
        Ok(Value::Int64(to_int64(&a[0])))
    });
    add(map, "int", Signature::fixed([Any]), |a| {
        Ok(Value::Int(to_int64(&a[0])))
    });
    add(map, "float64", Signature::fixed([Any]), |a| {
        Ok(Value::Float(to_float64(&a[0])))
    });
    add(map, "atoi", Signature::fixed([ArgType::String]), |a| {
        // strconv.Atoi returns the clamped value with its range error; Sprig keeps it.
        let s = arg_str(a, 0);
        Ok(Value::Int(match parse_int(s, 10) {
            Ok(n) => n,
            Err(super::NumErr::Range) if s.starts_with('-') => i64::MIN,
            Err(super::NumErr::Range) => i64::MAX,
            Err(super::NumErr::Syntax) => 0,
        }))
    });
    add(map, "toDecimal", Signature::fixed([Any]), |a| {
        Ok(Value::Int64(
            parse_int(&sprint_value(&a[0]), 8).unwrap_or(0),
        ))
    });
    add(map, "until", Signature::fixed([Int]), |a| {
        let n = arg_int(a, 0);
        until_step(0, n, if n < 0 { -1 } else { 1 }).map(int_list)
    });
    add(map, "untilStep", Signature::fixed([Int, Int, Int]), |a| {
        until_step(arg_int(a, 0), arg_int(a, 1), arg_int(a, 2)).map(int_list)
    });
    add(map, "seq", Signature::variadic([], Int), |a| {
        let p: Vec<i64> = (0..a.len()).map(|i| arg_int(a, i)).collect();
        seq(&p).map(Value::from)
    });
    add(map, "randInt", Signature::fixed([Int, Int]), |a| {
        let (lo, hi) = (arg_int(a, 0), arg_int(a, 1));
        let span = hi.wrapping_sub(lo);
        if span <= 0 {
            return Err(FuncError::new("invalid argument to Intn"));
        }
        Ok(Value::Int(
            (random_below(span as u64)? as i64).wrapping_add(lo),
        ))
    });
    add(map, "add1f", Signature::fixed([Any]), |a| {
        decimal_op(&a[0], &[Value::Int(1)], Op::Add)
    });
    add(map, "addf", Signature::variadic([], Any), |a| {
        decimal_op(&Value::Float(0.0), a, Op::Add)
    });
    add(map, "subf", Signature::variadic([Any], Any), |a| {
        decimal_op(&a[0], &a[1..], Op::Sub)
    });
    add(map, "mulf", Signature::variadic([Any], Any), |a| {
        decimal_op(&a[0], &a[1..], Op::Mul)
    });
    add(map, "divf", Signature::variadic([Any], Any), |a| {
        decimal_op(&a[0], &a[1..], Op::Div)
    });
}

/// `math.Max`: NaN wins, +0 beats -0.
fn go_max(x: f64, y: f64) -> f64 {
    if x.is_infinite() && x > 0.0 || y.is_infinite() && y > 0.0 {
        return f64::INFINITY;
    }
    if x.is_nan() || y.is_nan() {
        return f64::NAN;
    }
    if x == 0.0 && y == 0.0 {
        return if x.is_sign_negative() { y } else { x };
    }
    if x > y { x } else { y }
}

/// `math.Min`: NaN wins, -0 beats +0.
fn go_min(x: f64, y: f64) -> f64 {
    if x.is_infinite() && x < 0.0 || y.is_infinite() && y < 0.0 {
        return f64::NEG_INFINITY;
    }
    if x.is_nan() || y.is_nan() {
        return f64::NAN;
    }
    if x == 0.0 && y == 0.0 {
        return if x.is_sign_negative() { x } else { y };
    }
    if x < y { x } else { y }
}

fn int_list(items: Vec<i64>) -> Value {
    Value::List(List::typed(
        items.into_iter().map(Value::Int).collect(),
        ElemType::Int,
    ))
}

/// Sprig's `untilStep`.
fn until_step(start: i64, stop: i64, step: i64) -> Result<Vec<i64>, FuncError> {
    let mut v = Vec::new();
    let too_big = || FuncError::new("runtime error: makeslice: len out of range");
    if stop < start {
        if step >= 0 {
            return Ok(v);
        }
        let mut i = start;
        while i > stop {
            if v.len() >= MAX_LIST {
                return Err(too_big());
            }
            v.push(i);
            match i.checked_add(step) {
                Some(n) => i = n,
                None => break,
            }
        }
        return Ok(v);
    }
    if step <= 0 {
        return Ok(v);
    }
    let mut i = start;
    while i < stop {
        if v.len() >= MAX_LIST {
            return Err(too_big());
        }
        v.push(i);
        match i.checked_add(step) {
            Some(n) => i = n,
            None => break,
        }
    }
    Ok(v)
}

/// Sprig's `seq`.
fn seq(p: &[i64]) -> Result<String, FuncError> {
    let join = |v: Vec<i64>| v.iter().map(i64::to_string).collect::<Vec<_>>().join(" ");
    Ok(match *p {
        [end] => {
            let inc = if end < 1 { -1 } else { 1 };
            join(until_step(1, end.wrapping_add(inc), inc)?)
        }
        [start, end] => {
            let step = if end < start { -1 } else { 1 };
            join(until_step(start, end.wrapping_add(step), step)?)
        }
        [start, step, end] => {
            let mut inc = 1;
            if end < start {
                inc = -1;
                if step > 0 {
                    return Ok(String::new());
                }
            }
            join(until_step(start, end.wrapping_add(inc), step)?)
        }
        _ => String::new(),
    })
}

#[derive(Clone, Copy)]
enum Op {
    Add,
    Sub,
    Mul,
    Div,
}

fn decimal_op(first: &Value, rest: &[Value], op: Op) -> Result<Value, FuncError> {
    let mut acc = Decimal::from_f64(to_float64(first))?;
    for v in rest {
        let d = Decimal::from_f64(to_float64(v))?;
        acc = match op {
            Op::Add => acc.add(&d),
            Op::Sub => acc.add(&d.neg()),
            Op::Mul => acc.mul(&d),
            Op::Div => acc.div(&d)?,
        };
    }
    Ok(Value::Float(acc.to_f64()))
}

/// An exact decimal `(-1)^neg × digits × 10^exp` with arbitrary precision (base-10 digits,
/// most significant first).
#[derive(Clone, Debug)]
struct Decimal {
    neg: bool,
    digits: Vec<u8>,
    exp: i64,
}

impl Decimal {
    /// shopspring's `NewFromFloat`: the shortest decimal that round-trips.
    fn from_f64(f: f64) -> Result<Decimal, FuncError> {
        if f.is_nan() {
            return Err(FuncError::new("Cannot create a Decimal from NaN"));
        }
        if f.is_infinite() {
            let sign = if f > 0.0 { "+Inf" } else { "-Inf" };
            return Err(FuncError::new(format!(
                "Cannot create a Decimal from {sign}"
            )));
        }
        let s = format!("{:e}", f.abs());
        let (mant, e) = s.split_once('e').unwrap_or((&s, "0"));
        let e: i64 = e.parse().unwrap_or(0);
        let digits: Vec<u8> = mant
            .bytes()
            .filter(u8::is_ascii_digit)
            .map(|b| b - b'0')
            .collect();
        let frac = mant.split_once('.').map_or(0, |(_, f)| f.len()) as i64;
        Ok(Decimal {
            neg: f.is_sign_negative() && f != 0.0,
            digits,
            exp: e - frac,
        }
        .normalized())
    }

    fn normalized(mut self) -> Decimal {
        let lead = self.digits.iter().take_while(|&&d| d == 0).count();
        self.digits.drain(..lead);
        while self.digits.last() == Some(&0) {
            self.digits.pop();
            self.exp += 1;
        }
        if self.digits.is_empty() {
            self.neg = false;
            self.exp = 0;
        }
        self
    }

    fn neg(&self) -> Decimal {
        let mut d = self.clone();
        d.neg = !d.neg && !d.digits.is_empty();
        d
    }

    /// Digits scaled to exponent `exp` (≤ self.exp).
    fn scaled(&self, exp: i64) -> Vec<u8> {
        let mut d = self.digits.clone();
        d.extend(std::iter::repeat_n(0, (self.exp - exp) as usize));
        d
    }

    fn add(&self, o: &Decimal) -> Decimal {
        if self.digits.is_empty() {
            return o.clone();
        }
        if o.digits.is_empty() {
            return self.clone();
        }
        let exp = self.exp.min(o.exp);
        let (a, b) = (self.scaled(exp), o.scaled(exp));
        if self.neg == o.neg {
            return Decimal {
                neg: self.neg,
                digits: mag_add(&a, &b),
                exp,
            }
            .normalized();
        }
        match mag_cmp(&a, &b) {
            std::cmp::Ordering::Equal => Decimal {
                neg: false,
                digits: vec![],
                exp: 0,
            },
            std::cmp::Ordering::Greater => Decimal {
                neg: self.neg,
                digits: mag_sub(&a, &b),
                exp,
            }
            .normalized(),
            std::cmp::Ordering::Less => Decimal {
                neg: o.neg,
                digits: mag_sub(&b, &a),
                exp,
            }
            .normalized(),
        }
    }

    fn mul(&self, o: &Decimal) -> Decimal {
        if self.digits.is_empty() || o.digits.is_empty() {
            return Decimal {
                neg: false,
                digits: vec![],
                exp: 0,
            };
        }
        let mut out = vec![0u32; self.digits.len() + o.digits.len()];
        for (i, &x) in self.digits.iter().enumerate().rev() {
            for (j, &y) in o.digits.iter().enumerate().rev() {
                out[i + j + 1] += u32::from(x) * u32::from(y);
            }
            // Carry as we go to keep cells small.
            for k in (1..out.len()).rev() {
                let c = out[k] / 10;
                out[k] %= 10;
                out[k - 1] += c;
            }
        }
        Decimal {
            neg: self.neg != o.neg,
            digits: out.into_iter().map(|d| d as u8).collect(),
            exp: self.exp + o.exp,
        }
        .normalized()
    }

    /// shopspring's `Div`: `DivRound(d2, 16)`, the quotient rounded half away from zero to
    /// 16 decimal places.
    fn div(&self, o: &Decimal) -> Result<Decimal, FuncError> {
        if o.digits.is_empty() {
            return Err(FuncError::new("decimal division by 0"));
        }
        if self.digits.is_empty() {
            return Ok(self.clone());
        }
        let places = 16i64;
        let shift = self.exp - o.exp + places;
        let mut num = self.digits.clone();
        let mut den = o.digits.clone();
        if shift >= 0 {
            num.extend(std::iter::repeat_n(0, shift as usize));
        } else {
            den.extend(std::iter::repeat_n(0, (-shift) as usize));
        }
        let (mut q, rem) = mag_divrem(&num, &den);
        if mag_cmp(&mag_add(&rem, &rem), &den) != std::cmp::Ordering::Less {
            q = mag_add(&q, &[1]);
        }
        Ok(Decimal {
            neg: self.neg != o.neg,
            digits: q,
            exp: -places,
        }
        .normalized())
    }

    /// The nearest float64 (Rust's parser rounds long decimal strings correctly).
    fn to_f64(&self) -> f64 {
        if self.digits.is_empty() {
            return 0.0;
        }
        let s: String = self.digits.iter().map(|d| char::from(b'0' + d)).collect();
        let f: f64 = format!("{s}e{}", self.exp).parse().unwrap_or(0.0);
        if self.neg { -f } else { f }
    }
}

fn strip(v: &[u8]) -> &[u8] {
    let lead = v.iter().take_while(|&&d| d == 0).count();
    &v[lead..]
}

fn mag_cmp(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    let (a, b) = (strip(a), strip(b));
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

fn mag_add(a: &[u8], b: &[u8]) -> Vec<u8> {
    let n = a.len().max(b.len()) + 1;
    let mut out = vec![0u8; n];
    let mut carry = 0u8;
    for k in 0..n {
        let x = if k < a.len() { a[a.len() - 1 - k] } else { 0 };
        let y = if k < b.len() { b[b.len() - 1 - k] } else { 0 };
        let s = x + y + carry;
        out[n - 1 - k] = s % 10;
        carry = s / 10;
    }
    strip(&out).to_vec()
}

/// `a - b` for `a ≥ b`.
fn mag_sub(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut out = a.to_vec();
    let mut borrow = 0i16;
    for k in 0..out.len() {
        let i = out.len() - 1 - k;
        let y = if k < b.len() {
            i16::from(b[b.len() - 1 - k])
        } else {
            0
        };
        let mut d = i16::from(out[i]) - y - borrow;
        if d < 0 {
            d += 10;
            borrow = 1;
        } else {
            borrow = 0;
        }
        out[i] = d as u8;
    }
    strip(&out).to_vec()
}

/// Long division: `(floor(a / b), a mod b)`, `b` non-zero.
fn mag_divrem(a: &[u8], b: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let b = strip(b);
    let mut q = Vec::with_capacity(a.len());
    let mut rem: Vec<u8> = Vec::new();
    for &d in a {
        rem.push(d);
        let r = strip(&rem).to_vec();
        rem = r;
        let mut count = 0u8;
        while mag_cmp(&rem, b) != std::cmp::Ordering::Less {
            rem = mag_sub(&rem, b);
            count += 1;
        }
        q.push(count);
    }
    (strip(&q).to_vec(), rem)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(a: f64, b: f64, o: Op) -> f64 {
        match decimal_op(&Value::Float(a), &[Value::Float(b)], o) {
            Ok(Value::Float(f)) => f,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn decimal_arithmetic() {
        assert_eq!(op(0.1, 0.2, Op::Add), 0.3);
        assert_eq!(op(1.5, 0.25, Op::Sub), 1.25);
        assert_eq!(op(1.1, 1.1, Op::Mul), 1.21);
        assert_eq!(op(1.0, 3.0, Op::Div), 0.3333333333333333);
        assert_eq!(op(2.0, 3.0, Op::Div), 0.6666666666666667);
        assert_eq!(op(1e300, 1e-300, Op::Add), 1e300);
        assert_eq!(op(-2.5, 2.5, Op::Add), 0.0);
    }
}
