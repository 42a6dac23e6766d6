//! Kubernetes resource quantities ("500m", "16Gi", "1.5", "2e3"), kept as the user wrote them
//! and parsed exactly (no floating point) when a number is needed.

use std::fmt;

use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A resource quantity in Kubernetes notation. It keeps the text the user wrote, so a YAML
/// round trip is lossless; [`Quantity::milli`] gives the exact value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Quantity(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    #[error("is empty")]
    Empty,
    #[error(
        "`{0}` is not a quantity; write a number with an optional suffix, e.g. \"500m\", \"2\", \"16Gi\", \"1.5G\""
    )]
    Syntax(String),
    #[error("`{0}` is negative; quantities must be zero or more")]
    Negative(String),
    #[error("`{0}` is too large")]
    TooLarge(String),
}

/// Suffix multipliers as (numerator, denominator) in units, per the Kubernetes quantity grammar.
const SUFFIXES: &[(&str, u128, u128)] = &[
    ("Ki", 1 << 10, 1),
    ("Mi", 1 << 20, 1),
    ("Gi", 1 << 30, 1),
    ("Ti", 1 << 40, 1),
    ("Pi", 1 << 50, 1),
    ("Ei", 1 << 60, 1),
    ("n", 1, 1_000_000_000),
    ("u", 1, 1_000_000),
    ("m", 1, 1_000),
    ("k", 1_000, 1),
    ("M", 1_000_000, 1),
    ("G", 1_000_000_000, 1),
    ("T", 1_000_000_000_000, 1),
    ("P", 1_000_000_000_000_000, 1),
    ("E", 1_000_000_000_000_000_000, 1),
];

impl Quantity {
    /// Builds a quantity from its text, checking the syntax.
    pub fn parse(text: &str) -> Result<Self, QuantityError> {
        let q = Quantity(text.trim().to_string());
        q.milli()?;
        Ok(q)
    }

    /// A quantity of whole units (cores, bytes).
    pub fn from_units(units: u64) -> Self {
        Quantity(units.to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The value in thousandths of a unit, rounded up (as Kubernetes rounds CPU requests).
    pub fn milli(&self) -> Result<u128, QuantityError> {
        let s = self.0.as_str();
        if s.is_empty() {
            return Err(QuantityError::Empty);
        }
        let syntax = || QuantityError::Syntax(s.to_string());
        let too_large = || QuantityError::TooLarge(s.to_string());
        let (sign_neg, body) = match s.as_bytes()[0] {
            b'-' => (true, &s[1..]),
            b'+' => (false, &s[1..]),
            _ => (false, s),
        };
        // Split number and suffix: the number is digits with at most one '.', optionally
        // followed by a decimal exponent (e/E) when no other suffix is present.
        let num_end = body
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(body.len());
        let (number, suffix) = body.split_at(num_end);
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(syntax());
        }
        let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
        // mantissa = int_part.frac_part as an integer, scaled down by 10^frac_len
        let digits: String = format!("{int_part}{frac_part}");
        let digits = digits.trim_start_matches('0');
        if digits.len() > 30 {
            return Err(too_large());
        }
        let mantissa: u128 = if digits.is_empty() {
            0
        } else {
            digits.parse().map_err(|_| syntax())?
        };
        let frac_len = frac_part.len() as u32;
        let (mul, div, exp): (u128, u128, i32) = if suffix.is_empty() {
            (1, 1, 0)
        } else if let Some(&(_, m, d)) = SUFFIXES.iter().find(|(name, _, _)| *name == suffix) {
            (m, d, 0)
        } else if let Some(e) = suffix.strip_prefix(['e', 'E']) {
            let e: i32 = e.parse().map_err(|_| syntax())?;
            if !(-30..=30).contains(&e) {
                return Err(too_large());
            }
            (1, 1, e)
        } else {
            return Err(syntax());
        };
        if sign_neg && mantissa != 0 {
            return Err(QuantityError::Negative(s.to_string()));
        }
        // value_milli = mantissa * mul * 1000 * 10^exp / (div * 10^frac_len), rounded up.
        let mut num = mantissa
            .checked_mul(mul)
            .and_then(|v| v.checked_mul(1000))
            .ok_or_else(too_large)?;
        let mut den = div
            .checked_mul(10u128.pow(frac_len.min(38)))
            .ok_or_else(too_large)?;
        if exp >= 0 {
            num = num
                .checked_mul(10u128.pow(exp as u32))
                .ok_or_else(too_large)?;
        } else {
            den = den
                .checked_mul(10u128.pow((-exp) as u32))
                .ok_or_else(too_large)?;
        }
        let value = num.div_ceil(den);
        // Nothing a machine has comes near 2^96 milli-units; larger is a typo.
        if value > (1u128 << 96) {
            return Err(too_large());
        }
        Ok(value)
    }

    /// The value in whole units (bytes for memory), rounded up.
    pub fn units(&self) -> Result<u128, QuantityError> {
        Ok(self.milli()?.div_ceil(1000))
    }
}

impl fmt::Display for Quantity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for Quantity {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // YAML and JSON users write `cpu: 2` as often as `cpu: "2"`: accept both, keep text.
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Quantity;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a quantity such as 2, \"500m\" or \"16Gi\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Quantity, E> {
                Ok(Quantity(v.trim().to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Quantity, E> {
                Ok(Quantity(v.to_string()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Quantity, E> {
                Ok(Quantity(v.to_string()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Quantity, E> {
                if !v.is_finite() {
                    return Err(E::custom(format!("{v} is not a quantity")));
                }
                Ok(Quantity(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

impl JsonSchema for Quantity {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Quantity".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "A Kubernetes quantity: a number with an optional suffix (500m, 2, 16Gi, 1.5G).",
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "x-kubernetes-int-or-string": true,
            "pattern": "^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$"
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn milli(s: &str) -> Result<u128, QuantityError> {
        Quantity(s.to_string()).milli()
    }

    #[test]
    fn parses_kubernetes_notation_exactly() {
        assert_eq!(milli("500m"), Ok(500));
        assert_eq!(milli("2"), Ok(2000));
        assert_eq!(milli("1.5"), Ok(1500));
        assert_eq!(milli("0.1"), Ok(100));
        assert_eq!(milli(".5"), Ok(500));
        assert_eq!(milli("16Gi"), Ok(16 * (1 << 30) * 1000));
        assert_eq!(milli("1.5Gi"), Ok(1536 * (1 << 20) * 1000));
        assert_eq!(milli("1G"), Ok(1_000_000_000_000));
        assert_eq!(milli("2e3"), Ok(2_000_000));
        assert_eq!(milli("1E-3"), Ok(1));
        assert_eq!(milli("0"), Ok(0));
        assert_eq!(milli("+3"), Ok(3000));
        // rounding up, as Kubernetes does for sub-milli CPU
        assert_eq!(milli("1n"), Ok(1));
        assert_eq!(Quantity("1500m".into()).units(), Ok(2));
    }

    #[test]
    fn rejects_what_kubernetes_rejects() {
        for bad in ["", "abc", "16GB", "1.2.3", "5 Gi", "Gi", ".", "1e", "12x"] {
            assert!(milli(bad).is_err(), "{bad:?} should be rejected");
        }
        assert!(matches!(milli("-1"), Err(QuantityError::Negative(_))));
        assert!(matches!(milli("9e30"), Err(QuantityError::TooLarge(_))));
        assert!(matches!(
            milli("999999999999999999999999999999999999Ei"),
            Err(QuantityError::TooLarge(_))
        ));
    }
}
