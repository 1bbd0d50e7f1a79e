//! Spans and events a test captures with a subscriber of its own thread
//! (`tracing::subscriber::set_default`), whatever the tests running beside it do.

#![allow(dead_code)] // each test uses what it needs

use std::sync::{Arc, Mutex};

use tracing_subscriber::layer::{Context as LayerContext, SubscriberExt};

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

/// The warnings `run` logs on this thread, each as its fields (`name=value `, the message
/// among them).
pub(crate) fn warnings_while(run: impl FnOnce()) -> Vec<String> {
    struct Warnings(Arc<Mutex<Vec<String>>>);
    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Warnings {
        fn on_event(&self, event: &tracing::Event<'_>, _: LayerContext<'_, S>) {
            if *event.metadata().level() == tracing::Level::WARN {
                let mut text = String::new();
                let mut visit = |field: &tracing::field::Field, value: &dyn std::fmt::Debug| {
                    text.push_str(&format!("{}={value:?} ", field.name()));
                };
                event.record(&mut visit);
                self.0.lock().unwrap().push(text);
            }
        }
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let subscriber = tracing_subscriber::registry().with(Warnings(Arc::clone(&seen)));
    keep_callsites_enabled();
    tracing::subscriber::with_default(subscriber, run);
    seen.lock().unwrap().clone()
}
