//! Errors as `application/problem+json` (RFC 9457): a title per status, a detail that says what
//! was wrong and where, never raw input (it is escaped and cut) and never a secret.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use outbox_core::text::printable;
use outbox_core::{Error, ErrorKind};
use serde_json::json;

/// Longest detail returned, in characters.
const MAX_DETAIL: usize = 300;

/// An error answer.
#[derive(Debug)]
pub(crate) struct Problem {
    pub(crate) status: StatusCode,
    pub(crate) detail: String,
}

impl Problem {
    pub(crate) fn new(status: StatusCode, detail: impl AsRef<str>) -> Self {
        Problem { status, detail: printable(detail.as_ref(), MAX_DETAIL).into_owned() }
    }

    pub(crate) fn bad_request(detail: impl AsRef<str>) -> Self {
        Problem::new(StatusCode::BAD_REQUEST, detail)
    }

    pub(crate) fn not_found(detail: impl AsRef<str>) -> Self {
        Problem::new(StatusCode::NOT_FOUND, detail)
    }
}

/// A store's error: the caller's mistakes are 4xx with the library's own message; a failing
/// database is 503 without its text (it may name hosts), which is logged instead.
impl From<Error> for Problem {
    fn from(e: Error) -> Self {
        match e.kind() {
            ErrorKind::InvalidInput => Problem::bad_request(e.to_string()),
            ErrorKind::NotFound => Problem::not_found(e.to_string()),
            ErrorKind::Conflict => Problem::new(StatusCode::CONFLICT, e.to_string()),
            _ => {
                tracing::warn!(error = %printable(&e.to_string(), 500), "Admin API: store error");
                Problem::new(StatusCode::SERVICE_UNAVAILABLE, "the store failed; see the relay's log")
            }
        }
    }
}

/// A request part axum could not read (a path segment, the query, a JSON body): 400 with
/// axum's own text.
macro_rules! bad_request_from {
    ($($rejection:ty),+) => {$(
        impl From<$rejection> for Problem {
            fn from(e: $rejection) -> Self {
                Problem::bad_request(e.body_text())
            }
        }
    )+};
}

bad_request_from!(PathRejection, QueryRejection, JsonRejection);

/// What axum's extractor `E` reads from the request head (`Path`, `Query`), refused as a
/// [`Problem`] when it cannot be read.
pub(crate) struct Part<E>(pub(crate) E);

impl<S: Send + Sync, E> FromRequestParts<S> for Part<E>
where
    E: FromRequestParts<S>,
    Problem: From<E::Rejection>,
{
    type Rejection = Problem;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Problem> {
        Ok(Part(E::from_request_parts(parts, state).await?))
    }
}

impl IntoResponse for Problem {
    fn into_response(self) -> Response {
        let title = self.status.canonical_reason().unwrap_or("Error");
        let body = json!({
            "type": "about:blank",
            "title": title,
            "status": self.status.as_u16(),
            "detail": self.detail,
        });
        let mut r = (self.status, body.to_string()).into_response();
        r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/problem+json"));
        if self.status == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        r
    }
}
