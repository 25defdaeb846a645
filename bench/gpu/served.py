"""Start an engine's HTTP server, time it to ready, and measure it over HTTP (stdlib only).

    python3 bench/gpu/served.py --cmd "sys1rust serve --model DIR --port 0" --workload smoke.jsonl \
        [--first s64_q1,...] [--answers FILE] [--shapes s64_q1,...  --runs 50 --warmup 5] \
        [--throughput short.jsonl:s32_q1,smoke.jsonl:s64_q1 --clients 16 --seconds 5] > report.json

The command must print a JSON ready line with "address" (host:port) on stdout, as
`sys1rust serve --port 0` does. Reported, all in milliseconds:
  ready_ms          spawn to ready line (wall), plus the ready line itself (load_ms, warmup_ms)
  first             the first request of each --first shape, in order, right after ready:
                    X-Inference-Time-Ms and client wall time (a cold shape pays its compilation)
  shapes            per shape, --runs sequential requests on one keep-alive connection after
                    --warmup: median/p99 of X-Inference-Time-Ms and of client wall time
  throughput        per workload:prefix, --clients threads each on its own keep-alive connection
                    for --seconds: completed requests/s, non-200 count, wall p50/p99
"""
import argparse
import http.client
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time


def pct(xs, q):
    xs = sorted(xs)
    return xs[round((len(xs) - 1) * q)] if xs else None


def load(path):
    return [json.loads(l) for l in open(path, encoding="utf-8") if l.strip()]


def pick(lines, shape):
    out = [l for l in lines if l["id"].startswith(shape + "_")]
    if not out:
        raise SystemExit("no request of shape %s" % shape)
    return out


class Client:
    def __init__(self, host, port):
        self.host, self.port = host, port
        self.conn = None

    def post(self, body_bytes):
        for attempt in range(2):
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=300)
            try:
                t = time.perf_counter()
                self.conn.request("POST", "/v1/systemone", body=body_bytes,
                                  headers={"content-type": "application/json"})
                resp = self.conn.getresponse()
                data = resp.read()
                wall = (time.perf_counter() - t) * 1e3
                inf = resp.getheader("x-inference-time-ms")
                if resp.getheader("connection", "").lower() == "close":
                    self.conn.close()
                    self.conn = None
                return resp.status, data, wall, float(inf) if inf else None
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # an idle keep-alive connection the server closed: reconnect once
                self.conn.close()
                self.conn = None
                if attempt:
                    raise


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cmd", required=True)
    ap.add_argument("--name", default="sys1rust")
    ap.add_argument("--workload", required=True)
    ap.add_argument("--first", default="")
    ap.add_argument("--answers")
    ap.add_argument("--shapes", default="")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--throughput", default="", help="comma list of workload_file:id_prefix")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--log", help="server stderr goes here")
    args = ap.parse_args()

    lines = load(args.workload)
    log = open(args.log, "w") if args.log else subprocess.DEVNULL
    t0 = time.perf_counter()
    proc = subprocess.Popen(shlex.split(args.cmd), stdout=subprocess.PIPE, stderr=log, text=True,
                            start_new_session=False)
    ready_line = proc.stdout.readline()
    ready_ms = (time.perf_counter() - t0) * 1e3
    if not ready_line:
        proc.wait()
        raise SystemExit("the server exited (rc %s) before its ready line" % proc.returncode)
    ready = json.loads(ready_line)
    host, port = ready["address"].rsplit(":", 1)
    port = int(port)
    print("%s ready in %.0f ms: %s" % (args.name, ready_ms, ready_line.strip()), file=sys.stderr, flush=True)
    report = {"contender": args.name, "cmd": args.cmd, "ready_ms": ready_ms, "ready": ready}
    try:
        c = Client(host, port)
        first = []
        for shape in [s for s in args.first.split(",") if s]:
            l = pick(lines, shape)[0]
            status, _, wall, inf = c.post(json.dumps(l["body"]).encode())
            first.append({"shape": shape, "status": status, "inference_ms": inf, "wall_ms": wall})
        if first:
            report["first"] = first
            report["first_request_ms"] = first[0]["wall_ms"]
            report["ready_to_first_answer_ms"] = ready_ms + first[0]["wall_ms"]

        if args.answers:
            with open(args.answers, "w", encoding="utf-8") as out:
                for l in lines:
                    status, data, wall, inf = c.post(json.dumps(l["body"]).encode())
                    out.write(json.dumps({"id": l["id"], "status": status, "ms": inf, "wall_ms": wall,
                                          "result": json.loads(data)}) + "\n")

        shapes = []
        for shape in [s for s in args.shapes.split(",") if s]:
            picked = pick(lines, shape)
            infs, walls, bad = [], [], 0
            for i in range(args.warmup + args.runs):
                status, _, wall, inf = c.post(json.dumps(picked[i % len(picked)]["body"]).encode())
                if i >= args.warmup:
                    bad += status != 200
                    walls.append(wall)
                    if inf is not None:
                        infs.append(inf)
            shapes.append({"shape": shape, "runs": len(walls), "non_200": bad,
                           "median_ms": pct(infs, 0.5), "p99_ms": pct(infs, 0.99),
                           "wall_median_ms": pct(walls, 0.5), "wall_p99_ms": pct(walls, 0.99)})
            print("%s http %s inference median %.2f ms, wall median %.2f ms"
                  % (args.name, shape, shapes[-1]["median_ms"] or -1, shapes[-1]["wall_median_ms"]),
                  file=sys.stderr, flush=True)
        if shapes:
            report["shapes"] = shapes

        tput = []
        for spec in [s for s in args.throughput.split(",") if s]:
            path, shape = spec.rsplit(":", 1)
            bodies = [json.dumps(l["body"]).encode() for l in pick(load(path), shape)]
            stop = threading.Event()
            results = [[] for _ in range(args.clients)]
            errors = [0] * args.clients

            def worker(k):
                cl = Client(host, port)
                i = k
                while not stop.is_set():
                    try:
                        status, _, wall, _ = cl.post(bodies[i % len(bodies)])
                    except Exception:
                        errors[k] += 1
                        cl = Client(host, port)
                        continue
                    if status == 200:
                        results[k].append((time.perf_counter(), wall))
                    else:
                        errors[k] += 1
                    i += 1

            threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(args.clients)]
            # one second of load before the window opens, so every client is connected and busy
            for t in threads:
                t.start()
            time.sleep(1.0)
            w0 = time.perf_counter()
            time.sleep(args.seconds)
            w1 = time.perf_counter()
            stop.set()
            for t in threads:
                t.join(timeout=60)
            done = [w for r in results for (at, w) in r if w0 <= at <= w1]
            tput.append({"workload": os.path.basename(path), "shape": shape, "clients": args.clients,
                         "seconds": w1 - w0, "completed": len(done), "rps": len(done) / (w1 - w0),
                         "errors": sum(errors), "wall_p50_ms": pct(done, 0.5), "wall_p99_ms": pct(done, 0.99)})
            print("%s throughput %s:%s %d clients: %.1f req/s (p50 %.1f ms, p99 %.1f ms, %d errors)"
                  % (args.name, os.path.basename(path), shape, args.clients, tput[-1]["rps"],
                     tput[-1]["wall_p50_ms"] or -1, tput[-1]["wall_p99_ms"] or -1, tput[-1]["errors"]),
                  file=sys.stderr, flush=True)
        if tput:
            report["throughput"] = tput
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    print(json.dumps(report))


if __name__ == "__main__":
    main()
