//! The peers the drainer's health gate asks, for the real-control-plane tests:
//!
//! - [`Prometheus`]: a real Prometheus server (built by `tools/build.sh` beside the control
//!   plane) evaluating alerting rules the test writes and reloads, so that `ALERTS` fires and
//!   resolves as it would in a cluster.
//! - [`TestEndpoint`]: a plain HTTP endpoint on loopback whose answer the test sets and which
//!   keeps what it was sent: a health URL, or a notification webhook.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::real_cluster::{control_plane_bin, free_port};
use crate::{Background, TestDir, http_get, http_request, wait_until};

/// A Prometheus server on loopback that evaluates the rules it is given every second.
pub struct Prometheus {
    url: String,
    /// `127.0.0.1:<port>`.
    addr: String,
    rules: PathBuf,
    // Stopped before its directory goes: fields drop in this order.
    _process: Background,
    _dir: TestDir,
}

impl Prometheus {
    /// Starts Prometheus with `rules` (the `rules:` list of one rule group, in YAML) and waits
    /// until it has evaluated them once.
    pub fn start(rules: &str) -> Prometheus {
        Prometheus::start_scraping(rules, &[])
    }

    /// Like [`Prometheus::start`], also scraping `/metrics` of each `host:port` in `targets`
    /// every second (job `test`).
    pub fn start_scraping(rules: &str, targets: &[&str]) -> Prometheus {
        let bin = control_plane_bin().join("prometheus");
        assert!(
            bin.is_file(),
            "prometheus is missing from {}: build it with `tools/build.sh` (it builds the \
             control plane and Prometheus from their Go modules)",
            bin.display()
        );
        let dir = TestDir::new("prometheus");
        let rules_path = dir.path().join("rules.yml");
        let config = dir.path().join("prometheus.yml");
        let mut yaml = "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - rules.yml\n".to_string();
        if !targets.is_empty() {
            let quoted: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
            yaml.push_str(&format!(
                "scrape_configs:\n  - job_name: test\n    static_configs:\n      - targets: [{}]\n",
                quoted.join(", ")
            ));
        }
        std::fs::write(&config, yaml).expect("write prometheus.yml");
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let prometheus = Prometheus {
            url: format!("http://{addr}"),
            addr,
            rules: rules_path,
            _process: Background::spawn(
                "prometheus",
                Command::new(&bin)
                    .arg(format!("--config.file={}", config.display()))
                    .arg(format!(
                        "--storage.tsdb.path={}",
                        dir.path().join("data").display()
                    ))
                    .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                    .arg("--web.enable-lifecycle"),
                dir.path().join("prometheus.log"),
            ),
            _dir: dir,
        };
        prometheus.write_rules(rules);
        wait_until(
            "Prometheus to answer /-/ready",
            Duration::from_secs(60),
            || {
                http_get(&prometheus.addr, "/-/ready")
                    .ok()
                    .filter(|r| r.status == 200)
            },
        );
        prometheus.reload();
        prometheus
    }

    /// The base URL, as `--health-prometheus` takes it.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Replaces the rules and has Prometheus load them.
    pub fn set_rules(&mut self, rules: &str) {
        self.write_rules(rules);
        self.reload();
    }

    fn write_rules(&self, rules: &str) {
        let indented: String = rules.lines().map(|l| format!("      {l}\n")).collect();
        let body = if rules.trim().is_empty() {
            "groups: []\n".to_string()
        } else {
            format!("groups:\n  - name: test\n    interval: 1s\n    rules:\n{indented}")
        };
        std::fs::write(&self.rules, body).expect("write rules.yml");
    }

    fn reload(&self) {
        let answer = http_request(&self.addr, "POST", "/-/reload", None).expect("POST /-/reload");
        assert_eq!(answer.status, 200, "reload refused: {}", answer.body);
    }

    /// The instant query `query`'s samples: each one's labels (without `__name__`) and value.
    pub fn query(&self, query: &str) -> Vec<(BTreeMap<String, String>, f64)> {
        let encoded: String = query
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect();
        let body = match http_get(&self.addr, &format!("/api/v1/query?query={encoded}")) {
            Ok(answer) if answer.status == 200 => answer.body,
            _ => return Vec::new(),
        };
        let answer: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
        answer["data"]["result"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|sample| {
                let labels = sample["metric"]
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter(|(k, _)| *k != "__name__")
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                    .collect();
                let value = sample["value"][1]
                    .as_str()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(f64::NAN);
                (labels, value)
            })
            .collect()
    }

    /// The names of the alerts firing now, as the health gate reads them: the `ALERTS` series
    /// of the query API. (The alerts API shows a new alert firing a few seconds before the
    /// series can be queried, so waiting on it would race the gate.)
    pub fn firing(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .query(r#"ALERTS{alertstate="firing"}"#)
            .into_iter()
            .filter_map(|(labels, _)| labels.get("alertname").cloned())
            .collect();
        names.sort();
        names
    }

    /// Waits until exactly `names` fire.
    pub fn wait_firing(&self, names: &[&str]) {
        let mut want: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        want.sort();
        wait_until(
            &format!("Prometheus to fire exactly {want:?}"),
            Duration::from_secs(60),
            || (self.firing() == want).then_some(()),
        );
    }
}

/// An HTTP endpoint on loopback: answers every request with the status and body last set
/// (after failing the next few with 503, if told to), and keeps the body of each request.
pub struct TestEndpoint {
    url: String,
    state: Arc<Mutex<EndpointState>>,
}

#[derive(Default)]
struct EndpointState {
    answer: (u16, String),
    fail_next: usize,
    requests: usize,
    bodies: Vec<String>,
}

impl TestEndpoint {
    pub fn start(status: u16, body: &str) -> TestEndpoint {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let url = format!(
            "http://{}/ready",
            listener.local_addr().expect("local addr")
        );
        let state = Arc::new(Mutex::new(EndpointState {
            answer: (status, body.to_string()),
            ..EndpointState::default()
        }));
        let shared = state.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let body = read_request_body(&mut stream);
                let (status, answer) = {
                    let mut state = shared.lock().unwrap();
                    state.requests += 1;
                    state.bodies.push(body);
                    if state.fail_next > 0 {
                        state.fail_next -= 1;
                        (503, "try again".to_string())
                    } else {
                        state.answer.clone()
                    }
                };
                let _ = write!(
                    stream,
                    "HTTP/1.1 {status} X\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                    answer.len()
                );
            }
        });
        TestEndpoint { url, state }
    }

    /// Its URL (path `/ready`).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// What every later request is answered.
    pub fn answer(&self, status: u16, body: &str) {
        self.state.lock().unwrap().answer = (status, body.to_string());
    }

    /// Answers the next `n` requests with 503.
    pub fn fail_next(&self, n: usize) {
        self.state.lock().unwrap().fail_next = n;
    }

    /// How many requests it has had.
    pub fn requests(&self) -> usize {
        self.state.lock().unwrap().requests
    }

    /// The bodies of the requests so far, in order (empty for a GET).
    pub fn bodies(&self) -> Vec<String> {
        self.state.lock().unwrap().bodies.clone()
    }
}

/// Reads one request: the head up to its blank line, then `Content-Length` bytes of body.
fn read_request_body(stream: &mut std::net::TcpStream) -> String {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut request = Vec::new();
    let mut buf = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = request.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return String::new(),
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    };
    let head = String::from_utf8_lossy(&request[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while request.len() < head_end + length {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    let end = request.len().min(head_end + length);
    String::from_utf8_lossy(&request[head_end..end]).into_owned()
}
