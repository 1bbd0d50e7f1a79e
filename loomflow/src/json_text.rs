//! JSON written to a buffer each thread keeps, rather than to a new one each time: for the
//! small texts a run writes on its way (a suspended step's payloads, an audit entry's
//! detail) and the state a resume reads back through JSON.

use std::cell::RefCell;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

thread_local! {
    static BUFFER: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Past this, a buffer is let go after use rather than kept for the next text.
const KEPT: usize = 64 * 1024;

/// How deeply a value kept as text may nest: well inside the 128 levels serde_json reads back
/// in one pass, so that reading it never takes the deep path of [`crate::json_depth`].
pub(crate) const TEXT_DEPTH: usize = 100;

/// Whether `value` nests arrays and objects at most `levels` deep and its text takes at
/// most `room` bytes (`room` is what is left of it after; `usize::MAX` for no bound);
/// looks no further than that.
pub(crate) fn fits(value: &Value, levels: usize, room: &mut usize) -> bool {
    let size = match value {
        Value::Array(_) => 2,
        Value::Object(fields) => 2 + fields.keys().map(|key| key.len() + 4).sum::<usize>(),
        // Quotes and a few escapes; a number's digits, `false`: a few bytes more.
        Value::String(text) => text.len() + 4,
        _ => 24,
    };
    let Some(left) = room.checked_sub(size) else {
        return false;
    };
    *room = left;
    match value {
        Value::Array(items) => {
            items.is_empty() || (levels > 0 && items.iter().all(|v| fits(v, levels - 1, room)))
        }
        Value::Object(fields) => {
            fields.is_empty() || (levels > 0 && fields.values().all(|v| fits(v, levels - 1, room)))
        }
        _ => true,
    }
}

/// Runs `f` on this thread's buffer, emptied; on a buffer of its own when the thread's is in
/// use (a `Serialize` that writes JSON itself).
fn with_buffer<T>(f: impl FnOnce(&mut Vec<u8>) -> T) -> T {
    BUFFER.with(|buffer| match buffer.try_borrow_mut() {
        Ok(mut bytes) => {
            bytes.clear();
            let done = f(&mut bytes);
            if bytes.capacity() > KEPT {
                *bytes = Vec::new();
            }
            done
        }
        Err(_) => f(&mut Vec::new()),
    })
}

/// `value` as compact JSON text, in an allocation of its size.
pub(crate) fn boxed(value: &impl Serialize) -> serde_json::Result<Box<str>> {
    with_buffer(|bytes| {
        serde_json::to_writer(&mut *bytes, value)?;
        // serde_json writes UTF-8 only: not reached otherwise.
        let text = std::str::from_utf8(bytes).map_err(serde::ser::Error::custom)?;
        Ok(Box::from(text))
    })
}

/// `value` written as JSON and read back, as a store that keeps JSON hands it back: nested up
/// to [`MAX_DEPTH`](crate::json_depth::MAX_DEPTH) levels, as such a store takes it.
pub(crate) fn through<T: Serialize + DeserializeOwned + Send>(value: &T) -> serde_json::Result<T> {
    with_buffer(|bytes| {
        serde_json::to_writer(&mut *bytes, value)?;
        serde_json::from_slice(bytes).or_else(|error| crate::json_depth::read_again(bytes, error))
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    #[test]
    fn texts_are_what_serde_json_writes() {
        let value = json!({"node": "ask", "value": ["é\n", 1.5, null, {"deep": [true]}]});
        assert_eq!(
            &*boxed(&value).unwrap(),
            serde_json::to_string(&value).unwrap()
        );
        assert_eq!(through(&value).unwrap(), value);
        // A text that outgrows what a thread keeps is written whole all the same.
        let large = json!("x".repeat(KEPT * 2));
        assert_eq!(boxed(&large).unwrap().len(), KEPT * 2 + 2);
        assert_eq!(&*boxed(&json!(1)).unwrap(), "1");
    }

    /// A `Serialize` that writes JSON of its own while it is written.
    struct Nested;

    impl Serialize for Nested {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let inner = boxed(&json!({"inner": 1})).map_err(serde::ser::Error::custom)?;
            s.serialize_str(&inner)
        }
    }

    #[test]
    fn a_text_written_while_another_is_gets_a_buffer_of_its_own() {
        assert_eq!(&*boxed(&Nested).unwrap(), r#""{\"inner\":1}""#);
    }
}
