#!/usr/bin/env python3
"""Summarises a served run's worker events (laya-core's "decided together" and "shared pass",
logged at debug as JSON lines) against wrk's result: how many requests each batch held, how
the worker's time splits between preparing (routing, tokenization, layout), the forward
passes and the rest (decoding, replies), and how busy the worker was.

    profile_served.py SERVE_LOG WRK_JSON > profile.json
"""
import json
import statistics
import sys


def pct(values, q):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main():
    log, wrk_file = sys.argv[1:3]
    wrk = json.loads(open(wrk_file).read() or "{}")
    together, passes = [], []
    for line in open(log, encoding="utf-8", errors="replace"):
        try:
            event = json.loads(line)
        except ValueError:
            continue
        fields = event.get("fields", {})
        if fields.get("message") == "decided together":
            together.append(fields)
        elif fields.get("message") == "shared pass":
            passes.append(fields)
    total_us = sum(f["total_us"] for f in together)
    prepare_us = sum(f["prepare_us"] for f in together)
    forward_us = sum(f["forward_us"] for f in passes)
    batched = sum(f["requests"] for f in together)
    seconds = wrk.get("seconds") or 0
    out = {
        "wrk": wrk,
        "batches": len(together),
        "requests_in_batches": batched,
        # Requests the worker found alone in the queue (decide, no event).
        "requests_alone": max(0, (wrk.get("requests") or 0) - batched),
        "requests_per_batch": {
            "median": statistics.median([f["requests"] for f in together]) if together else None,
            "p90": pct([f["requests"] for f in together], 0.9),
            "max": max((f["requests"] for f in together), default=None),
        },
        "passes": len(passes),
        "tokens_per_pass_median": statistics.median([f["tokens"] for f in passes]) if passes else None,
        "batch_ms_median": statistics.median([f["total_us"] / 1e3 for f in together]) if together else None,
        "forward_ms_median": statistics.median([f["forward_us"] / 1e3 for f in passes]) if passes else None,
        "share_of_batch_time": {
            "prepare": round(prepare_us / total_us, 3) if total_us else None,
            "forward": round(forward_us / total_us, 3) if total_us else None,
            "rest": round(1 - (prepare_us + forward_us) / total_us, 3) if total_us else None,
        },
        # The worker's busy fraction over the load: near 1 means the worker bounds throughput.
        "worker_busy": round(total_us / 1e6 / seconds, 3) if seconds else None,
    }
    print(json.dumps(out))


if __name__ == "__main__":
    main()
