#!/usr/bin/env bash
# Build a session root image: a complete, read-only Debian 12 tree made from Debian's packages by
# mmdebstrap, with the desktop account, pyautogui and Drums' clone-hygiene hook in it, and nothing of the
# host's accounts, keys or state. drums-overlay mounts it as the lowest layer of every session
# (drums-overlay(1), "ROOT IMAGES").
#
#   pipelines/image.sh                                  the default image `desktop`
#   pipelines/image.sh --name office --packages FILE    an image with FILE's packages too
#
# Idempotent: an image whose inputs (packages asked for, pip set, this script, the hook) are those of the
# image the name points at is not built again; --rebuild builds anyway (newer package versions). An image
# is never changed in place: a build makes a new directory <root>/<name>-<digest>/ and then moves the link
# <root>/<name> to it; older images stay until `drums-sweep --prune-root-images` finds nothing that uses
# them. Prints the image's record (one JSON line, docs/record.md "Root images") on stdout.
#
# Exit codes: 0 built or already there; 2 usage; 4 the machine lacks something (root, mmdebstrap,
# drums-overlay, a Debian source); 5 the build failed.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
root=${DRUMS_IMAGE_DIR:-/var/lib/drums/images}
suite=bookworm
name=desktop
rebuild=0
package_files=("$here/pipelines/images/desktop.packages")
pip_file="$here/pipelines/images/desktop.pip"
hook="$here/tools/drums-guest/src/sitecustomize.py"
user=user
password=password
uid=1000

usage() {
  cat <<EOF
usage: pipelines/image.sh [--name NAME] [--packages FILE]... [--rebuild]

Build (or find) the session root image NAME (default: desktop) under \$DRUMS_IMAGE_DIR
(default: /var/lib/drums/images) and print its record as one JSON line.

  --name NAME       the image's name: [a-z0-9][a-z0-9-]* (at most 32)
  --packages FILE   Debian packages to install besides pipelines/images/desktop.packages, one per
                    line, # comments; may be repeated
  --rebuild         build a new image even when one with the same inputs exists
  -h, --help        this text

Exit codes: 0 done; 2 usage; 4 the machine lacks something; 5 the build failed.
EOF
}
log() { printf 'image: %s\n' "$*" >&2; }
die() { local code=$1; shift; log "$*"; exit "$code"; }

while [ $# -gt 0 ]; do
  case $1 in
    --name) [ $# -ge 2 ] || { usage >&2; exit 2; }; name=$2; shift 2 ;;
    --packages) [ $# -ge 2 ] || { usage >&2; exit 2; }; [ -f "$2" ] || die 2 "--packages: $2 is not a file"; package_files+=("$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"); shift 2 ;;
    --rebuild) rebuild=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done
[[ $name =~ ^[a-z0-9][a-z0-9-]{0,31}$ ]] || die 2 "--name: \`$name\` is not [a-z0-9][a-z0-9-]* of at most 32"
[ "$(id -u)" = 0 ] || die 4 "run as root"
command -v mmdebstrap >/dev/null || die 4 "mmdebstrap is missing (pipelines/setup.sh installs it)"
overlay_tool=$(command -v drums-overlay || true)
[ -n "$overlay_tool" ] || overlay_tool="$here/target/release/drums-overlay"
[ -x "$overlay_tool" ] || die 4 "drums-overlay is not built (pipelines/setup.sh builds it)"
host_python=/usr/bin/python3
"$host_python" -m pip --version >/dev/null 2>&1 || die 4 "$host_python has no pip (pipelines/setup.sh installs python3-pip)"

# The packages: every line of every list, comments and blanks dropped, each name checked, sorted once.
packages=$(sed -e 's/#.*//' -e 's/[[:space:]]//g' "${package_files[@]}" | grep -v '^$' | sort -u)
bad=$(grep -Ev '^[a-z0-9][a-z0-9+.-]+$' <<<"$packages" || true)
[ -z "$bad" ] || die 2 "not Debian package names: $(tr '\n' ' ' <<<"$bad")"
requirements=$(sed -e 's/#.*//' -e 's/[[:space:]]//g' "$pip_file" | grep -v '^$')
# What the image is made from. Same inputs, same image (until --rebuild): package versions are what the
# archive has at build time, so the content digest, not the inputs, names an image.
inputs=$({ echo "drums-image 1 $suite"; echo "$packages"; echo "$requirements"; sha256sum "$0" "$hook" | cut -d' ' -f1; } | sha256sum | cut -d' ' -f1)

# Closed to other host users (drums(7), "Host-side file safety"): sessions reach their image through
# overlayfs with the mounter's credentials.
mkdir -p "$root"
chmod 700 "$root"
# The images' use lock, shared (drums-overlay(1)): `drums-sweep --prune-root-images` takes it exclusively,
# so it never removes this build's directory while it is being made.
exec 9>"$root/.lock"
flock -s 9
current="$root/$name"
if [ "$rebuild" = 0 ] && [ -f "$current/image.json" ] && [ "$(jq -r .inputs "$current/image.json")" = "$inputs" ]; then
  log "up to date: $(readlink -f "$current")"
  jq -c . "$current/image.json"
  exit 0
fi

# The Debian archive as this machine's apt is configured to reach it: the stanzas (deb822) and lines
# (one-line format) of the suite and its updates and security suites. Written into the image as its
# sources.list; nothing else of the host's apt configuration goes in.
sources=$(mktemp)
build=$(mktemp -d "$root/.build-$name-XXXXXX")
chmod 755 "$build"
trap 'rm -f "$sources"; rm -rf "$build"' EXIT
for f in /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] || continue
  awk -v suite="$suite" 'BEGIN { RS = ""; ORS = "\n\n" } $0 ~ ("Suites:[^\n]*" suite) && $0 ~ /Types:[^\n]*deb/' "$f" >> "$sources"
done
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
  [ -f "$f" ] || continue
  awk -v suite="$suite" '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ "://") { if ($(i+1) ~ ("^" suite)) print; break } }' "$f" >> "$sources"
done
[ -s "$sources" ] || die 4 "no Debian $suite source in this machine's apt configuration"

t0=$(date +%s.%N)
log "mmdebstrap $suite: $(wc -l <<<"$packages") packages and their dependencies"
# Without recommendations, documentation, manual pages or translations: a session needs none of them.
if ! mmdebstrap --mode=root --variant=apt --format=directory --quiet \
    --aptopt='APT::Install-Recommends "false"' \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --include="$(paste -sd, <<<"$packages")" \
    "$suite" "$build/root" "$sources" >&2; then
  die 5 "mmdebstrap failed"
fi
img="$build/root"

# Nothing of the host's: mmdebstrap copies the host's hostname and resolver into the tree. Sessions get
# their hostname and machine id from drums-ns (cold) and drums-reseed (restored siblings); they have no
# name service.
printf 'drums\n' > "$img/etc/hostname"
: > "$img/etc/resolv.conf"
printf '127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' > "$img/etc/hosts"
: > "$img/etc/machine-id"
rm -f "$img/var/lib/dbus/machine-id"
rm -rf "$img/var/log/"* "$img/var/cache/debconf/"*-old "$img/var/lib/apt/lists/"* "$img/tmp/"* "$img/root/.bash_history"
# Device nodes: a session's /dev is its own (drums-ns makes six nodes there); an image holds none.
find "$img/dev" -mindepth 1 -delete

# The desktop account of OSWorld's image: `user`/`password`, uid and gid 1000, home /home/user with
# ~/Desktop, in sudo. The image's own account files (mmdebstrap's fresh ones) gain one line each.
grep -q "^$user:" "$img/etc/passwd" && die 5 "the image already has a user $user"
hash=$(openssl passwd -6 -salt drumsdesktop "$password")
echo "$user:x:$uid:$uid:Desktop user:/home/$user:/bin/bash" >> "$img/etc/passwd"
echo "$user:$hash:19000:0:99999:7:::" >> "$img/etc/shadow"
echo "$user:x:$uid:" >> "$img/etc/group"
echo "$user:!::" >> "$img/etc/gshadow"
sed -i -E "s/^(sudo:x:[0-9]+:)$/\\1$user/; s/^(sudo:x:[0-9]+:.+)$/\\1,$user/" "$img/etc/group"
sed -i -E "s/^(sudo:[^:]*:[^:]*:)$/\\1$user/; s/^(sudo:[^:]*:[^:]*:.+)$/\\1,$user/" "$img/etc/gshadow"
grep -q "^sudo:.*[:,]$user\(,\|$\)" "$img/etc/group" || die 5 "could not add $user to the sudo group"
echo "$user ALL=(ALL:ALL) ALL" > "$img/etc/sudoers.d/drums-desktop-user"
chmod 440 "$img/etc/sudoers.d/drums-desktop-user"
mkdir -p "$img/home/$user/Desktop"
cp -rT "$img/etc/skel" "$img/home/$user"

# What OSWorld's image sets up for the applications it has, done here only for those this image has (the
# default image has neither, so gains nothing). VLC: its web interface on (OSWorld's vlc getters read
# http://SESSION:8080/requests/status.xml, VLC's default port, with the password `password`, as OSWorld's
# server README has it set), no first-run privacy dialog over the player and no metadata lookups on a
# network sessions do not have. No other key: the vlc tasks' metrics read their keys' defaults from
# absence (qt-bgcone, qt-max-volume, input-record-path...), so a task scores 0 before the agent acts.
if [ -x "$img/usr/bin/vlc" ]; then
  mkdir -p "$img/home/$user/.config/vlc"
  cat > "$img/home/$user/.config/vlc/vlcrc" <<'VLCRC'
# Drums (pipelines/image.sh): as on OSWorld's image, VLC's web interface on port 8080, password `password`.
[core]
extraintf=http
metadata-network-access=0
[qt]
qt-privacy-ask=0
[lua]
http-password=password
VLCRC
fi
# Ctrl+Alt+T opens gnome-terminal, as on OSWorld's Ubuntu desktop. openbox reads the user's rc.xml instead
# of Debian's when there is one, so that file is Debian's with this one key binding more.
if [ -x "$img/usr/bin/gnome-terminal" ]; then
  mkdir -p "$img/home/$user/.config/openbox"
  sed '0,/^<keyboard>$/s//<keyboard>\n  <!-- Drums (pipelines\/image.sh): a terminal, as on OSWorld'"'"'s image. -->\n  <keybind key="C-A-t"><action name="Execute"><command>gnome-terminal<\/command><\/action><\/keybind>/' \
    "$img/etc/xdg/openbox/rc.xml" > "$img/home/$user/.config/openbox/rc.xml"
  grep -q '<keybind key="C-A-t">' "$img/home/$user/.config/openbox/rc.xml" || die 5 "could not bind Ctrl+Alt+T in openbox's rc.xml"
fi
# Sound: sessions have no sound card, so PulseAudio (where the image has it: os tasks read the volume with
# pactl) gets a null sink as its default, at half volume. Its own fallback null sink starts at 100%, which
# made os/28cc3b7e ("the volume is too small ... turn up to the max") score 1 before the agent acted; on
# OSWorld's machine the volume starts below the maximum.
if [ -x "$img/usr/bin/pulseaudio" ]; then
  mkdir -p "$img/etc/pulse/default.pa.d"
  cat > "$img/etc/pulse/default.pa.d/drums.pa" <<'PA'
# Drums (pipelines/image.sh): no sound card in a session; a null sink at 50% is the default.
load-module module-null-sink sink_name=drums sink_properties=device.description=Drums
set-default-sink drums
set-sink-volume drums 32768
PA
  # The sound server stays up once started, as a login's does on OSWorld's Ubuntu (systemd keeps it
  # running there and its volumes persist). PulseAudio's own default ends an idle daemon after 20 s, and
  # the next `pulseaudio --start` begins again at the 50% above: os/28cc3b7e's evaluator, 20 s after the
  # agent turned the volume up (OSWorld's wait before evaluate()), read 50 where the agent had set 100.
  sed -i 's/^; *exit-idle-time = .*/exit-idle-time = -1/' "$img/etc/pulse/daemon.conf"
  grep -q '^exit-idle-time = -1$' "$img/etc/pulse/daemon.conf" || die 5 "could not keep PulseAudio up when idle (daemon.conf)"
fi
# LibreOffice's profile as after a first start, as on OSWorld's image, where LibreOffice has been started
# before: no first-start wizard, no tip of the day, no template chooser when Impress starts (Impress's Misc/NewDoc/AutoPilot, its "Show this dialog at
# startup"), no "what's new"
# or "get involved" bar. LibreOffice keeps what the user changed in registrymodifications.xcu and writes the
# rest of its profile at its first start; only these keys are set (the libreoffice tasks' evaluators read
# other keys of the same file, such as AutoSave's, from their absence).
if [ -x "$img/usr/bin/soffice" ]; then
  lo_version=$(dpkg-query --admindir="$img/var/lib/dpkg" -W -f '${Version}' libreoffice-core | sed -E 's/^[0-9]+://; s/^([0-9]+\.[0-9]+).*/\1/')
  [[ $lo_version =~ ^[0-9]+\.[0-9]+$ ]] || die 5 "could not read LibreOffice's version (libreoffice-core: $lo_version)"
  now=$(date +%s)
  mkdir -p "$img/home/$user/.config/libreoffice/4/user"
  cat > "$img/home/$user/.config/libreoffice/4/user/registrymodifications.xcu" <<XCU
<?xml version="1.0" encoding="UTF-8"?>
<oor:items xmlns:oor="http://openoffice.org/2001/registry" xmlns:xs="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
<item oor:path="/org.openoffice.Setup/Office"><prop oor:name="FirstStartWizardCompleted" oor:op="fuse"><value>true</value></prop></item>
<item oor:path="/org.openoffice.Setup/Product"><prop oor:name="ooSetupLastVersion" oor:op="fuse"><value>$lo_version</value></prop></item>
<item oor:path="/org.openoffice.Setup/Product"><prop oor:name="LastTimeGetInvolvedShown" oor:op="fuse"><value>$now</value></prop></item>
<item oor:path="/org.openoffice.Setup/Product"><prop oor:name="LastTimeDonateShown" oor:op="fuse"><value>$now</value></prop></item>
<item oor:path="/org.openoffice.Office.Common/Misc"><prop oor:name="ShowTipOfTheDay" oor:op="fuse"><value>false</value></prop></item>
<item oor:path="/org.openoffice.Office.Impress/Misc/NewDoc"><prop oor:name="AutoPilot" oor:op="fuse"><value>false</value></prop></item>
</oor:items>
XCU
fi
# Totem the default video player, as on OSWorld's Ubuntu: every video type its desktop file names, in the
# system's mimeapps.list (xdg-mime reads the user's ~/.config/mimeapps.list first, where
# `xdg-mime default` writes; multi_apps/937087b6 asks the agent to make VLC the default).
totem_desktop="$img/usr/share/applications/org.gnome.Totem.desktop"
if [ -f "$totem_desktop" ]; then
  {
    printf '# Drums (pipelines/image.sh): Totem plays video by default, as on OSWorld'"'"'s Ubuntu.\n[Default Applications]\n'
    sed -n 's/^MimeType=//p' "$totem_desktop" | tr ';' '\n' | grep '^video/' | sort -u | sed 's/$/=org.gnome.Totem.desktop/'
  } > "$img/etc/xdg/mimeapps.list"
  grep -q '^video/mp4=' "$img/etc/xdg/mimeapps.list" || die 5 "Totem's desktop file names no video/mp4"
fi
# The time zone through systemd-timedated, as on OSWorld's Ubuntu, where `timedatectl` asks it over the
# system bus (os/b6781586's evaluator reads `timedatectl status`). A session has no systemd to start it, so
# D-Bus does, on demand: drums-desktop starts a system bus in a session whose image has D-Bus system
# services (drums-desktop(1)), and Debian's service file, which names a systemd unit and runs /bin/false
# otherwise, is replaced by one that names the daemon itself, run as root. The agent's
# `sudo timedatectl set-timezone` is root's call, which timedated allows without polkit. (timedatectl itself
# still refuses in a session: it first asks sd_booted(), whether /run/systemd/system exists, and a session,
# whose init is Drums', does not claim systemd; docs/osworld.md.)
# The image's zone is one that is not UTC+0 in any season (America/New_York: -0500, -0400): the task asks to
# set UTC+0, so on a machine already there it would score 1 before the agent acted. OSWorld's own zone is
# not known here.
timedated=/usr/lib/systemd/systemd-timedated
if [ -x "$img$timedated" ]; then
  timedate_service="$img/usr/share/dbus-1/system-services/org.freedesktop.timedate1.service"
  [ -f "$timedate_service" ] || die 5 "systemd-timedated is there, its D-Bus service file is not"
  cat > "$timedate_service" <<SERVICE
# Drums (pipelines/image.sh): no systemd in a session; D-Bus starts the daemon itself.
[D-BUS Service]
Name=org.freedesktop.timedate1
Exec=$timedated
User=root
SERVICE
  ln -sfn ../usr/share/zoneinfo/America/New_York "$img/etc/localtime"
  echo America/New_York > "$img/etc/timezone"
  [ -f "$img/usr/share/zoneinfo/America/New_York" ] || die 5 "no zone America/New_York in the image (tzdata)"
fi
chown -R "$uid:$uid" "$img/home/$user"
chmod 755 "$img/home/$user"

# Chromium started by anything in a session (xdg-open, a task's `google-chrome`, the agent) gets its own
# sandbox when the session lets it make the nested user, PID and network namespaces the sandbox needs,
# else `--no-sandbox` (the session is the sandbox, drums(7) SECURITY). The choice is made when Chromium
# starts, by trying those namespaces, not from the session's uid_map: a restored sibling runs in a user
# namespace of its own under its checkpoint's seccomp filter, which (made with host ids) refuses them.
# Nothing that calls out to a network sessions do not have. Debian's chromium wrapper reads
# /etc/chromium.d.
cat > "$img/etc/chromium.d/drums" <<'FLAGS'
# Drums sessions (pipelines/image.sh): Chromium's own sandbox where the session allows the nested
# namespaces it needs (a cold session in its own user namespace), else the session is its sandbox.
drums_sandbox=--no-sandbox
unshare --user --pid --net --fork true 2>/dev/null && drums_sandbox=
export CHROMIUM_FLAGS="$CHROMIUM_FLAGS $drums_sandbox --test-type --disable-background-networking --disable-component-update --disable-sync --disable-quic --no-first-run --no-default-browser-check --password-store=basic"
unset drums_sandbox
FLAGS

# The names OSWorld's tasks use: `python` for python3, `google-chrome` for the browser, which starts
# Chromium with the profile OSWorld's chrome getters read (~/.config/google-chrome) unless the caller names
# one. Its process is named `chrome`, as Google Chrome's is: the chrome tasks' evaluators stop the browser
# with `pkill chrome` (process names) so that it writes its Preferences before the getters read them, and
# Debian's binary, named `chromium`, does not match; so google-chrome runs it through a hard link named
# `chrome`, with the flags Debian's wrapper would give it (/etc/chromium.d, read as that wrapper reads it).
# Not a symbolic link: Chromium starts its processes again from /proc/self/exe, which names the target.
# (rm first: an older image's google-chrome is a link to chromium, which `cat >` would write through.)
ln -sfn python3 "$img/usr/bin/python"
ln -f "$img/usr/lib/chromium/chromium" "$img/usr/lib/chromium/chrome"
rm -f "$img/usr/bin/google-chrome"
cat > "$img/usr/bin/google-chrome" <<'WRAP'
#!/bin/sh
# Drums (pipelines/image.sh): OSWorld's `google-chrome`, Chromium with Chrome's profile directory, its
# process named `chrome` as Google Chrome's is (`pkill chrome` stops it).
for f in /etc/chromium.d/*; do [ -f "$f" ] && . "$f"; done
case " $* " in *" --user-data-dir="*) exec /usr/lib/chromium/chrome $CHROMIUM_FLAGS "$@" ;; esac
exec /usr/lib/chromium/chrome $CHROMIUM_FLAGS --user-data-dir="$HOME/.config/google-chrome" "$@"
WRAP
chmod 755 "$img/usr/bin/google-chrome"

# pyautogui and its pure-Python dependencies for the image's python3, in /usr/local (ahead of Debian's
# packages on its path, and no pip file among a Debian package's files).
ver=$(chroot "$img" /usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
log "pip (python $ver): $(tr '\n' ' ' <<<"$requirements")"
# shellcheck disable=SC2086
"$host_python" -m pip install --quiet --disable-pip-version-check --no-cache-dir --no-warn-script-location \
  --no-deps --no-compile --root-user-action=ignore --target "$img/usr/local/lib/python$ver/dist-packages" $requirements >&2 || die 5 "pip failed"
chmod -R a+rX "$img/usr/local"

# The clone-hygiene hook: sitecustomize for the image's python3 (SIGUSR1 reseeds random and numpy in
# restored siblings; drums-guest(1), "CLONE HYGIENE"). On Debian the file is a link into /etc.
hook_target=/usr/lib/python$ver/sitecustomize.py
[ -L "$img$hook_target" ] && hook_target=$(readlink -f "$img$hook_target") && hook_target=${hook_target#"$img"}
{
  cat "$hook"
  if [ -f "$img$hook_target" ]; then
    printf '\n# Debian'"'"'s own %s follows.\n' "$hook_target"
    cat "$img$hook_target"
  fi
} > "$build/sitecustomize.py"
install -m 644 "$build/sitecustomize.py" "$img$hook_target"
rm "$build/sitecustomize.py"
chroot "$img" /usr/bin/python3 -c 'import pymsgbox, pytweening, pyscreeze, pyrect, PIL, Xlib, pyatspi, sitecustomize' \
  || die 5 "the image's python3 does not import pyautogui's modules or the hook"

# Font caches for every font directory as the tree is now: a directory changed after the package
# triggers ran would otherwise make fontconfig rescan it in every session start (into the session's upper).
chroot "$img" /usr/bin/fc-cache -s -f >&2 || die 5 "fc-cache failed"
rm -rf "$img/root/.cache"

# The record: the packages installed (name, version), the content digest of the tree, its size.
dpkg-query --admindir="$img/var/lib/dpkg" -W -f '${Package}\t${Version}\n' | sort > "$build/packages.tsv"
log "digest of $(du -sh "$img" | cut -f1)"
digest_json=$("$overlay_tool" image digest "$img") || die 5 "drums-overlay image digest failed"
digest=$(jq -r .digest <<<"$digest_json")
short=${digest#sha256:}; short=${short:0:12}
final="$root/$name-$short"
t1=$(date +%s.%N)
jq -n -c --arg name "$name" --arg dir "$final" --arg inputs "$inputs" --arg suite "$suite" \
  --argjson d "$digest_json" --argjson build_s "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')" \
  --arg asked "$packages" --rawfile installed "$build/packages.tsv" --arg pip "$requirements" \
  '{drums: 1, type: "image", name: $name, dir: $dir, root: ($dir + "/root"), digest: $d.digest,
    files: $d.files, bytes: $d.bytes, suite: $suite, inputs: $inputs,
    packages_asked: ($asked | split("\n")), pip: ($pip | split("\n")),
    packages: ($installed | split("\n") | map(select(. != "") | split("\t") | {name: .[0], version: .[1]})),
    built_at: now, build_s: $build_s}' > "$build/image.json"

if [ -e "$final" ]; then
  # The same tree, byte for byte: the image exists already; this build is dropped.
  log "identical to $final"
else
  mv "$build" "$final"
  mkdir "$build"
fi
# The name moves to the new image in one rename; sessions made before keep the image they named.
ln -sfn "$(basename "$final")" "$root/.$name.link"
mv -T "$root/.$name.link" "$current"
log "image $name: $final ($(jq -r '.bytes / 1048576 | floor' "$final/image.json") MiB, $(jq -r .files "$final/image.json") files, built in $(jq -r '.build_s | floor' "$final/image.json") s)"
jq -c . "$final/image.json"
