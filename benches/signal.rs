//! Signal mailbox benchmarks (DESIGN.md §5: in-process signal to a parked waiter ≤ 5 µs
//! median; 100,000 parked waiters in ≤ 200 MiB).
//!
//! - `signal_wake`: from `signal` to the parked waiter running, on a multi-thread runtime;
//!   `same_runtime` signals from a task of the waiter's runtime, `from_thread` from a thread
//!   outside it (the waiter's worker may have gone to sleep).
//! - `signal_throughput`: signal then poll, through one session and across 10,000 sessions.
//! - `parked_waiters`: parks 100,000 waiters and prints the resident memory they take.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a benchmark that cannot set itself up should stop loudly"
)]

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput};
use loomflow::runtime::mailbox::{Mailbox, MailboxConfig};
use serde_json::json;

fn runtime(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A waiter that loops on ("s", "ping") and records when it ran, in ns since `base`.
struct Echo {
    mailbox: Mailbox,
    base: Instant,
    woke_at: Arc<AtomicU64>,
    wakes: Arc<AtomicU64>,
}

impl Echo {
    fn start(rt: &tokio::runtime::Runtime) -> Self {
        let mailbox = Mailbox::new(MailboxConfig::default());
        let base = Instant::now();
        let woke_at = Arc::new(AtomicU64::new(0));
        let wakes = Arc::new(AtomicU64::new(0));
        let (mb, at, count) = (mailbox.clone(), woke_at.clone(), wakes.clone());
        rt.spawn(async move {
            let _open = mb.open_session("s");
            while let Ok(payload) = mb.wait("s", "ping", None).await {
                at.store(base.elapsed().as_nanos() as u64, Ordering::Release);
                count.fetch_add(1, Ordering::Release);
                if payload.is_null() {
                    break;
                }
            }
        });
        Self {
            mailbox,
            base,
            woke_at,
            wakes,
        }
    }

    /// Signals the parked waiter once; returns the time from `signal` to the waiter running.
    async fn once(&self) -> Duration {
        while self.mailbox.waiting("s", "ping") == 0 {
            tokio::task::yield_now().await;
        }
        let before = self.wakes.load(Ordering::Acquire);
        let sent = self.base.elapsed().as_nanos() as u64;
        self.mailbox.signal("s", "ping", json!(1)).unwrap();
        while self.wakes.load(Ordering::Acquire) == before {
            tokio::task::yield_now().await;
        }
        Duration::from_nanos(self.woke_at.load(Ordering::Acquire).saturating_sub(sent))
    }

    /// Spin-waits outside any runtime; same measure as [`once`](Self::once).
    fn once_blocking(&self) -> Duration {
        while self.mailbox.waiting("s", "ping") == 0 {
            std::hint::spin_loop();
        }
        let before = self.wakes.load(Ordering::Acquire);
        let sent = self.base.elapsed().as_nanos() as u64;
        self.mailbox.signal("s", "ping", json!(1)).unwrap();
        while self.wakes.load(Ordering::Acquire) == before {
            std::hint::spin_loop();
        }
        Duration::from_nanos(self.woke_at.load(Ordering::Acquire).saturating_sub(sent))
    }

    fn stop(&self) {
        while self.mailbox.waiting("s", "ping") == 0 {
            std::thread::yield_now();
        }
        self.mailbox
            .signal("s", "ping", serde_json::Value::Null)
            .unwrap();
    }
}

fn signal_wake(c: &mut Criterion) {
    let mut group = c.benchmark_group("signal_wake");
    group.measurement_time(Duration::from_secs(4));

    let rt = runtime(2);
    let echo = Arc::new(Echo::start(&rt));
    group.bench_function("same_runtime", |b| {
        b.iter_custom(|iters| {
            let echo = echo.clone();
            rt.block_on(async move {
                tokio::spawn(async move {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        total += echo.once().await;
                    }
                    total
                })
                .await
                .unwrap()
            })
        });
    });
    echo.stop();
    drop(rt);

    let rt = runtime(1);
    let echo = Echo::start(&rt);
    group.bench_function("from_thread", |b| {
        b.iter_custom(|iters| (0..iters).map(|_| echo.once_blocking()).sum());
    });
    echo.stop();
    drop(rt);

    // Baseline without the mailbox: a bare `tokio::sync::Notify` woken from a thread, to show
    // how much of `from_thread` is the runtime waking a sleeping worker.
    let rt = runtime(1);
    let notify = Arc::new(tokio::sync::Notify::new());
    let armed = Arc::new(AtomicU64::new(0));
    let base = Instant::now();
    let woke_at = Arc::new(AtomicU64::new(0));
    let wakes = Arc::new(AtomicU64::new(0));
    let (n, a, at, count) = (
        notify.clone(),
        armed.clone(),
        woke_at.clone(),
        wakes.clone(),
    );
    rt.spawn(async move {
        loop {
            let notified = n.notified();
            a.fetch_add(1, Ordering::Release);
            notified.await;
            at.store(base.elapsed().as_nanos() as u64, Ordering::Release);
            count.fetch_add(1, Ordering::Release);
        }
    });
    group.bench_function("baseline_notify_from_thread", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let before = wakes.load(Ordering::Acquire);
                while armed.load(Ordering::Acquire) <= before {
                    std::hint::spin_loop();
                }
                let sent = base.elapsed().as_nanos() as u64;
                notify.notify_one();
                while wakes.load(Ordering::Acquire) == before {
                    std::hint::spin_loop();
                }
                total += Duration::from_nanos(woke_at.load(Ordering::Acquire).saturating_sub(sent));
            }
            total
        });
    });
    rt.shutdown_background();
    group.finish();
}

fn signal_throughput(c: &mut Criterion) {
    const BATCH: u64 = 1_000;
    const SESSIONS: usize = 10_000;
    let mut group = c.benchmark_group("signal_throughput");
    group.measurement_time(Duration::from_secs(3));

    let mailbox = Mailbox::new(MailboxConfig::default());
    let open = mailbox.open_session("s");
    group.throughput(Throughput::Elements(BATCH));
    group.bench_function("one_session", |b| {
        b.iter(|| {
            for i in 0..BATCH {
                mailbox.signal("s", "n", json!(i)).unwrap();
            }
            for _ in 0..BATCH {
                black_box(mailbox.poll("s", "n").unwrap());
            }
        });
    });
    drop(open);

    let sessions: Vec<String> = (0..SESSIONS).map(|i| format!("session-{i}")).collect();
    let guards: Vec<_> = sessions.iter().map(|s| mailbox.open_session(s)).collect();
    group.throughput(Throughput::Elements(SESSIONS as u64));
    group.bench_function("10k_sessions", |b| {
        b.iter(|| {
            for (i, s) in sessions.iter().enumerate() {
                mailbox.signal(s, "n", json!(i)).unwrap();
            }
            for s in &sessions {
                black_box(mailbox.poll(s, "n").unwrap());
            }
        });
    });
    drop(guards);

    // Four threads signalling one session each, to show lock contention.
    let guards: Vec<_> = (0..4)
        .map(|t| mailbox.open_session(&format!("t{t}")))
        .collect();
    group.throughput(Throughput::Elements(4 * BATCH));
    group.bench_function("4_threads", |b| {
        b.iter(|| {
            std::thread::scope(|scope| {
                for t in 0..4 {
                    let mailbox = &mailbox;
                    scope.spawn(move || {
                        let s = format!("t{t}");
                        for i in 0..BATCH {
                            mailbox.signal(&s, "n", json!(i)).unwrap();
                            black_box(mailbox.poll(&s, "n").unwrap());
                        }
                    });
                }
            });
        });
    });
    drop(guards);
    group.finish();
}

/// Resident set size in bytes, from /proc/self/status.
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Parks `n` waiters (one tokio task each), prints the resident memory they take, then
/// wakes them all.
fn parked_waiters(n: usize, one_session: bool) {
    let rt = runtime(2);
    let mailbox = Mailbox::new(MailboxConfig::default());
    let session = |i: usize| {
        if one_session {
            "s".to_owned()
        } else {
            format!("session-{i}")
        }
    };
    let guard = one_session.then(|| mailbox.open_session("s"));
    let before = resident_bytes().unwrap_or(0);
    let polled = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let wait = mailbox.wait(&session(i), "n", None);
            let polled = polled.clone();
            rt.spawn(async move {
                polled.fetch_add(1, Ordering::Relaxed);
                wait.await
            })
        })
        .collect();
    while polled.load(Ordering::Relaxed) < n {
        std::thread::sleep(Duration::from_millis(1));
    }
    let parked_in = started.elapsed();
    let after = resident_bytes().unwrap_or(0);
    let delta = after.saturating_sub(before);
    let started = Instant::now();
    for i in 0..n {
        mailbox.signal(&session(i), "n", json!(i)).unwrap();
    }
    rt.block_on(async {
        for task in tasks {
            task.await.unwrap().unwrap();
        }
    });
    let woken_in = started.elapsed();
    drop(guard);
    println!(
        "parked_waiters/{}: {n} waiters: {:.1} MiB resident ({} B/waiter, tasks included); \
         parked in {:.1} ms, all signalled and joined in {:.1} ms ({:.2} µs/waiter)",
        if one_session {
            "one_session"
        } else {
            "one_per_session"
        },
        delta as f64 / (1024.0 * 1024.0),
        delta / n as u64,
        parked_in.as_secs_f64() * 1e3,
        woken_in.as_secs_f64() * 1e3,
        woken_in.as_secs_f64() * 1e6 / n as f64,
    );
}

/// Runs each `parked_waiters` case in a fresh process, so that memory freed by one case
/// (and kept by the allocator) does not hide what the next one takes.
fn parked_waiters_isolated() {
    const CASE: &str = "LOOMFLOW_BENCH_PARKED";
    if let Ok(case) = std::env::var(CASE) {
        parked_waiters(100_000, case == "one_session");
        std::process::exit(0);
    }
    let exe = std::env::current_exe().expect("bench executable");
    for case in ["one_per_session", "one_session"] {
        let out = std::process::Command::new(&exe)
            .env(CASE, case)
            .output()
            .expect("parked_waiters child");
        print!("{}", String::from_utf8_lossy(&out.stdout));
    }
}

fn main() {
    parked_waiters_isolated();
    let mut c = Criterion::default()
        .configure_from_args()
        .warm_up_time(Duration::from_secs(1))
        .sample_size(50);
    signal_wake(&mut c);
    signal_throughput(&mut c);
    c.final_summary();
}
