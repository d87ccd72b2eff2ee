#!/bin/bash
# The whole life of Drums' sessions on a cgroup-v2-only kernel: the guest's PID 1 under pipelines/v2-guest.sh
# (whose root is the host's / read-only under a tmpfs overlay), run by tests/v2_host_qemu.rs, which parses
# the `DRUMS-V2 <step> <key> <value...>` lines this prints on the console. Runs the tools of the worktree it
# sits in (target/release), the host's CRIU and root image, and in this order: a cold session and a second
# one (the audit's control pair), a checkpoint of the first (left running), two restored siblings (reseeded,
# ready, limits read back from the v2 files), the audit of the siblings against the cold pair, the cgroup
# escapes of tests/data/cgroup-attack.py from inside the cold session and a sibling (as user and as session
# root) with the limits read back from the guest's side before and after, all four sessions destroyed, a
# pool filled and taken from, a filler SIGKILLed while it restores, the sweep of its orphan, the pool drained,
# then a census of what is left (cgroups under drums/, mounts, ledgers, links) that must be empty.
# Arguments: none. Environment (optional): DRUMS_V2_SCALE, the factor for the tools' timeouts
# (DRUMS_TIMEOUT_SCALE, default 20: emulated CPUs are slow). Under `pipelines/v2-guest.sh --systemd`
# (DRUMS_GUEST_SYSTEMD=1) systemd is PID 1 and has mounted /proc, /sys, /dev, /run and the cgroup2 tree,
# and Drums' cgroups must land in drums-cgroups.service's delegated subtree, nothing at the tree's root.
set -u
exec 2>&1
here=$(cd "$(dirname "$0")/../.." && pwd)
say() { echo "DRUMS-V2 $*"; }
now() { cut -d' ' -f1 /proc/uptime; }
off() {
  say guest done "$(now)"
  sync
  echo o > /proc/sysrq-trigger
  sleep 60
}
trap off EXIT

# ---- the guest's own mounts: nothing of the host's state, cgroup2 alone ----
# (Under systemd, what it mounted is kept: a new /run would hide its own.)
mounted() { awk -v m="$1" '$2 == m {f=1} END {exit !f}' /proc/mounts 2>/dev/null; }
mounted /proc || mount -t proc proc /proc
mounted /sys || mount -t sysfs sysfs /sys
mkdir -p /dev/pts /dev/shm
mounted /dev/pts || mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts
mounted /dev/shm || mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mounted /run || mount -t tmpfs -o mode=755 tmpfs /run
mount -t tmpfs -o mode=1777 tmpfs /tmp
mkdir -p /sys/fs/cgroup
mounted /sys/fs/cgroup || mount -t cgroup2 cgroup2 /sys/fs/cgroup
# The kernel's modules (the host has none of this kernel's): autoloaded through busybox's modprobe.
kver=$(uname -r)
mkdir -p "/lib/modules/$kver"
mount --bind "$DRUMS_GUEST_MODULES" "/lib/modules/$kver"
ln -s "$(command -v busybox)" /run/modprobe
echo /run/modprobe > /proc/sys/kernel/modprobe
# Drums' persistent state: a tmpfs, with the host's root images as an overlay's lower layer (the tools
# write their lock file there; a session's overlay over it is the second and last level overlayfs allows).
mount -t tmpfs -o mode=755 tmpfs /var/lib/drums
# Checkpoints' mapped files (DRUMS_MAPPED_DIR): the host's own would be unledgered leftovers to this guest.
mkdir -p /var/lib/drums-mapped
mount -t tmpfs -o mode=700 tmpfs /var/lib/drums-mapped
mkdir -p -m 700 /var/lib/drums/images /var/lib/drums/.images/u /var/lib/drums/.images/w
mount -t overlay -o lowerdir=/mnt/drums-host/var/lib/drums/images,upperdir=/var/lib/drums/.images/u,workdir=/var/lib/drums/.images/w overlay /var/lib/drums/images
ip link set lo up
hostname drums-v2-guest
[ -f /etc/sysctl.d/60-drums.conf ] && sysctl -q -p /etc/sysctl.d/60-drums.conf

export PATH="$here/target/release:/usr/sbin:/usr/bin:/sbin:/bin" HOME=/root
export DRUMS_TIMEOUT_SCALE=${DRUMS_V2_SCALE:-20}
export DRUMS_OWNER=$$ DRUMS_CRIU_TIMEOUT=$((60 * DRUMS_TIMEOUT_SCALE))
ready_timeout=$((30 * DRUMS_TIMEOUT_SCALE))s
export DRUMS_READY_ARGS="--timeout $ready_timeout"
work=/tmp/v2
mkdir -p $work
cg=/sys/fs/cgroup
# Where Drums' `drums` parent must appear: the root without systemd, the delegated unit's cgroup with it.
base=$cg
if [ "${DRUMS_GUEST_SYSTEMD:-0}" = 1 ]; then
  base=$cg/system.slice/drums-cgroups.service
  # The unit's process moves itself into keeper/ just after it starts; until then the unit's cgroup has a
  # process and cannot pass controllers down.
  for _ in $(seq 300); do [ -d $base/keeper ] && [ -z "$(cat $base/cgroup.procs)" ] && break; sleep 0.1; done
fi
cgd=$base/drums

say guest booted "$(now)"
say guest kernel "$(uname -r)"
say guest cmdline "$(cat /proc/cmdline)"
say guest v1_mounts "$(awk '$3 == "cgroup"' /proc/mounts | wc -l)"
say guest controllers "$(cat $cg/cgroup.controllers)"
say guest subtree_control_before "[$(cat $cg/cgroup.subtree_control)]"
say guest pid1 "$(cat /proc/1/comm)"
say guest base "${base#$cg}"
say guest base_controllers "[$(cat $base/cgroup.controllers)]"
if [ "${DRUMS_GUEST_SYSTEMD:-0}" = 1 ]; then
  # The delegating unit itself: running, its one process in keeper/ (a unit whose shell line systemd
  # mangled fails here, and every tool then refuses with exit 4).
  say guest unit "$(systemctl is-active drums-cgroups.service) keeper_procs=$(cat $base/keeper/cgroup.procs 2>/dev/null | wc -l)"
fi
say guest criu "$(/opt/drums/criu/bin/criu --version | head -n1)"
say guest tools "$(command -v drums-ns)"

# elapsed START: seconds since START (guest uptime), 3 decimals.
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }
# limits STEP ID: the session's limits as the v2 files say, and where its processes are.
limits() {
  local d=$cgd/$2
  if [ -d "$d" ]; then
    say "$1" limits "$2 memory.max=$(cat $d/memory.max) memory.swap.max=$(cat $d/memory.swap.max 2>/dev/null || echo absent) pids.max=$(cat $d/pids.max) cpu.max=$(cat $d/cpu.max | tr ' ' /) procs=$(wc -l < $d/cgroup.procs) frozen=$(awk '/^frozen/ {print $2}' $d/cgroup.events)"
  else
    say "$1" limits "$2 absent"
  fi
}
fail() { say "$1" error "$2"; [ -f "$work/$1.err" ] && sed "s/^/DRUMS-V2 $1 stderr /" "$work/$1.err" | tail -n 30; }

# ---- cold ----
# With host ids: it is the checkpoint's source (drums-ckpt refuses a session in its own user namespace);
# the siblings below get user namespaces of their own, the default.
t=$(now)
if DRUMS_OVERLAY_ARGS=--host-ids "$here/pipelines/cold.sh" > $work/cold.json 2> $work/cold.err; then
  say cold wall_s "$(elapsed "$t")"
  id=$(jq -r .id $work/cold.json)
  say cold record "$(jq -c '{id, ready: .ready.ready, ready_s: .ready.ready_s, cgroup: .cgroup.version, read_back: .cgroup.read_back}' $work/cold.json)"
  limits cold "$id"
  say cold parent_subtree_control "[$(cat $cgd/cgroup.subtree_control)]"
  say cold root_subtree_control "[$(cat $cg/cgroup.subtree_control)]"
  say cold parent_procs "$(cat $cgd/cgroup.procs | wc -l)"
else
  fail cold "pipelines/cold.sh exited $?"
  exit 1
fi
# The second of the audit's cold pair (drums-audit --control), as on the host (tests/audit.rs), made as
# the first.
if DRUMS_OVERLAY_ARGS=--host-ids "$here/pipelines/cold.sh" > $work/cold2.json 2> $work/cold2.err; then
  id2=$(jq -r .id $work/cold2.json)
  say cold2 id "$id2"
else
  fail cold2 "pipelines/cold.sh exited $?"
  exit 1
fi

# ---- checkpoint (the source left running: it is the control pair's first session) ----
t=$(now)
if drums-ckpt --clean --leave-running < $work/cold.json > $work/ckpt.json 2> $work/ckpt.err; then
  say ckpt wall_s "$(elapsed "$t")"
  say ckpt record "$(jq -c '{id, image_bytes, dump_s, criu_options}' $work/ckpt.json)"
  ckpt=$(jq -r .id $work/ckpt.json)
  # Frozen through cgroup.freeze for the dump, thawed after it.
  limits ckpt "$id"
else
  fail ckpt "drums-ckpt exited $?"
  exit 1
fi

# ---- two siblings ----
t=$(now)
if "$here/pipelines/restore.sh" --count 2 < $work/ckpt.json > $work/siblings.json 2> $work/restore.err; then
  say restore wall_s "$(elapsed "$t")"
  n=0
  while IFS= read -r rec; do
    n=$((n + 1))
    sid=$(jq -r .id <<< "$rec")
    say restore sibling "$(jq -c '{id, hostname: .ns.hostname, mac: .net.session_mac, ready: .ready.ready, restore_s: .restore.times.total_s, reseed_s: .reseed.total_s, criu: .restore.criu_options, read_back: .cgroup.read_back, cgroup: .cgroup.paths}' <<< "$rec")"
    limits restore "$sid"
  done < $work/siblings.json
  say restore count "$n"
  # The revision-2a rule with the cold pair as its control (drums-audit(1)): the literal one fails by design
  # on the /dev/null and /dev/urandom every session shares; both verdicts are printed, and the exit status.
  drums-audit --rule revision-2a --control "$id,$id2" < $work/siblings.json > $work/audit.json 2> $work/audit.err
  rc=$?
  say audit exit "$rc"
  say audit report "$(jq -c '{rule, complete, sessions: (.sessions | length), control_cold: .control.cold, revision_2a: .verdicts.revision_2a.pass, revision_2a_failed_on: [.verdicts.revision_2a.failed_on[]?.id], literal: .verdicts.literal.pass, literal_failed_on: ([.verdicts.literal.failed_on[]?.id] | unique), introduced_by_restore: (.introduced_by_restore | if . == null then null else [.[]?.id] end), confined: [.boundary[]?.confined]}' $work/audit.json 2>/dev/null)"
  [ "$rc" = 0 ] || fail audit "drums-audit exited $rc"
else
  fail restore "pipelines/restore.sh exited $?"
fi
# ---- the cgroup escapes, from inside the cold session and the first sibling, as user and as root ----
# escape_state: what the guest's side must still show afterwards: each attacked session's limit files, the
# entries of drums/, the cgroup2 and sysfs mounts.
sid1=$(head -n1 $work/siblings.json | jq -r .id)
ids="$id $id2 $(jq -r .id $work/siblings.json | tr '\n' ' ')"
escape_state() {
  for s in "$id" "$sid1"; do
    for f in memory.max memory.high memory.swap.max pids.max cpu.max cpu.weight cgroup.freeze cgroup.subtree_control; do
      echo "$s/$f=$(cat $cgd/$s/$f 2>&1)"
    done
  done
  echo "drums/: $(ls $cgd | tr '\n' ' ')"
  awk '$3 ~ /^(cgroup|cgroup2|sysfs)$/' /proc/mounts
}
if [ -n "$sid1" ] && [ "$sid1" != null ]; then
  escape_state > $work/escape.before
  attack=$(cat "$here/tests/data/cgroup-attack.py")
  for who in user root; do
    for s in "$id" "$sid1"; do
      label=$([ "$s" = "$id" ] && echo cold || echo sibling)-$who
      others=$(for o in $ids; do [ "$o" = "$s" ] || printf '%s ' "$o"; done)
      if [ $who = root ]; then run='echo password | sudo -S -p "" python3 -c "$ATTACK" "$@"'; else run='python3 -c "$ATTACK" "$@"'; fi
      # shellcheck disable=SC2086
      drums-ns exec --session "$s" --user user --env "ATTACK=$attack" -- sh -c "$run" sh $others > $work/escape.out 2> $work/escape.err
      say escape rc "$label $?"
      sed "s/^/DRUMS-V2 escape $label /" $work/escape.out
      sed "s/^/DRUMS-V2 escape errout $label: /" $work/escape.err | tail -n 5
    done
  done
  escape_state > $work/escape.after
  if cmp -s $work/escape.before $work/escape.after; then
    say escape host_unchanged "yes $(grep -c . $work/escape.before) lines"
  else
    say escape host_unchanged no
    diff $work/escape.before $work/escape.after | sed 's/^/DRUMS-V2 escape changed /'
  fi
  sed 's/^/DRUMS-V2 escape state /' $work/escape.after
fi

t=$(now)
cat $work/cold.json $work/cold2.json >> $work/siblings.json
[ -s $work/siblings.json ] && { drums-sweep < $work/siblings.json > $work/sweep1.json 2> $work/sweep1.err || fail sweep1 "drums-sweep exited $?"; }
say sweep1 wall_s "$(elapsed "$t")"
say sweep1 left "$(find $cgd -mindepth 1 -type d | wc -l)"

# ---- a pool: fill one, take it ----
t=$(now)
if drums-pool fill --checkpoint "$ckpt" --depth 1 > $work/fill.json 2> $work/fill.err; then
  say fill wall_s "$(elapsed "$t")"
  say fill records "$(jq -c '{type, session: (.session // .id // null)}' $work/fill.json | tr '\n' ' ')"
  for d in $cgd/*/; do limits fill "$(basename "$d")"; done
else
  fail fill "drums-pool fill exited $?"
fi
t=$(now)
if drums-pool take --checkpoint "$ckpt" --ready-timeout "$ready_timeout" > $work/take.json 2> $work/take.err; then
  say take wall_s "$(elapsed "$t")"
  tid=$(jq -r .id $work/take.json)
  say take record "$(jq -c '{id, ready: .ready.ready, pool: .pool}' $work/take.json)"
  limits take "$tid"
  drums-sweep < $work/take.json > /dev/null 2> $work/sweep2.err || fail sweep2 "drums-sweep exited $?"
else
  fail take "drums-pool take exited $?"
fi

# ---- a filler SIGKILLed while it restores ----
before=$(find $cgd -mindepth 1 -maxdepth 1 -type d | wc -l)
drums-pool fill --checkpoint "$ckpt" --depth 1 > $work/fill2.json 2> $work/fill2.err &
filler=$!
t=$(now)
# Once its sibling's cgroup exists CRIU is about to run or running: kill then.
while kill -0 $filler 2>/dev/null && [ "$(find $cgd -mindepth 1 -maxdepth 1 -type d | wc -l)" -le "$before" ]; do sleep 0.2; done
sleep 2
kill -9 $filler 2>/dev/null && say kill filler_killed_after_s "$(elapsed "$t")" || say kill error "the filler had already exited"
wait $filler 2>/dev/null
say kill cgroups_left "$(find $cgd -mindepth 1 -maxdepth 1 -type d -printf '%f,' )"
for d in $cgd/*/; do [ -d "$d" ] && limits kill "$(basename "$d")"; done
t=$(now)
drums-sweep --orphans --older-than 0s > $work/orphans.json 2> $work/orphans.err || fail orphans "drums-sweep --orphans exited $?"
say orphans wall_s "$(elapsed "$t")"
say orphans report "$(jq -c '{sessions: [.sessions[]? | {session, verdict}], destroyed: [.destroyed[]? | {session, removed: [.removed[]?.kind]}], unledgered: [.unledgered.removed[]? | {kind, name}], left}' $work/orphans.json 2>/dev/null | tr '\n' ' ')"
drums-pool drain --checkpoint "$ckpt" > $work/drain.json 2> $work/drain.err || fail drain "drums-pool drain exited $?"
drums-sweep --orphans --older-than 0s > /dev/null 2>> $work/orphans.err || true

# ---- nothing left ----
rm -rf "$(jq -r .dir $work/ckpt.json)"
say census cgroups "[$(find $cgd -mindepth 1 -type d -printf '%P ' 2>/dev/null)]"
say census mounts "[$(awk '$2 ~ /^\/run\/drums|^\/var\/lib\/drums\/(checkpoints|layers|mapped)/ {printf "%s ", $2}' /proc/mounts)]"
say census ledgers "[$(find /run/drums/sessions -mindepth 1 -maxdepth 1 2>/dev/null -printf '%f ')]"
say census links "[$(ip -o link show | awk -F': ' '$2 ~ /^drums/ {printf "%s ", $2}')]"
say census processes "[$(ps -eo pid=,comm= | awk '$2 ~ /^(Xvfb|chromium|openbox|criu|drums-)/ {printf "%s:%s ", $1, $2}')]"
say census subtree_control_after "[$(cat $cg/cgroup.subtree_control)]"
say census base_subtree_control "[$(cat $base/cgroup.subtree_control)]"
# Nothing of Drums' outside its base: no `drums` directory anywhere else in the tree.
say census drums_dirs_outside_base "[$(find $cg -name drums -type d -not -path "$cgd" -printf '%P ' 2>/dev/null)]"
