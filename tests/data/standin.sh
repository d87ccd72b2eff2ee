#!/usr/bin/env bash
# The egress tests' stand-in internet (tests/egress.rs): a network namespace of the test's own holding a
# web server and a DNS server on documentation addresses, joined to the host by a veth that sessions use
# as their uplink. Nothing in it routes anywhere else: it has no default route.
#   standin.sh up NS HOSTIF DIR     make it (DIR: the web root, created; logs go there too)
#   standin.sh down NS HOSTIF       remove it
# Addresses, all in 198.51.100.0/24 (TEST-NET-2; on these machines the other two documentation ranges are
# taken: the host's own uplink is in TEST-NET-1 and its package mirrors in TEST-NET-3, so neither may be
# put on a link here): the link 198.51.100.0/30 (host .1, stand-in .2); web 198.51.100.10 (and
# .11, .12 for other names; a UDP sink on .10 port 9999), DNS 198.51.100.53; and, so that a filter that fails shows as a connection
# to the stand-in, never as a packet leaving the machine, the stand-in also answers on 10.0.0.10 and
# 169.254.169.254. On 10.0.0.10 port 3128 it runs an upstream HTTP proxy (tests/data/standin-proxy.py,
# requests logged in DIR/proxy.log): a proxy box on the LAN, which resolves names with the stand-in's
# DNS server (/etc/netns/NS/resolv.conf, which `ip netns exec` puts in place of /etc/resolv.conf).
set -euo pipefail
cmd=$1 ns=$2 hif=$3
case "$cmd" in
up)
  dir=$4
  mkdir -p "$dir/www"
  ip netns add "$ns"
  ip link add "$hif" type veth peer name eth0 netns "$ns"
  ip addr add 198.51.100.1/30 dev "$hif"
  ip link set "$hif" up
  ip -n "$ns" addr add 198.51.100.2/30 dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  for a in 198.51.100.10 198.51.100.11 198.51.100.12 198.51.100.53 10.0.0.10 169.254.169.254; do
    ip -n "$ns" addr add "$a/32" dev lo
  done
  printf '<html><head><title>Stand-in page</title></head><body>stand-in internet</body></html>\n' > "$dir/www/index.html"
  [ -f "$dir/www/big.bin" ] || head -c $((100 * 1024 * 1024)) /dev/urandom > "$dir/www/big.bin"
  # Every name the tests use, answered by the stand-in's own DNS server, nothing forwarded; TTL 60 s, but
  # short.example.org 2 s and long.example.org 75 s (an allow list's addresses expire with the answer).
  ip netns exec "$ns" dnsmasq --conf-file=/dev/null --no-resolv --no-hosts --bind-interfaces \
    --listen-address=198.51.100.53 --port=53 --user=nobody --group=nogroup \
    --pid-file="$dir/dns.pid" --log-facility="$dir/dns.log" --log-queries --local-ttl=60 \
    --address=/web.example.org/198.51.100.10 --address=/other.example.org/198.51.100.11 \
    --address=/sub.example.net/198.51.100.12 --address=/a.sub.example.net/198.51.100.12 \
    --address=/private.example.org/10.0.0.10 --address=/meta.example.org/169.254.169.254 \
    --address=/host.example.org/198.51.100.1 \
    --host-record=short.example.org,198.51.100.11,2 --host-record=long.example.org,198.51.100.12,75 \
    --local=/#/
  mkdir -p "/etc/netns/$ns"
  echo "nameserver 198.51.100.53" > "/etc/netns/$ns/resolv.conf"
  : > "$dir/proxy.log"
  ip netns exec "$ns" python3 "$(dirname "$0")/standin-proxy.py" 10.0.0.10 3128 "$dir/proxy.log" > "$dir/proxy.err" 2>&1 &
  ip netns exec "$ns" python3 -m http.server 80 --bind 0.0.0.0 --directory "$dir/www" > "$dir/web.log" 2>&1 &
  echo $! > "$dir/web.pid"
  # A UDP sink on the web address, port 9999: every datagram that arrives, as "SOURCE PAYLOAD" in udp.log
  # (the escape tests' forged packets must never show there).
  : > "$dir/udp.log"
  ip netns exec "$ns" python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("198.51.100.10", 9999))
with open(sys.argv[1], "a") as f:
    while True:
        d, a = s.recvfrom(2048)
        f.write(a[0] + " " + d.decode("utf-8", "replace") + "\n")
        f.flush()
' "$dir/udp.log" > /dev/null 2>&1 &
  for _ in $(seq 50); do
    ip netns exec "$ns" bash -c 'exec 3<>/dev/tcp/198.51.100.10/80 && exec 4<>/dev/tcp/10.0.0.10/3128' 2>/dev/null && exit 0
    sleep 0.1
  done
  echo "the stand-in web server or proxy did not start: $(cat "$dir/proxy.err" 2>/dev/null)" >&2
  exit 1
  ;;
down)
  for p in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
  ip link del "$hif" 2>/dev/null || true
  ip netns del "$ns" 2>/dev/null || true
  rm -rf "/etc/netns/$ns"
  ;;
esac
