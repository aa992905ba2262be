//! How the API reads a number, written once for every body and query.
//!
//! - **Integral floats are integers.** Where an integer is asked, a number
//!   with nothing after its point (`2.0`, `2e3`, `20e-1`) is the integer
//!   it equals: JSON Schema 2020-12, which the OpenAPI 3.1 document is
//!   written in, counts it as one, so a client generated from the
//!   document (or a JavaScript `JSON.stringify` of a computed value) may
//!   send it. A fraction left (`2.5`) is refused as before. Such a float
//!   form is read as a double: past 2^53 it is the nearest one. JSON bodies
//!   are read through [`Integral`], a deserializer that hands an integer
//!   field such a number as an integer and leaves every other value (a
//!   payload, any JSON) as it was sent; a body's own numbers read by hand
//!   (a lane's limit, a parent id) and query numbers go through [`whole`]
//!   and [`query_number`].
//! - **No integer is silently rounded.** An integer in a body that does
//!   not fit 64 bits (below `-2^63` or above `2^64 - 1`: a 30-digit id in
//!   a payload) would be read as a double and lose digits; the body is
//!   refused instead ([`check_big_integers`]), naming the number and
//!   saying to send it as a string. The rule is on the value, as JSON
//!   Schema's `integer` is: `1e30` is such a whole number too (every
//!   double past 2^53 is whole), so it is refused alike; a number with a
//!   fraction (`1.5e-3`) or within 64 bits is a double as ever.
//! - **A query number is any JSON number** (`?wait=88.2499479254102`,
//!   `?wait=1e1`), nothing else (`NaN`, `inf`, ` 5`, `+5`).

use serde::de::value::{MapDeserializer, SeqDeserializer, StringDeserializer};
use serde::de::{
    self, DeserializeSeed, EnumAccess, IntoDeserializer, Unexpected, VariantAccess, Visitor,
};
use serde::forward_to_deserialize_any;
use serde_json::{Number, Value};

/// The integer a JSON number equals, if it equals one that fits 64 bits
/// (signed or not).
pub(crate) fn whole(n: &Number) -> Option<i128> {
    if let Some(i) = n.as_i64() {
        return Some(i128::from(i));
    }
    if let Some(u) = n.as_u64() {
        return Some(i128::from(u));
    }
    let f = n.as_f64()?;
    // 2^64 is exact as a double; everything below it with no fraction
    // converts exactly.
    let in_range = f.is_finite() && f.fract() == 0.0 && f >= -(2f64.powi(63)) && f < 2f64.powi(64);
    #[expect(clippy::cast_possible_truncation, reason = "checked: integral and in range")]
    in_range.then_some(f as i128)
}

/// The JSON integer `n` (from [`whole`], so it fits 64 bits).
pub(crate) fn integer_value(n: i128) -> Value {
    match (i64::try_from(n), u64::try_from(n)) {
        (Ok(i), _) => Value::from(i),
        (_, Ok(u)) => Value::from(u),
        _ => Value::Null,
    }
}

/// Every integer schema in `doc` (an OpenAPI document, or a piece of one)
/// given the bounds the server reads it with, where it says none: its
/// `format`'s (`int32`), else a signed 64-bit integer's. Without them a
/// client may send an integer the server cannot hold (or that
/// [`check_big_integers`] refuses), which the document would call valid.
/// A schema under `not` is left as it is.
pub(crate) fn bound_integers(doc: &mut Value) {
    match doc {
        Value::Object(map) => {
            let integer = match map.get("type") {
                Some(Value::String(t)) => t == "integer",
                Some(Value::Array(types)) => types.iter().any(|t| t == "integer"),
                _ => false,
            };
            if integer {
                let int32 = map.get("format").is_some_and(|f| f == "int32");
                let (min, max) = if int32 {
                    (i64::from(i32::MIN), i64::from(i32::MAX))
                } else {
                    (i64::MIN, i64::MAX)
                };
                map.entry("minimum").or_insert_with(|| Value::from(min));
                map.entry("maximum").or_insert_with(|| Value::from(max));
            }
            // Under `not` a bound would turn the meaning around.
            map.iter_mut().filter(|(k, _)| *k != "not").for_each(|(_, v)| bound_integers(v));
        }
        Value::Array(items) => items.iter_mut().for_each(bound_integers),
        _ => {}
    }
}

/// A query parameter's number: exactly the JSON number grammar (`5`,
/// `0.5`, `1e1`, `-2`), `None` for anything else.
pub(crate) fn query_number(raw: &str) -> Option<Number> {
    let grammar = raw.bytes().next().is_some_and(|b| b == b'-' || b.is_ascii_digit())
        && raw.bytes().all(|b| b.is_ascii_digit() || matches!(b, b'-' | b'+' | b'.' | b'e' | b'E'));
    if !grammar {
        return None;
    }
    serde_json::from_str::<Number>(raw).ok()
}

/// A query parameter's integer by the rule of integral floats (`20`,
/// `20.0`, `2e1`), if it is one and lies in `min..=max`.
pub(crate) fn query_integer(raw: &str, min: i128, max: i128) -> Option<i128> {
    query_number(raw).as_ref().and_then(whole).filter(|n| (min..=max).contains(n))
}

/// Refuses a body with a whole number outside 64 bits: an integer literal
/// a JSON reader would round to a double, or a double that large (whole,
/// as JSON Schema sees it). The error names it.
/// Strings are skipped (with their escapes); the body need not be valid
/// JSON (the parser says what else is wrong).
pub(crate) fn check_big_integers(body: &[u8]) -> Result<(), String> {
    let mut i = 0;
    let mut in_string = false;
    while i < body.len() {
        let b = body[i];
        if in_string {
            match b {
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        if b == b'"' {
            in_string = true;
            i += 1;
            continue;
        }
        if b == b'-' || b.is_ascii_digit() {
            let start = i;
            i += 1;
            while i < body.len()
                && matches!(body[i], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
            {
                i += 1;
            }
            let token = &body[start..i];
            let text = String::from_utf8_lossy(token);
            let integer = !token.iter().any(|c| matches!(c, b'.' | b'e' | b'E'));
            let too_big = if integer {
                text.parse::<i64>().is_err()
                    && text.parse::<u64>().is_err()
                    && text.bytes().any(|c| c.is_ascii_digit())
            } else {
                // A double past 2^64 is whole (every one past 2^53 is), so
                // JSON Schema calls it an integer out of range, as the
                // document does: refused too, whatever its form.
                text.parse::<f64>().is_ok_and(|f| {
                    f.is_finite()
                        && f.fract() == 0.0
                        && !(-(2f64.powi(63))..2f64.powi(64)).contains(&f)
                })
            };
            if too_big {
                let shown: String = text.chars().take(60).collect();
                return Err(format!(
                    "the number {shown} is a whole number past 64 bits (-9223372036854775808 to 18446744073709551615): it would lose digits; send it as a string"
                ));
            }
            continue;
        }
        i += 1;
    }
    Ok(())
}

/// A parsed JSON body as serde reads it into a request, with an integer
/// field taking an integral float ([`whole`]); any other value is read as
/// `serde_json::Value` reads it.
pub(crate) struct Integral(pub Value);

impl<'de> IntoDeserializer<'de, serde_json::Error> for Integral {
    type Deserializer = Integral;

    fn into_deserializer(self) -> Integral {
        self
    }
}

/// An integer method: an integral float is visited as the integer it is;
/// anything else as `Value` has it (the visitor's own error for a
/// fraction, a string, …).
macro_rules! integer {
    ($($method:ident)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, serde_json::Error> {
            match &self.0 {
                Value::Number(n) => match whole(n) {
                    Some(i) if i < 0 => visitor.visit_i64(i64::try_from(i).map_err(de::Error::custom)?),
                    Some(i) => visitor.visit_u64(u64::try_from(i).map_err(de::Error::custom)?),
                    None => self.0.deserialize_any(visitor),
                },
                _ => self.deserialize_any(visitor),
            }
        }
    )*};
}

impl<'de> de::Deserializer<'de> for Integral {
    type Error = serde_json::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, serde_json::Error> {
        match self.0 {
            Value::Array(items) => {
                let mut seq = SeqDeserializer::new(items.into_iter().map(Integral));
                let value = visitor.visit_seq(&mut seq)?;
                seq.end()?;
                Ok(value)
            }
            Value::Object(map) => {
                let mut entries =
                    MapDeserializer::new(map.into_iter().map(|(k, v)| (k, Integral(v))));
                let value = visitor.visit_map(&mut entries)?;
                entries.end()?;
                Ok(value)
            }
            scalar => de::Deserializer::deserialize_any(scalar, visitor),
        }
    }

    integer! {
        deserialize_i8 deserialize_i16 deserialize_i32 deserialize_i64 deserialize_i128
        deserialize_u8 deserialize_u16 deserialize_u32 deserialize_u64 deserialize_u128
    }

    fn deserialize_option<V: Visitor<'de>>(
        self,
        visitor: V,
    ) -> Result<V::Value, serde_json::Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, serde_json::Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, serde_json::Error> {
        match self.0 {
            Value::String(variant) => {
                let unit: StringDeserializer<serde_json::Error> = variant.into_deserializer();
                visitor.visit_enum(unit)
            }
            Value::Object(map) if map.len() == 1 => {
                let mut entries = map.into_iter();
                let Some((variant, value)) = entries.next() else {
                    return Err(de::Error::custom("an enum object has one key"));
                };
                visitor.visit_enum(Enum { variant, value: Integral(value) })
            }
            other => other.deserialize_enum(name, variants, visitor),
        }
    }

    /// A struct is an object: the array form serde's derive also takes
    /// (`[null, null]` for a body with two fields) is not a form of the
    /// API's bodies.
    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, serde_json::Error> {
        match self.0 {
            Value::Object(_) => self.deserialize_any(visitor),
            Value::Array(_) => Err(de::Error::invalid_type(Unexpected::Seq, &visitor)),
            Value::Null => Err(de::Error::invalid_type(Unexpected::Unit, &visitor)),
            Value::Bool(b) => Err(de::Error::invalid_type(Unexpected::Bool(b), &visitor)),
            Value::Number(_) => Err(de::Error::invalid_type(Unexpected::Other("number"), &visitor)),
            Value::String(ref text) => {
                Err(de::Error::invalid_type(Unexpected::Str(text), &visitor))
            }
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(
        self,
        visitor: V,
    ) -> Result<V::Value, serde_json::Error> {
        visitor.visit_unit()
    }

    forward_to_deserialize_any! {
        bool f32 f64 char str string bytes byte_buf unit unit_struct seq tuple
        tuple_struct map identifier
    }
}

/// An externally tagged variant: `{"every": 60}`.
struct Enum {
    variant: String,
    value: Integral,
}

impl<'de> EnumAccess<'de> for Enum {
    type Error = serde_json::Error;
    type Variant = Integral;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Integral), serde_json::Error> {
        let name: StringDeserializer<serde_json::Error> = self.variant.into_deserializer();
        Ok((seed.deserialize(name)?, self.value))
    }
}

impl<'de> VariantAccess<'de> for Integral {
    type Error = serde_json::Error;

    fn unit_variant(self) -> Result<(), serde_json::Error> {
        match self.0 {
            Value::Null => Ok(()),
            _ => Err(de::Error::invalid_type(Unexpected::Map, &"a unit variant")),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(
        self,
        seed: T,
    ) -> Result<T::Value, serde_json::Error> {
        seed.deserialize(self)
    }

    fn tuple_variant<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, serde_json::Error> {
        de::Deserializer::deserialize_any(self, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, serde_json::Error> {
        de::Deserializer::deserialize_any(self, visitor)
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;
    use serde_json::json;

    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Request {
        limit: u32,
        #[serde(default)]
        priority: Option<i32>,
        payload: Value,
        #[serde(default)]
        spec: Option<Spec>,
        #[serde(default)]
        ids: Vec<i64>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "snake_case")]
    enum Spec {
        Every(u64),
        Cron(String),
    }

    fn read(body: Value) -> Result<Request, String> {
        serde_path_to_error::deserialize(Integral(body)).map_err(|e| e.to_string())
    }

    #[test]
    fn an_integral_float_is_the_integer_where_one_is_asked_and_kept_elsewhere() {
        let body = json!({"limit": 2.0, "priority": -3.0, "payload": {"x": 2.0, "n": 7},
                          "spec": {"every": 6e1}, "ids": [1.0, 2]});
        let request = read(body).unwrap();
        assert_eq!(request.limit, 2);
        assert_eq!(request.priority, Some(-3));
        assert_eq!(request.spec, Some(Spec::Every(60)));
        assert_eq!(request.ids, vec![1, 2]);
        // The payload is any JSON: kept as sent.
        assert_eq!(request.payload.to_string(), r#"{"n":7,"x":2.0}"#);
        let cron = read(json!({"limit": 1, "payload": null, "spec": {"cron": "* * * * *"}}));
        assert_eq!(cron.unwrap().spec, Some(Spec::Cron("* * * * *".to_owned())));
    }

    #[test]
    fn a_fraction_or_a_wrong_type_is_still_refused_by_name() {
        let e = read(json!({"limit": 2.5, "payload": 1})).unwrap_err();
        assert!(e.starts_with("limit: invalid type: floating point `2.5`"), "{e}");
        let e = read(json!({"limit": -1.0, "payload": 1})).unwrap_err();
        assert!(e.starts_with("limit: invalid value: integer `-1`"), "{e}");
        let e = read(json!({"limit": 5e9, "payload": 1})).unwrap_err();
        assert!(e.starts_with("limit: invalid value: integer `5000000000`"), "{e}");
        let e = read(json!({"limit": "2", "payload": 1})).unwrap_err();
        assert!(e.starts_with("limit: invalid type: string"), "{e}");
        let e = read(json!({"limit": 1, "payload": 1, "extra": 1})).unwrap_err();
        assert!(e.contains("unknown field `extra`"), "{e}");
        let e = read(json!({"payload": 1})).unwrap_err();
        assert!(e.contains("missing field `limit`"), "{e}");
        let e = read(json!({"limit": 1, "payload": 1, "spec": {"hourly": 1}})).unwrap_err();
        assert!(e.contains("unknown variant `hourly`"), "{e}");
        // serde's derive would take a struct's fields in order from an array.
        let e = read(json!([1, null, null, null, []])).unwrap_err();
        assert!(e.starts_with("invalid type: sequence, expected struct Request"), "{e}");
    }

    #[test]
    fn whole_numbers() {
        let n = |v: Value| match v {
            Value::Number(n) => n,
            _ => unreachable!(),
        };
        assert_eq!(whole(&n(json!(3))), Some(3));
        assert_eq!(whole(&n(json!(-3.0))), Some(-3));
        assert_eq!(whole(&n(json!(u64::MAX))), Some(i128::from(u64::MAX)));
        assert_eq!(whole(&n(json!(2.5))), None);
        assert_eq!(whole(&n(json!(1e20))), None);
        assert_eq!(whole(&n(json!(-1e19))), None);
    }

    #[test]
    fn query_numbers_are_json_numbers() {
        for good in
            ["0", "5", "0.5", "88.2499479254102", "1e1", "1E+1", "1.1125369292536007e-308", "-2"]
        {
            assert!(query_number(good).is_some(), "{good}");
        }
        for bad in ["", " 5", "5 ", "+5", "NaN", "inf", "0x10", "1.", ".5", "05", "1e", "--1"] {
            assert!(query_number(bad).is_none(), "{bad}");
        }
        assert_eq!(query_integer("20.0", 1, 500), Some(20));
        assert_eq!(query_integer("2e1", 1, 500), Some(20));
        assert_eq!(query_integer("0", 1, 500), None);
        assert_eq!(query_integer("2.5", 1, 500), None);
    }

    #[test]
    fn an_integer_past_64_bits_is_named_not_rounded() {
        assert!(
            check_big_integers(br#"{"id": 123456789012345678901234567890}"#).unwrap_err().contains(
                "the number 123456789012345678901234567890 is a whole number past 64 bits"
            )
        );
        assert!(check_big_integers(b"[-9223372036854775809]").is_err());
        assert!(check_big_integers(b"[1e30]").is_err());
        assert!(check_big_integers(b"[-1.2e300]").is_err());
        for fine in [
            r#"{"id": 18446744073709551615, "n": -9223372036854775808}"#,
            r#"{"f": 1.23456789012345678901234567890, "e": 1e19, "s": 5e-324, "m": -1e-300}"#,
            r#"{"s": "123456789012345678901234567890", "t": "a \" 123456789012345678901234567890"}"#,
        ] {
            assert_eq!(check_big_integers(fine.as_bytes()), Ok(()), "{fine}");
        }
    }
}
