//! Ids made of a name, `#` and a number (`node#0`, `owner#12`): built a few times per run,
//! so without the formatting machinery, which costs several times the copy.

/// `name#n`.
pub(crate) fn numbered(name: &str, n: u64) -> String {
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
    let mut id = String::with_capacity(name.len() + 1 + digits.len() - start);
    id.push_str(name);
    id.push('#');
    id.extend(digits[start..].iter().map(|&d| char::from(d)));
    id
}

#[cfg(test)]
mod tests {
    use super::numbered;

    #[test]
    fn numbered_ids_read_as_format_writes_them() {
        for n in [0, 1, 9, 10, 99, 100, 12_345, u64::MAX] {
            assert_eq!(numbered("node", n), format!("node#{n}"));
        }
        assert_eq!(numbered("", 7), "#7");
        assert_eq!(numbered("parent:1/child", 3), "parent:1/child#3");
    }
}
