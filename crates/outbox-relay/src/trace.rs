//! The relay's `tracing` spans, at `debug` level under the target `outbox::trace` (free when
//! nothing listens at that level; the daemon exports them over OTLP when configured):
//!
//! - `outbox.claim`: one claim (owner, mode, limit; the number claimed once known).
//! - `outbox.publish`: one message to one destination (message id, topic, key, biz type and
//!   key, destination, attempt, then the outcome and error), open for the destination's publish
//!   call. With the feature `otel` it links to the trace context the message was enqueued in
//!   (its `traceparent` header, written by the enqueue or by the application).
//! - `outbox.settle`: one message's write-back (the same message fields and the status
//!   written), open for the batch's settlement.
//!
//! Every text field comes from a row and is escaped and bounded ([`printable`]).

use outbox_core::text::printable;
use std::collections::{HashMap, HashSet};

use outbox_core::{MessageId, OutboxMessage, Outcome};
use outbox_store::Settlement;
use tracing::field::Empty;
use tracing::Span;

/// Longest text recorded in a span field.
const MAX_FIELD: usize = 200;

fn text(s: &str) -> std::borrow::Cow<'_, str> {
    printable(s, MAX_FIELD)
}

fn opt(s: Option<&str>) -> std::borrow::Cow<'_, str> {
    s.map_or(std::borrow::Cow::Borrowed(""), text)
}

/// Whether anything listens to the spans (else the per-message ones are not even built).
pub(crate) fn enabled() -> bool {
    tracing::enabled!(target: "outbox::trace", tracing::Level::DEBUG)
}

/// The span of one claim.
pub(crate) fn claim(owner: &str, mode: &'static str, limit: usize) -> Span {
    tracing::debug_span!(target: "outbox::trace", "outbox.claim", owner = %text(owner), mode, limit, claimed = Empty)
}

/// The span of one publish of `m` to `destination`, linked to `m`'s `traceparent` (`otel`).
pub(crate) fn publish(m: &OutboxMessage, destination: &str, attempt: u32) -> Span {
    let span = tracing::debug_span!(
        target: "outbox::trace",
        "outbox.publish",
        otel.kind = "producer",
        message_id = m.id.0,
        topic = %text(&m.topic),
        key = %opt(m.key.as_deref()),
        biz_type = %opt(m.biz_type.as_deref()),
        biz_key = %opt(m.biz_key.as_deref()),
        destination = %text(destination),
        attempt,
        outcome = Empty,
        error = Empty,
    );
    #[cfg(feature = "otel")]
    if !span.is_disabled() {
        use tracing_opentelemetry::OpenTelemetrySpanExt as _;
        if let Some(sc) = outbox_core::trace::remote_context(&m.headers) {
            span.add_link(sc);
        }
    }
    span
}

/// Records a publish's outcome on its span.
pub(crate) fn outcome(span: &Span, o: &Outcome) {
    if span.is_disabled() {
        return;
    }
    match o {
        Outcome::Delivered => {
            span.record("outcome", "delivered");
        }
        Outcome::Failed { kind, reason, .. } => {
            span.record("outcome", tracing::field::debug(kind));
            span.record("error", tracing::field::display(text(reason)));
            span.record("otel.status_code", "ERROR");
        }
    }
}

/// One [`settle`] span per message of `batch`, with the status `settlement` writes for it
/// (none when [`enabled`] is false).
pub(crate) fn settle_spans(batch: &[OutboxMessage], settlement: &Settlement) -> Vec<Span> {
    if !enabled() {
        return Vec::new();
    }
    let sent: HashSet<MessageId> = settlement.sent.iter().copied().collect();
    let written: HashMap<MessageId, &'static str> =
        settlement.messages.iter().map(|w| (w.id, w.status.as_str())).collect();
    batch
        .iter()
        .map(|m| {
            let status = if sent.contains(&m.id) {
                "sent"
            } else {
                written.get(&m.id).copied().unwrap_or("unchanged")
            };
            settle(m, status)
        })
        .collect()
}

/// The span of `m`'s write-back, writing `status`.
fn settle(m: &OutboxMessage, status: &str) -> Span {
    tracing::debug_span!(
        target: "outbox::trace",
        "outbox.settle",
        message_id = m.id.0,
        topic = %text(&m.topic),
        key = %opt(m.key.as_deref()),
        biz_type = %opt(m.biz_type.as_deref()),
        biz_key = %opt(m.biz_key.as_deref()),
        status,
    )
}
