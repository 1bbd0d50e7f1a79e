//! The HTTP ingress (feature `http`): signals, webhooks, runs and approvals over HTTP, as an
//! axum [`Router`] to serve on its own (`loomflow serve`) or to mount in your app.
//!
//! | method and path | what it does |
//! | --- | --- |
//! | `POST /v1/threads/{thread}/signals/{name}` | sends the JSON body as signal `name` |
//! | `GET /v1/runs?status=waiting&graph=g&limit=n&after=c` | a page of runs, newest first (`limit`: 100 by default, at most 1,000), and `next`: pass it as `after` for the next page (`null` on the last) |
//! | `GET /v1/threads/{thread}` | one run: its row, interrupts, pending approvals, state |
//! | `DELETE /v1/threads/{thread}` | deletes the thread ([`Runtime::delete_thread`]; 409, 501) |
//! | `GET /v1/threads/{thread}/audit` | its audit log, oldest first (`?after=ID&kind=decision&limit=N`), and `next` for the page after |
//! | `POST /v1/threads/{thread}/runs` | queues a run for the workers (body `{"graph": "…", "input": …}`; [`Runtime::submit`]; 202, 409) |
//! | `POST /v1/threads/{thread}/cancel` | cancels the thread's run ([`Runtime::cancel`]; 404, 409 once it has ended) |
//! | `POST /v1/threads/{thread}/approvals/{call_id}/approve` | approves (body `{"arguments": …}` edits) |
//! | `POST /v1/threads/{thread}/approvals/{call_id}/reject` | rejects (body `{"reason": "…"}`) |
//! | `GET /inbox` | the approval inbox page (see [`inbox`]) |
//!
//! A submit answers 409 while the thread's run has not ended; its body is read up to the
//! same cap as a signal's (three times the payload limit, and at least 64 KiB), which
//! bounds a run's input. A run of a graph no worker registered stays queued until one
//! does. A delete answers 409 while a run executes the thread, and 501 from a store that cannot
//! delete threads. Any request answers 409 when another process took its thread over while
//! this one worked on it (its lease ran out): try it again.
//!
//! Secure by default:
//! - every request needs `Authorization: Bearer <token>` (one of the configured tokens),
//!   unless [`HttpConfig::without_auth`] says otherwise; a signal POST may instead carry a
//!   valid webhook signature: GitHub's `X-Hub-Signature-256` (over the body), or
//!   `X-Loomflow-Signature` ([`signature_header`]: an HMAC-SHA256 over the time, the path, the
//!   `X-Loomflow-Delivery` id and the body), so that a captured request cannot be sent to
//!   another thread or signal, is delivered once, and is refused once
//!   [`replay_window`](HttpConfig::replay_window) has passed;
//! - without authentication, a browser's request that may change something is refused
//!   (403) when it comes from another site's page (`Sec-Fetch-Site`, or `Origin`);
//! - tokens and signatures are compared in constant time;
//! - a payload over the runtime's signal payload limit (as compact JSON) is refused (413),
//!   and a body is read up to three times that limit and 64 KiB;
//! - reserved `loomflow:` names are refused (400), a thread with no run is 404;
//! - the `Idempotency-Key` header, or a webhook's delivery id (`X-GitHub-Delivery`,
//!   `X-Loomflow-Delivery`), makes a repeated delivery one signal; a key that is empty or not
//!   printable ASCII (letters, digits, marks and spaces) is refused (400), as is an empty
//!   body (send `null` for no payload). A request signed with `X-Loomflow-Signature` is
//!   keyed by its signed delivery id alone, so a replay with another `Idempotency-Key` is
//!   still the same signal;
//! - a signal to a thread whose run has ended is refused (409): it would wait for the
//!   thread's next run; so is a second decision on a call (409; 404 once the run has carried
//!   on with the first, as nothing is pending then);
//! - errors are JSON: `{"error": {"code": "…", "message": "…"}}`, a request the server cannot
//!   read (a bad query or path, a wrong method) included, and an unauthenticated caller is
//!   told only that (401) whatever else is wrong with its request.
//!
//! # Examples
//!
//! ```no_run
//! use loomflow::http::{HttpConfig, router};
//! use loomflow::Runtime;
//!
//! # #[tokio::main] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let runtime = Runtime::sqlite("refunds.db")?;
//! let config = HttpConfig::new()
//!     .bearer_token(std::env::var("LOOMFLOW_TOKEN")?)
//!     .github_secret(std::env::var("GITHUB_WEBHOOK_SECRET")?);
//! let app = router(runtime, config);
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await?;
//! # Ok(()) }
//! ```

mod api;
mod auth;
mod error;
pub mod inbox;
mod runs;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};

use crate::Runtime;

pub use auth::{sign, signature_header};
pub use error::ApiError;

/// Who may call the ingress, and how webhooks prove who they are.
#[derive(Clone, Default)]
#[must_use]
pub struct HttpConfig {
    tokens: Vec<String>,
    open: bool,
    /// Host names a server without authentication answers besides `localhost` and IP
    /// addresses (see [`HttpConfig::allow_host`]).
    allowed_hosts: Vec<String>,
    github_secrets: Vec<String>,
    signing_secrets: Vec<String>,
    replay_window: Option<Duration>,
    /// Keys the inbox's form tokens (see [`HttpConfig::inbox_form_secret`]).
    form_secret: Option<String>,
}

impl std::fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Secrets are never printed.
        f.debug_struct("HttpConfig")
            .field("tokens", &self.tokens.len())
            .field("open", &self.open)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("github_secrets", &self.github_secrets.len())
            .field("signing_secrets", &self.signing_secrets.len())
            .field("replay_window", &self.replay_window_or_default())
            .finish()
    }
}

/// How far ahead of the server's clock a signed time may be: a sender's clock drift.
const FUTURE_SKEW: Duration = Duration::from_secs(60);

/// The longest [`HttpConfig::replay_window`]: with [`FUTURE_SKEW`], how long stores remember
/// a consumed signal's idempotency key.
const LONGEST_REPLAY_WINDOW: Duration = Duration::from_millis(
    crate::runtime::store::CONSUMED_KEY_KEPT_MS - FUTURE_SKEW.as_millis() as u64,
);

impl HttpConfig {
    /// No token yet: every request is refused (401) until one is added, or auth is turned
    /// off explicitly.
    pub fn new() -> Self {
        Self::default()
    }

    /// Accepts `Authorization: Bearer <token>`. May be called several times (rotation).
    /// Surrounding whitespace is not part of a token (a header cannot carry it: a token read
    /// from a file that ends in a newline is the token without it); empty tokens are ignored.
    pub fn bearer_token(mut self, token: impl Into<String>) -> Self {
        let token = token.into();
        let token = token.trim();
        if !token.is_empty() {
            self.tokens.push(token.to_owned());
        }
        self
    }

    /// Turns authentication off: anyone who reaches the port may signal and approve. Only
    /// for a loopback or otherwise protected listener. A browser's request that may change
    /// something is then refused (403 `forbidden`) when it comes from another site's page,
    /// so that a page the operator opens cannot act through the listener; and any request
    /// addressed to a host name other than `localhost` (or one given to
    /// [`allow_host`](Self::allow_host)) is refused, so that a site whose name the attacker
    /// points at the listener's address (DNS rebinding) cannot pass for the server's own.
    /// Requests addressed to an IP address are answered.
    pub fn without_auth(mut self) -> Self {
        self.open = true;
        self
    }

    /// Without authentication, also answers requests addressed to the host name `host`
    /// (as in `http://host:8080`), the name of a protected listener reached by name. A port
    /// or a final dot is not part of the name (`ops.internal:8080` allows `ops.internal`,
    /// on any port). May be called several times; a blank name allows nothing.
    pub fn allow_host(mut self, host: impl Into<String>) -> Self {
        let name = auth::host_name(host.into().trim());
        if !name.is_empty() {
            self.allowed_hosts.push(name);
        }
        self
    }

    /// Accepts signal POSTs signed by GitHub with this webhook secret
    /// (`X-Hub-Signature-256`); `X-GitHub-Delivery` becomes the idempotency key. May be
    /// called several times (rotation: a request signed with any of them is taken).
    /// Surrounding whitespace is not part of a secret (as for
    /// [`bearer_token`](Self::bearer_token): a secret file's newline is not); an empty
    /// secret is ignored: anyone can sign with it.
    pub fn github_secret(mut self, secret: impl Into<String>) -> Self {
        self.github_secrets.extend(trimmed_secret(secret.into()));
        self
    }

    /// Accepts signal POSTs signed with this secret in `X-Loomflow-Signature:
    /// t=<unix seconds>,v1=<hex HMAC-SHA256>`, over the time, the path, the
    /// `X-Loomflow-Delivery` id and the body ([`signature_header`] computes it). The signed
    /// delivery id is the idempotency key. May be called several times (rotation: a request
    /// signed with any of them is taken, and a header may carry a `v1=` for each secret a
    /// sender signs with while it moves to the new one). Surrounding whitespace is not part
    /// of a secret; an empty secret is ignored: anyone can sign with it.
    pub fn signing_secret(mut self, secret: impl Into<String>) -> Self {
        self.signing_secrets.extend(trimmed_secret(secret.into()));
        self
    }

    /// How old a signed timestamp may be (default 5 minutes): older signed requests are
    /// refused, so a captured one cannot be replayed later, and so are those signed more
    /// than a minute (a clock's drift) ahead of the server's clock. At most 59 minutes:
    /// with that minute, as long as the stores remember a delivery id once its signal is
    /// consumed, so that a replay within the window is one signal. (On the memory store, keep
    /// [`MailboxConfig::idempotency_key_ttl`](crate::runtime::MailboxConfig::idempotency_key_ttl)
    /// at least as long as the window.)
    pub fn replay_window(mut self, window: Duration) -> Self {
        self.replay_window = Some(window.min(LONGEST_REPLAY_WINDOW));
        self
    }

    /// The key of the inbox's form tokens, for servers that run as several replicas (or
    /// that restart while a page is open): give each the same secret, and a page's forms
    /// are taken by whichever answers. Without one, each router keys them with a random
    /// secret of its own: a form posted to another process is refused (403 `bad_form`)
    /// until the page is loaded again. Surrounding whitespace is not part of it; an empty
    /// secret is ignored.
    pub fn inbox_form_secret(mut self, secret: impl Into<String>) -> Self {
        self.form_secret = trimmed_secret(secret.into());
        self
    }

    fn replay_window_or_default(&self) -> Duration {
        self.replay_window.unwrap_or(Duration::from_secs(300))
    }
}

/// `secret` without surrounding whitespace; `None` when nothing is left.
fn trimmed_secret(secret: String) -> Option<String> {
    Some(secret.trim().to_owned()).filter(|secret| !secret.is_empty())
}

/// What the handlers share.
pub(crate) struct AppState {
    pub(crate) runtime: Runtime,
    pub(crate) config: HttpConfig,
    /// Keys the inbox's form tokens: the configured secret, else one new for each router.
    pub(crate) form_secret: String,
}

/// A secret nobody outside this process can guess.
fn random_secret() -> String {
    use std::hash::{BuildHasher, Hasher};
    (0..4)
        .map(|i| {
            let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
            hasher.write_u128(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos()),
            );
            hasher.write_u32(i);
            format!("{:016x}", hasher.finish())
        })
        .collect()
}

/// The most bytes a request's body may hold, for payloads of at most `payload_limit` bytes
/// (`MailboxConfig::max_payload_bytes`, which the mailbox checks on the payload as JSON
/// without spaces): a form-encoded webhook writes a byte as three (`%7B`), and pretty
/// JSON spends bytes on spaces.
pub(crate) fn body_limit(payload_limit: usize) -> usize {
    payload_limit.saturating_mul(3).saturating_add(64 * 1024)
}

/// The ingress as an axum [`Router`]: serve it, or [`Router::nest`] it into your app.
pub fn router(runtime: Runtime, config: HttpConfig) -> Router {
    let limit = body_limit(runtime.signal_config().max_payload_bytes);
    let form_secret = config.form_secret.clone().unwrap_or_else(random_secret);
    let state = Arc::new(AppState {
        runtime,
        config,
        form_secret,
    });
    Router::new()
        .route(
            "/v1/threads/{thread}/signals/{name}",
            post(api::post_signal),
        )
        .route("/v1/runs", get(api::list_runs))
        .route(
            "/v1/threads/{thread}",
            get(api::get_thread).delete(api::delete_thread),
        )
        .route("/v1/threads/{thread}/audit", get(api::get_audit))
        .route("/v1/threads/{thread}/runs", post(runs::submit))
        .route("/v1/threads/{thread}/cancel", post(runs::cancel))
        .route(
            "/v1/threads/{thread}/approvals/{call_id}/approve",
            post(api::approve),
        )
        .route(
            "/v1/threads/{thread}/approvals/{call_id}/reject",
            post(api::reject),
        )
        .route("/inbox", get(inbox::page))
        .route("/inbox/decide", post(inbox::decide))
        .fallback(api::not_found)
        .method_not_allowed_fallback(api::method_not_allowed)
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            refuse_cross_site,
        ))
        .layer(axum::middleware::map_response(deny_framing))
        .with_state(state)
}

/// No response may be shown inside another site's frame: a page framing the inbox could
/// line a decoy up over its buttons, and the click would come from the inbox itself.
async fn deny_framing(mut response: axum::response::Response) -> axum::response::Response {
    let headers = response.headers_mut();
    headers.insert(
        axum::http::header::X_FRAME_OPTIONS,
        axum::http::HeaderValue::from_static("DENY"),
    );
    headers.insert(
        axum::http::header::CONTENT_SECURITY_POLICY,
        axum::http::HeaderValue::from_static("frame-ancestors 'none'"),
    );
    response
}

/// Without authentication, refuses what another site's page sends through a browser (see
/// `auth::refuse_cross_site`).
async fn refuse_cross_site(
    axum::extract::State(app): axum::extract::State<Arc<AppState>>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    if app.config.open {
        let headers = request.headers();
        let refused = auth::refuse_rebound_host(headers, &app.config.allowed_hosts)
            .and_then(|()| auth::refuse_cross_site(request.method(), headers));
        if let Err(error) = refused {
            return axum::response::IntoResponse::into_response(error);
        }
    }
    next.run(request).await
}
