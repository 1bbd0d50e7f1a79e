//! `loomflow serve`: the HTTP ingress and the approval inbox, until Ctrl-C.

use loomflow::Runtime;
use loomflow::http::{HttpConfig, router};

use crate::Failure;
use crate::output::outln;

pub(crate) async fn run(runtime: Runtime, config: HttpConfig, listen: &str) -> Result<(), Failure> {
    let cannot_listen = |e: std::io::Error| {
        let message = format!("cannot listen on {listen}: {e}");
        // An address that is not one is the caller's mistake; one in use, or not ours to
        // take, is the machine's.
        match e.kind() {
            std::io::ErrorKind::InvalidInput => Failure::usage(message),
            _ => Failure::server(message),
        }
    };
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(cannot_listen)?;
    let addr = listener.local_addr().map_err(cannot_listen)?;
    // Listening for SIGTERM before saying it serves: one sent right after is not the
    // default action's (killed mid-request).
    let stop = stop_asked();
    outln!("loomflow: serving on http://{addr} (the inbox: http://{addr}/inbox?token=…)");
    axum::serve(listener, router(runtime, config))
        .with_graceful_shutdown(stop)
        .await
        .map_err(|e| Failure::server(format!("the server stopped: {e}")))
}

/// Waits for Ctrl-C, or for SIGTERM (`docker stop`, systemd): requests under way finish.
/// SIGTERM is listened for from the call, not from the first poll.
fn stop_asked() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    async move {
        let interrupted = async {
            let _ = tokio::signal::ctrl_c().await;
        };
        #[cfg(unix)]
        if let Some(mut terminate) = terminate {
            tokio::select! {
                () = interrupted => {}
                _ = terminate.recv() => {}
            }
            return;
        }
        interrupted.await;
    }
}
