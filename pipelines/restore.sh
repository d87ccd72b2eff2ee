#!/usr/bin/env bash
# The restore path: a checkpoint record in (stdin, or --checkpoint ID), N ready, reseeded siblings out.
#   pipelines/restore.sh --count 2 < checkpoint.json > siblings.json
# Arguments go to drums-restore, which restores, reseeds and checks the siblings of one call concurrently
# (--ready; drums::sibling, the code the warm pool fills with). Extra arguments: DRUMS_RESEED_ARGS
# (--no-browser) and DRUMS_READY_ARGS (--threshold, --title, --timeout, --interval, --blank), passed as
# drums-restore's --no-browser and --ready-* options.
# A sibling that fails a stage is destroyed; the script then exits nonzero (5) after the others.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
[ -x "$here/target/release/drums-restore" ] && export PATH="$here/target/release:$PATH"
export DRUMS_OWNER=${DRUMS_OWNER:-$PPID}
usage() { printf '{"drums":1,"type":"error","tool":"restore.sh","kind":"usage","exit":2,"message":"%s"}\n' "$1" >&2; exit 2; }
extra=()
# shellcheck disable=SC2086
for a in ${DRUMS_RESEED_ARGS:-}; do
  case $a in
    --no-browser) extra+=(--no-browser) ;;
    *) usage "DRUMS_RESEED_ARGS: $a: restore.sh passes only --no-browser (a --hostname names one sibling: run drums-reseed)" ;;
  esac
done
# shellcheck disable=SC2086
for a in ${DRUMS_READY_ARGS:-}; do
  case $a in
    --threshold|--title|--timeout|--interval|--blank|--threshold=*|--title=*|--timeout=*|--interval=*|--blank=*) extra+=("--ready-${a#--}") ;;
    --*) usage "DRUMS_READY_ARGS: $a: restore.sh passes --threshold, --title, --timeout, --interval and --blank (a --png is one sibling's: run drums-ready)" ;;
    *) extra+=("$a") ;;
  esac
done
exec drums-restore --ready "${extra[@]}" "$@"
