//! The approval inbox: a server-rendered page listing the runs that wait and the tool calls
//! pending approval (tool, pretty-printed arguments, when each was asked), with forms to
//! approve or reject with a reason. No JavaScript. The calls listed are those of suspended
//! runs, which any process sees, and those waiting in this process's memory.
//!
//! A browser cannot send a bearer header, so `GET /inbox?token=<token>` checks the token
//! and keeps it in a cookie (`HttpOnly`, `SameSite=Lax`, path `/inbox`, and `Secure`
//! when a proxy says the request came over HTTPS), then redirects
//! to `/inbox`. Nested under a prefix ([`Router::nest`](axum::Router::nest)), the cookie's
//! path, the redirects and the forms all carry the prefix.
//!
//! The page shows the calls of the [`SHOWN_RUNS`] most recently updated runs that wait for
//! an approval, whatever other runs wait, and the [`SHOWN_RUNS`] most recently updated runs
//! of each waiting state; it says so when there are more (`GET /v1/runs?status=waiting`
//! lists them all, a page at a time).
//!
//! Every form carries a token derived from that credential (an HMAC keyed by it), and a
//! decision is accepted only with both the cookie and the matching form token: a form
//! posted from another site has neither. The HMAC's key is
//! [`HttpConfig::inbox_form_secret`](super::HttpConfig::inbox_form_secret): give a server's
//! replicas the same one and each takes the forms of a page another showed, as does the
//! server after a restart. Without it the key is the router's own, new in each process: a
//! form posted to another process is refused (403 `bad_form`) until the page is loaded
//! again.

use std::cmp::Reverse;
use std::fmt::Write as _;
use std::sync::Arc;

use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::extract::{OriginalUri, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::auth;
use super::{ApiError, AppState};
use crate::runtime::{RunCursor, RunFilter, RunRecord, RunState, Utc};
use crate::tool::{ApprovalDecision, SignalApprover};

const COOKIE: &str = "loomflow_inbox";

/// How many runs of each waiting state (waiting, interrupted) the page looks at, newest
/// first.
pub const SHOWN_RUNS: usize = 200;

/// How many runs of each waiting state the page looks through for the runs that wait for
/// an approval, newest first.
pub const SCANNED_RUNS: usize = 20_000;

/// The inbox page's own path as the client sent it (`/inbox`, or `/ops/inbox` when the
/// router is nested under `/ops`), from the path of a request to `/inbox` or to one of its
/// subpaths such as `/inbox/decide`.
fn inbox_path(requested: &str, subpath: &str) -> String {
    requested
        .strip_suffix(subpath)
        .unwrap_or(requested)
        .to_owned()
}

#[derive(Debug, Deserialize)]
pub(super) struct PageQuery {
    token: Option<String>,
}

/// The token of the page's `?token=<token>` query, if it has one. Percent escapes are
/// decoded, but a `+` stays a `+`: a token is often base64, and one pasted into the
/// address bar is not form-encoded. The query holds only the login token: one that cannot
/// be read is refused as unauthorized.
fn login_token(query: Option<&str>) -> Result<Option<String>, ApiError> {
    let unreadable = || ApiError::unauthorized("the inbox's query is not ?token=<token>");
    let Some(query) = query else {
        return Ok(None);
    };
    let uri: axum::http::Uri = format!("/?{}", query.replace('+', "%2B"))
        .parse()
        .map_err(|_| unreadable())?;
    let Query(query) = Query::<PageQuery>::try_from_uri(&uri).map_err(|_| unreadable())?;
    Ok(query.token)
}

/// The credential the request carries: the inbox cookie, else a bearer header.
fn credential(headers: &HeaderMap) -> Option<String> {
    let cookies = headers.get(header::COOKIE)?.to_str().ok()?;
    cookies
        .split(';')
        .filter_map(|c| c.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_owned())
}

/// Checks the inbox credential; returns it (the cookie's or the header's token; empty when
/// auth is off).
fn authorize(app: &AppState, headers: &HeaderMap) -> Result<String, ApiError> {
    if app.config.open {
        return Ok(String::new());
    }
    // The cookie's token, else the request's own header: a cookie left from a token since
    // rotated out does not shut out a caller who sends a good one.
    if let Some(token) = credential(headers) {
        let mut with_token = HeaderMap::new();
        if let Ok(value) = HeaderValue::from_str(&format!("Bearer {token}")) {
            with_token.insert(header::AUTHORIZATION, value);
        }
        let by_cookie = auth::bearer(&app.config, &with_token);
        if by_cookie.is_ok() || headers.get(header::AUTHORIZATION).is_none() {
            return by_cookie.map(|()| token);
        }
    }
    auth::bearer(&app.config, headers)?;
    Ok(auth::presented_token(headers)
        .unwrap_or_default()
        .to_owned())
}

/// The form token for a credential: an HMAC of it under the router's form secret (the
/// configured [`HttpConfig::inbox_form_secret`](super::HttpConfig::inbox_form_secret),
/// shared by a server's replicas, or one of its own), which says nothing of the credential
/// to whoever sees a page or a form's body.
fn form_token(app: &AppState, credential: &str) -> String {
    auth::sign(&app.form_secret, &[b"inbox-form", credential.as_bytes()])
}

/// `text` as the page shows it: HTML-escaped, with the control characters and the
/// invisible marks that reorder bidirectional text (U+202A to U+202E, U+2066 to U+2069)
/// written as JSON escapes them (`\u202e`): a tool's arguments come from a model, and an
/// override in them would make a call read otherwise than it is to the person deciding it.
/// Form values keep the text as it is ([`escape`]).
fn shown(text: &str) -> String {
    let mut visible = String::with_capacity(text.len());
    for c in text.chars() {
        let reorders = matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        if reorders || (c.is_control() && c != '\n' && c != '\t') {
            let _ = write!(visible, "\\u{:04x}", u32::from(c));
        } else {
            visible.push(c);
        }
    }
    escape(&visible)
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            other => out.push(other),
        }
    }
    out
}

/// `GET /inbox`.
pub(super) async fn page(
    State(app): State<Arc<AppState>>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let inbox = inbox_path(uri.path(), "");
    if let Some(token) = login_token(uri.query())? {
        // Log in: check the token, keep it in a cookie, and drop it from the address bar.
        let mut with_token = HeaderMap::new();
        let value = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| ApiError::unauthorized("the token is not a header value"))?;
        with_token.insert(header::AUTHORIZATION, value);
        auth::bearer(&app.config, &with_token)?;
        // Behind a proxy that ends TLS, the cookie is sent back over HTTPS only.
        let secure = if forwarded_https(&headers) {
            "; Secure"
        } else {
            ""
        };
        // `Lax`: a link to the inbox from another site (mail, chat) opens it logged in; a
        // form posted from another site still goes without the cookie.
        let cookie = format!("{COOKIE}={token}; HttpOnly; SameSite=Lax; Path={inbox}{secure}");
        let mut response = Redirect::to(&inbox).into_response();
        let cookie = HeaderValue::from_str(&cookie)
            .map_err(|_| ApiError::unauthorized("the token is not a cookie value"))?;
        response.headers_mut().insert(header::SET_COOKIE, cookie);
        return Ok(response);
    }
    let credential = authorize(&app, &headers)?;
    let csrf = form_token(&app, &credential);
    let mut waiting = Vec::new();
    let mut more = false;
    for state in [RunState::Waiting, RunState::Interrupted] {
        let mut runs = app
            .runtime
            .runs(&RunFilter::new().state(state).limit(SHOWN_RUNS + 1))
            .await?;
        more |= runs.len() > SHOWN_RUNS;
        runs.truncate(SHOWN_RUNS);
        waiting.extend(runs);
    }
    let action = escape(&format!("{inbox}/decide"));
    let mut html = String::from(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>loomflow inbox</title><style>\
         body{font-family:system-ui,sans-serif;margin:2rem;max-width:60rem}\
         pre{background:#f4f4f5;padding:.5rem;border-radius:4px}\
         .approval{border:1px solid #d4d4d8;border-radius:6px;padding:1rem;margin:1rem 0}\
         form{display:inline-block;margin-right:1rem}\
         td,th{padding:.2rem .8rem .2rem 0;text-align:left}\
         </style></head><body>\n<h1>Approval inbox</h1>\n",
    );
    let mut approvals = 0;
    // The runs waiting for an approval, however many other runs wait (for webhooks, say),
    // and the runs of this process whose calls wait in memory (executing: no waiting row
    // lists them).
    let (mut sessions, unlooked) = runs_awaiting_approval(&app.runtime).await?;
    for session in app.runtime.sessions_awaiting_approval() {
        if !sessions.contains(&session) {
            sessions.push(session);
        }
    }
    // A run whose approvals cannot be read (a damaged row, one a newer loomflow wrote) is
    // named on the page, not made to hide every other run's: unless no run could be read.
    let mut unreadable = Vec::new();
    for session in &sessions {
        let pending = match app.runtime.pending_approvals(session).await {
            Ok(pending) => pending,
            Err(error) => {
                tracing::warn!(thread = %session, %error, "the inbox cannot read a run's approvals");
                unreadable.push((session, error));
                continue;
            }
        };
        for call in pending {
            approvals += 1;
            let arguments = serde_json::to_string_pretty(&call.arguments)
                .unwrap_or_else(|_| call.arguments.to_string());
            let _ = write!(
                html,
                "<section class=\"approval\" data-thread=\"{thread}\" data-call=\"{call_id}\">\n\
                 <h2>{tool} <small>on {thread_shown}</small></h2>\n\
                 <p>asked {asked}{user}; call <code>{call_shown}</code></p>\n<pre>{arguments}</pre>\n\
                 <form method=\"post\" action=\"{action}\">\
                 <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
                 <input type=\"hidden\" name=\"thread\" value=\"{thread}\">\
                 <input type=\"hidden\" name=\"call_id\" value=\"{call_id}\">\
                 <input type=\"hidden\" name=\"requested_at_ms\" value=\"{asked_ms}\">\
                 <input type=\"hidden\" name=\"decision\" value=\"approve\">\
                 <button type=\"submit\" name=\"approve\">Approve</button></form>\n\
                 <form method=\"post\" action=\"{action}\">\
                 <input type=\"hidden\" name=\"csrf\" value=\"{csrf}\">\
                 <input type=\"hidden\" name=\"thread\" value=\"{thread}\">\
                 <input type=\"hidden\" name=\"call_id\" value=\"{call_id}\">\
                 <input type=\"hidden\" name=\"requested_at_ms\" value=\"{asked_ms}\">\
                 <input type=\"hidden\" name=\"decision\" value=\"reject\">\
                 <input type=\"text\" name=\"reason\" placeholder=\"why\" required>\
                 <button type=\"submit\" name=\"reject\">Reject</button></form>\n</section>\n",
                tool = shown(&call.tool),
                thread = escape(&call.session),
                thread_shown = shown(&call.session),
                call_id = escape(&call.call_id),
                call_shown = shown(&call.call_id),
                asked = Utc::from_ms(call.requested_at_ms),
                asked_ms = call.requested_at_ms,
                user = call
                    .user
                    .as_deref()
                    .map(|u| format!(" for {}", shown(u)))
                    .unwrap_or_default(),
                arguments = shown(&arguments),
            );
        }
    }
    if unreadable.len() == sessions.len()
        && let Some((_, error)) = unreadable.pop()
    {
        return Err(error.into());
    }
    // Why is logged, as a failure of the server's own is: not shown.
    for (session, _) in &unreadable {
        let _ = writeln!(
            html,
            "<p class=\"unreadable\">The approvals of thread <code>{}</code> could not be \
             read (the server's log says why).</p>",
            shown(session),
        );
    }
    if unlooked {
        let _ = writeln!(
            html,
            "<p id=\"more-approvals\">Calls of more runs may wait for approval than this page \
             shows (those of the {SHOWN_RUNS} most recently updated runs that ask): a run's \
             are listed by <code>GET /v1/threads/&lt;thread&gt;</code> and \
             <code>loomflow show &lt;thread&gt;</code>.</p>"
        );
    }
    if more {
        let _ = writeln!(
            html,
            "<p id=\"more\">More runs wait than this page shows (the {SHOWN_RUNS} most recently \
             updated of each state): list them all with \
             <code>GET /v1/runs?status=waiting</code> and <code>?status=interrupted</code> \
             (a page at a time: pass each answer's <code>next</code> as <code>after</code>), \
             or <code>loomflow runs</code>.</p>"
        );
    }
    if approvals == 0 && unreadable.is_empty() {
        let among = if unlooked { " among these runs" } else { "" };
        let _ = writeln!(
            html,
            "<p id=\"empty\">No tool call waits for approval{among}.</p>"
        );
    }
    html.push_str("<h2>Waiting runs</h2>\n<table><tr><th>thread</th><th>graph</th><th>state</th><th>waits for</th><th>since</th></tr>\n");
    for run in &waiting {
        let _ = writeln!(
            html,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            shown(&run.thread),
            shown(run.graph.as_deref().unwrap_or("-")),
            run.state,
            shown(&run.waiting_on.join(", ")),
            Utc::from_ms(run.updated_at_ms),
        );
    }
    html.push_str("</table>\n</body></html>\n");
    Ok(Html(html).into_response())
}

/// The threads whose runs wait (or are interrupted) for a tool call's approval, newest
/// first: at most [`SHOWN_RUNS`], looked for among the [`SCANNED_RUNS`] most recently
/// updated runs of each state, a page at a time (other runs, waiting for webhooks say, do
/// not push them off the page). And whether more may wait for one than that.
async fn runs_awaiting_approval(runtime: &crate::Runtime) -> Result<(Vec<String>, bool), ApiError> {
    const PAGE: usize = 500;
    let mut threads = Vec::new();
    let mut more = false;
    for state in [RunState::Waiting, RunState::Interrupted] {
        let mut filter = RunFilter::new().state(state).limit(PAGE);
        let mut looked = 0;
        // Each state's newest are found before the two are put in one order.
        let found_before = threads.len();
        loop {
            let runs = runtime.runs(&filter).await?;
            looked += runs.len();
            let asks = |signal: &String| signal.starts_with(SignalApprover::PREFIX);
            let approval = |run: &&RunRecord| run.waiting_on.iter().any(asks);
            let newest_first = |run: &RunRecord| (Reverse(run.updated_at_ms), run.thread.clone());
            threads.extend(runs.iter().filter(approval).map(newest_first));
            let Some(last) = runs.last().filter(|_| runs.len() == PAGE) else {
                break;
            };
            if looked >= SCANNED_RUNS || threads.len() - found_before > SHOWN_RUNS {
                more = true;
                break;
            }
            filter = filter.after(RunCursor::of(last));
        }
    }
    // Newest first across both states.
    threads.sort();
    more |= threads.len() > SHOWN_RUNS;
    threads.truncate(SHOWN_RUNS);
    Ok((
        threads.into_iter().map(|(_, thread)| thread).collect(),
        more,
    ))
}

/// Whether the request reached a proxy over HTTPS (`X-Forwarded-Proto: https`, or
/// `Forwarded: ..proto=https`): the server itself speaks plain HTTP.
fn forwarded_https(headers: &HeaderMap) -> bool {
    let said = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    said("x-forwarded-proto").is_some_and(|proto| proto.trim().eq_ignore_ascii_case("https"))
        || said("forwarded").is_some_and(|forwarded| {
            forwarded
                .split([';', ','])
                .any(|part| part.trim().eq_ignore_ascii_case("proto=https"))
        })
}

#[derive(Debug, Deserialize)]
pub(super) struct DecideForm {
    csrf: String,
    thread: String,
    call_id: String,
    /// When the request shown was asked: a call that asked again since is not decided.
    requested_at_ms: Option<u64>,
    decision: String,
    reason: Option<String>,
}

/// `POST /inbox/decide`: a form from the page.
pub(super) async fn decide(
    State(app): State<Arc<AppState>>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    form: Result<Form<DecideForm>, FormRejection>,
) -> Result<Response, ApiError> {
    let credential = authorize(&app, &headers)?;
    let Form(form) = form?;
    let expected = form_token(&app, &credential);
    if !auth::same(expected.as_bytes(), form.csrf.as_bytes()) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "bad_form",
            "the form token does not match: reload the inbox and try again",
        ));
    }
    let decision = match form.decision.as_str() {
        "approve" => ApprovalDecision::Allow,
        "reject" => ApprovalDecision::Deny {
            reason: form
                .reason
                .filter(|r| !r.trim().is_empty())
                .unwrap_or_else(|| "rejected in the inbox".to_owned()),
        },
        other => {
            return Err(ApiError::bad_request(format!("unknown decision {other:?}")));
        }
    };
    let call = (form.thread.as_str(), form.call_id.as_str());
    super::api::decide(&app, call, decision, "inbox", form.requested_at_ms).await?;
    Ok(Redirect::to(&inbox_path(uri.path(), "/decide")).into_response())
}
