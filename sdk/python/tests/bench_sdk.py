"""The Python SDK's own overhead (not a unit test: unittest skips bench_*).

    go build -o bin/dryexec ./cmd/dryexec
    DRYEXEC_BIN=bin/dryexec /usr/bin/python3 sdk/python/tests/bench_sdk.py [N]

N (default 60) pairs per line. Each pair is the same request made through the
SDK (Client.run, Session.shell, …) and as bare HTTP over the same unix socket
with only the standard library (a new connection per request, which the SDK,
keeping its connections open, no longer pays; the answer parsed with
json.loads), alternately and on one daemon, so the median of the per-pair
differences is what the SDK adds in Python (building the request, error
mapping, the result's dataclasses, less the connection it keeps) without the
sandbox's noise. What the daemon's HTTP API adds over an in-process trial cannot be
paired from Python (there is no in-process Python trial): that is the Go
benchmarks' ms-overhead (`go test ./server -run '^$' -bench Overhead
-benchtime 60x`); the "raw" column here is the whole round trip from Python.

The daemon is the SDK's usual one: DRYEXEC_SOCKET if set, else a private
`dryexec serve` with its defaults (a warm pool of 2 ns sandboxes for trials).
With a warm pool every timed trial waits (untimed) until the pool is full and
idle, so both sides take a prepared sandbox and no refill runs beside them.
"""

import http.client
import json
import os
import socket
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import dry_exec  # noqa: E402


class _Unix(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("localhost")
        self._path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self._path)


def raw(sock, method, path, body=None):
    """One bare request; returns the decoded JSON answer."""
    c = _Unix(sock)
    try:
        headers, data = {}, None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        c.request(method, path, body=data, headers=headers)
        r = c.getresponse()
        out = r.read()
        if r.status >= 400:
            raise RuntimeError("%s %s: %d %s" % (method, path, r.status, out[:200]))
        return json.loads(out) if out else None
    finally:
        c.close()


def ms(xs):
    return "%8.3f /%8.3f /%8.3f" % (min(xs), statistics.median(xs), max(xs))


def pairs(name, n, sdk, bare, settle=None):
    """Times sdk and bare alternately n times (after one untimed pair)."""
    def timed(f):
        if settle:
            settle()
        t = time.perf_counter()
        f()
        return (time.perf_counter() - t) * 1000

    timed(sdk)
    timed(bare)
    a, b = [], []
    for i in range(n):
        if i % 2 == 0:
            a.append(timed(sdk))
            b.append(timed(bare))
        else:
            b.append(timed(bare))
            a.append(timed(sdk))
    d = [x - y for x, y in zip(a, b)]
    print("%-22s %s   %s   %s" % (name, ms(a), ms(b), ms(d)))


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    c = dry_exec.Client()
    sock = c.transport.socket_path
    if sock is None:
        sys.exit("bench_sdk.py measures over a unix socket: unset DRYEXEC_URL")
    wd = tempfile.mkdtemp()

    def pool_quiet():
        deadline = time.monotonic() + 60
        while True:
            p = c.health().get("pool")
            # Ready and settled (each ready sandbox's command stub started).
            if not p or (p["ready"] == p["size"] and p.get("settled", p["ready"]) == p["ready"] and p["busy"] == 0):
                return
            if time.monotonic() > deadline:
                sys.exit("the trial pool did not settle: %r" % p)
            time.sleep(0.002)

    pool = c.health().get("pool")
    print("daemon on %s, trial pool: %s" % (sock, "size %d (warm)" % pool["size"] if pool else "none (cold)"))
    print("n=%d, ms min / median / max   %-28s %-28s %s" % (n, "SDK", "raw HTTP", "SDK - raw (paired)"))
    pairs("health", n, c.health, lambda: raw(sock, "GET", "/v1/health"))
    req = {"argv": ["/bin/true"], "cwd": wd}
    pairs("trial /bin/true", n, lambda: c.run(["/bin/true"], cwd=wd), lambda: raw(sock, "POST", "/v1/trials", req),
          settle=pool_quiet if pool else None)
    if pool:
        p = c.health()["pool"]
        print("  trial pool: %d hits, %d misses" % (p["hits"], p["misses"]))
    with c.session(rung="ns") as s:
        path = "/v1/sessions/" + s.id
        pairs("session ping", n, s.ping, lambda: raw(sock, "POST", path + "/ping", {}))
        pairs("session shell 'true'", n, lambda: s.shell("true"),
              lambda: raw(sock, "POST", path + "/shell", {"command": "true"}))
    c.close()


if __name__ == "__main__":
    main()
