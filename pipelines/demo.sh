#!/usr/bin/env bash
# The main job on a built-in default: set up the machine, make a cold session, check that it is agent-ready,
# print its record, destroy it.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/pipelines/setup.sh"
export PATH="$here/target/release:$PATH"
rec=$(mktemp)
trap 'drums-sweep < "$rec" >/dev/null || true; rm -f "$rec"' EXIT
"$here/pipelines/cold.sh" > "$rec"
cat "$rec"
