//! rotor's real binaries as the demo's child processes: finding them, running `rotor-drainer run`
//! for the whole demo (stopped with SIGTERM, as Kubernetes stops a pod), and running the
//! selector once per CronJob tick with a time limit.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::process::{Child, Command};

/// How long one selector run may take before it is killed (a CronJob's activeDeadlineSeconds).
const SELECTOR_DEADLINE: Duration = Duration::from_secs(60);

/// How long the drainer gets to exit after SIGTERM before it is killed.
const DRAINER_GRACE: Duration = Duration::from_secs(10);

/// The binary `name`: `given` when set, else beside the running executable (where cargo puts
/// every binary of the workspace). The error says how to build it.
pub fn locate(name: &str, given: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(p) = given {
        return if p.is_file() {
            Ok(p.to_path_buf())
        } else {
            Err(format!(
                "{name} not found at {} (given with a flag or its environment variable)",
                p.display()
            ))
        };
    }
    let exe = std::env::current_exe().map_err(|e| {
        format!("cannot find the running executable to look for {name} beside it: {e}")
    })?;
    let dir = exe.parent().unwrap_or(Path::new("."));
    let path = dir.join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "{name} not found beside {} (looked for {}); build rotor's binaries with `cargo build --release --bins` (the same profile as this rotor-sim)",
            exe.display(),
            path.display()
        ))
    }
}

/// `rotor-drainer run` against the demo cluster, its log in a file.
pub struct Drainer {
    child: Child,
    pub log: PathBuf,
}

impl Drainer {
    pub fn start(
        bin: &Path,
        kubeconfig: &Path,
        log: PathBuf,
        max_in_flight: u32,
        settle: Duration,
    ) -> Result<Drainer, String> {
        let file = std::fs::File::create(&log)
            .map_err(|e| format!("cannot create the drainer's log {}: {e}", log.display()))?;
        let n = max_in_flight.to_string();
        let settle = format!("{}ms", settle.as_millis().max(1));
        let child = Command::new(bin)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args([
                "run",
                "--admin-listen",
                "127.0.0.1:0",
                "--lease-namespace",
                "rotor-system",
                "--identity",
                "rotor-demo",
                "--max-concurrent",
                &n,
                "--max-unavailable",
                &n,
                "--settle",
                &settle,
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", bin.display()))?;
        Ok(Drainer { child, log })
    }

    /// `Some(status)` once the drainer has exited on its own.
    pub fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// SIGTERM, then SIGKILL after a grace period. Returns how it ended.
    pub async fn stop(mut self) -> String {
        if let Some(status) = self.exited() {
            return format!("had already exited ({status})");
        }
        if let Some(pid) = self.child.id() {
            // `kill` the command: a signal without unsafe code or another dependency.
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .await;
        }
        match tokio::time::timeout(DRAINER_GRACE, self.child.wait()).await {
            Ok(Ok(status)) => format!("stopped ({status})"),
            Ok(Err(e)) => format!("cannot wait for it: {e}"),
            Err(_) => {
                let _ = self.child.kill().await;
                format!("killed after {DRAINER_GRACE:?} without exiting on SIGTERM")
            }
        }
    }
}

/// The last `n` lines of a log file, for error messages.
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// How the selector is run on each tick.
#[derive(Clone, Debug)]
pub enum SelectorCommand {
    /// The real `rotor-selector`, with these arguments after the kubeconfig.
    Rotor { bin: PathBuf, args: Vec<String> },
    /// Any command, through `sh -c`, with `KUBECONFIG` set (anyone can be a selector).
    Shell(String),
}

/// One selector run.
#[derive(Clone, Debug)]
pub struct SelectorRun {
    pub ok: bool,
    /// What the run said, in one line: the nodes it tainted, or why it failed.
    pub said: String,
}

impl SelectorCommand {
    pub async fn run(
        &self,
        kubeconfig: &Path,
        env: &[(&'static str, String)],
        log: &Path,
    ) -> SelectorRun {
        let mut cmd = match self {
            SelectorCommand::Rotor { bin, args } => {
                let mut c = Command::new(bin);
                c.arg("--kubeconfig").arg(kubeconfig).args(args);
                c
            }
            SelectorCommand::Shell(line) => {
                let mut c = Command::new("sh");
                c.args(["-c", line]);
                c
            }
        };
        cmd.env("KUBECONFIG", kubeconfig)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let out = match cmd.spawn() {
            Ok(child) => tokio::time::timeout(SELECTOR_DEADLINE, child.wait_with_output()).await,
            Err(e) => {
                return SelectorRun {
                    ok: false,
                    said: format!("cannot start: {e}"),
                };
            }
        };
        let out = match out {
            Ok(Ok(out)) => out,
            Ok(Err(e)) => {
                return SelectorRun {
                    ok: false,
                    said: format!("cannot wait for it: {e}"),
                };
            }
            Err(_) => {
                return SelectorRun {
                    ok: false,
                    said: format!("killed after {SELECTOR_DEADLINE:?}"),
                };
            }
        };
        append_log(log, &out.stdout, &out.stderr);
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            let last = stderr
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("");
            return SelectorRun {
                ok: false,
                said: format!("{}: {last}", out.status),
            };
        }
        let said = match self {
            SelectorCommand::Rotor { .. } => describe_plan(&stdout),
            SelectorCommand::Shell(_) => {
                let n = stdout.lines().filter(|l| l.starts_with("taint ")).count();
                format!("printed {n} taint line(s)")
            }
        };
        SelectorRun { ok: true, said }
    }
}

fn append_log(log: &Path, stdout: &[u8], stderr: &[u8]) {
    use std::io::Write;
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
    {
        let _ = f.write_all(b"--- run\n");
        let _ = f.write_all(stderr);
        let _ = f.write_all(stdout);
        let _ = f.write_all(b"\n");
    }
}

/// One line from `rotor-selector --output json`: which nodes it tainted, untainted or retired.
pub fn describe_plan(json: &str) -> String {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(json) else {
        return "ran (output not JSON)".into();
    };
    let mut parts = Vec::new();
    for action in ["taint", "untaint", "retire"] {
        let names: Vec<&str> = v["nodes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|n| n["action"] == action)
            .filter_map(|n| n["node"].as_str())
            .collect();
        if !names.is_empty() {
            parts.push(format!("{action} {}", names.join(", ")));
        }
    }
    if parts.is_empty() {
        let held = v["summary"]["keep"].as_u64().unwrap_or(0);
        format!("nothing new ({held} node(s) kept)")
    } else {
        parts.join("; ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_read_as_one_line() {
        let json = r#"{"summary": {"keep": 4}, "nodes": [
            {"node": "a", "action": "taint"}, {"node": "b", "action": "keep"},
            {"node": "c", "action": "taint"}, {"node": "d", "action": "untaint"}]}"#;
        assert_eq!(describe_plan(json), "taint a, c; untaint d");
        assert_eq!(
            describe_plan(r#"{"summary": {"keep": 4}, "nodes": []}"#),
            "nothing new (4 node(s) kept)"
        );
        assert_eq!(describe_plan("table"), "ran (output not JSON)");
    }

    #[test]
    fn a_missing_binary_says_how_to_build_it() {
        let err = locate("rotor-no-such-binary", None).unwrap_err();
        assert!(err.contains("cargo build --release --bins"), "{err}");
        let err = locate(
            "rotor-drainer",
            Some(Path::new("/nonexistent/rotor-drainer")),
        )
        .unwrap_err();
        assert!(err.contains("/nonexistent/rotor-drainer"), "{err}");
    }

    #[tokio::test]
    async fn shell_selectors_run_with_the_kubeconfig_set() {
        let dir = std::env::temp_dir().join(format!("rotor-demo-children-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("selector.log");
        let cmd = SelectorCommand::Shell("echo \"taint $KUBECONFIG\"; echo taint x".into());
        let run = cmd.run(Path::new("/k/config"), &[], &log).await;
        assert!(run.ok);
        assert_eq!(run.said, "printed 2 taint line(s)");
        assert!(
            std::fs::read_to_string(&log)
                .unwrap()
                .contains("taint /k/config")
        );
        let run = SelectorCommand::Shell("echo broken >&2; exit 3".into())
            .run(Path::new("/k"), &[], &log)
            .await;
        assert!(!run.ok);
        assert!(
            run.said.contains("3") && run.said.contains("broken"),
            "{}",
            run.said
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
