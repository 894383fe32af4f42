#!/usr/bin/env bash
# Builds the real Kubernetes control plane that rotor's end-to-end tests run against, from the Go
# modules pinned in tools/kube (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
# kubectl), tools/kwok (kwok), tools/prometheus (Prometheus, for the health-gate tests) and
# tools/helm (Helm, for the chart's tests), into a cache outside the clone:
#
#   $ROTOR_TOOLS_CACHE/<key>/bin/{etcd,kube-apiserver,kube-controller-manager,kube-scheduler,kubectl,kwok,prometheus,helm}
#
# <key> hashes the go.mod/go.sum files and this script, so a change to a pin rebuilds and an
# unchanged pin costs a few seconds. The last line printed is the bin directory; the tests find it
# through $ROTOR_KUBE_BIN or, failing that, by running this script with --print.
#
#   tools/build.sh            build if needed, print the bin directory
#   tools/build.sh --print    print the bin directory only if it is already built (exit 1 if not)
#
# Needs Go >= the modules' `go` directive and the Go module proxy; nothing else is downloaded.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
cache_root="${ROTOR_TOOLS_CACHE:-$HOME/.cache/rotor/kube}"
k8s_version="v1.36.3"

key=$(cat "$here/kube/go.mod" "$here/kube/go.sum" "$here/kwok/go.mod" "$here/kwok/go.sum" \
  "$here/prometheus/go.mod" "$here/prometheus/go.sum" "$here/helm/go.mod" "$here/helm/go.sum" \
  "$here/build.sh" \
  | sha256sum | cut -c1-16)
out="$cache_root/$key"
bin="$out/bin"
binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok prometheus helm)

built() {
  local b
  for b in "${binaries[@]}"; do [ -x "$bin/$b" ] || return 1; done
}

if [ "${1:-}" = "--print" ]; then
  built || exit 1
  echo "$bin"
  exit 0
fi

if built; then
  echo "control plane binaries already built ($key)" >&2
  echo "$bin"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  echo "tools/build.sh: go is not on PATH; install Go >= 1.26 (it builds the control plane from its modules)" >&2
  exit 1
fi

# Never let the go command fetch a toolchain: there is no way to download one here.
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly
mkdir -p "$out"
tmp="$out/bin.partial"
rm -rf "$tmp"
mkdir -p "$tmp"

# The servers report this version (without it they say v0.0.0, and the kubelet-version rule and
# kubectl's skew check get nonsense).
vpkg=k8s.io/component-base/version
ldflags="-s -w -X $vpkg.gitVersion=$k8s_version -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=36 -X $vpkg.gitTreeState=clean -X $vpkg.buildDate=1970-01-01T00:00:00Z"

start=$SECONDS
echo "building the control plane ($k8s_version) into $bin; cold this takes about 20 minutes on 2 cores" >&2
(
  cd "$here/kube"
  # One invocation for the Kubernetes binaries: they share most packages.
  go build -trimpath -ldflags "$ldflags" -o "$tmp/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubectl
  go build -trimpath -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3
)
(
  cd "$here/kwok"
  go build -trimpath -ldflags "-s -w" -o "$tmp/kwok" sigs.k8s.io/kwok/cmd/kwok
)
(
  cd "$here/prometheus"
  # Without the builtinassets tag the web UI is left out; the HTTP API is all the tests use.
  # remove_all_sd leaves out the cloud service discoveries (AWS, Azure, GCE, Kubernetes, ...):
  # the tests scrape static targets, and those SDKs are a third of the packages to compile.
  go build -trimpath -tags remove_all_sd -ldflags "-s -w" -o "$tmp/prometheus" github.com/prometheus/prometheus/cmd/prometheus
)
(
  cd "$here/helm"
  # `helm version` reports this version; `helm template` and `helm lint` assume the Kubernetes
  # minor of the client libraries Helm was built with (its go.mod's k8s.io/client-go v0.37),
  # as Helm's own Makefile sets them (without it they assume 1.20, older than the chart's
  # kubeVersion).
  hv=helm.sh/helm/v3
  go build -trimpath -ldflags "-s -w -X $hv/internal/version.version=v3.22.0 \
    -X $hv/pkg/chartutil.k8sVersionMajor=1 -X $hv/pkg/chartutil.k8sVersionMinor=37 \
    -X $hv/pkg/lint/rules.k8sVersionMajor=1 -X $hv/pkg/lint/rules.k8sVersionMinor=37" \
    -o "$tmp/helm" $hv/cmd/helm
)
rm -rf "$bin"
mv "$tmp" "$bin"
echo "built in $((SECONDS - start)) s" >&2
echo "$bin"
