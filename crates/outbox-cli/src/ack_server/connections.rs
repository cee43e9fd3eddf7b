//! The endpoint's connections: admission within `ack.max_connections` (making room by closing
//! the connection that has waited longest for a request head), and the hyper loop serving one
//! connection within the head and request timeouts.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use axum::http::{Request, StatusCode};
use axum::Router;
use hyper::body::Incoming;
use hyper::service::Service as _;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::log::EndpointLog;
use super::{error, AckLimits, Deadline, ANSWER_GRACE};

/// Largest request head (request line and headers), in bytes (hyper's read buffer).
const MAX_HEAD_BYTES: usize = 16 * 1024;
/// Most headers in a request.
const MAX_HEADERS: usize = 64;

/// What every connection task shares.
pub(super) struct Shared {
    pub(super) conns: Connections,
    pub(super) log: Arc<EndpointLog>,
    pub(super) limits: AckLimits,
    pub(super) app: TowerToHyperService<Router>,
    pub(super) stop: CancellationToken,
}

/// The category of a failed `accept()`, or `None` for a failure of that one connection (the
/// client gave up before it was accepted), which is retried at once.
pub(super) fn accept_failure(e: &std::io::Error) -> Option<&'static str> {
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
pub(super) fn admit(shared: &Arc<Shared>, stream: TcpStream, alive: tokio::sync::mpsc::Sender<()>) {
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
                let answer =
                    match tokio::time::timeout_at(deadline + ANSWER_GRACE, shared.app.call(req)).await {
                        Ok(answer) => answer,
                        Err(_) => {
                            shared.log.pressure.record("request not answered in time (503)", String::new);
                            Ok(error(
                                StatusCode::SERVICE_UNAVAILABLE,
                                "the request was not answered in time; retry",
                            ))
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
                shared.log.pressure.record("request head not received within header_timeout", String::new);
            }
        } else if e.is_parse() || e.is_parse_too_large() {
            shared.log.refused.record("malformed or oversized request head (400/431)", String::new);
        }
    }
}

/// The open connections, and which of them wait for a request head.
pub(super) struct Connections {
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
    pub(super) fn new(max: usize) -> Self {
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

#[cfg(test)]
mod tests {
    use super::*;

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
