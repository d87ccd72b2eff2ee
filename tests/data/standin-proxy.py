#!/usr/bin/python3
"""The stand-in internet's upstream HTTP proxy (tests/data/standin.sh, tests/egress.rs): what an operator's
proxy box does for sessions given `--proxy`. Absolute-URI requests (GET, HEAD, POST) are fetched and
answered; CONNECT opens a tunnel. Every request is logged before it is served, one line
"CLIENT METHOD TARGET" in LOG, so a test can tell what reached the stand-in through the proxy.

  standin-proxy.py LISTEN_ADDR PORT LOG

It runs inside the stand-in's namespace, whose resolver is the stand-in's own DNS server: it reaches
nothing but the stand-in.
"""
import http.client
import http.server
import select
import socket
import socketserver
import sys
import threading
import urllib.parse

LOCK = threading.Lock()


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, *args):
        pass

    def note(self):
        with LOCK, open(self.server.log, "a") as f:
            f.write(f"{self.client_address[0]} {self.command} {self.path}\n")

    def forward(self):
        self.note()
        u = urllib.parse.urlsplit(self.path)
        if u.scheme != "http" or not u.hostname:
            self.send_error(400, "absolute http:// URI expected")
            return
        body = self.rfile.read(int(self.headers.get("Content-Length", 0) or 0))
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("proxy-connection", "connection", "keep-alive")}
        try:
            c = http.client.HTTPConnection(u.hostname, u.port or 80, timeout=10)
            c.request(self.command, urllib.parse.urlunsplit(("", "", u.path or "/", u.query, "")), body=body or None, headers=headers)
            r = c.getresponse()
        except OSError as e:
            self.send_error(502, f"upstream: {e}")
            return
        self.send_response(r.status, r.reason)
        for k, v in r.getheaders():
            if k.lower() not in ("connection", "keep-alive", "transfer-encoding"):
                self.send_header(k, v)
        self.send_header("Connection", "close")
        self.end_headers()
        while True:
            b = r.read(1 << 16)
            if not b:
                break
            self.wfile.write(b)
        c.close()

    do_GET = do_HEAD = do_POST = forward

    def do_CONNECT(self):
        self.note()
        host, _, port = self.path.rpartition(":")
        try:
            up = socket.create_connection((host, int(port)), timeout=10)
        except (OSError, ValueError) as e:
            self.send_error(502, f"upstream: {e}")
            return
        self.send_response(200, "Connection established")
        self.end_headers()
        self.wfile.flush()
        ends = [self.connection, up]
        while True:
            ready, _, _ = select.select(ends, [], [], 30)
            if not ready:
                break
            for s in ready:
                b = s.recv(1 << 16)
                if not b:
                    up.close()
                    return
                (up if s is self.connection else self.connection).sendall(b)
        up.close()


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


if __name__ == "__main__":
    srv = Server((sys.argv[1], int(sys.argv[2])), Handler)
    srv.log = sys.argv[3]
    open(srv.log, "a").close()
    srv.serve_forever()
