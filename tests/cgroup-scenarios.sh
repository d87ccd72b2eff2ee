#!/bin/sh
# drums-cgroup on a real kernel: the scenarios run by tests/cgroup.rs on this host (cgroup v1 here) and by
# tests/cgroup_v2_qemu.rs inside a QEMU guest on a real cgroup v2 (busybox sh). Same steps, same output,
# checked by the same Rust code (tests/cgroup_check.rs). POSIX sh only: the guest has nothing else.
#
# Usage: cgroup-scenarios.sh SCENARIO...   (limits pids hog sigkill freeze fail)
# Needs drums-cgroup and cgroup-probe on PATH and DRUMS_STATE_DIR. Prints `DRUMS-CG <scenario> <key> <value>`.
set -u
W=$(mktemp -d /tmp/drums-cg.XXXXXX)
out() { echo "DRUMS-CG $S $*"; }

# A session whose init waits for $W/go, then runs $1.
session() {
  rm -f "$W/go"
  cgroup-probe spawn-session "$DRUMS_STATE_DIR" "while [ ! -e $W/go ]; do sleep 0.05; done; $1" > "$W/s.json" || { out error spawn-session; return 1; }
  id=$(cgroup-probe get id < "$W/s.json")
  init=$(cgroup-probe get ns.init_pid < "$W/s.json")
  ledger="$DRUMS_STATE_DIR/sessions/$id/ledger.jsonl"
  out session "$id $init"
}
create() {
  drums-cgroup create "$@" < "$W/s.json" > "$W/c.json" 2> "$W/c.err"
  rc=$?
  out create-exit $rc
  [ -s "$W/c.err" ] && out create-err "$(tail -n 1 "$W/c.err")"
  [ $rc = 0 ] && out record "$(cat "$W/c.json")"
  return $rc
}
# The limit files as the kernel shows them, whatever the version.
raw() {
  for p in $(cgroup-probe paths < "$W/c.json"); do
    for f in cpu.cfs_quota_us cpu.cfs_period_us memory.limit_in_bytes memory.memsw.limit_in_bytes pids.max cpu.max memory.max memory.swap.max; do
      [ -e "$p/$f" ] && out raw "$f $(cat "$p/$f")"
    done
    # v2 only (v1 has no such file): what the drums parent passes down, enabled by drums-cgroup itself.
    [ -e "${p%/*}/cgroup.subtree_control" ] && out parent-subtree-control "[$(cat "${p%/*}/cgroup.subtree_control")]"
  done
}
ledger_dump() { while read -r l; do out "ledger-$1" "$l"; done < "$ledger"; }
# Every hierarchy: is a directory of this session left? (Not just the recorded paths: all cgroup mounts.)
leftovers() {
  n=0
  for m in $(awk '$3 == "cgroup" || $3 == "cgroup2" {print $2}' /proc/mounts); do
    if [ -e "$m/drums/$id" ]; then out leftover "$m/drums/$id"; n=$((n + 1)); fi
  done
  out leftovers $n
}
wait_gone() { i=0; while kill -0 "$1" 2>/dev/null && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done; }
remove() {
  drums-cgroup remove < "$W/c.json" > "$W/r.json" 2> "$W/r.err"
  out remove-exit $?
  [ -s "$W/r.err" ] && out remove-err "$(tail -n 1 "$W/r.err")"
  out removed-record "$(cat "$W/r.json")"
}

# Limits applied and read back; the init inside; telemetry of a session doing work; removal.
s_limits() {
  session "cgroup-probe spin 1.5; cgroup-probe hog 33554432 1.0; sleep 0.3" || return
  create --cpus 1.5 --memory 256M --pids 64 || { kill -9 "$init"; return; }
  raw
  out proc-cgroup "$(tr '\n' ';' < "/proc/$init/cgroup")"
  ledger_dump created
  drums-cgroup watch --interval 200ms < "$W/c.json" > "$W/w.jsonl" 2> "$W/w.err" &
  wp=$!
  sleep 0.3
  touch "$W/go"
  wait $wp
  out watch-exit $?
  [ -s "$W/w.err" ] && out watch-err "$(tail -n 1 "$W/w.err")"
  while read -r l; do out sample "$l"; done < "$W/w.jsonl"
  remove
  ledger_dump removed
  leftovers
}

# pids.max: a fork beyond it fails with EAGAIN inside the session.
s_pids() {
  session "cgroup-probe fork-until-fail 200 > $W/forks" || return
  create --pids 16 || { kill -9 "$init"; return; }
  touch "$W/go"
  wait_gone "$init"
  out forks "$(cat "$W/forks")"
  remove
  leftovers
}

# A memory hog is contained: killed by the session's own OOM, the kernel's peak stays under the limit.
s_hog() {
  session "cgroup-probe hog 1073741824 > $W/hog.out; echo \$? > $W/hog.status; sleep 30" || return
  create --memory 64M || { kill -9 "$init"; return; }
  touch "$W/go"
  i=0; while [ ! -s "$W/hog.status" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i + 1)); done
  out hog-status "$(cat "$W/hog.status" 2>/dev/null)"
  drums-cgroup watch --samples 1 < "$W/c.json" > "$W/w.jsonl"
  out sample "$(cat "$W/w.jsonl")"
  kill -9 "$init"
  wait_gone "$init"
  remove
  leftovers
}

# Removal right after the whole session was killed with SIGKILL.
s_sigkill() {
  session "sleep 100 & sleep 100 & sleep 100 & wait" || return
  create || { kill -9 "$init"; return; }
  touch "$W/go"
  sleep 0.3
  kill -9 "$init"
  remove
  ledger_dump removed
  leftovers
}

# Freeze stops a counting loop; thaw restarts it.
s_freeze() {
  # Written aside and renamed: a reader never sees the file empty.
  session "i=0; while :; do i=\$((i + 1)); echo \$i > $W/count.t; mv $W/count.t $W/count; sleep 0.05; done" || return
  create || { kill -9 "$init"; return; }
  touch "$W/go"
  sleep 0.5
  drums-cgroup freeze < "$W/c.json" > /dev/null 2> "$W/f.err"
  out freeze-exit $?
  for p in $(cgroup-probe paths < "$W/c.json"); do
    [ -e "$p/freezer.state" ] && out freezer-state "$(cat "$p/freezer.state")"
    [ -e "$p/cgroup.events" ] && out freezer-state "$(grep frozen "$p/cgroup.events")"
  done
  a=$(cat "$W/count"); sleep 0.6; b=$(cat "$W/count")
  out frozen-count "$a $b"
  drums-cgroup thaw < "$W/c.json" > /dev/null
  out thaw-exit $?
  sleep 0.6; c=$(cat "$W/count")
  out thawed-count "$b $c"
  kill -9 "$init"
  wait_gone "$init"
  remove
  leftovers
}

# A limit the kernel refuses (quota below 1 ms): the error keeps path and errno, nothing is left behind.
s_fail() {
  session "sleep 100" || return
  create --cpus 0.001
  ledger_dump after
  leftovers
  kill -9 "$init"
}

for S in "$@"; do
  out begin "$(date +%s)"
  "s_$S"
  out end "$(date +%s)"
done
rm -rf "$W"
