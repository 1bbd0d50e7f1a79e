//! What a new prompt tells the model of the calls a cancelled or failed run left without
//! results.

use crate::Result;
use crate::model::Message;
use crate::runtime::{Checkpoint, JournalKey, Runtime};

use super::guarded::ToolStepOutcome;

/// The result each call of `unanswered` gets in the conversation after its run ended
/// (cancelled or failed, as `ended` says: `was cancelled`, `failed`) at `cp`: the one its
/// journaled step recorded, when the call ran before (the model must not be told a call
/// that ran did not, or it may make it again); otherwise a note that the run ended before
/// the call had one.
pub(super) async fn results_of(
    runtime: &Runtime,
    (session, cp): (&str, &Checkpoint),
    unanswered: &[&str],
    ended: &str,
) -> Result<Vec<Message>> {
    let mut results = Vec::with_capacity(unanswered.len());
    for &id in unanswered {
        // The tools step is the one after the checkpoint the cancel rewrote.
        let key = JournalKey::new(
            session,
            cp.run,
            "",
            cp.step + 1,
            "tools",
            ["tool:", id].concat(),
            0,
        );
        let recorded = runtime.store().get_journal(&key).await?;
        let outcome =
            recorded.and_then(|value| serde_json::from_value::<ToolStepOutcome>(value).ok());
        results.push(match outcome {
            Some(outcome) if outcome.is_error => Message::tool_error(id, outcome.content),
            Some(outcome) => Message::tool_result(id, outcome.content),
            None => Message::tool_error(
                id,
                format!("no result: the run {ended} before this call had one"),
            ),
        });
    }
    Ok(results)
}
