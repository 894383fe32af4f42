#!/usr/bin/env bash
# A custom selector in a few lines of shell: taint every node whose kubelet minor version is
# behind the control plane's, so rotor-drainer drains it. Anyone can be a selector; the taint
# is the whole interface. Needs kubectl and jq-free tools only (awk).
#
#   examples/selectors/kubelet-behind.sh [--dry-run]
set -euo pipefail
dry_run=false
[ "${1:-}" = "--dry-run" ] && dry_run=true

# "v1.33.4" -> 33
minor() { echo "$1" | sed -E 's/^v?1\.([0-9]+).*/\1/'; }

server=$(kubectl version -o json | awk -F'"' '/"serverVersion"/{s=1} s && /"gitVersion"/{print $4; exit}')
want=$(minor "$server")
echo "control plane $server (minor $want)"

kubectl get nodes -o 'jsonpath={range .items[*]}{.metadata.name}{" "}{.status.nodeInfo.kubeletVersion}{" "}{.spec.taints[?(@.key=="rotor.dev/drain")].key}{"\n"}{end}' |
while read -r node kubelet tainted; do
  [ -z "$node" ] && continue
  have=$(minor "$kubelet")
  if [ "$have" -lt "$want" ] && [ -z "$tainted" ]; then
    echo "taint $node (kubelet $kubelet)"
    $dry_run || kubectl taint node "$node" rotor.dev/drain=kubelet-version:NoSchedule >/dev/null
  fi
done
