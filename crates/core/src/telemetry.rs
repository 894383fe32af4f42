//! Logging set-up shared by every rotor binary: one global `tracing` subscriber writing to stderr,
//! as human-readable text or one JSON object per line, filtered by `RUST_LOG` (default `info`).
//! [`init`] may succeed once per process; a second call returns an error instead of panicking.

use std::fmt;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;

/// Log output format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line, for log collectors.
    Json,
}

impl fmt::Display for LogFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        })
    }
}

/// Logging options. The level filter comes from `RUST_LOG` (tracing's `EnvFilter` syntax, e.g.
/// `info,rotor_drainer=debug`); when unset or empty, `info`.
#[derive(Clone, Debug, Default, PartialEq, Eq, clap::Args)]
// A flattened group's doc comment would otherwise replace the binary's own description at
// the top of `--help`; it is for rustdoc only.
#[command(about = None, long_about = None)]
pub struct LogArgs {
    /// Log format written to stderr.
    #[arg(long, env = "ROTOR_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// Installing the logger failed.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// `RUST_LOG` holds a directive tracing cannot parse.
    #[error(
        "cannot parse RUST_LOG={value:?}: {source}; use tracing's filter syntax, e.g. RUST_LOG=info or RUST_LOG=info,rotor_drainer=debug"
    )]
    InvalidFilter {
        /// The value of `RUST_LOG`.
        value: String,
        /// What tracing reported.
        #[source]
        source: tracing_subscriber::filter::FromEnvError,
    },

    /// A global subscriber is already installed (init called twice, or another library did it).
    #[error(
        "cannot install the {format} logger: a global tracing subscriber is already set ({reason}); call telemetry::init once, at the start of main"
    )]
    AlreadyInitialised {
        /// The format that was asked for.
        format: LogFormat,
        /// What tracing reported.
        reason: String,
    },
}

/// Installs the global tracing subscriber: stderr, `RUST_LOG` filter (default `info`), text or JSON
/// as `args` says.
///
/// Returns an error, rather than panicking, if `RUST_LOG` is invalid or a subscriber is already set.
pub fn init(args: &LogArgs) -> Result<(), TelemetryError> {
    let filter = EnvFilter::builder()
        .with_default_directive(LevelFilter::INFO.into())
        .from_env()
        .map_err(|source| TelemetryError::InvalidFilter {
            value: std::env::var(EnvFilter::DEFAULT_ENV).unwrap_or_default(),
            source,
        })?;

    // Colour only for a terminal: log files and collectors get plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    let result = match args.log_format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .try_init(),
    };
    result.map_err(|err| TelemetryError::AlreadyInitialised {
        format: args.log_format,
        reason: err.to_string(),
    })
}
