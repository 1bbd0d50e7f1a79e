//! Durable timers: [`Context::sleep`] and [`Context::sleep_until`].

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use crate::runtime::clock::{ClockWait, time_after, unix_ms};

use super::Context;
use crate::event::EventKind;
use crate::graph::RunError;
use crate::runtime::Interrupt;

/// A durable sleep; configure it, then `.await` it. Made by [`Context::sleep`] and
/// [`Context::sleep_until`].
///
/// The time it wakes is journaled the first time the node gets here, so a node that runs
/// again (a resume, a crash and `recover`) wakes at the same time and does not start its
/// sleep over.
#[must_use = "a sleep does nothing until it is awaited"]
#[derive(Debug)]
pub struct Sleep<'a> {
    ctx: &'a Context,
    until: Until,
    suspend: bool,
}

#[derive(Debug, Clone, Copy)]
enum Until {
    After(Duration),
    At(SystemTime),
}

impl Sleep<'_> {
    /// When the time is not yet due, suspends the run instead of sleeping in memory.
    ///
    /// The run stops with [`RunOutcome::Interrupted`](crate::RunOutcome::Interrupted); its
    /// interrupt carries `wake_at_ms` (and, as its payload, `{"sleeping_until_ms": …}`).
    /// [`recover`](crate::CompiledGraph::recover) carries the run on: once the time has
    /// come the sleep returns, before then the run suspends again. Use it for sleeps of
    /// hours or days.
    pub fn or_suspend(mut self) -> Self {
        self.suspend = true;
        self
    }
}

impl<'a> IntoFuture for Sleep<'a> {
    type Output = Result<(), RunError>;
    type IntoFuture = Pin<Box<dyn Future<Output = Self::Output> + Send + 'a>>;

    fn into_future(self) -> Self::IntoFuture {
        let noting = self.ctx;
        Box::pin(async move { noting.noted(self.slept().await) })
    }
}

impl Sleep<'_> {
    /// The sleep, without noting a store failure.
    async fn slept(self) -> Result<(), RunError> {
        {
            let ctx = self.ctx;
            let runtime = ctx.runtime();
            let wake_at_ms: u64 = ctx
                .step("sleep", || async {
                    let wake = match self.until {
                        Until::After(duration) => time_after(runtime.now(), duration),
                        Until::At(time) => time,
                    };
                    Ok::<_, RunError>(unix_ms(wake))
                })
                .await?;
            let now_ms = unix_ms(runtime.now());
            if now_ms >= wake_at_ms {
                return Ok(());
            }
            let left = Duration::from_millis(wake_at_ms - now_ms);
            // Under a worker, a sleep longer than the grace suspends the run: the worker
            // carries it on when the time comes, with nothing held in memory meanwhile.
            let grace = ctx.claim().park_grace();
            if self.suspend || grace.is_some_and(|grace| left > grace) {
                return Err(ctx.suspend_for_timer(wake_at_ms));
            }
            ctx.run
                .emit(ctx.step, Some(&ctx.node), EventKind::Sleep { wake_at_ms });
            // By the runtime's clock, which a test's `ManualClock` moves ahead.
            let wait = ClockWait::new(runtime.clock(), wake_at_ms);
            loop {
                if wait.left(runtime.clock()).is_zero() {
                    return Ok(());
                }
                let nap = wait.nap(runtime.clock());
                ctx.claim()
                    .unless_cancelled(tokio::time::sleep(nap))
                    .await?;
            }
        }
    }
}

impl Context {
    /// Sleeps for `duration`, durably: the time it wakes is journaled, so a node that runs
    /// again after a crash or a resume sleeps only what is left. With
    /// [`or_suspend`](Sleep::or_suspend), the run suspends instead of sleeping in memory.
    ///
    /// Time is read from the runtime's [`Clock`](crate::runtime::Clock) (a
    /// [`ManualClock`](crate::runtime::ManualClock) in tests).
    ///
    /// # Errors
    ///
    /// A store failure; [`RunError::Suspended`] with `or_suspend` when the time is not due.
    ///
    /// # Examples
    ///
    /// ```
    /// use loomflow::prelude::*;
    ///
    /// #[node]
    /// async fn remind(state: &mut Vec<String>, ctx: &Context) -> loomflow::Result<()> {
    ///     // Suspends the run for a day; `recover` the next day carries it on.
    ///     ctx.sleep(Duration::from_secs(86_400)).or_suspend().await?;
    ///     state.push("reminded".into());
    ///     Ok(())
    /// }
    /// # let _ = remind;
    /// ```
    pub fn sleep(&self, duration: Duration) -> Sleep<'_> {
        Sleep {
            ctx: self,
            until: Until::After(duration),
            suspend: false,
        }
    }

    /// Sleeps until `wake_at`, durably; see [`sleep`](Self::sleep).
    ///
    /// # Errors
    ///
    /// As for [`sleep`](Self::sleep).
    pub fn sleep_until(&self, wake_at: SystemTime) -> Sleep<'_> {
        Sleep {
            ctx: self,
            until: Until::At(wake_at),
            suspend: false,
        }
    }

    /// Records that the node suspends until `wake_at_ms`.
    fn suspend_for_timer(&self, wake_at_ms: u64) -> RunError {
        let mut control = self.control();
        if control.suspension.is_empty() {
            let index = control.interrupts_called;
            control.suspension.push(Interrupt {
                id: format!("{}#sleep:{wake_at_ms}", self.qualified_node()),
                node: String::from(&*self.node),
                index,
                payload: serde_json::json!({ "sleeping_until_ms": wake_at_ms }),
                signal: None,
                wake_at_ms: Some(wake_at_ms),
            });
        }
        RunError::Suspended {
            node: String::from(&*self.node),
        }
    }
}
