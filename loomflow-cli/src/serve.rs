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
    outln!("loomflow: serving on http://{addr} (the inbox: http://{addr}/inbox?token=…)");
    axum::serve(listener, router(runtime, config))
        .with_graceful_shutdown(stop_asked())
        .await
        .map_err(|e| Failure::server(format!("the server stopped: {e}")))
}

/// Waits for Ctrl-C, or for SIGTERM (`docker stop`, systemd): requests under way finish.
async fn stop_asked() {
    let interrupted = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut terminate) => {
                tokio::select! {
                    () = interrupted => {}
                    _ = terminate.recv() => {}
                }
            }
            Err(_) => interrupted.await,
        }
    }
    #[cfg(not(unix))]
    interrupted.await;
}
