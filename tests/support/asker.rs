//! A one-node graph that asks for a value and keeps it: the run the suspension and resume
//! tests suspend.
#![allow(dead_code)]

use loomflow::prelude::*;
use serde::de::DeserializeOwned;

/// `START → ask → END`: `ask` interrupts with the question `ok?` and keeps the answer it is
/// resumed with.
pub(crate) fn asker<T>() -> CompiledGraph<Option<T>>
where
    T: Clone + Serialize + DeserializeOwned + Send + Sync + 'static,
{
    Graph::new("asker")
        .node_fn("ask", |answer: &mut Option<T>, ctx| {
            Box::pin(async move {
                *answer = Some(ctx.interrupt(json!({"q": "ok?"}))?);
                Ok(())
            })
        })
        .edge(START, "ask")
        .edge("ask", END)
        .compile()
        .expect("the asker graph compiles")
}
