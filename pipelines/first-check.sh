#!/usr/bin/env bash
# The first-check driver: one OSWorld task in blocks of rollouts on real sessions, two arms in ABBA order,
# an interference canary, per-rollout timings, host and per-session cgroup telemetry, and a summary that
# computes no verdict. Engineering validation of the driver only; see drums-first-check(7).
#   pipelines/first-check.sh --rollouts 3 --out run1 > run1.jsonl
# Arms:
#   post_setup  the block's first rollout does the task's setup on a cold session (made with host ids,
#               drums-overlay create --host-ids: drums-ckpt refuses a session in its own user namespace)
#               and checkpoints it (drums-ckpt --leave-running); every later rollout restores a sibling from that checkpoint
#               (pipelines/restore.sh --count 1: restore, reseed, ready) and skips the setup
#               or, with --reset pool, takes one from a warm pool of the checkpoint (drums-pool take),
#               filled once the checkpoint exists, outside the block clock (drums-pool fill)
#   no_reuse    every rollout gets a cold session of its own, destroyed at the next reset
# Every session runs under its own cgroups (--limits) and is watched by drums-cgroup watch.
# stdout: JSON Lines (first_check_rollout, first_check_block, first_check_summary); stderr: progress and,
# at the end, a table. Files in --out: rollouts.jsonl, blocks.jsonl, summary.json, report.txt,
# reset_times.png, sessions/ (each session's record), samples/ (its cgroup telemetry), host/, pool/, logs/.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
[ -x "$here/target/release/drums-ns" ] && export PATH="$here/target/release:$PATH"
# Everything this driver starts belongs to it: the cron sweep removes it once the driver is gone.
export DRUMS_OWNER=$$
prog=first-check
py=${DRUMS_PYTHON:-python3}

usage() {
  cat <<'EOF'
Usage: pipelines/first-check.sh [OPTIONS]

Run an OSWorld task in blocks of rollouts on real Drums sessions, arms in ABBA order, and report.

Options:
  --task FILE            OSWorld task JSON (default tests/data/osworld-e0df059f.json)
  --rollouts N           rollouts per block (default 3)
  --blocks LIST          arms of the blocks in order, comma-separated
                         (default post_setup,no_reuse,no_reuse,post_setup)
  --concurrency N        rollouts run at a time within a block (default 1)
  --limits C,M,P         per-session cgroup limits: CPUs, memory, tasks (default: drums-cgroup's)
  --reset MODE           post_setup's reset after the checkpoint: restore (default: restore, reseed,
                         ready per rollout) or pool (a warm pool of the checkpoint, filled outside
                         the block clock; each reset takes a parked sibling)
  --interval TIME        cgroup telemetry interval (default 200ms)
  --inject-fault SPEC    guest-kill@N: kill rollout N's guest (N counts rollouts of the whole run
                         from 1) after its setup, before the agent acts; reuse@N: rollout N skips its
                         reset and runs on the lane's previous session (its canary must be seen);
                         may be repeated
  --out DIR              where the files go (default ./first-check.UTCTIME)
  -h, --help             print this help

Exit status: 0 every rollout valid and nothing left behind; 1 a rollout invalid or something left;
2 usage; 4 environment; 5 the driver itself failed (a lane or the summary crashed; see the error object);
130 interrupted.
EOF
}

planned=""  # set by every exit the driver means; any other exit (a crash) becomes exit 5 in cleanup
die() { # exit kind message
  planned=1
  local msg=${3//\\/\\\\}
  msg=${msg//\"/\\\"}
  printf '{"drums":1,"type":"error","tool":"%s","kind":"%s","exit":%d,"message":"%s"}\n' "$prog" "$2" "$1" "$msg" >&2
  exit "$1"
}
log() { printf '%s: %s\n' "$prog" "$*" >&2; }

task=$here/tests/data/osworld-e0df059f.json
rollouts=3
blocks=post_setup,no_reuse,no_reuse,post_setup
concurrency=1
limits=
interval=200ms
reset_mode=restore
out=
faults=" " reuses=" "
while [ $# -gt 0 ]; do
  case $1 in
    -h|--help) usage; exit 0 ;;
    --task|--rollouts|--blocks|--concurrency|--limits|--interval|--reset|--inject-fault|--out)
      [ $# -ge 2 ] || die 2 usage "$1 needs a value"
      case $1 in
        --task) task=$2 ;; --rollouts) rollouts=$2 ;; --blocks) blocks=$2 ;; --concurrency) concurrency=$2 ;;
        --limits) limits=$2 ;; --interval) interval=$2 ;; --out) out=$2 ;; --reset) reset_mode=$2 ;;
        --inject-fault)
          [[ $2 =~ ^(guest-kill|reuse)@([0-9]+)$ ]] || die 2 usage "--inject-fault $2: expected guest-kill@N or reuse@N"
          if [ "${BASH_REMATCH[1]}" = reuse ]; then reuses+="${BASH_REMATCH[2]} "; else faults+="${BASH_REMATCH[2]} "; fi ;;
      esac
      shift 2 ;;
    *) die 2 usage "unknown option $1 (see --help)" ;;
  esac
done
[[ $rollouts =~ ^[1-9][0-9]*$ ]] || die 2 usage "--rollouts $rollouts: a positive integer"
[[ $concurrency =~ ^[1-9][0-9]*$ ]] || die 2 usage "--concurrency $concurrency: a positive integer"
# Unset: the tools' own default limits (drums-cgroup(1)), applied by drums-cgroup create and drums-restore.
cg_args=() restore_cg=()
if [ -n "$limits" ]; then
  [[ $limits =~ ^([0-9.]+),([0-9]+[KMGT]?),([0-9]+)$ ]] || die 2 usage "--limits $limits: expected CPUS,MEMORY,PIDS like 2,4G,4096"
  cg_args=(--cpus "${BASH_REMATCH[1]}" --memory "${BASH_REMATCH[2]}" --pids "${BASH_REMATCH[3]}")
  restore_cg=(--cgroup "$limits")
fi
IFS=, read -r -a arms <<< "$blocks"
[ ${#arms[@]} -gt 0 ] || die 2 usage "--blocks: no arm given"
for a in "${arms[@]}"; do
  case $a in post_setup|drums_post_setup|no_reuse|drums_no_reuse) ;; *) die 2 usage "--blocks: unknown arm $a (post_setup, no_reuse)" ;; esac
done
case $reset_mode in restore|pool) ;; *) die 2 usage "--reset $reset_mode: restore or pool" ;; esac
[ -r "$task" ] || die 2 usage "--task $task: not readable"
[ "$(id -u)" = 0 ] || die 4 environment "run as root (sessions need namespaces, mounts, cgroups)"
for t in drums-overlay drums-ns drums-cgroup drums-desktop drums-ready drums-ckpt drums-sweep jq "$py"; do
  command -v "$t" >/dev/null || die 4 environment "$t is not on PATH (build the tools: cargo build --release --workspace)"
done
if [ "$reset_mode" = pool ]; then
  command -v drums-pool >/dev/null || die 4 environment "drums-pool is not on PATH (build the tools: cargo build --release --workspace)"
fi
out=${out:-first-check.$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"/{raw,samples,sessions,host,pool,logs,tmp,live} || die 4 environment "cannot make $out"
out=$(cd "$out" && pwd)
rm -f "$out"/raw/* "$out"/tmp/* "$out"/live/* "$out"/samples/* "$out"/sessions/* "$out"/host/* "$out"/pool/* "$out"/logs/*

# Times are integer microseconds from bash's clock (no fork per reading); records carry seconds.
now() { printf -v "$1" '%s' "${EPOCHREALTIME/./}"; }
secs() { if [ "$1" = null ]; then echo null; else printf '%d.%06d' $(($1 / 1000000)) $(($1 % 1000000)); fi; }

# What is running now, so that an interrupted driver removes it: session records in live/, watchers' pids
# in live/ID.watch, checkpoint records in tmp/ckpt.B.json, the checkpoint id of a block's pool in tmp/pool.B.
destroy() { # RECORD-FILE LOG: destroy the session; its watcher ends by itself after a final sample
  local id; id=$(jq -r .id "$1")
  drums-sweep < "$1" >> "$2" 2>&1
  local rc=$?
  [ -e "$out/live/$id.watch" ] && mv "$out/live/$id.watch" "$out/tmp/reap.$id"
  rm -f "$out/live/$id.json"
  return $rc
}
reap_watchers() { # wait (at most 5 s each) for the watchers of destroyed sessions to write their last sample
  local f w
  for f in "$out"/tmp/reap.* "$out"/live/*.watch; do
    [ -e "$f" ] || continue
    w=$(cat "$f")
    for _ in $(seq 50); do kill -0 "$w" 2>/dev/null || break; sleep 0.1; done
    kill "$w" 2>/dev/null
    rm -f "$f"
  done
}
cleanup() {
  local rc=$? f
  # Lanes still running (an interrupted block) stop first, so that they start nothing more.
  [ ${#lane_pids[@]} -gt 0 ] && kill "${lane_pids[@]}" 2>/dev/null && wait "${lane_pids[@]}" 2>/dev/null
  for f in "$out"/live/*.json; do [ -e "$f" ] && destroy "$f" "$out/logs/cleanup.log"; done
  for f in "$out"/tmp/pool.*; do [ -e "$f" ] && drain_pool "$f" "$out/logs/cleanup.log" > /dev/null; done
  for f in "$out"/tmp/ckpt.*.json; do [ -e "$f" ] && remove_checkpoint "$f"; done
  [ -n "${hostmon:-}" ] && kill "$hostmon" 2>/dev/null
  reap_watchers
  if [ -z "$planned" ]; then
    # Not an exit the driver meant: a crash of the driver itself (an unset variable, a failed builtin).
    planned=1
    die 5 failed "the driver failed (shell exit $rc); what it held was destroyed, see $out/logs"
  fi
}
lane_pids=()
driver_failed=""
trap cleanup EXIT
trap 'planned=1; log "interrupted"; exit 130' INT TERM

drain_pool() { # POOL-FILE LOG: destroy what is still parked in a block's pool, remove its spool; the drain record on stdout
  drums-pool drain --checkpoint "$(cat "$1")" < /dev/null 2>>"$2"
  local rc=$?
  rm -f "$1"
  return $rc
}
remove_checkpoint() { # CHECKPOINT-RECORD-FILE: the checkpoint's directory (drums-ckpt made it; nobody else uses it)
  local dir; dir=$(jq -r .dir "$1")
  case $dir in */c-[0-9a-z]*) rm -rf -- "$dir" ;; esac
  # Its mapped files (drums-ckpt(1)) live in a directory of their own.
  dir=$(jq -r '.mapped.dir // empty' "$1")
  case $dir in */c-[0-9a-z]*) rm -rf -- "$dir" ;; esac
  rm -f "$1"
}

# A cold session under its own cgroups, ready: pipelines/cold.sh with drums-cgroup create before the
# desktop starts (so that the desktop is charged to the session). Record on stdout; a failure destroys
# whatever was made and returns 5. ARM post_setup makes it with host ids (--host-ids), as a session to
# be checkpointed must be; any other arm's is in a user namespace of its own, the default.
cold_session() { # LOG ARM
  local s; s=$(mktemp -d "$out/tmp/cold.XXXXXX")
  local ids=(); [ "$2" = post_setup ] && ids=(--host-ids)
  if drums-overlay create "${ids[@]}" > "$s/1" 2>>"$1" && drums-ns create < "$s/1" > "$s/2" 2>>"$1" &&
     drums-cgroup create "${cg_args[@]}" < "$s/2" > "$s/3" 2>>"$1" &&
     drums-desktop start < "$s/3" > "$s/4" 2>>"$1" && drums-ready < "$s/4" > "$s/5" 2>>"$1"; then
    cat "$s/5"; rm -rf "$s"; return 0
  fi
  local f
  for f in 5 4 3 2 1; do
    if [ -s "$s/$f" ]; then drums-sweep < "$s/$f" >> "$1" 2>&1; break; fi
  done
  rm -rf "$s"
  return 5
}
restore_session() { # CHECKPOINT-RECORD-FILE LOG
  "$here/pipelines/restore.sh" --count 1 "${restore_cg[@]}" < "$1" 2>>"$2"
}
# Put a new session in place for a lane: live/ (so that it is destroyed if the driver stops), its
# telemetry watcher, the lane's record file.
adopt() { # RECORD-FILE LANE-FILE
  local id; id=$(jq -r .id "$1")
  cp "$1" "$out/live/$id.json"
  cp "$1" "$out/sessions/$id.json"
  drums-cgroup watch --interval "$interval" < "$out/sessions/$id.json" > "$out/samples/$id.jsonl" 2>>"$out/logs/watch.log" &
  echo $! > "$out/live/$id.watch"
  mv "$1" "$2"
}
last_error() { # LOG: the message of the last JSON error in a log, or its last line
  local m; m=$(grep '"type":"error"' "$1" 2>/dev/null | tail -1 | jq -r .message 2>/dev/null)
  [ -n "$m" ] && echo "$m" || tail -1 "$1" 2>/dev/null
}

# One rollout. ARM BLOCK INDEX GLOBAL LANE. The lane's current session (tmp/lane.B.L.json) is the one
# external preparation or the lane's previous rollout left; the reset replaces it.
rollout() {
  local arm=$1 b=$2 i=$3 g=$4 lane=$5
  local cur=$out/tmp/lane.$b.$lane.json fresh=$out/tmp/lane.$b.$lane.fresh ckpt=$out/tmp/ckpt.$b.json
  local log=$out/logs/b${b}_r${i}.log tag="block $b $arm rollout $i"
  local t0 t1 t2 fault="" reset_kind destroy_us=null create_us=null reset_us=null setup=0 ckpt_us=null
  local injected="" sid=null begin='{}' finish='{}' rc ckpt_made=false
  : > "$log"
  now t0
  # 1. Reset: the fresh session of external preparation is used as it is; otherwise the lane's previous
  # session is destroyed and a new one made: restored from the block's checkpoint (post_setup), or cold.
  if [ -e "$fresh" ] && [ -s "$cur" ]; then
    reset_kind=fresh; rm -f "$fresh"
  elif [[ $reuses == *" $g "* ]] && [ -s "$cur" ]; then
    # Induced fault: no reset at all, as if the revert had reverted nothing; the canary must see it.
    reset_kind=reused injected=reuse
    log "$tag: injected fault: no reset, the rollout runs on the lane's previous session"
  else
    rm -f "$fresh"
    if [ -s "$cur" ]; then
      now t1; destroy "$cur" "$log" || fault="reset: destroying the previous session left something (see $log)"
      now t2; destroy_us=$((t2 - t1)); rm -f "$cur"
    fi
    now t1
    if [ "$arm" = post_setup ] && [ -s "$out/tmp/pool.$b" ]; then
      # The pool was filled outside the clock; a take claims a parked sibling, thaws and re-checks it.
      reset_kind=pool
      drums-pool take --checkpoint "$(cat "$out/tmp/pool.$b")" --wait 10 < /dev/null > "$cur.new" 2>>"$log" ||
        { fault="reset: pool take failed: $(last_error "$log")"; rm -f "$cur.new"; }
    elif [ "$arm" = post_setup ] && [ -s "$ckpt" ]; then
      reset_kind=restore
      restore_session "$ckpt" "$log" > "$cur.new" || { fault="reset: restore failed: $(last_error "$log")"; rm -f "$cur.new"; }
    else
      reset_kind=$([ "$arm" = post_setup ] && echo cold || echo recreate)
      cold_session "$log" "$arm" > "$cur.new" || { fault="reset: cold session failed: $(last_error "$log")"; rm -f "$cur.new"; }
    fi
    now t2; create_us=$((t2 - t1)); reset_us=$(( ${destroy_us/null/0} + create_us ))
    [ -s "$cur.new" ] && adopt "$cur.new" "$cur"
  fi
  # A rollout on a new cold session does the setup (and on post_setup makes the checkpoint); a restored
  # session is set up already, and a reused one is the previous rollout's.
  case $reset_kind in restore|pool|reused) ;; *) setup=1 ;; esac
  if [ -z "$fault" ]; then
    sid=$(jq -c .id "$cur")
    local url; url=$(jq -r .desktop.guest_url "$cur")
    # 2. Wait for the guest, check the canary, run the task's setup.
    begin=$("$py" "$here/pipelines/osworld_task.py" begin --url "$url" --task "$task" $([ $setup = 1 ] && echo --setup) 2>>"$log")
    rc=$?
    [ -n "$begin" ] || begin='{}'
    [ $rc = 0 ] || fault=$(jq -r '.fault // "begin: the task runner failed"' <<< "$begin")
    # 3. post_setup: checkpoint the set-up session, which keeps running for this rollout.
    if [ -z "$fault" ] && [ "$arm" = post_setup ] && [ $setup = 1 ]; then
      now t1
      if drums-ckpt --leave-running < "$cur" > "$ckpt.new" 2>>"$log"; then mv "$ckpt.new" "$ckpt"; ckpt_made=true
      else fault="checkpoint: $(last_error "$log")"; rm -f "$ckpt.new"; fi
      now t2; ckpt_us=$((t2 - t1))
    fi
    # Induced fault: the guest killed mid-rollout, after setup, before the agent acts.
    if [ -z "$fault" ] && [[ $faults == *" $g "* ]]; then
      local gp; gp=$(jq -r '.desktop.processes[] | select(.role == "guest") | .host_pid' "$cur")
      if [ "$(cat "/proc/$gp/comm" 2>/dev/null)" = drums-guest ]; then
        kill -KILL "$gp" && injected+="${injected:+,}guest-kill" && log "$tag: injected fault: killed the guest (host pid $gp)"
      else
        log "$tag: cannot inject the fault: host pid $gp is not drums-guest"
      fi
    fi
    # 4. The agent acts, the evaluator scores, the canary is left for the next rollout to look for.
    if [ -z "$fault" ]; then
      finish=$("$py" "$here/pipelines/osworld_task.py" finish --url "$url" --task "$task" --marker "first-check $$ block $b rollout $i session ${sid//\"/}" 2>>"$log")
      rc=$?
      [ -n "$finish" ] || finish='{}'
      [ $rc = 0 ] || fault=$(jq -r '.fault // "finish: the task runner failed"' <<< "$finish")
    fi
  fi
  now t1
  local cgroup=null restore=null reseed=null pool_fill=null
  if [ -s "$cur" ]; then
    cgroup=$(jq -c '.cgroup // null' "$cur")
    # A pool sibling's restore and reseed were the filler's, outside the clock: not parts of this reset.
    if [ "$reset_kind" = pool ]; then pool_fill=$(jq -c '.pool.fill_s // null' "$cur")
    else restore=$(jq -c '.restore.times // null' "$cur"); reseed=$(jq -c '.reseed.total_s // null' "$cur"); fi
  fi
  jq -nc --arg arm "drums_$arm" --argjson block "$b" --argjson index "$i" --argjson global "$g" --argjson lane "$lane" \
    --argjson session "$sid" --arg reset_kind "$reset_kind" --argjson reset_s "$(secs "$reset_us")" \
    --argjson destroy_s "$(secs "$destroy_us")" --argjson create_s "$(secs "$create_us")" \
    --argjson ckpt_s "$(secs "$ckpt_us")" --argjson ckpt_made "$ckpt_made" --argjson setup "$setup" --argjson wall_s "$(secs $((t1 - t0)))" \
    --argjson begin "$begin" --argjson finish "$finish" --arg fault "$fault" --arg injected "$injected" \
    --argjson cgroup "$cgroup" --argjson restore "$restore" --argjson reseed "$reseed" --argjson pool_fill "$pool_fill" --argjson t0 "$(secs "$t0")" '
    {arm: $arm, block: $block, index: $index, rollout: $global, lane: $lane, session: $session, t_start: $t0,
     reset_kind: $reset_kind, reset_s: $reset_s, reset_parts: {destroy_s: $destroy_s, create_s: $create_s,
       restore_times: $restore, reseed_s: $reseed, pool_fill_s: $pool_fill},
     setup_s: (if $setup == 1 then $begin.setup_s else null end),
     checkpoint_s: $ckpt_s,
     first_rollout_work_s: (if $arm == "drums_post_setup" and $setup == 1 and $ckpt_made and $begin.setup_s != null
                            then ($begin.setup_s + $ckpt_s) else null end),
     action_s: $finish.action_s, evaluation_s: $finish.eval_s, wall_s: $wall_s,
     score: $finish.score, score_before_action: $finish.score_before_action,
     canary: ($begin.canary // null), canary_seen: ($begin.canary_seen // []),
     canary_written: ($finish.canary_written // null),
     guest_wait_s: $begin.wait_s, canary_check_s: $begin.canary_check_s, canary_write_s: $finish.canary_write_s,
     precheck_s: $finish.precheck_s, setup_steps: $begin.setup_steps,
     fault: (if $fault == "" then null else $fault end), injected_fault: (if $injected == "" then null else $injected end),
     cgroup: $cgroup}' > "$out/raw/b${b}_r${i}.json"
  log "$tag: reset $reset_kind $(secs "$reset_us" | sed 's/null/-/') s, score $(jq -r '.score // "-"' <<< "$finish"), canary $(jq -r '.canary // "-"' <<< "$begin")${fault:+, FAULT: $fault}"
}

# One block: external preparation (outside the block clock), the rollouts, teardown.
block() { # BLOCK ARM
  local b=$1 arm=$2 t0 t1 tp0 tp1 tf0 tf1 fill_us=0 prep_n lane i g fault="" pool=null
  local log=$out/logs/block$b.log
  : > "$log"
  log "block $b: $arm, $rollouts rollouts, concurrency $concurrency"
  # External preparation: the sessions the block's first rollouts start on, made before the clock (as a
  # pool would). post_setup needs one (its first rollout sets up and checkpoints); no_reuse one per lane.
  prep_n=1
  [ "$arm" = no_reuse ] && prep_n=$(( concurrency < rollouts ? concurrency : rollouts ))
  now tp0
  for ((lane = 0; lane < prep_n; lane++)); do
    if cold_session "$log" "$arm" > "$out/tmp/prep.$b.$lane"; then
      adopt "$out/tmp/prep.$b.$lane" "$out/tmp/lane.$b.$lane.json"
      touch "$out/tmp/lane.$b.$lane.fresh"
    else
      rm -f "$out/tmp/prep.$b.$lane"; fault="external preparation: cold session failed: $(last_error "$log")"
    fi
  done
  now tp1
  "$py" "$here/pipelines/first_check_report.py" hostmon > "$out/host/block$b.json" 2>>"$log" &
  hostmon=$!
  now t0
  local first=1
  if [ "$arm" = post_setup ]; then
    # Sequential until the checkpoint exists (a fault before it is made moves the setup to the next).
    while [ $first -le "$rollouts" ] && [ ! -s "$out/tmp/ckpt.$b.json" ]; do
      rollout "$arm" "$b" "$first" $(( b * rollouts + first )) 0
      first=$((first + 1))
    done
  fi
  # --reset pool: once the checkpoint exists, a warm pool of it is filled with one parked sibling per
  # remaining rollout. External preparation: the block clock and the host telemetry pause meanwhile.
  if [ "$arm" = post_setup ] && [ "$reset_mode" = pool ] && [ -s "$out/tmp/ckpt.$b.json" ] && [ "$first" -le "$rollouts" ]; then
    local want=$((rollouts - first + 1)) parked
    kill -USR1 "$hostmon" 2>/dev/null
    now tf0
    jq -r .id "$out/tmp/ckpt.$b.json" > "$out/tmp/pool.$b"
    drums-pool fill --depth "$want" "${restore_cg[@]}" < "$out/tmp/ckpt.$b.json" > "$out/pool/block$b.fill.jsonl" 2>>"$log"
    now tf1; fill_us=$((tf1 - tf0))
    kill -USR2 "$hostmon" 2>/dev/null
    parked=$(jq -r 'select(.type == "pool_fill") | .depth' "$out/pool/block$b.fill.jsonl" 2>/dev/null | tail -1)
    [ "$parked" = "$want" ] || fault+="${fault:+; }pool fill: ${parked:-no} of $want siblings parked ($(last_error "$log"))"
    pool=$(jq -sc --argjson want "$want" --argjson fill_s "$(secs "$fill_us")" \
      '(map(select(.type == "pool_fill")) | last) as $f |
       {spool: ($f.pool // null), fill_s: $fill_s, depth_wanted: $want, parked: ($f.depth // null), made: ($f.made // null),
        failed: ($f.failed // null), stopped: ($f.stopped // null), drain: null}' "$out/pool/block$b.fill.jsonl" 2>/dev/null) ||
      pool="{\"fill_s\":$(secs "$fill_us"),\"depth_wanted\":$want,\"drain\":null}"
    log "block $b: pool of $want filled outside the clock in $(secs "$fill_us") s: ${parked:-no} parked"
  fi
  lane_pids=()
  for ((lane = 0; lane < concurrency; lane++)); do
    (
      for ((i = first + lane; i <= rollouts; i += concurrency)); do
        rollout "$arm" "$b" "$i" $(( b * rollouts + i )) "$lane"
      done
    ) &
    lane_pids+=($!)
  done
  # A lane is a subshell: a crash in it (not a rollout's fault, which is recorded) leaves its remaining
  # rollouts unrecorded, so it is a block fault and the driver exits 5 after the summary.
  for ((lane = 0; lane < ${#lane_pids[@]}; lane++)); do
    wait "${lane_pids[$lane]}" && continue
    fault="driver: lane $lane of block $b exited $? (see $out/logs)"; driver_failed+="block $b lane $lane; "
  done
  lane_pids=()
  # Teardown: the sessions the lanes hold.
  now t1
  local td0=$t1 f
  for f in "$out"/tmp/lane."$b".*.json; do
    [ -e "$f" ] || continue
    destroy "$f" "$log" || fault="teardown: destroying a session left something (see $log)"
    rm -f "$f" "${f%.json}.fresh"
  done
  # The pool's leftovers (siblings not taken: a take that failed, a reuse@N), then its spool.
  if [ -e "$out/tmp/pool.$b" ]; then
    drain_pool "$out/tmp/pool.$b" "$log" > "$out/pool/block$b.drain.json" ||
      fault+="${fault:+; }teardown: draining the pool left something (see $log)"
    pool=$(jq -c --slurpfile d "$out/pool/block$b.drain.json" '.drain = ($d[0] // null | if . then {destroyed, left, spool_removed} else null end)' <<< "$pool")
  fi
  now t1
  kill -TERM "$hostmon" 2>/dev/null; wait "$hostmon" 2>/dev/null; hostmon=
  reap_watchers
  local ckpt=null
  if [ -s "$out/tmp/ckpt.$b.json" ]; then
    ckpt=$(jq -c '{id, dump_s, image_bytes, layer_bytes}' "$out/tmp/ckpt.$b.json")
    remove_checkpoint "$out/tmp/ckpt.$b.json"
  fi
  jq -nc --argjson block "$b" --arg arm "drums_$arm" --argjson rollouts "$rollouts" --argjson concurrency "$concurrency" \
    --argjson prep "$(secs $((tp1 - tp0 + fill_us)))" --argjson prep_n "$prep_n" --argjson wall "$(secs $((t1 - t0 - fill_us)))" \
    --arg reset "$([ "$arm" = post_setup ] && echo "$reset_mode" || echo recreate)" --argjson pool "$pool" \
    --argjson made "$(jq -r '.made // 0' <<< "$pool" 2>/dev/null || echo 0)" \
    --argjson teardown "$(secs $((t1 - td0)))" --argjson t0 "$(secs "$t0")" --argjson ckpt "$ckpt" --arg fault "$fault" \
    '{block: $block, arm: $arm, rollouts: $rollouts, concurrency: $concurrency, t_start: $t0, wall_s: $wall,
      reset: $reset, external_prep_s: $prep, external_prep_sessions: ($prep_n + $made), pool: $pool,
      teardown_s: $teardown, checkpoint: $ckpt,
      fault: (if $fault == "" then null else $fault end)}' > "$out/raw/block$b.json"
}

log "task $task, blocks $blocks, $rollouts rollouts per block, concurrency $concurrency, limits ${limits:-defaults}, post_setup reset $reset_mode, tools $(dirname "$(command -v drums-ns)")"
now run0
for b in "${!arms[@]}"; do
  block "$b" "${arms[$b]#drums_}"
done
now run1
"$py" "$here/pipelines/first_check_report.py" summarize --out "$out" --task "$task" --limits "${limits:-defaults}" \
  --concurrency "$concurrency" --blocks "$blocks" --reset "$reset_mode" --run-s "$(secs $((run1 - run0)))" --tools "$(dirname "$(command -v drums-ns)")"
rc=$?
# The summary's own answer is 0 or 1; anything else is the summary helper failing, not a rollout.
[ $rc -le 1 ] || die 5 failed "summarizing failed (first_check_report.py exited $rc); the rollout records are in $out/raw"
[ -z "$driver_failed" ] || die 5 failed "the driver failed in ${driver_failed%; } (a lane crashed; its remaining rollouts are not recorded)"
planned=1
exit "$rc"
