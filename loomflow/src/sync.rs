//! Two small facts about failure that several modules share: how to take a lock whose
//! holder panicked, and what a caught panic said.

use std::any::Any;
use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, recovering it if a holder panicked.
///
/// Every critical section in loomflow leaves its data sound at every point where it could
/// panic, so a poisoned lock still holds sound data: carrying on beats failing every later
/// caller.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The message of a caught panic, when it was a string.
pub(crate) fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poisoned_lock_still_opens() {
        let mutex = std::sync::Arc::new(Mutex::new(1));
        let poisoner = std::sync::Arc::clone(&mutex);
        let _ = std::thread::spawn(move || {
            let _guard = poisoner.lock();
            #[allow(clippy::panic)]
            {
                panic!("boom");
            }
        })
        .join();
        assert!(mutex.is_poisoned());
        assert_eq!(*lock(&mutex), 1);
    }

    #[test]
    fn panic_messages_are_read_from_either_string_type() {
        let caught = std::panic::catch_unwind(|| std::panic::panic_any("static")).unwrap_err();
        assert_eq!(panic_message(&*caught), "static");
        let caught =
            std::panic::catch_unwind(|| std::panic::panic_any(String::from("owned"))).unwrap_err();
        assert_eq!(panic_message(&*caught), "owned");
        let caught = std::panic::catch_unwind(|| std::panic::panic_any(7_u8)).unwrap_err();
        assert_eq!(panic_message(&*caught), "a panic without a message");
    }
}
