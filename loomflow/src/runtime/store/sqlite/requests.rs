//! How the store hands its work to the writer thread and the reader threads.

use futures_util::future::BoxFuture;
use rusqlite::Connection;
use tokio::sync::oneshot;

use super::SqliteStore;
use super::rows::{corrupt, undecodable, unexpected};
use super::writer::{Op, Outcome, Request};
use crate::runtime::store::StoreError;

impl SqliteStore {
    pub(super) fn write(&self, op: Op) -> BoxFuture<'_, Result<Outcome, StoreError>> {
        let (reply, answer) = oneshot::channel();
        let sent = self.writer.submit(Request { op, reply });
        Box::pin(async move {
            sent?;
            answer.await.map_err(|_| StoreError::Closed)?
        })
    }

    /// [`write`](Self::write) of `op`, which answers `Done`; an error building it is handed
    /// back as it is.
    pub(super) fn write_done(
        &self,
        op: Result<Op, StoreError>,
    ) -> BoxFuture<'_, Result<(), StoreError>> {
        let op = match op {
            Ok(op) => op,
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        };
        let thread = op.thread().to_owned();
        let written = self.write(op);
        Box::pin(async move {
            match written.await? {
                Outcome::Done => Ok(()),
                other => Err(unexpected(&thread, &other)),
            }
        })
    }

    pub(super) fn read<T: Send + 'static>(
        &self,
        thread: &str,
        f: impl FnOnce(&Connection) -> rusqlite::Result<Result<T, StoreError>> + Send + 'static,
    ) -> BoxFuture<'_, Result<T, StoreError>> {
        let (reply, answer) = oneshot::channel();
        let thread = thread.to_owned();
        let sent = self.readers.send(Box::new(move |conn| {
            let result = f(conn).unwrap_or_else(|e| match undecodable(&e) {
                Some(wrong) => Err(corrupt(&thread, wrong)),
                None => Err(StoreError::Read {
                    thread,
                    message: e.to_string(),
                }),
            });
            let _ = reply.send(result);
        }));
        Box::pin(async move {
            sent?;
            answer.await.map_err(|_| StoreError::Closed)?
        })
    }
}
