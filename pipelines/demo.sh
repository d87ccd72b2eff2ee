#!/usr/bin/env bash
# The main job on a built-in default: set up the machine, make a cold session, checkpoint it, restore two
# ready, reseeded siblings from the checkpoint, print their records, then destroy everything it made.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/pipelines/setup.sh"
export PATH="$here/target/release:$PATH"
export DRUMS_OWNER=$$
work=$(mktemp -d)
cleanup() {
  [ -s "$work/siblings.json" ] && drums-sweep < "$work/siblings.json" > /dev/null || true
  [ -s "$work/cold.json" ] && drums-sweep < "$work/cold.json" > /dev/null || true
  [ -s "$work/ckpt.json" ] && rm -rf "$(jq -r .dir "$work/ckpt.json")"
  [ -s "$work/ckpt.json" ] && [ -n "$(jq -r '.mapped.dir // empty' "$work/ckpt.json")" ] && rm -rf "$(jq -r .mapped.dir "$work/ckpt.json")"
  rm -rf "$work"
}
trap cleanup EXIT
echo "demo: cold session (with host ids: drums-ckpt checkpoints no session in its own user namespace)" >&2
DRUMS_OVERLAY_ARGS=--host-ids "$here/pipelines/cold.sh" > "$work/cold.json"
jq -c '{id, ready: .ready.ready, ready_s: .ready.ready_s, guest: .desktop.guest_url}' "$work/cold.json" >&2
echo "demo: checkpoint (the source session is destroyed by the dump)" >&2
drums-ckpt --clean < "$work/cold.json" > "$work/ckpt.json"
jq -c '{id, image_mib: (.image_bytes / 1048576 | floor), dump_s}' "$work/ckpt.json" >&2
echo "demo: two siblings (each in a user namespace of its own, the default)" >&2
"$here/pipelines/restore.sh" --count 2 < "$work/ckpt.json" > "$work/siblings.json"
jq -c '{id, hostname: .ns.hostname, mac: .net.session_mac, ready: .ready.ready, guest: .desktop.guest_url, restore_s: .restore.times.total_s, reseed_s: .reseed.total_s}' "$work/siblings.json" >&2
cat "$work/siblings.json"
