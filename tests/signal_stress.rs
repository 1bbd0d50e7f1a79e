//! Randomized concurrent stress test of the signal mailbox.
//!
//! Many senders, waiters, pollers, timeouts, cancellations, aborted tasks and guard churn on a
//! multi-threaded runtime. At the end every payload sent must have been received exactly once
//! or still be queued, and every (session, name) consumed by a single task must have seen each
//! sender's payloads in the order they were sent.
//!
//! Bounded to a few seconds; `LOOMFLOW_SOAK=1` runs a much larger soak.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failed step should fail the test loudly"
)]

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use loomflow::runtime::mailbox::{Delivery, Mailbox, MailboxConfig, SignalOptions};
use serde_json::{Value, json};

/// xorshift64*: deterministic decisions without a dependency.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const SESSIONS: usize = 8;
/// Names consumed by exactly one task each: order is checked.
const ORDERED: [&str; 2] = ["ord0", "ord1"];
/// Names consumed by several tasks that cancel, time out, get aborted and give payloads back.
const CHAOS: [&str; 2] = ["chaos0", "chaos1"];

fn session(i: usize) -> String {
    format!("s{i}")
}

/// Sessions with an even index stay open throughout; odd ones are never opened, so their
/// signals go to the pending mailbox and their waiters hold the mailbox while parked.
fn guarded(i: usize) -> bool {
    i.is_multiple_of(2)
}

type Id = (u64, u64);

fn id_of(value: &Value) -> Id {
    (
        value["sender"].as_u64().unwrap(),
        value["seq"].as_u64().unwrap(),
    )
}

struct Shared {
    mailbox: Mailbox,
    stop: AtomicBool,
    /// Every payload received by any consumer.
    received: Mutex<Vec<Id>>,
}

async fn yields(n: u64) {
    for _ in 0..n {
        tokio::task::yield_now().await;
    }
}

async fn send(shared: Arc<Shared>, sender: u64, seqs: std::ops::Range<u64>) -> Vec<Id> {
    let mut rng = Rng::new(1000 + sender + seqs.start);
    let mut sent = Vec::with_capacity(seqs.clone().count());
    for seq in seqs {
        let s = session(rng.below(SESSIONS as u64) as usize);
        let names = if rng.below(2) == 0 { &ORDERED } else { &CHAOS };
        let name = names[rng.below(2) as usize];
        let payload = json!({ "sender": sender, "seq": seq });
        if rng.below(7) == 0 {
            let key = format!("{sender}-{seq}");
            let options = SignalOptions::default().idempotency_key(key);
            let first = shared
                .mailbox
                .signal_with(&s, name, payload.clone(), options.clone())
                .unwrap();
            assert_ne!(first, Delivery::Duplicate);
            let again = shared
                .mailbox
                .signal_with(&s, name, payload, options)
                .unwrap();
            assert_eq!(
                again,
                Delivery::Duplicate,
                "key {sender}-{seq} delivered twice"
            );
        } else {
            shared.mailbox.signal(&s, name, payload).unwrap();
        }
        sent.push((sender, seq));
        if rng.below(8) == 0 {
            yields(rng.below(3) + 1).await;
        }
    }
    sent
}

/// The only consumer of one ordered (session, name): polls and waits with timeouts, never
/// cancels. Returns what it received, in order.
async fn consume_ordered(shared: Arc<Shared>, s: String, name: &'static str, seed: u64) -> Vec<Id> {
    let mut rng = Rng::new(seed);
    let mut got = Vec::new();
    while !shared.stop.load(Ordering::Acquire) {
        let value = if rng.below(3) == 0 {
            let value = shared.mailbox.poll(&s, name).unwrap();
            if value.is_none() {
                tokio::task::yield_now().await;
            }
            value
        } else {
            let timeout = Duration::from_micros(200 + rng.below(2_000));
            shared.mailbox.wait(&s, name, Some(timeout)).await.ok()
        };
        if let Some(value) = value {
            let id = id_of(&value);
            shared.received.lock().unwrap().push(id);
            got.push(id);
        }
    }
    got
}

/// One of several consumers of a chaos (session, name).
async fn consume_chaos(shared: Arc<Shared>, s: String, name: &'static str, seed: u64) {
    let mut rng = Rng::new(seed);
    while !shared.stop.load(Ordering::Acquire) {
        let value = match rng.below(4) {
            0 => {
                let value = shared.mailbox.poll(&s, name).unwrap();
                if value.is_none() {
                    tokio::task::yield_now().await;
                }
                value
            }
            1 => {
                let timeout = Duration::from_micros(100 + rng.below(1_000));
                shared.mailbox.wait(&s, name, Some(timeout)).await.ok()
            }
            _ => {
                // Cancelled after a few yields, possibly after being handed a payload.
                let wait = shared.mailbox.wait(&s, name, None);
                let k = rng.below(6);
                tokio::select! {
                    result = wait => result.ok(),
                    () = yields(k) => None,
                }
            }
        };
        if let Some(value) = value {
            if rng.below(10) == 0 {
                // As the typed layer does with a payload of the wrong shape.
                shared.mailbox.requeue_front(&s, name, value).unwrap();
            } else {
                shared.received.lock().unwrap().push(id_of(&value));
            }
        }
    }
}

/// Opens and closes extra guards on sessions that stay open anyway.
async fn churn_guards(shared: Arc<Shared>, seed: u64) {
    let mut rng = Rng::new(seed);
    while !shared.stop.load(Ordering::Acquire) {
        let s = session(2 * rng.below(SESSIONS as u64 / 2) as usize);
        let guard = shared.mailbox.open_session(&s);
        yields(rng.below(3)).await;
        let nested = guard.clone();
        drop(guard);
        yields(rng.below(3)).await;
        drop(nested);
    }
}

async fn run(senders: u64, per_sender: u64, chaos_per_name: u64) {
    let config = MailboxConfig::default()
        .max_pending_signal_sessions(None)
        .pending_signal_ttl(None);
    let shared = Arc::new(Shared {
        mailbox: Mailbox::new(config),
        stop: AtomicBool::new(false),
        received: Mutex::new(Vec::new()),
    });
    let guards: Vec<_> = (0..SESSIONS)
        .filter(|&i| guarded(i))
        .map(|i| shared.mailbox.open_session(&session(i)))
        .collect();

    let mut seed = 1;
    let mut ordered = Vec::new();
    let mut chaos = Vec::new();
    for i in 0..SESSIONS {
        for name in ORDERED {
            seed += 1;
            let task = consume_ordered(shared.clone(), session(i), name, seed);
            ordered.push(((session(i), name), tokio::spawn(task)));
        }
        for name in CHAOS {
            for _ in 0..chaos_per_name {
                seed += 1;
                chaos.push(tokio::spawn(consume_chaos(
                    shared.clone(),
                    session(i),
                    name,
                    seed,
                )));
            }
        }
    }
    let churn = tokio::spawn(churn_guards(shared.clone(), 77));
    let sending: Vec<_> = (0..senders)
        .map(|t| tokio::spawn(send(shared.clone(), t, 0..per_sender)))
        .collect();

    // Abort chaos consumers now and then (possibly right after they were handed a payload)
    // and replace them, while the senders run.
    let mut rng = Rng::new(4242);
    while !sending.iter().all(|task| task.is_finished()) {
        let victim = rng.below(chaos.len() as u64) as usize;
        chaos[victim].abort();
        seed += 1;
        let s = session(victim / (2 * chaos_per_name as usize));
        let name = CHAOS[victim / chaos_per_name as usize % 2];
        chaos[victim] = tokio::spawn(consume_chaos(shared.clone(), s, name, seed));
        yields(20).await;
    }
    let mut sent = HashSet::new();
    for task in sending {
        sent.extend(task.await.unwrap());
    }

    shared.stop.store(true, Ordering::Release);
    let mut ordered_seen = HashMap::new();
    for (channel, task) in ordered {
        ordered_seen.insert(channel, task.await.unwrap());
    }
    for task in chaos {
        if let Err(err) = task.await {
            assert!(err.is_cancelled(), "chaos consumer failed: {err}");
        }
    }
    churn.await.unwrap();

    // A tail nobody consumes: it must still be queued at the end.
    for t in 0..senders {
        sent.extend(send(shared.clone(), t, per_sender..per_sender + 50).await);
    }

    // Drain what is still queued, open sessions and pending ones alike.
    let mut leftovers = Vec::new();
    for i in 0..SESSIONS {
        for name in ORDERED.iter().chain(CHAOS.iter()) {
            let mut drained = Vec::new();
            while let Some(value) = shared.mailbox.poll(&session(i), name).unwrap() {
                drained.push(id_of(&value));
            }
            assert_eq!(shared.mailbox.waiting(&session(i), name), 0);
            if let Some(seen) = ordered_seen.get_mut(&(session(i), *name)) {
                seen.extend(drained.iter().copied());
            }
            leftovers.extend(drained);
        }
    }
    drop(guards);

    // Exactly once: received or still queued.
    let mut all = shared.received.lock().unwrap().clone();
    let received = all.len();
    all.extend(leftovers.iter().copied());
    let mut once = HashSet::new();
    for id in &all {
        assert!(once.insert(*id), "payload {id:?} delivered twice");
    }
    let lost: Vec<_> = sent.difference(&once).collect();
    assert!(
        lost.is_empty(),
        "{} payloads lost, e.g. {:?}",
        lost.len(),
        lost.first()
    );
    assert_eq!(once, sent, "received payloads that were never sent");
    assert!(leftovers.len() >= 50 * senders as usize);

    // Per-sender order on every single-consumer channel, leftovers included.
    for ((s, name), seen) in &ordered_seen {
        let mut last: HashMap<u64, u64> = HashMap::new();
        for &(sender, seq) in seen {
            if let Some(&before) = last.get(&sender) {
                assert!(
                    before < seq,
                    "{s}/{name}: sender {sender} seq {seq} after {before}"
                );
            }
            last.insert(sender, seq);
        }
    }
    println!(
        "stress: {} sent, {received} received, {} still queued at the end",
        sent.len(),
        leftovers.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_payload_is_received_once_or_still_queued() {
    if std::env::var_os("LOOMFLOW_SOAK").is_some_and(|v| v == "1") {
        tokio::time::timeout(Duration::from_secs(600), run(8, 100_000, 4))
            .await
            .expect("soak finished in time");
    } else {
        tokio::time::timeout(Duration::from_secs(60), run(4, 3_000, 3))
            .await
            .expect("stress test finished in time");
    }
}
