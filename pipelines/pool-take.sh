#!/usr/bin/env bash
# Take one parked sibling from a warm pool: claim it, thaw it, check it is agent-ready, print its record
# with the taker as its owner (drums-pool(7)).
#   pipelines/pool-take.sh --checkpoint ID > session.json      destroy it with: drums-sweep < session.json
# Options:
#   --checkpoint ID      the pool's checkpoint (default: the checkpoint record on standard input)
#   --wait SECONDS       when the pool is empty, wait this long for a sibling (default 0: fail at once)
#   --max-age SECONDS    refuse (and destroy) parked siblings older than this
#   --ready-timeout S    drums-ready's timeout for the re-check (default 5)
# The taker, which becomes the session's owner, is $DRUMS_OWNER (a PID), else the caller of this script:
# when it is gone, drums-sweep --orphans destroys the session. Exit 0 with the record on standard output;
# 1 when no sibling could be had (the pool is empty or every sibling was refused), with an error object
# on standard error; 2 usage; 3 bad input.
set -euo pipefail
export LC_ALL=C
t0=$EPOCHREALTIME
pool_tool=pool-take
# shellcheck source=pool-lib.sh
pool_bin=${0%/*}
[ "$pool_bin" != "$0" ] || pool_bin=.
. "$pool_bin/pool-lib.sh"

ckpt_id="" wait_s=0 max_age="" ready_timeout=5
while [ $# -gt 0 ]; do
  case $1 in
    --checkpoint) ckpt_id=${2:?}; shift 2 ;;
    --wait) wait_s=${2:?}; shift 2 ;;
    --max-age) max_age=${2:?}; shift 2 ;;
    --ready-timeout) ready_timeout=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) pool_die 2 usage "unknown option $1 (see --help)" ;;
  esac
done
[[ $wait_s =~ ^[0-9]+(\.[0-9]+)?$ ]] || pool_die 2 usage "--wait wants seconds, not '$wait_s'"
[ -z "$max_age" ] || [[ $max_age =~ ^[0-9]+$ ]] || pool_die 2 usage "--max-age wants whole seconds, not '$max_age'"
if [ -z "$ckpt_id" ]; then
  [ -t 0 ] && pool_die 2 usage "give --checkpoint ID or a checkpoint record on standard input"
  ckpt_id=$(jq -r 'select(.type == "checkpoint") | .id' 2>/dev/null | head -n1) || true
  [ -n "$ckpt_id" ] || pool_die 3 bad_input "standard input holds no checkpoint record"
fi
pool_check_id "$ckpt_id" && [[ $ckpt_id == c-* ]] || pool_die 3 bad_input "'$ckpt_id' is not a checkpoint id"
pool=$state_root/pools/$ckpt_id

taker=${DRUMS_OWNER:-$PPID}
[[ $taker =~ ^[0-9]+$ ]] || pool_die 3 bad_input "DRUMS_OWNER=$taker is not a PID"
taker_start=""
{ read -r stat < "/proc/$taker/stat"; } 2> /dev/null && { stat=${stat##*) }; read -r -a stat <<< "$stat"; taker_start=${stat[19]}; }
[ -n "$taker_start" ] || pool_die 3 bad_input "the taker, process $taker, does not exist"
owner="{\"pid\":$taker,\"start_time\":$taker_start}"
shopt -s nullglob

destroy() { printf '%s\n' "$1" | drums-sweep > /dev/null 2>&1 || true; }

# The record as handed out, made before the re-check (drums-ready keeps what it does not write): the
# taker as owner, the pool section's take filled in. The tools write owner as {pid, start_time} and the
# filler writes the pool section's members sorted, so three literal substitutions do it in the shell
# (well under a millisecond with LC_ALL=C; jq takes ~30 ms to start here); a record of another shape
# goes through jq. Sets HANDED.
handed_out() { # RECORD
  local r=$1 now=$EPOCHREALTIME old
  old=${r#*\"owner\":\{}
  old=${old%%\}*}
  r=${r/\"owner\":\{"$old"\}/\"owner\":$owner}
  r=${r/\"frozen\":true,\"parked_at\"/\"frozen\":false,\"parked_at\"}
  r=${r/\"take_started_at\":null,\"taken_at\":null,\"taker\":null/\"take_started_at\":$t0,\"taken_at\":$now,\"taker\":$owner}
  if [[ $r == *"\"owner\":$owner,"* && $r == *"\"taken_at\":$now,"* ]]; then
    HANDED=$r
  else
    HANDED=$(jq -c --argjson owner "$owner" --argjson t0 "$t0" --argjson now "$now" \
      '.owner = $owner | .pool.take_started_at = $t0 | .pool.taken_at = $now | .pool.taker = $owner | .pool.frozen = false' <<< "$1")
  fi
}

now_us() { printf -v "$1" %s "${EPOCHREALTIME/./}"; }
now_us now
deadline_ms=$(( ${now:0:13} + ${wait_s%.*} * 1000 ))
[[ $wait_s == *.* ]] && deadline_ms=$(( deadline_ms + 10#$(printf '%-3.3s' "${wait_s#*.}" | tr ' ' 0) ))
refused=0
while :; do
  # Oldest first: the names start with the time the sibling was parked.
  for f in "$pool"/ready/*.json; do
    name=${f##*/} id=${name#*.} id=${id%.json}
    ledger=$state_root/sessions/$id/ledger.jsonl
    expired=0
    now_us now
    [ -n "$max_age" ] && (( ${now:0:13} - ${name%%.*} > max_age * 1000 )) && expired=1
    rec=""
    { IFS= read -r -d '' rec < "$f"; } 2> /dev/null || true
    rec=${rec%$'\n'}
    [ -n "$rec" ] || continue # another taker renamed it away
    # The claim: "taken" by the taker, appended only if the sibling is still parked (or published and
    # not yet marked parked). Exactly one taker's append succeeds; the others see "taken" and move on.
    if pool_phase_cas "$ledger" taken "$taker" "$taker_start" parked live; then :; else
      [ $? = 2 ] && rm -f "$f" # the session is gone: its record is stale
      continue
    fi
    if [ "$expired" = 1 ]; then
      mv "$f" "$pool/taken/" 2> /dev/null || true
      destroy "$rec"; rm -f "$pool/taken/$name"; refused=$((refused + 1)); continue
    fi
    # Bookkeeping only (the claim is made): in the background, beside the thaw and the re-check.
    mv "$f" "$pool/taken/" > /dev/null 2>&1 &
    mv=$!
    # Thaw, and re-check at once: drums-ready's first X request is answered when the thawed X server
    # runs, so its check is of the running session; the thaw's result is checked after it.
    thaw=""
    if [[ $rec == *'"frozen":true'* ]]; then
      drums-cgroup thaw <<< "$rec" > /dev/null &
      thaw=$!
    fi
    handed_out "$rec"
    if out=$(drums-ready --timeout "$ready_timeout" <<< "$HANDED") && { [ -z "$thaw" ] || wait "$thaw"; }; then
      printf '%s\n' "$out"
      wait "$mv" || true
      exit 0
    fi
    [ -z "$thaw" ] || wait "$thaw" || true
    wait "$mv" || true
    destroy "$rec"; rm -f "$pool/taken/$name"; refused=$((refused + 1))
  done
  now_us now
  if [ "${now:0:13}" -ge "$deadline_ms" ]; then
    pool_die 1 check_failed "pool $pool: no ready sibling (waited ${wait_s} s; refused $refused)"
  fi
  sleep 0.05
done
