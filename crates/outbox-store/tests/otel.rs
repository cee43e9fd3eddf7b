//! Feature `otel`: an enqueue made inside a traced span records the span's W3C trace context as
//! the message's `traceparent` (so the relay can link its publish to it and the consumer can
//! continue the trace); a message that carries its own `traceparent` keeps it; without a span
//! nothing is added. On SQLite and PostgreSQL (the hook is shared by every dialect).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
use outbox_core::NewMessage;
use outbox_store::{Outbox, OutboxDatabase};
use tracing::Instrument as _;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use tracing_subscriber::layer::SubscriberExt as _;

const OWN: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

async fn check<DB: OutboxDatabase>(outbox: Outbox<DB>) {
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("outbox-test")));
    let _default = tracing::subscriber::set_default(subscriber);

    let span = tracing::info_span!("checkout");
    let sc = span.context().span().span_context().clone();
    assert!(sc.is_valid());
    let own = NewMessage::new("order.paid", "{}").header("traceparent", OWN);
    let (traced, kept, batch) = async {
        let mut tx = outbox.begin().await.unwrap();
        let traced = tx.enqueue(&NewMessage::new("order.paid", "{}")).await.unwrap().id;
        let kept = tx.enqueue(&own).await.unwrap().id;
        let batch = tx.enqueue_batch(&[NewMessage::new("a", "1"), NewMessage::new("b", "2")]).await.unwrap();
        tx.commit().await.unwrap();
        (traced, kept, batch)
    }
    .instrument(span)
    .await;
    let untraced = outbox.enqueue(&NewMessage::new("order.paid", "{}")).await.unwrap().id;

    let want = format!("00-{}-{}-01", sc.trace_id(), sc.span_id());
    let header = async |id| outbox.get(id).await.unwrap().unwrap().headers.get("traceparent").cloned();
    assert_eq!(header(traced).await.as_deref(), Some(want.as_str()), "the enqueue's span");
    for e in &batch {
        assert_eq!(header(e.id).await.as_deref(), Some(want.as_str()), "every message of a batch");
    }
    assert_eq!(header(kept).await.as_deref(), Some(OWN), "the application's own is kept");
    assert_eq!(header(untraced).await, None, "no span, no header");
}

/// [`check`] on `db`, migrated; then drops it.
async fn check_on<DB: OutboxDatabase>(db: outbox_testkit::TestDb<DB>) {
    let outbox = Outbox::new(db.pool.clone());
    outbox.migrate().await.unwrap();
    check(outbox).await;
    db.drop_db().await;
}

#[tokio::test]
async fn sqlite() {
    check_on(outbox_testkit::fresh_sqlite().await).await;
}

#[tokio::test]
async fn postgres() {
    check_on(outbox_testkit::fresh_pg().await).await;
}
