//! Events a run surfaces on its stream.

use serde::Serialize;
use serde_json::Value;

/// One observable moment in a run, yielded by [`CompiledGraph::stream`](crate::CompiledGraph::stream).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Event {
    /// The superstep (from 1) the event belongs to; 0 for run-level events before the first
    /// step. An event of a node inside a subgraph (`node` is `parent/child`) carries the
    /// subgraph's own step, which counts from 1 in each of its runs; the interrupts a
    /// recover tells again are step 0 and name their node.
    pub step: u64,
    /// The node it concerns, if any (`parent/child` for nodes inside a subgraph).
    pub node: Option<String>,
    /// What happened.
    pub kind: EventKind,
}

/// The kinds of [`Event`].
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum EventKind {
    /// A node started.
    NodeStart,
    /// A node finished successfully.
    NodeEnd,
    /// A superstep finished and its changes were merged.
    Step {
        /// The nodes that ran in it, in declaration order.
        nodes: Vec<String>,
    },
    /// Something a backend did inside a node: a model's streamed chunk, a tool call or its
    /// result, a permission decision. `data["type"]` says which.
    Backend {
        /// The event, as JSON with a `type` field.
        data: Value,
    },
    /// A custom event from [`Context::emit`](crate::Context::emit).
    Custom {
        /// The event's name.
        name: String,
        /// Its payload.
        data: Value,
    },
    /// A node suspended the run to ask for a value.
    Interrupt {
        /// The interrupt's id, for `resume`.
        id: String,
        /// What the node asked.
        payload: Value,
    },
    /// A node is waiting for a signal.
    Wait {
        /// The signal's name.
        signal: String,
        /// The wait's timeout, if any, in milliseconds.
        timeout_ms: Option<u64>,
    },
    /// A node is sleeping in memory ([`Context::sleep`](crate::Context::sleep) without
    /// `or_suspend`, or one short enough to sleep through under a worker) until a time.
    Sleep {
        /// When it wakes, in milliseconds since the Unix epoch, by the runtime's clock.
        wake_at_ms: u64,
    },
    /// The run completed.
    Done,
    /// The run failed.
    Error {
        /// The error, rendered with its sources.
        message: String,
    },
}

impl Event {
    pub(crate) fn new(step: u64, node: Option<String>, kind: EventKind) -> Self {
        Self { step, node, kind }
    }
}

/// Where a run's events go: a channel, and for a bounded stream, a count of the events the
/// listener has not taken yet that producers wait on.
///
/// Sending never blocks (nodes emit from synchronous code); producers that can make a lot of
/// events (model chunks, supersteps) wait for [`room`](EventSink::room) first, so a slow
/// listener holds the run back instead of letting events pile up.
#[derive(Clone, Debug)]
pub(crate) struct EventSink {
    tx: tokio::sync::mpsc::UnboundedSender<Event>,
    room: Option<std::sync::Arc<Room>>,
}

#[derive(Debug)]
struct Room {
    capacity: usize,
    queued: std::sync::atomic::AtomicUsize,
    freed: tokio::sync::Notify,
}

impl EventSink {
    /// A sink and its receiving end; `capacity` bounds it, `None` leaves it unbounded.
    pub(crate) fn new(capacity: Option<usize>) -> (Self, EventReceiver) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let room = capacity.map(|capacity| {
            std::sync::Arc::new(Room {
                capacity: capacity.max(1),
                queued: std::sync::atomic::AtomicUsize::new(0),
                freed: tokio::sync::Notify::new(),
            })
        });
        (
            Self {
                tx,
                room: room.clone(),
            },
            EventReceiver { rx, room },
        )
    }

    /// Sends an event; a listener that went away is not an error.
    pub(crate) fn send(&self, event: Event) {
        use std::sync::atomic::Ordering;
        // Counted before it can be taken, so that a take never finds the count at zero.
        if let Some(room) = &self.room {
            room.queued.fetch_add(1, Ordering::AcqRel);
        }
        if self.tx.send(event).is_err()
            && let Some(room) = &self.room
        {
            room.queued.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Waits until the listener has taken enough events for the stream to be under its
    /// bound (at once when it is unbounded, or when the listener went away).
    pub(crate) async fn room(&self) {
        let Some(room) = &self.room else { return };
        loop {
            let freed = room.freed.notified();
            tokio::pin!(freed);
            // Registered before the check, so a take between the check and the wait wakes it.
            freed.as_mut().enable();
            if room.queued.load(std::sync::atomic::Ordering::Acquire) < room.capacity
                || self.tx.is_closed()
            {
                return;
            }
            freed.await;
        }
    }
}

/// The receiving end of an [`EventSink`].
#[derive(Debug)]
pub(crate) struct EventReceiver {
    rx: tokio::sync::mpsc::UnboundedReceiver<Event>,
    room: Option<std::sync::Arc<Room>>,
}

impl EventReceiver {
    pub(crate) fn poll_recv(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Event>> {
        let polled = self.rx.poll_recv(cx);
        if let (std::task::Poll::Ready(Some(_)), Some(room)) = (&polled, &self.room) {
            room.queued
                .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
            room.freed.notify_waiters();
        }
        polled
    }

    /// The next event already queued, if any; never waits.
    pub(crate) fn try_recv(&mut self) -> Option<Event> {
        let event = self.rx.try_recv().ok()?;
        if let Some(room) = &self.room {
            room.queued
                .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
            room.freed.notify_waiters();
        }
        Some(event)
    }

    /// Stops taking events; producers waiting for room go on.
    pub(crate) fn close(&mut self) {
        self.rx.close();
        if let Some(room) = &self.room {
            room.freed.notify_waiters();
        }
    }
}

impl Drop for EventReceiver {
    fn drop(&mut self) {
        self.close();
    }
}
