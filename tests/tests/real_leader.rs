//! rotor-drainer's leader election against the real API server's Lease (issue 18, item 5): two
//! replicas whose wall clocks are 40 minutes apart (libfaketime), a leader paused with SIGSTOP
//! until its lease has expired and woken after a standby took over. "No two leaders act at once"
//! is judged from the API server's audit log, where each replica's requests carry its identity
//! in their User-Agent: no write of a replica reaches the server after another replica has
//! acquired the lease.
//!
//! The control plane's binaries come from `tools/build.sh`; libfaketime from the `faketime`
//! package. Without either the test fails and says how to get it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use jiff::Timestamp;
use rotor_e2e::manifests::{deployment, min_available_budget};
use rotor_e2e::real_cluster::ROTOR_NAMESPACE as NS;
use rotor_e2e::{Background, BudgetWatch, FakeNode, RealCluster, WatchedBudget, wait_until};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(180);
/// Short, so that expiries come quickly; the replicas renew every third of it.
const LEASE: Duration = Duration::from_secs(6);
const LEASE_FLAG: &str = "6s";

/// Where Debian and Ubuntu put libfaketime (its variant for multi-threaded programs).
const LIBFAKETIME: [&str; 3] = [
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1",
    "/usr/lib/faketime/libfaketimeMT.so.1",
];

fn libfaketime() -> PathBuf {
    LIBFAKETIME
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "libfaketime is not installed (looked in {LIBFAKETIME:?}); the clock-skew test \
                 runs the drainer under it: `apt-get install faketime`"
            )
        })
}

/// A drainer replica whose wall clock is `offset` (libfaketime's syntax, e.g. `-20m`) from the
/// machine's. Its monotonic clock is left alone: only the time it would write into the Lease
/// and the node's record is skewed.
fn skewed_drainer(cluster: &RealCluster, identity: &str, offset: &str) -> Background {
    let flags = [
        "--lease-duration",
        LEASE_FLAG,
        // The drain record's deadline is wall-clock time; keep it far from the skew so that
        // only the election is under test.
        "--drain-timeout",
        "3h",
    ];
    cluster.start_rotor_drainer_with(identity, &flags, |kubeconfig: &Path| {
        let mut cmd = Command::new(rotor_e2e::binary("rotor-drainer"));
        cmd.env("LD_PRELOAD", libfaketime())
            .env("FAKETIME", offset)
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
            .env("RUST_LOG", "info");
        (cmd, kubeconfig.to_path_buf())
    })
}

fn lease(cluster: &RealCluster) -> Value {
    let out = cluster.kubectl(&["get", "lease", "rotor-drainer", "-n", NS, "-o", "json"]);
    serde_json::from_slice(&out.stdout).unwrap_or(Value::Null)
}

fn holder(cluster: &RealCluster) -> Option<String> {
    lease(cluster)["spec"]["holderIdentity"]
        .as_str()
        .map(str::to_string)
}

fn at(record: &Value) -> Timestamp {
    record["requestReceivedTimestamp"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("an audit record without a time: {record}"))
}

/// The audit records of the requests `identity`'s replica made (its User-Agent names it).
fn requests_of(cluster: &RealCluster, identity: &str) -> Vec<Value> {
    let agent = format!("({identity})");
    cluster
        .audit_events()
        .into_iter()
        .filter(|e| {
            e["stage"] == "ResponseComplete"
                && e["userAgent"]
                    .as_str()
                    .is_some_and(|a| a.starts_with("rotor-drainer/") && a.ends_with(&agent))
        })
        .collect()
}

fn is_lease(e: &Value) -> bool {
    e["objectRef"]["resource"] == "leases"
}

fn is_write(e: &Value) -> bool {
    matches!(
        e["verb"].as_str(),
        Some("create" | "update" | "patch" | "delete" | "deletecollection")
    )
}

/// When `identity` took the lease: its first write of the Lease the server accepted.
fn acquired_at(cluster: &RealCluster, identity: &str) -> Option<Timestamp> {
    requests_of(cluster, identity)
        .iter()
        .find(|e| is_lease(e) && is_write(e) && e["responseStatus"]["code"] == 200)
        .map(at)
}

/// The last renewal of the lease by `identity` the server accepted.
fn last_renewal(cluster: &RealCluster, identity: &str) -> Timestamp {
    requests_of(cluster, identity)
        .iter()
        .filter(|e| is_lease(e) && is_write(e) && e["responseStatus"]["code"] == 200)
        .map(at)
        .next_back()
        .unwrap_or_else(|| panic!("{identity} never renewed the lease"))
}

/// The writes other than to the Lease that `identity` made from `since` on, as `verb resource
/// name (code)`.
fn writes_since(cluster: &RealCluster, identity: &str, since: Timestamp) -> Vec<String> {
    requests_of(cluster, identity)
        .iter()
        .filter(|e| is_write(e) && !is_lease(e) && at(e) >= since)
        .map(|e| {
            let r = &e["objectRef"];
            format!(
                "{} {}{} {} ({}) at {}",
                e["verb"].as_str().unwrap_or_default(),
                r["resource"].as_str().unwrap_or_default(),
                r["subresource"]
                    .as_str()
                    .map(|s| format!("/{s}"))
                    .unwrap_or_default(),
                r["name"].as_str().unwrap_or_default(),
                e["responseStatus"]["code"],
                at(e),
            )
        })
        .collect()
}

/// Pauses the leader `paused` until `standby` has taken the lease over, wakes it while the
/// standby acts, and checks that the woken replica sent no write after the takeover and exited
/// saying it lost the lease. Returns when the standby took over.
fn pause_until_taken_over(
    cluster: &RealCluster,
    paused: &mut Background,
    paused_id: &str,
    standby_id: &str,
    on_takeover: impl FnOnce(),
) -> Timestamp {
    paused.pause();
    wait_until(
        &format!("{standby_id} to take the lease over"),
        WAIT,
        || (holder(cluster).as_deref() == Some(standby_id)).then_some(()),
    );
    let taken = acquired_at(cluster, standby_id).expect("the takeover is in the audit log");
    // The standby waited a whole lease duration after the paused leader's last renewal, by its
    // own clock: the renewTime written 40 minutes off did not count.
    let waited = taken.duration_since(last_renewal(cluster, paused_id));
    let waited = Duration::try_from(waited).unwrap_or_default();
    assert!(
        waited >= LEASE && waited <= LEASE + Duration::from_secs(8),
        "{standby_id} took the lease {waited:?} after {paused_id}'s last renewal; expected a \
         lease duration ({LEASE:?}) plus at most two renewal periods"
    );
    eprintln!("{standby_id} took the lease over {waited:?} after {paused_id}'s last renewal");
    // Something for the woken leader to act on at once: its budget watch delivers the change as
    // it wakes, as the standby's does.
    on_takeover();
    paused.resume();
    wait_until(&format!("{paused_id} to step down and exit"), WAIT, || {
        paused.exit_status()
    });
    assert!(
        paused.log().contains("lost the leader lease"),
        "{paused_id} should say it lost the lease:\n{}",
        paused.log()
    );
    let late = writes_since(cluster, paused_id, taken);
    assert!(
        late.is_empty(),
        "{paused_id} wrote after {standby_id} took the lease at {taken}: {late:#?}"
    );
    taken
}

#[test]
fn given_skewed_clocks_and_a_paused_leader_then_no_two_replicas_ever_act_at_once() {
    let cluster = RealCluster::start();
    cluster.apply_kustomize_ok("deploy/overlays/kubernetes");
    cluster.stop_shipped_drainer();
    let old = FakeNode::behind("old-1");
    cluster.add_nodes(&[old]);
    // Four replicas whose budget allows no eviction until the test relaxes it.
    cluster.apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata: {{name: shop}}\n---\n{}---\n{}",
        deployment("shop", "web", 4, None),
        min_available_budget("shop", "web", 4),
    ));
    wait_until("web's pods to be Ready", WAIT, || {
        let pods = cluster.kubectl_json(&["get", "pods", "-n", "shop", "-l", "app=web"]);
        let ready = pods["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|p| rotor_e2e::real_cluster::is_ready(p))
            .count();
        (ready == 4).then_some(())
    });
    // No room elsewhere yet: an evicted pod's replacement stays Pending, so each relaxation of
    // the budget lets exactly one more eviction through.
    let watch = BudgetWatch::start(
        &cluster.kubectl_bin(),
        cluster.admin_kubeconfig(),
        vec![WatchedBudget::app("shop", "web", 2)],
    );
    let relax = |min: u32| {
        cluster.kubectl_ok(&[
            "patch",
            "pdb",
            "web",
            "-n",
            "shop",
            "--type=merge",
            "-p",
            &format!("{{\"spec\":{{\"minAvailable\":{min}}}}}"),
        ]);
    };

    // A leads with its clock 20 minutes slow; B stands by 20 minutes fast. A naive standby
    // comparing A's renewTime with its own clock would see a lease 40 minutes stale.
    let mut a = skewed_drainer(&cluster, "e2e-a", "-20m");
    cluster.kubectl_ok(&[
        "taint",
        "node",
        "old-1",
        "rotor.dev/drain=manual:NoSchedule",
    ]);
    wait_until("e2e-a to lead", WAIT, || {
        (holder(&cluster).as_deref() == Some("e2e-a")).then_some(())
    });
    let renew = lease(&cluster)["spec"]["renewTime"]
        .as_str()
        .and_then(|t| t.parse::<Timestamp>().ok())
        .expect("a renewTime");
    let skew = Duration::try_from(Timestamp::now().duration_since(renew)).unwrap_or_default();
    assert!(
        skew >= Duration::from_secs(19 * 60),
        "libfaketime did not slow e2e-a's clock: renewTime {renew} is {skew:?} behind"
    );
    let mut b = skewed_drainer(&cluster, "e2e-b", "+20m");
    std::thread::sleep(LEASE * 3);
    assert_eq!(
        holder(&cluster).as_deref(),
        Some("e2e-a"),
        "{}",
        lease(&cluster)
    );
    assert_eq!(
        acquired_at(&cluster, "e2e-b"),
        None,
        "e2e-b took a live lease"
    );
    assert!(b.is_running(), "e2e-b:\n{}", b.log());
    // A acts: it cordoned old-1 and records that the budget holds the drain.
    wait_until("e2e-a to write to old-1", WAIT, || {
        (!writes_since(&cluster, "e2e-a", Timestamp::UNIX_EPOCH).is_empty()).then_some(())
    });

    // A freezes past its lease; B takes over; the budget lets one pod go as A wakes.
    let taken_by_b = pause_until_taken_over(&cluster, &mut a, "e2e-a", "e2e-b", || relax(3));

    // The other way round: B (fast) freezes, and C (slow) must not wait the 40 minutes B's
    // renewTime claims.
    let mut c = skewed_drainer(&cluster, "e2e-c", "-20m");
    wait_until("e2e-c to watch", WAIT, || {
        (!requests_of(&cluster, "e2e-c").is_empty()).then_some(())
    });
    std::thread::sleep(LEASE);
    assert_eq!(
        holder(&cluster).as_deref(),
        Some("e2e-b"),
        "{}",
        lease(&cluster)
    );
    let taken_by_c = pause_until_taken_over(&cluster, &mut b, "e2e-b", "e2e-c", || relax(2));

    // Room for the replacements: C finishes the drain within the budget.
    cluster.add_nodes(&[FakeNode::new("new-1")]);
    wait_until("old-1 to be drained", WAIT, || {
        let node = cluster.kubectl_json(&["get", "node", "old-1"]);
        (node["metadata"]["annotations"]["rotor.dev/phase"] == "drained").then_some(())
    });
    assert!(c.is_running(), "e2e-c:\n{}", c.log());
    let verdict = watch.finish();
    assert!(verdict.never_armed.is_empty(), "{:?}", verdict.never_armed);
    assert!(verdict.violations.is_empty(), "{:#?}", verdict.violations);
    let lease = lease(&cluster);
    assert_eq!(lease["spec"]["leaseTransitions"], 2, "{lease}");
    // Every eviction the server accepted came from the replica that held the lease then.
    let mut accepted = 0;
    for id in ["e2e-a", "e2e-b", "e2e-c"] {
        for e in requests_of(&cluster, id) {
            if e["objectRef"]["subresource"] != "eviction" || e["responseStatus"]["code"] != 201 {
                continue;
            }
            let t = at(&e);
            let leader = if t < taken_by_b {
                "e2e-a"
            } else if t < taken_by_c {
                "e2e-b"
            } else {
                "e2e-c"
            };
            assert_eq!(
                id, leader,
                "an eviction at {t} by {id} while {leader} led: {e}"
            );
            accepted += 1;
        }
    }
    assert_eq!(accepted, 4, "each of web's four pods evicted once");
}
