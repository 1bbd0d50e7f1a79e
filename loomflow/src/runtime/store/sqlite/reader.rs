//! Read connections, each owned by its own thread, so that reads never block the async
//! executor and run beside the writer (WAL lets readers and one writer work at once).

use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;

use rusqlite::Connection;

use crate::runtime::store::StoreError;

/// A read to run on one of the connections.
pub(super) type Job = Box<dyn FnOnce(&Connection) + Send>;

/// The read threads. Dropping it finishes the queued reads and joins the threads.
pub(super) struct Readers {
    tx: Option<mpsc::Sender<Job>>,
    threads: Vec<JoinHandle<()>>,
}

impl Readers {
    /// Starts one thread per connection; they take jobs from one shared queue.
    pub(super) fn spawn(conns: Vec<Connection>) -> std::io::Result<Self> {
        let (tx, rx) = mpsc::channel::<Job>();
        let rx = Arc::new(Mutex::new(rx));
        let mut readers = Self {
            tx: Some(tx),
            threads: Vec::with_capacity(conns.len()),
        };
        for (i, conn) in conns.into_iter().enumerate() {
            let rx = Arc::clone(&rx);
            let thread = std::thread::Builder::new()
                .name(format!("loomflow-sqlite-reader-{i}"))
                .spawn(move || {
                    loop {
                        // Jobs never panic while holding the lock (they run after it is
                        // released), so a poisoned queue is still sound.
                        let job = crate::sync::lock(&rx).recv();
                        match job {
                            Ok(job) => job(&conn),
                            Err(_) => break,
                        }
                    }
                })?;
            readers.threads.push(thread);
        }
        Ok(readers)
    }

    /// Queues a read.
    pub(super) fn send(&self, job: Job) -> Result<(), StoreError> {
        self.tx
            .as_ref()
            .ok_or(StoreError::Closed)?
            .send(job)
            .map_err(|_| StoreError::Closed)
    }
}

impl Drop for Readers {
    fn drop(&mut self) {
        self.tx = None;
        for thread in self.threads.drain(..) {
            if thread.join().is_err() {
                tracing::error!("a sqlite reader thread panicked");
            }
        }
    }
}
