//! The daemons' log output: stderr, filtered by `WEFT_LOG`, as text or as JSON lines.
//!
//! Only this binary installs a subscriber; the libraries emit `tracing` events.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// The environment variable holding the log filter.
const LOG_FILTER_ENV: &str = "WEFT_LOG";
/// The filter when `WEFT_LOG` is unset or invalid: lifecycle events, warnings and errors.
const LOG_FILTER_DEFAULT: &str = "info";

/// How log events are written to stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines, coloured only when stderr is a terminal.
    Text,
    /// One JSON object a line: `timestamp`, `level`, `target`, `fields` (with `message`) and
    /// the current `span` and `spans`, for journald/Loki/Elasticsearch pipelines.
    Json,
}

/// Installs the subscriber: the level `WEFT_LOG` names (`info` by default; any
/// `tracing_subscriber` filter, e.g. `debug` or `info,weft_engine=debug`). Text is coloured
/// only when stderr is a terminal (a log file or journald gets plain text); JSON never is.
pub fn init_logging(format: LogFormat) {
    let filter =
        EnvFilter::try_from_env(LOG_FILTER_ENV).unwrap_or_else(|_| LOG_FILTER_DEFAULT.into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder.with_ansi(false).json().init(),
    }
}
