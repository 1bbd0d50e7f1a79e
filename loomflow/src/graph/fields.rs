//! The top-level field names of a state type, read from its `Deserialize` impl without a
//! value.
//!
//! `#[derive(Deserialize)]` on a struct calls `deserialize_struct` with the names of its
//! fields as serialized (after `rename`/`rename_all`): exactly the keys that merging and
//! reducers work on. A deserializer that records that list and then stops gives the names
//! at compile time. States whose impl does not name its fields (maps, `Value`, enums,
//! structs with a flattened field, which deserialize as maps) give `None`.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::forward_to_deserialize_any;

/// The serialized names of `S`'s top-level fields, when its `Deserialize` names them.
pub(crate) fn state_fields<'de, S: de::Deserialize<'de>>() -> Option<&'static [&'static str]> {
    let mut found = None;
    // The probe always stops with an error: only the recorded names matter.
    let _ = S::deserialize(Probe { found: &mut found });
    found
}

/// A deserializer that records the field names a struct asks for, then stops.
struct Probe<'a> {
    found: &'a mut Option<&'static [&'static str]>,
}

/// How the probe stops.
#[derive(Debug)]
struct Stop;

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("field probe stopped")
    }
}

impl std::error::Error for Stop {}

impl de::Error for Stop {
    fn custom<T: fmt::Display>(_: T) -> Self {
        Self
    }
}

impl<'de> Deserializer<'de> for Probe<'_> {
    type Error = Stop;

    fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
        Err(Stop)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        fields: &'static [&'static str],
        _: V,
    ) -> Result<V::Value, Stop> {
        *self.found = Some(fields);
        Err(Stop)
    }

    /// A newtype's fields are its inner type's.
    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Stop> {
        visitor.visit_newtype_struct(self)
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use serde::Deserialize;

    use super::state_fields;

    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    struct Doc {
        log_lines: Vec<String>,
        #[serde(rename = "best")]
        top: u32,
        #[serde(skip)]
        cache: u8,
    }

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Wrapper(Doc);

    #[derive(Deserialize)]
    #[allow(dead_code)]
    struct Flat {
        #[serde(flatten)]
        doc: Doc,
    }

    #[test]
    fn derived_structs_name_their_serialized_fields() {
        assert_eq!(state_fields::<Doc>(), Some(&["logLines", "best"][..]));
        assert_eq!(state_fields::<Wrapper>(), Some(&["logLines", "best"][..]));
        assert_eq!(state_fields::<Box<Doc>>(), Some(&["logLines", "best"][..]));
    }

    #[test]
    fn other_states_name_none() {
        assert_eq!(state_fields::<u64>(), None);
        assert_eq!(state_fields::<String>(), None);
        assert_eq!(state_fields::<HashMap<String, u32>>(), None);
        assert_eq!(state_fields::<serde_json::Value>(), None);
        assert_eq!(state_fields::<Flat>(), None);
        assert_eq!(state_fields::<Option<Doc>>(), None);
    }
}
