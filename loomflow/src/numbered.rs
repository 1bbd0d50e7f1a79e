//! Ids made of a name, `#` and a number (`node#0`, `owner#12`): built a few times per run,
//! so without the formatting machinery, which costs several times the copy.

use std::sync::Arc;

/// `name#n`.
pub(crate) fn numbered(name: &str, n: u64) -> String {
    let (digits, start) = decimal(n);
    let mut id = String::with_capacity(name.len() + 1 + digits.len() - start);
    id.push_str(name);
    id.push('#');
    id.extend(digits[start..].iter().map(|&d| char::from(d)));
    id
}

/// [`numbered`], shared: written on the stack and copied once into its `Arc` (an owner id,
/// which the execution shares with a memory store's run row when it claims in line),
/// rather than built as a `String` and copied again.
pub(crate) fn numbered_shared(name: &str, n: u64) -> Arc<str> {
    let (digits, start) = decimal(n);
    let digits = &digits[start..];
    let mut id = [0u8; 64];
    let len = name.len() + 1 + digits.len();
    if len > id.len() {
        return Arc::from(numbered(name, n));
    }
    id[..name.len()].copy_from_slice(name.as_bytes());
    id[name.len()] = b'#';
    id[name.len() + 1..len].copy_from_slice(digits);
    match std::str::from_utf8(&id[..len]) {
        Ok(id) => Arc::from(id),
        // A name and ASCII digits are UTF-8 whole: not reached.
        Err(_) => Arc::from(numbered(name, n)),
    }
}

/// Whether `text` is `name#n`, as [`numbered`] writes it (no sign, no leading zero).
pub(crate) fn is_numbered(text: &str, name: &str, n: u64) -> bool {
    let digits = text
        .strip_prefix(name)
        .and_then(|rest| rest.strip_prefix('#'));
    digits.is_some_and(|d| {
        let (decimal, start) = decimal(n);
        d.as_bytes() == &decimal[start..]
    })
}

/// `n` in decimal: the digits are `digits[start..]`.
fn decimal(n: u64) -> ([u8; 20], usize) {
    let mut digits = [0u8; 20];
    let mut start = digits.len();
    let mut rest = n;
    loop {
        start -= 1;
        // `rest % 10` is below 10: the cast keeps it whole.
        digits[start] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    (digits, start)
}

#[cfg(test)]
mod tests {
    use super::{is_numbered, numbered, numbered_shared};

    #[test]
    fn numbered_ids_read_as_format_writes_them() {
        for n in [0, 1, 9, 10, 99, 100, 12_345, u64::MAX] {
            assert_eq!(numbered("node", n), format!("node#{n}"));
        }
        assert_eq!(numbered("", 7), "#7");
        assert_eq!(numbered("parent:1/child", 3), "parent:1/child#3");
        for n in [0, 42, u64::MAX] {
            assert_eq!(
                *numbered_shared("pid7-0badf00d", n),
                numbered("pid7-0badf00d", n)
            );
        }
        for n in [0, 7, 10, 12_345, u64::MAX] {
            assert!(is_numbered(&numbered("node", n), "node", n));
        }
        for (text, n) in [
            ("node#01", 1),
            ("node#+1", 1),
            ("node#", 0),
            ("node1", 1),
            ("nod#1", 1),
        ] {
            assert!(!is_numbered(text, "node", n), "{text}");
        }
        assert!(!is_numbered("node#12", "node", 1) && !is_numbered("node#1", "node", 12));
        // 64 bytes fill the stack buffer; 70 go through a String.
        for len in [61, 62, 70] {
            let long = "x".repeat(len);
            assert_eq!(*numbered_shared(&long, 12), format!("{long}#12"));
        }
    }
}
