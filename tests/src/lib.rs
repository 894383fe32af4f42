//! rotor-e2e: the harness for rotor's end-to-end tests.
//!
//! End-to-end tests run rotor's real binaries (`rotor-drainer`, `rotor-selector`, `rotor-sim`)
//! as child processes and talk to them the way users and scripts do: over HTTP, through real
//! `kubectl`, and through their exit status and output, against two backends: a real Kubernetes
//! control plane and the simulator. This crate holds what those tests share:
//!
//! - [`RealCluster`] (`real_cluster`): etcd, kube-apiserver, kube-controller-manager,
//!   kube-scheduler and kwok on loopback, built by `tools/build.sh`; rotor run under the
//!   ServiceAccounts `deploy/` ships ([`RealCluster::start_rotor_drainer`],
//!   [`RealCluster::run_rotor_selector`]); the audit log.
//! - [`fault_proxy::FaultProxy`]: an HTTPS proxy in front of a [`RealCluster`]'s apiserver that
//!   injects latency, 5xx answers, connection resets and partitions, for chaos tests.
//! - [`BudgetWatch`] (`budget_watch`): "no budget violated", judged from a pod watch alone.
//! - [`autoscaler::TestAutoscaler`]: adds kwok nodes for unschedulable pods, as a cluster
//!   autoscaler would, for the surge tests.
//! - [`health_peers`]: a real Prometheus evaluating the test's alerting rules, and an HTTP
//!   endpoint whose answer the test sets, for the drainer's health gate.
//! - [`SimCluster`] (`sim_cluster`): the simulator in the test's own process, a `kube::Client`
//!   and a kubeconfig for it, its counters and admin API, and the node and pod reads and writes
//!   the crates' integration tests repeat.
//! - [`fake_azure::FakeAzure`]: a fake Azure Resource Manager (scale sets and their VMs, paging,
//!   throttling, expired tokens, a scale set that vanishes), for the Azure provider.
//! - [`fake_gcp`]: a fake Compute Engine API (managed instance groups) for the Google Cloud
//!   provider, with paging and injected faults.
//! - [`moto`]: the AWS emulator, its SDK clients, and the AWS set-up steps tests repeat.
//! - [`Background`]: a rotor binary running in the background, its log kept.
//! - [`binary`]: the path of a workspace binary built next to the test executable (or example).
//! - [`SimProcess`]: a `rotor-sim serve` child on a free port, with its kubeconfig, its log, the
//!   `/sim/v1` admin API ([`SimProcess::stats`], [`SimProcess::post`]), killed on drop; with
//!   [`SimOptions`], enforcing RBAC with a kubeconfig per ServiceAccount.
//! - [`image`]: the Dockerfile, `tools/image-files.txt`, and the image `tools/image.sh` built,
//!   read from its OCI layout and unpacked.
//! - [`doc_tables`]: the marked reference tables of README.md and docs/*.md, for the doc tests.
//! - [`kustomize`]: `kubectl kustomize` of a `deploy/` directory.
//! - [`kubectl`], [`kubectl_ok`], [`kubectl_json`]: real `kubectl` pointed at a simulator.
//! - [`run_with_timeout`]: run any command, killing it if it hangs.
//! - [`TestDir`]: a unique scratch directory, kept when a test fails.
//! - [`parse_table`], [`wait_until`], [`scenario`], [`workspace_root`], [`tail`],
//!   [`resident_memory`]: small helpers.
//!
//! The binaries are not built by `cargo test -p rotor-e2e` (a test cannot depend on another
//! package's binaries on stable Cargo): build them first with `cargo build --workspace --bins`,
//! or run `cargo test --workspace`, which builds every binary before running any test.
//!
//! Set `ROTOR_E2E_KEEP=1` to keep every scratch directory (kubeconfig, simulator log), not only
//! those of failed tests.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;

pub mod autoscaler;
pub mod budget_watch;
pub mod doc_tables;
pub mod fake_azure;
pub mod fake_gcp;
pub mod fault_proxy;
pub mod health_peers;
pub mod helm;
pub mod image;
pub mod karpenter;
pub mod loopback_http;
pub mod manifests;
pub mod moto;
pub mod real_cluster;
pub mod sim_cluster;
pub mod webhook;
pub use budget_watch::{BudgetWatch, WatchedBudget};
pub use real_cluster::{FakeNode, RealCluster, RealClusterOptions};
pub use sim_cluster::SimCluster;

/// A long-running child (a rotor binary under test) whose stderr goes to a log file; killed on
/// drop, its log printed when the test is failing.
pub struct Background {
    child: Child,
    log: PathBuf,
    name: String,
}

impl Background {
    /// Spawns `cmd` with stdin and stdout closed and stderr to `log`; `NO_COLOR` is set.
    pub fn spawn(name: &str, cmd: &mut Command, log: PathBuf) -> Background {
        let file =
            File::create(&log).unwrap_or_else(|e| panic!("cannot create {}: {e}", log.display()));
        cmd.env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(file);
        real_cluster::die_with_parent(cmd);
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Background {
            child,
            log,
            name: name.to_string(),
        }
    }

    /// Everything the process has logged so far.
    pub fn log(&self) -> String {
        read_lossy(&self.log)
    }

    /// Kills the process at once (SIGKILL, as a node failure or an OOM kill would).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Stops the process as Kubernetes stops a container: SIGTERM, then SIGKILL if it has not
    /// exited within `grace`. Returns how it ended.
    pub fn terminate(&mut self, grace: Duration) -> String {
        self.signal(libc::SIGTERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Some(status) = self.exit_status() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.kill();
        format!("killed after {grace:?} without exiting on SIGTERM")
    }

    /// Freezes the process (SIGSTOP), as a stalled host or a debugger would: its timers and
    /// sockets wait, and run on as they were once it is resumed.
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// Lets a [`Background::pause`]d process run on (SIGCONT).
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) on our own child's pid, which stays ours until it is waited for.
        let sent = unsafe { libc::kill(self.child.id() as libc::pid_t, signal) };
        assert_eq!(
            sent,
            0,
            "cannot signal {}: {}",
            self.name,
            std::io::Error::last_os_error()
        );
    }

    /// Whether it is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// How it ended, once it has (`None` while it runs).
    pub fn exit_status(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(s)) => Some(s.to_string()),
            Ok(None) => None,
            Err(e) => Some(format!("cannot wait: {e}")),
        }
    }

    /// The file that receives its stderr.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.kill();
        if std::thread::panicking() {
            eprintln!(
                "rotor-e2e: {} logged to {} (last lines):\n{}",
                self.name,
                self.log.display(),
                tail(&self.log, 60)
            );
        }
    }
}

/// How long `rotor-sim serve` may take to print its `listening on` line.
pub const SIM_START_TIMEOUT: Duration = Duration::from_secs(30);

/// The `--request-timeout` given to every `kubectl` call: one API request.
pub const KUBECTL_REQUEST_TIMEOUT: &str = "10s";

/// How long one `kubectl` command may run in all before it is killed (longer than the
/// `--timeout=120s` a test gives `kubectl drain`).
pub const KUBECTL_TIMEOUT: Duration = Duration::from_secs(180);

/// Timeout for one request to the simulator's admin API.
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);

/// The workspace root (the parent of this crate's directory).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent directory")
        .to_path_buf()
}

/// A scenario file under `tests/scenarios/`, e.g. `scenario("cluster.yaml")`.
pub fn scenario(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("scenarios")
        .join(name)
}

/// The directory of the workspace's binaries built in the same target directory and profile as
/// the running test or example, `target/<profile>/`.
///
/// A test executable lives in `target/<profile>/deps/`, an example in
/// `target/<profile>/examples/`.
pub fn binary_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let mut dir = exe
        .parent()
        .expect("the test executable is in a directory")
        .to_path_buf();
    if dir.ends_with("deps") || dir.ends_with("examples") {
        dir.pop();
    }
    dir
}

/// The path of the workspace binary `name` (e.g. `rotor-sim`) in [`binary_dir`].
///
/// Panics, saying how to build it, when the binary is not there.
pub fn binary(name: &str) -> PathBuf {
    let path = binary_dir().join(format!("{name}{}", std::env::consts::EXE_SUFFIX));
    assert!(
        path.is_file(),
        "binary {name} not found at {}: end-to-end tests run the workspace's binaries but \
         `cargo test -p rotor-e2e` does not build them; run `cargo build --workspace --bins` \
         (with the same profile, e.g. --release if the tests run with --release) first, or run \
         `cargo test --workspace`",
        path.display()
    );
    path
}

/// A unique scratch directory under the system temp dir (`rotor-e2e-<pid>-<n>-<label>`).
///
/// Removed on drop, except when the thread is panicking (a failing test), in which case its
/// path is printed, or when `ROTOR_E2E_KEEP` is set.
pub struct TestDir {
    path: PathBuf,
}

impl TestDir {
    /// Creates a fresh, empty directory; `label` only makes its name easier to recognise.
    pub fn new(label: &str) -> TestDir {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let label: String = label
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
        let path =
            std::env::temp_dir().join(format!("rotor-e2e-{}-{n}-{label}", std::process::id()));
        // A directory left by an earlier process with the same pid: start clean.
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        TestDir { path }
    }

    /// Takes `path` as the scratch directory (emptied first), with the same drop rules as
    /// [`TestDir::new`]: for a directory a person chose, e.g. `examples/local-cluster.sh`'s.
    pub fn at(path: &Path) -> TestDir {
        let _ = std::fs::remove_dir_all(path);
        std::fs::create_dir_all(path)
            .unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        TestDir {
            path: path.to_path_buf(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `self.path().join(name)`.
    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("rotor-e2e: kept {} for inspection", self.path.display());
        } else if std::env::var_os("ROTOR_E2E_KEEP").is_none() {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// A response from the simulator's HTTP server.
#[derive(Debug, Clone)]
pub struct HttpResponse {
    pub status: u16,
    pub body: String,
}

impl HttpResponse {
    /// The body as JSON; `Value::Null` for an empty body (e.g. 204 No Content).
    pub fn json(&self) -> Value {
        if self.body.trim().is_empty() {
            return Value::Null;
        }
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("response body is not JSON ({e}): {}", self.body))
    }
}

/// A running `rotor-sim serve` child process on a free port of 127.0.0.1.
///
/// It gets its own [`TestDir`] (or [`SimOptions::dir`]) holding the kubeconfig it writes
/// (`kubeconfig`), its stderr (`rotor-sim.log`, the tracing log), its stdout after start-up
/// (`rotor-sim.stdout`) and kubectl's cache. The child is killed on drop; when the test is
/// failing, the log's path and its last lines are printed.
pub struct SimProcess {
    child: Child,
    url: String,
    host_port: String,
    kubeconfig: PathBuf,
    log: PathBuf,
    dir: PathBuf,
    /// The scratch directory the harness made (none with [`SimOptions::dir`]); dropped after
    /// the child.
    _scratch: Option<TestDir>,
    kubeconfig_dir: Option<PathBuf>,
}

/// What [`SimProcess::start_with`] adds to a plain [`SimProcess::start`].
#[derive(Clone, Debug, Default)]
pub struct SimOptions {
    /// `--authorization <file>`: enforce the RBAC of this YAML stream (e.g. [`kustomize`]'s
    /// output), with `--kubeconfig-dir <dir>/kubeconfigs` for
    /// [`SimProcess::service_account_kubeconfig`].
    pub authorization: Option<PathBuf>,
    /// How long it may take to print `listening on` (a large scenario takes minutes to build);
    /// [`SIM_START_TIMEOUT`] when `None`.
    pub start_timeout: Option<Duration>,
    /// The caller's directory for the simulator's files, created if missing and left in place;
    /// a fresh [`TestDir`] when `None`.
    pub dir: Option<PathBuf>,
}

/// `kubectl kustomize <dir>` (a directory relative to the workspace root, e.g.
/// `deploy/overlays/kubernetes`): the rendered multi-document YAML. Panics if it fails.
pub fn kustomize(dir: &str) -> String {
    let out = run_with_timeout(
        Command::new(kubectl_path())
            .arg("kustomize")
            .arg(workspace_root().join(dir))
            .env_remove("KUBECONFIG"),
        KUBECTL_TIMEOUT,
    );
    assert!(
        out.status.success(),
        "{}",
        describe_output(&format!("kubectl kustomize {dir}"), &out)
    );
    String::from_utf8(out.stdout).expect("kustomize prints UTF-8")
}

impl SimProcess {
    /// Starts `rotor-sim serve --scenario SCENARIO --listen 127.0.0.1:0 --kubeconfig-out
    /// DIR/kubeconfig` and waits for it to print `listening on http://...`.
    ///
    /// Panics, with the simulator's exit status and log, if it exits or does not print that
    /// line within [`SIM_START_TIMEOUT`].
    pub fn start(scenario: impl AsRef<Path>) -> SimProcess {
        SimProcess::start_with(scenario, SimOptions::default())
    }

    /// [`SimProcess::start`] with options (see [`SimOptions`]).
    pub fn start_with(scenario: impl AsRef<Path>, options: SimOptions) -> SimProcess {
        let scenario = scenario.as_ref();
        let label = scenario
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "sim".into());
        let (dir, scratch) = match &options.dir {
            Some(dir) => {
                std::fs::create_dir_all(dir)
                    .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
                (dir.clone(), None)
            }
            None => {
                let scratch = TestDir::new(&format!("sim-{label}"));
                (scratch.path().to_path_buf(), Some(scratch))
            }
        };
        let start_timeout = options.start_timeout.unwrap_or(SIM_START_TIMEOUT);
        let kubeconfig = dir.join("kubeconfig");
        let log = dir.join("rotor-sim.log");
        let stderr =
            File::create(&log).unwrap_or_else(|e| panic!("cannot create {}: {e}", log.display()));
        let mut cmd = Command::new(binary("rotor-sim"));
        cmd.arg("serve");
        let kubeconfig_dir = options
            .authorization
            .as_ref()
            .map(|_| dir.join("kubeconfigs"));
        if let (Some(policy), Some(kdir)) = (&options.authorization, &kubeconfig_dir) {
            cmd.arg("--authorization")
                .arg(policy)
                .arg("--kubeconfig-dir")
                .arg(kdir);
        }
        let mut child = cmd
            .arg("--scenario")
            .arg(scenario)
            .args(["--listen", "127.0.0.1:0"])
            .arg("--kubeconfig-out")
            .arg(&kubeconfig)
            // The log is a file, not a terminal: no colour escapes.
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start rotor-sim: {e}"));

        // Read stdout on a thread: the first lines go to this function, all of them to a file,
        // and the pipe never fills up.
        let stdout = child.stdout.take().expect("piped stdout");
        let stdout_file = dir.join("rotor-sim.stdout");
        let (tx, rx) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            let mut copy = File::create(stdout_file).ok();
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(f) = copy.as_mut() {
                    let _ = writeln!(f, "{line}");
                }
                let _ = tx.send(line);
            }
        });

        let deadline = Instant::now() + start_timeout;
        let url = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some(url) = line.strip_prefix("listening on ") {
                        break url.trim().to_string();
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    // stdout closed: the simulator exited (or closed it) before listening.
                    let status = wait_for_exit(&mut child, Duration::from_secs(5));
                    panic!(
                        "rotor-sim serve --scenario {} exited before listening ({status}); its log {}:\n{}",
                        scenario.display(),
                        log.display(),
                        read_lossy(&log)
                    );
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "rotor-sim serve --scenario {} did not print `listening on` within {:?}; its log {}:\n{}",
                        scenario.display(),
                        start_timeout,
                        log.display(),
                        read_lossy(&log)
                    );
                }
            }
        };
        let host_port = url
            .strip_prefix("http://")
            .unwrap_or_else(|| panic!("rotor-sim printed a URL that is not http://: {url}"))
            .trim_end_matches('/')
            .to_string();
        assert!(
            kubeconfig.is_file(),
            "rotor-sim is listening on {url} but wrote no kubeconfig at {}",
            kubeconfig.display()
        );
        SimProcess {
            child,
            url,
            host_port,
            kubeconfig,
            log,
            dir,
            _scratch: scratch,
            kubeconfig_dir,
        }
    }

    /// The kubeconfig of a ServiceAccount of the policy this simulator enforces
    /// (`<namespace>.<name>.kubeconfig` under `--kubeconfig-dir`). Panics when the simulator was
    /// started without [`SimOptions::authorization`] or the policy has no such account.
    pub fn service_account_kubeconfig(&self, namespace: &str, name: &str) -> PathBuf {
        let dir = self
            .kubeconfig_dir
            .as_ref()
            .expect("the simulator was started without SimOptions::authorization");
        let path = dir.join(format!("{namespace}.{name}.kubeconfig"));
        assert!(
            path.is_file(),
            "no kubeconfig for ServiceAccount {namespace}/{name} at {}: is it in the policy?",
            path.display()
        );
        path
    }

    /// The base URL, e.g. `http://127.0.0.1:41234`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The kubeconfig the simulator wrote; its current context points at [`Self::url`].
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// The file that receives the simulator's stderr (its tracing log).
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// This simulator's scratch directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The child's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends one HTTP/1.1 request (JSON body if any) and returns the status and body.
    ///
    /// Plain `std::net::TcpStream`, `Connection: close`; handles `Content-Length` and chunked
    /// responses. Panics on connection errors.
    pub fn request(&self, method: &str, path: &str, body: Option<&Value>) -> HttpResponse {
        http_request(&self.host_port, method, path, body).unwrap_or_else(|e| {
            panic!(
                "{method} {}{path} failed: {e}; simulator log: {}",
                self.url,
                self.log.display()
            )
        })
    }

    /// `GET path`, which must answer 2xx; returns the body as JSON.
    pub fn get(&self, path: &str) -> Value {
        let r = self.request("GET", path, None);
        assert!(
            (200..300).contains(&r.status),
            "GET {path} answered {}: {}",
            r.status,
            r.body
        );
        r.json()
    }

    /// `POST path` with a JSON body, which must answer 2xx; returns the body as JSON
    /// (`Value::Null` when empty). E.g. `sim.post("/sim/v1/pause", &json!({"paused": true}))`.
    pub fn post(&self, path: &str, body: &Value) -> Value {
        let r = self.request("POST", path, Some(body));
        assert!(
            (200..300).contains(&r.status),
            "POST {path} {body} answered {}: {}",
            r.status,
            r.body
        );
        r.json()
    }

    /// `GET /sim/v1/stats`: request counts, evictions by outcome, `budgetViolations`, node and
    /// pod counts (see crates/sim/src/admin.rs).
    pub fn stats(&self) -> Value {
        self.get("/sim/v1/stats")
    }

    /// Whether the child is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for SimProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = read_lossy(&self.log);
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(40)..];
            eprintln!(
                "rotor-e2e: rotor-sim at {} logged to {} (last {} lines):\n{}",
                self.url,
                self.log.display(),
                tail.len(),
                tail.join("\n")
            );
        }
        // `self._scratch` is dropped next: kept if panicking.
    }
}

fn read_lossy(path: &Path) -> String {
    std::fs::read(path)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_else(|e| format!("(cannot read {}: {e})", path.display()))
}

/// The last `n` lines of a log file (or why it cannot be read).
pub fn tail(path: &Path, n: usize) -> String {
    let text = read_lossy(path);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn wait_for_exit(child: &mut Child, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return status.to_string(),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                return "closed stdout, still running, killed".into();
            }
            Err(e) => return format!("cannot wait: {e}"),
        }
    }
}

/// `GET path` on `host_port` (e.g. a binary's admin server, `/metrics`), without a body.
pub fn http_get(host_port: &str, path: &str) -> std::io::Result<HttpResponse> {
    http_request(host_port, "GET", path, None)
}

/// `method path` on `host_port`, with `body` as JSON if any.
pub fn http_request(
    host_port: &str,
    method: &str,
    path: &str,
    body: Option<&Value>,
) -> std::io::Result<HttpResponse> {
    let mut stream = TcpStream::connect(host_port)?;
    stream.set_read_timeout(Some(HTTP_TIMEOUT))?;
    stream.set_write_timeout(Some(HTTP_TIMEOUT))?;
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host_port}\r\nAccept: application/json\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !body.is_empty() {
        req.push_str("Content-Type: application/json\r\n");
    }
    req.push_str("\r\n");
    req.push_str(&body);
    stream.write_all(req.as_bytes())?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    parse_http_response(&raw).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

fn parse_http_response(raw: &[u8]) -> Result<HttpResponse, String> {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no end of headers in the response")?;
    let head = String::from_utf8_lossy(&raw[..split]);
    let rest = &raw[split + 4..];
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status: u16 = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let mut chunked = false;
    let mut length = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.eq_ignore_ascii_case("chunked");
        } else if name.eq_ignore_ascii_case("content-length") {
            length = value.parse::<usize>().ok();
        }
    }
    let body = if chunked {
        decode_chunked(rest)?
    } else if let Some(n) = length {
        rest.get(..n)
            .ok_or_else(|| format!("body shorter than Content-Length {n}"))?
            .to_vec()
    } else {
        rest.to_vec()
    };
    Ok(HttpResponse {
        status,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

fn decode_chunked(mut data: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let eol = data
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("truncated chunk size")?;
        let size_text = String::from_utf8_lossy(&data[..eol]);
        let size_text = size_text.split(';').next().unwrap_or_default().trim();
        let size = usize::from_str_radix(size_text, 16)
            .map_err(|_| format!("bad chunk size {size_text:?}"))?;
        data = &data[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        out.extend_from_slice(data.get(..size).ok_or("truncated chunk")?);
        data = data.get(size + 2..).ok_or("truncated chunk end")?;
    }
}

/// Runs a command to completion, capturing stdout and stderr, and kills it if it runs longer
/// than `timeout` (the returned status then reports the kill signal, and a line saying so is
/// appended to stderr).
pub fn run_with_timeout(cmd: &mut Command, timeout: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    let reader = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = r.read_to_end(&mut buf);
            buf
        })
    };
    let out = reader(Box::new(child.stdout.take().expect("piped stdout")));
    let err = reader(Box::new(child.stderr.take().expect("piped stderr")));
    let deadline = Instant::now() + timeout;
    let mut timed_out = false;
    let status: ExitStatus = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                timed_out = true;
                let _ = child.kill();
                break child.wait().expect("wait for a killed child");
            }
            Err(e) => panic!("cannot wait for {cmd:?}: {e}"),
        }
    };
    let stdout = out.join().unwrap_or_default();
    let mut stderr = err.join().unwrap_or_default();
    if timed_out {
        stderr.extend_from_slice(format!("\nrotor-e2e: killed after {timeout:?}\n").as_bytes());
    }
    Output {
        status,
        stdout,
        stderr,
    }
}

/// The kubectl to use: `/usr/bin/kubectl` if present, else `kubectl` from `PATH`.
pub fn kubectl_path() -> PathBuf {
    let usr = Path::new("/usr/bin/kubectl");
    if usr.is_file() {
        usr.to_path_buf()
    } else {
        PathBuf::from("kubectl")
    }
}

/// `kubectl --kubeconfig <sim's> --cache-dir <sim dir>/kube-cache`, ready for more arguments;
/// `KUBECONFIG` from the environment is ignored.
pub fn kubectl_command(sim: &SimProcess) -> Command {
    let mut cmd = Command::new(kubectl_path());
    cmd.arg("--kubeconfig")
        .arg(sim.kubeconfig())
        .arg("--cache-dir")
        .arg(sim.dir().join("kube-cache"))
        .env_remove("KUBECONFIG");
    cmd
}

/// Runs [`kubectl_command`] with `--request-timeout 10s <args>` and returns its output, whatever
/// its exit status. Killed after [`KUBECTL_TIMEOUT`].
pub fn kubectl(sim: &SimProcess, args: &[&str]) -> Output {
    let mut cmd = kubectl_command(sim);
    cmd.arg(format!("--request-timeout={KUBECTL_REQUEST_TIMEOUT}"))
        .args(args);
    run_with_timeout(&mut cmd, KUBECTL_TIMEOUT)
}

/// Creates the YAML or JSON `objects` in the simulator as the admin (`kubectl create -f`, from a
/// file in the simulator's directory); returns kubectl's output. Client-side validation is off:
/// rotor-sim serves no OpenAPI document for it.
pub fn kubectl_create(sim: &SimProcess, objects: &str) -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let path = sim
        .dir()
        .join(format!("create-{}.yaml", N.fetch_add(1, Ordering::Relaxed)));
    std::fs::write(&path, objects).expect("write the objects to create");
    let path = path.display().to_string();
    kubectl_ok(sim, &["create", "--validate=false", "-f", &path])
}

/// A process's resident memory as Linux reports it in `/proc/<pid>/status`, in KiB.
#[derive(Clone, Copy, Debug, Default)]
pub struct ResidentMemory {
    /// `VmRSS`: resident now.
    pub current_kib: u64,
    /// `VmHWM`: the peak so far (reset by writing 5 to `/proc/<pid>/clear_refs`).
    pub peak_kib: u64,
}

/// The resident memory of process `pid`.
pub fn resident_memory(pid: u32) -> std::io::Result<ResidentMemory> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Ok(ResidentMemory {
        current_kib: field("VmRSS:"),
        peak_kib: field("VmHWM:"),
    })
}

/// Describes a finished command for assertion messages.
pub fn describe_output(what: &str, out: &Output) -> String {
    format!(
        "{what}: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// [`kubectl`] that must exit 0; returns stdout. Panics with the command, both outputs and the
/// simulator's log path otherwise.
pub fn kubectl_ok(sim: &SimProcess, args: &[&str]) -> String {
    let out = kubectl(sim, args);
    assert!(
        out.status.success(),
        "{}\n(simulator log: {})",
        describe_output(&format!("kubectl {}", args.join(" ")), &out),
        sim.log_path().display()
    );
    String::from_utf8(out.stdout).expect("kubectl prints UTF-8")
}

/// The drainer's `rotor.dev/phase` on `node` as kubectl reads it, empty when it has none.
pub fn node_phase(sim: &SimProcess, node: &str) -> String {
    kubectl_ok(
        sim,
        &[
            "get",
            "node",
            node,
            "-o",
            "jsonpath={.metadata.annotations.rotor\\.dev/phase}",
        ],
    )
}

/// Taints the first node kubectl lists for draining (`manual`) and returns its name.
pub fn taint_first_node(sim: &SimProcess) -> String {
    let node = kubectl_ok(
        sim,
        &["get", "nodes", "-o", "jsonpath={.items[0].metadata.name}"],
    );
    kubectl_ok(
        sim,
        &["taint", "node", &node, "rotor.dev/drain=manual:NoSchedule"],
    );
    node
}

/// [`kubectl_ok`] with `-o json` appended; returns the parsed output.
pub fn kubectl_json(sim: &SimProcess, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    let text = kubectl_ok(sim, &all);
    serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "kubectl {} printed invalid JSON ({e}):\n{text}",
            all.join(" ")
        )
    })
}

/// Parses kubectl's human-readable table output: one map per row, from column header to cell.
///
/// Columns are found from the header line, where names are separated by two or more spaces
/// (single spaces occur inside names like `NOMINATED NODE`); each cell is the row's text
/// between its column's start and the next column's start, trimmed.
pub fn parse_table(text: &str) -> Vec<BTreeMap<String, String>> {
    let mut lines = text.lines().filter(|l| !l.trim().is_empty());
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    let mut columns: Vec<(usize, String)> = Vec::new();
    let bytes = header.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b' ' {
            i += 1;
            continue;
        }
        let start = i;
        // A name ends at two spaces in a row (or the end of the line).
        while i < bytes.len() && !(bytes[i] == b' ' && bytes.get(i + 1).is_none_or(|b| *b == b' '))
        {
            i += 1;
        }
        columns.push((start, header[start..i].to_string()));
    }
    lines
        .map(|line| {
            columns
                .iter()
                .enumerate()
                .map(|(k, (start, name))| {
                    let end = columns.get(k + 1).map_or(line.len(), |c| c.0);
                    let cell = line.get(*start..end.min(line.len())).unwrap_or("");
                    (name.clone(), cell.trim().to_string())
                })
                .collect()
        })
        .collect()
}

/// Polls `check` every 100 ms until it returns `Some`, and returns that; panics naming `what`
/// after `timeout`.
pub fn wait_until<T>(what: &str, timeout: Duration, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_split_on_the_header_columns() {
        let text = "NAME                         STATUS                     ROLES    AGE   VERSION\n\
                    ip-10-0-0-1.ec2.internal     Ready,SchedulingDisabled   <none>   5s    v1.32.9\n\
                    ip-10-0-0-2.ec2.internal     Ready                      <none>   5s    v1.32.9\n";
        let rows = parse_table(text);
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0]["STATUS"], "Ready,SchedulingDisabled");
        assert_eq!(rows[1]["NAME"], "ip-10-0-0-2.ec2.internal");
        assert_eq!(rows[1]["VERSION"], "v1.32.9");
        let wide = "NAME   READY   NODE   NOMINATED NODE   READINESS GATES\n\
                    a      1/1     n1     <none>           <none>\n";
        let rows = parse_table(wide);
        assert_eq!(rows[0]["NOMINATED NODE"], "<none>");
        assert_eq!(rows[0]["READINESS GATES"], "<none>");
        assert!(parse_table("").is_empty());
    }

    #[test]
    fn http_responses_with_length_or_chunks() {
        let r = parse_http_response(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 7\r\n\r\n{\"a\":1}",
        )
        .unwrap();
        assert_eq!((r.status, r.json()["a"].as_u64()), (200, Some(1)));
        let r = parse_http_response(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"a\"\r\n3\r\n:2}\r\n0\r\n\r\n",
        )
        .unwrap();
        assert_eq!(r.json()["a"].as_u64(), Some(2));
        let r = parse_http_response(b"HTTP/1.1 204 No Content\r\n\r\n").unwrap();
        assert_eq!((r.status, r.json()), (204, Value::Null));
    }
}
