#!/usr/bin/env bash
# OSWorld's whole harness, unchanged, for running its benchmark on Drums sessions (docs/osworld.md):
# DesktopEnv, SetupController, the evaluators, and every module their import chain needs, for Debian's
# /usr/bin/python3, pinned in full in pipelines/osworld/requirements.txt and installed --no-deps (so what
# is installed is exactly that list). Host side only; sessions do not see it. Modules desktop_env imports
# that are not installed, and why: drums_osworld.ABSENT and docs/osworld.md. Idempotent: nothing is done
# when the directory holds exactly this list.
# Result: $DRUMS_OSWORLD_HARNESS (default /var/lib/drums/osworld-harness); for PYTHONPATH, with
# pipelines/osworld (the provider, drums_osworld) before it.
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
dir=${DRUMS_OSWORLD_HARNESS:-/var/lib/drums/osworld-harness}
python=/usr/bin/python3
list=$here/pipelines/osworld/requirements.txt
log() { printf 'osworld-harness: %s\n' "$*" >&2; }
want=$(grep -v '^#' "$list")
if [ "$(cat "$dir/.drums-requirements" 2>/dev/null)" = "$want" ]; then
  log "present: $dir"
  exit 0
fi
rm -rf "$dir.new"
mapfile -t reqs <<< "$want"
"$python" -m pip install --quiet --disable-pip-version-check --no-cache-dir --no-deps --target "$dir.new" "${reqs[@]}" >&2
# The proof that the list is whole: the harness and the provider import, as a run imports them.
PYTHONPATH="$here/pipelines/osworld:$dir.new" "$python" -W ignore -c '
import drums_osworld
drums_osworld.register()
from desktop_env.desktop_env import DesktopEnv
from desktop_env.controllers.setup import SetupController
from desktop_env.evaluators import metrics, getters
' || { log "the harness does not import from $dir.new"; exit 5; }
rm -rf "$dir"
mv "$dir.new" "$dir"
printf '%s\n' "$want" > "$dir/.drums-requirements"
log "installed: $dir"
