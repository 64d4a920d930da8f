//! The process's log subscriber: `tracing` events to stderr, as text or JSON lines.

use std::io::IsTerminal as _;

use tracing::Subscriber;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::util::{SubscriberInitExt as _, TryInitError};

/// The Flotilla crates whose `info` events are logged by default.
const FLOTILLA_TARGETS: [&str; 7] = [
    "flotilla_agent",
    "flotilla_core",
    "flotilla_chart",
    "flotilla_yaml",
    "flotilla_gotmpl",
    "flotilla_sprig",
    "flotilla_proto",
];

/// How log lines are written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event, coloured when stderr is a terminal.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, the event's fields
    /// (`message` among them) at the top level, and the enclosing spans under `span` and
    /// `spans`.
    Json,
}

/// Why [`init_logging`] did not install the subscriber.
#[derive(Debug, thiserror::Error)]
pub enum LoggingError {
    /// `RUST_LOG` is set and does not parse as a filter.
    #[error("RUST_LOG is not a valid filter")]
    Filter(#[source] tracing_subscriber::filter::ParseError),
    /// Another global subscriber (or `log` logger) is already installed.
    #[error("installing the global log subscriber")]
    Install(#[source] TryInitError),
}

/// Installs the process's global log subscriber, writing `format` lines to stderr. ANSI
/// colours are used only in [`LogFormat::Text`] and only when stderr is a terminal. Events of
/// the `log` crate are forwarded too.
///
/// Which events are written is chosen by `RUST_LOG`, in `tracing-subscriber`'s `EnvFilter`
/// syntax: comma-separated `target=level` directives, a bare level applying to every other
/// target, e.g. `RUST_LOG=warn,flotilla_agent=debug,kube_runtime=info`. When `RUST_LOG` is
/// unset or empty the default is `info` for the Flotilla crates (`flotilla_agent`,
/// `flotilla_core`, `flotilla_chart`, ...) and `warn` for everything else.
///
/// # Errors
///
/// [`LoggingError::Filter`] when `RUST_LOG` does not parse; [`LoggingError::Install`] when a
/// global subscriber is already set (this function never panics for it).
pub fn init_logging(format: LogFormat) -> Result<(), LoggingError> {
    let filter = filter(std::env::var("RUST_LOG").ok().as_deref())?;
    let ansi = std::io::stderr().is_terminal();
    subscriber(format, filter, std::io::stderr, ansi)
        .try_init()
        .map_err(LoggingError::Install)
}

/// The filter for a `RUST_LOG` value; the default when it is unset or blank.
fn filter(rust_log: Option<&str>) -> Result<EnvFilter, LoggingError> {
    let directives = match rust_log.map(str::trim) {
        Some(value) if !value.is_empty() => value.to_owned(),
        _ => default_directives(),
    };
    EnvFilter::builder()
        .parse(directives)
        .map_err(LoggingError::Filter)
}

fn default_directives() -> String {
    let mut directives = String::from("warn");
    for target in FLOTILLA_TARGETS {
        directives.push(',');
        directives.push_str(target);
        directives.push_str("=info");
    }
    directives
}

fn subscriber<W>(
    format: LogFormat,
    filter: EnvFilter,
    writer: W,
    ansi: bool,
) -> Box<dyn Subscriber + Send + Sync>
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    match format {
        LogFormat::Text => Box::new(builder.with_ansi(ansi).finish()),
        LogFormat::Json => Box::new(builder.with_ansi(false).json().flatten_event(true).finish()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A writer into a shared buffer, to read what a subscriber wrote.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl Buffer {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().expect("not poisoned").clone()).expect("UTF-8")
        }
    }

    impl std::io::Write for Buffer {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .expect("not poisoned")
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'w> MakeWriter<'w> for Buffer {
        type Writer = Buffer;
        fn make_writer(&'w self) -> Buffer {
            self.clone()
        }
    }

    /// Emits one event per (target, level) pair through a subscriber built with `rust_log`,
    /// and returns what it wrote.
    fn written(format: LogFormat, rust_log: Option<&str>) -> String {
        let buffer = Buffer::default();
        let subscriber = subscriber(
            format,
            filter(rust_log).expect("the filter parses"),
            buffer.clone(),
            false,
        );
        tracing::subscriber::with_default(subscriber, || {
            tracing::debug!(target: "flotilla_agent::reconcile", "agent debug");
            tracing::info!(target: "flotilla_agent::reconcile", release = "podinfo", "agent info");
            tracing::info!(target: "flotilla_chart", "chart info");
            tracing::info!(target: "kube_runtime::controller", "kube info");
            tracing::warn!(target: "kube_runtime::controller", "kube warn");
        });
        buffer.text()
    }

    #[test]
    fn by_default_flotilla_crates_log_info_and_others_only_warnings() {
        for rust_log in [None, Some(""), Some("  ")] {
            let text = written(LogFormat::Text, rust_log);
            assert!(text.contains("agent info"), "{text}");
            assert!(text.contains("chart info"), "{text}");
            assert!(text.contains("kube warn"), "{text}");
            assert!(!text.contains("agent debug"), "{text}");
            assert!(!text.contains("kube info"), "{text}");
            assert!(
                !text.contains('\u{1b}'),
                "no ANSI escapes without a terminal: {text:?}"
            );
        }
    }

    #[test]
    fn rust_log_replaces_the_default_filter() {
        let text = written(LogFormat::Text, Some("error,flotilla_agent=debug"));
        assert!(text.contains("agent debug"), "{text}");
        assert!(text.contains("agent info"), "{text}");
        assert!(!text.contains("chart info"), "{text}");
        assert!(!text.contains("kube warn"), "{text}");
    }

    #[test]
    fn an_invalid_rust_log_is_an_error_naming_the_variable() {
        let error = filter(Some("flotilla_agent=loud")).expect_err("not a level");
        assert!(matches!(error, LoggingError::Filter(_)), "{error:?}");
        assert_eq!(error.to_string(), "RUST_LOG is not a valid filter");
    }

    #[test]
    fn json_format_writes_one_object_per_event_with_its_fields_at_the_top() {
        let text = written(LogFormat::Json, None);
        let events: Vec<serde_json::Value> = text
            .lines()
            .map(|line| serde_json::from_str(line).expect("each line is a JSON object"))
            .collect();
        assert_eq!(events.len(), 3, "{text}");
        let agent = &events[0];
        assert_eq!(agent["level"], "INFO", "{agent}");
        assert_eq!(agent["target"], "flotilla_agent::reconcile", "{agent}");
        assert_eq!(agent["message"], "agent info", "{agent}");
        assert_eq!(agent["release"], "podinfo", "{agent}");
        assert!(agent["timestamp"].is_string(), "{agent}");
        assert_eq!(events[2]["level"], "WARN", "{}", events[2]);
    }
}
