//! The ACK endpoint of ACK mode: `POST /v1/ack/{store}/{message_id}/{destination}` with the
//! delivery's token in the `Outbox-Ack-Token` header (or a JSON body `{"token": "..."}`).
//!
//! Answers: 200 `{"status":"acked","message_done":bool}` or `{"status":"already_acked"}`;
//! 400 malformed request; 403 token refused (the reason is logged, not returned); 404 unknown
//! store or delivery; 409 the delivery is not awaiting an ACK; 413 body over 4 KiB; 500 store
//! error; 408 when the body does not arrive within `ack.request_timeout`. A declared
//! `Content-Length` over the limit is refused before any body is read. Bound to loopback by
//! default; every ACK needs a valid token whatever the address.
//!
//! # Bounds (a hostile or broken client cannot starve the endpoint)
//! - **Connections**: at most `ack.max_connections` open at once. At the limit, the connection
//!   that has waited longest for a request head (a slow or idle client) is closed to make room
//!   for the new one; when every connection is busy with a request, the new one is answered 503
//!   and closed at once. Nothing queues beyond the limit, so the process never runs out of file
//!   descriptors because of this endpoint.
//! - **Request head**: it must arrive within `ack.header_timeout` (hyper's header read timeout,
//!   also between two requests on a kept-alive connection), at most 16 KiB and 64 headers
//!   (larger: 431, closed).
//! - **Request**: body at most 4 KiB; from its head to its answer at most `ack.request_timeout`
//!   (a body still missing then: 408); an answer that takes a second longer (a stuck store) is
//!   replaced by 503.
//! - **accept() errors** (`EMFILE` when the process is out of descriptors) back off from 10 ms
//!   to 1 s instead of spinning.
//!
//! # Logs
//! Nothing from a request reaches a log line raw: path segments are escaped and cut by
//! [`outbox_core::text::printable`]. Refusals are not logged one per request (an attacker could
//! flood the log): each kind of event (refused requests, connection pressure, store failures)
//! writes at most one line per 10 s, counting what happened by reason and showing the first
//! example, escaped.

mod connections;
mod log;

pub(crate) use log::EndpointLog;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Json, Router};
use connections::{accept_failure, admit, Connections, Shared};
use hyper_util::service::TowerToHyperService;
use outbox_core::ack::AckTokenError;
use outbox_core::text::printable;
use outbox_core::MessageId;
use outbox_relay::{acknowledge, AckError};
use outbox_store::{AckOutcome, AnyOutbox};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Largest ACK request body (a JSON `{"token": "..."}`).
const MAX_BODY: usize = 4096;
/// How much longer than `request_timeout` an answer may take before it is replaced by 503.
const ANSWER_GRACE: Duration = Duration::from_secs(1);
/// At most one log line of each kind per this period.
const LOG_INTERVAL: Duration = Duration::from_secs(10);
/// Longest text from a request shown in a log line, in characters.
const SHOWN_CHARS: usize = 64;
/// Shortest and longest pause after a failed `accept()`.
const ACCEPT_BACKOFF: (Duration, Duration) = (Duration::from_millis(10), Duration::from_secs(1));

/// The endpoint's bounds (`[ack]` in the configuration).
#[derive(Clone, Copy, Debug)]
pub(crate) struct AckLimits {
    /// Most connections open at once.
    pub(crate) max_connections: usize,
    /// Longest time a client may take to send a request head.
    pub(crate) header_timeout: Duration,
    /// Longest time from a request's head to its answer.
    pub(crate) request_timeout: Duration,
}

impl AckLimits {
    /// The limits of the `[ack]` section.
    pub(crate) fn of(c: &crate::config::AckSection) -> Self {
        AckLimits {
            max_connections: c.max_connections,
            header_timeout: c.header_timeout,
            request_timeout: c.request_timeout,
        }
    }
}

impl Default for AckLimits {
    fn default() -> Self {
        AckLimits::of(&crate::config::AckSection::default())
    }
}

/// What the endpoint needs: the stores by name, the token secret, and its rate-limited log.
#[derive(Clone)]
pub(crate) struct AckState {
    stores: Arc<HashMap<String, AnyOutbox>>,
    secret: Arc<[u8]>,
    log: Arc<EndpointLog>,
    request_timeout: Duration,
}

impl AckState {
    /// The state for `stores` and the token `secret`.
    pub(crate) fn new(stores: HashMap<String, AnyOutbox>, secret: Arc<[u8]>, limits: &AckLimits) -> Self {
        AckState {
            stores: Arc::new(stores),
            secret,
            log: Arc::new(EndpointLog::new(LOG_INTERVAL)),
            request_timeout: limits.request_timeout,
        }
    }
}

/// When the current request must be answered (set per request by [`serve`]).
#[derive(Clone, Copy)]
struct Deadline(Instant);

/// The router (tested without a server through `tower::ServiceExt::oneshot`).
pub(crate) fn router(state: AckState) -> Router {
    Router::new()
        .route("/v1/ack/{store}/{message_id}/{destination}", post(ack))
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

/// Serves the endpoint on `listener` until `stop`, within `limits`; then lets the requests in
/// progress finish (for at most `request_timeout` plus a second) and returns. Never fails:
/// accept errors are logged (rate-limited) and retried after a pause.
pub(crate) async fn serve(
    listener: TcpListener,
    state: AckState,
    limits: AckLimits,
    stop: CancellationToken,
) {
    tracing::info!(
        max_connections = limits.max_connections,
        header_timeout = ?limits.header_timeout,
        request_timeout = ?limits.request_timeout,
        "ACK endpoint serving"
    );
    let log = state.log.clone();
    serve_app(listener, router(state), log, limits, stop).await;
}

/// Serves `app` on `listener` with the bounds above (connection limit, head and request
/// timeouts, rate-limited logs) until `stop`: the ACK endpoint and the admin listener.
pub(crate) async fn serve_app(
    listener: TcpListener,
    app: Router,
    log: Arc<EndpointLog>,
    limits: AckLimits,
    stop: CancellationToken,
) {
    let shared = Arc::new(Shared {
        conns: Connections::new(limits.max_connections),
        log,
        limits,
        app: TowerToHyperService::new(app),
        stop: stop.clone(),
    });
    // Every connection task holds a sender; when all are dropped, every connection is closed.
    let (alive, mut all_closed) = tokio::sync::mpsc::channel::<()>(1);
    let flusher = tokio::spawn({
        let (log, stop) = (shared.log.clone(), stop.clone());
        async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tick.tick() => log.flush(false),
                }
            }
        }
    });
    let mut backoff = Duration::ZERO;
    loop {
        let accepted = tokio::select! {
            _ = stop.cancelled() => break,
            r = listener.accept() => r,
        };
        match accepted {
            Ok((stream, _peer)) => {
                backoff = Duration::ZERO;
                admit(&shared, stream, alive.clone());
            }
            Err(e) => {
                let Some(reason) = accept_failure(&e) else { continue };
                shared.log.pressure.record(reason, || printable(&e.to_string(), 200).into_owned());
                backoff = (backoff * 2).clamp(ACCEPT_BACKOFF.0, ACCEPT_BACKOFF.1);
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(backoff) => {}
                }
            }
        }
    }
    drop(listener);
    drop(alive);
    let _ = tokio::time::timeout(limits.request_timeout + ANSWER_GRACE * 2, all_closed.recv()).await;
    let _ = flusher.await;
    shared.log.flush(true);
}

fn error(code: StatusCode, message: &str) -> Response {
    (code, Json(json!({ "error": message }))).into_response()
}

/// `s` from a request, fit for a log line.
fn shown(s: &str) -> String {
    printable(s, SHOWN_CHARS).into_owned()
}

enum BodyError {
    TooLarge,
    Broken,
}

/// The request body, at most [`MAX_BODY`] bytes.
async fn read_body(mut body: Body) -> Result<Vec<u8>, BodyError> {
    use axum::body::HttpBody as _;
    let mut out = Vec::new();
    while let Some(frame) = std::future::poll_fn(|cx| std::pin::Pin::new(&mut body).poll_frame(cx)).await {
        let Ok(data) = frame.map_err(|_| BodyError::Broken)?.into_data() else { continue };
        if out.len() + data.len() > MAX_BODY {
            return Err(BodyError::TooLarge);
        }
        out.extend_from_slice(&data);
    }
    Ok(out)
}

async fn ack(
    State(state): State<AckState>,
    deadline: Option<Extension<Deadline>>,
    path: Result<Path<(String, String, String)>, PathRejection>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let refused = |reason: &'static str, code: StatusCode, message: &str, detail: &dyn Fn() -> String| {
        state.log.refused.record(reason, detail);
        error(code, message)
    };
    let Ok(Path((store, message_id, destination))) = path else {
        return refused("malformed path", StatusCode::BAD_REQUEST, "malformed path", &String::new);
    };
    let detail = || {
        format!(
            "store {}, message {}, destination {}",
            shown(&store),
            shown(&message_id),
            shown(&destination)
        )
    };
    // A huge declared length is refused at once, not after waiting for a body that never comes.
    let declared = headers.get(axum::http::header::CONTENT_LENGTH).and_then(|v| v.to_str().ok());
    if declared.is_some_and(|v| v.trim().parse::<u64>().map_or(true, |n| n > MAX_BODY as u64)) {
        return refused("body over 4 KiB", StatusCode::PAYLOAD_TOO_LARGE, "body over 4 KiB", &detail);
    }
    let deadline = deadline.map_or_else(|| Instant::now() + state.request_timeout, |Extension(d)| d.0);
    let body = match tokio::time::timeout_at(deadline, read_body(body)).await {
        Ok(Ok(b)) => b,
        Ok(Err(BodyError::TooLarge)) => {
            return refused("body over 4 KiB", StatusCode::PAYLOAD_TOO_LARGE, "body over 4 KiB", &detail)
        }
        Ok(Err(BodyError::Broken)) => {
            return refused(
                "body cut short",
                StatusCode::BAD_REQUEST,
                "the request body was cut short",
                &detail,
            )
        }
        Err(_) => {
            return refused(
                "body not received within ack.request_timeout",
                StatusCode::REQUEST_TIMEOUT,
                "the request body did not arrive in time",
                &detail,
            )
        }
    };
    let bad = |message: &str| refused("malformed request", StatusCode::BAD_REQUEST, message, &detail);
    let Ok(id) = message_id.parse::<i64>() else {
        return bad("message id must be an integer");
    };
    let token = match headers.get("outbox-ack-token") {
        Some(v) => match v.to_str() {
            Ok(t) => t.to_owned(),
            Err(_) => return bad("Outbox-Ack-Token is not valid text"),
        },
        None if body.is_empty() => return bad("missing Outbox-Ack-Token header"),
        None => match serde_json::from_slice::<serde_json::Value>(&body) {
            Ok(v) => match v.get("token").and_then(|t| t.as_str()) {
                Some(t) => t.to_owned(),
                None => return bad("body must be {\"token\": \"...\"}"),
            },
            Err(_) => return bad("body must be JSON {\"token\": \"...\"}"),
        },
    };
    let Some(outbox) = state.stores.get(&store) else {
        return refused("unknown store", StatusCode::NOT_FOUND, "unknown store", &detail);
    };
    match acknowledge(outbox, &state.secret, &store, MessageId(id), &destination, &token).await {
        Ok(AckOutcome::Acked { message_done }) => {
            (StatusCode::OK, Json(json!({ "status": "acked", "message_done": message_done }))).into_response()
        }
        Ok(AckOutcome::AlreadyAcked) => {
            (StatusCode::OK, Json(json!({ "status": "already_acked" }))).into_response()
        }
        Ok(AckOutcome::NotAwaiting { status }) => refused(
            "delivery not awaiting an ACK",
            StatusCode::CONFLICT,
            &format!("the delivery is {status}, not awaiting an ACK"),
            &detail,
        ),
        Ok(AckOutcome::Unknown) => {
            refused("unknown delivery", StatusCode::NOT_FOUND, "unknown delivery", &detail)
        }
        Err(AckError::Token(reason)) => {
            let reason = match reason {
                AckTokenError::Malformed => "malformed token",
                AckTokenError::Expired => "expired token",
                AckTokenError::Invalid => "token not for this delivery (forged or another delivery's)",
                #[allow(unreachable_patterns)]
                _ => "token refused",
            };
            refused(reason, StatusCode::FORBIDDEN, "ACK refused", &detail)
        }
        Err(e) => {
            state
                .log
                .failed
                .record("store error", || format!("{}: {}", detail(), printable(&e.to_string(), 300)));
            error(StatusCode::INTERNAL_SERVER_ERROR, "ACK could not be recorded; retry")
        }
    }
}
#[cfg(test)]
mod tests;
