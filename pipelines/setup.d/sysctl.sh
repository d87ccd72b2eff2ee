#!/usr/bin/env bash
# Kernel limits for many sessions on one host. Every session's desktop runs as the same host uid (the
# session account `user`, uid 1000: there is no user namespace), and inotify instances and watches are
# counted per uid: Debian's default of 128 instances stopped a host at 42 live sessions (CRIU's restore of
# the next failed with EMFILE in inotify_init). A session uses about 3 instances; 8192 allows far more
# sessions than memory does. (pid_max is left alone: a session holds ~75 host threads, Debian's 32768 is
# above what memory allows here.) Written to /etc/sysctl.d so a reboot keeps them; applied now. Idempotent.
set -euo pipefail
conf=/etc/sysctl.d/60-drums.conf
want='# Drums (pipelines/setup.d/sysctl.sh): many sessions, one session uid.
fs.inotify.max_user_instances = 8192
fs.inotify.max_user_watches = 1048576'
if [ "$(cat "$conf" 2>/dev/null)" != "$want" ]; then
  printf '%s\n' "$want" > "$conf"
fi
sysctl -q -p "$conf"
printf 'sysctl: %s\n' "$(sysctl -n fs.inotify.max_user_instances) inotify instances per uid" >&2
