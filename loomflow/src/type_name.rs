//! Type names as users write them, for error messages.

/// `T`'s name as it is written in code, with an article: `a String`, `a Vec<u32>`, `an i64`,
/// not `alloc::string::String`.
pub(crate) fn readable<T: ?Sized>() -> String {
    let short = short_type_name::<T>();
    // By sound: `an i64`, `an f32`, `an Option`, but `a u32`, `a String`.
    let mut chars = short.chars();
    let article = match (chars.next(), chars.next()) {
        (Some('a' | 'e' | 'i' | 'o' | 'A' | 'E' | 'I' | 'O'), _) => "an",
        (Some('f'), Some(c)) if c.is_ascii_digit() => "an",
        _ => "a",
    };
    format!("{article} {short}")
}

/// `T`'s name as it is written in code: `Vec<String>`, not
/// `alloc::vec::Vec<alloc::string::String>`.
pub(crate) fn short_type_name<T: ?Sized>() -> String {
    let full = std::any::type_name::<T>();
    let mut short = String::with_capacity(full.len());
    // Drop every path prefix (`alloc::vec::Vec<alloc::string::String>` reads `Vec<String>`).
    let mut segment_start = 0;
    for (i, c) in full.char_indices() {
        match c {
            ':' => segment_start = i + 1,
            '<' | '>' | ',' | ' ' | '(' | ')' | '[' | ']' | ';' | '&' => {
                short.push_str(&full[segment_start..i]);
                short.push(c);
                segment_start = i + 1;
            }
            _ => {}
        }
    }
    short.push_str(&full[segment_start..]);
    short
}

#[cfg(test)]
mod tests {
    use super::readable;

    #[test]
    fn names_read_as_written() {
        assert_eq!(readable::<String>(), "a String");
        assert_eq!(readable::<Vec<String>>(), "a Vec<String>");
        assert_eq!(readable::<i64>(), "an i64");
        assert_eq!(readable::<u32>(), "a u32");
        assert_eq!(readable::<f64>(), "an f64");
        assert_eq!(
            readable::<Option<(u8, String)>>(),
            "an Option<(u8, String)>"
        );
    }
}
