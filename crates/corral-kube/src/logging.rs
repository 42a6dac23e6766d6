//! The operator's log lines: RUST_LOG's filter, text for a terminal or JSON for a log
//! collector.

use crate::operator::OperatorError;
use crate::operator_args::LogFormat;

/// Installs the operator's log subscriber: RUST_LOG's filter (default `info`), text or
/// JSON. Lines about a job carry its `namespace` and name (`job`), fields of the `job` span
/// of every apply.
/// Fails only when a subscriber is installed already.
pub fn init_logging(format: LogFormat) -> Result<(), OperatorError> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let subscriber = log_subscriber(format, filter, std::io::stderr, ansi);
    tracing::subscriber::set_global_default(subscriber)
        .map_err(|e| OperatorError::Config(format!("logging: {e}")))
}

/// The operator's log subscriber writing to `writer`: text (with the spans as
/// `job{namespace=.. job=..}:` prefixes) or JSON (one object per line; the fields of the
/// current span, `namespace` and `job` for a job, under `span`).
pub fn log_subscriber<W>(
    format: LogFormat,
    filter: tracing_subscriber::EnvFilter,
    writer: W,
    ansi: bool,
) -> Box<dyn tracing::Subscriber + Send + Sync>
where
    W: for<'a> tracing_subscriber::fmt::MakeWriter<'a> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    match format {
        LogFormat::Text => Box::new(builder.with_ansi(ansi).finish()),
        LogFormat::Json => Box::new(
            builder
                .json()
                .with_current_span(true)
                .with_span_list(false)
                .finish(),
        ),
    }
}
