#!/usr/bin/env bash
# The restore path: a checkpoint record in (stdin, or --checkpoint ID), N ready, reseeded siblings out.
#   pipelines/restore.sh --count 2 < checkpoint.json > siblings.json
# Arguments go to drums-restore. Extra arguments: DRUMS_RESEED_ARGS, DRUMS_READY_ARGS.
# Each sibling that fails a later stage is destroyed; the script then exits nonzero after the others.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
[ -x "$here/target/release/drums-restore" ] && export PATH="$here/target/release:$PATH"
export DRUMS_OWNER=${DRUMS_OWNER:-$PPID}
restored=$(mktemp)
trap 'rm -f "$restored"' EXIT
status=0
drums-restore "$@" > "$restored" || status=$?
while IFS= read -r rec; do
  # shellcheck disable=SC2086
  if ! out=$(printf '%s\n' "$rec" | drums-reseed ${DRUMS_RESEED_ARGS:-} | drums-ready ${DRUMS_READY_ARGS:-}); then
    printf '%s\n' "$rec" | drums-sweep >/dev/null || true
    status=5
    continue
  fi
  printf '%s\n' "$out"
done < "$restored"
exit "$status"
