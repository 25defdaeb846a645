"""Upstream laya 0.4.15 on the CPU (PyTorch fp32), timed the same way as `sys1rust bench`.

Run with the oracle venv (shared/oracle/setup_venv.sh). Prints one JSON report on stdout:
load time, peak RSS and per-shape median/p99 wall time of `Agent.system_one` per request.
"""
import argparse
import json
import os
import resource
import statistics
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--shapes", required=True)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()

    import torch
    torch.set_num_threads(args.threads)
    from laya.agent import Agent

    lines = [json.loads(l) for l in open(args.workload, encoding="utf-8") if l.strip()]
    t0 = time.perf_counter()
    agent = Agent(os.path.abspath(args.model), device="cpu")
    load_ms = (time.perf_counter() - t0) * 1e3
    shapes = []
    for shape in args.shapes.split(","):
        picked = [l["body"] for l in lines if l["id"].startswith(shape + "_")]
        if not picked:
            raise SystemExit("no request of shape %s" % shape)
        times, tokens = [], 0
        for i in range(args.warmup + args.runs):
            body = picked[i % len(picked)]
            t = time.perf_counter()
            res = agent.system_one(body["state"], body["questions"])
            ms = (time.perf_counter() - t) * 1e3
            if i >= args.warmup:
                times.append(ms)
                tokens = res["usage"]["input_tokens"]
        times.sort()
        shapes.append({
            "shape": shape, "runs": len(times), "median_ms": statistics.median(times),
            "p99_ms": times[round((len(times) - 1) * 0.99)], "min_ms": times[0], "input_tokens": tokens,
        })
    print(json.dumps({
        "contender": "upstream laya 0.4.15 (torch %s, fp32, %d threads)" % (torch.__version__, args.threads),
        "precision": "f32", "device": "cpu", "load_ms": load_ms,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
        "shapes": shapes,
    }))


if __name__ == "__main__":
    main()
