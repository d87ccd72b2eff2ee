#!/usr/bin/env bash
# The kernel the cgroup v2 tests boot under QEMU: Debian's linux-image-amd64, vmlinuz extracted from the
# package with dpkg-deb, nothing installed. This host's own cgroup2 mount has no controllers (v1 hybrid),
# so a guest is the only real cgroup v2 available here. Idempotent: a kernel already in the cache is kept.
# Result: $DRUMS_QEMU_CACHE/vmlinuz (default /var/cache/drums/qemu), vmlinuz.version naming the package, and
# the package's modules under $DRUMS_QEMU_CACHE/modules/lib/modules/<version> with a modules.dep made by
# busybox's depmod (this host has no kmod): the v2 host guest (tests/v2_host_qemu.rs) loads 9p, overlay and
# virtio from it in its initramfs and lets its kernel autoload the rest (veth, nf_tables, CRIU's diag modules).
set -euo pipefail
cache=${DRUMS_QEMU_CACHE:-/var/cache/drums/qemu}
log() { printf 'qemu-kernel: %s\n' "$*" >&2; }
mkdir -p "$cache"
if [ -s "$cache/vmlinuz" ] && [ -s "$cache/vmlinuz.version" ] && ls "$cache"/modules/lib/modules/*/modules.dep >/dev/null 2>&1; then
  log "kernel present: $(cat "$cache/vmlinuz.version")"
  exit 0
fi
# The metapackage only depends on the versioned image package; that one holds /boot/vmlinuz-*.
image=$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
if [ -z "$image" ]; then
  apt-get update -q >&2
  image=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
fi
[ -n "$image" ] || { log "cannot find the package linux-image-amd64 depends on"; exit 4; }
work=$(mktemp -d "$cache/.work.XXXXXX")
chmod 755 "$work"  # apt-get download drops to the _apt user when it can
trap 'rm -rf "$work"' EXIT
log "downloading $image"
(cd "$work" && apt-get download -q "$image" >&2)
deb=$(ls "$work"/*.deb)
dpkg-deb -x "$deb" "$work/x"
vmlinuz=$(ls "$work"/x/boot/vmlinuz-* | head -n1)
[ -s "$vmlinuz" ] || { log "no /boot/vmlinuz-* in $deb"; exit 5; }
install -m 644 "$vmlinuz" "$cache/vmlinuz.new"
version=${vmlinuz##*/vmlinuz-}
[ -d "$work/x/lib/modules/$version" ] || { log "no /lib/modules/$version in $deb"; exit 5; }
rm -rf "$cache/modules.new" "$cache/modules"
mkdir -p "$cache/modules.new/lib/modules"
mv "$work/x/lib/modules/$version" "$cache/modules.new/lib/modules/"
busybox depmod -b "$cache/modules.new" "$version"
mv "$cache/modules.new" "$cache/modules"
mv "$cache/vmlinuz.new" "$cache/vmlinuz"
printf '%s %s\n' "$(basename "$deb")" "$(basename "$vmlinuz")" > "$cache/vmlinuz.version"
log "kernel: $(cat "$cache/vmlinuz.version")"
