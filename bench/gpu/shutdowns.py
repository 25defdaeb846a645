"""SIGTERM shutdowns of `sys1rust serve`, each of which must exit 0 (stdlib only).

    python3 bench/gpu/shutdowns.py --cmd "sys1rust serve --model DIR --engine cuda --port 0" \
        [--count 50] [--inflight 4] > report.json

Even-numbered runs are idle: one request answered, then SIGTERM. Odd-numbered runs have
requests in flight: --inflight connections each send all of a decision request but its last
byte, the server admits them (sys1_queue_depth in /metrics), SIGTERM arrives, then the last
bytes: every one must still be answered 200. Reported: each run's exit code, seconds from
SIGTERM to exit and answers, and the stderr tail of any run that did not exit 0.
"""
import argparse
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import time

BODY = json.dumps({
    "state": "I was charged twice for my subscription this month",
    "questions": {
        "dept": {"type": "choice", "instructions": "which team?",
                 "criteria": {"billing": "refunds", "tech": "bugs"}},
        "urgent": {"type": "noul", "instructions": "is it urgent?"},
    },
}).encode()


def head(length):
    return (b"POST /v1/systemone HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n"
            b"connection: close\r\ncontent-length: %d\r\n\r\n" % length)


def read_all(sock):
    sock.settimeout(60)
    chunks = []
    while True:
        try:
            b = sock.recv(65536)
        except OSError:
            break
        if not b:
            break
        chunks.append(b)
    return b"".join(chunks)


def status_of(raw):
    try:
        return int(raw.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return None


def get(addr, path):
    s = socket.create_connection(addr, timeout=10)
    s.sendall(b"GET %s HTTP/1.1\r\nhost: bench\r\nconnection: close\r\n\r\n" % path.encode())
    raw = read_all(s)
    s.close()
    return raw


def post(addr):
    s = socket.create_connection(addr, timeout=10)
    s.sendall(head(len(BODY)) + BODY)
    raw = read_all(s)
    s.close()
    return status_of(raw)


def queue_depth(addr):
    for line in get(addr, "/metrics").decode(errors="replace").splitlines():
        if line.startswith("sys1_queue_depth "):
            return float(line.split()[1])
    return -1


def one(cmd, inflight):
    err = tempfile.TemporaryFile()
    proc = subprocess.Popen(shlex.split(cmd), stdout=subprocess.PIPE, stderr=err)
    line = proc.stdout.readline().decode()
    if not line:
        proc.wait(30)
        err.seek(0)
        return {"rc": proc.returncode, "error": "no ready line",
                "stderr": err.read().decode(errors="replace")[-2000:]}
    host, port = json.loads(line)["address"].rsplit(":", 1)
    addr = (host, int(port))
    run = {"answers": []}
    conns = []
    if inflight:
        for _ in range(inflight):
            s = socket.create_connection(addr, timeout=10)
            s.sendall(head(len(BODY)) + BODY[:-1])
            conns.append(s)
        deadline = time.time() + 10
        while queue_depth(addr) < inflight and time.time() < deadline:
            time.sleep(0.01)
    else:
        run["answers"].append(post(addr))
    t = time.time()
    proc.send_signal(signal.SIGTERM)
    for s in conns:
        s.sendall(BODY[-1:])
    for s in conns:
        run["answers"].append(status_of(read_all(s)))
        s.close()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        run["error"] = "no exit within 60 s"
    run["rc"] = proc.returncode
    run["exit_s"] = round(time.time() - t, 3)
    if run["rc"] != 0:
        err.seek(0)
        run["stderr"] = err.read().decode(errors="replace")[-2000:]
    return run


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cmd", required=True)
    ap.add_argument("--count", type=int, default=50)
    ap.add_argument("--inflight", type=int, default=4)
    args = ap.parse_args()
    runs = []
    for i in range(args.count):
        r = one(args.cmd, args.inflight if i % 2 else 0)
        r["run"], r["kind"] = i, "inflight" if i % 2 else "idle"
        runs.append(r)
        print("run %d %s rc %s exit %.2fs answers %s" % (i, r["kind"], r["rc"], r.get("exit_s", -1),
                                                        r.get("answers")), file=sys.stderr)
    codes = {}
    for r in runs:
        codes[str(r["rc"])] = codes.get(str(r["rc"]), 0) + 1
    bad = [r for r in runs if r["rc"] != 0 or any(a != 200 for a in r.get("answers", []))]
    json.dump({"cmd": args.cmd, "count": len(runs), "exit_codes": codes,
               "all_exit_0_and_answered": not bad,
               "max_exit_s": max((r.get("exit_s", 0) for r in runs), default=0),
               "failures": bad, "runs": runs}, sys.stdout, indent=1)
    print()
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
