//! The routes that start and stop runs: `POST /v1/threads/{thread}/runs` queues a run for
//! the workers, `POST /v1/threads/{thread}/cancel` cancels the thread's run.

use std::sync::Arc;

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};

use super::api::{Body, body, json};
use super::{ApiError, AppState, auth};
use crate::runtime::RunState;

/// Body of `POST /v1/threads/{thread}/runs`; a field of another name is refused.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SubmitBody {
    /// The graph the run is of, as a worker registered it.
    graph: String,
    /// The run's input: the graph's state as JSON.
    input: Value,
}

/// `POST /v1/threads/{thread}/runs`: queues a run of `graph` on the thread with `input`, for
/// a worker that registered that graph (see [`Runtime::submit`]); 202 with the queued run.
/// 409 while the thread's run has not ended; 400 for a body without a graph name or an
/// input.
///
/// [`Runtime::submit`]: crate::Runtime::submit
pub(super) async fn submit(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    raw: Body,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    auth::bearer(&app.config, &headers)?;
    let Path(thread) = path?;
    let what = || format!("a run of thread {thread}");
    let raw = body(&app, raw, what)?;
    let body: SubmitBody = json(&raw).map_err(|e| {
        ApiError::bad_request(format!(
            "{}: the body must be {{\"graph\": <name>, \"input\": <the state as JSON>}}: {e}",
            what()
        ))
    })?;
    if body.graph.trim().is_empty() || body.graph.chars().any(char::is_control) {
        return Err(ApiError::bad_request(format!(
            "{}: the graph name {:?} is blank or holds a control character",
            what(),
            body.graph
        )));
    }
    app.runtime.submit(&body.graph, &thread, body.input).await?;
    let queued = RunState::Queued;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({ "thread": thread, "graph": body.graph, "state": queued })),
    ))
}

/// `POST /v1/threads/{thread}/cancel`: cancels the thread's run (see [`Runtime::cancel`])
/// and answers its row: `cancelled`, or `cancel_requested` for a run executing now, which
/// stops before its next step. 404 for a thread that never ran; 409 for a run that has
/// completed or failed, which a cancel leaves as it was. A run cancelled already is
/// answered as it is.
///
/// [`Runtime::cancel`]: crate::Runtime::cancel
pub(super) async fn cancel(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
) -> Result<Json<Value>, ApiError> {
    auth::bearer(&app.config, &headers)?;
    let Path(thread) = path?;
    let record = app.runtime.cancel(&thread).await?;
    if matches!(record.state, RunState::Completed | RunState::Failed) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!(
                "the run of thread {thread} has ended ({}): nothing to cancel",
                record.state
            ),
        ));
    }
    Ok(Json(json!({ "run": record })))
}
