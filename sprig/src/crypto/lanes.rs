//! Modular exponentiation in several 64-bit lanes at once, on AVX-512 IFMA (`vpmadd52luq`,
//! `vpmadd52huq`: eight 52×52-bit products a instruction, low or high half, added to a 64-bit
//! accumulator). Each lane has its own odd modulus, base and exponent, so one pass tests
//! eight prime candidates (the search's base-2 Fermat filter) or gives one candidate eight
//! Miller-Rabin bases (its confirmation).
//!
//! Numbers are held in `L` limbs of 52 bits, `52L >= 64N + 8` for moduli of `64N` bits, and
//! multiplied in Montgomery form with `R = 2^(52L)`. Since `R` exceeds every modulus by a
//! factor of at least 2^8, a Montgomery product of operands below `4m` is below
//! `m (1 + 16 m / R) < 2m`, so no step subtracts `m`: values stay below `2m` (below `4m`
//! right after a doubling) and are only reduced when compared at the end. Products are
//! summed column by column (each column's 52-bit halves in four independent accumulators, the
//! quotient limb of the reduction chosen as soon as its column is complete), the square
//! computing each cross product once.
//!
//! The code runs only where the CPU has AVX-512F and AVX-512 IFMA ([`available`]); the
//! callers keep the scalar arithmetic of [`super::prime`] for other machines.

use std::arch::x86_64::{
    __m512i, _mm512_add_epi64, _mm512_and_si512, _mm512_cmpeq_epi64_mask, _mm512_madd52hi_epu64,
    _mm512_madd52lo_epu64, _mm512_mask_blend_epi64, _mm512_set_epi64, _mm512_set1_epi64,
    _mm512_setzero_si512, _mm512_slli_epi64, _mm512_srli_epi64,
};

use super::prime::{double_mod, ge, neg_inverse, sub_in_place};

/// Numbers handled by one pass.
pub(crate) const LANES: usize = 8;

const MASK52: u64 = (1 << 52) - 1;

type V = __m512i;

/// Whether this CPU runs the lane arithmetic (std caches the answer).
pub(crate) fn available() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512ifma")
}

/// The 52-bit limbs used for moduli of `64N` bits; `None` for sizes without a lane version.
pub(crate) const fn limbs_for(n: usize) -> Option<usize> {
    match n {
        16 => Some(20),
        _ => None,
    }
}

/// For each lane's odd modulus `m` of exactly `64N` bits: whether `2^(m-1) ≡ 1 (mod m)`, as
/// a bit mask (bit `i` for lane `i`); `None` when the CPU lacks IFMA or `L` does not match
/// `N` ([`limbs_for`]).
pub(crate) fn fermat_base_2<const N: usize, const L: usize>(
    moduli: &[[u64; N]; LANES],
) -> Option<u8> {
    if limbs_for(N) != Some(L) || !available() || moduli.iter().any(|m| !is_top_odd(m)) {
        return None;
    }
    #[allow(unsafe_code)]
    // SAFETY: `fermat_base_2_lanes` is compiled for AVX-512F and AVX-512 IFMA, and
    // `available()` has just checked that this CPU has both; it has no other requirement.
    let mask = unsafe { fermat_base_2_lanes::<N, L>(moduli) };
    Some(mask)
}

/// Miller-Rabin rounds on one odd modulus `m` of exactly `64N` bits (`m > 3`): base 2 and
/// `LANES - 1` uniformly random bases, all at once. `Some(false)` proves `m` composite;
/// `None` when the CPU lacks IFMA or `L` does not match `N`.
pub(crate) fn miller_rabin<const N: usize, const L: usize>(m: &[u64; N]) -> Option<bool> {
    if limbs_for(N) != Some(L) || !available() || !is_top_odd(m) {
        return None;
    }
    #[allow(unsafe_code)]
    // SAFETY: as in `fermat_base_2`: the CPU features the function is compiled for are
    // checked just above.
    let prime = unsafe { miller_rabin_lanes::<N, L>(m) };
    Some(prime)
}

/// `x^e mod m` in each lane (`m` odd, of exactly `64N` bits; `x < m`); `None` when the
/// CPU lacks IFMA or `L` does not match `N`. The tests' check of the lane arithmetic against
/// num-bigint, multiplications by different bases included. (Used for the two halves of an
/// RSA signature, it saved only ~0.05 of ~0.8 ms: one exponentiation has too few lanes.)
#[cfg(test)]
pub(crate) fn pow_mod<const N: usize, const L: usize>(
    m: &[[u64; N]; LANES],
    x: &[[u64; N]; LANES],
    e: &[[u64; N]; LANES],
) -> Option<[[u64; N]; LANES]> {
    if limbs_for(N) != Some(L)
        || !available()
        || m.iter().any(|m| !is_top_odd(m))
        || x.iter().zip(m).any(|(x, m)| ge(x, m))
    {
        return None;
    }
    #[allow(unsafe_code)]
    // SAFETY: as in `fermat_base_2`: the CPU features the function is compiled for are
    // checked just above.
    let r = unsafe { pow_mod_lanes::<N, L>(m, x, e) };
    Some(r)
}

fn is_top_odd<const N: usize>(m: &[u64; N]) -> bool {
    N > 0 && m[0] & 1 == 1 && m[N - 1] >> 63 == 1
}

/// `2^k R mod m` for `R = 2^(52L)`, `m` of exactly `64N` bits.
fn pow2_r_mod<const N: usize, const L: usize>(m: &[u64; N], k: usize) -> [u64; N] {
    // 2^(64N) mod m = 2^(64N) - m, since 2^(64N - 1) <= m < 2^(64N).
    let mut x = [0u64; N];
    sub_in_place(&mut x, m);
    for _ in 0..(52 * L - 64 * N + k) {
        double_mod(&mut x, m);
    }
    x
}

/// `-m^-1 mod 2^52` for an odd `m0` (the modulus' lowest limb).
fn neg_inverse_52(m0: u64) -> u64 {
    neg_inverse(m0) & MASK52
}

/// `x` (64-bit limbs) in 52-bit limbs.
fn to_52<const N: usize, const L: usize>(x: &[u64; N]) -> [u64; L] {
    let mut out = [0u64; L];
    for (i, limb) in out.iter_mut().enumerate() {
        let bit = 52 * i;
        let (w, s) = (bit / 64, bit % 64);
        if w >= N {
            break;
        }
        let mut v = x[w] >> s;
        if s > 12 && w + 1 < N {
            v |= x[w + 1] << (64 - s);
        }
        *limb = v & MASK52;
    }
    out
}

#[cfg(test)]
/// `x` (52-bit limbs, the value below `2^(64N)`) in 64-bit limbs.
fn from_52<const N: usize, const L: usize>(x: &[u64; L]) -> [u64; N] {
    let mut out = [0u64; N];
    for (i, &limb) in x.iter().enumerate() {
        let bit = 52 * i;
        let (w, s) = (bit / 64, bit % 64);
        if w < N {
            out[w] |= limb << s;
        }
        if s > 12 && w + 1 < N {
            out[w + 1] |= limb >> (64 - s);
        }
    }
    out
}

/// Per-lane values (52-bit limbs) as vectors of one limb each.
#[target_feature(enable = "avx512f")]
fn transpose<const L: usize>(lanes: &[[u64; L]; LANES]) -> [V; L] {
    let mut out = [_mm512_setzero_si512(); L];
    for (i, v) in out.iter_mut().enumerate() {
        let l = |k: usize| lanes[k][i] as i64;
        *v = _mm512_set_epi64(l(7), l(6), l(5), l(4), l(3), l(2), l(1), l(0));
    }
    out
}

#[cfg(test)]
/// The lanes of one vector.
#[target_feature(enable = "avx512f")]
fn lanes_of(v: V) -> [u64; LANES] {
    use std::arch::x86_64::{
        _mm256_extract_epi64, _mm512_castsi512_si256, _mm512_extracti64x4_epi64,
    };
    let lo = _mm512_castsi512_si256(v);
    let hi = _mm512_extracti64x4_epi64::<1>(v);
    [
        _mm256_extract_epi64::<0>(lo) as u64,
        _mm256_extract_epi64::<1>(lo) as u64,
        _mm256_extract_epi64::<2>(lo) as u64,
        _mm256_extract_epi64::<3>(lo) as u64,
        _mm256_extract_epi64::<0>(hi) as u64,
        _mm256_extract_epi64::<1>(hi) as u64,
        _mm256_extract_epi64::<2>(hi) as u64,
        _mm256_extract_epi64::<3>(hi) as u64,
    ]
}

#[cfg(test)]
/// Vectors of one limb each back to per-lane values (52-bit limbs).
#[target_feature(enable = "avx512f")]
fn untranspose<const L: usize>(v: &[V; L]) -> [[u64; L]; LANES] {
    let mut out = [[0u64; L]; LANES];
    for (i, &limb) in v.iter().enumerate() {
        for (lane, x) in lanes_of(limb).into_iter().enumerate() {
            out[lane][i] = x;
        }
    }
    out
}

/// Eight moduli in 52-bit limbs with their Montgomery constant.
struct Moduli<const L: usize> {
    m: [V; L],
    /// `-m^-1 mod 2^52`, per lane.
    m_inv: V,
}

impl<const L: usize> Moduli<L> {
    #[target_feature(enable = "avx512f")]
    fn new<const N: usize>(moduli: &[[u64; N]; LANES]) -> Self {
        Moduli {
            m: transpose(&moduli.map(|m| to_52::<N, L>(&m))),
            m_inv: transpose(&moduli.map(|m| [neg_inverse_52(m[0])]))[0],
        }
    }

    /// Montgomery product `a b R^-1 mod m` (or `a^2 R^-1` when `SQUARE`, `b` unused), for
    /// `a, b < 4m` with normalized limbs; the result is below `2m`, limbs normalized.
    ///
    /// Product scanning: column `k` sums the low halves of the products `a[i] b[j]` and
    /// `q[i] m[j]` with `i + j = k` and the high halves of those with `i + j = k - 1`, then
    /// yields the quotient limb `q[k]` (chosen to clear the column's low 52 bits, `k < L`) or
    /// the result limb `r[k - L]`. Each product's two halves are taken together, the high
    /// one into the next column's sums, so that its operands are loaded once for both; the
    /// sums are split in two to shorten their chains. Each column is its own function of
    /// constant bounds, so that its loops unroll and neighbouring columns overlap.
    #[inline]
    #[target_feature(enable = "avx512f,avx512ifma")]
    fn product<const SQUARE: bool>(&self, a: &[V; L], b: &[V; L], r: &mut [V; L]) {
        let zero = _mm512_setzero_si512();
        let mut sums = Sums {
            late: zero,
            cur: [zero; 2],
            next: [zero; 2],
            cross: [zero; 2],
            cross_next: [zero; 2],
        };
        let mut q = [zero; L];
        macro_rules! columns {
            ($($k:literal)*) => {$(
                if $k < 2 * L {
                    self.column::<$k, SQUARE>(a, b, &mut q, r, &mut sums);
                }
            )*};
        }
        columns!(
            0 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 26 27 28 29 30 31
            32 33 34 35 36 37 38 39
        );
    }

    /// Column `K` of [`Moduli::product`].
    #[inline]
    #[target_feature(enable = "avx512f,avx512ifma")]
    fn column<const K: usize, const SQUARE: bool>(
        &self,
        a: &[V; L],
        b: &[V; L],
        q: &mut [V; L],
        r: &mut [V; L],
        sums: &mut Sums,
    ) {
        let zero = _mm512_setzero_si512();
        let m = &self.m;
        let first = (K + 1).saturating_sub(L);
        let last = K.min(L - 1);
        // Each product's two halves: the low one into `lo`, the high one into `hi`; pairs
        // alternate between the two parts of the sums (constant indices, so that the sums
        // stay in registers whether or not a loop unrolls).
        macro_rules! both {
            ($lo:expr, $hi:expr, $x:expr, $y:expr) => {{
                let (x, y) = ($x, $y);
                $lo = _mm512_madd52lo_epu64($lo, x, y);
                $hi = _mm512_madd52hi_epu64($hi, x, y);
            }};
        }
        if SQUARE {
            // Cross products a[i] a[j], i < j, once (doubled when the column is summed),
            // then the square on the diagonal.
            if K >= 1 {
                let cross_last = last.min((K - 1) / 2);
                let mut i = first;
                while i < cross_last {
                    both!(sums.cross[0], sums.cross_next[0], a[i], a[K - i]);
                    both!(sums.cross[1], sums.cross_next[1], a[i + 1], a[K - i - 1]);
                    i += 2;
                }
                if i == cross_last && first <= cross_last {
                    both!(sums.cross[0], sums.cross_next[0], a[i], a[K - i]);
                }
            }
            if K.is_multiple_of(2) && K / 2 < L {
                let x = a[K / 2];
                both!(sums.cur[0], sums.next[0], x, x);
            }
        } else {
            let mut i = first;
            while i < last {
                both!(sums.cur[0], sums.next[0], a[i], b[K - i]);
                both!(sums.cur[1], sums.next[1], a[i + 1], b[K - i - 1]);
                i += 2;
            }
            if i == last {
                both!(sums.cur[0], sums.next[0], a[i], b[K - i]);
            }
        }
        // The reduction's products q[i] m[j]; q[K] is not known yet in column K.
        let q_end = K.min(L);
        let mut i = first;
        while i + 1 < q_end {
            both!(sums.cur[1], sums.next[1], q[i], m[K - i]);
            both!(sums.cur[0], sums.next[0], q[i + 1], m[K - i - 1]);
            i += 2;
        }
        if i + 1 == q_end {
            both!(sums.cur[1], sums.next[1], q[i], m[K - i]);
        }
        let mut acc = _mm512_add_epi64(sums.cur[0], sums.cur[1]);
        if SQUARE {
            let cross = _mm512_add_epi64(sums.cross[0], sums.cross[1]);
            acc = _mm512_add_epi64(acc, _mm512_slli_epi64::<1>(cross));
        }
        acc = _mm512_add_epi64(acc, sums.late);
        if K < L {
            let qk = _mm512_madd52lo_epu64(zero, acc, self.m_inv);
            acc = _mm512_madd52lo_epu64(acc, qk, m[0]);
            sums.late = _mm512_madd52hi_epu64(_mm512_srli_epi64::<52>(acc), qk, m[0]);
            q[K] = qk;
        } else {
            r[K - L] = _mm512_and_si512(acc, _mm512_set1_epi64(MASK52 as i64));
            sums.late = _mm512_srli_epi64::<52>(acc);
        }
        // What depends on this column's end (its carry, q[K]'s high half) joins the next one
        // last, in `late`, so that the next column's sums need not wait for it.
        sums.cur = sums.next;
        sums.next = [zero; 2];
        sums.cross = sums.cross_next;
        sums.cross_next = [zero; 2];
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512ifma")]
    fn mul(&self, a: &[V; L], b: &[V; L]) -> [V; L] {
        let mut r = [_mm512_setzero_si512(); L];
        self.product::<false>(a, b, &mut r);
        r
    }

    #[inline]
    #[target_feature(enable = "avx512f,avx512ifma")]
    fn sqr(&self, a: &[V; L]) -> [V; L] {
        let mut r = [_mm512_setzero_si512(); L];
        self.product::<true>(a, a, &mut r);
        r
    }

    /// The plain value `x R^-1 mod m` of a Montgomery-form `x < 2m`: at most `m` (`m` itself
    /// only for `x ≡ 0`).
    #[inline]
    #[target_feature(enable = "avx512f,avx512ifma")]
    fn leave(&self, x: &[V; L]) -> [V; L] {
        let mut unit = [_mm512_setzero_si512(); L];
        unit[0] = _mm512_set1_epi64(1);
        self.mul(x, &unit)
    }
}

/// The running sums of [`Moduli::product`]: the current column's and the next one's, each
/// in two parts, the cross products of a square apart (they are doubled).
struct Sums {
    late: V,
    cur: [V; 2],
    next: [V; 2],
    cross: [V; 2],
    cross_next: [V; 2],
}

/// `x = 2x` in the `set` lanes, limbs normalized, not reduced (below `4m` for `x < 2m`,
/// which fits).
#[inline]
#[target_feature(enable = "avx512f")]
fn double_lanes<const L: usize>(x: &mut [V; L], set: u8) {
    let mask = _mm512_set1_epi64(MASK52 as i64);
    let mut carry = _mm512_setzero_si512();
    for limb in x.iter_mut() {
        let t = _mm512_add_epi64(_mm512_slli_epi64::<1>(*limb), carry);
        *limb = _mm512_mask_blend_epi64(set, *limb, _mm512_and_si512(t, mask));
        carry = _mm512_srli_epi64::<52>(t);
    }
}

/// Lanes where `a` and `b` are equal, limb by limb.
#[inline]
#[target_feature(enable = "avx512f")]
fn equal<const L: usize>(a: &[V; L], b: &[V; L]) -> u8 {
    let mut mask = u8::MAX;
    for (&x, &y) in a.iter().zip(b) {
        mask &= _mm512_cmpeq_epi64_mask(x, y);
    }
    mask
}

/// Bit `i` of each lane's number, as a lane mask.
#[inline]
fn bits_at<const N: usize>(x: &[[u64; N]; LANES], i: usize) -> u8 {
    let mut mask = 0;
    for (lane, x) in x.iter().enumerate() {
        mask |= (((x[i / 64] >> (i % 64)) & 1) as u8) << lane;
    }
    mask
}

#[target_feature(enable = "avx512f,avx512ifma")]
fn fermat_base_2_lanes<const N: usize, const L: usize>(moduli: &[[u64; N]; LANES]) -> u8 {
    let md = Moduli::<L>::new(moduli);
    // Left to right through m - 1 (its top bit is bit 64N - 1, its bit 0 is clear): start
    // from 2 in Montgomery form, square, and double the lanes whose exponent bit is set.
    // Two buffers, each step squaring one into the other (no copies of the numbers).
    let mut x = transpose(&moduli.map(|m| to_52::<N, L>(&pow2_r_mod::<N, L>(&m, 1))));
    let mut y = x;
    let (mut from, mut to) = (&mut x, &mut y);
    for i in (1..64 * N - 1).rev() {
        md.product::<true>(from, from, to);
        let set = bits_at(moduli, i);
        if set != 0 {
            double_lanes(to, set);
        }
        std::mem::swap(&mut from, &mut to);
    }
    let acc = md.sqr(from);
    let mut unit = [[0u64; L]; LANES];
    for u in &mut unit {
        u[0] = 1;
    }
    equal(&md.leave(&acc), &transpose(&unit))
}

/// `set` lanes from `b`, the others from `a`.
#[cfg(test)]
#[inline]
#[target_feature(enable = "avx512f")]
fn blend<const L: usize>(set: u8, a: &[V; L], b: &[V; L]) -> [V; L] {
    let mut out = *a;
    for (o, &y) in out.iter_mut().zip(b) {
        *o = _mm512_mask_blend_epi64(set, *o, y);
    }
    out
}

/// A uniformly random number below `m`, outside `{0, a, b}`.
fn random_below_except<const N: usize>(m: &[u64; N], a: &[u64; N], b: &[u64; N]) -> [u64; N] {
    use rand_core::{OsRng, RngCore};
    let mut bytes = vec![0u8; 8 * N];
    loop {
        OsRng.fill_bytes(&mut bytes);
        let mut x = [0u64; N];
        for (limb, chunk) in x.iter_mut().zip(bytes.chunks_exact(8)) {
            *limb = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        }
        if !ge(&x, m) && x != [0; N] && x != *a && x != *b {
            return x;
        }
    }
}

#[target_feature(enable = "avx512f,avx512ifma")]
fn miller_rabin_lanes<const N: usize, const L: usize>(m: &[u64; N]) -> bool {
    let moduli = [*m; LANES];
    let md = Moduli::<L>::new(&moduli);
    // m - 1 = d 2^s, d odd: d's bits are those of m - 1 from bit s up.
    let mut m_minus_1 = *m;
    m_minus_1[0] &= !1;
    let bit = |i: usize| (m_minus_1[i / 64] >> (i % 64)) & 1 == 1;
    let s = (0..64 * N).find(|&i| bit(i)).unwrap_or(0);
    // Bases in Montgomery form: 2R mod m in lane 0; in the others a number drawn uniformly
    // below m, which is the Montgomery form of a uniformly drawn base, outside 0, R mod m
    // and m - R mod m (the bases 0, 1 and m - 1).
    let one = pow2_r_mod::<N, L>(m, 0);
    let mut minus_one = *m;
    sub_in_place(&mut minus_one, &one);
    let mut bases = [[0u64; N]; LANES];
    bases[0] = pow2_r_mod::<N, L>(m, 1);
    for b in &mut bases[1..] {
        *b = random_below_except(m, &one, &minus_one);
    }
    let base = transpose(&bases.map(|b| to_52::<N, L>(&b)));
    // acc = base^d: every lane has the same exponent, so sliding windows of up to 5 bits
    // (d's bit j is bit s + j of m - 1; its top one is bit 64N - 1).
    const W: usize = 5;
    let mut table = [base; 1 << (W - 1)];
    let base_sq = md.sqr(&base);
    for i in 1..table.len() {
        table[i] = md.mul(&table[i - 1], &base_sq);
    }
    let mut acc = base;
    let mut started = false;
    let mut i = 64 * N;
    while i > s {
        let top = i - 1;
        if !bit(top) {
            acc = md.sqr(&acc);
            i = top;
            continue;
        }
        // The longest window of at most W bits, ending in a set bit, within d.
        let mut low = top.saturating_sub(W - 1).max(s);
        while !bit(low) {
            low += 1;
        }
        let val = (low..=top)
            .rev()
            .fold(0, |v, k| (v << 1) | usize::from(bit(k)));
        if started {
            for _ in low..=top {
                acc = md.sqr(&acc);
            }
            acc = md.mul(&acc, &table[val >> 1]);
        } else {
            acc = table[val >> 1];
            started = true;
        }
        i = low;
    }
    // Passes when a^d = 1, or a^(d 2^k) = m - 1 for some k < s.
    let mut unit = [[0u64; L]; LANES];
    for u in &mut unit {
        u[0] = 1;
    }
    let unit = transpose(&unit);
    let plain_minus_one = transpose(&[to_52::<N, L>(&m_minus_1); LANES]);
    let plain = md.leave(&acc);
    let mut passed = equal(&plain, &unit) | equal(&plain, &plain_minus_one);
    for _ in 1..s {
        if passed == u8::MAX {
            break;
        }
        acc = md.sqr(&acc);
        passed |= equal(&md.leave(&acc), &plain_minus_one);
    }
    passed == u8::MAX
}

#[cfg(test)]
#[target_feature(enable = "avx512f,avx512ifma")]
fn pow_mod_lanes<const N: usize, const L: usize>(
    m: &[[u64; N]; LANES],
    x: &[[u64; N]; LANES],
    e: &[[u64; N]; LANES],
) -> [[u64; N]; LANES] {
    const W: usize = 4;
    let md = Moduli::<L>::new(m);
    // x R mod m, as x (R^2 mod m) R^-1. R^2 mod m is the Montgomery form of 2^(52L) = 2^(t 2^j):
    // that of 2^t, from t doublings, squared j times.
    let j = (52 * L).trailing_zeros();
    let t = (52 * L) >> j;
    let mut r2 = transpose(&m.map(|m| to_52::<N, L>(&pow2_r_mod::<N, L>(&m, t))));
    for _ in 0..j {
        r2 = md.sqr(&r2);
    }
    let base = md.mul(&transpose(&x.map(|x| to_52::<N, L>(&x))), &r2);
    let one = transpose(&m.map(|m| to_52::<N, L>(&pow2_r_mod::<N, L>(&m, 0))));
    // Fixed windows of W bits from the top: each lane multiplies in the power of its base
    // its own window selects (x^0 = 1 included, so that every lane does the same work).
    let mut table = [one; 1 << W];
    table[1] = base;
    for k in 2..table.len() {
        table[k] = md.mul(&table[k - 1], &base);
    }
    let mut acc = one;
    for w in (0..64 * N / W).rev() {
        if w + 1 < 64 * N / W {
            for _ in 0..W {
                acc = md.sqr(&acc);
            }
        }
        let (limb, shift) = (w * W / 64, w * W % 64);
        let digits = e.map(|e| ((e[limb] >> shift) & ((1 << W) - 1)) as usize);
        let mut factor = table[digits[0]];
        for (k, power) in table.iter().enumerate() {
            let mut lanes = 0u8;
            for (lane, &d) in digits.iter().enumerate() {
                lanes |= u8::from(d == k) << lane;
            }
            if lanes != 0 {
                factor = blend(lanes, &factor, power);
            }
        }
        acc = md.mul(&acc, &factor);
    }
    // The plain values are at most m, m itself standing for 0.
    let plain = untranspose(&md.leave(&acc)).map(|x| from_52::<N, L>(&x));
    let mut out = plain;
    for (o, m) in out.iter_mut().zip(m) {
        if o == m {
            *o = [0; N];
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use rand_core::{OsRng, RngCore};
    use rsa::BigUint;

    use super::*;
    use crate::crypto::prime::{from_biguint, to_biguint};

    /// p with p and 2p - 1 both prime and 2p - 1 ≡ ±1 (mod 8), so that n = p (2p - 1), of
    /// 1024 bits with the top two set, is a pseudoprime to base 2 (2 is a quadratic residue
    /// of 2p - 1, so its order divides p - 1, which divides n - 1 = (2p + 1)(p - 1)).
    const P: &str = "a54fdac62daa4ec2b27b2ea4e18dadf788db4c70cc9456cbf9ac8e8c59143a63\
                     d4db4d3de79d301603aedf2e5ffff194a8862c21aa39bb3468d2ccb5ec2ae1fd";

    fn skip() -> bool {
        if available() {
            return false;
        }
        eprintln!("this CPU has no AVX-512 IFMA: the lane arithmetic is not used here");
        true
    }

    fn big(hex: &str) -> BigUint {
        BigUint::parse_bytes(hex.as_bytes(), 16).expect("hex")
    }

    fn limbs(x: &BigUint) -> [u64; 16] {
        from_biguint(x).expect("fits 1024 bits")
    }

    fn random_1024() -> [u64; 16] {
        let mut x = [0u64; 16];
        for limb in &mut x {
            *limb = OsRng.next_u64();
        }
        x
    }

    /// A random odd number of 1024 bits, the top two set.
    fn random_modulus() -> [u64; 16] {
        let mut m = random_1024();
        m[0] |= 1;
        m[15] |= 0b11 << 62;
        m
    }

    fn pseudoprime() -> (BigUint, BigUint, BigUint) {
        let p = big(P);
        let q = &p * 2u8 - 1u8;
        let n = &p * &q;
        (p, q, n)
    }

    #[test]
    fn radix_conversions_round_trip() {
        for _ in 0..100 {
            let x = random_1024();
            let x52 = to_52::<16, 20>(&x);
            assert!(x52.iter().all(|&l| l <= MASK52));
            assert_eq!(from_52::<16, 20>(&x52), x);
        }
        let x = random_modulus();
        assert_eq!(
            to_biguint(&pow2_r_mod::<16, 20>(&x, 3)),
            (BigUint::from(1u8) << (1040 + 3)) % to_biguint(&x)
        );
    }

    /// Each lane's exponentiation against num-bigint, on random and edge operands: bases 0,
    /// 1, m - 1, exponents 0, 1, all ones, and moduli with every limb all ones.
    #[test]
    fn lane_exponentiation_matches_num_bigint() {
        if skip() {
            return;
        }
        for round in 0..8 {
            let mut m = [[0u64; 16]; LANES];
            let mut x = [[0u64; 16]; LANES];
            let mut e = [[0u64; 16]; LANES];
            for lane in 0..LANES {
                m[lane] = random_modulus();
                if round == 1 && lane % 2 == 0 {
                    m[lane] = [u64::MAX; 16];
                }
                let big_m = to_biguint(&m[lane]);
                x[lane] = limbs(&(to_biguint(&random_1024()) % &big_m));
                e[lane] = random_1024();
                match (round + lane) % 8 {
                    0 => x[lane] = [0; 16],
                    1 => x[lane] = limbs(&BigUint::from(1u8)),
                    2 => x[lane] = limbs(&(&big_m - 1u8)),
                    3 => e[lane] = [0; 16],
                    4 => e[lane] = limbs(&BigUint::from(1u8)),
                    5 => e[lane] = [u64::MAX; 16],
                    _ => {}
                }
            }
            let got = pow_mod::<16, 20>(&m, &x, &e).expect("IFMA is available");
            for lane in 0..LANES {
                let (bm, bx, be) = (
                    to_biguint(&m[lane]),
                    to_biguint(&x[lane]),
                    to_biguint(&e[lane]),
                );
                assert_eq!(
                    to_biguint(&got[lane]),
                    bx.modpow(&be, &bm),
                    "{bx}^{be} mod {bm}"
                );
            }
        }
    }

    #[test]
    fn fermat_lanes_match_num_bigint() {
        if skip() {
            return;
        }
        let (p, q, n) = pseudoprime();
        let primes = super::super::prime::random_primes(1024, 2).expect("1024 bits");
        let mut moduli = [[0u64; 16]; LANES];
        for (lane, m) in moduli.iter_mut().enumerate() {
            *m = match lane {
                1 => limbs(&n),
                3 => limbs(&primes[0]),
                6 => limbs(&primes[1]),
                _ => random_modulus(),
            };
        }
        let mask = fermat_base_2::<16, 20>(&moduli).expect("IFMA is available");
        for (lane, m) in moduli.iter().enumerate() {
            let m = to_biguint(m);
            let expected = BigUint::from(2u8).modpow(&(&m - 1u8), &m) == BigUint::from(1u8);
            assert_eq!(mask >> lane & 1 == 1, expected, "lane {lane}: {m}");
        }
        assert_eq!(
            mask & 0b100_1010,
            0b100_1010,
            "primes and the pseudoprime pass"
        );
        assert!(num_bigint_dig::prime::probably_prime(&p, 20));
        assert!(num_bigint_dig::prime::probably_prime(&q, 20));
        // Moduli without the top bit or even ones are not taken.
        let mut bad = moduli;
        bad[2][15] >>= 1;
        assert_eq!(fermat_base_2::<16, 20>(&bad), None);
        bad = moduli;
        bad[5][0] &= !1;
        assert_eq!(fermat_base_2::<16, 20>(&bad), None);
    }

    #[test]
    fn miller_rabin_lanes_tell_primes_from_composites() {
        if skip() {
            return;
        }
        let (p, _, n) = pseudoprime();
        assert_eq!(
            miller_rabin::<16, 20>(&limbs(&n)),
            Some(false),
            "p (2p - 1)"
        );
        for prime in super::super::prime::random_primes(1024, 4).expect("1024 bits") {
            assert_eq!(
                miller_rabin::<16, 20>(&limbs(&prime)),
                Some(true),
                "{prime}"
            );
        }
        // A product of two 512-bit primes, and random odd numbers.
        let halves = super::super::prime::random_primes(512, 2).expect("512 bits");
        let rsa = &halves[0] * &halves[1];
        assert_eq!(miller_rabin::<16, 20>(&limbs(&rsa)), Some(false), "{rsa}");
        for _ in 0..20 {
            let m = random_modulus();
            let expected = num_bigint_dig::prime::probably_prime(&to_biguint(&m), 10);
            assert_eq!(miller_rabin::<16, 20>(&m), Some(expected));
        }
        assert_eq!(miller_rabin::<16, 20>(&limbs(&(&p * 2u8))), None, "even");
    }
}
