"""The router on the GPU (stdlib only): GPU memory with three `large` checkpoints resident, and
the extra latency of a request routed to an evicted checkpoint.

    python3 bench/gpu/router_gpu.py --bin sys1rust --model LARGE_DIR [--rounds 6] > report.json

The same weights stand behind the three names (links in a scratch directory, through
LAYA_EXTRA_MODELS): memory and load time depend on the shape, not on the values.
"""
import argparse
import http.client
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time

NAMES = ["english", "multilingual", "typed-decisions"]


def gpu_used_mib():
    out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout
    return int(out.split()[0]) if out.strip() else None


def start(cmd, env, cwd):
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=cwd)
    t = time.time()
    line = proc.stdout.readline().decode()
    if not line:
        raise SystemExit("no ready line from %s" % cmd)
    ready = json.loads(line)
    host, port = ready["address"].rsplit(":", 1)
    return proc, (host, int(port)), time.time() - t, ready


def decide(addr, model):
    body = json.dumps({"model": model, "state": "The invoice was charged twice this month.",
                       "questions": {"dept": {"type": "choice", "instructions": "which team?",
                                              "criteria": ["billing", "tech", "sales"]}}})
    c = http.client.HTTPConnection(*addr, timeout=120)
    t = time.perf_counter()
    c.request("POST", "/v1/systemone", body=body, headers={"content-type": "application/json"})
    r = c.getresponse()
    data = r.read()
    wall = (time.perf_counter() - t) * 1e3
    c.close()
    if r.status != 200:
        raise SystemExit("status %d: %s" % (r.status, data[:200]))
    routed = json.loads(data)["routing"]["model"]
    return {"model": model, "routed": routed, "wall_ms": round(wall, 2),
            "inference_ms": float(r.getheader("x-inference-time-ms"))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--extra", default="--engine cuda", help="more serve arguments")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="router-gpu-")
    extra = {}
    for n in NAMES:
        os.symlink(os.path.abspath(args.model), os.path.join(work, "large-" + n))
        extra[n] = "large-" + n
    base = dict(os.environ, LAYA_EXTRA_MODELS=json.dumps(extra), HF_HUB_OFFLINE="1",
                HF_HOME=os.path.join(work, "hf"))
    cmd = [args.bin, "serve", "--port", "0"] + shlex.split(args.extra)
    report = {"cmd": " ".join(cmd)}

    before = gpu_used_mib()
    proc, addr, ready_s, ready = start(cmd, dict(base, LAYA_MODELS=",".join(NAMES), LAYA_MAX_LOADED="3"), work)
    for n in NAMES:
        decide(addr, n)
    time.sleep(1)
    after = gpu_used_mib()
    report["three_resident"] = {"ready_s": round(ready_s, 2), "gpu_used_mib_before": before,
                                "gpu_used_mib": after, "gpu_mib_for_three": after - before if before is not None else None,
                                "ready": ready}
    proc.terminate()
    proc.wait(60)

    time.sleep(2)
    before = gpu_used_mib()
    proc, addr, ready_s, ready = start(cmd, dict(base, LAYA_PRELOAD="0", LAYA_MAX_LOADED="1"), work)
    runs = []
    for i in range(args.rounds):
        # Alternating names: every request loads its checkpoint again; then the same name
        # twice, answered by the resident one.
        for model in (NAMES[i % 2], NAMES[i % 2]):
            runs.append(decide(addr, model))
    one = gpu_used_mib()
    proc.terminate()
    proc.wait(60)
    loads = [r["inference_ms"] for k, r in enumerate(runs) if k % 2 == 0]
    resident = [r["inference_ms"] for k, r in enumerate(runs) if k % 2 == 1]
    med = lambda xs: sorted(xs)[len(xs) // 2]
    report["evicted_load"] = {"runs": runs, "reload_median_ms": med(loads), "resident_median_ms": med(resident),
                              "extra_ms": round(med(loads) - med(resident), 1),
                              "gpu_used_mib_one_resident": one, "gpu_used_mib_before": before}
    json.dump(report, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
