#!/usr/bin/env bash
# Writes the SBOM of each named package's binary: a CycloneDX 1.5 JSON document per package,
# <out-dir>/<package>.cdx.json, listing every crate the binary is built from (name, version,
# licence, the sha256 Cargo.lock records, purl) and the dependency graph between them. Run by
# tools/image.sh and the Dockerfile's build stage alike, so both images carry the same SBOMs:
#
#   tools/sbom.sh <out-dir> <package>...      e.g. tools/sbom.sh /out/sbom rotor-drainer rotor-selector
#
# The tool is cargo-cyclonedx, CycloneDX's own generator for Cargo, pinned below and installed by
# tools/cargo-tool.sh. It reads `cargo metadata` (Cargo.lock's resolution, for this machine's
# target only: the image's platform) and follows each package's normal and build dependencies,
# not its dev-dependencies. Features are those of the whole workspace's resolution, so a crate
# another member turns on may be listed that the binary does not link: the list errs on the side
# of too much, never too little.
#
# cargo-cyclonedx writes each SBOM beside its Cargo.toml, so it runs on a copy of the workspace's
# manifests and sources in a scratch directory, never in the checkout. With SOURCE_DATE_EPOCH=0
# it leaves out the random serial number and dates the document 1970-01-01, and the scratch
# directory's path in the workspace crates' ids is replaced by /src (the Dockerfile's WORKDIR):
# the same sources give the same bytes, so the image stays reproducible.
set -euo pipefail

version=0.5.9
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"

if [ "$#" -lt 2 ]; then
  echo "usage: tools/sbom.sh <out-dir> <package>..." >&2
  exit 2
fi
out=$1
shift

cyclonedx=$("$here/cargo-tool.sh" cargo-cyclonedx "$version" | tail -n 1)
host=$(rustc -vV | sed -n 's/^host: //p')

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# The workspace as cargo sees it: the manifests, Cargo.lock and the members' sources (cargo
# finds the targets by the files), not target directories.
(cd "$repo" && find Cargo.toml Cargo.lock crates tests -name target -prune -o -type f -print0 \
  | tar --create --null --files-from - --file -) | tar --extract --directory "$scratch"

SOURCE_DATE_EPOCH=0 "$cyclonedx" cyclonedx --manifest-path "$scratch/Cargo.toml" \
  --format json --spec-version 1.5 --all --target "$host" --quiet >&2

mkdir -p "$out"
for package in "$@"; do
  sbom=$(find "$scratch" -name "$package.cdx.json" -print -quit)
  if [ -z "$sbom" ]; then
    echo "tools/sbom.sh: cargo-cyclonedx wrote no SBOM for $package (not a workspace member?)" >&2
    exit 1
  fi
  sed "s#file://$scratch#file:///src#g" "$sbom" >"$out/$package.cdx.json"
  chmod 0644 "$out/$package.cdx.json"
done
