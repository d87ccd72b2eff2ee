#!/usr/bin/env bash
# Fill a warm pool: restore, reseed and readiness-check siblings of a checkpoint ahead of demand, freeze
# them, and park each finished session record in the pool's ready/ directory (drums-pool(7)).
#   pipelines/pool-fill.sh --depth 4 < ckpt.json            fill up to 4 parked siblings, then exit (cron)
#   pipelines/pool-fill.sh --checkpoint ID --loop 5         keep the depth, checking every 5 s
# Options:
#   --checkpoint ID      the checkpoint (default: the checkpoint record on standard input)
#   --depth N            parked siblings to keep ready (default 4)
#   --loop SECONDS       keep the depth forever, checking every SECONDS (default: fill once and exit)
#   --count N            count ceiling: make at most N sessions in this run, then exit
#   --max-sessions N     count ceiling: never restore while the machine has N Drums sessions (default 32)
#   --min-available SIZE memory ceiling: never restore while MemAvailable is below SIZE (default 2G)
#   --max-age SECONDS    destroy parked siblings older than this
#   --cgroup SPEC        drums-restore --cgroup for each sibling (default: drums-restore's, the default
#                        limits of drums-cgroup(1); none: drums-restore --no-cgroup, parked running)
#   --no-freeze          park siblings running (default: frozen through the cgroup freezer)
#   --ksm                drums-restore --ksm: identical pages of parked siblings may be merged (opt-in)
# Prints one "pool_parked" record per parked sibling and a "pool_fill" summary last. Exit 0 when it
# stopped at the depth or a ceiling, 5 after 3 failed siblings in a row, 2 usage, 3 bad input.
set -euo pipefail
export LC_ALL=C
pool_tool=pool-fill
# shellcheck source=pool-lib.sh
pool_bin=${0%/*}
[ "$pool_bin" != "$0" ] || pool_bin=.
. "$pool_bin/pool-lib.sh"

ckpt_id="" depth=4 loop="" count="" max_sessions=32 min_avail=2G max_age="" cgroup="" freeze=1 ksm=0
while [ $# -gt 0 ]; do
  case $1 in
    --checkpoint) ckpt_id=${2:?}; shift 2 ;;
    --depth) depth=${2:?}; shift 2 ;;
    --loop) loop=${2:?}; shift 2 ;;
    --count) count=${2:?}; shift 2 ;;
    --max-sessions) max_sessions=${2:?}; shift 2 ;;
    --min-available) min_avail=${2:?}; shift 2 ;;
    --max-age) max_age=${2:?}; shift 2 ;;
    --cgroup) cgroup=${2:?}; shift 2 ;;
    --no-freeze) freeze=0; shift ;;
    --ksm) ksm=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) pool_die 2 usage "unknown option $1 (see --help)" ;;
  esac
done
num() { [[ $2 =~ ^[0-9]+$ ]] || pool_die 2 usage "$1 wants a whole number, not '$2'"; }
num --depth "$depth"; num --max-sessions "$max_sessions"
[ -z "$loop" ] || [[ $loop =~ ^[0-9]+(\.[0-9]+)?$ ]] || pool_die 2 usage "--loop wants seconds, not '$loop'"
[ -z "$count" ] || num --count "$count"
[ -z "$max_age" ] || num --max-age "$max_age"
min_kib=$(numfmt --from=iec "$min_avail" 2>/dev/null) || pool_die 2 usage "--min-available wants a size such as 2G, not '$min_avail'"
min_kib=$((min_kib / 1024))
[ "$cgroup" = none ] && freeze=0

ckpt_rec=""
if [ -z "$ckpt_id" ]; then
  [ -t 0 ] && pool_die 2 usage "give --checkpoint ID or a checkpoint record on standard input"
  ckpt_rec=$(cat)
  ckpt_id=$(jq -r 'select(.type == "checkpoint") | .id' <<< "$ckpt_rec" 2>/dev/null | head -n1) || true
  [ -n "$ckpt_id" ] || pool_die 3 bad_input "standard input holds no checkpoint record"
fi
pool_check_id "$ckpt_id" && [[ $ckpt_id == c-* ]] || pool_die 3 bad_input "'$ckpt_id' is not a checkpoint id"
pool=$(pool_dir "$ckpt_id")
# The state root stays closed to other host users (drums(7), "Host-side file safety"), made here or not.
mkdir -p -m 700 "$state_root" && chmod 700 "$state_root"
mkdir -p "$pool/tmp" "$pool/ready" "$pool/taken"

# One filler per pool: a second one (cron overlapping a loop) has nothing to do.
exec {lock}>"$pool/fill.lock"
if ! flock -n "$lock"; then
  printf '{"drums":1,"type":"pool_fill","pool":"%s","made":0,"failed":0,"depth":null,"stopped":"another filler holds %s"}\n' "$pool" "$pool/fill.lock"
  exit 0
fi

# The filler owns the siblings it is making (drums(7)): if it dies midway, the sweep takes them.
export DRUMS_OWNER=$$
me_start=$(pool_start_time $$)
restore_args=()
case $cgroup in
  none) restore_args+=(--no-cgroup) ;;
  "") ;;
  *) restore_args+=(--cgroup "$cgroup") ;;
esac
[ -n "$ckpt_rec" ] || restore_args+=(--checkpoint "$ckpt_id")
[ "$ksm" = 0 ] || restore_args+=(--ksm)
shopt -s nullglob

inflight=""
destroy() { [ -n "$1" ] && printf '%s\n' "$1" | drums-sweep > /dev/null 2>&1 || true; }
trap 'destroy "$inflight"' EXIT
trap 'exit 143' TERM INT

mem_available_kib() { local k v _; while read -r k v _; do [ "$k" = MemAvailable: ] && { printf '%s' "$v"; return; }; done < /proc/meminfo; }
session_count() { local s=("$state_root"/sessions/*); printf '%s' "${#s[@]}"; }

# Remove what is stale: ready/ records whose session is gone or was taken (a taker killed between its
# claim and its rename), taken/ records whose session is destroyed, tmp/ files of a killed filler; and
# destroy parked siblings older than --max-age.
prune() {
  local f id now; now=$(pool_now_ms)
  for f in "$pool"/ready/*.json; do
    id=$(pool_id_of "$f")
    if [ -n "$max_age" ] && (( now - $(pool_parked_ms "$f") > max_age * 1000 )); then
      pool_phase_cas "$(pool_ledger "$id")" taken $$ "$me_start" parked live && {
        mv "$f" "$pool/taken/" 2> /dev/null && destroy "$(< "$pool/taken/${f##*/}")"
        rm -f "$pool/taken/${f##*/}"
      }
      continue
    fi
    pool_phase_cas "$(pool_ledger "$id")" none 0 0 && true
    case $? in 2) rm -f "$f" ;; *) case $POOL_LAST_PHASE in parked|live) ;; *) rm -f "$f" ;; esac ;; esac
  done
  for f in "$pool"/taken/*.json; do
    [ -d "$state_root/sessions/$(pool_id_of "$f")" ] || rm -f "$f"
  done
  find "$pool/tmp" -type f -mmin +1 -delete 2> /dev/null || true
}

# One sibling: restore, reseed, ready, freeze, park. Prints its pool_parked record.
fill_one() {
  local t0=$EPOCHREALTIME t1 t2 t3 rec name
  if [ -n "$ckpt_rec" ]; then
    inflight=$(drums-restore "${restore_args[@]}" <<< "$ckpt_rec") || { destroy "$inflight"; inflight=""; return 1; }
  else
    inflight=$(drums-restore "${restore_args[@]}" < /dev/null) || { destroy "$inflight"; inflight=""; return 1; }
  fi
  t1=$EPOCHREALTIME
  rec=$(drums-reseed <<< "$inflight" | drums-ready --timeout 30) || { destroy "$inflight"; inflight=""; return 1; }
  t2=$EPOCHREALTIME
  if [ "$freeze" = 1 ]; then
    rec=$(drums-cgroup freeze <<< "$rec") || { destroy "$inflight"; inflight=""; return 1; }
  fi
  t3=$EPOCHREALTIME
  # The pool section's members in sorted order, as the Rust tools write them back: pool-take.sh edits it.
  rec=$(jq -c --arg ckpt "$ckpt_id" --arg spool "$pool" --argjson frozen "$([ "$freeze" = 1 ] && echo true || echo false)" \
    --argjson filler "{\"pid\":$$,\"start_time\":$me_start}" --argjson t0 "$t0" --argjson t1 "$t1" --argjson t2 "$t2" --argjson t3 "$t3" \
    '.pool = {checkpoint: $ckpt,
              fill_s: {freeze_s: ($t3 - $t2), reseed_ready_s: ($t2 - $t1), restore_s: ($t1 - $t0), total_s: (now - $t0)},
              filler: $filler, frozen: $frozen, parked_at: now, spool: $spool,
              take_started_at: null, taken_at: null, taker: null}' <<< "$rec") || { destroy "$inflight"; inflight=""; return 1; }
  name="$(pool_now_ms).$(jq -r .id <<< "$rec").json"
  printf '%s\n' "$rec" > "$pool/tmp/$name"
  # Visible to takers only now, complete; then marked parked unless a taker was quicker.
  mv "$pool/tmp/$name" "$pool/ready/$name"
  inflight=""
  pool_phase_cas "$(pool_ledger "$(pool_id_of "$name")")" parked $$ "$me_start" live || true
  jq -c '{drums: 1, type: "pool_parked", pool: .pool.spool, session: .id, file: $file, frozen: .pool.frozen, fill_s: .pool.fill_s}' \
    --arg file "$pool/ready/$name" <<< "$rec"
}

made=0 failed=0 in_a_row=0 stopped="" t_start=$EPOCHREALTIME
while :; do
  prune
  ready=("$pool"/ready/*.json)
  if [ "${#ready[@]}" -ge "$depth" ]; then
    [ -n "$loop" ] || { stopped="depth reached"; break; }
    sleep "$loop"; continue
  fi
  if [ -n "$count" ] && [ "$made" -ge "$count" ]; then stopped="count ceiling (--count $count)"; break; fi
  ceiling=""
  [ "$(session_count)" -lt "$max_sessions" ] || ceiling="count ceiling (--max-sessions $max_sessions)"
  [ "$(mem_available_kib)" -ge "$min_kib" ] || ceiling="memory ceiling (MemAvailable below $min_avail)"
  if [ -n "$ceiling" ]; then
    [ -n "$loop" ] || { stopped=$ceiling; break; }
    sleep "$loop"; continue
  fi
  if fill_one; then
    made=$((made + 1)) in_a_row=0
  else
    failed=$((failed + 1)) in_a_row=$((in_a_row + 1))
    if [ "$in_a_row" -ge 3 ]; then stopped="3 siblings failed in a row"; break; fi
  fi
done
ready=("$pool"/ready/*.json)
elapsed=$(jq -n "$EPOCHREALTIME - $t_start")
printf '{"drums":1,"type":"pool_fill","pool":"%s","made":%d,"failed":%d,"depth":%d,"elapsed_s":%s,"stopped":"%s"}\n' \
  "$pool" "$made" "$failed" "${#ready[@]}" "$elapsed" "$stopped"
[ "$in_a_row" -lt 3 ] || exit 5
