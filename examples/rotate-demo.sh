#!/usr/bin/env bash
# rotor's main job on the simulated cluster, end to end with the real binaries:
#   1. start rotor-sim with examples/scenarios/small.yaml (3 nodes on kubelet v1.32.9),
#   2. start rotor-drainer against it,
#   3. upgrade the control plane to v1.34.1 and point the node group at a v1.34.1 template,
#   4. run rotor-selector (Kubernetes provider, at most one node tainted at a time) every few
#      seconds, as its CronJob would,
#   5. watch rotor-drainer drain the selected nodes while the simulated autoscaler replaces
#      them, until no node runs an old kubelet; then print the budget violations (expect 0).
# ROTOR_DEMO_SELECTOR=shell uses examples/selectors/kubelet-behind.sh instead (anyone can
# be a selector: the taint is the whole interface).
#
#   bash examples/rotate-demo.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build -q -p rotor-sim -p rotor-drainer -p rotor-selector --bins
bin=${CARGO_TARGET_DIR:-target}/debug
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$work"' EXIT

"$bin/rotor-sim" serve --scenario examples/scenarios/small.yaml --kubeconfig-out "$work/kubeconfig" >"$work/sim.out" 2>"$work/sim.log" &
for _ in $(seq 50); do grep -q "listening on" "$work/sim.out" 2>/dev/null && break; sleep 0.2; done
url=$(sed -n 's/^listening on //p' "$work/sim.out")
export KUBECONFIG="$work/kubeconfig"
echo "simulated cluster at $url (kubeconfig $KUBECONFIG)"

"$bin/rotor-drainer" run --admin-listen 127.0.0.1:0 --lease-namespace rotor-system --settle 1s 2>"$work/drainer.log" &

curl -s -X POST "$url/sim/v1/control-plane-version" -d '{"version":"v1.34.1"}' -H 'content-type: application/json' >/dev/null
curl -s -X POST "$url/sim/v1/node-groups/general/template" -d '{"kubeletVersion":"v1.34.1","image":"ami-0bbbbbbbbbbbbbbb2"}' -H 'content-type: application/json' >/dev/null
echo "control plane upgraded to v1.34.1; the node group now launches v1.34.1 nodes"

select_nodes() {
  if [ "${ROTOR_DEMO_SELECTOR:-}" = shell ]; then
    examples/selectors/kubelet-behind.sh >/dev/null
  else
    "$bin/rotor-selector" --provider kubernetes --max-tainted 1 >"$work/selector.out" 2>>"$work/selector.log"
  fi
}

start=$(date +%s)
select_nodes
while :; do
  old=$(kubectl get nodes -o 'jsonpath={range .items[*]}{.status.nodeInfo.kubeletVersion}{"\n"}{end}' | grep -c 'v1\.32' || true)
  clear 2>/dev/null || true
  echo "rotor rotation demo: $(( $(date +%s) - start ))s, nodes on the old kubelet: $old"
  echo
  kubectl get nodes
  echo
  "$bin/rotor-drainer" status
  echo
  curl -s "$url/sim/v1/stats" | python3 -c 'import json,sys; s=json.load(sys.stdin); print("pods:", s["pods"], " unschedulable now:", s["unschedulablePods"], " evictions:", s["evictions"], " budget violations:", s["budgetViolations"])'
  [ "$old" -eq 0 ] && break
  # The selector's CronJob, every 4 seconds here.
  [ $(( ($(date +%s) - start) % 4 )) -lt 2 ] && select_nodes
  sleep 2
done
echo
echo "done: every node runs v1.34.1 after $(( $(date +%s) - start ))s; budget violations: $(curl -s "$url/sim/v1/stats" | python3 -c 'import json,sys; print(json.load(sys.stdin)["budgetViolations"])')"
