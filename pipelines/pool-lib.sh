# Shared by pipelines/pool-fill.sh, pool-take.sh and pool-drain.sh (sourced, not run): the spool's paths,
# process identities, and the one atomic step of the pool, a compare-and-append of a ledger phase.
# See drums-pool(7).

# Without starting a process (a take is timed in milliseconds).
here=${BASH_SOURCE[0]%/*}
[ "$here" = "${BASH_SOURCE[0]}" ] && here=.
here=$here/..
[ -x "$here/target/release/drums-restore" ] && export PATH="$here/target/release:$PATH"
state_root=${DRUMS_STATE_DIR:-/run/drums}
pool_tool=${pool_tool:-pool}

# One error object on stderr (drums(7)), then exit with its code.
pool_die() { # CODE KIND MESSAGE
  local msg=${3//\\/\\\\}
  msg=${msg//\"/\\\"}
  printf '{"drums":1,"type":"error","tool":"%s","kind":"%s","exit":%d,"message":"%s"}\n' "$pool_tool" "$2" "$1" "$msg" >&2
  exit "$1"
}

# The start time of a process (clock ticks after boot, /proc/PID/stat field 22); pid + start time name
# one process across PID reuse. Empty when the process does not exist.
pool_start_time() { # PID
  local stat
  { read -r stat < "/proc/$1/stat"; } 2>/dev/null || return 1
  stat=${stat##*) }
  # shellcheck disable=SC2086
  set -- $stat
  printf '%s' "${20}"
}

# A checkpoint or session id as the tools accept it (drums(7)): safe as a path component.
pool_check_id() { [[ $1 =~ ^[cd]-[a-z0-9]{1,32}$ ]]; }

# The spool of one checkpoint: $DRUMS_STATE_DIR/pools/<checkpoint id>/{tmp,ready,taken}.
pool_dir() { printf '%s/pools/%s' "$state_root" "$1"; }

# Milliseconds since the epoch, from bash's own clock (no process).
pool_now_ms() { local t=${EPOCHREALTIME/./}; printf '%s' "${t:0:13}"; }

# Append phase NEW, set by process BY_PID (with BY_START), to a session's ledger if and only if its last
# phase is one of ALLOWED; under the ledger's flock, which every Drums tool takes to append, so the test
# and the append are one step. Returns 0 when appended, 1 when the last phase is another (POOL_LAST_PHASE
# says which), 2 when the ledger is gone (the session was destroyed).
pool_phase_cas() { # LEDGER NEW BY_PID BY_START ALLOWED...
  local ledger=$1 new=$2 by=$3 start=$4 fd line last="" nl=""
  shift 4
  POOL_LAST_PHASE=""
  # Read-only open: never create a ledger that a destroy just removed.
  { exec {fd}<"$ledger"; } 2>/dev/null || return 2
  if ! flock -x "$fd"; then exec {fd}<&-; return 2; fi
  while IFS= read -r line <&"$fd"; do
    case $line in *'"op":"phase"'*'}}') last=$line ;; esac
  done
  # A line without its newline (a writer killed mid-line): start ours on a fresh line, as Ledger::append does.
  [ -n "$line" ] && nl=$'\n'
  if [ -n "$last" ]; then
    last=${last#*\"phase\":\"}
    POOL_LAST_PHASE=${last%%\"*}
  fi
  local ok=1 a
  for a in "$@"; do [ "$POOL_LAST_PHASE" = "$a" ] && ok=0; done
  if [ "$ok" = 0 ]; then
    # Written through the descriptor's /proc link: the same inode even if the path were unlinked.
    # Not fsynced, unlike the tools' appends: after a crash no session process is left, and the sweep
    # destroys every session whose init is gone whatever its phase.
    printf '%s{"v":1,"op":"phase","t":%s,"phase":"%s","by":{"pid":%d,"start_time":%d}}\n' "$nl" "$EPOCHREALTIME" "$new" "$by" "$start" >> "/proc/self/fd/$fd"
  fi
  exec {fd}<&-
  return "$ok"
}

# The pool's files: <parked at, ms>.<session id>.json, so that a plain sort is oldest first.
pool_id_of() { local n=${1##*/}; n=${n#*.}; printf '%s' "${n%.json}"; }
pool_parked_ms() { local n=${1##*/}; printf '%s' "${n%%.*}"; }
pool_ledger() { printf '%s/sessions/%s/ledger.jsonl' "$state_root" "$1"; }
