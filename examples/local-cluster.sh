#!/usr/bin/env bash
# A real Kubernetes control plane on this machine, for trying rotor by hand: etcd,
# kube-apiserver (RBAC, audit log), kube-controller-manager, kube-scheduler and kwok nodes, all
# plain processes on 127.0.0.1, built from the Go modules pinned in tools/ (no Docker).
#
#   examples/local-cluster.sh up [--nodes N]   build what is missing, start, print the kubeconfig
#   examples/local-cluster.sh down             stop every process and remove the files
#   examples/local-cluster.sh status           say whether it runs and where its kubeconfig is
#
# The first `up` on a machine builds the control plane (20-30 minutes on 2 cores); later ones
# take seconds. State lives in $ROTOR_LOCAL_CLUSTER (default $TMPDIR/rotor-local-cluster).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
state="${ROTOR_LOCAL_CLUSTER:-${TMPDIR:-/tmp}/rotor-local-cluster}"
pidfile="$state.pid"
log="$state.log"

running() { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }

case "${1:-}" in
  up)
    shift
    if running; then
      echo "already running (pid $(cat "$pidfile")); kubeconfig: $state/admin.kubeconfig"
      exit 0
    fi
    ROTOR_KUBE_BIN="$("$root/tools/build.sh" | tail -n 1)"
    export ROTOR_KUBE_BIN
    # The whole workspace, as `cargo test --workspace` builds it: one feature set, one cache.
    (cd "$root" && cargo build -q --workspace --bins)
    target="$(cd "$root" && cargo metadata --format-version 1 --no-deps \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')"
    nohup "$target/debug/rotor-local-cluster" --dir "$state" "$@" >"$log" 2>&1 &
    echo $! >"$pidfile"
    for _ in $(seq 1 600); do
      if grep -q '^ready$' "$log" 2>/dev/null; then
        echo "local control plane up (pid $(cat "$pidfile"), log $log)"
        echo "  export KUBECONFIG=$state/admin.kubeconfig"
        echo "  kubectl get nodes                      # kwok nodes, Ready"
        echo "  $target/debug/rotor-drainer run --lease-namespace default --admin-listen 127.0.0.1:0"
        echo "  kubectl taint node kwok-node-1 rotor.dev/drain=manual:NoSchedule"
        echo "Its own kubectl (same release as the server): $ROTOR_KUBE_BIN/kubectl"
        exit 0
      fi
      if ! running; then
        echo "the control plane exited while starting; its log ($log):" >&2
        tail -n 40 "$log" >&2
        exit 1
      fi
      sleep 0.5
    done
    echo "the control plane did not come up within 5 minutes; see $log" >&2
    exit 1
    ;;
  down)
    if running; then
      kill "$(cat "$pidfile")"
      for _ in $(seq 1 60); do running || break; sleep 0.5; done
      echo "stopped"
    else
      echo "not running"
    fi
    rm -f "$pidfile"
    ;;
  status)
    if running; then
      echo "running (pid $(cat "$pidfile")); export KUBECONFIG=$state/admin.kubeconfig"
    else
      echo "not running"
      exit 1
    fi
    ;;
  *)
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
