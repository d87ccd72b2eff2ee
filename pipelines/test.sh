#!/usr/bin/env bash
# The whole test suite: set up the machine, lint the man pages, run every test of the workspace.
# One test at a time: this machine has 2 cores, and tests that start sessions or drive CRIU and cgroups must
# not measure or audit each other (they also take /run/drums/test.lock against other runs).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/pipelines/setup.sh"
cd "$here"
cargo test --workspace --release -- --test-threads=1
