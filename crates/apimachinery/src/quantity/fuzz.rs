//! Properties of the quantity parser, on arbitrary and on hostile input (issue 18), against a
//! reference computed as an exact fraction. Each runs `PROPTEST_CASES` cases (256 by default);
//! failures found so far are replayed first from `proptest-regressions/quantity/fuzz.txt`.

use proptest::collection::vec;
use proptest::prelude::*;

use super::*;

const SUFFIXES: &[&str] = &[
    "", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
];

/// Numbers, signs, points, every suffix, exponents (huge ones too) and what is near them.
const TOKENS: &[&str] = &[
    "0",
    "1",
    "5",
    "9",
    "000000000000",
    "99999999999999999999999999999999999999999",
    ".",
    "+",
    "-",
    "e",
    "E",
    "e-",
    "e+",
    "i",
    "Ki",
    "Mi",
    "Ei",
    "m",
    "n",
    "u",
    "k",
    "K",
    "2147483647",
    "2147483648",
    "9223372036854775808",
    " ",
    "é",
];

fn token_soup() -> impl Strategy<Value = String> {
    vec(prop::sample::select(TOKENS), 0..10).prop_map(|tokens| tokens.concat())
}

/// (power of ten, power of two) of a suffix, written out again for the reference.
fn multiplier(suffix: &str) -> (i32, u32) {
    match suffix {
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "" => (0, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        binary => {
            let power = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
                .iter()
                .position(|s| *s == binary)
                .unwrap();
            (0, 10 * (power as u32 + 1))
        }
    }
}

/// The reference: `int.frac × 10^exp10 × 2^exp2 × 1000` as an exact fraction (numerator,
/// denominator). Only for inputs small enough that both fit a u128.
fn exact_milli(int: u64, frac: &str, exp10: i32, exp2: u32) -> (u128, u128) {
    let mut numerator = u128::from(int) * 10u128.pow(frac.len() as u32);
    if !frac.is_empty() {
        numerator += frac.parse::<u128>().unwrap();
    }
    numerator <<= exp2;
    let mut denominator = 10u128.pow(frac.len() as u32);
    let scale = exp10 + 3;
    if scale >= 0 {
        numerator *= 10u128.pow(scale as u32);
    } else {
        denominator *= 10u128.pow((-scale) as u32);
    }
    (numerator, denominator)
}

/// The reference value in milli-units, rounded away from zero as `MilliValue` rounds.
fn reference_milli(int: u64, frac: &str, exp10: i32, exp2: u32) -> u128 {
    let (numerator, denominator) = exact_milli(int, frac, exp10, exp2);
    numerator.div_ceil(denominator)
}

proptest! {
    /// Any text either parses or is refused with an error naming it; what parses keeps its
    /// text and its sign.
    #[test]
    fn parse_never_panics(input in prop_oneof![any::<String>(), token_soup()]) {
        match parse_quantity(&input) {
            Ok(q) => {
                prop_assert_eq!(q.as_str(), input.as_str());
                prop_assert!(!q.is_negative() || input.starts_with('-'));
            }
            Err(e) => prop_assert!(e.to_string().contains(&format!("\"{input}\"")), "{}", e),
        }
    }

    /// A quantity's value is the exact product of its number and its suffix, rounded up to a
    /// whole milli-unit, whichever way it is written (sign, leading and trailing zeros).
    #[test]
    fn value_is_the_exact_product_rounded_up(
        int in prop_oneof![0u64..10_000, any::<u32>().prop_map(u64::from)],
        frac in "[0-9]{0,6}",
        suffix in prop::sample::select(SUFFIXES),
        leading_zeros in 0usize..3,
        trailing_zeros in 0usize..3,
        negative in any::<bool>(),
    ) {
        let (exp10, exp2) = multiplier(suffix);
        let expected = i128::try_from(reference_milli(int, &frac, exp10, exp2)).unwrap();
        let zeros = |n| "0".repeat(n);
        let point = if frac.is_empty() && trailing_zeros == 0 { "" } else { "." };
        let sign = if negative { "-" } else { "" };
        let text = format!(
            "{sign}{}{int}{point}{frac}{}{suffix}",
            zeros(leading_zeros),
            zeros(trailing_zeros),
        );
        let q = parse_quantity(&text);
        prop_assert!(q.is_ok(), "{text}: {q:?}");
        let milli = q.unwrap().to_milli();
        prop_assert_eq!(milli, if negative { -expected } else { expected }, "{}", text);
    }

    /// The same value with its decimal point moved into an exponent (`1.5k` = `15e2` =
    /// `0.0015e6`) is the same quantity.
    #[test]
    fn exponents_agree_with_suffixes(
        digits in "[1-9][0-9]{0,8}",
        point in 0usize..10,
        suffix in prop::sample::select(&SUFFIXES[..10]),
    ) {
        let (exp10, _) = multiplier(suffix);
        let point = point.min(digits.len());
        let with_suffix = format!("{}.{}{suffix}", &digits[..point], &digits[point..]);
        let shift = exp10 - (digits.len() - point) as i32;
        let with_exponent = format!("{digits}e{shift}");
        let a = parse_quantity(&with_suffix);
        let b = parse_quantity(&with_exponent);
        prop_assert!(a.is_ok() && b.is_ok(), "{with_suffix}: {a:?}, {with_exponent}: {b:?}");
        prop_assert_eq!(a.unwrap(), b.unwrap(), "{} vs {}", with_suffix, with_exponent);
    }

    /// However many digits a quantity is written with, only its value decides: a digit far past
    /// the milli-unit rounds the value up by one milli, and never makes it "out of range".
    #[test]
    fn many_digits_round_up_by_one_milli(
        int in 0u64..1_000_000_000,
        frac in "[0-9]{0,3}",
        zeros in 0usize..80,
        suffix in prop::sample::select(vec!["", "m", "k", "Ki", "Mi"]),
    ) {
        let (exp10, exp2) = multiplier(suffix);
        // The same number, nudged up by a 1 in a far decimal place.
        let nudged = format!("{int}.{frac:0<3}{}1{suffix}", "0".repeat(zeros));
        let q = parse_quantity(&nudged);
        prop_assert!(q.is_ok(), "{nudged}: {q:?}");
        let milli = q.unwrap().to_milli();
        let far = format!("{frac:0<3}{}1", "0".repeat(zeros));
        let reference_nudged = if far.len() <= 20 {
            reference_milli(int, &far, exp10, exp2)
        } else {
            // The nudge is below 10^-20 of a unit, far less than one milli even after the
            // suffix's factor: a whole milli value goes up by one, any other rounds up as it was.
            let (numerator, denominator) = exact_milli(int, &frac, exp10, exp2);
            numerator / denominator + 1
        };
        prop_assert_eq!(milli, i128::try_from(reference_nudged).unwrap(), "{}", nudged);
    }
}
