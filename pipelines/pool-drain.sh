#!/usr/bin/env bash
# Empty a warm pool: claim every parked sibling and destroy it, then remove the spool when nothing in it
# is still alive (drums-pool(7)). Taken sessions belong to their takers and are left alone.
#   pipelines/pool-drain.sh --checkpoint ID
# Options:
#   --checkpoint ID      the pool's checkpoint (default: the checkpoint record on standard input)
# Prints one "pool_drain" record. Exit 0 when every parked sibling is gone, 1 when some destroy left
# something (drums-sweep --orphans retries), 2 usage, 3 bad input.
set -euo pipefail
export LC_ALL=C
pool_tool=pool-drain
# shellcheck source=pool-lib.sh
pool_bin=${0%/*}
[ "$pool_bin" != "$0" ] || pool_bin=.
. "$pool_bin/pool-lib.sh"

ckpt_id=""
while [ $# -gt 0 ]; do
  case $1 in
    --checkpoint) ckpt_id=${2:?}; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) pool_die 2 usage "unknown option $1 (see --help)" ;;
  esac
done
if [ -z "$ckpt_id" ]; then
  [ -t 0 ] && pool_die 2 usage "give --checkpoint ID or a checkpoint record on standard input"
  ckpt_id=$(jq -r 'select(.type == "checkpoint") | .id' 2>/dev/null | head -n1) || true
  [ -n "$ckpt_id" ] || pool_die 3 bad_input "standard input holds no checkpoint record"
fi
pool_check_id "$ckpt_id" && [[ $ckpt_id == c-* ]] || pool_die 3 bad_input "'$ckpt_id' is not a checkpoint id"
pool=$(pool_dir "$ckpt_id")
shopt -s nullglob
me_start=$(pool_start_time $$)

destroyed=0 left=0 filler="no"
if [ -d "$pool" ]; then
  # A filler at work would park more while we drain: wait for it (a --loop filler never lets go).
  exec {lock}>"$pool/fill.lock"
  flock -w 60 "$lock" || filler="yes"
  for f in "$pool"/ready/*.json; do
    rec=$( { cat "$f"; } 2> /dev/null) || continue
    if pool_phase_cas "$(pool_ledger "$(pool_id_of "$f")")" taken $$ "$me_start" parked live; then
      if printf '%s\n' "$rec" | drums-sweep > /dev/null 2>&1; then destroyed=$((destroyed + 1)); else left=$((left + 1)); fi
    fi
    rm -f "$f"
  done
  for f in "$pool"/taken/*.json; do
    [ -d "$state_root/sessions/$(pool_id_of "$f")" ] || rm -f "$f"
  done
  if [ "$filler" = no ]; then
    rm -f "$pool"/tmp/*
    rmdir "$pool/tmp" "$pool/ready" "$pool/taken" 2> /dev/null && rm -f "$pool/fill.lock" && rmdir "$pool" 2> /dev/null || true
    rmdir "$state_root/pools" 2> /dev/null || true
  fi
fi
removed=false
[ -d "$pool" ] || removed=true
printf '{"drums":1,"type":"pool_drain","pool":"%s","destroyed":%d,"left":%d,"filler_running":%s,"spool_removed":%s}\n' \
  "$pool" "$destroyed" "$left" "$([ "$filler" = yes ] && echo true || echo false)" "$removed"
[ "$left" = 0 ] || exit 1
