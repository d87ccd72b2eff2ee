#!/usr/bin/env bash
# OSWorld's own client, unchanged, for the tests that drive a session the way OSWorld's harness does
# (tests/guest_session.rs): PythonController from the `desktop-env` package on PyPI, with `requests`, for
# Debian's python3. Installed with --no-deps because the rest of desktop-env (VM providers, evaluators)
# is not needed to talk to the guest. Host side only; sessions do not see it. Idempotent.
# Result: $DRUMS_OSWORLD_CLIENT (default /var/lib/drums/osworld-client), for PYTHONPATH.
set -euo pipefail
dir=${DRUMS_OSWORLD_CLIENT:-/var/lib/drums/osworld-client}
python=/usr/bin/python3
requirements=(desktop-env==1.0.2 requests==2.32.3 urllib3==2.2.3 idna==3.10 charset-normalizer==3.4.0 certifi==2024.8.30)
log() { printf 'osworld-client: %s\n' "$*" >&2; }
want=$(printf '%s\n' "${requirements[@]}")
if [ "$(cat "$dir/.drums-requirements" 2>/dev/null)" = "$want" ]; then
  log "present: $dir"
  exit 0
fi
rm -rf "$dir.new"
"$python" -m pip install --quiet --disable-pip-version-check --no-cache-dir --no-deps --target "$dir.new" "${requirements[@]}" >&2
PYTHONPATH="$dir.new" "$python" -c 'from desktop_env.controllers.python import PythonController' || { log "PythonController does not import"; exit 5; }
rm -rf "$dir"
mv "$dir.new" "$dir"
printf '%s\n' "$want" > "$dir/.drums-requirements"
log "installed: $dir"
