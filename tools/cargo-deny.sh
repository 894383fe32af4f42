#!/usr/bin/env bash
# Checks rotor's dependency tree against deny.toml with cargo-deny, pinned below and installed
# into ~/.cache/rotor/tools by tools/cargo-tool.sh (compiled from source the first time).
#
#   tools/cargo-deny.sh             install if needed, then check
#   tools/cargo-deny.sh --install   install only (.ci/run starts this in the background)
#
# licenses, bans and sources are always checked: they need only Cargo.lock and the crates'
# manifests (cargo fetches those from crates.io like any build). advisories need the RustSec
# database, a Git repository on github.com that the build machines cannot reach, so they are
# checked only when a copy is on the machine, and never fetched here:
#   - $ROTOR_ADVISORY_DB: a clone of https://github.com/rustsec/advisory-db, or a directory
#     `cargo deny fetch db` filled (it holds advisory-db-<hash>/);
#   - otherwise cargo-deny's own default, $CARGO_HOME/advisory-dbs (~/.cargo/advisory-dbs),
#     filled and refreshed by `cargo deny fetch db` on a machine with access to GitHub.
# Without either the advisories are skipped, saying so, and the script does not fail on that.
# A database older than 90 days fails the check (cargo-deny's maximum-db-staleness): refresh it.
set -euo pipefail

version=0.20.2
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(dirname "$here")"

deny=$("$here/cargo-tool.sh" cargo-deny "$version" | tail -n 1)
if [ "${1:-}" = "--install" ]; then
  "$deny" --version
  exit 0
fi
[ "$#" -eq 0 ] || { echo "usage: tools/cargo-deny.sh [--install]" >&2; exit 2; }

cd "$repo"
"$deny" --version
# Runs `cargo-deny check` on the named checks: --locked, Cargo.lock as committed. Warnings
# (several versions of one crate) are printed without the inclusion graph of each (1,500 lines);
# errors fail, and are printed again with theirs (which crate pulls the offender in).
check() {
  if "$deny" --locked "${global[@]}" check --hide-inclusion-graph --show-stats "$@"; then
    return 0
  fi
  echo "cargo-deny check $* failed; again with the inclusion graphs:" >&2
  "$deny" --locked "${global[@]}" check "$@" || true
  exit 1
}
global=()
check licenses bans sources

# The directory cargo-deny's db-path must name: the one holding advisory-db-<hash>/.
cargo_home="${CARGO_HOME:-$HOME/.cargo}"
db_root="" tmp=""
trap 'if [ -n "$tmp" ]; then rm -rf "$tmp"; fi' EXIT
if [ -n "${ROTOR_ADVISORY_DB:-}" ]; then
  if [ -d "$ROTOR_ADVISORY_DB/crates" ]; then
    # A clone of advisory-db itself: give it the name cargo-deny derives from the default URL
    # (https://github.com/rustsec/advisory-db) in a directory of its own.
    tmp=$(mktemp -d)
    ln -s "$(cd "$ROTOR_ADVISORY_DB" && pwd)" "$tmp/advisory-db-3157b0e258782691"
    db_root=$tmp
  elif compgen -G "$ROTOR_ADVISORY_DB/advisory-db-*/crates" >/dev/null; then
    db_root=$(cd "$ROTOR_ADVISORY_DB" && pwd)
  else
    echo "ROTOR_ADVISORY_DB=$ROTOR_ADVISORY_DB is neither a clone of rustsec/advisory-db nor a directory holding advisory-db-<hash>/ (as \`cargo deny fetch db\` makes)" >&2
    exit 1
  fi
elif compgen -G "$cargo_home/advisory-dbs/advisory-db-*/crates" >/dev/null; then
  db_root="$cargo_home/advisory-dbs"
fi

if [ -z "$db_root" ]; then
  echo "cargo-deny: advisories SKIPPED: no RustSec advisory database on this machine, and it is"
  echo "  not fetched (no access to github.com here). Set ROTOR_ADVISORY_DB to a clone of"
  echo "  https://github.com/rustsec/advisory-db, or run \`cargo deny fetch db\` where GitHub is"
  echo "  reachable ($cargo_home/advisory-dbs), to check them."
  exit 0
fi

# deny.toml with db-path set to that directory; --offline: read the database as it is.
tmp=${tmp:-$(mktemp -d)}
sed "s|^\[advisories\]\$|[advisories]\ndb-path = \"$db_root\"|" deny.toml >"$tmp/deny.toml"
echo "cargo-deny: advisories from $db_root"
global=(--offline --config "$tmp/deny.toml")
check advisories
