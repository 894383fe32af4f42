//! Process shutdown: one [`CancellationToken`] per process, cancelled on the first SIGTERM or
//! SIGINT. Every task clones it and stops when it is cancelled. A second signal while shutting down
//! exits the process at once (for an operator pressing Ctrl-C twice).

use tokio_util::sync::CancellationToken;

/// Returns a token that is cancelled when the process receives SIGTERM or SIGINT (the signal is
/// logged at info). Call it once, early in `main`, and hand clones to every task.
///
/// A second SIGTERM or SIGINT after the first exits the process immediately with status 128 + the
/// signal number, without waiting for tasks to finish.
///
/// The signal handlers are installed before this function returns. If installing one fails (which
/// the OS practically never does), the error is logged and that signal keeps its default action of
/// terminating the process without graceful shutdown.
///
/// # Panics
///
/// Must be called from inside a Tokio runtime with signal handling enabled (`#[tokio::main]`).
pub fn shutdown_token() -> CancellationToken {
    let token = CancellationToken::new();
    imp::spawn_listener(token.clone());
    token
}

#[cfg(unix)]
mod imp {
    use tokio::signal::unix::{Signal, SignalKind, signal};
    use tokio_util::sync::CancellationToken;

    struct Watched {
        name: &'static str,
        number: i32,
        stream: Option<Signal>,
    }

    impl Watched {
        fn install(name: &'static str, number: i32, kind: SignalKind) -> Self {
            let stream = match signal(kind) {
                Ok(stream) => Some(stream),
                Err(err) => {
                    tracing::error!(
                        signal = name,
                        error = %err,
                        "cannot install the {name} handler; {name} will terminate the process without graceful shutdown"
                    );
                    None
                }
            };
            Watched {
                name,
                number,
                stream,
            }
        }

        /// Resolves when the signal arrives; never, if the handler could not be installed or the
        /// signal driver is gone.
        async fn recv(&mut self) {
            let received = match &mut self.stream {
                Some(stream) => stream.recv().await.is_some(),
                None => false,
            };
            if !received {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Waits for whichever of the two signals comes first and returns its (name, number).
    async fn either(term: &mut Watched, int: &mut Watched) -> (&'static str, i32) {
        tokio::select! {
            () = term.recv() => (term.name, term.number),
            () = int.recv() => (int.name, int.number),
        }
    }

    pub(super) fn spawn_listener(token: CancellationToken) {
        // Installed here, synchronously, so no signal can slip by before the task first runs.
        let mut term = Watched::install("SIGTERM", 15, SignalKind::terminate());
        let mut int = Watched::install("SIGINT", 2, SignalKind::interrupt());
        tokio::spawn(async move {
            let (name, _) = either(&mut term, &mut int).await;
            tracing::info!(signal = name, "received {name}; shutting down");
            token.cancel();

            let (name, number) = either(&mut term, &mut int).await;
            tracing::warn!(
                signal = name,
                "received {name} again while shutting down; exiting immediately"
            );
            std::process::exit(128 + number);
        });
    }
}

#[cfg(not(unix))]
mod imp {
    use tokio_util::sync::CancellationToken;

    pub(super) fn spawn_listener(token: CancellationToken) {
        tokio::spawn(async move {
            match tokio::signal::ctrl_c().await {
                Ok(()) => {
                    tracing::info!(signal = "ctrl-c", "received ctrl-c; shutting down");
                    token.cancel();
                }
                Err(err) => tracing::error!(
                    error = %err,
                    "cannot listen for ctrl-c; shut the process down by other means"
                ),
            }
        });
    }
}
