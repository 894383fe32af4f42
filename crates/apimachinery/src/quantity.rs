//! Kubernetes `resource.Quantity` parsing, exact to the milli-unit for comparing requests.
//!
//! Contract: [`parse_quantity`] accepts the apimachinery grammar
//! `[+-]<digits>[.<digits>]<suffix>` (or `.<digits>`), where the suffix is one of the decimal SI
//! suffixes `n u m "" k M G T P E`, the binary SI suffixes `Ki Mi Gi Ti Pi Ei`, or a decimal
//! exponent `e<int>` / `E<int>` (`1E` is one exa, `1E3` is one thousand). There must be at least
//! one digit; surrounding whitespace is not accepted (the apiserver trims it only when decoding
//! JSON). Negative quantities parse and report [`Quantity::is_negative`]; rejecting them
//! (resource requests must be non-negative) is the caller's rule.
//!
//! [`Quantity::to_milli`] is the value times 1000, rounded away from zero when it is not whole,
//! as apimachinery's `MilliValue` rounds (`1n` is 1 milli). Quantities compare by that value.

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

/// Errors parsing a quantity; each names the input.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// The number part is missing or malformed.
    #[error(
        "quantity \"{0}\" must match the regular expression \
         '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )]
    Format(String),
    /// The suffix is not a known SI suffix or decimal exponent.
    #[error("unable to parse quantity \"{input}\": unknown suffix \"{suffix}\"")]
    Suffix {
        /// The whole input.
        input: String,
        /// The text after the number.
        suffix: String,
    },
    /// The value does not fit in an `i128` count of milli-units.
    #[error("quantity \"{0}\" is out of range")]
    OutOfRange(String),
}

/// A parsed quantity: the text as given and its exact value in milli-units.
#[derive(Clone, Debug)]
pub struct Quantity {
    text: String,
    milli: i128,
}

impl Quantity {
    /// The value times 1000, rounded away from zero (`"100m"` is 100, `"1Ki"` is 1_024_000).
    pub fn to_milli(&self) -> i128 {
        self.milli
    }

    /// True for a value below zero (e.g. `"-1"`); `"-0"` is zero, not negative.
    pub fn is_negative(&self) -> bool {
        self.milli < 0
    }

    /// True for a zero value (`"0"`, `"0Gi"`, `"-0.0"`).
    pub fn is_zero(&self) -> bool {
        self.milli == 0
    }

    /// The text the quantity was parsed from.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl PartialEq for Quantity {
    /// Equal when the milli values are equal (`"0.5"` equals `"500m"`).
    fn eq(&self, other: &Self) -> bool {
        self.milli == other.milli
    }
}

impl Eq for Quantity {}

impl PartialOrd for Quantity {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Quantity {
    fn cmp(&self, other: &Self) -> Ordering {
        self.milli.cmp(&other.milli)
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl FromStr for Quantity {
    type Err = QuantityError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_quantity(s)
    }
}

/// Parses a Kubernetes quantity such as `"100m"`, `"0.5"`, `"128Mi"`, `"1e3"` or `"1.5Gi"`.
pub fn parse_quantity(input: &str) -> Result<Quantity, QuantityError> {
    let format = || QuantityError::Format(input.to_string());
    let bytes = input.as_bytes();
    let mut pos = 0;
    let negative = match bytes.first() {
        Some(b'-') => {
            pos += 1;
            true
        }
        Some(b'+') => {
            pos += 1;
            false
        }
        _ => false,
    };
    let int_start = pos;
    while pos < bytes.len() && bytes[pos].is_ascii_digit() {
        pos += 1;
    }
    let int_digits = &input[int_start..pos];
    let mut frac_digits = "";
    if pos < bytes.len() && bytes[pos] == b'.' {
        pos += 1;
        let frac_start = pos;
        while pos < bytes.len() && bytes[pos].is_ascii_digit() {
            pos += 1;
        }
        frac_digits = &input[frac_start..pos];
    }
    if int_digits.is_empty() && frac_digits.is_empty() {
        return Err(format());
    }
    let suffix = &input[pos..];
    let (exp10, exp2) = interpret_suffix(suffix).ok_or_else(|| QuantityError::Suffix {
        input: input.to_string(),
        suffix: suffix.to_string(),
    })?;

    let out_of_range = || QuantityError::OutOfRange(input.to_string());
    // value = digits * 10^(exp10 - frac_len) * 2^exp2; in milli-units the power of ten gains 3.
    let digits = format!("{int_digits}{frac_digits}");
    let digits = digits.trim_start_matches('0');
    let trimmed = digits.trim_end_matches('0');
    let frac_len = i64::try_from(frac_digits.len()).map_err(|_| out_of_range())?;
    let trailing_zeros = i64::try_from(digits.len() - trimmed.len()).map_err(|_| out_of_range())?;
    let scale = i64::from(exp10) + 3 - frac_len + trailing_zeros;
    let magnitude = scale_rounding_up(trimmed, exp2, scale).ok_or_else(out_of_range)?;
    let milli = i128::try_from(magnitude).map_err(|_| out_of_range())?;
    Ok(Quantity {
        text: input.to_string(),
        milli: if negative { -milli } else { milli },
    })
}

/// `digits * 2^exp2 * 10^scale`, rounded away from zero to a whole number; `None` when that
/// exceeds a u128. Worked on the decimal digits, so that a number written with more digits than
/// a u128 holds (digits far below the milli-unit: `1.000…001`) keeps its value.
fn scale_rounding_up(digits: &str, exp2: u32, scale: i64) -> Option<u128> {
    // Most significant digit first; doubling `exp2` times is exact.
    let mut decimal: Vec<u8> = digits.bytes().map(|b| b - b'0').collect();
    for _ in 0..exp2 {
        let mut carry = 0;
        for d in decimal.iter_mut().rev() {
            let doubled = *d * 2 + carry;
            *d = doubled % 10;
            carry = doubled / 10;
        }
        if carry > 0 {
            decimal.insert(0, carry);
        }
    }
    // A negative scale drops that many digits, and any of them not zero rounds up.
    let dropped = usize::try_from(scale.min(0).unsigned_abs()).unwrap_or(usize::MAX);
    let (whole, fraction) = decimal.split_at(decimal.len().saturating_sub(dropped));
    let mut value: u128 = 0;
    for d in whole {
        value = value.checked_mul(10)?.checked_add(u128::from(*d))?;
    }
    if scale > 0 && value != 0 {
        value = value.checked_mul(10u128.checked_pow(u32::try_from(scale).ok()?)?)?;
    }
    if fraction.iter().any(|d| *d != 0) {
        value = value.checked_add(1)?;
    }
    Some(value)
}

/// Maps a suffix to (power of ten, power of two).
fn interpret_suffix(suffix: &str) -> Option<(i32, u32)> {
    let decimal = match suffix {
        "" => Some(0),
        "n" => Some(-9),
        "u" => Some(-6),
        "m" => Some(-3),
        "k" => Some(3),
        "M" => Some(6),
        "G" => Some(9),
        "T" => Some(12),
        "P" => Some(15),
        "E" => Some(18),
        _ => None,
    };
    if let Some(e) = decimal {
        return Some((e, 0));
    }
    let binary = match suffix {
        "Ki" => Some(10),
        "Mi" => Some(20),
        "Gi" => Some(30),
        "Ti" => Some(40),
        "Pi" => Some(50),
        "Ei" => Some(60),
        _ => None,
    };
    if let Some(b) = binary {
        return Some((0, b));
    }
    let exp = suffix.strip_prefix(['e', 'E'])?;
    let digits = exp.strip_prefix(['+', '-']).unwrap_or(exp);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((exp.parse().ok()?, 0))
}

#[cfg(test)]
mod fuzz;

#[cfg(test)]
mod tests {
    use super::*;

    fn milli(s: &str) -> i128 {
        parse_quantity(s)
            .unwrap_or_else(|e| panic!("{s}: {e}"))
            .to_milli()
    }

    #[test]
    fn cpu_quantities() {
        assert_eq!(milli("100m"), 100);
        assert_eq!(milli("0.5"), 500);
        assert_eq!(milli(".5"), 500);
        assert_eq!(milli("5."), 5000);
        assert_eq!(milli("2"), 2000);
        assert_eq!(milli("+1"), 1000);
        assert_eq!(milli("0"), 0);
        assert_eq!(milli("0.1"), 100);
        assert_eq!(milli("1.5"), 1500);
        assert_eq!(milli("250m"), 250);
        assert_eq!(milli("007"), 7000);
    }

    #[test]
    fn memory_quantities() {
        assert_eq!(milli("128Mi"), 128 * (1 << 20) * 1000);
        assert_eq!(milli("1Gi"), (1 << 30) * 1000);
        assert_eq!(milli("1.5Gi"), 3 * (1 << 29) * 1000);
        assert_eq!(milli("500M"), 500_000_000 * 1000);
        assert_eq!(milli("1k"), 1_000_000);
        assert_eq!(milli("1Ki"), 1_024_000);
        assert_eq!(milli("1Ei"), (1i128 << 60) * 1000);
        assert_eq!(milli("2E"), 2_000_000_000_000_000_000_000);
        assert_eq!(milli("1T"), 1_000_000_000_000_000);
        assert_eq!(milli("1P"), 1_000_000_000_000_000_000);
    }

    #[test]
    fn exponents_and_small_units() {
        assert_eq!(milli("1e3"), 1_000_000);
        assert_eq!(milli("1E3"), 1_000_000);
        assert_eq!(milli("1e+3"), 1_000_000);
        assert_eq!(milli("1.5e3"), 1_500_000);
        assert_eq!(milli("1e-3"), 1);
        assert_eq!(milli("12e-1"), 1200);
        // Below one milli: rounded away from zero, as MilliValue does.
        assert_eq!(milli("1n"), 1);
        assert_eq!(milli("1u"), 1);
        assert_eq!(milli("1500u"), 2);
        assert_eq!(milli("1000u"), 1);
        assert_eq!(milli("1e-40"), 1);
        assert_eq!(milli("0e-40"), 0);
        assert_eq!(milli("0e40"), 0);
        assert_eq!(milli("0.000Ei"), 0);
        assert_eq!(milli("-1n"), -1);
    }

    /// Found by the properties in `fuzz.rs`: every significant digit had to fit a u128 before
    /// scaling, so a value of about one written with 40 digits was "out of range".
    #[test]
    fn more_digits_than_a_u128_holds() {
        assert_eq!(milli("1.000000000000000000000000000000000000001"), 1001);
        assert_eq!(
            milli("0.5000000000000000000000000000000000000000000001"),
            501
        );
        assert_eq!(milli("1234567890123456789012345678901234567890e-40"), 124);
        assert_eq!(
            milli("-1.000000000000000000000000000000000000001Ki"),
            -1_024_001
        );
        assert_eq!(
            parse_quantity("1000000000000000000000000000000000000000").unwrap_err(),
            QuantityError::OutOfRange("1000000000000000000000000000000000000000".into())
        );
    }

    #[test]
    fn negatives_and_zero() {
        let q = parse_quantity("-1").unwrap();
        assert!(q.is_negative());
        assert_eq!(q.to_milli(), -1000);
        let q = parse_quantity("-0.0").unwrap();
        assert!(!q.is_negative());
        assert!(q.is_zero());
        assert!(parse_quantity("0Gi").unwrap().is_zero());
        assert!(!parse_quantity("+1").unwrap().is_negative());
    }

    #[test]
    fn rejects_garbage_naming_the_input() {
        for bad in [
            "", "Mi", "+", "-", ".", "1.2.3", "10Xi", "1K", "1e", "1e1.5", " 1", "1 ", "abc", "1m1",
        ] {
            let err = parse_quantity(bad).unwrap_err();
            assert!(
                err.to_string().contains(&format!("\"{bad}\"")),
                "{bad:?}: {err}"
            );
        }
        assert_eq!(
            parse_quantity("10Xi").unwrap_err(),
            QuantityError::Suffix {
                input: "10Xi".into(),
                suffix: "Xi".into()
            }
        );
        assert_eq!(
            parse_quantity("1.2.3").unwrap_err(),
            QuantityError::Suffix {
                input: "1.2.3".into(),
                suffix: ".3".into()
            }
        );
        assert_eq!(
            parse_quantity("Mi").unwrap_err(),
            QuantityError::Format("Mi".into())
        );
        assert_eq!(
            parse_quantity("").unwrap_err(),
            QuantityError::Format("".into())
        );
        assert_eq!(
            parse_quantity("1e40").unwrap_err(),
            QuantityError::OutOfRange("1e40".into())
        );
    }

    #[test]
    fn compares_by_value() {
        let a: Quantity = "0.5".parse().unwrap();
        let b: Quantity = "500m".parse().unwrap();
        assert_eq!(a, b);
        assert_eq!(a.as_str(), "0.5");
        assert_eq!(b.to_string(), "500m");
        let big: Quantity = "1Gi".parse().unwrap();
        let small: Quantity = "1G".parse().unwrap();
        assert!(big > small);
        let mut v = vec![big.clone(), b.clone(), small.clone()];
        v.sort();
        assert_eq!(v, vec![b, small, big]);
    }
}
