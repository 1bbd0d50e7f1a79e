//! FNV-1a, 64 bits: a hash of bytes that is the same in every build, on every platform and
//! under every Rust version, for prints that are stored and compared later. `std`'s hashers
//! promise none of that (nor do the `Hash` impls, which decide what bytes a value feeds).

/// An FNV-1a hash being fed bytes.
pub(crate) struct StableHash(u64);

impl StableHash {
    pub(crate) fn new() -> Self {
        Self(0xcbf2_9ce4_8422_2325)
    }

    /// Feeds `bytes`, as they are.
    pub(crate) fn bytes(&mut self, bytes: &[u8]) -> &mut Self {
        for &byte in bytes {
            self.0 ^= u64::from(byte);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
        self
    }

    /// Feeds a text, its length first: two texts fed one after the other hash apart from
    /// the same bytes cut elsewhere (`"ab", "c"` and `"a", "bc"`).
    pub(crate) fn text(&mut self, text: &str) -> &mut Self {
        let length = u64::try_from(text.len()).unwrap_or(u64::MAX);
        self.bytes(&length.to_le_bytes()).bytes(text.as_bytes())
    }

    pub(crate) fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The published FNV-1a test vectors: the hash is the algorithm's, not this build's.
    #[test]
    fn hashes_are_fnv_1a() {
        assert_eq!(StableHash::new().finish(), 0xcbf2_9ce4_8422_2325);
        assert_eq!(
            StableHash::new().bytes(b"a").finish(),
            0xaf63_dc4c_8601_ec8c
        );
        assert_eq!(
            StableHash::new().bytes(b"foobar").finish(),
            0x8594_4171_f739_67e8
        );
    }

    #[test]
    fn texts_are_told_apart_by_where_they_are_cut() {
        let one = StableHash::new().text("ab").text("c").finish();
        let other = StableHash::new().text("a").text("bc").finish();
        assert_ne!(one, other);
    }
}
