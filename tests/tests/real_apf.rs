//! API Priority and Fairness on the real control plane (issue 44, item 2): a FlowSchema puts
//! one of rotor's ServiceAccounts in a PriorityLevelConfiguration of its own with a tiny share
//! (one nominal share: 3 seats; nothing lent or borrowed; excess rejected at once), and a noisy
//! neighbour in the same level keeps those seats busy, so that the API server sheds rotor's
//! requests with 429 and a `Retry-After` header, as a cluster whose flow control squeezes rotor
//! would.
//!
//! The harness starts kube-apiserver with APF off; here it runs with
//! `--enable-priority-and-fairness=true`, and everything but rotor and the neighbour (the
//! controllers, the scheduler, kwok, the test's own kubectl: `system:masters`, or kube-system's
//! ServiceAccounts) stays in the default levels, unthrottled. The neighbour holds seats without
//! burning CPU: each of its requests is a dry-run ConfigMap create whose body's last byte it
//! sends 2 s late, and the API server takes the request's seat before it reads the body.
//!
//! What is judged, independently of rotor's own account:
//! - the squeeze worked: the audit log records 429s answered to rotor's ServiceAccount;
//! - rotor-drainer, squeezed for 40 s from its first eviction: the rotation finishes (every
//!   tainted node `drained`), no budget is ever below its minimum (an independent watch), no
//!   node's record is lost or redone (one recorded start per node, its phase never lost and
//!   never leaving `drained`, no pod evicted twice, at most one `DrainStarted` per node), the
//!   drainer is still running or, having stepped down (it loses its Lease when its renewals are
//!   shed for 10 s), exited cleanly and was replaced, the replacement resuming the drains left
//!   midway; and its request rate while squeezed stays bounded (requests per second from the
//!   audit log);
//! - rotor-selector, once with every request squeezed and once with only its node writes: each
//!   run ends as docs/selector.md says (done; or exit 1 with nothing written; or exit 1 naming
//!   the failed writes, the applied ones whole and kept), its retries keep at least their 0.5 s / 2 s
//!   pace, and the next run, unsqueezed, finishes the plan without rewriting a node;
//! - `deploy/components/flow-schema`: the server classifies rotor's requests by its FlowSchemas.
//!
//! Each run prints its figures (`apf:` lines, with `--nocapture`): requests per second and 429s
//! while squeezed, and for every call sent again after a 429, whether it came sooner than the
//! `Retry-After` in force (the level's value, as the neighbour's 429s carried it). Asserted: a
//! shed eviction waits the server's `Retry-After` (the drainer logs the wait it took from the
//! header) and is never sent again early because a budget moved; the selector waits out a
//! `Retry-After` of up to 10 s and gives a call up at once when asked for longer.
//!
//! `cargo test -p rotor-e2e --test real_apf -- --nocapture` (about 2 minutes).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use jiff::Timestamp;
use rotor_e2e::manifests::{deployment, min_available_budget};
use rotor_e2e::real_cluster::{ROTOR_NAMESPACE as NS, RealClusterOptions, is_ready};
use rotor_e2e::{Background, BudgetWatch, FakeNode, RealCluster, WatchedBudget, wait_until};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};

const DRAINER: &str = "system:serviceaccount:rotor-system:rotor-drainer";
const SELECTOR: &str = "system:serviceaccount:rotor-system:rotor-selector";
/// The noisy neighbour: a ServiceAccount of its own, in the squeezed level beside rotor.
const NOISE_NS: &str = "apf-noise";
const NOISE_SA: &str = "noisy-neighbour";
const DRAIN_TAINT: &str = "rotor.dev/drain=apf:NoSchedule";
const LEVEL: &str = "rotor-squeezed";
const WORKLOAD_NS: &str = "apf";

/// kube-apiserver with flow control on; its default concurrency (400 + 200 seats) shared by the
/// default levels' 245 nominal shares and ours, 1: `ceil(600 * 1 / 246)` = 3 seats for ours.
const APF_ON: [&str; 1] = ["--enable-priority-and-fairness=true"];

/// The squeeze: a level with one nominal share, nothing lent or borrowed, excess rejected at once
/// (429, no queue), and a FlowSchema sending there every request of the noisy neighbour and
/// those of `service_account` (in rotor-system) that `rotor_rule` matches: [`EVERYTHING`], or
/// fewer. Precedence 1000 wins over the default `service-accounts` (9000), which would put
/// them all in `workload-low`.
fn squeeze(service_account: &str, rotor_rule: &str) -> String {
    format!(
        "apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: PriorityLevelConfiguration
metadata: {{name: {LEVEL}}}
spec:
  type: Limited
  limited:
    nominalConcurrencyShares: 1
    lendablePercent: 0
    borrowingLimitPercent: 0
    limitResponse: {{type: Reject}}
---
apiVersion: flowcontrol.apiserver.k8s.io/v1
kind: FlowSchema
metadata: {{name: {LEVEL}}}
spec:
  priorityLevelConfiguration: {{name: {LEVEL}}}
  matchingPrecedence: 1000
  distinguisherMethod: {{type: ByUser}}
  rules:
  - subjects:
    - kind: ServiceAccount
      serviceAccount: {{name: {NOISE_SA}, namespace: {NOISE_NS}}}
    {EVERYTHING}
  - subjects:
    - kind: ServiceAccount
      serviceAccount: {{name: {service_account}, namespace: {NS}}}
    {rotor_rule}
"
    )
}

/// The rules of a FlowSchema rule (indented for [`squeeze`]) that match every request.
const EVERYTHING: &str = "resourceRules:
    - verbs: ['*']
      apiGroups: ['*']
      resources: ['*']
      clusterScope: true
      namespaces: ['*']
    nonResourceRules:
    - verbs: ['*']
      nonResourceURLs: ['*']";

/// The rules that match only the selector's writes to Nodes (its taints).
const NODE_WRITES: &str = "resourceRules:
    - verbs: [patch, update]
      apiGroups: ['']
      resources: [nodes]
      clusterScope: true";

/// The neighbour's ServiceAccount and its right to create ConfigMaps in its namespace.
fn neighbour() -> String {
    format!(
        "apiVersion: v1
kind: Namespace
metadata: {{name: {NOISE_NS}}}
---
apiVersion: v1
kind: ServiceAccount
metadata: {{name: {NOISE_SA}, namespace: {NOISE_NS}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: noise, namespace: {NOISE_NS}}}
rules:
- apiGroups: ['']
  resources: [configmaps]
  verbs: [create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: noise, namespace: {NOISE_NS}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: noise}}
subjects:
- kind: ServiceAccount
  name: {NOISE_SA}
  namespace: {NOISE_NS}
"
    )
}

/// How the neighbour's requests were answered.
#[derive(Debug, Default)]
struct NoiseStats {
    /// Dry-run creates that went through (201), each having held a seat for the whole hold.
    served: u64,
    /// Refused at once with 429: the level was full.
    rejected: u64,
    /// Anything else (transport errors, other statuses).
    other: u64,
    /// The largest `Retry-After` (seconds) the server sent with a 429.
    max_retry_after: u64,
    /// Each `Retry-After` the server sent the neighbour, with when: the level's value at that
    /// moment (one value per priority level, so the one rotor's 429s carried too).
    retry_after: Vec<(Timestamp, u64)>,
}

impl std::fmt::Display for NoiseStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} requests served, {} answered 429 (Retry-After up to {} s), {} failed otherwise",
            self.served, self.rejected, self.max_retry_after, self.other
        )
    }
}

/// The noisy neighbour: `tasks` loops, each sending a dry-run ConfigMap create whose body's last
/// byte comes `hold` after the rest, so that the request holds one of the level's seats that
/// long (the server takes the seat before it reads the body); after a 429 a loop waits 100 ms
/// and tries again, as an impatient client would. Stopped by [`Noise::stop`] (or on drop).
struct Noise {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<NoiseStats>>,
}

impl Noise {
    fn start(cluster: &RealCluster, tasks: usize, hold: Duration) -> Noise {
        let token = cluster
            .kubectl_ok(&["create", "token", NOISE_SA, "-n", NOISE_NS, "--duration=1h"])
            .trim()
            .to_string();
        // The CA the kubeconfigs trust: the apiserver's self-signed serving certificate.
        let ca = cluster.dir().join("pki").join("apiserver.crt");
        let host = cluster.server().trim_start_matches("https://").to_string();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the noise");
            runtime.block_on(noise(&host, &ca, &token, tasks, hold, flag))
        });
        Noise {
            stop,
            thread: Some(thread),
        }
    }

    fn stop(mut self) -> NoiseStats {
        self.stop.store(true, Ordering::SeqCst);
        self.thread
            .take()
            .expect("stopped once")
            .join()
            .expect("the noise thread")
    }
}

impl Drop for Noise {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

async fn noise(
    host: &str,
    ca: &Path,
    token: &str,
    tasks: usize,
    hold: Duration,
    stop: Arc<AtomicBool>,
) -> NoiseStats {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).expect("read the apiserver's CA") {
        roots
            .add(cert.expect("a PEM certificate"))
            .expect("a usable CA");
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("ring supports the default TLS versions")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    // served, rejected, other, largest Retry-After.
    let counts = Arc::new([
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
        AtomicU64::new(0),
    ]);
    let samples = Arc::new(Mutex::new(Vec::new()));
    let mut loops = Vec::new();
    for _ in 0..tasks {
        let (connector, stop, counts) = (connector.clone(), stop.clone(), counts.clone());
        let samples = samples.clone();
        let (host, token) = (host.to_string(), token.to_string());
        loops.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let answer = slow_create(&connector, &host, &token, hold).await;
                let slot = match answer {
                    Some((201, _)) => 0,
                    Some((429, retry_after)) => {
                        let retry_after = retry_after.unwrap_or(0);
                        counts[3].fetch_max(retry_after, Ordering::Relaxed);
                        let mut samples = samples.lock().unwrap_or_else(|p| p.into_inner());
                        if samples.last().is_none_or(|(_, last)| *last != retry_after) {
                            samples.push((Timestamp::now(), retry_after));
                        }
                        1
                    }
                    _ => 2,
                };
                counts[slot].fetch_add(1, Ordering::Relaxed);
                if slot != 0 {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }));
    }
    for handle in loops {
        let _ = handle.await;
    }
    let [served, rejected, other, max_retry_after] = &*counts;
    NoiseStats {
        served: served.load(Ordering::Relaxed),
        rejected: rejected.load(Ordering::Relaxed),
        other: other.load(Ordering::Relaxed),
        max_retry_after: max_retry_after.load(Ordering::Relaxed),
        retry_after: std::mem::take(&mut *samples.lock().unwrap_or_else(|p| p.into_inner())),
    }
}

/// One dry-run ConfigMap create as the neighbour, its body's last byte held back for `hold`
/// (unless the server answers first, as it does with a 429): the response's status code and
/// `Retry-After`.
async fn slow_create(
    connector: &tokio_rustls::TlsConnector,
    host: &str,
    token: &str,
    hold: Duration,
) -> Option<(u16, Option<u64>)> {
    let tcp = tokio::net::TcpStream::connect(host).await.ok()?;
    let name = ServerName::try_from("127.0.0.1").ok()?;
    let mut tls = connector.connect(name, tcp).await.ok()?;
    let body = r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"generateName":"noise-"}}"#;
    let (most, last) = body.split_at(body.len() - 1);
    let head = format!(
        "POST /api/v1/namespaces/{NOISE_NS}/configmaps?dryRun=All HTTP/1.1\r\nHost: {host}\r\n\
         Authorization: Bearer {token}\r\nContent-Type: application/json\r\n\
         User-Agent: noisy-neighbour\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{most}",
        body.len(),
    );
    tls.write_all(head.as_bytes()).await.ok()?;
    tls.flush().await.ok()?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    match tokio::time::timeout(hold, tls.read(&mut buf)).await {
        // Answered before the body is complete: refused without being served.
        Ok(Ok(n)) if n > 0 => answer.extend_from_slice(&buf[..n]),
        Ok(_) => return None,
        Err(_) => {
            tls.write_all(last.as_bytes()).await.ok()?;
            tls.flush().await.ok()?;
        }
    }
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        match tokio::time::timeout(Duration::from_secs(30), tls.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => answer.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    let head = String::from_utf8_lossy(&answer).to_string();
    let code = head.split_whitespace().nth(1)?.parse().ok()?;
    let retry_after = head.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        name.eq_ignore_ascii_case("retry-after")
            .then(|| value.trim().parse().ok())
            .flatten()
    });
    Some((code, retry_after))
}

/// What the audit log says of one user's requests in a time window.
#[derive(Debug)]
struct Throttle {
    requests: usize,
    rejected: usize,
    seconds: f64,
    /// The most requests received in one wall-clock second.
    peak: usize,
}

impl Throttle {
    fn of(records: &[Value], from: Timestamp, to: Timestamp) -> Throttle {
        let received: Vec<(Timestamp, bool)> = records
            .iter()
            .filter_map(|e| {
                let at = received_at(e)?;
                (at >= from && at < to).then(|| (at, e["responseStatus"]["code"] == 429))
            })
            .collect();
        let mut per_second: BTreeMap<i64, usize> = BTreeMap::new();
        for (at, _) in &received {
            *per_second.entry(at.as_second()).or_default() += 1;
        }
        Throttle {
            requests: received.len(),
            rejected: received.iter().filter(|(_, r)| *r).count(),
            seconds: to.duration_since(from).as_secs_f64(),
            peak: per_second.values().copied().max().unwrap_or(0),
        }
    }

    fn rate(&self) -> f64 {
        self.requests as f64 / self.seconds.max(0.001)
    }
}

impl std::fmt::Display for Throttle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} requests in {:.1} s ({:.2}/s, at most {} in one second), {} answered 429",
            self.requests,
            self.seconds,
            self.rate(),
            self.peak,
            self.rejected
        )
    }
}

fn received_at(record: &Value) -> Option<Timestamp> {
    record["requestReceivedTimestamp"].as_str()?.parse().ok()
}

/// What an audit record asked: `verb resource[/subresource]` (or `verb /path`), and of what:
/// the object's name, or for a request without one (a list, a watch, a create) its URI without
/// the resourceVersion the client last saw, so that one list is told from another.
fn call(record: &Value) -> (String, String) {
    let verb = record["verb"].as_str().unwrap_or_default();
    let r = &record["objectRef"];
    let uri = record["requestURI"].as_str().unwrap_or_default();
    let kind = match (r["resource"].as_str(), r["subresource"].as_str()) {
        (Some(res), Some(sub)) => format!("{verb} {res}/{sub}"),
        (Some(res), None) => format!("{verb} {res}"),
        (None, _) => format!("{verb} {uri}"),
    };
    let target = match r["name"].as_str().filter(|n| !n.is_empty()) {
        Some(name) => format!("{}/{name}", r["namespace"].as_str().unwrap_or_default()),
        None => uri
            .split('&')
            .filter(|p| !p.starts_with("resourceVersion="))
            .collect::<Vec<_>>()
            .join("&"),
    };
    (kind, target)
}

/// How a user's requests answered 429 were tried again (the same [`call`] sent next), by
/// `verb resource`.
#[derive(Debug, Default)]
struct Retries {
    /// By `verb resource`: calls sent again after a 429, and how many of those came sooner than
    /// the `Retry-After` the level sent at the time (as the neighbour saw it; 0 s before it saw
    /// one).
    by_kind: BTreeMap<String, (usize, usize)>,
    /// The shortest time from a 429 to the same call's next try.
    shortest: Option<Duration>,
}

impl Retries {
    fn of(records: &[Value], retry_after: &[(Timestamp, u64)]) -> Retries {
        let mut by_call: BTreeMap<(String, String), Vec<(Timestamp, bool)>> = BTreeMap::new();
        for e in records {
            if let Some(at) = received_at(e) {
                by_call
                    .entry(call(e))
                    .or_default()
                    .push((at, e["responseStatus"]["code"] == 429));
            }
        }
        let asked = |at: Timestamp| {
            retry_after
                .iter()
                .take_while(|(t, _)| *t <= at)
                .last()
                .map_or(0, |(_, s)| *s)
        };
        let mut out = Retries::default();
        for ((kind, _), attempts) in &mut by_call {
            attempts.sort();
            for pair in attempts.windows(2) {
                let ((at, rejected), (next, _)) = (pair[0], pair[1]);
                if !rejected {
                    continue;
                }
                let gap = next.duration_since(at).unsigned_abs();
                out.shortest = Some(out.shortest.map_or(gap, |s| s.min(gap)));
                let counts = out.by_kind.entry(kind.clone()).or_default();
                counts.0 += 1;
                counts.1 += usize::from(gap < Duration::from_secs(asked(at)));
            }
        }
        out
    }

    fn retried(&self) -> usize {
        self.by_kind.values().map(|(n, _)| n).sum()
    }

    fn sooner(&self) -> usize {
        self.by_kind.values().map(|(_, n)| n).sum()
    }
}

impl std::fmt::Display for Retries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} calls sent again after a 429, {} of them sooner than the Retry-After (shortest gap {:?}):",
            self.retried(),
            self.sooner(),
            self.shortest
        )?;
        for (kind, (n, sooner)) in &self.by_kind {
            write!(f, " {kind}: {n} ({sooner} sooner);")?;
        }
        Ok(())
    }
}

/// Whether an audit record is a request the server shed (APF's 429), not a disruption budget's
/// refusal (a 429 too, with the budget named in its message).
fn shed(record: &Value) -> bool {
    record["responseStatus"]["code"] == 429
        && !record["responseStatus"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("disruption budget"))
}

/// The shortest time from a shed request of `kind` (`verb resource[/subresource]`) to the same
/// call's next try.
fn shortest_retry_after_shed(records: &[Value], kind: &str) -> Option<Duration> {
    let mut by_target: BTreeMap<String, Vec<(Timestamp, bool)>> = BTreeMap::new();
    for e in records {
        let (k, target) = call(e);
        if let Some(at) = received_at(e).filter(|_| k == kind) {
            by_target.entry(target).or_default().push((at, shed(e)));
        }
    }
    by_target
        .values_mut()
        .flat_map(|attempts| {
            attempts.sort();
            attempts
                .windows(2)
                .filter(|pair| pair[0].1)
                .map(|pair| pair[1].0.duration_since(pair[0].0).unsigned_abs())
                .collect::<Vec<_>>()
        })
        .min()
}

fn nodes(cluster: &RealCluster) -> Option<BTreeMap<String, Value>> {
    let out = cluster.kubectl(&["get", "nodes", "-o", "json"]);
    let list: Value = serde_json::from_slice(&out.stdout).ok()?;
    Some(
        list["items"]
            .as_array()?
            .iter()
            .map(|n| {
                (
                    n["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    n.clone(),
                )
            })
            .collect(),
    )
}

fn annotation(node: &Value, key: &str) -> String {
    node["metadata"]["annotations"][key]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The value of the drain taint on `node`, if it has one.
fn drain_taint(node: &Value) -> Option<String> {
    node["spec"]["taints"]
        .as_array()?
        .iter()
        .find(|t| t["key"] == "rotor.dev/drain")
        .map(|t| {
            format!(
                "{}:{}",
                t["value"].as_str().unwrap_or(""),
                t["effect"].as_str().unwrap_or("")
            )
        })
}

fn ready_pods(cluster: &RealCluster, ns: &str) -> usize {
    cluster.kubectl_json(&["get", "pods", "-n", ns])["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null() && is_ready(p))
        .count()
}

/// A control plane with APF on, rotor installed (its shipped drainer scaled to zero) with
/// `service_account` squeezed, and `old` nodes a kubelet minor behind (`old-1`, ...) carrying
/// `workload` (`pods` pods) once Ready, then as many up-to-date ones (`new-1`, ...).
fn squeezed_cluster(
    service_account: &str,
    old: usize,
    workload: &str,
    pods: usize,
) -> (RealCluster, Vec<String>) {
    let cluster = RealCluster::start_with_apiserver_flags(RealClusterOptions::default(), &APF_ON);
    cluster.apply_kustomize_ok("deploy/overlays/kubernetes");
    cluster.stop_shipped_drainer();
    let old: Vec<String> = (1..=old).map(|i| format!("old-{i}")).collect();
    cluster.add_nodes(&old.iter().map(|n| FakeNode::behind(n)).collect::<Vec<_>>());
    if !workload.is_empty() {
        cluster.apply(workload);
        wait_until("the workload to be Ready", Duration::from_secs(180), || {
            (ready_pods(&cluster, WORKLOAD_NS) >= pods).then_some(())
        });
    }
    let new: Vec<FakeNode> = (1..=old.len())
        .map(|i| FakeNode::new(&format!("new-{i}")))
        .collect();
    cluster.add_nodes(&new);
    cluster.apply(&neighbour());
    cluster.apply(&squeeze(service_account, EVERYTHING));
    // In force once the server reports the level's seats.
    let seats = wait_until(
        "the squeezed level to be in force",
        Duration::from_secs(60),
        || {
            apf_metric(&cluster, "apiserver_flowcontrol_nominal_limit_seats")
                .into_iter()
                .find(|(labels, _)| labels.contains(&format!("priority_level=\"{LEVEL}\"")))
                .map(|(_, seats)| seats)
        },
    );
    eprintln!(
        "apf: level {LEVEL}: {seats} seats (nominal), nothing lent or borrowed, excess rejected"
    );
    (cluster, old)
}

/// The samples of the API server's metric `name`: (labels, value).
fn apf_metric(cluster: &RealCluster, name: &str) -> Vec<(String, f64)> {
    let out = cluster.kubectl(&["get", "--raw", "/metrics"]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix('{')?;
            let (labels, value) = rest.rsplit_once("} ")?;
            Some((labels.to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

/// Three Deployments under budgets that allow one or two disruptions each, and how many pods.
fn workload() -> (String, Vec<WatchedBudget>, usize) {
    let apps = [("web", 12, 10), ("api", 8, 7), ("worker", 6, 5)];
    let mut yaml = format!("apiVersion: v1\nkind: Namespace\nmetadata: {{name: {WORKLOAD_NS}}}\n");
    let mut budgets = Vec::new();
    for (app, replicas, min) in apps {
        let _ = write!(
            yaml,
            "---\n{}---\n{}",
            deployment(WORKLOAD_NS, app, replicas, None),
            min_available_budget(WORKLOAD_NS, app, min)
        );
        budgets.push(WatchedBudget::app(WORKLOAD_NS, app, min as usize));
    }
    let pods = apps.iter().map(|(_, r, _)| *r as usize).sum();
    (yaml, budgets, pods)
}

/// The drainer as a one-replica Deployment keeps it: a replica that exits is replaced by a new
/// one (a new identity), at once rather than after a crash-loop back-off.
struct Replica<'a> {
    cluster: &'a RealCluster,
    flags: &'a [&'a str],
    current: Background,
    identity: String,
    /// Replicas that exited: identity, exit status, log.
    exited: Vec<(String, String, String)>,
}

impl<'a> Replica<'a> {
    fn start(cluster: &'a RealCluster, flags: &'a [&'a str]) -> Replica<'a> {
        let identity = "apf-1".to_string();
        let current = cluster.start_rotor_drainer(&identity, flags);
        Replica {
            cluster,
            flags,
            current,
            identity,
            exited: Vec::new(),
        }
    }

    /// Replaces the replica if it has exited; the nodes it left mid-drain (for its successor
    /// to resume).
    fn keep(&mut self) -> Vec<String> {
        let Some(status) = self.current.exit_status() else {
            return Vec::new();
        };
        let log = self.current.log();
        let lines: Vec<&str> = log.lines().collect();
        let last = &lines[lines.len().saturating_sub(3)..];
        eprintln!(
            "apf: drainer {} exited ({status}); its last lines:\n{}",
            self.identity,
            last.join("\n")
        );
        let midway = nodes(self.cluster)
            .unwrap_or_default()
            .into_iter()
            .filter(|(_, n)| !matches!(annotation(n, "rotor.dev/phase").as_str(), "" | "drained"))
            .map(|(name, _)| name)
            .collect();
        self.exited.push((self.identity.clone(), status, log));
        self.identity = format!("apf-{}", self.exited.len() + 1);
        self.current = self.cluster.start_rotor_drainer(&self.identity, self.flags);
        midway
    }
}

/// Each node's `(rotor.dev/phase, rotor.dev/started-at)` as polled, changes only.
type History = BTreeMap<String, Vec<(String, String)>>;

/// Polls the nodes into `history`; whether every one of `names` is `drained`.
fn observe(cluster: &RealCluster, names: &[String], history: &mut History) -> bool {
    let Some(all) = nodes(cluster) else {
        return false;
    };
    let mut drained = true;
    for name in names {
        let node = all.get(name).cloned().unwrap_or(Value::Null);
        let now = (
            annotation(&node, "rotor.dev/phase"),
            annotation(&node, "rotor.dev/started-at"),
        );
        drained &= now.0 == "drained";
        let seen = history.entry(name.clone()).or_default();
        if seen.last() != Some(&now) {
            seen.push(now);
        }
    }
    drained
}

#[test]
fn given_the_drainers_requests_shed_by_flow_control_then_it_backs_off_keeps_its_records_and_finishes()
 {
    let began = Instant::now();
    let (yaml, budgets, pods) = workload();
    let (cluster, old) = squeezed_cluster("rotor-drainer", 6, &yaml, pods);
    let watch = BudgetWatch::start(&cluster.kubectl_bin(), cluster.admin_kubeconfig(), budgets);
    let flags = [
        "--max-concurrent",
        "2",
        "--max-unavailable",
        "2",
        "--budget-recheck",
        "5s",
    ];
    let mut replica = Replica::start(&cluster, &flags);
    for node in &old {
        cluster.kubectl_ok(&["taint", "node", node, DRAIN_TAINT]);
    }
    let rotation = Instant::now();
    let rotation_from = Timestamp::now();
    let mut history = History::new();
    // The squeeze begins once a drain has evicted a pod: its pod watch is open by then (a watch
    // under way holds no seat), so its next evictions are sent while squeezed and some are
    // shed. Begun at the first start instead, the squeeze could shed the drain's watch and
    // back it off until the squeeze was over, and no eviction would meet it.
    wait_until("the first eviction", Duration::from_secs(90), || {
        observe(&cluster, &old, &mut history);
        cluster
            .audit_by(DRAINER)
            .iter()
            .any(|e| {
                e["objectRef"]["subresource"] == "eviction" && e["responseStatus"]["code"] == 201
            })
            .then_some(())
    });

    // The squeeze, mid-rotation: the neighbour keeps the level's seats busy for SQUEEZE.
    const SQUEEZE: Duration = Duration::from_secs(40);
    let squeeze_from = Timestamp::now();
    let noise = Noise::start(&cluster, 6, Duration::from_secs(2));
    let squeezed = Instant::now();
    let mut midway = Vec::new();
    while squeezed.elapsed() < SQUEEZE {
        midway.extend(replica.keep());
        observe(&cluster, &old, &mut history);
        std::thread::sleep(Duration::from_millis(500));
    }
    let neighbour = noise.stop();
    let squeeze_to = Timestamp::now();
    let drained_in_squeeze = history
        .values()
        .filter(|seen| seen.last().is_some_and(|(p, _)| p == "drained"))
        .count();

    // Then the rotation must finish on its own.
    let limit = Duration::from_secs(360);
    let unsqueezed = Instant::now();
    while !observe(&cluster, &old, &mut history) {
        midway.extend(replica.keep());
        assert!(
            rotation.elapsed() < limit,
            "the rotation did not finish within {limit:?} of the taints; phases and starts seen: {history:#?}\ndrainer log:\n{}",
            replica.current.log()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let (finished, after_squeeze) = (rotation.elapsed(), unsqueezed.elapsed());
    let rotation_to = Timestamp::now();
    midway.extend(replica.keep());

    let audit = cluster.audit_by(DRAINER);
    let during = Throttle::of(&audit, squeeze_from, squeeze_to);
    let whole = Throttle::of(&audit, rotation_from, rotation_to);
    let retries = Retries::of(&audit, &neighbour.retry_after);
    let verdict = watch.finish();
    let mut evictions: BTreeMap<String, usize> = BTreeMap::new();
    for e in audit.iter().filter(|e| {
        e["objectRef"]["subresource"] == "eviction" && e["responseStatus"]["code"] == 201
    }) {
        *evictions.entry(call(e).1).or_default() += 1;
    }
    let deletes = audit
        .iter()
        .filter(|e| e["verb"] == "delete" && e["objectRef"]["resource"] == "pods")
        .count();
    let events: BTreeMap<&String, Vec<String>> = old
        .iter()
        .map(|n| {
            (
                n,
                cluster.node_events(n).into_iter().map(|(r, _)| r).collect(),
            )
        })
        .collect();
    let started: BTreeMap<&String, usize> = events
        .iter()
        .map(|(n, reasons)| (*n, reasons.iter().filter(|r| *r == "DrainStarted").count()))
        .collect();
    eprintln!(
        "apf: drainer squeezed for {SQUEEZE:?} from its first eviction ({drained_in_squeeze} of {} nodes drained by its end):\n\
         apf:   while squeezed: {during}\n\
         apf:   whole rotation: {whole}; finished {finished:.1?} after the taints, {after_squeeze:.1?} after the squeeze\n\
         apf:   {retries}\n\
         apf:   replicas that exited: {} ({:?}), leaving {midway:?} mid-drain; {} evictions accepted, 0 pod deletes expected ({deletes})\n\
         apf:   Events on the nodes: {events:?}\n\
         apf:   neighbour: {neighbour}; budget watch: {} events, lowest {:?}, {} violations; test took {:.1?}",
        old.len(),
        replica.exited.len(),
        replica
            .exited
            .iter()
            .map(|(id, status, _)| format!("{id}: {status}"))
            .collect::<Vec<_>>(),
        evictions.len(),
        verdict.events,
        verdict.lowest,
        verdict.violations.len(),
        began.elapsed(),
    );

    // The squeeze worked: the server shed the drainer's requests, and the neighbour's.
    assert!(
        during.rejected > 0,
        "no request of the drainer was answered 429 while squeezed: {during}"
    );
    assert!(
        neighbour.rejected > 0 && neighbour.served > 0,
        "{neighbour}"
    );
    // Its request rate stayed bounded: backing off, not hammering (a client retrying 429s at
    // once would send hundreds a second).
    assert!(
        during.rate() < 5.0,
        "the drainer sent {during} while squeezed"
    );
    assert!(during.peak < 60, "the drainer sent {during} while squeezed");
    // No budget was ever below its minimum.
    assert!(verdict.never_armed.is_empty(), "{:?}", verdict.never_armed);
    assert!(
        verdict.violations.is_empty(),
        "budgets violated: {:#?}",
        verdict.violations
    );
    // No record lost or redone: each node's drain started once (one start time, at most one
    // DrainStarted), and once drained stayed drained; each pod was evicted once, none deleted.
    for (node, seen) in &history {
        let starts: std::collections::BTreeSet<&String> = seen
            .iter()
            .map(|(_, s)| s)
            .filter(|s| !s.is_empty())
            .collect();
        assert_eq!(
            starts.len(),
            1,
            "{node}: its recorded start changed: {seen:?}"
        );
        let first = seen.iter().position(|(p, _)| p == "drained");
        assert!(
            first.is_some_and(|i| i == seen.len() - 1),
            "{node} left `drained` or never reached it: {seen:?}"
        );
        let before_start = seen.iter().take_while(|(p, _)| p.is_empty()).count();
        assert!(
            seen[before_start..].iter().all(|(p, _)| !p.is_empty()),
            "{node}: its phase was lost: {seen:?}"
        );
    }
    for (node, n) in &started {
        assert!(*n <= 1, "{node}: {n} DrainStarted Events");
    }
    // Evictions the server shed wait out its Retry-After: the drainer reads the header
    // (rotor_core::retry_after) where it once retried after a fixed 1 s, and a budget that moves
    // meanwhile does not send them early.
    let logs: String = replica
        .exited
        .iter()
        .map(|(_, _, log)| log.clone())
        .chain([replica.current.log()])
        .collect();
    let waits: Vec<u64> = logs
        .lines()
        .filter(|l| l.contains("eviction asked to retry later"))
        .filter_map(|l| {
            l.split("retry_in_s=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect();
    eprintln!("apf:   shed evictions' waits, as the drainer logged them (s): {waits:?}");
    assert!(
        waits.iter().any(|w| *w >= 2),
        "no shed eviction waited the server's Retry-After: {waits:?}"
    );
    let shed_gap = shortest_retry_after_shed(&audit, "create pods/eviction");
    eprintln!("apf:   shortest time from a shed eviction to its next try: {shed_gap:?}");
    assert!(
        shed_gap.is_none_or(|gap| gap >= Duration::from_millis(900)),
        "a shed eviction was sent again {shed_gap:?} later"
    );
    assert!(
        evictions.values().all(|n| *n == 1),
        "a pod was evicted twice: {evictions:?}"
    );
    assert_eq!(
        deletes, 0,
        "the drainer deleted pods outside the Eviction API"
    );
    // Still running; a replica that exited stepped down cleanly, and its successor took over.
    assert!(
        replica.current.is_running(),
        "the drainer exited: {:?}\n{}",
        replica.current.exit_status(),
        replica.current.log()
    );
    for (id, status, log) in &replica.exited {
        assert!(
            log.contains("lost the leader lease; exiting so that a restart rejoins the election"),
            "drainer {id} exited ({status}) other than by stepping down:\n{log}"
        );
    }
    if !replica.exited.is_empty() {
        let log = replica.current.log();
        assert!(log.contains("acquired the leader lease"), "{log}");
        // The drains it left midway were resumed from their record, not started afresh.
        let successors: String = replica
            .exited
            .iter()
            .skip(1)
            .map(|(_, _, log)| log.as_str())
            .chain([log.as_str()])
            .collect();
        for node in &midway {
            assert!(
                successors
                    .lines()
                    .any(|l| l.contains("resuming the recorded drain")
                        && l.contains(&format!("node={node} "))),
                "{node} was left mid-drain and not resumed:\n{successors}"
            );
        }
    }
}

const SELECT: [&str; 4] = ["--provider", "kubernetes", "--max-tainted", "100%"];

/// One selector run while the neighbour keeps the squeezed level full, judged against what
/// docs/selector.md says a run does; returns the nodes it tainted, with their selected-at.
fn squeezed_selector_run(
    cluster: &RealCluster,
    old: &[String],
    what: &str,
) -> BTreeMap<String, String> {
    let noise = Noise::start(cluster, 6, Duration::from_secs(2));
    std::thread::sleep(Duration::from_secs(3));
    let from = Timestamp::now();
    let run = cluster.run_rotor_selector(&SELECT);
    let to = Timestamp::now();
    let neighbour = noise.stop();
    let audit = cluster.audit_by(SELECTOR);
    let during = Throttle::of(&audit, from, to);
    let in_run: Vec<Value> = audit
        .into_iter()
        .filter(|e| received_at(e).is_some_and(|at| at >= from && at < to))
        .collect();
    let retries = Retries::of(&in_run, &neighbour.retry_after);
    let stderr = String::from_utf8_lossy(&run.stderr).to_string();
    let tainted: BTreeMap<String, String> = nodes(cluster)
        .expect("the nodes")
        .iter()
        .filter(|(_, n)| drain_taint(n).is_some())
        .map(|(name, n)| (name.clone(), annotation(n, "rotor.dev/selected-at")))
        .collect();
    let rejected: BTreeMap<String, usize> = in_run
        .iter()
        .filter(|e| e["responseStatus"]["code"] == 429)
        .fold(BTreeMap::new(), |mut by, e| {
            *by.entry(call(e).0).or_default() += 1;
            by
        });
    eprintln!(
        "apf: selector, {what}: exit {:?}, {during} ({rejected:?}); tainted {:?}\n\
         apf:   {retries}\napf:   neighbour: {neighbour}\napf:   stderr, warnings and errors:\n{}",
        run.status.code(),
        tainted.keys().collect::<Vec<_>>(),
        stderr
            .lines()
            .filter(|l| !l.contains(" INFO "))
            .collect::<Vec<_>>()
            .join("\n"),
    );

    // The squeeze worked, and the selector's own retry kept its documented pace
    // (docs/selector.md: three attempts in all, 0.5 s and 2 s apart or the server's Retry-After
    // up to 10 s, given up at once when it asks for more).
    assert!(
        during.rejected > 0,
        "no request of the selector was answered 429: {during}"
    );
    assert!(
        retries
            .shortest
            .is_none_or(|gap| gap >= Duration::from_millis(400)),
        "the selector retried a 429 within 400 ms: {retries}"
    );
    // Bounded: three attempts per call at most (a run that gives up at once is brief, so its
    // rate says nothing).
    let mut attempts: BTreeMap<(String, String), usize> = BTreeMap::new();
    for e in &in_run {
        *attempts.entry(call(e)).or_default() += 1;
    }
    assert!(
        attempts.values().all(|n| *n <= 3),
        "the selector tried a call more than three times: {attempts:?}"
    );
    // Only nodes that are behind, each written whole (taint and selected-at in one patch).
    for (name, selected_at) in &tainted {
        assert!(old.contains(name), "{name} is up to date but was tainted");
        assert!(
            !selected_at.is_empty(),
            "{name} carries the taint without selected-at"
        );
    }
    match run.status.code() {
        // It rode out the squeeze: the whole plan is written.
        Some(0) => assert_eq!(tainted.len(), old.len(), "{stderr}"),
        // A look-up failed: nothing was written, and the message says so and why.
        Some(1) if stderr.contains("nothing was written") => {
            assert!(tainted.is_empty(), "{tainted:?}\n{stderr}");
            assert!(stderr.contains("429"), "{stderr}");
        }
        // Writes failed after their retries: the applied ones stay, and it says which failed
        // and that the next run retries them.
        Some(1) => {
            assert!(
                stderr.contains("writes failed")
                    && stderr.contains("the next run retries the rest"),
                "{stderr}"
            );
            assert!(tainted.len() < old.len(), "{tainted:?}\n{stderr}");
        }
        other => panic!("the selector exited {other:?}:\n{stderr}"),
    }
    tainted
}

#[test]
fn given_the_selectors_requests_shed_by_flow_control_then_its_runs_end_as_documented_and_the_next_finishes()
 {
    let (cluster, old) = squeezed_cluster("rotor-selector", 6, "", 0);

    // Every request squeezed: the run cannot even list the nodes.
    let first = squeezed_selector_run(&cluster, &old, "every request squeezed");
    // Only its taints squeezed: it lists and plans, and its writes meet the 429s.
    cluster.apply(&squeeze("rotor-selector", NODE_WRITES));
    let second = squeezed_selector_run(&cluster, &old, "its node writes squeezed");

    // The next run, unsqueezed, finishes the plan and leaves the earlier runs' writes as they are.
    let last = cluster.run_rotor_selector(&SELECT);
    assert!(
        last.status.success(),
        "{}",
        rotor_e2e::describe_output("rotor-selector", &last)
    );
    for (name, node) in &nodes(&cluster).expect("the nodes") {
        assert_eq!(
            drain_taint(node).is_some(),
            old.contains(name),
            "{name}: {:?}",
            drain_taint(node)
        );
        if let Some(selected_at) = first.get(name).or(second.get(name)) {
            assert_eq!(
                &annotation(node, "rotor.dev/selected-at"),
                selected_at,
                "{name} was written again"
            );
        }
    }
}

/// What `deploy/components/flow-schema` recommends, on the real server: the drainer's Lease in
/// `leader-election`, the rest of the drainer's and the selector's requests in `workload-high`
/// (the server's own classification, from its `dispatched_requests_total`).
#[test]
fn given_the_shipped_flow_schemas_then_the_server_classifies_rotors_requests_by_them() {
    let cluster = RealCluster::start_with_apiserver_flags(RealClusterOptions::default(), &APF_ON);
    cluster.apply_kustomize_ok("deploy/overlays/kubernetes");
    cluster.stop_shipped_drainer();
    let schemas = std::fs::read_to_string(
        rotor_e2e::workspace_root().join("deploy/components/flow-schema/flow-schema.yaml"),
    )
    .expect("read the component's FlowSchemas");
    cluster.apply(&schemas);
    cluster.add_nodes(&[FakeNode::behind("old-1"), FakeNode::new("new-1")]);

    let selected = cluster.run_rotor_selector(&SELECT);
    assert!(
        selected.status.success(),
        "{}",
        rotor_e2e::describe_output("rotor-selector", &selected)
    );
    let drainer = cluster.start_rotor_drainer("apf-1", &[]);
    wait_until("old-1 to be drained", Duration::from_secs(120), || {
        let all = nodes(&cluster)?;
        (annotation(&all["old-1"], "rotor.dev/phase") == "drained").then_some(())
    });

    let dispatched = apf_metric(&cluster, "apiserver_flowcontrol_dispatched_requests_total");
    let count = |schema: &str, level: &str| -> f64 {
        dispatched
            .iter()
            .filter(|(labels, _)| {
                labels.contains(&format!("flow_schema=\"{schema}\""))
                    && labels.contains(&format!("priority_level=\"{level}\""))
            })
            .fold(0.0, |sum, (_, n)| sum + n)
    };
    let (leases, rest) = (
        count("rotor-leader-election", "leader-election"),
        count("rotor", "workload-high"),
    );
    eprintln!(
        "apf: dispatched: rotor-leader-election/leader-election {leases}, rotor/workload-high {rest}, service-accounts/workload-low {}",
        count("service-accounts", "workload-low")
    );
    assert!(
        leases > 0.0,
        "no Lease request in leader-election: {dispatched:?}"
    );
    assert!(
        rest > 0.0,
        "no request of rotor in workload-high: {dispatched:?}"
    );
    drop(drainer);
}
