//! Random primes for RSA key generation, fast: the `rsa` crate's prime search (num-bigint-dig)
//! took several times as long as Go's `rsa.GenerateKey`, and charts calling `genCA` or
//! `genSignedCert` spent most of their rendering time there.
//!
//! The search, for primes whose size is a whole number of 64-bit limbs (512 to 2048 bits,
//! which covers the 2048- and 4096-bit keys Sprig makes):
//!
//! 1. a random odd start with the top two bits set (as Go does, so that the product of two
//!    such primes has exactly twice their size);
//! 2. a sieve over a window of the following odd numbers: the start's residues modulo the
//!    odd primes below [`SIEVE_LIMIT`] are computed once (a few primes at a time, through
//!    the remainder modulo their product), then every multiple of each prime in the window
//!    is struck out; the next window's residues follow from the previous ones;
//! 3. each survivor, in order, gets a Miller-Rabin round with base 2 (where multiplying by
//!    the base is a doubling), then Miller-Rabin rounds with random bases, as many as
//!    FIPS 186-5 table B.1 asks (Go's and BoringSSL's counts: 5 for 1024-bit primes, 4 for
//!    2048-bit ones), on Montgomery arithmetic over fixed-size limb arrays (CIOS
//!    multiplication with 128-bit products, a product-scanning squaring that computes each
//!    cross product once, sliding-window exponentiation). For 1024-bit primes on CPUs with
//!    AVX-512 IFMA, survivors are tested eight at once instead ([`super::lanes`]): a base-2
//!    Fermat test of eight, then, for one that passes, Miller-Rabin with base 2 and seven
//!    random bases at once.
//!
//! [`random_primes`] runs the search on several threads at once and keeps the first primes
//! found: the search time of a prime is random, so racing threads for each prime shortens
//! the wait for the pair. For 1024-bit primes (2048-bit keys), a background thread may also
//! find primes ahead of their use ([`expect_keys_2048`]). The arithmetic is not constant-time
//! (neither is Go's rejection of composites); the keys it makes are printed in the rendered
//! manifests anyway.

use std::cell::OnceCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use rand_core::{OsRng, RngCore};
use rsa::BigUint;

/// Odd primes below this bound sieve the candidates (12 250 primes).
const SIEVE_LIMIT: u32 = 1 << 17;

/// Odd candidates per sieve window (start, start + 2, ...). The mean gap between 1024-bit
/// primes is ~710, so one window nearly always holds several primes.
const WINDOW: usize = 4096;

/// At most this many threads race for primes.
const MAX_THREADS: usize = 4;

/// Multiply-accumulate: `a + b * c + carry` as (low, high) words.
#[inline(always)]
fn mac(a: u64, b: u64, c: u64, carry: u64) -> (u64, u64) {
    let t = u128::from(a) + u128::from(b) * u128::from(c) + u128::from(carry);
    (t as u64, (t >> 64) as u64)
}

/// `a + b + carry` as (sum, carry out).
#[inline(always)]
fn adc(a: u64, b: u64, carry: u64) -> (u64, u64) {
    let t = u128::from(a) + u128::from(b) + u128::from(carry);
    (t as u64, (t >> 64) as u64)
}

/// `a - b - borrow` as (difference, borrow out, 0 or 1).
#[inline(always)]
fn sbb(a: u64, b: u64, borrow: u64) -> (u64, u64) {
    let t = u128::from(a)
        .wrapping_sub(u128::from(b))
        .wrapping_sub(u128::from(borrow));
    (t as u64, (t >> 127) as u64)
}

/// `a - b` over `N` limbs (little-endian); the borrow out is returned.
pub(super) fn sub_in_place<const N: usize>(a: &mut [u64; N], b: &[u64; N]) -> u64 {
    let mut borrow = 0;
    for (x, y) in a.iter_mut().zip(b) {
        (*x, borrow) = sbb(*x, *y, borrow);
    }
    borrow
}

/// `a >= b` over `N` limbs.
pub(super) fn ge<const N: usize>(a: &[u64; N], b: &[u64; N]) -> bool {
    for i in (0..N).rev() {
        if a[i] != b[i] {
            return a[i] > b[i];
        }
    }
    true
}

fn bit<const N: usize>(x: &[u64; N], i: usize) -> u64 {
    (x[i / 64] >> (i % 64)) & 1
}

fn bit_len<const N: usize>(x: &[u64; N]) -> usize {
    for i in (0..N).rev() {
        if x[i] != 0 {
            return 64 * i + 64 - x[i].leading_zeros() as usize;
        }
    }
    0
}

/// A three-word accumulator (`l + h 2^64 + t 2^128`) for the sum of one column's products.
#[derive(Debug, Default, Clone, Copy)]
struct Acc {
    l: u64,
    h: u64,
    t: u64,
}

impl Acc {
    /// `self += a b`.
    #[inline(always)]
    fn add_mul(&mut self, a: u64, b: u64) {
        let p = u128::from(a) * u128::from(b);
        let (l, c) = self.l.overflowing_add(p as u64);
        let (h, c) = self.h.carrying_add((p >> 64) as u64, c);
        self.l = l;
        self.h = h;
        self.t = self.t.wrapping_add(u64::from(c));
    }

    /// `self += 2 other` (`other < 2^191`).
    #[inline(always)]
    fn add_doubled(&mut self, other: &Acc) {
        let (l, c) = self.l.overflowing_add(other.l << 1);
        let (h, c) = self.h.carrying_add((other.h << 1) | (other.l >> 63), c);
        self.l = l;
        self.h = h;
        self.t = self
            .t
            .wrapping_add((other.t << 1) | (other.h >> 63))
            .wrapping_add(u64::from(c));
    }

    /// Returns the low word and shifts the rest down by one word.
    #[inline(always)]
    fn shift(&mut self) -> u64 {
        let low = self.l;
        self.l = self.h;
        self.h = self.t;
        self.t = 0;
        low
    }
}

/// `-m^-1 mod 2^64` for an odd `m0` (a modulus' lowest limb).
pub(super) fn neg_inverse(m0: u64) -> u64 {
    // Newton's iteration doubles the correct low bits of the inverse each step; m is its own
    // inverse modulo 8.
    let mut inv = m0;
    for _ in 0..5 {
        inv = inv.wrapping_mul(2u64.wrapping_sub(m0.wrapping_mul(inv)));
    }
    inv.wrapping_neg()
}

/// `x = 2x mod m`, for `x < m` (`N` limbs).
pub(super) fn double_mod<const N: usize>(x: &mut [u64; N], m: &[u64; N]) {
    let mut carry = 0;
    for limb in x.iter_mut() {
        let next = *limb >> 63;
        *limb = (*limb << 1) | carry;
        carry = next;
    }
    if carry == 1 || ge(x, m) {
        sub_in_place(x, m);
    }
}

/// An odd modulus `m < 2^(64N)` with its Montgomery constants (`R = 2^(64N)`).
#[derive(Debug, Clone)]
pub(crate) struct Modulus<const N: usize> {
    m: [u64; N],
    /// `-m^-1 mod 2^64`.
    m_inv: u64,
    /// `R mod m`: 1 in Montgomery form.
    one: [u64; N],
    /// `R^2 mod m`, computed on first use: only bases other than 2 need it, and nearly
    /// every candidate fails the base-2 round first.
    r2: OnceCell<[u64; N]>,
}

impl<const N: usize> Modulus<N> {
    /// `None` when `m` is even or 1.
    pub(crate) fn new(m: [u64; N]) -> Option<Self> {
        if m[0] & 1 == 0 || bit_len(&m) <= 1 {
            return None;
        }
        let mut md = Modulus {
            m,
            m_inv: neg_inverse(m[0]),
            one: [0; N],
            r2: OnceCell::new(),
        };
        // R mod m: R - m when m > R/2, otherwise 1 doubled 64N times.
        if m[N - 1] >> 63 == 1 {
            let mut one = [0u64; N];
            sub_in_place(&mut one, &m);
            md.one = one;
        } else {
            let mut one = [0u64; N];
            one[0] = 1;
            for _ in 0..64 * N {
                md.double_in_place(&mut one);
            }
            md.one = one;
        }
        Some(md)
    }

    /// `R^2 mod m`: 2^(64N) in Montgomery form, that is 2R mod m raised to 64N.
    fn r2(&self) -> &[u64; N] {
        self.r2.get_or_init(|| {
            let mut e = [0u64; N];
            e[0] = 64 * N as u64;
            self.pow2(&e)
        })
    }

    /// `x = 2x mod m`, for `x < m`.
    fn double_in_place(&self, x: &mut [u64; N]) {
        double_mod(x, &self.m);
    }

    /// Montgomery product `a b R^-1 mod m` (CIOS: each word of `b` is multiplied in, then
    /// one word reduced), for `a, b < m`; the result is `< m`.
    pub(crate) fn mul(&self, a: &[u64; N], b: &[u64; N]) -> [u64; N] {
        let m = &self.m;
        let mut t = [0u64; N];
        let mut t_hi = 0u64;
        for &bi in b {
            let mut c = 0;
            for j in 0..N {
                (t[j], c) = mac(t[j], a[j], bi, c);
            }
            let (s, c1) = adc(t_hi, c, 0);
            let q = t[0].wrapping_mul(self.m_inv);
            let (_, mut c) = mac(t[0], q, m[0], 0);
            for j in 1..N {
                (t[j - 1], c) = mac(t[j], q, m[j], c);
            }
            let (s2, c2) = adc(s, c, 0);
            t[N - 1] = s2;
            t_hi = c1 + c2;
        }
        self.final_subtract(t, t_hi)
    }

    /// `a^2 R^-1 mod m`, for `a < m`; the result is `< m`. Product scanning: column `k` of
    /// `a^2 + q m` is summed in a three-word accumulator, its cross products `a[i] a[j]`
    /// (`i < j`) once and doubled, and the quotient word `q[k]` (chosen to clear the column's
    /// low word) joins as soon as it is known. So the square costs about half the
    /// 64×64-bit products of [`Modulus::mul`]. The columns are written out (up to 64, for
    /// moduli up to 2048 bits) so that each one's loops have constant bounds and unroll.
    pub(crate) fn sqr(&self, a: &[u64; N]) -> [u64; N] {
        let mut q = [0u64; N];
        let mut r = [0u64; N];
        let mut acc = Acc::default();
        macro_rules! columns {
            ($($k:literal)*) => {$(
                if $k < 2 * N {
                    self.sqr_column(a, &mut q, &mut r, &mut acc, $k);
                }
            )*};
        }
        columns!(
            0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
            32 33 34 35 36 37 38 39 40 41 42 43 44 45 46 47 48 49 50 51 52 53 54 55 56 57 58 59
            60 61 62 63
        );
        for k in 64..2 * N {
            self.sqr_column(a, &mut q, &mut r, &mut acc, k);
        }
        self.final_subtract(r, acc.l)
    }

    /// Column `k` of [`Modulus::sqr`]: adds its products to `acc`, then either sets `q[k]`
    /// and drops the cleared low word (`k < N`) or shifts the low word out into `r[k - N]`.
    #[inline(always)]
    fn sqr_column(
        &self,
        a: &[u64; N],
        q: &mut [u64; N],
        r: &mut [u64; N],
        acc: &mut Acc,
        k: usize,
    ) {
        let m = &self.m;
        let first = (k + 1).saturating_sub(N);
        for i in first..k.min(N) {
            acc.add_mul(q[i], m[k - i]);
        }
        let mut cross = Acc::default();
        for i in first..k.div_ceil(2) {
            cross.add_mul(a[i], a[k - i]);
        }
        acc.add_doubled(&cross);
        if k.is_multiple_of(2) {
            acc.add_mul(a[k / 2], a[k / 2]);
        }
        if k < N {
            let qk = acc.l.wrapping_mul(self.m_inv);
            acc.add_mul(qk, m[0]);
            acc.shift();
            q[k] = qk;
        } else {
            r[k - N] = acc.shift();
        }
    }

    /// `t + carry R` is below 2m: subtract m once when it is not below m, without a branch on
    /// the data.
    #[inline(always)]
    fn final_subtract(&self, t: [u64; N], carry: u64) -> [u64; N] {
        let mut reduced = t;
        let borrow = sub_in_place(&mut reduced, &self.m);
        let keep = (borrow & !carry & 1).wrapping_neg();
        for j in 0..N {
            reduced[j] = (t[j] & keep) | (reduced[j] & !keep);
        }
        reduced
    }

    /// `x R mod m`, for any `x < m`.
    pub(crate) fn enter(&self, x: &[u64; N]) -> [u64; N] {
        self.mul(x, self.r2())
    }

    /// `x R^-1 mod m`: the plain value of `x` in Montgomery form.
    pub(crate) fn leave(&self, x: &[u64; N]) -> [u64; N] {
        let mut unit = [0u64; N];
        unit[0] = 1;
        self.mul(x, &unit)
    }

    /// `base^exp` in Montgomery form (sliding windows of up to 5 bits).
    pub(crate) fn pow(&self, base: &[u64; N], exp: &[u64; N]) -> [u64; N] {
        const W: usize = 5;
        let mut table = [[0u64; N]; 1 << (W - 1)];
        table[0] = *base;
        let base_sq = self.sqr(base);
        for i in 1..table.len() {
            table[i] = self.mul(&table[i - 1], &base_sq);
        }
        let mut acc = self.one;
        let mut started = false;
        let mut i = bit_len(exp);
        while i > 0 {
            let top = i - 1;
            if bit(exp, top) == 0 {
                if started {
                    acc = self.sqr(&acc);
                }
                i = top;
                continue;
            }
            // The longest window of at most W bits ending in a set bit.
            let mut low = top.saturating_sub(W - 1);
            while bit(exp, low) == 0 {
                low += 1;
            }
            let mut val = 0usize;
            for k in (low..=top).rev() {
                val = (val << 1) | bit(exp, k) as usize;
            }
            if started {
                for _ in low..=top {
                    acc = self.sqr(&acc);
                }
                acc = self.mul(&acc, &table[val >> 1]);
            } else {
                acc = table[val >> 1];
                started = true;
            }
            i = low;
        }
        acc
    }

    /// `2^exp` in Montgomery form: left-to-right binary, where multiplying by the base is a
    /// modular doubling, so it costs the squarings alone.
    pub(crate) fn pow2(&self, exp: &[u64; N]) -> [u64; N] {
        let mut acc = self.one;
        let top = bit_len(exp);
        if top == 0 {
            return acc;
        }
        self.double_in_place(&mut acc);
        for i in (0..top - 1).rev() {
            acc = self.sqr(&acc);
            if bit(exp, i) == 1 {
                self.double_in_place(&mut acc);
            }
        }
        acc
    }

    /// One Miller-Rabin round with base `a` (`1 < a < m - 1`, plain form): `false` proves
    /// `m` composite. `d` and `s` are such that `m - 1 = d 2^s`, `d` odd.
    fn miller_rabin(&self, a: &[u64; N], d: &[u64; N], s: usize) -> bool {
        self.strong_probable_prime(self.pow(&self.enter(a), d), s)
    }

    /// The round for base 2, through [`Modulus::pow2`] (`m > 3`).
    fn miller_rabin_base_2(&self, d: &[u64; N], s: usize) -> bool {
        self.strong_probable_prime(self.pow2(d), s)
    }

    /// The rest of a round, from `x = a^d` (Montgomery form).
    fn strong_probable_prime(&self, mut x: [u64; N], s: usize) -> bool {
        let mut minus_one = self.m;
        sub_in_place(&mut minus_one, &self.one);
        if x == self.one || x == minus_one {
            return true;
        }
        for _ in 1..s {
            x = self.sqr(&x);
            if x == minus_one {
                return true;
            }
            if x == self.one {
                return false;
            }
        }
        false
    }
}

/// Miller-Rabin rounds for a random candidate of `bits` bits: FIPS 186-5 table B.1, as Go
/// and BoringSSL count them.
fn rounds_for(bits: usize) -> usize {
    match bits {
        3747.. => 3,
        1345.. => 4,
        476.. => 5,
        400.. => 6,
        347.. => 7,
        308.. => 8,
        55.. => 27,
        _ => 34,
    }
}

/// `m` passes `rounds` Miller-Rabin rounds with uniformly random bases.
fn is_probable_prime<const N: usize>(md: &Modulus<N>, rounds: usize) -> bool {
    let m = &md.m;
    if bit_len(m) <= 2 {
        // 3: no base lies strictly between 1 and m - 1.
        return true;
    }
    let mut d = *m;
    d[0] &= !1;
    let s = (0..64 * N).find(|&i| bit(&d, i) == 1).unwrap_or(0);
    for _ in 0..s {
        shr1(&mut d);
    }
    // A base-2 round first, which nearly every composite fails and which is cheaper than a
    // random base's; then the rounds table B.1 asks for, with random bases.
    if bit_len(m) > 3 && !md.miller_rabin_base_2(&d, s) {
        return false;
    }
    let bits = bit_len(m);
    let mut minus_one = *m;
    minus_one[0] &= !1;
    let mut done = 0;
    while done < rounds {
        let a = random_below_bits::<N>(bits);
        let is_small = a[1..].iter().all(|&l| l == 0) && a[0] <= 1;
        if is_small || ge(&a, &minus_one) {
            continue;
        }
        if !md.miller_rabin(&a, &d, s) {
            return false;
        }
        done += 1;
    }
    true
}

fn shr1<const N: usize>(x: &mut [u64; N]) {
    for i in 0..N {
        let hi = if i + 1 < N { x[i + 1] << 63 } else { 0 };
        x[i] = (x[i] >> 1) | hi;
    }
}

/// A uniformly random number of at most `bits` bits.
fn random_below_bits<const N: usize>(bits: usize) -> [u64; N] {
    let mut x = [0u64; N];
    for limb in x.iter_mut() {
        *limb = OsRng.next_u64();
    }
    for (i, limb) in x.iter_mut().enumerate() {
        let lo = 64 * i;
        if lo >= bits {
            *limb = 0;
        } else if bits - lo < 64 {
            *limb &= (1u64 << (bits - lo)) - 1;
        }
    }
    x
}

/// The odd primes below [`SIEVE_LIMIT`], grouped so that each group's product fits a u64.
#[derive(Debug)]
struct SmallPrimes {
    primes: Vec<u32>,
    /// `(product, first index, end index)` of each group.
    groups: Vec<(Divisor, usize, usize)>,
}

/// A u64 divisor with what division by it through a multiplication needs (Möller and
/// Granlund, "Improved division by invariant integers", 2011: the 2-by-1 division with a
/// precomputed reciprocal), as the start residues of every search divide by the same
/// ~3,500 products: a 128-by-64-bit `%` is a call to a slow generic routine.
#[derive(Debug, Clone, Copy)]
struct Divisor {
    /// The divisor shifted left until its top bit is set.
    normalized: u64,
    /// `floor((2^128 - 1) / normalized) - 2^64`.
    reciprocal: u64,
    shift: u32,
}

impl Divisor {
    fn new(d: u64) -> Self {
        assert!(d != 0, "division by zero");
        let shift = d.leading_zeros();
        let normalized = d << shift;
        let reciprocal = (u128::MAX / u128::from(normalized) - (1u128 << 64)) as u64;
        Divisor {
            normalized,
            reciprocal,
            shift,
        }
    }

    /// `(u1 2^64 + u0) mod normalized`, for `u1 < normalized`.
    #[inline(always)]
    fn rem_normalized(&self, u1: u64, u0: u64) -> u64 {
        let d = self.normalized;
        let q = (u128::from(self.reciprocal) * u128::from(u1))
            .wrapping_add((u128::from(u1) << 64) | u128::from(u0));
        let (q1, q0) = (((q >> 64) as u64).wrapping_add(1), q as u64);
        let mut r = u0.wrapping_sub(q1.wrapping_mul(d));
        if r > q0 {
            r = r.wrapping_add(d);
        }
        if r >= d {
            r -= d;
        }
        r
    }

    /// `x mod d` for each of `K` divisors, limb by limb in step.
    fn rem_many<const K: usize, const N: usize>(divs: &[Divisor; K], x: &[u64; N]) -> [u64; K] {
        let mut r = [0u64; K];
        for i in (0..N).rev() {
            for (r, div) in r.iter_mut().zip(divs) {
                let s = div.shift;
                let spill = |limb: u64| if s == 0 { 0 } else { limb >> (64 - s) };
                if i == N - 1 {
                    *r = spill(x[N - 1]);
                }
                let below = if i == 0 { 0 } else { spill(x[i - 1]) };
                *r = div.rem_normalized(*r, (x[i] << s) | below);
            }
        }
        for (r, div) in r.iter_mut().zip(divs) {
            *r >>= div.shift;
        }
        r
    }

    /// `x mod d`.
    fn rem<const N: usize>(&self, x: &[u64; N]) -> u64 {
        // x 2^shift mod d 2^shift, over the limbs of x shifted left, then shifted back.
        let s = self.shift;
        let spill = |limb: u64| if s == 0 { 0 } else { limb >> (64 - s) };
        let mut r = spill(x[N - 1]);
        for i in (0..N).rev() {
            let below = if i == 0 { 0 } else { spill(x[i - 1]) };
            r = self.rem_normalized(r, (x[i] << s) | below);
        }
        r >> s
    }
}

fn small_primes() -> &'static SmallPrimes {
    static TABLE: OnceLock<SmallPrimes> = OnceLock::new();
    TABLE.get_or_init(|| {
        let limit = SIEVE_LIMIT as usize;
        let mut composite = vec![false; limit];
        let mut primes = Vec::new();
        for i in 3..limit {
            if i % 2 == 1 && !composite[i] {
                primes.push(i as u32);
                let mut j = i * i;
                while j < limit {
                    composite[j] = true;
                    j += 2 * i;
                }
            }
        }
        let mut groups = Vec::new();
        let mut start = 0;
        while start < primes.len() {
            let mut product = u64::from(primes[start]);
            let mut end = start + 1;
            while end < primes.len() {
                match product.checked_mul(u64::from(primes[end])) {
                    Some(p) => product = p,
                    None => break,
                }
                end += 1;
            }
            groups.push((Divisor::new(product), start, end));
            start = end;
        }
        SmallPrimes { primes, groups }
    })
}

/// Strikes out `start + 2k` for each `k` of the window that one of `primes` divides, given
/// `start`'s residues modulo them (bit `k % 64` of `struck[k / 64]`).
fn strike(primes: &[u32], residues: &[u32], struck: &mut [u64; WINDOW / 64]) {
    struck.fill(0);
    for (&p, &r) in primes.iter().zip(residues) {
        let p = p as usize;
        // start + 2k ≡ 0 (mod p)  ⇔  2k ≡ p - r (mod p): k is half of p - r or, when that
        // is odd, of p - r + p (which is 2p, so k = p ≡ 0, when r = 0).
        let t = p - r as usize;
        let mut k = if t.is_multiple_of(2) {
            t / 2
        } else {
            (t + p) / 2
        };
        if k == p {
            k = 0;
        }
        while k < WINDOW {
            struck[k / 64] |= 1 << (k % 64);
            k += p;
        }
    }
}

/// Searches a prime of exactly `64N` bits with the top two bits set, until one is found or
/// `stop` is raised.
fn search<const N: usize>(stop: &AtomicBool) -> Option<[u64; N]> {
    search_with(stop, lanes_available::<N>())
}

/// [`search`], testing candidates eight at a time on the lane arithmetic when `use_lanes`
/// (the CPU must have it), one at a time otherwise.
fn search_with<const N: usize>(stop: &AtomicBool, use_lanes: bool) -> Option<[u64; N]> {
    let table = small_primes();
    let bits = 64 * N;
    let rounds = rounds_for(bits);
    let mut residues = vec![0u32; table.primes.len()];
    let mut struck = [0u64; WINDOW / 64];
    // Survivors of the sieve waiting to be tested together (see [`test_batch`]).
    let use_lanes = use_lanes && rounds < LANES;
    let mut batch: Vec<[u64; N]> = Vec::with_capacity(LANES);
    'restart: loop {
        let mut start = random_below_bits::<N>(bits);
        start[N - 1] |= 0b11 << 62;
        start[0] |= 1;
        // Four groups at a time: their divisions are independent chains that overlap.
        let mut groups = table.groups.chunks_exact(4);
        let mut fill = |&(_, first, end): &(Divisor, usize, usize), r: u64| {
            for (residue, &p) in residues[first..end]
                .iter_mut()
                .zip(&table.primes[first..end])
            {
                *residue = (r % u64::from(p)) as u32;
            }
        };
        for four in groups.by_ref() {
            let r = Divisor::rem_many(&[four[0].0, four[1].0, four[2].0, four[3].0], &start);
            for (group, r) in four.iter().zip(r) {
                fill(group, r);
            }
        }
        for group in groups.remainder() {
            fill(group, group.0.rem(&start));
        }
        loop {
            strike(&table.primes, &residues, &mut struck);
            for k in 0..WINDOW {
                if struck[k / 64] >> (k % 64) & 1 == 1 {
                    continue;
                }
                if stop.load(Ordering::Relaxed) {
                    return None;
                }
                let mut candidate = start;
                let mut carry = 2 * k as u64;
                for limb in candidate.iter_mut() {
                    (*limb, carry) = adc(*limb, carry, 0);
                    if carry == 0 {
                        break;
                    }
                }
                if carry != 0 || candidate[N - 1] >> 62 != 0b11 {
                    if let Some(p) = test_batch(&mut batch, rounds) {
                        return Some(p);
                    }
                    continue 'restart;
                }
                if use_lanes {
                    batch.push(candidate);
                    if batch.len() == LANES
                        && let Some(p) = test_batch(&mut batch, rounds)
                    {
                        return Some(p);
                    }
                    continue;
                }
                let Some(md) = Modulus::new(candidate) else {
                    continue;
                };
                if is_probable_prime(&md, rounds) {
                    return Some(candidate);
                }
            }
            // Next window.
            let mut carry = 2 * WINDOW as u64;
            for limb in start.iter_mut() {
                (*limb, carry) = adc(*limb, carry, 0);
            }
            if carry != 0 || start[N - 1] >> 62 != 0b11 {
                if let Some(p) = test_batch(&mut batch, rounds) {
                    return Some(p);
                }
                continue 'restart;
            }
            for (r, &p) in residues.iter_mut().zip(&table.primes) {
                *r = ((*r as usize + 2 * WINDOW) % p as usize) as u32;
            }
        }
    }
}

/// Candidates tested at once by the lane arithmetic.
#[cfg(target_arch = "x86_64")]
const LANES: usize = super::lanes::LANES;
#[cfg(not(target_arch = "x86_64"))]
const LANES: usize = 1;

/// Whether [`test_batch`] runs here for primes of `64N` bits.
fn lanes_available<const N: usize>() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        super::lanes::limbs_for(N).is_some() && super::lanes::available()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Tests the waiting candidates (in their order; empties `batch`): a base-2 Fermat test of
/// all of them at once on the lane arithmetic, then, for those that pass, Miller-Rabin rounds
/// with base 2 and `LANES - 1` random bases at once (at least the `rounds` asked for). The
/// first candidate that passes all is returned. A short batch is padded with copies of its
/// last candidate.
fn test_batch<const N: usize>(batch: &mut Vec<[u64; N]>, rounds: usize) -> Option<[u64; N]> {
    if batch.is_empty() {
        return None;
    }
    let found = lanes_test::<N>(batch, rounds);
    batch.clear();
    found
}

#[cfg(target_arch = "x86_64")]
fn lanes_test<const N: usize>(batch: &[[u64; N]], rounds: usize) -> Option<[u64; N]> {
    use super::lanes;
    let mut lanes_in = [*batch.last()?; LANES];
    lanes_in[..batch.len()].copy_from_slice(batch);
    let passed = match N {
        16 => lanes::fermat_base_2::<N, 20>(&lanes_in),
        _ => None,
    };
    let Some(passed) = passed else {
        // Not reached (callers check `lanes_available`): the scalar test, one by one.
        return batch
            .iter()
            .copied()
            .find(|c| Modulus::new(*c).is_some_and(|md| is_probable_prime(&md, rounds)));
    };
    for (lane, candidate) in batch.iter().enumerate() {
        if passed >> lane & 1 == 0 {
            continue;
        }
        let prime = match N {
            16 => lanes::miller_rabin::<N, 20>(candidate),
            _ => None,
        };
        let prime = prime.unwrap_or_else(|| {
            Modulus::new(*candidate).is_some_and(|md| is_probable_prime(&md, rounds))
        });
        if prime {
            return Some(*candidate);
        }
    }
    None
}

#[cfg(not(target_arch = "x86_64"))]
fn lanes_test<const N: usize>(batch: &[[u64; N]], rounds: usize) -> Option<[u64; N]> {
    batch
        .iter()
        .copied()
        .find(|c| Modulus::new(*c).is_some_and(|md| is_probable_prime(&md, rounds)))
}

pub(crate) fn to_biguint<const N: usize>(x: &[u64; N]) -> BigUint {
    let bytes: Vec<u8> = x.iter().rev().flat_map(|l| l.to_be_bytes()).collect();
    BigUint::from_bytes_be(&bytes)
}

/// `x` as `N` little-endian limbs; `None` when it does not fit.
pub(crate) fn from_biguint<const N: usize>(x: &BigUint) -> Option<[u64; N]> {
    let bytes = x.to_bytes_le();
    if bytes.len() > 8 * N {
        return None;
    }
    let mut out = [0u64; N];
    for (i, b) in bytes.iter().enumerate() {
        out[i / 8] |= u64::from(*b) << (8 * (i % 8));
    }
    Some(out)
}

/// `count` distinct random primes of `bits` bits (top two bits set), found by up to
/// [`MAX_THREADS`] threads racing; `None` when `bits` is not one of the sizes the fast search
/// covers (multiples of 64 from 512 to 2048).
pub(crate) fn random_primes(bits: usize, count: usize) -> Option<Vec<BigUint>> {
    let primes = match bits {
        512 => race::<8>(count).iter().map(to_biguint).collect(),
        1024 => primes_1024(count).iter().map(to_biguint).collect(),
        1536 => race::<24>(count).iter().map(to_biguint).collect(),
        2048 => race::<32>(count).iter().map(to_biguint).collect(),
        _ => return None,
    };
    Some(primes)
}

/// Primes of 1024 bits (those of the 2048-bit keys `genCA`, `genSelfSignedCert` and
/// `genSignedCert` make) found by a background thread ahead of their use.
#[derive(Debug)]
struct Pool {
    primes: Vec<[u64; 16]>,
    /// Primes the background thread is still to find.
    wanted: usize,
    /// Whether the background thread runs.
    running: bool,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    primes: Vec::new(),
    wanted: 0,
    running: false,
});

/// Raised while [`POOL`] holds primes: it ends the search of a thread waiting for them.
static POOL_FILLED: AtomicBool = AtomicBool::new(false);

/// Raised when the background thread has nothing left to find: it ends its search.
static POOL_DONE: AtomicBool = AtomicBool::new(false);

fn pool() -> std::sync::MutexGuard<'static, Pool> {
    // The pool's state is consistent after every statement, so a panic elsewhere while it
    // was held leaves nothing half done.
    POOL.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How to count the 2048-bit keys the templates are expected to make (see
/// [`expect_keys_2048`]).
type KeyCount = Box<dyn FnOnce() -> usize + Send>;

static EXPECTED_KEYS: Mutex<Option<KeyCount>> = Mutex::new(None);

/// Gives the way to count the 2048-bit keys the templates are expected to make: at the first
/// key, `count` runs and a background thread starts finding the primes of the others (and
/// races this thread for the first one's). Counting only then costs nothing to the many
/// renders that make no key.
pub(crate) fn expect_keys_2048(count: KeyCount) {
    *EXPECTED_KEYS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(count);
}

/// Starts (or extends the work of) a background thread that finds `count` more primes of
/// 1024 bits for [`random_primes`], so that a chart's keys are partly made before its
/// templates ask for them. The thread ends once they are found or taken.
pub(crate) fn prefetch_primes_1024(count: usize) {
    let mut state = pool();
    state.wanted += count;
    if state.running || state.wanted == 0 {
        return;
    }
    state.running = true;
    POOL_DONE.store(false, Ordering::Relaxed);
    drop(state);
    // The table both threads sieve with is made here, first: a thread that waited for the
    // other to make it would be woken on that thread's CPU (the scheduler's affinity for the
    // waker) and share it for several milliseconds while the other CPU idles.
    small_primes();
    let spawner_cpu = crate::cpu::current_cpu();
    let spawned = std::thread::Builder::new()
        .name("rsa-primes".to_string())
        .spawn(|| {
            loop {
                if pool().wanted == 0 {
                    break;
                }
                let Some(p) = search::<16>(&POOL_DONE) else {
                    break;
                };
                let mut state = pool();
                state.wanted = state.wanted.saturating_sub(1);
                if !state.primes.contains(&p) {
                    state.primes.push(p);
                    POOL_FILLED.store(true, Ordering::Relaxed);
                }
            }
            pool().running = false;
        });
    match spawned {
        Ok(thread) => {
            if let Some(cpu) = spawner_cpu {
                crate::cpu::keep_off_cpu(&thread, cpu);
            }
        }
        Err(_) => pool().running = false,
    }
}

/// `count` distinct primes of 1024 bits: first those the background thread has found; while
/// it runs, this thread searches too (racing it, as [`race`]'s threads race); once it has
/// ended, [`race`] finds the rest.
fn primes_1024(count: usize) -> Vec<[u64; 16]> {
    let counter = EXPECTED_KEYS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    let expected = counter.map_or(0, |counter| counter());
    if expected > 0 {
        prefetch_primes_1024(2 * expected);
    }
    let mut got: Vec<[u64; 16]> = Vec::with_capacity(count);
    loop {
        {
            let mut state = pool();
            while got.len() < count
                && let Some(p) = state.primes.pop()
            {
                if !got.contains(&p) {
                    got.push(p);
                }
            }
            POOL_FILLED.store(!state.primes.is_empty(), Ordering::Relaxed);
            if got.len() == count || !state.running {
                break;
            }
        }
        if let Some(p) = search::<16>(&POOL_FILLED) {
            // Found here: one fewer for the background thread to find.
            let mut state = pool();
            state.wanted = state.wanted.saturating_sub(1);
            if state.wanted == 0 {
                POOL_DONE.store(true, Ordering::Relaxed);
            }
            if !got.contains(&p) {
                got.push(p);
            }
        }
    }
    while got.len() < count {
        for p in race::<16>(count - got.len()) {
            if !got.contains(&p) {
                got.push(p);
            }
        }
    }
    got
}

fn race<const N: usize>(count: usize) -> Vec<[u64; N]> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, MAX_THREADS);
    let found: Mutex<Vec<[u64; N]>> = Mutex::new(Vec::with_capacity(count));
    let stop = AtomicBool::new(count == 0);
    let work = || {
        while let Some(p) = search::<N>(&stop) {
            let mut found = found
                .lock()
                .expect("no thread panics while holding the lock");
            if found.len() < count && !found.contains(&p) {
                found.push(p);
            }
            if found.len() == count {
                stop.store(true, Ordering::Relaxed);
            }
        }
    };
    small_primes();
    let spawner_cpu = crate::cpu::current_cpu();
    std::thread::scope(|scope| {
        for _ in 1..threads {
            scope.spawn(|| {
                if let Some(cpu) = spawner_cpu {
                    crate::cpu::avoid_cpu(cpu);
                }
                work();
            });
        }
        work();
    });
    found
        .into_inner()
        .expect("no thread panics while holding the lock")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from_biguint<const N: usize>(x: &BigUint) -> [u64; N] {
        super::from_biguint(x).unwrap_or_else(|| panic!("{x} does not fit {N} limbs"))
    }

    fn random_odd<const N: usize>(bits: usize) -> [u64; N] {
        loop {
            let mut m = random_below_bits::<N>(bits);
            m[0] |= 1;
            if bit_len(&m) > 1 {
                return m;
            }
        }
    }

    /// Montgomery multiplication, squaring, conversion and exponentiation agree with
    /// num-bigint on random operands (moduli of every size up to 64N bits, top bit set or not).
    fn montgomery_agrees_with_biguint<const N: usize>(cases: usize) {
        for case in 0..cases {
            let bits = if case % 3 == 0 {
                64 * N
            } else {
                2 + (OsRng.next_u64() as usize) % (64 * N - 1)
            };
            let m = random_odd::<N>(bits);
            let md = Modulus::new(m).expect("odd modulus above 1");
            let big_m = to_biguint(&m);
            let r = BigUint::from(1u8) << (64 * N);
            assert_eq!(to_biguint(&md.one), &r % &big_m, "R mod m for m = {big_m}");
            assert_eq!(to_biguint(md.r2()), (&r * &r) % &big_m, "R^2 mod m");
            let a: [u64; N] = from_biguint(&(to_biguint(&random_below_bits::<N>(64 * N)) % &big_m));
            let b: [u64; N] = from_biguint(&(to_biguint(&random_below_bits::<N>(64 * N)) % &big_m));
            let e = random_below_bits::<N>(1 + (OsRng.next_u64() as usize) % (64 * N));
            let (ba, bb) = (to_biguint(&a), to_biguint(&b));
            let am = md.enter(&a);
            let bm = md.enter(&b);
            assert_eq!(md.leave(&am), a, "round trip");
            assert_eq!(
                to_biguint(&md.leave(&md.mul(&am, &bm))),
                (&ba * &bb) % &big_m,
                "{ba} * {bb} mod {big_m}"
            );
            assert_eq!(to_biguint(&md.leave(&md.sqr(&am))), (&ba * &ba) % &big_m);
            assert_eq!(
                to_biguint(&md.leave(&md.pow2(&e))),
                BigUint::from(2u8).modpow(&to_biguint(&e), &big_m),
                "2^{} mod {big_m}",
                to_biguint(&e)
            );
            assert_eq!(
                to_biguint(&md.leave(&md.pow(&am, &e))),
                ba.modpow(&to_biguint(&e), &big_m),
                "{ba}^{} mod {big_m}",
                to_biguint(&e)
            );
        }
    }

    #[test]
    fn montgomery_arithmetic_matches_num_bigint() {
        montgomery_agrees_with_biguint::<1>(2000);
        montgomery_agrees_with_biguint::<2>(1000);
        montgomery_agrees_with_biguint::<3>(500);
        montgomery_agrees_with_biguint::<16>(100);
        montgomery_agrees_with_biguint::<32>(20);
    }

    #[test]
    fn montgomery_edge_operands() {
        // m = 2^128 - 159 (prime) and m = 2^64 + 1 style values, with 0, 1 and m - 1.
        for m in [
            [u64::MAX - 158, u64::MAX],
            [1, 1],
            [u64::MAX, u64::MAX],
            [3, 0],
        ] {
            let md = Modulus::<2>::new(m).expect("odd");
            let big_m = to_biguint(&m);
            let mut top = m;
            top[0] -= 1;
            for x in [[0, 0], [1, 0], top] {
                for y in [[0, 0], [1, 0], top] {
                    let got = md.leave(&md.mul(&md.enter(&x), &md.enter(&y)));
                    assert_eq!(to_biguint(&got), (to_biguint(&x) * to_biguint(&y)) % &big_m);
                }
            }
        }
        assert!(Modulus::<1>::new([1]).is_none());
        assert!(Modulus::<1>::new([10]).is_none());
    }

    /// The dedicated squaring equals the multiplication of a number by itself, on random
    /// operands and on those that fill the accumulator most (moduli just below `R`, operands
    /// just below the modulus, all-ones limbs) and 0, 1.
    fn squaring_agrees_with_multiplication<const N: usize>(cases: usize) {
        for case in 0..cases {
            let m = if case % 4 == 0 {
                // R - 2k - 1: every limb all ones but the lowest.
                let mut m = [u64::MAX; N];
                m[0] = u64::MAX - 2 * (OsRng.next_u64() % 1000);
                m
            } else {
                random_odd::<N>(if case % 4 == 1 {
                    64 * N
                } else {
                    2 + (OsRng.next_u64() as usize) % (64 * N - 1)
                })
            };
            let md = Modulus::new(m).expect("odd modulus above 1");
            let mut top = m;
            top[0] -= 1;
            let mut top2 = top;
            top2[0] = top2[0].saturating_sub(1);
            let mut zero_one = [[0u64; N], [0u64; N]];
            zero_one[1][0] = 1;
            let random: [u64; N] =
                from_biguint(&(to_biguint(&random_below_bits::<N>(64 * N)) % to_biguint(&m)));
            for a in [
                zero_one[0],
                zero_one[1],
                top,
                top2,
                random,
                md.one,
                *md.r2(),
            ] {
                assert_eq!(
                    md.sqr(&a),
                    md.mul(&a, &a),
                    "{}^2 with m = {}",
                    to_biguint(&a),
                    to_biguint(&m)
                );
            }
        }
    }

    #[test]
    fn squaring_matches_multiplication() {
        squaring_agrees_with_multiplication::<1>(4000);
        squaring_agrees_with_multiplication::<2>(2000);
        squaring_agrees_with_multiplication::<3>(1000);
        squaring_agrees_with_multiplication::<4>(1000);
        squaring_agrees_with_multiplication::<5>(500);
        squaring_agrees_with_multiplication::<8>(300);
        squaring_agrees_with_multiplication::<16>(200);
        squaring_agrees_with_multiplication::<32>(100);
    }

    fn mr_limbs<const N: usize>(n: &BigUint, rounds: usize) -> bool {
        is_probable_prime(&Modulus::<N>::new(from_biguint(n)).expect("odd"), rounds)
    }

    fn base_2_round(n: u128) -> bool {
        let m = [n as u64, (n >> 64) as u64];
        let md = Modulus::<2>::new(m).expect("odd");
        let mut d = m;
        d[0] &= !1;
        let s = (0..128).find(|&i| bit(&d, i) == 1).expect("n > 1");
        for _ in 0..s {
            shr1(&mut d);
        }
        let fast = md.miller_rabin_base_2(&d, s);
        assert_eq!(fast, md.miller_rabin(&[2, 0], &d, s), "{n}");
        fast
    }

    #[test]
    fn strong_pseudoprimes_to_base_2_pass_its_round_but_not_random_bases() {
        // Strong pseudoprimes to base 2 (OEIS A001262), and to every prime base up to 23
        // (3825123056546413051) and up to 37 (318665857834031151167461).
        for n in [
            2047u128,
            3277,
            4033,
            4681,
            8321,
            15841,
            29341,
            42799,
            49141,
            52633,
            65281,
            74665,
            80581,
            85489,
            88357,
            90751,
            3_215_031_751,
            3_825_123_056_546_413_051,
            318_665_857_834_031_151_167_461,
        ] {
            assert!(base_2_round(n), "{n} is a strong pseudoprime to base 2");
            assert!(
                !mr_limbs::<2>(&BigUint::from(n), 27),
                "{n} is composite but passed 27 random rounds"
            );
        }
    }

    #[test]
    fn carmichael_numbers_are_composite() {
        for n in [
            561u64,
            1105,
            1729,
            2465,
            2821,
            6601,
            8911,
            41041,
            825_265,
            321_197_185,
        ] {
            assert!(!mr_limbs::<1>(&BigUint::from(n), 34), "{n}");
        }
        // A larger Carmichael number (6k+1)(12k+1)(18k+1) of ~130 bits, its three factors
        // prime: Fermat's test to base 2 passes, Miller-Rabin does not.
        let one = BigUint::from(1u8);
        let mut k = 1u64 << 40;
        let n = loop {
            let f = [6 * k + 1, 12 * k + 1, 18 * k + 1].map(BigUint::from);
            if f.iter()
                .all(|p| num_bigint_dig::prime::probably_prime(p, 20))
            {
                break &f[0] * &f[1] * &f[2];
            }
            k += 1;
        };
        let two = BigUint::from(2u8);
        assert_eq!(
            two.modpow(&(&n - &one), &n),
            one,
            "2 is a Fermat liar for {n}"
        );
        assert!(!mr_limbs::<3>(&n, 5), "{n}");
    }

    #[test]
    fn known_primes_pass_and_their_neighbours_do_not() {
        let one = BigUint::from(1u8);
        // Mersenne primes 2^e - 1.
        for e in [61usize, 89, 107, 127, 521, 607, 1279, 2203] {
            let p = (&one << e) - &one;
            assert!(mr_limbs::<36>(&p, 5), "2^{e} - 1");
            // 2^e + 1 is divisible by 3 for odd e.
            assert!(!mr_limbs::<36>(&(&p + 2u8), 5), "2^{e} + 1");
        }
        for p in [3u64, 5, 7, 65_537, u64::MAX - 58] {
            assert!(mr_limbs::<1>(&BigUint::from(p), 34), "{p}");
        }
        // Products of two primes.
        let n = BigUint::from(u64::MAX - 58) * BigUint::from(u64::MAX - 82);
        assert!(!mr_limbs::<2>(&n, 34));
        let n = ((&one << 521) - &one) * ((&one << 607) - &one);
        assert!(!mr_limbs::<18>(&n, 5));
    }

    #[test]
    fn searched_numbers_are_primes_of_the_asked_size() {
        let stop = AtomicBool::new(false);
        for _ in 0..20 {
            let p = search::<8>(&stop).expect("not stopped");
            let big = to_biguint(&p);
            assert_eq!(big.bits(), 512);
            assert_eq!(p[7] >> 62, 0b11, "top two bits set");
            assert!(num_bigint_dig::prime::probably_prime(&big, 30), "{big}");
        }
        // Both ways of testing candidates, where the CPU has the lane arithmetic.
        for use_lanes in [false, lanes_available::<16>()] {
            let p = to_biguint(&search_with::<16>(&stop, use_lanes).expect("not stopped"));
            assert_eq!(p.bits(), 1024);
            assert!(num_bigint_dig::prime::probably_prime(&p, 20), "{p}");
        }
        stop.store(true, Ordering::Relaxed);
        assert!(
            search::<8>(&stop).is_none(),
            "a raised stop flag ends the search"
        );
    }

    /// Division through the reciprocal against u128 `%`, on random and extreme operands.
    #[test]
    fn reciprocal_division_matches_u128_remainder() {
        fn rem_u128<const N: usize>(x: &[u64; N], d: u64) -> u64 {
            let mut r = 0u128;
            for &limb in x.iter().rev() {
                r = ((r << 64) | u128::from(limb)) % u128::from(d);
            }
            r as u64
        }
        let mut divisors = vec![1, 2, 3, 7, u64::MAX, u64::MAX - 1, 1 << 63, (1 << 63) + 1];
        divisors.extend(
            (0..200)
                .map(|i| OsRng.next_u64() >> (i % 64))
                .filter(|&d| d != 0),
        );
        for d in divisors {
            let div = Divisor::new(d);
            for x in [[0u64; 4], [u64::MAX; 4], [d, 0, 0, 0], [0, 0, 0, d]] {
                assert_eq!(div.rem(&x), rem_u128(&x, d), "{x:?} mod {d}");
                let others = [Divisor::new(3), div, Divisor::new(u64::MAX)];
                let many = Divisor::rem_many(&others, &x);
                assert_eq!(many, [3, d, u64::MAX].map(|d| rem_u128(&x, d)), "{x:?}");
            }
            for _ in 0..20 {
                let x = random_below_bits::<16>(1 + OsRng.next_u64() as usize % 1024);
                assert_eq!(div.rem(&x), rem_u128(&x, d), "{x:?} mod {d}");
            }
        }
    }

    /// The window's struck candidates are exactly those a small prime divides.
    #[test]
    fn sieve_strikes_exactly_the_multiples_of_small_primes() {
        let table = small_primes();
        for round in 0..3 {
            let mut start = random_below_bits::<4>(256);
            start[0] |= 1;
            if round == 1 {
                // A multiple of 3 · 5 · 7 at the start, r = 0 for those (small numbers, so
                // the primes themselves are struck too, as multiples).
                start = [105, 0, 0, 0];
            }
            let residues: Vec<u32> = table
                .primes
                .iter()
                .map(|&p| Divisor::new(u64::from(p)).rem(&start) as u32)
                .collect();
            let mut struck = [0u64; WINDOW / 64];
            strike(&table.primes, &residues, &mut struck);
            let big_start = to_biguint(&start);
            for k in 0..WINDOW {
                let n = &big_start + BigUint::from(2 * k);
                let divided = table
                    .primes
                    .iter()
                    .any(|&p| &n % BigUint::from(p) == BigUint::from(0u8));
                assert_eq!(struck[k / 64] >> (k % 64) & 1 == 1, divided, "{n}");
            }
        }
    }

    #[test]
    fn small_prime_table_is_the_odd_primes_below_the_limit() {
        let table = small_primes();
        assert_eq!(table.primes.len(), 12_250, "π(2^17) - 1");
        assert_eq!(table.primes[..5], [3, 5, 7, 11, 13]);
        assert_eq!(*table.primes.last().expect("non-empty"), 131_071);
        let mut covered = 0;
        for &(product, first, end) in &table.groups {
            assert_eq!(first, covered);
            let expected = table.primes[first..end]
                .iter()
                .try_fold(1u64, |acc, &p| acc.checked_mul(u64::from(p)));
            assert_eq!(Some(product.normalized >> product.shift), expected);
            covered = end;
        }
        assert_eq!(covered, table.primes.len());
    }

    /// Primes found ahead by the background thread are taken first, all distinct and prime,
    /// and the thread ends once nothing is left to find. (Other tests may take primes from
    /// the same pool meanwhile: every one is a prime all the same.)
    #[test]
    fn primes_found_ahead_are_taken_and_the_thread_ends() {
        prefetch_primes_1024(3);
        let wait_until = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while pool().primes.is_empty() && pool().running {
            assert!(
                std::time::Instant::now() < wait_until,
                "no prime found ahead"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let thread_ends = || {
            while pool().running {
                let now = std::time::Instant::now();
                assert!(now < wait_until, "the thread did not end");
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            assert_eq!(pool().wanted, 0);
        };
        let primes = primes_1024(4);
        assert_eq!(primes.len(), 4);
        for (i, p) in primes.iter().enumerate() {
            assert!(!primes[..i].contains(p), "distinct");
            assert_eq!(p[15] >> 62, 0b11, "top two bits set");
            assert!(num_bigint_dig::prime::probably_prime(&to_biguint(p), 20));
        }
        thread_ends();
        // Keys expected: counted at the first one, whose primes the thread races for.
        let counted = std::sync::Arc::new(AtomicBool::new(false));
        let flag = counted.clone();
        expect_keys_2048(Box::new(move || {
            flag.store(true, Ordering::Relaxed);
            2
        }));
        let primes = primes_1024(2);
        assert_eq!(primes.len(), 2);
        assert_ne!(primes[0], primes[1]);
        let later = primes_1024(2);
        assert!(later.iter().all(|p| !primes.contains(p)));
        // (Another test's key may have been the first: the count runs all the same.)
        assert!(counted.load(Ordering::Relaxed), "counted at the first key");
        thread_ends();
    }

    #[test]
    fn racing_threads_return_distinct_primes() {
        let primes = random_primes(512, 3).expect("512 bits are covered");
        assert_eq!(primes.len(), 3);
        assert!(primes[0] != primes[1] && primes[1] != primes[2] && primes[0] != primes[2]);
        assert!(random_primes(1000, 2).is_none());
    }
}
