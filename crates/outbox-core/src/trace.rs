//! W3C trace context between the service that enqueues and the relay that publishes (feature
//! `otel`).
//!
//! - [`inject_current`]: at enqueue, the current trace context (the current `tracing` span's
//!   OpenTelemetry context through `tracing-opentelemetry`, else OpenTelemetry's current
//!   context) is written into the message's headers as `traceparent` (and `tracestate`), unless
//!   the message carries one already. The header travels with the message to every broker, so a
//!   consumer continues the trace.
//! - [`remote_context`]: the relay reads it back to link its publish span to the enqueue.
//!
//! The format is OpenTelemetry's own `TraceContextPropagator` (W3C Trace Context level 1); a
//! malformed or foreign header is ignored (no link), never an error.

use std::collections::BTreeMap;

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{SpanContext, TraceContextExt};
use opentelemetry::Context;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::transport::header::TRACEPARENT;
use crate::Headers;

/// `tracestate`, the vendor part of the W3C trace context.
pub const TRACESTATE: &str = "tracestate";

/// Longest `tracestate` kept (the W3C limit is 32 entries of at most 256 characters; the
/// headers' own limits apply too).
const MAX_TRACESTATE: usize = 512;

struct Into<'a>(&'a mut BTreeMap<String, String>);

impl Injector for Into<'_> {
    fn set(&mut self, key: &str, value: String) {
        if key == TRACESTATE && (value.is_empty() || value.len() > MAX_TRACESTATE) {
            return;
        }
        self.0.insert(key.to_owned(), value);
    }
}

struct From<'a>(&'a Headers);

impl Extractor for From<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    fn keys(&self) -> Vec<&str> {
        self.0.keys().map(String::as_str).collect()
    }
}

/// The context of the current `tracing` span when it has a valid OpenTelemetry span, else
/// OpenTelemetry's current context, else `None`.
fn current() -> Option<Context> {
    let from_span = tracing::Span::current().context();
    if from_span.span().span_context().is_valid() {
        return Some(from_span);
    }
    let cx = Context::current();
    cx.span().span_context().is_valid().then_some(cx)
}

/// Writes the current trace context into `headers` as `traceparent` (and `tracestate`) when
/// there is one and `headers` has no `traceparent` yet. Returns whether it wrote.
pub fn inject_current(headers: &mut Headers) -> bool {
    if headers.contains_key(TRACEPARENT) {
        return false;
    }
    let Some(cx) = current() else { return false };
    TraceContextPropagator::new().inject_context(&cx, &mut Into(headers));
    headers.contains_key(TRACEPARENT)
}

/// Whether [`inject_current`] would write (a valid current context, no `traceparent` yet):
/// lets a caller avoid copying a message that would not change.
pub fn would_inject(headers: &Headers) -> bool {
    !headers.contains_key(TRACEPARENT) && current().is_some()
}

/// The remote span context a message's `traceparent` names, when it is valid.
pub fn remote_context(headers: &Headers) -> Option<SpanContext> {
    headers.get(TRACEPARENT)?;
    let cx = TraceContextPropagator::new().extract(&From(headers));
    let sc = cx.span().span_context().clone();
    sc.is_valid().then_some(sc)
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::{SpanId, TraceFlags, TraceId, TraceState};

    use super::*;

    #[test]
    fn a_valid_traceparent_is_read_and_garbage_is_ignored() {
        let mut h = Headers::new();
        h.insert(TRACEPARENT.into(), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into());
        let sc = remote_context(&h).unwrap();
        assert_eq!(sc.trace_id(), TraceId::from_hex("0af7651916cd43dd8448eb211c80319c").unwrap());
        assert_eq!(sc.span_id(), SpanId::from_hex("b7ad6b7169203331").unwrap());
        assert!(sc.is_remote() && sc.is_sampled());
        for bad in [
            "",
            "garbage",
            "00-00000000000000000000000000000000-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
            "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\n\u{1b}[31m",
        ] {
            h.insert(TRACEPARENT.into(), bad.into());
            assert!(remote_context(&h).is_none(), "{bad:?}");
        }
        assert!(remote_context(&Headers::new()).is_none());
    }

    #[test]
    fn the_current_context_is_written_once_and_an_existing_one_is_kept() {
        let mut h = Headers::new();
        assert!(!inject_current(&mut h), "no current context: nothing written");
        assert!(h.is_empty());

        let sc = SpanContext::new(
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
            SpanId::from_hex("00f067aa0ba902b7").unwrap(),
            TraceFlags::SAMPLED,
            false,
            TraceState::default(),
        );
        let _attached = Context::new().with_remote_span_context(sc).attach();
        assert!(would_inject(&h));
        assert!(inject_current(&mut h));
        assert_eq!(h[TRACEPARENT], "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        assert!(!h.contains_key(TRACESTATE), "an empty tracestate is not written");

        let mut own = Headers::new();
        own.insert(TRACEPARENT.into(), "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into());
        assert!(!would_inject(&own));
        assert!(!inject_current(&mut own), "the application's own traceparent is kept");
        assert_eq!(own[TRACEPARENT], "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
    }
}
