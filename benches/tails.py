#!/usr/bin/env python3
"""Tail latency of the pass-through call, two proxies side by side, many samples.

Why: the load tool's p99 ratios come from 3,000 calls (1,000 streamed
answers) a mode, and a stall of the shared two-core machine during one
mode's turn moves them by more than the target's margin. This asks the
narrower question with ten times the samples: does shimgate's pass-through
call have a heavier tail than the bare forwarder's when both run at the
same time, in turns, against the same upstream?

One process each: a tiny keep-alive upstream (asyncio, a fixed 58-byte JSON
answer), then `rounds` turns of `calls` back-to-back calls on one
connection to each target (0.3 ms apart), target A then target B. Both
targets pay the same client and upstream (Python: about 150 µs a call);
only the difference between them means anything.

    python3 benches/tails.py upstream PORT
    python3 benches/tails.py compare A_PORT B_PORT [--rounds 6] [--calls 5000]

Put shimgate (a qoder listener, `codec = "plain"`, one route to the
upstream) on A_PORT and `load --forwarder http://127.0.0.1:PORT` (the load
tool's own bare forwarder, `target/release/deps/load-… --forwarder URL`) on
B_PORT. `benches/README.md`, "2026-12-03 issue 24", has a run.
"""

import argparse
import asyncio
import json
import socket
import time

ANSWER = b'{"detail":{"model":"glm-5.3","window":1000000,"ok":true}}'
RESPONSE = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
    len(ANSWER),
    ANSWER,
)
PATH = "/api/ide/v1/get_detail_param"


async def answer(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if length:
                await reader.readexactly(length)
            writer.write(RESPONSE)
    except (asyncio.IncompleteReadError, ConnectionError):
        pass


async def upstream(port):
    server = await asyncio.start_server(answer, "127.0.0.1", port)
    print(f"upstream on 127.0.0.1:{port}", flush=True)
    await server.serve_forever()


def calls(port, n):
    """`n` calls on one connection; the time of each, ns."""
    body = json.dumps({"ask": "detail", "pad": "x" * 160}).encode()
    request = (
        b"POST %s HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (PATH.encode(), len(body), body)
    )
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    took = []
    for _ in range(n):
        t0 = time.perf_counter_ns()
        sock.sendall(request)
        got = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                raise SystemExit(f"port {port} closed the connection mid-answer")
            got += chunk
            end = got.find(b"\r\n\r\n")
            if end < 0:
                continue
            head = got[:end].lower()
            status = head.split(b"\r\n")[0]
            if b" 200 " not in status + b" ":
                raise SystemExit(f"port {port} answered {status!r}")
            length = int(head.split(b"content-length:")[1].split(b"\r\n")[0])
            if len(got) >= end + 4 + length:
                break
        took.append(time.perf_counter_ns() - t0)
        time.sleep(0.0003)
    sock.close()
    return took


def quantile(sorted_ns, q):
    return sorted_ns[int(q * (len(sorted_ns) - 1))] / 1000


def figures(ns):
    s = sorted(ns)
    return " / ".join(f"{quantile(s, q):.0f}" for q in (0.5, 0.9, 0.99, 0.999))


def compare(a, b, rounds, n):
    calls(a, 200)
    calls(b, 200)
    every = {a: [], b: []}
    print("µs, p50 / p90 / p99 / p99.9")
    for r in range(1, rounds + 1):
        for port in (a, b):
            took = calls(port, n)
            every[port] += took
            print(f"round {r} port {port}: {figures(took)}", flush=True)
    for port in (a, b):
        print(f"all {len(every[port])} calls, port {port}: {figures(every[port])}")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    u = sub.add_parser("upstream")
    u.add_argument("port", type=int)
    c = sub.add_parser("compare")
    c.add_argument("a", type=int)
    c.add_argument("b", type=int)
    c.add_argument("--rounds", type=int, default=6)
    c.add_argument("--calls", type=int, default=5000)
    args = p.parse_args()
    if args.what == "upstream":
        asyncio.run(upstream(args.port))
    else:
        compare(args.a, args.b, args.rounds, args.calls)


if __name__ == "__main__":
    main()
