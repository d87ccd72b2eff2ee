#!/usr/bin/env bash
# The whole test suite: set up the machine, lint the man pages, run every test of the workspace.
# Tests that start sessions take a lock (/run/drums/test.lock) so they run one at a time.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/pipelines/setup.sh"
cd "$here"
cargo test --workspace --release -- --test-threads=2
