//! Sizes and powers counted without overflow: user input can ask for any
//! number of drafts, paths or tokens, and a count that wraps would pass a
//! budget it exceeds. Every budget check counts with these.

/// `base^exp`, saturating at `u128::MAX`, for any exponent.
///
/// ```
/// use mdsd_core::saturating_pow;
///
/// assert_eq!(saturating_pow(3, 4), 81);
/// assert_eq!(saturating_pow(3, 1 << 32), u128::MAX);
/// assert_eq!((saturating_pow(1, usize::MAX), saturating_pow(0, 0)), (1, 1));
/// ```
pub fn saturating_pow(base: u128, exp: usize) -> u128 {
    match base {
        0 => u128::from(exp == 0),
        1 => 1,
        // 2^128 saturates already: any exponent past u32::MAX is as large.
        _ => base.saturating_pow(u32::try_from(exp).unwrap_or(u32::MAX)),
    }
}

/// `x^n` for x >= 0 and a count n of any size: `powi` up to `i32::MAX`
/// (where `powi(n as i32)` would wrap to a negative exponent), e^(n ln x)
/// past it.
///
/// ```
/// use mdsd_core::powi_count;
///
/// assert_eq!(powi_count(0.5, 2), 0.25);
/// assert_eq!(powi_count(0.5, 1 << 40), 0.0);
/// assert!((powi_count(1.0 - 1e-13, 1 << 40) - (-0.10995f64).exp()).abs() < 1e-4);
/// ```
pub fn powi_count(x: f64, n: usize) -> f64 {
    match i32::try_from(n) {
        Ok(n) => x.powi(n),
        Err(_) => (n as f64 * x.ln()).exp(),
    }
}

/// A count as messages show it: exact up to 10^12, then with 2 significant
/// digits (`1.2e38`), and `>= 2^128` where it saturated.
///
/// ```
/// use mdsd_core::Count;
///
/// assert_eq!(Count(1_048_576).to_string(), "1048576");
/// assert_eq!(Count(3u128.pow(40)).to_string(), "1.2e19");
/// assert_eq!(Count(u128::MAX).to_string(), ">= 2^128");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Count(pub u128);

impl std::fmt::Display for Count {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            u128::MAX => f.write_str(">= 2^128"),
            n if n < 1_000_000_000_000 => write!(f, "{n}"),
            n => write!(f, "{:.1e}", n as f64),
        }
    }
}

/// A value as messages show it: as given where that is short, with 6
/// significant digits where it would run to hundreds (`1e300` as
/// `1.000000e300`).
///
/// ```
/// use mdsd_core::Shown;
///
/// assert_eq!(Shown(1.005).to_string(), "1.005");
/// assert_eq!(Shown(-0.1).to_string(), "-0.1");
/// assert_eq!(Shown(1e300).to_string(), "1.000000e300");
/// assert_eq!(Shown(f64::NAN).to_string(), "NaN");
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shown(pub f64);

impl std::fmt::Display for Shown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let x = self.0;
        let short = x == 0.0 || !x.is_finite() || (1e-6..1e9).contains(&x.abs());
        if short && x.to_string().len() <= 24 {
            write!(f, "{x}")
        } else {
            write!(f, "{x:.6e}")
        }
    }
}
