#!/usr/bin/env bash
# Boot a cgroup-v2-only Linux guest under QEMU (software emulation: no KVM needed) whose root is THIS host's
# file system, shared read-only over virtio 9p under a tmpfs overlay, and run a script of the host's in it.
# The guest therefore runs the host's very tools, CRIU and root images, on a kernel with cgroup v1 switched
# off (cgroup_no_v1=all systemd.unified_cgroup_hierarchy=1): the way most users' hosts boot.
#
#   pipelines/v2-guest.sh [--mem MIB] [--smp N] [--timeout S] [--systemd] SCRIPT [ARGS...]
#
# SCRIPT is a path on this host; it runs as the guest's PID 1 (after the initramfs switched root), its output
# on this script's stdout (the guest's serial console), and the guest powers off when it returns.
# With --systemd, the host's systemd is PID 1 instead and runs SCRIPT as a service (DRUMS_GUEST_SYSTEMD=1 in
# its environment) beside pipelines/drums-cgroups.service, the subtree it delegates to Drums; nothing else
# of the host's units is started (systemd.unit=drums-v2.target, no default dependencies). The guest
# sees / as the host's / at the moment it reads it (9p, cache=loose), /var/lib/drums/images read-only, and a
# fresh tmpfs on /run, /tmp and /var/lib/drums (the host's state never reaches it, and nothing it writes
# reaches the host). Its kernel and modules come from pipelines/setup.d/qemu-kernel.sh ($DRUMS_QEMU_CACHE).
# Exit status: QEMU's (0 when the guest powered off), 124 on the timeout (default 3600 s).
# Needs: qemu-system-x86 (with virtfs), busybox-static, cpio.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
mem=4096 smp=2 timeout=3600 systemd=0
while [ $# -gt 0 ]; do
  case $1 in
    --mem) mem=$2; shift 2 ;;
    --smp) smp=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --systemd) systemd=1; shift ;;
    --) shift; break ;;
    -*) echo "{\"drums\":1,\"error\":\"usage\",\"message\":\"unknown option $1\"}" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || { echo '{"drums":1,"error":"usage","message":"v2-guest.sh [--mem MIB] [--smp N] [--timeout S] SCRIPT [ARGS...]"}' >&2; exit 2; }
script=$(realpath "$1"); shift
cache=${DRUMS_QEMU_CACHE:-/var/cache/drums/qemu}
[ -s "$cache/vmlinuz" ] && ls "$cache"/modules/lib/modules/*/modules.dep >/dev/null 2>&1 || bash "$here/pipelines/setup.d/qemu-kernel.sh"
moddir=$(dirname "$(ls "$cache"/modules/lib/modules/*/modules.dep | head -n1)")
busybox=$(command -v busybox || true)
[ -n "$busybox" ] && ! ldd "$busybox" >/dev/null 2>&1 || { echo '{"drums":1,"error":"environment","message":"a static busybox is needed (busybox-static)"}' >&2; exit 4; }
command -v qemu-system-x86_64 >/dev/null || { echo '{"drums":1,"error":"environment","message":"qemu-system-x86_64 is not installed (qemu-system-x86)"}' >&2; exit 4; }

work=$(mktemp -d /tmp/drums-v2-guest.XXXXXX)
trap 'rm -rf "$work"' EXIT
root=$work/initramfs
mkdir -p "$root"/{bin,proc,sys,dev,lower,upper,newroot,mods}
cp "$busybox" "$root/bin/busybox"
# What the initramfs loads before the root exists, in dependency order (modules.dep); everything else the
# guest's kernel autoloads from the modules bound in at /lib/modules once the root is up.
mods="virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci netfs fscache 9pnet 9pnet_virtio 9p overlay"
for m in $mods; do
  f=$(find "$moddir/kernel" -name "$m.ko" | head -n1)
  [ -n "$f" ] || { echo "{\"drums\":1,\"error\":\"environment\",\"message\":\"module $m.ko not in $moddir\"}" >&2; exit 4; }
  cp "$f" "$root/mods/"
done
# The script and its arguments reach stage 2 through the environment (switch_root keeps it).
{
  printf '#!/bin/busybox sh\n'
  printf 'export DRUMS_GUEST_SCRIPT=%q DRUMS_GUEST_MODULES=%q\n' "$script" "$moddir"
  printf 'mods=%q\n' "$mods"
  printf 'systemd=%q\n' "$systemd"
  printf 'export DRUMS_GUEST_UNIT=%q\n' "$here/pipelines/drums-cgroups.service"
  printf 'set --'; for a in "$@"; do printf ' %q' "$a"; done; printf '\n'
  cat <<'INIT'
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for m in $mods; do
  insmod /mods/$m.ko || echo "DRUMS-GUEST insmod $m failed"
done
# The host's / read-only; cache=loose: the guest only reads it, and every lookup over 9p costs a round trip.
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=1048576 hostroot /lower || { echo "DRUMS-GUEST 9p mount failed"; poweroff -f; }
mount -t tmpfs -o size=75% tmpfs /upper
mkdir -p /upper/u /upper/w
mount -t overlay -o lowerdir=/lower,upperdir=/upper/u,workdir=/upper/w overlay /newroot || { echo "DRUMS-GUEST overlay mount failed"; poweroff -f; }
mkdir -p /newroot/mnt/drums-host
mount --move /lower /newroot/mnt/drums-host
umount /proc /sys
mount --move /dev /newroot/dev
echo "DRUMS-GUEST stage1 done"
if [ "$systemd" = 1 ]; then
  u=/newroot/etc/systemd/system
  mkdir -p $u
  cp "/newroot$DRUMS_GUEST_UNIT" $u/drums-cgroups.service
  mkdir -p $u/drums-cgroups.service.d
  printf '[Unit]\nDefaultDependencies=no\n' > $u/drums-cgroups.service.d/nodeps.conf
  printf '[Unit]\nDescription=Drums v2 guest\nDefaultDependencies=no\nRequires=drums-cgroups.service drums-v2-guest.service\n' > $u/drums-v2.target
  printf '[Unit]\nDefaultDependencies=no\nAfter=drums-cgroups.service\nRequires=drums-cgroups.service\n[Service]\nType=oneshot\nEnvironment=DRUMS_GUEST_SYSTEMD=1 DRUMS_GUEST_MODULES=%s\nExecStart=/bin/bash %s\nStandardOutput=tty\nStandardError=tty\nTTYPath=/dev/ttyS0\nTimeoutStartSec=infinity\n' "$DRUMS_GUEST_MODULES" "$DRUMS_GUEST_SCRIPT" > $u/drums-v2-guest.service
  exec switch_root /newroot /lib/systemd/systemd systemd.unit=drums-v2.target
fi
exec switch_root /newroot /bin/bash "$DRUMS_GUEST_SCRIPT" "$@"
INIT
} > "$root/init"
chmod 755 "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet) > "$work/initramfs.cpio"

status=0
timeout --foreground -k 10 "$timeout" qemu-system-x86_64 \
  -accel tcg,thread=multi -cpu max -smp "$smp" -m "$mem" -nographic -no-reboot -nic none \
  -kernel "$cache/vmlinuz" -initrd "$work/initramfs.cpio" \
  -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
  -append "console=ttyS0 rdinit=/init panic=-1 quiet loglevel=3 cgroup_no_v1=all systemd.unified_cgroup_hierarchy=1" \
  < /dev/null || status=$?
exit "$status"
