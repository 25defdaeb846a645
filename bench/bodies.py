"""The request bodies of one shape of a workload, one JSON body a line, for wrk (bench/gpu/wrk.lua).

    python3 bench/bodies.py <workload.jsonl> <shape, e.g. s32_q1> <out>
"""
import json
import sys

src, prefix, out = sys.argv[1:]
with open(out, "w", encoding="utf-8") as f:
    for line in open(src, encoding="utf-8"):
        case = json.loads(line)
        if case["id"].startswith(prefix + "_") and "body" in case:
            f.write(json.dumps(case["body"], ensure_ascii=False) + "\n")
