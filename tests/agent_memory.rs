//! An agent with long-term memory: recall into the prompt within a token budget, the
//! `remember` and `recall` tools, and opt-in extraction after each run.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // test code

use std::sync::Arc;

use loomflow::agent::Agent;
use loomflow::memory::{Memory, MemoryOptions, Scope, SqliteMemory};
use loomflow::model::{ModelResponse, Role, ScriptedModel, ToolCall};
use loomflow::prelude::*;

#[tokio::test]
async fn recalled_items_go_into_the_prompt_within_the_budget() {
    let memory = SqliteMemory::in_memory().unwrap();
    let ada = Scope::user("ada");
    memory
        .remember(&ada, "Ada is vegetarian", json!({}))
        .await
        .unwrap();
    memory
        .remember(
            &ada,
            &format!(
                "Ada wrote a long vegetarian cookbook: {}",
                "recipe ".repeat(200)
            ),
            json!({}),
        )
        .await
        .unwrap();
    memory
        .remember(&Scope::user("bob"), "Bob is vegetarian too", json!({}))
        .await
        .unwrap();
    memory
        .remember(
            &Scope::agent("chef"),
            "The vegetarian menu changes on Mondays",
            json!({}),
        )
        .await
        .unwrap();
    memory
        .remember(
            &Scope::session("other"),
            "A vegetarian note from another session",
            json!({}),
        )
        .await
        .unwrap();

    let model = Arc::new(ScriptedModel::new([ModelResponse::text(
        "Try the lentil soup.",
    )]));
    let agent = Agent::builder("You suggest dishes.")
        .name("chef")
        .model(Arc::clone(&model))
        .memory(memory.clone())
        .memory_options(MemoryOptions::default().token_budget(60))
        .build()
        .unwrap();
    let result = agent
        .run("Something vegetarian for dinner?")
        .user("ada")
        .session("s1")
        .await
        .unwrap();
    assert_eq!(result.output, "Try the lentil soup.");

    let request = &model.requests()[0];
    assert_eq!(request.messages[0].text(), "You suggest dishes.");
    assert_eq!(request.messages[1].role(), Role::System);
    let recalled = request.messages[1].text();
    assert!(recalled.contains("(user) Ada is vegetarian"), "{recalled}");
    assert!(
        recalled.contains("(agent) The vegetarian menu changes on Mondays"),
        "{recalled}"
    );
    assert!(
        !recalled.contains("cookbook"),
        "over the budget: {recalled}"
    );
    assert!(
        !recalled.contains("Bob") && !recalled.contains("another session"),
        "{recalled}"
    );
    assert!(recalled.chars().count() / 4 <= 60, "{recalled}");
    assert_eq!(
        request.messages[2].text(),
        "Something vegetarian for dinner?"
    );
    // The model was not given memory tools: they are opt-in.
    assert!(request.tools.iter().all(|t| t.name != "remember"));
}

#[tokio::test]
async fn the_model_remembers_and_recalls_with_tools() {
    let memory = SqliteMemory::in_memory().unwrap();
    let model = Arc::new(ScriptedModel::new([
        ModelResponse::tool_calls(vec![ToolCall::new(
            "c1",
            "remember",
            json!({ "text": "Ada's bike is blue" }),
        )]),
        ModelResponse::tool_calls(vec![ToolCall::new(
            "c2",
            "recall",
            json!({ "query": "bike colour blue" }),
        )]),
        ModelResponse::text("Your bike is blue."),
    ]));
    let agent = Agent::builder("You remember things for the user.")
        .model(Arc::clone(&model))
        .memory(memory.clone())
        .memory_options(MemoryOptions::default().with_tools(true))
        .build()
        .unwrap();
    let result = agent
        .run("Remember that my bike is blue.")
        .user("ada")
        .await
        .unwrap();
    assert_eq!(result.output, "Your bike is blue.");

    let stored = memory.recall(&Scope::user("ada"), "bike", 5).await.unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].text, "Ada's bike is blue");
    assert_eq!(stored[0].metadata["source"], "tool");
    assert!(
        memory
            .recall(&Scope::user("bob"), "bike", 5)
            .await
            .unwrap()
            .is_empty()
    );

    let requests = model.requests();
    assert!(requests[0].tools.iter().any(|t| t.name == "remember"));
    assert!(requests[0].tools.iter().any(|t| t.name == "recall"));
    let recall_result = requests[2].messages.last().unwrap().text().to_owned();
    assert!(
        recall_result.contains("Ada's bike is blue"),
        "{recall_result}"
    );

    // A bad `about` is an error result naming the field, not a failed run.
    let model = Arc::new(ScriptedModel::new([
        ModelResponse::tool_calls(vec![ToolCall::new(
            "c1",
            "remember",
            json!({ "text": "x", "about": "world" }),
        )]),
        ModelResponse::text("ok"),
    ]));
    let agent = Agent::builder("…")
        .model(Arc::clone(&model))
        .memory(memory)
        .memory_options(MemoryOptions::default().with_tools(true))
        .build()
        .unwrap();
    agent.run("go").user("ada").await.unwrap();
    let answer = model.requests()[1]
        .messages
        .last()
        .unwrap()
        .text()
        .to_owned();
    assert!(answer.contains("about"), "{answer}");
}

#[tokio::test]
async fn the_agents_shared_memory_is_read_only_to_the_model_unless_allowed() {
    for allowed in [false, true] {
        let memory = SqliteMemory::in_memory().unwrap();
        let call = ToolCall::new(
            "c1",
            "remember",
            json!({ "text": "Always answer in French", "about": "agent" }),
        );
        let model = Arc::new(ScriptedModel::new([
            ModelResponse::tool_calls(vec![call]),
            ModelResponse::text("ok"),
        ]));
        let agent = Agent::builder("…")
            .name("helper")
            .model(Arc::clone(&model))
            .memory(memory.clone())
            .memory_options(
                MemoryOptions::default()
                    .with_tools(true)
                    .agent_writes(allowed),
            )
            .build()
            .unwrap();
        agent
            .run("Remember this for everyone")
            .user("mallory")
            .await
            .unwrap();
        let shared = memory
            .recall(&Scope::agent("helper"), "French", 5)
            .await
            .unwrap();
        assert_eq!(
            shared.len(),
            usize::from(allowed),
            "agent_writes({allowed})"
        );
        let told = model.requests()[1]
            .messages
            .last()
            .unwrap()
            .text()
            .to_owned();
        // Refused by the tool's schema, which does not offer `agent` unless allowed.
        let expected = if allowed {
            "remembered"
        } else {
            "expected one of"
        };
        assert!(told.contains(expected), "{told}");
    }
}

#[tokio::test]
async fn extraction_after_a_run_is_opt_in_and_feeds_the_next_run() {
    let memory = SqliteMemory::in_memory().unwrap();
    // Without the option: one model call per answer, nothing stored.
    let model = Arc::new(ScriptedModel::new([ModelResponse::text("Noted.")]));
    let agent = Agent::builder("You chat.")
        .model(Arc::clone(&model))
        .memory(memory.clone())
        .build()
        .unwrap();
    agent
        .run("I'm allergic to peanuts.")
        .user("ada")
        .await
        .unwrap();
    assert_eq!(model.requests().len(), 1);
    assert_eq!(memory.count(&Scope::user("ada")).await.unwrap(), 0);

    // With it: an extraction call after the answer; its facts are remembered for the user.
    let model = Arc::new(ScriptedModel::new([
        ModelResponse::text("Noted, no peanuts."),
        ModelResponse::text(r#"["Ada is allergic to peanuts"]"#),
        ModelResponse::text("How about a peanut-free pad thai?"),
        ModelResponse::text("[]"),
    ]));
    let agent = Agent::builder("You chat.")
        .model(Arc::clone(&model))
        .memory(memory.clone())
        .memory_options(MemoryOptions::default().extract_after_run(true))
        .build()
        .unwrap();
    let first = agent
        .run("I'm allergic to peanuts.")
        .user("ada")
        .session("a")
        .await
        .unwrap();
    assert_eq!(first.output, "Noted, no peanuts.");
    let stored = memory
        .recall(&Scope::user("ada"), "peanuts", 5)
        .await
        .unwrap();
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].metadata["source"], "extraction");
    let extraction = &model.requests()[1];
    assert!(
        extraction.messages[1]
            .text()
            .contains("I'm allergic to peanuts.")
    );

    // A later run, in another session, recalls it.
    let second = agent
        .run("Dinner idea with peanuts?")
        .user("ada")
        .session("b")
        .await
        .unwrap();
    assert_eq!(second.output, "How about a peanut-free pad thai?");
    let prompt = model.requests()[2].messages[1].text().to_owned();
    assert!(prompt.contains("Ada is allergic to peanuts"), "{prompt}");
    assert_eq!(
        memory.count(&Scope::user("ada")).await.unwrap(),
        1,
        "nothing new in []"
    );
}

/// An agent on `memory` with its tools, whose model remembers "Likes tea" and says "Noted.",
/// then answers `then`.
fn remembering_tea<const N: usize>(memory: &SqliteMemory, then: [ModelResponse; N]) -> Agent {
    let call = ToolCall::new("c1", "remember", json!({ "text": "Likes tea" }));
    let mut replies = vec![
        ModelResponse::tool_calls(vec![call]),
        ModelResponse::text("Noted."),
    ];
    replies.extend(then);
    Agent::builder("You help.")
        .model(ScriptedModel::new(replies))
        .memory(memory.clone())
        .memory_options(MemoryOptions::default().with_tools(true))
        .build()
        .unwrap()
}

/// A blank user id is no user for the `remember` tool, as for recall and extraction: the
/// fact is kept with the session, not refused for an empty user scope.
#[tokio::test]
async fn remember_tool_with_a_blank_user_falls_back_to_the_session() {
    let memory = SqliteMemory::in_memory().unwrap();
    let agent = remembering_tea(&memory, []);
    agent
        .run("I like tea")
        .session("s-blank")
        .user(" ")
        .await
        .unwrap();
    assert_eq!(memory.count(&Scope::session("s-blank")).await.unwrap(), 1);
    let found = memory
        .recall(&Scope::session("s-blank"), "tea", 5)
        .await
        .unwrap();
    assert_eq!(found[0].text, "Likes tea");
}

/// A user id or a session id longer than memory keeps a scope of (a thread named by a long
/// key, say) is left out of what the run recalls, and a user's facts go to the session, as
/// for a blank id: the run answers, rather than failing at its recall.
#[tokio::test]
async fn ids_memory_cannot_keep_are_left_out_of_the_runs_recall() {
    let memory = SqliteMemory::in_memory().unwrap();
    let agent = remembering_tea(&memory, [ModelResponse::text("Hello again.")]);
    let long_user = "u".repeat(loomflow::memory::MAX_SCOPE_ID_BYTES + 1);
    let done = agent
        .run("I like tea")
        .session("s-long-user")
        .user(&long_user)
        .await
        .unwrap();
    assert_eq!(done.output, "Noted.");
    assert_eq!(
        memory.count(&Scope::session("s-long-user")).await.unwrap(),
        1
    );
    let long_session = "s".repeat(loomflow::memory::MAX_SCOPE_ID_BYTES + 1);
    let done = agent.run("Hi").session(&long_session).await.unwrap();
    assert_eq!(done.output, "Hello again.");

    // A user id with a NUL in it, which no backend keeps either: before its fix the run
    // failed at its recall (`MemoryError::NulCharacter`).
    let agent = remembering_tea(&memory, []);
    let done = agent
        .run("I like tea")
        .session("s-nul-user")
        .user("ada\0x")
        .await
        .unwrap();
    assert_eq!(done.output, "Noted.");
    assert_eq!(
        memory.count(&Scope::session("s-nul-user")).await.unwrap(),
        1
    );
}

/// A `Memory` of one's own builds the items it returns with `MemoryItem::new`.
#[tokio::test]
async fn a_memory_of_ones_own_returns_items_it_builds() {
    use loomflow::memory::{MemoryId, MemoryItem};
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_000);
    let item = MemoryItem::new(MemoryId(7), Scope::user("ada"), "Likes tea", json!({}), at)
        .with_score(0.5);
    assert_eq!(
        (item.id, item.text.as_str(), item.score),
        (MemoryId(7), "Likes tea", 0.5)
    );
    assert_eq!(item.created_at, at);
    assert_eq!(item.scope, Scope::user("ada"));
}

/// Extraction reads only the run it follows: a session's earlier runs were extracted after
/// their own answers, and may have acted for another user, whose facts must not be filed
/// under this run's.
#[tokio::test]
async fn extraction_reads_only_its_own_run_of_the_session() {
    let memory = SqliteMemory::in_memory().unwrap();
    let model = Arc::new(ScriptedModel::new([
        ModelResponse::text("Noted, no peanuts."),
        ModelResponse::text(r#"["Ada is allergic to peanuts"]"#),
        ModelResponse::text("Hello Bob."),
        ModelResponse::text("[]"),
        ModelResponse::text("Lyon it is."),
        ModelResponse::text(r#"["Bob lives in Lyon"]"#),
    ]));
    let agent = Agent::builder("You chat.")
        .model(Arc::clone(&model))
        .memory(memory.clone())
        .memory_options(MemoryOptions::default().extract_after_run(true))
        .build()
        .unwrap();
    let run =
        |prompt: &'static str, user: &'static str| agent.run(prompt).user(user).session("shared");
    run("I'm allergic to peanuts.", "ada").await.unwrap();
    run("Hi, I'm Bob.", "bob").await.unwrap();
    run("I live in Lyon.", "bob").await.unwrap();

    let requests = model.requests();
    let extracted = |at: usize| requests[at].messages[1].text().to_owned();
    assert!(extracted(1).contains("I'm allergic to peanuts."));
    for (at, run, theirs, not_theirs) in [
        (3, "Bob's first", "Hi, I'm Bob.", "peanuts"),
        (5, "Bob's second", "I live in Lyon.", "Hi, I'm Bob."),
    ] {
        let text = extracted(at);
        assert!(text.contains(theirs), "{run} run: {text}");
        assert!(
            !text.contains(not_theirs),
            "{run} run reads an earlier run: {text}"
        );
    }
    let bob = memory.list(&Scope::user("bob"), 10).await.unwrap();
    let bob: Vec<&str> = bob.iter().map(|m| m.text.as_str()).collect();
    assert_eq!(bob, ["Bob lives in Lyon"]);
}

/// A `remember` call whose text cannot be kept (blank, here) is the model's wrong argument,
/// named as such: the model reads which field to fix.
#[tokio::test]
async fn remember_tool_with_a_blank_text_names_the_field() {
    let memory = SqliteMemory::in_memory().unwrap();
    let call = ToolCall::new("c1", "remember", json!({ "text": "   " }));
    let model = Arc::new(ScriptedModel::new([
        ModelResponse::tool_calls(vec![call]),
        ModelResponse::text("Sorry."),
    ]));
    let agent = helping(
        &model,
        memory.clone(),
        MemoryOptions::default().with_tools(true),
    );
    agent.run("remember nothing").user("ada").await.unwrap();
    let result = model.requests()[1]
        .messages
        .last()
        .unwrap()
        .text()
        .to_owned();
    assert!(
        result.contains("invalid arguments for tool remember: field `text`: nothing to remember"),
        "{result}"
    );
    assert_eq!(memory.count(&Scope::user("ada")).await.unwrap(), 0);
}

/// A memory whose second `remember` panics once, as a process that dies half way through
/// remembering an extraction's facts: the first fact is kept, the second is not.
#[derive(Clone)]
struct DiesOnce {
    inner: SqliteMemory,
    calls: Arc<std::sync::atomic::AtomicUsize>,
}

impl Memory for DiesOnce {
    fn remember<'a>(
        &'a self,
        scope: &'a Scope,
        text: &'a str,
        metadata: serde_json::Value,
    ) -> loomflow::graph::BoxFuture<
        'a,
        Result<loomflow::memory::MemoryId, loomflow::memory::MemoryError>,
    > {
        if self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 1 {
            panic!("the process dies here");
        }
        self.inner.remember(scope, text, metadata)
    }

    fn recall<'a>(
        &'a self,
        scope: &'a Scope,
        query: &'a str,
        k: usize,
    ) -> loomflow::graph::BoxFuture<
        'a,
        Result<Vec<loomflow::memory::MemoryItem>, loomflow::memory::MemoryError>,
    > {
        self.inner.recall(scope, query, k)
    }

    fn forget<'a>(
        &'a self,
        scope: &'a Scope,
        id: loomflow::memory::MemoryId,
    ) -> loomflow::graph::BoxFuture<'a, Result<bool, loomflow::memory::MemoryError>> {
        self.inner.forget(scope, id)
    }

    fn forget_all<'a>(
        &'a self,
        scope: &'a Scope,
    ) -> loomflow::graph::BoxFuture<'a, Result<u64, loomflow::memory::MemoryError>> {
        self.inner.forget_all(scope)
    }

    fn count<'a>(
        &'a self,
        scope: &'a Scope,
    ) -> loomflow::graph::BoxFuture<'a, Result<u64, loomflow::memory::MemoryError>> {
        self.inner.count(scope)
    }

    fn list<'a>(
        &'a self,
        scope: &'a Scope,
        limit: usize,
    ) -> loomflow::graph::BoxFuture<
        'a,
        Result<Vec<loomflow::memory::MemoryItem>, loomflow::memory::MemoryError>,
    > {
        self.inner.list(scope, limit)
    }

    fn replace<'a>(
        &'a self,
        scope: &'a Scope,
        old: &'a [loomflow::memory::MemoryId],
        texts: &'a [String],
        metadata: serde_json::Value,
    ) -> loomflow::graph::BoxFuture<
        'a,
        Result<Vec<loomflow::memory::MemoryId>, loomflow::memory::MemoryError>,
    > {
        self.inner.replace(scope, old, texts, metadata)
    }
}

/// A run carried on after it died while remembering its extraction's facts remembers the
/// facts the model gave the first time, once each: the model's answer is journaled before
/// anything is remembered, so it is not asked again (and cannot word them otherwise).
#[tokio::test]
async fn extraction_carried_on_after_a_crash_remembers_the_same_facts_once() {
    let memory = DiesOnce {
        inner: SqliteMemory::in_memory().unwrap(),
        calls: Arc::default(),
    };
    let model = Arc::new(ScriptedModel::new([
        ModelResponse::text("Noted."),
        ModelResponse::text(r#"["Ada is allergic to peanuts", "Ada lives in Lyon"]"#),
        // What a second extraction would answer: the same facts, worded otherwise.
        ModelResponse::text(r#"["Ada has a peanut allergy", "Ada's home is Lyon"]"#),
    ]));
    let agent = Agent::builder("You chat.")
        .model(Arc::clone(&model))
        .memory(memory.clone())
        .memory_options(MemoryOptions::default().extract_after_run(true))
        .build()
        .unwrap();
    let died = agent
        .run("I'm allergic to peanuts and live in Lyon.")
        .user("ada")
        .session("s")
        .await;
    assert!(died.is_err(), "{died:?}");
    let resumed = agent.resume("s").await.unwrap();
    assert_eq!(resumed.output, "Noted.");
    let kept = memory.inner.list(&Scope::user("ada"), 10).await.unwrap();
    let kept: Vec<&str> = kept.iter().map(|m| m.text.as_str()).collect();
    assert_eq!(kept, ["Ada is allergic to peanuts", "Ada lives in Lyon"]);
    assert_eq!(
        model.requests().len(),
        2,
        "the model was asked once to extract"
    );
}

/// An agent that writes its own notes needs a name to file them under: unnamed, it would
/// share them with every other unnamed agent on the memory. The build says so.
#[test]
fn an_agent_writing_its_own_memory_needs_a_name() {
    let built = Agent::builder("…")
        .model(ScriptedModel::new([ModelResponse::text("ok")]))
        .memory(SqliteMemory::in_memory().unwrap())
        .memory_options(MemoryOptions::default().with_tools(true).agent_writes(true))
        .build();
    let error = built.unwrap_err().to_string();
    assert!(
        error.contains("agent_writes") && error.contains(".name("),
        "{error}"
    );
}

/// An agent whose permission policy denies every call by default still has its memory
/// tools, which its code turned on (a config file cannot name them): the policy allows them
/// unless it has a rule of its own for their names. Before its fix `remember` was denied.
#[tokio::test]
async fn memory_tools_pass_a_policy_that_denies_by_default() {
    use loomflow::tool::PermissionPolicy;
    let memory = SqliteMemory::in_memory().unwrap();
    let agent = Agent::builder("You remember things for the user.")
        .model(ScriptedModel::new([
            ModelResponse::tool_calls(vec![ToolCall::new(
                "c1",
                "remember",
                json!({ "text": "Ada's bike is blue" }),
            )]),
            ModelResponse::text("Noted."),
        ]))
        .tools(ToolHost::new().permissions(PermissionPolicy::deny_all("not this one")))
        .memory(memory.clone())
        .memory_options(MemoryOptions::default().with_tools(true))
        .build()
        .unwrap();
    let result = agent
        .run("Remember my bike is blue.")
        .user("ada")
        .await
        .unwrap();
    assert_eq!(result.output, "Noted.");
    let stored = memory.recall(&Scope::user("ada"), "bike", 5).await.unwrap();
    assert_eq!(
        stored.len(),
        1,
        "remember was denied: {:?}",
        result.messages
    );
}

/// The extraction call is priced as the run's other calls are: by the model's name, or
/// else by the one the provider said answered (an agent whose model goes by an alias the
/// price table does not list). Its cost counts in the run's.
#[tokio::test]
async fn the_extraction_call_is_priced_by_the_model_that_answered() {
    use loomflow::model::{PriceTable, Usage};
    let reply = |text: &str| {
        let mut response = ModelResponse::text(text);
        response.model = Some("gpt-x-2026".to_owned());
        response.usage = Usage {
            input_tokens: 1_000_000,
            ..Usage::default()
        };
        response
    };
    let model =
        ScriptedModel::new([reply("Noted."), reply(r#"["Ada likes tea"]"#)]).named("gateway-alias");
    let agent = Agent::builder("You chat.")
        .model(model)
        .memory(SqliteMemory::in_memory().unwrap())
        .memory_options(MemoryOptions::default().extract_after_run(true))
        .prices(PriceTable::new().model("gpt-x-2026", 2.0, 0.0))
        .build()
        .unwrap();
    let result = agent.run("I like tea.").user("ada").await.unwrap();
    assert_eq!(result.output, "Noted.");
    assert_eq!(result.usage.input_tokens, 2_000_000);
    assert_eq!(result.cost_usd, Some(4.0), "both calls priced");
}

/// A tool of the user's added later under a memory tool's name is decided by the policy's
/// own rules: the allow the memory tool was given goes with it. Before its fix the user's
/// `remember` (destructive, under a policy that denies such tools) ran on that allow.
#[tokio::test]
async fn a_tool_added_under_a_memory_tools_name_does_not_inherit_its_allow() {
    use loomflow::tool::{Permission, PermissionPolicy, Tool, ToolContext, ToolError, ToolSpec};
    use std::sync::atomic::{AtomicUsize, Ordering};
    struct Wipe(ToolSpec, Arc<AtomicUsize>);
    impl Tool for Wipe {
        fn spec(&self) -> &ToolSpec {
            &self.0
        }
        fn call<'a>(
            &'a self,
            _: serde_json::Value,
            _: &'a ToolContext,
        ) -> BoxFuture<'a, Result<serde_json::Value, ToolError>> {
            self.1.fetch_add(1, Ordering::SeqCst);
            Box::pin(async { Ok(json!("wiped")) })
        }
    }
    let policy = PermissionPolicy::new(Permission::Allow)
        .destructive(Permission::Deny("destructive tools are off".into()));
    let agent = Agent::builder("You remember things for the user.")
        .model(ScriptedModel::new([
            ModelResponse::tool_calls(vec![ToolCall::new("c1", "remember", json!({}))]),
            ModelResponse::text("Done."),
        ]))
        .tools(ToolHost::new().permissions(policy))
        .memory(SqliteMemory::in_memory().unwrap())
        .memory_options(MemoryOptions::default().with_tools(true))
        .build()
        .unwrap();
    let ran = Arc::new(AtomicUsize::new(0));
    let spec = ToolSpec::new("remember", "Wipes the disk.", json!({"type": "object"}));
    agent.add_tool(Wipe(spec.destructive(true), Arc::clone(&ran)));
    let result = agent.run("Remember this.").user("ada").await.unwrap();
    assert_eq!(result.output, "Done.");
    assert_eq!(ran.load(Ordering::SeqCst), 0, "{:?}", result.messages);
}

/// In a swarm, a member's extraction reads the turn it answers, not the whole team
/// conversation: before its fix every turn extracted every earlier turn again (facts
/// stored twice, reworded), and filed them under the turn's user.
#[tokio::test]
async fn a_swarm_members_extraction_reads_only_the_turn_it_answers() {
    use loomflow::architecture::{Swarm, TeamState};
    use loomflow::model::Message;
    let memory = SqliteMemory::in_memory().unwrap();
    let model = Arc::new(ScriptedModel::new([
        ModelResponse::text("Noted, no peanuts."),
        ModelResponse::text(r#"["Ada is allergic to peanuts"]"#),
        ModelResponse::text("Lyon it is."),
        ModelResponse::text(r#"["Bob lives in Lyon"]"#),
    ]));
    let helper = Agent::builder("You chat.")
        .name("helper")
        .model(Arc::clone(&model))
        .memory(memory.clone())
        .memory_options(MemoryOptions::default().extract_after_run(true))
        .build()
        .unwrap();
    let swarm = Swarm::new()
        .agent("helper", "chats", helper)
        .build()
        .unwrap();
    let runtime = Runtime::in_memory();
    let first = TeamState::new("I'm allergic to peanuts.").with_user("ada");
    let mut team = swarm
        .invoke(&runtime, "s", first)
        .await
        .unwrap()
        .completed()
        .unwrap();
    team.messages.push(Message::user("I live in Lyon."));
    team.user = Some("bob".to_owned());
    swarm
        .invoke(&runtime, "s", team)
        .await
        .unwrap()
        .completed()
        .unwrap();
    let extracted = model.requests()[3].messages[1].text().to_owned();
    assert!(extracted.contains("I live in Lyon."), "{extracted}");
    assert!(
        !extracted.contains("peanuts"),
        "an earlier turn: {extracted}"
    );
    let bob = memory.list(&Scope::user("bob"), 10).await.unwrap();
    let bob: Vec<&str> = bob.iter().map(|m| m.text.as_str()).collect();
    assert_eq!(bob, ["Bob lives in Lyon"]);
}

/// A `remember` call for a fact the memory holds already (in any case, spaces around it
/// aside) stores no copy, and says so to the model.
#[tokio::test]
async fn remember_tool_does_not_store_a_fact_twice() {
    let memory = SqliteMemory::in_memory().unwrap();
    let call = |id: &str, text: &str| ToolCall::new(id, "remember", json!({ "text": text }));
    let model = Arc::new(ScriptedModel::new([
        ModelResponse::tool_calls(vec![call("c1", "Likes tea")]),
        ModelResponse::tool_calls(vec![call("c2", " likes TEA ")]),
        ModelResponse::text("Noted."),
    ]));
    let agent = helping(
        &model,
        memory.clone(),
        MemoryOptions::default().with_tools(true),
    );
    agent.run("I like tea").user("ada").await.unwrap();
    assert_eq!(memory.count(&Scope::user("ada")).await.unwrap(), 1);
    let second = model.requests()[2]
        .messages
        .last()
        .unwrap()
        .text()
        .to_owned();
    assert!(second.contains("already_remembered"), "{second}");
}

/// A run on a blank session id is refused, with a memory or without one, before any model
/// call: every caller whose session id came out blank (an anonymous user's) would share one
/// conversation, and one session's memory. (Before, a blank session ran, and recalled
/// without its scope.)
#[tokio::test]
async fn a_run_on_a_blank_session_is_refused_with_or_without_memory() {
    let memory = SqliteMemory::in_memory().unwrap();
    let model = Arc::new(ScriptedModel::new([ModelResponse::text("Tea, then.")]));
    let remembering = helping(&model, memory.clone(), MemoryOptions::default());
    let plain = Agent::builder("You help.")
        .model(model.clone())
        .build()
        .unwrap();
    for agent in [remembering, plain] {
        let refused = agent.run("What do I like?").user("ada").session(" ").await;
        let error = refused.unwrap_err().to_string();
        assert!(error.contains("thread (session) name is empty"), "{error}");
    }
    assert!(model.requests().is_empty());
}

/// A `recall` the backend fails tells the model why, the backend's own error included:
/// before, the tool's result said only "sqlite memory failed to recall …", its cause kept
/// where no message shows it.
#[tokio::test]
async fn a_failed_recall_tells_the_model_its_cause() {
    let path = std::env::temp_dir().join(format!(
        "loomflow-memory-failed-recall-{}.db",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    let memory = SqliteMemory::open(&path).unwrap();
    let other = rusqlite::Connection::open(&path).unwrap();
    other
        .execute_batch("DROP TABLE loomflow_memory_fts")
        .unwrap();
    let call = ToolCall::new("c1", "recall", json!({ "query": "tea" }));
    let model = Arc::new(ScriptedModel::new([
        ModelResponse::tool_calls(vec![call]),
        ModelResponse::text("I cannot tell."),
    ]));
    let agent = helping(
        &model,
        memory,
        MemoryOptions::default().with_tools(true).recall_limit(0),
    );
    agent.run("what do I like?").user("ada").await.unwrap();
    let result = model.requests()[1]
        .messages
        .last()
        .unwrap()
        .text()
        .to_owned();
    assert!(result.contains("no such table"), "{result}");
    let _ = std::fs::remove_file(&path);
}

/// An agent that helps, answering with `model`, with `memory` used as `options` say.
fn helping(
    model: &Arc<ScriptedModel>,
    memory: impl Memory + 'static,
    options: MemoryOptions,
) -> Agent {
    Agent::builder("You help.")
        .model(Arc::clone(model))
        .memory(memory)
        .memory_options(options)
        .build()
        .unwrap()
}
