//! What each of the store's connections is set to when the pool makes it.

/// Sets each new connection's transactions to READ COMMITTED, whatever the server's or the
/// URL's default: the store's statements are written for it (a statement that locks a row
/// reads it as committed once the lock is granted), and under repeatable read or
/// serializable a fenced write racing the run's heartbeat failed with 40001. A statement
/// rather than a startup option, which a PgBouncer in front would refuse.
pub(super) fn read_committed() -> deadpool_postgres::Hook {
    deadpool_postgres::Hook::async_fn(|client, _| {
        Box::pin(async move {
            let set = "SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED";
            client
                .batch_execute(set)
                .await
                .map_err(deadpool_postgres::HookError::Backend)
        })
    })
}
