#!/usr/bin/env bash
# Installs CRIU >= 4.2 for Drums, idempotently.
# A system criu that is >= 4.2 and passes `criu check` is preferred (the private path becomes a link to it).
# Otherwise CRIU 4.2 and its runtime
# libraries are downloaded from Debian's unstable suite into a private directory (nothing is installed
# system-wide) and run through that directory's own dynamic loader. The mirror is the one this machine's apt
# is already configured with. Prints the path of a criu launcher on stdout.
set -euo pipefail

prefix=${DRUMS_CRIU_HOME:-/opt/drums/criu}
launcher="$prefix/bin/criu"

version_ok() { # $1: a criu binary or launcher
  local v; v=$("$1" --version 2>/dev/null | sed -n 's/^Version: *//p' | head -n1)
  [ -n "$v" ] || return 1
  local major=${v%%.*} rest=${v#*.}; local minor=${rest%%.*}
  [ "$major" -gt 4 ] || { [ "$major" -eq 4 ] && [ "$minor" -ge 2 ]; }
}
check_ok() { "$1" check >/dev/null 2>&1; }

# A good system criu is preferred: the tools' default path ($launcher, drums(7)) then links to it.
if sys=$(command -v criu) && [ "$(readlink -f "$sys")" != "$(readlink -f "$launcher" 2>/dev/null)" ] && version_ok "$sys" && check_ok "$sys"; then
  [ -d "$prefix/root" ] && rm -rf "$prefix"
  mkdir -p "$prefix/bin"; ln -sfn "$sys" "$launcher"; echo "$launcher"; exit 0
fi
if [ -x "$launcher" ] && version_ok "$launcher" && check_ok "$launcher"; then echo "$launcher"; exit 0; fi

mirror=""
for f in /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] || continue
  uri=$(awk '/^URIs:/ {print $2; exit}' "$f")
  case "$uri" in *debian-security*|"") ;; *) mirror=$uri; break ;; esac
done
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
  mirror=$(awk '$1=="deb" && $0 !~ /security/ {for(i=2;i<=NF;i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' /etc/apt/sources.list)
fi
[ -n "$mirror" ] || { echo "install-criu: no Debian mirror found in the apt sources" >&2; exit 1; }

work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$work/lists/partial" "$work/archives/partial" "$work/cache"
echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror sid main" > "$work/sources.list"
apt_opts=(-o Dir::Etc::SourceList="$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o Dir::State::Lists="$work/lists" -o Dir::Cache="$work/cache" -o Dir::State::Status=/dev/null
  -o APT::Architecture=amd64 -o Acquire::Check-Valid-Until=false -o Debug::NoLocking=1)
apt-get "${apt_opts[@]}" update -q >&2
pkgs=(criu libcompel1 libc6 libnet9 libnl-3-200 libnftables1 libnftnl11 libprotobuf-c1 libbsd0 libmd0 libuuid1
  libgnutls30t64 libjansson4 libxtables12 libmnl0 libbpf1 libelf1t64 zlib1g libzstd1 libcap2 libedit2 libtinfo6
  libidn2-0 libunistring5 libp11-kit0 libffi8 libtasn1-6 libnettle8t64 libhogweed6t64 libgmp10 libnl-route-3-200
  libgcc-s1 libsystemd0 liblz4-1 liblzma5 libgcrypt20 libgpg-error0 libcap-ng0 libselinux1 libpcre2-8-0 libaudit1)
(cd "$work/archives" && apt-get "${apt_opts[@]}" download "${pkgs[@]}" >&2)
rm -rf "$prefix.new"; mkdir -p "$prefix.new/root" "$prefix.new/bin"
for deb in "$work"/archives/*.deb; do dpkg-deb -x "$deb" "$prefix.new/root"; done
cat > "$prefix.new/bin/criu" <<LAUNCH
#!/bin/sh
# CRIU from Debian unstable, run through its own loader and libraries (see pipelines/install-criu.sh).
r="$prefix/root"
exec "\$r/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" --library-path "\$r/usr/lib/x86_64-linux-gnu:\$r/lib/x86_64-linux-gnu" "\$r/usr/sbin/criu" "\$@"
LAUNCH
chmod 755 "$prefix.new/bin/criu"
rm -rf "$prefix"; mv "$prefix.new" "$prefix"
version_ok "$launcher" || { echo "install-criu: $launcher is not CRIU >= 4.2" >&2; exit 1; }
if ! "$launcher" check >&2; then echo "install-criu: 'criu check' failed with $launcher" >&2; exit 1; fi
echo "$launcher"
