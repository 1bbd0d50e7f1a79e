//! The runtime: what runs graphs and carries messages to them.

pub mod mailbox;

#[doc(inline)]
pub use mailbox::{Delivery, Mailbox, MailboxConfig, SessionGuard, SignalError, SignalOptions};
