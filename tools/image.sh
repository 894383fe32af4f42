#!/usr/bin/env bash
# Builds rotor's container image without a Docker daemon: the same image as the Dockerfile
# describes (both binaries on an empty base with glibc, CA certificates and time zones, uid
# 65532), from the same `cargo build` and the same list of files, tools/image-files.txt.
#
#   1. crane, pinned in tools/crane, is built into the tools cache (like tools/build.sh's).
#   2. `cargo build --release --locked` in a target directory of its own outside the clone
#      ($ROTOR_IMAGE_TARGET, default ~/.cache/rotor/image-target), so that it never waits on the
#      lock of the target directory the tests build in; then tools/sbom.sh writes each binary's
#      SBOM (CycloneDX JSON, by cargo-cyclonedx, pinned there and built into
#      ~/.cache/rotor/tools the first time), which the image carries in /usr/share/rotor/sbom/.
#   3. The root file system is laid out by carrying out the COPY lines of tools/image-files.txt
#      on this machine (Debian bookworm, like the Dockerfile's build stage); every library `ldd`
#      lists for the binaries must be among them.
#   4. One layer tar, reproducible: sorted, mtime 0, owner 0:0. crane appends it to an empty OCI
#      image and sets the config (user 65532:65532, CMD, labels) through a registry it serves on
#      127.0.0.1 for the length of the build, in memory; nothing leaves the machine. The same
#      binaries give the same digest.
#
# Written to $ROTOR_IMAGE_CACHE/<key>/ (default ~/.cache/rotor/image), <key> hashing every input
# (the workspace's sources and Cargo.lock, the test crate's Cargo.toml (a workspace member: its
# features count in the SBOMs' resolution), rustc, the Debian files copied, crane's pin, the
# SBOM tool's pin, these scripts and the list; the three newest are kept):
#
#   oci/        the image as an OCI image layout (index.json, blobs/sha256/...)
#   image.tar   the same image as a `docker load` archive, tagged ghcr.io/rotor-dev/rotor:<version>
#   sbom/       rotor-drainer.cdx.json and rotor-selector.cdx.json, the SBOMs the image carries
#   digest      the manifest's digest; summary: sizes and digests
#
#   tools/image.sh            build if needed; the last line printed is the output directory
#   tools/image.sh --print    print it only if already built for these sources (exit 1 if not)
#
# Push with `crane push <dir>/oci <registry>/rotor:<version>` or `skopeo copy oci:<dir>/oci ...`.
# Needs cargo, Go >= 1.26 (the module proxy, for crane, once), GNU tar, ldd; installs the
# Debian packages ca-certificates and tzdata with apt-get if they are missing.
set -euo pipefail
umask 022

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"
tools_cache="${ROTOR_TOOLS_CACHE:-$HOME/.cache/rotor/kube}"
image_cache="${ROTOR_IMAGE_CACHE:-$HOME/.cache/rotor/image}"
target="${ROTOR_IMAGE_TARGET:-$HOME/.cache/rotor/image-target}"
list="$here/image-files.txt"
repository="ghcr.io/rotor-dev/rotor"
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/crates/drainer/Cargo.toml" | head -n 1)

print_only=false
case "${1:-}" in
  --print) print_only=true ;;
  "") ;;
  *) echo "usage: tools/image.sh [--print]" >&2; exit 2 ;;
esac

# The COPY lines of the list: "<from> <src> <dest>", <from> being "build" or "context".
copies() {
  local line
  while IFS= read -r line; do
    case "$line" in ''|'#'*) continue ;; esac
    # shellcheck disable=SC2086
    set -- $line
    if [ "$1" = "--from=build" ]; then
      echo "build $2 $3"
    else
      echo "context $1 $2"
    fi
  done <"$list"
}

# The Debian files the list copies (paths of the build stage other than /out/).
debian_sources() {
  local from src dest
  while read -r from src dest; do
    [ "$from" = build ] && [ "${src#/out/}" = "$src" ] && echo "$src"
  done < <(copies)
  return 0
}

# Packages for the Debian files that may be missing from a slim machine.
package_of() {
  case "$1" in
    /etc/ssl/certs/*) echo ca-certificates ;;
    /usr/share/zoneinfo*) echo tzdata ;;
  esac
}

missing=()
while read -r src; do
  if [ ! -e "$src" ]; then
    pkg=$(package_of "$src")
    if [ -z "$pkg" ]; then
      echo "tools/image.sh: $src (listed in tools/image-files.txt) is not on this machine" >&2
      exit 1
    fi
    missing+=("$pkg")
  fi
done < <(debian_sources)
if [ "${#missing[@]}" -gt 0 ]; then
  $print_only && exit 1
  echo "installing ${missing[*]} (files the image copies)" >&2
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# The key: every input of the image, by content.
source_files() {
  if git -C "$repo" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git -C "$repo" ls-files --cached --others --exclude-standard -- \
      Cargo.toml Cargo.lock crates tests/Cargo.toml tools/image.sh tools/image-files.txt \
      tools/image tools/crane tools/sbom.sh tools/cargo-tool.sh
  else
    (cd "$repo" && find Cargo.toml Cargo.lock crates tests/Cargo.toml tools/image.sh \
      tools/image-files.txt tools/image tools/crane tools/sbom.sh tools/cargo-tool.sh -type f)
  fi
}
inputs() {
  local f src
  (cd "$repo" && source_files | LC_ALL=C sort -u | while IFS= read -r f; do
    [ -f "$f" ] && sha256sum "$f"
  done) || true
  rustc -vV
  while read -r src; do
    if [ -d "$src" ]; then
      (cd "$src" && find . -printf '%p %y %m %l\n' | LC_ALL=C sort \
        && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum)
    else
      sha256sum "$(readlink -f "$src")"
    fi
  done < <(debian_sources)
}
key=$(inputs | sha256sum | cut -c1-16)
out="$image_cache/$key"

built() {
  [ -f "$out/digest" ] && [ -f "$out/image.tar" ] && [ -f "$out/oci/index.json" ] && [ -d "$out/sbom" ]
}

if $print_only; then
  built || exit 1
  echo "$out"
  exit 0
fi
if built; then
  echo "image already built for these sources ($key): $(cat "$out/digest")" >&2
  echo "$out"
  exit 0
fi

start=$SECONDS

# 1. crane, keyed by its pin.
crane_key=$(cat "$here/crane/go.mod" "$here/crane/go.sum" | sha256sum | cut -c1-16)
crane="$tools_cache/crane-$crane_key/crane"
if [ ! -x "$crane" ]; then
  if ! command -v go >/dev/null 2>&1; then
    echo "tools/image.sh: go is not on PATH; install Go >= 1.26 (it builds crane from tools/crane)" >&2
    exit 1
  fi
  echo "building crane into $(dirname "$crane")" >&2
  mkdir -p "$(dirname "$crane")"
  (
    cd "$here/crane"
    GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=readonly \
      go build -trimpath -ldflags "-s -w" -o "$crane.partial" github.com/google/go-containerregistry/cmd/crane
  )
  mv "$crane.partial" "$crane"
fi

# 2. The binaries, as the Dockerfile builds them.
echo "building rotor-drainer and rotor-selector (release) in $target; cold this takes 15-35 minutes on 2 cores" >&2
(
  cd "$repo"
  CARGO_TARGET_DIR="$target" cargo build --release --locked -p rotor-drainer -p rotor-selector
)

work="$out.partial.$$"
rm -rf "$work"
mkdir -p "$work"
registry_pid=""
cleanup() {
  if [ -n "$registry_pid" ]; then kill "$registry_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# The build stage's /out, as the Dockerfile's RUN makes it.
stage="$work/out"
install -D -m 0755 "$target/release/rotor-drainer" "$stage/rotor-drainer"
install -D -m 0755 "$target/release/rotor-selector" "$stage/rotor-selector"
install -d -m 1777 "$stage/rootfs/tmp"
"$here/sbom.sh" "$stage/sbom" rotor-drainer rotor-selector

# 3. The root file system: the list's COPY lines, with COPY's rules (a file is copied following
# symlinks; of a directory, its contents).
root="$work/rootfs"
mkdir -p "$root"
while read -r from src dest; do
  if [ "$from" = build ]; then
    case "$src" in
      /out/*) path="$stage/${src#/out/}" ;;
      *) path="$src" ;;
    esac
  else
    path="$repo/$src"
  fi
  if [ -d "$path" ]; then
    mkdir -p "$root$dest"
    cp -a "$path/." "$root$dest"
  else
    case "$dest" in */) dest="$dest$(basename "$src")" ;; esac
    mkdir -p "$(dirname "$root$dest")"
    cp -L --preserve=mode "$path" "$root$dest"
  fi
done < <(copies)

# Every library the binaries load must be in the image, at the path the loader looks for it.
for b in rotor-drainer rotor-selector; do
  while read -r lib; do
    if [ ! -f "$root$lib" ]; then
      echo "tools/image.sh: $b needs $lib (ldd), which tools/image-files.txt does not copy; add it there and to the Dockerfile" >&2
      exit 1
    fi
  done < <(ldd "$stage/$b" | grep -o '/[^ ]*' || true)
done

# 4. One reproducible layer.
(cd "$root" && find . -mindepth 1 -printf '%P\n' | LC_ALL=C sort) >"$work/paths"
tar --create --file "$work/layer.tar" --directory "$root" --no-recursion --files-from "$work/paths" \
  --format=gnu --mtime=@0 --owner=0 --group=0 --numeric-owner

# The image, through a registry served on loopback for this build only.
"$crane" registry serve --address 127.0.0.1:0 2>"$work/registry.log" &
registry_pid=$!
port=""
for _ in $(seq 100); do
  port=$(sed -n 's/.*serving on port \([0-9]*\).*/\1/p' "$work/registry.log")
  [ -n "$port" ] && break
  sleep 0.1
done
if [ -z "$port" ]; then
  echo "tools/image.sh: crane registry serve did not start:" >&2
  cat "$work/registry.log" >&2
  exit 1
fi
local_ref="127.0.0.1:$port/rotor"
"$crane" append --oci-empty-base --new_layer "$work/layer.tar" --new_tag "$local_ref:layer" >/dev/null 2>"$work/crane.log" \
  || { cat "$work/crane.log" >&2; exit 1; }
# The config the Dockerfile's final stage gives (USER, CMD, WORKDIR, ENV, LABEL).
config=(
  --set-platform linux/amd64
  --user 65532:65532
  --cmd rotor-drainer,--help
  --workdir /
  --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
  --label "org.opencontainers.image.version=$version"
  --label "org.opencontainers.image.source=https://github.com/rotor-dev/rotor"
)
"$crane" mutate "$local_ref:layer" "${config[@]}" --tag "$local_ref:$version" >/dev/null 2>"$work/crane.log" \
  || { cat "$work/crane.log" >&2; exit 1; }
"$crane" pull --format=oci "$local_ref:$version" "$work/oci" 2>"$work/crane.log" \
  || { cat "$work/crane.log" >&2; exit 1; }
"$crane" mutate "$local_ref:layer" "${config[@]}" --tag "$repository:$version" --output "$work/image.tar" 2>"$work/crane.log" \
  || { cat "$work/crane.log" >&2; exit 1; }
digest=$("$crane" digest "$local_ref:$version")
kill "$registry_pid" 2>/dev/null || true
wait "$registry_pid" 2>/dev/null || true
registry_pid=""

# Sizes: the blobs as pushed (compressed layer, config, manifest) and the binaries.
manifest="$work/oci/blobs/sha256/${digest#sha256:}"
if [ ! -f "$manifest" ]; then
  echo "tools/image.sh: the OCI layout has no manifest $digest" >&2
  exit 1
fi
compressed=$(stat -c %s "$manifest")
for size in $(grep -o '"size":[0-9]*' "$manifest" | cut -d: -f2); do
  compressed=$((compressed + size))
done
binaries=$(( $(stat -c %s "$stage/rotor-drainer") + $(stat -c %s "$stage/rotor-selector") ))
layer=$(stat -c %s "$work/layer.tar")
mib() { awk -v b="$1" 'BEGIN { printf "%.1f MiB", b / 1048576 }'; }
sboms=$(cd "$stage/sbom" && for f in *.cdx.json; do printf '%s %s bytes, ' "$f" "$(stat -c %s "$f")"; done)
{
  echo "image     $repository:$version"
  echo "digest    $digest"
  echo "size      $(mib "$compressed") compressed ($compressed bytes: layer, config, manifest)"
  echo "layer     $(mib "$layer") uncompressed ($(wc -l <"$work/paths") entries)"
  echo "binaries  $(mib "$binaries") uncompressed (rotor-drainer $(stat -c %s "$stage/rotor-drainer"), rotor-selector $(stat -c %s "$stage/rotor-selector") bytes)"
  echo "sbom      /usr/share/rotor/sbom/: ${sboms%, }"
} >"$work/summary"
echo "$digest" >"$work/digest"
# The SBOMs beside the image, as in it.
cp -a "$stage/sbom" "$work/sbom"
rm -rf "$work/out" "$work/rootfs" "$work/layer.tar" "$work/paths" "$work/registry.log" "$work/crane.log"

rm -rf "$out"
mv "$work" "$out"
trap - EXIT
# Keep the three newest images: older ones are of sources long changed.
find "$image_cache" -mindepth 1 -maxdepth 1 -type d -name '????????????????' -printf '%T@ %p\n' \
  | sort -rn | tail -n +4 | cut -d' ' -f2- | xargs -r rm -rf
cat "$out/summary" >&2
echo "built in $((SECONDS - start)) s" >&2
echo "$out"
