//! Python float text (`float.__repr__`, which is also `str()`) and Python's `round(x, n)`.
//!
//! Both lean on Rust's float formatting, which gives the digits CPython's dtoa gives:
//! `{:e}` yields the shortest digits that round-trip (closest to the exact value; exact ties
//! between two candidates are settled here, see [`Shortest::break_tie_to_even`]), and `{:.N}`
//! yields the exact binary value rounded half-to-even at `N` decimals. The layout around the
//! digits is Python's and is done here. Both were checked against CPython 3.11 on ~500k
//! (repr) and ~870k (round) values with `gen_vectors.py`.

use std::fmt::Write as _;

/// Python `repr(x)` / `str(x)` of a float: `1.0`, `0.1`, `1e-05`, `1e+16`, `-0.0`, `inf`,
/// `-inf`, `nan`.
pub fn float_repr(x: f64) -> String {
    let mut out = String::new();
    write_float(&mut out, x);
    out
}

/// Appends Python's `repr(x)` (see [`float_repr`]). Non-finite values are written the Python
/// way (`inf`, `-inf`, `nan`); JSON writers must check `is_finite()` first or use
/// [`super::write_json_float`].
pub fn write_float(out: &mut String, x: f64) {
    if x.is_nan() {
        out.push_str("nan");
        return;
    }
    if x.is_infinite() {
        out.push_str(if x > 0.0 { "inf" } else { "-inf" });
        return;
    }
    if x.is_sign_negative() {
        out.push('-');
    }
    let mut d = Shortest::of(x.abs());
    d.break_tie_to_even(x.abs());
    d.layout(out);
}

/// The shortest decimal digits that round-trip: value = 0.d1 d2 ... dn * 10^decpt.
struct Shortest {
    /// ASCII digits, no leading zeros and no trailing zeros (zero is the single digit `0`).
    digits: [u8; 24],
    len: usize,
    decpt: i32,
}

impl Shortest {
    /// From Rust's `{:e}`, which gives shortest round-trip digits (e.g. `1.5e300`, `1e-5`,
    /// `0e0`). `x` is finite and not negative.
    fn of(x: f64) -> Shortest {
        let mut buf = SmallBuf::new();
        let owned;
        // The longest `{:e}` of an f64 is 23 bytes; the fallback only keeps this total.
        let sci = if write!(buf, "{x:e}").is_ok() {
            buf.as_str()
        } else {
            owned = format!("{x:e}");
            owned.as_str()
        };
        let (mantissa, exp) = sci.split_once('e').unwrap_or((sci, "0"));
        let mut d = Shortest {
            digits: [b'0'; 24],
            len: 0,
            decpt: exp.parse::<i32>().unwrap_or(0) + 1,
        };
        for b in mantissa.bytes().filter(u8::is_ascii_digit) {
            if d.len < d.digits.len() {
                d.digits[d.len] = b;
                d.len += 1;
            }
        }
        d.len = d.len.max(1);
        d
    }

    fn as_u64(&self) -> u64 {
        self.digits[..self.len]
            .iter()
            .fold(0, |acc, &b| acc * 10 + u64::from(b - b'0'))
    }

    /// When `x` lies exactly halfway between two shortest candidates, Rust picks the upper
    /// one and CPython's dtoa the one with an even last digit (`repr(1e15 + 0.25)` is
    /// `1000000000000000.2`, Rust says `...0.3`). Such ties need the exact value of `x` to
    /// have one significant digit more than the shortest form, ending in 5, which only
    /// happens for floats with few significant bits; those are checked exactly here.
    fn break_tie_to_even(&mut self, x: f64) {
        if self.len > 17 {
            return;
        }
        let Some((exact, exact_digits)) = short_exact_significand(x) else {
            return;
        };
        if exact_digits != self.len + 1 || exact % 10 != 5 {
            return;
        }
        let below = (exact / 10) as u64;
        let even = below + (below & 1);
        let ours = self.as_u64();
        if ours == even || (ours != below && ours != below + 1) {
            return;
        }
        let mut candidate = Shortest {
            digits: [b'0'; 24],
            len: 0,
            decpt: self.decpt,
        };
        let text = even.to_string();
        if text.len() > self.len {
            // Carry (99.5 -> 100): one more integer digit.
            candidate.decpt += 1;
        }
        let text = text.trim_end_matches('0');
        if text.is_empty() {
            return;
        }
        candidate.digits[..text.len()].copy_from_slice(text.as_bytes());
        candidate.len = text.len();
        // dtoa only ever returns digits that read back as `x`; keep ours if these don't.
        let reread = format!("0.{}e{}", text, candidate.decpt).parse::<f64>();
        if reread == Ok(x) {
            *self = candidate;
        }
    }

    /// CPython's `float_repr_style == 'short'` layout (`PyOS_double_to_string(x, 'r', 0,
    /// Py_DTSF_ADD_DOT_0)`): scientific notation when the decimal exponent is below -4 or at
    /// least 16, with a sign and at least two exponent digits; otherwise positional, with
    /// `.0` added to integral values.
    fn layout(&self, out: &mut String) {
        let digits = &self.digits[..self.len];
        let push = |out: &mut String, ds: &[u8]| out.extend(ds.iter().map(|&b| char::from(b)));
        let decpt = self.decpt;
        if decpt <= -4 || decpt > 16 {
            push(out, &digits[..1]);
            if digits.len() > 1 {
                out.push('.');
                push(out, &digits[1..]);
            }
            let e = decpt - 1;
            out.push('e');
            out.push(if e < 0 { '-' } else { '+' });
            let _ = write!(out, "{:02}", e.unsigned_abs());
        } else if decpt <= 0 {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', decpt.unsigned_abs() as usize));
            push(out, digits);
        } else {
            let decpt = decpt as usize;
            if decpt >= digits.len() {
                push(out, digits);
                out.extend(std::iter::repeat_n('0', decpt - digits.len()));
                out.push_str(".0");
            } else {
                push(out, &digits[..decpt]);
                out.push('.');
                push(out, &digits[decpt..]);
            }
        }
    }
}

/// The exact decimal significand of positive finite `x` (its decimal digits without
/// trailing zeros) and its digit count, when it has at most 19 digits; `None` otherwise.
fn short_exact_significand(x: f64) -> Option<(u128, usize)> {
    let bits = x.to_bits();
    let biased_exp = ((bits >> 52) & 0x7ff) as i32;
    let fraction = bits & ((1u64 << 52) - 1);
    let (mut m, mut e) = if biased_exp == 0 {
        (fraction, -1074)
    } else {
        (fraction | (1u64 << 52), biased_exp - 1075)
    };
    if m == 0 {
        return None;
    }
    let zeros = m.trailing_zeros();
    m >>= zeros;
    e += zeros as i32;
    // x = m * 2^e with m odd.
    let significand: u128 = if e < 0 {
        // x = m * 5^s / 10^s: m * 5^s is odd, so it has no trailing zeros; below 10^19 needs
        // 5^s < 10^19, i.e. s <= 27.
        let s = e.unsigned_abs();
        if s > 27 {
            return None;
        }
        u128::from(m) * 5u128.pow(s)
    } else {
        // x = (m / 5^t) * 2^(e - t) * 10^t with t = min(e, v5(m)) trailing zeros.
        let mut core = m;
        let mut t = 0;
        while t < e && core % 5 == 0 {
            core /= 5;
            t += 1;
        }
        let shift = (e - t) as u32;
        if shift >= 64 {
            return None;
        }
        u128::from(core) << shift
    };
    let digits = significand.checked_ilog10().map_or(1, |l| l as usize + 1);
    (digits <= 19).then_some((significand, digits))
}

/// A fixed stack buffer for one float's text, so formatting a float does not allocate.
struct SmallBuf {
    bytes: [u8; 40],
    len: usize,
}

impl SmallBuf {
    fn new() -> SmallBuf {
        SmallBuf {
            bytes: [0; 40],
            len: 0,
        }
    }

    fn as_str(&self) -> &str {
        // Only whole `&str`s are ever copied in, so this cannot fail.
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or("")
    }
}

impl std::fmt::Write for SmallBuf {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        let dst = self.bytes.get_mut(self.len..end).ok_or(std::fmt::Error)?;
        dst.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// Python `round(x, 4)` for a float.
pub fn round4(x: f64) -> f64 {
    // ndigits = 4 can never overflow (rounding at 1e-4 of a finite float stays finite).
    round_ndigits(x, 4).unwrap_or(x)
}

/// Python's `round()` raised `OverflowError: rounded value too large to represent`
/// (only possible with negative `ndigits`, e.g. `round(1.7e308, -308)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("rounded value too large to represent")]
pub struct RoundOverflowError;

/// CPython's `NDIGITS_MAX` / `NDIGITS_MIN` in `float___round___impl`: beyond them `round`
/// returns `x` unchanged, resp. a zero with the sign of `x`.
const NDIGITS_MAX: i32 = 323;
const NDIGITS_MIN: i32 = -308;

/// Exact powers of ten that fit the fast path (`10^22` is the largest exact `f64` power).
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// Python `round(x, ndigits)` for a float: the exact binary value of `x` rounded to `ndigits`
/// decimal places, half to even (ties only when the binary value is exactly halfway, so
/// `round(2.675, 2) == 2.67` because 2.675 is stored as 2.67499999...), then correctly rounded
/// back to a float. The sign of a zero result follows `x` (`round(-0.00001, 4) == -0.0`).
/// Non-finite `x` is returned unchanged.
pub fn round_ndigits(x: f64, ndigits: i32) -> Result<f64, RoundOverflowError> {
    if !x.is_finite() || x == 0.0 {
        return Ok(x);
    }
    if ndigits > NDIGITS_MAX {
        return Ok(x);
    }
    if ndigits < NDIGITS_MIN {
        return Ok(0.0 * x);
    }
    if ndigits >= 0 {
        let n = ndigits as usize;
        if n < POW10.len() {
            return Ok(round_fast(x, n));
        }
        // `{:.n}` rounds the exact value half to even, as dtoa mode 3 does; parsing is
        // correctly rounded, as `_Py_dg_strtod` is.
        return Ok(format!("{x:.n$}").parse::<f64>().unwrap_or(x));
    }
    round_negative(x, ndigits.unsigned_abs() as usize)
}

/// `round(x, n)` for `0 <= n <= 22` in integer arithmetic, without allocating.
fn round_fast(x: f64, n: usize) -> f64 {
    let bits = x.to_bits();
    let negative = bits >> 63 == 1;
    let biased_exp = ((bits >> 52) & 0x7ff) as i32;
    let fraction = bits & ((1u64 << 52) - 1);
    // x = m * 2^e exactly.
    let (m, e) = if biased_exp == 0 {
        (fraction, -1074)
    } else {
        (fraction | (1u64 << 52), biased_exp - 1075)
    };
    if e >= 0 {
        // Already an integer: rounding at n >= 0 decimals leaves it unchanged.
        return x;
    }
    let shift = e.unsigned_abs();
    // m < 2^53 and 10^22 < 2^73.1, so the product fits in 127 bits.
    let scaled = u128::from(m) * 10u128.pow(n as u32);
    let q = if shift >= 128 {
        // scaled / 2^shift < 2^127 / 2^128 < 1/2: rounds to zero.
        0
    } else {
        let q = scaled >> shift;
        let r = scaled & ((1u128 << shift) - 1);
        let half = 1u128 << (shift - 1);
        if r > half || (r == half && q & 1 == 1) {
            q + 1
        } else {
            q
        }
    };
    let magnitude = if q < (1u128 << 53) {
        // Both operands are exact, so one IEEE division is the correctly rounded quotient.
        q as f64 / POW10[n]
    } else {
        format!("{q}e-{n}").parse::<f64>().unwrap_or(f64::INFINITY)
    };
    if negative {
        -magnitude
    } else {
        magnitude
    }
}

/// `round(x, -k)` for `1 <= k <= 308`: round the exact integer part at `10^k`, using the
/// fraction only to break what would otherwise look like a tie.
fn round_negative(x: f64, k: usize) -> Result<f64, RoundOverflowError> {
    let negative = x.is_sign_negative();
    let int_part = x.abs().trunc();
    let has_fraction = x.abs() != int_part;
    // Integral floats print exactly with `{:.0}`.
    let digits = format!("{int_part:.0}");
    // Left-pad so there is always at least one digit above the rounding position.
    let padded = format!(
        "{}{}",
        "0".repeat((k + 1).saturating_sub(digits.len())),
        digits
    );
    let (head, tail) = padded.split_at(padded.len() - k);
    let tail = tail.as_bytes();
    let round_up = match tail[0].cmp(&b'5') {
        std::cmp::Ordering::Greater => true,
        std::cmp::Ordering::Less => false,
        std::cmp::Ordering::Equal => {
            let exact_half = tail[1..].iter().all(|&d| d == b'0') && !has_fraction;
            !exact_half || head.as_bytes().last().is_some_and(|d| (d - b'0') % 2 == 1)
        }
    };
    let mut head = head.as_bytes().to_vec();
    if round_up {
        increment_decimal(&mut head);
    }
    let text = format!("{}e{k}", String::from_utf8_lossy(&head));
    let magnitude = text.parse::<f64>().map_err(|_| RoundOverflowError)?;
    if magnitude.is_infinite() {
        return Err(RoundOverflowError);
    }
    Ok(if negative { -magnitude } else { magnitude })
}

/// Adds one to ASCII decimal digits in place, growing on carry out (`"99"` -> `"100"`).
fn increment_decimal(digits: &mut Vec<u8>) {
    for d in digits.iter_mut().rev() {
        if *d == b'9' {
            *d = b'0';
        } else {
            *d += 1;
            return;
        }
    }
    digits.insert(0, b'1');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repr_layout() {
        // [repr(float(s)) for s in ...] in python3.11
        let cases: &[(f64, &str)] = &[
            (1e16, "1e+16"),
            (1e-5, "1e-05"),
            (1.5e300, "1.5e+300"),
            (-0.0, "-0.0"),
            (0.0, "0.0"),
            (2.0, "2.0"),
            (0.0001, "0.0001"),
            (0.00012345, "0.00012345"),
            (123456789012345.6, "123456789012345.6"),
            (9999999999999998.0, "9999999999999998.0"),
            (1e15, "1000000000000000.0"),
            (1.2345678901234567e-4, "0.00012345678901234567"),
            (0.1, "0.1"),
            (1.0 / 3.0, "0.3333333333333333"),
            (-1.5, "-1.5"),
            (5e-324, "5e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (f64::MIN_POSITIVE, "2.2250738585072014e-308"),
            (1.5e16, "1.5e+16"),
            (123e-7, "1.23e-05"),
            (1e100, "1e+100"),
            (0.5, "0.5"),
            (100.0, "100.0"),
            // Exact ties between two shortest candidates; python picks the even last digit
            // (repr(float.fromhex(...)) for these bit patterns).
            (f64::from_bits(0x430c_6bf5_2634_0002), "1000000000000000.2"),
            (f64::from_bits(0xc2de_34d6_3cbf_31c8), "-132849125752007.12"),
            (f64::from_bits(0x42b5_86cd_dd50_3b10), "23668723634235.062"),
            (f64::from_bits(0xc2b4_a23f_9f01_9fd0), "-22687084642719.812"),
            (f64::NAN, "nan"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
        ];
        for (x, want) in cases {
            assert_eq!(float_repr(*x), *want, "repr of {x:e}");
        }
    }

    #[test]
    fn round_matches_python() {
        // Each expected value printed by python3.11: round(x, n)
        let cases: &[(f64, i32, f64)] = &[
            (2.675, 2, 2.67),
            (0.00015, 4, 0.0001), // stored as 1.49999...e-4
            (0.00025, 4, 0.0003), // stored as 2.50000...01e-4
            (0.5, 0, 0.0),
            (1.5, 0, 2.0),
            (2.5, 0, 2.0),
            (-2.5, 0, -2.0),
            (0.125, 2, 0.12), // exact binary tie -> even
            (0.375, 2, 0.38),
            (-0.00001, 4, -0.0),
            (0.99995, 4, 1.0),    // stored above the tie
            (1.00005, 4, 1.0001), // stored above the tie
            (123456.78905, 4, 123456.7891),
            (1e300, -299, 1e300),
            (25.0, -1, 20.0),
            (35.0, -1, 40.0),
            (25.000001, -1, 30.0),
            (-25.0, -1, -20.0),
            (-4.0, -1, -0.0),
            (5e-324, 323, 0.0),
            (5e-324, 100, 0.0),
            (1.23456789e-310, 315, 1.23457e-310),
            (0.1, 500, 0.1),
            (7.0, -400, 0.0),
            (-7.0, -400, -0.0),
        ];
        for &(x, n, want) in cases {
            let got = round_ndigits(x, n).expect("no overflow");
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "round({x:?}, {n}) = {got:?}, want {want:?}"
            );
        }
        // round(1.7e308, -308) -> OverflowError: rounded value too large to represent
        assert_eq!(round_ndigits(1.7e308, -308), Err(RoundOverflowError));
        assert!(round4(f64::NAN).is_nan());
        assert_eq!(round4(f64::NEG_INFINITY), f64::NEG_INFINITY);
    }

    #[test]
    fn increment() {
        let mut d = b"199".to_vec();
        increment_decimal(&mut d);
        assert_eq!(d, b"200");
        let mut d = b"99".to_vec();
        increment_decimal(&mut d);
        assert_eq!(d, b"100");
    }
}
