//! The checks of one value's size against a schema: a number's bounds and its integer
//! `format`, a text's or a list's length.

use std::cmp::Ordering;

use serde_json::Value;

use super::validate::at;

/// 2^127: integral floats below it are `i128`s exactly.
const I128_BOUND: f64 = 170_141_183_460_469_231_731_687_303_715_884_105_728.0;

/// `minimum`/`maximum` and `exclusiveMinimum`/`exclusiveMaximum`: numbers (draft 6 on), or
/// booleans that make `minimum`/`maximum` exclusive (draft 4, as older servers write them).
pub(super) fn check_bounds(
    map: &serde_json::Map<String, Value>,
    value: &Value,
    path: &str,
) -> Result<(), String> {
    let Value::Number(number) = value else {
        return Ok(());
    };
    let flagged = |key: &str| map.get(key) == Some(&Value::Bool(true));
    let limits = [
        ("exclusiveMinimum", true, false),
        ("exclusiveMaximum", false, false),
        ("minimum", true, flagged("exclusiveMinimum")),
        ("maximum", false, flagged("exclusiveMaximum")),
    ];
    for (key, lower, exclusive) in limits {
        let Some(Value::Number(limit)) = map.get(key) else {
            continue;
        };
        let Some(order) = compare(number, limit) else {
            continue;
        };
        let exclusive = exclusive || key.starts_with("exclusive");
        let (fits, sign) = match (lower, exclusive) {
            (true, true) => (order.is_gt(), ">"),
            (true, false) => (order.is_ge(), ">="),
            (false, true) => (order.is_lt(), "<"),
            (false, false) => (order.is_le(), "<="),
        };
        if !fits {
            return Err(format!(
                "{}: expected a number {sign} {limit}, got {value}",
                at(path)
            ));
        }
    }
    Ok(())
}

/// How `number` compares with `limit`: exactly for integers (and integral floats), which as
/// floats lose their last digits past 2^53 (`9007199254740993` read as `…992`). An integer
/// against a fraction compares right as floats: rounding keeps it on its side of the
/// fraction.
fn compare(number: &serde_json::Number, limit: &serde_json::Number) -> Option<Ordering> {
    match (integral(number), integral(limit)) {
        (Some(number), Some(limit)) => Some(number.cmp(&limit)),
        _ => number.as_f64()?.partial_cmp(&limit.as_f64()?),
    }
}

/// An integer outside the range its `format` names (schemars writes `uint8` for a `u8`, and
/// so on), reported before decoding so that the model is told which field is out of range.
pub(super) fn check_integer_format(
    map: &serde_json::Map<String, Value>,
    value: &Value,
    path: &str,
) -> Result<(), String> {
    let (Value::Number(number), Some(format)) = (value, map.get("format").and_then(Value::as_str))
    else {
        return Ok(());
    };
    let Some((low, high)) = integer_range(format) else {
        return Ok(());
    };
    let fits = match integral(number) {
        Some(n) => (low..=high).contains(&n),
        // A fraction is the type check's to refuse; an integral float past `i128` is
        // out of every range.
        None => number.as_f64().is_none_or(|float| float.fract() != 0.0),
    };
    match fits {
        true => Ok(()),
        false => Err(format!(
            "{}: expected an integer from {low} to {high} ({format}), got {value}",
            at(path)
        )),
    }
}

/// The range of an integer `format`; 128-bit ones are left to the decoder (JSON numbers
/// read by serde_json never exceed 64 bits as integers).
pub(super) fn integer_range(format: &str) -> Option<(i128, i128)> {
    Some(match format {
        "int8" => (i8::MIN.into(), i8::MAX.into()),
        "int16" => (i16::MIN.into(), i16::MAX.into()),
        "int32" => (i32::MIN.into(), i32::MAX.into()),
        "int64" | "int" => (i64::MIN.into(), i64::MAX.into()),
        "uint8" => (0, u8::MAX.into()),
        "uint16" => (0, u16::MAX.into()),
        "uint32" => (0, u32::MAX.into()),
        "uint64" | "uint" => (0, u64::MAX.into()),
        _ => return None,
    })
}

/// The number as an integer when it is one, including an integral float (`3.0`, `1e20`);
/// `None` for a fraction, and for an integral float past `i128` (2^127), which no integer
/// `format` holds.
pub(super) fn integral(number: &serde_json::Number) -> Option<i128> {
    if let Some(n) = number.as_i64() {
        return Some(n.into());
    }
    if let Some(n) = number.as_u64() {
        return Some(n.into());
    }
    let float = number.as_f64()?;
    // Below 2^127 an integral float converts exactly; past it the cast would saturate, and
    // two such floats would compare equal.
    #[allow(clippy::cast_possible_truncation)]
    (float.fract() == 0.0 && float.abs() < I128_BOUND).then_some(float as i128)
}

/// `minLength`/`maxLength` (in characters) and `minItems`/`maxItems`.
pub(super) fn check_lengths(
    map: &serde_json::Map<String, Value>,
    value: &Value,
    path: &str,
) -> Result<(), String> {
    let (len, unit, what) = match value {
        Value::String(text) => (
            text.chars().count(),
            "character",
            ("minLength", "maxLength"),
        ),
        Value::Array(items) => (items.len(), "item", ("minItems", "maxItems")),
        _ => return Ok(()),
    };
    let count = |n: u64| {
        if n == 1 {
            format!("1 {unit}")
        } else {
            format!("{n} {unit}s")
        }
    };
    let len = len as u64;
    if let Some(min) = map.get(what.0).and_then(Value::as_u64)
        && len < min
    {
        return Err(format!(
            "{}: expected at least {}, got {len}",
            at(path),
            count(min)
        ));
    }
    if let Some(max) = map.get(what.1).and_then(Value::as_u64)
        && len > max
    {
        return Err(format!(
            "{}: expected at most {}, got {len}",
            at(path),
            count(max)
        ));
    }
    Ok(())
}
