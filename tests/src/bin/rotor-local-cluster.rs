//! `rotor-local-cluster`: the end-to-end tests' real control plane (etcd, kube-apiserver,
//! kube-controller-manager, kube-scheduler, kwok) for a person to use, until ^C or SIGTERM.
//! `examples/local-cluster.sh up|down` runs it in the background.

use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use rotor_e2e::{FakeNode, RealCluster, RealClusterOptions};

const USAGE: &str = "usage: rotor-local-cluster [--dir DIR] [--nodes N] [--pod-startup-ms MS]

Starts a real Kubernetes control plane on 127.0.0.1 (etcd, kube-apiserver with RBAC and an
audit log, kube-controller-manager, kube-scheduler) with N kwok nodes (default 3), prints the
admin kubeconfig's path, and keeps it running until interrupted; then stops every process and
removes DIR (default $TMPDIR/rotor-local-cluster). The binaries come from tools/build.sh.";

fn main() {
    let mut dir = std::env::temp_dir().join("rotor-local-cluster");
    let mut nodes = 3usize;
    let mut startup = 1000u64;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |name: &str| {
            args.next().unwrap_or_else(|| {
                eprintln!("rotor-local-cluster: {name} needs a value\n\n{USAGE}");
                std::process::exit(2)
            })
        };
        let bad = |name: &str, v: &str| -> ! {
            eprintln!("rotor-local-cluster: {name} {v:?} is not a whole number\n\n{USAGE}");
            std::process::exit(2)
        };
        match arg.as_str() {
            "--dir" => dir = PathBuf::from(value("--dir")),
            "--nodes" => {
                let v = value("--nodes");
                nodes = v.parse().unwrap_or_else(|_| bad("--nodes", &v));
            }
            "--pod-startup-ms" => {
                let v = value("--pod-startup-ms");
                startup = v.parse().unwrap_or_else(|_| bad("--pod-startup-ms", &v));
            }
            "-h" | "--help" => {
                println!("{USAGE}");
                return;
            }
            other => {
                eprintln!("rotor-local-cluster: unknown argument {other:?}\n\n{USAGE}");
                std::process::exit(2);
            }
        }
    }

    let cluster = RealCluster::start_with(RealClusterOptions {
        pod_startup: Duration::from_millis(startup),
        dir: Some(dir),
        ..RealClusterOptions::default()
    });
    let fake: Vec<FakeNode> = (1..=nodes)
        .map(|i| FakeNode::new(&format!("kwok-node-{i}")))
        .collect();
    cluster.add_nodes(&fake);
    println!("{}", cluster.describe());
    println!("kubeconfig: {}", cluster.admin_kubeconfig().display());
    println!("ready");
    let _ = std::io::stdout().flush();

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    runtime.block_on(async {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    });
    println!("stopping");
    drop(cluster);
}
