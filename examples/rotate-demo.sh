#!/usr/bin/env bash
# rotor's main job, live, on a simulated cluster with the real binaries: builds rotor-sim,
# rotor-drainer and rotor-selector (release), then runs `rotor-sim demo`, which upgrades the
# cluster, runs the selector on a CronJob-like schedule and the drainer, and shows progress until
# every out-of-date node is replaced. Flags go to the demo (`--help` lists them), e.g.
#
#   bash examples/rotate-demo.sh
#   bash examples/rotate-demo.sh --provider aws        # image drift, against moto
#   bash examples/rotate-demo.sh --selector-command examples/selectors/kubelet-behind.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p rotor-sim -p rotor-drainer -p rotor-selector --bins
exec "${CARGO_TARGET_DIR:-target}/release/rotor-sim" demo "$@"
