//! The logger installs once and refuses, without panicking, to install twice. Its own test binary,
//! because the subscriber is global to the process.

use rotor_core::telemetry::{self, LogArgs, LogFormat, TelemetryError};

#[test]
fn init_once_then_error() {
    let json = LogArgs {
        log_format: LogFormat::Json,
    };
    match telemetry::init(&json) {
        Ok(()) => {}
        // Whoever runs the tests may have an unusable RUST_LOG; that is reported, not panicked on.
        Err(err @ TelemetryError::InvalidFilter { .. }) => {
            assert!(err.to_string().contains("RUST_LOG"), "{err}");
            return;
        }
        Err(err) => panic!("first init failed: {err}"),
    }
    tracing::info!("logger installed");

    let err = telemetry::init(&LogArgs::default()).unwrap_err();
    assert!(
        matches!(err, TelemetryError::AlreadyInitialised { .. }),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(message.contains("already set"), "{message}");
    assert!(message.contains("text logger"), "{message}");
}
