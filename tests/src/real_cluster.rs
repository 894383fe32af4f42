//! A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager,
//! kube-scheduler and kwok (playing the kubelets), each a child process on free ports.
//!
//! The binaries come from the Go modules pinned in `tools/` and built by `tools/build.sh` into a
//! cache outside the clone; [`control_plane_bin`] finds them (`ROTOR_KUBE_BIN`, or the cache) and
//! fails, saying how to build them, when they are missing. Nothing here stands in for a
//! component: every request is served by the real apiserver, its admission chain, its RBAC
//! authorizer (`--authorization-mode=Node,RBAC`) and the real controllers (the disruption
//! controller keeps each PodDisruptionBudget's `disruptionsAllowed`, which the Eviction API
//! answers from).
//!
//! - TLS: the apiserver generates its own serving certificate (`--cert-dir`); clients trust it.
//! - Identities: an admin token (group `system:masters`) from `--token-auth-file`; rotor's
//!   components run as ServiceAccounts with tokens from the TokenRequest API
//!   ([`RealCluster::service_account_kubeconfig`]), signed with an RSA key made at start.
//! - The audit log (`audit.log`, level Metadata) is the server's own record of who evicted,
//!   deleted or patched what ([`RealCluster::audit_events`]).
//! - kwok manages only nodes annotated `kwok.x-k8s.io/node=fake` ([`RealCluster::add_nodes`]),
//!   with our stages: a pod turns Ready after [`RealClusterOptions::pod_startup`] (or its
//!   `e2e.rotor.dev/startup` annotation) and, once deleted, goes away when its grace period
//!   (`metadata.deletionTimestamp`) runs out, as a kubelet whose containers use their whole
//!   `terminationGracePeriodSeconds` would.
//!
//! Every process is killed and the directory removed on drop (kept when the thread panics), and
//! each child gets SIGKILL if the test process itself dies.

use std::fmt::Write as _;
use std::fs::File;
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use crate::{TestDir, describe_output, run_with_timeout, tail, workspace_root};

/// The Kubernetes release `tools/kube` pins; the servers report it.
pub const KUBERNETES_VERSION: &str = "v1.36.3";

/// The namespace `deploy/` installs rotor into.
pub const ROTOR_NAMESPACE: &str = "rotor-system";

/// How long the whole control plane may take to come up (etcd, apiserver with its bootstrap
/// RBAC, the controllers' ServiceAccounts).
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// The stages kwok runs every pod and node through (see the module docs).
const KWOK_STAGES: &str = include_str!("../kwok/stages.yaml");

/// The audit policy: one Metadata-level record per request (who, verb, object, response code),
/// health probes and discovery excepted.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: None
  nonResourceURLs: ['/readyz*', '/livez*', '/healthz*', '/api', '/api/*', '/apis', '/apis/*', '/openapi/*']
- level: Metadata
";

/// What a build script of ours (`tools/build.sh`, `tools/image.sh`, relative to the workspace
/// root) says with `--print`: its output directory, if it is built for the current pins and
/// sources. Nothing is built.
pub fn built_by(script: &str) -> Option<PathBuf> {
    let script = workspace_root().join(script);
    let out = Command::new("bash")
        .arg(&script)
        .arg("--print")
        .stderr(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    out.status
        .success()
        .then(|| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// The directory holding the control plane binaries, or a panic saying how to build them.
///
/// `ROTOR_KUBE_BIN` wins; otherwise `tools/build.sh --print` names the cache entry for the
/// pinned modules, if it has been built.
pub fn control_plane_bin() -> PathBuf {
    const NEEDED: [&str; 6] = [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
        "kubectl",
        "kwok",
    ];
    let how = "build them with `tools/build.sh` (Go >= 1.26 and the Go module proxy; 25-40 \
               minutes cold on 2 cores, seconds once cached), or point ROTOR_KUBE_BIN at a \
               directory holding them";
    let dir = match std::env::var_os("ROTOR_KUBE_BIN") {
        Some(dir) => PathBuf::from(dir),
        None => built_by("tools/build.sh").unwrap_or_else(|| {
            panic!(
                "the real control plane's binaries (etcd, kube-apiserver, \
                 kube-controller-manager, kube-scheduler, kubectl, kwok) are not built: {how}"
            )
        }),
    };
    for name in NEEDED {
        assert!(
            dir.join(name).is_file(),
            "{name} is missing from {}: {how}",
            dir.display()
        );
    }
    dir
}

/// What a [`RealCluster`] is started with.
#[derive(Clone, Debug)]
pub struct RealClusterOptions {
    /// How long a scheduled pod takes to turn Ready (kwok's start-up stage).
    pub pod_startup: Duration,
    /// Where to keep the cluster's files; a fresh [`TestDir`] when `None`.
    pub dir: Option<PathBuf>,
    /// Whether kube-apiserver serves watches from its cache (its default). Without it, every
    /// watch is an etcd watch, so compacting etcd ([`RealCluster::compact_etcd`]) expires the
    /// watches that resume from before it with 410 Gone, as on a busy production cluster.
    pub watch_cache: bool,
}

impl Default for RealClusterOptions {
    fn default() -> Self {
        RealClusterOptions {
            pod_startup: Duration::from_secs(1),
            dir: None,
            watch_cache: true,
        }
    }
}

/// One fake node for [`RealCluster::add_nodes`].
#[derive(Clone, Debug, PartialEq)]
pub struct FakeNode {
    pub name: String,
    pub labels: Value,
    pub kubelet_version: String,
    pub provider_id: Option<String>,
    pub cpu: String,
    pub memory: String,
    pub pods: u32,
}

impl FakeNode {
    /// A node with room for 110 pods, 16 CPUs and 64 GiB, on the control plane's version.
    pub fn new(name: &str) -> FakeNode {
        FakeNode {
            name: name.to_string(),
            labels: json!({}),
            kubelet_version: KUBERNETES_VERSION.to_string(),
            provider_id: None,
            cpu: "16".into(),
            memory: "64Gi".into(),
            pods: 110,
        }
    }

    /// [`FakeNode::new`] with a kubelet a minor version behind the control plane's (1.35 to its
    /// 1.36): what the `kubernetes` provider finds out of date, and what the tests rotate.
    pub fn behind(name: &str) -> FakeNode {
        FakeNode {
            kubelet_version: "v1.35.2".into(),
            ..FakeNode::new(name)
        }
    }

    /// This node with the label `key=value` besides its others (e.g. `pool=a`, for a
    /// RotationPolicy's nodeSelector).
    pub fn labelled(mut self, key: &str, value: &str) -> FakeNode {
        if !self.labels.is_object() {
            self.labels = json!({});
        }
        self.labels[key] = json!(value);
        self
    }

    /// The Node object as [`RealCluster::add_nodes`] creates it.
    pub fn to_json(&self) -> Value {
        let mut labels = json!({
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "type": "kwok",
        });
        if let (Some(extra), Some(all)) = (self.labels.as_object(), labels.as_object_mut()) {
            all.extend(extra.clone());
        }
        let capacity =
            json!({"cpu": self.cpu, "memory": self.memory, "pods": self.pods.to_string()});
        json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": labels,
                // kwok manages only the nodes carrying this annotation.
                "annotations": {"kwok.x-k8s.io/node": "fake"},
            },
            "spec": {"providerID": self.provider_id},
            "status": {
                "capacity": capacity,
                "allocatable": capacity,
                "nodeInfo": {
                    "kubeletVersion": self.kubelet_version,
                    "kubeProxyVersion": "",
                    "architecture": "amd64",
                    "operatingSystem": "linux",
                    "osImage": "kwok",
                    "kernelVersion": "kwok",
                    "containerRuntimeVersion": "kwok",
                    "machineID": self.name,
                    "systemUUID": self.name,
                    "bootID": self.name,
                },
            },
        })
    }
}

struct Component {
    name: &'static str,
    args: Vec<String>,
    child: Child,
    log: PathBuf,
}

/// A running control plane (see the module docs). Killed and cleaned up on drop.
pub struct RealCluster {
    // Dropped in reverse start order by `Drop`, then the directory.
    components: Vec<Component>,
    server: String,
    /// etcd's client URL, `http://127.0.0.1:<port>`.
    etcd: String,
    admin_kubeconfig: PathBuf,
    ca: PathBuf,
    audit_log: PathBuf,
    bin: PathBuf,
    dir: TestDir,
}

/// A free TCP port on 127.0.0.1 (bound, then released for the component to take).
///
/// Chosen below the kernel's ephemeral range (`ip_local_port_range`): a port from that range,
/// released, can be taken at once as the source port of any outgoing connection (a CI run lost
/// kube-scheduler's port that way while another cluster was busy). Each process starts at its
/// own offset and never hands out a port twice, so clusters started side by side do not collide.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const LOWEST: u32 = 10_000;
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| {
            let mut ends = r.split_whitespace().map(|p| p.parse::<u32>().ok());
            Some((ends.next()??, ends.next()??))
        })
        .unwrap_or((32_768, 60_999));
    let top = if ephemeral.0 > LOWEST {
        ephemeral.0
    } else {
        65_536
    };
    let span = top.saturating_sub(LOWEST).max(1);
    let offset = std::process::id().wrapping_mul(7_919) % span;
    for _ in 0..span {
        let port = LOWEST + (offset + NEXT.fetch_add(1, Ordering::Relaxed)) % span;
        let outside = port < ephemeral.0 || port > ephemeral.1;
        if outside && TcpListener::bind(("127.0.0.1", port as u16)).is_ok() {
            return port as u16;
        }
    }
    // Every candidate is taken or inside the ephemeral range: let the kernel choose.
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

fn random_token() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!("{:x}{:x}", nanos, std::process::id())
}

impl RealCluster {
    /// Starts the whole control plane with default options and waits until it serves.
    pub fn start() -> RealCluster {
        RealCluster::start_with(RealClusterOptions::default())
    }

    /// Starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok, in that
    /// order, each waited for before the next. Panics with the failing component's log.
    pub fn start_with(options: RealClusterOptions) -> RealCluster {
        RealCluster::start_with_apiserver_flags(options, &[])
    }

    /// [`RealCluster::start_with`], with `apiserver_flags` given to kube-apiserver after the
    /// harness's own, so that a flag given here wins over ours (the last of a flag counts):
    /// `--enable-priority-and-fairness=true` turns API Priority and Fairness on, which the
    /// harness otherwise starts off; `--max-requests-inflight=N` sizes the server's concurrency.
    pub fn start_with_apiserver_flags(
        options: RealClusterOptions,
        apiserver_flags: &[&str],
    ) -> RealCluster {
        let bin = control_plane_bin();
        let dir = match &options.dir {
            Some(path) => TestDir::at(path),
            None => TestDir::new("real-cluster"),
        };
        let pki = dir.join("pki");
        std::fs::create_dir_all(&pki).expect("create pki dir");
        let sa_key = pki.join("service-account.key");
        let out = run_with_timeout(
            Command::new("openssl")
                .args(["genrsa", "-out"])
                .arg(&sa_key)
                .arg("2048"),
            Duration::from_secs(30),
        );
        assert!(
            out.status.success(),
            "{} (the service-account signing key is made with openssl: install it, e.g. \
             `apt-get install openssl`)",
            describe_output("openssl genrsa", &out)
        );
        let token = random_token();
        let tokens = dir.join("tokens.csv");
        std::fs::write(
            &tokens,
            format!("{token},rotor-e2e-admin,admin,system:masters\n"),
        )
        .expect("write token file");
        let audit_policy = dir.join("audit-policy.yaml");
        std::fs::write(&audit_policy, AUDIT_POLICY).expect("write audit policy");
        let audit_log = dir.join("audit.log");
        let stages = dir.join("kwok-stages.yaml");
        std::fs::write(
            &stages,
            KWOK_STAGES.replace(
                "ROTOR_E2E_STARTUP_MS",
                &options.pod_startup.as_millis().to_string(),
            ),
        )
        .expect("write kwok stages");

        let mut cluster = RealCluster {
            components: Vec::new(),
            server: String::new(),
            etcd: String::new(),
            admin_kubeconfig: dir.join("admin.kubeconfig"),
            ca: pki.join("apiserver.crt"),
            audit_log,
            bin,
            dir,
        };

        // etcd: one member, no fsync (the data dir is thrown away).
        let etcd_client = free_port();
        let etcd_peer = free_port();
        let etcd_url = format!("http://127.0.0.1:{etcd_client}");
        cluster.etcd = etcd_url.clone();
        cluster.spawn(
            "etcd",
            &[
                "--name=rotor-e2e".into(),
                format!("--data-dir={}", cluster.dir.join("etcd").display()),
                format!("--listen-client-urls={etcd_url}"),
                format!("--advertise-client-urls={etcd_url}"),
                format!("--listen-peer-urls=http://127.0.0.1:{etcd_peer}"),
                format!("--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}"),
                format!("--initial-cluster=rotor-e2e=http://127.0.0.1:{etcd_peer}"),
                "--unsafe-no-fsync".into(),
                // 8 GiB, not the default 2: 150,000 pods, each written a few times between the
                // API server's compactions, come near 2 GiB, and a full quota refuses all writes.
                "--quota-backend-bytes=8589934592".into(),
                "--log-level=warn".into(),
            ],
        );
        cluster.wait_for("etcd to serve /health", |_| {
            crate::http_get(&format!("127.0.0.1:{etcd_client}"), "/health")
                .is_ok_and(|r| r.status == 200 && r.body.contains("true"))
        });

        let api_port = free_port();
        cluster.server = format!("https://127.0.0.1:{api_port}");
        cluster.spawn(
            "kube-apiserver",
            &[
                format!("--etcd-servers={etcd_url}"),
                "--bind-address=127.0.0.1".into(),
                "--advertise-address=127.0.0.1".into(),
                format!("--secure-port={api_port}"),
                format!("--cert-dir={}", pki.display()),
                "--service-cluster-ip-range=10.96.0.0/16".into(),
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
                format!("--service-account-key-file={}", sa_key.display()),
                format!("--service-account-signing-key-file={}", sa_key.display()),
                "--authorization-mode=Node,RBAC".into(),
                format!("--token-auth-file={}", tokens.display()),
                format!("--audit-policy-file={}", audit_policy.display()),
                format!("--audit-log-path={}", cluster.audit_log.display()),
                "--audit-log-format=json".into(),
                "--audit-log-mode=blocking".into(),
                // Never rotated: readers take the log from one file, by offset. (The default
                // rotates at 100 MB, which a cluster of 30,000 pods writes in minutes.)
                "--audit-log-maxsize=1000000".into(),
                "--enable-priority-and-fairness=false".into(),
                format!("--watch-cache={}", options.watch_cache),
            ]
            .into_iter()
            .chain(apiserver_flags.iter().map(|f| f.to_string()))
            .collect::<Vec<_>>(),
        );
        cluster.write_kubeconfig(&cluster.admin_kubeconfig, "rotor-e2e-admin", &token);
        cluster.wait_for("kube-apiserver to answer /readyz", |c| {
            c.ca.is_file() && c.kubectl(&["get", "--raw", "/readyz"]).status.success()
        });

        let admin = cluster.admin_kubeconfig.display().to_string();
        let kcm_port = free_port();
        cluster.spawn(
            "kube-controller-manager",
            &[
                format!("--kubeconfig={admin}"),
                format!("--authentication-kubeconfig={admin}"),
                format!("--authorization-kubeconfig={admin}"),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={kcm_port}"),
                "--leader-elect=false".into(),
                "--controllers=*".into(),
                "--use-service-account-credentials=true".into(),
                format!("--service-account-private-key-file={}", sa_key.display()),
                format!("--root-ca-file={}", cluster.ca.display()),
                "--kube-api-qps=200".into(),
                "--kube-api-burst=400".into(),
                // One kwok process renews every node's Lease; on a busy machine at 1,000 nodes
                // it ran over two minutes late. At the default 50 s the controller marked
                // such nodes Unknown and their pods NotReady (kwok never marks them Ready
                // again), and tainted the nodes so their pods are deleted five minutes later:
                // a benchmark of kwok's lag, not of drains. A real kubelet renews its own
                // Lease; no test here needs a node to die. At 5,000 nodes kwok's Leases ran
                // over four minutes late while the pods were made, hence 30 minutes.
                "--node-monitor-grace-period=30m".into(),
            ],
        );
        let sched_port = free_port();
        cluster.spawn(
            "kube-scheduler",
            &[
                format!("--kubeconfig={admin}"),
                format!("--authentication-kubeconfig={admin}"),
                format!("--authorization-kubeconfig={admin}"),
                "--bind-address=127.0.0.1".into(),
                format!("--secure-port={sched_port}"),
                "--leader-elect=false".into(),
                "--kube-api-qps=200".into(),
                "--kube-api-burst=400".into(),
            ],
        );
        let kwok_port = free_port();
        cluster.spawn(
            "kwok",
            &[
                format!("--kubeconfig={admin}"),
                format!("--config={}", stages.display()),
                "--manage-all-nodes=false".into(),
                "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake".into(),
                format!("--server-address=127.0.0.1:{kwok_port}"),
                // Renewed every quarter of it, 30 s, not the kubelet's 10 s: at 5,000 nodes
                // renewals every 10 s are 500 writes a second, which two cores cannot serve
                // beside the workloads (the API server timed out renewals while the nodes were
                // still being created). kube-controller-manager waits 30 minutes (above).
                "--node-lease-duration-seconds=120".into(),
                // Pod IPs: a /10 (4 million), where a /16 would run out at 65,534 pods.
                "--cidr=10.192.0.0/10".into(),
                "--node-ip=10.244.255.254".into(),
            ],
        );
        // The serviceaccount controller has made `default` accounts: controllers are running,
        // and pods can be admitted (the ServiceAccount admission plugin needs that account).
        cluster.wait_for(
            "kube-controller-manager to create the default ServiceAccount",
            |c| {
                c.kubectl(&["get", "serviceaccount", "default", "-n", "default"])
                    .status
                    .success()
            },
        );
        cluster
    }

    fn spawn(&mut self, name: &'static str, args: &[String]) {
        let log = self.dir.join(format!("{name}.log"));
        let child = self.launch(name, args, &log);
        self.components.push(Component {
            name,
            args: args.to_vec(),
            child,
            log,
        });
    }

    /// The process id of component `name` (`etcd`, `kube-apiserver`, ...), if it runs.
    pub fn component_pid(&self, name: &str) -> Option<u32> {
        self.components
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.child.id())
    }

    /// Starts `name` with `args`, appending to `log` (a restarted component keeps one log).
    fn launch(&self, name: &str, args: &[String], log: &Path) -> Child {
        let file = File::options()
            .create(true)
            .append(true)
            .open(log)
            .expect("open component log");
        let mut cmd = Command::new(self.bin.join(name));
        cmd.args(args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("clone log handle"))
            .stderr(file);
        die_with_parent(&mut cmd);
        cmd.spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"))
    }

    /// Stops the component `name` (`kube-apiserver`, `etcd`, ...) and starts it again with the
    /// same flags, ports and data, as a rolling upgrade of the control plane (`graceful`:
    /// SIGTERM, and SIGKILL if it has not exited within 5 s: kube-apiserver would otherwise wait
    /// out its in-flight requests for up to a minute, its port already closed) or a crash
    /// (SIGKILL) would. Returns once the API server answers `/readyz` again, with how long that
    /// took.
    pub fn restart(&mut self, name: &str, graceful: bool) -> Duration {
        let at = self
            .components
            .iter()
            .position(|c| c.name == name)
            .unwrap_or_else(|| panic!("no component {name} in this cluster"));
        let started = Instant::now();
        let old = &mut self.components[at].child;
        if graceful {
            // SAFETY: kill(2) on our own child's pid, which stays ours until it is waited for.
            unsafe { libc::kill(old.id() as libc::pid_t, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(5);
            while matches!(old.try_wait(), Ok(None)) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        let _ = old.kill();
        let _ = old.wait();
        let (args, log) = (
            self.components[at].args.clone(),
            self.components[at].log.clone(),
        );
        self.components[at].child = self.launch(name, &args, &log);
        self.wait_for(
            &format!("kube-apiserver to serve again after {name} restarted"),
            |c| c.kubectl(&["get", "--raw", "/readyz"]).status.success(),
        );
        started.elapsed()
    }

    /// Compacts etcd's history up to its current revision (through etcd's JSON gateway), as the
    /// API server does every five minutes: a watch that resumes from an older resourceVersion
    /// is answered 410 Gone (when the API server's watch cache is off, see
    /// [`RealClusterOptions::watch_cache`]). Returns the revision compacted to.
    pub fn compact_etcd(&self) -> i64 {
        let host = self.etcd.trim_start_matches("http://");
        let range =
            crate::http_request(host, "POST", "/v3/kv/range", Some(&json!({"key": "Lw=="})))
                .unwrap_or_else(|e| panic!("cannot read etcd's revision at {host}: {e}"));
        let header: Value = serde_json::from_str(&range.body).unwrap_or(Value::Null);
        // The gateway writes 64-bit integers as strings.
        let revision: i64 = header["header"]["revision"]
            .as_str()
            .and_then(|r| r.parse().ok())
            .unwrap_or_else(|| panic!("etcd answered no revision: {}", range.body));
        let compacted = crate::http_request(
            host,
            "POST",
            "/v3/kv/compaction",
            Some(&json!({"revision": revision.to_string(), "physical": true})),
        )
        .unwrap_or_else(|e| panic!("cannot compact etcd at {host}: {e}"));
        // Compacting to a revision already compacted is refused; anything else is a test fault.
        assert!(
            compacted.status == 200 || compacted.body.contains("compacted"),
            "etcd refused the compaction to {revision}: {} {}",
            compacted.status,
            compacted.body
        );
        revision
    }

    /// Polls `ready` every 200 ms; panics with every component's state and the log of the last
    /// one started after [`START_TIMEOUT`], or at once when a component has exited.
    fn wait_for(&mut self, what: &str, mut ready: impl FnMut(&RealCluster) -> bool) {
        let deadline = Instant::now() + START_TIMEOUT;
        while !ready(self) {
            for c in &mut self.components {
                if let Ok(Some(status)) = c.child.try_wait() {
                    panic!(
                        "{} exited ({status}) while waiting for {what}; its log {}:\n{}",
                        c.name,
                        c.log.display(),
                        tail(&c.log, 60)
                    );
                }
            }
            if Instant::now() > deadline {
                let last = self.components.last().expect("a component was started");
                panic!(
                    "timed out after {START_TIMEOUT:?} waiting for {what}; {} log {}:\n{}",
                    last.name,
                    last.log.display(),
                    tail(&last.log, 60)
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn write_kubeconfig(&self, path: &Path, user: &str, token: &str) {
        let text = format!(
            "apiVersion: v1
kind: Config
clusters:
- name: rotor-e2e
  cluster:
    server: {server}
    certificate-authority: {ca}
users:
- name: {user}
  user:
    token: {token}
contexts:
- name: {user}
  context:
    cluster: rotor-e2e
    user: {user}
current-context: {user}
",
            server = self.server,
            ca = self.ca.display(),
        );
        std::fs::write(path, text).expect("write kubeconfig");
    }

    /// A copy of `kubeconfig` (one this cluster wrote) with its server set to `server`, such as
    /// a [`crate::fault_proxy::FaultProxy`]'s URL; same CA and user. Written beside it.
    pub fn kubeconfig_via(&self, kubeconfig: &Path, server: &str) -> PathBuf {
        let text = std::fs::read_to_string(kubeconfig)
            .unwrap_or_else(|e| panic!("cannot read {}: {e}", kubeconfig.display()));
        let ours = format!("server: {}\n", self.server);
        assert!(
            text.contains(&ours),
            "{} does not point at {}",
            kubeconfig.display(),
            self.server
        );
        let port = server.rsplit(':').next().unwrap_or("proxy");
        let path = kubeconfig.with_extension(format!("via-{port}.kubeconfig"));
        let text = text.replace(&ours, &format!("server: {server}\n"));
        std::fs::write(&path, text).expect("write kubeconfig");
        path
    }

    /// The apiserver's URL, `https://127.0.0.1:<port>`.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// A kubeconfig for the cluster admin (group `system:masters`).
    pub fn admin_kubeconfig(&self) -> &Path {
        &self.admin_kubeconfig
    }

    /// This cluster's directory: component logs, the audit log, kubeconfigs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The kubectl built with the control plane (same release as the server).
    pub fn kubectl_bin(&self) -> PathBuf {
        self.bin.join("kubectl")
    }

    /// Runs the control plane's kubectl as the admin; returns its output whatever its status.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_as(&self.admin_kubeconfig, args)
    }

    /// Runs the control plane's kubectl with `kubeconfig`.
    pub fn kubectl_as(&self, kubeconfig: &Path, args: &[&str]) -> Output {
        let mut cmd = Command::new(self.kubectl_bin());
        cmd.arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--request-timeout=20s")
            .arg("--cache-dir")
            .arg(self.dir.join("kube-cache"))
            .args(args)
            .env_remove("KUBECONFIG");
        run_with_timeout(&mut cmd, crate::KUBECTL_TIMEOUT)
    }

    /// [`RealCluster::kubectl`] that must succeed; returns stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "{}",
            describe_output(&format!("kubectl {}", args.join(" ")), &out)
        );
        String::from_utf8(out.stdout).expect("kubectl prints UTF-8")
    }

    /// [`RealCluster::kubectl_ok`] with `-o json`, parsed.
    /// The Events posted on the Node `node` (in `default`, where Events on cluster-scoped
    /// objects go), as (reason, message), oldest first.
    pub fn node_events(&self, node: &str) -> Vec<(String, String)> {
        self.events_of("default", node)
    }

    /// The `(reason, message)` of the Events about the object `name` in `namespace` (Events
    /// about a Node land in `default`), oldest first.
    pub fn events_of(&self, namespace: &str, name: &str) -> Vec<(String, String)> {
        let list = self.kubectl_json(&[
            "get",
            "events",
            "-n",
            namespace,
            "--field-selector",
            &format!("involvedObject.name={name}"),
        ]);
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let mut events: Vec<(String, String, String)> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|e| {
                let at = e["eventTime"].as_str().or(e["lastTimestamp"].as_str());
                (
                    at.unwrap_or_default().to_string(),
                    text(&e["reason"]),
                    text(&e["message"]),
                )
            })
            .collect();
        events.sort();
        events
            .into_iter()
            .map(|(_, reason, message)| (reason, message))
            .collect()
    }

    /// The messages of the Events of `reason` on the Node `node`, oldest first.
    pub fn node_event_notes(&self, node: &str, reason: &str) -> Vec<String> {
        self.node_events(node)
            .into_iter()
            .filter(|(r, _)| r == reason)
            .map(|(_, message)| message)
            .collect()
    }

    pub fn kubectl_json(&self, args: &[&str]) -> Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        let text = self.kubectl_ok(&all);
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("kubectl printed bad JSON ({e})"))
    }

    /// Applies YAML or JSON objects as the admin, server-side (`rotor-e2e` as field manager).
    pub fn apply(&self, objects: &str) {
        let out = self.apply_result(objects);
        assert!(
            out.status.success(),
            "{}",
            describe_output("kubectl apply --server-side", &out)
        );
    }

    /// [`RealCluster::apply`] that returns kubectl's output whatever its status, for a test of
    /// what the apiserver refuses (its reasons are on stderr).
    pub fn apply_result(&self, objects: &str) -> Output {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path = self.dir.join(format!("apply-{n}.yaml"));
        std::fs::write(&path, objects).expect("write objects to apply");
        let path = path.display().to_string();
        self.kubectl(&[
            "apply",
            "--server-side",
            "--field-manager=rotor-e2e",
            "-f",
            &path,
        ])
    }

    /// `kubectl apply --server-side -k <dir>` (relative to the workspace root, e.g.
    /// `deploy/overlays/kubernetes`) as the admin, field manager `rotor-e2e`; `extra` flags such
    /// as `--dry-run=server` go before `-k`. Returns the output whatever its status.
    pub fn apply_kustomize(&self, dir: &str, extra: &[&str]) -> Output {
        let path = workspace_root().join(dir).display().to_string();
        let mut args = vec!["apply", "--server-side", "--field-manager=rotor-e2e"];
        args.extend_from_slice(extra);
        args.extend(["-k", path.as_str()]);
        self.kubectl(&args)
    }

    /// Applies the kustomization in `dir` (as [`RealCluster::apply_kustomize`] would), which must
    /// succeed, with the shipped selector CronJob suspended in the same write that creates it:
    /// its schedule (every 10 minutes, by the wall clock) would put a Job pod on the test's nodes,
    /// and a test would pass or fail with the time of day. (Suspended by a patch after the apply,
    /// a schedule that came due in between still did so.) Tests run the selector themselves
    /// ([`RealCluster::run_rotor_selector`]).
    pub fn apply_kustomize_ok(&self, dir: &str) {
        let path = workspace_root().join(dir).display().to_string();
        let rendered = self.kubectl(&["kustomize", path.as_str()]);
        assert!(
            rendered.status.success(),
            "{}",
            describe_output(&format!("kubectl kustomize {dir}"), &rendered)
        );
        let rendered = String::from_utf8(rendered.stdout).expect("kustomize prints UTF-8");
        self.apply(&suspend_cronjobs(&rendered));
        let cronjobs = self.kubectl_json(&["get", "cronjobs", "-A"]);
        for cronjob in cronjobs["items"].as_array().into_iter().flatten() {
            assert_eq!(
                cronjob["spec"]["suspend"], true,
                "{dir}: a CronJob applied unsuspended: {cronjob:#}"
            );
        }
    }

    /// Scales the shipped `rotor-drainer` Deployment to zero, for a test that runs the drainer
    /// under test itself ([`RealCluster::start_rotor_drainer`]): the shipped Deployment's pods
    /// are fakes that must not wander onto the test's nodes.
    pub fn stop_shipped_drainer(&self) {
        self.kubectl_ok(&[
            "scale",
            "deployment",
            "rotor-drainer",
            "-n",
            ROTOR_NAMESPACE,
            "--replicas=0",
        ]);
    }

    /// Starts `rotor-drainer run` as the shipped Deployment runs it, authenticated as the
    /// `rotor-system/rotor-drainer` ServiceAccount (`--lease-name` matches the Lease Role's
    /// resourceNames), with `--settle 1s` and `flags`; logs to `rotor-drainer-<identity>.log`.
    pub fn start_rotor_drainer(&self, identity: &str, flags: &[&str]) -> crate::Background {
        self.start_rotor_drainer_with(identity, flags, |kubeconfig| {
            (
                Command::new(crate::binary("rotor-drainer")),
                kubeconfig.to_path_buf(),
            )
        })
    }

    /// [`RealCluster::start_rotor_drainer`] with the binary started by `launch`, which gets the
    /// ServiceAccount's kubeconfig and returns the command that runs rotor-drainer (the binary
    /// itself, or a wrapper ending with the binary's path, such as `chroot <root>
    /// /usr/local/bin/rotor-drainer`) and that kubeconfig's path as the binary sees it.
    pub fn start_rotor_drainer_with(
        &self,
        identity: &str,
        flags: &[&str],
        launch: impl FnOnce(&Path) -> (Command, PathBuf),
    ) -> crate::Background {
        let kubeconfig = self.service_account_kubeconfig(ROTOR_NAMESPACE, "rotor-drainer");
        let log = self.dir.join(format!("rotor-drainer-{identity}.log"));
        let (mut cmd, kubeconfig) = launch(&kubeconfig);
        cmd.arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(["run", "--admin-listen", "127.0.0.1:0"])
            .args([
                "--lease-namespace",
                ROTOR_NAMESPACE,
                "--lease-name",
                "rotor-drainer",
            ])
            .args(["--identity", identity, "--settle", "1s"])
            .args(flags);
        crate::Background::spawn(&format!("rotor-drainer {identity}"), &mut cmd, log)
    }

    /// One run of `rotor-selector` as its CronJob would make it, authenticated as the
    /// `rotor-system/rotor-selector` ServiceAccount, with `flags`; killed after a minute.
    pub fn run_rotor_selector(&self, flags: &[&str]) -> Output {
        self.run_rotor_selector_with(flags, |kubeconfig| {
            (
                Command::new(crate::binary("rotor-selector")),
                kubeconfig.to_path_buf(),
            )
        })
    }

    /// [`RealCluster::run_rotor_selector`] with the binary started by `launch`, as for
    /// [`RealCluster::start_rotor_drainer_with`].
    pub fn run_rotor_selector_with(
        &self,
        flags: &[&str],
        launch: impl FnOnce(&Path) -> (Command, PathBuf),
    ) -> Output {
        let kubeconfig = self.service_account_kubeconfig(ROTOR_NAMESPACE, "rotor-selector");
        let (mut cmd, kubeconfig) = launch(&kubeconfig);
        run_with_timeout(
            cmd.arg("--kubeconfig")
                .arg(&kubeconfig)
                .args(flags)
                .env("NO_COLOR", "1"),
            Duration::from_secs(60),
        )
    }

    /// Creates kwok nodes and waits until every one reports Ready.
    pub fn add_nodes(&self, nodes: &[FakeNode]) {
        // kubectl creates a list's items one request at a time: a thousand at a time stays
        // well inside its time limit (5,000 in one call did not).
        for (i, chunk) in nodes.chunks(1000).enumerate() {
            let list = json!({
                "apiVersion": "v1",
                "kind": "List",
                "items": chunk.iter().map(FakeNode::to_json).collect::<Vec<_>>(),
            });
            let path = self.dir.join(format!("nodes-{}-{i}.json", nodes.len()));
            std::fs::write(&path, list.to_string()).expect("write nodes");
            self.kubectl_ok(&["create", "-f", &path.display().to_string()]);
        }
        // kwok marks them Ready a few at a time: thousands take minutes.
        let timeout = START_TIMEOUT + Duration::from_millis(50) * nodes.len() as u32;
        crate::wait_until("kwok to make the new nodes Ready", timeout, || {
            let all = self.kubectl_json(&["get", "nodes"]);
            let ready = all["items"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|n| is_ready(n))
                .filter_map(|n| n["metadata"]["name"].as_str())
                .collect::<Vec<_>>();
            nodes
                .iter()
                .all(|n| ready.contains(&n.name.as_str()))
                .then_some(())
        });
    }

    /// A kubeconfig authenticating as ServiceAccount `namespace/name` with a token from the
    /// TokenRequest API (valid for an hour), written into the cluster's directory.
    pub fn service_account_kubeconfig(&self, namespace: &str, name: &str) -> PathBuf {
        let token = self.kubectl_ok(&["create", "token", name, "-n", namespace, "--duration=1h"]);
        let user = format!("system:serviceaccount:{namespace}:{name}");
        let path = self.dir.join(format!("{namespace}.{name}.kubeconfig"));
        self.write_kubeconfig(&path, &user, token.trim());
        path
    }

    /// Every audit record so far (the server writes them as it answers: `blocking` mode).
    pub fn audit_events(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.audit_log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Audit records of requests made by `user` (e.g.
    /// `system:serviceaccount:rotor-system:rotor-drainer`) at the `ResponseComplete` stage.
    pub fn audit_by(&self, user: &str) -> Vec<Value> {
        self.audit_events()
            .into_iter()
            .filter(|e| e["user"]["username"] == user && e["stage"] == "ResponseComplete")
            .collect()
    }

    /// The requests of `user` the server refused (403), from its `from`-th audit record on
    /// ([`RealCluster::audit_by`] order), each as `verb resource[/subresource]` or `verb /path`.
    pub fn refusals(&self, user: &str, from: usize) -> Vec<String> {
        self.audit_by(user)
            .into_iter()
            .skip(from)
            .filter(|e| e["responseStatus"]["code"] == 403)
            .map(|e| {
                let verb = e["verb"].as_str().unwrap_or_default();
                let r = &e["objectRef"];
                match (r["resource"].as_str(), r["subresource"].as_str()) {
                    (Some(res), Some(sub)) => format!("{verb} {res}/{sub}"),
                    (Some(res), None) => format!("{verb} {res}"),
                    (None, _) => format!("{verb} {}", e["requestURI"].as_str().unwrap_or("")),
                }
            })
            .collect()
    }

    /// A description of the component processes, for failure messages.
    pub fn describe(&self) -> String {
        let mut s = format!(
            "control plane at {} (files in {})",
            self.server,
            self.dir.path().display()
        );
        for c in &self.components {
            let _ = write!(
                s,
                "\n  {}: pid {}, log {}",
                c.name,
                c.child.id(),
                c.log.display()
            );
        }
        s
    }
}

/// Whether a Node or a Pod (as JSON) has condition Ready=True.
pub fn is_ready(node: &Value) -> bool {
    node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

/// Asks the kernel to SIGKILL the child when the process that started it dies, so that a test
/// binary killed mid-run (a CI timeout, ^C) never leaves an apiserver or etcd behind.
pub fn die_with_parent(cmd: &mut Command) {
    // SAFETY: prctl is async-signal-safe; the closure touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

impl Drop for RealCluster {
    fn drop(&mut self) {
        let panicking = std::thread::panicking();
        // Reverse order: kwok and the controllers before the apiserver, etcd last.
        while let Some(mut c) = self.components.pop() {
            let _ = c.child.kill();
            let _ = c.child.wait();
            if panicking {
                eprintln!(
                    "rotor-e2e: {} logged to {} (last lines):\n{}",
                    c.name,
                    c.log.display(),
                    tail(&c.log, 15)
                );
            }
        }
        // `self.dir` is dropped next: kept if panicking.
    }
}

/// `objects` (YAML documents as `kubectl kustomize` prints them: top-level fields at column 0,
/// each level two spaces in) with every CronJob's `spec.suspend` set.
fn suspend_cronjobs(objects: &str) -> String {
    objects
        .split("\n---\n")
        .map(|doc| {
            if doc.starts_with("kind: CronJob\n") || doc.contains("\nkind: CronJob\n") {
                assert!(doc.contains("\nspec:\n"), "a CronJob without a spec: {doc}");
                doc.replacen("\nspec:\n", "\nspec:\n  suspend: true\n", 1)
            } else {
                doc.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n---\n")
}

#[cfg(test)]
mod tests {
    use super::suspend_cronjobs;

    #[test]
    fn only_cronjobs_are_suspended_at_their_spec() {
        let objects = "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: a\n---\napiVersion: batch/v1\nkind: CronJob\nmetadata:\n  name: rotor-selector\nspec:\n  jobTemplate:\n    spec:\n      backoffLimit: 1\n  schedule: '*/10 * * * *'\n";
        let suspended = suspend_cronjobs(objects);
        assert_eq!(
            suspended,
            objects.replace(
                "\nspec:\n  jobTemplate",
                "\nspec:\n  suspend: true\n  jobTemplate"
            )
        );
        assert_eq!(suspended.matches("suspend: true").count(), 1);
    }
}
