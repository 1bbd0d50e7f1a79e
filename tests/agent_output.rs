//! Typed output: the schema comes from the type, for the agent or for one run; a model
//! without structured output is asked in the prompt; answers that do not fit are retried,
//! and the typed value is read back with `parsed`. A reply cut short by the token limit or
//! filtered by the provider stops the run instead of passing for an answer.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::sync::Arc;

use loomflow::agent::{Agent, StopReason};
use loomflow::model::{FinishReason, Message, ModelResponse, ScriptedModel};
use loomflow::prelude::*;

#[derive(Debug, Deserialize, JsonSchema, PartialEq)]
struct Verdict {
    approved: bool,
    reason: String,
    refund_cents: Option<u64>,
}

#[tokio::test]
async fn the_schema_comes_from_the_type_and_the_answer_is_typed() {
    let model = Arc::new(ScriptedModel::new([
        ModelResponse::text(r#"{"approved": "yes"}"#),
        ModelResponse::text(
            r#"{"approved": true, "reason": "within policy", "refund_cents": 4000}"#,
        ),
    ]));
    let agent = Agent::builder("You review refunds.")
        .model(Arc::clone(&model))
        .output::<Verdict>()
        .build()
        .unwrap();
    let result = agent.run("Refund 40 EUR on order 7?").await.unwrap();
    assert_eq!(
        result.parsed::<Verdict>().unwrap(),
        Verdict {
            approved: true,
            reason: "within policy".into(),
            refund_cents: Some(4000),
        }
    );
    let requests = model.requests();
    let schema = requests[0].output_schema.as_ref().expect("asked natively");
    assert_eq!(schema.name, "Verdict");
    assert!(schema.strict);
    assert_eq!(
        schema.schema["required"],
        json!(["approved", "reason", "refund_cents"])
    );
    // The first answer did not fit: the model was told why.
    let retry = requests[1].messages.last().unwrap();
    assert!(retry.text().contains("does not match"), "{retry:?}");
}

#[tokio::test]
async fn a_run_can_ask_for_its_own_output() {
    let model = Arc::new(ScriptedModel::new([
        ModelResponse::text("Sure, happy to help."),
        ModelResponse::text(r#"{"approved": false, "reason": "no receipt", "refund_cents": null}"#),
    ]));
    let agent = Agent::builder("You review refunds.")
        .model(Arc::clone(&model))
        .build()
        .unwrap();
    let chat = agent.run("Hello").session("s").await.unwrap();
    assert_eq!(chat.output, "Sure, happy to help.");
    assert!(model.requests()[0].output_schema.is_none());
    let typed = agent
        .run("Refund order 9?")
        .session("s")
        .output::<Verdict>()
        .await
        .unwrap();
    assert!(!typed.parsed::<Verdict>().unwrap().approved);
    assert_eq!(
        model.requests()[1].output_schema.as_ref().unwrap().name,
        "Verdict"
    );
}

/// A model without structured output answering `replies`, and an agent over it that asks
/// for a `Verdict` (in the prompt).
fn prompted_reviewer<const N: usize>(replies: [&str; N]) -> (Arc<ScriptedModel>, Agent) {
    let model =
        Arc::new(ScriptedModel::new(replies.map(ModelResponse::text)).without_structured_output());
    let agent = Agent::builder("You review refunds.")
        .model(Arc::clone(&model))
        .output::<Verdict>()
        .build()
        .unwrap();
    (model, agent)
}

#[tokio::test]
async fn a_model_without_structured_output_is_asked_in_the_prompt() {
    let (model, agent) = prompted_reviewer([
        "Approved!",
        r#"{"approved": true, "reason": "ok", "refund_cents": 100}"#,
    ]);
    let result = agent.run("Refund 1 EUR?").await.unwrap();
    assert_eq!(result.parsed::<Verdict>().unwrap().refund_cents, Some(100));
    let first = &model.requests()[0];
    assert!(first.output_schema.is_none(), "not asked natively");
    let asked = first
        .messages
        .iter()
        .find(|m| matches!(m, Message::System { .. }) && m.text().contains("JSON Schema"))
        .expect("the schema is in the prompt");
    assert!(asked.text().contains("refund_cents"), "{asked:?}");
}

/// A model asked for JSON in its prompt often puts it in a Markdown code fence: the answer
/// inside is read, without spending a retry, and the output kept is the JSON alone (for a
/// run's own schema too). Before, each fenced answer was refused as not JSON.
#[tokio::test]
async fn a_fenced_json_answer_is_read_inside_its_fence() {
    let fenced = "```json\n{\"approved\": true, \"reason\": \"ok\", \"refund_cents\": 100}\n```";
    let (model, agent) = prompted_reviewer([fenced, fenced]);
    let result = agent.run("Refund 1 EUR?").await.unwrap();
    assert_eq!(result.parsed::<Verdict>().unwrap().refund_cents, Some(100));
    assert!(!result.output.contains("```"), "{}", result.output);
    assert_eq!(model.requests().len(), 1, "no retry");

    let plain = Agent::builder("You review refunds.")
        .model(Arc::clone(&model))
        .build()
        .unwrap();
    let own = plain
        .run("Refund 1 EUR?")
        .output::<Verdict>()
        .await
        .unwrap();
    assert_eq!(own.parsed::<Verdict>().unwrap().refund_cents, Some(100));
    assert_eq!(model.requests().len(), 2, "no retry");
}

#[tokio::test]
async fn answers_that_never_fit_fail_naming_the_agent() {
    let agent = Agent::builder("You review refunds.")
        .name("reviewer")
        .model(ScriptedModel::new([
            ModelResponse::text("no"),
            ModelResponse::text("still no"),
        ]))
        .output::<Verdict>()
        .max_schema_retries(1)
        .build()
        .unwrap();
    let error = agent.run("Refund?").await.unwrap_err();
    // The model node failed with the agent's typed error, naming it and the attempts.
    let debug = format!("{error:?}");
    assert!(
        debug.contains("OutputSchema { agent: \"reviewer\", attempts: 2"),
        "{debug}"
    );
}

/// A new prompt after a run that failed its output schema goes on from its conversation
/// without the note that asked for a better answer: that was the failed run's turn, and the
/// new run (without a schema) would be told to reply with JSON.
#[tokio::test]
async fn a_prompt_after_a_failed_typed_run_is_not_asked_for_json() {
    let model = Arc::new(ScriptedModel::new(
        ["no", "still no", "nope", "Here you are."].map(ModelResponse::text),
    ));
    let agent = Agent::builder("You review refunds.")
        .model(Arc::clone(&model))
        .max_schema_retries(2)
        .build()
        .unwrap();
    let failed = agent.run("Refund?").session("s").output::<Verdict>().await;
    assert!(failed.is_err(), "{failed:?}");
    let next = agent.run("And now?").session("s").await.unwrap();
    assert_eq!(next.output, "Here you are.");
    let sent: Vec<Message> = model.requests()[3].messages.iter().cloned().collect();
    assert!(
        !sent
            .iter()
            .any(|m| m.text().contains("Reply again with only JSON")),
        "{sent:?}"
    );
    let [.., before, last] = &sent[..] else {
        panic!("{sent:?}")
    };
    assert_eq!(last.text(), "And now?");
    assert!(
        matches!(before, Message::Assistant { .. }),
        "the prompt follows the model's last answer: {sent:?}"
    );
    assert!(!before.text().contains("JSON"), "{sent:?}");
}

fn finishing(content: &str, finish_reason: FinishReason) -> ModelResponse {
    ModelResponse {
        finish_reason,
        ..ModelResponse::text(content)
    }
}

#[tokio::test]
async fn a_reply_cut_by_the_token_limit_stops_the_run_as_truncated() {
    let cut = "The three steps are: first, you";
    let agent = Agent::builder("You help.")
        .model(ScriptedModel::new([finishing(cut, FinishReason::Length)]))
        .build()
        .unwrap();
    let result = agent.run("How do I do it?").await.unwrap();
    assert!(result.interrupted);
    assert_eq!(result.reason, Some(StopReason::Truncated));
    assert_eq!(result.output, cut, "the reply as it came");
}

#[tokio::test]
async fn a_filtered_reply_stops_the_run_as_content_filter() {
    let agent = Agent::builder("You help.")
        .model(ScriptedModel::new([
            ModelResponse::text("Earlier answer."),
            finishing("", FinishReason::ContentFilter),
        ]))
        .build()
        .unwrap();
    agent.run("First").session("s").await.unwrap();
    let result = agent.run("Second").session("s").await.unwrap();
    assert!(result.interrupted);
    assert_eq!(result.reason, Some(StopReason::ContentFilter));
    assert_eq!(result.output, "", "not the earlier turn's answer");
}

#[tokio::test]
async fn a_truncated_reply_spends_no_schema_retries() {
    let agent = Agent::builder("You review refunds.")
        .model(ScriptedModel::new([
            finishing(r#"{"approved": true, "rea"#, FinishReason::Length),
            ModelResponse::text(r#"{"approved": true, "reason": "ok"}"#),
        ]))
        .output::<Verdict>()
        .build()
        .unwrap();
    let result = agent.run("Refund?").await.unwrap();
    assert_eq!(result.reason, Some(StopReason::Truncated));
    assert_eq!(result.turns, 1, "no second call to fix the schema");
}

/// A type with a `#[serde(default)]` field: the strict schema lets the model send `null`
/// for it (strict mode wants every field), and `null` reads as the default.
#[derive(Debug, Deserialize, JsonSchema, PartialEq)]
struct Plan {
    title: String,
    #[serde(default)]
    steps: Vec<String>,
    #[serde(default)]
    days: u32,
}

#[tokio::test]
async fn null_for_a_field_with_a_default_reads_as_the_default() {
    let answer = r#"{"title": "Move house", "steps": null, "days": 3.0}"#;
    let plan = Plan {
        title: "Move house".into(),
        steps: Vec::new(),
        days: 3,
    };
    // The agent's own output type.
    let model = Arc::new(ScriptedModel::new([ModelResponse::text(answer)]));
    let agent = Agent::builder("You plan.")
        .model(Arc::clone(&model))
        .output::<Plan>()
        .build()
        .unwrap();
    let result = agent.run("plan my move").await.unwrap();
    assert_eq!(
        model.requests().len(),
        1,
        "answered the first time, not retried"
    );
    assert_eq!(result.parsed::<Plan>().unwrap(), plan);
    // One run's own output type.
    let model = Arc::new(ScriptedModel::new([ModelResponse::text(answer)]));
    let agent = Agent::builder("You plan.")
        .model(Arc::clone(&model))
        .build()
        .unwrap();
    let result = agent.run("plan my move").output::<Plan>().await.unwrap();
    assert_eq!(
        model.requests().len(),
        1,
        "answered the first time, not retried"
    );
    assert_eq!(result.parsed::<Plan>().unwrap(), plan);
}
