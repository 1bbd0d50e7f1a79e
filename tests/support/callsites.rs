//! Spans and events a test captures with a subscriber of its own thread
//! (`tracing::subscriber::set_default`), whatever the tests running beside it do.

/// Installs, once per test binary, a global subscriber that takes every span and event.
///
/// `tracing` settles a callsite's interest once for the whole process, on the first thread
/// that reaches it: a thread with no subscriber (another test's, running at the same time)
/// would settle it as "never", and the span or event would reach no test's capture. Each
/// test's own subscriber stays its thread's default, over this one.
pub(crate) fn keep_callsites_enabled() {
    static GLOBAL: std::sync::Once = std::sync::Once::new();
    GLOBAL.call_once(|| {
        // Fails only if one is set already, which keeps callsites enabled as well.
        let _ = tracing::subscriber::set_global_default(tracing_subscriber::registry());
    });
}
