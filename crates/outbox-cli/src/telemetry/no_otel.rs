//! Built without the feature `otel`: a configured collector is refused at start.

use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use crate::config::TelemetrySection;

/// Nothing to flush.
pub(crate) struct OtelGuard;

impl OtelGuard {
    /// Nothing to do.
    pub(crate) fn shutdown(self) {}
}

/// The layer that would export spans.
pub(crate) type ExportLayer<S> = Box<dyn Layer<S> + Send + Sync>;

/// `None`, or an error when a collector is configured.
pub(crate) fn exporter<S>(cfg: &TelemetrySection) -> anyhow::Result<Option<(ExportLayer<S>, OtelGuard)>>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    if cfg.otlp_endpoint.is_some() {
        anyhow::bail!("telemetry.otlp_endpoint is set but this build has no `otel` feature");
    }
    Ok(None)
}
