//! `loomflow serve`: the HTTP ingress and the approval inbox, until Ctrl-C.

use loomflow::Runtime;
use loomflow::http::{HttpConfig, router};

use crate::Failure;

pub(crate) async fn run(runtime: Runtime, config: HttpConfig, listen: &str) -> Result<(), Failure> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| Failure::usage(format!("cannot listen on {listen}: {e}")))?;
    let addr = listener
        .local_addr()
        .map_err(|e| Failure::usage(format!("cannot listen on {listen}: {e}")))?;
    println!("loomflow: serving on http://{addr} (the inbox: http://{addr}/inbox?token=…)");
    axum::serve(listener, router(runtime, config))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|e| Failure::usage(format!("the server stopped: {e}")))
}
