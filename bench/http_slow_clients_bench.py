#!/usr/bin/env python3
"""The web server under slow, idle and stalled-TLS clients (issue 13 §2): an authenticated
client's latency while they hold their connections.

Starts `perftracker server` on free loopback ports, opens the attack connections (each from
its own 127.0.x.y address unless --one-address), and has an authenticated client ask for
/api/v1/jobs on a new connection every 100 ms for --seconds. Prints the good client's
latency quantiles and how many of its requests got no answer within --answer-timeout.

  /usr/bin/python3 bench/http_slow_clients_bench.py --perftracker build/src/perftracker/cli/perftracker \
      --slow 200 --idle 200 --seconds 20
  ... --tls --handshakes 100 --seconds 20
"""
import argparse
import http.client
import os
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def connect_from(addr, port):
    s = socket.socket()
    s.bind((addr, 0))
    s.connect(("127.0.0.1", port))
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--perftracker", required=True)
    ap.add_argument("--slow", type=int, default=200, help="clients sending one byte per --byte-every")
    ap.add_argument("--byte-every", type=float, default=2.0)
    ap.add_argument("--idle", type=int, default=200, help="clients that connect and send nothing")
    ap.add_argument("--handshakes", type=int, default=0, help="stalled TLS handshakes (needs --tls)")
    ap.add_argument("--tls", action="store_true")
    ap.add_argument("--one-address", action="store_true", help="every attacker from 127.0.9.1 (the good client is 127.0.0.1)")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--answer-timeout", type=float, default=30)
    a = ap.parse_args()

    work = tempfile.mkdtemp(prefix="http_slow_clients.")
    http_port = free_port()
    cmd = [a.perftracker, "server", "--listen", f"127.0.0.1:{free_port()}",
           "--http-listen", f"127.0.0.1:{http_port}", "--report-dir", work]
    ctx = None
    if a.tls:
        cert, key = os.path.join(work, "cert.pem"), os.path.join(work, "key.pem")
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                        "-subj", "/CN=localhost", "-keyout", key, "-out", cert],
                       check=True, capture_output=True)
        cmd += ["--tls-cert", cert, "--tls-key", key]
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    server = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    try:
        for line in server.stderr:
            if "listening:" in line:
                break
        threading.Thread(target=lambda: [None for _ in server.stderr], daemon=True).start()
        token = open(os.path.join(work, "server.token")).read().split()[0]

        def addr(group, i):
            return "127.0.9.1" if a.one_address else f"127.0.{group}.{i % 250 + 1}"

        held, slow = [], []
        for i in range(a.slow):
            try:
                slow.append(connect_from(addr(1, i), http_port))
            except OSError:
                pass
        for i in range(a.idle):
            try:
                held.append(connect_from(addr(2, i), http_port))
            except OSError:
                pass
        for i in range(a.handshakes):
            try:
                s = connect_from(addr(3, i), http_port)
                s.send(b"\x16\x03\x01\x02")  # the first bytes of a ClientHello, then nothing
                held.append(s)
            except OSError:
                pass
        stop = threading.Event()

        def drip():
            head = b"GET /api/v1/jobs HTTP/1.1\r\nHost: x\r\nX-Slow: "
            k = 0
            while not stop.is_set():
                for s in slow:
                    try:
                        s.send(head[k:k + 1] if k < len(head) else b"a")
                    except OSError:
                        pass
                k += 1
                stop.wait(a.byte_every)

        threading.Thread(target=drip, daemon=True).start()
        time.sleep(1)  # let the attack take hold
        lat, failed = [], 0
        end = time.monotonic() + a.seconds
        while time.monotonic() < end:
            t0 = time.monotonic()
            try:
                if ctx:
                    c = http.client.HTTPSConnection("127.0.0.1", http_port, timeout=a.answer_timeout,
                                                    context=ctx)
                else:
                    c = http.client.HTTPConnection("127.0.0.1", http_port, timeout=a.answer_timeout)
                c.request("GET", "/api/v1/jobs", headers={"Authorization": f"Bearer {token}"})
                r = c.getresponse()
                r.read()
                c.close()
                if r.status == 200:
                    lat.append((time.monotonic() - t0) * 1000)
                else:
                    failed += 1
            except OSError:
                failed += 1
            time.sleep(0.1)
        stop.set()
        lat.sort()
        q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))] if lat else float("nan")
        print(f"attack: {len(slow)} slow, {a.idle} idle, {a.handshakes} stalled TLS handshakes"
              f"{' from one address' if a.one_address else ''}; good client: {len(lat)} answered, "
              f"{failed} not answered within {a.answer_timeout:.0f} s; latency p50 {q(0.5):.1f} ms, "
              f"p99 {q(0.99):.1f} ms, max {q(1.0):.1f} ms")
        for s in held + slow:
            s.close()
    finally:
        server.terminate()
        server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
