//! [`ErrorChain`]: an error shown with its sources.

/// Displays an error with its chain of sources, each after a `: `; a source whose text the
/// message already ends with is not repeated (many errors print their source in their own
/// message, and give it as their source too). loomflow's errors display their own level
/// only, as Rust's errors do; this is how its logs and run rows show them.
///
/// # Examples
///
/// ```
/// use loomflow::ErrorChain;
///
/// let cause = std::io::Error::other("order has no id");
/// let error = loomflow::RunError::NodeFailed {
///     node: "validate".into(),
///     step: 1,
///     source: Box::new(cause),
/// };
/// assert_eq!(error.to_string(), "node validate failed at step 1");
/// assert_eq!(
///     ErrorChain(&error).to_string(),
///     "node validate failed at step 1: order has no id"
/// );
/// ```
#[derive(Debug, Clone, Copy)]
pub struct ErrorChain<'a>(pub &'a dyn std::error::Error);

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut message = self.0.to_string();
        let mut source = self.0.source();
        while let Some(cause) = source {
            let text = cause.to_string();
            if !message.ends_with(&text) {
                message.push_str(": ");
                message.push_str(&text);
            }
            source = cause.source();
        }
        f.write_str(&message)
    }
}

#[cfg(test)]
mod tests {
    use super::ErrorChain;

    /// An error whose message ends with its source's.
    #[derive(Debug)]
    struct Wrapping(std::io::Error);

    impl std::fmt::Display for Wrapping {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "connecting failed: {}", self.0)
        }
    }

    impl std::error::Error for Wrapping {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }

    #[test]
    fn a_source_the_message_already_ends_with_is_not_repeated() {
        let error = Wrapping(std::io::Error::other("refused"));
        assert_eq!(ErrorChain(&error).to_string(), "connecting failed: refused");
        let plain = std::io::Error::other("disk full");
        assert_eq!(ErrorChain(&plain).to_string(), "disk full");
    }
}
