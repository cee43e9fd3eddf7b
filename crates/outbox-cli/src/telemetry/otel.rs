//! OTLP export of the relay's spans (feature `otel`): `tracing-opentelemetry` turns the spans
//! of `outbox::trace` (claim, publish, settle; see `outbox_relay`) and the relay's info-level
//! events into OpenTelemetry spans, batched by the SDK on a thread of its own and sent as
//! OTLP/HTTP protobuf (`opentelemetry-otlp`, blocking reqwest client with rustls). Never blocks
//! the relay: a full queue drops spans, a collector that is down loses them, and the daemon
//! runs on.

use std::time::Duration;

use anyhow::Context as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use tracing::Level;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use crate::config::TelemetrySection;

/// The running export; [`OtelGuard::shutdown`] flushes it (the SDK also flushes on drop).
pub(crate) struct OtelGuard(SdkTracerProvider);

impl OtelGuard {
    /// Flushes the spans still buffered and stops the export (outside the async runtime: the
    /// exporter's client blocks).
    pub(crate) fn shutdown(self) {
        if let Err(e) = self.0.shutdown() {
            eprintln!("warning: could not flush the last spans: {}", super::redact_text(&e.to_string()));
        }
    }
}

/// Whether the standard environment names a collector.
fn endpoint_in_env() -> bool {
    ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"]
        .iter()
        .any(|v| std::env::var(v).is_ok_and(|s| !s.trim().is_empty()))
}

/// The layer that exports spans.
pub(crate) type ExportLayer<S> = Box<dyn Layer<S> + Send + Sync>;

/// The export layer and its guard, or `None` when no collector is configured.
pub(crate) fn exporter<S>(cfg: &TelemetrySection) -> anyhow::Result<Option<(ExportLayer<S>, OtelGuard)>>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    if cfg.otlp_endpoint.is_none() && !endpoint_in_env() {
        return Ok(None);
    }
    let mut builder = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_timeout(Duration::from_secs(10));
    if let Some(url) = &cfg.otlp_endpoint {
        builder = builder.with_endpoint(url.clone());
    }
    let exporter = builder.build().context("cannot set up the OTLP span exporter")?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(cfg.sample_ratio))))
        .with_resource(Resource::builder().with_service_name(cfg.service_name.clone()).build())
        .build();
    let tracer = provider.tracer("outbox");
    // The relay's spans, and the info-level events of the outbox crates (they become span
    // events); never the client libraries' own.
    let targets = Targets::new()
        .with_target("outbox::trace", Level::DEBUG)
        .with_target("outbox_relay", Level::INFO)
        .with_target("outbox_store", Level::INFO)
        .with_target("outbox_transport", Level::INFO);
    let layer = tracing_opentelemetry::layer().with_tracer(tracer).with_filter(targets).boxed();
    Ok(Some((layer, OtelGuard(provider))))
}
