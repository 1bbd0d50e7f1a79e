//! The behaviour every `Memory` backend must have, as functions the backend tests call.
#![allow(dead_code)]

use loomflow::Error;
use loomflow::memory::{Consolidation, Memory, MemoryError, MemoryId, Scope};
use loomflow::model::{ModelResponse, ScriptedModel};
use loomflow::prelude::*;
use serde_json::json;

/// One user never recalls another's items, nor a session's or an agent's of the same id;
/// forgetting through the wrong scope does nothing.
pub(crate) async fn scopes_are_kept_apart<M: Memory>(memory: &M) {
    let ada = Scope::user("ada");
    let bob = Scope::user("bob");
    let ada_session = Scope::session("ada");
    let ada_id = memory
        .remember(&ada, "Ada's locker code is 4411", json!({}))
        .await
        .unwrap();
    memory
        .remember(&bob, "Bob's locker code is 9076", json!({}))
        .await
        .unwrap();
    memory
        .remember(
            &ada_session,
            "this session's locker code is 1234",
            json!({}),
        )
        .await
        .unwrap();
    memory
        .remember(
            &Scope::agent("ada"),
            "the agent's locker code is 5555",
            json!({}),
        )
        .await
        .unwrap();

    for (scope, only) in [(&ada, "4411"), (&bob, "9076"), (&ada_session, "1234")] {
        let found = memory.recall(scope, "locker code", 10).await.unwrap();
        assert_eq!(found.len(), 1, "{scope}: {found:?}");
        assert!(found[0].text.contains(only), "{scope}: {found:?}");
        assert_eq!(&found[0].scope, scope);
    }
    assert!(
        memory
            .recall(&Scope::user("carol"), "locker code", 10)
            .await
            .unwrap()
            .is_empty()
    );

    assert!(
        !memory.forget(&bob, ada_id).await.unwrap(),
        "bob cannot forget ada's item"
    );
    assert_eq!(memory.count(&ada).await.unwrap(), 1);
    let bobs = memory.count(&bob).await.unwrap();
    let refused = memory
        .replace(&bob, &[ada_id], &["Bob likes jazz".into()], json!({}))
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, MemoryError::Gone { scope, missing } if *scope == bob && missing == &[ada_id]),
        "{refused:?}"
    );
    assert_eq!(
        memory.count(&ada).await.unwrap(),
        1,
        "replace through bob left ada's item"
    );
    assert_eq!(memory.count(&bob).await.unwrap(), bobs, "and wrote nothing");
    assert!(memory.forget(&ada, ada_id).await.unwrap());
    assert!(memory.recall(&ada, "locker", 10).await.unwrap().is_empty());
    assert_eq!(memory.forget_all(&bob).await.unwrap(), bobs);
    assert_eq!(memory.count(&ada_session).await.unwrap(), 1);
}

/// More of the query's words (stemmed) rank higher; ties go to the newer item; `k` cuts.
pub(crate) async fn recall_ranks_by_relevance<M: Memory>(memory: &M) {
    let ann = Scope::user("ann");
    let both = "Ann drinks black coffee every morning";
    for text in [
        "Ann drinks tea in the afternoon",
        both,
        "Ann bought a coffee grinder",
        "Ann's sister lives in Oslo",
    ] {
        memory
            .remember(&ann, text, json!({ "kind": "fact" }))
            .await
            .unwrap();
    }
    let found = memory
        .recall(&ann, "Does she like her coffee black?", 10)
        .await
        .unwrap();
    let texts: Vec<&str> = found.iter().map(|i| i.text.as_str()).collect();
    assert_eq!(texts, [both, "Ann bought a coffee grinder"]);
    assert!(found[0].score > found[1].score, "{found:?}");
    assert_eq!(found[0].metadata, json!({ "kind": "fact" }));

    // Stemming: "drinking" finds "drinks".
    let found = memory.recall(&ann, "drinking", 10).await.unwrap();
    assert_eq!(found.len(), 2, "{found:?}");
    // A tie: the newer item first; k cuts the list.
    memory
        .remember(&ann, "Ann bought a coffee mug", json!({}))
        .await
        .unwrap();
    let found = memory.recall(&ann, "bought", 1).await.unwrap();
    assert_eq!(found[0].text, "Ann bought a coffee mug");

    // Search syntax in a query is words, not operators; no words finds nothing.
    let found = memory
        .recall(&ann, r#"coffee" OR NEAR(tea) -- ; "#, 10)
        .await
        .unwrap();
    assert_eq!(found.len(), 4, "{found:?}");
    assert!(memory.recall(&ann, "?!", 10).await.unwrap().is_empty());
}

/// A query of only common words (PostgreSQL's English stop words among them) finds nothing,
/// whichever backend: one that indexed them would match nearly everything.
pub(crate) async fn a_query_of_only_common_words_finds_nothing<M: Memory>(memory: &M) {
    let gus = Scope::user("gus");
    memory
        .remember(&gus, "Gus is a nurse", json!({}))
        .await
        .unwrap();
    memory
        .remember(&gus, "Gus wants more tea", json!({}))
        .await
        .unwrap();
    for query in ["Who is she?", "more", "again, and more of the same"] {
        let found = memory.recall(&gus, query, 5).await.unwrap();
        assert!(found.is_empty(), "{query}: {found:?}");
    }
    let found = memory.recall(&gus, "more tea", 5).await.unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].text, "Gus wants more tea");
}

/// Bad input is a typed error naming the culprit.
pub(crate) async fn bad_input_is_a_typed_error<M: Memory>(memory: &M) {
    // A scope id past the limit, refused alike by every backend (PostgreSQL's index would
    // refuse it with an error of its own), naming the scope's kind and the id's length.
    let long = Scope::session("s".repeat(loomflow::memory::MAX_SCOPE_ID_BYTES + 1));
    let error = memory.remember(&long, "x", json!({})).await.unwrap_err();
    assert!(
        matches!(
            error,
            MemoryError::ScopeIdTooLong {
                kind: "session",
                bytes: 1025,
                limit: 1024
            }
        ),
        "{error:?}"
    );
    let at_limit = Scope::session("s".repeat(loomflow::memory::MAX_SCOPE_ID_BYTES));
    memory.remember(&at_limit, "x", json!({})).await.unwrap();
    assert_eq!(memory.count(&at_limit).await.unwrap(), 1);
    let error = memory
        .remember(&Scope::user(" "), "x", json!({}))
        .await
        .unwrap_err();
    assert!(
        matches!(error, MemoryError::EmptyScope { kind: "user" }),
        "{error:?}"
    );
    let error = memory
        .remember(&Scope::user("ada"), "  ", json!({}))
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "nothing to remember for user ada: the text is empty"
    );
    let error = memory
        .remember(&Scope::session("s1"), "x", json!([1]))
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "metadata for session s1 must be a JSON object, not an array"
    );
    let error = memory.recall(&Scope::agent(""), "x", 3).await.unwrap_err();
    assert!(matches!(error, MemoryError::EmptyScope { kind: "agent" }));

    // What one backend cannot store, none takes: a NUL, a text past the limit.
    let error = memory
        .remember(&Scope::user("ada"), "tea\u{0}", json!({}))
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "the text of user ada holds a NUL character, which memory does not store"
    );
    let error = memory
        .remember(&Scope::user("a\u{0}da"), "tea", json!({}))
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "the scope id of a user scope holds a NUL character, which memory does not store"
    );
    let long = "word ".repeat(loomflow::memory::MAX_TEXT_BYTES / 5 + 1);
    let error = memory
        .remember(&Scope::user("ada"), &long, json!({}))
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        format!(
            "the text for user ada is {} bytes, more than the {} an item may hold",
            long.len(),
            loomflow::memory::MAX_TEXT_BYTES
        )
    );
    let error = memory
        .replace(&Scope::user("ada"), &[], &["x\u{0}".to_owned()], json!({}))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, MemoryError::NulCharacter { field: "text", .. }),
        "{error:?}"
    );

    // Metadata is kept as JSON text: past serde_json's 128 levels it reads back whole, past
    // 512 it is refused.
    let nested = |levels: usize| (0..levels).fold(json!("leaf"), |inner, _| json!([inner]));
    let deep = json!({ "tree": nested(300) });
    let ada = Scope::user("ada");
    memory
        .remember(&ada, "Ada keeps a deep tree", deep.clone())
        .await
        .unwrap();
    let found = memory.recall(&ada, "deep tree", 1).await.unwrap();
    assert_eq!(found[0].metadata, deep);
    let error = memory
        .remember(&ada, "too deep", json!({ "tree": nested(600) }))
        .await
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "metadata for user ada nests deeper than 512 levels"
    );
}

/// Consolidation merges the old items through one journaled model call: after a failure
/// that comes once the model answered, `recover` finishes without asking the model again.
pub(crate) async fn consolidation_is_journaled<M: Memory + Clone>(memory: &M, runtime: &Runtime) {
    let ada = Scope::user("ada");
    let mut old = Vec::new();
    for fact in [
        "Ada likes tea",
        "Ada likes green tea",
        "Ada moved to Lyon",
        "Ada lives in Lyon",
    ] {
        old.push(memory.remember(&ada, fact, json!({})).await.unwrap());
    }
    let newest = memory
        .remember(&ada, "Ada adopted a cat", json!({}))
        .await
        .unwrap();
    memory
        .remember(&Scope::user("bob"), "Bob likes tea", json!({}))
        .await
        .unwrap();

    let newest_old = memory.list(&ada, 4).await.unwrap()[3].created_at;

    // The memory refuses the rewrite once: the run fails after the model's answer.
    let flaky = Flaky {
        inner: memory.clone(),
        failures: std::sync::Arc::new(1.into()),
        after: false,
    };
    let model = std::sync::Arc::new(ScriptedModel::new([ModelResponse::text(
        "```json\n[\"Ada likes green tea\", \"Ada lives in Lyon\"]\n```",
    )]));
    let consolidation = Consolidation::new(std::sync::Arc::clone(&model)).keep_newest(1);
    let failed = consolidation.run(&flaky, runtime, &ada).await.unwrap_err();
    assert!(chain_has(&failed, "the disk is full"), "{failed:?}");
    assert_eq!(
        memory.count(&ada).await.unwrap(),
        5,
        "nothing rewritten yet"
    );

    let report = consolidation.recover(&flaky, runtime, &ada).await.unwrap();
    assert_eq!(model.requests().len(), 1, "the model was asked once");
    assert_eq!(report.removed, old);
    assert_eq!(report.added.len(), 2);
    let prompt = serde_json::to_string(&model.requests()[0].messages).unwrap();
    assert!(
        prompt.contains("1. Ada likes tea") && prompt.contains("4. Ada lives in Lyon"),
        "{prompt}"
    );
    assert!(
        !prompt.contains("adopted") && !prompt.contains("Bob"),
        "{prompt}"
    );

    let left: Vec<(MemoryId, String)> = memory
        .list(&ada, 10)
        .await
        .unwrap()
        .into_iter()
        .map(|i| (i.id, i.text))
        .collect();
    assert_eq!(left.len(), 3);
    assert!(
        left.contains(&(newest, "Ada adopted a cat".to_owned())),
        "{left:?}"
    );
    let merged = memory.recall(&ada, "green tea", 5).await.unwrap();
    assert_eq!(merged[0].text, "Ada likes green tea");
    assert_eq!(merged[0].metadata["source"], "consolidation");
    assert_eq!(
        merged[0].created_at, newest_old,
        "dated as the newest item it replaces, not as the time of the merge"
    );
    assert_eq!(memory.count(&Scope::user("bob")).await.unwrap(), 1);

    // An answer that would forget everything is refused, typed; nothing changes.
    let empty = ScriptedModel::new([ModelResponse::text("[]")]);
    let error = Consolidation::new(empty)
        .keep_newest(0)
        .run(memory, runtime, &ada)
        .await
        .unwrap_err();
    assert!(
        source_chain(&error).any(|e| matches!(
            e.downcast_ref::<Error>(),
            Some(Error::Memory(MemoryError::BadConsolidation { scope, .. })) if *scope == ada
        )),
        "{error:?}"
    );
    assert_eq!(memory.count(&ada).await.unwrap(), 3);
    // Fewer than two items to merge: no model call at all.
    let unused = ScriptedModel::new([]);
    let report = Consolidation::new(unused)
        .keep_newest(2)
        .run(memory, runtime, &ada)
        .await
        .unwrap();
    assert!(report.removed.is_empty() && report.added.is_empty());
}

/// A consolidation whose rewrite committed but whose run failed before journaling it is
/// finished by `recover` without rewriting again.
pub(crate) async fn consolidation_rewrites_once<M: Memory + Clone>(memory: &M, runtime: &Runtime) {
    let cy = Scope::user("cy");
    for fact in ["Cy likes jazz", "Cy likes cool jazz", "Cy plays piano"] {
        memory.remember(&cy, fact, json!({})).await.unwrap();
    }
    let flaky = Flaky {
        inner: memory.clone(),
        failures: std::sync::Arc::new(1.into()),
        after: true,
    };
    let model = std::sync::Arc::new(ScriptedModel::new([ModelResponse::text(
        r#"["Cy likes cool jazz and plays piano"]"#,
    )]));
    let consolidation = Consolidation::new(std::sync::Arc::clone(&model)).keep_newest(0);
    assert!(consolidation.run(&flaky, runtime, &cy).await.is_err());
    assert_eq!(memory.count(&cy).await.unwrap(), 1, "the rewrite committed");
    let report = consolidation.recover(&flaky, runtime, &cy).await.unwrap();
    assert_eq!(
        memory.count(&cy).await.unwrap(),
        1,
        "and was not made again"
    );
    assert_eq!(report.added.len(), 1);
    assert_eq!(model.requests().len(), 1, "the model was asked once");
}

/// A consolidation after its thread was deleted (the thread's name starts afresh, at run 1)
/// makes its own rewrite: the first one's merged items are not taken for it.
pub(crate) async fn consolidation_after_a_thread_delete_rewrites_again<M: Memory + Clone>(
    memory: &M,
    runtime: &Runtime,
) {
    let di = Scope::user("di");
    for fact in ["Di likes tea", "Di likes green tea"] {
        memory.remember(&di, fact, json!({})).await.unwrap();
    }
    let model = std::sync::Arc::new(ScriptedModel::new([
        ModelResponse::text(r#"["Di likes green tea"]"#),
        ModelResponse::text(r#"["Di likes green tea and lives in Oslo"]"#),
    ]));
    let consolidation = Consolidation::new(std::sync::Arc::clone(&model)).keep_newest(0);
    let first = consolidation.run(memory, runtime, &di).await.unwrap();
    runtime
        .delete_thread("loomflow:memory:user:di")
        .await
        .unwrap();
    memory
        .remember(&di, "Di lives in Oslo", json!({}))
        .await
        .unwrap();

    let second = consolidation.run(memory, runtime, &di).await.unwrap();
    assert_eq!(second.removed.len(), 2);
    assert_ne!(second.added, first.added, "a rewrite of its own");
    let left = memory.recall(&di, "Oslo", 10).await.unwrap();
    assert_eq!(memory.count(&di).await.unwrap(), 1, "{left:?}");
    assert_eq!(left[0].text, "Di likes green tea and lives in Oslo");
    assert_eq!(model.requests().len(), 2);
}

/// A consolidation whose chosen items were forgotten before its rewrite (it failed, and is
/// recovered later) writes nothing: its merged items would bring back what was forgotten.
/// The same for one whose items another consolidation merged meanwhile.
pub(crate) async fn consolidation_writes_nothing_over_forgotten_items<M: Memory + Clone>(
    memory: &M,
    runtime: &Runtime,
) {
    let eve = Scope::user("eve");
    for fact in [
        "Eve likes tea",
        "Eve likes green tea",
        "Eve is allergic to nuts",
    ] {
        memory.remember(&eve, fact, json!({})).await.unwrap();
    }
    let flaky = Flaky {
        inner: memory.clone(),
        failures: std::sync::Arc::new(1.into()),
        after: false,
    };
    let model = std::sync::Arc::new(ScriptedModel::new([ModelResponse::text(
        r#"["Eve likes green tea", "Eve is allergic to nuts"]"#,
    )]));
    let consolidation = Consolidation::new(std::sync::Arc::clone(&model)).keep_newest(0);
    assert!(consolidation.run(&flaky, runtime, &eve).await.is_err());
    assert_eq!(
        memory.forget_all(&eve).await.unwrap(),
        3,
        "the user erases it all"
    );

    let report = consolidation.recover(&flaky, runtime, &eve).await.unwrap();
    assert!(
        report.removed.is_empty() && report.added.is_empty(),
        "{report:?}"
    );
    assert_eq!(memory.count(&eve).await.unwrap(), 0, "nothing came back");
    assert_eq!(model.requests().len(), 1);

    // Two consolidations chose the same items; the one that rewrites second writes nothing.
    let fay = Scope::user("fay");
    let mut old = Vec::new();
    for fact in ["Fay likes jazz", "Fay likes cool jazz"] {
        old.push(memory.remember(&fay, fact, json!({})).await.unwrap());
    }
    let merged = ["Fay likes cool jazz".to_owned()];
    let first = memory
        .replace(&fay, &old, &merged, json!({}))
        .await
        .unwrap();
    let second = memory
        .replace(&fay, &old, &merged, json!({}))
        .await
        .unwrap_err();
    assert!(
        matches!(&second, MemoryError::Gone { missing, .. } if *missing == old),
        "{second:?}"
    );
    assert_eq!(
        second.to_string(),
        format!(
            "cannot replace items of user fay: items {}, {} are gone (forgotten, or merged by \
             another consolidation); nothing was replaced",
            old[0], old[1]
        )
    );
    let left = memory.list(&fay, 10).await.unwrap();
    assert_eq!(left.iter().map(|i| i.id).collect::<Vec<_>>(), first);
}

fn source_chain(error: &Error) -> impl Iterator<Item = &(dyn std::error::Error + 'static)> {
    std::iter::successors(Some(error as &(dyn std::error::Error + 'static)), |e| {
        e.source()
    })
}

fn chain_has(error: &Error, text: &str) -> bool {
    source_chain(error).any(|e| e.to_string().contains(text))
}

/// Two memories consolidated on one runtime, each named: a consolidation of one that failed
/// after the model answered is carried on by its own `recover`, and the other's `recover` of
/// the same scope finds nothing to carry on. Unnamed, both scopes had one thread, and the
/// other's `recover` carried on the first's run, writing its answer into the wrong memory.
pub(crate) async fn named_memories_consolidate_apart<M: Memory + Clone>(
    a: &M,
    b: &M,
    runtime: &Runtime,
) {
    let ada = Scope::user("ada");
    for memory in [a, b] {
        for fact in ["Ada likes tea", "Ada likes green tea", "Ada lives in Lyon"] {
            memory.remember(&ada, fact, json!({})).await.unwrap();
        }
    }
    let flaky_a = Flaky {
        inner: a.clone(),
        failures: std::sync::Arc::new(1.into()),
        after: false,
    };
    let model = std::sync::Arc::new(ScriptedModel::new([ModelResponse::text(
        r#"["Ada likes green tea", "Ada lives in Lyon"]"#,
    )]));
    let for_a = Consolidation::new(std::sync::Arc::clone(&model))
        .keep_newest(0)
        .memory_name("tenant-a");
    for_a.run(&flaky_a, runtime, &ada).await.unwrap_err();

    let for_b = Consolidation::new(ScriptedModel::new([]))
        .keep_newest(0)
        .memory_name("tenant-b");
    let nothing = for_b.recover(b, runtime, &ada).await;
    assert!(nothing.is_err(), "{nothing:?}");
    assert_eq!(b.count(&ada).await.unwrap(), 3, "b is untouched");

    let report = for_a.recover(&flaky_a, runtime, &ada).await.unwrap();
    assert_eq!((report.removed.len(), report.added.len()), (3, 2));
    assert_eq!(a.count(&ada).await.unwrap(), 2);
    assert_eq!(model.requests().len(), 1, "the model was asked once");

    // A name that could read as another memory's scope is refused, naming the scope; so is
    // one too long for a thread's name.
    for name in ["x:user".to_owned(), "t".repeat(129)] {
        let named = Consolidation::new(ScriptedModel::new([])).memory_name(name.as_str());
        let refused = named.run(b, runtime, &ada).await.unwrap_err();
        assert!(
            matches!(&refused, Error::Memory(MemoryError::BadOptions { problem, .. })
                if problem.contains(&format!("memory_name {name:?}"))),
            "{refused:?}"
        );
    }
}

/// A memory whose `replace` fails a given number of times: before writing anything, or
/// (`after`) once its rewrite committed, as a process that dies before journaling it would.
#[derive(Clone)]
struct Flaky<M> {
    inner: M,
    failures: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    after: bool,
}

impl<M: Memory + Clone> Memory for Flaky<M> {
    fn remember<'a>(
        &'a self,
        scope: &'a Scope,
        text: &'a str,
        metadata: serde_json::Value,
    ) -> loomflow::graph::BoxFuture<'a, Result<MemoryId, MemoryError>> {
        self.inner.remember(scope, text, metadata)
    }
    fn recall<'a>(
        &'a self,
        scope: &'a Scope,
        query: &'a str,
        k: usize,
    ) -> loomflow::graph::BoxFuture<'a, Result<Vec<loomflow::memory::MemoryItem>, MemoryError>>
    {
        self.inner.recall(scope, query, k)
    }
    fn forget<'a>(
        &'a self,
        scope: &'a Scope,
        id: MemoryId,
    ) -> loomflow::graph::BoxFuture<'a, Result<bool, MemoryError>> {
        self.inner.forget(scope, id)
    }
    fn forget_all<'a>(
        &'a self,
        scope: &'a Scope,
    ) -> loomflow::graph::BoxFuture<'a, Result<u64, MemoryError>> {
        self.inner.forget_all(scope)
    }
    fn count<'a>(
        &'a self,
        scope: &'a Scope,
    ) -> loomflow::graph::BoxFuture<'a, Result<u64, MemoryError>> {
        self.inner.count(scope)
    }
    fn list<'a>(
        &'a self,
        scope: &'a Scope,
        limit: usize,
    ) -> loomflow::graph::BoxFuture<'a, Result<Vec<loomflow::memory::MemoryItem>, MemoryError>>
    {
        self.inner.list(scope, limit)
    }
    fn replace<'a>(
        &'a self,
        scope: &'a Scope,
        old: &'a [MemoryId],
        texts: &'a [String],
        metadata: serde_json::Value,
    ) -> loomflow::graph::BoxFuture<'a, Result<Vec<MemoryId>, MemoryError>> {
        use std::sync::atomic::Ordering;
        if self
            .failures
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            let committed = self
                .after
                .then(|| self.inner.replace(scope, old, texts, metadata));
            return Box::pin(async move {
                if let Some(committed) = committed {
                    committed.await?;
                }
                Err(MemoryError::Backend {
                    backend: "test",
                    operation: "replace".into(),
                    source: "the disk is full".into(),
                })
            });
        }
        self.inner.replace(scope, old, texts, metadata)
    }
}

/// A fact named at the end of a long message, after more than 32 other words (many of them
/// common ones), is still recalled: an agent recalls with the user's whole message.
pub(crate) async fn a_long_message_still_recalls_what_it_names<M: Memory>(memory: &M) {
    let ada = Scope::user("long");
    memory.forget_all(&ada).await.unwrap();
    memory
        .remember(&ada, "Ada is allergic to peanuts", json!({}))
        .await
        .unwrap();
    let message = "Hi there, I hope you are doing well today. My partner and I are hosting a \
        small dinner party this Saturday for six friends from work, and we would love a \
        main course idea; one guest cannot eat peanuts.";
    assert_eq!(memory.recall(&ada, message, 5).await.unwrap().len(), 1);
    let filler: Vec<String> = (0..60).map(|i| format!("w{i}")).collect();
    let message = format!("{} peanuts", filler.join(" "));
    assert_eq!(memory.recall(&ada, &message, 5).await.unwrap().len(), 1);
}

/// A query finds the text it was typed from, whatever case or Unicode form it comes in:
/// `İ` (whose lowercase is `i` + a combining dot) and an accent typed as its own code point.
pub(crate) async fn a_query_finds_its_own_text<M: Memory>(memory: &M) {
    let scope = Scope::user("unicode");
    for (text, query) in [
        ("Ada moved to İstanbul", "İstanbul"),
        ("Ada moved to İzmir", "İZMİR"),
        ("Ada's favourite café", "cafe\u{301}"),
        ("Ada reads Hindi: हिन्दी", "हिन्दी"),
    ] {
        memory.forget_all(&scope).await.unwrap();
        memory.remember(&scope, text, json!({})).await.unwrap();
        let found = memory.recall(&scope, query, 5).await.unwrap();
        assert_eq!(found.len(), 1, "{query:?} does not find {text:?}");
    }
}

/// Ties go to the newer item by date, whatever the ids: an item a consolidation rewrote
/// keeps the date of what it replaced, under a new (higher) id, and must not outrank a
/// newer fact that ties with it.
pub(crate) async fn ties_go_to_the_newer_item_after_a_replace<M: Memory>(memory: &M) {
    let ada = Scope::user("ada");
    let lyon = memory
        .remember(&ada, "Ada lives in Lyon", json!({}))
        .await
        .unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    memory
        .remember(&ada, "Ada lives in Paris", json!({}))
        .await
        .unwrap();
    let rewritten = ["Ada lives in Lyon".to_owned()];
    memory
        .replace(&ada, &[lyon], &rewritten, json!({}))
        .await
        .unwrap();
    let found = memory.recall(&ada, "where does Ada live", 1).await.unwrap();
    let texts: Vec<&str> = found.iter().map(|i| i.text.as_str()).collect();
    assert_eq!(texts, ["Ada lives in Paris"], "{found:?}");
}

/// A text is found as it is, whatever ranks above it in a recall: the look extraction uses
/// to tell a fact it knows from a new one. Before, it looked among the first three recall
/// hits only, and a fact that items repeating its words outranked was stored again.
pub(crate) async fn a_text_is_found_as_it_is<M: Memory>(memory: &M) {
    let ada = Scope::user("ada");
    for text in [
        "Ada likes tea",
        "Ada likes tea with lemon",
        "Ada likes tea in the morning",
        "Ada likes tea more than coffee",
    ] {
        memory.remember(&ada, text, json!({})).await.unwrap();
    }
    assert!(memory.holds_text(&ada, "  ada likes TEA ").await.unwrap());
    assert!(!memory.holds_text(&ada, "Ada likes").await.unwrap());
    // Whitespace at the ends is set aside on both sides, the same on every backend: a text
    // stored with a line break at its end (a tool's, a consolidation's) is found.
    memory
        .remember(&ada, "\tAda drinks oolong\r\n", json!({}))
        .await
        .unwrap();
    assert!(memory.holds_text(&ada, "ada drinks oolong").await.unwrap());
    assert!(
        memory
            .holds_text(&ada, "\nAda drinks oolong\x0c")
            .await
            .unwrap()
    );
    assert!(
        !memory
            .holds_text(&Scope::user("bob"), "Ada likes tea")
            .await
            .unwrap()
    );
}
