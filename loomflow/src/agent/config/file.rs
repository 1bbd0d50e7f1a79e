//! The file's shape: one serde type per table, each with `deny_unknown_fields`.
//!
//! Unknown keys are found (all of them, with suggestions) by [`super::keys`] before these
//! types see the document; `deny_unknown_fields` stays as the backstop. Values whose checks
//! are collected rather than stopping at the first (a zero `max_turns`, a bad permission, a
//! tool name) are kept [`Spanned`] so their problems can say where they are.

use std::collections::BTreeMap;
use std::fmt;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use toml::Spanned;

/// The whole file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct File {
    pub(super) name: Option<Spanned<String>>,
    pub(super) instructions: Option<String>,
    pub(super) model: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) tools: Vec<Spanned<String>>,
    pub(super) max_turns: Option<Spanned<u32>>,
    pub(super) max_schema_retries: Option<u32>,
    pub(super) timeout: Option<Spanned<Timeout>>,
    pub(super) temperature: Option<Spanned<f32>>,
    pub(super) max_tokens: Option<Spanned<u32>>,
    pub(super) durable_approvals: Option<bool>,
    pub(super) record_content: Option<bool>,
    pub(super) budget: Option<BudgetTable>,
    #[serde(default)]
    pub(super) prices: BTreeMap<String, Spanned<Price>>,
    pub(super) permissions: Option<PermissionsTable>,
    pub(super) context: Option<ContextTable>,
}

/// `[context]`: the agent's [`ContextPolicy`](crate::agent::ContextPolicy).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ContextTable {
    pub(super) strategy: Spanned<String>,
    pub(super) above_tokens: Option<u64>,
    pub(super) keep_recent: Option<Spanned<usize>>,
}

/// `[budget]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct BudgetTable {
    pub(super) max_tokens: Option<Spanned<u64>>,
    pub(super) max_cost_usd: Option<Spanned<f64>>,
    pub(super) max_tokens_per_user: Option<Spanned<u64>>,
    pub(super) max_cost_usd_per_user: Option<Spanned<f64>>,
    pub(super) max_wall_clock: Option<Spanned<Timeout>>,
    pub(super) prices_per_million: Option<Spanned<Price>>,
}

/// `[permissions]`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct PermissionsTable {
    pub(super) default: Option<Spanned<String>>,
    pub(super) destructive: Option<Spanned<String>>,
    #[serde(default)]
    pub(super) tools: BTreeMap<String, Spanned<String>>,
}

/// The keys of a price given as a table.
pub(super) const PRICE_FIELDS: &[&str] = &["input", "output"];

/// US dollars per million input and output tokens: `[2.5, 10.0]` or
/// `{ input = 2.5, output = 10.0 }`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Price {
    pub(super) input: f64,
    pub(super) output: f64,
}

impl<'de> Deserialize<'de> for Price {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(PriceVisitor)
    }
}

struct PriceVisitor;

impl<'de> Visitor<'de> for PriceVisitor {
    type Value = Price;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "[input, output] in US dollars per million tokens, or { input = .., output = .. }",
        )
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Price, A::Error> {
        let input = seq
            .next_element::<f64>()?
            .ok_or_else(|| de::Error::invalid_length(0, &self))?;
        let output = seq
            .next_element::<f64>()?
            .ok_or_else(|| de::Error::invalid_length(1, &self))?;
        let mut length = 2;
        while seq.next_element::<IgnoredAny>()?.is_some() {
            length += 1;
        }
        if length > 2 {
            return Err(de::Error::invalid_length(length, &self));
        }
        Ok(Price { input, output })
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Price, A::Error> {
        let (mut input, mut output) = (None, None);
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "input" => input = Some(map.next_value::<f64>()?),
                "output" => output = Some(map.next_value::<f64>()?),
                _ => return Err(de::Error::unknown_field(&key, PRICE_FIELDS)),
            }
        }
        Ok(Price {
            input: input.ok_or_else(|| de::Error::missing_field("input"))?,
            output: output.ok_or_else(|| de::Error::missing_field("output"))?,
        })
    }
}

/// `timeout`: seconds (`30`, `2.5`) or a duration string (`"30s"`, `"2m"`, `"1m30s"`).
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Timeout {
    Seconds(f64),
    Text(String),
}

impl<'de> Deserialize<'de> for Timeout {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(TimeoutVisitor)
    }
}

struct TimeoutVisitor;

impl Visitor<'_> for TimeoutVisitor {
    type Value = Timeout;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("seconds (30, 2.5) or a duration (\"30s\", \"2m\", \"1m30s\", \"500ms\")")
    }

    #[allow(clippy::cast_precision_loss)] // a timeout in seconds is far below 2^52
    fn visit_i64<E: de::Error>(self, seconds: i64) -> Result<Timeout, E> {
        Ok(Timeout::Seconds(seconds as f64))
    }

    #[allow(clippy::cast_precision_loss)] // a timeout in seconds is far below 2^52
    fn visit_u64<E: de::Error>(self, seconds: u64) -> Result<Timeout, E> {
        Ok(Timeout::Seconds(seconds as f64))
    }

    fn visit_f64<E: de::Error>(self, seconds: f64) -> Result<Timeout, E> {
        Ok(Timeout::Seconds(seconds))
    }

    fn visit_str<E: de::Error>(self, text: &str) -> Result<Timeout, E> {
        Ok(Timeout::Text(text.to_owned()))
    }
}

/// The field names of a struct, as its derived `Deserialize` knows them: the one list the
/// key check and serde share.
pub(super) fn fields_of<T: for<'de> Deserialize<'de>>() -> &'static [&'static str] {
    let mut probe = Probe(&[]);
    // The probe always refuses: all it wants is the list serde hands over.
    let _ = T::deserialize(&mut probe);
    probe.0
}

/// A deserializer that records the field list a struct asks for, then fails.
struct Probe(&'static [&'static str]);

impl<'de> Deserializer<'de> for &mut Probe {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("not a struct"))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Self::Error> {
        self.0 = fields;
        Err(de::Error::custom("probed"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}
