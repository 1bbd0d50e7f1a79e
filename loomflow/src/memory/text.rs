//! The check every remembered text passes, in every backend, and before a consolidation
//! or an extraction hands a text to one.

use super::{MAX_TEXT_BYTES, MemoryError, Scope};

/// `text` as a backend keeps it: something in it, no NUL, at most [`MAX_TEXT_BYTES`].
pub(crate) fn check_text(scope: &Scope, text: &str) -> Result<(), MemoryError> {
    if text.trim().is_empty() {
        return Err(MemoryError::EmptyText {
            scope: scope.clone(),
        });
    }
    if text.contains('\0') {
        return Err(MemoryError::NulCharacter {
            scope: scope.clone(),
            field: "text",
        });
    }
    if text.len() > MAX_TEXT_BYTES {
        return Err(MemoryError::TextTooLong {
            scope: scope.clone(),
            bytes: text.len(),
            limit: MAX_TEXT_BYTES,
        });
    }
    Ok(())
}
