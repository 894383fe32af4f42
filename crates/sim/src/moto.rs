//! moto, the AWS emulator, as a child process on a free local port: how to find it, start it,
//! wait for it and point AWS clients at it. The simulator stands in for Kubernetes and moto for
//! EC2 and Auto Scaling; `rotor-sim demo --provider aws` and the AWS end-to-end tests tie the two
//! together through node providerIDs.
//!
//! moto is found as `moto_server` on `PATH`, else as `python3 -m moto.server` (which also needs
//! flask, part of `moto[server]`).

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// What to tell someone who does not have moto.
pub const INSTALL_HINT: &str = "python3 -m pip install 'moto[server]'";

/// The region every client and the selector use against moto.
pub const REGION: &str = "us-east-1";

/// How long moto may take to listen (its first start imports a lot of Python).
pub const START_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, thiserror::Error)]
pub enum MotoError {
    #[error(
        "moto is not installed (neither `moto_server` nor `python3 -m moto.server` runs); install it with: {INSTALL_HINT}"
    )]
    NotInstalled,
    #[error("cannot start moto ({command}): {source}")]
    Spawn {
        command: String,
        source: std::io::Error,
    },
    #[error("moto ({command}) did not listen on 127.0.0.1:{port} within {timeout:?}{exited}")]
    NotListening {
        command: String,
        port: u16,
        timeout: Duration,
        exited: String,
    },
}

/// The command line that starts moto here, or `None` when it is not installed.
pub fn command() -> Option<Vec<String>> {
    let runs = |program: &str, args: &[&str]| {
        Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if runs("moto_server", &["--help"]) {
        return Some(vec!["moto_server".into()]);
    }
    if runs("python3", &["-c", "import moto.server, flask"]) {
        return Some(vec!["python3".into(), "-m".into(), "moto.server".into()]);
    }
    None
}

/// A running moto server, killed on drop.
pub struct MotoServer {
    child: Child,
    url: String,
}

impl MotoServer {
    /// Starts moto on a free port of 127.0.0.1 and waits until it accepts connections.
    pub async fn start() -> Result<MotoServer, MotoError> {
        let command = command().ok_or(MotoError::NotInstalled)?;
        let shown = command.join(" ");
        // Bind-and-release picks a free port; moto binds it a moment later.
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|source| MotoError::Spawn {
                command: shown.clone(),
                source,
            })?
            .port();
        let child = Command::new(&command[0])
            .args(&command[1..])
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| MotoError::Spawn {
                command: shown.clone(),
                source,
            })?;
        let mut moto = MotoServer {
            child,
            url: format!("http://127.0.0.1:{port}"),
        };
        let started = Instant::now();
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            let exited = match moto.child.try_wait() {
                Ok(Some(status)) => format!(" (it exited: {status})"),
                _ => String::new(),
            };
            if !exited.is_empty() || started.elapsed() > START_TIMEOUT {
                return Err(MotoError::NotListening {
                    command: shown,
                    port,
                    timeout: START_TIMEOUT,
                    exited,
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(moto)
    }

    /// moto's endpoint, e.g. `http://127.0.0.1:40123`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The environment that points the AWS SDK's standard chain (and so `rotor-selector
    /// --provider aws`) at this moto: endpoint, region, static test credentials, no instance
    /// metadata look-ups.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.url.clone()),
            ("AWS_REGION", REGION.into()),
            ("AWS_ACCESS_KEY_ID", "testing".into()),
            ("AWS_SECRET_ACCESS_KEY", "testing".into()),
            ("AWS_EC2_METADATA_DISABLED", "true".into()),
        ]
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
