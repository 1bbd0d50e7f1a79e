//! What a signal may be named, and to which session it may go.

use super::{RESERVED_PREFIX, Scope, SignalError};

/// Refuses a blank session, a blank name, a name with a control character, and (from a
/// user) a name of loomflow's own (`loomflow:…`).
pub(crate) fn check_name(session: &str, name: &str, scope: Scope) -> Result<(), SignalError> {
    // A blank name (`/signals/%20` over HTTP) would queue a payload no wait names.
    if name.trim().is_empty() {
        return Err(SignalError::EmptyName {
            session: session.to_owned(),
        });
    }
    if session.trim().is_empty() {
        return Err(SignalError::EmptySession {
            name: name.to_owned(),
        });
    }
    if name.chars().any(char::is_control) {
        return Err(SignalError::ControlInName {
            session: session.to_owned(),
            name: name.to_owned(),
        });
    }
    if scope == Scope::User && name.starts_with(RESERVED_PREFIX) {
        return Err(SignalError::ReservedName {
            session: session.to_owned(),
            name: name.to_owned(),
        });
    }
    Ok(())
}
