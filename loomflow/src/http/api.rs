//! The JSON endpoints.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{OriginalUri, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use serde::Deserialize;
use serde_json::{Value, json};

use super::auth::{self, Signed};
use super::{ApiError, AppState};
use crate::runtime::clock::now_ms;
use crate::runtime::{
    AuditKind, AuditQuery, BadRunCursor, RunCursor, RunFilter, RunState, RuntimeError,
    SignalOptions,
};
use crate::tool::ApprovalDecision;

type Reply = Result<Json<Value>, ApiError>;

/// A body the server would not read: over the payload limit (413), or broken.
pub(super) type Body = Result<Bytes, BytesRejection>;

/// The body of a request for `what` (a signal, a decision), read up to
/// [`body_limit`](super::body_limit) of the runtime's payload limit; the payload itself is
/// checked by the mailbox, as JSON.
pub(super) fn body(
    app: &AppState,
    body: Body,
    what: impl FnOnce() -> String,
) -> Result<Bytes, ApiError> {
    body.map_err(|rejection| {
        let status = rejection.status();
        if status != StatusCode::PAYLOAD_TOO_LARGE {
            return ApiError::new(status, "bad_request", rejection.body_text());
        }
        let payloads = app.runtime.signal_config().max_payload_bytes;
        let limit = super::body_limit(payloads);
        let message = format!(
            "the body of {} is over the limit of {limit} bytes, for payloads of at most \
             {payloads} bytes (the runtime's `MailboxConfig::max_payload_bytes`, set with \
             `RuntimeBuilder::signals`)",
            what()
        );
        ApiError::new(status, "payload_too_large", message)
    })
}

/// JSON nested as deep as a payload may be (`json_depth::MAX_DEPTH`), not serde_json's 128.
pub(super) fn json<T: serde::de::DeserializeOwned + Send>(body: &[u8]) -> serde_json::Result<T> {
    crate::json_depth::from_slice(body)
}

/// `POST /v1/threads/{thread}/signals/{name}`: the body is the payload.
pub(super) async fn post_signal(
    State(app): State<Arc<AppState>>,
    path: Result<Path<(String, String)>, PathRejection>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    body: Body,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    // Who is calling comes first: a caller with neither a signature nor a token, or with a
    // signature whose headers are wrong, is refused before anything is said about its body.
    let signature = auth::signature(&app.config, &headers, now_ms() / 1_000)?;
    let from_github = matches!(signature, auth::Signature::GitHub { .. });
    if let auth::Signature::Absent = signature {
        auth::bearer(&app.config, &headers)?;
    }
    let body = self::body(&app, body, || match &path {
        Ok(Path((thread, name))) => format!("signal {name} for thread {thread}"),
        Err(_) => "the signal".to_owned(),
    })?;
    let signed_delivery = match signature.verify(uri.path(), &body)? {
        Signed::Yes { delivery } => delivery,
        Signed::No => None,
    };
    let Path((thread, name)) = path?;
    if from_github && github_event(&headers) == Some("ping") {
        // Sent once, as the webhook is made: not an event for the run.
        let reply = json!({ "thread": thread, "signal": name, "delivery": "ping" });
        return Ok((StatusCode::OK, Json(reply)));
    }
    if body.is_empty() {
        return Err(ApiError::bad_request(format!(
            "the body of signal {name} for thread {thread} is empty: send the payload as JSON \
             (`null` for none)"
        )));
    }
    let payload: Value = match from_github && is_form(&headers) {
        true => github_form_payload(&body)?,
        false => json(&body),
    }
    .map_err(|e| {
        // A form body is read as GitHub's only: said, rather than "not JSON" alone.
        let form = match !from_github && is_form(&headers) {
            true => " (a form body is read only from a GitHub-signed webhook: send JSON)",
            false => "",
        };
        ApiError::bad_request(format!(
            "the body of signal {name} for thread {thread} is not JSON: {e}{form}"
        ))
    })?;
    // A signal to a run that has ended would wait for the next run on the thread.
    let mut options = SignalOptions::default().require_live_run();
    let key = match signed_delivery {
        Some(delivery) => Some(delivery),
        None => idempotency_key(&headers)?,
    };
    if let Some(key) = key {
        options = options.idempotency_key(key);
    }
    // A reserved name is refused whatever the thread (the send would refuse it too).
    crate::runtime::mailbox::check_name(&thread, &name, crate::runtime::mailbox::Scope::User)
        .map_err(crate::runtime::RuntimeError::Signal)?;
    // A signal for a thread that never ran would wait unseen: refuse it. A run this
    // process executes counts, whether or not it has written its row yet.
    let known = app.runtime.store().get_run(&thread).await;
    if known.map_err(crate::runtime::RuntimeError::from)?.is_none()
        && !app.runtime.executes_here(&thread)
    {
        return Err(ApiError::not_found(format!("thread {thread} has no run")));
    }
    let delivery = app
        .runtime
        .signal_with(&thread, &name, payload, options)
        .await?;
    // Nothing was kept: a sender that reads any 2xx as delivered would not send it again.
    if delivery == crate::runtime::Delivery::Dropped {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "dropped",
            format!(
                "signal {name} for thread {thread} was dropped: no run of it is open or \
                 waits, and the pending mailbox keeps nothing; send it again once one is"
            ),
        ));
    }
    let word = format!("{delivery:?}").to_lowercase();
    let status = if word == "duplicate" {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    Ok((
        status,
        Json(json!({ "thread": thread, "signal": name, "delivery": word })),
    ))
}

/// The GitHub event a webhook delivery carries (`X-GitHub-Event`).
fn github_event(headers: &HeaderMap) -> Option<&str> {
    headers.get("x-github-event")?.to_str().ok().map(str::trim)
}

/// Whether the body is a form (`application/x-www-form-urlencoded`): GitHub's default
/// content type for a webhook.
fn is_form(headers: &HeaderMap) -> bool {
    let content_type = headers.get(axum::http::header::CONTENT_TYPE);
    let content_type = content_type
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let essence = content_type.split(';').next().unwrap_or_default().trim();
    essence.eq_ignore_ascii_case("application/x-www-form-urlencoded")
}

/// The JSON a GitHub form delivery carries in its `payload` field.
fn github_form_payload(body: &[u8]) -> Result<serde_json::Result<Value>, ApiError> {
    #[derive(Deserialize)]
    struct Delivery {
        payload: String,
    }
    let form: Delivery = serde_urlencoded::from_bytes(body)
        .map_err(|e| ApiError::bad_request(format!("the form has no JSON `payload` field: {e}")))?;
    Ok(json(form.payload.as_bytes()))
}

/// The sender's key, or the webhook's delivery id: a redelivery is one signal. (A request
/// signed with `X-Loomflow-Signature` does not come here: its signed delivery id is the
/// key, whatever other header it carries.) A key that is empty or not printable ASCII
/// (spaces inside it allowed) is refused rather than ignored, as ignoring it would
/// deliver a retry twice (and an empty one would make every later send a duplicate).
fn idempotency_key(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    const HEADERS: [&str; 3] = [
        "idempotency-key",
        "x-github-delivery",
        "x-loomflow-delivery",
    ];
    let Some((name, value)) = HEADERS
        .iter()
        .find_map(|name| headers.get(*name).map(|value| (name, value)))
    else {
        return Ok(None);
    };
    let key = value.to_str().ok().map(str::trim).unwrap_or_default();
    if key.is_empty() || !key.bytes().all(|b| b.is_ascii_graphic() || b == b' ') {
        return Err(ApiError::bad_request(format!(
            "the {name} header must be non-empty printable ASCII"
        )));
    }
    Ok(Some(key.to_owned()))
}

/// A parameter of another name is refused (400, naming it): a misspelt filter
/// (`state=waiting`) must not list every run.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RunsQuery {
    status: Option<String>,
    graph: Option<String>,
    limit: Option<usize>,
    /// The `next` of the page before: this page starts after it.
    after: Option<String>,
}

/// `GET /v1/runs`: a page of runs, the most recently updated first, and `next`, the cursor
/// to pass as `after` for the page after it (`null` on the last page).
pub(super) async fn list_runs(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    query: Result<Query<RunsQuery>, QueryRejection>,
) -> Reply {
    auth::bearer(&app.config, &headers)?;
    let Query(query) = query?;
    let mut filter = RunFilter::new();
    if let Some(word) = &query.status {
        let state = RunState::parse(word)
            .ok_or_else(|| ApiError::bad_request(format!("unknown status {word:?}")))?;
        filter = filter.state(state);
    }
    if let Some(graph) = query.graph {
        filter = filter.graph(graph);
    }
    if let Some(after) = &query.after {
        let cursor = after.parse().map_err(|e: BadRunCursor| {
            ApiError::bad_request(format!(
                "run cursor {:?} is not a page's next (<updated_at_ms>.<thread in hex>, or \
                 <updated_at_ms>:<thread>)",
                e.text
            ))
        })?;
        filter = filter.after(cursor);
    }
    // A page of none would read as the last page.
    let limit = match query.limit {
        Some(0) => {
            return Err(ApiError::bad_request(
                "limit must be at least 1, not 0 (one over 1000 is taken as 1000)",
            ));
        }
        limit => limit.unwrap_or(100).min(1_000),
    };
    // One more than the page, to tell whether there is a page after it: a page that the
    // runs left fill exactly is the last, and says so.
    let mut runs = app.runtime.runs(&filter.limit(limit + 1)).await?;
    let more = runs.len() > limit;
    runs.truncate(limit);
    let next = match runs.last() {
        Some(last) if more => Some(RunCursor::of(last).encoded()),
        _ => None,
    };
    Ok(Json(json!({ "runs": runs, "next": next })))
}

/// `GET /v1/threads/{thread}`.
pub(super) async fn get_thread(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
) -> Reply {
    auth::bearer(&app.config, &headers)?;
    let Path(thread) = path?;
    let info = app.runtime.run(&thread).await?;
    let approvals = app.runtime.pending_approvals(&thread).await?;
    Ok(Json(json!({
        "run": info.record,
        "interrupts": info.interrupts,
        "approvals": approvals,
        "state": info.state,
    })))
}

/// `DELETE /v1/threads/{thread}`: deletes the thread (see [`Runtime::delete_thread`]); 409
/// while a run executes it, 404 for a thread with no run and nothing else to delete (a
/// mistyped name must not read as a thread deleted).
///
/// [`Runtime::delete_thread`]: crate::Runtime::delete_thread
pub(super) async fn delete_thread(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
) -> Reply {
    auth::bearer(&app.config, &headers)?;
    let Path(thread) = path?;
    let run = app.runtime.store().get_run(&thread).await;
    let had_run = run.map_err(RuntimeError::from)?.is_some();
    let deleted = app.runtime.delete_thread(&thread).await?;
    if !had_run && deleted.is_empty() {
        return Err(RuntimeError::UnknownRun { thread }.into());
    }
    Ok(Json(json!({ "thread": thread, "deleted": deleted })))
}

/// Query of `GET /v1/threads/{thread}/audit`; a parameter of another name is refused.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AuditParams {
    /// Only entries with an id above this (to page, or to tail).
    after: Option<u64>,
    /// Only entries of this kind.
    kind: Option<String>,
    /// At most this many: 1,000 by default; a larger number asks for 1,000.
    limit: Option<usize>,
}

/// `GET /v1/threads/{thread}/audit`: the thread's audit log, oldest first.
pub(super) async fn get_audit(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    path: Result<Path<String>, PathRejection>,
    params: Result<Query<AuditParams>, QueryRejection>,
) -> Reply {
    auth::bearer(&app.config, &headers)?;
    let (Path(thread), Query(params)) = (path?, params?);
    let limit = match params.limit {
        Some(0) => {
            return Err(ApiError::bad_request(
                "limit must be at least 1, not 0 (one over 1000 is taken as 1000)",
            ));
        }
        limit => limit.unwrap_or(1_000).min(1_000),
    };
    // One more than the page, as for runs: a page the entries left fill exactly is the
    // last, and says so; a longer log gives `next`, also when `limit` asked for more than
    // a page holds.
    let mut query = AuditQuery::thread(&thread)
        .after_id(params.after.unwrap_or(0))
        .limit(limit + 1);
    if let Some(kind) = &params.kind {
        let kind = AuditKind::parse(kind)
            .ok_or_else(|| ApiError::bad_request(format!("unknown audit kind {kind:?}")))?;
        query = query.kind(kind);
    }
    let mut entries = app.runtime.audit_query(&query).await?;
    let more = entries.len() > limit;
    entries.truncate(limit);
    let next = entries.last().filter(|_| more).map(|last| last.id);
    // As every thread route: a thread that never ran and has no entries at all is 404, so
    // that a mistyped thread does not read as a quiet one. An empty page of a known thread
    // (a tail that is up to date, a kind with no entries) is an empty list.
    if entries.is_empty() {
        let known = app.runtime.store().get_run(&thread).await;
        if known.map_err(crate::runtime::RuntimeError::from)?.is_none()
            && app
                .runtime
                .audit_query(&AuditQuery::thread(&thread).limit(1))
                .await?
                .is_empty()
        {
            return Err(ApiError::not_found(format!("thread {thread} has no run")));
        }
    }
    Ok(Json(
        json!({ "thread": thread, "entries": entries, "next": next }),
    ))
}

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "an object of `arguments`, `by` and `requested_at_ms`, each optional"
)]
pub(super) struct ApproveBody {
    arguments: Option<Value>,
    /// Who decided, for the audit log.
    by: Option<String>,
    /// When the request decided was asked, as listed: refused if the call asked again since.
    requested_at_ms: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "an object of `reason`, and optionally `by` and `requested_at_ms`"
)]
pub(super) struct RejectBody {
    reason: String,
    /// Who decided, for the audit log.
    by: Option<String>,
    /// When the request decided was asked, as listed: refused if the call asked again since.
    requested_at_ms: Option<u64>,
}

/// Decides a pending call (the request asked at `asked_at_ms`, when given): 404 when
/// nothing is pending under that id, 409 when a decision for it is taken already (the run
/// has not carried on with it yet) or the call that waits under the id asked again since.
pub(super) async fn decide(
    app: &AppState,
    (thread, call_id): (&str, &str),
    decision: ApprovalDecision,
    by: &str,
    asked_at_ms: Option<u64>,
) -> Result<(), ApiError> {
    // No run needed: a call a `SignalApprover` asks about outside any run (a tool host of
    // the application's own) waits for its decision as one inside does, and a thread
    // with no call waiting is refused as `NoPendingApproval`.
    app.runtime
        .decide_approval_asked_at(thread, call_id, asked_at_ms, decision, by)
        .await?;
    Ok(())
}

/// A body of type `T` (its default when empty); `what` says what it is about, for the error.
fn parse_body<T: serde::de::DeserializeOwned + Default + Send>(
    body: &[u8],
    what: impl FnOnce() -> String,
) -> Result<T, ApiError> {
    if body.is_empty() {
        return Ok(T::default());
    }
    json(body).map_err(|e| ApiError::bad_request(format!("bad body for {}: {e}", what())))
}

/// Who decided, as a decision's body names them (`http` when it does not): a blank name
/// would record a decision by nobody.
fn decider(by: Option<&str>) -> Result<&str, ApiError> {
    match by {
        None => Ok("http"),
        Some(by) if by.trim().is_empty() => Err(ApiError::bad_request(
            "\"by\" is blank: name who decided, or leave it out",
        )),
        // Shown in the audit log's tables, where a line break would print rows of its own.
        Some(by) if by.chars().any(char::is_control) => Err(ApiError::bad_request(
            "\"by\" holds a control character (a line break, a tab, an escape): name who \
             decided in plain text",
        )),
        Some(by) => Ok(by),
    }
}

/// What a decision's body is about, for an error that says so.
fn decision_on(thread: &str, call_id: &str) -> String {
    format!("the decision on call {call_id} of thread {thread}")
}

/// `POST /v1/threads/{thread}/approvals/{call_id}/approve`.
pub(super) async fn approve(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    path: Result<Path<(String, String)>, PathRejection>,
    body: Body,
) -> Reply {
    auth::bearer(&app.config, &headers)?;
    let Path((thread, call_id)) = path?;
    let body = self::body(&app, body, || decision_on(&thread, &call_id))?;
    let body: ApproveBody = parse_body(&body, || decision_on(&thread, &call_id))?;
    let decision = match body.arguments {
        Some(arguments @ Value::Object(_)) => ApprovalDecision::Edit { arguments },
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "\"arguments\" must be an object of the tool's arguments, not {other}"
            )));
        }
        None => ApprovalDecision::Allow,
    };
    let by = decider(body.by.as_deref())?;
    let call = (thread, call_id);
    decided(&app, call, decision, (by, body.requested_at_ms), "approved").await
}

/// Decides the call (see [`decide`]), by `by` for the request asked then, and says what was
/// decided (`word`).
async fn decided(
    app: &AppState,
    (thread, call_id): (String, String),
    decision: ApprovalDecision,
    (by, asked_at_ms): (&str, Option<u64>),
    word: &str,
) -> Reply {
    decide(app, (&thread, &call_id), decision, by, asked_at_ms).await?;
    Ok(Json(
        json!({ "thread": thread, "call_id": call_id, "decision": word }),
    ))
}

/// `POST /v1/threads/{thread}/approvals/{call_id}/reject`.
pub(super) async fn reject(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
    path: Result<Path<(String, String)>, PathRejection>,
    body: Body,
) -> Reply {
    auth::bearer(&app.config, &headers)?;
    let Path((thread, call_id)) = path?;
    let body = self::body(&app, body, || decision_on(&thread, &call_id))?;
    let body: RejectBody = json(&body).map_err(|e| {
        let what = decision_on(&thread, &call_id);
        ApiError::bad_request(format!("{what}: a rejection needs {{\"reason\": …}}: {e}"))
    })?;
    let by = decider(body.by.as_deref())?;
    if body.reason.trim().is_empty() {
        return Err(ApiError::bad_request(
            "a rejection's reason must say why: the model is told",
        ));
    }
    let decision = ApprovalDecision::Deny {
        reason: body.reason,
    };
    let call = (thread, call_id);
    decided(&app, call, decision, (by, body.requested_at_ms), "rejected").await
}

/// Anything else: 404, as JSON (401 to a caller without a token, who learns nothing else).
pub(super) async fn not_found(State(app): State<Arc<AppState>>, headers: HeaderMap) -> ApiError {
    match auth::bearer(&app.config, &headers) {
        Ok(()) => ApiError::not_found("no such endpoint"),
        Err(unauthorized) => unauthorized,
    }
}

/// A known path with a method it does not take: 405, as JSON (401 to a caller without a
/// token).
pub(super) async fn method_not_allowed(
    State(app): State<Arc<AppState>>,
    headers: HeaderMap,
) -> ApiError {
    match auth::bearer(&app.config, &headers) {
        Ok(()) => ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "this endpoint does not take that method",
        ),
        Err(unauthorized) => unauthorized,
    }
}
