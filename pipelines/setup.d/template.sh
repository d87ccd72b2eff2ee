#!/usr/bin/env bash
# The session template layer: a read-only tree that drums-overlay mounts above the host's / in every
# session, so that a session looks like OSWorld's desktop image:
#   - a desktop user `user` (uid 1000 when free) with home /home/user and ~/Desktop, password `password`,
#     allowed to sudo (etc/passwd, shadow, group, gshadow: the host's copies plus that user; sudoers.d);
#   - `python` (-> python3) and pyautogui with its X11 back end, pip-installed for Debian's /usr/bin/python3;
#   - `google-chrome` (-> chromium), the name OSWorld's tasks start the browser by;
#   - the clone-hygiene start-up hook for Python (sitecustomize; SIGUSR1 reseeds random and numpy).
# Idempotent: a file is rewritten only when its content changes, pip runs only when the pinned set changes.
# Needs root. Result: $DRUMS_TEMPLATE_DIR (default /var/lib/drums/template).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
tpl=${DRUMS_TEMPLATE_DIR:-/var/lib/drums/template}
name=user
password=password
python=/usr/bin/python3
# pyautogui and every dependency pinned (installed with --no-deps, so the set is exactly this on every
# machine). Its X11 back end, Xlib, is Debian's python3-xlib: PyPI's `python3-xlib` (2014) that pyautogui
# names fails without a ~/.Xauthority, which sessions do not have.
# Pillow comes from Debian (python3-pil, in setup.sh's list): pip's wheel is 19 MiB, and every session copies
# the template into its own tmpfs, so the template is kept to the small pure-Python modules.
requirements=(pyautogui==0.9.54 pymsgbox==1.0.9 pytweening==1.2.0 pyscreeze==1.0.1 pygetwindow==0.0.9
  pyrect==0.2.0 mouseinfo==0.1.3 pyperclip==1.9.0)
log() { printf 'template: %s\n' "$*" >&2; }
[ "$(id -u)" = 0 ] || { log "run as root"; exit 4; }
[ -x "$python" ] || { log "$python is missing (pipelines/setup.sh installs python3)"; exit 4; }

# install_if_changed MODE OWNER SRC DEST: replace DEST by SRC only when they differ (keeps mtimes stable).
install_if_changed() {
  local mode=$1 owner=$2 src=$3 dest=$4
  if ! cmp -s "$src" "$dest" 2>/dev/null; then
    install -D -m "$mode" -o "${owner%:*}" -g "${owner#*:}" "$src" "$dest"
    log "wrote ${dest#$tpl/}"
  else
    chmod "$mode" "$dest"; chown "$owner" "$dest"
  fi
}

mkdir -p "$tpl"
chmod 755 "$tpl"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The user's ids: what the template already gave it, else 1000 when the host does not use it, else the next free.
uid=$(awk -F: -v n="$name" '$1 == n {print $3}' "$tpl/etc/passwd" 2>/dev/null || true)
if [ -z "$uid" ]; then
  uid=1000
  while getent passwd "$uid" >/dev/null || getent group "$uid" >/dev/null; do uid=$((uid + 1)); done
fi
gid=$uid
home=/home/$name

# Account files: the host's, minus any earlier line for the user, plus the user.
hash=$(openssl passwd -6 -salt drumsdesktop "$password")
grep -v "^$name:" /etc/passwd > "$work/passwd"
echo "$name:x:$uid:$gid:Desktop user:$home:/bin/bash" >> "$work/passwd"
grep -v "^$name:" /etc/shadow > "$work/shadow"
echo "$name:$hash:19000:0:99999:7:::" >> "$work/shadow"
# The user is in its own group and in sudo (as on OSWorld's image).
awk -F: -v OFS=: -v n="$name" '$1 == n {next} $1 == "sudo" {split($4, m, ","); f = 0; for (i in m) if (m[i] == n) f = 1;
  if (!f) $4 = ($4 == "" ? n : $4 "," n)} {print}' /etc/group > "$work/group"
echo "$name:x:$gid:" >> "$work/group"
if [ -e /etc/gshadow ]; then
  awk -F: -v OFS=: -v n="$name" '$1 == n {next} $1 == "sudo" {split($4, m, ","); f = 0; for (i in m) if (m[i] == n) f = 1;
    if (!f) $4 = ($4 == "" ? n : $4 "," n)} {print}' /etc/gshadow > "$work/gshadow"
  echo "$name:!::" >> "$work/gshadow"
  install_if_changed 640 root:shadow "$work/gshadow" "$tpl/etc/gshadow"
fi
install_if_changed 644 root:root "$work/passwd" "$tpl/etc/passwd"
install_if_changed 640 root:shadow "$work/shadow" "$tpl/etc/shadow"
install_if_changed 644 root:root "$work/group" "$tpl/etc/group"
echo "$name ALL=(ALL:ALL) ALL" > "$work/sudoers"
install_if_changed 440 root:root "$work/sudoers" "$tpl/etc/sudoers.d/drums-desktop-user"
chmod 755 "$tpl/etc" "$tpl/etc/sudoers.d"

# Home: skeleton files and ~/Desktop, owned by the user.
mkdir -p "$tpl$home/Desktop"
if [ ! -e "$tpl$home/.profile" ] && [ -d /etc/skel ]; then cp -rT /etc/skel "$tpl$home"; fi
chown -R "$uid:$gid" "$tpl$home"
chmod 755 "$tpl/home" "$tpl$home"

# python -> python3, unless the host has a python of its own.
if [ ! -e /usr/bin/python ] || [ -L "$tpl/usr/bin/python" ]; then
  mkdir -p "$tpl/usr/bin"
  ln -sfn python3 "$tpl/usr/bin/python"
fi

# OSWorld's tasks start Chrome as `google-chrome`: the session's Chromium answers to that name too.
if ! command -v google-chrome >/dev/null && [ -x /usr/bin/chromium ] || [ -L "$tpl/usr/bin/google-chrome" ]; then
  mkdir -p "$tpl/usr/bin"
  ln -sfn chromium "$tpl/usr/bin/google-chrome"
fi

# pyautogui for Debian's python3, in /usr/local/lib/python3.X/dist-packages: on its path ahead of Debian's
# packages, and a directory of its own, so no pip file lands among a Debian package's files.
ver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
"$python" -c 'import Xlib' 2>/dev/null || { log "Debian's python3-xlib is missing (pipelines/setup.sh installs it)"; exit 4; }
site="$tpl/usr/local/lib/python$ver/dist-packages"
stamp="$site/.drums-requirements"
want=$(printf '%s\n' "${requirements[@]}")
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  log "pip: ${requirements[*]}"
  rm -rf "$site.new"
  mkdir -p "$site.new"
  "$python" -m pip install --quiet --disable-pip-version-check --no-cache-dir --no-warn-script-location \
    --no-deps --target "$site.new" "${requirements[@]}" >&2
  rm -rf "$site"
  mv "$site.new" "$site"
  printf '%s\n' "$want" > "$stamp"
fi
chmod -R a+rX "$tpl/usr"

# The Python start-up hook: where Debian's python3 reads sitecustomize (a link into /etc on Debian).
hook_target=/usr/lib/python$ver/sitecustomize.py
if [ -L "$hook_target" ]; then
  hook_target=$(readlink -f "$hook_target")
fi
{
  cat "$here/lib/src/guest/sitecustomize.py"
  if [ -f "$hook_target" ]; then
    printf '\n# The host'"'"'s own %s follows.\n' "$hook_target"
    cat "$hook_target"
  fi
} > "$work/sitecustomize.py"
install_if_changed 644 root:root "$work/sitecustomize.py" "$tpl$hook_target"

# Check what can be checked without a display (pyautogui itself connects to one when imported).
PYTHONPATH="$site" "$python" -c 'import pymsgbox, pytweening, pyscreeze, pyrect, PIL, Xlib' || { log "pyautogui's modules do not import"; exit 5; }
# Earlier versions of this script installed into the Debian directory: leave no stale copy there.
if [ -e "$tpl/usr/lib/python3/dist-packages/.drums-requirements" ]; then rm -rf "$tpl/usr/lib/python3/dist-packages"; fi
log "template ready: $tpl (user $name uid $uid)"
