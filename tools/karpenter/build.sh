#!/usr/bin/env bash
# Builds Karpenter's kwok provider (the main package sigs.k8s.io/karpenter/kwok, pinned in
# tools/karpenter/go.mod) into a cache outside the clone, and copies the CRDs that ship in the
# same module version beside it:
#
#   $ROTOR_KARPENTER_CACHE/<key>/bin/karpenter-kwok
#   $ROTOR_KARPENTER_CACHE/<key>/bin/crds/*.yaml   (NodePool, NodeClaim, NodeOverlay,
#                                                  CapacityBuffer, KWOKNodeClass)
#
# <key> hashes go.mod, go.sum and this script, so a change to the pin rebuilds and an unchanged
# pin costs a few seconds. The last line printed is the bin directory; the tests find it through
# $ROTOR_KARPENTER_BIN or, failing that, by running this script with --print.
#
#   tools/karpenter/build.sh            build if needed, print the bin directory
#   tools/karpenter/build.sh --print    print the bin directory only if it is already built (exit 1 if not)
#
# Needs Go >= the module's `go` directive and the Go module proxy; nothing else is downloaded.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
cache_root="${ROTOR_KARPENTER_CACHE:-$HOME/.cache/rotor/karpenter}"

key=$(cat "$here/go.mod" "$here/go.sum" "$here/build.sh" | sha256sum | cut -c1-16)
out="$cache_root/$key"
bin="$out/bin"

built() {
  [ -x "$bin/karpenter-kwok" ] && [ -f "$bin/crds/karpenter.sh_nodepools.yaml" ] \
    && [ -f "$bin/crds/karpenter.kwok.sh_kwoknodeclasses.yaml" ]
}

if [ "${1:-}" = "--print" ]; then
  built || exit 1
  echo "$bin"
  exit 0
fi

if built; then
  echo "karpenter kwok provider already built ($key)" >&2
  echo "$bin"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  echo "tools/karpenter/build.sh: go is not on PATH; install Go >= 1.26.6 (it builds Karpenter from its module)" >&2
  exit 1
fi

# Never let the go command fetch a toolchain: there is no way to download one here.
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly
mkdir -p "$out"
tmp="$out/bin.partial"
rm -rf "$tmp"
mkdir -p "$tmp/crds"

start=$SECONDS
cd "$here"
version=$(go list -m -f '{{.Version}}' sigs.k8s.io/karpenter)
echo "building Karpenter's kwok provider ($version) into $bin; cold this takes several minutes on 2 cores" >&2
# The operator logs this version at start-up (it says "unspecified" otherwise).
go build -trimpath -ldflags "-s -w -X sigs.k8s.io/karpenter/pkg/operator.Version=$version" \
  -o "$tmp/karpenter-kwok" sigs.k8s.io/karpenter/kwok

# The CRDs as the kwok provider's chart installs them (they allow its karpenter.kwok.sh labels
# in NodePool templates), plus its KWOKNodeClass. Read from the module cache, never copied
# into the repository.
src=$(go list -m -f '{{.Dir}}' sigs.k8s.io/karpenter)
cp "$src"/kwok/charts/crds/*.yaml "$src"/kwok/apis/crds/*.yaml "$tmp/crds/"
chmod u+w "$tmp"/crds/*.yaml

rm -rf "$bin"
mv "$tmp" "$bin"
echo "built in $((SECONDS - start)) s" >&2
echo "$bin"
