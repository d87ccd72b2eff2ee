#!/usr/bin/env bash
# Ray, pinned, for Debian's python3: the engine pipelines/ray/ (drums_ray) and pipelines/ray-rollouts.py
# run Drums sessions on (docs/ray.md). Installed with pip --target into a directory of its own, with
# every dependency pinned (the set pip resolved for ray 2.60.0 on 2026-12-02) and --no-deps, so that a
# later release of a dependency changes nothing here. Host side only; sessions do not see it. Idempotent.
# Result: $DRUMS_RAY_DIR (default /var/lib/drums/ray), for PYTHONPATH; its bin/ray is the ray CLI.
set -euo pipefail
dir=${DRUMS_RAY_DIR:-/var/lib/drums/ray}
python=/usr/bin/python3
requirements=(
  ray==2.60.0 click==8.5.1 filelock==4.3.1 jsonschema==4.26.0 jsonschema-specifications==2025.9.1
  referencing==0.37.0 rpds-py==2026.9.1 attrs==26.1.0 msgpack==1.2.4 packaging==26.4 protobuf==7.36.2
  pyyaml==6.0.4 requests==2.34.2 urllib3==2.8.0 idna==3.20 charset-normalizer==3.5.3
  certifi==2026.10.19.post1 typing-extensions==4.16.0
)
log() { printf 'ray: %s\n' "$*" >&2; }
# Ray 2.60.0 ships wheels for CPython 3.10 to 3.13 on x86_64 and aarch64 Linux; Debian 12's python3 is 3.11.
"$python" -c 'import sys; sys.exit(0 if (3, 10) <= sys.version_info[:2] <= (3, 13) else 1)' ||
  { log "$python is $("$python" --version 2>&1): ray 2.60.0 has no wheel for it (3.10 to 3.13)"; exit 4; }
want=$(printf '%s\n' "$("$python" --version 2>&1)" "${requirements[@]}")
if [ "$(cat "$dir/.drums-requirements" 2>/dev/null)" = "$want" ]; then
  log "present: $dir"
  exit 0
fi
rm -rf "$dir.new"
"$python" -m pip install --quiet --disable-pip-version-check --no-cache-dir --no-deps --only-binary=:all: \
  --target "$dir.new" "${requirements[@]}" >&2
PYTHONPATH="$dir.new" "$python" -c 'import ray, ray.scripts.scripts; assert ray.__version__ == "2.60.0"' ||
  { log "ray does not import from $dir.new"; exit 5; }
rm -rf "$dir"
mv "$dir.new" "$dir"
# The CLI's launcher was written for $dir.new: it only runs the module, so a wrapper does the same.
mkdir -p "$dir/bin"
printf '#!/bin/sh\nPYTHONPATH=%s${PYTHONPATH:+:$PYTHONPATH} exec %s -m ray.scripts.scripts "$@"\n' "$dir" "$python" > "$dir/bin/ray"
chmod 755 "$dir/bin/ray"
printf '%s\n' "$want" > "$dir/.drums-requirements"
log "installed: $dir"
