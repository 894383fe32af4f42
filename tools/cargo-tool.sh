#!/usr/bin/env bash
# Installs a cargo subcommand from crates.io at a pinned version, into a cache outside the clone:
#
#   $ROTOR_CARGO_TOOLS/<crate>-<version>/bin/<crate>     (default ~/.cache/rotor/tools)
#
# `cargo install --locked`: the crate's own Cargo.lock, so a pin gives the same dependency tree
# every time. Idempotent: once the binary is there this costs nothing. It builds in a target
# directory of its own (removed afterwards), never in $CARGO_TARGET_DIR, so that it does not wait
# on the lock of the directory the tests build in; and into a temporary root moved into place at
# the end, so that an interrupted install leaves nothing half made. The last line printed is the
# binary's path.
#
#   tools/cargo-tool.sh <crate> <version>           install if needed
#   tools/cargo-tool.sh --print <crate> <version>   print the path only if installed (exit 1 if not)
#
# Used by tools/cargo-deny.sh (cargo-deny) and tools/image.sh (cargo-cyclonedx, the SBOM).
set -euo pipefail

print_only=false
if [ "${1:-}" = "--print" ]; then
  print_only=true
  shift
fi
if [ "$#" -ne 2 ]; then
  echo "usage: tools/cargo-tool.sh [--print] <crate> <version>" >&2
  exit 2
fi
crate=$1 version=$2
root="${ROTOR_CARGO_TOOLS:-$HOME/.cache/rotor/tools}/$crate-$version"
bin="$root/bin/$crate"

if [ -x "$bin" ]; then
  echo "$bin"
  exit 0
fi
$print_only && exit 1

partial="$root.partial.$$"
rm -rf "$partial"
trap 'rm -rf "$partial"' EXIT
mkdir -p "$partial"
echo "installing $crate $version into $root (compiled from source: minutes on 2 cores)" >&2
start=$SECONDS
cargo install --locked --version "=$version" "$crate" \
  --root "$partial" --target-dir "$partial/target" --no-track >&2
rm -rf "$partial/target"
if [ -x "$bin" ]; then
  # Another run installed it meanwhile: keep that one.
  echo "$bin"
  exit 0
fi
rm -rf "$root"
mv "$partial" "$root"
trap - EXIT
echo "installed $crate $version in $((SECONDS - start)) s" >&2
echo "$bin"
