//! JSON as deep as loomflow writes it, read back whole.
//!
//! serde_json stops reading at 128 levels of nesting, but writes any depth. A state nested
//! deeper than that (a parse tree, a nested document) was written to SQLite or PostgreSQL and
//! then could not be read: its run could not resume, and its thread's checkpoints could not
//! be listed. Here both sides share one bound, [`MAX_DEPTH`]: a write that would nest deeper
//! fails, naming what it wrote, before anything reaches the store; a read takes anything up
//! to it.
//!
//! The bound keeps a read inside a thread's stack: serde_json reads nested values by
//! recursion, and past the bound it would no longer check.

use std::io;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::ser::{CompactFormatter, Formatter};

/// How deeply arrays and objects may nest in JSON that loomflow writes and reads back. A
/// debug build reads about twice this on a 2 MiB stack, a task's default.
pub(crate) const MAX_DEPTH: usize = 512;

/// `value` as compact JSON text; an error if it nests deeper than [`MAX_DEPTH`].
pub(crate) fn to_string(value: &impl Serialize) -> serde_json::Result<String> {
    let mut text = Vec::with_capacity(128);
    to_writer(&mut text, value)?;
    // serde_json writes UTF-8 only.
    String::from_utf8(text).map_err(serde::ser::Error::custom)
}

/// Writes `value` to `writer` as compact JSON; an error if it nests deeper than
/// [`MAX_DEPTH`] (part of it may have been written).
fn to_writer(writer: impl io::Write, value: &impl Serialize) -> serde_json::Result<()> {
    let mut bounded = Bounded::default();
    value.serialize(&mut serde_json::Serializer::with_formatter(
        writer,
        &mut bounded,
    ))
}

/// Reads `text` as a `T`, nested up to [`MAX_DEPTH`] levels.
pub(crate) fn from_str<T: DeserializeOwned + Send>(text: &str) -> serde_json::Result<T> {
    from_slice(text.as_bytes())
}

/// [`from_str`] of bytes.
pub(crate) fn from_slice<T: DeserializeOwned + Send>(bytes: &[u8]) -> serde_json::Result<T> {
    serde_json::from_slice(bytes).or_else(|error| read_again(bytes, error))
}

/// After serde_json failed to read `bytes` with `error`: reads them again without its
/// recursion limit if they nest past it (and no deeper than [`MAX_DEPTH`]); otherwise the
/// error stands. Shallow text, the common case, is read once and never scanned.
///
/// The deep read runs on a thread of its own with a large stack: a type with many fields a
/// level (or one serde reads through a buffer: a tagged or untagged enum, a flattened
/// struct) takes far more stack a level than a JSON value, more than a task's thread has.
pub(crate) fn read_again<T: DeserializeOwned + Send>(
    bytes: &[u8],
    error: serde_json::Error,
) -> serde_json::Result<T> {
    let deepest = depth(bytes);
    if deepest < SERDE_JSON_DEPTH {
        return Err(error);
    }
    if deepest > MAX_DEPTH {
        return Err(too_deep());
    }
    let read = || {
        let mut deserializer = serde_json::Deserializer::from_slice(bytes);
        deserializer.disable_recursion_limit();
        let value = T::deserialize(&mut deserializer)?;
        deserializer.end()?;
        Ok(value)
    };
    std::thread::scope(|scope| {
        let reader = std::thread::Builder::new()
            .name("loomflow-json".to_owned())
            .stack_size(DEEP_READ_STACK)
            .spawn_scoped(scope, read)
            .map_err(serde::de::Error::custom)?;
        reader.join().unwrap_or_else(|_| {
            Err(serde::de::Error::custom(
                "reading deeply nested JSON panicked",
            ))
        })
    })
}

/// The stack of a deep read: reserved, not used, until a read goes that deep.
const DEEP_READ_STACK: usize = 64 * 1024 * 1024;

/// Below its recursion limit (128 levels) with some room: text that failed to read and nests
/// less than this failed for another reason, and is not read again.
const SERDE_JSON_DEPTH: usize = 120;

/// How deeply arrays and objects nest in `bytes`, read as JSON: brackets inside strings do
/// not count. Text that is not JSON gets some count, and the parser's error after.
fn depth(bytes: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &byte in bytes {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Whether `value`, kept `wrapping` levels inside a larger text (a payload inside a
/// checkpoint's body), stays within [`MAX_DEPTH`].
pub(crate) fn value_fits(value: &serde_json::Value, wrapping: usize) -> bool {
    // `fits` does not count an empty array or object as a level: one to spare, so a value
    // that ends in a scalar may nest one level less than the bound allows.
    let levels = MAX_DEPTH.saturating_sub(wrapping + 1);
    let mut room = usize::MAX;
    crate::json_text::fits(value, levels, &mut room)
}

/// The error of a value nested past [`MAX_DEPTH`].
pub(crate) fn too_deep() -> serde_json::Error {
    serde::de::Error::custom(too_deep_message())
}

fn too_deep_message() -> String {
    format!("nests arrays and objects deeper than {MAX_DEPTH} levels")
}

/// serde_json's compact output, counting how deeply it nests.
#[derive(Default)]
struct Bounded {
    depth: usize,
}

impl Bounded {
    fn deeper(&mut self) -> io::Result<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(io::Error::other(too_deep_message()));
        }
        Ok(())
    }
}

impl Formatter for &mut Bounded {
    fn begin_array<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.deeper()?;
        CompactFormatter.begin_array(writer)
    }

    fn end_array<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.depth -= 1;
        CompactFormatter.end_array(writer)
    }

    fn begin_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.deeper()?;
        CompactFormatter.begin_object(writer)
    }

    fn end_object<W: ?Sized + io::Write>(&mut self, writer: &mut W) -> io::Result<()> {
        self.depth -= 1;
        CompactFormatter.end_object(writer)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::{Value, json};

    use super::{MAX_DEPTH, depth, from_str, to_string, value_fits};

    fn nested(levels: usize) -> Value {
        let mut value = json!("[{\"");
        for level in 0..levels {
            value = match level % 2 {
                0 => json!([value]),
                _ => json!({ "k": value }),
            };
        }
        value
    }

    #[test]
    fn what_is_written_up_to_the_bound_reads_back_as_it_was() {
        for levels in [0, 1, 127, 128, 300, MAX_DEPTH] {
            let value = nested(levels);
            let text = to_string(&value).unwrap();
            assert_eq!(
                text,
                serde_json::to_string(&value).unwrap(),
                "compact, as before"
            );
            assert_eq!(
                depth(text.as_bytes()),
                levels,
                "brackets in strings do not count"
            );
            assert_eq!(from_str::<Value>(&text).unwrap(), value, "{levels} levels");
        }
    }

    #[test]
    fn past_the_bound_a_write_and_a_read_fail_naming_it() {
        let value = nested(MAX_DEPTH + 1);
        let error = to_string(&value).unwrap_err().to_string();
        assert!(error.contains("deeper than 512 levels"), "{error}");
        let text = serde_json::to_string(&value).unwrap();
        let error = from_str::<Value>(&text).unwrap_err().to_string();
        assert!(error.contains("deeper than 512 levels"), "{error}");
    }

    #[test]
    fn a_value_that_fits_its_wrapping_is_written_whole() {
        for wrapping in [0, 3] {
            let fitting = nested(MAX_DEPTH - wrapping - 1);
            assert!(value_fits(&fitting, wrapping));
            assert!(!value_fits(&nested(MAX_DEPTH - wrapping), wrapping));
            let wrapped = (0..wrapping).fold(fitting, |inner, _| json!([inner]));
            assert!(to_string(&wrapped).is_ok(), "{wrapping} levels around it");
        }
        // An empty array innermost is no level to `fits`: still inside the bound.
        let empty = (1..MAX_DEPTH).fold(json!([]), |inner, _| json!([inner]));
        assert!(value_fits(&empty, 0));
        assert_eq!(depth(to_string(&empty).unwrap().as_bytes()), MAX_DEPTH);
    }

    /// Many fields a level: serde keeps room for each while it reads the level below.
    #[derive(Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
    struct Wide {
        #[serde(default)]
        f0: Option<[u64; 8]>,
        #[serde(default)]
        f1: Option<[u64; 8]>,
        #[serde(default)]
        f2: Option<[u64; 8]>,
        #[serde(default)]
        f3: Option<[u64; 8]>,
        #[serde(default)]
        f4: Option<[u64; 8]>,
        #[serde(default)]
        f5: Option<[u64; 8]>,
        #[serde(default)]
        f6: Option<[u64; 8]>,
        #[serde(default)]
        f7: Option<[u64; 8]>,
        #[serde(default)]
        f8: Option<[u64; 8]>,
        #[serde(default)]
        f9: Option<[u64; 8]>,
        #[serde(default)]
        child: Option<Box<Wide>>,
    }

    #[test]
    fn a_deep_value_of_a_wide_type_reads_back_on_a_small_stack() {
        let wide = (1..MAX_DEPTH).fold(Wide::default(), |child, _| Wide {
            child: Some(Box::new(child)),
            ..Wide::default()
        });
        let text = to_string(&wide).unwrap();
        // A thread with a task's stack, which the read would overflow in line. What it
        // reads is walked and dropped a level at a time: comparing or dropping it whole
        // takes a stack of its own.
        let read = std::thread::Builder::new()
            .stack_size(2 * 1024 * 1024)
            .spawn(move || {
                let mut next = Some(Box::new(from_str::<Wide>(&text).unwrap()));
                let mut levels = 0;
                while let Some(mut level) = next {
                    levels += 1;
                    next = level.child.take();
                }
                levels
            })
            .unwrap();
        assert_eq!(read.join().unwrap(), MAX_DEPTH);
        let mut next = Some(Box::new(wide));
        while let Some(mut level) = next {
            next = level.child.take();
        }
    }

    #[test]
    fn text_that_is_not_json_is_still_an_error() {
        assert!(from_str::<Value>("[1,").is_err());
        assert!(from_str::<Value>("[1] 2").is_err());
        assert!(from_str::<Value>("\"\\\"[\"").is_ok());
    }
}
