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

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::Body;
use axum::extract::rejection::PathRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Extension, Json, Router};
use hyper::body::Incoming;
use hyper::service::Service as _;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use outbox_core::ack::AckTokenError;
use outbox_core::text::printable;
use outbox_core::MessageId;
use outbox_relay::{acknowledge, AckError};
use outbox_store::{AckOutcome, AnyOutbox};
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Largest ACK request body (a JSON `{"token": "..."}`).
const MAX_BODY: usize = 4096;
/// Largest request head (request line and headers), in bytes (hyper's read buffer).
const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Most headers in a request.
const MAX_HEADERS: usize = 64;
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
    let shared = Arc::new(Shared {
        conns: Connections::new(limits.max_connections),
        log: state.log.clone(),
        limits,
        app: TowerToHyperService::new(router(state)),
        stop: stop.clone(),
    });
    tracing::info!(
        max_connections = limits.max_connections,
        header_timeout = ?limits.header_timeout,
        request_timeout = ?limits.request_timeout,
        "ACK endpoint serving"
    );
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

/// What every connection task shares.
struct Shared {
    conns: Connections,
    log: Arc<EndpointLog>,
    limits: AckLimits,
    app: TowerToHyperService<Router>,
    stop: CancellationToken,
}

/// The category of a failed `accept()`, or `None` for a failure of that one connection (the
/// client gave up before it was accepted), which is retried at once.
fn accept_failure(e: &std::io::Error) -> Option<&'static str> {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset, Interrupted};
    if matches!(e.kind(), ConnectionAborted | ConnectionReset | ConnectionRefused | Interrupted) {
        return None;
    }
    // EMFILE and ENFILE have these numbers on Linux, the BSDs and macOS.
    Some(match e.raw_os_error() {
        Some(24) => "accept() failed: the process is out of file descriptors (EMFILE)",
        Some(23) => "accept() failed: the system is out of file descriptors (ENFILE)",
        _ => "accept() failed",
    })
}

/// Takes `stream` in if a slot is free or can be freed, else answers 503 and closes it.
fn admit(shared: &Arc<Shared>, stream: TcpStream, alive: tokio::sync::mpsc::Sender<()>) {
    let Some((id, cut, evicted)) = shared.conns.admit() else {
        shared.log.pressure.record("connection refused, every connection busy (503)", String::new);
        // Non-blocking: a client that does not read its 503 cannot hold this loop.
        let _ = stream.try_write(BUSY);
        return;
    };
    if evicted {
        shared.log.pressure.record("idle connection closed to make room", String::new);
    }
    let shared = shared.clone();
    tokio::spawn(async move {
        connection(&shared, stream, id, cut).await;
        shared.conns.close(id);
        drop(alive);
    });
}

/// The answer to a connection over the limit.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n\
retry-after: 1\r\nconnection: close\r\ncontent-length: 41\r\n\r\n{\"error\":\"too many connections, retry\"}\r\n";

/// Serves one connection until it ends, is `cut` to make room, or the server stops.
async fn connection(shared: &Arc<Shared>, stream: TcpStream, id: u64, cut: CancellationToken) {
    let service = {
        let shared = shared.clone();
        hyper::service::service_fn(move |mut req: Request<Incoming>| {
            let shared = shared.clone();
            async move {
                shared.conns.set_waiting(id, false);
                let deadline = Instant::now() + shared.limits.request_timeout;
                req.extensions_mut().insert(Deadline(deadline));
                let answer = match tokio::time::timeout_at(deadline + ANSWER_GRACE, shared.app.call(req))
                    .await
                {
                    Ok(answer) => answer,
                    Err(_) => {
                        shared.log.pressure.record("request not answered in time (503)", String::new);
                        Ok(error(StatusCode::SERVICE_UNAVAILABLE, "the ACK was not answered in time; retry"))
                    }
                };
                shared.conns.set_waiting(id, true);
                answer
            }
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(shared.limits.header_timeout)
        .max_buf_size(MAX_HEAD_BYTES)
        .max_headers(MAX_HEADERS);
    let conn = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        // Closed to make room for a new connection: drop it.
        _ = cut.cancelled() => return,
        _ = shared.stop.cancelled() => {
            conn.as_mut().graceful_shutdown();
            let bound = shared.limits.request_timeout + ANSWER_GRACE;
            match tokio::time::timeout(bound, conn.as_mut()).await {
                Ok(r) => r,
                Err(_) => return,
            }
        }
    };
    if let Err(e) = result {
        if e.is_timeout() {
            if !shared.conns.served_any(id) {
                shared
                    .log
                    .pressure
                    .record("request head not received within ack.header_timeout", String::new);
            }
        } else if e.is_parse() || e.is_parse_too_large() {
            shared.log.refused.record("malformed or oversized request head (400/431)", String::new);
        }
    }
}

/// The open connections, and which of them wait for a request head.
struct Connections {
    max: usize,
    slots: Mutex<Slots>,
}

struct Slots {
    next: u64,
    open: HashMap<u64, Slot>,
}

struct Slot {
    /// Since when the connection waits for a request head; `None` while a request is handled.
    waiting_since: Option<Instant>,
    /// Whether a request was received on it.
    served: bool,
    /// Cancelled to close the connection.
    cut: CancellationToken,
}

impl Connections {
    fn new(max: usize) -> Self {
        Connections { max, slots: Mutex::new(Slots { next: 0, open: HashMap::new() }) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A slot for a new connection: its id, its cut signal, and whether another connection
    /// (the one waiting longest for a request head) was closed to make room. `None` when every
    /// connection is busy with a request.
    fn admit(&self) -> Option<(u64, CancellationToken, bool)> {
        let mut slots = self.lock();
        let mut evicted = false;
        if slots.open.len() >= self.max {
            let victim = slots
                .open
                .iter()
                .filter_map(|(id, s)| s.waiting_since.map(|since| (since, *id)))
                .min()
                .map(|(_, id)| id)?;
            if let Some(s) = slots.open.remove(&victim) {
                s.cut.cancel();
            }
            evicted = true;
        }
        let id = slots.next;
        slots.next += 1;
        let cut = CancellationToken::new();
        slots.open.insert(id, Slot { waiting_since: Some(Instant::now()), served: false, cut: cut.clone() });
        Some((id, cut, evicted))
    }

    fn set_waiting(&self, id: u64, waiting: bool) {
        if let Some(s) = self.lock().open.get_mut(&id) {
            s.waiting_since = waiting.then(Instant::now);
            s.served = true;
        }
    }

    fn served_any(&self, id: u64) -> bool {
        self.lock().open.get(&id).is_some_and(|s| s.served)
    }

    fn close(&self, id: u64) {
        self.lock().open.remove(&id);
    }
}

/// The endpoint's log lines, each kind rate-limited.
struct EndpointLog {
    /// Requests refused (4xx): bad tokens, unknown deliveries, malformed requests.
    refused: Limited,
    /// Connections refused or closed by the bounds, accept() failures.
    pressure: Limited,
    /// ACKs that could not be recorded (store errors).
    failed: Limited,
}

impl EndpointLog {
    fn new(interval: Duration) -> Self {
        EndpointLog {
            refused: Limited::new(Level::Warn, "ACK requests refused", interval),
            pressure: Limited::new(Level::Warn, "ACK endpoint under pressure", interval),
            failed: Limited::new(Level::Error, "ACKs could not be recorded", interval),
        }
    }

    /// Writes what was held back: all of it when `force`, else what waited a whole interval.
    fn flush(&self, force: bool) {
        for l in [&self.refused, &self.pressure, &self.failed] {
            l.flush(force);
        }
    }
}

#[derive(Clone, Copy)]
enum Level {
    Warn,
    Error,
}

/// A log line written at most once per `interval`: the first event after a quiet interval is
/// written at once; later ones are counted by reason (a fixed set of texts, nothing from a
/// request) and summed up in one line when the interval has passed.
struct Limited {
    level: Level,
    what: &'static str,
    interval: Duration,
    window: Mutex<Window>,
}

#[derive(Default)]
struct Window {
    last_line: Option<Instant>,
    counts: Vec<(&'static str, u64)>,
    example: Option<String>,
}

impl Limited {
    fn new(level: Level, what: &'static str, interval: Duration) -> Self {
        Limited { level, what, interval, window: Mutex::new(Window::default()) }
    }

    /// Counts one event of `reason`; `example` (escaped text) describes it if it is the first
    /// of its line.
    fn record(&self, reason: &'static str, example: impl FnOnce() -> String) {
        let mut w = self.window.lock().unwrap_or_else(PoisonError::into_inner);
        match w.counts.iter_mut().find(|(r, _)| *r == reason) {
            Some((_, n)) => *n += 1,
            None => w.counts.push((reason, 1)),
        }
        if w.example.is_none() {
            let e = example();
            w.example = Some(if e.is_empty() { reason.to_owned() } else { format!("{reason}: {e}") });
        }
        let now = Instant::now();
        if w.last_line.map_or(true, |t| now.duration_since(t) >= self.interval) {
            self.write(&mut w, now);
        }
    }

    fn flush(&self, force: bool) {
        let mut w = self.window.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if !w.counts.is_empty()
            && (force || w.last_line.map_or(true, |t| now.duration_since(t) >= self.interval))
        {
            self.write(&mut w, now);
        }
    }

    fn write(&self, w: &mut Window, now: Instant) {
        let total: u64 = w.counts.iter().map(|(_, n)| n).sum();
        let reasons = w.counts.iter().map(|(r, n)| format!("{r}: {n}")).collect::<Vec<_>>().join(", ");
        let first = w.example.take().unwrap_or_default();
        let since = w.last_line.map(|t| now.duration_since(t));
        w.counts.clear();
        w.last_line = Some(now);
        let period = match since {
            Some(d) if d < self.interval * 10 => format!("last {}s", d.as_secs().max(1)),
            _ => "first in a while".to_owned(),
        };
        match self.level {
            Level::Warn => {
                tracing::warn!(count = total, period = %period, reasons = %reasons, first = %first, "{}", self.what)
            }
            Level::Error => {
                tracing::error!(count = total, period = %period, reasons = %reasons, first = %first, "{}", self.what)
            }
        }
    }
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
mod tests {
    use std::time::Duration;

    use axum::body::Body;
    use axum::http::Request;
    use outbox_core::ack::sign;
    use outbox_store::{DeliveryWrite, NewMessage, Outbox, RelayStore, Settlement, Status};
    use tower::ServiceExt;

    use super::*;

    const SECRET: &[u8] = b"endpoint-test-secret-0123456789";

    async fn setup() -> (Router, MessageId, std::path::PathBuf) {
        let path = std::env::temp_dir().join(format!(
            "outbox-ack-endpoint-{}-{}.db",
            std::process::id(),
            rand_u32()
        ));
        let url = format!("sqlite:{}", path.display());
        let any = AnyOutbox::connect(&url, 2).await.unwrap();
        any.migrate().await.unwrap();
        let AnyOutbox::Sqlite(outbox) = any.clone() else { panic!("sqlite") };
        let id = outbox.enqueue(&NewMessage::new("order.paid", "x")).await.unwrap().id;
        awaiting_ack(&outbox, id).await;
        let stores = HashMap::from([("shop".to_owned(), any)]);
        (
            router(AckState::new(
                stores,
                Arc::from(SECRET.to_vec().into_boxed_slice()),
                &AckLimits::default(),
            )),
            id,
            path,
        )
    }

    fn rand_u32() -> u32 {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos()
    }

    async fn awaiting_ack(outbox: &Outbox<sqlx::Sqlite>, id: MessageId) {
        let claimed = outbox.claim("r1", 10, Duration::from_secs(30)).await.unwrap();
        assert_eq!(claimed.len(), 1);
        let s = Settlement {
            sent: vec![id],
            messages: vec![],
            deliveries: vec![DeliveryWrite {
                message_id: id,
                destination: "crm".into(),
                status: Status::Sent,
                attempts: 0,
                retry_in: Duration::ZERO,
                last_error: None,
                attempted: true,
                ack_timeout: Some(Duration::from_secs(60)),
            }],
        };
        outbox.settle("r1", &s).await.unwrap();
    }

    async fn post(app: &Router, uri: &str, token: Option<&str>, body: &str) -> (StatusCode, String) {
        let mut req = Request::builder().method("POST").uri(uri);
        if let Some(t) = token {
            req = req.header("outbox-ack-token", t);
        }
        let resp = app.clone().oneshot(req.body(Body::from(body.to_owned())).unwrap()).await.unwrap();
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
        (status, String::from_utf8_lossy(&bytes).into_owned())
    }

    #[tokio::test]
    async fn the_ack_endpoint_confirms_once_and_refuses_everything_else() {
        let (app, id, path) = setup().await;
        let exp = 4_000_000_000; // 2096
        let good = sign(SECRET, "shop", id, "crm", exp);
        let uri = format!("/v1/ack/shop/{id}/crm");

        let forged = sign(b"wrong-secret-wrong-secret", "shop", id, "crm", exp);
        assert_eq!(post(&app, &uri, Some(&forged), "").await.0, StatusCode::FORBIDDEN);
        let (code, body) = post(&app, &uri, Some("not-a-token"), "").await;
        assert_eq!(code, StatusCode::FORBIDDEN);
        assert!(!body.contains("malformed"), "the reason is logged, not returned: {body}");
        assert_eq!(post(&app, &uri, None, "").await.0, StatusCode::BAD_REQUEST);
        assert_eq!(post(&app, &uri, None, "\u{0}\u{1}garbage").await.0, StatusCode::BAD_REQUEST);
        assert_eq!(post(&app, "/v1/ack/shop/abc/crm", Some(&good), "").await.0, StatusCode::BAD_REQUEST);
        assert_eq!(
            post(&app, &format!("/v1/ack/eu/{id}/crm"), Some(&good), "").await.0,
            StatusCode::NOT_FOUND
        );
        let other = sign(SECRET, "shop", id, "erp", exp);
        assert_eq!(
            post(&app, &format!("/v1/ack/shop/{id}/erp"), Some(&other), "").await.0,
            StatusCode::NOT_FOUND
        );
        let huge = "x".repeat(100_000);
        assert_eq!(post(&app, &uri, None, &huge).await.0, StatusCode::PAYLOAD_TOO_LARGE);
        // A declared length over the limit is refused without waiting for the body.
        let lying = Request::builder()
            .method("POST")
            .uri(&uri)
            .header("content-length", "100000000000")
            .body(Body::from("{"))
            .unwrap();
        let resp =
            tokio::time::timeout(Duration::from_secs(5), app.clone().oneshot(lying)).await.unwrap().unwrap();
        assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
        let get =
            app.clone().oneshot(Request::builder().uri(&uri).body(Body::empty()).unwrap()).await.unwrap();
        assert_eq!(get.status(), StatusCode::METHOD_NOT_ALLOWED);

        let (code, body) = post(&app, &uri, None, &format!(r#"{{"token":"{good}"}}"#)).await;
        assert_eq!(code, StatusCode::OK, "{body}");
        assert!(body.contains("\"acked\"") && body.contains("\"message_done\":true"), "{body}");
        let (code, body) = post(&app, &uri, Some(&good), "").await;
        assert_eq!((code, body.contains("already_acked")), (StatusCode::OK, true), "{body}");
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
        }
    }

    /// Captures what a `tracing` subscriber writes.
    #[derive(Clone, Default)]
    struct Capture(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Capture {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn refusals_are_logged_once_per_interval_escaped_and_counted_by_reason() {
        let out = Capture::default();
        let writer = out.clone();
        let subscriber =
            tracing_subscriber::fmt().with_ansi(false).with_writer(move || writer.clone()).finish();
        tracing::subscriber::with_default(subscriber, || {
            let log = Limited::new(Level::Warn, "ACK requests refused", Duration::from_secs(3600));
            let hostile = "shop\r\n2030-01-01 ERROR forged line\u{1b}[31m";
            for i in 0..1000 {
                let reason = if i % 2 == 0 { "malformed token" } else { "unknown store" };
                log.record(reason, || shown(hostile));
            }
            log.flush(false);
            let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
            assert_eq!(text.lines().count(), 1, "{text}");
            assert!(text.contains("count=1 ") && text.contains("forged line\\u{1b}[31m"), "{text}");
            log.flush(true);
        });
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");
        let last = text.lines().last().unwrap();
        assert!(
            last.contains("count=999")
                && last.contains("malformed token: 499")
                && last.contains("unknown store: 500"),
            "{last}"
        );
        assert!(!text.contains('\r') && !text.contains('\u{1b}'), "{text:?}");
        assert!(!text.lines().any(|l| l.starts_with("2030")), "{text}");
    }

    #[test]
    fn at_the_limit_the_longest_waiting_connection_makes_room_and_busy_ones_never_do() {
        let conns = Connections::new(2);
        let (a, cut_a, evicted) = conns.admit().unwrap();
        assert!(!evicted);
        let (b, cut_b, _) = conns.admit().unwrap();
        conns.set_waiting(b, false); // b is handling a request
        let (c, cut_c, evicted) = conns.admit().unwrap();
        assert!(evicted && cut_a.is_cancelled() && !cut_b.is_cancelled() && !cut_c.is_cancelled());
        conns.close(a); // its task ends; the slot was already freed
        assert_eq!(conns.lock().open.len(), 2);
        // Every connection busy: no room, nobody cut.
        conns.set_waiting(c, false);
        assert!(conns.admit().is_none());
        assert!(!cut_b.is_cancelled() && !cut_c.is_cancelled());
        // b answered and waits for its next request head: it makes room.
        conns.set_waiting(b, true);
        assert!(conns.admit().unwrap().2 && cut_b.is_cancelled());
    }
}
