#!/usr/bin/env bash
# Host-wide kernel ceilings, raised so that many full sessions fit on one host (drums(7), "Host
# ceilings"). Each value is a floor: a host already above it keeps its own (never lowered), and the file
# written says what is in force. Written to /etc/sysctl.d so a reboot keeps them; applied now. Idempotent.
#  - fs.inotify.max_user_instances, max_user_watches: counted per host uid. Sessions without a user
#    namespace all run their desktop as host uid 1000; Debian's 128 instances stopped a host at 42 live
#    sessions (CRIU's restore of the next failed with EMFILE in inotify_init). A session uses about 3.
#  - kernel.pid_max 4194304 (the kernel's largest on 64-bit): a session holds about 75 host threads and
#    Chromium's sandbox adds a PID namespace per renderer; Debian's 32768 pids would stop a host at about
#    400 sessions whatever its memory.
#  - kernel.threads-max 4194304: the kernel derives its default from memory (about 190000 here); a thread
#    needs a pid, so the two ceilings are one. Each session's own pids limit (its cgroup) bounds it.
#  - fs.file-max 4194304: open files of the whole host; each session's own (RLIMIT_NOFILE, per process)
#    do not add up to a host bound.
#  - kernel.pty.max 257024: pseudo-terminals of every devpts instance together; 1024 of them
#    (kernel.pty.reserve) are kept for the host's own /dev/pts, and each session's devpts holds at most
#    256 (its max= option, lib/src/ns.rs), so 1000 full sessions fit. Debian's 4096 leaves 3072 for all
#    sessions together: 12 that each opened their 256 would take them all.
set -euo pipefail
conf=/etc/sysctl.d/60-drums.conf
floors=(
  fs.inotify.max_user_instances=8192
  fs.inotify.max_user_watches=1048576
  kernel.pid_max=4194304
  kernel.threads-max=4194304
  fs.file-max=4194304
  kernel.pty.max=257024
)
want='# Drums (pipelines/setup.d/sysctl.sh): host ceilings for many sessions (drums(7), "Host ceilings").
# Each is the larger of Drums'"'"' floor and the value this host had.'
for f in "${floors[@]}"; do
  key=${f%%=*} floor=${f#*=}
  have=$(sysctl -n "$key")
  # A value written by an earlier run is this file's own: what counts is the host's, and a floor is
  # compared with it, never lowered to.
  [ "$have" -gt "$floor" ] && v=$have || v=$floor
  want+=$'\n'"$key = $v"
done
if [ "$(cat "$conf" 2>/dev/null)" != "$want" ]; then
  printf '%s\n' "$want" > "$conf"
fi
sysctl -q -p "$conf"
printf 'sysctl: %s\n' "$(sysctl -n fs.inotify.max_user_instances) inotify instances per uid, pid_max $(sysctl -n kernel.pid_max), threads-max $(sysctl -n kernel.threads-max), file-max $(sysctl -n fs.file-max), pty.max $(sysctl -n kernel.pty.max)" >&2
