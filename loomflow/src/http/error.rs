//! [`ApiError`]: every refusal, as JSON with a code and a message.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::runtime::{RuntimeError, SignalError};

/// A refused or failed request: an HTTP status, a stable code, and a message for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable code scripts can match: `unauthorized`, `bad_signature`, `not_found`,
    /// `forbidden` (a browser's request from another site, without authentication),
    /// `method_not_allowed`, `bad_request`, `unsupported_media_type`, `payload_too_large`,
    /// `reserved_name`, `conflict` (also when another process took the thread while this one
    /// worked on it), `bad_form` (an inbox form whose token does not match: the page is
    /// old, or the form came from another site), `not_implemented`, `dropped` (503: a
    /// signal or an approval decision the runtime kept nothing of, see
    /// [`Delivery::Dropped`]; send it again once the run is there), `internal`.
    ///
    /// [`Delivery::Dropped`]: crate::runtime::Delivery::Dropped
    pub code: &'static str,
    /// What went wrong. For `internal`, only that: the server logs the failure itself
    /// (`tracing`, at error level), as its text can name files, hosts or tables.
    pub message: String,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub(crate) fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub(crate) fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "unauthorized", message)
    }

    /// A failure of the server's own (the store's, say): logged with what went wrong, and
    /// answered without it, as its text can name files, hosts or tables.
    fn internal(error: &dyn std::fmt::Display) -> Self {
        tracing::error!(%error, "http: request failed");
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "internal error; the server's log says what went wrong",
        )
    }
}

/// A request axum could not read (its path, its query, its form), as JSON. Handlers take
/// these rejections as values and turn them into errors only once the caller is
/// authenticated, so that nobody unauthenticated learns what a route expects.
macro_rules! from_rejection {
    ($($rejection:ty),*) => {$(
        impl From<$rejection> for ApiError {
            fn from(rejection: $rejection) -> Self {
                let status = rejection.status();
                let code = match status {
                    StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
                    StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
                    _ => "bad_request",
                };
                Self::new(status, code, rejection.body_text())
            }
        }
    )*};
}

from_rejection!(
    axum::extract::rejection::PathRejection,
    axum::extract::rejection::QueryRejection,
    axum::extract::rejection::FormRejection
);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({ "error": { "code": self.code, "message": self.message } });
        let mut response = (self.status, Json(body)).into_response();
        if self.status == StatusCode::UNAUTHORIZED {
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer"),
            );
        }
        response
    }
}

impl From<RuntimeError> for ApiError {
    fn from(error: RuntimeError) -> Self {
        match &error {
            RuntimeError::UnknownRun { .. } | RuntimeError::NoPendingApproval { .. } => {
                Self::not_found(error.to_string())
            }
            RuntimeError::BlankReason { .. } | RuntimeError::EmptyThread => {
                Self::bad_request(error.to_string())
            }
            RuntimeError::RunActive { .. }
            | RuntimeError::ApprovalRunEnded { .. }
            | RuntimeError::Busy { .. }
            | RuntimeError::AlreadyDecided { .. }
            | RuntimeError::AskedAgain { .. }
            | RuntimeError::Store(crate::runtime::StoreError::LeaseLost { .. }) => {
                Self::new(StatusCode::CONFLICT, "conflict", error.to_string())
            }
            // Nothing was kept, as for a dropped signal: sent again, it may be.
            RuntimeError::DecisionDropped { .. } => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "dropped",
                error.to_string(),
            ),
            RuntimeError::Signal(signal) => Self::from_signal(signal, error.to_string()),
            // A name or value the store cannot keep (a NUL character, a name too long).
            RuntimeError::Store(crate::runtime::StoreError::Refused { .. }) => {
                Self::bad_request(error.to_string())
            }
            RuntimeError::Store(crate::runtime::StoreError::Unsupported { .. }) => Self::new(
                StatusCode::NOT_IMPLEMENTED,
                "not_implemented",
                error.to_string(),
            ),
            _ => Self::internal(&error),
        }
    }
}

impl From<crate::Error> for ApiError {
    fn from(error: crate::Error) -> Self {
        match error {
            crate::Error::Runtime(e) => Self::from(e),
            crate::Error::Signal(e) => Self::from(RuntimeError::Signal(e)),
            crate::Error::Store(e) => Self::from(RuntimeError::Store(e)),
            other => Self::internal(&other),
        }
    }
}

impl ApiError {
    fn from_signal(error: &SignalError, message: String) -> Self {
        match error {
            SignalError::ReservedName { .. } => {
                Self::new(StatusCode::BAD_REQUEST, "reserved_name", message)
            }
            SignalError::PayloadTooLarge { .. } => {
                Self::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", message)
            }
            SignalError::RunEnded { .. } => Self::new(StatusCode::CONFLICT, "conflict", message),
            _ => Self::bad_request(message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::StoreError;

    /// A thread another process took over while this one worked on it is a conflict to
    /// retry, not a server failure.
    #[test]
    fn a_lost_lease_is_a_conflict() {
        let error = ApiError::from(RuntimeError::Store(StoreError::LeaseLost {
            thread: "t-1".into(),
            owner: "me".into(),
        }));
        assert_eq!(
            (error.status, error.code),
            (StatusCode::CONFLICT, "conflict")
        );
        assert!(error.message.contains("t-1"), "{}", error.message);
    }

    /// The same from the crate's error, as the approval routes return it.
    #[test]
    fn a_store_error_keeps_its_status_through_the_crates_error() {
        let lost = crate::Error::Store(StoreError::LeaseLost {
            thread: "t-1".into(),
            owner: "me".into(),
        });
        assert_eq!(ApiError::from(lost).status, StatusCode::CONFLICT);
        let unsupported = crate::Error::Store(StoreError::Unsupported {
            operation: "delete_thread",
            thread: "t-1".into(),
        });
        assert_eq!(
            ApiError::from(unsupported).status,
            StatusCode::NOT_IMPLEMENTED
        );
    }

    #[test]
    fn another_store_failure_is_internal() {
        let error = ApiError::from(RuntimeError::Store(StoreError::Open {
            path: "/srv/private/runs.db".to_owned(),
            message: "disk I/O error".to_owned(),
        }));
        assert_eq!(error.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(
            !error.message.contains("/srv/private"),
            "a 500 does not say what the server keeps where: {}",
            error.message
        );
    }
}
