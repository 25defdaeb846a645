"""Render results/GPU.md from the result folder bench/gpu/run.sh fills on the device.

    python3 bench/gpu/report.py RES_DIR --commit SHA --command "..." > results/GPU.md

RES_DIR holds what run.sh packs into res.tar.gz: <engine>-inproc.json, <engine>-http.json,
upstream-<mode>.json (or .partial.json), cold-first.json, cold-restart.json, parity.json,
replay-f16.log, machine.txt. Missing pieces are reported as not run.
"""
import argparse
import json
import os
import re

SHAPES = ["s%d_q%d" % (s, q) for s in (64, 128, 256, 512) for q in (1, 4, 10)]


def load(res, name):
    for n in (name, name.replace(".json", ".partial.json")):
        p = os.path.join(res, n)
        if os.path.exists(p) and os.path.getsize(p):
            try:
                with open(p) as f:
                    return json.load(f)
            except ValueError:
                pass
    return None


def by_shape(report):
    return {s["shape"]: s for s in (report or {}).get("shapes", [])}


def cell(s, key="median_ms", p99="p99_ms"):
    if not s or s.get(key) is None:
        return "–"
    return "%.2f / %.2f" % (s[key], s[p99])


def ratio(a, b):
    return "%.2fx" % (b["median_ms"] / a["median_ms"]) if a and b else "–"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("res")
    ap.add_argument("--engine", action="append",
                    help="an engine's result name (repeatable; the first is the headline)")
    ap.add_argument("--commit", default="?")
    ap.add_argument("--command", default="bench/gpu/run.sh ...")
    args = ap.parse_args()
    res = args.res
    engines = args.engine or ["sys1rust"]
    eng = engines[0]

    inproc = {e: load(res, "%s-inproc.json" % e) for e in engines}
    http = {e: load(res, "%s-http.json" % e) for e in engines}
    modes = [("cuda-stock", "upstream stock (autocast)"), ("cuda-fp16", "upstream fp16"),
             ("cuda-compile", "upstream compile")]
    ups = {m: load(res, "upstream-%s.json" % m) for m, _ in modes}
    up_http = {m: load(res, "upstream-%s-http.json" % m) for m, _ in modes}
    cpu = load(res, "upstream-cpu-f32.json")
    out = []
    w = out.append
    w("# GPU: %s vs upstream laya 0.4.15 on an NVIDIA H200\n" % ", ".join(engines))
    w("Commit `%s`. Device-side harness: `%s`.\n" % (args.commit, args.command))
    mt = os.path.join(res, "machine.txt")
    if os.path.exists(mt):
        w("Machine (as read on the device):\n\n```\n%s```\n" % "".join(
            l for l in open(mt) if not l.startswith(("total", "-", "d", "l", "\t")) or "libmlx" in l))
    w("Workload: `shared/seed-workloads/smoke.jsonl` (12 sizes x 2 requests) on the `large` random "
      "checkpoint (typed-decisions configs, ModernBERT-large, seed 4242). Times are milliseconds per "
      "request, median / p99 over the runs after warm-up; in-process = routing-free engine call "
      "(`sys1rust bench`: tokenization, forward and decoding; upstream `Agent.system_one`); HTTP = "
      "the server's X-Inference-Time-Ms.\n")

    # --- inference time, in-process
    w("## Inference time per size, in-process (ms, median / p99)\n")
    hdr = ["size", "tokens"] + ["%s" % e for e in engines] + [label for _, label in modes]
    hdr += ["%s vs stock" % eng, "vs fp16", "vs compile"]
    w("| " + " | ".join(hdr) + " |")
    w("|" + "---|" * len(hdr))
    ips = {e: by_shape(inproc[e]) for e in engines}
    us = {m: by_shape(r) for m, r in ups.items()}
    for sh in SHAPES:
        ip = ips[eng]
        tokens = (ip.get(sh) or {}).get("input_tokens") or (us["cuda-stock"].get(sh) or {}).get("input_tokens") or "–"
        row = [sh, str(tokens)] + [cell(ips[e].get(sh)) for e in engines]
        row += [cell(us[m].get(sh)) for m, _ in modes]
        row += [ratio(ip.get(sh), us[m].get(sh)) for m, _ in modes]
        w("| " + " | ".join(row) + " |")
    w("")
    loads = []
    for e in engines:
        if inproc[e]:
            loads.append("%s load %.0f ms" % (e, inproc[e].get("load_ms", 0)))
    for m, label in modes + [("cpu-f32", "upstream cpu-f32")]:
        r = ups.get(m) if m != "cpu-f32" else cpu
        if r:
            extra = ", compile warm-up %.0f s" % r["compile_warmup_s"] if r.get("compile_warmup_s") else ""
            loads.append("%s: import %.0f ms + load %.0f ms%s (precision %s)" % (
                label, r.get("import_ms", 0), r.get("load_ms", 0), extra, r.get("precision")))
        else:
            loads.append("%s: not run / no report" % label)
    w("Load: " + "; ".join(loads) + ".\n")

    # --- inference time over HTTP
    w("## Inference time per size over HTTP (X-Inference-Time-Ms, ms, median / p99)\n")
    http_names = [(e, http[e]) for e in engines] + [("%s HTTP" % label, up_http[m]) for m, label in modes if up_http[m]]
    hdr = ["size"] + [n for n, _ in http_names] + ["%s wall" % eng]
    w("| " + " | ".join(hdr) + " |")
    w("|" + "---|" * len(hdr))
    for sh in SHAPES:
        row = [sh] + [cell(by_shape(r).get(sh)) for _, r in http_names]
        row.append(cell(by_shape(http[eng]).get(sh), "wall_median_ms", "wall_p99_ms"))
        w("| " + " | ".join(row) + " |")
    w("")

    # --- throughput
    w("## Served throughput, 16 concurrent clients (req/s; wall p50 / p99 ms)\n")
    if any(r and r.get("throughput") for _, r in http_names):
        names = [n for n, r in http_names if r and r.get("throughput")]
        w("| workload:size | " + " | ".join(names) + " |")
        w("|---|" + "---|" * len(names))
        keys = []
        for _, r in http_names:
            for t in (r or {}).get("throughput", []):
                k = "%s:%s" % (t["workload"], t["shape"])
                if k not in keys:
                    keys.append(k)
        for k in keys:
            row = [k]
            for n, r in http_names:
                if not (r and r.get("throughput")):
                    continue
                t = next((t for t in r["throughput"] if "%s:%s" % (t["workload"], t["shape"]) == k), None)
                row.append("%.1f (%.0f / %.0f)" % (t["rps"], t["wall_p50_ms"] or 0, t["wall_p99_ms"] or 0) if t else "–")
            w("| " + " | ".join(row) + " |")
        w("")
    else:
        w("Not run.\n")

    # --- parity
    w("## Parity vs upstream CPU f32 (smoke workload, `large`)\n")
    par = load(res, "parity.json")
    if par:
        w("| contender | numbers | max abs err | p99 abs err | > 1e-2 | choice flips (outside ties) | pass (f16 rule) |")
        w("|---|---|---|---|---|---|---|")
        for k, v in par["contenders"].items():
            if "missing_file" in v:
                w("| %s | – | – | – | – | – | no answers |" % k)
                continue
            w("| %s | %d | %s | %s | %d | %d (%d) | %s |" % (
                k, v["numbers"], "%.5f" % v["max_abs_err"] if v["max_abs_err"] is not None else "–",
                "%.5f" % v["p99_abs_err"] if v["p99_abs_err"] is not None else "–", v["over_1e-2"],
                v["choice_flips"], v["flips_outside_ties"], v["pass"]))
        w("")
    else:
        w("Not run.\n")
    rl = os.path.join(res, "replay-f16.log")
    if os.path.exists(rl):
        txt = open(rl, errors="replace").read()
        lines = [l for l in txt.splitlines() if "requests replayed" in l or l.startswith("test result") or "panicked" in l]
        w("Fixture replay, f16 on the GPU (`replay_f16_within_tolerance`):\n\n```\n%s\n```\n" % "\n".join(lines[:8]))

    # --- cold start
    w("## First start and restart (`%s serve`, `large`, f16, GPU)\n" % eng)
    first, again = load(res, "cold-first.json"), load(res, "cold-restart.json")
    if first:
        w("| | spawn to ready ms | load_ms | warmup_ms | first request (s64_q1) ms |")
        w("|---|---|---|---|---|")
        for label, r in (("first start (empty kernel cache)", first), ("restart (kernel cache kept)", again)):
            if not r:
                w("| %s | not run | | | |" % label)
                continue
            rd = r.get("ready", {})
            w("| %s | %.0f | %s | %s | %.1f |" % (label, r["ready_ms"], rd.get("load_ms"), rd.get("warmup_ms"),
                                               r.get("first_request_ms") or -1))
        w("")
        w("First request of each size right after ready, in order (client wall ms; first start / restart):\n")
        w("| size | " + " | ".join(SHAPES) + " |")
        w("|---|" + "---|" * len(SHAPES))
        for label, r in (("first start", first), ("restart", again)):
            if r:
                f = {x["shape"]: x for x in r.get("first", [])}
                w("| %s | " % label + " | ".join("%.0f" % f[s]["wall_ms"] if s in f else "–" for s in SHAPES) + " |")
        w("")
    else:
        w("Not run.\n")
    print("\n".join(out))


if __name__ == "__main__":
    main()
