#!/usr/bin/env bash
# One-command setup of a Debian 12 machine for Drums, idempotent: the Debian packages the host side uses,
# CRIU >= 4.2, the release build of the tools, the default session root image (pipelines/image.sh), and
# the man pages. Needs root.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
log() { printf 'setup: %s\n' "$*" >&2; }
[ "$(id -u)" = 0 ] || { echo "setup: run as root" >&2; exit 4; }
# The tools are built here, and Debian 12's own Rust is older than the workspace's rust-version: checked
# first, so that a machine without a toolchain is told so before anything is installed.
need_rust="setup: a Rust toolchain >= 1.85 is needed on PATH (install one with rustup)"
command -v cargo >/dev/null 2>&1 || { echo "$need_rust; cargo was not found" >&2; exit 4; }
cargo_version=$(cargo --version | awk '{print $2}')
[ "$(printf '%s\n' 1.85 "$cargo_version" | sort -V | head -n1)" = 1.85 ] \
  || { echo "$need_rust; cargo is $cargo_version" >&2; exit 4; }

# Host side: mmdebstrap builds the session root images (sessions run nothing of the host's /); Xvfb,
# openbox and the Python modules serve the guest's own tests, which run drums-guest on the host (ffmpeg,
# gsettings and GNOME's schemas: its recording and wallpaper endpoints). drums-view serves noVNC's page
# (novnc) and its tests drive the host's Chromium through chromium-driver.
packages=(mmdebstrap xvfb openbox dbus dbus-x11 at-spi2-core chromium x11-utils x11-xserver-utils iproute2 iptables nftables
  python3 python3-xlib python3-pil python3-tk python3-pip python3-venv python3-pyatspi python3-numpy sudo mandoc man-db jq curl procps psmisc
  busybox-static cpio qemu-system-x86 binutils fonts-dejavu-core openssl xdg-utils
  ffmpeg libglib2.0-bin gsettings-desktop-schemas novnc chromium-driver dnsmasq-base)
missing=()
for p in "${packages[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >&2
  apt-get install -y -q --no-install-recommends "${missing[@]}" >&2
fi

log "CRIU"
criu=$("$here/pipelines/install-criu.sh")
log "CRIU is $criu"

log "building the tools (release)"
(cd "$here" && cargo build --release --workspace --quiet >&2)

log "session root image"
PATH="$here/target/release:$PATH" "$here/pipelines/image.sh" > /dev/null
# The layer of host files that sessions ran on before they had root images.
rm -rf /var/lib/drums/template

for hook in "$here"/pipelines/setup.d/*.sh; do
  [ -e "$hook" ] || continue
  log "running ${hook#$here/}"
  bash "$hook" >&2
done

log "man pages"
mkdir -p /usr/local/share/man/man1 /usr/local/share/man/man7
for page in "$here"/man/*.1; do [ -e "$page" ] && install -m 644 "$page" /usr/local/share/man/man1/; done
for page in "$here"/man/*.7; do [ -e "$page" ] && install -m 644 "$page" /usr/local/share/man/man7/; done
mandb -q >/dev/null 2>&1 || true
log "done"
