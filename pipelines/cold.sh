#!/usr/bin/env bash
# The cold path: a new session from nothing to agent-ready; prints its session record.
#   pipelines/cold.sh > session.json        destroy it with: drums-sweep < session.json
# Extra arguments per stage: DRUMS_OVERLAY_ARGS, DRUMS_NS_ARGS, DRUMS_DESKTOP_ARGS, DRUMS_READY_ARGS.
# The session runs in a user namespace of its own (drums(7), "Its own user namespace"); a session to be
# checkpointed needs host ids, which drums-ckpt can dump: DRUMS_OVERLAY_ARGS=--host-ids.
# Every session is under cgroup limits: drums-cgroup create runs between drums-ns and drums-desktop with
# DRUMS_CGROUP_ARGS (e.g. "--memory 8G --pids 2048"); unset or empty, drums-cgroup's defaults
# (drums-cgroup(1)); DRUMS_CGROUP_ARGS=none makes no cgroups (no limits, no freezer).
# The network policy (drums(7), "Network boundary") is DRUMS_NET (none, internet, allow:...), with
# DRUMS_UPLINK, DRUMS_NET_EXCEPT, DRUMS_NET_DNS, DRUMS_NET_RATE and DRUMS_NET_PROXY, read by drums-ns create; unset: none.
# The session's owner (drums(7)) is DRUMS_OWNER, default the process that runs this script's caller.
# If a stage fails, the partial session is destroyed from its ledger before the script exits.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
# DRUMS_TOOLS_DIR: another build's tools to run instead of this tree's (net-bench.py --before-tools).
tools=${DRUMS_TOOLS_DIR:-$here/target/release}
[ -x "$tools/drums-ns" ] && export PATH="$tools:$PATH"
export DRUMS_OWNER=${DRUMS_OWNER:-$PPID}
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
# Each stage's output is kept, so a failure can be destroyed from the last record that reached a file.
fail() {
  for f in "$stage"/3 "$stage"/2 "$stage"/1; do
    if [ -s "$f" ]; then drums-sweep < "$f" >/dev/null || true; break; fi
  done
  exit "$1"
}
# shellcheck disable=SC2086
drums-overlay create ${DRUMS_OVERLAY_ARGS:-} > "$stage/1" || fail $?
drums-ns create ${DRUMS_NS_ARGS:-} < "$stage/1" > "$stage/2" || fail $?
if [ "${DRUMS_CGROUP_ARGS:-}" != none ]; then
  # Limits before the desktop starts: on cgroup v1 memory already used stays charged to the old cgroup.
  # shellcheck disable=SC2086
  drums-cgroup create ${DRUMS_CGROUP_ARGS:-} < "$stage/2" > "$stage/2c" || fail $?
  mv "$stage/2c" "$stage/2"
fi
drums-desktop start ${DRUMS_DESKTOP_ARGS:-} < "$stage/2" > "$stage/3" || fail $?
drums-ready ${DRUMS_READY_ARGS:-} < "$stage/3" || fail $?
