//! The warning an agent's build gives for a cost cap its prices cannot apply, seen by a
//! subscriber of the test's own. In a binary of its own: `tracing` caches whether anyone
//! listens at a callsite, and another test's thread meeting the warning first, with no
//! subscriber, could leave it cached as heard by nobody (it did, about one run in sixty,
//! beside the other agent limits' tests).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::sync::Arc;

use loomflow::agent::{Agent, Budget};
use loomflow::model::{EchoModel, PriceTable};

/// A cost cap whose prices have none for the agent's model is not refused (the model a
/// provider reports may be priced), but building says so: otherwise the cap would stop
/// nothing, silently.
#[test]
fn a_cost_cap_without_a_price_for_the_model_is_warned_of() {
    use std::sync::Mutex;
    use tracing_subscriber::layer::{Context as LayerContext, SubscriberExt};
    #[derive(Default)]
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
    let build = |prices: PriceTable| {
        Agent::builder("You answer.")
            .name("capped")
            .model(EchoModel::new())
            .budget(Budget::default().max_cost_usd(0.5))
            .prices(prices)
            .build()
            .unwrap()
    };
    tracing::subscriber::with_default(subscriber, || {
        build(PriceTable::new().model("gpt-4o", 2.5, 10.0));
    });
    let warned = seen.lock().unwrap().clone();
    assert!(
        warned
            .iter()
            .any(|w| w.contains("caps a cost") && w.contains("echo")),
        "{warned:?}"
    );
}
