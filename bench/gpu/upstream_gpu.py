"""Upstream laya 0.4.15 in-process, on CUDA or the CPU, timed like `sys1rust bench`.

Modes (one per process, so the autocast setting and torch.compile state never leak):
  cpu-f32       Agent(dir, device="cpu"): PyTorch fp32, the parity reference
  cuda-stock    Agent(dir, device="cuda"): upstream's default autocast (the checkpoint's
                amp_dtype: bf16 for the typed-decisions configs, so bf16 on an H200)
  cuda-fp16     the same with LAYA_CUDA_AMP=fp16
  cuda-bf16     the same with LAYA_CUDA_AMP=bf16 (= stock for these configs)
  cuda-compile  Agent(dir, device="cuda", backend="compile"): torch.compile with CUDA graphs
                (reduce-overhead) and its load-time warm-up, stock autocast

Prints one JSON report on stdout (same keys as `sys1rust bench`, plus `answers_file`) and
writes every workload request's result, one JSON line {"id", "result"} each, to --answers.
The time of a request is the wall time of `Agent.system_one` (tokenization, forward and
decoding: what laya-serve's X-Inference-Time-Ms covers, less the routing look-up); its results
are Python floats, so the GPU work is finished when the clock stops.
"""
import argparse
import json
import os
import resource
import sys
import time

T_START = time.perf_counter()


def percentile(sorted_times, q):
    return sorted_times[round((len(sorted_times) - 1) * q)] if sorted_times else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--mode", required=True,
                    choices=["cpu-f32", "cuda-stock", "cuda-fp16", "cuda-bf16", "cuda-compile"])
    ap.add_argument("--shapes", default="", help="comma list of id prefixes to time; empty: answers only")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--answers", help="write each request's result here (JSONL)")
    ap.add_argument("--partial", help="rewrite the report here after every timed size")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    ap.add_argument("--time-budget", type=float, default=0,
                    help="seconds from process start after which no new shape or answer starts (0: no limit)")
    args = ap.parse_args()

    if args.mode == "cuda-fp16":
        os.environ["LAYA_CUDA_AMP"] = "fp16"
    elif args.mode == "cuda-bf16":
        os.environ["LAYA_CUDA_AMP"] = "bf16"
    else:
        os.environ.pop("LAYA_CUDA_AMP", None)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    t_import = time.perf_counter()
    import torch
    if args.threads:
        torch.set_num_threads(args.threads)
    import laya
    from laya.agent import Agent
    import_ms = (time.perf_counter() - t_import) * 1e3

    lines = [json.loads(l) for l in open(args.workload, encoding="utf-8") if l.strip()]
    device = "cpu" if args.mode == "cpu-f32" else "cuda"
    kwargs = {"backend": "compile"} if args.mode == "cuda-compile" else {}
    t0 = time.perf_counter()
    agent = Agent(os.path.abspath(args.model), device=device, **kwargs)
    if device == "cuda":
        torch.cuda.synchronize()
    load_ms = (time.perf_counter() - t0) * 1e3
    backend = getattr(agent, "backend", "eager")
    warmup_s = getattr(getattr(agent, "backend_object", None), "warmup_s", None)
    print("loaded %s in %.0f ms (backend %s, dtype %s, amp %s, warm-up %s s)"
          % (args.mode, load_ms, backend, agent.dtype, agent.amp_enabled, warmup_s), file=sys.stderr, flush=True)

    def call(body):
        return agent.system_one(body["state"], body["questions"])

    def over_budget():
        return args.time_budget and time.perf_counter() - T_START > args.time_budget

    # One pass over every request, each result written as it comes (the first call of each
    # shape is also timed, cold, and reported as first_ms).
    first_ms = {}

    def answers():
        t_all = time.perf_counter()
        n = 0
        with open(args.answers, "w", encoding="utf-8") as out:
            for l in lines:
                if over_budget():
                    print("time budget spent: answers stop after %d requests" % n, file=sys.stderr, flush=True)
                    break
                t = time.perf_counter()
                res = call(l["body"])
                ms = (time.perf_counter() - t) * 1e3
                shape = l["id"].rsplit("_", 1)[0]
                first_ms.setdefault(shape, ms)
                out.write(json.dumps({"id": l["id"], "ms": ms, "result": res}) + "\n")
                out.flush()
                n += 1
        print("answers written (%d requests, %.1f s)" % (n, time.perf_counter() - t_all), file=sys.stderr, flush=True)

    # torch.compile's timing matters more than its answers: time first, answer if time is left.
    answers_first = args.mode != "cuda-compile"
    if args.answers and answers_first:
        answers()

    gpu = torch.cuda.get_device_name(0) if device == "cuda" else None
    shapes = []

    def report():
        return json.dumps({
            "contender": "upstream laya %s %s" % (getattr(laya, "__version__", "0.4.15"), args.mode),
            "mode": args.mode,
            "torch": torch.__version__,
            "precision": str(agent.dtype).replace("torch.", "") if agent.amp_enabled else "float32",
            "backend": backend,
            "device": device,
            "gpu": gpu,
            "import_ms": import_ms,
            "load_ms": load_ms,
            "compile_warmup_s": warmup_s,
            "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
            "peak_gpu_mib": torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else None,
            "answers_file": args.answers,
            "shapes": shapes,
        })

    for shape in [s for s in args.shapes.split(",") if s]:
        if over_budget():
            print("time budget spent: %s and later shapes not timed" % shape, file=sys.stderr, flush=True)
            break
        picked = [l["body"] for l in lines if l["id"].startswith(shape + "_")]
        if not picked:
            raise SystemExit("no request of shape %s" % shape)
        times, tokens = [], 0
        for i in range(args.warmup + args.runs):
            body = picked[i % len(picked)]
            t = time.perf_counter()
            res = call(body)
            ms = (time.perf_counter() - t) * 1e3
            if i >= args.warmup:
                times.append(ms)
                tokens = res["usage"]["input_tokens"]
        times.sort()
        shapes.append({
            "shape": shape, "runs": len(times), "median_ms": percentile(times, 0.5),
            "p99_ms": percentile(times, 0.99), "min_ms": times[0], "input_tokens": tokens,
            "first_ms": first_ms.get(shape),
        })
        print("%s %s median %.2f ms p99 %.2f ms" % (args.mode, shape, shapes[-1]["median_ms"], shapes[-1]["p99_ms"]),
              file=sys.stderr, flush=True)
        if args.partial:
            # rewritten after every size, so a run stopped by its timeout still leaves its numbers
            with open(args.partial, "w") as f:
                f.write(report())

    if args.answers and not answers_first:
        answers()
    print(report())


if __name__ == "__main__":
    main()
